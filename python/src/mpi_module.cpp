// devmem.mpi's compiled part (devmem._mpi): devmem::mpi (mpi/include/devmem/mpi.hpp) over mpi4py
// communicators, for the device arrays of the devmem module. A separate extension module, built
// only with DEVMEM_WITH_MPI, so that `import devmem` never needs MPI or mpi4py; devmem/mpi.py
// imports it. docs/scaling-out.md#python-mpi describes the API.
//
// The arrays are the devmem module's DeviceNDArray objects: this module imports devmem._devmem
// first and uses its pybind11 registration of DeviceNDArray (pybind11 shares registered types and
// exception translators between modules built with the same pybind11 and compiler: the same CMake
// tree). devmem's C++ errors become devmem's Python exceptions through devmem._devmem's
// translator; MpiError becomes devmem.mpi.MpiError (a devmem.Error) here.
//
// Every call that may wait for another rank releases the GIL.

#include "conversions.hpp"

#include <devmem/mpi.hpp>

#include <fmt/format.h>
#include <mpi4py/mpi4py.h>
#include <pybind11/stl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace devmem::python {

namespace {

PyObject* mpi_error_type = nullptr;  // devmem.mpi.MpiError, kept for the life of the process

std::string repr_of(py::handle obj) {
  return py::repr(obj).cast<std::string>();
}

/// An mpi4py communicator's MPI_Comm; None is MPI_COMM_WORLD.
MPI_Comm to_comm(py::handle comm) {
  if (comm.is_none()) return MPI_COMM_WORLD;
  if (PyObject_TypeCheck(comm.ptr(), &PyMPIComm_Type) == 0) {
    throw py::type_error(fmt::format(
        "comm must be an mpi4py.MPI.Comm (None: mpi4py.MPI.COMM_WORLD), got {}", repr_of(comm)));
  }
  const MPI_Comm* const pointer = PyMPIComm_Get(comm.ptr());
  if (pointer == nullptr) throw py::error_already_set();
  if (*pointer == MPI_COMM_NULL) throw py::value_error("comm is mpi4py.MPI.COMM_NULL");
  return *pointer;
}

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  return size;
}

/// A device array argument: a devmem.DeviceNDArray (TypeError naming `what` otherwise).
const DeviceNDArray& to_array(py::handle obj, const char* what) {
  if (!py::isinstance<DeviceNDArray>(obj)) {
    throw py::type_error(
        fmt::format("{} must be a devmem.DeviceNDArray, got {}", what, repr_of(obj)));
  }
  return obj.cast<const DeviceNDArray&>();
}

/// A point-to-point buffer: a device array, or a NumPy array MPI reads or writes in place (the
/// HostArray overloads; the Request keeps it alive).
using Buffer = std::variant<DeviceArray, HostArray>;

Buffer to_buffer(const py::object& obj, const char* what, bool writable) {
  if (py::isinstance<DeviceNDArray>(obj)) return obj.cast<const DeviceNDArray&>().array;
  if (!py::isinstance<py::array>(obj)) {
    throw py::type_error(fmt::format("{} must be a devmem.DeviceNDArray or a NumPy ndarray, got {}",
                                     what, repr_of(obj)));
  }
  const auto array = py::reinterpret_borrow<py::array>(obj);
  const py::dtype dtype = array.dtype();
  const char kind = dtype.kind();
  const bool native = dtype.attr("isnative").cast<bool>();
  if (std::string_view("biufc").find(kind) == std::string_view::npos || !native) {
    throw py::type_error(fmt::format(
        "{}: devmem.mpi sends NumPy arrays of native-byte-order bool, integer, float and complex "
        "dtypes, got dtype {} (copy it with .astype() or send a device array)",
        what, repr_of(dtype)));
  }
  if (writable && !array.writeable()) {
    throw py::value_error(fmt::format("{}: the NumPy array is read-only", what));
  }
  Shape shape(array.shape(), array.shape() + array.ndim());
  Strides strides(array.strides(), array.strides() + array.ndim());
  const DType element(kind == 'b' ? 'b' : kind, static_cast<std::int64_t>(dtype.itemsize()));
  return HostArray::view(const_cast<void*>(array.data()),  // NOLINT: MPI writes only for recv
                         std::move(shape), element, std::move(strides));
}

/// A root-only argument: None on the ranks that do not use it gives an empty array.
DeviceArray optional_array(py::handle obj, const char* what) {
  if (obj.is_none()) return DeviceArray{};
  return to_array(obj, what).array;
}

/// A new C-contiguous array of `shape` with `like`'s dtype (NumPy's and devmem's) and stream.
py::object new_array(const DeviceNDArray& like, Shape shape) {
  DeviceArray array = without_gil([&] {
    return device_array(std::move(shape), like.array.dtype(), {}, Order::C, like.array.stream());
  });
  return py::cast(DeviceNDArray{std::move(array), like.dtype});
}

/// `output`, or a new array of `shape` like `input` when it is None.
py::object output_or_new(const py::object& output, const DeviceNDArray& input, Shape shape) {
  if (!output.is_none()) {
    (void)to_array(output, "output");
    return output;
  }
  return new_array(input, std::move(shape));
}

Shape prepend(std::int64_t first, const Shape& rest) {
  Shape shape{first};
  shape.insert(shape.end(), rest.begin(), rest.end());
  return shape;
}

mpi::ReduceOp to_op(py::handle op) {
  if (py::isinstance<mpi::ReduceOp>(op)) return op.cast<mpi::ReduceOp>();
  if (py::isinstance<py::str>(op)) {
    const auto name = op.cast<std::string>();
    for (int i = 0; i <= static_cast<int>(mpi::ReduceOp::MaxLoc); ++i) {
      const auto candidate = static_cast<mpi::ReduceOp>(i);
      if (name == mpi::to_string(candidate)) return candidate;
    }
    throw py::value_error(
        fmt::format("unknown reduction '{}' (known: sum, min, max, prod, logical_and, logical_or, "
                    "logical_xor, bitwise_and, bitwise_or, bitwise_xor, minloc, maxloc)",
                    name));
  }
  throw py::type_error(
      fmt::format("op must be a devmem.mpi.ReduceOp or its name, got {}", repr_of(op)));
}

std::vector<std::int64_t> to_counts(py::handle counts, const char* what) {
  std::vector<std::int64_t> values;
  for (const py::handle count : py::iter(counts)) {
    const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(count.ptr()));
    if (!index) throw py::type_error(fmt::format("{} must be a sequence of integers", what));
    values.push_back(index.cast<std::int64_t>());
  }
  return values;
}

std::int64_t sum(const std::vector<std::int64_t>& values) {
  std::int64_t total = 0;
  for (const std::int64_t value : values) total += value;
  return total;
}

/// Runs a blocking collective without the GIL and returns `result`.
template <class Fn>
py::object collective(py::object result, Fn&& fn) {
  without_gil(std::forward<Fn>(fn));
  return result;
}

std::string format_status(const mpi::Status& status) {
  return fmt::format("devmem.mpi.Status(source={}, tag={}, elements={}, bytes={})", status.source,
                     status.tag, status.elements, status.bytes);
}

/// What probe() returns: the message's sender and tag, and the NumPy dtype and shape of the
/// sender's array.
struct MessageInfo {
  int source;
  int tag;
  py::dtype dtype;
  py::tuple shape;
};

py::tuple shape_tuple(const Shape& shape) {
  py::tuple tuple(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) tuple[i] = py::int_(shape[i]);
  return tuple;
}

MessageInfo to_python(const mpi::MessageInfo& info) {
  const DType& dtype = info.dtype;
  return MessageInfo{info.source, info.tag,
                     dtype.is_record() ? py::dtype(fmt::format("V{}", dtype.itemsize()))
                                       : py::dtype(dtype.typestr()),
                     shape_tuple(info.shape)};
}

/// A non-blocking operation, with the Python arrays it uses (devmem's Request already keeps their
/// memory; the Python objects are kept too, for what the DeviceNDArray holds beside it).
struct Request {
  mpi::Request request;
  py::object arrays;

  Request(mpi::Request r, py::object a) : request(std::move(r)), arrays(std::move(a)) {}
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  Request(Request&&) = delete;
  Request& operator=(Request&&) = delete;
  /// Waits for an unfinished operation (as devmem's Request does) without the GIL.
  ~Request() {
    if (!request.active()) return;
    without_gil([&] { const mpi::Request dying = std::move(request); });  // exit-safe
  }

  mpi::Status wait() {
    const mpi::Status status = without_gil([&] { return request.wait(); });
    arrays = py::none();
    return status;
  }
  bool test() {
    const bool done = request.test();
    if (done) arrays = py::none();
    return done;
  }
};

struct PersistentRequest {
  mpi::PersistentRequest request;
  py::object array;

  PersistentRequest(mpi::PersistentRequest r, py::object a)
      : request(std::move(r)), array(std::move(a)) {}
  PersistentRequest(const PersistentRequest&) = delete;
  PersistentRequest& operator=(const PersistentRequest&) = delete;
  PersistentRequest(PersistentRequest&&) = delete;
  PersistentRequest& operator=(PersistentRequest&&) = delete;
  ~PersistentRequest() {
    if (!request.active()) return;
    without_gil([&] { const mpi::PersistentRequest dying = std::move(request); });  // exit-safe
  }
};

/// devmem's Requests of a sequence of Python Requests, moved into one vector for the span-taking
/// calls (wait_all, wait_any, ...) and moved back, even when the call throws.
class RequestSpan {
 public:
  explicit RequestSpan(const py::object& requests) : objects_(py::list(requests)) {
    for (const py::handle obj : objects_) {
      if (!py::isinstance<Request>(obj)) {
        throw py::type_error(
            fmt::format("requests must be devmem.mpi.Request objects, got {}", repr_of(obj)));
      }
      owners_.push_back(&obj.cast<Request&>());
    }
    requests_.reserve(owners_.size());
    for (Request* owner : owners_) requests_.push_back(std::move(owner->request));
  }
  RequestSpan(const RequestSpan&) = delete;
  RequestSpan& operator=(const RequestSpan&) = delete;
  RequestSpan(RequestSpan&&) = delete;
  RequestSpan& operator=(RequestSpan&&) = delete;
  ~RequestSpan() {
    // A Request listed twice was moved out once: its second slot is an empty Request and goes
    // back first, so the real one lands last.
    for (std::size_t i = requests_.size(); i-- > 0;) {
      owners_[i]->request = std::move(requests_[i]);
      if (!owners_[i]->request.active()) owners_[i]->arrays = py::none();
    }
  }
  [[nodiscard]] std::span<mpi::Request> span() { return requests_; }

 private:
  py::list objects_;  // keeps the Python Requests alive
  std::vector<Request*> owners_;
  std::vector<mpi::Request> requests_;
};

py::object make_request(mpi::Request request, py::object arrays) {
  return py::cast(std::make_unique<Request>(std::move(request), std::move(arrays)));
}

void bind_types(py::module_& m) {
  py::enum_<mpi::ReduceOp>(m, "ReduceOp",
                           "The reductions (MPI_SUM, ...); functions also take their names.")
      .value("sum", mpi::ReduceOp::Sum)
      .value("min", mpi::ReduceOp::Min)
      .value("max", mpi::ReduceOp::Max)
      .value("prod", mpi::ReduceOp::Prod)
      .value("logical_and", mpi::ReduceOp::LogicalAnd)
      .value("logical_or", mpi::ReduceOp::LogicalOr)
      .value("logical_xor", mpi::ReduceOp::LogicalXor)
      .value("bitwise_and", mpi::ReduceOp::BitwiseAnd)
      .value("bitwise_or", mpi::ReduceOp::BitwiseOr)
      .value("bitwise_xor", mpi::ReduceOp::BitwiseXor)
      .value("minloc", mpi::ReduceOp::MinLoc)
      .value("maxloc", mpi::ReduceOp::MaxLoc);
  py::enum_<mpi::Transport>(m, "Transport", "How device memory reaches MPI.")
      .value("automatic", mpi::Transport::Automatic)
      .value("device_direct", mpi::Transport::DeviceDirect)
      .value("staged", mpi::Transport::Staged);

  py::class_<mpi::Status>(m, "Status",
                          "What a completed operation did: the peer's rank, the tag, the elements "
                          "and bytes moved.")
      .def_readonly("source", &mpi::Status::source)
      .def_readonly("tag", &mpi::Status::tag)
      .def_readonly("elements", &mpi::Status::elements)
      .def_readonly("bytes", &mpi::Status::bytes)
      .def("__repr__", &format_status);

  py::class_<MessageInfo>(m, "MessageInfo",
                          "A message waiting to be received (probe): its sender, tag, and the "
                          "dtype and shape of the sender's array.")
      .def_readonly("source", &MessageInfo::source)
      .def_readonly("tag", &MessageInfo::tag)
      .def_readonly("dtype", &MessageInfo::dtype)
      .def_readonly("shape", &MessageInfo::shape)
      .def("__repr__", [](const MessageInfo& info) {
        return fmt::format("devmem.mpi.MessageInfo(source={}, tag={}, dtype={}, shape={})",
                           info.source, info.tag, repr_of(info.dtype), repr_of(info.shape));
      });

  py::class_<Request>(m, "Request",
                      "A non-blocking operation (isend, irecv, ibcast, ...); it keeps its arrays "
                      "until it completes. Dropping an unfinished one waits for it.")
      .def("wait", &Request::wait,
           "Blocks (without the GIL) until the operation completes; returns its Status, raises "
           "its error.")
      .def("test", &Request::test,
           "Advances every outstanding operation; True when this one has completed.")
      .def_property_readonly("done", [](const Request& r) { return r.request.done(); })
      .def_property_readonly("active", [](const Request& r) { return r.request.active(); })
      .def_property_readonly(
          "status", [](const Request& r) -> mpi::Status { return r.request.status(); },
          "The Status of the completed operation.");

  py::class_<PersistentRequest>(m, "PersistentRequest",
                                "A persistent send or receive (send_init, recv_init): start() "
                                "and wait() once per round.")
      .def("start", [](PersistentRequest& r) { r.request.start(); })
      .def("wait",
           [](PersistentRequest& r) { return without_gil([&] { return r.request.wait(); }); })
      .def("test", [](PersistentRequest& r) { return r.request.test(); })
      .def_property_readonly("active",
                             [](const PersistentRequest& r) { return r.request.active(); });
}

void bind_settings(py::module_& m) {
  m.def(
      "initialize", [] { without_gil([] { mpi::initialize(); }); },
      "Collective over COMM_WORLD, once: devmem's protocol traffic moves to a private "
      "communicator, so every tag and ANY_TAG belong to the application.");
  m.def("initialized", &mpi::initialized, "True after initialize().");
  m.def(
      "max_tag", [](const py::object& comm) { return mpi::max_tag(to_comm(comm)); },
      py::arg("comm") = py::none(),
      "The largest tag point-to-point calls accept (TAG_UB after initialize(), TAG_UB // 2 "
      "before).");
  m.def("transport", &mpi::transport, "The transport setting.");
  m.def(
      "set_transport",
      [](const py::object& transport) {
        mpi::set_transport(py::isinstance<py::str>(transport)
                               ? mpi::parse_transport(transport.cast<std::string>())
                               : transport.cast<mpi::Transport>());
      },
      py::arg("transport"), "Sets the transport (a Transport or its name) for later operations.");
  m.def(
      "transport_for", [](const DeviceNDArray& a) { return mpi::transport_for(a.array); },
      py::arg("array"), "The transport an operation on `array` takes now.");
  m.def(
      "device_aware", [](const std::string& backend) { return mpi::device_aware(backend); },
      py::arg("backend"), "True when MPI takes device pointers of `backend` (cuda, roc).");
  m.def("staging_chunk_bytes", &mpi::staging_chunk_bytes);
  m.def("set_staging_chunk_bytes", &mpi::set_staging_chunk_bytes, py::arg("bytes"));
  m.attr("EAGER_LIMIT_BYTES") = mpi::eager_limit_bytes;
  m.attr("ANY_SOURCE") = MPI_ANY_SOURCE;
  m.attr("ANY_TAG") = MPI_ANY_TAG;
  m.attr("PROC_NULL") = MPI_PROC_NULL;
}

void bind_point_to_point(py::module_& m) {
  m.def(
      "send",
      [](const py::object& array, int dest, int tag, const py::object& comm) {
        const Buffer a = to_buffer(array, "array", false);
        const MPI_Comm c = to_comm(comm);
        without_gil([&] { std::visit([&](const auto& b) { mpi::send(b, dest, tag, c); }, a); });
      },
      py::arg("array"), py::arg("dest"), py::arg("tag") = 0, py::arg("comm") = py::none(),
      "Sends `array` (a device array, strided views included, or a NumPy array) to rank `dest`.");
  m.def(
      "recv",
      [](const py::object& array, int source, int tag, const py::object& comm) {
        const Buffer a = to_buffer(array, "array", true);
        const MPI_Comm c = to_comm(comm);
        return without_gil([&] {
          return std::visit([&](const auto& b) { return mpi::recv(b, source, tag, c); }, a);
        });
      },
      py::arg("array"), py::arg("source") = MPI_ANY_SOURCE, py::arg("tag") = MPI_ANY_TAG,
      py::arg("comm") = py::none(),
      "Receives into `array` (a device array or a writable NumPy array, of the sender's dtype "
      "and shape); returns a Status. ANY_TAG needs initialize().");
  m.def(
      "isend",
      [](const py::object& array, int dest, int tag, const py::object& comm) {
        const Buffer a = to_buffer(array, "array", false);
        const MPI_Comm c = to_comm(comm);
        return make_request(
            std::visit([&](const auto& b) { return mpi::isend(b, dest, tag, c); }, a), array);
      },
      py::arg("array"), py::arg("dest"), py::arg("tag") = 0, py::arg("comm") = py::none(),
      "Non-blocking send (a device or NumPy array): a Request that keeps `array`.");
  m.def(
      "irecv",
      [](const py::object& array, int source, int tag, const py::object& comm) {
        const Buffer a = to_buffer(array, "array", true);
        const MPI_Comm c = to_comm(comm);
        return make_request(
            std::visit([&](const auto& b) { return mpi::irecv(b, source, tag, c); }, a), array);
      },
      py::arg("array"), py::arg("source") = MPI_ANY_SOURCE, py::arg("tag") = MPI_ANY_TAG,
      py::arg("comm") = py::none(),
      "Non-blocking receive (a device or writable NumPy array): a Request that keeps `array`.");
  m.def(
      "sendrecv",
      [](const DeviceNDArray& send_array, int dest, const DeviceNDArray& recv_array, int source,
         int send_tag, int recv_tag, const py::object& comm) {
        const MPI_Comm c = to_comm(comm);
        return without_gil([&] {
          return mpi::sendrecv(send_array.array, dest, send_tag, recv_array.array, source, recv_tag,
                               c);
        });
      },
      py::arg("send_array"), py::arg("dest"), py::arg("recv_array"),
      py::arg("source") = MPI_ANY_SOURCE, py::arg("send_tag") = 0,
      py::arg("recv_tag") = MPI_ANY_TAG, py::arg("comm") = py::none(),
      "Sends `send_array` to `dest` and receives `recv_array` from `source` at once; returns the "
      "receive's Status.");
  m.def(
      "probe",
      [](int source, int tag, const py::object& comm) {
        const MPI_Comm c = to_comm(comm);
        const mpi::MessageInfo info = without_gil([&] { return mpi::probe(source, tag, c); });
        return to_python(info);
      },
      py::arg("source") = MPI_ANY_SOURCE, py::arg("tag") = MPI_ANY_TAG,
      py::arg("comm") = py::none(),
      "Waits for a message and describes it (MessageInfo) without receiving it.");
  m.def(
      "iprobe",
      [](int source, int tag, const py::object& comm) -> std::optional<MessageInfo> {
        const std::optional<mpi::MessageInfo> info = mpi::iprobe(source, tag, to_comm(comm));
        if (!info) return std::nullopt;
        return to_python(*info);
      },
      py::arg("source") = MPI_ANY_SOURCE, py::arg("tag") = MPI_ANY_TAG,
      py::arg("comm") = py::none(), "As probe without blocking: None when nothing matches.");
  m.def(
      "send_init",
      [](const py::object& array, int dest, int tag, const py::object& comm) {
        const DeviceNDArray& a = to_array(array, "array");
        return std::make_unique<PersistentRequest>(
            mpi::send_init(a.array, dest, tag, to_comm(comm)), array);
      },
      py::arg("array"), py::arg("dest"), py::arg("tag") = 0, py::arg("comm") = py::none(),
      "A persistent send (PersistentRequest).");
  m.def(
      "recv_init",
      [](const py::object& array, int source, int tag, const py::object& comm) {
        const DeviceNDArray& a = to_array(array, "array");
        return std::make_unique<PersistentRequest>(
            mpi::recv_init(a.array, source, tag, to_comm(comm)), array);
      },
      py::arg("array"), py::arg("source"), py::arg("tag") = 0, py::arg("comm") = py::none(),
      "A persistent receive (PersistentRequest; a fixed source and tag).");
  m.def(
      "start_all",
      [](const py::iterable& requests) {
        for (const py::handle obj : requests) obj.cast<PersistentRequest&>().request.start();
      },
      py::arg("requests"), "Starts every persistent request.");

  m.def(
      "wait_all",
      [](const py::object& requests) {
        RequestSpan span(requests);
        without_gil([&] { mpi::wait_all(span.span()); });
      },
      py::arg("requests"), "Waits for every request; raises the first error after all are done.");
  m.def(
      "wait_any",
      [](const py::object& requests) -> std::optional<std::size_t> {
        RequestSpan span(requests);
        return without_gil([&] { return mpi::wait_any(span.span()); });
      },
      py::arg("requests"),
      "Waits until one pending request completes: its index (None when none was pending).");
  m.def(
      "test_any",
      [](const py::object& requests) -> std::optional<std::size_t> {
        RequestSpan span(requests);
        return mpi::test_any(span.span());
      },
      py::arg("requests"), "The index of a pending request that has completed, or None.");
  m.def(
      "wait_some",
      [](const py::object& requests) {
        RequestSpan span(requests);
        return without_gil([&] { return mpi::wait_some(span.span()); });
      },
      py::arg("requests"), "Waits until at least one pending request completes: their indices.");
  m.def(
      "test_some",
      [](const py::object& requests) {
        RequestSpan span(requests);
        return mpi::test_some(span.span());
      },
      py::arg("requests"), "The indices of the pending requests that have completed.");
}

// The collectives that reduce `input` element-wise into an output of `output_shape(input)`: the
// same Python signature (input, output=None, op="sum", comm=None), returning the output.
using ElementwiseReduction = void (*)(const DeviceArray&, const DeviceArray&, mpi::ReduceOp,
                                      MPI_Comm);

void def_elementwise(py::module_& m, const char* name, ElementwiseReduction reduction,
                     Shape (*output_shape)(const DeviceArray&), const char* doc) {
  m.def(
      name,
      [reduction, output_shape](const DeviceNDArray& input, const py::object& output,
                                const py::object& op, const py::object& comm) {
        const mpi::ReduceOp o = to_op(op);
        const MPI_Comm c = to_comm(comm);
        py::object out = output_or_new(output, input, output_shape(input.array));
        const DeviceArray& target = out.cast<const DeviceNDArray&>().array;
        return collective(out, [&] { reduction(input.array, target, o, c); });
      },
      py::arg("input"), py::arg("output") = py::none(), py::arg("op") = "sum",
      py::arg("comm") = py::none(), doc);
}

Shape same_shape(const DeviceArray& input) {
  return input.shape();
}

// reduce_scatter's input is (ranks, *block): each rank gets one block.
Shape block_shape(const DeviceArray& input) {
  Shape block = input.shape();
  if (!block.empty()) block.erase(block.begin());
  return block;
}

void bind_collectives(py::module_& m) {
  m.def(
      "barrier",
      [](const py::object& comm) {
        const MPI_Comm c = to_comm(comm);
        without_gil([&] { mpi::barrier(c); });
      },
      py::arg("comm") = py::none());
  m.def(
      "bcast",
      [](const py::object& array, int root, const py::object& comm) {
        const DeviceNDArray& a = to_array(array, "array");
        const MPI_Comm c = to_comm(comm);
        return collective(array, [&] { mpi::bcast(a.array, root, c); });
      },
      py::arg("array"), py::arg("root") = 0, py::arg("comm") = py::none(),
      "Root's `array` into every rank's `array`; returns `array`.");
  def_elementwise(
      m, "allreduce", static_cast<ElementwiseReduction>(&mpi::allreduce), same_shape,
      "Element-wise reduction over the ranks into `output` (a new array when None; `input` "
      "itself works); returns it.");
  m.def(
      "allgather",
      [](const DeviceNDArray& input, const py::object& output, const py::object& comm) {
        const MPI_Comm c = to_comm(comm);
        py::object out = output_or_new(output, input, prepend(size_of(c), input.array.shape()));
        const DeviceArray& target = out.cast<const DeviceNDArray&>().array;
        return collective(out, [&] { mpi::allgather(input.array, target, c); });
      },
      py::arg("input"), py::arg("output") = py::none(), py::arg("comm") = py::none(),
      "Every rank's `input` into `output` of shape (ranks, *input.shape); returns it.");
  m.def(
      "reduce",
      [](const DeviceNDArray& input, const py::object& output, const py::object& op, int root,
         const py::object& comm) {
        const mpi::ReduceOp o = to_op(op);
        const MPI_Comm c = to_comm(comm);
        py::object out =
            rank_of(c) == root ? output_or_new(output, input, input.array.shape()) : output;
        const DeviceArray target = optional_array(out, "output");
        return collective(out, [&] { mpi::reduce(input.array, target, o, root, c); });
      },
      py::arg("input"), py::arg("output") = py::none(), py::arg("op") = "sum", py::arg("root") = 0,
      py::arg("comm") = py::none(),
      "Element-wise reduction into root's `output` (a new array when None); returns it on root "
      "(`output` elsewhere).");
  m.def(
      "gather",
      [](const DeviceNDArray& input, const py::object& output, int root, const py::object& comm) {
        const MPI_Comm c = to_comm(comm);
        py::object out =
            rank_of(c) == root
                ? output_or_new(output, input, prepend(size_of(c), input.array.shape()))
                : output;
        const DeviceArray target = optional_array(out, "output");
        return collective(out, [&] { mpi::gather(input.array, target, root, c); });
      },
      py::arg("input"), py::arg("output") = py::none(), py::arg("root") = 0,
      py::arg("comm") = py::none(),
      "Every rank's `input` into root's `output` of shape (ranks, *input.shape).");
  m.def(
      "gatherv",
      [](const DeviceNDArray& input, const py::object& counts, const py::object& output, int root,
         const py::object& comm) {
        const std::vector<std::int64_t> n = to_counts(counts, "counts");
        const MPI_Comm c = to_comm(comm);
        Shape trailing = input.array.shape();
        if (!trailing.empty()) trailing.erase(trailing.begin());
        py::object out =
            rank_of(c) == root ? output_or_new(output, input, prepend(sum(n), trailing)) : output;
        const DeviceArray target = optional_array(out, "output");
        return collective(out, [&] { mpi::gatherv(input.array, target, n, root, c); });
      },
      py::arg("input"), py::arg("counts"), py::arg("output") = py::none(), py::arg("root") = 0,
      py::arg("comm") = py::none(), "gather of counts[r] rows from rank r, concatenated on root.");
  m.def(
      "scatter",
      [](const py::object& input, const py::object& output, int root, const py::object& comm) {
        const DeviceArray source = optional_array(input, "input");
        const DeviceNDArray& out = to_array(output, "output");
        const MPI_Comm c = to_comm(comm);
        return collective(output, [&] { mpi::scatter(source, out.array, root, c); });
      },
      py::arg("input"), py::arg("output"), py::arg("root") = 0, py::arg("comm") = py::none(),
      "Root's `input[r]` into rank r's `output` (`input` may be None off root); returns `output`.");
  m.def(
      "scatterv",
      [](const py::object& input, const py::object& output, const py::object& counts, int root,
         const py::object& comm) {
        const DeviceArray source = optional_array(input, "input");
        const DeviceNDArray& out = to_array(output, "output");
        const std::vector<std::int64_t> n = to_counts(counts, "counts");
        const MPI_Comm c = to_comm(comm);
        return collective(output, [&] { mpi::scatterv(source, out.array, n, root, c); });
      },
      py::arg("input"), py::arg("output"), py::arg("counts"), py::arg("root") = 0,
      py::arg("comm") = py::none(), "scatter of counts[r] rows to rank r.");
  m.def(
      "alltoall",
      [](const DeviceNDArray& input, const py::object& output, const py::object& comm) {
        const MPI_Comm c = to_comm(comm);
        py::object out = output_or_new(output, input, input.array.shape());
        const DeviceArray& target = out.cast<const DeviceNDArray&>().array;
        return collective(out, [&] { mpi::alltoall(input.array, target, c); });
      },
      py::arg("input"), py::arg("output") = py::none(), py::arg("comm") = py::none(),
      "Rank r's output[s] is rank s's input[r] (both of shape (ranks, *block)).");
  m.def(
      "alltoallv",
      [](const DeviceNDArray& input, const py::object& send_counts, const py::object& recv_counts,
         const py::object& output, const py::object& comm) {
        const std::vector<std::int64_t> sent = to_counts(send_counts, "send_counts");
        const std::vector<std::int64_t> received = to_counts(recv_counts, "recv_counts");
        const MPI_Comm c = to_comm(comm);
        Shape trailing = input.array.shape();
        if (!trailing.empty()) trailing.erase(trailing.begin());
        py::object out = output_or_new(output, input, prepend(sum(received), trailing));
        const DeviceArray& target = out.cast<const DeviceNDArray&>().array;
        return collective(out, [&] { mpi::alltoallv(input.array, sent, target, received, c); });
      },
      py::arg("input"), py::arg("send_counts"), py::arg("recv_counts"),
      py::arg("output") = py::none(), py::arg("comm") = py::none(),
      "alltoall of rows: send_counts[s] rows to rank s, recv_counts[s] rows from it.");
  m.def(
      "reduce_scatter",
      [](const DeviceNDArray& input, const py::object& output, const py::object& op,
         const py::object& comm, const py::object& counts) {
        const mpi::ReduceOp o = to_op(op);
        const MPI_Comm c = to_comm(comm);
        if (counts.is_none()) {
          py::object out = output_or_new(output, input, block_shape(input.array));
          const DeviceArray& target = out.cast<const DeviceNDArray&>().array;
          return collective(out, [&] { mpi::reduce_scatter(input.array, target, o, c); });
        }
        const std::vector<std::int64_t> rows = to_counts(counts, "counts");
        int rank = 0;
        MPI_Comm_rank(c, &rank);
        // This rank's share when the counts are well formed; the C++ call names what is wrong.
        const auto r = static_cast<std::size_t>(rank);
        const std::int64_t mine = r < rows.size() ? std::max<std::int64_t>(rows[r], 0) : 0;
        py::object out = output_or_new(output, input, prepend(mine, block_shape(input.array)));
        const DeviceArray& target = out.cast<const DeviceNDArray&>().array;
        return collective(out, [&] { mpi::reduce_scatter(input.array, rows, target, o, c); });
      },
      py::arg("input"), py::arg("output") = py::none(), py::arg("op") = "sum",
      py::arg("comm") = py::none(), py::arg("counts") = py::none(),
      "Reduction of every rank's (ranks, *block) `input`; block r of the result to rank r. With "
      "`counts` (one per rank, the same on every rank): `input` is (sum(counts), *rest) and rank r "
      "gets rows counts[0] + ... + counts[r-1] onwards, counts[r] of them (MPI_Reduce_scatter).");
  def_elementwise(m, "scan", &mpi::scan, same_shape, "Inclusive prefix reduction over ranks 0..r.");
  def_elementwise(m, "exscan", &mpi::exscan, same_shape,
                  "Exclusive prefix reduction over ranks 0..r-1 (rank 0's `output` is left as it "
                  "was).");
  m.def(
      "allreduce_loc",
      [](const DeviceNDArray& values, const DeviceNDArray& indices, const py::object& op,
         const py::object& comm) {
        const mpi::ReduceOp o = to_op(op);
        const MPI_Comm c = to_comm(comm);
        without_gil([&] { mpi::allreduce_loc(values.array, indices.array, o, c); });
      },
      py::arg("values"), py::arg("indices"), py::arg("op"), py::arg("comm") = py::none(),
      "minloc / maxloc in place: `values` become the extremes, `indices` (int32) their indices.");

  m.def(
      "ibarrier",
      [](const py::object& comm) { return make_request(mpi::ibarrier(to_comm(comm)), py::none()); },
      py::arg("comm") = py::none());
  m.def(
      "ibcast",
      [](const py::object& array, int root, const py::object& comm) {
        const DeviceNDArray& a = to_array(array, "array");
        return make_request(mpi::ibcast(a.array, root, to_comm(comm)), array);
      },
      py::arg("array"), py::arg("root") = 0, py::arg("comm") = py::none());
  m.def(
      "iallreduce",
      [](const py::object& input, const py::object& output, const py::object& op,
         const py::object& comm) {
        const DeviceNDArray& in = to_array(input, "input");
        const DeviceNDArray& out = to_array(output, "output");
        return make_request(mpi::iallreduce(in.array, out.array, to_op(op), to_comm(comm)),
                            py::make_tuple(input, output));
      },
      py::arg("input"), py::arg("output"), py::arg("op") = "sum", py::arg("comm") = py::none());
  m.def(
      "iallgather",
      [](const py::object& input, const py::object& output, const py::object& comm) {
        const DeviceNDArray& in = to_array(input, "input");
        const DeviceNDArray& out = to_array(output, "output");
        return make_request(mpi::iallgather(in.array, out.array, to_comm(comm)),
                            py::make_tuple(input, output));
      },
      py::arg("input"), py::arg("output"), py::arg("comm") = py::none());
}

void bind_mpi_error(py::module_& m) {
  const py::object base = py::module_::import("devmem._devmem").attr("Error");
  mpi_error_type = PyErr_NewExceptionWithDoc("devmem.mpi.MpiError",
                                             "An MPI call failed; `code` is MPI's error code.",
                                             py::make_tuple(base).ptr(), nullptr);
  if (mpi_error_type == nullptr) throw py::error_already_set();
  m.add_object("MpiError", py::handle(mpi_error_type));
  // The other devmem errors reach devmem._devmem's (global) translator.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  py::register_local_exception_translator([](std::exception_ptr pointer) {
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (const mpi::MpiError& error) {
      const auto instance = py::reinterpret_steal<py::object>(
          PyObject_CallFunction(mpi_error_type, "s", error.what()));
      if (!instance) throw py::error_already_set();
      instance.attr("code") = error.code();
      PyErr_SetObject(mpi_error_type, instance.ptr());
    }
  });
}

}  // namespace

}  // namespace devmem::python

PYBIND11_MODULE(_mpi, m) {
  namespace py = pybind11;
  m.doc() =
      "devmem.mpi: devmem's device arrays over MPI, with mpi4py communicators (compiled part).";
  // devmem's DeviceNDArray and exceptions are registered by devmem._devmem; mpi4py.MPI initialises
  // MPI on import (MPI_Init_thread).
  py::module_::import("devmem._devmem");
  if (import_mpi4py() < 0) throw py::error_already_set();
  devmem::python::bind_mpi_error(m);
  devmem::python::bind_types(m);
  devmem::python::bind_settings(m);
  devmem::python::bind_point_to_point(m);
  devmem::python::bind_collectives(m);
}

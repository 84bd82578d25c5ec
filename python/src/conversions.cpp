#include "conversions.hpp"

#include <fmt/format.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace devmem::python {

py::handle numpy() {
  // Imported once and kept for the life of the process (a handle, so never released at exit).
  static const py::handle module = py::module_::import("numpy").release();
  return module;
}

namespace {

py::handle numpy_asarray() {
  static const py::handle asarray = py::object(numpy().attr("asarray")).release();
  return asarray;
}

std::string repr_of(py::handle obj) {
  return py::repr(obj).cast<std::string>();
}

bool is_integer(py::handle obj) {
  // Python ints and NumPy integer scalars, never bools posing as 0 and 1 or floats.
  if (PyBool_Check(obj.ptr())) return false;
  if (PyLong_Check(obj.ptr())) return true;
  static const py::handle numpy_integer = py::object(numpy().attr("integer")).release();
  return PyObject_IsInstance(obj.ptr(), numpy_integer.ptr()) == 1;
}

// References whose last devmem holder died on a thread without the GIL.
std::mutex queued_mutex;
std::atomic<bool> has_queued{false};
std::vector<PyObject*>& queued_objects() {
  static auto* objects = new std::vector<PyObject*>();  // never destroyed: outlives the interpreter
  return *objects;
}

}  // namespace

#define DEVMEM_PYTHON_STRINGIFY_(x) #x
#define DEVMEM_PYTHON_STRINGIFY(x) DEVMEM_PYTHON_STRINGIFY_(x)

std::string pybind11_version() {
  return fmt::format("{}.{}.{}", PYBIND11_VERSION_MAJOR, PYBIND11_VERSION_MINOR,
                     DEVMEM_PYTHON_STRINGIFY(PYBIND11_VERSION_PATCH));
}

std::string numpy_support_error(std::string_view numpy_version) {
  if constexpr (kPybind11KnowsNumpy2) {
    return {};
  } else {
    int major = 0;
    for (const char c : numpy_version) {
      if (c < '0' || c > '9') break;
      major = major * 10 + (c - '0');
    }
    if (major < 2) return {};
    return fmt::format(
        "devmem's Python module was compiled with pybind11 {}, which reads NumPy's dtype "
        "descriptors with NumPy 1's layout only, but this interpreter has NumPy {}, whose layout "
        "differs (pybind11 >= 2.12 reads both). Rebuild the module with pybind11 >= 2.12 "
        "(scripts/python-venv.sh and the python-numpy2 preset, docs/python.md) or run it with "
        "NumPy < 2.",
        pybind11_version(), numpy_version);
  }
}

namespace {

constexpr std::uint64_t kItemRefcount = 0x01;  // NPY_ITEM_REFCOUNT: the items hold references

template <class Proxy>
DescriptorFields legacy_fields(const Proxy* descr) {
  DescriptorFields out;
  out.kind = descr->kind;
  out.holds_objects =
      (static_cast<std::uint64_t>(static_cast<unsigned char>(descr->flags)) & kItemRefcount) != 0;
  out.has_subarray = descr->subarray != nullptr;
  out.has_fields = descr->names != nullptr;
  out.itemsize = static_cast<std::int64_t>(descr->elsize);
  out.alignment = static_cast<std::int64_t>(descr->alignment);
  return out;
}

}  // namespace

DescriptorFields descriptor_fields(const py::dtype& dtype) {
  // NumPy's descriptor fields directly: this runs on every call that takes an array, and
  // attribute lookups by name would cost more than the rest of the conversion. NumPy 2 moved
  // every field after type_num (docs/python.md#numpy2), so the layout is the running NumPy's.
#if PYBIND11_VERSION_HEX >= 0x020C0000
  // NPY_2_0_API_VERSION: NumPy 2's C-API feature version.
  static const bool numpy2 = py::detail::npy_api::get().PyArray_RUNTIME_VERSION_ >= 0x12;
  if (numpy2) {
    const auto* const descr = py::detail::array_descriptor2_proxy(dtype.ptr());
    DescriptorFields out;
    out.kind = descr->kind;
    // NumPy's PyDataType_ISLEGACY: only these have the fields from `subarray` on.
    out.legacy = descr->type_num >= 0 && descr->type_num < 2056;
    out.holds_objects = (descr->flags & kItemRefcount) != 0;
    out.itemsize = static_cast<std::int64_t>(descr->elsize);
    out.alignment = static_cast<std::int64_t>(descr->alignment);
    if (out.legacy) {
      out.has_subarray = descr->subarray != nullptr;
      out.has_fields = descr->names != nullptr;
    }
    return out;
  }
  return legacy_fields(py::detail::array_descriptor1_proxy(dtype.ptr()));
#else
  // This pybind11 knows NumPy 1's layout only; the module refuses to import under NumPy 2
  // (numpy_support_error, checked by module.cpp), so the layout here is NumPy 1's.
  return legacy_fields(py::detail::array_descriptor_proxy(dtype.ptr()));
#endif
}

DType to_devmem_dtype(const py::dtype& dtype) {
  const DescriptorFields descr = descriptor_fields(dtype);
  if (descr.kind == 'O') {
    throw py::type_error("devmem arrays cannot hold Python objects (dtype object)");
  }
  if (!descr.legacy) {
    throw py::type_error(
        fmt::format("dtype {} is not supported: its elements are not plain bytes that devmem can "
                    "copy (a NumPy 2 dtype of the new DType API)",
                    repr_of(dtype)));
  }
  if (descr.holds_objects) {
    throw py::type_error(fmt::format(
        "devmem arrays cannot hold Python objects (dtype {} has object fields)", repr_of(dtype)));
  }
  if (descr.has_subarray) {
    throw py::type_error(fmt::format(
        "sub-array dtype {} is not supported: give its shape as extra axes of the array instead",
        repr_of(dtype)));
  }
  switch (descr.kind) {
    case 'b':
    case 'i':
    case 'u':
    case 'f':
    case 'c':
      return DType(descr.kind, descr.itemsize, descr.alignment);
    default:
      return DType::record(descr.itemsize, descr.alignment);
  }
}

py::dtype to_numpy_dtype(const DType& dtype) {
  if (dtype.is_record()) return py::dtype(fmt::format("V{}", dtype.itemsize()));
  return py::dtype(dtype.typestr());
}

py::dtype as_numpy_dtype(py::handle obj) {
  if (py::isinstance<py::dtype>(obj)) return py::reinterpret_borrow<py::dtype>(obj);
  try {
    return py::dtype::from_args(py::reinterpret_borrow<py::object>(obj));
  } catch (py::error_already_set&) {
    throw py::type_error(fmt::format("data type {} not understood", repr_of(obj)));
  }
}

std::int64_t to_int64(py::handle obj, const char* what) {
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(obj.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    throw py::value_error(fmt::format("{} {} does not fit a 64-bit signed integer (from {} to {})",
                                      what, py::str(index).cast<std::string>(),
                                      std::numeric_limits<std::int64_t>::min(),
                                      std::numeric_limits<std::int64_t>::max()));
  }
  if (value == -1 && PyErr_Occurred() != nullptr) throw py::error_already_set();
  return value;
}

Shape to_shape(py::handle obj, const char* what) {
  if (is_integer(obj)) return Shape{to_int64(obj, what)};
  if (py::isinstance<py::array>(obj)) {
    const auto array = py::reinterpret_borrow<py::array>(obj);
    if (array.dtype().kind() != 'i' && array.dtype().kind() != 'u') {
      throw py::type_error(fmt::format("{} must be an integer or tuple of integers", what));
    }
    return to_shape(array.attr("tolist")(), what);
  }
  if (!py::isinstance<py::sequence>(obj) || py::isinstance<py::str>(obj)) {
    throw py::type_error(
        fmt::format("{} must be an integer or tuple of integers, got {}", what, repr_of(obj)));
  }
  Shape shape;
  for (const py::handle item : py::reinterpret_borrow<py::sequence>(obj)) {
    if (!is_integer(item)) {
      throw py::type_error(
          fmt::format("{} elements must be integers, got {}", what,
                      py::str(py::type::of(item).attr("__name__")).cast<std::string>()));
    }
    shape.push_back(to_int64(item, what));
  }
  return shape;
}

Order to_order(py::handle obj, bool allow_any) {
  if (py::isinstance<py::str>(obj)) {
    const auto text = obj.cast<std::string>();
    if (text == "C") return Order::C;
    if (text == "F") return Order::F;
    if (allow_any && text == "A") return Order::A;
  }
  throw py::value_error(allow_any ? fmt::format("order not C|F|A: {}", repr_of(obj))
                                  : fmt::format("must be either C/F order, got {}", repr_of(obj)));
}

Stream to_stream(py::handle obj) {
  // Nearly every call passes here with the GIL held: the place to drop what other threads queued.
  release_queued_python_objects();
  // The common cases first, without a type lookup: no stream at all.
  if (obj.is_none()) return {};
  if (PyLong_CheckExact(obj.ptr()) != 0 && PyLong_AsLong(obj.ptr()) == 0) return {};
  if (py::isinstance<Stream>(obj)) return obj.cast<Stream>();
  if ((PyLong_Check(obj.ptr()) || PyBool_Check(obj.ptr())) && obj.cast<long long>() == 0) {
    return {};
  }
  // A foreign stream object (PyTorch, CuPy, numba-cuda) by the CUDA stream protocol.
  if (py::hasattr(obj, "__cuda_stream__")) return external_stream(obj, py::none());
  throw py::type_error(fmt::format(
      "stream must be a devmem.Stream, an object with __cuda_stream__ (a PyTorch or CuPy "
      "stream), or 0 or None for no stream, got {}",
      repr_of(obj)));
}

Stream external_stream(py::handle obj, const py::object& device) {
  std::uintptr_t handle = 0;
  if (py::hasattr(obj, "__cuda_stream__")) {
    // The CUDA stream protocol: __cuda_stream__() -> (version, handle), version 0.
    const py::object answer = obj.attr("__cuda_stream__")();
    if (!py::isinstance<py::tuple>(answer) || py::len(answer) != 2) {
      throw py::type_error(
          fmt::format("{}.__cuda_stream__() returned {}, not a (version, handle) tuple",
                      repr_of(obj), repr_of(answer)));
    }
    const auto version = answer.cast<py::tuple>()[0].cast<long long>();
    if (version != 0) {
      throw py::value_error(fmt::format(
          "{}.__cuda_stream__() has version {}; devmem reads version 0", repr_of(obj), version));
    }
    handle = answer.cast<py::tuple>()[1].cast<std::uintptr_t>();
  } else if (PyLong_Check(obj.ptr()) != 0 && PyBool_Check(obj.ptr()) == 0) {
    handle = obj.cast<std::uintptr_t>();
  } else {
    throw py::type_error(fmt::format(
        "external_stream: expected a stream handle (int) or an object with __cuda_stream__, got "
        "{}",
        repr_of(obj)));
  }
  const int index = device.is_none() ? current_device() : device.cast<int>();
  return Stream::external(reinterpret_cast<NativeStream>(handle), index);
}

AllocationArguments allocation_arguments(const py::object& shape, const py::object& dtype,
                                         const py::object& strides, const py::object& order) {
  AllocationArguments out;
  out.dtype = as_numpy_dtype(dtype);
  out.element = to_devmem_dtype(out.dtype);
  out.shape = to_shape(shape);
  if (!strides.is_none()) out.strides = to_shape(strides, "strides");
  out.order = to_order(order);
  return out;
}

py::tuple to_tuple(std::span<const std::int64_t> values) {
  py::tuple out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    out[i] = py::int_(values[i]);
  }
  return out;
}

std::shared_ptr<const void> keep_python_object(py::handle obj) {
  PyObject* const raw = obj.inc_ref().ptr();
  return {raw, [](const void* pointer) {
            auto* const object = static_cast<PyObject*>(const_cast<void*>(pointer));
            if (Py_IsInitialized() == 0) return;  // interpreter gone: nothing left to release
            if (PyGILState_Check() != 0) {
              Py_DECREF(object);
              return;
            }
            const std::lock_guard lock(queued_mutex);
            queued_objects().push_back(object);
            has_queued.store(true, std::memory_order_release);
          }};
}

void release_queued_python_objects() {
  if (!has_queued.load(std::memory_order_acquire)) return;
  std::vector<PyObject*> objects;
  {
    const std::lock_guard lock(queued_mutex);
    objects.swap(queued_objects());
    has_queued.store(false, std::memory_order_relaxed);
  }
  for (PyObject* object : objects) Py_DECREF(object);
}

HostArray host_view(const py::array& array, bool writable) {
  const auto ndim = static_cast<std::size_t>(array.ndim());
  Shape shape(array.shape(), array.shape() + ndim);
  Strides strides(array.strides(), array.strides() + ndim);
  DType dtype = to_devmem_dtype(array.dtype());
  auto owner = keep_python_object(array);
  if (writable) {
    if (!array.writeable()) {
      throw py::value_error("the destination NumPy array is read-only");
    }
    return HostArray::view(const_cast<void*>(array.data()), std::move(shape), std::move(dtype),
                           std::move(strides), std::move(owner));
  }
  return HostArray::view(array.data(), std::move(shape), std::move(dtype), std::move(strides),
                         std::move(owner));
}

py::array to_numpy(const HostArray& host, const py::dtype& dtype) {
  auto keep = std::make_unique<HostArray>(host);
  const py::capsule base(keep.get(),
                         [](void* pointer) { delete static_cast<HostArray*>(pointer); });
  static_cast<void>(keep.release());  // the capsule owns it now
  std::vector<py::ssize_t> shape(host.shape().begin(), host.shape().end());
  std::vector<py::ssize_t> strides(host.strides().begin(), host.strides().end());
  return {dtype, std::move(shape), std::move(strides), host.data(), base};
}

py::array as_numpy_array(py::handle obj) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  return numpy_asarray()(obj);
}

py::array as_numpy_array(py::handle obj, const py::dtype& dtype) {
  return numpy_asarray()(obj, dtype);
}

}  // namespace devmem::python

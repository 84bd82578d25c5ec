// Zero-copy exchange with other Python libraries: DLPack (__dlpack__, __dlpack_device__,
// devmem.from_dlpack), the CUDA Array Interface v3 (__cuda_array_interface__ on the GPU backends,
// devmem.as_device_array) and IPC handles (docs/python.md#interop).

#include "interop.hpp"
#include "bindings.hpp"
#include "conversions.hpp"

#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::python {

namespace {

constexpr const char* kUnusedCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

// DLPack >= 0.8's kDLBool; the dlpack.h devmem builds with may be older (Debian's 0.6).
constexpr std::uint8_t kDLBoolCode = 6;

/// Whether a consumer that passed `max_version` to __dlpack__ reads kDLBool: DLPack 1.0 has it,
/// so a consumer announcing (1, 0) or later does. Older consumers (NumPy 1, which passes
/// nothing) get bool as uint8, the only 1-byte type they know.
bool knows_dlpack_bool(const py::object& max_version) {
  if (max_version.is_none()) return false;
  if (!py::isinstance<py::tuple>(max_version) || py::len(max_version) < 1) {
    throw py::type_error(
        fmt::format("__dlpack__: max_version must be a (major, minor) tuple or None, got {}",
                    py::repr(max_version).cast<std::string>()));
  }
  return to_int64(max_version.cast<py::tuple>()[0], "max_version") >= 1;
}

bool has_array_interface() {
  const std::string backend = backend_name();
  return backend == "cuda" || backend == "roc";
}

/// A PyCapsule holding `tensor` under DLPack's protocol: a consumer renames it "used_dltensor"
/// and owns the tensor; a capsule dropped unconsumed calls the tensor's deleter.
py::capsule dlpack_capsule(DLManagedTensor* tensor) {
  PyObject* capsule = PyCapsule_New(tensor, kUnusedCapsule, [](PyObject* self) {
    if (PyCapsule_IsValid(self, kUsedCapsule) != 0) return;
    auto* const unused = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(self, kUnusedCapsule));
    if (unused == nullptr) {
      PyErr_WriteUnraisable(self);
      return;
    }
    if (unused->deleter != nullptr) unused->deleter(unused);
  });
  if (capsule == nullptr) {
    tensor->deleter(tensor);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(capsule);
}

/// The fields of a NumPy dtype as an IPC handle carries them (names in NumPy's order, offsets,
/// each field's element typestr with its byte order and datetime unit, sub-array shapes, nested
/// structures); empty for a dtype without fields.
std::vector<DTypeField> describe_fields(const py::dtype& dtype) {
  std::vector<DTypeField> out;
  const py::object names = dtype.attr("names");
  if (names.is_none()) return out;
  const py::dict fields = dtype.attr("fields");
  for (const py::handle name : names) {
    const auto entry = py::reinterpret_borrow<py::tuple>(fields[name]);
    const auto field_type = py::reinterpret_borrow<py::dtype>(entry[0]);
    const auto base = py::reinterpret_borrow<py::dtype>(field_type.attr("base"));
    DTypeField field;
    field.name = name.cast<std::string>();
    field.offset = entry[1].cast<std::int64_t>();
    field.typestr = base.attr("str").cast<std::string>();
    field.shape = to_shape(field_type.attr("shape"), "sub-array shape");
    field.fields = describe_fields(base);
    out.push_back(std::move(field));
  }
  return out;
}

/// The NumPy dtype of a DeviceNDArray as its IPC handle carries it (DTypeDescription).
DTypeDescription describe(const DeviceNDArray& a) {
  DTypeDescription out = DTypeDescription::of(a.array.dtype());
  out.typestr = a.dtype.attr("str").cast<std::string>();
  out.fields = describe_fields(a.dtype);
  return out;
}

py::dtype structure_dtype(const std::vector<DTypeField>& fields, std::int64_t itemsize, bool align);

/// One field's format for np.dtype's dict form: its element, with its sub-array shape.
py::object field_format(const DTypeField& field, bool align) {
  const auto element = py::reinterpret_borrow<py::dtype>(as_numpy_dtype(py::str(field.typestr)));
  py::object format = field.fields.empty()
                          ? py::object(element)
                          : py::object(structure_dtype(field.fields, element.itemsize(), align));
  if (!field.shape.empty()) return py::make_tuple(format, to_tuple(field.shape));
  return format;
}

py::dtype structure_dtype(const std::vector<DTypeField>& fields, std::int64_t itemsize,
                          bool align) {
  py::list names;
  py::list formats;
  py::list offsets;
  for (const DTypeField& field : fields) {
    names.append(field.name);
    formats.append(field_format(field, align));
    offsets.append(field.offset);
  }
  py::dict spec;
  spec["names"] = names;
  spec["formats"] = formats;
  spec["offsets"] = offsets;
  spec["itemsize"] = itemsize;
  return py::reinterpret_steal<py::dtype>(
      numpy().attr("dtype")(spec, py::arg("align") = align).release());
}

/// The exporter's NumPy dtype, rebuilt from the handle's description; it must give the array's
/// devmem dtype back (ValueError naming both otherwise).
py::dtype rebuild_dtype(const DTypeDescription& description, const DType& element,
                        const char* operation) {
  py::dtype dtype;
  if (description.fields.empty()) {
    dtype = as_numpy_dtype(py::str(description.typestr));
  } else {
    // An aligned structure (np.dtype(..., align=True)) has its fields' alignment; a packed one
    // has alignment 1. NumPy refuses align=True for offsets that are not aligned: packed then.
    try {
      dtype = structure_dtype(description.fields, description.itemsize, description.alignment > 1);
    } catch (const py::error_already_set&) {
      if (description.alignment <= 1) throw;
      dtype = structure_dtype(description.fields, description.itemsize, false);
    }
  }
  const DType rebuilt = to_devmem_dtype(dtype);
  if (!(rebuilt == element)) {
    throw py::value_error(fmt::format(
        "{}: the handle's dtype {} rebuilds in NumPy as {} (itemsize {}, alignment {}), but the "
        "exported array's elements have itemsize {} and alignment {}",
        operation, description.typestr, py::repr(dtype).cast<std::string>(), rebuilt.itemsize(),
        rebuilt.alignment(), element.itemsize(), element.alignment()));
  }
  return dtype;
}

DeviceNDArray open_ipc(const IpcHandle& handle, std::optional<int> device, const char* operation) {
  DeviceArray array = without_gil([&] { return open_ipc_array(handle, device); });
  py::dtype dtype = rebuild_dtype(handle.dtype_description(), array.dtype(), operation);
  return DeviceNDArray{std::move(array), dtype};
}

/// BufferError (the DLPack protocol's error, and NumPy's) for an array DLPack cannot describe:
/// DLPack has no byte order (a non-native one would be read as native: wrong values), and no
/// structured, datetime, string or void types.
void check_dlpack_exportable(const DeviceNDArray& a) {
  const auto dtype = py::repr(a.dtype).cast<std::string>();
  if (!a.dtype.attr("isnative").cast<bool>()) {
    throw py::buffer_error(fmt::format(
        "DLPack only supports native byte order, not {}: copy it to native order first "
        "(d.copy_to_host().astype(d.dtype.newbyteorder('='))), or share it through IPC, which "
        "keeps the byte order",
        dtype));
  }
  const DescriptorFields descr = descriptor_fields(a.dtype);
  if (descr.has_fields || std::string_view("biufc").find(descr.kind) == std::string_view::npos) {
    throw py::buffer_error(fmt::format(
        "DLPack only supports bool, integer, float and complex dtypes, not {} (IPC handles keep "
        "any dtype)",
        dtype));
  }
}

/// devmem's MappedNDArray (Numba's `__cuda_memory__` marker on a NumPy array).
bool is_mapped_ndarray(const py::handle& obj) {
  if (!py::isinstance<py::array>(obj)) return false;
  const py::object marker = py::getattr(obj, "__cuda_memory__", py::none());
  return !marker.is_none() && py::bool_(marker);
}

DeviceNDArray from_array_interface(const py::object& obj, bool sync) {
  // devmem's own arrays, on every backend (the host backend's have no CUDA Array Interface): a
  // new DeviceNDArray over the same memory, as Numba's as_cuda_array gives a new view.
  if (py::isinstance<DeviceNDArray>(obj)) return obj.cast<DeviceNDArray>();
  if (is_mapped_ndarray(obj)) return obj.attr("device_array")().cast<DeviceNDArray>();
  if (!py::hasattr(obj, "__cuda_array_interface__")) {
    throw py::type_error(fmt::format("{} doesn't implement the cuda array interface.",
                                     py::repr(py::type::of(obj)).cast<std::string>()));
  }
  const py::dict desc = obj.attr("__cuda_array_interface__");
  if (desc.contains("mask") && !desc["mask"].is_none()) {
    throw py::value_error("as_device_array: masked arrays are not supported");
  }
  ArrayInterface iface;
  for (const char* field : {"shape", "typestr", "data", "version"}) {
    if (!desc.contains(field)) {
      throw py::value_error(
          fmt::format("as_device_array: __cuda_array_interface__ has no '{}'", field));
    }
  }
  iface.shape = to_shape(desc["shape"]);
  if (desc.contains("strides") && !desc["strides"].is_none()) {
    iface.strides = to_shape(desc["strides"], "strides");
  }
  const py::dtype dtype = desc.contains("descr") && py::len(desc["descr"]) > 1
                              ? as_numpy_dtype(desc["descr"])
                              : as_numpy_dtype(desc["typestr"]);
  iface.typestr = to_devmem_dtype(dtype).typestr();
  const py::tuple data = desc["data"];
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the producer gives the address as an integer
  iface.data.pointer = reinterpret_cast<void*>(data[0].cast<std::uintptr_t>());
  iface.data.readonly = data[1].cast<bool>();
  iface.version = desc["version"].cast<int>();
  if (desc.contains("stream") && !desc["stream"].is_none()) {
    iface.stream = desc["stream"].cast<std::intptr_t>();
  }
  std::shared_ptr<const void> owner = keep_python_object(obj);
  DeviceArray array = without_gil([&] { return as_device_array(iface, std::move(owner), sync); });
  return DeviceNDArray{std::move(array), dtype};
}

DeviceNDArray from_dlpack_object(const py::object& obj) {
  py::object capsule = obj;
  if (!py::isinstance<py::capsule>(obj)) {
    if (!py::hasattr(obj, "__dlpack__")) {
      throw py::type_error(fmt::format("from_dlpack: {} has no __dlpack__ method",
                                       py::repr(py::type::of(obj)).cast<std::string>()));
    }
    const py::tuple device = obj.attr("__dlpack_device__")();
    const int device_type = device[0].cast<int>();
    // GPU producers order their work before our default stream's (the legacy default, 1); CPU
    // producers take no stream.
    // devmem's own arrays are asked with max_version (1, 0), so that bool stays kDLBool (devmem
    // reads it); a foreign producer may not take the argument.
    const bool own = py::isinstance<DeviceNDArray>(obj);
    const py::object max_version = own ? py::object(py::make_tuple(1, 0)) : py::object(py::none());
    if (device_type == kDLCPU || device_type == kDLCUDAHost) {
      capsule = own ? obj.attr("__dlpack__")(py::arg("max_version") = max_version)
                    : obj.attr("__dlpack__")();
    } else {
      capsule =
          own ? obj.attr("__dlpack__")(py::arg("stream") = 1, py::arg("max_version") = max_version)
              : obj.attr("__dlpack__")(py::arg("stream") = 1);
    }
  }
  if (PyCapsule_IsValid(capsule.ptr(), kUnusedCapsule) == 0) {
    throw py::value_error(
        "from_dlpack: not an unconsumed DLPack capsule (a capsule can be consumed only once)");
  }
  auto* const tensor =
      static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kUnusedCapsule));
  if (tensor == nullptr) throw py::error_already_set();
  // Mark consumed first: from now on devmem owns the tensor (and calls its deleter even when
  // from_dlpack throws).
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsule) != 0) throw py::error_already_set();
  DeviceArray array = from_dlpack(tensor);
  py::dtype dtype = to_numpy_dtype(array.dtype());
  return DeviceNDArray{std::move(array), dtype};
}

/// A view of `base`'s memory with its own offset, shape and strides (a MappedNDArray slice's
/// device side); every byte it can reach must lie inside `base`'s allocation.
DeviceNDArray device_view(const DeviceNDArray& base, std::int64_t byte_offset,
                          const py::object& shape, const py::object& strides,
                          const py::object& dtype) {
  const py::dtype type = as_numpy_dtype(dtype);
  ArrayInterface iface;
  iface.shape = to_shape(shape);
  iface.strides = to_shape(strides, "strides");
  iface.typestr = to_devmem_dtype(type).typestr();
  const Layout base_layout = base.array.layout();
  const Extent allowed = base_layout.byte_extent();
  Layout wanted{iface.shape, iface.strides, base_layout.offset + byte_offset,
                static_cast<std::int64_t>(type.itemsize())};
  const Extent reached = wanted.byte_extent();
  if (wanted.size() != 0 && (reached.begin < allowed.begin || reached.end > allowed.end)) {
    throw py::value_error(fmt::format(
        "device_view: bytes [{}, {}) of the view lie outside the array's bytes [{}, {})",
        reached.begin, reached.end, allowed.begin, allowed.end));
  }
  auto* const element0 = static_cast<std::byte*>(base.array.data()) + byte_offset;
  iface.data.pointer = wanted.size() == 0 ? nullptr : element0;
  DeviceArray view = as_device_array(iface, base.array.owner(), false).bind(base.array.stream());
  return DeviceNDArray{std::move(view), type};
}

}  // namespace

// ---- DeviceNDArray's interop members (interop.hpp), bound by bind_device_ndarray ----

py::capsule export_dlpack(const DeviceNDArray& a, const py::object& stream,
                          const py::object& max_version, const py::object& dl_device,
                          const py::object& copy) {
  check_dlpack_exportable(a);
  const bool as_bool = a.array.dtype().kind() == 'b' && knows_dlpack_bool(max_version);
  if (!stream.is_none() && has_array_interface()) {
    // The consumer will use `stream`: order our array's pending work before it.
    const auto consumer = stream.cast<std::intptr_t>();
    if (consumer != -1) without_gil([&] { a.array.stream().synchronize(); });
  }
  // copy=True (DLPack 1's consumers, NumPy 2): a new array of the same values, complete
  // before the consumer reads it.
  DeviceArray exported = a.array;
  if (!copy.is_none() && py::bool_(copy)) {
    exported = without_gil([&] {
      DeviceArray copied = a.array.copy(Order::K);
      copied.stream().synchronize();
      return copied;
    });
  }
  // Owned here until the capsule takes it, so that an error below frees it.
  const auto free_tensor = [](DLManagedTensor* t) { t->deleter(t); };
  std::unique_ptr<DLManagedTensor, decltype(free_tensor)> tensor(exported.to_dlpack(), free_tensor);
  const DLDevice own = tensor->dl_tensor.device;
  if (!dl_device.is_none()) {
    const auto wanted = dl_device.cast<py::tuple>();
    if (wanted.size() != 2 || wanted[0].cast<int>() != static_cast<int>(own.device_type) ||
        wanted[1].cast<int>() != own.device_id) {
      throw py::buffer_error(
          fmt::format("__dlpack__: dl_device {} is not the array's device ({}, {}); devmem exports "
                      "to the array's own device only",
                      py::repr(dl_device).cast<std::string>(), static_cast<int>(own.device_type),
                      own.device_id));
    }
  }
  if (as_bool) tensor->dl_tensor.dtype.code = kDLBoolCode;
  return dlpack_capsule(tensor.release());
}

py::tuple dlpack_device(const DeviceNDArray& a) {
  DLManagedTensor* tensor = a.array.to_dlpack();
  const DLDevice device = tensor->dl_tensor.device;
  tensor->deleter(tensor);
  return py::make_tuple(static_cast<int>(device.device_type), device.device_id);
}

py::object cuda_array_interface(const DeviceNDArray& self) {
  if (!has_array_interface()) {
    throw py::attribute_error(fmt::format(
        "__cuda_array_interface__ exists on the cuda and roc backends only; the {} backend "
        "exchanges arrays through DLPack (__dlpack__)",
        backend_name()));
  }
  const ArrayInterface iface = self.array.array_interface();
  py::dict out;
  out["shape"] = to_tuple(iface.shape);
  out["strides"] =
      iface.strides.empty() ? py::object(py::none()) : py::object(to_tuple(iface.strides));
  out["typestr"] = self.dtype.attr("str");
  if (self.dtype.attr("fields").ptr() != Py_None) out["descr"] = self.dtype.attr("descr");
  out["data"] =
      py::make_tuple(reinterpret_cast<std::uintptr_t>(iface.data.pointer), iface.data.readonly);
  out["version"] = iface.version;
  out["stream"] = iface.stream ? py::object(py::int_(*iface.stream)) : py::object(py::none());
  return out;
}

IpcHandle export_ipc(const DeviceNDArray& a) {
  return ipc_handle(a.array, describe(a));
}

void bind_interop(py::module_& m) {
  m.def("from_dlpack", &from_dlpack_object, py::arg("obj"),
        "A DeviceNDArray viewing the memory of an object with __dlpack__ (or a DLPack capsule), "
        "without a copy. The object's memory must be the active backend's.");
  m.def("as_device_array", &from_array_interface, py::arg("obj"), py::arg("sync") = true,
        "A DeviceNDArray viewing an object with __cuda_array_interface__, without a copy.");
  m.def("as_cuda_array", &from_array_interface, py::arg("obj"), py::arg("sync") = true,
        "Numba's name for as_device_array.");
  m.def(
      "is_device_array",
      [](const py::object& obj) {
        return py::isinstance<DeviceNDArray>(obj) || is_mapped_ndarray(obj) ||
               py::hasattr(obj, "__cuda_array_interface__");
      },
      py::arg("obj"),
      "True for devmem's DeviceNDArray and MappedNDArray and for any object with "
      "__cuda_array_interface__ (Numba's is_cuda_array).");
  m.def("_device_view", &device_view);

  py::class_<IpcHandle>(m, "IpcHandle", "A handle to device memory that another process can open.")
      .def("to_bytes",
           [](const IpcHandle& h) {
             const std::vector<std::byte> bytes = h.to_bytes();
             return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def_static("from_bytes",
                  [](const py::bytes& bytes) {
                    const std::string_view view = bytes;
                    return IpcHandle::from_bytes(std::span<const std::byte>(
                        reinterpret_cast<const std::byte*>(view.data()), view.size()));
                  })
      .def("to_hex", &IpcHandle::to_hex)
      .def_property_readonly("vendor_handle",
                             [](const IpcHandle& h) {
                               const auto& raw = h.vendor_handle();
                               return py::bytes(reinterpret_cast<const char*>(raw.data()),
                                                raw.size());
                             })
      .def_property_readonly("offset", &IpcHandle::offset)
      .def_property_readonly("allocation_bytes", &IpcHandle::allocation_bytes)
      .def_property_readonly("backend", &IpcHandle::backend)
      .def_property_readonly("device", &IpcHandle::device)
      .def_property_readonly("shape", [](const IpcHandle& h) { return to_tuple(h.shape()); })
      .def_property_readonly("strides", [](const IpcHandle& h) { return to_tuple(h.strides()); })
      .def_property_readonly(
          "dtype",
          [](const IpcHandle& h) {
            return rebuild_dtype(h.dtype_description(), h.dtype(), "IpcHandle.dtype");
          },
          "The exported array's NumPy dtype (fields, offsets, alignment, byte order, units).")
      .def_property_readonly("exporter_pid", &IpcHandle::exporter_pid)
      .def_property_readonly("is_open", &IpcHandle::is_open)
      .def(
          "open",
          [](IpcHandle& h, std::optional<int> device) {
            DeviceArray array = without_gil([&] { return h.open(device); });
            py::dtype dtype = rebuild_dtype(h.dtype_description(), array.dtype(), "IpcHandle.open");
            return DeviceNDArray{std::move(array), dtype};
          },
          py::arg("device") = py::none())
      .def("close", [](IpcHandle& h) { without_gil([&] { h.close(); }); })
      // Pickled as its bytes, so a handle travels through multiprocessing as Numba's does.
      .def(py::pickle(
          [](const IpcHandle& h) {
            const std::vector<std::byte> bytes = h.to_bytes();
            return py::make_tuple(
                py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
          },
          [](const py::tuple& state) {
            if (state.size() != 1 || !py::isinstance<py::bytes>(state[0])) {
              throw py::value_error(fmt::format("IpcHandle: cannot unpickle {}",
                                                py::repr(state).cast<std::string>()));
            }
            const std::string_view view = state[0].cast<py::bytes>();
            return IpcHandle::from_bytes(std::span<const std::byte>(
                reinterpret_cast<const std::byte*>(view.data()), view.size()));
          }));
  m.def("ipc_handle", &export_ipc, py::arg("ary"));
  m.def(
      "ipc_supported", [](int device) { return ipc_supported(device); }, py::arg("device") = 0,
      "Whether arrays on `device` can be shared with other processes (ipc_handle).");
  m.def(
      "open_ipc_array",
      [](const py::object& handle, std::optional<int> device) {
        constexpr const char* kOperation = "open_ipc_array";
        if (py::isinstance<IpcHandle>(handle)) {
          return open_ipc(handle.cast<const IpcHandle&>(), device, kOperation);
        }
        if (py::isinstance<py::str>(handle)) {
          return open_ipc(IpcHandle::from_hex(handle.cast<std::string>()), device, kOperation);
        }
        if (PyObject_CheckBuffer(handle.ptr()) != 0) {
          // bytes, bytearray, memoryview: their bytes.
          const auto as_bytes = py::reinterpret_steal<py::bytes>(PyBytes_FromObject(handle.ptr()));
          if (!as_bytes) throw py::error_already_set();
          const std::string bytes = as_bytes;
          return open_ipc(IpcHandle::from_bytes(std::span<const std::byte>(
                              reinterpret_cast<const std::byte*>(bytes.data()), bytes.size())),
                          device, kOperation);
        }
        throw py::type_error(
            fmt::format("open_ipc_array: handle must be a devmem.IpcHandle, its bytes "
                        "(IpcHandle.to_bytes()) or its hexadecimal text (IpcHandle.to_hex()), got "
                        "{}",
                        py::repr(py::type::of(handle)).cast<std::string>()));
      },
      py::arg("handle"), py::arg("device") = py::none(),
      "Opens an IPC handle (or its bytes, or its hexadecimal text) exported by another process; "
      "the array has the exporter's NumPy dtype.");
}

}  // namespace devmem::python

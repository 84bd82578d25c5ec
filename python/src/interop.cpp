// Zero-copy exchange with other Python libraries: DLPack (__dlpack__, __dlpack_device__,
// devmem.from_dlpack), the CUDA Array Interface v3 (__cuda_array_interface__ on the GPU backends,
// devmem.as_device_array) and IPC handles (docs/python.md#interop).

#include "bindings.hpp"
#include "conversions.hpp"

#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

namespace devmem::python {

namespace {

constexpr const char* kUnusedCapsule = "dltensor";
constexpr const char* kUsedCapsule = "used_dltensor";

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

DeviceNDArray from_array_interface(const py::object& obj, bool sync) {
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
    capsule = device_type == kDLCPU || device_type == kDLCUDAHost
                  ? obj.attr("__dlpack__")()
                  : obj.attr("__dlpack__")(py::arg("stream") = 1);
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
  const Extent allowed = base_layout.extent();
  Layout wanted{iface.shape, iface.strides, base_layout.offset + byte_offset,
                static_cast<std::int64_t>(type.itemsize())};
  const Extent reached = wanted.extent();
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

void bind_interop(py::module_& m) {
  auto cls = py::reinterpret_borrow<py::class_<DeviceNDArray>>(m.attr("DeviceNDArray"));
  cls.def(
         "__dlpack__",
         [](const DeviceNDArray& a, const py::object& stream) {
           if (!stream.is_none() && has_array_interface()) {
             // The consumer will use `stream`: order our array's pending work before it.
             const auto consumer = stream.cast<std::intptr_t>();
             if (consumer != -1) without_gil([&] { a.array.stream().synchronize(); });
           }
           return dlpack_capsule(a.array.to_dlpack());
         },
         py::kw_only(), py::arg("stream") = py::none(),
         "A DLPack capsule viewing the array (no copy).")
      .def("__dlpack_device__",
           [](const DeviceNDArray& a) {
             DLManagedTensor* tensor = a.array.to_dlpack();
             const DLDevice device = tensor->dl_tensor.device;
             tensor->deleter(tensor);
             return py::make_tuple(static_cast<int>(device.device_type), device.device_id);
           })
      .def_property_readonly("__cuda_array_interface__", &cuda_array_interface,
                             "CUDA Array Interface v3 (cuda and roc backends).")
      .def(
          "get_ipc_handle", [](const DeviceNDArray& a) { return ipc_handle(a.array); },
          "An IPC handle another process can open (devmem.open_ipc_array).");

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
        return py::isinstance<DeviceNDArray>(obj) || py::hasattr(obj, "__cuda_array_interface__");
      },
      py::arg("obj"));
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
      .def_property_readonly("exporter_pid", &IpcHandle::exporter_pid)
      .def_property_readonly("is_open", &IpcHandle::is_open)
      .def(
          "open",
          [](IpcHandle& h, std::optional<int> device) {
            DeviceArray array = without_gil([&] { return h.open(device); });
            py::dtype dtype = to_numpy_dtype(array.dtype());
            return DeviceNDArray{std::move(array), dtype};
          },
          py::arg("device") = py::none())
      .def("close", [](IpcHandle& h) { without_gil([&] { h.close(); }); });
  m.def(
      "ipc_handle", [](const DeviceNDArray& a) { return ipc_handle(a.array); }, py::arg("ary"));
  m.def(
      "ipc_supported", [](int device) { return ipc_supported(device); }, py::arg("device") = 0,
      "Whether arrays on `device` can be shared with other processes (ipc_handle).");
  m.def(
      "open_ipc_array",
      [](const py::object& handle, std::optional<int> device) {
        DeviceArray array;
        if (py::isinstance<py::bytes>(handle)) {
          const auto bytes = handle.cast<py::bytes>();
          const std::string_view view = bytes;
          array = without_gil([&] {
            return open_ipc_array(std::span<const std::byte>(
                                      reinterpret_cast<const std::byte*>(view.data()), view.size()),
                                  device);
          });
        } else {
          const auto& h = handle.cast<const IpcHandle&>();
          array = without_gil([&] { return open_ipc_array(h, device); });
        }
        py::dtype dtype = to_numpy_dtype(array.dtype());
        return DeviceNDArray{std::move(array), dtype};
      },
      py::arg("handle"), py::arg("device") = py::none(),
      "Opens an IPC handle (or its bytes) exported by another process.");
}

}  // namespace devmem::python

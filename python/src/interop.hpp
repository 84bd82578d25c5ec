#pragma once
// DeviceNDArray's interop members (DLPack, the CUDA Array Interface, IPC), defined in interop.cpp
// with the rest of the interop code and bound by bind_device_ndarray (device_ndarray.cpp), so that
// the class has one binder.

#include "conversions.hpp"

#include <devmem/ipc.hpp>

namespace devmem::python {

/// DeviceNDArray.__dlpack__(*, stream, max_version, dl_device, copy): a DLPack capsule viewing
/// the array, or a copy of it for copy=True (see the method's docstring). BufferError for a
/// dl_device other than the array's, TypeError for a bad max_version, devmem's errors otherwise.
[[nodiscard]] py::capsule export_dlpack(const DeviceNDArray& a, const py::object& stream,
                                        const py::object& max_version, const py::object& dl_device,
                                        const py::object& copy);
/// DeviceNDArray.__dlpack_device__(): (DLPack device type, device id) of the array.
[[nodiscard]] py::tuple dlpack_device(const DeviceNDArray& a);
/// DeviceNDArray.__cuda_array_interface__: the CUDA Array Interface v3 dict; AttributeError on
/// the host backend (which exchanges arrays through DLPack).
[[nodiscard]] py::object cuda_array_interface(const DeviceNDArray& self);
/// DeviceNDArray.get_ipc_handle() and devmem.ipc_handle(ary): a handle another process can open,
/// carrying the array's full NumPy dtype; devmem's errors (InvalidArgument, BackendError).
[[nodiscard]] IpcHandle export_ipc(const DeviceNDArray& a);

}  // namespace devmem::python

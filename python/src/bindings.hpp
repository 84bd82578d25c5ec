#pragma once
// The parts of the devmem Python module, each defined in its own file and called in this order by
// module.cpp (later parts use the classes of earlier ones).

#include <pybind11/pybind11.h>

namespace devmem::python {

/// Streams, events, devices, memory managers, pinned and mapped host memory (runtime.cpp).
void bind_runtime(pybind11::module_& module);
/// DeviceNDArray (its one binder: the interop members of interop.hpp included) and the
/// allocation and transfer functions (device_ndarray.cpp).
void bind_device_ndarray(pybind11::module_& module);
/// DLPack, the CUDA Array Interface and IPC: the module functions and IpcHandle (interop.cpp).
void bind_interop(pybind11::module_& module);
/// Memory managers written in Python (python_memory_manager.cpp).
void bind_python_memory_manager(pybind11::module_& module);

}  // namespace devmem::python

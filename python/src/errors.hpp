#pragma once
// devmem's C++ exceptions as Python exceptions (docs/python.md#errors).

#include <pybind11/pybind11.h>

namespace devmem::python {

/// Defines devmem.Error (a RuntimeError) and its subclasses InvalidArgument (also a ValueError),
/// OutOfMemory (also a MemoryError), BackendError and NoDevice in `module`, and translates the
/// C++ exceptions into them, the message unchanged.
void bind_errors(pybind11::module_& module);

}  // namespace devmem::python

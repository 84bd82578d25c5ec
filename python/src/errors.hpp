#pragma once
// devmem's C++ exceptions as Python exceptions (docs/python.md#errors).

#include <pybind11/pybind11.h>
#include <devmem/error.hpp>

#include <memory>
#include <string>

namespace devmem::python {

/// Defines devmem.Error (a RuntimeError) and its subclasses InvalidArgument (also a ValueError),
/// OutOfMemory (also a MemoryError), BackendError and NoDevice in `module`, and translates the
/// C++ exceptions into them, the message unchanged.
void bind_errors(pybind11::module_& module);

/// A Python exception raised by Python code that devmem called (a memory manager written in
/// Python), carried through devmem's C++ code as a devmem::Error and raised again as the same
/// Python object when it reaches the binding. The reference may be dropped on any thread.
class PythonException : public Error {
 public:
  PythonException(const pybind11::handle& exception, const std::string& message);
  [[nodiscard]] pybind11::handle exception() const noexcept;

 private:
  std::shared_ptr<const void> exception_;
};

}  // namespace devmem::python

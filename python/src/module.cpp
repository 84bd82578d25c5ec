// The compiled part of the devmem Python package (imported as devmem._devmem; devmem/__init__.py
// re-exports it with Numba's names). docs/python.md describes the package.

#include "bindings.hpp"
#include "conversions.hpp"
#include "errors.hpp"

#include <devmem/devmem.hpp>

#include <string>

PYBIND11_MODULE(_devmem, m) {
  namespace py = pybind11;
  m.doc() = "devmem: one API for GPU device memory, with Numba's names (compiled part).";
  // Before anything reads a NumPy dtype: a pybind11 older than 2.12 reads NumPy 1's layout only.
  const auto numpy_version = py::module_::import("numpy").attr("__version__").cast<std::string>();
  if (const std::string error = devmem::python::numpy_support_error(numpy_version);
      !error.empty()) {
    throw py::import_error(error);
  }
  m.attr("_pybind11_version") = devmem::python::pybind11_version();
  m.def(
      "_numpy_support_error",
      [](const std::string& version) -> py::object {
        const std::string error = devmem::python::numpy_support_error(version);
        return error.empty() ? py::object(py::none()) : py::object(py::str(error));
      },
      py::arg("numpy_version"),
      "Why this build cannot run with that NumPy version (None when it can); checked on import.");
  m.attr("__version__") = devmem::version();
  devmem::python::bind_errors(m);
  devmem::python::bind_runtime(m);
  devmem::python::bind_device_ndarray(m);
  devmem::python::bind_interop(m);
  devmem::python::bind_python_memory_manager(m);
  m.def("_release_queued_python_objects", &devmem::python::release_queued_python_objects,
        "Drops the Python references that devmem released on threads without the GIL.");
}

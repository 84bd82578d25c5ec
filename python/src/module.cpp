// The compiled part of the devmem Python package (imported as devmem._devmem; devmem/__init__.py
// re-exports it with Numba's names). docs/python.md describes the package.

#include "bindings.hpp"
#include "conversions.hpp"
#include "errors.hpp"

#include <devmem/devmem.hpp>

PYBIND11_MODULE(_devmem, m) {
  namespace py = pybind11;
  m.doc() = "devmem: one API for GPU device memory, with Numba's names (compiled part).";
  m.attr("__version__") = devmem::version();
  devmem::python::bind_errors(m);
  devmem::python::bind_runtime(m);
  devmem::python::bind_device_ndarray(m);
  devmem::python::bind_interop(m);
  m.def("_release_queued_python_objects", &devmem::python::release_queued_python_objects,
        "Drops the Python references that devmem released on threads without the GIL.");
}

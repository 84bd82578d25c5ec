#include "errors.hpp"

#include "conversions.hpp"

#include <devmem/error.hpp>

#include <exception>

namespace devmem::python {

namespace py = pybind11;

namespace {

// Created once at import and kept for the life of the process, like the module itself.
PyObject* error_type = nullptr;
PyObject* invalid_argument_type = nullptr;
PyObject* out_of_memory_type = nullptr;
PyObject* backend_error_type = nullptr;
PyObject* no_device_type = nullptr;

PyObject* define(py::module_& module, const char* name, const py::tuple& bases, const char* doc) {
  const std::string qualified = std::string("devmem.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), nullptr);
  if (type == nullptr) throw py::error_already_set();
  module.add_object(name, py::handle(type));  // the module gets its own reference
  return type;
}

void raise(PyObject* type, const std::exception& error) {
  PyErr_SetString(type, error.what());
}

}  // namespace

PythonException::PythonException(const py::handle& exception, const std::string& message)
    : Error(message), exception_(keep_python_object(exception)) {}

py::handle PythonException::exception() const noexcept {
  return {static_cast<PyObject*>(const_cast<void*>(exception_.get()))};
}

void bind_errors(py::module_& module) {
  error_type = define(module, "Error", py::make_tuple(py::handle(PyExc_RuntimeError)),
                      "Base class of every devmem error.");
  invalid_argument_type =
      define(module, "InvalidArgument",
             py::make_tuple(py::handle(error_type), py::handle(PyExc_ValueError)),
             "A bad shape, strides, order, dtype, section or size (also a ValueError).");
  out_of_memory_type = define(
      module, "OutOfMemory", py::make_tuple(py::handle(error_type), py::handle(PyExc_MemoryError)),
      "An allocation failed even after flushing pending deallocations, or inside "
      "defer_cleanup, where nothing is flushed (the message says what the block holds). Also a "
      "MemoryError; `requested_bytes` says how much was asked for.");
  backend_error_type = define(module, "BackendError", py::make_tuple(py::handle(error_type)),
                              "A vendor runtime call failed; `backend`, `function`, `code` and "
                              "`code_name` say which and how.");
  no_device_type = define(module, "NoDevice", py::make_tuple(py::handle(error_type)),
                          "The backend found no device.");

  // pybind11's translator type takes the pointer by value.
  // NOLINTNEXTLINE(performance-unnecessary-value-param)
  py::register_exception_translator([](std::exception_ptr pointer) {
    if (!pointer) return;
    try {
      std::rethrow_exception(pointer);
    } catch (const PythonException& error) {
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.exception().ptr())),
                      error.exception().ptr());
    } catch (const InvalidArgument& error) {
      raise(invalid_argument_type, error);
    } catch (const OutOfMemory& error) {
      const auto instance = py::reinterpret_steal<py::object>(
          PyObject_CallFunction(out_of_memory_type, "s", error.what()));
      if (!instance) throw py::error_already_set();
      instance.attr("requested_bytes") = error.requested_bytes();
      PyErr_SetObject(out_of_memory_type, instance.ptr());
    } catch (const BackendError& error) {
      const auto instance = py::reinterpret_steal<py::object>(
          PyObject_CallFunction(backend_error_type, "s", error.what()));
      if (!instance) throw py::error_already_set();
      instance.attr("backend") = error.backend();
      instance.attr("function") = error.function();
      instance.attr("code") = error.code();
      instance.attr("code_name") = error.code_name();
      PyErr_SetObject(backend_error_type, instance.ptr());
    } catch (const NoDevice& error) {
      raise(no_device_type, error);
    } catch (const Error& error) {
      raise(error_type, error);
    }
  });
}

}  // namespace devmem::python

// A memory manager written in Python (Numba's External Memory Management shape) behind devmem's
// C++ MemoryManager interface: devmem.set_memory_manager(PluginClass). devmem/_emm.py makes the
// plugin and wraps it in an adapter whose allocate(bytes) returns (address, keep) and whose
// memory_info() returns (free, total) or None; this file calls that adapter from whatever thread
// devmem allocates or frees on. docs/python.md#python-memory-manager describes the behaviour.

#include "bindings.hpp"
#include "conversions.hpp"
#include "errors.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace devmem::python {

namespace {

/// Whether this thread may run Python now. Python is gone after Py_Finalize (contexts, and the
/// allocations that keep a manager, are destroyed by C++ static destructors after it); while
/// Python finalises, a thread other than the one finalising would be ended inside
/// PyGILState_Ensure, so such frees are skipped as well: the process is exiting, and the memory
/// goes with it.
bool python_callable_here() {
  if (Py_IsInitialized() == 0) return false;
  if (PyGILState_Check() != 0) return true;
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() == 0;
#else
  return _Py_IsFinalizing() == 0;
#endif
}

// The calls into the plugin below hold only raw references while Python code may run. CPython
// ends a daemon thread that runs Python while the interpreter finalises with a forced unwind
// (pthread_exit at its next GIL switch); run_python (conversions.hpp) parks the thread where the
// unwind reaches it, but every C++ destructor between the two still runs, without the GIL: a
// pybind11 argument tuple's decref segfaulted (1 run in 300), a decref inside a pybind11 object's
// noexcept destructor ended the process (1 in 150).

/// `adapter.allocate(bytes)`; throws error_already_set when it raises.
py::object call_allocate(const py::object& adapter, std::size_t bytes) {
  PyObject* const result = run_python([&] {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): CPython's call API
    return PyObject_CallMethod(adapter.ptr(), "allocate", "n", static_cast<Py_ssize_t>(bytes));
  });
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

/// `adapter.memory_info()`; throws error_already_set when it raises.
py::object call_memory_info(const py::object& adapter) {
  PyObject* const result = run_python([&] {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-vararg): CPython's call API
    return PyObject_CallMethod(adapter.ptr(), "memory_info", nullptr);
  });
  if (result == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(result);
}

/// Drops `reference` (the GIL held), which may run Python code: a plugin's finalizer.
void drop(py::object& reference) {
  PyObject* const raw = reference.release().ptr();
  run_python([raw] { Py_XDECREF(raw); });
}

class PythonMemoryManager;

/// Every manager made here, for the exit hook; read and written with the GIL held only.
std::vector<std::weak_ptr<PythonMemoryManager>>& python_managers() {
  static auto* managers = new std::vector<std::weak_ptr<PythonMemoryManager>>();
  return *managers;
}

/// Device memory from the plugin's memalloc; page-locked host memory and the fallback of
/// memory_info from devmem's direct manager, as Numba's HostOnlyCUDAMemoryManager leaves host
/// memory to Numba's driver calls.
///
/// Thread safety: every entry takes the GIL before touching Python or `live_`, so the GIL is the
/// one lock (a mutex of our own, taken around Python calls, could deadlock against a Python
/// thread that holds the GIL while waiting for it). devmem holds none of its own locks while it
/// calls a manager (memory_manager.hpp), so the plugin may call devmem again.
class PythonMemoryManager final : public MemoryManager {
 public:
  PythonMemoryManager(Context& context, py::object adapter, std::string name,
                      std::shared_ptr<MemoryManager> previous)
      : MemoryManager(context),
        adapter_(std::move(adapter)),
        name_(std::move(name)),
        host_(std::make_shared<DirectMemoryManager>(context)),
        previous_(std::move(previous)) {}

  PythonMemoryManager(const PythonMemoryManager&) = delete;
  PythonMemoryManager& operator=(const PythonMemoryManager&) = delete;

  ~PythonMemoryManager() override {
    if (python_callable_here()) {
      const GilAcquire gil;
      const py::error_scope pending;
      for (auto& entry : live_) drop(entry.second);
      live_.clear();
      drop(adapter_);
      return;
    }
    // Without Python the references cannot be dropped: left to the process's end.
    for (auto& entry : live_) entry.second.release();
    adapter_.release();
  }

  [[nodiscard]] std::string_view name() const noexcept override { return name_; }

  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& /*stream*/) override {
    if (!python_callable_here()) {
      throw Error(
          fmt::format("memory manager '{}': cannot allocate {} bytes: the Python "
                      "interpreter is exiting",
                      name_, bytes));
    }
    const GilAcquire gil;
    const py::error_scope pending;  // an exception being raised by the caller stays as it was
    if (detached_) {
      throw Error(
          fmt::format("memory manager '{}': cannot allocate {} bytes: detached at the "
                      "interpreter's exit",
                      name_, bytes));
    }
    std::uintptr_t address = 0;
    try {
      const auto answer = call_allocate(adapter_, bytes).cast<py::tuple>();
      address = answer[0].cast<std::uintptr_t>();
      py::object keep = answer[1];
      // A second block at a live address would mean the plugin handed the same memory out
      // twice: refused, since its free would then release memory an array still uses.
      if (!live_.emplace(address, std::move(keep)).second) {
        throw Error(fmt::format(
            "memory manager '{}': memalloc({}) returned address {:#x}, which it already handed "
            "out and devmem has not freed",
            name_, bytes, address));
      }
    } catch (py::error_already_set& error) {
      throw_python_error(error, bytes);
    }
    return reinterpret_cast<void*>(address);  // NOLINT(performance-no-int-to-ptr)
  }

  void deallocate(void* ptr, std::size_t bytes, const Stream& /*stream*/) override {
    if (!python_callable_here()) return;  // exiting: see python_callable_here
    const GilAcquire gil;
    const py::error_scope pending;  // as in allocate; the finalizer runs with no error set
    if (detached_) return;          // left to the process's end (forget_live_blocks)
    const auto it = live_.find(reinterpret_cast<std::uintptr_t>(ptr));
    if (it == live_.end()) {
      throw Error(
          fmt::format("memory manager '{}': free of {} ({} bytes), which it did not "
                      "allocate ({} live blocks)",
                      name_, ptr, bytes, live_.size()));
    }
    // Erased before the last reference goes: dropping it runs the plugin's finalizer, which may
    // call devmem and so reach this manager again.
    py::object keep = std::move(it->second);
    live_.erase(it);
    drop(keep);  // a finalizer's own exception is printed by Python (weakref.finalize)
  }

  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override {
    return host_->host_allocate(bytes, flags);
  }

  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override {
    host_->host_deallocate(ptr, bytes, flags);
  }

  [[nodiscard]] MemoryInfo memory_info() const override {
    if (python_callable_here()) {
      const GilAcquire gil;
      const py::error_scope pending;
      if (!detached_) {
        try {
          const py::object answer = call_memory_info(adapter_);
          if (!answer.is_none()) {
            const auto pair = answer.cast<py::tuple>();
            return {pair[0].cast<std::int64_t>(), pair[1].cast<std::int64_t>()};
          }
        } catch (py::error_already_set& error) {
          throw_python_error(error, 0);
        }
      }
    }
    return host_->memory_info();  // the plugin has no answer (NotImplementedError)
  }

  /// Drops the Python references of the blocks devmem still holds, leaving the memory to the
  /// process's end; later frees of those blocks are ignored (the exit hook).
  void forget_live_blocks() {
    for (auto& entry : live_) entry.second.release();
    live_.clear();
    detached_ = true;
  }

  [[nodiscard]] const py::object& adapter() const noexcept { return adapter_; }
  [[nodiscard]] const std::shared_ptr<MemoryManager>& previous() const noexcept {
    return previous_;
  }
  [[nodiscard]] std::size_t live_blocks() const noexcept { return live_.size(); }

 private:
  /// The adapter's exception as devmem's: a MemoryError becomes OutOfMemory, so that devmem
  /// flushes its deferred frees and asks once more (as for its own managers); anything else
  /// travels as the Python exception itself and is raised again unchanged (the adapter has put
  /// the plugin, the call and its values into the message).
  [[noreturn]] static void throw_python_error(py::error_already_set& error, std::size_t bytes) {
    if (error.matches(PyExc_MemoryError)) {
      throw OutOfMemory(py::str(error.value()).cast<std::string>(),
                        static_cast<std::int64_t>(bytes));
    }
    throw PythonException(error.value(), error.what());
  }

  py::object adapter_;
  std::string name_;
  std::shared_ptr<MemoryManager> host_;
  std::shared_ptr<MemoryManager> previous_;
  // Address -> what keeps the plugin's block (its MemoryPointer): dropped to free it.
  std::unordered_map<std::uintptr_t, py::object> live_;
  bool detached_ = false;
};

std::shared_ptr<PythonMemoryManager> current_python_manager(const Context& context) {
  return std::dynamic_pointer_cast<PythonMemoryManager>(context.memory_manager());
}

/// Installs `adapter` as the current context's manager. Called with the GIL held throughout:
/// set_memory_manager asks the new manager's memory_info, which takes the GIL again.
void install(const py::object& adapter, const std::string& name) {
  const std::shared_ptr<Context> context = current_context();
  std::shared_ptr<MemoryManager> previous = context->memory_manager();
  // Replacing one plugin by another restores, at exit, what was there before either.
  if (const auto* python = dynamic_cast<const PythonMemoryManager*>(previous.get())) {
    previous = python->previous();
  }
  auto manager = std::make_shared<PythonMemoryManager>(*context, adapter, name, previous);
  context->set_memory_manager(manager);
  auto& managers = python_managers();
  std::erase_if(managers, [](const auto& weak) { return weak.expired(); });
  managers.push_back(manager);
}

/// At interpreter exit (devmem/_emm.py registers it with atexit): every context whose manager is
/// a plugin frees its deferred queue into it and gets its earlier manager back; blocks that live
/// arrays still hold are left to the process's end, so no plugin code runs after this.
void detach_all() {
  for (const auto& weak : python_managers()) {
    const std::shared_ptr<PythonMemoryManager> manager = weak.lock();
    if (!manager) continue;
    Context& context = manager->context();
    if (context.memory_manager() == manager) {
      context.flush_deallocations();
      context.set_memory_manager(manager->previous());
    }
    manager->forget_live_blocks();
  }
  python_managers().clear();
}

}  // namespace

void bind_python_memory_manager(py::module_& m) {
  m.def("_install_python_memory_manager", &install, py::arg("adapter"), py::arg("name"),
        "Makes the adapter of a Python plugin (devmem/_emm.py) the current context's manager.");
  m.def(
      "_python_memory_manager",
      []() -> py::object {
        const auto manager = current_python_manager(*current_context());
        return manager ? manager->adapter() : py::none();
      },
      "The adapter of the current context's Python plugin, or None.");
  m.def(
      "_python_memory_manager_live_blocks",
      []() -> py::object {
        const auto manager = current_python_manager(*current_context());
        if (!manager) return py::none();
        return py::int_(manager->live_blocks());
      },
      "Blocks of the current context's plugin that devmem has not freed yet (None: no plugin).");
  m.def("_detach_python_memory_managers", &detach_all);
}

}  // namespace devmem::python

// Streams, events, devices, memory managers and the host-memory scopes (pinned, mapped, page-locked
// registrations) of the Python module: Numba's `cuda.stream()`, `cuda.event()`, `cuda.gpus`,
// `cuda.defer_cleanup()`, `cuda.pinned()` and `cuda.mapped()` over devmem.

#include "bindings.hpp"
#include "conversions.hpp"

#include <fmt/format.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devmem::python {

namespace {

/// `with stream.auto_synchronize():` — synchronizes at exit, on the error path too (where a
/// failing synchronize is reported as a warning instead of hiding the block's own exception).
class AutoSynchronizeContext {
 public:
  explicit AutoSynchronizeContext(Stream stream) : stream_(std::move(stream)) {}
  [[nodiscard]] Stream enter() const { return stream_; }
  void exit(const py::object& type) const {
    try {
      without_gil([&] { stream_.synchronize(); });
    } catch (const std::exception& error) {
      if (type.is_none()) throw;
      PyErr_WarnEx(PyExc_RuntimeWarning,
                   fmt::format("auto_synchronize: synchronizing the stream while leaving the "
                               "block by an exception failed: {}",
                               error.what())
                       .c_str(),
                   1);
    }
  }

 private:
  Stream stream_;
};

/// `with devmem.defer_cleanup():` — nestable, also when one object is entered twice.
class DeferCleanupContext {
 public:
  void enter() { scopes_.push_back(current_context()->defer_cleanup()); }
  void exit() {
    if (scopes_.empty()) throw py::value_error("defer_cleanup: __exit__ without __enter__");
    without_gil([&] { scopes_.pop_back(); });
  }

 private:
  std::vector<DeferCleanup> scopes_;
};

/// A device as Numba's `cuda.gpus[i]` shows it; `with device:` makes it current for the block.
class DeviceHandle {
 public:
  explicit DeviceHandle(DeviceInfo info) : info_(std::move(info)) {}
  [[nodiscard]] int id() const noexcept { return info_.id; }
  [[nodiscard]] const std::string& name() const noexcept { return info_.name; }
  /// Numba's (major, minor) from a CUDA architecture "sm_90" / "sm_100a"; None for a device
  /// without one (the host backend's "host", ROC's "gfx90a").
  [[nodiscard]] py::object compute_capability() const {
    const std::string& arch = info_.properties.architecture;
    if (arch.rfind("sm_", 0) != 0) return py::none();
    std::string digits;
    for (std::size_t i = 3; i < arch.size() && arch[i] >= '0' && arch[i] <= '9'; ++i) {
      digits += arch[i];
    }
    if (digits.size() < 2) return py::none();
    return py::make_tuple(std::stoi(digits.substr(0, digits.size() - 1)),
                          std::stoi(digits.substr(digits.size() - 1)));
  }
  [[nodiscard]] py::dict properties() const {
    const DeviceProperties& p = info_.properties;
    py::dict out;
    out["name"] = p.name;
    out["architecture"] = p.architecture;
    out["total_memory"] = p.total_memory;
    out["warp_size"] = p.warp_size;
    out["max_threads_per_block"] = p.max_threads_per_block;
    out["max_shared_memory_per_block"] = p.max_shared_memory_per_block;
    out["max_block_dim"] =
        py::make_tuple(p.max_block_dim[0], p.max_block_dim[1], p.max_block_dim[2]);
    out["max_grid_dim"] = py::make_tuple(p.max_grid_dim[0], p.max_grid_dim[1], p.max_grid_dim[2]);
    out["multiprocessor_count"] = p.multiprocessor_count;
    out["can_map_host_memory"] = p.can_map_host_memory;
    out["unified_addressing"] = p.unified_addressing;
    return out;
  }
  void enter() { scopes_.push_back(std::make_unique<DeviceScope>(info_.id)); }
  void exit() {
    if (scopes_.empty()) throw py::value_error("device: __exit__ without __enter__");
    scopes_.pop_back();
  }

 private:
  DeviceInfo info_;
  std::vector<std::unique_ptr<DeviceScope>> scopes_;
};

std::vector<HostArray> host_views(const py::args& arrays, const char* operation) {
  std::vector<HostArray> views;
  views.reserve(arrays.size());
  for (const py::handle item : arrays) {
    if (!py::isinstance<py::array>(item)) {
      throw py::type_error(fmt::format("{}: expected NumPy arrays, got {}", operation,
                                       py::repr(py::type::of(item)).cast<std::string>()));
    }
    const auto array = py::reinterpret_borrow<py::array>(item);
    views.push_back(host_view(array, array.writeable()));
  }
  return views;
}

/// What `with devmem.pinned(...)` and `with devmem.mapped(...)` share: the arrays, the scope open
/// for the block, and its end at exit, right away (never through the deallocation queue, so the
/// memory can be pinned or mapped again at once), without the GIL.
template <class Scope>
class HostMemoryBlock {
 public:
  void exit() {
    if (!scope_) return;
    without_gil([&] { scope_->close(); });
    scope_.reset();
  }

 protected:
  HostMemoryBlock(std::vector<HostArray> arrays, const char* what)
      : arrays_(std::move(arrays)), what_(what) {}
  /// Opens the block's scope with `open(arrays)`; ValueError when it is open already.
  template <class Open>
  Scope& open(Open open) {
    if (scope_) throw py::value_error(fmt::format("{}: the block is already entered", what_));
    scope_.emplace(without_gil([&] { return open(arrays_); }));
    return *scope_;
  }

 private:
  std::vector<HostArray> arrays_;
  const char* what_;
  std::optional<Scope> scope_;
};

/// `with devmem.pinned(a, b):` — page-locks the arrays' memory for the block.
class PinnedContext : public HostMemoryBlock<PinnedScope> {
 public:
  explicit PinnedContext(std::vector<HostArray> arrays)
      : HostMemoryBlock(std::move(arrays), "pinned") {}
  void enter() {
    open([](const std::vector<HostArray>& arrays) { return pinned(arrays); });
  }
};

/// `with devmem.mapped(a, b, stream=s) as (da, db):` — maps the arrays into the device address
/// space for the block and gives their device views (one array: the view itself).
class MappedContext : public HostMemoryBlock<MappedScope> {
 public:
  MappedContext(std::vector<HostArray> arrays, py::list dtypes, Stream stream)
      : HostMemoryBlock(std::move(arrays), "mapped"),
        dtypes_(std::move(dtypes)),
        stream_(std::move(stream)) {}
  py::object enter() {
    const MappedScope& scope = open([&](const std::vector<HostArray>& arrays) {
      return mapped(arrays, MapOptions{stream_, false, false});
    });
    py::list views;
    for (std::size_t i = 0; i < scope.size(); ++i) {
      views.append(py::cast(DeviceNDArray{scope[i], dtypes_[i].cast<py::dtype>()}));
    }
    if (views.size() == 1) return views[0];
    return views;
  }

 private:
  py::list dtypes_;
  Stream stream_;
};

/// Page-locked (and optionally device-mapped) registration of existing host memory given by
/// address, as Numba's memory-manager plugins need for `mempin`: released by close(), at the end
/// of a `with` block or when the object is collected, whichever comes first.
class HostRegistration {
 public:
  HostRegistration(std::uintptr_t pointer, std::int64_t size, bool map) : mapped_(map) {
    if (pointer == 0) throw py::value_error("HostRegistration: null pointer");
    if (size <= 0) {
      throw py::value_error(fmt::format("HostRegistration: size must be positive, got {}", size));
    }
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the address comes from Python as an integer
    auto* const base = reinterpret_cast<void*>(pointer);
    std::vector<HostArray> views{HostArray::view(base, Shape{size}, dtype_of<std::uint8_t>())};
    if (map) {
      mapping_.emplace(without_gil([&] { return mapped(std::move(views)); }));
      device_pointer_ = reinterpret_cast<std::uintptr_t>((*mapping_)[0].data());
    } else {
      pins_.emplace(without_gil([&] { return pinned(std::move(views)); }));
    }
  }
  [[nodiscard]] bool is_mapped() const noexcept { return mapped_; }
  [[nodiscard]] bool is_open() const noexcept { return mapping_.has_value() || pins_.has_value(); }
  [[nodiscard]] std::uintptr_t device_pointer() const {
    if (!mapped_) {
      throw py::value_error("HostRegistration: device_pointer needs mapped=True");
    }
    return device_pointer_;
  }
  void close() {
    without_gil([&] {
      if (mapping_) mapping_->close();
      if (pins_) pins_->close();
    });
    mapping_.reset();
    pins_.reset();
  }

 private:
  bool mapped_;
  std::uintptr_t device_pointer_ = 0;
  std::optional<MappedScope> mapping_;
  std::optional<PinnedScope> pins_;
};

/// A dict of named counters (the statistics structs as Python sees them).
py::dict counters(std::initializer_list<std::pair<const char*, std::int64_t>> fields) {
  py::dict out;
  for (const auto& [name, value] : fields) out[name] = value;
  return out;
}

/// Whether an Event object times: False for one made by event(timing=False) (Numba's
/// CU_EVENT_DISABLE_TIMING), kept in the instance's dict.
bool event_times(const py::object& event) {
  const py::object flag = py::getattr(event, "__dict__").attr("get")("_devmem_timing", true);
  return flag.cast<bool>();
}

/// Milliseconds between two events (Numba's event_elapsed_time): InvalidArgument when either was
/// made with timing=False, as CUDA refuses to time such events.
float elapsed_between(const py::object& start, const py::object& end) {
  for (const py::object* e : {&start, &end}) {
    if (!py::isinstance<Event>(*e)) {
      throw py::type_error(fmt::format("elapsed_time: expected devmem.Event objects, got {}",
                                       py::repr(py::type::of(*e)).cast<std::string>()));
    }
    if (!event_times(*e)) {
      throw InvalidArgument(
          "elapsed_time: an event made with event(timing=False) records no timing");
    }
  }
  return elapsed_ms(start.cast<const Event&>(), end.cast<const Event&>());
}

/// devmem.event(timing): a new Event; timing=False is kept in its dict (event_times).
py::object make_event(bool timing) {
  py::object event = py::cast(Event());
  if (!timing) event.attr("_devmem_timing") = false;
  return event;
}

py::object memory_info_type() {
  static const py::handle type =
      py::module_::import("collections")
          .attr("namedtuple")("MemoryInfo", py::make_tuple("free", "total"))
          .release();
  return py::reinterpret_borrow<py::object>(type);
}

// Managed memory (docs/managed-memory.md): devmem.managed_array and ManagedNDArray over these.
py::tuple make_managed_array(const py::object& shape, const py::object& dtype,
                             const py::object& strides, const py::object& order,
                             const py::object& stream, bool attach_global,
                             bool allow_oversubscription) {
  AllocationArguments args = allocation_arguments(shape, dtype, strides, order);
  ManagedArrayOptions options;
  options.strides = std::move(args.strides);
  options.order = args.order;
  options.stream = to_stream(stream);
  options.attach_global = attach_global;
  options.allow_oversubscription = allow_oversubscription;
  const ManagedArray managed =
      without_gil([&] { return managed_array(std::move(args.shape), args.element, options); });
  return py::make_tuple(
      to_numpy(managed.host(), args.dtype),
      DeviceNDArray{managed, args.dtype, py::isinstance<Stream>(stream) ? stream : py::object()});
}

/// "host", "device" (the array's device) or a device index.
MemoryLocation prefetch_target(const DeviceNDArray& d, const py::object& to) {
  if (!py::isinstance<py::str>(to)) return MemoryLocation::on_device(to.cast<int>());
  const auto name = to.cast<std::string>();
  if (name == "host") return MemoryLocation::host();
  if (name == "device") return MemoryLocation::on_device(d.array.context()->device());
  throw InvalidArgument(
      fmt::format("prefetch: to must be 'device', 'host' or a device index, not '{}'", name));
}

MemoryAdvice advice_named(const std::string& advice) {
  static const std::pair<const char*, MemoryAdvice> kAdvice[] = {
      {"read_mostly", MemoryAdvice::ReadMostly},
      {"unset_read_mostly", MemoryAdvice::UnsetReadMostly},
      {"preferred_location", MemoryAdvice::PreferredLocation},
      {"unset_preferred_location", MemoryAdvice::UnsetPreferredLocation},
      {"accessed_by", MemoryAdvice::AccessedBy},
      {"unset_accessed_by", MemoryAdvice::UnsetAccessedBy}};
  const auto* found = std::find_if(std::begin(kAdvice), std::end(kAdvice),
                                   [&](const auto& entry) { return advice == entry.first; });
  if (found == std::end(kAdvice)) {
    throw InvalidArgument(fmt::format(
        "advise: unknown advice '{}' (read_mostly, unset_read_mostly, preferred_location, "
        "unset_preferred_location, accessed_by, unset_accessed_by)",
        advice));
  }
  return found->second;
}

void managed_advise(const DeviceNDArray& d, const std::string& advice, const py::object& location) {
  const MemoryAdvice what = advice_named(advice);
  std::optional<MemoryLocation> where;
  if (py::isinstance<py::str>(location) && location.cast<std::string>() == "host") {
    where = MemoryLocation::host();
  } else if (!location.is_none()) {
    where = MemoryLocation::on_device(location.cast<int>());
  }
  without_gil([&] { advise(d.array, what, where); });
}

/// summarize_trace's result as the dict devmem.summarize_trace returns.
py::dict summary_dict(const TraceSummary& s) {
  py::list peaks;
  for (const auto& p : s.peaks) {
    peaks.append(py::dict(py::arg("device") = p.device, py::arg("peak_bytes") = p.peak_bytes,
                          py::arg("at_seconds") = p.at_seconds));
  }
  py::list sites;
  for (const auto& site : s.top_sites) {
    sites.append(py::dict(py::arg("operation") = site.operation, py::arg("manager") = site.manager,
                          py::arg("count") = site.count, py::arg("bytes") = site.bytes,
                          py::arg("call_site") = site.call_site));
  }
  py::dict transfers;
  for (const auto& t : s.transfers) {
    transfers[py::str(t.direction)] = py::dict(
        py::arg("count") = t.count, py::arg("bytes") = t.bytes, py::arg("seconds") = t.seconds);
  }
  py::list deferred;
  for (const auto& d : s.longest_deferred) {
    deferred.append(py::dict(py::arg("address") = d.address, py::arg("bytes") = d.bytes,
                             py::arg("deferred_seconds") = d.deferred_seconds));
  }
  return py::dict(
      py::arg("events") = s.events, py::arg("duration_seconds") = s.duration_seconds,
      py::arg("peaks") = peaks, py::arg("top_sites") = sites, py::arg("transfers") = transfers,
      py::arg("synchronizations") = s.synchronizations,
      py::arg("synchronize_seconds") = s.synchronize_seconds, py::arg("flushes") = s.flushes,
      py::arg("longest_deferred") = deferred, py::arg("pool_hits") = s.pool_hits,
      py::arg("pool_misses") = s.pool_misses, py::arg("launches") = s.launches);
}

void bind_managed_and_trace(py::module_& m) {
  m.def("_managed_array", &make_managed_array);
  m.def("_managed_prefetch",
        [](const DeviceNDArray& d, const py::object& to, const py::object& stream) {
          const MemoryLocation location = prefetch_target(d, to);
          const Stream s = to_stream(stream);
          without_gil([&] { prefetch(d.array, location, s); });
        });
  m.def("_managed_advise", &managed_advise);

  // The memory timeline (docs/trace.md): devmem.trace(path) is the context manager over these.
  py::class_<TraceSession>(m, "_TraceSession")
      .def("stop", [](TraceSession& session) { without_gil([&] { session.stop(); }); })
      .def_property_readonly("events", &TraceSession::events)
      .def_property_readonly("path",
                             [](const TraceSession& session) { return session.path().string(); });
  m.def(
      "_trace_to",
      [](const std::string& path, bool call_sites) {
        return std::make_unique<TraceSession>(
            trace_to(path, TraceOptions{.call_sites = call_sites}));
      },
      py::arg("path"), py::arg("call_sites") = false);
  m.def("tracing", &tracing,
        "Whether a memory timeline (devmem.trace, DEVMEM_TRACE) is written now.");
  m.def(
      "summarize_trace",
      [](const std::string& path) {
        return summary_dict(without_gil([&] { return summarize_trace(path); }));
      },
      py::arg("path"),
      "Reads a trace devmem wrote and summarizes it (what `devmem trace summarize` prints).");
}

}  // namespace

void bind_runtime(py::module_& m) {
  py::class_<Stream>(m, "Stream", "A device command queue (Numba's cuda.stream()).")
      .def(
          "synchronize",
          [](const Stream& s) {
            without_gil([&] { s.synchronize(); });
            release_queued_python_objects();
          },
          "Waits until every operation queued on the stream is done.")
      .def("query", &Stream::query, "True when every queued operation is done.")
      .def(
          "record",
          [](const Stream& s, const py::object& event) -> py::object {
            if (!event.is_none()) {
              event.cast<Event&>().record(s);
              return event;
            }
            return py::cast(s.record());
          },
          py::arg("event") = py::none(), "Records `event` (a new one if None) and returns it.")
      .def("wait_event", &Stream::wait, py::arg("event"),
           "Makes later work on the stream wait for `event`.")
      .def(
          "auto_synchronize",
          [](const Stream& s) { return std::make_unique<AutoSynchronizeContext>(s); },
          "A context manager that synchronizes the stream at exit.")
      .def_property_readonly(
          "handle",
          [](const Stream& s) { return reinterpret_cast<std::uintptr_t>(s.native_handle()); },
          "The vendor stream handle as an integer (0 for the default stream).")
      .def("__int__",
           [](const Stream& s) { return reinterpret_cast<std::uintptr_t>(s.native_handle()); })
      .def_property_readonly("is_default", &Stream::is_default)
      .def_property_readonly("is_external", &Stream::is_external,
                             "True when devmem wraps a stream it does not own (external_stream).")
      .def(
          "__cuda_stream__",
          [](const Stream& s) {
            return py::make_tuple(0, reinterpret_cast<std::uintptr_t>(s.native_handle()));
          },
          "The CUDA stream protocol: (0, the vendor stream handle).")
      // Another type is NotImplemented, so that Python falls back to identity: `stream == 0`
      // and `stream in (0, None)` are False, `stream != None` is True (Numba's code compares
      // streams with 0).
      .def("__eq__",
           [](const Stream& a, const py::object& b) -> py::object {
             if (!py::isinstance<Stream>(b))
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(a == b.cast<const Stream&>());
           })
      .def("__ne__",
           [](const Stream& a, const py::object& b) -> py::object {
             if (!py::isinstance<Stream>(b))
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(!(a == b.cast<const Stream&>()));
           })
      .def(
          "__hash__",
          [](const Stream& s) {
            return std::hash<std::uintptr_t>()(reinterpret_cast<std::uintptr_t>(s.native_handle()));
          })
      .def("__repr__", [](const Stream& s) {
        if (s.is_default()) return std::string("<devmem default stream>");
        return fmt::format("<devmem stream {:#x}>",
                           reinterpret_cast<std::uintptr_t>(s.native_handle()));
      });

  py::class_<AutoSynchronizeContext>(m, "_AutoSynchronize")
      .def("__enter__", &AutoSynchronizeContext::enter)
      .def("__exit__",
           [](const AutoSynchronizeContext& c, const py::object& type, const py::object& /*value*/,
              const py::object& /*traceback*/) { c.exit(type); });

  py::class_<Event>(m, "Event", py::dynamic_attr(), "A marker in a stream (Numba's cuda.event()).")
      .def_property_readonly("timing", &event_times,
                             "False for an event made by event(timing=False): it records no "
                             "timing, and elapsed_time with it is InvalidArgument.")
      .def(
          "record", [](Event& e, const py::object& stream) { e.record(to_stream(stream)); },
          py::arg("stream") = 0, "Records the event in `stream` (0: the default stream).")
      .def("synchronize", [](const Event& e) { without_gil([&] { e.synchronize(); }); })
      .def("query", &Event::query)
      .def(
          "wait",
          [](const Event& e, const py::object& stream) {
            const Stream s = to_stream(stream);
            (s.is_specified() ? s : default_stream()).wait(e);
          },
          py::arg("stream") = 0, "Makes later work on `stream` wait for this event.")
      .def("elapsed_time", &elapsed_between, py::arg("end"),
           "Milliseconds between this event and `end`, both recorded and done.");

  m.def(
      "stream", [] { return stream(); }, "A new stream.");
  m.def(
      "default_stream", [] { return default_stream(); }, "The current device's default stream.");
  m.def("external_stream", &external_stream, py::arg("stream"), py::arg("device") = py::none(),
        "Wraps a stream devmem did not create (Numba's cuda.external_stream): an integer handle "
        "(cudaStream_t/hipStream_t) or an object with __cuda_stream__ (torch.cuda.Stream, "
        "cupy.cuda.Stream), on `device` (None: the current device). devmem never destroys it; "
        "its owner keeps it alive while devmem uses it. DeviceNDArray.record_use(stream) then "
        "keeps memory from reuse until that stream's work is done.");
  m.def("event", &make_event, py::arg("timing") = true,
        "A new event; with timing=False it records no timing (elapsed_time refuses it).");
  m.def("event_elapsed_time", &elapsed_between, py::arg("evtstart"), py::arg("evtend"));
  m.def(
      "synchronize",
      [] {
        without_gil([] { synchronize(); });
        release_queued_python_objects();
      },
      "Waits for all work on the current device.");

  py::class_<DeferCleanupContext>(m, "_DeferCleanup")
      .def("__enter__", &DeferCleanupContext::enter)
      .def("__exit__", [](DeferCleanupContext& c, const py::args& /*exc*/) { c.exit(); });
  m.def(
      "defer_cleanup", [] { return std::make_unique<DeferCleanupContext>(); },
      "A context manager during which no device memory is freed (nestable).");

  py::class_<DeviceHandle>(m, "Device", "A device; `with device:` makes it current for the block.")
      .def_property_readonly("id", &DeviceHandle::id)
      .def_property_readonly("name", &DeviceHandle::name)
      .def_property_readonly("properties", &DeviceHandle::properties)
      .def_property_readonly("compute_capability", &DeviceHandle::compute_capability,
                             "(major, minor) on CUDA devices, as Numba; None on the host and ROC "
                             "backends (see properties['architecture']).")
      .def("__enter__",
           [](py::object self) {
             self.cast<DeviceHandle&>().enter();
             return self;
           })
      .def("__exit__", [](DeviceHandle& d, const py::args& /*exc*/) { d.exit(); })
      .def("__repr__", [](const DeviceHandle& d) {
        return fmt::format("<devmem Device {} '{}' ({})>", d.id(), d.name(), backend_name());
      });
  m.def("_list_devices", [] {
    py::list out;
    for (DeviceInfo& info : gpus())
      out.append(py::cast(std::make_unique<DeviceHandle>(std::move(info))));
    return out;
  });
  m.def(
      "get_current_device",
      [] { return std::make_unique<DeviceHandle>(devmem::get_current_device()); },
      "The current device.");
  m.def(
      "select_device",
      [](int index) {
        select_device(index);
        return std::make_unique<DeviceHandle>(devmem::get_current_device());
      },
      py::arg("device_id"), "Makes device `device_id` current for this thread and returns it.");
  m.def("device_count", &device_count);
  m.def(
      "backend_name", [] { return backend_name(); }, "The active backend: host, cuda or roc.");
  m.def("compiled_backends", &compiled_backends);

  m.def(
      "memory_info",
      [] {
        const MemoryInfo info = current_context()->memory_info();
        return memory_info_type()(info.free, info.total);
      },
      "MemoryInfo(free, total) of the current device, in bytes.");
  m.def(
      "set_memory_manager",
      [](const std::string& name) {
        without_gil([&] { set_memory_manager(make_memory_manager(name)); });
      },
      py::arg("name"), "Selects the current context's memory manager: direct, pool or async.");
  m.def("memory_manager_name",
        [] { return std::string(current_context()->memory_manager()->name()); });
  m.def(
      "pool_statistics",
      [] {
        py::dict out;
        const auto pool =
            std::dynamic_pointer_cast<PoolMemoryManager>(current_context()->memory_manager());
        if (!pool) return out;
        const PoolStatistics s = pool->statistics();
        return counters({{"hits", s.hits},
                         {"misses", s.misses},
                         {"cached_bytes", s.cached_bytes},
                         {"cached_blocks", s.cached_blocks},
                         {"cached_host_bytes", s.cached_host_bytes},
                         {"backend_bytes", s.backend_bytes},
                         {"trims", s.trims}});
      },
      "The pool manager's counters (an empty dict under another manager).");
  m.def("flush_deallocations", [] {
    without_gil([] { current_context()->flush_deallocations(); });
    release_queued_python_objects();
  });
  m.def("pending_deallocations", [] { return current_context()->pending_deallocations(); });
  m.def("_trim_memory_manager", [] {
    without_gil([] { current_context()->memory_manager()->trim(); });
    release_queued_python_objects();
  });
  m.def(
      "device_statistics",
      [] {
        const MemoryStatistics s = current_context()->device_statistics();
        return counters({{"current_bytes", s.current_bytes},
                         {"peak_bytes", s.peak_bytes},
                         {"total_bytes", s.total_bytes},
                         {"current_count", s.current_count},
                         {"peak_count", s.peak_count},
                         {"total_count", s.total_count}});
      },
      "Counters of the current device's allocations (bytes and counts: current, peak, total).");

  py::class_<PinnedContext>(m, "_Pinned")
      .def("__enter__", [](PinnedContext& c) { c.enter(); })
      .def("__exit__", [](PinnedContext& c, const py::args& /*exc*/) { c.exit(); });
  m.def(
      "pinned",
      [](const py::args& arrays) {
        return std::make_unique<PinnedContext>(host_views(arrays, "pinned"));
      },
      "A context manager page-locking the NumPy arrays' memory for the block.");

  py::class_<MappedContext>(m, "_Mapped")
      .def("__enter__", &MappedContext::enter)
      .def("__exit__", [](MappedContext& c, const py::args& /*exc*/) { c.exit(); });
  m.def(
      "mapped",
      [](const py::args& arrays, const py::kwargs& options) {
        Stream stream;
        for (const auto& [key, value] : options) {
          if (key.cast<std::string>() != "stream") {
            throw py::type_error(fmt::format(
                "mapped: unknown keyword argument '{}' (only 'stream')", key.cast<std::string>()));
          }
          stream = to_stream(value);
        }
        py::list dtypes;
        for (const py::handle item : arrays) {
          if (py::isinstance<py::array>(item)) dtypes.append(item.attr("dtype"));
        }
        return std::make_unique<MappedContext>(host_views(arrays, "mapped"), dtypes, stream);
      },
      "A context manager mapping the NumPy arrays into the device address space for the block; "
      "gives their device views.");

  py::class_<HostRegistration>(m, "HostRegistration",
                               "Page-locked (optionally mapped) existing host memory, by address.")
      .def(py::init<std::uintptr_t, std::int64_t, bool>(), py::arg("pointer"), py::arg("size"),
           py::arg("mapped") = false)
      .def_property_readonly("mapped", &HostRegistration::is_mapped)
      .def_property_readonly("is_open", &HostRegistration::is_open)
      .def_property_readonly("device_pointer", &HostRegistration::device_pointer)
      .def("close", &HostRegistration::close, "Unregisters now (idempotent).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](HostRegistration& r, const py::args& /*exc*/) { r.close(); });

  m.def(
      "pinned_array",
      [](const py::object& shape, const py::object& dtype, const py::object& strides,
         const py::object& order) {
        AllocationArguments args = allocation_arguments(shape, dtype, strides, order);
        HostArray host = without_gil([&] {
          return pinned_array(std::move(args.shape), args.element, std::move(args.strides),
                              args.order);
        });
        return to_numpy(host, args.dtype);
      },
      py::arg("shape"), py::arg("dtype") = py::dtype("float64"), py::arg("strides") = py::none(),
      py::arg("order") = "C", "A NumPy array in page-locked host memory.");

  m.def("_mapped_array", [](const py::object& shape, const py::object& dtype,
                            const py::object& strides, const py::object& order,
                            const py::object& stream, bool portable, bool wc) {
    AllocationArguments args = allocation_arguments(shape, dtype, strides, order);
    const Stream s = to_stream(stream);
    const MappedArray host = without_gil([&] {
      return mapped_array(std::move(args.shape), args.element,
                          {.strides = std::move(args.strides),
                           .order = args.order,
                           .stream = s,
                           .portable = portable,
                           .wc = wc});
    });
    return py::make_tuple(to_numpy(host, args.dtype), DeviceNDArray{host.device(), args.dtype});
  });

  bind_managed_and_trace(m);
}

}  // namespace devmem::python

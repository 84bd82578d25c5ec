// Contexts: their creation, the path by which their memory is obtained and returned (through
// their parts), the public Context, and the table of the current device's contexts. The parts of
// a context with their own files: the deallocation queue (deallocation_queue.hpp), the keep-alives
// of asynchronous work (keep_alive.hpp), and streams and events (stream.cpp).
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/copy_engine.hpp"
#include "core/report_error.hpp"
#include "core/stream_state.hpp"
#include "core/trace.hpp"

#include <devmem/byte_size.hpp>

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

namespace devmem {
namespace detail {

void report_error(std::string_view what) noexcept {
  try {
    fmt::print(stderr, "devmem: error: {}\n", what);
    std::fflush(stderr);
  } catch (...) {
    std::fputs("devmem: error (message could not be formatted)\n", stderr);
  }
}

// ---- ContextState ----

namespace {

// Environment knobs are read when a context is created; a bad value is an error at first use.
DeallocationConfig config_from_environment() {
  DeallocationConfig config;
  if (const char* count = std::getenv("DEVMEM_MAX_PENDING_DEALLOCS_COUNT")) {
    const std::string_view text(count);
    std::int64_t value = -1;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
      throw InvalidArgument(fmt::format(
          "DEVMEM_MAX_PENDING_DEALLOCS_COUNT: invalid value '{}' (expected a non-negative integer)",
          text));
    }
    config.max_pending_count = value;
  }
  if (const char* ratio = std::getenv("DEVMEM_MAX_PENDING_DEALLOCS_RATIO")) {
    const std::string text(ratio);
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || errno != 0 || end != text.c_str() + text.size() || !(value >= 0.0) ||
        value > 1.0) {
      throw InvalidArgument(fmt::format(
          "DEVMEM_MAX_PENDING_DEALLOCS_RATIO: invalid value '{}' (expected a number from 0 to 1)",
          text));
    }
    config.max_pending_ratio = value;
  }
  return config;
}

}  // namespace

std::shared_ptr<Context> ContextState::create(Backend& backend, int device) {
  std::shared_ptr<Context> ctx(new Context(backend, device));
  ContextState& st = detail::ContextState::of(*ctx);
  st.weak_self = ctx;
  // Everything that can throw comes before the default stream, which holds the context: a
  // failure then leaves no cycle behind.
  st.deallocations.set_initial_config(config_from_environment());
  const char* name = std::getenv("DEVMEM_MEMORY_MANAGER");
  const bool named = name != nullptr && *name != '\0';
  try {
    st.deallocations.set_manager(make_memory_manager(named ? name : "direct", *ctx));
  } catch (const InvalidArgument& e) {
    // Only the variable's own errors (an unknown name, a factory returning null) get its name:
    // the factory also queries the device, whose errors (an invalid DEVMEM_HOST_DEVICE_MEMORY)
    // name their own cause and would be misattributed.
    if (!named || std::string_view(e.what()).rfind("make_memory_manager:", 0) != 0) throw;
    throw InvalidArgument(fmt::format("DEVMEM_MEMORY_MANAGER: {}", e.what()));
  }
  st.default_stream = std::make_shared<StreamState>(ctx, nullptr, true);
  return ctx;
}

void ContextState::track_stream(const std::shared_ptr<StreamState>& stream) {
  std::lock_guard lock(streams_mutex_);
  std::erase_if(streams_, [](const auto& w) { return w.expired(); });
  streams_.push_back(stream);
}

std::vector<std::shared_ptr<StreamState>> ContextState::live_streams() {
  std::lock_guard lock(streams_mutex_);
  std::vector<std::shared_ptr<StreamState>> out;
  for (const auto& w : streams_) {
    if (auto s = w.lock()) out.push_back(std::move(s));
  }
  return out;
}

void order_after_allocation(const StreamState& use, const DeviceMemory& memory) {
  DeviceMemory::StreamOrder* const order = memory.stream_order.get();
  if (order == nullptr || order->complete.load(std::memory_order_acquire)) return;
  if (use.handle == order->stream) return;  // the stream it was allocated on
  Context& ctx = *memory.context;
  if (ctx.backend().query_event(ctx.device(), order->allocated->handle)) {
    order->complete.store(true, std::memory_order_release);
    return;
  }
  // A capturing stream cannot wait for an event recorded outside its capture (the capture would
  // be invalidated): the host waits for the allocation instead, once.
  if (!use.is_default && ctx.backend().is_capturing(ctx.device(), use.handle)) {
    ctx.backend().synchronize_event(ctx.device(), order->allocated->handle);
    order->complete.store(true, std::memory_order_release);
    return;
  }
  ctx.backend().stream_wait_event(ctx.device(), use.handle, order->allocated->handle);
}

std::shared_ptr<DeviceMemory> ContextState::allocate_device(
    std::int64_t bytes, const std::shared_ptr<StreamState>& stream, const char* operation,
    std::shared_ptr<MemoryManager> manager) {
  auto memory = std::make_shared<DeviceMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  if (bytes == 0) return memory;
  in_flight.collect_retired();
  DeallocationQueue::Allocation allocation = deallocations.allocate_device(
      bytes, StreamState::wrap(stream), operation, std::move(manager));
  memory->ptr = static_cast<std::byte*>(allocation.ptr);
  memory->owned = true;
  memory->manager = std::move(allocation.manager);
  memory->stream = stream;
  if (!stream->is_default && memory->manager->allocates_in_stream_order()) {
    // Valid in `stream`'s order only: an event after the allocation orders devmem's uses on other
    // streams (order_after_allocation). The legacy default stream orders every blocking stream.
    try {
      auto order = std::make_unique<DeviceMemory::StreamOrder>();
      order->stream = stream->handle;
      order->allocated = pooled_event();
      backend().record_event(device(), order->allocated->handle, stream->handle);
      memory->stream_order = std::move(order);
    } catch (...) {
      // The memory goes back through ~DeviceMemory (the deferred queue) before the error leaves.
      memory.reset();
      throw;
    }
  }
  device_counters.add(bytes);
  track_device_memory(memory);
  if (trace::active()) {
    const std::string site = trace::call_sites() ? trace::call_site() : std::string();
    trace::instant("alloc", "allocate",
                   {{"bytes", bytes},
                    {"operation", std::string_view(operation)},
                    {"manager", memory->manager->name()},
                    {"device", std::int64_t{device()}},
                    {"stream", static_cast<const void*>(stream->handle)},
                    {"address", static_cast<const void*>(memory->ptr)},
                    {"site", std::string_view(site)}});
    trace::device_memory(device(), device_counters.snapshot().current_bytes);
  }
  return memory;
}

std::shared_ptr<HostMemory> ContextState::allocate_host(std::int64_t bytes, HostAllocFlags flags,
                                                        const char* operation) {
  auto memory = std::make_shared<HostMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  memory->alloc_flags = flags;
  memory->kind =
      has_flag(flags, HostAllocFlags::Mapped) ? HostMemoryKind::Mapped : HostMemoryKind::Pinned;
  if (bytes == 0) return memory;
  in_flight.collect_retired();
  DeallocationQueue::Allocation allocation = deallocations.allocate_host(bytes, flags, operation);
  void* ptr = allocation.ptr;
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->owned = true;
  memory->manager = std::move(allocation.manager);
  host_counters.add(bytes);
  if (trace::active()) {
    const std::string site = trace::call_sites() ? trace::call_site() : std::string();
    trace::instant(
        "alloc", "allocate host",
        {{"bytes", bytes},
         {"operation", std::string_view(operation)},
         {"manager", memory->manager->name()},
         {"device", std::int64_t{device()}},
         {"kind", std::string_view(memory->kind == HostMemoryKind::Mapped ? "mapped" : "pinned")},
         {"address", static_cast<const void*>(ptr)},
         {"site", std::string_view(site)}});
  }
  // Page-locked memory from the vendor (or a pool) is not guaranteed to be zeroed; devmem's host
  // arrays are. Write-combined memory is left alone: reading it back would be very slow and the
  // caller asked for memory to write.
  if (!has_flag(flags, HostAllocFlags::WriteCombined)) {
    std::memset(ptr, 0, static_cast<std::size_t>(bytes));
  }
  if (memory->kind == HostMemoryKind::Mapped) {
    memory->device_ptr = static_cast<std::byte*>(backend().mapped_device_pointer(device(), ptr));
  }
  return memory;
}

void ContextState::release(const std::shared_ptr<MemoryManager>& manager, void* ptr,
                           std::int64_t bytes, bool host, HostAllocFlags flags,
                           const std::weak_ptr<StreamState>& stream) noexcept {
  (host ? host_counters : device_counters).remove(bytes);
  // Guarded here: the snapshot (six atomic loads) is not taken on every free when not tracing.
  if (!host && trace::active()) {
    trace::device_memory(device(), device_counters.snapshot().current_bytes);
  }
  deallocations.release(manager, ptr, bytes, host, flags, stream);
}

const DeviceProperties& ContextState::properties() {
  std::call_once(properties_once_, [this] { properties_ = backend().properties(device()); });
  return properties_;
}

}  // namespace detail

// ---- Context ----

Context::Context(Backend& backend, int device)
    : backend_(&backend), device_(device), state_(std::make_unique<detail::ContextState>(*this)) {}

Context::~Context() = default;

// Read once per context (the device cannot change): launches and copies ask for it often.
DeviceProperties Context::properties() const {
  return state_->properties();
}

const DeviceProperties& Context::device_properties() const {
  return state_->properties();
}

// The manager's answer, as Numba's Context.get_memory_info (an EMM plugin's numbers; the pool's
// cached blocks count as free).
MemoryInfo Context::memory_info() const {
  return state_->deallocations.manager()->memory_info();
}
Stream Context::default_stream() const {
  return detail::StreamState::wrap(state_->default_stream);
}

std::shared_ptr<MemoryManager> Context::memory_manager() const {
  return state_->deallocations.manager();
}

void Context::set_memory_manager(std::shared_ptr<MemoryManager> manager) {
  state_->deallocations.set_manager(std::move(manager));
}

void Context::flush_deallocations() {
  state_->in_flight.collect_retired();
  state_->deallocations.flush(false);
}

std::size_t Context::operations_in_flight() const {
  return state_->in_flight.pending_uses();
}

std::size_t Context::pending_deallocations() const {
  return state_->deallocations.size();
}

std::int64_t Context::pending_deallocation_bytes() const {
  return state_->deallocations.bytes();
}

DeallocationConfig Context::deallocation_config() const {
  return state_->deallocations.config();
}

void Context::set_deallocation_config(const DeallocationConfig& config) {
  state_->deallocations.set_config(config);
}

DeferCleanup Context::defer_cleanup() {
  return DeferCleanup(state_->shared());
}

MemoryStatistics Context::device_statistics() const {
  return state_->device_counters.snapshot();
}
MemoryStatistics Context::host_statistics() const {
  return state_->host_counters.snapshot();
}

std::vector<std::string> Context::take_deallocation_errors() {
  return state_->deallocations.take_errors();
}

void Context::synchronize() {
  const auto start = detail::trace::start_time();
  const std::vector<std::shared_ptr<detail::StreamState>> streams = state_->live_streams();
  std::vector<NativeStream> handles;
  handles.reserve(streams.size());
  for (const auto& s : streams) handles.push_back(s->handle);
  const std::uint64_t mark = state_->in_flight.seal(handles);
  backend_->synchronize_stream(device_, nullptr);
  for (const NativeStream handle : handles) backend_->synchronize_stream(device_, handle);
  state_->in_flight.release_through(handles, mark);
  state_->in_flight.collect_retired();
  detail::trace::complete("sync", "Context::synchronize", start,
                          {{"device", std::int64_t{device_}},
                           {"streams", static_cast<std::int64_t>(handles.size() + 1)}});
}

namespace {

// -1 until the thread's first use: then the runtime's current device of the thread (review 2, N9;
// the application may have chosen it with cudaSetDevice before calling devmem).
thread_local int g_current_device = -1;

int thread_device() noexcept {
  if (g_current_device < 0) {
    try {
      g_current_device = active_backend().runtime_current_device();
    } catch (...) {  // no backend can be made: device 0, whose use then reports why
      g_current_device = 0;
    }
  }
  return g_current_device;
}

struct ContextTable {
  std::mutex mutex;
  Backend* backend = nullptr;
  std::vector<std::shared_ptr<Context>> contexts;
};

ContextTable& context_table() {
  // Contexts live until the process exits, like CUDA's primary contexts: arrays held by static
  // objects may be released during exit and still need theirs.
  static auto* table = new ContextTable;
  return *table;
}

/// Registered with std::atexit when the first context is made, which is after the vendor
/// runtime's census (and so after the GPU layer's ProcessExit handler and the runtime's own
/// teardown): exit handlers run in reverse order, so this one runs while the runtime is still
/// alive. It frees what devmem itself still holds, the deferred-free queue and the memory managers'
/// caches, so that a program that dropped its arrays ends with nothing of devmem's outstanding
/// (compute-sanitizer's leak check counted every queued and cached block as a leak on an H100).
/// What the application still holds, in static objects, is left to their destructors.
void release_devmem_memory_at_exit() noexcept {
  ContextTable& table = context_table();
  // Another thread inside the table at exit: leave everything to the process's end.
  const std::unique_lock lock(table.mutex, std::try_to_lock);
  if (!lock.owns_lock() || table.backend == nullptr) return;
  if (table.backend->exiting() || table.backend->device_lost()) return;
  detail::release_idle_peer_staging();
  for (const std::shared_ptr<Context>& context : table.contexts) {
    if (!context) continue;
    try {
      // What asynchronous work still holds (a stream's last operations wait for their completion
      // event until the stream is synchronized: keep_alive.hpp) is waited for and let go first,
      // so that the flush frees it (the GPU proof's leak check saw it held at exit).
      try {
        detail::ContextState::of(*context).in_flight.release_all_after_waiting();
      } catch (const std::exception&) {
        // Best effort: a runtime torn down before this handler (HIP-CPU's) answers every call
        // with "deinitialized", and the work it had goes with the process; the flush below still
        // frees what it can.
      }
      context->flush_deallocations();
      context->memory_manager()->trim();
    } catch (const std::exception& error) {
      // Nothing can be done about it this late; the process's end frees the memory anyway.
      std::fprintf(stderr, "devmem: warning: releasing device %d's memory at exit: %s\n",
                   context->device(), error.what());
    }
    // The recycled events too; events that static objects drop later are destroyed at once.
    detail::ContextState::of(*context).events.close();
  }
  table.backend->release_idle_buffers();
}

}  // namespace

int device_count() {
  return active_backend().device_count();
}

void select_device(int index) {
  Backend& backend = active_backend();
  const int n = backend.device_count();
  if (index < 0 || index >= n) {
    throw NoDevice(
        fmt::format("select_device: device {} does not exist (backend '{}' has {} device{})", index,
                    backend.name(), n, n == 1 ? "" : "s"));
  }
  // The runtime's current device too, so that the application's own vendor calls (a kernel of its
  // own, a raw cudaMalloc) follow the selection, as after Numba's select_device. Every other
  // devmem call leaves the runtime's device as it found it (review 2, N9).
  backend.make_current(index);
  g_current_device = index;
}

int current_device() noexcept {
  return thread_device();
}

std::shared_ptr<Context> context_for_device(int index) {
  Backend& backend = active_backend();
  ContextTable& table = context_table();
  std::lock_guard lock(table.mutex);
  if (table.contexts.empty()) {
    const int n = backend.device_count();
    if (n == 0) {
      const std::string reason = backend.no_device_reason();
      throw NoDevice(fmt::format("backend '{}' has no device{}{}", backend.name(),
                                 reason.empty() ? "" : ": ", reason));
    }
    table.backend = &backend;
    table.contexts.resize(static_cast<std::size_t>(n));
    // Before the exit handler below, so that the trace is completed after it (exit handlers run
    // in reverse order) and shows the exit's own flush.
    detail::trace::start_from_environment();
    static_cast<void>(std::atexit(&release_devmem_memory_at_exit));
  }
  if (index < 0 || static_cast<std::size_t>(index) >= table.contexts.size()) {
    throw NoDevice(fmt::format("device {} does not exist (backend '{}' has {} device{})", index,
                               backend.name(), table.contexts.size(),
                               table.contexts.size() == 1 ? "" : "s"));
  }
  auto& slot = table.contexts[static_cast<std::size_t>(index)];
  if (!slot) slot = detail::ContextState::create(backend, index);
  return slot;
}

// ---- Several devices (docs/scaling-out.md#several-devices) ----

namespace {

/// NoDevice unless `index` is a device of `backend`, naming `operation`.
void require_device_index(Backend& backend, const char* operation, int index) {
  const int n = backend.device_count();
  if (index < 0 || index >= n) {
    throw NoDevice(fmt::format("{}: device {} does not exist (backend '{}' has {} device{})",
                               operation, index, backend.name(), n, n == 1 ? "" : "s"));
  }
}

DeviceInfo describe_device(int index) {
  DeviceInfo info;
  info.id = index;
  info.properties = context_for_device(index)->properties();
  info.name = info.properties.name;
  return info;
}

}  // namespace

bool Context::can_access_peer(int peer) const {
  require_device_index(*backend_, "can_access_peer", peer);
  return backend_->can_access_peer(device_, peer);
}

void Context::enable_peer_access(int peer) const {
  require_device_index(*backend_, "enable_peer_access", peer);
  backend_->enable_peer_access(device_, peer);
}

void Context::disable_peer_access(int peer) const {
  require_device_index(*backend_, "disable_peer_access", peer);
  detail::forget_peer_access(*backend_, device_, peer);
  backend_->disable_peer_access(device_, peer);
}

void release_cached_buffers() {
  detail::release_idle_peer_staging();
  std::vector<std::shared_ptr<Context>> contexts;
  {
    ContextTable& table = context_table();
    const std::lock_guard lock(table.mutex);
    contexts = table.contexts;
  }
  // Outside the table's lock: destroying events calls the backend.
  for (const std::shared_ptr<Context>& context : contexts) {
    if (context) detail::ContextState::of(*context).events.release_all();
  }
  active_backend().release_idle_buffers();
}

std::vector<DeviceInfo> gpus() {
  const int n = device_count();
  std::vector<DeviceInfo> result;
  result.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) result.push_back(describe_device(i));
  return result;
}

DeviceInfo get_current_device() {
  return describe_device(current_context()->device());
}

DeviceScope::DeviceScope(int device) : device_(device), previous_(thread_device()) {
  select_device(device);
}

DeviceScope::~DeviceScope() {
  // The previous device was valid when it was selected and the device count never changes, so
  // devmem's side cannot fail; the runtime's may (a lost device, a runtime torn down at exit),
  // and a destructor has no one to tell: the next call on the thread reports such a state.
  g_current_device = previous_;
  try {
    active_backend().make_current(previous_);
  } catch (...) {  // see above
  }
}

DeviceScope device_scope(int device) {
  return DeviceScope(device);
}

std::shared_ptr<Context> current_context() {
  // Contexts live until exit, so a per-thread copy of the pointer stays valid: the hot path
  // (every allocation without a stream) then takes no lock.
  thread_local std::shared_ptr<Context> cached;
  const int device = thread_device();
  if (cached && cached->device() == device) return cached;
  cached = context_for_device(device);
  return cached;
}

}  // namespace devmem

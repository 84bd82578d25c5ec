// Contexts and the keep-alive mechanism for asynchronous work. Streams and events are in
// stream.cpp.
#include "core/internal.hpp"

#include <devmem/byte_size.hpp>

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
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

std::int64_t byte_limit(const DeallocationConfig& config, MemoryManager& manager) {
  const auto total = static_cast<double>(manager.memory_info().total);
  return static_cast<std::int64_t>(total * config.max_pending_ratio);
}

}  // namespace

template <class Allocate>
void* ContextState::allocate_with_retry(Allocate&& allocate, const char* operation,
                                        std::int64_t bytes, const char* what) {
  try {
    return allocate();
  } catch (const OutOfMemory&) {
    // Numba's rule: free what is pending, then try exactly once more.
    flush(true);
    try {
      return allocate();
    } catch (const OutOfMemory& e) {
      MemoryInfo info{};
      try {
        info = manager()->memory_info();
      } catch (...) {  // the size and the vendor's error still make a useful message
      }
      throw OutOfMemory(
          fmt::format("{}: out of {} allocating {} bytes ({}) on device {} ({} free of {}, after "
                      "flushing pending deallocations): {}",
                      operation, what, bytes, format_bytes(bytes), device(),
                      format_bytes(info.free), format_bytes(info.total), e.what()),
          bytes);
    }
  }
}

std::shared_ptr<Context> ContextState::create(Backend& backend, int device) {
  std::shared_ptr<Context> ctx(new Context(backend, device));
  ContextState& st = detail::ContextState::of(*ctx);
  st.weak_self = ctx;
  // Everything that can throw comes before the default stream, which holds the context: a
  // failure then leaves no cycle behind.
  st.config = config_from_environment();
  const char* name = std::getenv("DEVMEM_MEMORY_MANAGER");
  const bool named = name != nullptr && *name != '\0';
  try {
    st.set_manager(make_memory_manager(named ? name : "direct", *ctx));
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

std::shared_ptr<MemoryManager> ContextState::manager() const {
  std::lock_guard lock(queue_mutex);
  return current_manager;
}

void ContextState::set_manager(std::shared_ptr<MemoryManager> manager) {
  if (!manager) throw InvalidArgument("set_memory_manager: the manager is null");
  if (&manager->context() != &self) {
    throw InvalidArgument(
        fmt::format("set_memory_manager: manager '{}' was made for device {}, not for device {}",
                    manager->name(), manager->context().device(), device()));
  }
  if (manager->interface_version() != MemoryManager::kInterfaceVersion) {
    throw InvalidArgument(fmt::format(
        "set_memory_manager: memory manager '{}' has interface version {} - version {} required",
        manager->name(), manager->interface_version(), MemoryManager::kInterfaceVersion));
  }
  const std::int64_t limit = byte_limit(config, *manager);
  std::lock_guard lock(queue_mutex);
  current_manager = std::move(manager);
  max_pending_bytes = limit;
}

void ContextState::set_config(const DeallocationConfig& new_config) {
  if (new_config.max_pending_count < 0) {
    throw InvalidArgument(
        fmt::format("set_deallocation_config: max_pending_count must not be negative, got {}",
                    new_config.max_pending_count));
  }
  if (!(new_config.max_pending_ratio >= 0.0 && new_config.max_pending_ratio <= 1.0)) {
    throw InvalidArgument(
        fmt::format("set_deallocation_config: max_pending_ratio must be from 0 to 1, got {}",
                    new_config.max_pending_ratio));
  }
  const std::int64_t limit = byte_limit(new_config, *manager());
  std::lock_guard lock(queue_mutex);
  config = new_config;
  max_pending_bytes = limit;
}

std::shared_ptr<DeviceMemory> ContextState::allocate_device(
    std::int64_t bytes, const std::shared_ptr<StreamState>& stream, const char* operation) {
  auto memory = std::make_shared<DeviceMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  if (bytes == 0) return memory;
  collect_retired();
  auto mgr = manager();
  const auto size = static_cast<std::size_t>(bytes);
  const Stream on = StreamState::wrap(stream);
  void* ptr = allocate_with_retry([&] { return mgr->allocate(size, on); }, operation, bytes,
                                  "device memory");
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->owned = true;
  memory->manager = std::move(mgr);
  memory->stream = stream;
  device_counters.add(bytes);
  track_device_memory(memory);
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
  collect_retired();
  auto mgr = manager();
  const auto size = static_cast<std::size_t>(bytes);
  void* ptr = allocate_with_retry([&] { return mgr->host_allocate(size, flags); }, operation, bytes,
                                  "page-locked host memory");
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->owned = true;
  memory->manager = std::move(mgr);
  host_counters.add(bytes);
  // Page-locked memory from the vendor (or a pool) is not guaranteed to be zeroed; devmem's host
  // arrays are. Write-combined memory is left alone: reading it back would be very slow and the
  // caller asked for memory to write.
  if (!has_flag(flags, HostAllocFlags::WriteCombined)) {
    std::memset(ptr, 0, size);
  }
  if (memory->kind == HostMemoryKind::Mapped) {
    memory->device_ptr = static_cast<std::byte*>(backend().mapped_device_pointer(device(), ptr));
  }
  return memory;
}

Stream ContextState::deallocation_stream(const std::weak_ptr<StreamState>& stream) const noexcept {
  if (auto alive = stream.lock()) return StreamState::wrap(std::move(alive));
  return StreamState::wrap(default_stream);
}

void ContextState::release(const std::shared_ptr<MemoryManager>& manager, void* ptr,
                           std::int64_t bytes, bool host, HostAllocFlags flags,
                           const std::weak_ptr<StreamState>& stream) noexcept {
  (host ? host_counters : device_counters).remove(bytes);
  bool over_limit = false;
  try {
    std::lock_guard lock(queue_mutex);
    queue.push_back(Pending{manager, ptr, bytes, host, flags, stream});
    queue_bytes += bytes;
    // Strict comparisons, as Numba: with the default count of 10 the 11th item flushes.
    over_limit = static_cast<std::int64_t>(queue.size()) > config.max_pending_count ||
                 queue_bytes > max_pending_bytes;
  } catch (const std::exception& e) {
    // Only push_back can fail (no memory for the queue node): free right away instead.
    report_error(fmt::format("queueing a deallocation of {} failed ({}); freeing it now",
                             static_cast<void*>(ptr), e.what()));
    try {
      if (host) {
        manager->host_deallocate(ptr, static_cast<std::size_t>(bytes), flags);
      } else {
        manager->deallocate(ptr, static_cast<std::size_t>(bytes), deallocation_stream(stream));
      }
    } catch (const std::exception& e2) {
      report_error(fmt::format("freeing {}: {}", static_cast<void*>(ptr), e2.what()));
    }
    return;
  }
  if (over_limit) flush(true);
}

void ContextState::flush(bool implicit) {
  std::deque<Pending> batch;
  {
    std::lock_guard lock(queue_mutex);
    if (defer_depth > 0) return;
    batch.swap(queue);
    queue_bytes = 0;
  }
  for (auto it = batch.begin(); it != batch.end(); ++it) {
    try {
      if (it->host) {
        it->manager->host_deallocate(it->ptr, static_cast<std::size_t>(it->bytes), it->flags);
      } else {
        it->manager->deallocate(it->ptr, static_cast<std::size_t>(it->bytes),
                                deallocation_stream(it->stream));
      }
    } catch (const std::exception& e) {
      // The failed item is dropped: its state is unknown and freeing it twice would be worse.
      // Everything after it goes back to the front of the queue for the next flush.
      const std::string message = fmt::format(
          "freeing {} of {} ({} bytes) failed; {} later deallocation(s) stay queued: {}",
          it->host ? "page-locked host memory" : "device memory", it->ptr, it->bytes,
          std::distance(std::next(it), batch.end()), e.what());
      {
        std::lock_guard lock(queue_mutex);
        for (auto rest = batch.rbegin(); rest.base() != std::next(it); ++rest) {
          queue_bytes += rest->bytes;
          queue.push_front(std::move(*rest));
        }
        if (implicit) errors.push_back(message);
      }
      if (implicit) {
        report_error(message);
        return;
      }
      // Same exception type, with the pointer and the queue state in the message.
      if (const auto* backend_error = dynamic_cast<const BackendError*>(&e)) {
        throw BackendError(backend_error->backend(), backend_error->function(),
                           backend_error->code(), backend_error->code_name(), message);
      }
      throw Error(message);
    }
  }
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

namespace {
// Completed operations are collected on the next allocation or synchronisation; a long run of
// copies without either also collects, once this many operations are pending, so that the pending
// list (and the memory it holds) stays bounded.
constexpr std::size_t kCollectWhenPending = 64;
// Idle completion events kept for reuse; more are destroyed.
constexpr std::size_t kIdleEventLimit = 64;
}  // namespace

NativeEvent ContextState::take_event() {
  {
    std::lock_guard lock(uses_mutex_);
    if (!idle_events_.empty()) {
      NativeEvent event = idle_events_.back();
      idle_events_.pop_back();
      return event;
    }
  }
  return backend().create_completion_event(device());
}

void ContextState::retire_after(StreamState& stream,
                                std::vector<std::shared_ptr<const void>> objects,
                                std::vector<HostSpan> host_spans) {
  if (objects.empty()) return;
  const auto hold_for_context = [&] {
    std::lock_guard lock(uses_mutex_);
    for (auto& object : objects) held_for_graphs_.push_back(std::move(object));
  };
  NativeEvent event = nullptr;
  try {
    if (backend().is_capturing(device(), stream.handle)) {
      hold_for_context();
      return;
    }
    event = take_event();
    backend().record_event(device(), event, stream.handle);
  } catch (...) {
    if (event != nullptr) {
      try {
        backend().destroy_event(device(), event);
      } catch (const std::exception& e) {
        report_error(fmt::format("destroying completion event {}: {}", event, e.what()));
      }
    }
    // The work is already enqueued: the objects may go only once it has run. Wait for it; if even
    // that fails, keep them until the context goes (a leak is better than a device fault).
    try {
      backend().synchronize_stream(device(), stream.handle);
    } catch (const std::exception& e) {
      report_error(fmt::format(
          "waiting for {} after its completion event failed ({}); its memory stays held",
          stream.handle, e.what()));
      hold_for_context();
    }
    throw;
  }
  std::size_t pending = 0;
  {
    std::lock_guard lock(uses_mutex_);
    pending_.push_back(PendingUse{stream.handle, event, std::move(objects), std::move(host_spans)});
    pending = pending_.size();
    pending_count_.store(pending, std::memory_order_release);
  }
  if (pending >= kCollectWhenPending) collect_retired();
}

void ContextState::collect_retired() noexcept {
  if (pending_count_.load(std::memory_order_acquire) == 0) return;
  std::vector<std::vector<std::shared_ptr<const void>>> done;
  std::vector<NativeEvent> surplus;
  std::string failure;
  {
    std::lock_guard lock(uses_mutex_);
    // Operations of one stream complete in order: after the first unfinished one of a stream, the
    // later ones of that stream are not asked about.
    std::vector<NativeStream> unfinished;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (std::find(unfinished.begin(), unfinished.end(), it->stream) != unfinished.end()) {
        ++it;
        continue;
      }
      bool complete = false;
      try {
        complete = backend().query_event(device(), it->event);
      } catch (const std::exception& e) {
        // Held, not released: freeing memory that a failed device may still touch is worse than
        // keeping it. Reported once per context.
        if (!query_failure_reported_) {
          query_failure_reported_ = true;
          failure = fmt::format(
              "asking whether asynchronous work has completed failed; its memory stays held: {}",
              e.what());
        }
      }
      if (!complete) {
        unfinished.push_back(it->stream);
        ++it;
        continue;
      }
      done.push_back(std::move(it->objects));
      if (idle_events_.size() < kIdleEventLimit) {
        idle_events_.push_back(it->event);
      } else {
        surplus.push_back(it->event);
      }
      it = pending_.erase(it);
    }
    pending_count_.store(pending_.size(), std::memory_order_release);
  }
  if (!failure.empty()) report_error(failure);
  for (NativeEvent event : surplus) {
    try {
      backend().destroy_event(device(), event);
    } catch (const std::exception& e) {
      report_error(fmt::format("destroying completion event {}: {}", event, e.what()));
    }
  }
  // `done` is destroyed here, on the calling (user) thread, outside the lock: releasing memory
  // may call back into this context.
}

void ContextState::wait_for_host_uses(std::span<const HostSpan> spans,
                                      std::span<const void* const> objects) {
  std::vector<NativeEvent> waits;
  {
    std::lock_guard lock(uses_mutex_);
    for (const PendingUse& use : pending_) {
      const bool touches_span =
          std::any_of(use.host_spans.begin(), use.host_spans.end(), [&](const HostSpan& used) {
            return std::any_of(spans.begin(), spans.end(),
                               [&](const HostSpan& span) { return used.overlaps(span); });
          });
      const bool holds_object =
          std::any_of(use.objects.begin(), use.objects.end(), [&](const auto& held) {
            return std::find(objects.begin(), objects.end(), held.get()) != objects.end();
          });
      if (touches_span || holds_object) waits.push_back(use.event);
    }
  }
  // An event may be collected and recorded again by another thread meanwhile: waiting for its
  // newer work then waits longer than needed, never less.
  for (NativeEvent event : waits) backend().synchronize_event(device(), event);
  collect_retired();
}

std::size_t ContextState::pending_uses() const {
  std::lock_guard lock(uses_mutex_);
  return pending_.size();
}

ContextState::~ContextState() {
  // Contexts live as long as anything made on them (arrays and streams hold them), so the events
  // left here belong to work that has been waited for or is abandoned at exit.
  std::vector<NativeEvent> events = std::move(idle_events_);
  for (PendingUse& use : pending_) events.push_back(use.event);
  for (NativeEvent event : events) {
    try {
      self.backend().destroy_event(self.device(), event);
    } catch (const std::exception& e) {
      report_error(fmt::format("destroying completion event {}: {}", event, e.what()));
    }
  }
}

const DeviceProperties& ContextState::properties() {
  std::call_once(properties_once_, [this] { properties_ = backend().properties(device()); });
  return properties_;
}

void finish_enqueued(StreamState& stream, std::vector<std::shared_ptr<const void>> keep_alive,
                     std::vector<HostSpan> host_spans) {
  Context& ctx = *stream.context;
  if (stream.is_default) {
    ctx.backend().synchronize_stream(ctx.device(), nullptr);
    detail::ContextState::of(ctx).collect_retired();
    return;
  }
  detail::ContextState::of(ctx).retire_after(stream, std::move(keep_alive), std::move(host_spans));
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
// The manager's answer, as Numba's Context.get_memory_info (an EMM plugin's numbers; the pool's
// cached blocks count as free).
MemoryInfo Context::memory_info() const {
  return state_->manager()->memory_info();
}
Stream Context::default_stream() const {
  return detail::StreamState::wrap(state_->default_stream);
}

std::shared_ptr<MemoryManager> Context::memory_manager() const {
  return state_->manager();
}

void Context::set_memory_manager(std::shared_ptr<MemoryManager> manager) {
  state_->set_manager(std::move(manager));
}

void Context::flush_deallocations() {
  state_->collect_retired();
  state_->flush(false);
}

std::size_t Context::operations_in_flight() const {
  return state_->pending_uses();
}

std::size_t Context::pending_deallocations() const {
  std::lock_guard lock(state_->queue_mutex);
  return state_->queue.size();
}

std::int64_t Context::pending_deallocation_bytes() const {
  std::lock_guard lock(state_->queue_mutex);
  return state_->queue_bytes;
}

DeallocationConfig Context::deallocation_config() const {
  std::lock_guard lock(state_->queue_mutex);
  return state_->config;
}

void Context::set_deallocation_config(const DeallocationConfig& config) {
  state_->set_config(config);
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
  std::lock_guard lock(state_->queue_mutex);
  return std::exchange(state_->errors, {});
}

void Context::synchronize() {
  backend_->synchronize_stream(device_, nullptr);
  for (const auto& s : state_->live_streams()) backend_->synchronize_stream(device_, s->handle);
  state_->collect_retired();
}

namespace {

thread_local int g_current_device = 0;

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
  g_current_device = index;
}

int current_device() noexcept {
  return g_current_device;
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

std::shared_ptr<Context> current_context() {
  // Contexts live until exit, so a per-thread copy of the pointer stays valid: the hot path
  // (every allocation without a stream) then takes no lock.
  thread_local std::shared_ptr<Context> cached;
  if (cached && cached->device() == g_current_device) return cached;
  cached = context_for_device(g_current_device);
  return cached;
}

}  // namespace devmem

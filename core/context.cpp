// Contexts, streams, events and the keep-alive mechanism for asynchronous work.
#include "core/internal.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <cstdio>
#include <exception>

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

std::shared_ptr<Context> ContextState::create(Backend& backend, int device) {
  std::shared_ptr<Context> ctx(new Context(backend, device));
  ContextState& st = ctx->state();
  st.weak_self = ctx;
  st.default_stream = std::make_shared<StreamState>(ctx, nullptr, true);
  return ctx;
}

std::shared_ptr<DeviceMemory> ContextState::allocate_device(std::int64_t bytes,
                                                            const char* operation) {
  auto memory = std::make_shared<DeviceMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  if (bytes == 0) return memory;
  collect_retired();
  try {
    memory->ptr = static_cast<std::byte*>(backend().allocate(device(), static_cast<std::size_t>(bytes)));
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(fmt::format("{}: {}", operation, e.what()), bytes);
  }
  memory->owned = true;
  return memory;
}

void ContextState::release_device(void* ptr) noexcept {
  try {
    backend().deallocate(device(), ptr);
  } catch (const std::exception& e) {
    report_error(fmt::format("freeing device memory at {}: {}", ptr, e.what()));
  }
}

std::shared_ptr<HostMemory> ContextState::allocate_host(std::int64_t bytes, HostAllocFlags flags,
                                                        const char* operation) {
  auto memory = std::make_shared<HostMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  memory->kind =
      has_flag(flags, HostAllocFlags::Mapped) ? HostMemoryKind::Mapped : HostMemoryKind::Pinned;
  if (bytes == 0) return memory;
  collect_retired();
  void* ptr = nullptr;
  try {
    ptr = backend().host_allocate(device(), static_cast<std::size_t>(bytes), flags);
  } catch (const OutOfMemory& e) {
    throw OutOfMemory(fmt::format("{}: {}", operation, e.what()), bytes);
  }
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->owned = true;
  // Pinned memory from the vendor is not guaranteed to be zeroed; devmem's host arrays are.
  if (!has_flag(flags, HostAllocFlags::WriteCombined)) std::memset(ptr, 0, static_cast<std::size_t>(bytes));
  if (memory->kind == HostMemoryKind::Mapped) {
    memory->device_ptr = static_cast<std::byte*>(backend().mapped_device_pointer(device(), ptr));
  }
  return memory;
}

void ContextState::release_host(void* ptr) noexcept {
  try {
    backend().host_deallocate(device(), ptr);
  } catch (const std::exception& e) {
    report_error(fmt::format("freeing pinned host memory at {}: {}", ptr, e.what()));
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

void ContextState::retire_after(StreamState& stream,
                                std::vector<std::shared_ptr<const void>> objects) {
  if (objects.empty()) return;
  // The bundle moves from the host function into retired_; the closure itself ends up empty, so
  // whatever thread destroys it releases nothing.
  auto bundle = std::make_shared<std::vector<std::shared_ptr<const void>>>(std::move(objects));
  backend().launch_host_function(device(), stream.handle, [this, bundle]() mutable {
    std::lock_guard lock(retired_mutex_);
    retired_.push_back(std::move(bundle));
    has_retired_.store(true, std::memory_order_release);
  });
}

void ContextState::collect_retired() noexcept {
  if (!has_retired_.load(std::memory_order_acquire)) return;
  std::vector<std::shared_ptr<const void>> done;
  {
    std::lock_guard lock(retired_mutex_);
    done.swap(retired_);
    has_retired_.store(false, std::memory_order_release);
  }
  // `done` is destroyed here, on the calling (user) thread.
}

// ---- StreamState / EventState ----

StreamState::~StreamState() {
  if (is_default || handle == nullptr) return;
  try {
    context->backend().destroy_stream(context->device(), handle);
  } catch (const std::exception& e) {
    report_error(fmt::format("destroying stream {}: {}", handle, e.what()));
  }
  context->state().collect_retired();
}

EventState::~EventState() {
  try {
    context->backend().destroy_event(context->device(), handle);
  } catch (const std::exception& e) {
    report_error(fmt::format("destroying event {}: {}", handle, e.what()));
  }
}

StreamState& resolve_stream(const Stream& requested, const Stream& fallback, Context& context,
                            const char* operation) {
  const auto& chosen = requested.is_specified() ? StreamState::of(requested)
                                                : StreamState::of(fallback);
  if (!chosen) return *context.state().default_stream;
  if (chosen->context.get() != &context) {
    throw InvalidArgument(fmt::format(
        "{}: the stream belongs to device {} of backend '{}' but the array is on device {} of "
        "backend '{}'",
        operation, chosen->context->device(), chosen->context->backend_name(), context.device(),
        context.backend_name()));
  }
  return *chosen;
}

void finish_enqueued(StreamState& stream, std::vector<std::shared_ptr<const void>> keep_alive) {
  Context& ctx = *stream.context;
  if (stream.is_default) {
    ctx.backend().synchronize_stream(ctx.device(), nullptr);
    ctx.state().collect_retired();
    return;
  }
  ctx.state().retire_after(stream, std::move(keep_alive));
}

}  // namespace detail

// ---- Context ----

Context::Context(Backend& backend, int device)
    : backend_(&backend), device_(device), state_(std::make_unique<detail::ContextState>(*this)) {}

Context::~Context() = default;

DeviceProperties Context::properties() const { return backend_->properties(device_); }
MemoryInfo Context::memory_info() const { return backend_->memory_info(device_); }
Stream Context::default_stream() const {
  return detail::StreamState::wrap(state_->default_stream);
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

int device_count() { return active_backend().device_count(); }

void select_device(int index) {
  Backend& backend = active_backend();
  const int n = backend.device_count();
  if (index < 0 || index >= n) {
    throw NoDevice(fmt::format("select_device: device {} does not exist (backend '{}' has {} device{})",
                               index, backend.name(), n, n == 1 ? "" : "s"));
  }
  g_current_device = index;
}

int current_device() noexcept { return g_current_device; }

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

std::shared_ptr<Context> current_context() { return context_for_device(g_current_device); }

// ---- Stream ----

namespace {
// An unspecified stream resolves to the default stream of the current context.
const std::shared_ptr<detail::StreamState>& state_or_default(
    const std::shared_ptr<detail::StreamState>& s, std::shared_ptr<detail::StreamState>& holder) {
  if (s) return s;
  holder = current_context()->state().default_stream;
  return holder;
}
}  // namespace

bool Stream::is_default() const noexcept { return !state_ || state_->is_default; }

std::shared_ptr<Context> Stream::context() const {
  return state_ ? state_->context : current_context();
}

void Stream::synchronize() const {
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  s->context->backend().synchronize_stream(s->context->device(), s->handle);
  s->context->state().collect_retired();
}

bool Stream::query() const {
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  return s->context->backend().query_stream(s->context->device(), s->handle);
}

AutoSynchronize Stream::auto_synchronize() const { return AutoSynchronize(*this); }

Event Stream::record() const {
  Event event = detail::EventState::wrap(std::make_shared<detail::EventState>(
      context(), context()->backend().create_event(context()->device())));
  event.record(*this);
  return event;
}

void Stream::wait(const Event& event) const {
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  const auto& e = detail::EventState::of(event);
  if (e->context != s->context) {
    throw InvalidArgument(fmt::format("Stream::wait: the event belongs to device {} but the stream to device {}",
                                      e->context->device(), s->context->device()));
  }
  s->context->backend().stream_wait_event(s->context->device(), s->handle, e->handle);
}

NativeStream Stream::native_handle() const noexcept { return state_ ? state_->handle : nullptr; }

bool operator==(const Stream& a, const Stream& b) noexcept {
  if (a.state_ == b.state_) return true;
  // An unspecified stream is the default stream of the current context.
  const auto& sa = a.state_;
  const auto& sb = b.state_;
  if (!sa || !sb) {
    const auto& other = sa ? sa : sb;
    if (!other->is_default) return false;
    try {
      return other->context == current_context();
    } catch (...) {
      return false;
    }
  }
  return false;
}

Stream stream() {
  auto ctx = current_context();
  NativeStream handle = ctx->backend().create_stream(ctx->device());
  auto state = std::make_shared<detail::StreamState>(ctx, handle, false);
  ctx->state().track_stream(state);
  return detail::StreamState::wrap(std::move(state));
}

Stream default_stream() { return current_context()->default_stream(); }

// ---- Event ----

Event::Event() {
  auto ctx = current_context();
  state_ = std::make_shared<detail::EventState>(ctx, ctx->backend().create_event(ctx->device()));
}

void Event::record(const Stream& stream) {
  Context& ctx = *state_->context;
  detail::StreamState& s = detail::resolve_stream(stream, Stream{}, ctx, "Event::record");
  ctx.backend().record_event(ctx.device(), state_->handle, s.handle);
}

void Event::synchronize() const {
  state_->context->backend().synchronize_event(state_->context->device(), state_->handle);
  state_->context->state().collect_retired();
}

bool Event::query() const {
  return state_->context->backend().query_event(state_->context->device(), state_->handle);
}

NativeEvent Event::native_handle() const noexcept { return state_->handle; }

float Event::elapsed_ms(const Event& start, const Event& end) {
  if (start.state_->context != end.state_->context) {
    throw InvalidArgument(fmt::format("elapsed_ms: the events belong to devices {} and {}",
                                      start.state_->context->device(),
                                      end.state_->context->device()));
  }
  const Context& ctx = *start.state_->context;
  return ctx.backend().elapsed_ms(ctx.device(), start.state_->handle, end.state_->handle);
}

float elapsed_ms(const Event& start, const Event& end) { return Event::elapsed_ms(start, end); }

// ---- AutoSynchronize ----

AutoSynchronize::AutoSynchronize(Stream stream) noexcept
    : stream_(std::move(stream)), uncaught_at_entry_(std::uncaught_exceptions()), active_(true) {}

AutoSynchronize::AutoSynchronize(AutoSynchronize&& other) noexcept
    : stream_(std::move(other.stream_)),
      uncaught_at_entry_(other.uncaught_at_entry_),
      active_(std::exchange(other.active_, false)) {}

void AutoSynchronize::close() {
  if (!active_) return;
  active_ = false;
  stream_.synchronize();
}

AutoSynchronize::~AutoSynchronize() noexcept(false) {
  if (!active_) return;
  active_ = false;
  if (std::uncaught_exceptions() > uncaught_at_entry_) {
    // Leaving by an exception: still wait for the stream (API.md, stricter item 9), but a second
    // exception would terminate the program, so a failure is reported instead.
    try {
      stream_.synchronize();
    } catch (const std::exception& e) {
      detail::report_error(fmt::format("auto_synchronize during exception unwinding: {}", e.what()));
    }
    return;
  }
  stream_.synchronize();
}

}  // namespace devmem

// Streams and events: the public Stream, Event and AutoSynchronize, and the destruction and
// resolution of their shared states. A file of its own beside context.cpp, which holds the
// contexts (and their deallocation queue and keep-alive retirement) that streams belong to.
#include "core/context_state.hpp"
#include "core/report_error.hpp"
#include "core/stream_state.hpp"
#include "core/trace.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace devmem {
namespace detail {

// ---- StreamState / EventState ----

StreamState::~StreamState() {
  if (is_default || handle == nullptr) return;
  // Its last operations may still wait for a completion event: recorded before the stream goes.
  detail::ContextState::of(*context).in_flight.close_open(handle);
  if (owned) {
    try {
      context->backend().destroy_stream(context->device(), handle);
    } catch (const std::exception& e) {
      report_error(fmt::format("destroying stream {} of device {}: {}", handle, context->device(),
                               e.what()));
    }
  }
  detail::ContextState::of(*context).in_flight.collect_retired();
}

EventState::~EventState() {
  if (pooled) {
    ContextState::of(*context).events.recycle(handle);
    return;
  }
  try {
    context->backend().destroy_event(context->device(), handle);
  } catch (const std::exception& e) {
    report_error(fmt::format("destroying event {}: {}", handle, e.what()));
  }
}

std::shared_ptr<EventState> ContextState::pooled_event() {
  const NativeEvent handle = events.acquire();
  try {
    return std::make_shared<EventState>(shared(), handle, /*from_pool=*/true);
  } catch (...) {
    events.recycle(handle);
    throw;
  }
}

void refuse_default_stream_during_capture(const char* operation, Context& context) {
  if (!context.backend().is_capturing(context.device(), nullptr)) return;
  throw InvalidArgument(fmt::format(
      "{}: cannot use the default stream of device {} during stream capture: a stream of the "
      "device is being captured into a graph, and work on the default stream would join that "
      "capture implicitly and invalidate it; pass the capturing stream (or another devmem "
      "stream) to the call, or end the capture first",
      operation, context.device()));
}

StreamState& resolve_stream(const Stream& requested, const Stream& fallback, Context& context,
                            const char* operation) {
  const auto& chosen =
      requested.is_specified() ? StreamState::of(requested) : StreamState::of(fallback);
  if (!chosen || chosen->is_default) {
    refuse_default_stream_during_capture(operation, context);
    if (!chosen) return *detail::ContextState::of(context).default_stream;
  }
  if (chosen->context.get() != &context) {
    throw InvalidArgument(fmt::format(
        "{}: the stream belongs to device {} of backend '{}' but the array is on device {} of "
        "backend '{}'",
        operation, chosen->context->device(), chosen->context->backend_name(), context.device(),
        context.backend_name()));
  }
  return *chosen;
}

}  // namespace detail

// ---- Stream ----

namespace {
// An unspecified stream resolves to the default stream of the current context.
const std::shared_ptr<detail::StreamState>& state_or_default(
    const std::shared_ptr<detail::StreamState>& s, std::shared_ptr<detail::StreamState>& holder) {
  if (s) return s;
  holder = detail::ContextState::of(*current_context()).default_stream;
  return holder;
}
}  // namespace

bool Stream::is_default() const noexcept {
  return !state_ || state_->is_default;
}

std::shared_ptr<Context> Stream::context() const {
  return state_ ? state_->context : current_context();
}

void Stream::synchronize() const {
  const auto start = detail::trace::start_time();
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  auto& in_flight = detail::ContextState::of(*s->context).in_flight;
  const std::span<const NativeStream> waited(&s->handle, 1);
  const std::uint64_t mark = in_flight.seal(waited);
  s->context->backend().synchronize_stream(s->context->device(), s->handle);
  in_flight.release_through(waited, mark);
  in_flight.collect_retired();
  detail::trace::complete("sync", "Stream::synchronize", start,
                          {{"stream", static_cast<const void*>(s->handle)},
                           {"device", std::int64_t{s->context->device()}}});
}

bool Stream::query() const {
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  return s->context->backend().query_stream(s->context->device(), s->handle);
}

GraphMemory Stream::take_graph_memory() const {
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  return GraphMemory(
      detail::ContextState::of(*s->context).in_flight.take_held_for_graphs(s->handle));
}

GraphMemory::GraphMemory() noexcept = default;
GraphMemory::GraphMemory(std::vector<std::shared_ptr<const void>> objects) noexcept
    : objects_(std::move(objects)) {}
GraphMemory::GraphMemory(GraphMemory&&) noexcept = default;
GraphMemory& GraphMemory::operator=(GraphMemory&&) noexcept = default;
GraphMemory::~GraphMemory() = default;

void GraphMemory::release() noexcept {
  objects_.clear();
}

AutoSynchronize Stream::auto_synchronize() const {
  return AutoSynchronize(*this);
}

Event Stream::record() const {
  // From the context's pool (event_pool.hpp): recording it here replaces whatever record it had,
  // so the caller sees a fresh event (elapsed_ms between two of them works as with new ones).
  Event event = detail::EventState::wrap(detail::ContextState::of(*context()).pooled_event());
  event.record(*this);
  return event;
}

void Stream::wait(const Event& event) const {
  std::shared_ptr<detail::StreamState> holder;
  const auto& s = state_or_default(state_, holder);
  const auto& e = detail::EventState::of(event);
  if (e->context != s->context) {
    throw InvalidArgument(
        fmt::format("Stream::wait: the event belongs to device {} but the stream to device {}",
                    e->context->device(), s->context->device()));
  }
  s->context->backend().stream_wait_event(s->context->device(), s->handle, e->handle);
}

NativeStream Stream::native_handle() const noexcept {
  return state_ ? state_->handle : nullptr;
}

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
  // Two wraps of one foreign queue (Stream::external twice) are the same queue.
  return (!sa->owned || !sb->owned) && sa->handle == sb->handle && sa->context == sb->context;
}

Stream stream() {
  auto ctx = current_context();
  NativeStream handle = ctx->backend().create_stream(ctx->device());
  auto state = std::make_shared<detail::StreamState>(ctx, handle, false);
  detail::ContextState::of(*ctx).track_stream(state);
  return detail::StreamState::wrap(std::move(state));
}

Stream Stream::external(NativeStream native, int device) {
  if (native == nullptr) {
    throw InvalidArgument(fmt::format(
        "Stream::external: the native stream of device {} is null (the default stream is "
        "devmem::default_stream(); a foreign stream is a non-null cudaStream_t/hipStream_t)",
        device));
  }
  auto ctx = context_for_device(device);
  // Not tracked among the context's streams: devmem never synchronizes or destroys it unasked.
  return detail::StreamState::wrap(
      std::make_shared<detail::StreamState>(std::move(ctx), native, false, /*own=*/false));
}

bool Stream::is_external() const noexcept {
  return state_ && !state_->owned;
}

Stream default_stream() {
  return current_context()->default_stream();
}

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
  const auto start = detail::trace::start_time();
  state_->context->backend().synchronize_event(state_->context->device(), state_->handle);
  detail::ContextState::of(*state_->context).in_flight.collect_retired();
  detail::trace::complete("sync", "Event::synchronize", start,
                          {{"device", std::int64_t{state_->context->device()}}});
}

void Event::wait(const Stream& stream) const {
  stream.wait(*this);
}

bool Event::query() const {
  return state_->context->backend().query_event(state_->context->device(), state_->handle);
}

NativeEvent Event::native_handle() const noexcept {
  return state_->handle;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
  if (start.state_->context != end.state_->context) {
    throw InvalidArgument(fmt::format("elapsed_ms: the events belong to devices {} and {}",
                                      start.state_->context->device(),
                                      end.state_->context->device()));
  }
  const Context& ctx = *start.state_->context;
  return ctx.backend().elapsed_ms(ctx.device(), start.state_->handle, end.state_->handle);
}

float elapsed_ms(const Event& start, const Event& end) {
  return Event::elapsed_ms(start, end);
}

// ---- AutoSynchronize ----

AutoSynchronize::AutoSynchronize(Stream stream) noexcept
    : stream_(std::move(stream)), uncaught_at_entry_(std::uncaught_exceptions()) {}

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
    // Leaving by an exception: still wait for the stream
    // (docs/streams-and-events.md#auto-synchronize), but a second exception would terminate the
    // program, so a failure is reported instead.
    try {
      stream_.synchronize();
    } catch (const std::exception& e) {
      detail::report_error(
          fmt::format("auto_synchronize during exception unwinding: {}", e.what()));
    }
    return;
  }
  stream_.synchronize();
}

}  // namespace devmem

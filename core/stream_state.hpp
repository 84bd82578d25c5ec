// The shared states behind the public Stream and Event handles (StreamState, EventState), and how
// an operation picks the stream it runs on (resolve_stream). Their destructors and the stream
// resolution are in core/stream.cpp. Not installed; only core/ includes it.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/stream.hpp>

#include <memory>
#include <utility>

namespace devmem {

class Context;

namespace detail {

struct StreamState {
  std::shared_ptr<Context> context;
  NativeStream handle = nullptr;
  bool is_default = false;
  // False for Stream::external: the native stream belongs to someone else and is never destroyed.
  bool owned = true;

  StreamState(std::shared_ptr<Context> ctx, NativeStream h, bool def, bool own = true)
      : context(std::move(ctx)), handle(h), is_default(def), owned(own) {}
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;
  ~StreamState();

  static const std::shared_ptr<StreamState>& of(const Stream& s) noexcept { return s.state_; }
  static Stream wrap(std::shared_ptr<StreamState> state) noexcept {
    return Stream(std::move(state));
  }
};

struct EventState {
  std::shared_ptr<Context> context;
  NativeEvent handle = nullptr;
  // Taken from the context's EventPool (ContextState::pooled_event): the destructor gives it back
  // there instead of destroying it. Never set for user events (Event::Event()).
  bool pooled = false;

  EventState(std::shared_ptr<Context> ctx, NativeEvent h, bool from_pool = false)
      : context(std::move(ctx)), handle(h), pooled(from_pool) {}
  EventState(const EventState&) = delete;
  EventState& operator=(const EventState&) = delete;
  ~EventState();

  static const std::shared_ptr<EventState>& of(const Event& e) noexcept { return e.state_; }
  static Event wrap(std::shared_ptr<EventState> state) noexcept { return Event(std::move(state)); }
};

/// The stream state to use: `requested` if specified, else `fallback` if specified, else the
/// default stream of `context`. Throws InvalidArgument when the chosen stream belongs to another
/// context, or is the default stream while a stream of the device is being captured
/// (refuse_default_stream_during_capture), naming `operation`.
StreamState& resolve_stream(const Stream& requested, const Stream& fallback, Context& context,
                            const char* operation);

/// InvalidArgument naming `operation`, before any vendor call, when a stream of `context`'s device
/// is being captured: work on the legacy default stream would join that capture implicitly and
/// invalidate it (review 2, N2).
void refuse_default_stream_during_capture(const char* operation, Context& context);

}  // namespace detail
}  // namespace devmem

// The strict fake runtime's stream, event and capture calls, and host functions: where the
// deferred, randomly ordered execution is driven (synchronize and query run queued work) and where
// capture's rules are enforced. Apart from the other calls because they are the runtime's ordering
// model; the queues themselves are in strict_fake_runtime_state.hpp.
#include "backends/strict_fake/strict_fake_runtime_state.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

namespace devmem::strict_fake {

// ---- Streams and events ----

StrictFakeApi::Stream StrictFakeApi::defaultStream() noexcept {
  return &g_legacy_handle;
}
S StrictFakeApi::streamCreate(Stream* stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamCreate");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  auto s = std::make_shared<StreamState>();
  s->device = t_current;
  *stream = s.get();
  r.streams.emplace(s.get(), std::move(s));
  return {kOk, kFn};
}
S StrictFakeApi::streamDestroy(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamDestroy");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  const auto it = r.streams.find(stream);
  if (it == r.streams.end()) return fail(kInvalidResourceHandle, kFn);
  // A capture the stream began ends with it (invalidated), so that it does not forbid
  // allocations for the rest of the process.
  if (const std::shared_ptr<Capture> c = it->second->capture; c && c->origin == stream) {
    c->invalidated = true;
    r.end(c);
  }
  it->second->capture.reset();
  // Like CUDA: queued work still runs; the stream's resources go when it has.
  if (!it->second->queue.empty() || it->second->busy) r.draining.push_back(it->second);
  r.streams.erase(it);
  return {kOk, kFn};
}
S StrictFakeApi::streamSynchronize(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamSynchronize");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  ++r.counters.stream_synchronizes;
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (s->capture) {
    r.invalidate(s->capture);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  if (s->legacy) {
    if (auto c = r.capture_on_device(s->device)) {
      c->invalidated = true;
      return fail(kStreamCaptureImplicit, kFn);
    }
    // The legacy stream waits for the device's blocking streams: all their work so far.
    Op marker;
    r.device_marker(s->device, marker, nullptr);
    r.run_until(lock, [&] { return r.deps_met(marker); });
    return after_work(kFn, {kOk, kFn});
  }
  const std::uint64_t target = s->enqueued;
  r.run_until(lock, [&] { return s->completed >= target; });
  return after_work(kFn, {kOk, kFn});
}
S StrictFakeApi::streamQuery(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamQuery");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (s->capture) {
    r.invalidate(s->capture);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  const std::uint64_t target = s->enqueued;
  // A query is a chance for the device to make progress: sometimes all of it, sometimes none.
  if (r.rng() % 2 == 0) {
    r.run_until(
        lock, [&] { return s->completed >= target; }, /*block=*/false);
  }
  return after_work(kFn, s->completed >= target ? S{kOk, kFn} : S{kNotReady, kFn});
}
S StrictFakeApi::streamWaitEvent(Stream stream, Event event, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamWaitEvent");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  const auto e = r.resolve(event);
  if (!s || !e) return fail(kInvalidResourceHandle, kFn);
  if (e->captured && !e->captured->ended) {
    if (s->capture == e->captured) {
      ++s->capture->nodes;
      return {kOk, kFn};
    }
    if (!s->capture && !s->legacy) {  // the stream joins the capture (a fork)
      s->capture = e->captured;
      ++s->capture->nodes;
      return {kOk, kFn};
    }
    r.invalidate(e->captured);
    r.invalidate(s->capture);
    return fail(kStreamCaptureIsolation, kFn);
  }
  if (s->capture) {
    // An event recorded outside the capture: a dependency across the capture's boundary.
    r.invalidate(s->capture);
    return fail(kStreamCaptureIsolation, kFn);
  }
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  Op op;
  op.run = [] {};
  op.under_lock = true;
  if (e->latest && !e->latest->completed) op.event_deps.push_back(e->latest);
  enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
S StrictFakeApi::streamIsCapturing(Stream stream, bool* capturing) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamIsCapturing");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *capturing = false;
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  // The legacy stream while a blocking stream of its device captures: CUDA answers 906 and
  // leaves that capture valid (the query enqueues nothing).
  if (s->legacy && r.capture_on_device(s->device)) return fail(kStreamCaptureImplicit, kFn);
  *capturing = static_cast<bool>(s->capture);
  return {kOk, kFn};
}
S StrictFakeApi::streamBeginCapture(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamBeginCapture");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (s->legacy) return fail(kStreamCaptureUnsupported, kFn);
  if (s->capture) return fail(kIllegalState, kFn);
  auto c = std::make_shared<Capture>();
  c->origin = s.get();
  s->capture = c;
  r.captures.push_back(std::move(c));
  return {kOk, kFn};
}
S StrictFakeApi::streamEndCapture(Stream stream, std::size_t* nodes) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamEndCapture");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *nodes = 0;
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (!s->capture || s->capture->origin != s.get()) return fail(kIllegalState, kFn);
  const std::shared_ptr<Capture> c = s->capture;
  r.end(c);
  *nodes = c->nodes;
  return c->invalidated ? fail(kStreamCaptureInvalidated, kFn) : S{kOk, kFn};
}
S StrictFakeApi::eventCreate(Event* event) {
  return eventCreateWithFlags(event, 0);
}
S StrictFakeApi::eventCreateWithFlags(Event* event, unsigned flags) {
  STRICT_FAKE_PROLOGUE("strictFakeEventCreate");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  auto e = std::make_shared<EventState>();
  e->device = t_current;
  e->timing = (flags & kEventDisableTiming) == 0;
  *event = e.get();
  r.events.emplace(e.get(), std::move(e));
  return {kOk, kFn};
}
S StrictFakeApi::eventDestroy(Event event) {
  STRICT_FAKE_PROLOGUE("strictFakeEventDestroy");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  // Queued records and waits keep the state alive; the handle is invalid from now on.
  if (r.events.erase(event) == 0) return fail(kInvalidResourceHandle, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::eventRecord(Event event, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeEventRecord");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  const auto e = r.resolve(event);
  if (!s || !e) return fail(kInvalidResourceHandle, kFn);
  // CUDA: an event and the stream it is recorded on must belong to the same device.
  if (e->device != s->device) return fail(kInvalidResourceHandle, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  if (captured) {
    e->captured = s->capture;
    return {kOk, kFn};
  }
  e->captured.reset();
  auto record = std::make_shared<EventRecord>();
  e->latest = record;
  Op op;
  op.under_lock = true;
  op.run = [&r, record] {
    record->completed = true;
    record->time_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.start)
            .count();
  };
  enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
S StrictFakeApi::eventSynchronize(Event event) {
  STRICT_FAKE_PROLOGUE("strictFakeEventSynchronize");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  ++r.counters.event_synchronizes;
  const auto e = r.resolve(event);
  if (!e) return fail(kInvalidResourceHandle, kFn);
  if (e->captured) {
    r.invalidate(e->captured);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  const std::shared_ptr<const EventRecord> target = e->latest;
  r.run_until(lock, [&] { return !target || target->completed; });
  return after_work(kFn, {kOk, kFn});
}
S StrictFakeApi::eventQuery(Event event) {
  STRICT_FAKE_PROLOGUE("strictFakeEventQuery");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto e = r.resolve(event);
  if (!e) return fail(kInvalidResourceHandle, kFn);
  if (e->captured) {
    r.invalidate(e->captured);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  const std::shared_ptr<const EventRecord> target = e->latest;
  const auto done = [&] { return !target || target->completed; };
  if (r.rng() % 2 == 0) r.run_until(lock, done, /*block=*/false);
  return after_work(kFn, done() ? S{kOk, kFn} : S{kNotReady, kFn});
}
S StrictFakeApi::eventElapsedTime(float* ms, Event start, Event end) {
  STRICT_FAKE_PROLOGUE("strictFakeEventElapsedTime");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *ms = 0.0f;
  const auto a = r.resolve(start);
  const auto b = r.resolve(end);
  if (!a || !b) return fail(kInvalidResourceHandle, kFn);
  // CUDA: both timing events of one device, both recorded; NotReady until both have completed.
  if (a->device != b->device || !a->timing || !b->timing) {
    return fail(kInvalidResourceHandle, kFn);
  }
  if (!a->latest || !b->latest) return fail(kInvalidResourceHandle, kFn);
  if (!a->latest->completed || !b->latest->completed) return fail(kNotReady, kFn);
  *ms = static_cast<float>(b->latest->time_ms - a->latest->time_ms);
  return {kOk, kFn};
}
S StrictFakeApi::launch_host_function(Stream stream, void (*fn)(void*), void* user) {
  STRICT_FAKE_PROLOGUE("strictFakeLaunchHostFunc");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk || captured) return a;
  Op op;
  op.run = [fn, user] { fn(user); };
  op.host_function = true;
  enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
}  // namespace devmem::strict_fake

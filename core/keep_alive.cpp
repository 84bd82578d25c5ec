// Keep-alives of asynchronous work (InFlightWork, a context's `in_flight`): what an operation
// enqueued on a stream uses is held until a completion event after it has been reached, then
// released on a user thread; scopes wait here until no operation still uses their host memory.
#include "core/keep_alive.hpp"

#include "core/context_state.hpp"
#include "core/report_error.hpp"
#include "core/stream_state.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <iterator>
#include <string>
#include <utility>

namespace devmem::detail {

namespace {
// Completed operations are collected on the next allocation or synchronisation; a long run of
// copies without either also collects, once this many operations are pending, so that the pending
// list (and the memory it holds) stays bounded.
constexpr std::size_t kCollectWhenPending = 64;
// Idle completion events kept for reuse; more are destroyed.
constexpr std::size_t kIdleEventLimit = 64;
// Operations of one stream that share a completion event. Their memory is held until the last of
// them has run, and at most this many operations of a stream wait for an event to be recorded:
// a stream synchronize releases them without one, an allocation that fails for lack of memory
// waits for them (release_all_after_waiting).
constexpr std::size_t kUsesPerEvent = 16;
}  // namespace

InFlightWork::~InFlightWork() {
  // Contexts live as long as anything made on them (arrays and streams hold them), so the events
  // left here belong to work that has been waited for or is abandoned at exit.
  std::vector<NativeEvent> events = std::move(idle_events_);
  for (PendingUse& use : pending_) {
    if (use.event != nullptr) events.push_back(use.event);
  }
  for (NativeEvent event : events) {
    try {
      backend().destroy_event(device(), event);
    } catch (const std::exception& e) {
      report_error(fmt::format("destroying completion event {}: {}", event, e.what()));
    }
  }
}

Backend& InFlightWork::backend() const noexcept {
  return owner_.backend();
}

int InFlightWork::device() const noexcept {
  return owner_.device();
}

NativeEvent InFlightWork::take_event_locked() {
  if (!idle_events_.empty()) {
    NativeEvent event = idle_events_.back();
    idle_events_.pop_back();
    return event;
  }
  return backend().create_completion_event(device());
}

void InFlightWork::close_locked(PendingUse& batch) {
  NativeEvent event = take_event_locked();
  try {
    backend().record_event(device(), event, batch.stream);
  } catch (...) {
    // Not recorded: reusable. A thread may still wait on it from an earlier record (waiters_),
    // so it is kept rather than destroyed.
    idle_events_.push_back(event);
    throw;
  }
  batch.event = event;
}

bool InFlightWork::close_or_hold_locked(Pending::iterator& batch) {
  if (backend().is_capturing(device(), batch->stream)) {
    hold_for_graphs_locked(batch->stream, std::move(batch->objects), std::move(batch->host_spans));
    batch = pending_.erase(batch);
    return false;
  }
  close_locked(*batch);
  return true;
}

void InFlightWork::hold_for_graphs_locked(NativeStream stream,
                                          std::vector<std::shared_ptr<const void>> objects,
                                          std::vector<HostSpan> host_spans) {
  if (objects.empty()) return;
  // The host memory and the objects the graph uses, for scopes that would end under it: held
  // with the rest, so that it lives exactly as long as the graph memory.
  std::vector<const void*> identities;
  identities.reserve(objects.size());
  for (const auto& object : objects) identities.push_back(object.get());
  auto use = std::make_shared<GraphHostUse>(std::move(host_spans), std::move(identities));
  // Carried by the first object's holder (same pointer, so GraphMemory counts the objects).
  struct WithUse {
    std::shared_ptr<const void> object;
    std::shared_ptr<GraphHostUse> use;
  };
  const void* const first = objects.front().get();
  auto carrier = std::make_shared<WithUse>(WithUse{std::move(objects.front()), use});
  objects.front() = std::shared_ptr<const void>(std::move(carrier), first);
  std::erase_if(graph_uses_, [](const auto& weak) { return weak.expired(); });
  graph_uses_.emplace_back(use);
  for (auto& object : objects) held_for_graphs_.push_back({stream, std::move(object)});
}

GraphHostUse::~GraphHostUse() {
  for (auto& end : deferred_) {
    try {
      end();
    } catch (const std::exception& e) {
      report_error(fmt::format("ending a scope after its graph memory was released: {}", e.what()));
    }
  }
}

bool GraphHostUse::touches(std::span<const HostSpan> spans,
                           std::span<const void* const> objects) const {
  const bool spans_overlap = std::any_of(spans_.begin(), spans_.end(), [&](const HostSpan& used) {
    return std::any_of(spans.begin(), spans.end(),
                       [&](const HostSpan& span) { return used.overlaps(span); });
  });
  return spans_overlap || std::any_of(objects_.begin(), objects_.end(), [&](const void* used) {
           return std::find(objects.begin(), objects.end(), used) != objects.end();
         });
}

void GraphHostUse::defer_until_released(std::function<void()> end) {
  const std::lock_guard lock(mutex_);
  deferred_.push_back(std::move(end));
}

void InFlightWork::release_after_waiting(NativeStream stream,
                                         std::vector<std::shared_ptr<const void>> objects,
                                         std::vector<HostSpan> host_spans, const char* failed) {
  // The work is already enqueued: the objects may go only once it has run. Wait for it; if even
  // that fails, keep them until the context goes (a leak is better than a device fault).
  try {
    backend().synchronize_stream(device(), stream);
  } catch (const std::exception& e) {
    report_error(fmt::format("waiting for {} after {} failed ({}); its memory stays held", stream,
                             failed, e.what()));
    std::lock_guard lock(mutex_);
    hold_for_graphs_locked(stream, std::move(objects), std::move(host_spans));
  }
}

void InFlightWork::retire_after(StreamState& stream,
                                std::vector<std::shared_ptr<const void>> objects,
                                std::vector<HostSpan> host_spans) {
  if (objects.empty()) return;
  bool capturing = false;
  try {
    capturing = backend().is_capturing(device(), stream.handle);
  } catch (...) {
    release_after_waiting(stream.handle, std::move(objects), std::move(host_spans),
                          "asking whether it is captured");
    throw;
  }
  std::size_t pending = 0;
  std::exception_ptr record_failure;
  std::vector<std::shared_ptr<const void>> unrecorded;  // the failed batch's, held until a wait
  std::vector<HostSpan> unrecorded_spans;
  {
    std::lock_guard lock(mutex_);
    if (capturing) {
      // The work runs at each launch of the graph, whenever that is.
      hold_for_graphs_locked(stream.handle, std::move(objects), std::move(host_spans));
      return;
    }
    // The stream's open batch is its last one, if that is neither closed nor sealed.
    const auto last = std::find_if(pending_.rbegin(), pending_.rend(), [&](const PendingUse& use) {
      return use.stream == stream.handle;
    });
    auto batch = pending_.end();
    if (last != pending_.rend() && last->event == nullptr && !last->sealed) {
      batch = std::prev(last.base());
    } else {
      batch = pending_.insert(pending_.end(), PendingUse{});
      batch->stream = stream.handle;
    }
    if (batch->objects.empty()) {
      batch->objects = std::move(objects);
    } else {
      batch->objects.insert(batch->objects.end(), std::make_move_iterator(objects.begin()),
                            std::make_move_iterator(objects.end()));
    }
    batch->host_spans.insert(batch->host_spans.end(), host_spans.begin(), host_spans.end());
    ++batch->uses;
    batch->last_sequence = ++sequence_;
    // The legacy default stream is never destroyed, and synchronized rarely: its operations get
    // their completion event at once (most are waited for by the calls that enqueue them; a
    // kernel launch is not, and its arrays go when the event after it has been reached).
    if (batch->uses >= kUsesPerEvent || stream.is_default) {
      try {
        close_locked(*batch);
      } catch (...) {
        // Taken out, to be released only once the stream has been waited for (below).
        record_failure = std::current_exception();
        unrecorded = std::move(batch->objects);
        unrecorded_spans = std::move(batch->host_spans);
        pending_.erase(batch);
      }
    }
    pending = pending_.size();
    pending_count_.store(pending, std::memory_order_release);
  }
  if (record_failure) {
    release_after_waiting(stream.handle, std::move(unrecorded), std::move(unrecorded_spans),
                          "recording its completion event");
    std::rethrow_exception(record_failure);
  }
  if (pending >= kCollectWhenPending) collect_retired();
}

std::uint64_t InFlightWork::seal(std::span<const NativeStream> streams) noexcept {
  std::lock_guard lock(mutex_);
  for (PendingUse& use : pending_) {
    if (use.event == nullptr &&
        std::find(streams.begin(), streams.end(), use.stream) != streams.end()) {
      use.sealed = true;
    }
  }
  return sequence_;
}

void InFlightWork::release_through(std::span<const NativeStream> streams,
                                   std::uint64_t mark) noexcept {
  if (pending_count_.load(std::memory_order_acquire) == 0) return;
  std::vector<std::vector<std::shared_ptr<const void>>> done;
  std::vector<NativeEvent> surplus;
  {
    std::lock_guard lock(mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      const bool waited_for = it->last_sequence <= mark && std::find(streams.begin(), streams.end(),
                                                                     it->stream) != streams.end();
      if (!waited_for) {
        ++it;
        continue;
      }
      try {
        done.push_back(std::move(it->objects));
      } catch (...) {  // no memory for the list: released later, by collect_retired
        ++it;
        continue;
      }
      if (it->event != nullptr) {
        if (idle_events_.size() < kIdleEventLimit || waiters_ > 0) {
          idle_events_.push_back(it->event);
        } else {
          surplus.push_back(it->event);
        }
      }
      it = pending_.erase(it);
    }
    pending_count_.store(pending_.size(), std::memory_order_release);
  }
  for (NativeEvent event : surplus) {
    try {
      backend().destroy_event(device(), event);
    } catch (const std::exception& e) {
      report_error(fmt::format("destroying completion event {}: {}", event, e.what()));
    }
  }
  // `done` is released here, outside the lock.
}

void InFlightWork::close_open(NativeStream stream) noexcept {
  // A stream destroyed during the process's exit (a static object) may outlive the runtime: what
  // its batch holds goes with the process, as every release does then.
  if (backend().exiting() || backend().device_lost()) return;
  try {
    std::lock_guard lock(mutex_);
    const auto last = std::find_if(pending_.rbegin(), pending_.rend(),
                                   [&](const PendingUse& use) { return use.stream == stream; });
    if (last != pending_.rend() && last->event == nullptr) {
      auto batch = std::prev(last.base());
      static_cast<void>(close_or_hold_locked(batch));
      pending_count_.store(pending_.size(), std::memory_order_release);
    }
  } catch (const std::exception& e) {
    report_error(fmt::format(
        "recording the completion event of {}'s last operations failed ({}); their memory stays "
        "held",
        stream, e.what()));
  }
}

void InFlightWork::release_all_after_waiting() {
  if (pending_count_.load(std::memory_order_acquire) == 0) return;
  if (backend().exiting() || backend().device_lost()) return;
  std::vector<NativeEvent> events;
  {
    std::lock_guard lock(mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->event == nullptr && !close_or_hold_locked(it)) continue;
      ++it;
    }
    for (const PendingUse& use : pending_) events.push_back(use.event);
    pending_count_.store(pending_.size(), std::memory_order_release);
    ++waiters_;
  }
  wait_for_events(events);
  collect_retired();
}

void InFlightWork::wait_for_events(const std::vector<NativeEvent>& events) {
  // The caller counted itself in waiters_ under the lock it took the events with. An event may be
  // collected and recorded again by another thread meanwhile: waiting for its newer work then waits
  // longer than needed, never less; it is not destroyed while waiters_ > 0.
  struct Waiting {
    InFlightWork& work;
    ~Waiting() {
      std::lock_guard lock(work.mutex_);
      --work.waiters_;
    }
  } waiting{*this};
  for (NativeEvent event : events) backend().synchronize_event(device(), event);
}

void InFlightWork::collect_retired() noexcept {
  if (pending_count_.load(std::memory_order_acquire) == 0) return;
  // At process exit the runtime may be gone (review 2, N5), and after a sticky error every query
  // fails the same way (N11): what is still pending stays held, and nothing is reported again.
  if (backend().exiting() || backend().device_lost()) return;
  std::vector<std::vector<std::shared_ptr<const void>>> done;
  std::vector<NativeEvent> surplus;
  std::string failure;
  {
    std::lock_guard lock(mutex_);
    // Operations of one stream complete in order: after the first unfinished one of a stream, the
    // later ones of that stream are not asked about.
    std::vector<NativeStream> unfinished;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (std::find(unfinished.begin(), unfinished.end(), it->stream) != unfinished.end()) {
        ++it;
        continue;
      }
      if (it->event == nullptr) {  // an open batch, the stream's last: nothing to ask yet
        unfinished.push_back(it->stream);
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
      if (idle_events_.size() < kIdleEventLimit || waiters_ > 0) {
        idle_events_.push_back(it->event);
      } else {
        surplus.push_back(it->event);
      }
      it = pending_.erase(it);
    }
    // Idle events kept beyond the limit while a thread waited go once no thread waits.
    while (waiters_ == 0 && idle_events_.size() > kIdleEventLimit) {
      surplus.push_back(idle_events_.back());
      idle_events_.pop_back();
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

void InFlightWork::wait_for_host_uses(std::span<const HostSpan> spans,
                                      std::span<const void* const> objects) {
  if (backend().exiting()) return;  // nothing can be waited for once the runtime may be gone
  const auto touches = [&](const PendingUse& use) {
    const bool touches_span =
        std::any_of(use.host_spans.begin(), use.host_spans.end(), [&](const HostSpan& used) {
          return std::any_of(spans.begin(), spans.end(),
                             [&](const HostSpan& span) { return used.overlaps(span); });
        });
    return touches_span ||
           std::any_of(use.objects.begin(), use.objects.end(), [&](const auto& held) {
             return std::find(objects.begin(), objects.end(), held.get()) != objects.end();
           });
  };
  std::vector<NativeEvent> waits;
  {
    std::lock_guard lock(mutex_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (!touches(*it)) {
        ++it;
        continue;
      }
      // An open batch gets its event now; on a stream being captured it is held as captured
      // work, which graph_use_of then finds.
      if (it->event == nullptr && !close_or_hold_locked(it)) continue;
      waits.push_back(it->event);
      ++it;
    }
    pending_count_.store(pending_.size(), std::memory_order_release);
    ++waiters_;
  }
  wait_for_events(waits);
  collect_retired();
}

std::shared_ptr<GraphHostUse> InFlightWork::graph_use_of(std::span<const HostSpan> spans,
                                                         std::span<const void* const> objects) {
  std::lock_guard lock(mutex_);
  for (const auto& weak : graph_uses_) {
    if (auto use = weak.lock(); use && use->touches(spans, objects)) return use;
  }
  return nullptr;
}

std::vector<std::shared_ptr<const void>> InFlightWork::take_held_for_graphs(NativeStream stream) {
  std::vector<std::shared_ptr<const void>> taken;
  std::lock_guard lock(mutex_);
  std::erase_if(held_for_graphs_, [&](HeldForGraph& held) {
    if (held.stream != stream) return false;
    taken.push_back(std::move(held.object));
    return true;
  });
  return taken;
}

std::size_t InFlightWork::pending_uses() const {
  std::lock_guard lock(mutex_);
  std::size_t uses = 0;
  for (const PendingUse& use : pending_) uses += use.uses;
  return uses;
}

void finish_enqueued(StreamState& stream, std::vector<std::shared_ptr<const void>> keep_alive,
                     std::vector<HostSpan> host_spans) {
  Context& ctx = *stream.context;
  if (stream.is_default) {
    ctx.backend().synchronize_stream(ctx.device(), nullptr);
    ContextState::of(ctx).in_flight.collect_retired();
    return;
  }
  ContextState::of(ctx).in_flight.retire_after(stream, std::move(keep_alive),
                                               std::move(host_spans));
}

}  // namespace devmem::detail

// The part of a context that follows the streams' progress (ContextState::in_flight): what an
// operation enqueued on a stream uses is held until a completion event after it has been reached
// (finish_enqueued, which every enqueued operation ends with). Not installed; only core/ includes
// it.
#pragma once

#include <devmem/backend.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace devmem {

class Context;

namespace detail {

struct StreamState;

/// A range of host bytes [begin, end).
struct HostSpan {
  const std::byte* begin = nullptr;
  const std::byte* end = nullptr;
  [[nodiscard]] bool overlaps(const HostSpan& other) const noexcept {
    return begin < other.end && other.begin < end;
  }
};

/// The keep-alives of asynchronous work of one context: what an operation enqueued on a stream
/// other than the default stream (or a kernel launched on the default stream) uses is released
/// once a completion event recorded after it has been reached, or once the host has synchronized
/// that stream. The operations of one stream are
/// held in batches of up to kUsesPerEvent (keep_alive.cpp) that share one completion event,
/// recorded when the batch is full or must be waited for: an event record costs about as much as a
/// small copy itself on a GPU (bench/results/gpu-proof-h100-2026-11-27.md), and a loop of small
/// copies followed by a synchronize needs none. A batch not yet closed is the last of its stream.
/// Thread-safe: one mutex guards the pending operations and the idle events; it is held across
/// event records and queries, never while a keep-alive is released or another lock of the context
/// is taken.
/// What work captured into a graph uses of host memory (byte ranges) and of device memory objects
/// (by identity; mapped views), held with the captured work's memory: for the context until
/// Stream::take_graph_memory, then by the application's GraphMemory. A scope over that host
/// memory cannot end while it lives (the graph may still run); a scope destroyed meanwhile hands
/// its end to it (defer_until_released), done when the graph memory is released.
class GraphHostUse {
 public:
  GraphHostUse(std::vector<HostSpan> spans, std::vector<const void*> objects)
      : spans_(std::move(spans)), objects_(std::move(objects)) {}
  GraphHostUse(const GraphHostUse&) = delete;
  GraphHostUse& operator=(const GraphHostUse&) = delete;
  /// Runs the deferred scope ends; failures are reported, not thrown.
  ~GraphHostUse();
  /// Whether the captured work uses host memory overlapping `spans` or one of `objects`.
  [[nodiscard]] bool touches(std::span<const HostSpan> spans,
                             std::span<const void* const> objects) const;
  /// Runs `end` when the graph memory is released (after the graph may no longer run).
  void defer_until_released(std::function<void()> end);

 private:
  std::vector<HostSpan> spans_;
  std::vector<const void*> objects_;
  std::mutex mutex_;  // guards deferred_
  std::vector<std::function<void()>> deferred_;
};

class InFlightWork {
 public:
  /// The work of `owner`, whose backend and device record and query the events.
  explicit InFlightWork(Context& owner) noexcept : owner_(owner) {}
  InFlightWork(const InFlightWork&) = delete;
  InFlightWork& operator=(const InFlightWork&) = delete;
  /// Destroys the completion events left (contexts live as long as anything made on them, so
  /// their work has been waited for or is abandoned at exit); failures are reported, not thrown.
  ~InFlightWork();

  /// Keeps `objects` alive until the work enqueued so far on `stream` has completed: records a
  /// completion event after that work (no host callback, which would stall the stream for a host
  /// round trip after every operation). They are released by collect_retired() on a user thread
  /// (the next devmem call of this context), never on a backend thread, because releasing memory
  /// calls the backend. `host_spans` are the host byte ranges the work reads or writes (host
  /// arrays, mapped views), which wait_for_host_uses() looks for.
  /// On a stream being captured into a graph the work runs at each launch of the graph, whenever
  /// that is: the objects are then held for the context until take_held_for_graphs() hands them
  /// to the application (Stream::take_graph_memory).
  /// The objects join the stream's open batch; a batch's completion event is recorded when it
  /// holds kUsesPerEvent operations (on the legacy default stream: at once), or when close_open,
  /// wait_for_host_uses or release_all_after_waiting need it. If that record fails, the stream is
  /// waited for and the batch released before the error propagates.
  void retire_after(StreamState& stream, std::vector<std::shared_ptr<const void>> objects,
                    std::vector<HostSpan> host_spans = {});
  /// Before the host waits for `streams` (Stream::synchronize, Context::synchronize): no later
  /// operation joins their open batches. Returns the mark to hand to release_through.
  [[nodiscard]] std::uint64_t seal(std::span<const NativeStream> streams) noexcept;
  /// After the host has waited for `streams`: releases what their operations retired before
  /// `mark` (seal) hold, without asking any event.
  void release_through(std::span<const NativeStream> streams, std::uint64_t mark) noexcept;
  /// Before `stream` is destroyed: records the completion event of its open batch (on a stream
  /// being captured, the batch is held as captured work is). Failures are reported; the batch's
  /// objects are then held until the context goes.
  void close_open(NativeStream stream) noexcept;
  /// For an allocation that failed for lack of memory: closes every open batch, waits for every
  /// recorded operation and releases what they hold, so that the retry sees that memory free.
  void release_all_after_waiting();
  /// Releases the keep-alives whose work has completed (one event query per pending operation,
  /// stopping at the first unfinished one of each stream).
  void collect_retired() noexcept;
  /// Waits until no recorded operation still uses `objects` (by identity) or host memory
  /// overlapping one of `spans`: what a scope does before it unregisters host memory, which a
  /// copy or a kernel on another stream may still be using.
  void wait_for_host_uses(std::span<const HostSpan> spans, std::span<const void* const> objects);
  /// What work captured on `stream` uses, held since the captures; the caller now keeps it.
  [[nodiscard]] std::vector<std::shared_ptr<const void>> take_held_for_graphs(NativeStream stream);
  /// A live record of captured work (held here or in a GraphMemory) that uses host memory
  /// overlapping `spans` or one of `objects`; null when none (review 2, N2: scopes).
  [[nodiscard]] std::shared_ptr<GraphHostUse> graph_use_of(std::span<const HostSpan> spans,
                                                           std::span<const void* const> objects);
  /// Operations whose keep-alives are still held (tests and diagnostics).
  [[nodiscard]] std::size_t pending_uses() const;

 private:
  /// A batch of operations of one stream. Open (`event` null) while operations may join it.
  struct PendingUse {
    NativeStream stream = nullptr;
    NativeEvent event = nullptr;
    std::vector<std::shared_ptr<const void>> objects;
    std::vector<HostSpan> host_spans;
    std::size_t uses = 0;             // operations in the batch
    std::uint64_t last_sequence = 0;  // of its latest operation (sequence_)
    bool sealed = false;              // the host waits for the stream: no operation may join
  };
  using Pending = std::deque<PendingUse>;
  /// The idle event to record next, or a new one. Called with mutex_ held.
  [[nodiscard]] NativeEvent take_event_locked();
  /// Records `batch`'s completion event on its stream. Called with mutex_ held; on failure the
  /// batch stays open and the error propagates.
  void close_locked(PendingUse& batch);
  /// Closes `batch` and returns true, or, on a stream now being captured (where no event outside
  /// the capture can be recorded), hands its objects to the captured work's holding, erases it,
  /// moves `batch` to the position after it and returns false. Called with mutex_ held.
  bool close_or_hold_locked(Pending::iterator& batch);
  /// Holds `objects` as work captured on `stream` uses them (take_held_for_graphs). Called with
  /// mutex_ held.
  void hold_for_graphs_locked(NativeStream stream, std::vector<std::shared_ptr<const void>> objects,
                              std::vector<HostSpan> host_spans);
  /// After a failure (`failed`, for the message) that left `objects` without a completion event:
  /// waits for `stream`, then lets them go; when even the wait fails, holds them for the context.
  void release_after_waiting(NativeStream stream, std::vector<std::shared_ptr<const void>> objects,
                             std::vector<HostSpan> host_spans, const char* failed);
  /// Waits for `events` outside the lock, with waiters_ counted so that none is destroyed
  /// meanwhile.
  void wait_for_events(const std::vector<NativeEvent>& events);
  [[nodiscard]] Backend& backend() const noexcept;
  [[nodiscard]] int device() const noexcept;

  Context& owner_;
  mutable std::mutex mutex_;  // guards the members below
  Pending pending_;
  std::uint64_t sequence_ = 0;  // operations retired so far: orders them against seal()
  std::vector<NativeEvent> idle_events_;
  struct HeldForGraph {
    NativeStream stream = nullptr;
    std::shared_ptr<const void> object;
  };
  std::vector<HeldForGraph> held_for_graphs_;
  std::vector<std::weak_ptr<GraphHostUse>> graph_uses_;  // live while their graph memory is held
  // Threads inside wait_for_host_uses, which waits on events outside the lock: while any waits,
  // retired events are kept (idle) instead of destroyed, so none is destroyed under a wait
  // (review 2, N8). An idle event may be recorded again meanwhile: the wait is then longer than
  // needed, never shorter, and never on a destroyed event.
  std::size_t waiters_ = 0;
  bool query_failure_reported_ = false;
  std::atomic<std::size_t> pending_count_{0};
};

/// Completes an operation enqueued on `stream`: on the default stream waits for it (the API
/// promises completion); on another stream keeps `keep_alive` until the work is done.
void finish_enqueued(StreamState& stream, std::vector<std::shared_ptr<const void>> keep_alive,
                     std::vector<HostSpan> host_spans = {});

}  // namespace detail
}  // namespace devmem

// The vendor events a context recycles for devmem's own records (ContextState::events): the event
// of Stream::record() and the one recorded after a stream-ordered allocation on a non-default
// stream. cudaEventCreate and cudaEventDestroy cost microseconds each (with the device switch every
// backend call makes), which made the async manager's allocate several times dearer than
// cudaMallocAsync itself on an H100 (bench/results/gpu-proof-h100-2026-11-27.md). Not installed;
// only core/ includes it (through core/context_state.hpp).
//
// Reusing an event is safe because every pooled event is recorded again as soon as it is taken
// (its earlier record is replaced), and a stream that waited on it waits for the record that was
// current when it called wait (cudaStreamWaitEvent, hipStreamWaitEvent, the host backend's and the
// strict fake's events alike). User events (Event::Event(), timed with elapsed_ms, possibly never
// recorded) and the keep-alives' completion events are never pooled.
#pragma once

#include <devmem/backend.hpp>

#include <array>
#include <cstddef>
#include <mutex>

namespace devmem {

class Context;

namespace detail {

/// Idle vendor events of one context, at most kCapacity. Thread-safe: one mutex guards the idle
/// list and the closed flag; it is never held while the backend creates or destroys an event.
class EventPool {
 public:
  /// More than devmem keeps in flight in ordinary use (an allocation's event lives as long as the
  /// memory; devmem::mpi keeps one or two per operation), few enough to cost nothing when idle.
  static constexpr std::size_t kCapacity = 64;

  /// The pool of `owner`, empty.
  explicit EventPool(Context& owner) noexcept : owner_(owner) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  /// Destroys the idle events (the context goes: nothing can take them any more).
  ~EventPool() { release_all(); }

  /// An idle event, or a new one from Backend::create_event (whose errors it throws). Its last
  /// record, if any, is stale: the caller records it before anything waits on or queries it.
  [[nodiscard]] NativeEvent acquire();
  /// Takes back an event from acquire() that nothing uses any more: kept for the next acquire,
  /// or destroyed when the pool is full, closed, or the process is exiting or the device lost
  /// (the backend then makes the destruction a no-op). Never throws.
  void recycle(NativeEvent event) noexcept;
  /// Destroys the idle events now (release_cached_buffers); later recycles fill the pool again.
  void release_all() noexcept;
  /// release_all, and from now on every recycled event is destroyed at once: at exit, while the
  /// vendor runtime is still alive, so that no event of devmem's outlives it unreleased.
  void close() noexcept;
  /// Idle events now (tests).
  [[nodiscard]] std::size_t idle() const;

 private:
  void destroy(NativeEvent event) noexcept;

  Context& owner_;
  mutable std::mutex mutex_;  // guards the members below
  // A fixed array, not a vector: recycle, reached from destructors, never allocates.
  std::array<NativeEvent, kCapacity> idle_{};
  std::size_t idle_count_ = 0;
  bool closed_ = false;
};

}  // namespace detail
}  // namespace devmem

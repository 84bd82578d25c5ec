// Everything devmem keeps for one context behind the public Context (ContextState), and the one
// path by which memory is obtained and returned. Its parts have their own headers, included here:
// the deallocation queue, the event pool, the keep-alives of asynchronous work and the memory
// counters. Defined in core/context.cpp (pooled_event in core/stream.cpp). Not installed; only
// core/ includes it (backends read a context's properties through Context::device_properties).
#pragma once

#include <devmem/backend.hpp>
#include <devmem/context.hpp>
#include <devmem/memory_manager.hpp>

#include "core/deallocation_queue.hpp"
#include "core/event_pool.hpp"
#include "core/keep_alive.hpp"
#include "core/memory_counter.hpp"

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace devmem::detail {

struct DeviceMemory;
struct HostMemory;
struct StreamState;
struct EventState;

/// Everything devmem keeps for one context, in parts with their own headers: the deallocation
/// queue (with the manager), the statistics, the streams, and the keep-alives of asynchronous
/// work. Each part guards itself; no part's lock is held while another's is taken.
struct ContextState {
  /// The state of `context` (core/ uses it; users and backends cannot).
  [[nodiscard]] static ContextState& of(const Context& context) noexcept { return *context.state_; }
  Context& self;
  std::weak_ptr<Context> weak_self;
  std::shared_ptr<StreamState> default_stream;

  explicit ContextState(Context& owner)
      : self(owner), deallocations(owner), events(owner), in_flight(owner) {}

  /// Creates the context of `device` on `backend`.
  static std::shared_ptr<Context> create(Backend& backend, int device);

  [[nodiscard]] std::shared_ptr<Context> shared() const { return weak_self.lock(); }
  [[nodiscard]] Backend& backend() const noexcept { return self.backend(); }
  [[nodiscard]] int device() const noexcept { return self.device(); }

  // ---- The one path by which memory is obtained and returned (memory_manager.hpp). ----
  // Defined in context.cpp: it goes through the deallocation queue, the statistics and the
  // keep-alives.
  /// Device memory of `bytes` (none for 0 bytes) through the context's manager, allocated on
  /// `stream` (a stream of this context, not null); on OutOfMemory flushes the deferred queue and
  /// retries once. OutOfMemory names `operation`. `manager`, when given, allocates instead of the
  /// context's (managed_array's managed manager); the memory goes back to it.
  std::shared_ptr<DeviceMemory> allocate_device(std::int64_t bytes,
                                                const std::shared_ptr<StreamState>& stream,
                                                const char* operation,
                                                std::shared_ptr<MemoryManager> manager = nullptr);
  /// Page-locked host memory (zero-filled unless write-combined), same retry rule.
  std::shared_ptr<HostMemory> allocate_host(std::int64_t bytes, HostAllocFlags flags,
                                            const char* operation);
  /// Memory whose last user is gone: counted out of the statistics and queued (flushed when a
  /// limit is exceeded). Never throws. `stream`: the stream device memory was allocated on
  /// (unused for host memory).
  void release(const std::shared_ptr<MemoryManager>& manager, void* ptr, std::int64_t bytes,
               bool host, HostAllocFlags flags, const std::weak_ptr<StreamState>& stream) noexcept;

  /// The manager, the queue of memory to free and its limits (deallocation_queue.cpp).
  DeallocationQueue deallocations;
  /// Memory handed to arrays: added at allocation, removed when the last array goes (release()),
  /// not when the queue frees it.
  MemoryCounter device_counters;
  MemoryCounter host_counters;

  /// The device's properties, read from the backend once (vendor queries can take milliseconds).
  const DeviceProperties& properties();

  /// Vendor events recycled for devmem's own records (event_pool.hpp).
  EventPool events;
  /// An event of this context from `events` (the backend's errors if a new one cannot be made),
  /// not yet recorded for its new user: the caller records it at once. Its state gives it back to
  /// the pool when the last holder goes. Defined in stream.cpp.
  std::shared_ptr<EventState> pooled_event();

  // ---- Streams (defined in context.cpp). ----
  void track_stream(const std::shared_ptr<StreamState>& stream);
  std::vector<std::shared_ptr<StreamState>> live_streams();

  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;
  ~ContextState() = default;

 private:
  std::mutex streams_mutex_;
  std::vector<std::weak_ptr<StreamState>> streams_;
  std::once_flag properties_once_;
  DeviceProperties properties_;

 public:
  /// The keep-alives of asynchronous work (keep_alive.cpp). Declared last, so destroyed first:
  /// its completion events are destroyed while the rest of the context is still there.
  InFlightWork in_flight;
};

}  // namespace devmem::detail

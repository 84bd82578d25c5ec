// Devices and contexts. One context per device of the active backend, created on first use and
// alive until the process exits (like CUDA's primary contexts). The current device is per thread
// (select_device), device 0 by default.
//
// Thread safety: all functions may be called from several threads at once.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/export.hpp>
#include <devmem/memory_manager.hpp>
#include <devmem/stream.hpp>

#include <memory>
#include <string_view>

namespace devmem {

namespace detail {
struct ContextState;
}

/// One device of the active backend and everything devmem keeps for it (Numba's Context): its
/// memory manager, deferred-deallocation queue, default stream and statistics. One per device per
/// process, shared by every thread (all members are thread-safe); get it with current_context().
class DEVMEM_API Context {
 public:
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  /// The device index (Numba's Context.device.id).
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The backend the device belongs to.
  [[nodiscard]] Backend& backend() const noexcept { return *backend_; }
  /// "host", "cuda" or "roc".
  [[nodiscard]] std::string_view backend_name() const noexcept { return backend_->name(); }
  /// The device's properties, read once (Numba's Device attributes).
  [[nodiscard]] DeviceProperties properties() const;
  /// Free and total device memory in bytes, as the context's memory manager reports them (Numba's
  /// Context.get_memory_info: a plugin's own numbers; the pool counts its cached blocks as free).
  /// Backend::memory_info(device) has the device's raw numbers.
  [[nodiscard]] MemoryInfo memory_info() const;
  /// The device's legacy default stream (Numba's cuda.default_stream()).
  [[nodiscard]] Stream default_stream() const;
  /// Waits for all work on the default stream and on every stream of this context.
  void synchronize();

  // ---- Memory management (see memory_manager.hpp) ----
  /// The manager all allocations of this context go through (DEVMEM_MEMORY_MANAGER, default
  /// "direct").
  [[nodiscard]] std::shared_ptr<MemoryManager> memory_manager() const;
  /// Replaces the manager for new allocations; memory allocated earlier is still returned to the
  /// manager that allocated it. InvalidArgument for a null manager, one made for another context,
  /// or an interface_version other than MemoryManager::kInterfaceVersion.
  void set_memory_manager(std::shared_ptr<MemoryManager> manager);
  /// Frees everything queued now (unless inside defer_cleanup). Throws the first free failure;
  /// see memory_manager.hpp for what happens to the queue then.
  void flush_deallocations();
  /// Asynchronous operations on streams other than the default stream whose memory devmem still
  /// holds (each until its completion event has been seen done). Completed ones are let go at
  /// the next allocation, synchronisation or scope exit of this context, or when 64 are pending.
  /// A diagnostic: it may include operations that have completed but not yet been looked at.
  [[nodiscard]] std::size_t operations_in_flight() const;
  /// Number of queued deallocations.
  [[nodiscard]] std::size_t pending_deallocations() const;
  /// Bytes of queued deallocations (device and page-locked host).
  [[nodiscard]] std::int64_t pending_deallocation_bytes() const;
  /// The queue limits now in force.
  [[nodiscard]] DeallocationConfig deallocation_config() const;
  /// InvalidArgument for a negative count or a ratio outside [0, 1].
  void set_deallocation_config(const DeallocationConfig& config);
  /// A scope during which nothing of this context is freed.
  [[nodiscard]] DeferCleanup defer_cleanup();
  /// Device allocations made through this context (see host_statistics for page-locked host).
  [[nodiscard]] MemoryStatistics device_statistics() const;
  /// The same for page-locked host allocations.
  [[nodiscard]] MemoryStatistics host_statistics() const;
  /// Free failures of flushes devmem started itself (and reported on stderr), oldest first;
  /// clears the list.
  [[nodiscard]] std::vector<std::string> take_deallocation_errors();

 private:
  friend struct detail::ContextState;  // ContextState::of(context) reaches state_ for core/
  Context(Backend& backend, int device);
  Backend* backend_;
  int device_;
  std::unique_ptr<detail::ContextState> state_;
};

/// Number of devices of the active backend (0 when it has none).
[[nodiscard]] DEVMEM_API int device_count();
/// Makes device `index` current for the calling thread. Throws NoDevice when it does not exist.
DEVMEM_API void select_device(int index);
/// The device current for the calling thread.
[[nodiscard]] DEVMEM_API int current_device() noexcept;
/// The context of the current device, created on first use. Throws NoDevice (with the backend's
/// reason) when the backend has no device.
[[nodiscard]] DEVMEM_API std::shared_ptr<Context> current_context();
/// The context of device `index`.
[[nodiscard]] DEVMEM_API std::shared_ptr<Context> context_for_device(int index);
/// Waits for all work on the current device: its default stream and every stream of its context
/// (Numba's cuda.synchronize(); the same as current_context()->synchronize()). Throws NoDevice as
/// current_context() does, and the first asynchronous failure of that work as Stream::synchronize
/// does. Thread safety: may be called from several threads; waits for work other threads enqueued
/// too.
inline void synchronize() {
  current_context()->synchronize();
}

}  // namespace devmem

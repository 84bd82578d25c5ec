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
#include <string>
#include <string_view>
#include <vector>

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
  /// The same properties as properties(), without the copy: a reference to the context's own
  /// record, for code that reads a field or two on every call (a kernel launch reads the shared
  /// memory limits and the warp size). Lifetime: valid as long as the context, that is until the
  /// process exits (contexts are never destroyed before). Thread safety: the first call of either
  /// accessor reads the properties from the backend once (other threads wait for it, and its
  /// errors are thrown to each caller until a read succeeds); afterwards the record never changes,
  /// so any number of threads may read it at once.
  [[nodiscard]] const DeviceProperties& device_properties() const;
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
  /// holds: until a completion event after them has been seen done (up to 16 operations of a
  /// stream share one) or their stream has been synchronized. Completed ones are let go at the
  /// next allocation, synchronisation or scope exit of this context, or when 64 batches are
  /// pending (docs/memory-managers.md).
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

  // ---- Several devices (docs/scaling-out.md#several-devices) ----
  /// Whether this device can access memory of device `peer` directly (Numba's
  /// Context.can_access_peer; cudaDeviceCanAccessPeer). False for the device itself. NoDevice when
  /// `peer` is not a device of the backend.
  [[nodiscard]] bool can_access_peer(int peer) const;
  /// Lets this device access memory of `peer` (Numba's Context.enable_peer_access). Idempotent.
  /// NoDevice when `peer` is not a device; BackendError when the two cannot be peers
  /// (can_access_peer is false). Copies between arrays of two devices do not need it: they enable
  /// access themselves where possible and otherwise go through host memory.
  void enable_peer_access(int peer) const;
  /// Withdraws what enable_peer_access gave (idempotent). NoDevice when `peer` is not a device.
  void disable_peer_access(int peer) const;

 private:
  friend struct detail::ContextState;  // ContextState::of(context) reaches state_ for core/
  Context(Backend& backend, int device);
  Backend* backend_;
  int device_;
  std::unique_ptr<detail::ContextState> state_;
};

/// Number of devices of the active backend (0 when it has none).
[[nodiscard]] DEVMEM_API int device_count();
/// Makes device `index` current for the calling thread: devmem's calls without a device or stream
/// go to it, and so do the application's own vendor calls on this thread (it is made the
/// runtime's current device, as cudaSetDevice does). Every other devmem call leaves the runtime's
/// current device as it found it. Throws NoDevice when it does not exist.
DEVMEM_API void select_device(int index);
/// The device current for the calling thread.
[[nodiscard]] DEVMEM_API int current_device() noexcept;
/// The context of the current device, created on first use. Throws NoDevice (with the backend's
/// reason) when the backend has no device.
[[nodiscard]] DEVMEM_API std::shared_ptr<Context> current_context();
/// The context of device `index`.
[[nodiscard]] DEVMEM_API std::shared_ptr<Context> context_for_device(int index);
/// Frees the buffers devmem keeps between calls for its own use, once their last use has
/// completed (the host waits for that): the page-locked staging of copies between devices without
/// peer access (two 4 MiB buffers per device pair), and the backend's idle staging and scratch
/// buffers of pageable and strided copies. The next copy that needs them allocates them again.
/// Also destroys the idle vendor events each context recycles for Stream::record() and
/// stream-ordered allocations (up to 64 per context). Memory managers' caches are theirs
/// (MemoryManager::trim). Done at exit as well. Thread-safe.
DEVMEM_API void release_cached_buffers();
/// One device of the active backend, as Numba's cuda.gpus lists it (Numba's Device): its index,
/// name and properties, read when the descriptor was made.
struct DeviceInfo {
  int id = 0;                   // the device index (select_device, context_for_device)
  std::string name;             // DeviceProperties::name
  DeviceProperties properties;  // what Context::properties() returns for the device
};

/// Every device of the active backend, in index order (Numba's cuda.gpus and
/// cuda.list_devices()); empty when the backend has none. Thread safety: may be called from
/// several threads.
[[nodiscard]] DEVMEM_API std::vector<DeviceInfo> gpus();
/// The calling thread's current device (Numba's cuda.get_current_device()). NoDevice when the
/// backend has no device.
[[nodiscard]] DEVMEM_API DeviceInfo get_current_device();

/// Makes a device current for the calling thread for the scope's lifetime (as select_device does,
/// the runtime's current device included), then makes the device that was current before current
/// again, also when the scope is left by an exception (Numba's
/// `with cuda.gpus[i]:`). Scopes nest. Neither copyable nor movable: it belongs to the thread and
/// the block that made it.
class [[nodiscard]] DEVMEM_API DeviceScope {
 public:
  /// Selects `device` (NoDevice when it does not exist, and nothing changes).
  explicit DeviceScope(int device);
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  DeviceScope(DeviceScope&&) = delete;
  DeviceScope& operator=(DeviceScope&&) = delete;
  ~DeviceScope();
  /// The device the scope made current.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The device current before the scope, restored at its end.
  [[nodiscard]] int previous() const noexcept { return previous_; }

 private:
  int device_;
  int previous_;
};
/// A DeviceScope for `device`: `auto scope = devmem::device_scope(1);`.
[[nodiscard]] DEVMEM_API DeviceScope device_scope(int device);

/// Waits for all work on the current device: its default stream and every stream of its context
/// (Numba's cuda.synchronize(); the same as current_context()->synchronize()). Throws NoDevice as
/// current_context() does, and the first asynchronous failure of that work as Stream::synchronize
/// does. Thread safety: may be called from several threads; waits for work other threads enqueued
/// too.
inline void synchronize() {
  current_context()->synchronize();
}

}  // namespace devmem

// The backend interface: only what differs per vendor (CUDA runtime, HIP/HSA, the host simulator).
// Everything else (array metadata, views, copies of strided data, host memory scopes, contexts)
// is written once in core/ on top of this class.
//
// Conventions every backend follows:
// - `device` is a device index in [0, device_count()); backends make it current as needed.
// - A NativeStream of nullptr is the device's default (legacy, synchronising) stream. Work enqueued
//   on it may still be asynchronous: core/ synchronises the default stream itself when the public
//   API promises completion.
// - Failures throw BackendError (function name, vendor code and code name), OutOfMemory when an
//   allocation finds no room (core/ flushes deferred frees and retries), NoDevice when there is no
//   device. Nothing is leaked when a call throws.
// - Thread safety: every member may be called from several threads at once.
// No vendor header is included here: native handles are opaque pointers (cudaStream_t and
// hipStream_t are pointers to incomplete structs, so they convert to and from void*).
#pragma once

#include <devmem/export.hpp>
#include <devmem/layout.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace devmem {

/// Flags of a page-locked host allocation (cudaHostAlloc / hipHostMalloc).
enum class HostAllocFlags : unsigned {
  None = 0,
  Mapped = 1u << 0,         // mapped into the device address space (zero-copy)
  Portable = 1u << 1,       // pinned for every context, not only the allocating one
  WriteCombined = 1u << 2,  // write-combined: fast host writes and device reads, slow host reads
};
/// Flags of a host registration (cudaHostRegister / hipHostRegister / hsa_memory_register).
enum class HostRegisterFlags : unsigned {
  None = 0,
  Mapped = 1u << 0,
  Portable = 1u << 1,
  /// The device only reads the memory (a read-only host array): cudaHostRegisterReadOnly /
  /// hipHostRegisterReadOnly (ROCm 6) where the runtime and device take it, else ignored.
  ReadOnly = 1u << 2,
};

template <class E>
concept HostFlagEnum = std::is_same_v<E, HostAllocFlags> || std::is_same_v<E, HostRegisterFlags>;

template <HostFlagEnum E>
constexpr E operator|(E a, E b) noexcept {
  return static_cast<E>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
template <HostFlagEnum E>
constexpr bool has_flag(E value, E flag) noexcept {
  return (static_cast<unsigned>(value) & static_cast<unsigned>(flag)) != 0;
}

/// Direction of a copy. Host means host memory of any kind (pageable, pinned, mapped).
enum class CopyKind { HostToDevice, DeviceToHost, DeviceToDevice, HostToHost };
/// "HostToDevice", "DeviceToHost", "DeviceToDevice" or "HostToHost".
[[nodiscard]] DEVMEM_API const char* to_string(CopyKind kind) noexcept;

/// What a device is and can do.
struct DeviceProperties {
  std::string name;
  std::string architecture;  // "sm_90", "gfx90a", "host"
  std::int64_t total_memory = 0;
  int warp_size = 32;
  int max_threads_per_block = 1024;
  std::int64_t max_shared_memory_per_block = std::int64_t{48} * 1024;
  /// The most shared memory (static + dynamic) a block may use once its kernel opts in, which
  /// devmem::launch does when a launch asks for more dynamic shared memory than
  /// max_shared_memory_per_block (CUDA: sharedMemPerBlockOptin, 227 KiB on an H100). Equal to
  /// max_shared_memory_per_block on devices without an opt-in (AMD GPUs: 64 KiB).
  std::int64_t max_shared_memory_per_block_optin = std::int64_t{227} * 1024;
  std::array<int, 3> max_block_dim{1024, 1024, 64};                    // threads per block, x y z
  std::array<std::int64_t, 3> max_grid_dim{2147483647, 65535, 65535};  // blocks per grid, x y z
  int multiprocessor_count = 1;
  bool can_map_host_memory = true;
  bool unified_addressing = true;
};

/// Free and total bytes of device memory.
struct MemoryInfo {
  std::int64_t free = 0;
  std::int64_t total = 0;
};

using NativeStream = void*;
using NativeEvent = void*;

// ---- Inter-process sharing (docs/scaling-out.md#ipc) ----
/// Bytes of a vendor IPC memory handle: CUDA's cudaIpcMemHandle_t and HIP's hipIpcMemHandle_t are
/// 64 bytes; the host backend fits its own description of a shared allocation in as many.
inline constexpr std::size_t kVendorIpcHandleBytes = 64;
/// The opaque bytes of a vendor IPC memory handle.
using VendorIpcHandle = std::array<std::byte, kVendorIpcHandleBytes>;
/// A device allocation as the backend made it: its first byte and its size.
struct AllocationRange {
  void* base = nullptr;
  std::size_t bytes = 0;
};

// ---- Managed (unified) memory (docs/managed-memory.md) ----
/// Which streams may first touch a new managed allocation (cudaMallocManaged's flags).
enum class ManagedAttach {
  Global,  // every stream of every device (cudaMemAttachGlobal / hipMemAttachGlobal)
  Host,    // the host; devices only once the memory is prefetched or a stream is attached
           // (cudaMemAttachHost / hipMemAttachHost)
};
/// Where managed memory should live, or who accesses it: a device, or the host (the vendors'
/// cudaCpuDeviceId / hipCpuDeviceId).
struct MemoryLocation {
  enum class Kind { Device, Host };
  Kind kind = Kind::Device;
  int device = 0;  // the device index for Kind::Device; -1 for the host
  /// The host (the CPU's memory).
  [[nodiscard]] static constexpr MemoryLocation host() noexcept { return {Kind::Host, -1}; }
  /// Device `index` (checked against the device count where it is used).
  [[nodiscard]] static constexpr MemoryLocation on_device(int index) noexcept {
    return {Kind::Device, index};
  }
  [[nodiscard]] constexpr bool is_host() const noexcept { return kind == Kind::Host; }
  friend constexpr bool operator==(const MemoryLocation&, const MemoryLocation&) = default;
};
/// "the host" or "device N".
[[nodiscard]] DEVMEM_API std::string to_string(const MemoryLocation& location);
/// Advice about how managed memory will be used (cudaMemAdvise / hipMemAdvise): hints that change
/// where pages live and how faults are served, never what the memory holds.
enum class MemoryAdvice {
  ReadMostly,              // mostly read: devices that read it may keep read-only copies
  UnsetReadMostly,         // undoes ReadMostly (the copies collapse to one)
  PreferredLocation,       // pages should live at the location given with the advice
  UnsetPreferredLocation,  // no preferred location any more
  AccessedBy,              // the location given accesses the memory: keep it mapped there
  UnsetAccessedBy,         // undoes AccessedBy for that location
};
/// "ReadMostly", "UnsetReadMostly", "PreferredLocation", ...
[[nodiscard]] DEVMEM_API const char* to_string(MemoryAdvice advice) noexcept;

/// The vendor layer behind every context: one object per backend (host, cuda, roc), thin calls
/// that throw BackendError (vendor code and name), OutOfMemory or NoDevice. Every member may be
/// called from several threads. Public so that tests and tools can drive a backend directly;
/// applications use the array API.
class DEVMEM_API Backend {
 public:
  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  virtual ~Backend();

  /// "host", "cuda" or "roc".
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Number of usable devices; 0 (not an exception) when the runtime reports none.
  [[nodiscard]] virtual int device_count() = 0;
  /// True once the process has begun to exit and the vendor runtime may already be torn down
  /// (the GPU backends: an std::atexit handler registered right after the runtime initialised).
  /// From then on devmem's destructors make no more vendor calls: queries and waits on behalf of
  /// objects with static storage duration are skipped, and memory they hold is left to the
  /// process's end. False by default (the host backend has no runtime to lose). Thread-safe.
  [[nodiscard]] virtual bool exiting() const noexcept { return false; }
  /// True once a sticky vendor error (BackendError::sticky(), e.g. an illegal address in a kernel)
  /// has made the device unusable for this process: every later call throws that error again,
  /// releases do nothing, and devmem's destructors stop waiting for work. False by default.
  /// Thread-safe.
  [[nodiscard]] virtual bool device_lost() const noexcept { return false; }
  /// Frees the buffers the backend keeps between calls for its own use (staging pipelines and
  /// temporaries of strided copies); later calls make new ones. Called at exit while the runtime
  /// is still alive, so that nothing of devmem's own is outstanding then. Thread-safe; no work
  /// may still be using those buffers (they are idle by construction). Nothing by default.
  virtual void release_idle_buffers() noexcept {}
  /// The vendor runtime's current device of the calling thread (cudaGetDevice), which the
  /// application may have set (cudaSetDevice, torch.cuda.set_device, an MPI rank's binding):
  /// devmem starts each thread's current device from it. 0 when the runtime cannot say (no
  /// device) and on backends without a runtime. Never throws.
  [[nodiscard]] virtual int runtime_current_device() noexcept { return 0; }
  /// Why device_count() is 0, in the vendor's words (empty when there are devices).
  [[nodiscard]] virtual std::string no_device_reason() { return {}; }
  /// Name, architecture, memory and launch limits of `device`.
  [[nodiscard]] virtual DeviceProperties properties(int device) = 0;
  /// Free and total device memory as the runtime reports them (cudaMemGetInfo).
  [[nodiscard]] virtual MemoryInfo memory_info(int device) = 0;

  // Device memory.
  /// `bytes` of device memory (cudaMalloc; nullptr for 0 bytes); OutOfMemory when there is no room.
  [[nodiscard]] virtual void* allocate(int device, std::size_t bytes) = 0;
  /// Frees memory from allocate (cudaFree: waits for the device's work first).
  virtual void deallocate(int device, void* ptr) = 0;

  // Stream-ordered device memory (cudaMallocAsync / hipMallocAsync from the device's memory
  // pool), behind the "async" memory manager.
  /// Whether `device` has a stream-ordered allocator (CUDA 11.2+ / ROCm 5.3+ on a device that
  /// supports memory pools). False by default.
  [[nodiscard]] virtual bool supports_async_allocation(int device);
  /// `bytes` of device memory usable by work enqueued on `stream` after this call (on the
  /// default stream: by later work of every blocking stream). Throws OutOfMemory, and
  /// InvalidArgument on a backend or device without a stream-ordered allocator.
  [[nodiscard]] virtual void* allocate_async(int device, std::size_t bytes, NativeStream stream);
  /// Frees memory from allocate_async once the work enqueued on `stream` before this call has
  /// completed, without waiting for it (and without the device-wide synchronisation of a
  /// cudaFree / hipFree).
  virtual void deallocate_async(int device, void* ptr, NativeStream stream);
  /// How many bytes of freed memory the device's stream-ordered pool keeps for reuse across
  /// synchronizations (cudaMemPoolAttrReleaseThreshold of the device's default pool; the vendors'
  /// default, 0, hands everything back to the system at every stream, event or device
  /// synchronization, so that the next cudaMallocAsync costs about a cudaMalloc). InvalidArgument
  /// where there is no stream-ordered allocator.
  virtual void set_async_release_threshold(int device, std::uint64_t bytes);
  /// Hands the pool's unused memory back to the system until it holds at most `keep_bytes`
  /// (cudaMemPoolTrimTo). InvalidArgument where there is no stream-ordered allocator.
  virtual void trim_async_pool(int device, std::size_t keep_bytes);

  // Page-locked host memory and registration of existing host memory.
  [[nodiscard]] virtual void* host_allocate(int device, std::size_t bytes,
                                            HostAllocFlags flags) = 0;
  /// Frees memory from host_allocate (cudaFreeHost).
  virtual void host_deallocate(int device, void* ptr) = 0;
  /// Page-locks existing host memory (cudaHostRegister); CUDA's errors for overlapping ranges.
  virtual void host_register(int device, void* ptr, std::size_t bytes, HostRegisterFlags flags) = 0;
  /// Undoes host_register of the range starting at `ptr` (cudaHostUnregister).
  virtual void host_unregister(int device, void* ptr) = 0;
  /// The device address of mapped (allocated or registered) host memory.
  [[nodiscard]] virtual void* mapped_device_pointer(int device, void* host_ptr) = 0;
  /// The device whose memory `ptr` points into (device or managed memory the runtime knows), or
  /// -1 when the runtime does not place it on a device (host memory, unknown memory, or a backend
  /// that cannot tell, the default). Used to bind foreign pointers to the right device.
  [[nodiscard]] virtual int pointer_device(const void* ptr);

  // Streams and events.
  [[nodiscard]] virtual NativeStream create_stream(int device) = 0;
  /// Destroys a stream from create_stream; its queued work still completes.
  virtual void destroy_stream(int device, NativeStream stream) = 0;
  /// Waits for the stream's work (nullptr: the legacy default stream); reports its failures.
  virtual void synchronize_stream(int device, NativeStream stream) = 0;
  /// True when all work enqueued on the stream has completed.
  [[nodiscard]] virtual bool query_stream(int device, NativeStream stream) = 0;
  /// A new timing event (cudaEventCreate).
  [[nodiscard]] virtual NativeEvent create_event(int device) = 0;
  /// Destroys an event from create_event or create_completion_event.
  virtual void destroy_event(int device, NativeEvent event) = 0;
  /// Records `event` at the current end of `stream`.
  virtual void record_event(int device, NativeEvent event, NativeStream stream) = 0;
  /// Waits until the work before the event's last record has completed.
  virtual void synchronize_event(int device, NativeEvent event) = 0;
  /// True when that work has completed (or the event was never recorded).
  [[nodiscard]] virtual bool query_event(int device, NativeEvent event) = 0;
  /// Milliseconds between two completed events.
  [[nodiscard]] virtual float elapsed_ms(int device, NativeEvent start, NativeEvent end) = 0;
  /// Work enqueued on `stream` after this call waits until `event` has completed.
  virtual void stream_wait_event(int device, NativeStream stream, NativeEvent event) = 0;
  /// An event used only to learn when work has completed (no timing, elapsed_ms is not asked of
  /// it): cheaper to record, and waited for without spinning where the runtime allows
  /// (cudaEventDisableTiming | cudaEventBlockingSync). Destroyed with destroy_event.
  [[nodiscard]] virtual NativeEvent create_completion_event(int device) {
    return create_event(device);
  }
  /// True while `stream` is being captured into a graph (cudaStreamIsCapturing): work enqueued on
  /// it then runs only when the graph is launched, perhaps many times, so an event recorded now
  /// says nothing about when that work is done. For the default stream (a null handle), which is
  /// never captured itself: true while a blocking stream of the device is capturing, when work on
  /// the default stream would join that capture implicitly. False on backends without graphs.
  [[nodiscard]] virtual bool is_capturing(int device, NativeStream stream);

  // Data movement. All enqueue on `stream`; pointers must stay valid until the work completes.
  // With pageable (not page-locked) host memory on a non-default stream the vendors' rules apply,
  // on every backend: a device-to-host copy returns once it is complete, a host-to-device copy
  // once its source has been read.
  virtual void copy(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                    NativeStream stream) = 0;
  /// `height` rows of `width` bytes; row r at src + r*src_pitch and dst + r*dst_pitch. Pitches
  /// are >= width when height > 1.
  virtual void copy_2d(int device, void* dst, std::size_t dst_pitch, const void* src,
                       std::size_t src_pitch, std::size_t width, std::size_t height, CopyKind kind,
                       NativeStream stream) = 0;
  /// Copies every block of `plan` (see layout::CopyPlan); `src` and `dst` are the addresses of
  /// element (0, ..., 0). The default issues one copy_2d per block; backends override it when they
  /// can do better (the host backend enqueues the whole plan as one operation).
  virtual void copy_strided(int device, void* dst, const void* src, const layout::CopyPlan& plan,
                            CopyKind kind, NativeStream stream);
  /// Sets `bytes` bytes of device memory to `byte_value` (cudaMemsetAsync).
  virtual void memset(int device, void* dst, int byte_value, std::size_t bytes,
                      NativeStream stream) = 0;
  /// Runs `fn` on a backend thread once all work enqueued on `stream` before it has completed
  /// (cudaLaunchHostFunc). `fn` must not call the backend. Used to release keep-alive references.
  virtual void launch_host_function(int device, NativeStream stream, std::function<void()> fn) = 0;
  /// Makes `device` current on the calling thread, for work the caller issues to the vendor
  /// runtime itself (kernel launches compiled into the application). No-op by default.
  virtual void make_current(int device);

  // ---- Several devices (docs/scaling-out.md#several-devices) ----
  // Peer access is directional: `device` reading and writing memory of `peer`. core/ copies
  // between arrays of two devices with copy_peer when can_access_peer(destination, source) holds
  // (after enable_peer_access), and otherwise stages the bytes through page-locked host memory.
  /// Whether `device` can access memory of `peer` directly (cudaDeviceCanAccessPeer /
  /// hipDeviceCanAccessPeer). False for device == peer and on backends without peer access (the
  /// default). BackendError for an index that is not a device.
  [[nodiscard]] virtual bool can_access_peer(int device, int peer);
  /// Lets `device` access memory of `peer` (cudaDeviceEnablePeerAccess). Idempotent: enabling
  /// access that is already enabled succeeds (the vendors' "already enabled" status is not an
  /// error here). BackendError when the devices cannot be peers (can_access_peer is false, or
  /// device == peer); the default always throws that.
  virtual void enable_peer_access(int device, int peer);
  /// Withdraws what enable_peer_access gave (cudaDeviceDisablePeerAccess). Idempotent: disabling
  /// access that is not enabled succeeds. A no-op by default (nothing can be enabled there).
  virtual void disable_peer_access(int device, int peer);
  /// Copies `bytes` from `src` in memory of `src_device` to `dst` in memory of `dst_device`,
  /// enqueued on `stream`, a stream of `dst_device` (nullptr: its default stream)
  /// (cudaMemcpyPeerAsync / hipMemcpyPeerAsync). Ordered only on `stream`: the caller orders it
  /// after the source device's work. Backends may require enable_peer_access(dst_device,
  /// src_device) first (the host backend does: BackendError PeerAccessNotEnabled); the default
  /// throws InvalidArgument (no peer copies).
  virtual void copy_peer(int dst_device, void* dst, int src_device, const void* src,
                         std::size_t bytes, NativeStream stream);
  // ---- Managed (unified) memory (docs/managed-memory.md) ----
  // One allocation that the host and the devices address with the same pointer, migrated by the
  // driver. Defaults: no managed memory (supports_managed_memory false; the others throw
  // InvalidArgument naming the backend). core/ checks arguments (sizes, locations, the
  // oversubscription rule) before these are called.
  /// Whether `device` can allocate managed memory on this backend.
  [[nodiscard]] virtual bool supports_managed_memory(int device);
  /// `bytes` of managed memory for `device` (cudaMallocManaged; nullptr for 0 bytes), first
  /// accessible as `attach` says. OutOfMemory when there is no room. The caller decides whether
  /// `bytes` may exceed the device's free memory (the vendors allow it; it can hang a GPU).
  [[nodiscard]] virtual void* allocate_managed(int device, std::size_t bytes, ManagedAttach attach);
  /// Frees memory from allocate_managed (cudaFree: waits for the device's work first).
  virtual void deallocate_managed(int device, void* ptr);
  /// Migrates `bytes` of managed memory from `ptr` to `location`, enqueued on `stream`, a stream
  /// of `device` (cudaMemPrefetchAsync / hipMemPrefetchAsync): later work on the stream finds the
  /// pages there. Returns without waiting. A hint: the contents never change.
  virtual void prefetch_managed(int device, const void* ptr, std::size_t bytes,
                                MemoryLocation location, NativeStream stream);
  /// Gives `advice` for `bytes` of managed memory from `ptr` (cudaMemAdvise / hipMemAdvise);
  /// `location` is the preferred location or the accessing processor (ignored by ReadMostly and
  /// its unset form). Takes effect at once, not in any stream's order.
  virtual void advise_managed(int device, const void* ptr, std::size_t bytes, MemoryAdvice advice,
                              MemoryLocation location);

  // ---- Inter-process sharing (docs/scaling-out.md#ipc) ----
  // Defaults: no IPC (supports_ipc false, the others throw InvalidArgument naming the backend).
  /// Whether device memory of `device` can be exported to and opened by other processes.
  [[nodiscard]] virtual bool supports_ipc(int device);
  /// The allocation (from allocate or allocate_async) that `ptr` points into: what an exported
  /// handle names, since a view, or a block a memory manager carved out of a larger allocation,
  /// may start anywhere inside it. BackendError when `ptr` is not inside device memory the
  /// backend allocated.
  [[nodiscard]] virtual AllocationRange allocation_range(int device, const void* ptr);
  /// A handle to the allocation starting at `base` that another process can open with ipc_open
  /// (cudaIpcGetMemHandle). The same allocation may be exported any number of times.
  [[nodiscard]] virtual VendorIpcHandle ipc_get_handle(int device, void* base);
  /// Maps an allocation exported by another process into this one on `device` (cudaIpcOpenMemHandle
  /// with lazy peer access) and returns the mapping: its base and the bytes from there that are
  /// really mapped, as the driver or the operating system says (cuMemGetAddressRange,
  /// hipMemGetAddressRange, the memfd's size), never as the handle says, since a handle is input
  /// from another process. BackendError for a handle that names no live allocation (freed, or
  /// its exporter gone) or one exported by this process; a backend may refuse a handle naming
  /// something that is not a shared allocation at all with InvalidArgument (the host backend
  /// does). Nothing stays mapped when it throws.
  [[nodiscard]] virtual AllocationRange ipc_open(int device, const VendorIpcHandle& handle);
  /// Unmaps what ipc_open returned (cudaIpcCloseMemHandle), given its base. Called once per
  /// ipc_open.
  virtual void ipc_close(int device, void* base);
};

/// Names of the backends compiled into this build, the default first ("cuda" or "roc" if
/// compiled, then "host").
[[nodiscard]] DEVMEM_API std::vector<std::string> compiled_backends();

/// Name of the backend in use: the one selected by select_backend, else DEVMEM_BACKEND, else the
/// first of compiled_backends(). Throws InvalidArgument when DEVMEM_BACKEND names a backend that
/// is not compiled in.
[[nodiscard]] DEVMEM_API std::string backend_name();

/// Chooses the backend for the rest of the process. Only allowed before any context exists
/// (InvalidArgument otherwise, or when `name` is not compiled in).
DEVMEM_API void select_backend(std::string_view name);

/// The backend instance in use (see backend_name). Lives until the process exits.
[[nodiscard]] DEVMEM_API Backend& active_backend();

}  // namespace devmem

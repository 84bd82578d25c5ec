// Controls of the host backend, the simulated device that runs the whole API without a GPU.
//
// Device memory is ordinary process memory with a configurable capacity (DEVMEM_HOST_DEVICE_MEMORY,
// bytes, with optional K/M/G suffix; default 4G), so out-of-memory paths are real. Every
// non-default stream runs its operations in order on a worker thread, so asynchronous work really
// completes later. Host registrations and allocations are tracked with CUDA's rules, and any call
// kind can be made to fail on its Nth occurrence for reliability tests. The number of simulated
// devices is DEVMEM_HOST_DEVICE_COUNT (default 1); each may have its own capacity and injected
// failures, and whether they can be peers of each other is configurable (DEVMEM_HOST_PEER_ACCESS),
// so that direct and staged copies between devices both run (docs/scaling-out.md#several-devices).
// Device-side pointers passed to copies and memsets are checked against live allocations and mapped
// host memory, so an out-of-bounds or use-after-free access is reported as IllegalAddress instead
// of corrupting memory.
//
// Kernels compiled for the host backend are bounds-checked (see bounds_checking below): every
// element access of an ArrayView, shared_array, local_array or DEVMEM_CONSTANT_ARRAY checks its
// indices, and an index outside [0, extent) (negative ones included, as on a GPU) fails the launch
// with LaunchFailure (719): "ArrayView: index (128,) is out of bounds for shape (100,) in thread
// (28, 0, 0) of block (1, 0, 0)". At launch, the memory every ArrayView argument can reach must lie
// in a live device allocation or mapped host memory, or launch throws InvalidArgument before
// anything is enqueued (a view of a freed array, or from a closed mapped() scope).
//
// Thread safety: every function may be called concurrently with any devmem call.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace devmem::host {

/// Call kinds of the host backend that can be counted and made to fail.
enum class Call {
  Allocate,
  Deallocate,
  HostAllocate,
  HostDeallocate,
  HostRegister,
  HostUnregister,
  Copy,  // every copy, copy_2d and copy_strided
  Memset,
  CreateStream,
  DestroyStream,
  SynchronizeStream,
  CreateEvent,
  RecordEvent,
  Launch,           // kernel launches (<devmem/kernel.hpp>)
  AllocateManaged,  // managed allocations (their frees count as Deallocate)
  Prefetch,         // prefetches of managed memory
  Advise,           // advice about managed memory
  Count_            // number of kinds; not a call
};
/// The kind's name ("Allocate", "Copy", ...).
[[nodiscard]] DEVMEM_API std::string_view to_string(Call call) noexcept;

/// Error codes the host backend reports, numbered like the CUDA runtime's cudaError_t.
enum class Status : int {
  Success = 0,
  InvalidValue = 1,
  MemoryAllocation = 2,
  InvalidDevice = 101,
  InvalidResourceHandle = 400,
  NotReady = 600,
  IllegalAddress = 700,
  LaunchOutOfResources = 701,  // a simulated block needs more shared memory than the device has
  LaunchFailure = 719,         // a simulated kernel failed (exception, barrier divergence)
  HostMemoryAlreadyRegistered = 712,
  HostMemoryNotRegistered = 713,
  PeerAccessUnsupported = 217,  // enable_peer_access between devices that cannot be peers
  PeerAccessNotEnabled = 705,   // a peer copy without enable_peer_access first
  Injected = 999,               // a failure requested with fail_nth
};
/// The status's name ("InvalidValue", ...), as BackendError::code_name() reports it.
[[nodiscard]] DEVMEM_API std::string_view to_string(Status status) noexcept;

/// Device memory capacity of every simulated device, in bytes. Shrinking below what is in use is
/// allowed: allocations fail until enough is freed. Throws InvalidArgument for a negative value.
DEVMEM_API void set_device_memory_capacity(std::int64_t bytes);
/// The capacity set_device_memory_capacity (or DEVMEM_HOST_DEVICE_MEMORY) gave.
[[nodiscard]] DEVMEM_API std::int64_t device_memory_capacity() noexcept;
/// Bytes of simulated device memory currently allocated on `device`.
[[nodiscard]] DEVMEM_API std::int64_t device_memory_used(int device = 0);
/// What devmem asked of a device's stream-ordered pool (Backend::set_async_release_threshold and
/// trim_async_pool, from the `async` memory manager). The simulator's pool keeps nothing.
struct AsyncPoolState {
  std::uint64_t release_threshold = 0;  // the vendors' default until set
  std::int64_t trims = 0;
  std::size_t last_trim_keep_bytes = 0;
};
/// The pool state of `device` (all zero before the host backend exists). Thread-safe.
[[nodiscard]] DEVMEM_API AsyncPoolState async_pool_state(int device = 0);
/// Events of `device` that exist now: made by create_event or create_completion_event and not yet
/// destroyed (the application's, devmem's recycled ones and its completion events alike), so that
/// tests see what devmem keeps. 0 before the host backend exists. Thread-safe.
[[nodiscard]] DEVMEM_API std::int64_t live_event_count(int device = 0);

// ---- Managed memory (docs/managed-memory.md) ----
// The simulator's managed memory is one host allocation that host code and the simulated devices
// address with the same pointer. It is not counted against a device's capacity (as on a GPU,
// where managed pages take device memory only while they are resident there). Prefetches are
// operations of their stream and are recorded when they run; advice is recorded when given.

/// What a device's managed memory has seen.
struct ManagedMemoryState {
  std::int64_t allocations = 0;           // live managed allocations made for the device
  std::int64_t bytes = 0;                 // their bytes
  std::int64_t prefetches_to_device = 0;  // prefetches to the device that have run
  std::int64_t prefetches_to_host = 0;    // prefetches to the host on the device's streams
  std::int64_t advice = 0;                // advise calls accepted for the device's memory
};
/// The managed-memory counts of `device` (all zero before the host backend exists). Thread-safe.
[[nodiscard]] DEVMEM_API ManagedMemoryState managed_memory_state(int device = 0);

/// One managed allocation as the simulator holds it: what it is, and the advice and prefetches
/// it has received (advice about part of the allocation is recorded for the whole of it).
struct ManagedRangeState {
  const void* base = nullptr;
  std::size_t bytes = 0;
  int device = 0;  // the device it was allocated for
  ManagedAttach attach = ManagedAttach::Global;
  bool read_mostly = false;
  std::optional<MemoryLocation> preferred_location;
  std::vector<MemoryLocation> accessed_by;      // in the order the advice came
  std::optional<MemoryLocation> last_prefetch;  // where the last prefetch that ran took it
  std::int64_t prefetches = 0;                  // prefetches that have run
};
/// The managed allocation that `ptr` points into. InvalidArgument when it is not inside one (or
/// before the host backend exists). Thread-safe.
[[nodiscard]] DEVMEM_API ManagedRangeState managed_range_state(const void* ptr);

/// Makes the `nth` (1-based) call of `kind` from now on, and the `count` - 1 calls right after
/// it, fail with `status` (Injected by default; MemoryAllocation makes an allocation report
/// out-of-memory). Replaces an earlier request for the same kind. InvalidArgument for nth < 1,
/// count < 1 or a Success status. The failure is reported like the vendor's: synchronously by the
/// call, or for work on a non-default stream by the next synchronize / query of that stream (a
/// copy into pageable host memory, which the call waits for, reports it at once).
DEVMEM_API void fail_nth(Call kind, std::int64_t nth, Status status = Status::Injected,
                         std::int64_t count = 1);
/// Cancels every pending fail_nth request.
DEVMEM_API void clear_failures() noexcept;
/// Number of calls of `kind` made since the process started or reset_call_counts().
[[nodiscard]] DEVMEM_API std::int64_t call_count(Call kind) noexcept;
/// Sets every call_count to 0.
DEVMEM_API void reset_call_counts() noexcept;

// ---- Several devices (docs/scaling-out.md#several-devices) ----

/// Device memory capacity of simulated device `device` alone, in bytes, overriding the capacity of
/// every device (set_device_memory_capacity(bytes), which also clears these overrides). Shrinking
/// below what is in use is allowed. InvalidArgument for a negative value or a device index outside
/// [0, 64).
DEVMEM_API void set_device_memory_capacity(int device, std::int64_t bytes);
/// The capacity of `device`: its own override if set, else device_memory_capacity().
/// InvalidArgument for a device index outside [0, 64).
[[nodiscard]] DEVMEM_API std::int64_t device_memory_capacity(int device);

/// Whether simulated device `device` can access memory of `peer` (what Backend::can_access_peer
/// answers; directional). The default for every pair of distinct devices comes from
/// DEVMEM_HOST_PEER_ACCESS, read once: "all" (the default: every pair, like GPUs joined by NVLink)
/// or "none" (no pair, like GPUs on separate PCIe root complexes: copies between devices are then
/// staged through host memory). Turning access off also withdraws what enable_peer_access gave.
/// InvalidArgument for an index outside [0, 64) or device == peer.
DEVMEM_API void set_peer_access(int device, int peer, bool accessible);
/// Forgets every set_peer_access: all pairs take DEVMEM_HOST_PEER_ACCESS's value again.
DEVMEM_API void reset_peer_access() noexcept;
/// The value set_peer_access or DEVMEM_HOST_PEER_ACCESS gives for the pair (false for device ==
/// peer or an index outside [0, 64)). Throws InvalidArgument naming the variable when
/// DEVMEM_HOST_PEER_ACCESS is neither "all" nor "none".
[[nodiscard]] DEVMEM_API bool peer_access(int device, int peer);

/// fail_nth restricted to calls made for `device`: the `nth` call of `kind` on that device (calls
/// on other devices are not counted toward it) fails with `status`, and so do the `count` - 1
/// calls of that kind on that device after it. A peer copy counts as a Copy of its destination
/// device. Replaces an earlier request for the same kind, whatever its device; fail_nth without a
/// device matches calls on any device. InvalidArgument as fail_nth, and for a device index outside
/// [0, 64).
DEVMEM_API void fail_nth_on_device(int device, Call kind, std::int64_t nth,
                                   Status status = Status::Injected, std::int64_t count = 1);

/// Turns the simulator's bounds checks (see the file comment) on or off for kernels that run from
/// now on. Off, an out-of-range index is not reported and the access goes ahead unchecked, as on
/// a GPU, and launch does not check its views' memory; the inline comparison itself stays (it is
/// one compare and a not-taken branch per index): to compile it out, define
/// DEVMEM_HOST_NO_BOUNDS_CHECK for every translation unit of the program.
DEVMEM_API void set_bounds_checking(bool enabled) noexcept;
/// Whether bounds checks are on: set_bounds_checking's value if it was called, else off when the
/// environment variable DEVMEM_HOST_BOUNDS_CHECK (read once) is "0", "off" or "false", else on.
[[nodiscard]] DEVMEM_API bool bounds_checking() noexcept;

}  // namespace devmem::host

// The host backend: a simulated device in process memory and threads (the controls are in
// include/devmem/host_controls.hpp). Not installed; the registry creates it through
// make_host_backend() (core/backend_factories.hpp).
//
// What it simulates, and why:
// - Device memory is separate 256-byte-aligned allocations, counted against a capacity, so
//   out-of-memory paths are real. Every device-side byte range of a copy or memset is checked at
//   enqueue time against live device allocations and mapped host memory (IllegalAddress
//   otherwise), so out-of-bounds and use-after-free accesses are reported instead of corrupting
//   memory. Host-side ranges are not checked: a real driver knows nothing of pageable memory.
// - Page-locked host memory and registrations follow CUDA's rules (overlapping registrations are
//   HostMemoryAlreadyRegistered, unregistering something else is HostMemoryNotRegistered, only
//   mapped memory has a device address, which with unified addressing is the host address).
// - Copies and memsets of 8 MiB and more are split over the machine's cores (ParallelCopier), as
//   a GPU copies with several engines; each is still one operation of its stream.
// - Every non-default stream has a worker thread running its operations in FIFO order, so
//   asynchronous work really completes later. The default stream (nullptr) is CUDA's legacy
//   default stream (host_default_stream.cpp): a kernel launched on it is queued on the device's
//   default-stream worker (started at the first such launch) and runs after the work the device's
//   other streams had queued, so launch returns before the kernel has run, as on a GPU, and a
//   missing synchronize shows up on the host. Event records, stream waits, stream-ordered frees
//   and prefetches on it queue behind such launches while any is pending. Copies, memsets and
//   host functions on it wait for the device's streams and its queued launches, then run inline,
//   so they are complete when the call returns (devmem's contract for the default stream). Work
//   enqueued on another stream after a default-stream launch waits for that launch (the legacy
//   default stream orders every blocking stream).
// - An operation that fails on a worker (e.g. an injected copy failure) stores its error on the
//   stream; the next synchronize_stream or query_stream (or destroy_stream) rethrows it, once.
//   A failure of queued default-stream work is rethrown by the next synchronize_stream or
//   query_stream of the default stream; one nobody synchronized is written to stderr when the
//   process exits (or the backend is destroyed), as destroy_stream reports a stream's.
// - Copies between the device and pageable host memory on a non-default stream follow the
//   vendors' documented synchronisation rules for pageable memory (CUDA's "API synchronization
//   behavior", HIP's the same): device-to-host returns only once the copy has completed, and
//   host-to-device returns once the source has been read: up to kPageableStagingBytes it is
//   staged into a private buffer (the device side still runs later), a larger one is waited for,
//   as the vendors' drivers do once their small staging buffers are full (staging a large copy
//   would cost a second copy and fresh pages on every call). Copies to or from
//   page-locked memory (pinned, mapped, registered) stay fully asynchronous. A program therefore
//   behaves the same on this backend as on a GPU.
// - deallocate and host_deallocate first wait for streams that may still use the memory (like
//   cudaFree and cudaFreeHost, which synchronise), so a worker never touches freed memory.
//
// Thread safety: every member may be called concurrently. Lock order: a backend mutex is never
// held while waiting for a stream or an event.
#pragma once

#include "backends/host/host_controls.hpp"
#include "backends/host/host_event.hpp"
#include "backends/host/host_parallel_copy.hpp"
#include "backends/host/host_stream.hpp"

#include <devmem/backend.hpp>
#include <devmem/error.hpp>
#include <devmem/host_controls.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::host {

/// Device allocations take whole pages of this size (see host_ipc.cpp).
inline constexpr std::size_t kDevicePageBytes = 4096;
/// Managed allocations are page-aligned (cudaMallocManaged's memory starts on a page).
inline constexpr std::size_t kManagedAlignment = 4096;
/// The bytes reserved for a device allocation of `bytes`: whole pages (0 on overflow).
[[nodiscard]] inline std::size_t device_pages(std::size_t bytes) noexcept {
  const std::size_t rounded = (bytes + kDevicePageBytes - 1) / kDevicePageBytes * kDevicePageBytes;
  return rounded < bytes ? 0 : rounded;
}
// cudaMalloc guarantees 256-byte alignment. The simulator gives whole pages of its own (page
// aligned, the size rounded up to pages), so that exporting an allocation to another process can
// remap exactly its pages (host_ipc.cpp) without touching a neighbour's bytes.
inline constexpr std::size_t kDeviceAlignment = kDevicePageBytes;
/// Page-locked host allocations are whole pages, page-aligned (host_memory.cpp allocates them,
/// ~HostBackend frees those left with the same alignment).
inline constexpr std::size_t kPageSize = 4096;

/// The entry of `ranges` (start -> size, or start -> HostRange) that contains [begin, begin+bytes),
/// or end(). Entries never overlap, so only the last one starting at or before `begin` can match.
template <class Map, class SizeOf>
typename Map::const_iterator find_containing(const Map& ranges, std::uintptr_t begin,
                                             std::size_t bytes, SizeOf size_of) {
  auto it = ranges.upper_bound(begin);
  if (it == ranges.begin()) return ranges.end();
  --it;
  const std::size_t into = begin - it->first;
  const std::size_t size = size_of(it->second);
  if (into < size && bytes <= size - into) return it;
  return ranges.end();
}

/// The size of an entry of a device's allocation map, for find_containing.
inline std::size_t size_of_allocation(std::size_t bytes) noexcept {
  return bytes;
}

/// Changed (under the freeing backend's memory_mutex_) whenever a device allocation of any host
/// backend is freed, and when a backend is destroyed: each thread's cache of the allocations its
/// copies touched (host_copy.cpp, which defines it) is valid only while it stays the same.
extern std::atomic<std::uint64_t> g_allocations_freed;

class HostBackend final : public Backend {
 public:
  /// Reads DEVMEM_HOST_DEVICE_COUNT (InvalidArgument when it is invalid).
  HostBackend();
  /// Joins the workers of streams that were never destroyed and frees what is still allocated.
  ~HostBackend() override;

  /// Frees the device blocks kept for reuse (cached_blocks_).
  void release_idle_buffers() noexcept override;

  /// The first host backend created in this process, while it exists; null before (and after).
  /// Lets the devmem::host:: free functions reach the simulated devices.
  [[nodiscard]] static HostBackend* live_instance() noexcept;
  /// Bytes of device memory allocated on `device`.
  [[nodiscard]] std::int64_t device_memory_used(int device);
  /// The stream-ordered pool's settings of `device` (host::async_pool_state).
  [[nodiscard]] AsyncPoolState async_pool_state(int device);
  /// Events of `device` created and not yet destroyed (host::live_event_count).
  [[nodiscard]] std::int64_t live_event_count(int device);
  /// The managed-memory counts of `device` (host::managed_memory_state).
  [[nodiscard]] ManagedMemoryState managed_memory_state(int device);
  /// The managed allocation `ptr` points into (host::managed_range_state); InvalidArgument when
  /// there is none.
  [[nodiscard]] ManagedRangeState managed_range_state(const void* ptr);

  [[nodiscard]] std::string_view name() const noexcept override { return "host"; }
  [[nodiscard]] int device_count() override { return device_count_; }
  [[nodiscard]] std::string no_device_reason() override;
  [[nodiscard]] DeviceProperties properties(int device) override;
  [[nodiscard]] MemoryInfo memory_info(int device) override;

  [[nodiscard]] void* allocate(int device, std::size_t bytes) override;
  void deallocate(int device, void* ptr) override;

  [[nodiscard]] void* host_allocate(int device, std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(int device, void* ptr) override;
  void host_register(int device, void* ptr, std::size_t bytes, HostRegisterFlags flags) override;
  void host_unregister(int device, void* ptr) override;
  [[nodiscard]] void* mapped_device_pointer(int device, void* host_ptr) override;
  [[nodiscard]] int pointer_device(const void* ptr) override;
  [[nodiscard]] bool supports_async_allocation(int device) override;
  [[nodiscard]] void* allocate_async(int device, std::size_t bytes, NativeStream stream) override;
  void deallocate_async(int device, void* ptr, NativeStream stream) override;
  void set_async_release_threshold(int device, std::uint64_t bytes) override;
  void trim_async_pool(int device, std::size_t keep_bytes) override;

  // Managed memory (host_managed.cpp; docs/managed-memory.md): page-aligned host memory that
  // copies, memsets and kernels of every device accept as device memory. Prefetches are recorded
  // when they run on their stream (counted and fault-injectable as Call::Prefetch), advice when
  // it is given (Call::Advise).
  [[nodiscard]] bool supports_managed_memory(int device) override;
  [[nodiscard]] void* allocate_managed(int device, std::size_t bytes,
                                       ManagedAttach attach) override;
  void deallocate_managed(int device, void* ptr) override;
  void prefetch_managed(int device, const void* ptr, std::size_t bytes, MemoryLocation location,
                        NativeStream stream) override;
  void advise_managed(int device, const void* ptr, std::size_t bytes, MemoryAdvice advice,
                      MemoryLocation location) override;

  [[nodiscard]] NativeStream create_stream(int device) override;
  void destroy_stream(int device, NativeStream stream) override;
  void synchronize_stream(int device, NativeStream stream) override;
  [[nodiscard]] bool query_stream(int device, NativeStream stream) override;
  [[nodiscard]] NativeEvent create_event(int device) override;
  [[nodiscard]] NativeEvent create_completion_event(int device) override;
  void destroy_event(int device, NativeEvent event) override;
  void record_event(int device, NativeEvent event, NativeStream stream) override;
  void synchronize_event(int device, NativeEvent event) override;
  [[nodiscard]] bool query_event(int device, NativeEvent event) override;
  [[nodiscard]] float elapsed_ms(int device, NativeEvent start, NativeEvent end) override;
  void stream_wait_event(int device, NativeStream stream, NativeEvent event) override;

  void copy(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
            NativeStream stream) override;
  void copy_2d(int device, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t height, CopyKind kind, NativeStream stream) override;
  /// One operation for the whole plan (layout::copy_host_strided), counted as one Copy call.
  void copy_strided(int device, void* dst, const void* src, const layout::CopyPlan& plan,
                    CopyKind kind, NativeStream stream) override;
  void memset(int device, void* dst, int byte_value, std::size_t bytes,
              NativeStream stream) override;
  void launch_host_function(int device, NativeStream stream, std::function<void()> fn) override;
  // Several devices (docs/scaling-out.md#several-devices): access between simulated devices is
  // what host::set_peer_access / DEVMEM_HOST_PEER_ACCESS say; copy_peer needs enable_peer_access
  // (PeerAccessNotEnabled otherwise) and checks that each side lies in its device's memory.
  [[nodiscard]] bool can_access_peer(int device, int peer) override;
  void enable_peer_access(int device, int peer) override;
  void disable_peer_access(int device, int peer) override;
  void copy_peer(int dst_device, void* dst, int src_device, const void* src, std::size_t bytes,
                 NativeStream stream) override;
  // Inter-process sharing (host_ipc.cpp; docs/scaling-out.md#ipc): an exported allocation is
  // moved into a memfd mapped over the same addresses, which other processes open through
  // /proc/<pid>/fd/<fd>.
  [[nodiscard]] bool supports_ipc(int device) override;
  [[nodiscard]] AllocationRange allocation_range(int device, const void* ptr) override;
  [[nodiscard]] VendorIpcHandle ipc_get_handle(int device, void* base) override;
  [[nodiscard]] AllocationRange ipc_open(int device, const VendorIpcHandle& handle) override;
  void ipc_close(int device, void* base) override;
  /// Enqueues a simulated kernel (`run_grid` runs every block; see host_kernel.cpp), counted and
  /// fault-injectable as Call::Launch. On the default stream too: it is queued on the device's
  /// default-stream worker, and its failure is reported by the default stream's next synchronize.
  void launch_kernel(int device, NativeStream stream, HostStream::Operation run_grid);
  /// Waits for the work queued on every device's default stream and writes each failure of it
  /// that no synchronize reported to stderr ("devmem: error: ..."): called when the process exits
  /// (a handler registered when the first default-stream worker starts) and by the destructor.
  /// `at_exit` chooses the sentence. Never throws.
  void finish_default_streams(bool at_exit) noexcept;
  /// BackendError with the message "host <function>: <status> (<code>): <details>".
  [[nodiscard]] static BackendError make_error(const char* function, Status status,
                                               std::string_view details);
  /// True when every byte of [begin, begin + bytes) lies in one live device allocation (of any
  /// device) or in mapped host memory: what a device-side access may touch.
  [[nodiscard]] bool device_accessible(std::uintptr_t begin, std::size_t bytes) const;

 private:
  /// Bytes [lo, hi) relative to a pointer that an operation touches on one side.
  struct ByteSpan {
    std::int64_t lo = 0;
    std::int64_t hi = 0;
    [[nodiscard]] bool empty() const noexcept { return hi <= lo; }
  };
  /// The bytes one side of a strided copy touches, from its `offset` with rows `pitch` apart and
  /// `outer_strides` for the outer loops; nullopt when that extent overflows.
  static std::optional<ByteSpan> touched_span(const layout::CopyPlan& plan, std::int64_t offset,
                                              std::int64_t pitch, const Strides& outer_strides);
  /// A page-locked allocation or a registration: its size and whether it is mapped.
  struct HostRange {
    std::size_t bytes = 0;
    bool mapped = false;
  };
  using AllocationMap = std::map<std::uintptr_t, std::size_t>;
  /// An allocation exported with ipc_get_handle: the memfd now backing its pages.
  struct Export {
    int fd = -1;
    std::uint64_t token = 0;  // names the memfd ("devmem-ipc-<token>"), checked by importers
    std::size_t bytes = 0;    // the allocation's size
    std::size_t mapped = 0;   // whole pages: what the memfd holds and what is mapped
  };
  /// A mapping of another process's allocation made by ipc_open.
  struct Import {
    std::size_t bytes = 0;   // the allocation's size, at most `mapped`
    std::size_t mapped = 0;  // the memfd's size (fstat), all of it mapped
    int device = 0;
  };
  using HostRangeMap = std::map<std::uintptr_t, HostRange>;
  struct DeviceMemory {
    AllocationMap allocations;  // start address -> bytes
    std::int64_t used = 0;
    AsyncPoolState async_pool;   // what the stream-ordered pool was told (it keeps nothing)
    ManagedMemoryState managed;  // counts of the device's managed memory
  };
  /// Managed allocations of every device, by start address (host_managed.cpp).
  using ManagedMap = std::map<std::uintptr_t, ManagedRangeState>;
  /// The managed allocation holding [begin, begin + bytes), or end(). Needs memory_mutex_.
  [[nodiscard]] ManagedMap::iterator find_managed_locked(std::uintptr_t begin, std::size_t bytes);
  /// InvalidDevice unless `location` is the host or a device of this backend.
  void check_location(const char* function, MemoryLocation location) const;

  /// BackendError with the message "host <function>: <status> (<code>): <details>".
  template <class... Args>
  [[noreturn]] static void fail(const char* function, Status status,
                                fmt::format_string<Args...> format, Args&&... args) {
    throw make_error(function, status, fmt::format(format, std::forward<Args>(args)...));
  }
  /// The error a fail_nth request makes `function` report (OutOfMemory for an allocation failing
  /// with MemoryAllocation).
  [[nodiscard]] static std::exception_ptr injected_error(const char* function, Call kind,
                                                         const detail::Injection& injection,
                                                         int device, std::size_t bytes = 0);
  [[noreturn]] static void throw_injected(const char* function, Call kind,
                                          const detail::Injection& injection, int device,
                                          std::size_t bytes = 0);

  void check_device(const char* function, int device) const;
  /// Removes the allocation starting at `ptr` from `device`'s books and frees it; InvalidValue
  /// naming `function` when there is none.
  void release_allocation(const char* function, int device, void* ptr);
  /// Gives an exported allocation's pages back to private memory and closes its memfd (before
  /// the allocation is freed); nothing when it was not exported. Never throws.
  static void unshare(void* ptr, const Export& exported) noexcept;
  /// The device whose IPC mapping contains [begin, begin + bytes), or -1. Needs memory_mutex_.
  [[nodiscard]] int imported_device_locked(std::uintptr_t begin, std::size_t bytes) const;
  /// IllegalAddress unless every byte of `span` around `ptr` is device-accessible.
  void check_device_span(const char* function, const char* role, const void* ptr,
                         ByteSpan span) const;
  /// Whether [first, first + bytes) lies in a device allocation of this backend that this thread
  /// found before and no device allocation has been freed since (check_device_span's cache; no
  /// lock). False says nothing: check_device_span then looks the range up.
  [[nodiscard]] bool cached_device_span(std::uintptr_t first, std::size_t bytes) const noexcept;
  /// Checks both sides of a copy of `kind`: device sides with check_device_span, host sides only
  /// for null pointers.
  void check_copy(const char* function, CopyKind kind, const void* dst, ByteSpan dst_span,
                  const void* src, ByteSpan src_span) const;
  [[nodiscard]] bool device_accessible_locked(std::uintptr_t begin, std::size_t bytes) const;
  [[nodiscard]] std::string describe_device_pointer_locked(int device,
                                                           std::uintptr_t address) const;

  [[nodiscard]] std::shared_ptr<HostStream> find_stream(const char* function, int device,
                                                        NativeStream stream);
  /// `device` < 0 accepts an event of any device.
  [[nodiscard]] std::shared_ptr<HostEvent> find_event(const char* function, int device,
                                                      NativeEvent event);
  /// Snapshot of the streams of `device` (every device when `device` < 0).
  [[nodiscard]] std::vector<std::shared_ptr<HostStream>> streams_of(int device);
  /// Waits until the streams of `device` (every device when < 0), its default stream's included,
  /// have run their queued work. Inline: with nothing queued anywhere it is two atomic loads,
  /// which every copy on the default stream pays (devmem::mpi's eager messages are such copies).
  void drain(int device) {
    // No stream of any device, default streams included, has work queued or running: every
    // operation enqueued before this call has run, and the acquire loads see what it wrote.
    if (stream_work_.load(std::memory_order_acquire) == 0 &&
        default_work_.load(std::memory_order_acquire) == 0) {
      return;
    }
    wait_for_queued_work(device);
  }
  /// drain's wait, when some stream has work queued or running.
  void wait_for_queued_work(int device);
  /// What an operation on the default stream does: Run waits for the device's queued work (drain)
  /// and runs inline; Queue enqueues it on the default-stream worker; QueueWhenBusy queues it
  /// while the device's default stream has work queued, and runs it as Run otherwise.
  enum class OnDefault { Run, Queue, QueueWhenBusy };
  /// Runs `op` on the default stream as `on_default` says, or enqueues it on `stream`. With an
  /// injected failure the operation does not run: the error is thrown now when it would run
  /// inline, or stored on the stream in its place (reported by the next synchronize/query, like a
  /// real asynchronous failure).
  void submit(const char* function, Call kind, int device, NativeStream stream,
              const detail::Injection& injection, HostStream::Operation op,
              OnDefault on_default = OnDefault::Run);

  // ---- The legacy default stream (host_default_stream.cpp) ----
  /// The default stream of one device: the worker that runs its queued operations (kernel
  /// launches and what follows them while they are pending), started at the first.
  struct DefaultStream {
    std::mutex mutex;  // guards worker, tail and error; held while enqueueing (tail's order)
    std::shared_ptr<HostStream> worker;
    std::shared_ptr<EventRecord> tail;     // completed once the latest queued operation has run
    std::exception_ptr error;              // the first failure of queued work not yet reported
    std::atomic<bool> failed{false};       // error is set (read without the mutex)
    std::atomic<std::int64_t> pending{0};  // queued operations that have not finished
  };
  [[nodiscard]] DefaultStream& default_stream_of(int device) const noexcept {
    return default_streams_[static_cast<std::size_t>(device)];
  }
  /// True while `device`'s default stream has queued operations that have not finished.
  [[nodiscard]] bool default_busy(int device) const noexcept;
  /// Enqueues `op` on `device`'s default-stream worker (started if needed; MemoryAllocation
  /// naming `function` when its thread cannot be): it runs after the work the device's other
  /// streams have queued so far and after the default stream's earlier operations. Its failure is
  /// kept for the default stream's next synchronize.
  void enqueue_default(const char* function, int device, HostStream::Operation op);
  /// Enqueues `op` on the non-default stream `target`, after the default-stream operations of its
  /// device queued so far (the legacy default stream orders every blocking stream).
  void enqueue_on(HostStream& target, HostStream::Operation op);
  /// Waits until the default streams of `device` (every device when < 0) have run their work.
  void wait_for_default_streams(int device);
  /// Rethrows (and clears) the unreported failure of `device`'s queued default-stream work. Inline:
  /// one atomic load when there is none (every synchronize of the default stream asks).
  void rethrow_default_failure(int device) {
    if (default_stream_of(device).failed.load(std::memory_order_acquire)) {
      take_default_failure(device);
    }
  }
  /// rethrow_default_failure's rethrow, once a failure is there.
  void take_default_failure(int device);
  /// For the destructor: finishes the default streams' work (finish_default_streams), then joins
  /// their workers; the exit handler no longer sees this backend.
  void stop_default_streams() noexcept;
  /// True when every byte of `span` around the host pointer `ptr` lies in one page-locked range
  /// (a pinned allocation or a registration, mapped or not).
  [[nodiscard]] bool page_locked(const void* ptr, ByteSpan span) const;
  /// Host-to-device copies from pageable memory up to this size are staged, larger ones waited for.
  static constexpr std::size_t kPageableStagingBytes = std::size_t{64} * 1024;
  /// Submits a copy of `kind` whose operation is `run(source)`, with the vendors' rules for
  /// pageable host memory on a non-default stream (see the file comment): a device-to-host copy
  /// into pageable memory, and a host-to-device copy from more than kPageableStagingBytes of it,
  /// are waited for (an injected failure is then thrown by this call, as a synchronous copy
  /// reports it); a smaller host-to-device copy reads its source into a staging buffer first.
  template <class Run>
  void submit_copy(const char* function, int device, NativeStream stream,
                   const detail::Injection& injection, CopyKind kind, void* dst, ByteSpan dst_span,
                   const void* src, ByteSpan src_span, Run run);

  const int device_count_;

  // guards devices_, host_allocations_, registrations_, managed_, exports_, imports_
  mutable std::mutex memory_mutex_;
  std::vector<DeviceMemory> devices_;
  HostRangeMap host_allocations_;
  HostRangeMap registrations_;
  ManagedMap managed_;
  std::map<std::uintptr_t, Export> exports_;  // by allocation start (host_ipc.cpp)
  std::map<std::uintptr_t, Import> imports_;  // by mapping start (host_ipc.cpp)
  // Freed device blocks of at least kCachedBlockMinBytes, by size (whole pages), kept for the next
  // allocation of that size (at most kCachedBytesLimit in all): a large block from operator new is
  // a fresh mmap whose every page faults on first touch, and its free an munmap, which made
  // to_device of 1 MiB 20-40x np.copy with the direct manager (issue 33). A vendor's cudaMalloc
  // reuses its own reservations too. Off under AddressSanitizer, which must see every free.
  std::multimap<std::size_t, void*> cached_blocks_;
  std::size_t cached_bytes_ = 0;

  // Operations queued or running on any stream, of any device (HostStream's `outstanding`): while
  // it is 0 the legacy default stream has nothing to wait for, and drain returns at once instead of
  // visiting every stream (a small copy on the default stream cost more in the drain than in the
  // copy). Declared before streams_: the workers use it until they are joined.
  std::atomic<std::int64_t> stream_work_{0};
  std::mutex streams_mutex_;
  std::map<NativeStream, std::shared_ptr<HostStream>> streams_;
  // Operations queued or running on the default streams' workers, counted like stream_work_ (drain
  // and enqueue_on skip the default streams while it is 0). Before default_streams_, for the same
  // reason.
  std::atomic<std::int64_t> default_work_{0};
  std::unique_ptr<DefaultStream[]> default_streams_;  // one per device

  std::mutex peers_mutex_;                       // guards peers_enabled_
  std::set<std::pair<int, int>> peers_enabled_;  // (device, peer) after enable_peer_access

  std::mutex events_mutex_;
  std::map<NativeEvent, std::shared_ptr<HostEvent>> events_;

  // Copies of every stream share it. Declared last: destroyed first, after ~HostBackend has
  // joined the stream workers, the only users besides inline default-stream copies.
  ParallelCopier copier_{ParallelCopier::default_helpers()};
};

}  // namespace devmem::host

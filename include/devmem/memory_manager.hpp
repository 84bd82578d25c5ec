// Memory managers (Numba's External Memory Management plugins, RMM's memory resources) and the
// deferred-deallocation controls of a context.
//
// Every device and page-locked host allocation of a context goes through its MemoryManager.
// Memory whose last array goes away is not handed back at once: it is queued per context, and the
// queue is flushed (each item given to MemoryManager::deallocate / host_deallocate) when
//  - more than DeallocationConfig::max_pending_count items are queued (default 10, so the 11th
//    queued item flushes: env DEVMEM_MAX_PENDING_DEALLOCS_COUNT),
//  - more than max_pending_ratio of the device's total memory is queued (default 0.2: env
//    DEVMEM_MAX_PENDING_DEALLOCS_RATIO); pinned host bytes count too,
//  - an allocation fails for lack of memory (flush, retry once, then OutOfMemory),
//  - flush_deallocations() is called;
// except inside a defer_cleanup() scope, where nothing is freed (leaving it does not flush).
//
// Stream ordering: memory reaches the queue only once all work devmem enqueued on it (copies,
// fills, kernels) has completed, so a manager may hand a returned block to any stream at once
// and no free path blocks the host on a stream.
//
// A free that fails during a flush stops that flush: the failed item is dropped (its state is
// unknown, freeing it again would be wrong), the items after it stay queued for the next flush,
// and the error is thrown by flush_deallocations() or, for flushes devmem starts itself (inside a
// destructor or an allocation), written to stderr and kept for take_deallocation_errors().
//
// Thread safety: all functions may be called from several threads. Managers are called
// concurrently and must be thread-safe.
//
// Managers compose: the pool takes its blocks from an upstream manager, and the adaptors of
// memory_adaptors.hpp (statistics, a byte limit, logging) wrap any manager.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/export.hpp>
#include <devmem/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace devmem {

class Context;

/// Counts of allocations handed out to arrays: bytes and numbers now in use (allocated and not yet
/// released by their arrays), the peak of those, and the totals since the context was created.
struct MemoryStatistics {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t total_bytes = 0;
  std::int64_t current_count = 0;
  std::int64_t peak_count = 0;
  std::int64_t total_count = 0;
};

/// The allocator behind a context: Numba's External Memory Management plugin, with RMM's
/// stream-ordered allocate / deallocate. Derive from it (or from DirectMemoryManager to override
/// part of it) and install it with set_memory_manager() or register_memory_manager().
///
/// Thread safety: devmem calls allocate, deallocate, host_allocate, host_deallocate and
/// memory_info from any thread, concurrently with each other and with themselves (arrays are made
/// and released on every thread; flushes of the deferred queue run on whichever thread triggers
/// them, several at once): these must be thread-safe. name() and interface_version() are read by
/// set_memory_manager() and in messages, also concurrently: return constants. devmem never calls
/// trim() or cached_bytes(): they are the application's (the built-in managers make them
/// thread-safe too). The destructor runs wherever the last reference goes: a context keeps its
/// manager, and each allocation keeps the manager that made it until the memory is handed back,
/// so a replaced manager may be destroyed during a later flush, on any thread.
class DEVMEM_API MemoryManager {
 public:
  /// The interface version this build of devmem expects. 2: allocate and deallocate receive the
  /// devmem Stream (version 1, Numba's EMM number, took a native handle in allocate and no stream
  /// in deallocate), so a plugin built against version 1 is refused by set_memory_manager()
  /// instead of being called through the wrong signatures. 3: allocates_in_stream_order() (a
  /// manager built against version 2 has no such entry in its virtual table).
  static constexpr int kInterfaceVersion = 3;

  /// A manager for `context` (which must outlive it: the context owns its managers' references).
  explicit MemoryManager(Context& context) noexcept : context_(&context) {}
  MemoryManager(const MemoryManager&) = delete;
  MemoryManager& operator=(const MemoryManager&) = delete;
  virtual ~MemoryManager();

  /// The manager's name, as in messages and register_memory_manager().
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Checked by set_memory_manager(): must equal kInterfaceVersion (else InvalidArgument, "memory
  /// manager 'NAME' has interface version V - version 2 required"). Leave it to the default,
  /// which is the version of the header the manager is compiled against.
  [[nodiscard]] virtual int interface_version() const noexcept { return kInterfaceVersion; }
  /// Device memory of `bytes` (> 0) for an array made on `stream`: the work devmem enqueues on
  /// the memory goes to that stream first (RMM's stream-ordered allocation). `stream` is never
  /// unspecified: an array made without a stream gets the context's default stream. The memory
  /// must stay valid until deallocate() takes it back.
  /// Errors: OutOfMemory when there is no room; the context then flushes its deferred queue and
  /// calls allocate once more, and a second OutOfMemory reaches the caller as OutOfMemory naming
  /// the operation, the size and the free/total memory (memory_info), with this message appended.
  /// Any other exception reaches the caller (device_array, to_device, ...) unchanged.
  [[nodiscard]] virtual void* allocate(std::size_t bytes, const Stream& stream) = 0;
  /// Takes back memory from allocate() (`bytes` as requested there). `stream` is the stream the
  /// memory was allocated on, or the context's default stream when that stream has been destroyed
  /// (the deferred queue does not keep streams alive). No work devmem enqueued uses the memory any
  /// more (see the file comment), so it may be handed to any stream at once.
  /// Errors (types derived from std::exception): a throw stops the flush that called it: the block
  /// is dropped (devmem never hands it back twice), the blocks queued after it stay queued, and the
  /// error is thrown by flush_deallocations() (a BackendError keeps its type, anything else becomes
  /// Error, with the block and the queue state in the message) or, for flushes devmem starts
  /// itself, written to stderr and kept for Context::take_deallocation_errors(). (When memory
  /// cannot even be queued, for lack of host memory, it is freed at once and an error only
  /// written to stderr.)
  virtual void deallocate(void* ptr, std::size_t bytes, const Stream& stream) = 0;
  /// Page-locked host memory of `bytes` (> 0) with `flags` (Mapped: device-accessible; Portable;
  /// WriteCombined). Errors as allocate(): OutOfMemory flushes the queue and retries once.
  [[nodiscard]] virtual void* host_allocate(std::size_t bytes, HostAllocFlags flags) = 0;
  /// Takes back memory from host_allocate() (`bytes` and `flags` as given there). Errors as
  /// deallocate().
  virtual void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) = 0;
  /// Free and total device memory as the manager sees it: what Context::memory_info() reports
  /// (so it must not call Context::memory_info() itself; ask the backend). Also read by
  /// set_memory_manager() and set_deallocation_config() (the queue's byte limit is a ratio of
  /// `total`) and for out-of-memory messages. Errors reach those callers, except in an
  /// out-of-memory message, where they are ignored.
  [[nodiscard]] virtual MemoryInfo memory_info() const = 0;
  /// Gives cached memory back to the backend (a no-op for managers that cache nothing). Called by
  /// the application only.
  virtual void trim() {}
  /// Bytes held in caches, not in use by arrays. Called by the application only.
  [[nodiscard]] virtual std::int64_t cached_bytes() const noexcept { return 0; }
  /// Whether allocate() hands out memory that is valid only in the order of the `stream` it was
  /// given (the vendor's stream-ordered allocator, cudaMallocAsync on that stream). devmem then
  /// records an event on that stream after the allocation, and work it enqueues on any other
  /// stream first waits for that event (until it has completed: one event query per such use
  /// meanwhile, nothing after). False (the default): the memory is valid for every stream when
  /// allocate() returns. Adaptors and the pool answer for their upstream. Read concurrently:
  /// return a constant.
  [[nodiscard]] virtual bool allocates_in_stream_order() const noexcept { return false; }

  /// The context the manager allocates for (set_memory_manager refuses another context's).
  [[nodiscard]] Context& context() const noexcept { return *context_; }

 private:
  Context* context_;
};

/// The backend's own allocator, nothing cached ("direct").
class DEVMEM_API DirectMemoryManager : public MemoryManager {
 public:
  /// The overrides below call the backend directly (cudaMalloc, cudaFree, cudaHostAlloc, ...).
  explicit DirectMemoryManager(Context& context) noexcept : MemoryManager(context) {}
  ~DirectMemoryManager() override;
  [[nodiscard]] std::string_view name() const noexcept override { return "direct"; }
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override;
  [[nodiscard]] MemoryInfo memory_info() const override;
};

/// The vendor's stream-ordered allocator ("async"): cudaMallocAsync / hipMallocAsync from the
/// device's memory pool, and cudaFreeAsync / hipFreeAsync for the frees, so that a flush of the
/// deferred queue costs no device-wide synchronisation (cudaFree / hipFree each synchronise the
/// device). Both go on the array's own stream (review 2, N3): allocating for stream B never waits
/// for stream A's kernels, as a call on the legacy default stream would. The memory is then valid
/// in B's order: devmem's work on another stream waits for the allocation first (an event,
/// allocates_in_stream_order()), and a free is enqueued only after every use devmem knows of has
/// completed (the deferred queue), so it may run on the allocation's stream. Memory used on a
/// stream devmem does not see must be declared (DeviceArray::record_use, Stream::external). An
/// array on the default stream allocates there. InvalidArgument at construction when the device
/// has no stream-ordered allocator (CUDA before 11.2, ROCm before 5.3, or a device without memory
/// pools). Page-locked host memory and memory_info are the direct manager's.
class DEVMEM_API AsyncMemoryManager : public DirectMemoryManager {
 public:
  struct Options {
    /// Freed bytes the device's pool keeps for reuse across synchronizations (the pool's release
    /// threshold, set when the manager is made). The default keeps everything: devmem
    /// synchronizes at every default-stream operation, and the vendors' own default (0) would
    /// hand the memory back at each of them, so that every allocation cost a cudaMalloc again.
    /// trim() hands it back on request. The pool is the device's, shared with every user of the
    /// stream-ordered allocator in the process.
    std::uint64_t release_threshold = std::numeric_limits<std::uint64_t>::max();
  };
  explicit AsyncMemoryManager(Context& context);
  AsyncMemoryManager(Context& context, Options options);
  ~AsyncMemoryManager() override;
  [[nodiscard]] std::string_view name() const noexcept override { return "async"; }
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] bool allocates_in_stream_order() const noexcept override { return true; }
  /// Hands the device pool's unused memory back to the system (cudaMemPoolTrimTo(pool, 0)).
  void trim() override;
  /// The options the manager was made with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  Options options_;
};

/// Managed (unified) memory ("managed"; RMM's managed_memory_resource): device arrays whose memory
/// the host can address too, allocated with cudaMallocManaged / hipMallocManaged (the host
/// backend simulates it; docs/managed-memory.md) and freed with cudaFree / hipFree. Arrays keep
/// the device-array rules: host code reads their memory through managed_array's host view, or
/// after the work on it is synchronized. Page-locked host memory and memory_info are the direct
/// manager's.
///
/// Oversubscription: an allocation of more than the device's free memory (memory_info) is
/// refused with OutOfMemory unless Options::allow_oversubscription, because the driver then
/// migrates pages in and out on every access, which can stall or hang the GPU for every process
/// using it, not only this one. (The deferred queue is flushed and the allocation tried once more
/// before the refusal reaches the caller, as for any OutOfMemory.)
///
/// Errors: InvalidArgument at construction where the backend or device has no managed memory
/// (the strict fake); OutOfMemory; BackendError. Thread-safe, like every manager.
class DEVMEM_API ManagedMemoryManager : public DirectMemoryManager {
 public:
  struct Options {
    /// Which streams may touch new memory first: Global (every stream of every device, the
    /// default) or Host (the host until it is prefetched to a device).
    ManagedAttach attach = ManagedAttach::Global;
    /// Allow allocations larger than the device's free memory (see the class comment).
    bool allow_oversubscription = false;
  };
  explicit ManagedMemoryManager(Context& context);
  ManagedMemoryManager(Context& context, Options options);
  ~ManagedMemoryManager() override;
  [[nodiscard]] std::string_view name() const noexcept override { return "managed"; }
  /// Checks the free device memory (unless allow_oversubscription), then allocates managed memory
  /// with the options' attach flag. Refused during stream capture, as every vendor allocation.
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  /// cudaFree / hipFree of the managed memory (it waits for the device's work, like cudaFree).
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  /// The options the manager was made with.
  [[nodiscard]] const Options& options() const noexcept { return options_; }

 private:
  Options options_;
};

/// Statistics of a PoolMemoryManager.
struct PoolStatistics {
  std::int64_t hits = 0;          // requests served from the cache
  std::int64_t misses = 0;        // requests that went to the backend
  std::int64_t cached_bytes = 0;  // device bytes held free in the cache
  std::int64_t cached_blocks = 0;
  std::int64_t cached_host_bytes = 0;  // pinned host bytes held free in the cache
  std::int64_t backend_bytes = 0;      // device bytes obtained from upstream, still held
  std::int64_t trims = 0;              // times the cache was released
};

/// A caching allocator ("pool"): requests are rounded up to size classes (each power of two split
/// in four steps, so at most 25% is wasted; at least 256 bytes), freed blocks are kept per class
/// and handed out again without calling upstream. Pinned host blocks are cached the same way, per
/// allocation flags. When upstream reports out of memory, the cache is released and the
/// allocation retried.
///
/// Upstream: the manager the pool takes its blocks from and gives them back to (RMM's
/// pool_memory_resource over an upstream resource), by default a DirectMemoryManager of the
/// context; any manager of the same context composes, e.g. a LimitAdaptor to cap what the pool may
/// hold (memory_adaptors.hpp). Upstream sees whole size classes: allocate on a miss (with the
/// requesting stream), deallocate when a block returns beyond max_cached_bytes (with the stream
/// the context passes) and for every cached block at trim() (with the context's default stream).
/// trim() then calls upstream->trim(), cached_bytes() adds upstream->cached_bytes(), and
/// memory_info() is upstream's with this pool's cached device bytes counted as free.
class DEVMEM_API PoolMemoryManager : public MemoryManager {
 public:
  struct Options {
    /// Cached device + pinned host bytes beyond this are given back at once when blocks return
    /// (0: no limit).
    std::int64_t max_cached_bytes = 0;
  };
  /// A pool with no cache limit.
  explicit PoolMemoryManager(Context& context);
  /// A pool with `options`.
  PoolMemoryManager(Context& context, Options options);
  /// A pool with `options` over `upstream` (null: a new DirectMemoryManager for `context`).
  /// InvalidArgument when upstream belongs to another context ("PoolMemoryManager: the upstream
  /// manager 'NAME' was made for device D, not for device E") or has another interface version.
  PoolMemoryManager(Context& context, Options options, std::shared_ptr<MemoryManager> upstream);
  ~PoolMemoryManager() override;
  [[nodiscard]] std::string_view name() const noexcept override { return "pool"; }
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override;
  [[nodiscard]] MemoryInfo memory_info() const override;
  void trim() override;
  [[nodiscard]] std::int64_t cached_bytes() const noexcept override;
  /// The upstream's answer (a miss hands out the upstream's memory on the requesting stream).
  [[nodiscard]] bool allocates_in_stream_order() const noexcept override;
  /// The manager the pool's blocks come from.
  [[nodiscard]] const std::shared_ptr<MemoryManager>& upstream() const noexcept;
  /// Hits, misses and the cache's contents now (thread-safe).
  [[nodiscard]] PoolStatistics statistics() const;
  /// The size class a request of `bytes` is rounded up to.
  [[nodiscard]] static std::size_t size_class(std::size_t bytes) noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Makes a manager for a context.
using MemoryManagerFactory = std::function<std::shared_ptr<MemoryManager>(Context&)>;

/// Makes `factory` available to DEVMEM_MEMORY_MANAGER under `name` ("direct", "pool", "async" and
/// "managed" are built in). Replaces an earlier registration of the same name. Names must not
/// contain ':' or '=' (InvalidArgument), which compose managers (make_memory_manager).
DEVMEM_API void register_memory_manager(std::string name, MemoryManagerFactory factory);
/// The manager registered under `name`, made for `context`. InvalidArgument for unknown names
/// ("make_memory_manager: unknown memory manager 'NAME' (known: ...)") and for a factory that
/// returns null; the factory's own errors (the async manager's InvalidArgument on a device without
/// a stream-ordered allocator) pass through.
/// A name that is not registered may compose managers (memory_adaptors.hpp), outermost first,
/// parts separated by ':': every part but the last is "statistics", "logging" (CSV lines to
/// std::clog), "limit=SIZE" (a device byte limit; SIZE is digits with an optional K, M, G or T,
/// powers of 1024) or "pool", each over the part after it; the last part is a registered name or
/// one of those over the direct manager. "statistics:limit=512M:pool" is
/// statistics(limit(pool(direct))). InvalidArgument naming the bad part for an empty part, a bad
/// size, an unknown name, or a plain manager before the last part.
[[nodiscard]] DEVMEM_API std::shared_ptr<MemoryManager> make_memory_manager(std::string_view name,
                                                                            Context& context);
/// The same, for the current context (NoDevice when there is no device).
[[nodiscard]] DEVMEM_API std::shared_ptr<MemoryManager> make_memory_manager(std::string_view name);
/// Replaces the current context's manager (Context::set_memory_manager).
DEVMEM_API void set_memory_manager(std::shared_ptr<MemoryManager> manager);

/// Queue limits (see the file comment).
struct DeallocationConfig {
  /// More queued items than this flush the queue (Numba's CUDA_DEALLOCS_COUNT).
  std::int64_t max_pending_count = 10;
  /// More queued bytes than this share of the device's total memory flush it
  /// (CUDA_DEALLOCS_RATIO).
  double max_pending_ratio = 0.2;
};

/// While alive, nothing queued in its context is freed. Nestable, move-only.
class [[nodiscard]] DEVMEM_API DeferCleanup {
 public:
  /// Starts deferring `context`'s frees (Context::defer_cleanup() and defer_cleanup() make one).
  explicit DeferCleanup(std::shared_ptr<Context> context);
  /// The moved-from scope ends nothing.
  DeferCleanup(DeferCleanup&& other) noexcept;
  DeferCleanup& operator=(DeferCleanup&&) = delete;
  DeferCleanup(const DeferCleanup&) = delete;
  DeferCleanup& operator=(const DeferCleanup&) = delete;
  /// Ends the scope; the queue is flushed later by the usual rules, not here (as in Numba).
  ~DeferCleanup();

 private:
  std::shared_ptr<Context> context_;
};

/// A defer_cleanup scope on the current context (Numba's cuda.defer_cleanup()).
[[nodiscard]] DEVMEM_API DeferCleanup defer_cleanup();

}  // namespace devmem

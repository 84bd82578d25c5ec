// The host backend's implementation of the Backend interface: the simulated device (HostBackend;
// host_backend.hpp says what it simulates and why). One file although long: every method of the
// interface works on the same state (the allocations, registrations, streams and events, and their
// locks, in the lock order host_backend.hpp states). The parts that stand apart have files of
// their own: streams (host_stream.cpp), the legacy default stream's queued work
// (host_default_stream.cpp), events (host_event.cpp), parallel copies (host_parallel_copy.cpp),
// kernels (host_kernel*.cpp) and the controls (host_controls.cpp).
#include "backends/host/host_backend.hpp"

#include "core/backend_factories.hpp"

#include <devmem/byte_size.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <latch>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <system_error>
#include <thread>

#include <sys/mman.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace devmem {

std::unique_ptr<Backend> make_host_backend() {
  return std::make_unique<host::HostBackend>();
}

namespace host {
namespace {

constexpr std::size_t kPageSize = 4096;
// cudaMalloc guarantees 256-byte alignment. The simulator gives whole pages of its own (page
// aligned, the size rounded up to pages), so that exporting an allocation to another process can
// remap exactly its pages (host_ipc.cpp) without touching a neighbour's bytes.
constexpr std::size_t kDeviceAlignment = kDevicePageBytes;
// Below this, operator new serves blocks from the heap without page faults: not cached.
constexpr std::size_t kCachedBlockMinBytes = std::size_t{64} << 10;
constexpr std::size_t kCachedBytesLimit = std::size_t{64} << 20;
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCacheBlocks = false;
#else
constexpr bool kCacheBlocks = true;
#endif
#else
constexpr bool kCacheBlocks = true;
#endif

std::atomic<HostBackend*> g_live_instance{nullptr};

std::uintptr_t address_of(const void* ptr) noexcept {
  return reinterpret_cast<std::uintptr_t>(ptr);
}

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

std::int64_t clamp_to_int64(std::size_t value) noexcept {
  return value > static_cast<std::size_t>(kInt64Max) ? kInt64Max : static_cast<std::int64_t>(value);
}

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

std::size_t size_of_allocation(std::size_t bytes) noexcept {
  return bytes;
}

// Device allocations in which this thread found device-side ranges of copies, by page of the
// range's start (direct-mapped), so that later copies touching them (loops of small copies over a
// few dozen arrays, such as devmem::mpi's windows of eager messages) skip the lock and the map
// lookups, which cost more than a small copy itself. An entry is valid while no device allocation
// of any host backend has been freed (g_allocations_freed, changed under the freeing backend's
// memory lock) and for the backend that found it.
struct AllocationHit {
  const void* backend = nullptr;
  std::uint64_t freed = 0;  // g_allocations_freed when found (0: never valid)
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};
constexpr std::size_t kAllocationHits = 256;  // the hash below takes 8 bits
using AllocationHits = std::array<AllocationHit, kAllocationHits>;
// On the heap, one pointer in thread-local storage: libdevmem's TLS is static (host_kernel.cpp's
// initial-exec runner pointer), and a module loaded with dlopen (Python's `import devmem`) gets
// only glibc's small static-TLS surplus; 8 KiB of entries there made the load fail with "cannot
// allocate memory in static TLS block" (tests/dlopen checks that it loads).
thread_local std::unique_ptr<AllocationHits> t_allocation_hits;
std::atomic<std::uint64_t> g_allocations_freed{1};

/// This thread's entry for `address`; null when the thread's table cannot be allocated (the
/// caller then looks the allocation up under the lock, as without the table).
AllocationHit* allocation_hit(std::uintptr_t address) noexcept {
  if (!t_allocation_hits) {
    t_allocation_hits.reset(new (std::nothrow) AllocationHits{});
    if (!t_allocation_hits) return nullptr;
  }
  // Fibonacci hashing of the page number: allocations a few pages apart spread over the entries.
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  return &(*t_allocation_hits)[static_cast<std::size_t>(((address >> 12) * kGolden) >> 56)];
}

/// The bytes [0, (height - 1) * pitch + width) that a 2-D copy touches on one side; nullopt on
/// overflow.
std::optional<std::int64_t> span_2d(std::size_t pitch, std::size_t width, std::size_t height) {
  if (width == 0 || height == 0) return 0;
  std::int64_t rows = 0;
  std::int64_t total = 0;
  if (__builtin_mul_overflow(pitch, height - 1, &rows) ||
      __builtin_add_overflow(rows, width, &total)) {
    return std::nullopt;
  }
  return total;
}

bool is_valid(CopyKind kind) noexcept {
  switch (kind) {
    case CopyKind::HostToDevice:
    case CopyKind::DeviceToHost:
    case CopyKind::DeviceToDevice:
    case CopyKind::HostToHost:
      return true;
  }
  return false;
}

// Whether a strided copy's plan is consistent: non-negative block sizes, one stride per outer
// axis on each side, outer axes of length 1 or more.
bool well_formed(const layout::CopyPlan& plan) {
  const std::size_t outer = plan.outer_shape.size();
  return plan.width >= 0 && plan.height >= 0 && plan.outer_src_strides.size() == outer &&
         plan.outer_dst_strides.size() == outer &&
         std::all_of(plan.outer_shape.begin(), plan.outer_shape.end(),
                     [](std::int64_t n) { return n >= 1; });
}

}  // namespace

// ---- Construction, errors and lookups -----------------------------------------------------------

HostBackend::HostBackend()
    : device_count_(detail::configured_device_count()),
      devices_(static_cast<std::size_t>(device_count_)),
      default_streams_(std::make_unique<DefaultStream[]>(static_cast<std::size_t>(device_count_))) {
  HostBackend* expected = nullptr;
  g_live_instance.compare_exchange_strong(expected, this, std::memory_order_acq_rel);
}

HostBackend::~HostBackend() {
  HostBackend* expected = this;
  g_live_instance.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);

  // First: queued default-stream work may wait for markers on the other streams, whose workers
  // still run until they are shut down below.
  stop_default_streams();
  std::map<NativeStream, std::shared_ptr<HostStream>> streams;
  {
    const std::lock_guard lock(streams_mutex_);
    streams.swap(streams_);
  }
  for (auto& [handle, stream] : streams) stream->shutdown();

  const std::lock_guard lock(memory_mutex_);
  // A later backend at this address must not trust this one's allocations.
  g_allocations_freed.fetch_add(1, std::memory_order_acq_rel);
  for (const auto& [address, exported] : exports_)
    unshare(reinterpret_cast<void*>(address), exported);
  for (const auto& [address, imported] : imports_) {
    static_cast<void>(::munmap(reinterpret_cast<void*>(address), imported.mapped));
  }
  for (DeviceMemory& memory : devices_) {
    for (const auto& [address, bytes] : memory.allocations) {
      ::operator delete(reinterpret_cast<void*>(address), std::align_val_t{kDeviceAlignment});
    }
  }
  for (const auto& [bytes, ptr] : cached_blocks_) {
    ::operator delete(ptr, std::align_val_t{kDeviceAlignment});
  }
  for (const auto& [address, range] : host_allocations_) {
    ::operator delete(reinterpret_cast<void*>(address), std::align_val_t{kPageSize});
  }
  for (const auto& [address, range] : managed_) {
    ::operator delete(reinterpret_cast<void*>(address), std::align_val_t{kManagedAlignment});
  }
}

HostBackend* HostBackend::live_instance() noexcept {
  return g_live_instance.load(std::memory_order_acquire);
}

BackendError HostBackend::make_error(const char* function, Status status,
                                     std::string_view details) {
  const auto code = static_cast<int>(status);
  const std::string_view code_name = to_string(status);
  return BackendError("host", function, code, std::string(code_name),
                      fmt::format("host {}: {} ({}): {}", function, code_name, code, details));
}

std::exception_ptr HostBackend::injected_error(const char* function, Call kind,
                                               const detail::Injection& injection, int device,
                                               std::size_t bytes) {
  const std::string request =
      fmt::format("injected failure of call {} of {} (fail_nth)", injection.nth, to_string(kind));
  if (injection.status == Status::MemoryAllocation &&
      (kind == Call::Allocate || kind == Call::HostAllocate || kind == Call::AllocateManaged)) {
    return std::make_exception_ptr(
        OutOfMemory(fmt::format("host {}: out of memory allocating {} ({} bytes) on device {} ({})",
                                function, format_bytes(bytes), bytes, device, request),
                    clamp_to_int64(bytes)));
  }
  return std::make_exception_ptr(make_error(function, injection.status, request));
}

void HostBackend::throw_injected(const char* function, Call kind,
                                 const detail::Injection& injection, int device,
                                 std::size_t bytes) {
  std::rethrow_exception(injected_error(function, kind, injection, device, bytes));
}

void HostBackend::check_device(const char* function, int device) const {
  if (device_count_ == 0) {
    throw NoDevice(fmt::format("host {}: no device: DEVMEM_HOST_DEVICE_COUNT is 0", function));
  }
  if (device < 0 || device >= device_count_) {
    fail(function, Status::InvalidDevice, "device {} does not exist (device count {})", device,
         device_count_);
  }
}

bool HostBackend::device_accessible_locked(std::uintptr_t begin, std::size_t bytes) const {
  for (const DeviceMemory& memory : devices_) {
    if (find_containing(memory.allocations, begin, bytes, size_of_allocation) !=
        memory.allocations.end()) {
      return true;
    }
  }
  const auto host_range_size = [](const HostRange& range) { return range.bytes; };
  for (const HostRangeMap* ranges : {&host_allocations_, &registrations_}) {
    const auto it = find_containing(*ranges, begin, bytes, host_range_size);
    if (it != ranges->end() && it->second.mapped) return true;
  }
  const auto managed_size = [](const ManagedRangeState& range) { return range.bytes; };
  if (find_containing(managed_, begin, bytes, managed_size) != managed_.end()) return true;
  return imported_device_locked(begin, bytes) >= 0;
}

bool HostBackend::device_accessible(std::uintptr_t begin, std::size_t bytes) const {
  const std::lock_guard lock(memory_mutex_);
  return device_accessible_locked(begin, bytes);
}

void HostBackend::check_device_span(const char* function, const char* role, const void* ptr,
                                    ByteSpan span) const {
  if (span.empty()) return;
  const auto base = static_cast<std::int64_t>(address_of(ptr));
  std::int64_t begin = 0;
  const bool overflow = __builtin_add_overflow(base, span.lo, &begin) || begin < 0;
  const auto bytes = static_cast<std::size_t>(span.hi - span.lo);
  if (!overflow) {
    const auto first = static_cast<std::uintptr_t>(begin);
    if (first + bytes >= first) {
      AllocationHit* const hit = allocation_hit(first);
      if (hit != nullptr && hit->backend == this &&
          hit->freed == g_allocations_freed.load(std::memory_order_acquire) &&
          first >= hit->begin && first + bytes <= hit->end) {
        return;
      }
      const std::lock_guard lock(memory_mutex_);
      for (const DeviceMemory& memory : devices_) {
        const auto it = find_containing(memory.allocations, first, bytes, size_of_allocation);
        if (it != memory.allocations.end()) {
          if (hit != nullptr) {
            *hit = {this, g_allocations_freed.load(std::memory_order_relaxed), it->first,
                    it->first + it->second};
          }
          return;
        }
      }
      if (device_accessible_locked(first, bytes)) return;
    }
  }
  // Unsigned arithmetic: the address is only printed, and may have wrapped.
  fail(function, Status::IllegalAddress,
       "{} {:#x} ({} bytes) is not inside a live device allocation or mapped host memory", role,
       address_of(ptr) + static_cast<std::uintptr_t>(span.lo), bytes);
}

void HostBackend::check_copy(const char* function, CopyKind kind, const void* dst,
                             ByteSpan dst_span, const void* src, ByteSpan src_span) const {
  if (!is_valid(kind)) {
    fail(function, Status::InvalidValue, "invalid copy kind {}", static_cast<int>(kind));
  }
  const bool device_dst = kind == CopyKind::HostToDevice || kind == CopyKind::DeviceToDevice;
  const bool device_src = kind == CopyKind::DeviceToHost || kind == CopyKind::DeviceToDevice;
  if (device_dst) {
    check_device_span(function, "destination", dst, dst_span);
  } else if (dst == nullptr && !dst_span.empty()) {
    fail(function, Status::InvalidValue, "null host destination for a {} copy", to_string(kind));
  }
  if (device_src) {
    check_device_span(function, "source", src, src_span);
  } else if (src == nullptr && !src_span.empty()) {
    fail(function, Status::InvalidValue, "null host source for a {} copy", to_string(kind));
  }
}

std::string HostBackend::describe_device_pointer_locked(int device, std::uintptr_t address) const {
  for (std::size_t other = 0; other < devices_.size(); ++other) {
    const AllocationMap& allocations = devices_[other].allocations;
    if (allocations.contains(address)) {
      return fmt::format("{:#x} is an allocation of device {}, not of device {}", address, other,
                         device);
    }
    const auto it = find_containing(allocations, address, 1, size_of_allocation);
    if (it != allocations.end()) {
      return fmt::format(
          "{:#x} is not the start of a device allocation (it lies {} bytes into the {}-byte "
          "allocation at {:#x})",
          address, address - it->first, it->second, it->first);
    }
  }
  return fmt::format("{:#x} is not a device allocation", address);
}

std::shared_ptr<HostStream> HostBackend::find_stream(const char* function, int device,
                                                     NativeStream stream) {
  const std::lock_guard lock(streams_mutex_);
  const auto it = streams_.find(stream);
  if (it == streams_.end()) {
    fail(function, Status::InvalidResourceHandle, "{} is not a stream of the host backend",
         fmt::ptr(stream));
  }
  if (it->second->device() != device) {
    fail(function, Status::InvalidResourceHandle, "stream {} belongs to device {}, not device {}",
         fmt::ptr(stream), it->second->device(), device);
  }
  return it->second;
}

std::shared_ptr<HostEvent> HostBackend::find_event(const char* function, int device,
                                                   NativeEvent event) {
  const std::lock_guard lock(events_mutex_);
  const auto it = events_.find(event);
  if (it == events_.end()) {
    fail(function, Status::InvalidResourceHandle, "{} is not an event of the host backend",
         fmt::ptr(event));
  }
  if (device >= 0 && it->second->device() != device) {
    fail(function, Status::InvalidResourceHandle, "event {} belongs to device {}, not device {}",
         fmt::ptr(event), it->second->device(), device);
  }
  return it->second;
}

std::vector<std::shared_ptr<HostStream>> HostBackend::streams_of(int device) {
  std::vector<std::shared_ptr<HostStream>> result;
  const std::lock_guard lock(streams_mutex_);
  for (const auto& [handle, stream] : streams_) {
    if (device < 0 || stream->device() == device) result.push_back(stream);
  }
  return result;
}

void HostBackend::wait_for_queued_work(int device) {
  // Errors stay stored on their streams: they belong to that stream's next synchronize/query.
  wait_for_default_streams(device);
  for (const auto& stream : streams_of(device)) stream->wait_idle();
}

void HostBackend::submit(const char* function, Call kind, int device, NativeStream stream,
                         const detail::Injection& injection, HostStream::Operation op,
                         OnDefault on_default) {
  // Like a real asynchronous failure, an injected one of a queued operation happens when the
  // operation would run: the operation is dropped and its error takes its place in the queue, to
  // be reported by the stream's next synchronize_stream / query_stream.
  const auto injected = [&] {
    return [error = injected_error(function, kind, injection, device)] {
      std::rethrow_exception(error);
    };
  };
  if (stream == nullptr) {
    if (on_default == OnDefault::Queue ||
        (on_default == OnDefault::QueueWhenBusy && default_busy(device))) {
      enqueue_default(function, device,
                      injection ? HostStream::Operation(injected()) : std::move(op));
      return;
    }
    if (injection) throw_injected(function, kind, injection, device);
    drain(device);
    op();
    return;
  }
  const std::shared_ptr<HostStream> target = find_stream(function, device, stream);
  enqueue_on(*target, injection ? HostStream::Operation(injected()) : std::move(op));
}

bool HostBackend::page_locked(const void* ptr, ByteSpan span) const {
  if (span.empty()) return true;
  const auto begin = address_of(ptr) + static_cast<std::uintptr_t>(span.lo);
  const auto bytes = static_cast<std::size_t>(span.hi - span.lo);
  const auto host_range_size = [](const HostRange& range) { return range.bytes; };
  const std::lock_guard lock(memory_mutex_);
  for (const HostRangeMap* ranges : {&host_allocations_, &registrations_}) {
    if (find_containing(*ranges, begin, bytes, host_range_size) != ranges->end()) return true;
  }
  return false;
}

template <class Run>
void HostBackend::submit_copy(const char* function, int device, NativeStream stream,
                              const detail::Injection& injection, CopyKind kind, void* dst,
                              ByteSpan dst_span, const void* src, ByteSpan src_span, Run run) {
  // A copy on the default stream runs inline, after the device's queued work (its default
  // stream's queued launches included): it is complete on return. What submit() does for it (the
  // injected failure, the wait, the copy), without wrapping the copy in a StreamOperation first:
  // small copies (devmem::mpi's eager messages) pay for that wrapper more than for the copy, and
  // with nothing queued the wait is two atomic loads (drain).
  if (stream == nullptr) {
    if (injection) throw_injected(function, Call::Copy, injection, device);
    drain(device);
    run(src);
    return;
  }
  const bool pageable_dst =
      stream != nullptr && kind == CopyKind::DeviceToHost && !page_locked(dst, dst_span);
  const bool pageable_src =
      stream != nullptr && kind == CopyKind::HostToDevice && !page_locked(src, src_span);
  const auto src_bytes = static_cast<std::size_t>(src_span.hi - src_span.lo);
  if (pageable_src && src_bytes <= kPageableStagingBytes) {
    std::shared_ptr<std::byte[]> staging = std::make_shared_for_overwrite<std::byte[]>(src_bytes);
    std::memcpy(staging.get(), static_cast<const std::byte*>(src) + src_span.lo, src_bytes);
    // The operation addresses the source through the same offsets as the original pointer: its
    // element 0 sits `lo` bytes before the staging buffer's start (integer arithmetic, as that
    // address may lie outside the buffer).
    const auto* staged = reinterpret_cast<const void*>(address_of(staging.get()) -
                                                       static_cast<std::uintptr_t>(src_span.lo));
    submit(function, Call::Copy, device, stream, injection,
           [run = std::move(run), staged, staging = std::move(staging)] { run(staged); });
    return;
  }
  if (pageable_dst || pageable_src) {
    // Into pageable memory, or from more of it than a staging buffer holds: the call returns once
    // the copy is complete (a synchronous copy, so an injected failure is thrown here).
    if (injection) throw_injected(function, Call::Copy, injection, device);
    const std::shared_ptr<HostStream> target = find_stream(function, device, stream);
    struct Completion {
      std::atomic<bool> finished{false};
      std::latch latch{1};
    };
    auto done = std::make_shared<Completion>();
    enqueue_on(*target, [run = std::move(run), src, done] {
      struct CountDown {
        Completion& completion;
        ~CountDown() {
          completion.finished.store(true, std::memory_order_release);
          completion.latch.count_down();
        }
      } count_down{*done};
      run(src);
    });
    // A small copy finishes within microseconds: spin for it first, as a GPU runtime's
    // synchronous copy does, instead of sleeping and paying a futex wake-up per call.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (!done->finished.load(std::memory_order_acquire) &&
           std::chrono::steady_clock::now() < deadline) {
#if defined(__SSE2__)
      _mm_pause();
#endif
    }
    done->latch.wait();
    return;
  }
  submit(function, Call::Copy, device, stream, injection,
         [run = std::move(run), src] { run(src); });
}

// ---- Devices ------------------------------------------------------------------------------------

std::string HostBackend::no_device_reason() {
  if (device_count_ > 0) return {};
  return "DEVMEM_HOST_DEVICE_COUNT is 0: the host backend simulates no device";
}

DeviceProperties HostBackend::properties(int device) {
  check_device("properties", device);
  DeviceProperties props;
  props.name = "devmem host simulator";
  props.architecture = "host";
  props.total_memory = detail::effective_capacity(device);
  props.warp_size = 32;
  props.max_threads_per_block = 1024;
  // An H100's limits: 48 KiB per block, 227 KiB once the kernel opts in (devmem::launch does).
  props.max_shared_memory_per_block = std::int64_t{48} * 1024;
  props.max_shared_memory_per_block_optin = std::int64_t{227} * 1024;
  props.multiprocessor_count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  props.can_map_host_memory = true;
  props.unified_addressing = true;
  return props;
}

MemoryInfo HostBackend::memory_info(int device) {
  check_device("memory_info", device);
  const std::int64_t capacity = detail::effective_capacity(device);
  const std::lock_guard lock(memory_mutex_);
  const std::int64_t used = devices_[static_cast<std::size_t>(device)].used;
  return MemoryInfo{std::max<std::int64_t>(0, capacity - used), capacity};
}

std::int64_t HostBackend::device_memory_used(int device) {
  check_device("device_memory_used", device);
  const std::lock_guard lock(memory_mutex_);
  return devices_[static_cast<std::size_t>(device)].used;
}

AsyncPoolState HostBackend::async_pool_state(int device) {
  check_device("async_pool_state", device);
  const std::lock_guard lock(memory_mutex_);
  return devices_[static_cast<std::size_t>(device)].async_pool;
}

std::int64_t HostBackend::live_event_count(int device) {
  check_device("live_event_count", device);
  const std::lock_guard lock(events_mutex_);
  return std::count_if(events_.begin(), events_.end(),
                       [device](const auto& entry) { return entry.second->device() == device; });
}

// ---- Device memory ------------------------------------------------------------------------------

void* HostBackend::allocate(int device, std::size_t bytes) {
  const detail::Injection injection = detail::begin_call(Call::Allocate, device);
  if (injection) throw_injected("allocate", Call::Allocate, injection, device, bytes);
  check_device("allocate", device);
  if (bytes == 0) return nullptr;  // like cudaMalloc(0): success without memory
  const std::int64_t capacity = detail::effective_capacity(device);

  const std::lock_guard lock(memory_mutex_);
  DeviceMemory& memory = devices_[static_cast<std::size_t>(device)];
  const std::int64_t free = std::max<std::int64_t>(0, capacity - memory.used);
  const auto out_of_memory = [&](std::string_view reason) {
    return OutOfMemory(
        fmt::format("host allocate: out of memory allocating {} ({} bytes) on device "
                    "{} ({})",
                    format_bytes(bytes), bytes, device, reason),
        clamp_to_int64(bytes));
  };
  if (clamp_to_int64(bytes) > free) {
    throw out_of_memory(fmt::format("free {} of {}", format_bytes(free), format_bytes(capacity)));
  }
  const std::size_t reserved = device_pages(bytes);
  void* ptr = nullptr;
  if (const auto cached = cached_blocks_.find(reserved); cached != cached_blocks_.end()) {
    ptr = cached->second;
    cached_blocks_.erase(cached);
    cached_bytes_ -= reserved;
  } else if (reserved != 0) {
    ptr = ::operator new(reserved, std::align_val_t{kDeviceAlignment}, std::nothrow);
  }
  if (ptr == nullptr) throw out_of_memory("the process is out of memory");
  memory.allocations.emplace(address_of(ptr), bytes);
  memory.used += static_cast<std::int64_t>(bytes);
  return ptr;
}

void HostBackend::deallocate(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::Deallocate, device);
  if (injection) throw_injected("deallocate", Call::Deallocate, injection, device);
  check_device("deallocate", device);
  if (ptr == nullptr) return;
  // Like cudaFree, which synchronises: work enqueued before the free may still use the memory.
  drain(device);
  release_allocation("deallocate", device, ptr);
}

void HostBackend::release_allocation(const char* function, int device, void* ptr) {
  {
    const std::lock_guard lock(memory_mutex_);
    DeviceMemory& memory = devices_[static_cast<std::size_t>(device)];
    const auto it = memory.allocations.find(address_of(ptr));
    if (it == memory.allocations.end()) {
      fail(function, Status::InvalidValue, "{}",
           describe_device_pointer_locked(device, address_of(ptr)));
    }
    const std::size_t bytes = it->second;
    memory.used -= static_cast<std::int64_t>(bytes);
    memory.allocations.erase(it);
    g_allocations_freed.fetch_add(1, std::memory_order_acq_rel);  // every thread's hit is stale
    if (const auto exported = exports_.find(address_of(ptr)); exported != exports_.end()) {
      unshare(ptr, exported->second);
      exports_.erase(exported);
    }
    const std::size_t reserved = device_pages(bytes);
    if (kCacheBlocks && reserved >= kCachedBlockMinBytes &&
        cached_bytes_ + reserved <= kCachedBytesLimit) {
      try {
        cached_blocks_.emplace(reserved, ptr);
        cached_bytes_ += reserved;
        return;
      } catch (const std::bad_alloc&) {  // no room for the node: freed below instead
      }
    }
  }
  ::operator delete(ptr, std::align_val_t{kDeviceAlignment});
}

void HostBackend::release_idle_buffers() noexcept {
  std::multimap<std::size_t, void*> blocks;
  {
    const std::lock_guard lock(memory_mutex_);
    blocks.swap(cached_blocks_);
    cached_bytes_ = 0;
  }
  for (const auto& [bytes, ptr] : blocks) {
    ::operator delete(ptr, std::align_val_t{kDeviceAlignment});
  }
}

// The simulator's memory is usable at once, so a stream-ordered allocation is an ordinary one;
// its free is an operation of the stream, run after the work enqueued before it.
bool HostBackend::supports_async_allocation(int device) {
  check_device("supports_async_allocation", device);
  return true;
}

void* HostBackend::allocate_async(int device, std::size_t bytes, NativeStream stream) {
  if (stream != nullptr) static_cast<void>(find_stream("allocate_async", device, stream));
  return allocate(device, bytes);
}

// The simulator's stream-ordered "pool" keeps nothing (a free is a free), so the settings are only
// recorded, for tests of what devmem asks of a vendor pool.
void HostBackend::set_async_release_threshold(int device, std::uint64_t bytes) {
  check_device("set_async_release_threshold", device);
  const std::lock_guard lock(memory_mutex_);
  devices_[static_cast<std::size_t>(device)].async_pool.release_threshold = bytes;
}

void HostBackend::trim_async_pool(int device, std::size_t keep_bytes) {
  check_device("trim_async_pool", device);
  const std::lock_guard lock(memory_mutex_);
  AsyncPoolState& pool = devices_[static_cast<std::size_t>(device)].async_pool;
  ++pool.trims;
  pool.last_trim_keep_bytes = keep_bytes;
}

void HostBackend::deallocate_async(int device, void* ptr, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Deallocate, device);
  check_device("deallocate_async", device);
  if (ptr == nullptr) return;
  {
    const std::lock_guard lock(memory_mutex_);
    const AllocationMap& allocations = devices_[static_cast<std::size_t>(device)].allocations;
    if (allocations.find(address_of(ptr)) == allocations.end()) {
      fail("deallocate_async", Status::InvalidValue, "{}",
           describe_device_pointer_locked(device, address_of(ptr)));
    }
  }
  submit(
      "deallocate_async", Call::Deallocate, device, stream, injection,
      [this, device, ptr] { release_allocation("deallocate_async", device, ptr); },
      OnDefault::QueueWhenBusy);
}

// ---- Page-locked host memory --------------------------------------------------------------------

void* HostBackend::host_allocate(int device, std::size_t bytes, HostAllocFlags flags) {
  const detail::Injection injection = detail::begin_call(Call::HostAllocate, device);
  if (injection) throw_injected("host_allocate", Call::HostAllocate, injection, device, bytes);
  check_device("host_allocate", device);
  if (bytes == 0) return nullptr;
  // Page-aligned and a whole number of pages, as page-locking works on pages.
  const std::size_t rounded = (bytes + kPageSize - 1) / kPageSize * kPageSize;
  void* const ptr = rounded < bytes
                        ? nullptr
                        : ::operator new(rounded, std::align_val_t{kPageSize}, std::nothrow);
  if (ptr == nullptr) {
    throw OutOfMemory(fmt::format("host host_allocate: out of memory allocating {} ({} bytes) of "
                                  "page-locked host memory",
                                  format_bytes(bytes), bytes),
                      clamp_to_int64(bytes));
  }
  const std::lock_guard lock(memory_mutex_);
  host_allocations_.emplace(address_of(ptr),
                            HostRange{bytes, has_flag(flags, HostAllocFlags::Mapped)});
  return ptr;
}

void HostBackend::host_deallocate(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::HostDeallocate, device);
  if (injection) throw_injected("host_deallocate", Call::HostDeallocate, injection, device);
  check_device("host_deallocate", device);
  if (ptr == nullptr) return;
  // Like cudaFreeHost, which synchronises: streams of any device may still copy from or to it.
  drain(-1);
  {
    const std::lock_guard lock(memory_mutex_);
    const auto it = host_allocations_.find(address_of(ptr));
    if (it == host_allocations_.end()) {
      const auto inside = find_containing(host_allocations_, address_of(ptr), 1,
                                          [](const HostRange& range) { return range.bytes; });
      if (inside != host_allocations_.end()) {
        fail("host_deallocate", Status::InvalidValue,
             "{} is not the start of a page-locked host allocation (it lies {} bytes into the "
             "allocation at {:#x})",
             fmt::ptr(ptr), address_of(ptr) - inside->first, inside->first);
      }
      fail("host_deallocate", Status::InvalidValue, "{} is not a page-locked host allocation",
           fmt::ptr(ptr));
    }
    host_allocations_.erase(it);
  }
  ::operator delete(ptr, std::align_val_t{kPageSize});
}

void HostBackend::host_register(int device, void* ptr, std::size_t bytes, HostRegisterFlags flags) {
  const detail::Injection injection = detail::begin_call(Call::HostRegister, device);
  if (injection) throw_injected("host_register", Call::HostRegister, injection, device);
  check_device("host_register", device);
  const std::uintptr_t begin = address_of(ptr);
  if (ptr == nullptr || bytes == 0 || begin + bytes < begin) {
    fail("host_register", Status::InvalidValue,
         "cannot register {} ({} bytes): the pointer must be non-null and the range non-empty",
         fmt::ptr(ptr), bytes);
  }
  const std::uintptr_t end = begin + bytes;
  const std::lock_guard lock(memory_mutex_);
  // Entries of one map never overlap each other, so the last one starting before `end` is the
  // only candidate for an overlap.
  const auto overlapping = [&](const HostRangeMap& ranges) {
    auto it = ranges.lower_bound(end);
    if (it == ranges.begin()) return ranges.end();
    --it;
    return it->first + it->second.bytes > begin ? it : ranges.end();
  };
  if (const auto it = overlapping(registrations_); it != registrations_.end()) {
    fail("host_register", Status::HostMemoryAlreadyRegistered,
         "{} ({} bytes) overlaps a registered range ({:#x}, {} bytes)", fmt::ptr(ptr), bytes,
         it->first, it->second.bytes);
  }
  if (const auto it = overlapping(host_allocations_); it != host_allocations_.end()) {
    fail("host_register", Status::HostMemoryAlreadyRegistered,
         "{} ({} bytes) overlaps a page-locked host allocation ({:#x}, {} bytes)", fmt::ptr(ptr),
         bytes, it->first, it->second.bytes);
  }
  registrations_.emplace(begin, HostRange{bytes, has_flag(flags, HostRegisterFlags::Mapped)});
}

void HostBackend::host_unregister(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::HostUnregister, device);
  if (injection) throw_injected("host_unregister", Call::HostUnregister, injection, device);
  check_device("host_unregister", device);
  const std::lock_guard lock(memory_mutex_);
  const auto it = registrations_.find(address_of(ptr));
  if (it == registrations_.end()) {
    const auto inside = find_containing(registrations_, address_of(ptr), 1,
                                        [](const HostRange& range) { return range.bytes; });
    if (inside != registrations_.end()) {
      fail("host_unregister", Status::HostMemoryNotRegistered,
           "{} is not the start of a registered range (it lies {} bytes into the range "
           "registered at {:#x})",
           fmt::ptr(ptr), address_of(ptr) - inside->first, inside->first);
    }
    fail("host_unregister", Status::HostMemoryNotRegistered, "{} is not a registered range",
         fmt::ptr(ptr));
  }
  registrations_.erase(it);
}

int HostBackend::pointer_device(const void* ptr) {
  if (ptr == nullptr) return -1;
  const std::uintptr_t address = address_of(ptr);
  const std::lock_guard lock(memory_mutex_);
  for (std::size_t device = 0; device < devices_.size(); ++device) {
    const AllocationMap& allocations = devices_[device].allocations;
    if (find_containing(allocations, address, 1, size_of_allocation) != allocations.end()) {
      return static_cast<int>(device);
    }
  }
  // Managed memory belongs to the device it was allocated for, as CUDA reports it.
  const auto managed_size = [](const ManagedRangeState& range) { return range.bytes; };
  if (const auto it = find_containing(managed_, address, 1, managed_size); it != managed_.end()) {
    return it->second.device;
  }
  return imported_device_locked(address, 1);
}

void* HostBackend::mapped_device_pointer(int device, void* host_ptr) {
  check_device("mapped_device_pointer", device);
  const std::uintptr_t address = address_of(host_ptr);
  const auto host_range_size = [](const HostRange& range) { return range.bytes; };
  const std::lock_guard lock(memory_mutex_);
  if (host_ptr != nullptr) {
    const auto allocation = find_containing(host_allocations_, address, 1, host_range_size);
    if (allocation != host_allocations_.end()) {
      if (allocation->second.mapped) return host_ptr;  // unified addressing: same address
      fail("mapped_device_pointer", Status::InvalidValue,
           "{} lies in page-locked host memory allocated without HostAllocFlags::Mapped",
           fmt::ptr(host_ptr));
    }
    const auto registration = find_containing(registrations_, address, 1, host_range_size);
    if (registration != registrations_.end()) {
      if (registration->second.mapped) return host_ptr;
      fail("mapped_device_pointer", Status::InvalidValue,
           "{} lies in host memory registered without HostRegisterFlags::Mapped",
           fmt::ptr(host_ptr));
    }
  }
  fail("mapped_device_pointer", Status::InvalidValue,
       "{} is not in mapped host memory (allocate it with HostAllocFlags::Mapped or register it "
       "with HostRegisterFlags::Mapped)",
       fmt::ptr(host_ptr));
}

// ---- Streams ------------------------------------------------------------------------------------

NativeStream HostBackend::create_stream(int device) {
  const detail::Injection injection = detail::begin_call(Call::CreateStream, device);
  if (injection) throw_injected("create_stream", Call::CreateStream, injection, device);
  check_device("create_stream", device);
  std::shared_ptr<HostStream> stream;
  try {
    stream = std::make_shared<HostStream>(device, &stream_work_);
  } catch (const std::system_error& error) {
    fail("create_stream", Status::MemoryAllocation, "cannot start the stream's worker thread: {}",
         error.what());
  }
  NativeStream handle = stream.get();
  const std::lock_guard lock(streams_mutex_);
  streams_.emplace(handle, std::move(stream));
  return handle;
}

void HostBackend::destroy_stream(int device, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::DestroyStream, device);
  if (injection) throw_injected("destroy_stream", Call::DestroyStream, injection, device);
  check_device("destroy_stream", device);
  if (stream == nullptr) {
    fail("destroy_stream", Status::InvalidResourceHandle, "the default stream cannot be destroyed");
  }
  std::shared_ptr<HostStream> target = find_stream("destroy_stream", device, stream);
  {
    const std::lock_guard lock(streams_mutex_);
    // Another thread may have destroyed it since find_stream; only one of them erases it.
    if (streams_.erase(stream) == 0) {
      fail("destroy_stream", Status::InvalidResourceHandle,
           "{} is not a stream of the host backend", fmt::ptr(stream));
    }
  }
  target->shutdown();  // runs the queued work, joins the worker
  // Report an asynchronous failure that nobody has seen yet (a GPU would throw it from the next
  // synchronize, which never came): the same error (function, code), its message saying so. The
  // stream is destroyed either way.
  if (std::exception_ptr error = target->take_error()) {
    try {
      std::rethrow_exception(error);
    } catch (const BackendError& e) {
      throw BackendError(e.backend(), e.function(), e.code(), e.code_name(),
                         fmt::format("{} (never synchronized: the stream was destroyed before a "
                                     "synchronize reported this failure of its work)",
                                     e.what()),
                         e.persistence());
    }
  }
}

void HostBackend::synchronize_stream(int device, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::SynchronizeStream, device);
  if (injection) throw_injected("synchronize_stream", Call::SynchronizeStream, injection, device);
  check_device("synchronize_stream", device);
  if (stream == nullptr) {
    // The legacy default stream waits for the device's blocking streams, and reports the failure
    // of its own queued work (a kernel launched on it) once.
    drain(device);
    rethrow_default_failure(device);
    return;
  }
  const std::shared_ptr<HostStream> target = find_stream("synchronize_stream", device, stream);
  target->wait_idle();
  if (std::exception_ptr error = target->take_error()) std::rethrow_exception(error);
}

bool HostBackend::query_stream(int device, NativeStream stream) {
  check_device("query_stream", device);
  if (stream == nullptr) {
    rethrow_default_failure(device);
    if (default_busy(device)) return false;
    const auto streams = streams_of(device);
    return std::all_of(streams.begin(), streams.end(), [](const auto& s) { return s->idle(); });
  }
  const std::shared_ptr<HostStream> target = find_stream("query_stream", device, stream);
  if (std::exception_ptr error = target->take_error()) std::rethrow_exception(error);
  return target->idle();
}

// ---- Events -------------------------------------------------------------------------------------

NativeEvent HostBackend::create_event(int device) {
  const detail::Injection injection = detail::begin_call(Call::CreateEvent, device);
  if (injection) throw_injected("create_event", Call::CreateEvent, injection, device);
  return create_completion_event(device);
}

// Not a counted call: how many completion events devmem creates depends on how soon earlier work
// completes (they are reused once it has), so counting them would make fault_nth's numbering of
// the user's own events vary from run to run. The failure of the call that uses them
// (record_event) is counted and injectable.
NativeEvent HostBackend::create_completion_event(int device) {
  check_device("create_event", device);
  auto event = std::make_shared<HostEvent>(device);
  NativeEvent handle = event.get();
  const std::lock_guard lock(events_mutex_);
  events_.emplace(handle, std::move(event));
  return handle;
}

void HostBackend::destroy_event(int device, NativeEvent event) {
  check_device("destroy_event", device);
  // A pending record is owned by its marker in the stream, so destroying the event while it is
  // pending is safe (CUDA allows it too).
  static_cast<void>(find_event("destroy_event", device, event));
  const std::lock_guard lock(events_mutex_);
  if (events_.erase(event) == 0) {
    fail("destroy_event", Status::InvalidResourceHandle, "{} is not an event of the host backend",
         fmt::ptr(event));
  }
}

void HostBackend::record_event(int device, NativeEvent event, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::RecordEvent, device);
  if (injection) throw_injected("record_event", Call::RecordEvent, injection, device);
  check_device("record_event", device);
  const std::shared_ptr<HostEvent> target = find_event("record_event", device, event);
  auto record = std::make_shared<EventRecord>();
  if (stream == nullptr) {
    if (default_busy(device)) {  // after the queued launches, without waiting for them
      target->set_latest(record);
      enqueue_default("record_event", device, [record = std::move(record)] { record->complete(); });
      return;
    }
    drain(device);
    record->complete();
    target->set_latest(std::move(record));
    return;
  }
  const std::shared_ptr<HostStream> queue = find_stream("record_event", device, stream);
  target->set_latest(record);
  enqueue_on(*queue, [record = std::move(record)] { record->complete(); });
}

void HostBackend::synchronize_event(int device, NativeEvent event) {
  check_device("synchronize_event", device);
  if (const auto record = find_event("synchronize_event", device, event)->latest()) record->wait();
}

bool HostBackend::query_event(int device, NativeEvent event) {
  check_device("query_event", device);
  const auto record = find_event("query_event", device, event)->latest();
  return record == nullptr || record->is_complete();
}

float HostBackend::elapsed_ms(int device, NativeEvent start, NativeEvent end) {
  check_device("elapsed_ms", device);
  const auto completed_record = [&](NativeEvent event) {
    auto record = find_event("elapsed_ms", device, event)->latest();
    if (record == nullptr) {
      fail("elapsed_ms", Status::InvalidValue, "event {} has never been recorded", fmt::ptr(event));
    }
    if (!record->is_complete()) {
      fail("elapsed_ms", Status::NotReady, "event {} has not completed yet", fmt::ptr(event));
    }
    return record;
  };
  const auto first = completed_record(start);
  const auto second = completed_record(end);
  return std::chrono::duration<float, std::milli>(second->completion_time() -
                                                  first->completion_time())
      .count();
}

void HostBackend::stream_wait_event(int device, NativeStream stream, NativeEvent event) {
  check_device("stream_wait_event", device);
  // The event may belong to another device (cross-device dependencies are allowed).
  // The record that is latest now is what the stream waits for, even if the event is recorded
  // again before the wait runs.
  const auto record = find_event("stream_wait_event", -1, event)->latest();
  if (stream == nullptr) {
    if (record == nullptr || record->is_complete()) return;
    if (default_busy(device)) {  // the default stream's later work waits, the host does not
      enqueue_default("stream_wait_event", device, [record] { record->wait(); });
      return;
    }
    record->wait();
    return;
  }
  const std::shared_ptr<HostStream> queue = find_stream("stream_wait_event", device, stream);
  if (record == nullptr || record->is_complete()) return;
  enqueue_on(*queue, [record] { record->wait(); });
}

// ---- Data movement ------------------------------------------------------------------------------

void HostBackend::copy(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                       NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Copy, device);
  check_device("copy", device);
  const ByteSpan span{0, clamp_to_int64(bytes)};
  check_copy("copy", kind, dst, span, src, span);
  submit_copy("copy", device, stream, injection, kind, dst, span, src, span,
              [this, dst, bytes](const void* source) { copier_.copy(dst, source, bytes); });
}

void HostBackend::copy_2d(int device, void* dst, std::size_t dst_pitch, const void* src,
                          std::size_t src_pitch, std::size_t width, std::size_t height,
                          CopyKind kind, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Copy, device);
  check_device("copy_2d", device);
  if (height > 1 && (dst_pitch < width || src_pitch < width)) {
    fail("copy_2d", Status::InvalidValue,
         "pitches must be >= the row width when copying several rows (width {}, dst_pitch {}, "
         "src_pitch {}, height {})",
         width, dst_pitch, src_pitch, height);
  }
  const auto dst_bytes = span_2d(dst_pitch, width, height);
  const auto src_bytes = span_2d(src_pitch, width, height);
  if (!dst_bytes || !src_bytes) {
    fail("copy_2d", Status::InvalidValue,
         "{} rows of {} bytes with pitches {} (dst) and {} (src) overflow the address space",
         height, width, dst_pitch, src_pitch);
  }
  check_copy("copy_2d", kind, dst, ByteSpan{0, *dst_bytes}, src, ByteSpan{0, *src_bytes});
  submit_copy("copy_2d", device, stream, injection, kind, dst, ByteSpan{0, *dst_bytes}, src,
              ByteSpan{0, *src_bytes},
              [this, dst, dst_pitch, src_pitch, width, height](const void* source) {
                auto* out = static_cast<std::byte*>(dst);
                const auto* in = static_cast<const std::byte*>(source);
                if (width == 0 || height == 0) return;
                if (height == 1 || (dst_pitch == width && src_pitch == width)) {
                  copier_.copy(out, in, width * height);  // rows are adjacent on both sides
                  return;
                }
                for (std::size_t row = 0; row < height; ++row) {
                  std::memcpy(out + row * dst_pitch, in + row * src_pitch, width);
                }
              });
}

// Every block's rows, over every step of the outer loops, in whichever direction the strides go.
std::optional<HostBackend::ByteSpan> HostBackend::touched_span(const layout::CopyPlan& plan,
                                                               std::int64_t offset,
                                                               std::int64_t pitch,
                                                               const Strides& outer_strides) {
  if (plan.empty()) return ByteSpan{};
  ByteSpan span{offset, offset};
  const auto extend = [&span](std::int64_t step, std::int64_t count) {
    std::int64_t reach = 0;
    if (__builtin_mul_overflow(step, count, &reach)) return false;
    return !__builtin_add_overflow(reach > 0 ? span.hi : span.lo, reach,
                                   reach > 0 ? &span.hi : &span.lo);
  };
  for (std::size_t k = 0; k < plan.outer_shape.size(); ++k) {
    if (!extend(outer_strides[k], plan.outer_shape[k] - 1)) return std::nullopt;
  }
  if (!extend(pitch, plan.height - 1) || !extend(plan.width, 1)) return std::nullopt;
  return span;
}

void HostBackend::copy_strided(int device, void* dst, const void* src, const layout::CopyPlan& plan,
                               CopyKind kind, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Copy, device);
  check_device("copy_strided", device);
  if (!well_formed(plan)) {
    fail("copy_strided", Status::InvalidValue,
         "malformed copy plan (width {}, height {}, outer shape {}, {} source and {} destination "
         "outer strides)",
         plan.width, plan.height, layout::format_tuple(plan.outer_shape),
         plan.outer_src_strides.size(), plan.outer_dst_strides.size());
  }
  const auto dst_span = touched_span(plan, plan.dst_offset, plan.dst_pitch, plan.outer_dst_strides);
  const auto src_span = touched_span(plan, plan.src_offset, plan.src_pitch, plan.outer_src_strides);
  if (!dst_span || !src_span) {
    fail("copy_strided", Status::InvalidValue,
         "the copy plan's extent overflows the address space");
  }
  check_copy("copy_strided", kind, dst, *dst_span, src, *src_span);
  submit_copy("copy_strided", device, stream, injection, kind, dst, *dst_span, src, *src_span,
              [this, plan, dst](const void* source) {
                // Blocks whose rows follow each other without gaps are one contiguous range each:
                // large ones go through the parallel copier (the usual case: a whole contiguous
                // array).
                const bool packed = plan.height == 1 ||
                                    (plan.src_pitch == plan.width && plan.dst_pitch == plan.width);
                const auto block_bytes = static_cast<std::size_t>(plan.width * plan.height);
                if (!packed || block_bytes < ParallelCopier::kSplitThreshold) {
                  layout::copy_host_strided(plan, dst, source);
                  return;
                }
                auto* const out = static_cast<std::byte*>(dst);
                const auto* const in = static_cast<const std::byte*>(source);
                plan.for_each_block([&](std::int64_t src_offset, std::int64_t dst_offset) {
                  copier_.copy(out + dst_offset, in + src_offset, block_bytes);
                });
              });
}

void HostBackend::memset(int device, void* dst, int byte_value, std::size_t bytes,
                         NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Memset, device);
  check_device("memset", device);
  check_device_span("memset", "destination", dst, ByteSpan{0, clamp_to_int64(bytes)});
  submit("memset", Call::Memset, device, stream, injection,
         [this, dst, byte_value, bytes] { copier_.fill(dst, byte_value, bytes); });
}

// ---- Several devices (docs/scaling-out.md#several-devices) --------------------------------------

bool HostBackend::can_access_peer(int device, int peer) {
  check_device("can_access_peer", device);
  check_device("can_access_peer", peer);
  return peer_access(device, peer);
}

void HostBackend::enable_peer_access(int device, int peer) {
  check_device("enable_peer_access", device);
  check_device("enable_peer_access", peer);
  if (device == peer) {
    fail("enable_peer_access", Status::InvalidDevice, "device {} cannot be its own peer", device);
  }
  if (!peer_access(device, peer)) {
    fail("enable_peer_access", Status::PeerAccessUnsupported,
         "device {} cannot access device {} (host::set_peer_access / DEVMEM_HOST_PEER_ACCESS)",
         device, peer);
  }
  const std::lock_guard lock(peers_mutex_);
  peers_enabled_.insert({device, peer});  // enabling twice is not an error (devmem's contract)
}

void HostBackend::disable_peer_access(int device, int peer) {
  check_device("disable_peer_access", device);
  check_device("disable_peer_access", peer);
  const std::lock_guard lock(peers_mutex_);
  peers_enabled_.erase({device, peer});
}

void HostBackend::copy_peer(int dst_device, void* dst, int src_device, const void* src,
                            std::size_t bytes, NativeStream stream) {
  // Counted as a Copy of the destination device, whose stream it runs on.
  const int device = dst_device;
  const detail::Injection injection = detail::begin_call(Call::Copy, device);
  check_device("copy_peer", dst_device);
  check_device("copy_peer", src_device);
  if (dst_device != src_device) {
    // Like a GPU's direct access: only between devices that may be peers, once enabled. Without
    // it core/ stages the copy through host memory.
    bool enabled = false;
    {
      const std::lock_guard lock(peers_mutex_);
      enabled = peers_enabled_.contains({dst_device, src_device});
    }
    if (!enabled || !peer_access(dst_device, src_device)) {
      fail("copy_peer", Status::PeerAccessNotEnabled,
           "device {} has no peer access to device {} (enable_peer_access first; "
           "can_access_peer is {})",
           dst_device, src_device, peer_access(dst_device, src_device));
    }
  }
  const ByteSpan span{0, clamp_to_int64(bytes)};
  check_copy("copy_peer", CopyKind::DeviceToDevice, dst, span, src, span);
  {
    const std::lock_guard lock(memory_mutex_);
    const auto on = [this](int d, const void* ptr, std::size_t n) {
      return n == 0 || find_containing(devices_[static_cast<std::size_t>(d)].allocations,
                                       address_of(ptr), n, size_of_allocation) !=
                           devices_[static_cast<std::size_t>(d)].allocations.end();
    };
    if (!on(src_device, src, bytes) || !on(dst_device, dst, bytes)) {
      fail("copy_peer", Status::InvalidValue,
           "the source {} ({} bytes) must lie in memory of device {} and the destination {} in "
           "memory of device {}",
           fmt::ptr(src), bytes, src_device, fmt::ptr(dst), dst_device);
    }
  }
  submit_copy("copy_peer", device, stream, injection, CopyKind::DeviceToDevice, dst, span, src,
              span, [this, dst, bytes](const void* source) { copier_.copy(dst, source, bytes); });
}

void HostBackend::launch_host_function(int device, NativeStream stream, std::function<void()> fn) {
  check_device("launch_host_function", device);
  if (!fn) fail("launch_host_function", Status::InvalidValue, "empty function");
  submit("launch_host_function", Call::Count_, device, stream, detail::Injection{}, std::move(fn));
}

void HostBackend::launch_kernel(int device, NativeStream stream, HostStream::Operation run_grid) {
  const detail::Injection injection = detail::begin_call(Call::Launch, device);
  check_device("launch", device);
  submit("launch", Call::Launch, device, stream, injection, std::move(run_grid), OnDefault::Queue);
}

}  // namespace host
}  // namespace devmem

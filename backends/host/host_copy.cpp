// Copies and memsets of the host backend: the checks of their device-side ranges (with each
// thread's cache of the allocations found, which small copies rely on), the rules for pageable
// host memory on a non-default stream (submit_copy), the copies (1-D, 2-D, strided, between
// devices) and peer access. Apart from host_backend.cpp because it is the data path: what a copy
// costs is decided here, and nothing else in the backend reads the allocation cache.
#include "backends/host/host_backend.hpp"

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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace devmem::host {

// Declared in host_backend.hpp: the backend bumps it as it frees device allocations.
std::atomic<std::uint64_t> g_allocations_freed{1};

namespace {

std::uintptr_t address_of(const void* ptr) noexcept {
  return reinterpret_cast<std::uintptr_t>(ptr);
}

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

std::int64_t clamp_to_int64(std::size_t value) noexcept {
  return value > static_cast<std::size_t>(kInt64Max) ? kInt64Max : static_cast<std::int64_t>(value);
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
// allocate memory in static TLS block" (tests/dlopen checks that it loads). The pointer is
// initial-exec and trivially destructible, so that a lookup is one load from the thread pointer
// (a `thread_local std::unique_ptr` cost a call to __tls_get_addr and the TLS wrapper's
// initialisation check, a third of a small copy's checks); AllocationHitsOwner frees the table
// when the thread ends.
[[gnu::tls_model("initial-exec")]] thread_local constinit AllocationHits* t_allocation_hits =
    nullptr;
struct AllocationHitsOwner {
  AllocationHitsOwner() = default;
  AllocationHitsOwner(const AllocationHitsOwner&) = delete;
  AllocationHitsOwner& operator=(const AllocationHitsOwner&) = delete;
  AllocationHitsOwner(AllocationHitsOwner&&) = delete;
  AllocationHitsOwner& operator=(AllocationHitsOwner&&) = delete;
  ~AllocationHitsOwner() {
    if (!owns_table) return;
    delete t_allocation_hits;
    t_allocation_hits = nullptr;
  }
  bool owns_table = false;
};
thread_local AllocationHitsOwner t_allocation_hits_owner;

/// Makes this thread's table; null when it cannot be allocated.
[[gnu::noinline]] AllocationHits* make_allocation_hits() noexcept {
  t_allocation_hits = new (std::nothrow) AllocationHits{};
  // The owner's first use in this thread registers its destructor.
  t_allocation_hits_owner.owns_table = t_allocation_hits != nullptr;
  return t_allocation_hits;
}

/// This thread's entry for `address`; null when the thread's table cannot be allocated (the
/// caller then looks the allocation up under the lock, as without the table).
AllocationHit* allocation_hit(std::uintptr_t address) noexcept {
  AllocationHits* hits = t_allocation_hits;
  if (hits == nullptr) [[unlikely]] {
    hits = make_allocation_hits();
    if (hits == nullptr) return nullptr;
  }
  // Fibonacci hashing of the page number: allocations a few pages apart spread over the entries.
  constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
  return &(*hits)[static_cast<std::size_t>(((address >> 12) * kGolden) >> 56)];
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
      if (cached_device_span(first, bytes)) return;
      AllocationHit* const hit = allocation_hit(first);
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

bool HostBackend::cached_device_span(std::uintptr_t first, std::size_t bytes) const noexcept {
  const AllocationHit* const hit = allocation_hit(first);
  return hit != nullptr && hit->backend == this &&
         hit->freed == g_allocations_freed.load(std::memory_order_acquire) && first >= hit->begin &&
         first + bytes >= first && first + bytes <= hit->end;
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
// ---- Data movement ------------------------------------------------------------------------------

void HostBackend::copy(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                       NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Copy, device);
  // A small copy between host memory and a device allocation that this thread copied to or from
  // before, on the default stream, with no failure injected: the checks below pass (a device of
  // this backend, a valid kind, the device side inside a live allocation, a non-null host side)
  // and submit_copy would drain and copy inline. Done here without the calls: in loops of small
  // copies (devmem::mpi's eager messages, element reads) the checks' calls cost more than the
  // copy.
  if (stream == nullptr && !injection && bytes > 0 && bytes < ParallelCopier::kSplitThreshold &&
      device >= 0 && device < device_count_ &&
      (kind == CopyKind::HostToDevice || kind == CopyKind::DeviceToHost)) {
    const bool to_device = kind == CopyKind::HostToDevice;
    const void* const device_side = to_device ? dst : src;
    const void* const host_side = to_device ? src : dst;
    if (host_side != nullptr && cached_device_span(address_of(device_side), bytes)) {
      drain(device);
      std::memcpy(dst, src, bytes);
      return;
    }
  }
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
}  // namespace devmem::host

// Strided copies of the GPU backends' shared implementation (runtime_backend.hpp's copy_strided and
// copy_2d): a layout::CopyPlan carried out with a bounded number of vendor calls whatever its
// layout. The vendor's 2-D and 3-D copies do it when a few of them suffice (copy_blocks);
// otherwise at most 8 calls and one launch of libdevmem's strided-copy kernel
// (strided_copy_kernel.hpp, launched through Api::launchCopyStrided) do it (copy_bounded), with
// temporaries kept for the next copy. Apart from the backend because it is a subject of its own:
// the plan's geometry (axes, extents, dense images), the choice between the two paths, and the
// temporaries' lifetime. Not installed.
#pragma once

#include "backends/gpu_runtime/runtime_errors.hpp"
#include "backends/gpu_runtime/strided_copy_args.hpp"
#include "backends/gpu_runtime/vendor_api.hpp"

#include <devmem/backend.hpp>
#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace devmem::gpu_runtime {

// ---- The plan's geometry (no vendor calls) ----------------------------------------------------

/// One axis of a plan: `n` steps of `src` and `dst` bytes.
struct PlanAxis {
  std::int64_t n = 1;
  std::int64_t src = 0;
  std::int64_t dst = 0;
};

/// The plan's axes, outermost first: the outer axes, the rows of a block, then the bytes of a
/// row (always last, with strides 1).
inline std::vector<PlanAxis> plan_axes(const layout::CopyPlan& plan) {
  std::vector<PlanAxis> axes;
  axes.reserve(plan.outer_shape.size() + 2);
  for (std::size_t k = 0; k < plan.outer_shape.size(); ++k) {
    axes.push_back(
        PlanAxis{plan.outer_shape[k], plan.outer_src_strides[k], plan.outer_dst_strides[k]});
  }
  axes.push_back(PlanAxis{plan.height, plan.src_pitch, plan.dst_pitch});
  axes.push_back(PlanAxis{plan.width, 1, 1});
  return axes;
}

/// The kernel's arguments for `plan` between element (0, ..., 0) at `dst` and at `src`: the
/// plan's axes (rows as an axis of `unit`-byte units), merged where one continues another on
/// both sides, with the widest unit that divides every address and stride. Nothing when the
/// kernel cannot take that many axes.
inline std::optional<StridedCopyArgs> kernel_args(const layout::CopyPlan& plan, std::byte* dst,
                                                  const std::byte* src) {
  StridedCopyArgs args;
  args.dst = dst + plan.dst_offset;
  args.src = src + plan.src_offset;
  const std::vector<PlanAxis> bytes = plan_axes(plan);
  auto common = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(args.dst) |
                                           reinterpret_cast<std::uintptr_t>(args.src));
  for (std::size_t k = 0; k + 1 < bytes.size(); ++k) {  // the row's bytes: `width` below
    common |= static_cast<std::uint64_t>(bytes[k].src) | static_cast<std::uint64_t>(bytes[k].dst);
  }
  const auto width = static_cast<std::uint64_t>(plan.width);
  std::int64_t unit = 16;
  while (unit > 1 && ((common | width) & static_cast<std::uint64_t>(unit - 1)) != 0) unit /= 2;
  args.unit = static_cast<std::int32_t>(unit);
  std::vector<PlanAxis> axes;
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    PlanAxis axis = bytes[k];
    if (k + 1 == bytes.size()) axis = PlanAxis{axis.n / unit, unit, unit};  // the row's units
    if (axis.n == 1) continue;
    if (!axes.empty() && axes.back().src == axis.src * axis.n &&
        axes.back().dst == axis.dst * axis.n) {
      axes.back() = PlanAxis{axes.back().n * axis.n, axis.src, axis.dst};
      continue;
    }
    axes.push_back(axis);
  }
  if (axes.empty()) axes.push_back(PlanAxis{1, unit, unit});  // a single unit
  if (axes.size() > static_cast<std::size_t>(kStridedCopyMaxRank)) return std::nullopt;
  args.rank = static_cast<std::int32_t>(axes.size());
  args.count = 1;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    args.shape[k] = axes[k].n;
    args.src_strides[k] = axes[k].src;
    args.dst_strides[k] = axes[k].dst;
    args.count *= axes[k].n;
  }
  return args;
}

/// `plan` with one side replaced by the dense row-major image of the plan's axes (the order of
/// the destination's strides, which plan_copy sorts by), starting at element (0, ..., 0).
inline layout::CopyPlan with_dense(const layout::CopyPlan& plan, bool dense_dst) {
  layout::CopyPlan out = plan;
  (dense_dst ? out.dst_pitch : out.src_pitch) = plan.width;
  (dense_dst ? out.dst_offset : out.src_offset) = 0;
  Strides& strides = dense_dst ? out.outer_dst_strides : out.outer_src_strides;
  std::int64_t stride = plan.width * plan.height;
  for (std::size_t k = plan.outer_shape.size(); k-- > 0;) {
    strides[k] = stride;
    stride *= plan.outer_shape[k];
  }
  return out;
}

/// The bytes one side of `plan` spans, relative to its element (0, ..., 0).
inline Extent side_extent(const layout::CopyPlan& plan, bool dst_side) {
  Extent extent{dst_side ? plan.dst_offset : plan.src_offset, 0};
  extent.end = extent.begin + 1;
  for (const PlanAxis& axis : plan_axes(plan)) {
    const std::int64_t span = (axis.n - 1) * (dst_side ? axis.dst : axis.src);
    (span < 0 ? extent.begin : extent.end) += span;
  }
  return extent;
}

/// One side's extent when that side's elements fill every byte of it exactly once (in some
/// axis order): a single contiguous copy of the extent then moves exactly those elements.
inline std::optional<Extent> dense_extent(const layout::CopyPlan& plan, bool dst_side) {
  std::vector<PlanAxis> axes = plan_axes(plan);
  const auto stride = [dst_side](const PlanAxis& a) {
    return dst_side ? std::abs(a.dst) : std::abs(a.src);
  };
  std::sort(axes.begin(), axes.end(),
            [&](const PlanAxis& a, const PlanAxis& b) { return stride(a) < stride(b); });
  std::int64_t expected = 1;
  for (const PlanAxis& axis : axes) {
    if (axis.n == 1) continue;
    if (stride(axis) != expected) return std::nullopt;
    expected *= axis.n;
  }
  return side_extent(plan, dst_side);
}

// ---- The copies -------------------------------------------------------------------------------
//
// The bounded path (copy_bounded): a plan of many blocks or short rows is copied with at most 8
// vendor calls (device selection, synchronisation and temporaries included) and one launch of the
// strided-copy kernel:
// - D2D: the kernel, from one side to the other; nothing else.
// - H2D: the host packs the source (layout::copy_host_strided) into page-locked staging, as an
//   image of the destination's extent when the destination has no gaps (then one copy of the
//   extent), else densely in the destination's axis order, copied to a device temporary that
//   the kernel unpacks. A source without gaps skips the host pack: its extent is copied to the
//   device temporary as it is. The destination's bytes between its elements are never written.
// - D2H: the kernel packs the source into a device temporary as an image of the destination's
//   extent when the destination has no gaps (then one copy of the extent); otherwise the source's
//   extent, when at most twice the elements' bytes, is copied to staging as it is, else the
//   kernel packs it densely first; the host then places the elements (copy_host_strided).
// - H2H: the host copies, once earlier work on the stream is done.
// Completion: the host reads the source only after earlier work on the stream (which may write
// it) is done, and the copy is complete when the call returns, whatever the host memory: the
// temporaries are reused or freed only once the stream has finished with them. (The runtimes'
// pageable copies behave the same; for page-locked host memory this path is synchronous where
// the vendor copies are not.)

/// The strided copies of one backend; it keeps the bounded path's idle temporaries.
template <VendorApi Api>
class StridedCopies : private VendorCalls<Api> {
  using Calls = VendorCalls<Api>;
  using Calls::check;
  using Calls::clear_last_error;
  using Calls::copy_1d;
  using Calls::describe;
  using Calls::memcpy_kind;
  using Calls::native;
  using typename Calls::ApiStatus;

 public:
  /// The most vendor copies (graph nodes) a strided host-device copy may become during capture.
  static constexpr std::int64_t kMaxCapturedCopies = 1024;
  /// The most vendor copy calls a strided copy takes on the vendor path.
  static constexpr std::int64_t kMaxVendorCopies = 4;
  /// Rows of at least this many bytes keep a DMA engine near its bandwidth; shorter rows are
  /// moved at a row rate instead (4-byte rows at a small fraction of the bus).
  static constexpr std::int64_t kMinDmaRowBytes = 512;
  /// Up to this many rows in all, the vendor path is still the cheapest, whatever their length:
  /// the copy is small, and the bounded path's extra calls would cost more than the rows.
  static constexpr std::int64_t kMaxShortRows = 64;
  /// Temporaries of the bounded path up to this size are kept for the next copy (one device and
  /// one page-locked buffer per device); larger ones are freed after their copy.
  static constexpr std::size_t kMaxCachedScratch = std::size_t{64} << 20;

  /// The number of vendor copy calls copy_blocks issues for `plan`.
  static std::int64_t vendor_copy_calls(const layout::CopyPlan& plan) {
    if (plan.empty()) return 0;
    if (slice_heights(plan)) return plan.block_count() / plan.outer_shape.back();
    const bool one_call_per_block =
        plan.height == 1 ||
        static_cast<std::size_t>(
            std::max({plan.src_pitch, plan.dst_pitch, plan.width, plan.height})) <= Api::kMaxPitch;
    return plan.block_count() * (one_call_per_block ? 1 : plan.height);
  }

  /// Whether the vendor's copies do `plan` well: few calls, of long rows or of few rows.
  static bool vendor_copies_suffice(const layout::CopyPlan& plan) {
    if (vendor_copy_calls(plan) > kMaxVendorCopies) return false;
    return plan.height == 1 || plan.width >= kMinDmaRowBytes ||
           plan.height * plan.block_count() <= kMaxShortRows;
  }

  /// During stream capture the bounded path cannot run between host and device (it allocates
  /// temporaries and waits for them); the vendor's copies can be captured, one graph node each,
  /// up to a bound (review 2, N2). Throws InvalidArgument when `plan` is beyond it.
  static void require_capturable(const layout::CopyPlan& plan, CopyKind kind) {
    const std::int64_t calls = vendor_copy_calls(plan);
    if (calls <= kMaxCapturedCopies) return;
    throw InvalidArgument(fmt::format(
        "{} copy_strided: a strided {} copy of {} separate rows cannot be captured into a "
        "graph (at most {} copy nodes); capture a copy between contiguous arrays, or a "
        "device-to-device copy, instead",
        Api::kBackend, kind == CopyKind::HostToDevice ? "host-to-device" : "device-to-host", calls,
        kMaxCapturedCopies));
  }

  /// `height` rows of `width` bytes: one memcpy for a single row, else one 2-D copy; rows one by
  /// one when a pitch is beyond what the runtime's 2-D copy accepts.
  static void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                        std::size_t width, std::size_t height, CopyKind kind, NativeStream stream) {
    if (width == 0 || height == 0) return;
    if (height == 1) {
      copy_1d(dst, src, width, kind, stream);
      return;
    }
    if (std::max({dst_pitch, src_pitch, width, height}) <= Api::kMaxPitch) {
      const ApiStatus status = Api::memcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                                  memcpy_kind(kind), native(stream));
      if (status.code != Api::kErrorInvalidPitchValue) {
        check(status, "copying {} rows of {} bytes from {} (pitch {}) to {} (pitch {}) ({}) on {}",
              height, width, fmt::ptr(src), src_pitch, fmt::ptr(dst), dst_pitch, to_string(kind),
              describe(stream));
        return;
      }
      clear_last_error();  // a pitch this device does not take: copy the rows one by one
    }
    auto* const out = static_cast<std::byte*>(dst);
    const auto* const in = static_cast<const std::byte*>(src);
    for (std::size_t row = 0; row < height; ++row) {
      copy_1d(out + row * dst_pitch, in + row * src_pitch, width, kind, stream);
    }
  }

  /// The vendor path: one 3-D copy call per block group when the plan's innermost outer axis
  /// steps whole slices of rows on both sides (the common case of a sub-block of a 3-D array);
  /// otherwise one 2-D copy per block.
  static void copy_blocks(std::byte* dst0, const std::byte* src0, const layout::CopyPlan& plan,
                          CopyKind kind, NativeStream stream) {
    const auto width = static_cast<std::size_t>(plan.width);
    const auto height = static_cast<std::size_t>(plan.height);
    const auto src_pitch = static_cast<std::size_t>(plan.src_pitch);
    const auto dst_pitch = static_cast<std::size_t>(plan.dst_pitch);
    if (const auto slices = slice_heights(plan)) {
      // The plan without its innermost outer axis enumerates the 3-D blocks.
      layout::CopyPlan outer = plan;
      const auto depth = static_cast<std::size_t>(outer.outer_shape.back());
      outer.outer_shape.pop_back();
      outer.outer_src_strides.pop_back();
      outer.outer_dst_strides.pop_back();
      outer.for_each_block([&](std::int64_t src_offset, std::int64_t dst_offset) {
        copy_volume(dst0 + dst_offset, dst_pitch, slices->dst, src0 + src_offset, src_pitch,
                    slices->src, width, height, depth, kind, stream);
      });
      return;
    }
    plan.for_each_block([&](std::int64_t src_offset, std::int64_t dst_offset) {
      copy_rows(dst0 + dst_offset, dst_pitch, src0 + src_offset, src_pitch, width, height, kind,
                stream);
    });
  }

  /// The bounded path (see above); false, with nothing written to `dst`, when its temporaries
  /// cannot be allocated or the library's kernel has no code for the device (the caller then uses
  /// the vendor's copies). A device without code is remembered: its later copies go to the
  /// vendor's copies at once (review 2, N6: an A100 with an sm_90-only build, an MI300 with a
  /// gfx90a-only one).
  bool copy_bounded(int device, std::byte* dst, const std::byte* src, const layout::CopyPlan& plan,
                    CopyKind kind, NativeStream stream) {
    {
      const std::lock_guard lock(scratch_mutex_);
      if (kernel_missing_.contains(device)) return false;
    }
    try {
      return copy_bounded_steps(device, dst, src, plan, kind, stream);
    } catch (const MissingKernelImage&) {
      const std::lock_guard lock(scratch_mutex_);
      kernel_missing_.insert(device);
      return false;
    }
  }

  /// Whether the library's kernel was found to have no code for `device`.
  [[nodiscard]] bool kernel_missing(int device) {
    const std::lock_guard lock(scratch_mutex_);
    return kernel_missing_.contains(device);
  }

 private:
  /// What launch_strided_copy throws when the vendor says the kernel has no code for the device.
  struct MissingKernelImage {};

  bool copy_bounded_steps(int device, std::byte* dst, const std::byte* src,
                          const layout::CopyPlan& plan, CopyKind kind, NativeStream stream) {
    BoundedTemporaries temps(*this, device, stream);
    switch (kind) {
      case CopyKind::DeviceToDevice:
        launch_strided_copy(kernel_args(plan, dst, src), stream);
        return true;
      case CopyKind::HostToHost:
        synchronize_before(stream);
        layout::copy_host_strided(plan, dst, src);
        return true;
      case CopyKind::HostToDevice:
        if (!to_device(temps, dst, src, plan, stream)) return false;
        break;
      case CopyKind::DeviceToHost:
        if (!to_host(temps, dst, src, plan, stream)) return false;
        break;
    }
    temps.finish();
    return true;
  }

 public:
  /// Frees the idle temporaries.
  void release_scratch() noexcept {
    std::map<int, ScratchCache> scratch;
    {
      const std::lock_guard lock(scratch_mutex_);
      scratch.swap(scratch_);
    }
    // Freed here, outside the lock, by their destructors.
  }

 private:
  /// The heights (in rows) of one 3-D slice on each side.
  struct SliceHeights {
    std::size_t src = 0;
    std::size_t dst = 0;
  };

  /// When the plan's innermost outer axis advances by a whole number of rows, at least `height`
  /// of them, on both sides (forwards), its steps are the slices of a 3-D copy; returns the slice
  /// heights, or nothing when the plan does not have that shape.
  static std::optional<SliceHeights> slice_heights(const layout::CopyPlan& plan) {
    if (plan.outer_shape.empty() || plan.height < 2 || plan.outer_shape.back() < 2) return {};
    const std::int64_t src_step = plan.outer_src_strides.back();
    const std::int64_t dst_step = plan.outer_dst_strides.back();
    if (plan.src_pitch < plan.width || plan.dst_pitch < plan.width || plan.src_pitch <= 0 ||
        plan.dst_pitch <= 0 || src_step <= 0 || dst_step <= 0 || src_step % plan.src_pitch != 0 ||
        dst_step % plan.dst_pitch != 0) {
      return {};
    }
    const SliceHeights slices{static_cast<std::size_t>(src_step / plan.src_pitch),
                              static_cast<std::size_t>(dst_step / plan.dst_pitch)};
    const auto height = static_cast<std::size_t>(plan.height);
    if (slices.src < height || slices.dst < height) return {};
    const auto largest =
        std::max({slices.src, slices.dst, height, static_cast<std::size_t>(plan.src_pitch),
                  static_cast<std::size_t>(plan.dst_pitch),
                  static_cast<std::size_t>(plan.outer_shape.back())});
    if (largest > Api::kMaxPitch) return {};
    return slices;
  }

  /// `depth` slices of `height` rows of `width` bytes; slice k at ptr + k * pitch * slice height.
  static void copy_volume(void* dst, std::size_t dst_pitch, std::size_t dst_height, const void* src,
                          std::size_t src_pitch, std::size_t src_height, std::size_t width,
                          std::size_t height, std::size_t depth, CopyKind kind,
                          NativeStream stream) {
    const ApiStatus status =
        Api::memcpy3DAsync(dst, dst_pitch, dst_height, src, src_pitch, src_height, width, height,
                           depth, memcpy_kind(kind), native(stream));
    if (status.code != Api::kErrorInvalidPitchValue) {
      check(status,
            "copying {} slices of {} rows of {} bytes from {} (pitch {}, {} rows per slice) to {} "
            "(pitch {}, {} rows per slice) ({}) on {}",
            depth, height, width, fmt::ptr(src), src_pitch, src_height, fmt::ptr(dst), dst_pitch,
            dst_height, to_string(kind), describe(stream));
      return;
    }
    clear_last_error();  // a pitch this device does not take: one 2-D copy per slice
    auto* const out = static_cast<std::byte*>(dst);
    const auto* const in = static_cast<const std::byte*>(src);
    for (std::size_t k = 0; k < depth; ++k) {
      copy_rows(out + k * dst_pitch * dst_height, dst_pitch, in + k * src_pitch * src_height,
                src_pitch, width, height, kind, stream);
    }
  }

  /// A temporary buffer of the bounded path: device memory or page-locked host memory. Owns it.
  struct ScratchBuffer {
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
    bool host = false;

    ScratchBuffer() = default;
    ScratchBuffer(const ScratchBuffer&) = delete;
    ScratchBuffer& operator=(const ScratchBuffer&) = delete;
    ScratchBuffer(ScratchBuffer&& other) noexcept
        : ptr(std::exchange(other.ptr, nullptr)), bytes(other.bytes), host(other.host) {}
    ScratchBuffer& operator=(ScratchBuffer&& other) noexcept {
      if (this != &other) {
        reset();
        ptr = std::exchange(other.ptr, nullptr);
        bytes = other.bytes;
        host = other.host;
      }
      return *this;
    }
    ~ScratchBuffer() { reset(); }
    /// Frees the memory (errors ignored: nothing can be done about them here). The caller makes
    /// sure no work enqueued on a stream still uses it.
    void reset() noexcept {
      if (ptr == nullptr) return;
      if (!ProcessExit::begun()) {  // the runtime may be gone: see ProcessExit
        static_cast<void>(host ? Api::hostFree(ptr) : Api::free(ptr));
        clear_last_error();
      }
      ptr = nullptr;
    }
  };

  /// The temporaries of one bounded copy. Until finish() says the stream is done with them, they
  /// are released only after synchronizing the stream (a failure path: its errors are ignored,
  /// the copy's own error is the one reported, and the buffers are freed rather than reused).
  class BoundedTemporaries {
   public:
    BoundedTemporaries(StridedCopies& owner, int device, NativeStream stream)
        : owner_(owner), device_(device), stream_(stream) {}
    BoundedTemporaries(const BoundedTemporaries&) = delete;
    BoundedTemporaries& operator=(const BoundedTemporaries&) = delete;
    BoundedTemporaries(BoundedTemporaries&&) = delete;
    BoundedTemporaries& operator=(BoundedTemporaries&&) = delete;
    ~BoundedTemporaries() {
      if (in_use_ && !ProcessExit::begun()) {
        static_cast<void>(Api::streamSynchronize(native(stream_)));
        clear_last_error();
      }
      if (!finished_) return;  // freed by the members' destructors
      owner_.return_scratch(device_, std::move(device_buffer_));
      owner_.return_scratch(device_, std::move(host_buffer_));
    }
    /// `bytes` of device memory, or nullptr when the device has no room for them.
    [[nodiscard]] std::byte* device(std::size_t bytes) {
      return take(device_buffer_, bytes, /*host=*/false);
    }
    /// `bytes` of page-locked host memory, or nullptr when none can be had.
    [[nodiscard]] std::byte* host(std::size_t bytes) {
      return take(host_buffer_, bytes, /*host=*/true);
    }
    /// From here enqueued work may use the temporaries.
    void in_use() noexcept { in_use_ = true; }
    /// Waits for the stream to be done with the temporaries.
    void finish() {
      if (in_use_) {
        check(Api::streamSynchronize(native(stream_)), "waiting for a strided copy on {}",
              describe(stream_));
      }
      in_use_ = false;
      finished_ = true;
    }

   private:
    std::byte* take(ScratchBuffer& buffer, std::size_t bytes, bool host) {
      buffer = owner_.take_scratch(device_, bytes, host);
      return buffer.ptr;
    }

    StridedCopies& owner_;
    int device_;
    NativeStream stream_;
    ScratchBuffer device_buffer_;
    ScratchBuffer host_buffer_;
    bool in_use_ = false;
    bool finished_ = false;
  };

  /// The kept temporaries of one device: at most one of each kind, idle.
  struct ScratchCache {
    ScratchBuffer device;
    ScratchBuffer host;
  };

  /// A buffer of at least `bytes`: the kept one when it is large enough (a smaller one is freed:
  /// the cache holds the largest recent size), else a new one; empty when out of memory.
  ScratchBuffer take_scratch(int device, std::size_t bytes, bool host) {
    ScratchBuffer buffer;
    {
      const std::lock_guard lock(scratch_mutex_);
      ScratchCache& cache = scratch_[device];
      buffer = std::move(host ? cache.host : cache.device);
    }
    if (buffer.ptr != nullptr && buffer.bytes >= bytes) return buffer;
    buffer.reset();
    void* ptr = nullptr;
    // Portable: page-locked for every device's context, whichever is current.
    const ApiStatus status =
        host ? Api::hostAlloc(&ptr, bytes, Api::kHostAllocPortable) : Api::malloc(&ptr, bytes);
    if (status.code == Api::kErrorMemoryAllocation) {
      clear_last_error();
      return buffer;
    }
    check(status, "allocating a {} ({} bytes) {} temporary of a strided copy on device {}",
          format_bytes(bytes), bytes, host ? "page-locked" : "device", device);
    buffer.ptr = static_cast<std::byte*>(ptr);
    buffer.bytes = bytes;
    buffer.host = host;
    return buffer;
  }

  /// Keeps an idle buffer for the next bounded copy, or frees it (too large, or one is kept
  /// already).
  void return_scratch(int device, ScratchBuffer buffer) noexcept {
    if (buffer.ptr == nullptr || buffer.bytes > kMaxCachedScratch) return;
    // A test runtime may poison a buffer when it goes back to the cache (the strict fake fills it
    // with 0xDB), so that a later copy that reads it before writing it is caught. No work uses it
    // any more: BoundedTemporaries::finish synchronized the stream.
    if constexpr (requires { Api::scratchReturned(buffer.ptr, buffer.bytes, buffer.host); }) {
      Api::scratchReturned(buffer.ptr, buffer.bytes, buffer.host);
    }
    try {
      const std::lock_guard lock(scratch_mutex_);
      ScratchCache& cache = scratch_[device];
      ScratchBuffer& kept = buffer.host ? cache.host : cache.device;
      if (kept.ptr == nullptr) kept = std::move(buffer);
    } catch (...) {
      // Out of memory growing the map: the buffer is freed instead (its destructor).
    }
  }

  static void launch_strided_copy(const std::optional<StridedCopyArgs>& found,
                                  NativeStream stream) {
    if (!found) {
      // copy_strided checked the plan's axes, and its dense variants never have more.
      throw Error(
          fmt::format("{} copy_strided: internal error: a strided copy needs more than {} "
                      "axes after the plan was found to need at most that many",
                      Api::kBackend, kStridedCopyMaxRank));
    }
    const StridedCopyArgs& args = *found;
    const ApiStatus status = Api::launchCopyStrided(args, native(stream));
    if (Api::missingKernelImage(status.code)) {
      clear_last_error();  // this launch's failure, handled here: not the next call's
      throw MissingKernelImage{};
    }
    check(status,
          "launching the strided-copy kernel ({} units of {} bytes in {} axes, {} to {}) on {}",
          args.count, args.unit, args.rank, fmt::ptr(args.src), fmt::ptr(args.dst),
          describe(stream));
  }

  /// The host may read the source (and write the destination) only once earlier work on the
  /// stream, which may write it (or read it), is done.
  static void synchronize_before(NativeStream stream) {
    check(Api::streamSynchronize(native(stream)), "synchronizing {} before a strided copy",
          describe(stream));
  }

  // ---- The bounded path's steps ----
  // Each returns false, with nothing enqueued, when its temporaries cannot be had.

  /// Host to device: the first of the ways described above that has room for its temporaries.
  static bool to_device(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                        const layout::CopyPlan& plan, NativeStream stream) {
    const std::optional<Extent> source = dense_extent(plan, /*dst_side=*/false);
    if (source && to_device_as_it_is(temps, dst, src, plan, *source, stream)) return true;
    if (const std::optional<Extent> image = dense_extent(plan, /*dst_side=*/true)) {
      return to_device_through_image(temps, dst, src, plan, *image, stream);
    }
    if (source) return false;  // no device memory for the source's copy: the vendor's copies
    return to_device_packed(temps, dst, src, plan, stream);
  }

  /// A source without gaps goes over as it is and the device reorders it: on an H100 a
  /// transposing copy from pinned memory ran at 0.4 GB/s when the host packed it first (a
  /// transpose on one core) and the contiguous copy runs at 52 GB/s. Packing on the host is the
  /// fallback when the device has no room for the temporary.
  static bool to_device_as_it_is(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                                 const layout::CopyPlan& plan, const Extent& source,
                                 NativeStream stream) {
    const auto bytes = static_cast<std::size_t>(source.bytes());
    std::byte* const source_copy = temps.device(bytes);
    if (source_copy == nullptr) return false;
    temps.in_use();
    copy_1d(source_copy, src + source.begin, bytes, CopyKind::HostToDevice, stream);
    launch_strided_copy(kernel_args(plan, dst, source_copy - source.begin), stream);
    return true;
  }

  /// The host packs the source into staging as an image of the destination's extent (which has
  /// no gaps): one copy of the extent.
  static bool to_device_through_image(BoundedTemporaries& temps, std::byte* dst,
                                      const std::byte* src, const layout::CopyPlan& plan,
                                      const Extent& image, NativeStream stream) {
    const auto bytes = static_cast<std::size_t>(image.bytes());
    std::byte* const staging = temps.host(bytes);
    if (staging == nullptr) return false;
    synchronize_before(stream);
    layout::copy_host_strided(plan, staging - image.begin, src);
    temps.in_use();
    copy_1d(dst + image.begin, staging, bytes, CopyKind::HostToDevice, stream);
    return true;
  }

  /// The host packs the source densely, in the destination's axis order; the kernel unpacks it.
  static bool to_device_packed(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                               const layout::CopyPlan& plan, NativeStream stream) {
    const auto payload = static_cast<std::size_t>(plan.total_bytes());
    std::byte* const staging = temps.host(payload);
    std::byte* const temp = staging == nullptr ? nullptr : temps.device(payload);
    if (temp == nullptr) return false;
    synchronize_before(stream);
    layout::copy_host_strided(with_dense(plan, /*dense_dst=*/true), staging, src);
    temps.in_use();
    copy_1d(temp, staging, payload, CopyKind::HostToDevice, stream);
    launch_strided_copy(kernel_args(with_dense(plan, /*dense_dst=*/false), dst, temp), stream);
    return true;
  }

  /// Device to host: the first of the ways described above that applies.
  static bool to_host(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                      const layout::CopyPlan& plan, NativeStream stream) {
    if (const std::optional<Extent> image = dense_extent(plan, /*dst_side=*/true)) {
      return to_host_through_image(temps, dst, src, plan, *image, stream);
    }
    const auto payload = static_cast<std::size_t>(plan.total_bytes());
    if (const Extent source = side_extent(plan, /*dst_side=*/false);
        static_cast<std::size_t>(source.bytes()) <= 2 * payload) {
      return to_host_as_it_is(temps, dst, src, plan, source, stream);
    }
    return to_host_packed(temps, dst, src, plan, stream);
  }

  /// The kernel packs the source as an image of the destination's extent (which has no gaps):
  /// one copy of the extent.
  static bool to_host_through_image(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                                    const layout::CopyPlan& plan, const Extent& image,
                                    NativeStream stream) {
    const auto bytes = static_cast<std::size_t>(image.bytes());
    std::byte* const temp = temps.device(bytes);
    if (temp == nullptr) return false;
    temps.in_use();
    launch_strided_copy(kernel_args(plan, temp - image.begin, src), stream);
    copy_1d(dst + image.begin, temp, bytes, CopyKind::DeviceToHost, stream);
    return true;
  }

  /// The source's extent (at most twice the elements' bytes) is copied to staging as it is; the
  /// host places the elements.
  static bool to_host_as_it_is(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                               const layout::CopyPlan& plan, const Extent& source,
                               NativeStream stream) {
    const auto bytes = static_cast<std::size_t>(source.bytes());
    std::byte* const staging = temps.host(bytes);
    if (staging == nullptr) return false;
    temps.in_use();
    copy_1d(staging, src + source.begin, bytes, CopyKind::DeviceToHost, stream);
    temps.finish();
    layout::copy_host_strided(plan, dst, staging - source.begin);
    return true;
  }

  /// The kernel packs the source densely into a device temporary; the host places the elements.
  static bool to_host_packed(BoundedTemporaries& temps, std::byte* dst, const std::byte* src,
                             const layout::CopyPlan& plan, NativeStream stream) {
    const auto payload = static_cast<std::size_t>(plan.total_bytes());
    std::byte* const temp = temps.device(payload);
    std::byte* const staging = temp == nullptr ? nullptr : temps.host(payload);
    if (staging == nullptr) return false;
    temps.in_use();
    launch_strided_copy(kernel_args(with_dense(plan, /*dense_dst=*/true), temp, src), stream);
    copy_1d(staging, temp, payload, CopyKind::DeviceToHost, stream);
    temps.finish();
    layout::copy_host_strided(with_dense(plan, /*dense_dst=*/false), dst, staging);
    return true;
  }

  std::mutex scratch_mutex_;             // guards scratch_ and kernel_missing_
  std::map<int, ScratchCache> scratch_;  // per device
  std::set<int> kernel_missing_;         // devices the library's kernel has no code for
};

}  // namespace devmem::gpu_runtime

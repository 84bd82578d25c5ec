// Strided copies of the GPU backends' shared implementation (runtime_backend.hpp's copy_strided and
// copy_2d): a layout::CopyPlan carried out with a bounded number of vendor calls whatever its
// layout. The vendor's 2-D and 3-D copies do it when a few of them suffice (copy_blocks);
// otherwise libdevmem's strided-copy kernel (strided_copy_kernel.hpp, launched through
// Api::launchCopyStrided) does it, chunk by chunk through bounded temporaries kept for the next
// copy (copy_bounded; plan_chunks.hpp cuts the plan, bounded_temporaries.hpp holds the
// temporaries and retires them by events). Apart from the backend because it is a subject of its
// own: the plan's geometry (axes, extents, dense images), the choice between the two paths, and
// the bounded path's steps. Not installed.
#pragma once

#include "backends/gpu_runtime/bounded_temporaries.hpp"
#include "backends/gpu_runtime/plan_chunks.hpp"
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
// The bounded path (copy_bounded): a plan of many blocks or short rows is copied with a few vendor
// calls per chunk and one launch of the strided-copy kernel per chunk, through bounded
// temporaries (review 2, N7). The plan is cut into chunks (plan_chunks.hpp: boxes of its axes,
// whole blocks, else whole rows, else runs of a row's bytes), each moved through one of two slots
// of at most `chunk` bytes per side (bounded_temporaries.hpp; `chunk` is the staging pipeline's
// StagingOptions::chunk, so one setting bounds both paths): while the DMA engine and the kernel
// work on one slot's chunk the host packs or places the other's. (The DMAs and kernels of a copy
// that the host does not touch all run on the caller's stream, one after another: a chunk's
// kernel moves it at device-memory speed, a small fraction of its DMA's time, and a second,
// internal stream would have to be ordered with the caller's.) A 4 GiB copy uses at most
// 2 x chunk of device memory and 2 x chunk of page-locked memory beside its arrays.
// - D2D: the kernel, from one side to the other; nothing else.
// - H2D, a source whose extent is at most twice its elements' bytes (no gaps, small gaps, a
//   transpose, broadcast axes): chunks in the source's order; each chunk's source extent is
//   copied to a device temporary as it is, and the kernel scatters it. The host never touches the
//   bytes: on an H100 a transposing copy from pinned memory ran at 0.4 GB/s when the host packed
//   it and the contiguous copy runs at 52 GB/s.
// - H2D, otherwise: chunks in the destination's order; the host packs each chunk into page-locked
//   staging, as the image of its destination extent when the destination has no gaps (then one
//   copy to the destination), else densely, copied to a device temporary that the kernel unpacks.
// - D2H, a destination without gaps: chunks in the destination's order; the kernel packs each
//   into a device temporary as the image of its destination extent, copied there in one piece.
// - D2H, a destination with gaps: each chunk's source extent (in the source's order, when at most
//   twice the elements' bytes) or the kernel's dense packing of it (in the destination's order)
//   is copied to page-locked staging, and the host places the elements. A DMA writes whole
//   ranges and the bytes between the destination's elements are never written, so only the host
//   can place them: this copy is complete when the call returns.
// - Page-locked host memory the host would otherwise have to touch (an H2D source of the second
//   kind, a D2H destination with gaps): when the runtime gives the memory a device address
//   (mapped memory; every page-locked allocation under unified addressing), the kernel reads or
//   writes the elements there itself, one launch and no temporaries, and the copy stays
//   asynchronous; the bytes between the elements are never touched. Else as above.
// - H2H: the host copies, once earlier work on the stream is done.
// Completion and the temporaries' lifetime: the host reads a source only after earlier work on
// the stream (which may write it) is done. A copy whose host side is page-locked (pinned, mapped
// or registered) returns once its work is enqueued (and the host has packed what it packs), like
// the vendor's copies of such memory: an H2D from a source of the first kind and a D2H into a
// destination without gaps make no synchronizing call at all. Its temporaries are retired by the
// events recorded after their last use, which the next copy that takes them waits for (on the
// device where only device work uses them). A copy whose host side is pageable is complete when
// the call returns, as the runtimes' pageable copies are. Temporaries are never freed per copy.
// During stream capture copy_strided never comes here (require_capturable).

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
                    CopyKind kind, NativeStream stream, std::size_t chunk) {
    {
      const std::lock_guard lock(scratch_mutex_);
      if (kernel_missing_.contains(device)) return false;
    }
    try {
      return copy_bounded_steps(device, dst, src, plan, kind, stream, chunk);
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

  using Temps = BoundedTemporaries<Api>;
  using Lease = typename Temps::Lease;
  using Slot = typename Temps::Slot;
  using Order = PlanChunks::Order;

  bool copy_bounded_steps(int device, std::byte* dst, const std::byte* src,
                          const layout::CopyPlan& plan, CopyKind kind, NativeStream stream,
                          std::size_t chunk) {
    switch (kind) {
      case CopyKind::DeviceToDevice:
        launch_strided_copy(kernel_args(plan, dst, src), stream);
        return true;
      case CopyKind::HostToHost:
        synchronize_before(stream);
        layout::copy_host_strided(plan, dst, src);
        return true;
      case CopyKind::HostToDevice:
      case CopyKind::DeviceToHost:
        break;
    }
    const bool to_device = kind == CopyKind::HostToDevice;
    // Element (0, ..., 0) lies in the host side's allocation, whatever the strides.
    const bool pinned = !pageable(to_device ? static_cast<const void*>(src) : dst);
    const bool host_touches = to_device ? !source_as_it_is(plan, dst, src, /*with_kernel=*/true)
                                        : !dense_extent(plan, /*dst_side=*/true).has_value();
    if (pinned && host_touches && copy_through_device_address(dst, src, plan, kind, stream)) {
      return true;
    }
    Lease lease(temps_, device, stream, chunk);
    const auto limit = static_cast<std::int64_t>(chunk);
    if (!(to_device ? copy_to_device(lease, dst, src, plan, stream, limit)
                    : copy_to_host(lease, dst, src, plan, stream, limit))) {
      lease.succeeded();  // nothing enqueued: the set goes back as it is
      return false;
    }
    // A pageable host side: complete on return, like the runtimes' pageable copies (and the
    // temporaries are retired now). A page-locked one: retired by their events.
    if (!pinned) lease.finish();
    lease.succeeded();
    return true;
  }

  /// Whether host memory is ordinary pageable memory (not page-locked, mapped or registered).
  static bool pageable(const void* host) {
    bool answer = false;
    check(Api::isPageable(host, &answer), "looking up host memory at {} for a strided copy",
          fmt::ptr(host));
    return answer;
  }

 public:
  /// Frees the idle temporaries.
  void release_scratch() noexcept { temps_.release(); }

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

  // ---- The bounded path's steps (see "The copies" above) ----
  // Each returns false, with nothing enqueued, when its temporaries cannot be had.

  static std::size_t size(const Extent& extent) { return static_cast<std::size_t>(extent.bytes()); }

  /// Whether the source's extent is at most twice the elements' bytes (and the kernel takes the
  /// plan's axes in the source's order): it is then moved as it is, chunk by chunk in the
  /// source's order.
  static bool source_as_it_is(const layout::CopyPlan& plan, std::byte* dst, const std::byte* src,
                              bool with_kernel) {
    if (side_extent(plan, /*dst_side=*/false).bytes() > 2 * plan.total_bytes()) return false;
    if (!with_kernel) return true;
    const layout::CopyPlan ordered = PlanChunks(plan, Order::Source, 1).whole();
    return kernel_args(ordered, dst, src).has_value();
  }

  /// The kernel between the device side and the page-locked host side's device address (see the
  /// comment above the class); false, with nothing enqueued, when the runtime gives that memory
  /// no device address.
  static bool copy_through_device_address(std::byte* dst, const std::byte* src,
                                          const layout::CopyPlan& plan, CopyKind kind,
                                          NativeStream stream) {
    const bool to_device = kind == CopyKind::HostToDevice;
    // Element (0, ..., 0) of the host side: every element lies in the same allocation, which the
    // runtime maps at one offset.
    const std::byte* const host = to_device ? src : dst;
    void* alias = nullptr;
    if (Api::hostGetDevicePointer(&alias, const_cast<std::byte*>(host), 0u).code != Api::kSuccess) {
      clear_last_error();  // not mapped: the staged ways
      return false;
    }
    auto* const mapped = static_cast<std::byte*>(alias);
    const std::optional<StridedCopyArgs> args =
        to_device ? kernel_args(plan, dst, mapped) : kernel_args(plan, mapped, src);
    if (!args) return false;
    launch_strided_copy(args, stream);
    return true;
  }

  /// The chunks of `plan` (in `order`) of a copy whose temporaries only device work touches: each
  /// gets a slot's device temporary, `enqueue(chunk, temporary)` enqueues its copy and launch, and
  /// the slot's event is recorded after them (the host waits for nothing). False, with nothing
  /// enqueued, when the temporaries cannot be had.
  template <class Enqueue>
  static bool for_each_device_chunk(Lease& lease, const layout::CopyPlan& plan, Order order,
                                    std::int64_t limit, Enqueue&& enqueue) {
    PlanChunks chunks(plan, order, limit);
    if (!lease.reserve(static_cast<std::size_t>(chunks.count()),
                       static_cast<std::size_t>(chunks.largest()), 0)) {
      return false;
    }
    for (std::size_t i = 0; std::optional<layout::CopyPlan> part = chunks.next(); ++i) {
      Slot& slot = lease.slot(i);
      lease.acquire_for_device(slot);
      lease.enqueued();
      enqueue(*part, slot.device);
      lease.record(slot);
    }
    return true;
  }

  /// Host to device.
  static bool copy_to_device(Lease& lease, std::byte* dst, const std::byte* src,
                             const layout::CopyPlan& plan, NativeStream stream,
                             std::int64_t limit) {
    if (source_as_it_is(plan, dst, src, /*with_kernel=*/true)) {
      return for_each_device_chunk(
          lease, plan, Order::Source, limit, [&](const layout::CopyPlan& part, std::byte* temp) {
            const Extent source = side_extent(part, /*dst_side=*/false);
            copy_1d(temp, src + source.begin, size(source), CopyKind::HostToDevice, stream);
            launch_strided_copy(kernel_args(part, dst, temp - source.begin), stream);
          });
    }
    const bool image = dense_extent(plan, /*dst_side=*/true).has_value();
    PlanChunks chunks(plan, Order::Destination, limit);
    const auto largest = static_cast<std::size_t>(chunks.largest());
    if (!lease.reserve(static_cast<std::size_t>(chunks.count()), image ? 0 : largest, largest)) {
      return false;
    }
    synchronize_before(stream);  // the host reads the source: earlier work may still write it
    for (std::size_t i = 0; std::optional<layout::CopyPlan> part = chunks.next(); ++i) {
      Slot& slot = lease.slot(i);
      lease.acquire_for_host(slot);
      if (image) {
        const Extent target = side_extent(*part, /*dst_side=*/true);
        layout::copy_host_strided(*part, slot.host - target.begin, src);
        lease.enqueued();
        copy_1d(dst + target.begin, slot.host, size(target), CopyKind::HostToDevice, stream);
      } else {
        layout::copy_host_strided(with_dense(*part, /*dense_dst=*/true), slot.host, src);
        lease.enqueued();
        copy_1d(slot.device, slot.host, static_cast<std::size_t>(part->total_bytes()),
                CopyKind::HostToDevice, stream);
        launch_strided_copy(kernel_args(with_dense(*part, /*dense_dst=*/false), dst, slot.device),
                            stream);
      }
      lease.record(slot);
    }
    return true;
  }

  /// Device to host.
  static bool copy_to_host(Lease& lease, std::byte* dst, const std::byte* src,
                           const layout::CopyPlan& plan, NativeStream stream, std::int64_t limit) {
    if (dense_extent(plan, /*dst_side=*/true)) {
      return for_each_device_chunk(
          lease, plan, Order::Destination, limit,
          [&](const layout::CopyPlan& part, std::byte* temp) {
            const Extent target = side_extent(part, /*dst_side=*/true);
            launch_strided_copy(kernel_args(part, temp - target.begin, src), stream);
            copy_1d(dst + target.begin, temp, size(target), CopyKind::DeviceToHost, stream);
          });
    }
    // The destination has gaps: the host places the elements from staging.
    const bool as_it_is = source_as_it_is(plan, dst, src, /*with_kernel=*/false);
    PlanChunks chunks(plan, as_it_is ? Order::Source : Order::Destination, limit);
    const auto largest = static_cast<std::size_t>(chunks.largest());
    if (!lease.reserve(static_cast<std::size_t>(chunks.count()), as_it_is ? 0 : largest, largest)) {
      return false;
    }
    // Two chunks in flight: chunk i is enqueued before chunk i - 1 is placed.
    std::optional<layout::CopyPlan> previous;
    for (std::size_t i = 0;; ++i) {
      std::optional<layout::CopyPlan> part = chunks.next();
      if (part) {
        Slot& slot = lease.slot(i);
        lease.acquire_for_host(slot);  // chunk i - 2, placed already, or an earlier copy's
        lease.enqueued();
        if (as_it_is) {
          const Extent source = side_extent(*part, /*dst_side=*/false);
          copy_1d(slot.host, src + source.begin, size(source), CopyKind::DeviceToHost, stream);
        } else {
          launch_strided_copy(kernel_args(with_dense(*part, /*dense_dst=*/true), slot.device, src),
                              stream);
          copy_1d(slot.host, slot.device, static_cast<std::size_t>(part->total_bytes()),
                  CopyKind::DeviceToHost, stream);
        }
        lease.record(slot);
      }
      if (previous) {
        Slot& slot = lease.slot(i - 1);
        Lease::wait(slot);
        if (as_it_is) {
          const Extent source = side_extent(*previous, /*dst_side=*/false);
          layout::copy_host_strided(*previous, dst, slot.host - source.begin);
        } else {
          layout::copy_host_strided(with_dense(*previous, /*dense_dst=*/false), dst, slot.host);
        }
      }
      if (!part) return true;
      previous = std::move(part);
    }
  }

  Temps temps_;                   // the bounded path's temporaries, per device
  std::mutex scratch_mutex_;      // guards kernel_missing_
  std::set<int> kernel_missing_;  // devices the library's kernel has no code for
};

}  // namespace devmem::gpu_runtime

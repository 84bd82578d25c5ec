// What libdevmem's strided-copy kernel is given (strided_copy_kernel.hpp): shared by the host code
// that builds it from a layout::CopyPlan (runtime_backend.hpp) and by the kernel sources that nvcc,
// hipcc or the host compiler (HIP-CPU) build, so it depends on nothing but <cstdint>.
#pragma once

#include <cstdint>

namespace devmem::gpu_runtime {

/// The most axes the kernel walks. Every axis it is given is longer than 1, so a copy needing more
/// has at least 2^32 units; such a copy keeps the vendor copy calls (see RuntimeBackend).
inline constexpr int kStridedCopyMaxRank = 32;

/// Copies `count` units of `unit` bytes: unit i, with (c_0, ..., c_{rank-1}) its row-major index
/// in `shape`, goes from src + sum(c_k * src_strides[k]) to dst + sum(c_k * dst_strides[k]).
/// Strides are in bytes, may be negative (src also 0), and like both addresses are multiples of
/// `unit`, so that every unit is one aligned load and store.
struct StridedCopyArgs {
  void* dst = nullptr;
  const void* src = nullptr;
  std::int64_t count = 0;
  std::int32_t rank = 0;
  std::int32_t unit = 1;  // 1, 2, 4, 8 or 16
  std::int64_t shape[kStridedCopyMaxRank] = {};
  std::int64_t src_strides[kStridedCopyMaxRank] = {};
  std::int64_t dst_strides[kStridedCopyMaxRank] = {};
};

/// Calls visit(source offset, destination offset), in bytes, for every unit of `a` in index order:
/// the copy the kernel makes, as a host loop, for the runtimes that copy on the host (the strict
/// fake, the tests' recording fake) and for checks of the kernel's arguments.
template <class Visit>
void for_each_unit_offset(const StridedCopyArgs& a, Visit&& visit) {
  for (std::int64_t i = 0; i < a.count; ++i) {
    std::int64_t rest = i;
    std::int64_t src_offset = 0;
    std::int64_t dst_offset = 0;
    for (int k = a.rank - 1; k >= 0; --k) {
      const std::int64_t c = rest % a.shape[k];
      rest /= a.shape[k];
      src_offset += c * a.src_strides[k];
      dst_offset += c * a.dst_strides[k];
    }
    visit(src_offset, dst_offset);
  }
}

// ---- The tiled path (review 2, N12) -----------------------------------------------------------
// A copy whose destination runs along one axis in unit steps while the source runs along another
// (a 2-D transpose, the (0, 2, 1) permutation of a batch of matrices, a full reversal of the
// axes) makes the gather kernel read with a stride: every unit of a warp's load is a separate
// 32-byte sector. The tiled kernel instead moves a square tile of those two axes through shared
// memory, reading rows along the source's unit-stride axis and writing rows along the
// destination's, so that both sides are coalesced; every other axis is a batch.

/// Units per side of a tile; a block of kTiledCopyTile x kTiledCopyRows threads moves one tile,
/// each thread kTiledCopyTile / kTiledCopyRows units of it.
inline constexpr int kTiledCopyTile = 32;
inline constexpr int kTiledCopyRows = 8;
/// Both tiled axes must be at least this long. With fewer units a tile's rows are shorter than a
/// 32-byte sector (4-byte units), most of a block idles, and the gather's strided reads along
/// such an axis fall into few sectors anyway.
inline constexpr std::int64_t kTiledCopyMinExtent = 8;

/// Whether `args` is a copy for the tiled kernel. Then `tiled` is the same copy with its axes
/// reordered: the others (the batch) first in their order, then the axis the source walks in
/// steps of one unit (index rank - 2), then the one the destination does (rank - 1). Decided from
/// the strides alone (either sign), so the launch needs no vendor call.
inline bool tiled_copy_args(const StridedCopyArgs& args, StridedCopyArgs& tiled) {
  const auto magnitude = [](std::int64_t x) { return x < 0 ? -x : x; };
  if (args.rank < 2 || args.rank > kStridedCopyMaxRank) return false;
  int src_axis = -1;  // the source's unit-stride axis
  int dst_axis = -1;  // the destination's
  for (int k = 0; k < args.rank; ++k) {
    if (src_axis < 0 && magnitude(args.src_strides[k]) == args.unit) src_axis = k;
    if (dst_axis < 0 && magnitude(args.dst_strides[k]) == args.unit) dst_axis = k;
  }
  // On one axis, or a source that does not step along the destination's axis at all (0: a
  // broadcast, one load for the warp): the gather reads coalesced already.
  if (src_axis < 0 || dst_axis < 0 || src_axis == dst_axis || args.src_strides[dst_axis] == 0) {
    return false;
  }
  if (args.shape[src_axis] < kTiledCopyMinExtent || args.shape[dst_axis] < kTiledCopyMinExtent) {
    return false;
  }
  tiled = args;
  int next = 0;
  for (int k = 0; k < args.rank; ++k) {
    if (k == src_axis || k == dst_axis) continue;
    tiled.shape[next] = args.shape[k];
    tiled.src_strides[next] = args.src_strides[k];
    tiled.dst_strides[next] = args.dst_strides[k];
    ++next;
  }
  const int tiled_axes[2] = {src_axis, dst_axis};
  for (const int k : tiled_axes) {
    tiled.shape[next] = args.shape[k];
    tiled.src_strides[next] = args.src_strides[k];
    tiled.dst_strides[next] = args.dst_strides[k];
    ++next;
  }
  return true;
}

}  // namespace devmem::gpu_runtime

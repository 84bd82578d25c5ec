// libdevmem's strided-copy kernel, one source for every GPU build: strided_copy_launch.cpp, which
// includes it, is compiled by nvcc (`cuda`), hipcc (`roc`) and the host compiler against HIP-CPU
// (the *-hipcpu presets). Include it after the vendor's runtime header.
// RuntimeBackend::copy_strided launches it (through Api::launchCopyStrided) instead of issuing one
// vendor copy per block of a plan whose blocks are many or whose rows are short. Two kernels: a
// gather (any layout) and a shared-memory tiled one for transposes (tiled_copy_args picks it).
#pragma once

#include "strided_copy_args.hpp"

#include <cstdint>

#if defined(__HIP_CPU_RT__)
// HIP-CPU runs kernels as host functions; its __global__/__device__ are GCC vector-clone
// attributes that do not fit them (see include/devmem/detail/kernel_gpu.hpp).
#define DEVMEM_STRIDED_COPY_KERNEL
#define DEVMEM_STRIDED_COPY_DEVICE
#else
#define DEVMEM_STRIDED_COPY_KERNEL __global__
#define DEVMEM_STRIDED_COPY_DEVICE __device__
#endif

namespace devmem::gpu_runtime::strided_copy {

/// A 16-byte unit, so that such copies are single vector loads and stores.
struct alignas(16) Unit16 {
  std::uint64_t lo;
  std::uint64_t hi;
};

/// The grid-stride loop over units. `Index` is 32-bit when every index (and index + step) fits,
/// since 64-bit division is several times slower on GPUs and the loop divides once per axis.
template <class Unit, class Index>
DEVMEM_STRIDED_COPY_DEVICE void copy_units(const StridedCopyArgs& a, Index first, Index step) {
  auto* const dst = static_cast<unsigned char*>(a.dst);
  const auto* const src = static_cast<const unsigned char*>(a.src);
  const auto count = static_cast<Index>(a.count);
  const int last = a.rank - 1;
  for (Index i = first; i < count; i += step) {
    Index rest = i;
    std::int64_t s = 0;
    std::int64_t d = 0;
    for (int k = last; k > 0; --k) {
      const auto n = static_cast<Index>(a.shape[k]);
      const Index outer = rest / n;
      const auto c = static_cast<std::int64_t>(rest - outer * n);
      s += c * a.src_strides[k];
      d += c * a.dst_strides[k];
      rest = outer;
    }
    s += static_cast<std::int64_t>(rest) * a.src_strides[0];
    d += static_cast<std::int64_t>(rest) * a.dst_strides[0];
    *reinterpret_cast<Unit*>(dst + d) = *reinterpret_cast<const Unit*>(src + s);
  }
}

template <class Index>
DEVMEM_STRIDED_COPY_DEVICE void copy_all(const StridedCopyArgs& a, Index first, Index step) {
  switch (a.unit) {
    case 16:
      copy_units<Unit16>(a, first, step);
      break;
    case 8:
      copy_units<std::uint64_t>(a, first, step);
      break;
    case 4:
      copy_units<std::uint32_t>(a, first, step);
      break;
    case 2:
      copy_units<std::uint16_t>(a, first, step);
      break;
    default:
      copy_units<std::uint8_t>(a, first, step);
      break;
  }
}

DEVMEM_STRIDED_COPY_KERNEL void kernel(StridedCopyArgs args) {
  const std::uint64_t first = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::uint64_t step = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  if (static_cast<std::uint64_t>(args.count) + step <= (std::uint64_t{1} << 32)) {
    copy_all(args, static_cast<std::uint32_t>(first), static_cast<std::uint32_t>(step));
  } else {
    copy_all(args, first, step);
  }
}

/// The byte offsets of batch `batch` of the tiled kernel: its coordinates along axes 0 .. rank - 3.
/// `Index` as in copy_units; once per batch and block, not per unit.
template <class Index>
DEVMEM_STRIDED_COPY_DEVICE void batch_offsets(const StridedCopyArgs& a, Index batch,
                                              std::int64_t& s, std::int64_t& d) {
  s = 0;
  d = 0;
  for (int k = a.rank - 3; k >= 0; --k) {
    const auto n = static_cast<Index>(a.shape[k]);
    const Index outer = batch / n;
    const auto c = static_cast<std::int64_t>(batch - outer * n);
    s += c * a.src_strides[k];
    d += c * a.dst_strides[k];
    batch = outer;
  }
}

/// The two tiled axes of a copy for the tiled kernel: A, the source's unit-stride axis, and B, the
/// destination's; lengths and byte strides.
struct TiledAxes {
  std::int64_t n_a = 0;
  std::int64_t n_b = 0;
  std::int64_t src_a = 0;
  std::int64_t src_b = 0;
  std::int64_t dst_a = 0;
  std::int64_t dst_b = 0;
};

/// A tile of the tiled kernel in shared memory, B's units along its rows. One padding column: the
/// write phase reads a column of the tile, whose units then fall into different shared-memory
/// banks (a 32-way conflict without it, for 4-byte units).
template <class Unit>
using SharedTile = Unit[kTiledCopyTile][kTiledCopyTile + 1];

/// Moves the tile whose first unit is (a0, b0) of the batch at `src` and `dst`, by the block's
/// threads (tx, ty): reads with consecutive threads on consecutive units of A (the source's rows,
/// coalesced), writes with consecutive threads on consecutive units of B (the destination's rows,
/// coalesced). Every thread of the block calls it, for the barriers.
template <class Unit>
DEVMEM_STRIDED_COPY_DEVICE void copy_tile(SharedTile<Unit>& tile, const unsigned char* src,
                                          unsigned char* dst, const TiledAxes& t, std::int64_t a0,
                                          std::int64_t b0, int tx, int ty) {
  constexpr int kTile = kTiledCopyTile;
  constexpr int kRows = kTiledCopyRows;
  if (a0 + tx < t.n_a) {
    const std::int64_t row = (a0 + tx) * t.src_a;
    for (int j = 0; j < kTile; j += kRows) {
      if (b0 + ty + j < t.n_b) {
        tile[ty + j][tx] = *reinterpret_cast<const Unit*>(src + row + (b0 + ty + j) * t.src_b);
      }
    }
  }
  __syncthreads();
  if (b0 + tx < t.n_b) {
    const std::int64_t column = (b0 + tx) * t.dst_b;
    for (int j = 0; j < kTile; j += kRows) {
      if (a0 + ty + j < t.n_a) {
        *reinterpret_cast<Unit*>(dst + column + (a0 + ty + j) * t.dst_a) = tile[tx][ty + j];
      }
    }
  }
  // The next tile overwrites this one only after every thread has written its units out.
  __syncthreads();
}

/// The tiled kernel (review 2, N12), for the copies tiled_copy_args picks and reorders: axis
/// rank - 2 (A) is the source's unit-stride axis, rank - 1 (B) the destination's, the others a
/// batch. A block of kTiledCopyTile x kTiledCopyRows threads moves tiles of
/// kTiledCopyTile x kTiledCopyTile units through shared memory (copy_tile). The grid's x walks
/// B's tiles, y A's and z the batches, each looping past the grid's limits. Expected on an H100
/// (not measured here): a 4- or 8-byte transpose near the 2+ TB/s of a plain device copy, where
/// the gather reaches 0.3-0.5 TB/s; 1- and 2-byte units stay below that (one unit per thread and
/// load).
template <class Unit>
DEVMEM_STRIDED_COPY_KERNEL void tiled_kernel(StridedCopyArgs args) {
  constexpr std::int64_t kTile = kTiledCopyTile;
  __shared__ SharedTile<Unit> tile;
  auto* const dst = static_cast<unsigned char*>(args.dst);
  const auto* const src = static_cast<const unsigned char*>(args.src);
  const int a = args.rank - 2;
  const int b = args.rank - 1;
  const TiledAxes t{args.shape[a],       args.shape[b],       args.src_strides[a],
                    args.src_strides[b], args.dst_strides[a], args.dst_strides[b]};
  const std::int64_t batches = args.count / (t.n_a * t.n_b);
  const auto tx = static_cast<int>(threadIdx.x);
  const auto ty = static_cast<int>(threadIdx.y);
  const bool narrow = static_cast<std::uint64_t>(batches) + gridDim.z <= (std::uint64_t{1} << 32);
  // Every loop bound below depends on the block only, so all of its threads reach every barrier.
  for (auto batch = static_cast<std::int64_t>(blockIdx.z); batch < batches; batch += gridDim.z) {
    std::int64_t s = 0;
    std::int64_t d = 0;
    if (narrow) {
      batch_offsets(args, static_cast<std::uint32_t>(batch), s, d);
    } else {
      batch_offsets(args, static_cast<std::uint64_t>(batch), s, d);
    }
    for (std::int64_t a0 = blockIdx.y * kTile; a0 < t.n_a; a0 += gridDim.y * kTile) {
      for (std::int64_t b0 = blockIdx.x * kTile; b0 < t.n_b; b0 += gridDim.x * kTile) {
        copy_tile<Unit>(tile, src + s, dst + d, t, a0, b0, tx, ty);
      }
    }
  }
}

/// The tiled kernel's grid for `tiled` (reordered by tiled_copy_args); its blocks are
/// kTiledCopyTile x kTiledCopyRows threads on every runtime. HIP-CPU, too, runs them as such
/// blocks of fibers (slowly: a fiber switch per thread at each barrier), so that the tests there
/// run the GPUs' code, barriers included.
struct TiledLaunchShape {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
};
inline TiledLaunchShape tiled_launch_shape(const StridedCopyArgs& tiled) {
#if defined(__HIP_CPU_RT__)
  // At most 2 x 2 x 16 blocks (still more than the cores), so that the tests' small copies run
  // the loops over further tiles and batches, which on a GPU only copies with over 2^21 units
  // along an axis or 65535 batches reach.
  constexpr std::int64_t kMostX = 2;
  constexpr std::int64_t kMostY = 2;
  constexpr std::int64_t kMostZ = 16;
#else
  // x within HIP's limit of 2^32 threads per grid dimension, y and z within CUDA's 65535.
  constexpr std::int64_t kMostX = std::int64_t{1} << 16;
  constexpr std::int64_t kMostY = 65535;
  constexpr std::int64_t kMostZ = 65535;
#endif
  const std::int64_t n_a = tiled.shape[tiled.rank - 2];
  const std::int64_t n_b = tiled.shape[tiled.rank - 1];
  const auto blocks = [](std::int64_t wanted, std::int64_t most) {
    return static_cast<unsigned>(wanted < most ? wanted : most);
  };
  constexpr std::int64_t kTile = kTiledCopyTile;
  return {blocks((n_b + kTile - 1) / kTile, kMostX), blocks((n_a + kTile - 1) / kTile, kMostY),
          blocks(tiled.count / (n_a * n_b), kMostZ)};
}

/// Blocks of threads for `count` units. A GPU gets about a thread per unit, up to a grid that
/// fills any current device many times over (the loop strides over the rest). HIP-CPU runs every
/// GPU thread as a fiber, so there a few single-thread blocks (one per core) each loop over a
/// share of the units.
struct LaunchShape {
  unsigned blocks = 1;
  unsigned threads = 1;
};
inline LaunchShape launch_shape(std::int64_t count) {
#if defined(__HIP_CPU_RT__)
  constexpr std::int64_t kThreads = 1;
  constexpr std::int64_t kMaxBlocks = 64;
  constexpr std::int64_t kUnitsPerBlock = 4096;
#else
  constexpr std::int64_t kThreads = 256;
  constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 16;
  constexpr std::int64_t kUnitsPerBlock = kThreads;
#endif
  const std::int64_t wanted = (count + kUnitsPerBlock - 1) / kUnitsPerBlock;
  const std::int64_t blocks = wanted < 1 ? 1 : (wanted > kMaxBlocks ? kMaxBlocks : wanted);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(kThreads)};
}

}  // namespace devmem::gpu_runtime::strided_copy

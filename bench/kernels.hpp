// Kernels of the kernel benchmarks (`devmem bench --kernels` and devmem_kernel_bench), one source
// for both, each written as a GPU programmer would write it for a GPU: one element per thread,
// block-shared memory and barriers where the algorithm needs them.
#pragma once

#include <devmem/kernel.hpp>

#include <cstdint>

namespace devmem::bench_kernels {

/// Threads per block of the one-dimensional kernels.
inline constexpr unsigned kBlock = 256;
/// Side of the square tiles (and of the square blocks) of matmul and transpose.
inline constexpr int kTile = 16;

/// y = a * x + y, one element per thread: the simulator's per-thread cost dominates.
DEVMEM_KERNEL inline void saxpy(ArrayView<const float, 1> x, ArrayView<float, 1> y, float a) {
  const std::int64_t i = global_id();
  if (i < y.shape(0)) y[i] = a * x[i] + y[i];
}

/// The sum of each block's kBlock elements into sums[block]: a tree reduction in shared memory,
/// log2(kBlock) barriers per thread.
DEVMEM_KERNEL inline void block_sum(ArrayView<const float, 1> x, ArrayView<float, 1> sums) {
  DEVMEM_SHARED_ARRAY(partial, float, kBlock);
  const unsigned t = thread_idx().x;
  const std::int64_t i = global_id();
  partial[t] = i < x.shape(0) ? x[i] : 0.0f;
  syncthreads();
  for (unsigned stride = kBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    syncthreads();
  }
  if (t == 0) sums[block_idx().x] = partial[0];
}

/// C = A x B with kTile x kTile tiles in shared memory (Numba's example, as examples/matmul).
DEVMEM_KERNEL inline void tiled_matmul(ArrayView<const float, 2> a, ArrayView<const float, 2> b,
                                       ArrayView<float, 2> c) {
  DEVMEM_SHARED_ARRAY(tile_a, float, kTile, kTile);
  DEVMEM_SHARED_ARRAY(tile_b, float, kTile, kTile);
  const unsigned tx = thread_idx().x;
  const unsigned ty = thread_idx().y;
  const std::int64_t col = global_id(0);
  const std::int64_t row = global_id(1);
  const std::int64_t inner = a.shape(1);
  float acc = 0.0f;
  for (std::int64_t k0 = 0; k0 < inner; k0 += kTile) {
    tile_a(ty, tx) = (row < a.shape(0) && k0 + tx < inner) ? a(row, k0 + tx) : 0.0f;
    tile_b(ty, tx) = (k0 + ty < inner && col < b.shape(1)) ? b(k0 + ty, col) : 0.0f;
    syncthreads();
    for (int k = 0; k < kTile; ++k) acc += tile_a(ty, k) * tile_b(k, tx);
    syncthreads();  // before the next iteration overwrites the tiles
  }
  if (row < c.shape(0) && col < c.shape(1)) c(row, col) = acc;
}

/// out = in transposed, through a shared tile so that both the reads and the writes of a warp
/// are contiguous on a GPU (the extra column keeps the tile's columns in different banks).
DEVMEM_KERNEL inline void transpose(ArrayView<const float, 2> in, ArrayView<float, 2> out) {
  DEVMEM_SHARED_ARRAY(tile, float, kTile, kTile + 1);
  const unsigned tx = thread_idx().x;
  const unsigned ty = thread_idx().y;
  const std::int64_t x0 = std::int64_t{block_idx().x} * kTile;
  const std::int64_t y0 = std::int64_t{block_idx().y} * kTile;
  if (y0 + ty < in.shape(0) && x0 + tx < in.shape(1)) tile(ty, tx) = in(y0 + ty, x0 + tx);
  syncthreads();
  if (x0 + ty < out.shape(0) && y0 + tx < out.shape(1)) out(x0 + ty, y0 + tx) = tile(tx, ty);
}

}  // namespace devmem::bench_kernels

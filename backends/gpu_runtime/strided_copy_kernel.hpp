// libdevmem's strided-copy kernel, one source for every GPU build: strided_copy_launch.cpp, which
// includes it, is compiled by nvcc (`cuda`), hipcc (`roc`) and the host compiler against HIP-CPU
// (the *-hipcpu presets). Include it after the vendor's runtime header.
// RuntimeBackend::copy_strided launches it (through Api::launchCopyStrided) instead of issuing one
// vendor copy per block of a plan whose blocks are many or whose rows are short.
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

// <cuda_runtime.h> for the cuda-hipcpu preset: the runtime API binding (cuda_runtime_api.h beside
// this file) plus the kernel-side names of the CUDA kernel layer that HIP-CPU spells differently.
// Not used by any production build.
#pragma once

#include <cuda_runtime_api.h>
#include <hip/hip_runtime.h>

/// HIP-CPU has no warp-level barrier; the block barrier orders at least as much (every thread of
/// the block, hence of the warp, arrives), as long as the whole block reaches it.
// NOLINTNEXTLINE(bugprone-reserved-identifier): CUDA's own name, which the kernel layer calls
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) noexcept {
  __syncthreads();
}

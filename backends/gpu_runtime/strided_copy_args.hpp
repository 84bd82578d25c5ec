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

}  // namespace devmem::gpu_runtime

// <devmem/kernel.hpp> under hipcc: the HIP runtime's names for the GPU kernel layer
// (kernel_gpu.hpp), and the wavefront barrier.
// Included by kernel.hpp only; the HIP headers reach only translation units that hipcc compiles.
#pragma once

#include <hip/hip_runtime.h>

#include <cstddef>
#include <string_view>

namespace devmem::detail {

struct KernelRuntime {
  using Error = hipError_t;
  using Stream = hipStream_t;
  static constexpr std::string_view kBackend = "roc";
  static constexpr Error kSuccess = hipSuccess;
  static constexpr const char* kLaunchCall = "hipLaunchKernel";
  static constexpr const char* kFuncAttributeCall = "hipFuncSetAttribute";
  static constexpr const char* kToSymbolCall = "hipMemcpyToSymbol";

  static Error last_error() { return hipGetLastError(); }
  static const char* error_name(Error status) { return hipGetErrorName(status); }
  static const char* error_string(Error status) { return hipGetErrorString(status); }
  static Error opt_in_dynamic_shared(const void* kernel, std::size_t bytes) {
    return hipFuncSetAttribute(kernel, hipFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes));
  }
  static Error copy_to_symbol(const void* symbol, const void* values, std::size_t bytes) {
    return hipMemcpyToSymbol(symbol, values, bytes);
  }
};

#if defined(__HIP_CPU_RT__)
/// HIP-CPU has no wavefront barrier: the block barrier (every thread of the block, hence of the
/// wavefront, arrives; wave_barrier's contract is that the whole wavefront calls it).
inline void wave_sync() {
  __syncthreads();
}
#else
__device__ inline void wave_sync() {
  __builtin_amdgcn_wave_barrier();
}
#endif

}  // namespace devmem::detail

#include <devmem/detail/kernel_gpu.hpp>

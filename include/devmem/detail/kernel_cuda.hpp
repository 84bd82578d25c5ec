// <devmem/kernel.hpp> under nvcc: the CUDA runtime's names for the GPU kernel layer
// (kernel_gpu.hpp), and __syncwarp as the warp barrier.
// Included by kernel.hpp only; the CUDA headers reach only translation units that nvcc compiles.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string_view>

namespace devmem::detail {

struct KernelRuntime {
  using Error = cudaError_t;
  using Stream = cudaStream_t;
  static constexpr std::string_view kBackend = "cuda";
  static constexpr Error kSuccess = cudaSuccess;
  static constexpr const char* kLaunchCall = "cudaLaunchKernel";
  static constexpr const char* kFuncAttributeCall = "cudaFuncSetAttribute";
  static constexpr const char* kToSymbolCall = "cudaMemcpyToSymbol";

  static Error last_error() { return cudaGetLastError(); }
  static const char* error_name(Error status) { return cudaGetErrorName(status); }
  static const char* error_string(Error status) { return cudaGetErrorString(status); }
  static Error opt_in_dynamic_shared(const void* kernel, std::size_t bytes) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(bytes));
  }
  static Error copy_to_symbol(const void* symbol, const void* values, std::size_t bytes) {
    return cudaMemcpyToSymbol(symbol, values, bytes);
  }
};

#if defined(__HIP_CPU_RT__)
inline void wave_sync() {
  __syncwarp();  // the cuda-hipcpu binding's: a block barrier
}
#else
__device__ inline void wave_sync() {
  __syncwarp();
}
#endif

}  // namespace devmem::detail

#include <devmem/detail/kernel_gpu.hpp>

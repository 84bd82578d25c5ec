// <devmem/kernel.hpp> under nvcc: the CUDA runtime's names for the GPU kernel layer
// (kernel_gpu.hpp), and __syncwarp as the warp barrier.
// Included by kernel.hpp only; the CUDA headers reach only translation units that nvcc compiles.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace devmem::detail {

struct KernelRuntime {
  using Error = cudaError_t;
  using Stream = cudaStream_t;
  static constexpr std::string_view kBackend = "cuda";
  static constexpr Error kSuccess = cudaSuccess;
  static constexpr const char* kLaunchCall = "cudaLaunchKernel";
  static constexpr const char* kFuncAttributeCall = "cudaFuncSetAttribute";
  static constexpr const char* kFuncGetAttributesCall = "cudaFuncGetAttributes";
  static constexpr const char* kToSymbolCall = "cudaMemcpyToSymbol";
  static constexpr const char* kGetDeviceCall = "cudaGetDevice";
  static constexpr const char* kSetDeviceCall = "cudaSetDevice";
  /// Not checked before a launch: the `cuda` preset also embeds PTX, which the driver compiles for
  /// newer GPUs, and an older GPU gets the runtime's own clear cudaErrorNoKernelImageForDevice.
  static constexpr std::string_view kArchitectures = {};

  static Error last_error() { return cudaGetLastError(); }
  static Error get_device(int* device) { return cudaGetDevice(device); }
  static Error set_device(int device) { return cudaSetDevice(device); }
  /// devmem's default stream (a null handle) is the legacy default stream, as in the rest of
  /// devmem: a 0 handle would be the per-thread stream in code compiled with
  /// --default-stream per-thread.
  static Stream stream(void* handle) {
    return handle == nullptr ? cudaStreamLegacy : static_cast<Stream>(handle);
  }
#if !defined(__HIP_CPU_RT__)
  static Error launch_kernel(const void* kernel, dim3 grid, dim3 block, void** parameters,
                             std::size_t shared_bytes, Stream stream) {
    return cudaLaunchKernel(kernel, grid, block, parameters, shared_bytes, stream);
  }
#endif
  static const char* error_name(Error status) { return cudaGetErrorName(status); }
  static const char* error_string(Error status) { return cudaGetErrorString(status); }
  /// The kernel's static shared memory (its __shared__ variables), in bytes.
  static Error static_shared_bytes(const void* kernel, std::size_t* bytes) {
    cudaFuncAttributes attributes{};
    const Error status = cudaFuncGetAttributes(&attributes, kernel);
    *bytes = status == kSuccess ? attributes.sharedSizeBytes : 0;
    return status;
  }
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
inline void warp_sync(std::uint64_t mask) {
  __syncwarp(static_cast<unsigned>(mask));  // a block barrier there too
}
#else
__device__ inline void wave_sync() {
  __syncwarp();
}
/// __syncwarp(mask): a warp has 32 lanes, so bits 32 to 63 are dropped.
__device__ inline void warp_sync(std::uint64_t mask) {
  __syncwarp(static_cast<unsigned>(mask));
}
#endif

}  // namespace devmem::detail

#include <devmem/detail/kernel_gpu.hpp>

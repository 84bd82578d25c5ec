// <devmem/kernel.hpp> under hipcc: the HIP runtime's names for the GPU kernel layer
// (kernel_gpu.hpp), and the wavefront barrier.
// Included by kernel.hpp only; the HIP headers reach only translation units that hipcc compiles.
#pragma once

#include <hip/hip_runtime.h>

// devmem's default stream is the legacy blocking stream (a null handle in libdevmem). Under
// -fgpu-default-stream=per-thread a null handle in this translation unit means the thread's own
// stream instead, which does not wait for devmem's default-stream work: the launch would race it.
// HIP names the legacy stream hipStreamLegacy from ROCm 6; an older HIP has no name for it.
#if defined(HIP_API_PER_THREAD_DEFAULT_STREAM) && !defined(hipStreamLegacy) && \
    !defined(__HIP_CPU_RT__)
#error \
    "devmem: this HIP has no hipStreamLegacy, so under -fgpu-default-stream=per-thread a kernel launched on devmem's default stream would run on the per-thread stream and race devmem's work; compile kernel sources with the legacy default stream, or use ROCm 6 or newer"
#endif

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace devmem::detail {

struct KernelRuntime {
  using Error = hipError_t;
  using Stream = hipStream_t;
  static constexpr std::string_view kBackend = "roc";
  static constexpr Error kSuccess = hipSuccess;
  static constexpr const char* kLaunchCall = "hipLaunchKernel";
  static constexpr const char* kFuncAttributeCall = "hipFuncSetAttribute";
  static constexpr const char* kFuncGetAttributesCall = "hipFuncGetAttributes";
  static constexpr const char* kToSymbolCall = "hipMemcpyToSymbol";
  static constexpr const char* kGetDeviceCall = "hipGetDevice";
  static constexpr const char* kSetDeviceCall = "hipSetDevice";
#if defined(DEVMEM_HIP_ARCHITECTURES)
  /// The --offload-arch list this source was compiled with (devmem_target_hip_sources defines
  /// it): HIP has no code object for other GPUs, and no PTX-like fallback.
  static constexpr std::string_view kArchitectures = DEVMEM_HIP_ARCHITECTURES;
#else
  static constexpr std::string_view kArchitectures = {};
#endif

  static Error last_error() { return hipGetLastError(); }
  static Error get_device(int* device) { return hipGetDevice(device); }
  static Error set_device(int device) { return hipSetDevice(device); }
  /// devmem's default stream (a null handle) is the legacy blocking stream: hipStreamLegacy where
  /// HIP names it (then right under -fgpu-default-stream=per-thread too), else HIP's null stream
  /// (see the #error above).
  static Stream stream(void* handle) {
#if defined(hipStreamLegacy)
    if (handle == nullptr) return hipStreamLegacy;
#endif
    return static_cast<Stream>(handle);
  }
#if !defined(__HIP_CPU_RT__)
  static Error launch_kernel(const void* kernel, dim3 grid, dim3 block, void** parameters,
                             std::size_t shared_bytes, Stream stream) {
    return hipLaunchKernel(kernel, grid, block, parameters, shared_bytes, stream);
  }
#endif
  static const char* error_name(Error status) { return hipGetErrorName(status); }
  static const char* error_string(Error status) { return hipGetErrorString(status); }
  /// The kernel's static shared memory (its __shared__ variables), in bytes.
  static Error static_shared_bytes(const void* kernel, std::size_t* bytes) {
    hipFuncAttributes attributes{};
    const Error status = hipFuncGetAttributes(&attributes, kernel);
    *bytes = status == kSuccess ? attributes.sharedSizeBytes : 0;
    return status;
  }
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
inline void warp_sync(std::uint64_t /*mask*/) {
  __syncthreads();
}
#else
/// __builtin_amdgcn_wave_barrier only keeps the compiler from moving code across it: it orders no
/// memory. Wavefront-scope release and acquire fences around it make the lanes' earlier writes
/// (shared and global) visible to the lanes' later reads, what __syncwarp guarantees on CUDA and
/// what HIP's own __syncwarp does.
__device__ inline void wave_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
/// syncwarp(mask): the active lanes of a wavefront run in lockstep, so the lanes a mask names are
/// synchronised by the wavefront barrier (HIP's own __syncwarp checks the mask only in debug
/// builds and then does the same).
__device__ inline void warp_sync(std::uint64_t /*mask*/) {
  wave_sync();
}
#endif

}  // namespace devmem::detail

#include <devmem/detail/kernel_gpu.hpp>

// <devmem/kernel.hpp> under nvcc or hipcc (or the host compiler against HIP-CPU): the vendor
// runtime's names for the GPU kernel layer (kernel_gpu.hpp), and the warp / wavefront barrier.
// CUDA's and HIP's kernel calls are the same calls under the prefixes `cuda` and `hip`, so one
// KernelRuntime names each once through DEVMEM_VENDOR(name); what differs between the vendors
// (HIP's legacy-stream check, the default stream's name, HIP's architecture list, the barriers) is
// written out per vendor. Included by kernel.hpp only, with DEVMEM_KERNEL_VENDOR_HIP defined for
// HIP; the vendor's headers reach only the translation units compiled for a GPU (or HIP-CPU).
#pragma once

#if defined(DEVMEM_KERNEL_VENDOR_HIP)
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

#define DEVMEM_VENDOR(name) hip##name
#define DEVMEM_VENDOR_PREFIX "hip"
#define DEVMEM_VENDOR_BACKEND "roc"
#else
#include <cuda_runtime.h>

#define DEVMEM_VENDOR(name) cuda##name
#define DEVMEM_VENDOR_PREFIX "cuda"
#define DEVMEM_VENDOR_BACKEND "cuda"
#endif
// The vendor's name of a call as text ("cudaLaunchKernel"), for error messages: the argument is
// pasted as written, never macro-expanded (HIP-CPU binds some CUDA names to HIP ones).
#define DEVMEM_VENDOR_CALL_NAME(name) DEVMEM_VENDOR_PREFIX #name

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace devmem::detail {

struct KernelRuntime {
  using Error = DEVMEM_VENDOR(Error_t);
  using Stream = DEVMEM_VENDOR(Stream_t);
  static constexpr std::string_view kBackend = DEVMEM_VENDOR_BACKEND;
  static constexpr Error kSuccess = DEVMEM_VENDOR(Success);
  static constexpr const char* kLaunchCall = DEVMEM_VENDOR_CALL_NAME(LaunchKernel);
  static constexpr const char* kFuncAttributeCall = DEVMEM_VENDOR_CALL_NAME(FuncSetAttribute);
  static constexpr const char* kFuncGetAttributesCall = DEVMEM_VENDOR_CALL_NAME(FuncGetAttributes);
  static constexpr const char* kToSymbolCall = DEVMEM_VENDOR_CALL_NAME(MemcpyToSymbol);
  static constexpr const char* kGetDeviceCall = DEVMEM_VENDOR_CALL_NAME(GetDevice);
  static constexpr const char* kSetDeviceCall = DEVMEM_VENDOR_CALL_NAME(SetDevice);
#if defined(DEVMEM_KERNEL_VENDOR_HIP) && defined(DEVMEM_HIP_ARCHITECTURES)
  /// The --offload-arch list this source was compiled with (devmem_target_hip_sources defines
  /// it): HIP has no code object for other GPUs, and no PTX-like fallback.
  static constexpr std::string_view kArchitectures = DEVMEM_HIP_ARCHITECTURES;
#else
  /// Not checked before a launch. CUDA: the `cuda` preset also embeds PTX, which the driver
  /// compiles for newer GPUs, and an older GPU gets the runtime's own clear
  /// cudaErrorNoKernelImageForDevice. HIP without the list: HIP-CPU, or a consumer's own flags.
  static constexpr std::string_view kArchitectures = {};
#endif

  static Error last_error() { return DEVMEM_VENDOR(GetLastError)(); }
  static Error get_device(int* device) { return DEVMEM_VENDOR(GetDevice)(device); }
  static Error set_device(int device) { return DEVMEM_VENDOR(SetDevice)(device); }
  /// devmem's default stream (a null handle) is the legacy default stream, as in the rest of
  /// devmem: a null handle would be the per-thread stream in code compiled with CUDA's
  /// --default-stream per-thread or HIP's -fgpu-default-stream=per-thread. HIP names the legacy
  /// stream only from ROCm 6 (before, its null stream; see the #error above).
  static Stream stream(void* handle) {
#if !defined(DEVMEM_KERNEL_VENDOR_HIP)
    if (handle == nullptr) return cudaStreamLegacy;
#elif defined(hipStreamLegacy)
    if (handle == nullptr) return hipStreamLegacy;
#endif
    return static_cast<Stream>(handle);
  }
#if !defined(__HIP_CPU_RT__)
  static Error launch_kernel(const void* kernel, dim3 grid, dim3 block, void** parameters,
                             std::size_t shared_bytes, Stream stream) {
    return DEVMEM_VENDOR(LaunchKernel)(kernel, grid, block, parameters, shared_bytes, stream);
  }
#endif
  static const char* error_name(Error status) { return DEVMEM_VENDOR(GetErrorName)(status); }
  static const char* error_string(Error status) { return DEVMEM_VENDOR(GetErrorString)(status); }
  /// The kernel's static shared memory (its __shared__ variables), in bytes.
  static Error static_shared_bytes(const void* kernel, std::size_t* bytes) {
    DEVMEM_VENDOR(FuncAttributes) attributes{};
    const Error status = DEVMEM_VENDOR(FuncGetAttributes)(&attributes, kernel);
    *bytes = status == kSuccess ? attributes.sharedSizeBytes : 0;
    return status;
  }
  static Error opt_in_dynamic_shared(const void* kernel, std::size_t bytes) {
    return DEVMEM_VENDOR(FuncSetAttribute)(
        kernel, DEVMEM_VENDOR(FuncAttributeMaxDynamicSharedMemorySize), static_cast<int>(bytes));
  }
  static Error copy_to_symbol(const void* symbol, const void* values, std::size_t bytes) {
    return DEVMEM_VENDOR(MemcpyToSymbol)(symbol, values, bytes);
  }
};

#if defined(__HIP_CPU_RT__)
// HIP-CPU has no warp or wavefront barrier: the block barrier (every thread of the block, hence of
// the warp, arrives; the barriers' contract is that the whole warp calls them). The cuda-hipcpu
// binding's __syncwarp is that block barrier.
inline void wave_sync() {
  __syncthreads();
}
inline void warp_sync(std::uint64_t /*mask*/) {
  __syncthreads();
}
#elif defined(DEVMEM_KERNEL_VENDOR_HIP)
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

#undef DEVMEM_VENDOR_CALL_NAME
#undef DEVMEM_VENDOR_BACKEND
#undef DEVMEM_VENDOR_PREFIX
#undef DEVMEM_VENDOR

#include <devmem/detail/kernel_gpu.hpp>

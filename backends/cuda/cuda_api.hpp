// The CUDA runtime, named for gpu_runtime::RuntimeBackend: a table of vendor calls that satisfies
// gpu_runtime::VendorApi (backends/gpu_runtime/vendor_api.hpp says what a table provides; checked
// below the struct). Only names and constants: no logic lives here, so nothing is duplicated
// between CUDA and ROC. Included only by backends/cuda/.
#pragma once

#include "backends/gpu_runtime/strided_copy_args.hpp"
#include "backends/gpu_runtime/vendor_api.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace devmem::cuda {

/// One launch of libdevmem's strided-copy kernel (backends/gpu_runtime/strided_copy_launch.cpp),
/// compiled by the vendor's compiler into libdevmem.
cudaError_t launch_strided_copy(const gpu_runtime::StridedCopyArgs& args, cudaStream_t stream);
/// The architectures that kernel was compiled for, comma-separated; empty when not recorded.
const char* strided_copy_architectures() noexcept;

struct CudaApi {
  using Error = cudaError_t;
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  using DeviceProp = cudaDeviceProp;
  using MemcpyKind = cudaMemcpyKind;
  using S = gpu_runtime::Status<cudaError_t>;

  static constexpr std::string_view kBackend = "cuda";

  static constexpr Error kSuccess = cudaSuccess;
  static constexpr Error kErrorNotReady = cudaErrorNotReady;
  static constexpr Error kErrorMemoryAllocation = cudaErrorMemoryAllocation;
  static constexpr Error kErrorInvalidPitchValue = cudaErrorInvalidPitchValue;
  static constexpr Error kErrorRuntimeUnloading = cudaErrorCudartUnloading;
  static constexpr Error kErrorPeerAccessAlreadyEnabled = cudaErrorPeerAccessAlreadyEnabled;
  static constexpr Error kErrorPeerAccessNotEnabled = cudaErrorPeerAccessNotEnabled;
  static constexpr Error kErrorStreamCaptureImplicit = cudaErrorStreamCaptureImplicit;

  static constexpr MemcpyKind kHostToHost = cudaMemcpyHostToHost;
  static constexpr MemcpyKind kHostToDevice = cudaMemcpyHostToDevice;
  static constexpr MemcpyKind kDeviceToHost = cudaMemcpyDeviceToHost;
  static constexpr MemcpyKind kDeviceToDevice = cudaMemcpyDeviceToDevice;
  static constexpr MemcpyKind kMemcpyDefault = cudaMemcpyDefault;

  static constexpr unsigned kHostAllocMapped = cudaHostAllocMapped;
  static constexpr unsigned kHostAllocPortable = cudaHostAllocPortable;
  static constexpr unsigned kHostAllocWriteCombined = cudaHostAllocWriteCombined;
  // CUDA has no coherence choice: page-locked memory is always coherent (uncached by the GPU).
  static constexpr unsigned kHostAllocCoherent = 0;
  static constexpr unsigned kHostAllocNonCoherent = 0;
  static constexpr unsigned kHostRegisterMapped = cudaHostRegisterMapped;
  static constexpr unsigned kHostRegisterPortable = cudaHostRegisterPortable;
  static constexpr unsigned kHostRegisterReadOnly = cudaHostRegisterReadOnly;
  static constexpr unsigned kEventDisableTiming = cudaEventDisableTiming;
  static constexpr unsigned kEventBlockingSync = cudaEventBlockingSync;

  // cudaMemcpy2D/3D reject pitches above cudaDevAttrMaxPitch, which is INT_MAX on every current
  // GPU; larger ones are copied row by row (and a smaller device limit falls back the same way
  // through cudaErrorInvalidPitchValue).
  static constexpr std::size_t kMaxPitch =
      static_cast<std::size_t>(std::numeric_limits<int>::max());

  // ---- Devices ----
  static S getDeviceCount(int* count) { return {cudaGetDeviceCount(count), "cudaGetDeviceCount"}; }
  static S getDevice(int* device) { return {cudaGetDevice(device), "cudaGetDevice"}; }
  static S setDevice(int device) { return {cudaSetDevice(device), "cudaSetDevice"}; }
  static S getDeviceProperties(DeviceProp* prop, int device) {
    return {cudaGetDeviceProperties(prop, device), "cudaGetDeviceProperties"};
  }
  static S memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
    return {cudaMemGetInfo(free_bytes, total_bytes), "cudaMemGetInfo"};
  }
  /// "sm_90" for compute capability 9.0.
  static std::string architecture(const DeviceProp& prop) {
    return "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  }
  static bool unifiedAddressing(const DeviceProp& prop) { return prop.unifiedAddressing != 0; }
  /// What a kernel may use after cudaFuncSetAttribute(MaxDynamicSharedMemorySize).
  static std::size_t sharedMemPerBlockOptin(const DeviceProp& prop) {
    return prop.sharedMemPerBlockOptin;
  }

  // ---- Memory ----
  static S malloc(void** ptr, std::size_t bytes) { return {cudaMalloc(ptr, bytes), "cudaMalloc"}; }
  static S free(void* ptr) { return {cudaFree(ptr), "cudaFree"}; }
  static S mallocAsync(void** ptr, std::size_t bytes, Stream stream) {
    return {cudaMallocAsync(ptr, bytes, stream), "cudaMallocAsync"};
  }
  static S freeAsync(void* ptr, Stream stream) {
    return {cudaFreeAsync(ptr, stream), "cudaFreeAsync"};
  }
  static S setPoolReleaseThreshold(int device, std::uint64_t bytes) {
#if defined(__HIP_CPU_RT__)
    // HIP-CPU's stream-ordered allocations are ordinary ones: there is no pool to configure.
    static_cast<void>(device);
    static_cast<void>(bytes);
    return {cudaSuccess, "cudaMemPoolSetAttribute"};
#else
    cudaMemPool_t pool = nullptr;
    if (const cudaError_t status = cudaDeviceGetDefaultMemPool(&pool, device);
        status != cudaSuccess) {
      return {status, "cudaDeviceGetDefaultMemPool"};
    }
    std::uint64_t value = bytes;
    return {cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &value),
            "cudaMemPoolSetAttribute"};
#endif
  }
  static S trimPoolTo(int device, std::size_t bytes) {
#if defined(__HIP_CPU_RT__)
    static_cast<void>(device);
    static_cast<void>(bytes);
    return {cudaSuccess, "cudaMemPoolTrimTo"};
#else
    cudaMemPool_t pool = nullptr;
    if (const cudaError_t status = cudaDeviceGetDefaultMemPool(&pool, device);
        status != cudaSuccess) {
      return {status, "cudaDeviceGetDefaultMemPool"};
    }
    return {cudaMemPoolTrimTo(pool, bytes), "cudaMemPoolTrimTo"};
#endif
  }
  static S memoryPoolsSupported(int device, bool* supported) {
    int value = 0;
    const cudaError_t status =
        cudaDeviceGetAttribute(&value, cudaDevAttrMemoryPoolsSupported, device);
    *supported = status == cudaSuccess && value != 0;
    return {status, "cudaDeviceGetAttribute"};
  }
  static S hostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
    return {cudaHostAlloc(ptr, bytes, flags), "cudaHostAlloc"};
  }
  static S hostFree(void* ptr) { return {cudaFreeHost(ptr), "cudaFreeHost"}; }
  static S hostRegister(void* ptr, std::size_t bytes, unsigned flags) {
    return {cudaHostRegister(ptr, bytes, flags), "cudaHostRegister"};
  }
  static S hostUnregister(void* ptr) { return {cudaHostUnregister(ptr), "cudaHostUnregister"}; }
  static S hostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
    return {cudaHostGetDevicePointer(device_ptr, host_ptr, flags), "cudaHostGetDevicePointer"};
  }
  /// Ordinary pageable host memory: CUDA 11+ reports it as cudaMemoryTypeUnregistered, without
  /// an error (page-locked memory is cudaMemoryTypeHost, device and managed memory have theirs).
  static S isPageable(const void* ptr, bool* pageable) {
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
    *pageable = status == cudaSuccess && attributes.type == cudaMemoryTypeUnregistered;
    return {status, "cudaPointerGetAttributes"};
  }

  /// The device owning device or managed memory at `ptr`; -1 for host memory and for memory CUDA
  /// does not know (CUDA 11+ answers success and cudaMemoryTypeUnregistered for it).
  static S pointerDevice(const void* ptr, int* device) {
    cudaPointerAttributes attributes{};
    const cudaError_t status = cudaPointerGetAttributes(&attributes, ptr);
    const bool on_device =
        attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    *device = status == cudaSuccess && on_device ? attributes.device : -1;
    return {status, "cudaPointerGetAttributes"};
  }

  // ---- Inter-process sharing (docs/scaling-out.md#ipc) ----
#if !defined(__HIP_CPU_RT__)
  static constexpr bool kHasIpc = true;
  using IpcMemHandle = cudaIpcMemHandle_t;
  static S ipcGetMemHandle(IpcMemHandle* handle, void* base) {
    return {cudaIpcGetMemHandle(handle, base), "cudaIpcGetMemHandle"};
  }
  static S ipcOpenMemHandle(void** base, IpcMemHandle handle) {
    return {cudaIpcOpenMemHandle(base, handle, cudaIpcMemLazyEnablePeerAccess),
            "cudaIpcOpenMemHandle"};
  }
  static S ipcCloseMemHandle(void* base) {
    return {cudaIpcCloseMemHandle(base), "cudaIpcCloseMemHandle"};
  }
  /// The driver's cuMemGetAddressRange (the runtime has no equivalent), found through
  /// cudaGetDriverEntryPointByVersion so that libcuda need not be linked. Its CUresult is not a
  /// cudaError_t: a failure (the pointer is not in memory CUDA allocated) is reported as
  /// cudaErrorInvalidValue.
  static S memGetAddressRange(void** base, std::size_t* bytes, const void* ptr) {
    using Fn = int (*)(unsigned long long*, std::size_t*, unsigned long long);
    struct Entry {
      Fn fn = nullptr;
      cudaError_t status = cudaSuccess;
    };
    static const Entry entry = [] {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      const cudaError_t status = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn,
                                                                  12000, cudaEnableDefault, &found);
      if (status != cudaSuccess) return Entry{nullptr, status};
      if (found != cudaDriverEntryPointSuccess) return Entry{nullptr, cudaErrorNotSupported};
      return Entry{reinterpret_cast<Fn>(fn), cudaSuccess};
    }();
    if (entry.fn == nullptr) return {entry.status, "cudaGetDriverEntryPointByVersion"};
    // A driver call needs a context bound to this thread, which cudaGetDevice/cudaSetDevice alone
    // do not bind on a thread that has made no runtime call yet (review 2, N10): cudaFree(nullptr)
    // makes the runtime bind the current device's primary context first.
    if (const cudaError_t bound = cudaFree(nullptr); bound != cudaSuccess) {
      return {bound, "cudaFree(nullptr) before cuMemGetAddressRange"};
    }
    unsigned long long first = 0;
    const int result = entry.fn(&first, bytes, reinterpret_cast<std::uintptr_t>(ptr));
    *base = reinterpret_cast<void*>(static_cast<std::uintptr_t>(first));
    // The driver's CUresult as it is: the runtime's codes share its numbers for these errors
    // (1 invalid value, 201 invalid context, ...).
    return {static_cast<cudaError_t>(result), "cuMemGetAddressRange"};
  }
#else
  // HIP-CPU (preset cuda-hipcpu) has no IPC.
  static constexpr bool kHasIpc = false;
#endif

  // ---- Managed memory (docs/managed-memory.md) ----
  static constexpr bool kHasManaged = true;
  static constexpr unsigned kMemAttachGlobal = cudaMemAttachGlobal;
  static constexpr unsigned kMemAttachHost = cudaMemAttachHost;
  static constexpr int kCpuDeviceId = cudaCpuDeviceId;
  static S mallocManaged(void** ptr, std::size_t bytes, unsigned flags) {
    return {cudaMallocManaged(ptr, bytes, flags), "cudaMallocManaged"};
  }
#if defined(__HIP_CPU_RT__) || CUDART_VERSION >= 13000
  /// CUDA 13 takes a cudaMemLocation (a device, or the host) where CUDA 12 took a device number
  /// with cudaCpuDeviceId for the host.
  static cudaMemLocation memLocation(int location) noexcept {
    cudaMemLocation where{};
    if (location == cudaCpuDeviceId) {
      where.type = cudaMemLocationTypeHost;
      where.id = 0;
    } else {
      where.type = cudaMemLocationTypeDevice;
      where.id = location;
    }
    return where;
  }
  static S memPrefetchAsync(const void* ptr, std::size_t bytes, int location, Stream stream) {
    return {cudaMemPrefetchAsync(ptr, bytes, memLocation(location), 0, stream),
            "cudaMemPrefetchAsync"};
  }
  static S memAdvise(const void* ptr, std::size_t bytes, MemoryAdvice advice, int location) {
    return {cudaMemAdvise(ptr, bytes, vendorAdvice(advice), memLocation(location)),
            "cudaMemAdvise"};
  }
#else
  static S memPrefetchAsync(const void* ptr, std::size_t bytes, int location, Stream stream) {
    return {cudaMemPrefetchAsync(ptr, bytes, location, stream), "cudaMemPrefetchAsync"};
  }
  static S memAdvise(const void* ptr, std::size_t bytes, MemoryAdvice advice, int location) {
    return {cudaMemAdvise(ptr, bytes, vendorAdvice(advice), location), "cudaMemAdvise"};
  }
#endif
  static constexpr cudaMemoryAdvise vendorAdvice(MemoryAdvice advice) noexcept {
    switch (advice) {
      case MemoryAdvice::ReadMostly:
        return cudaMemAdviseSetReadMostly;
      case MemoryAdvice::UnsetReadMostly:
        return cudaMemAdviseUnsetReadMostly;
      case MemoryAdvice::PreferredLocation:
        return cudaMemAdviseSetPreferredLocation;
      case MemoryAdvice::UnsetPreferredLocation:
        return cudaMemAdviseUnsetPreferredLocation;
      case MemoryAdvice::AccessedBy:
        return cudaMemAdviseSetAccessedBy;
      case MemoryAdvice::UnsetAccessedBy:
        return cudaMemAdviseUnsetAccessedBy;
    }
    return cudaMemAdviseSetReadMostly;  // not reached: every enumerator is handled above
  }

  // ---- Streams and events ----
  /// cudaStreamLegacy: the legacy default stream whatever the compilation's default-stream mode
  /// (with CUDA_API_PER_THREAD_DEFAULT_STREAM a 0 handle would mean the per-thread stream).
  static Stream defaultStream() noexcept { return cudaStreamLegacy; }
  static S streamCreate(Stream* stream) { return {cudaStreamCreate(stream), "cudaStreamCreate"}; }
  static S streamDestroy(Stream stream) { return {cudaStreamDestroy(stream), "cudaStreamDestroy"}; }
  static S streamSynchronize(Stream stream) {
    return {cudaStreamSynchronize(stream), "cudaStreamSynchronize"};
  }
  static S streamQuery(Stream stream) { return {cudaStreamQuery(stream), "cudaStreamQuery"}; }
  static S streamWaitEvent(Stream stream, Event event, unsigned flags) {
    return {cudaStreamWaitEvent(stream, event, flags), "cudaStreamWaitEvent"};
  }
  /// Whether work enqueued on `stream` now goes into a graph (active or invalidated capture).
  static S streamIsCapturing(Stream stream, bool* capturing) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t error = cudaStreamIsCapturing(stream, &status);
    *capturing = error == cudaSuccess && status != cudaStreamCaptureStatusNone;
    return {error, "cudaStreamIsCapturing"};
  }
  static S eventCreate(Event* event) { return {cudaEventCreate(event), "cudaEventCreate"}; }
  static S eventCreateWithFlags(Event* event, unsigned flags) {
    return {cudaEventCreateWithFlags(event, flags), "cudaEventCreateWithFlags"};
  }
  static S eventDestroy(Event event) { return {cudaEventDestroy(event), "cudaEventDestroy"}; }
  static S eventRecord(Event event, Stream stream) {
    return {cudaEventRecord(event, stream), "cudaEventRecord"};
  }
  static S eventSynchronize(Event event) {
    return {cudaEventSynchronize(event), "cudaEventSynchronize"};
  }
  static S eventQuery(Event event) { return {cudaEventQuery(event), "cudaEventQuery"}; }
  static S eventElapsedTime(float* ms, Event start, Event end) {
    return {cudaEventElapsedTime(ms, start, end), "cudaEventElapsedTime"};
  }
  template <void (*Fn)(void*)>
  static S launchHostFunc(Stream stream, void* user) {
    return {cudaLaunchHostFunc(stream, Fn, user), "cudaLaunchHostFunc"};
  }

  // ---- Several devices ----
  static S deviceCanAccessPeer(int* can_access, int device, int peer) {
    return {cudaDeviceCanAccessPeer(can_access, device, peer), "cudaDeviceCanAccessPeer"};
  }
  static S deviceEnablePeerAccess(int peer) {
    return {cudaDeviceEnablePeerAccess(peer, 0), "cudaDeviceEnablePeerAccess"};
  }
  static S deviceDisablePeerAccess(int peer) {
    return {cudaDeviceDisablePeerAccess(peer), "cudaDeviceDisablePeerAccess"};
  }
  static S memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                           std::size_t bytes, Stream stream) {
    return {cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream),
            "cudaMemcpyPeerAsync"};
  }

  // ---- Copies ----
  static S memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                       Stream stream) {
    return {cudaMemcpyAsync(dst, src, bytes, kind, stream), "cudaMemcpyAsync"};
  }
  static S memcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, MemcpyKind kind, Stream stream) {
    return {cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, kind, stream),
            "cudaMemcpy2DAsync"};
  }
  static S memcpy3DAsync(void* dst, std::size_t dst_pitch, std::size_t dst_height, const void* src,
                         std::size_t src_pitch, std::size_t src_height, std::size_t width,
                         std::size_t height, std::size_t depth, MemcpyKind kind, Stream stream) {
    // Linear memory on both sides (no arrays, no positions): extent.width is in bytes, a pitched
    // pointer's ysize is the number of rows per slice; xsize (the row length) is the pitch.
    cudaMemcpy3DParms params{};
    params.srcPtr = cudaPitchedPtr{const_cast<void*>(src), src_pitch, src_pitch, src_height};
    params.dstPtr = cudaPitchedPtr{dst, dst_pitch, dst_pitch, dst_height};
    params.extent = cudaExtent{width, height, depth};
    params.kind = kind;
    return {cudaMemcpy3DAsync(&params, stream), "cudaMemcpy3DAsync"};
  }
  static S memsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
    return {cudaMemsetAsync(dst, value, bytes, stream), "cudaMemsetAsync"};
  }
  static S launchCopyStrided(const gpu_runtime::StridedCopyArgs& args, Stream stream) {
    return {launch_strided_copy(args, stream), "cudaLaunchKernel"};
  }
  static std::string_view stridedCopyArchitectures() noexcept {
    return strided_copy_architectures();
  }
  /// A launch status saying that the library has no code for the device (no sm_XX image and no
  /// PTX the driver can compile, e.g. an sm_90-only build on an A100).
  static bool missingKernelImage(Error code) {
    return code == cudaErrorNoKernelImageForDevice || code == cudaErrorInvalidDeviceFunction ||
           code == cudaErrorUnsupportedPtxVersion;
  }

  // ---- Errors ----
  static Error getLastError() noexcept { return cudaGetLastError(); }
  static const char* errorName(Error code) noexcept { return cudaGetErrorName(code); }
  /// The errors after which the process's CUDA context is unusable (CUDA's documentation of each:
  /// "the process must be terminated and relaunched").
  static constexpr bool isSticky(Error code) noexcept {
    // A list, not a switch: on HIP-CPU five of these are CUDA's numbers outside hipError_t.
    constexpr Error kSticky[] = {cudaErrorIllegalAddress,     cudaErrorLaunchFailure,
                                 cudaErrorMisalignedAddress,  cudaErrorHardwareStackError,
                                 cudaErrorIllegalInstruction, cudaErrorInvalidAddressSpace,
                                 cudaErrorInvalidPc,          cudaErrorAssert,
                                 cudaErrorECCUncorrectable,   cudaErrorLaunchTimeout};
    for (const Error sticky : kSticky) {
      if (code == sticky) return true;
    }
    return false;
  }
  static const char* errorString(Error code) noexcept { return cudaGetErrorString(code); }
};
static_assert(gpu_runtime::VendorApi<CudaApi>);

}  // namespace devmem::cuda

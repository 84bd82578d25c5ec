// The HIP runtime, named for gpu_runtime::RuntimeBackend: a table of vendor calls that satisfies
// gpu_runtime::VendorApi (backends/gpu_runtime/vendor_api.hpp says what a table provides; checked
// below the struct). Only names and constants: no logic lives here, so nothing is duplicated
// between CUDA and ROC. Included only by backends/roc/ (compiled by the host
// compiler with __HIP_PLATFORM_AMD__ defined; no kernel code).
#pragma once

#include "backends/gpu_runtime/strided_copy_args.hpp"
#include "backends/gpu_runtime/vendor_api.hpp"

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace devmem::roc {

/// One launch of libdevmem's strided-copy kernel (backends/gpu_runtime/strided_copy_launch.cpp),
/// compiled by the vendor's compiler into libdevmem.
hipError_t launch_strided_copy(const gpu_runtime::StridedCopyArgs& args, hipStream_t stream);
/// The architectures that kernel was compiled for, comma-separated; empty when not recorded.
const char* strided_copy_architectures() noexcept;

struct HipApi {
  using Error = hipError_t;
  using Stream = hipStream_t;
  using Event = hipEvent_t;
  using DeviceProp = hipDeviceProp_t;
  using MemcpyKind = hipMemcpyKind;
  using S = gpu_runtime::Status<hipError_t>;

  static constexpr std::string_view kBackend = "roc";

  static constexpr Error kSuccess = hipSuccess;
  static constexpr Error kErrorNotReady = hipErrorNotReady;
  static constexpr Error kErrorMemoryAllocation = hipErrorOutOfMemory;
  static constexpr Error kErrorInvalidPitchValue = hipErrorInvalidPitchValue;
  /// What HIP answers once it has been torn down at process exit.
  static constexpr Error kErrorRuntimeUnloading = hipErrorDeinitialized;
  static constexpr Error kErrorPeerAccessAlreadyEnabled = hipErrorPeerAccessAlreadyEnabled;
  static constexpr Error kErrorPeerAccessNotEnabled = hipErrorPeerAccessNotEnabled;
  static constexpr Error kErrorStreamCaptureImplicit = hipErrorStreamCaptureImplicit;

  static constexpr MemcpyKind kHostToHost = hipMemcpyHostToHost;
  static constexpr MemcpyKind kHostToDevice = hipMemcpyHostToDevice;
  static constexpr MemcpyKind kDeviceToHost = hipMemcpyDeviceToHost;
  static constexpr MemcpyKind kDeviceToDevice = hipMemcpyDeviceToDevice;
  static constexpr MemcpyKind kMemcpyDefault = hipMemcpyDefault;

  static constexpr unsigned kHostAllocMapped = hipHostMallocMapped;
  static constexpr unsigned kHostAllocPortable = hipHostMallocPortable;
  static constexpr unsigned kHostAllocWriteCombined = hipHostMallocWriteCombined;
  // Coherence, stated explicitly instead of left to HIP_HOST_COHERENT:
  // - mapped memory (mapped_array: zero-copy memory that kernels read and write while the host
  //   may look at it) is coherent (fine-grained): writes become visible across host and device
  //   without a kernel boundary, and system-scope atomics work, the semantics CUDA's mapped
  //   memory has. (HIP 5.2 makes Mapped memory coherent anyway; the flag documents it.)
  // - pinned-only memory (pinned_array) is non-coherent (coarse-grained): it is only the source or
  //   target of stream-ordered DMA copies, which complete before the stream reports them done, so
  //   fine-grained coherence buys nothing there.
  static constexpr unsigned kHostAllocCoherent = hipHostMallocCoherent;
  static constexpr unsigned kHostAllocNonCoherent = hipHostMallocNonCoherent;
  static constexpr unsigned kHostRegisterMapped = hipHostRegisterMapped;
  static constexpr unsigned kHostRegisterPortable = hipHostRegisterPortable;
#if defined(hipHostRegisterReadOnly)
  static constexpr unsigned kHostRegisterReadOnly = hipHostRegisterReadOnly;  // ROCm 6
#else
  static constexpr unsigned kHostRegisterReadOnly = 0;  // HIP 5.2 has no read-only registration
#endif
  static constexpr unsigned kEventDisableTiming = hipEventDisableTiming;
  static constexpr unsigned kEventBlockingSync = hipEventBlockingSync;

  // HIP 5.2 turns 2-D and 3-D copies into a HIP_MEMCPY3D descriptor whose pitches, heights and
  // widths are `unsigned int`: anything larger would be truncated silently, so larger copies go
  // row by row (RuntimeBackend checks against this limit).
  static constexpr std::size_t kMaxPitch = std::numeric_limits<std::uint32_t>::max();

  // ---- Devices ----
  static S getDeviceCount(int* count) { return {hipGetDeviceCount(count), "hipGetDeviceCount"}; }
  static S getDevice(int* device) { return {hipGetDevice(device), "hipGetDevice"}; }
  static S setDevice(int device) { return {hipSetDevice(device), "hipSetDevice"}; }
  static S getDeviceProperties(DeviceProp* prop, int device) {
    return {hipGetDeviceProperties(prop, device), "hipGetDeviceProperties"};
  }
  static S memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
    return {hipMemGetInfo(free_bytes, total_bytes), "hipMemGetInfo"};
  }
  /// gcnArchName without its target features: "gfx90a:sramecc+:xnack-" -> "gfx90a".
  /// (A template, so that the branch for a runtime without gcnArchName is discarded.)
  template <class Prop = DeviceProp>
  static std::string architecture(const Prop& prop) {
    if constexpr (requires { prop.gcnArchName; }) {
      const std::string_view full(prop.gcnArchName,
                                  strnlen(prop.gcnArchName, sizeof prop.gcnArchName));
      return std::string(full.substr(0, full.find(':')));
    } else {
      // HIP-CPU (preset roc-hipcpu) has no gcnArchName: its device is the host processor.
      return "cpu";
    }
  }
  /// hipDeviceProp_t has no unifiedAddressing field and hipDeviceAttributeUnifiedAddressing is
  /// "CUDA only" in HIP 5.2: on ROCm every GPU agent shares HSA's flat 64-bit address space with
  /// the host (an HSA requirement), so host and device pointers never collide.
  static bool unifiedAddressing(const DeviceProp& /*prop*/) { return true; }
  /// AMD GPUs have no opt-in beyond sharedMemPerBlock (the 64 KiB LDS of MI250/MI300); ROCm 6
  /// reports that as sharedMemPerBlockOptin, HIP 5.2 has no such field.
  template <class Prop = DeviceProp>
  static std::size_t sharedMemPerBlockOptin(const Prop& prop) {
    if constexpr (requires { prop.sharedMemPerBlockOptin; }) {
      return prop.sharedMemPerBlockOptin;
    } else {
      return prop.sharedMemPerBlock;
    }
  }

  // ---- Memory ----
  static S malloc(void** ptr, std::size_t bytes) { return {hipMalloc(ptr, bytes), "hipMalloc"}; }
  static S free(void* ptr) { return {hipFree(ptr), "hipFree"}; }
  static S mallocAsync(void** ptr, std::size_t bytes, Stream stream) {
    return {hipMallocAsync(ptr, bytes, stream), "hipMallocAsync"};
  }

  // ---- Inter-process sharing (docs/scaling-out.md#ipc) ----
#if !defined(__HIP_CPU_RT__)
  static constexpr bool kHasIpc = true;
  using IpcMemHandle = hipIpcMemHandle_t;
  static S ipcGetMemHandle(IpcMemHandle* handle, void* base) {
    return {hipIpcGetMemHandle(handle, base), "hipIpcGetMemHandle"};
  }
  static S ipcOpenMemHandle(void** base, IpcMemHandle handle) {
    return {hipIpcOpenMemHandle(base, handle, hipIpcMemLazyEnablePeerAccess),
            "hipIpcOpenMemHandle"};
  }
  static S ipcCloseMemHandle(void* base) {
    return {hipIpcCloseMemHandle(base), "hipIpcCloseMemHandle"};
  }
  static S memGetAddressRange(void** base, std::size_t* bytes, const void* ptr) {
    hipDeviceptr_t first = nullptr;
    const hipError_t status = hipMemGetAddressRange(&first, bytes, const_cast<void*>(ptr));
    *base = first;
    return {status, "hipMemGetAddressRange"};
  }
#else
  // HIP-CPU (preset roc-hipcpu) has no IPC.
  static constexpr bool kHasIpc = false;
#endif
  static S freeAsync(void* ptr, Stream stream) {
    return {hipFreeAsync(ptr, stream), "hipFreeAsync"};
  }

  // ---- Managed memory (docs/managed-memory.md) ----
  static constexpr bool kHasManaged = true;
  static constexpr unsigned kMemAttachGlobal = hipMemAttachGlobal;
  static constexpr unsigned kMemAttachHost = hipMemAttachHost;
  static constexpr int kCpuDeviceId = hipCpuDeviceId;
  static S mallocManaged(void** ptr, std::size_t bytes, unsigned flags) {
    return {hipMallocManaged(ptr, bytes, flags), "hipMallocManaged"};
  }
  static S memPrefetchAsync(const void* ptr, std::size_t bytes, int location, Stream stream) {
    return {hipMemPrefetchAsync(ptr, bytes, location, stream), "hipMemPrefetchAsync"};
  }
  static S memAdvise(const void* ptr, std::size_t bytes, MemoryAdvice advice, int location) {
    return {hipMemAdvise(ptr, bytes, vendorAdvice(advice), location), "hipMemAdvise"};
  }
  static constexpr hipMemoryAdvise vendorAdvice(MemoryAdvice advice) noexcept {
    switch (advice) {
      case MemoryAdvice::ReadMostly:
        return hipMemAdviseSetReadMostly;
      case MemoryAdvice::UnsetReadMostly:
        return hipMemAdviseUnsetReadMostly;
      case MemoryAdvice::PreferredLocation:
        return hipMemAdviseSetPreferredLocation;
      case MemoryAdvice::UnsetPreferredLocation:
        return hipMemAdviseUnsetPreferredLocation;
      case MemoryAdvice::AccessedBy:
        return hipMemAdviseSetAccessedBy;
      case MemoryAdvice::UnsetAccessedBy:
        return hipMemAdviseUnsetAccessedBy;
    }
    return hipMemAdviseSetReadMostly;  // not reached: every enumerator is handled above
  }
  static S setPoolReleaseThreshold(int device, std::uint64_t bytes) {
#if defined(__HIP_CPU_RT__)
    // HIP-CPU's stream-ordered allocations are ordinary ones: there is no pool to configure.
    static_cast<void>(device);
    static_cast<void>(bytes);
    return {hipSuccess, "hipMemPoolSetAttribute"};
#else
    hipMemPool_t pool = nullptr;
    if (const hipError_t status = hipDeviceGetDefaultMemPool(&pool, device); status != hipSuccess) {
      return {status, "hipDeviceGetDefaultMemPool"};
    }
    std::uint64_t value = bytes;
    return {hipMemPoolSetAttribute(pool, hipMemPoolAttrReleaseThreshold, &value),
            "hipMemPoolSetAttribute"};
#endif
  }
  static S trimPoolTo(int device, std::size_t bytes) {
#if defined(__HIP_CPU_RT__)
    static_cast<void>(device);
    static_cast<void>(bytes);
    return {hipSuccess, "hipMemPoolTrimTo"};
#else
    hipMemPool_t pool = nullptr;
    if (const hipError_t status = hipDeviceGetDefaultMemPool(&pool, device); status != hipSuccess) {
      return {status, "hipDeviceGetDefaultMemPool"};
    }
    return {hipMemPoolTrimTo(pool, bytes), "hipMemPoolTrimTo"};
#endif
  }
  static S memoryPoolsSupported(int device, bool* supported) {
    int value = 0;
    const hipError_t status =
        hipDeviceGetAttribute(&value, hipDeviceAttributeMemoryPoolsSupported, device);
    *supported = status == hipSuccess && value != 0;
    return {status, "hipDeviceGetAttribute"};
  }
  static S hostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
    return {hipHostMalloc(ptr, bytes, flags), "hipHostMalloc"};
  }
  static S hostFree(void* ptr) { return {hipHostFree(ptr), "hipHostFree"}; }
  static S hostRegister(void* ptr, std::size_t bytes, unsigned flags) {
    return {hipHostRegister(ptr, bytes, flags), "hipHostRegister"};
  }
  static S hostUnregister(void* ptr) { return {hipHostUnregister(ptr), "hipHostUnregister"}; }
  static S hostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
    return {hipHostGetDevicePointer(device_ptr, host_ptr, flags), "hipHostGetDevicePointer"};
  }
  /// Ordinary pageable host memory (see pageableAnswer).
  static S isPageable(const void* ptr, bool* pageable) {
    hipPointerAttribute_t attributes{};
    const hipError_t status = hipPointerGetAttributes(&attributes, ptr);
    if (!pageableAnswer(status, attributes, pageable)) {
      return {status, "hipPointerGetAttributes"};
    }
    if (status != hipSuccess) static_cast<void>(hipGetLastError());  // the answer, not a failure
    return {hipSuccess, "hipPointerGetAttributes"};
  }
  /// Reads hipPointerGetAttributes' answer for memory that may be ordinary pageable memory; false
  /// when the answer is a real failure. The two ROCm ABIs answer differently for memory HIP
  /// neither allocated nor registered:
  /// - ROCm 5 (field memoryType): hipErrorInvalidValue, recorded as the last error;
  /// - ROCm >= 6 (field type): success, with type hipMemoryTypeUnregistered (0), like CUDA 11+.
  /// Reading only the error would take ROCm 6's answer for "not pageable" and silently stop
  /// staging large pageable copies. (A template over the struct, so that whichever field the
  /// compiled-against ABI lacks is never named.)
  template <class Attributes>
  static bool pageableAnswer(hipError_t status, const Attributes& attributes, bool* pageable) {
    *pageable = false;
    if (status == hipErrorInvalidValue) {
      *pageable = true;
      return true;
    }
    if (status != hipSuccess) return false;
    if constexpr (requires { attributes.type; }) {
      *pageable = static_cast<int>(attributes.type) == kMemoryTypeUnregistered;
    }
    return true;  // ROCm 5 answered with a memory type: device, managed or page-locked memory
  }
  /// ROCm 6's hipMemoryTypeUnregistered (absent from ROCm 5's enum).
  static constexpr int kMemoryTypeUnregistered = 0;

  /// The device owning device or managed memory at `ptr`; -1 for host memory and for memory HIP
  /// does not know (ROCm 5: hipErrorInvalidValue, cleared here; ROCm >= 6: success and
  /// hipMemoryTypeUnregistered).
  static S pointerDevice(const void* ptr, int* device) {
    hipPointerAttribute_t attributes{};
    const hipError_t status = hipPointerGetAttributes(&attributes, ptr);
    *device = -1;
    if (status == hipErrorInvalidValue && ptr != nullptr) {
      static_cast<void>(hipGetLastError());  // the answer "unknown memory", not a failure
      return {hipSuccess, "hipPointerGetAttributes"};
    }
    if (status == hipSuccess && ownedByDevice(attributes)) *device = attributes.device;
    return {status, "hipPointerGetAttributes"};
  }
  /// Device or managed memory, in whichever field the compiled-against ABI has: ROCm 5's
  /// memoryType with its isManaged flag, or ROCm >= 6's type (CUDA's numbering, managed = 3, a
  /// name ROCm 5 lacks).
  template <class Attributes>
  static bool ownedByDevice(const Attributes& attributes) {
    if constexpr (requires { attributes.type; }) {
      return attributes.type == hipMemoryTypeDevice ||
             static_cast<int>(attributes.type) == kMemoryTypeManaged;
    } else {
      return attributes.memoryType == hipMemoryTypeDevice || attributes.isManaged != 0;
    }
  }
  /// ROCm 6's hipMemoryTypeManaged.
  static constexpr int kMemoryTypeManaged = 3;

  // ---- Streams and events ----
  /// HIP's null stream is the blocking default stream (legacy semantics).
  static Stream defaultStream() noexcept { return nullptr; }
  static S streamCreate(Stream* stream) { return {hipStreamCreate(stream), "hipStreamCreate"}; }
  static S streamDestroy(Stream stream) { return {hipStreamDestroy(stream), "hipStreamDestroy"}; }
  static S streamSynchronize(Stream stream) {
    return {hipStreamSynchronize(stream), "hipStreamSynchronize"};
  }
  static S streamQuery(Stream stream) { return {hipStreamQuery(stream), "hipStreamQuery"}; }
  static S streamWaitEvent(Stream stream, Event event, unsigned flags) {
    return {hipStreamWaitEvent(stream, event, flags), "hipStreamWaitEvent"};
  }
  /// Whether work enqueued on `stream` now goes into a graph (active or invalidated capture).
  static S streamIsCapturing(Stream stream, bool* capturing) {
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    const hipError_t error = hipStreamIsCapturing(stream, &status);
    *capturing = error == hipSuccess && status != hipStreamCaptureStatusNone;
    return {error, "hipStreamIsCapturing"};
  }
  static S eventCreate(Event* event) { return {hipEventCreate(event), "hipEventCreate"}; }
  static S eventCreateWithFlags(Event* event, unsigned flags) {
    return {hipEventCreateWithFlags(event, flags), "hipEventCreateWithFlags"};
  }
  static S eventDestroy(Event event) { return {hipEventDestroy(event), "hipEventDestroy"}; }
  static S eventRecord(Event event, Stream stream) {
    return {hipEventRecord(event, stream), "hipEventRecord"};
  }
  static S eventSynchronize(Event event) {
    return {hipEventSynchronize(event), "hipEventSynchronize"};
  }
  static S eventQuery(Event event) { return {hipEventQuery(event), "hipEventQuery"}; }
  static S eventElapsedTime(float* ms, Event start, Event end) {
    return {hipEventElapsedTime(ms, start, end), "hipEventElapsedTime"};
  }
  /// hipLaunchHostFunc is declared by HIP 5.2's header but not exported by Debian's libamdhip64
  /// 5.2, so host functions go through hipStreamAddCallback, which has the same stream semantics
  /// (runs once the preceding work is complete, blocks the work after it, must not call HIP).
  /// Its callback also gets the stream's status: the function runs either way, because it only
  /// releases references.
  template <void (*Fn)(void*)>
  static S launchHostFunc(Stream stream, void* user) {
    return {hipStreamAddCallback(stream, &stream_callback<Fn>, user, 0u), "hipStreamAddCallback"};
  }

  // ---- Several devices ----
  static S deviceCanAccessPeer(int* can_access, int device, int peer) {
    return {hipDeviceCanAccessPeer(can_access, device, peer), "hipDeviceCanAccessPeer"};
  }
  static S deviceEnablePeerAccess(int peer) {
    return {hipDeviceEnablePeerAccess(peer, 0u), "hipDeviceEnablePeerAccess"};
  }
  static S deviceDisablePeerAccess(int peer) {
    return {hipDeviceDisablePeerAccess(peer), "hipDeviceDisablePeerAccess"};
  }
  static S memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                           std::size_t bytes, Stream stream) {
    return {hipMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream),
            "hipMemcpyPeerAsync"};
  }

  // ---- Copies ----
  static S memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                       Stream stream) {
    return {hipMemcpyAsync(dst, src, bytes, kind, stream), "hipMemcpyAsync"};
  }
  static S memcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, MemcpyKind kind, Stream stream) {
    return {hipMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, kind, stream),
            "hipMemcpy2DAsync"};
  }
  static S memcpy3DAsync(void* dst, std::size_t dst_pitch, std::size_t dst_height, const void* src,
                         std::size_t src_pitch, std::size_t src_height, std::size_t width,
                         std::size_t height, std::size_t depth, MemcpyKind kind, Stream stream) {
    // Linear memory on both sides (no arrays, no positions): extent.width is in bytes, a pitched
    // pointer's ysize is the number of rows per slice; xsize (the row length) is the pitch.
    hipMemcpy3DParms params{};
    params.srcPtr = hipPitchedPtr{const_cast<void*>(src), src_pitch, src_pitch, src_height};
    params.dstPtr = hipPitchedPtr{dst, dst_pitch, dst_pitch, dst_height};
    params.extent = hipExtent{width, height, depth};
    params.kind = kind;
    return {hipMemcpy3DAsync(&params, stream), "hipMemcpy3DAsync"};
  }
  static S memsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
    return {hipMemsetAsync(dst, value, bytes, stream), "hipMemsetAsync"};
  }
  static S launchCopyStrided(const gpu_runtime::StridedCopyArgs& args, Stream stream) {
    return {launch_strided_copy(args, stream), "hipLaunchKernel"};
  }
  static std::string_view stridedCopyArchitectures() noexcept {
    return strided_copy_architectures();
  }
  /// A launch status saying that the library has no code object for the device (e.g. an MI300,
  /// gfx942, with a library built for gfx90a by a HIP that cannot target gfx942).
  static bool missingKernelImage(Error code) {
    return code == hipErrorNoBinaryForGpu || code == hipErrorInvalidDeviceFunction ||
           code == hipErrorInvalidImage;
  }

  // ---- Errors ----
  static Error getLastError() noexcept { return hipGetLastError(); }
  static const char* errorName(Error code) noexcept { return hipGetErrorName(code); }
  /// The errors after which the process's HIP context is unusable (as CUDA's sticky errors; HIP
  /// names fewer of them).
  static constexpr bool isSticky(Error code) noexcept {
    switch (code) {
      case hipErrorIllegalAddress:
      case hipErrorLaunchFailure:
      case hipErrorAssert:
      case hipErrorECCNotCorrectable:
      case hipErrorLaunchTimeOut:
        return true;
      default:
        return false;
    }
  }
  static const char* errorString(Error code) noexcept { return hipGetErrorString(code); }

 private:
  template <void (*Fn)(void*)>
  static void stream_callback(hipStream_t /*stream*/, hipError_t /*status*/, void* user) {
    Fn(user);
  }
};
static_assert(gpu_runtime::VendorApi<HipApi>);

}  // namespace devmem::roc

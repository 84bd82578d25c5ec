// <cuda_runtime_api.h> for the cuda-hipcpu preset: each CUDA runtime name that devmem's CUDA call
// table (backends/cuda/cuda_api.hpp), the raw bench baseline and the CUDA kernel layer use, bound
// to the HIP call of the same meaning, run by HIP-CPU (with devmem_hipcpu/hip_compat.hpp). So the
// CUDA table's arguments, units, flags and stream handles run against a runtime devmem did not
// write. HIP mirrors the CUDA runtime, so most names map one to one; where CUDA's contract differs
// from HIP's, the binding adapts it and says so:
// - cudaPointerGetAttributes reports ordinary pageable memory as cudaMemoryTypeUnregistered
//   without an error (CUDA 11+), where HIP 5.2 fails with hipErrorInvalidValue;
// - cudaDeviceProp has CUDA's fields that hipDeviceProp_t lacks (unifiedAddressing,
//   sharedMemPerBlockOptin), filled with what HIP-CPU's platform has: one address space, no
//   opt-in beyond the default shared-memory limit;
// - cudaStreamLegacy is HIP's null stream, which is the legacy blocking stream.
// Status values are HIP's (most equal CUDA's); the names the runtime reports are HIP's.
// Not used by any production build.
#pragma once

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <cstring>

using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
using cudaEvent_t = hipEvent_t;
using cudaMemcpyKind = hipMemcpyKind;
using cudaMemcpy3DParms = hipMemcpy3DParms;
using cudaPitchedPtr = hipPitchedPtr;
using cudaExtent = hipExtent;
using cudaPos = hipPos;
using cudaHostFn_t = hipHostFn_t;
using cudaFuncAttribute = hipFuncAttribute;

inline constexpr cudaError_t cudaSuccess = hipSuccess;
inline constexpr cudaError_t cudaErrorInvalidValue = hipErrorInvalidValue;
inline constexpr cudaError_t cudaErrorMemoryAllocation = hipErrorOutOfMemory;
inline constexpr cudaError_t cudaErrorCudartUnloading = hipErrorDeinitialized;
inline constexpr cudaError_t cudaErrorInvalidPitchValue = hipErrorInvalidPitchValue;
inline constexpr cudaError_t cudaErrorInvalidResourceHandle = hipErrorInvalidHandle;
inline constexpr cudaError_t cudaErrorNotReady = hipErrorNotReady;
inline constexpr cudaError_t cudaErrorHostMemoryAlreadyRegistered =
    hipErrorHostMemoryAlreadyRegistered;
inline constexpr cudaError_t cudaErrorHostMemoryNotRegistered = hipErrorHostMemoryNotRegistered;
inline constexpr cudaError_t cudaErrorPeerAccessAlreadyEnabled = hipErrorPeerAccessAlreadyEnabled;
inline constexpr cudaError_t cudaErrorPeerAccessNotEnabled = hipErrorPeerAccessNotEnabled;
inline constexpr cudaError_t cudaErrorStreamCaptureImplicit = hipErrorStreamCaptureImplicit;
// The sticky errors (CudaApi::isSticky): HIP's twins where HIP has one; CUDA's own values for the
// five HIP does not name (HIP-CPU never returns them).
inline constexpr cudaError_t cudaErrorIllegalAddress = hipErrorIllegalAddress;
inline constexpr cudaError_t cudaErrorLaunchFailure = hipErrorLaunchFailure;
inline constexpr cudaError_t cudaErrorAssert = hipErrorAssert;
inline constexpr cudaError_t cudaErrorECCUncorrectable = hipErrorECCNotCorrectable;
inline constexpr cudaError_t cudaErrorLaunchTimeout = hipErrorLaunchTimeOut;
inline constexpr cudaError_t cudaErrorHardwareStackError = static_cast<cudaError_t>(714);
inline constexpr cudaError_t cudaErrorIllegalInstruction = static_cast<cudaError_t>(715);
inline constexpr cudaError_t cudaErrorMisalignedAddress = static_cast<cudaError_t>(716);
inline constexpr cudaError_t cudaErrorInvalidAddressSpace = static_cast<cudaError_t>(717);
inline constexpr cudaError_t cudaErrorInvalidPc = static_cast<cudaError_t>(718);
// No code for the device (CudaApi::missingKernelImage); HIP-CPU runs every kernel, never these.
inline constexpr cudaError_t cudaErrorNoKernelImageForDevice = hipErrorNoBinaryForGpu;
inline constexpr cudaError_t cudaErrorInvalidDeviceFunction = hipErrorInvalidDeviceFunction;
inline constexpr cudaError_t cudaErrorUnsupportedPtxVersion = static_cast<cudaError_t>(222);

inline constexpr cudaMemcpyKind cudaMemcpyHostToHost = hipMemcpyHostToHost;
inline constexpr cudaMemcpyKind cudaMemcpyHostToDevice = hipMemcpyHostToDevice;
inline constexpr cudaMemcpyKind cudaMemcpyDeviceToHost = hipMemcpyDeviceToHost;
inline constexpr cudaMemcpyKind cudaMemcpyDeviceToDevice = hipMemcpyDeviceToDevice;
inline constexpr cudaMemcpyKind cudaMemcpyDefault = hipMemcpyDefault;

inline constexpr unsigned cudaHostAllocDefault = hipHostMallocDefault;
inline constexpr unsigned cudaHostAllocPortable = hipHostMallocPortable;
inline constexpr unsigned cudaHostAllocMapped = hipHostMallocMapped;
inline constexpr unsigned cudaHostAllocWriteCombined = hipHostMallocWriteCombined;
inline constexpr unsigned cudaHostRegisterDefault = hipHostRegisterDefault;
inline constexpr unsigned cudaHostRegisterPortable = hipHostRegisterPortable;
inline constexpr unsigned cudaHostRegisterMapped = hipHostRegisterMapped;
// HIP-CPU has no read-only registration: a flag the binding's hipHostRegister refuses, so that
// devmem's fallback (register without it) runs.
inline constexpr unsigned cudaHostRegisterReadOnly = 0x08;
inline constexpr unsigned cudaEventDisableTiming = hipEventDisableTiming;
inline constexpr unsigned cudaEventBlockingSync = hipEventBlockingSync;

inline constexpr cudaFuncAttribute cudaFuncAttributeMaxDynamicSharedMemorySize =
    hipFuncAttributeMaxDynamicSharedMemorySize;

inline const cudaStream_t cudaStreamLegacy = nullptr;

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

/// The cudaDeviceProp fields devmem reads, with CUDA's names and types.
struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  std::size_t sharedMemPerBlockOptin;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int canMapHostMemory;
  int unifiedAddressing;
};

// ---- Devices ----
inline cudaError_t cudaGetDeviceCount(int* count) {
  return hipGetDeviceCount(count);
}
inline cudaError_t cudaGetDevice(int* device) {
  return hipGetDevice(device);
}
inline cudaError_t cudaSetDevice(int device) {
  return hipSetDevice(device);
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return hipErrorInvalidValue;
  hipDeviceProp_t hip{};
  const hipError_t status = hipGetDeviceProperties(&hip, device);
  if (status != hipSuccess) return status;
  *prop = cudaDeviceProp{};
  std::memcpy(prop->name, hip.name, sizeof prop->name);
  prop->totalGlobalMem = hip.totalGlobalMem;
  prop->sharedMemPerBlock = hip.sharedMemPerBlock;
  prop->sharedMemPerBlockOptin = hip.sharedMemPerBlock;
  prop->warpSize = hip.warpSize;
  prop->maxThreadsPerBlock = hip.maxThreadsPerBlock;
  for (int d = 0; d < 3; ++d) {
    prop->maxThreadsDim[d] = hip.maxThreadsDim[d];
    prop->maxGridSize[d] = hip.maxGridSize[d];
  }
  prop->major = hip.major;
  prop->minor = hip.minor;
  prop->multiProcessorCount = hip.multiProcessorCount;
  prop->canMapHostMemory = hip.canMapHostMemory;
  prop->unifiedAddressing = 1;  // host and "device" share the process's address space
  return hipSuccess;
}
inline cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  return hipMemGetInfo(free_bytes, total_bytes);
}
using cudaFuncAttributes = hipFuncAttributes;
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, const void* function) {
  return hipFuncGetAttributes(attributes, function);
}
inline cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute,
                                        int value) {
  return hipFuncSetAttribute(function, attribute, value);
}

// ---- Memory ----
inline cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  return hipMalloc(ptr, bytes);
}
inline cudaError_t cudaFree(void* ptr) {
  return hipFree(ptr);
}
inline cudaError_t cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
  return hipHostMalloc(ptr, bytes, flags);
}
inline cudaError_t cudaFreeHost(void* ptr) {
  return hipHostFree(ptr);
}
inline cudaError_t cudaHostRegister(void* ptr, std::size_t bytes, unsigned flags) {
  return hipHostRegister(ptr, bytes, flags);
}
inline cudaError_t cudaMallocAsync(void** ptr, std::size_t bytes, cudaStream_t stream) {
  return hipMallocAsync(ptr, bytes, stream);
}
inline cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  return hipFreeAsync(ptr, stream);
}
enum cudaDeviceAttr { cudaDevAttrMemoryPoolsSupported = 115 };
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (attribute != cudaDevAttrMemoryPoolsSupported) return hipErrorInvalidValue;
  return hipDeviceGetAttribute(value, hipDeviceAttributeMemoryPoolsSupported, device);
}
inline cudaError_t cudaHostUnregister(void* ptr) {
  return hipHostUnregister(ptr);
}
inline cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
  return hipHostGetDevicePointer(device_ptr, host_ptr, flags);
}
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return hipErrorInvalidValue;
  *attributes = cudaPointerAttributes{};
  hipPointerAttribute_t hip{};
  const hipError_t status = hipPointerGetAttributes(&hip, ptr);
  if (status == hipErrorInvalidValue && ptr != nullptr) {
    static_cast<void>(hipGetLastError());  // CUDA reports no error for pageable memory
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;  // CUDA's value for unregistered memory
    attributes->hostPointer = const_cast<void*>(ptr);
    return cudaSuccess;
  }
  if (status != hipSuccess) return status;
  attributes->type = hip.memoryType == hipMemoryTypeDevice ? cudaMemoryTypeDevice
                     : hip.isManaged != 0                  ? cudaMemoryTypeManaged
                                                           : cudaMemoryTypeHost;
  attributes->device = hip.device;
  attributes->devicePointer = hip.devicePointer;
  attributes->hostPointer = hip.hostPointer;
  return cudaSuccess;
}

// ---- Managed memory, in CUDA 13's form (a cudaMemLocation where CUDA 12 took a device number)
inline constexpr unsigned cudaMemAttachGlobal = hipMemAttachGlobal;
inline constexpr unsigned cudaMemAttachHost = hipMemAttachHost;
inline constexpr int cudaCpuDeviceId = hipCpuDeviceId;
enum cudaMemLocationType {
  cudaMemLocationTypeInvalid = 0,
  cudaMemLocationTypeDevice = 1,
  cudaMemLocationTypeHost = 2,
};
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
enum cudaMemoryAdvise {
  cudaMemAdviseSetReadMostly = hipMemAdviseSetReadMostly,
  cudaMemAdviseUnsetReadMostly = hipMemAdviseUnsetReadMostly,
  cudaMemAdviseSetPreferredLocation = hipMemAdviseSetPreferredLocation,
  cudaMemAdviseUnsetPreferredLocation = hipMemAdviseUnsetPreferredLocation,
  cudaMemAdviseSetAccessedBy = hipMemAdviseSetAccessedBy,
  cudaMemAdviseUnsetAccessedBy = hipMemAdviseUnsetAccessedBy,
};
/// HIP's device number for a location: the device, or hipCpuDeviceId for the host; an invalid
/// type becomes a number HIP refuses (hipErrorInvalidDevice), as CUDA refuses the location.
inline int hip_location(cudaMemLocation location) {
  if (location.type == cudaMemLocationTypeHost) return hipCpuDeviceId;
  if (location.type == cudaMemLocationTypeDevice) return location.id;
  return -2;
}
inline cudaError_t cudaMallocManaged(void** ptr, std::size_t bytes, unsigned flags) {
  return hipMallocManaged(ptr, bytes, flags);
}
/// `flags` must be 0, as CUDA 13 requires.
inline cudaError_t cudaMemPrefetchAsync(const void* ptr, std::size_t bytes,
                                        cudaMemLocation location, unsigned flags,
                                        cudaStream_t stream) {
  if (flags != 0) return hipErrorInvalidValue;
  return hipMemPrefetchAsync(ptr, bytes, hip_location(location), stream);
}
inline cudaError_t cudaMemAdvise(const void* ptr, std::size_t bytes, cudaMemoryAdvise advice,
                                 cudaMemLocation location) {
  return hipMemAdvise(ptr, bytes, static_cast<hipMemoryAdvise>(advice), hip_location(location));
}

// ---- Streams and events ----
inline cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return hipStreamCreate(stream);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return hipStreamDestroy(stream);
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return hipStreamSynchronize(stream);
}
inline cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return hipStreamQuery(stream);
}
using cudaStreamCaptureStatus = hipStreamCaptureStatus;
inline constexpr cudaStreamCaptureStatus cudaStreamCaptureStatusNone = hipStreamCaptureStatusNone;
inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return hipStreamIsCapturing(stream, status);
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  return hipStreamWaitEvent(stream, event, flags);
}
inline cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return hipEventCreate(event);
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  return hipEventCreateWithFlags(event, flags);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return hipEventDestroy(event);
}
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr) {
  return hipEventRecord(event, stream);
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return hipEventSynchronize(event);
}
inline cudaError_t cudaEventQuery(cudaEvent_t event) {
  return hipEventQuery(event);
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return hipEventElapsedTime(ms, start, end);
}
inline cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* user) {
  return hipLaunchHostFunc(stream, function, user);
}

// ---- Copies ----
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes,
                                   cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
  return hipMemcpyAsync(dst, src, bytes, kind, stream);
}

// ---- Several devices ----
inline cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer) {
  return hipDeviceCanAccessPeer(can_access, device, peer);
}
inline cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
  return hipDeviceEnablePeerAccess(peer, flags);
}
inline cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  return hipDeviceDisablePeerAccess(peer);
}
inline cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                       std::size_t bytes, cudaStream_t stream = nullptr) {
  return hipMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, stream);
}
inline cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src,
                                     std::size_t src_pitch, std::size_t width, std::size_t height,
                                     cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
  return hipMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, kind, stream);
}
inline cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* params,
                                     cudaStream_t stream = nullptr) {
  return hipMemcpy3DAsync(params, stream);
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes,
                                   cudaStream_t stream = nullptr) {
  return hipMemsetAsync(dst, value, bytes, stream);
}
inline cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, std::size_t bytes,
                                      std::size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  return hipMemcpyToSymbol(symbol, src, bytes, offset, kind);
}

// ---- Errors ----
inline cudaError_t cudaGetLastError() {
  return hipGetLastError();
}
inline const char* cudaGetErrorName(cudaError_t status) {
  return hipGetErrorName(status);
}
inline const char* cudaGetErrorString(cudaError_t status) {
  return hipGetErrorString(status);
}

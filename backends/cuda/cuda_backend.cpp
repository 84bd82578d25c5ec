// The CUDA backend: devmem::Backend over the CUDA runtime (cudart, shared). Everything it does is
// written once in gpu_runtime::RuntimeBackend; cuda_api.hpp names the CUDA calls. The mapping of
// each Backend method to its CUDA call:
//   device_count / no_device_reason  cudaGetDeviceCount (an error is the reason for 0 devices)
//   properties                       cudaGetDeviceProperties ("sm_<major><minor>")
//   memory_info                      cudaMemGetInfo
//   allocate / deallocate            cudaMalloc / cudaFree
//   host_allocate / host_deallocate  cudaHostAlloc (cudaHostAllocMapped, Portable, WriteCombined)
//                                    / cudaFreeHost
//   host_register / host_unregister  cudaHostRegister (cudaHostRegisterMapped, Portable)
//                                    / cudaHostUnregister
//   mapped_device_pointer            cudaHostGetDevicePointer
//   streams                          cudaStreamCreate (default flags: blocking), cudaStreamDestroy,
//                                    cudaStreamSynchronize, cudaStreamQuery, cudaStreamWaitEvent;
//                                    the nullptr stream is cudaStreamLegacy
//   events                           cudaEventCreate (timing enabled), cudaEventDestroy,
//                                    cudaEventRecord, cudaEventSynchronize, cudaEventQuery,
//                                    cudaEventElapsedTime
//   copy / copy_2d / copy_strided    cudaMemcpyAsync / cudaMemcpy2DAsync / cudaMemcpy3DAsync
//   memset                           cudaMemsetAsync
//   managed memory                   cudaMallocManaged (cudaMemAttachGlobal / Host), cudaFree,
//                                    cudaMemPrefetchAsync, cudaMemAdvise (CUDA 13: cudaMemLocation)
//   launch_host_function             cudaLaunchHostFunc
//   device selection                 cudaGetDevice, cudaSetDevice (only when it differs)
//   errors                           cudaGetErrorName, cudaGetErrorString, cudaGetLastError
#include "backends/cuda/cuda_api.hpp"
#include "backends/gpu_runtime/runtime_backend.hpp"

#include "core/backend_factories.hpp"

#include <memory>

namespace devmem {
namespace cuda {
namespace {

class CudaBackend final : public gpu_runtime::RuntimeBackend<CudaApi> {};

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend() {
  return std::make_unique<cuda::CudaBackend>();
}

}  // namespace devmem

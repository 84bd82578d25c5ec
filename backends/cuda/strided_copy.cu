// The strided-copy kernel (backends/gpu_runtime/strided_copy_kernel.hpp) in libdevmem for the CUDA
// backend: compiled by nvcc in the `cuda` preset, and by the host compiler against HIP-CPU in the
// `cuda-hipcpu` preset (backends/hipcpu/include/cuda_runtime.h binds the CUDA names there).
#include <cuda_runtime.h>

#include "../gpu_runtime/strided_copy_kernel.hpp"

namespace devmem::cuda {

/// CudaApi::launchCopyStrided: one launch on `stream`, returning that launch's own status.
__attribute__((visibility("hidden"))) cudaError_t launch_strided_copy(
    const gpu_runtime::StridedCopyArgs& args, cudaStream_t stream) {
  namespace sc = gpu_runtime::strided_copy;
  const sc::LaunchShape shape = sc::launch_shape(args.count);
#if defined(__HIP_CPU_RT__)
  return ::devmem::hipcpu::launch_kernel(&sc::kernel, dim3(shape.blocks), dim3(shape.threads), 0,
                                         stream, args);
#else
  // cudaLaunchKernel reports this launch's status only, never an earlier error of the thread.
  gpu_runtime::StridedCopyArgs copy = args;
  void* parameters[] = {&copy};
  return cudaLaunchKernel(reinterpret_cast<const void*>(&sc::kernel), dim3(shape.blocks),
                          dim3(shape.threads), parameters, 0, stream);
#endif
}

}  // namespace devmem::cuda

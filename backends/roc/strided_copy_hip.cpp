// The strided-copy kernel (backends/gpu_runtime/strided_copy_kernel.hpp) in libdevmem for the ROC
// backend: compiled by hipcc in the `roc` preset (devmem_target_hip_sources), and by the host
// compiler against HIP-CPU in the `roc-hipcpu` preset.
#include <hip/hip_runtime.h>

#include "../gpu_runtime/strided_copy_kernel.hpp"

namespace devmem::roc {

/// HipApi::launchCopyStrided: one launch on `stream`, returning that launch's own status.
__attribute__((visibility("hidden"))) hipError_t launch_strided_copy(
    const gpu_runtime::StridedCopyArgs& args, hipStream_t stream) {
  namespace sc = gpu_runtime::strided_copy;
  const sc::LaunchShape shape = sc::launch_shape(args.count);
#if defined(__HIP_CPU_RT__)
  return ::devmem::hipcpu::launch_kernel(&sc::kernel, dim3(shape.blocks), dim3(shape.threads), 0,
                                         stream, args);
#else
  // hipLaunchKernel reports this launch's status only, never an earlier error of the thread.
  gpu_runtime::StridedCopyArgs copy = args;
  void* parameters[] = {&copy};
  return hipLaunchKernel(reinterpret_cast<const void*>(&sc::kernel), dim3(shape.blocks),
                         dim3(shape.threads), parameters, 0, stream);
#endif
}

}  // namespace devmem::roc

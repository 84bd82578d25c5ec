// The launch of libdevmem's strided-copy kernel (strided_copy_kernel.hpp), one source for both GPU
// backends: the CUDA and the HIP launch differ only in their vendor's names, so the backend's
// build picks them with one definition (the top-level CMakeLists.txt, "The strided-copy kernel"):
//   DEVMEM_STRIDED_COPY_CUDA  devmem::cuda::launch_strided_copy (CudaApi::launchCopyStrided), over
//                             cudaLaunchKernel: nvcc in the `cuda` preset (CUDA language), the
//                             host compiler against HIP-CPU in `cuda-hipcpu`
//   DEVMEM_STRIDED_COPY_ROC   devmem::roc::launch_strided_copy (HipApi::launchCopyStrided), over
//                             hipLaunchKernel: hipcc in the `roc` preset, the host compiler
//                             against HIP-CPU in `roc-hipcpu`
// Hidden like the library's C++ symbols.
#if defined(DEVMEM_STRIDED_COPY_CUDA)
#include <cuda_runtime.h>
#define DEVMEM_STRIDED_COPY_NAMESPACE cuda
// The vendor's name for `name`: cudaError_t, cudaStream_t, cudaLaunchKernel.
#define DEVMEM_STRIDED_COPY_VENDOR(name) cuda##name
#elif defined(DEVMEM_STRIDED_COPY_ROC)
#include <hip/hip_runtime.h>
#define DEVMEM_STRIDED_COPY_NAMESPACE roc
// The vendor's name for `name`: hipError_t, hipStream_t, hipLaunchKernel.
#define DEVMEM_STRIDED_COPY_VENDOR(name) hip##name
#else
#error "strided_copy_launch.cpp: define DEVMEM_STRIDED_COPY_CUDA or DEVMEM_STRIDED_COPY_ROC"
#endif

// Beside this file (hipcc's include path has only devmem's public headers).
#include "strided_copy_kernel.hpp"

namespace devmem::DEVMEM_STRIDED_COPY_NAMESPACE {

namespace {

/// One launch of `kernel` on `stream`, returning that launch's own status.
DEVMEM_STRIDED_COPY_VENDOR(Error_t)
launch(void (*kernel)(gpu_runtime::StridedCopyArgs), dim3 grid, dim3 block,
       const gpu_runtime::StridedCopyArgs& args, DEVMEM_STRIDED_COPY_VENDOR(Stream_t) stream) {
#if defined(__HIP_CPU_RT__)
  return ::devmem::hipcpu::launch_kernel(kernel, grid, block, 0, stream, args);
#else
  // The vendor's launch reports this launch's status only, never an earlier error of the thread.
  gpu_runtime::StridedCopyArgs copy = args;
  void* parameters[] = {&copy};
  return DEVMEM_STRIDED_COPY_VENDOR(LaunchKernel)(reinterpret_cast<const void*>(kernel), grid,
                                                  block, parameters, 0, stream);
#endif
}

/// The tiled kernel for `tiled`'s unit: one kernel per unit type, so that each has only its own
/// tile in shared memory (a kernel switching between them would hold all five).
void (*tiled_kernel_for(std::int32_t unit))(gpu_runtime::StridedCopyArgs) {
  namespace sc = gpu_runtime::strided_copy;
  switch (unit) {
    case 16:
      return &sc::tiled_kernel<sc::Unit16>;
    case 8:
      return &sc::tiled_kernel<std::uint64_t>;
    case 4:
      return &sc::tiled_kernel<std::uint32_t>;
    case 2:
      return &sc::tiled_kernel<std::uint16_t>;
    default:
      return &sc::tiled_kernel<std::uint8_t>;
  }
}

}  // namespace

/// The table's launchCopyStrided: one launch on `stream`, returning that launch's own status. A
/// transpose (tiled_copy_args) takes the tiled kernel, everything else the gather.
__attribute__((visibility("hidden"))) DEVMEM_STRIDED_COPY_VENDOR(Error_t)
    launch_strided_copy(const gpu_runtime::StridedCopyArgs& args,
                        DEVMEM_STRIDED_COPY_VENDOR(Stream_t) stream) {
  namespace sc = gpu_runtime::strided_copy;
  gpu_runtime::StridedCopyArgs tiled;
  if (gpu_runtime::tiled_copy_args(args, tiled)) {
    const sc::TiledLaunchShape grid = sc::tiled_launch_shape(tiled);
    return launch(tiled_kernel_for(tiled.unit), dim3(grid.x, grid.y, grid.z),
                  dim3(gpu_runtime::kTiledCopyTile, gpu_runtime::kTiledCopyRows), tiled, stream);
  }
  const sc::LaunchShape shape = sc::launch_shape(args.count);
  return launch(&sc::kernel, dim3(shape.blocks), dim3(shape.threads), args, stream);
}

/// The table's stridedCopyArchitectures: the GPU architectures the kernel above was compiled for,
/// comma-separated, where the build records them (hipcc: DEVMEM_HIP_ARCHITECTURES); else empty.
__attribute__((visibility("hidden"))) const char* strided_copy_architectures() noexcept {
#if defined(DEVMEM_HIP_ARCHITECTURES)
  return DEVMEM_HIP_ARCHITECTURES;
#else
  return "";
#endif
}

}  // namespace devmem::DEVMEM_STRIDED_COPY_NAMESPACE

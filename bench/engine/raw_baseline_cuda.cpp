// The CUDA runtime's raw baseline: cudaMemcpyAsync timed with cudaEvents, cudaMalloc + cudaFree.
#include "raw_baseline_vendor.hpp"

#include "backends/cuda/cuda_api.hpp"

namespace devmem::app {

std::unique_ptr<RawBaseline> make_cuda_baseline() {
  return std::make_unique<VendorBaseline<cuda::CudaApi>>("cudaMemcpyAsync", "cudaMalloc+cudaFree");
}

}  // namespace devmem::app

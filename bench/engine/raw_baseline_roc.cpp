// The HIP runtime's raw baseline: hipMemcpyAsync timed with hipEvents, hipMalloc + hipFree.
#include "raw_baseline_vendor.hpp"

#include "backends/roc/hip_api.hpp"

namespace devmem::app {

std::unique_ptr<RawBaseline> make_roc_baseline() {
  return std::make_unique<VendorBaseline<roc::HipApi>>("hipMemcpyAsync", "hipMalloc+hipFree");
}

}  // namespace devmem::app

// The HIP runtime's raw baseline: hipMemcpyAsync timed with hipEvents, hipMalloc + hipFree.
#include "raw_baseline_vendor.hpp"

#include <hip/hip_runtime_api.h>

namespace devmem::app {
namespace {

struct HipCalls {
  using Error = hipError_t;
  using Stream = hipStream_t;
  using Event = hipEvent_t;
  static constexpr Error kSuccess = hipSuccess;
  static constexpr std::string_view kCopyCall = "hipMemcpyAsync";
  static constexpr std::string_view kAllocCall = "hipMalloc+hipFree";
  static constexpr std::string_view kPrefix = "roc";

  static Error malloc(void** p, std::size_t bytes) { return hipMalloc(p, bytes); }
  static Error free(void* p) { return hipFree(p); }
  static Error hostAlloc(void** p, std::size_t bytes, bool mapped) {
    return hipHostMalloc(p, bytes, mapped ? hipHostMallocMapped : hipHostMallocDefault);
  }
  static Error hostFree(void* p) { return hipHostFree(p); }
  static Error streamCreate(Stream* s) { return hipStreamCreate(s); }
  static Error streamDestroy(Stream s) { return hipStreamDestroy(s); }
  static Error streamSynchronize(Stream s) { return hipStreamSynchronize(s); }
  static Error eventCreate(Event* e) { return hipEventCreate(e); }
  static Error eventDestroy(Event e) { return hipEventDestroy(e); }
  static Error eventRecord(Event e, Stream s) { return hipEventRecord(e, s); }
  static Error eventSynchronize(Event e) { return hipEventSynchronize(e); }
  static Error eventElapsedTime(float* ms, Event a, Event b) {
    return hipEventElapsedTime(ms, a, b);
  }
  static Error memsetAsync(void* p, int value, std::size_t bytes, Stream s) {
    return hipMemsetAsync(p, value, bytes, s);
  }
  static Error memcpyAsync(void* dst, const void* src, std::size_t bytes, Direction direction,
                           Stream s) {
    const hipMemcpyKind kind = direction == Direction::HostToDevice   ? hipMemcpyHostToDevice
                               : direction == Direction::DeviceToHost ? hipMemcpyDeviceToHost
                                                                      : hipMemcpyDeviceToDevice;
    return hipMemcpyAsync(dst, src, bytes, kind, s);
  }
  static const char* errorString(Error e) { return hipGetErrorString(e); }
};

}  // namespace

std::unique_ptr<RawBaseline> make_roc_baseline() {
  return std::make_unique<VendorBaseline<HipCalls>>();
}

}  // namespace devmem::app

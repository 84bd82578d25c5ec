// The CUDA runtime's raw baseline: cudaMemcpyAsync timed with cudaEvents, cudaMalloc + cudaFree.
#include "raw_baseline_vendor.hpp"

#include <cuda_runtime_api.h>

namespace devmem::app {
namespace {

struct CudaCalls {
  using Error = cudaError_t;
  using Stream = cudaStream_t;
  using Event = cudaEvent_t;
  static constexpr Error kSuccess = cudaSuccess;
  static constexpr std::string_view kCopyCall = "cudaMemcpyAsync";
  static constexpr std::string_view kAllocCall = "cudaMalloc+cudaFree";
  static constexpr std::string_view kPrefix = "cuda";

  static Error malloc(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
  static Error free(void* p) { return cudaFree(p); }
  static Error hostAlloc(void** p, std::size_t bytes, bool mapped) {
    return cudaHostAlloc(p, bytes, mapped ? cudaHostAllocMapped : cudaHostAllocDefault);
  }
  static Error hostFree(void* p) { return cudaFreeHost(p); }
  static Error streamCreate(Stream* s) { return cudaStreamCreate(s); }
  static Error streamDestroy(Stream s) { return cudaStreamDestroy(s); }
  static Error streamSynchronize(Stream s) { return cudaStreamSynchronize(s); }
  static Error eventCreate(Event* e) { return cudaEventCreate(e); }
  static Error eventDestroy(Event e) { return cudaEventDestroy(e); }
  static Error eventRecord(Event e, Stream s) { return cudaEventRecord(e, s); }
  static Error eventSynchronize(Event e) { return cudaEventSynchronize(e); }
  static Error eventElapsedTime(float* ms, Event a, Event b) {
    return cudaEventElapsedTime(ms, a, b);
  }
  static Error memsetAsync(void* p, int value, std::size_t bytes, Stream s) {
    return cudaMemsetAsync(p, value, bytes, s);
  }
  static Error memcpyAsync(void* dst, const void* src, std::size_t bytes, Direction direction,
                           Stream s) {
    const cudaMemcpyKind kind = direction == Direction::HostToDevice   ? cudaMemcpyHostToDevice
                                : direction == Direction::DeviceToHost ? cudaMemcpyDeviceToHost
                                                                       : cudaMemcpyDeviceToDevice;
    return cudaMemcpyAsync(dst, src, bytes, kind, s);
  }
  static const char* errorString(Error e) { return cudaGetErrorString(e); }
};

}  // namespace

std::unique_ptr<RawBaseline> make_cuda_baseline() {
  return std::make_unique<VendorBaseline<CudaCalls>>();
}

}  // namespace devmem::app

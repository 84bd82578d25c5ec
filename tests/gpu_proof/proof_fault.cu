// The GPU proof's fault step (scripts/gpu-proof.sh): a kernel writes far outside its allocation on
// a devmem stream; the next synchronize must throw devmem::BackendError (CUDA's illegal address is
// a sticky error: the context is lost). The program prints what it saw on stdout and returns 0 when
// the error surfaced as BackendError; the proof runs it in a child process with a timeout and
// counts the lines the process writes to stderr on its way out (the goal is at most one). Exit
// codes: 0 the fault surfaced as BackendError, 1 it did not, 77 no device.
#include <devmem/devmem.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>

namespace {

__global__ void write_far_out_of_bounds(int* data) {
  // 1 TiB past the allocation: no allocation of this process is there.
  data[std::int64_t{1} << 38] = 42;
}

}  // namespace

int main() {
  try {
    const devmem::Stream stream = devmem::stream();
    const devmem::DeviceArray array = devmem::device_array<int>({256}, devmem::Order::C, stream);
    stream.synchronize();
    auto* const native = static_cast<cudaStream_t>(stream.native_handle());
    write_far_out_of_bounds<<<1, 1, 0, native>>>(static_cast<int*>(array.data()));
    try {
      stream.synchronize();
    } catch (const devmem::BackendError& e) {
      std::printf("proof_fault: BackendError at the next synchronize: %s\n", e.what());
      return 0;
    }
    std::printf("proof_fault: the out-of-bounds kernel raised no error at synchronize\n");
    return 1;
  } catch (const devmem::NoDevice& e) {
    std::printf("proof_fault: no device: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    std::printf("proof_fault: unexpected exception before the fault was seen: %s\n", e.what());
    return 1;
  }
}

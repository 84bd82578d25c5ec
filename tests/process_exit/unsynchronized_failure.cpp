// A kernel that fails on a stream nobody synchronizes (issue 34): the program drops the stream and
// returns 0. On a GPU the failure would reach the program from the stream's next synchronize,
// which never comes; the host backend reports it when the stream is destroyed, on stderr, in one
// sentence that names the stream, the kernel and its error and says that no synchronize reported
// it (CTest checks the line). The program's exit status stays its own (docs/errors.md).
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cstdio>
#include <exception>

namespace {

DEVMEM_KERNEL void write_past_end(devmem::ArrayView<int, 1> x) {
  x[x.shape(0) + devmem::global_id()] = 1;
}

}  // namespace

int main() {
  try {
    const devmem::DeviceArray x = devmem::device_array<int>({4});
    {
      const devmem::Stream s = devmem::stream();
      devmem::launch<write_past_end>({1, 1, s}, x);
      // No s.synchronize(): the stream goes here, with its failure.
    }
    std::puts("unsynchronized_failure: stream dropped");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unsynchronized_failure: unexpected exception: %s\n", e.what());
    return 1;
  }
}

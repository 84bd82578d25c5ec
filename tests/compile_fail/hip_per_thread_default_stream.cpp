// Must not compile with a HIP that has no hipStreamLegacy (Debian's HIP 5.2) under
// -fgpu-default-stream=per-thread: a launch on devmem's default stream would go to the per-thread
// stream and race devmem's work on the legacy stream (first review, finding 16). With ROCm 6 it
// compiles and launches on hipStreamLegacy.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void fill(devmem::ArrayView<float, 1> x) {
  x[0] = 1.0f;
}

void use(const devmem::DeviceArray& d) {
  devmem::launch({1, 1}, fill, d);
}

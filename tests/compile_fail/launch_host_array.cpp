// Must not compile: host memory for an ArrayView parameter.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void scale(int, float, devmem::ArrayView<float, 1>) {}

void use(const devmem::HostArray& host) {
  devmem::launch({1, 32}, scale, 1, 2.0f, host);
}

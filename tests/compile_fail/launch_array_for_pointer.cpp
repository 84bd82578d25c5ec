// Must not compile: a DeviceArray for a raw pointer parameter.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void fill(float*, float) {}

void use(const devmem::DeviceArray& d) {
  devmem::launch({1, 32}, fill, d, 1.0f);
}

// Must not compile: a view of rank 1 for a parameter of rank 2.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void tile(int, devmem::ArrayView<float, 2>) {}

void use(const devmem::DeviceArray& d) {
  devmem::launch({1, 32}, tile, 0, d.view<float, 1>());
}

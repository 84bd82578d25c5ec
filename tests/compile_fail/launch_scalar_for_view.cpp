// Must not compile: a number for an ArrayView parameter.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void scale(devmem::ArrayView<float, 1>, float) {}

void use() {
  devmem::launch({1, 32}, scale, 1.0f, 2.0f);
}

// Must not compile: a double for a float parameter, rounded without a warning otherwise.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void scale(devmem::ArrayView<float, 1> x, float factor) {
  if (devmem::grid<1>() < x.shape(0)) x[devmem::grid<1>()] *= factor;
}

void use(const devmem::DeviceArray& x) {
  devmem::launch({1, 32}, scale, x, 2.0);
}

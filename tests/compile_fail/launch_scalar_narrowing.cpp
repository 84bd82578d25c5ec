// Must not compile: a std::int64_t for an int parameter (issue 34, d6): 2^32 + 4 would arrive as 4.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cstdint>

DEVMEM_KERNEL void k(devmem::ArrayView<int, 1> out, int n) {
  if (devmem::grid<1>() == 0) out[0] = n;
}

void use(const devmem::DeviceArray& out) {
  const std::int64_t n = (std::int64_t{1} << 32) + 4;
  devmem::launch({1, 1}, k, out, n);
}

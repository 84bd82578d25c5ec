// Must not compile: compare-and-swap on a float element (Numba's cas takes integers only).
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void swap_first(devmem::ArrayView<float, 1> values) {
  devmem::atomic_cas(values, 0, 0.0f, 1.0f);
}

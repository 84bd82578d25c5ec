// Must not compile: an atomic add of a value that is not a number (a pointer) to a shared int.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void count(devmem::ArrayView<int, 1> out) {
  DEVMEM_SHARED_ARRAY(counts, int, 32);
  devmem::atomic_add(counts, devmem::thread_idx().x, out.data());
}

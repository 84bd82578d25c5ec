// Must not compile: an atomic add on a view of const elements, which the kernel may only read.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void count(devmem::ArrayView<const int, 2> counts) {
  devmem::atomic_add(counts, {0, devmem::thread_idx().x}, 1);
}

// Must not compile: an atomic add on a view of int16. CUDA and HIP have no 16-bit atomics and
// Numba allows none; the error is one sentence naming the element types that are allowed, not the
// list of every atomic_add overload.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cstdint>

DEVMEM_KERNEL void count(devmem::ArrayView<std::int16_t, 1> counts) {
  devmem::atomic_add(counts, devmem::thread_idx().x, std::int16_t{1});
}

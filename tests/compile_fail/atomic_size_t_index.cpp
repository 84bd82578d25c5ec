// Compiles with every compiler (a PASS test run with g++ and with clang++): the braced index of
// the atomics takes size_t (and mixed) integers. With a braced list of std::int64_t it did not
// under clang, which refuses the narrowing of a size_t variable.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cstddef>

DEVMEM_KERNEL void count(devmem::ArrayView<int, 2> global, devmem::ArrayView<unsigned, 3> cube) {
  DEVMEM_SHARED_ARRAY(tile, int, 4, 8);
  const std::size_t i = devmem::thread_idx().x % 4;
  const std::size_t j = devmem::thread_idx().y % 8;
  devmem::atomic_add(tile, {i, j}, 1);
  devmem::atomic_max(tile, {i, 3}, 2);
  devmem::atomic_cas(tile, {i, j}, 0, 1);
  devmem::atomic_add(tile.row(i), j, 1);
  devmem::atomic_add(global, {i, j}, tile(i, j));
  devmem::atomic_sub(global.row(i), j, 1);
  devmem::atomic_exchange(cube, {i, j, 2u}, 7u);
  const auto dyn = devmem::dynamic_shared_array<float>(4, 8);
  devmem::atomic_min(dyn, {i, j}, 0.5f);
}

void use(const devmem::DeviceArray& global, const devmem::DeviceArray& cube) {
  devmem::launch({1, devmem::Dim3(4, 8), 4 * 8 * sizeof(float)}, count, global, cube);
}

// Must not compile: a static shared array of 64 KiB (issue 34). nvcc refuses a kernel with more
// than 48 KiB of static __shared__ memory, so the simulator build refuses it too, naming the size
// and pointing to dynamic shared memory, instead of failing only at launch.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

DEVMEM_KERNEL void big_tile(devmem::ArrayView<float, 1> out) {
  DEVMEM_SHARED_ARRAY(tile, float, 128, 128);  // 65536 bytes
  tile(devmem::thread_idx().x, 0) = 1.0f;
  devmem::syncthreads();
  out[0] = tile(0, 0);
}

void use(const devmem::DeviceArray& out) {
  devmem::launch({1, 32}, big_tile, out);
}

// Compiles: the uses the other files get wrong, done right (checks the harness and its flags).
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <vector>

DEVMEM_KERNEL void scale(int n, float factor, devmem::ArrayView<float, 1> x) {
  const std::int64_t i = devmem::global_id();
  if (i < n) x[i] *= factor;
}
// Widening scalar conversions are accepted (only narrowing ones are refused).
DEVMEM_KERNEL void widen(std::int64_t n, double factor, unsigned long long bits) {
  static_cast<void>(n + static_cast<std::int64_t>(factor) + static_cast<std::int64_t>(bits));
}
// A static shared array of exactly 48 KiB, the most CUDA allows (shared_array_over_48k.cpp: one
// more row does not compile).
DEVMEM_KERNEL void full_tile(devmem::ArrayView<float, 1> out) {
  DEVMEM_SHARED_ARRAY(tile, float, 96, 128);  // 49152 bytes
  tile(0, devmem::thread_idx().x) = 1.0f;
  devmem::syncthreads();
  out[0] = tile(0, 0);
}
DEVMEM_KERNEL void read(devmem::ArrayView<const float, 1> x, float* out) {
  *out = x[0];
}

void use(const devmem::DeviceArray& d, const devmem::MappedArray& m, const devmem::Stream& s,
         std::int64_t n) {
  devmem::launch({(n + 31) / 32, 32}, scale, 1, 2.0f, d);
  devmem::launch({(n + 31) / 32, 32, s}, scale, 1, 2.0f, m);
  devmem::launch({1, 1, s, 16}, read, d.view<float, 1>(), nullptr);
  devmem::launch({1, 1}, widen, 3, 2.0f, 7u);
  devmem::launch({1, 32}, full_tile, d);
  std::vector<float> v(4);
  const std::array<float, 4> a{};
  d.copy_to_device(v);
  d.copy_to_device(a);
  d.copy_to_device(std::span<float>(v));
  d.copy_to_host(v);
  d.copy_to_host(std::span<float>(v));
  (void)devmem::to_device(a);
}

// A consumer's use of the Numba pieces of the kernel layer, compiled like scale.cu (by nvcc in the
// compile-only check): random numbers (<devmem/kernel_random.hpp>), the reduction
// (<devmem/kernel_reduce.hpp>) and syncwarp.
#include "numba_pieces.hpp"

#include <devmem/kernel_random.hpp>
#include <devmem/kernel_reduce.hpp>

#include <cstdint>
#include <functional>

namespace {

/// Each thread draws one uniform and one normal number of each precision from its own state;
/// lane pairs exchange their float32 uniforms through shared memory under syncwarp.
DEVMEM_KERNEL void draw_numbers(devmem::Xoroshiro128pStates states,
                                devmem::ArrayView<double, 1> out) {
  DEVMEM_SHARED_ARRAY(uniforms, float, 64);
  const std::int64_t i = devmem::global_id();
  const unsigned t = devmem::thread_idx().x;
  uniforms[t] = devmem::xoroshiro128p_uniform_float32(states, i);
  devmem::syncwarp();
  const double mixed = static_cast<double>(uniforms[t ^ 1u]) +
                       devmem::xoroshiro128p_uniform_float64(states, i) +
                       static_cast<double>(devmem::xoroshiro128p_normal_float32(states, i)) +
                       devmem::xoroshiro128p_normal_float64(states, i);
  out[i] = mixed;
}

}  // namespace

double draw_and_sum(std::int64_t blocks, std::uint64_t seed) {
  const std::int64_t n = blocks * 64;
  const devmem::Stream stream = devmem::stream();
  const devmem::DeviceArray states =
      devmem::create_xoroshiro128p_states(n, seed, {.stream = stream});
  const devmem::DeviceArray out = devmem::device_array<double>({n}, stream);
  devmem::launch({blocks, 64, stream}, draw_numbers, states, out);
  return devmem::reduce<double>(out, std::plus<>{}, {.stream = stream});
}

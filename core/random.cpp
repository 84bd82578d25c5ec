// The host side of <devmem/kernel_random.hpp>: Numba's xoroshiro128+ states, computed on the host
// and copied to a device array, as numba.cuda.random does (initialisation on the CPU is faster
// than a kernel for it).
#include <devmem/error.hpp>
#include <devmem/kernel_random.hpp>
#include <devmem/memory.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <span>
#include <vector>

namespace devmem {
namespace {

/// The SplitMix64 output for `seed`: the initial s0 and s1 of Numba's first generator.
std::uint64_t splitmix64(std::uint64_t seed) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15u;
  z = (z ^ (z >> 30u)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27u)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31u);
}

/// Advances `state` by 2^64 steps: the xoroshiro128+ jump polynomial, applied bit by bit (the
/// XOR of the states at the steps whose bit is set).
void jump(Xoroshiro128pState& state) {
  constexpr std::uint64_t kJump[2] = {0xbeac0467eba5facbu, 0xd86b048b86aa9922u};
  Xoroshiro128pState sum{0, 0};
  for (const std::uint64_t word : kJump) {
    for (unsigned bit = 0; bit != 64u; ++bit) {
      if ((word & (std::uint64_t{1} << bit)) != 0) {
        sum.s0 ^= state.s0;
        sum.s1 ^= state.s1;
      }
      static_cast<void>(detail::xoroshiro::next(state));
    }
  }
  state = sum;
}

void check_states_array(const DeviceArray& states) {
  if (states.ndim() != 1 || states.dtype() != dtype_of<Xoroshiro128pState>()) {
    throw InvalidArgument(fmt::format(
        "init_xoroshiro128p_states: the states array has dtype {} and {} dimensions; it must be "
        "a 1-d array of dtype_of<devmem::Xoroshiro128pState>() (16-byte records), as "
        "create_xoroshiro128p_states makes",
        states.dtype().name(), states.ndim()));
  }
}

}  // namespace

void init_xoroshiro128p_states_host(std::span<Xoroshiro128pState> states, std::uint64_t seed,
                                    std::uint64_t subsequence_start) {
  if (states.empty()) return;
  const std::uint64_t z = splitmix64(seed);
  states[0] = Xoroshiro128pState{z, z};
  for (std::uint64_t i = 0; i != subsequence_start; ++i) jump(states[0]);
  for (std::size_t i = 1; i < states.size(); ++i) {
    states[i] = states[i - 1];
    jump(states[i]);
  }
}

void init_xoroshiro128p_states(const DeviceArray& states, std::uint64_t seed,
                               const Xoroshiro128pOptions& options) {
  check_states_array(states);
  std::vector<Xoroshiro128pState> host(static_cast<std::size_t>(states.size()));
  init_xoroshiro128p_states_host(host, seed, options.subsequence_start);
  if (!host.empty())
    states.copy_to_device(std::span<const Xoroshiro128pState>(host), options.stream);
}

DeviceArray create_xoroshiro128p_states(std::int64_t n, std::uint64_t seed,
                                        const Xoroshiro128pOptions& options) {
  if (n < 0) {
    throw InvalidArgument(
        fmt::format("create_xoroshiro128p_states: n = {} states; it must be 0 or more", n));
  }
  DeviceArray states = device_array<Xoroshiro128pState>({n}, Order::C, options.stream);
  init_xoroshiro128p_states(states, seed, options);
  return states;
}

}  // namespace devmem

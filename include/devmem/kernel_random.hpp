// Random numbers in kernels, as numba.cuda.random has them: one xoroshiro128+ generator per thread,
// its state in a device array created on the host, and uniform and normal draws in device code.
//
//   #include <devmem/kernel_random.hpp>
//
//   DEVMEM_KERNEL void fill(devmem::ArrayView<devmem::Xoroshiro128pState, 1> states,
//                           devmem::ArrayView<float, 1> out) {
//     const std::int64_t i = devmem::global_id();
//     if (i < out.shape(0)) out[i] = devmem::xoroshiro128p_uniform_float32(states, i);
//   }
//   auto states = devmem::create_xoroshiro128p_states(n, /*seed=*/42);   // Numba's call
//   devmem::launch({(n + 255) / 256, 256}, fill, states, out);
//
// The sequence is Numba's, bit for bit: the same seed and subsequence_start give the same states
// (SplitMix64 of the seed, then one 2^64-step jump per state), and the uniform draws of a state are
// the same numbers Numba draws from it. The normal draws follow Numba's Box-Muller transform
// operation for operation (in float32 for normal_float32; for normal_float64 the logarithm of a
// float32 uniform is taken in float32, as Numba's typing of math.log does, and the rest in
// float64), so they equal Numba's on the same machine's math library and are within a few ulp of
// them elsewhere (a GPU's logf and cosf are not glibc's).
//
// The device functions are callable from kernels on every backend (CUDA, ROC, the host simulator)
// and from host code on a view of host memory. A state is advanced in the device array itself, so
// a later launch continues each generator's sequence; two threads must not draw from one state at
// the same time (Numba's rule too: one state per thread).
#pragma once

#include <devmem/kernel.hpp>

#include <cmath>
#include <cstdint>
#include <span>

namespace devmem {

/// One xoroshiro128+ generator's state: Numba's xoroshiro128p_dtype, the aligned record
/// {s0: uint64, s1: uint64} (16 bytes). A device array of states has the record dtype
/// dtype_of<Xoroshiro128pState>() and one dimension.
struct Xoroshiro128pState {
  std::uint64_t s0;
  std::uint64_t s1;
};

/// What kernels take for an array of states (Numba's 1-d array of xoroshiro128p_dtype).
using Xoroshiro128pStates = ArrayView<Xoroshiro128pState, 1>;

/// How states are made besides the seed (Numba's keyword arguments).
struct Xoroshiro128pOptions {
  /// The first state is advanced by subsequence_start * 2^64 steps (one jump each, 128 steps of
  /// the generator per jump on the host); the other states follow it 2^64 steps apart.
  std::uint64_t subsequence_start = 0;
  /// The stream of the allocation and of the copy to the device (unspecified: the default
  /// stream; for init_xoroshiro128p_states, the array's stream).
  Stream stream = {};
};

/// Fills `states` (host memory, any number of states) with Numba's initial states for `seed`:
/// states[0] is SplitMix64 of the seed, jumped subsequence_start times; states[i] is states[i-1]
/// jumped once (2^64 steps), so generators never overlap within 2^64 draws each (Numba's
/// init_xoroshiro128p_states_cpu). Runs on the calling thread; no device involved. Thread safety:
/// concurrent calls on different spans are independent.
DEVMEM_API void init_xoroshiro128p_states_host(std::span<Xoroshiro128pState> states,
                                               std::uint64_t seed,
                                               std::uint64_t subsequence_start = 0);

/// Numba's init_xoroshiro128p_states(states, seed, subsequence_start, stream): computes the states
/// on the host (init_xoroshiro128p_states_host) and copies them into the device array `states` on
/// options.stream (unspecified: the array's stream). Returns once the host copy of the states has
/// been read; the device side is in flight on a non-default stream (kernels launched on that
/// stream after this see the states; on another stream, order them with an event), complete on
/// the default stream. Throws InvalidArgument when `states` is not a 1-d array of dtype
/// dtype_of<Xoroshiro128pState>() (naming its dtype and ndim), and what copy_to_device throws.
/// Thread safety: as DeviceArray::copy_to_device.
DEVMEM_API void init_xoroshiro128p_states(const DeviceArray& states, std::uint64_t seed,
                                          const Xoroshiro128pOptions& options = {});

/// Numba's create_xoroshiro128p_states(n, seed, subsequence_start, stream): a new device array of
/// `n` states, filled as by init_xoroshiro128p_states (returns when init does), on the current
/// device. Throws InvalidArgument for a negative n (naming it), OutOfMemory, BackendError.
/// Thread-safe.
[[nodiscard]] DEVMEM_API DeviceArray create_xoroshiro128p_states(
    std::int64_t n, std::uint64_t seed, const Xoroshiro128pOptions& options = {});

namespace detail::xoroshiro {

/// x rotated left by k bits (0 < k < 64).
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr std::uint64_t rotl(std::uint64_t x, unsigned k) {
  return (x << k) | (x >> (64u - k));
}

/// The generator's output for `state`, which is advanced one step (xoroshiro128+ with the
/// rotations 55, 14 and 36 that Numba uses).
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr std::uint64_t next(Xoroshiro128pState& state) {
  const std::uint64_t s0 = state.s0;
  std::uint64_t s1 = state.s1;
  const std::uint64_t result = s0 + s1;
  s1 ^= s0;
  state.s0 = rotl(s0, 55u) ^ s1 ^ (s1 << 14u);
  state.s1 = rotl(s1, 36u);
  return result;
}

/// The top 53 bits of x as a double in [0, 1) (exact).
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr double unit_float64(std::uint64_t x) {
  return static_cast<double>(x >> 11u) * (1.0 / static_cast<double>(std::uint64_t{1} << 53u));
}

/// unit_float64 rounded to float (to nearest: 1.0f for the largest values, as in Numba).
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr float unit_float32(std::uint64_t x) {
  return static_cast<float>(unit_float64(x));
}

/// float32(2 pi) and float64(2 pi), Numba's TWO_PI_FLOAT32 and TWO_PI_FLOAT64.
inline constexpr float kTwoPiFloat32 = 0x1.921fb6p+2f;
inline constexpr double kTwoPiFloat64 = 0x1.921fb54442d18p+2;

}  // namespace detail::xoroshiro

/// The next raw 64-bit output of generator `index` of `states`, which is advanced one step
/// (Numba's xoroshiro128p_next). An index outside the array fails the launch in the simulator
/// (ArrayView's bounds check); on a GPU it is undefined, as any out-of-bounds access.
[[nodiscard]] DEVMEM_HOST_DEVICE inline std::uint64_t xoroshiro128p_next(
    const Xoroshiro128pStates& states, std::int64_t index) {
  return detail::xoroshiro::next(states[index]);
}

/// A float in [0, 1] from generator `index`, advanced one step: the top 53 bits of its output as
/// a double, rounded to float (Numba's xoroshiro128p_uniform_float32; like Numba's, the rounding
/// gives 1.0f for about one output in 2^25).
[[nodiscard]] DEVMEM_HOST_DEVICE inline float xoroshiro128p_uniform_float32(
    const Xoroshiro128pStates& states, std::int64_t index) {
  return detail::xoroshiro::unit_float32(xoroshiro128p_next(states, index));
}

/// A double in [0, 1) from generator `index`, advanced one step: the top 53 bits of its output
/// times 2^-53 (Numba's xoroshiro128p_uniform_float64).
[[nodiscard]] DEVMEM_HOST_DEVICE inline double xoroshiro128p_uniform_float64(
    const Xoroshiro128pStates& states, std::int64_t index) {
  return detail::xoroshiro::unit_float64(xoroshiro128p_next(states, index));
}

/// A normally distributed float (mean 0, deviation 1) from generator `index`, advanced two
/// steps: Box-Muller of two uniform_float32 draws u1, u2, all in float:
/// sqrt(-2 log(u1)) cos(2 pi u2), the second normal value discarded (Numba's
/// xoroshiro128p_normal_float32). u1 = 0 gives an infinity, as in Numba.
[[nodiscard]] DEVMEM_HOST_DEVICE inline float xoroshiro128p_normal_float32(
    const Xoroshiro128pStates& states, std::int64_t index) {
  const float u1 = xoroshiro128p_uniform_float32(states, index);
  const float u2 = xoroshiro128p_uniform_float32(states, index);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(detail::xoroshiro::kTwoPiFloat32 * u2);
}

/// A normally distributed double from generator `index`, advanced two steps: Numba's
/// xoroshiro128p_normal_float64, which draws two uniform_float32 values u1, u2 and computes
/// sqrt(-2.0 * log(u1)) * cos(2 pi * u2) in double, except log(u1), which Numba types (and so
/// computes) as float32 for a float32 argument: the result carries the float32 logarithm's
/// rounding, kept here so that the values are Numba's.
[[nodiscard]] DEVMEM_HOST_DEVICE inline double xoroshiro128p_normal_float64(
    const Xoroshiro128pStates& states, std::int64_t index) {
  const float u1 = xoroshiro128p_uniform_float32(states, index);
  const float u2 = xoroshiro128p_uniform_float32(states, index);
  const auto log_u1 = static_cast<double>(std::log(u1));
  return std::sqrt(-2.0 * log_u1) *
         std::cos(detail::xoroshiro::kTwoPiFloat64 * static_cast<double>(u2));
}

}  // namespace devmem

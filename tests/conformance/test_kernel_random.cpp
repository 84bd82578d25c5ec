// Random numbers in kernels (<devmem/kernel_random.hpp>) against numba.cuda.random itself: the
// expected states and draws in numba_random_expected.hpp were computed by Numba 0.56's own
// functions (numba_random_expected.py regenerates them). Compiled like test_kernels.cpp: by the
// host compiler for conformance_host (the simulator), by nvcc for conformance_cuda
// (test_kernel_random.cu includes it) and by hipcc, or against HIP-CPU, for conformance_roc.
#include "numba_random_expected.hpp"
#include "support.hpp"

#include <devmem/kernel_random.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;
using devmem::Xoroshiro128pState;
namespace expected = numba_random_expected;

namespace {

enum class Draw { UniformFloat32, UniformFloat64, NormalFloat32, NormalFloat64 };

// Thread i draws `count` numbers from state i into out(i, first ...), the way a Numba kernel
// calls xoroshiro128p_<kind>(states, i) in a loop.
template <class T, Draw D>
DEVMEM_KERNEL void draw(devmem::Xoroshiro128pStates states, ArrayView<T, 2> out, int first,
                        int count) {
  const std::int64_t i = devmem::global_id();
  if (i >= states.shape(0)) return;
  for (int k = first; k < first + count; ++k) {
    if constexpr (D == Draw::UniformFloat32) {
      out(i, k) = devmem::xoroshiro128p_uniform_float32(states, i);
    } else if constexpr (D == Draw::UniformFloat64) {
      out(i, k) = devmem::xoroshiro128p_uniform_float64(states, i);
    } else if constexpr (D == Draw::NormalFloat32) {
      out(i, k) = devmem::xoroshiro128p_normal_float32(states, i);
    } else {
      out(i, k) = devmem::xoroshiro128p_normal_float64(states, i);
    }
  }
}

// Every thread draws raw outputs from its own state, many threads per block: the states of a large
// array are independent generators, each advanced in device memory.
DEVMEM_KERNEL void draw_raw(devmem::Xoroshiro128pStates states, ArrayView<std::uint64_t, 1> out) {
  const std::int64_t i = devmem::global_id();
  if (i < states.shape(0)) out[i] = devmem::xoroshiro128p_next(states, i);
}

/// The draws of kind D for Numba's case (seed kDrawSeed, kDrawStates states), in two launches of
/// half the draws each on `stream`: the second continues each generator where the first stopped.
template <class T, Draw D>
std::vector<T> draws_in_two_launches(const devmem::Stream& stream) {
  const DeviceArray states = devmem::create_xoroshiro128p_states(
      expected::kDrawStates, expected::kDrawSeed, {.subsequence_start = 0, .stream = stream});
  const DeviceArray out =
      devmem::device_array<T>({expected::kDrawStates, expected::kDraws}, stream);
  constexpr int kHalf = expected::kDraws / 2;
  devmem::launch({1, 32, stream}, draw<T, D>, states, out, 0, kHalf);
  devmem::launch({1, 32, stream}, draw<T, D>, states, out, kHalf, expected::kDraws - kHalf);
  return out.to_vector<T>(stream);
}

/// How many representable values lie between a and b (0: the same value).
template <class T>
std::uint64_t ulp_distance(T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  // Map the sign-magnitude bit patterns onto one ordered integer line.
  const auto ordered = [](T x) {
    const auto bits = std::bit_cast<Bits>(x);
    return bits < 0 ? static_cast<std::int64_t>(std::numeric_limits<Bits>::min() - bits)
                    : static_cast<std::int64_t>(bits);
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

}  // namespace

TEST_CASE("random: create_xoroshiro128p_states gives Numba's states", "[kernels][random]") {
  const devmem::Stream s = devmem::stream();
  for (const expected::StateCase& c : expected::kStateCases) {
    CAPTURE(c.seed, c.n, c.subsequence_start);
    const DeviceArray states = devmem::create_xoroshiro128p_states(
        c.n, c.seed, {.subsequence_start = c.subsequence_start, .stream = s});
    CHECK(states.ndim() == 1);
    CHECK(states.shape()[0] == c.n);
    CHECK(states.dtype() == devmem::dtype_of<Xoroshiro128pState>());
    CHECK(states.itemsize() == 16);
    const std::vector<Xoroshiro128pState> got = states.to_vector<Xoroshiro128pState>(s);
    std::vector<Xoroshiro128pState> host(static_cast<std::size_t>(c.n));
    devmem::init_xoroshiro128p_states_host(host, c.seed, c.subsequence_start);
    for (std::size_t i = 0; i != got.size(); ++i) {
      CAPTURE(i);
      CHECK(got[i].s0 == c.s[i][0]);
      CHECK(got[i].s1 == c.s[i][1]);
      CHECK(host[i].s0 == c.s[i][0]);
      CHECK(host[i].s1 == c.s[i][1]);
    }
  }
}

TEST_CASE("random: init_xoroshiro128p_states refills an array, on the array's stream",
          "[kernels][random]") {
  const devmem::Stream s = devmem::stream();
  const expected::StateCase& c = expected::kStateCases[2];
  const DeviceArray states = devmem::device_array<Xoroshiro128pState>({c.n}, s);
  devmem::init_xoroshiro128p_states(states, c.seed, {.subsequence_start = c.subsequence_start});
  const std::vector<Xoroshiro128pState> got = states.to_vector<Xoroshiro128pState>(s);
  for (std::size_t i = 0; i != got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].s0 == c.s[i][0]);
    CHECK(got[i].s1 == c.s[i][1]);
  }
  SECTION("no states") {
    const DeviceArray none = devmem::create_xoroshiro128p_states(0, 1);
    CHECK(none.size() == 0);
    CHECK(none.dtype() == devmem::dtype_of<Xoroshiro128pState>());
  }
}

TEST_CASE("random: uniform draws are Numba's, bit for bit", "[kernels][random]") {
  const devmem::Stream s = devmem::stream();
  const std::vector<float> f32 = draws_in_two_launches<float, Draw::UniformFloat32>(s);
  const std::vector<double> f64 = draws_in_two_launches<double, Draw::UniformFloat64>(s);
  for (std::int64_t i = 0; i != expected::kDrawStates; ++i) {
    for (int k = 0; k != expected::kDraws; ++k) {
      CAPTURE(i, k);
      const auto at = static_cast<std::size_t>(i * expected::kDraws + k);
      CHECK(std::bit_cast<std::uint32_t>(f32[at]) ==
            std::bit_cast<std::uint32_t>(expected::kUniformFloat32[i][k]));
      CHECK(std::bit_cast<std::uint64_t>(f64[at]) ==
            std::bit_cast<std::uint64_t>(expected::kUniformFloat64[i][k]));
      CHECK(f32[at] >= 0.0f);
      CHECK(f32[at] <= 1.0f);
      CHECK(f64[at] >= 0.0);
      CHECK(f64[at] < 1.0);
    }
  }
}

TEST_CASE("random: normal draws are within 2 ulp of Numba's", "[kernels][random]") {
  const devmem::Stream s = devmem::stream();
  const std::vector<float> f32 = draws_in_two_launches<float, Draw::NormalFloat32>(s);
  const std::vector<double> f64 = draws_in_two_launches<double, Draw::NormalFloat64>(s);
  for (std::int64_t i = 0; i != expected::kDrawStates; ++i) {
    for (int k = 0; k != expected::kDraws; ++k) {
      CAPTURE(i, k);
      const auto at = static_cast<std::size_t>(i * expected::kDraws + k);
      const float want32 = expected::kNormalFloat32[i][k];
      const double want64 = expected::kNormalFloat64[i][k];
      CAPTURE(f32[at], want32, f64[at], want64);
      if (on_host_backend()) {
        // The simulator calls glibc's logf, cosf and sqrt, as Numba's CPU code does.
        CHECK(ulp_distance(f32[at], want32) <= 2);
        CHECK(ulp_distance(f64[at], want64) <= 2);
      } else {
        // A GPU's logf and cosf are its own (CUDA: up to 1 and 2 ulp from the correctly rounded
        // value, glibc's under 1): a few float ulp apart; normal_float64 takes Numba's logarithm
        // in float32 (see kernel_random.hpp), so it carries that float-sized difference too.
        CHECK(ulp_distance(f32[at], want32) <= 4);
        CHECK(std::abs(f64[at] - want64) <= 0x1p-21 * std::abs(want64) + 0x1p-40);
      }
    }
  }
}

TEST_CASE("random: many generators in many blocks advance independently", "[kernels][random]") {
  const devmem::Stream s = devmem::stream();
  constexpr std::int64_t kStates = 1000;
  constexpr std::uint64_t kSeed = 0x5eed;
  const DeviceArray states = devmem::create_xoroshiro128p_states(kStates, kSeed, {.stream = s});
  const DeviceArray out = devmem::device_array<std::uint64_t>({kStates}, s);
  std::vector<Xoroshiro128pState> host(static_cast<std::size_t>(kStates));
  devmem::init_xoroshiro128p_states_host(host, kSeed);
  const devmem::Xoroshiro128pStates host_states(host.data(), &kStates,
                                                std::array<std::int64_t, 1>{16}.data());
  for (int round = 0; round != 3; ++round) {
    CAPTURE(round);
    devmem::launch({4, 256, s}, draw_raw, states, out);
    const std::vector<std::uint64_t> got = out.to_vector<std::uint64_t>(s);
    for (std::int64_t i = 0; i != kStates; ++i) {
      // The same function on the host, over a view of host memory.
      const std::uint64_t want = devmem::xoroshiro128p_next(host_states, i);
      if (got[static_cast<std::size_t>(i)] != want) {
        FAIL_CHECK("state " << i << ": " << got[static_cast<std::size_t>(i)] << " != " << want);
        break;
      }
    }
  }
  const std::vector<Xoroshiro128pState> after = states.to_vector<Xoroshiro128pState>(s);
  CHECK(after.back().s0 == host.back().s0);
  CHECK(after.back().s1 == host.back().s1);
}

TEST_CASE("random: bad input names the values", "[kernels][random]") {
  CHECK_THROWS_MATCHES(devmem::create_xoroshiro128p_states(-3, 1), devmem::InvalidArgument,
                       MessageStartsWith("create_xoroshiro128p_states: n = -3 states"));
  const DeviceArray floats = devmem::device_array<float>({8});
  CHECK_THROWS_MATCHES(devmem::init_xoroshiro128p_states(floats, 1), devmem::InvalidArgument,
                       MessageStartsWith("init_xoroshiro128p_states: the states array has dtype "
                                         "float32 and 1 dimensions"));
  const DeviceArray grid = devmem::device_array<Xoroshiro128pState>({2, 2});
  CHECK_THROWS_MATCHES(devmem::init_xoroshiro128p_states(grid, 1), devmem::InvalidArgument,
                       MessageStartsWith("init_xoroshiro128p_states: the states array has dtype "
                                         "V16 and 2 dimensions"));
}

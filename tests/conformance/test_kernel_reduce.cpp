// devmem::reduce and reduce_into (<devmem/kernel_reduce.hpp>, Numba's cuda.reduce) against
// std::reduce for sizes around the block and grid boundaries of both stages, with sums, maxima
// and minima, an init value, a size, a result array and a stream. Compiled like test_kernels.cpp:
// by the host compiler for conformance_host (the simulator), by nvcc for conformance_cuda
// (test_kernel_reduce.cu includes it) and by hipcc, or against HIP-CPU, for conformance_roc.
#include "support.hpp"

#include <devmem/kernel_reduce.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

using namespace conformance;
using devmem::DeviceArray;

namespace {

struct Max {
  template <class T>
  DEVMEM_HOST_DEVICE T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};

struct Min {
  template <class T>
  DEVMEM_HOST_DEVICE T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};

// Sizes around 256 (one block), 64 * 256 (the first stage's threads) and past them, where every
// thread of the first stage combines several elements; 0 and 1.
constexpr std::int64_t kSizes[] = {0,   1,    2,     5,     31,    255,   256,
                                   257, 1000, 16383, 16384, 16385, 40000, 100003};

/// n values in [-1000, 1000], scattered (a linear congruential sequence), so that a maximum or
/// minimum can be anywhere and sums of them are exact in double and int64.
template <class T>
std::vector<T> values(std::int64_t n) {
  std::vector<T> v(static_cast<std::size_t>(n));
  std::uint32_t x = 12345;
  for (T& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<T>(static_cast<std::int64_t>(x >> 8) % 2001 - 1000);
  }
  return v;
}

}  // namespace

TEST_CASE("reduce: sums, maxima and minima of every size equal std::reduce's",
          "[kernels][reduce]") {
  const devmem::Stream s = devmem::stream();
  for (const std::int64_t n : kSizes) {
    CAPTURE(n);
    const std::vector<std::int64_t> i64 = values<std::int64_t>(n);
    const std::vector<double> f64 = values<double>(n);
    const std::vector<float> f32 = values<float>(n);
    const DeviceArray di64 = devmem::to_device(i64, s);
    const DeviceArray df64 = devmem::to_device(f64, s);
    const DeviceArray df32 = devmem::to_device(f32, s);

    CHECK(devmem::reduce<std::int64_t>(di64, std::plus<>{}, {.stream = s}) ==
          std::reduce(i64.begin(), i64.end(), std::int64_t{0}));
    CHECK(devmem::reduce<std::int64_t>(di64, std::plus<>{}, {.init = 7, .stream = s}) ==
          std::reduce(i64.begin(), i64.end(), std::int64_t{7}));
    CHECK(devmem::reduce<double>(df64, std::plus<>{}, {.init = 0.5, .stream = s}) ==
          std::reduce(f64.begin(), f64.end(), 0.5));
    constexpr float kLowest = std::numeric_limits<float>::lowest();
    CHECK(devmem::reduce<float>(df32, Max{}, {.init = kLowest, .stream = s}) ==
          std::reduce(f32.begin(), f32.end(), kLowest, Max{}));
    CHECK(devmem::reduce<std::int64_t>(di64, Min{}, {.init = 999, .stream = s}) ==
          std::reduce(i64.begin(), i64.end(), std::int64_t{999}, Min{}));
  }
}

TEST_CASE("reduce: init is combined once, also for one element and for none", "[kernels][reduce]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray none = devmem::device_array<int>({0}, s);
  CHECK(devmem::reduce<int>(none, std::plus<>{}, {.stream = s}) == 0);
  CHECK(devmem::reduce<int>(none, std::plus<>{}, {.init = -4, .stream = s}) == -4);
  const DeviceArray one = devmem::to_device(std::vector<int>{41}, s);
  CHECK(devmem::reduce<int>(one, std::plus<>{}, {.init = 1, .stream = s}) == 42);
  CHECK(devmem::reduce<int>(one, Max{}, {.init = 100, .stream = s}) == 100);
  // 100003 ones and init 10: init added once, not once per block or stage.
  const DeviceArray ones = devmem::device_array<int>({100003}, s);
  ones.fill(1, s);
  CHECK(devmem::reduce<int>(ones, std::plus<>{}, {.init = 10, .stream = s}) == 100013);
}

TEST_CASE("reduce: size reduces a prefix, reduce_into writes result[0] on the stream",
          "[kernels][reduce]") {
  const devmem::Stream s = devmem::stream();
  const std::vector<double> host = values<double>(5000);
  const DeviceArray x = devmem::to_device(host, s).bind(s);
  CHECK(devmem::reduce<double>(x, std::plus<>{}, {.size = 300}) ==
        std::reduce(host.begin(), host.begin() + 300, 0.0));
  CHECK(devmem::reduce<double>(x, std::plus<>{}, {.size = 0}) == 0.0);

  const DeviceArray result = devmem::device_array<double>({3}, s);
  result.fill(-1.0, s);
  devmem::reduce_into<double>(x, Max{}, result, {.init = -1e9, .stream = s});
  const std::vector<double> got = result.to_vector<double>(s);
  CHECK(got[0] == *std::max_element(host.begin(), host.end()));
  CHECK(got[1] == -1.0);  // only the first element is written
  devmem::reduce_into<double>(x, Max{}, result, {.init = 3.0, .size = 0, .stream = s});
  CHECK(result.to_vector<double>(s)[0] == 3.0);
}

TEST_CASE("reduce: bad input names the values", "[kernels][reduce]") {
  const DeviceArray x = devmem::device_array<float>({10});
  const DeviceArray matrix = devmem::device_array<float>({2, 5});
  const DeviceArray empty = devmem::device_array<float>({0});
  const DeviceArray ints = devmem::device_array<int>({10});
  CHECK_THROWS_MATCHES(devmem::reduce<float>(matrix, std::plus<>{}), devmem::InvalidArgument,
                       MessageStartsWith("reduce: the array has 2 dimensions; it must be 1-d"));
  CHECK_THROWS_MATCHES(devmem::reduce<float>(ints, std::plus<>{}), devmem::InvalidArgument,
                       MessageStartsWith("reduce: the array has dtype int32, the reduction's "
                                         "type is float32"));
  CHECK_THROWS_MATCHES(devmem::reduce_into<float>(x, std::plus<>{}, empty), devmem::InvalidArgument,
                       MessageStartsWith("reduce: the result has 0 elements; it needs at least 1"));
  CHECK_THROWS_MATCHES(devmem::reduce<float>(x, std::plus<>{}, {.size = 11}),
                       devmem::InvalidArgument,
                       MessageStartsWith("reduce: size = 11 is outside [0, 10]"));
  CHECK_THROWS_MATCHES(devmem::reduce<float>(x, std::plus<>{}, {.size = -1}),
                       devmem::InvalidArgument,
                       MessageStartsWith("reduce: size = -1 is outside [0, 10]"));
}

// Kernel atomics on global and shared memory, grid<N>() / gridsize<N>() and devmem::synchronize()
// (<devmem/kernel_atomic.hpp>), with Numba's meaning on every backend. Compiled like
// test_kernels.cpp: by the host compiler for conformance_host (the simulator, std::atomic_ref), by
// nvcc for conformance_cuda (test_kernel_atomics.cu includes it) and by hipcc, or against HIP-CPU,
// for conformance_roc.
//
// Every test races many threads of several blocks on few elements, so a non-atomic
// implementation loses updates (the simulator runs blocks on different cores) and the exact
// counts, sums and permutations checked here fail.
#include "support.hpp"

#include <devmem/kernel.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;

namespace {

constexpr int kBins = 16;
constexpr unsigned kBlocks = 6;
constexpr unsigned kThreads = 64;
constexpr std::int64_t kThreadCount = std::int64_t{kBlocks} * kThreads;
// A multiplier for 64-bit values beyond 32 bits (a left shift of negative values would be flagged
// by UBSan in the sanitizer builds).
constexpr std::int64_t kTwoTo30 = std::int64_t{1} << 30;

// ---- Kernels (the same source for every backend) ------------------------------------------------

// Numba's histogram example: a grid-stride loop (cuda.grid(1), cuda.gridsize(1)) of atomic adds.
DEVMEM_KERNEL void histogram(ArrayView<const int, 1> values, ArrayView<int, 1> bins) {
  const std::int64_t stride = devmem::gridsize<1>();
  for (std::int64_t i = devmem::grid<1>(); i < values.shape(0); i += stride)
    devmem::atomic_add(bins, values[i], 1);
}

// Sums with atomic_add on one double and one int64 element, the element (T&) and view forms.
DEVMEM_KERNEL void atomic_sums(ArrayView<const double, 1> values, ArrayView<double, 1> sum,
                               ArrayView<std::int64_t, 1> isum) {
  const std::int64_t stride = devmem::gridsize<1>();
  for (std::int64_t i = devmem::grid<1>(); i < values.shape(0); i += stride) {
    devmem::atomic_add(sum[0], values[i]);
    devmem::atomic_add(isum, 0, static_cast<std::int64_t>(values[i] * 4.0) * kTwoTo30);
  }
}

// Every thread subtracts from 32- and 64-bit, signed and unsigned counters, and adds to floats.
DEVMEM_KERNEL void mixed_add_sub(ArrayView<int, 1> i32, ArrayView<unsigned, 1> u32,
                                 ArrayView<std::int64_t, 1> i64, ArrayView<std::uint64_t, 1> u64,
                                 ArrayView<float, 1> f32, ArrayView<double, 1> f64) {
  const auto t = static_cast<int>(devmem::grid<1>());
  devmem::atomic_sub(i32, 0, t);
  devmem::atomic_sub(u32[0], 1u);
  devmem::atomic_sub(i64[0], std::int64_t{t} << 32);
  devmem::atomic_add(u64, 0, std::uint64_t{1} << 40);
  devmem::atomic_sub(f32, 0, 0.5f);
  devmem::atomic_sub(f64[0], 0.25);
}

// atomic_add's old values are tickets: every thread gets a different one.
DEVMEM_KERNEL void take_tickets(ArrayView<unsigned, 1> counter, ArrayView<int, 1> taken) {
  const unsigned ticket = devmem::atomic_add(counter, 0, 1u);
  devmem::atomic_add(taken, ticket, 1);
}

DEVMEM_KERNEL void max_min(ArrayView<const double, 1> values, ArrayView<int, 1> i32,
                           ArrayView<std::int64_t, 1> i64, ArrayView<std::uint64_t, 1> u64,
                           ArrayView<float, 1> f32, ArrayView<double, 1> f64) {
  const std::int64_t stride = devmem::gridsize<1>();
  for (std::int64_t i = devmem::grid<1>(); i < values.shape(0); i += stride) {
    const double v = values[i];
    devmem::atomic_max(i32, 0, static_cast<int>(v));
    devmem::atomic_min(i32, 1, static_cast<int>(v));
    devmem::atomic_max(i64, 0, static_cast<std::int64_t>(v) * kTwoTo30);
    devmem::atomic_min(i64[1], static_cast<std::int64_t>(v) * kTwoTo30);
    devmem::atomic_max(u64[0], static_cast<std::uint64_t>(v + 1e6) << 20);
    devmem::atomic_min(u64[1], static_cast<std::uint64_t>(v + 1e6) << 20);
    devmem::atomic_max(f32, 0, static_cast<float>(v));
    devmem::atomic_min(f32[1], static_cast<float>(v));
    devmem::atomic_max(f64[0], v);
    devmem::atomic_min(f64, 1, v);
  }
}

// One thread: the old values and NaN handling (Numba: a NaN operand leaves the element as it is).
// `nan` is a parameter: std::numeric_limits is not callable in nvcc device code.
DEVMEM_KERNEL void float_max_min_rules(ArrayView<double, 1> element, ArrayView<double, 1> olds,
                                       double nan) {
  olds[0] = devmem::atomic_max(element, 0, 2.0);   // 1 -> 2
  olds[1] = devmem::atomic_max(element, 0, 1.5);   // stays 2
  olds[2] = devmem::atomic_max(element, 0, nan);   // stays 2
  olds[3] = devmem::atomic_min(element, 0, -3.0);  // 2 -> -3
  olds[4] = devmem::atomic_min(element, 0, nan);   // stays -3
  olds[5] = devmem::atomic_max(element, 1, 7.0);   // NaN stays
  olds[6] = devmem::atomic_min(element, 1, 7.0);   // NaN stays
}

// Every thread swaps its own number in; the old values it gets back, plus the last one left in the
// element, are the initial value and every thread's number, each exactly once.
DEVMEM_KERNEL void exchange_chain(ArrayView<std::int64_t, 1> slot, ArrayView<std::int64_t, 1> olds,
                                  ArrayView<float, 1> fslot, ArrayView<float, 1> folds) {
  const std::int64_t t = devmem::grid<1>();
  olds[t] = devmem::atomic_exchange(slot, 0, t);
  folds[t] = devmem::atomic_exchange(fslot[0], static_cast<float>(t));
}

// "First thread wins" with compare-and-swap, and a lock-free counter built from CAS loops on a
// 64-bit and a 32-bit unsigned element (Numba's cas and compare_and_swap forms).
DEVMEM_KERNEL void cas_kernel(ArrayView<int, 1> winner, ArrayView<int, 1> wins,
                              ArrayView<std::int64_t, 1> counter, ArrayView<unsigned, 1> ucounter) {
  const auto t = static_cast<int>(devmem::grid<1>());
  if (devmem::atomic_cas(winner, 0, -1, t) == -1) devmem::atomic_add(wins, 0, 1);
  for (int k = 0; k < 3; ++k) {
    // A guess the CAS corrects (a plain read would race with the other threads' CAS).
    std::int64_t seen = 0;
    while (true) {
      const std::int64_t old = devmem::atomic_compare_and_swap(counter, seen, seen + 1);
      if (old == seen) break;
      seen = old;
    }
    unsigned useen = 0;
    while (true) {
      const unsigned old = devmem::atomic_cas(ucounter, 0, useen, useen + 2u);
      if (old == useen) break;
      useen = old;
    }
  }
}

// cuda.grid(2) / cuda.gridsize(2) and the 2-d index form {y, x} of the atomics: a grid-stride loop
// over a 2-d array smaller and larger than the grid.
DEVMEM_KERNEL void grid_2d(ArrayView<std::int64_t, 2> out, ArrayView<int, 2> visits,
                           ArrayView<std::int64_t, 1> sizes) {
  const auto [x0, y0] = devmem::grid<2>();
  const devmem::Coord<2> size = devmem::gridsize<2>();
  if (x0 == 0 && y0 == 0) {
    sizes[0] = size.x;
    sizes[1] = size[1];
  }
  for (std::int64_t y = y0; y < out.shape(0); y += size.y) {
    for (std::int64_t x = x0; x < out.shape(1); x += size.x) {
      out(y, x) = y * 1000 + x;
      devmem::atomic_add(visits, {y, x}, 1);
    }
  }
}

DEVMEM_KERNEL void grid_3d(ArrayView<std::int64_t, 3> out, ArrayView<std::int64_t, 1> sizes) {
  const devmem::Coord<3> p = devmem::grid<3>();
  const auto [sx, sy, sz] = devmem::gridsize<3>();
  if (p == devmem::Coord<3>{}) {
    sizes[0] = sx;
    sizes[1] = sy;
    sizes[2] = sz;
  }
  if (p.z < out.shape(0) && p.y < out.shape(1) && p.x < out.shape(2))
    devmem::atomic_exchange(out, {p.z, p.y, p.x}, (p[2] * 100 + p[1]) * 100 + p[0]);
}

// Numba's atomics on shared memory: a block-local histogram in a 1-d SharedArray, the same counts
// in a 2-d one through {i, j} (size_t indices) and through its rows, then one atomic_add per bin
// into the global result.
DEVMEM_KERNEL void shared_histogram(ArrayView<const int, 1> values, ArrayView<int, 1> bins,
                                    ArrayView<int, 2> bins_2d) {
  DEVMEM_SHARED_ARRAY(local, int, kBins);
  DEVMEM_SHARED_ARRAY(local_2d, int, 4, kBins / 4);
  DEVMEM_SHARED_ARRAY(by_rows, int, 4, kBins / 4);
  const unsigned t = devmem::thread_idx().x;
  if (t < kBins) {
    local[t] = 0;
    local_2d[t] = 0;
    by_rows[t] = 0;
  }
  devmem::syncthreads();
  const std::int64_t stride = devmem::gridsize<1>();
  for (std::int64_t i = devmem::grid<1>(); i < values.shape(0); i += stride) {
    const int bin = values[i];
    devmem::atomic_add(local, bin, 1);
    const std::size_t row = static_cast<std::size_t>(bin) / (kBins / 4);
    const std::size_t column = static_cast<std::size_t>(bin) % (kBins / 4);
    devmem::atomic_add(local_2d, {row, column}, 1);
    devmem::atomic_add(by_rows.row(row), column, 1);
  }
  devmem::syncthreads();
  if (t < kBins) {
    devmem::atomic_add(bins, t, local[t]);
    devmem::atomic_add(bins_2d, {t / (kBins / 4), t % (kBins / 4)}, local_2d(t / 4, t % 4));
    devmem::atomic_add(bins_2d.row(t / (kBins / 4)), t % (kBins / 4), by_rows.row(t / 4)[t % 4]);
  }
}

// Every operation on shared memory, raced by the threads of each block: add, max and min on a
// 2-d int64 SharedArray (by {i, j} and by row), exchange and compare-and-swap, sub, and add, max
// and min on doubles in dynamic shared memory (dynamic_shared_array). Each block reports its own.
DEVMEM_KERNEL void shared_atomic_ops(ArrayView<std::int64_t, 2> ints, ArrayView<double, 2> floats,
                                     ArrayView<unsigned, 2> words,
                                     ArrayView<std::int64_t, 1> olds) {
  DEVMEM_SHARED_ARRAY(s, std::int64_t, 2, 3);  // sum, max, min | exchanged, cas winner, sub
  DEVMEM_SHARED_ARRAY(w, unsigned, 2);         // cas wins, cas counter
  const auto d = devmem::dynamic_shared_array<double>(3);  // sum, max, min
  const unsigned t = devmem::thread_idx().x;
  const unsigned b = devmem::block_idx().x;
  if (t == 0) {
    s(0, 0) = 0;
    s(0, 1) = -kTwoTo30 * kTwoTo30;
    s(0, 2) = kTwoTo30 * kTwoTo30;
    s(1, 0) = -1;
    s(1, 1) = 0;
    s(1, 2) = 0;
    w[0] = 0;
    w[1] = 0;
    d[0] = 0.0;
    d[1] = -1e300;
    d[2] = 1e300;
  }
  devmem::syncthreads();
  const std::int64_t v = (std::int64_t{t} + 1) * kTwoTo30;
  devmem::atomic_add(s, {0, 0}, v);
  devmem::atomic_max(s.row(0), 1, v);
  devmem::atomic_min(s, {0u, 2u}, v);
  olds[std::int64_t{b} * kThreads + t] = devmem::atomic_exchange(s.row(1), 0, std::int64_t{t});
  if (devmem::atomic_cas(s, {1, 1}, 0, std::int64_t{t} + 1) == 0) devmem::atomic_add(w, 0, 1u);
  devmem::atomic_sub(s.row(1), 2, v);
  unsigned seen = 0;
  while (true) {
    const unsigned old = devmem::atomic_cas(w, 1, seen, seen + 1u);
    if (old == seen) break;
    seen = old;
  }
  devmem::atomic_add(d, 0, 0.5 * t);
  devmem::atomic_max(d, {1}, static_cast<double>(t));
  devmem::atomic_min(d[2], static_cast<double>(t) - 3.0);
  devmem::syncthreads();
  if (t == 0) {
    for (int k = 0; k < 6; ++k) ints(b, k) = s[static_cast<std::size_t>(k)];
    for (int k = 0; k < 3; ++k) floats(b, k) = d[k];
    words(b, 0) = w[0];
    words(b, 1) = w[1];
  }
}

DEVMEM_KERNEL void add_one_slowly(ArrayView<int, 1> values) {
  const std::int64_t i = devmem::grid<1>();
  if (i < values.shape(0)) devmem::atomic_add(values, i, 1);
}

template <class T>
std::vector<T> filled(std::size_t n, T value) {
  return std::vector<T>(n, value);
}

}  // namespace

TEST_CASE("kernel atomics: histogram with atomic_add in a grid-stride loop", "[kernels][atomics]") {
  const std::size_t n = 20'011;
  std::vector<int> host(n);
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> dist(0, kBins - 1);
  for (auto& v : host) v = dist(gen);
  std::vector<int> expected(kBins, 0);
  for (int v : host) ++expected[static_cast<std::size_t>(v)];
  const devmem::Stream s = devmem::stream();
  const DeviceArray values = devmem::to_device(host, s);
  const DeviceArray bins = devmem::to_device(filled<int>(kBins, 0), s);
  devmem::launch({kBlocks, kThreads, 0, s}, histogram, values, bins);
  CHECK(bins.to_vector<int>(s) == expected);
}

TEST_CASE("kernel atomics: sums with atomic_add on double and int64", "[kernels][atomics]") {
  // Multiples of 0.25 below 2^20: every partial sum is exact in a double, so the order in which
  // the threads add does not change the result.
  const std::size_t n = 5'003;
  std::vector<double> host(n);
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> dist(-4000, 4000);
  for (auto& v : host) v = dist(gen) * 0.25;
  const double expected = std::accumulate(host.begin(), host.end(), 0.0);
  std::int64_t iexpected = 0;
  for (double v : host) iexpected += static_cast<std::int64_t>(v * 4.0) * kTwoTo30;
  const DeviceArray values = devmem::to_device(host);
  const DeviceArray sum = devmem::to_device(filled<double>(1, 0.0));
  const DeviceArray isum = devmem::to_device(filled<std::int64_t>(1, 0));
  devmem::launch({kBlocks, kThreads}, atomic_sums, values, sum, isum);
  CHECK(sum.to_vector<double>()[0] == expected);
  CHECK(isum.to_vector<std::int64_t>()[0] == iexpected);
}

TEST_CASE("kernel atomics: add and sub on every integer width and on floats",
          "[kernels][atomics]") {
  const DeviceArray i32 = devmem::to_device(filled<int>(1, 0));
  const DeviceArray u32 = devmem::to_device(filled<unsigned>(1, 10u));
  const DeviceArray i64 = devmem::to_device(filled<std::int64_t>(1, 0));
  const DeviceArray u64 = devmem::to_device(filled<std::uint64_t>(1, 0));
  const DeviceArray f32 = devmem::to_device(filled<float>(1, 0.0f));
  const DeviceArray f64 = devmem::to_device(filled<double>(1, 1.0));
  devmem::launch({kBlocks, kThreads}, mixed_add_sub, i32, u32, i64, u64, f32, f64);
  const std::int64_t n = kThreadCount;
  const std::int64_t triangle = n * (n - 1) / 2;
  CHECK(i32.to_vector<int>()[0] == -static_cast<int>(triangle));
  // Unsigned subtraction wraps, as on the GPU.
  CHECK(u32.to_vector<unsigned>()[0] == 10u - static_cast<unsigned>(n));
  CHECK(i64.to_vector<std::int64_t>()[0] == -(triangle << 32));
  CHECK(u64.to_vector<std::uint64_t>()[0] == static_cast<std::uint64_t>(n) << 40);
  CHECK(f32.to_vector<float>()[0] == -0.5f * static_cast<float>(n));
  CHECK(f64.to_vector<double>()[0] == 1.0 - 0.25 * static_cast<double>(n));
}

TEST_CASE("kernel atomics: atomic_add returns the old value", "[kernels][atomics]") {
  const DeviceArray counter = devmem::to_device(filled<unsigned>(1, 0u));
  const DeviceArray taken =
      devmem::to_device(filled<int>(static_cast<std::size_t>(kThreadCount), 0));
  devmem::launch({kBlocks, kThreads}, take_tickets, counter, taken);
  CHECK(counter.to_vector<unsigned>()[0] == static_cast<unsigned>(kThreadCount));
  const auto tickets = taken.to_vector<int>();
  CHECK(std::count(tickets.begin(), tickets.end(), 1) == kThreadCount);
}

TEST_CASE("kernel atomics: max and min", "[kernels][atomics]") {
  const std::size_t n = 4'099;
  std::vector<double> host(n);
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> dist(-100'000, 100'000);
  for (auto& v : host) v = dist(gen);
  const auto [lo, hi] = std::minmax_element(host.begin(), host.end());
  const DeviceArray values = devmem::to_device(host);
  const DeviceArray i32 = devmem::to_device(
      std::vector<int>{std::numeric_limits<int>::min(), std::numeric_limits<int>::max()});
  const DeviceArray i64 = devmem::to_device(std::vector<std::int64_t>{
      std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()});
  const DeviceArray u64 =
      devmem::to_device(std::vector<std::uint64_t>{0, std::numeric_limits<std::uint64_t>::max()});
  const DeviceArray f32 = devmem::to_device(std::vector<float>{-INFINITY, INFINITY});
  const DeviceArray f64 = devmem::to_device(std::vector<double>{-INFINITY, INFINITY});
  devmem::launch({kBlocks, kThreads}, max_min, values, i32, i64, u64, f32, f64);
  const auto to_u64 = [](double v) { return static_cast<std::uint64_t>(v + 1e6) << 20; };
  CHECK(i32.to_vector<int>() == std::vector<int>{static_cast<int>(*hi), static_cast<int>(*lo)});
  CHECK(i64.to_vector<std::int64_t>() ==
        std::vector<std::int64_t>{static_cast<std::int64_t>(*hi) * kTwoTo30,
                                  static_cast<std::int64_t>(*lo) * kTwoTo30});
  CHECK(u64.to_vector<std::uint64_t>() == std::vector<std::uint64_t>{to_u64(*hi), to_u64(*lo)});
  CHECK(f32.to_vector<float>() ==
        std::vector<float>{static_cast<float>(*hi), static_cast<float>(*lo)});
  CHECK(f64.to_vector<double>() == std::vector<double>{*hi, *lo});
}

TEST_CASE("kernel atomics: float max and min return the old value and keep NaN rules",
          "[kernels][atomics]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const DeviceArray element = devmem::to_device(std::vector<double>{1.0, nan});
  const DeviceArray olds = devmem::to_device(filled<double>(7, 0.0));
  devmem::launch({1, 1}, float_max_min_rules, element, olds, nan);
  const auto e = element.to_vector<double>();
  const auto o = olds.to_vector<double>();
  CHECK(e[0] == -3.0);
  CHECK(std::isnan(e[1]));
  CHECK(o[0] == 1.0);
  CHECK(o[1] == 2.0);
  CHECK(o[2] == 2.0);
  CHECK(o[3] == 2.0);
  CHECK(o[4] == -3.0);
  CHECK(std::isnan(o[5]));
  CHECK(std::isnan(o[6]));
}

TEST_CASE("kernel atomics: exchange hands every value on exactly once", "[kernels][atomics]") {
  const auto n = static_cast<std::size_t>(kThreadCount);
  const DeviceArray slot = devmem::to_device(filled<std::int64_t>(1, -1));
  const DeviceArray olds = devmem::to_device(filled<std::int64_t>(n, 0));
  const DeviceArray fslot = devmem::to_device(filled<float>(1, -1.0f));
  const DeviceArray folds = devmem::to_device(filled<float>(n, 0.0f));
  devmem::launch({kBlocks, kThreads}, exchange_chain, slot, olds, fslot, folds);
  auto seen = olds.to_vector<std::int64_t>();
  seen.push_back(slot.to_vector<std::int64_t>()[0]);
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> expected(n + 1);
  std::iota(expected.begin(), expected.end(), std::int64_t{-1});
  CHECK(seen == expected);
  auto fseen = folds.to_vector<float>();
  fseen.push_back(fslot.to_vector<float>()[0]);
  std::sort(fseen.begin(), fseen.end());
  std::vector<float> fexpected(n + 1);
  for (std::size_t i = 0; i <= n; ++i) fexpected[i] = static_cast<float>(i) - 1.0f;
  CHECK(fseen == fexpected);
}

TEST_CASE("kernel atomics: compare-and-swap (first thread wins, lock-free counters)",
          "[kernels][atomics]") {
  const DeviceArray winner = devmem::to_device(filled<int>(1, -1));
  const DeviceArray wins = devmem::to_device(filled<int>(1, 0));
  const DeviceArray counter = devmem::to_device(filled<std::int64_t>(1, 0));
  const DeviceArray ucounter = devmem::to_device(filled<unsigned>(1, 0u));
  devmem::launch({kBlocks, kThreads}, cas_kernel, winner, wins, counter, ucounter);
  const int w = winner.to_vector<int>()[0];
  CHECK(w >= 0);
  CHECK(w < kThreadCount);
  CHECK(wins.to_vector<int>()[0] == 1);
  CHECK(counter.to_vector<std::int64_t>()[0] == 3 * kThreadCount);
  CHECK(ucounter.to_vector<unsigned>()[0] == static_cast<unsigned>(6 * kThreadCount));
}

TEST_CASE("kernel atomics: on shared arrays, 1-d, 2-d and rows of 2-d (block histograms)",
          "[kernels][atomics][shared]") {
  const std::size_t n = 10'007;
  std::vector<int> host(n);
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> dist(0, kBins - 1);
  for (auto& v : host) v = dist(gen);
  std::vector<int> expected(kBins, 0);
  for (int v : host) ++expected[static_cast<std::size_t>(v)];
  std::vector<int> expected_2d(expected.size());
  for (std::size_t i = 0; i != expected.size(); ++i) expected_2d[i] = 2 * expected[i];
  const DeviceArray values = devmem::to_device(host);
  const DeviceArray bins = devmem::to_device(filled<int>(kBins, 0));
  const DeviceArray bins_2d = devmem::to_device(filled<int>(kBins, 0)).reshape({4, kBins / 4});
  devmem::launch({kBlocks, kThreads}, shared_histogram, values, bins, bins_2d);
  CHECK(bins.to_vector<int>() == expected);
  CHECK(bins_2d.to_vector<int>() == expected_2d);  // the {i, j} counts plus the row counts
}

TEST_CASE("kernel atomics: every operation on static and dynamic shared memory",
          "[kernels][atomics][shared]") {
  const DeviceArray ints = devmem::device_array<std::int64_t>({kBlocks, 6});
  const DeviceArray floats = devmem::device_array<double>({kBlocks, 3});
  const DeviceArray words = devmem::device_array<unsigned>({kBlocks, 2});
  const DeviceArray olds = devmem::device_array<std::int64_t>({kThreadCount});
  devmem::launch({kBlocks, kThreads, 3 * sizeof(double)}, shared_atomic_ops, ints, floats, words,
                 olds);
  const auto i = ints.to_vector<std::int64_t>();
  const auto f = floats.to_vector<double>();
  const auto w = words.to_vector<unsigned>();
  const auto o = olds.to_vector<std::int64_t>();
  const std::int64_t triangle = std::int64_t{kThreads} * (kThreads + 1) / 2;
  for (std::size_t b = 0; b != kBlocks; ++b) {
    INFO("block " << b);
    const std::int64_t* r = &i[b * 6];
    CHECK(r[0] == triangle * kTwoTo30);
    CHECK(r[1] == std::int64_t{kThreads} * kTwoTo30);
    CHECK(r[2] == kTwoTo30);
    // Exchange: the old values and the value left are -1 and every thread's number, once each.
    std::vector<std::int64_t> chain(o.begin() + static_cast<std::ptrdiff_t>(b * kThreads),
                                    o.begin() + static_cast<std::ptrdiff_t>((b + 1) * kThreads));
    chain.push_back(r[3]);
    std::sort(chain.begin(), chain.end());
    std::vector<std::int64_t> expected_chain(kThreads + 1);
    std::iota(expected_chain.begin(), expected_chain.end(), std::int64_t{-1});
    CHECK(chain == expected_chain);
    CHECK(r[4] >= 1);  // the first thread's number + 1
    CHECK(r[4] <= std::int64_t{kThreads});
    CHECK(r[5] == -triangle * kTwoTo30);
    CHECK(w[b * 2] == 1u);  // one compare-and-swap winner
    CHECK(w[b * 2 + 1] == kThreads);
    CHECK(f[b * 3] == 0.25 * kThreads * (kThreads - 1));
    CHECK(f[b * 3 + 1] == kThreads - 1.0);
    CHECK(f[b * 3 + 2] == -3.0);
  }
}

TEST_CASE("kernel atomics: grid<2>() and gridsize<2>() in a 2-d grid-stride loop",
          "[kernels][atomics]") {
  const std::int64_t rows = 37;
  const std::int64_t cols = 45;  // more than the grid in x, fewer in y
  const DeviceArray out = devmem::device_array<std::int64_t>({rows, cols});
  const DeviceArray visits =
      devmem::to_device(filled<int>(static_cast<std::size_t>(rows * cols), 0))
          .reshape({rows, cols});
  const DeviceArray sizes = devmem::to_device(filled<std::int64_t>(2, 0));
  devmem::launch({devmem::Dim3(2, 5), devmem::Dim3(8, 4)}, grid_2d, out, visits, sizes);
  CHECK(sizes.to_vector<std::int64_t>() == std::vector<std::int64_t>{16, 20});
  const auto values = out.to_vector<std::int64_t>();
  const auto counts = visits.to_vector<int>();
  int wrong = 0;
  for (std::int64_t y = 0; y < rows; ++y) {
    for (std::int64_t x = 0; x < cols; ++x) {
      const auto k = static_cast<std::size_t>(y * cols + x);
      if (values[k] != y * 1000 + x || counts[k] != 1) ++wrong;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("kernel atomics: grid<3>() and gridsize<3>()", "[kernels][atomics]") {
  const DeviceArray out = devmem::to_device(filled<std::int64_t>(3 * 5 * 7, -1)).reshape({3, 5, 7});
  const DeviceArray sizes = devmem::to_device(filled<std::int64_t>(3, 0));
  devmem::launch({devmem::Dim3(2, 3, 2), devmem::Dim3(4, 2, 2)}, grid_3d, out, sizes);
  CHECK(sizes.to_vector<std::int64_t>() == std::vector<std::int64_t>{8, 6, 4});
  const auto values = out.to_vector<std::int64_t>();
  int wrong = 0;
  for (std::int64_t z = 0; z < 3; ++z) {
    for (std::int64_t y = 0; y < 5; ++y) {
      for (std::int64_t x = 0; x < 7; ++x) {
        if (values[static_cast<std::size_t>((z * 5 + y) * 7 + x)] != (z * 100 + y) * 100 + x)
          ++wrong;
      }
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("kernel atomics: devmem::synchronize waits for every stream of the device",
          "[kernels][atomics]") {
  const std::size_t n = 1'000;
  const devmem::Stream a = devmem::stream();
  const devmem::Stream b = devmem::stream();
  const DeviceArray x = devmem::to_device(filled<int>(n, 1), a);
  const DeviceArray y = devmem::to_device(filled<int>(n, 2), b);
  devmem::launch({4, 256, 0, a}, add_one_slowly, x);
  devmem::launch({4, 256, 0, b}, add_one_slowly, y);
  devmem::synchronize();
  CHECK(a.query());
  CHECK(b.query());
  CHECK(x.to_vector<int>() == filled<int>(n, 2));
  CHECK(y.to_vector<int>() == filled<int>(n, 3));
}

// grid<N>() is device code on the GPU compilers: callable from a host function only here.
#if !(defined(__CUDACC__) || defined(__HIPCC__) || defined(DEVMEM_HIPCPU_CUDA) || \
      defined(DEVMEM_HIPCPU_ROC))
TEST_CASE("kernel atomics: grid<N>() outside a kernel is an error on the simulator",
          "[kernels][atomics][host-only]") {
  CHECK_THROWS_AS(devmem::grid<1>(), devmem::InvalidArgument);
  CHECK_THROWS_AS(devmem::gridsize<2>(), devmem::InvalidArgument);
}
#endif

// Kernel side (<devmem/kernel.hpp>): one kernel source for every backend. This file is compiled by
// the host compiler for conformance_host (kernels run in the host backend's simulator), by nvcc
// for conformance_cuda (test_kernels.cu includes it) and by hipcc for conformance_roc.
//
// Kernels: shared-memory reversal, block reduction, Numba's tiled matrix multiply, per-thread
// local scratch arrays, a constant-memory lookup table, global-memory ordering across barrier(),
// wave barriers, dynamic shared memory, multi-dimensional indices, strided views. Launching itself
// (configurations, the launch errors every backend reports the same way, streams, devices, what a
// launch keeps alive) is in test_kernels_launch.cpp; what the host simulator detects ([host-only])
// is in test_kernels_simulator.cpp.
#include "kernel_test_support.hpp"
#include "support.hpp"

#include <devmem/kernel.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;
using devmem::Dim3;
using devmem::FenceScope;

namespace {

constexpr int kTile = 16;
constexpr unsigned kReductionBlock = 256;
constexpr int kLocalSortWidth = 8;

// ---- Kernels (the same source for every backend) ------------------------------------------------

DEVMEM_KERNEL void reverse_each_block(ArrayView<int, 1> values) {
  DEVMEM_SHARED_ARRAY(staging, int, 64);
  const unsigned t = devmem::thread_idx().x;
  const std::int64_t i = devmem::global_id();
  staging[t] = values[i];
  devmem::syncthreads();
  values[i] = staging[63 - t];
}

DEVMEM_KERNEL void block_sums(ArrayView<const int, 1> in, ArrayView<long long, 1> partial) {
  DEVMEM_SHARED_ARRAY(cache, long long, kReductionBlock);
  const unsigned t = devmem::thread_idx().x;
  const std::int64_t i = devmem::global_id();
  cache[t] = i < in.shape(0) ? in[i] : 0;
  devmem::syncthreads();
  for (unsigned stride = devmem::block_dim().x / 2; stride > 0; stride /= 2) {
    if (t < stride) cache[t] += cache[t + stride];
    devmem::syncthreads();
  }
  if (t == 0) partial[devmem::block_idx().x] = cache[0];
}

// Numba's "fast_matmul" example (shared-memory tiles), extended to shapes that are not multiples of
// the tile: out-of-range elements load as 0 and out-of-range outputs are not written.
DEVMEM_KERNEL void tiled_matmul(ArrayView<const float, 2> a, ArrayView<const float, 2> b,
                                ArrayView<float, 2> c) {
  DEVMEM_SHARED_ARRAY(tile_a, float, kTile, kTile);
  DEVMEM_SHARED_ARRAY(tile_b, float, kTile, kTile);
  const unsigned tx = devmem::thread_idx().x;
  const unsigned ty = devmem::thread_idx().y;
  const std::int64_t col = devmem::global_id(0);
  const std::int64_t row = devmem::global_id(1);
  const std::int64_t inner = a.shape(1);
  float acc = 0.0f;
  for (std::int64_t k0 = 0; k0 < inner; k0 += kTile) {
    const std::int64_t ka = k0 + tx;
    const std::int64_t kb = k0 + ty;
    tile_a(ty, tx) = (row < a.shape(0) && ka < inner) ? a(row, ka) : 0.0f;
    tile_b(ty, tx) = (kb < inner && col < b.shape(1)) ? b(kb, col) : 0.0f;
    devmem::syncthreads();
    for (int k = 0; k < kTile; ++k) acc += tile_a(ty, k) * tile_b(k, tx);
    devmem::syncthreads();
  }
  if (row < c.shape(0) && col < c.shape(1)) c(row, col) = acc;
}

DEVMEM_KERNEL void sort_rows_locally(ArrayView<int, 2> rows) {
  const std::int64_t r = devmem::global_id();
  if (r >= rows.shape(0)) return;
  devmem::local_array<int, kLocalSortWidth> scratch;
  for (int j = 0; j < kLocalSortWidth; ++j) scratch[static_cast<std::size_t>(j)] = rows(r, j);
  for (std::size_t j = 1; j < scratch.size(); ++j) {  // insertion sort in per-thread memory
    const int v = scratch[j];
    std::size_t k = j;
    for (; k > 0 && scratch[k - 1] > v; --k) scratch[k] = scratch[k - 1];
    scratch[k] = v;
  }
  for (int j = 0; j < kLocalSortWidth; ++j) rows(r, j) = scratch[static_cast<std::size_t>(j)];
}

DEVMEM_KERNEL void lookup(ArrayView<const int, 1> keys, ArrayView<float, 1> out) {
  const std::int64_t i = devmem::global_id();
  if (i < keys.shape(0)) out[i] = conformance_lut[keys[i] % kLutSize];
}

// Every thread writes its own element, then reads its neighbour's after a global-fence barrier.
DEVMEM_KERNEL void neighbour_after_barrier(ArrayView<int, 1> data, ArrayView<int, 1> seen) {
  const unsigned t = devmem::thread_idx().x;
  const unsigned n = devmem::block_dim().x;
  data[t] = static_cast<int>(t) * 3 + 1;
  devmem::barrier(FenceScope::Global);
  seen[t] = data[(t + 1) % n];
  devmem::barrier(FenceScope::Global | FenceScope::Local);
}

DEVMEM_KERNEL void swap_pairs_in_warp(ArrayView<int, 1> out) {
  DEVMEM_SHARED_ARRAY(lanes, int, 128);
  const unsigned t = devmem::thread_idx().x;
  lanes[t] = static_cast<int>(t) * 7;
  devmem::wave_barrier();
  out[t] = lanes[t ^ 1u];  // lane t^1 is in the same warp for every warp size >= 2
}

/// Each group of 16 lanes reverses its values through shared memory, synchronised by syncwarp
/// with a mask of its own 16 lanes only (groups of one warp use different masks at once).
DEVMEM_KERNEL void reverse_lane_groups(ArrayView<int, 1> out) {
  DEVMEM_SHARED_ARRAY(values, int, 128);
  const unsigned t = devmem::thread_idx().x;
  const auto lane = t % static_cast<unsigned>(devmem::warp_size());
  const std::uint64_t group_mask = std::uint64_t{0xffff} << (lane / 16u * 16u);
  values[t] = static_cast<int>(t) * 5;
  devmem::syncwarp(group_mask);
  out[t] = values[(t & ~15u) | (15u - (t & 15u))];
}

#if !defined(DEVMEM_HIPCPU_CUDA) && !defined(DEVMEM_HIPCPU_ROC)
/// The sum of each block's 32 values by a tree within the first warp, whose lanes drop out as the
/// tree narrows: syncwarp's mask names the lanes still taking part, and lanes that returned are
/// not waited for (CUDA's rule, which the simulator follows). Not under HIP-CPU, whose syncwarp
/// is a block barrier that every thread must reach.
DEVMEM_KERNEL void warp_tree_sums(ArrayView<const int, 1> in, ArrayView<int, 1> sums) {
  DEVMEM_SHARED_ARRAY(partial, int, 32);
  const unsigned t = devmem::thread_idx().x;
  const unsigned block = devmem::block_idx().x;
  partial[t] = in[std::int64_t{block} * 32 + t];
  devmem::syncwarp(0xffffffffu);
  for (unsigned half = 16; half >= 1; half /= 2) {
    if (t >= 2 * half) return;
    const std::uint64_t mask = (std::uint64_t{1} << (2 * half)) - 1;
    const int other = t < half ? partial[t + half] : 0;
    devmem::syncwarp(mask);  // every read of this round before any write
    if (t < half) partial[t] += other;
    devmem::syncwarp(mask);  // the writes before the next round's reads
  }
  if (t == 0) sums[block] = partial[0];
}
#endif

DEVMEM_KERNEL void reverse_with_dynamic_shared(ArrayView<double, 1> values) {
  double* staging = devmem::dynamic_shared<double>();
  const unsigned t = devmem::thread_idx().x;
  const unsigned n = devmem::block_dim().x;
  staging[t] = values[t];
  devmem::syncthreads();
  values[t] = staging[n - 1 - t];
}

/// Fills all of its block's `words` 32-bit words of dynamic shared memory with a pattern, then each
/// thread sums a block-stride slice of the words in reverse order into out[block][thread].
DEVMEM_KERNEL void sum_large_dynamic_shared(ArrayView<unsigned, 2> out, unsigned words) {
  unsigned* const shared = devmem::dynamic_shared<unsigned>();
  const unsigned t = devmem::thread_idx().x;
  const unsigned n = devmem::block_dim().x;
  const unsigned block = devmem::block_idx().x;
  for (unsigned i = t; i < words; i += n) shared[i] = i * 3u + block;
  devmem::syncthreads();
  unsigned sum = 0;
  for (unsigned i = t; i < words; i += n) sum += shared[words - 1u - i];
  out(block, t) = sum;
}

DEVMEM_KERNEL void record_coordinates(ArrayView<long long, 3> out) {
  const Dim3 g = devmem::grid_dim();
  const Dim3 b = devmem::block_dim();
  const std::int64_t x = devmem::global_id(0);
  const std::int64_t y = devmem::global_id(1);
  const std::int64_t z = devmem::global_id(2);
  out(z, y, x) = x + 100 * y + 10000 * z + 1000000LL * (g.x * g.y * g.z) +
                 100000000LL * (b.x * b.y * b.z) + 10000000000LL * (devmem::warp_size() > 0);
}

struct SharedScratchTag {};

constexpr unsigned kStaticSharedThreads = 256;
struct StaticSharedTag {};
/// 16 KiB of static shared memory plus whatever dynamic memory the launch gives.
DEVMEM_KERNEL void static_and_dynamic_shared(ArrayView<unsigned, 1> out) {
  auto fixed = devmem::shared_array<unsigned, 4096>(StaticSharedTag{});
  unsigned* const dynamic = devmem::dynamic_shared<unsigned>();
  const unsigned t = devmem::thread_idx().x;
  fixed[t] = t;
  dynamic[t] = 2u * t;
  devmem::syncthreads();
  out[t] = fixed[t] + dynamic[t];
}

DEVMEM_KERNEL void distinct_shared_arrays(ArrayView<int, 1> out, ArrayView<int, 1> aliasing) {
  DEVMEM_SHARED_ARRAY(first, int, 32);
  DEVMEM_SHARED_ARRAY(second, int, 32);
  const unsigned t = devmem::thread_idx().x;
  first[t] = static_cast<int>(t);
  second[t] = 100 + static_cast<int>(t);
  devmem::syncthreads();
  out[t] = first[31 - t] + second[t];
  if (t == 0) {
    // One tag type names one array wherever it is used: how two call sites share one on purpose.
    const auto shared_a = devmem::shared_array<int, 8>(SharedScratchTag{});
    const auto shared_b = devmem::shared_array<int, 8>(SharedScratchTag{});
    aliasing[0] = shared_a.data() == shared_b.data() ? 1 : 0;
    aliasing[1] = first.data() == second.data() ? 1 : 0;
  }
}

// The only untagged int[4] of its kernel: every call returns the same array, as one __shared__
// declaration does, however often it is reached.
DEVMEM_DEVICE int* block_scratch() {
  return devmem::shared_array<int, 4>().data();
}

DEVMEM_KERNEL void untagged_site_reached_twice(ArrayView<int, 2> out) {
  const unsigned t = devmem::thread_idx().x;
  int* previous = nullptr;
  for (int round = 0; round < 2; ++round) {
    int* const scratch = block_scratch();
    if (t == 0) scratch[0] = 10 * (round + 1);
    devmem::syncthreads();
    out(t, round) = scratch[0] + (previous != nullptr && previous != scratch ? 1000 : 0);
    devmem::syncthreads();
    previous = scratch;
  }
}

// shape, extent and size of every array kind a kernel uses, written by thread 0.
DEVMEM_KERNEL void report_array_shapes(ArrayView<const float, 2> view,
                                       ArrayView<long long, 1> out) {
  DEVMEM_SHARED_ARRAY(tile, float, 4, 6);
  devmem::local_array<int, 3, 5, 2> scratch;
  if (devmem::thread_idx().x != 0) return;
  scratch(2, 4, 1) = 7;
  int k = 0;
  const auto put = [&](std::int64_t value) { out[k++] = static_cast<long long>(value); };
  put(static_cast<std::int64_t>(tile.rank));
  for (std::size_t d = 0; d < tile.rank; ++d) {
    put(static_cast<std::int64_t>(tile.shape(d)));
    put(static_cast<std::int64_t>(tile.extent(d)));
  }
  put(static_cast<std::int64_t>(tile.size()));
  put(static_cast<std::int64_t>(scratch.rank));
  for (std::size_t d = 0; d < scratch.rank; ++d) {
    put(static_cast<std::int64_t>(scratch.shape(d)));
    put(static_cast<std::int64_t>(scratch.extent(d)));
  }
  put(static_cast<std::int64_t>(scratch.size()));
  put(scratch(2, 4, 1));
  put(static_cast<std::int64_t>(view.rank));
  for (std::size_t d = 0; d < view.rank; ++d) {
    put(view.shape(d));
    put(view.extent(d));
  }
  put(view.size());
}

DEVMEM_KERNEL void add_to_view(ArrayView<double, 2> view, double amount) {
  const std::int64_t i = devmem::global_id(1);
  const std::int64_t j = devmem::global_id(0);
  if (i < view.shape(0) && j < view.shape(1)) view(i, j) += amount;
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

std::vector<float> matmul_reference(const std::vector<float>& a, const std::vector<float>& b,
                                    int64_t m, int64_t k, int64_t n) {
  std::vector<float> c(static_cast<std::size_t>(m * n), 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        acc += static_cast<double>(a[static_cast<std::size_t>(i * k + p)]) *
               b[static_cast<std::size_t>(p * n + j)];
      }
      c[static_cast<std::size_t>(i * n + j)] = static_cast<float>(acc);
    }
  }
  return c;
}

/// Runs the tiled kernel on (m x k) @ (k x n) random matrices and returns the seconds it took.
double check_tiled_matmul(int64_t m, int64_t k, int64_t n, const devmem::Stream& stream) {
  const auto a = random_floats(static_cast<std::size_t>(m * k), 7u + static_cast<unsigned>(m));
  const auto b = random_floats(static_cast<std::size_t>(k * n), 11u + static_cast<unsigned>(n));
  const DeviceArray da = devmem::to_device(devmem::HostArray::view(a).reshape({m, k}), stream);
  const DeviceArray db = devmem::to_device(devmem::HostArray::view(b).reshape({k, n}), stream);
  const DeviceArray dc = devmem::device_array<float>({m, n}, Order::C, stream);
  const Dim3 block(kTile, kTile);
  const Dim3 grid(blocks_for(n, kTile), blocks_for(m, kTile));
  const auto start = std::chrono::steady_clock::now();
  devmem::launch({grid, block, 0, stream}, tiled_matmul, da, db, dc);
  const auto c = dc.to_vector<float>(stream);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto expected = matmul_reference(a, b, m, k, n);
  REQUIRE(c.size() == expected.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    const float tolerance = 1e-4f * static_cast<float>(k) + 1e-5f;
    if (std::abs(c[i] - expected[i]) > tolerance) ++mismatches;
  }
  CHECK(mismatches == 0);
  return seconds;
}

}  // namespace

TEST_CASE("kernels: shared-memory reversal within each block", "[kernels]") {
  const devmem::Stream s = devmem::stream();
  std::vector<int> host(256);
  std::iota(host.begin(), host.end(), 0);
  const DeviceArray d = devmem::to_device(host, s);
  devmem::launch({4, 64, 0, s}, reverse_each_block, d);
  const auto out = d.to_vector<int>(s);
  for (int blk = 0; blk < 4; ++blk) {
    for (int t = 0; t < 64; ++t)
      CHECK(out[static_cast<std::size_t>(blk * 64 + t)] == blk * 64 + 63 - t);
  }
}

TEST_CASE("kernels: block reduction with barriers", "[kernels]") {
  const int64_t n = 100'003;  // not a multiple of the block
  std::vector<int> host(static_cast<std::size_t>(n));
  std::mt19937 gen(3);
  std::uniform_int_distribution<int> dist(-1000, 1000);
  for (auto& v : host) v = dist(gen);
  const unsigned blocks = blocks_for(n, kReductionBlock);
  const DeviceArray in = devmem::to_device(host);
  const DeviceArray partial = devmem::device_array<long long>({blocks});
  devmem::launch({blocks, kReductionBlock}, block_sums, in, partial);
  const auto sums = partial.to_vector<long long>();
  for (unsigned blk = 0; blk < blocks; ++blk) {
    const auto first = host.begin() + static_cast<std::ptrdiff_t>(blk * kReductionBlock);
    const auto last =
        host.begin() +
        std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>((blk + 1) * kReductionBlock), n);
    CHECK(sums[blk] == std::accumulate(first, last, 0LL));
  }
  CHECK(std::accumulate(sums.begin(), sums.end(), 0LL) ==
        std::accumulate(host.begin(), host.end(), 0LL));
}

TEST_CASE("kernels: tiled matrix multiply with shared memory", "[kernels]") {
  const devmem::Stream s = devmem::stream();
  SECTION("multiples of the tile") {
    check_tiled_matmul(64, 48, 32, s);
  }
  SECTION("not divisible by the tile") {
    check_tiled_matmul(37, 53, 29, s);
  }
  SECTION("a single row and column") {
    check_tiled_matmul(1, 70, 1, s);
  }
  SECTION("inner dimension smaller than a tile") {
    check_tiled_matmul(33, 3, 17, s);
  }
  SECTION("256 x 256") {
    // Sanitizers make every simulated context switch 30-50x dearer: they check a smaller matrix.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
    constexpr int64_t kSize = 64;
#else
    constexpr int64_t kSize = 256;
#endif
    const double seconds = check_tiled_matmul(kSize, kSize, kSize, s);
    std::printf("kernels: %lldx%lld tiled matmul on the %s backend: %.3f s\n",
                static_cast<long long>(kSize), static_cast<long long>(kSize),
                devmem::backend_name().c_str(), seconds);
  }
}

TEST_CASE("kernels: per-thread local arrays", "[kernels]") {
  const int64_t rows = 300;
  std::vector<int> host(static_cast<std::size_t>(rows * kLocalSortWidth));
  std::mt19937 gen(5);
  std::uniform_int_distribution<int> dist(-50, 50);
  for (auto& v : host) v = dist(gen);
  const DeviceArray d =
      devmem::to_device(devmem::HostArray::view(host).reshape({rows, kLocalSortWidth}));
  devmem::launch({blocks_for(rows, 64), 64}, sort_rows_locally, d);
  const auto out = d.to_vector<int>();
  for (int64_t r = 0; r < rows; ++r) {
    auto first = host.begin() + r * kLocalSortWidth;
    std::sort(first, first + kLocalSortWidth);
  }
  CHECK(out == host);
}

TEST_CASE("kernels: constant-memory lookup table", "[kernels][multi-device]") {
  std::vector<float> table(kLutSize);
  for (int i = 0; i < kLutSize; ++i)
    table[static_cast<std::size_t>(i)] = 0.5f * static_cast<float>(i * i);
  devmem::const_array_like(conformance_lut, table);
  std::vector<int> keys(1000);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<int>((i * 37) % 1000);
  const DeviceArray dkeys = devmem::to_device(keys);
  const DeviceArray out = devmem::device_array<float>({1000});
  devmem::launch({blocks_for(1000, 128), 128}, lookup, dkeys, out);
  const auto got = out.to_vector<float>();
  for (std::size_t i = 0; i < keys.size(); ++i) {
    CHECK(got[i] == table[static_cast<std::size_t>(keys[i] % kLutSize)]);
  }

  SECTION("new values replace the old ones for later launches") {
    std::vector<float> doubled(table);
    for (auto& v : doubled) v *= 2.0f;
    devmem::const_array_like(conformance_lut, devmem::HostArray::view(doubled));
    devmem::launch({blocks_for(1000, 128), 128}, lookup, dkeys, out);
    const auto again = out.to_vector<float>();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      CHECK(again[i] == doubled[static_cast<std::size_t>(keys[i] % kLutSize)]);
    }
  }
  SECTION("filled for the device of the stream the kernels run on") {
    // Constant memory is per device: with several devices, the fill goes to the stream's device,
    // not the thread's current one (review 1, finding 2).
    const int last = devmem::device_count() - 1;
    const int before = devmem::current_device();
    const devmem::Stream there = [&] {
      const devmem::DeviceScope scope = devmem::device_scope(last);
      return devmem::stream();
    }();
    std::vector<float> tripled(table);
    for (auto& v : tripled) v *= 3.0f;
    devmem::const_array_like(conformance_lut, tripled, there);
    CHECK(devmem::current_device() == before);
    const DeviceArray keys_there = devmem::to_device(keys, there);
    const DeviceArray out_there = devmem::device_array<float>({1000}, devmem::Order::C, there);
    devmem::launch({blocks_for(1000, 128), 128, 0, there}, lookup, keys_there, out_there);
    const auto got_there = out_there.to_vector<float>(there);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      CHECK(got_there[i] == tripled[static_cast<std::size_t>(keys[i] % kLutSize)]);
    }
  }
  SECTION("the size must match the constant array") {
    const std::vector<float> too_many(kLutSize + 1, 1.0f);
    CHECK_THROWS_MATCHES(devmem::const_array_like(conformance_lut, too_many),
                         devmem::InvalidArgument,
                         Catch::Matchers::Message("const_array_like: the constant array holds 16 "
                                                  "elements but 17 values were given (they must "
                                                  "match)"));
    const std::vector<double> wrong_type(kLutSize, 1.0);
    CHECK_THROWS_MATCHES(
        devmem::const_array_like(conformance_lut, devmem::HostArray::view(wrong_type)),
        devmem::InvalidArgument,
        Catch::Matchers::Message("const_array_like: the array's dtype is float64, "
                                 "not float32"));
  }
}

TEST_CASE("kernels: barrier(Global) orders global-memory writes", "[kernels]") {
  const DeviceArray data = devmem::device_array<int>({128});
  const DeviceArray seen = devmem::device_array<int>({128});
  devmem::launch({1, 128}, neighbour_after_barrier, data, seen);
  const auto got = seen.to_vector<int>();
  for (int t = 0; t < 128; ++t) CHECK(got[static_cast<std::size_t>(t)] == ((t + 1) % 128) * 3 + 1);
}

TEST_CASE("kernels: wave_barrier", "[kernels]") {
  const DeviceArray out = devmem::device_array<int>({128});
  devmem::launch({1, 128}, swap_pairs_in_warp, out);
  const auto got = out.to_vector<int>();
  for (unsigned t = 0; t < 128; ++t) CHECK(got[t] == static_cast<int>(t ^ 1u) * 7);
}

TEST_CASE("kernels: syncwarp with a mask of some lanes", "[kernels]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({128}, s);
  devmem::launch({1, 128, s}, reverse_lane_groups, out);
  const auto got = out.to_vector<int>(s);
  for (unsigned t = 0; t < 128; ++t) {
    CHECK(got[t] == static_cast<int>((t & ~15u) | (15u - (t & 15u))) * 5);
  }
#if !defined(DEVMEM_HIPCPU_CUDA) && !defined(DEVMEM_HIPCPU_ROC)
  constexpr unsigned kBlocks = 5;
  std::vector<int> host(kBlocks * 32);
  std::iota(host.begin(), host.end(), -40);
  const DeviceArray in = devmem::to_device(host, s);
  const DeviceArray sums = devmem::device_array<int>({kBlocks}, s);
  devmem::launch({kBlocks, 32, s}, warp_tree_sums, in, sums);
  const auto block_sums = sums.to_vector<int>(s);
  for (unsigned b = 0; b < kBlocks; ++b) {
    CAPTURE(b);
    const auto first = host.begin() + static_cast<std::ptrdiff_t>(b) * 32;
    CHECK(block_sums[b] == std::accumulate(first, first + 32, 0));
  }
#endif
}

TEST_CASE("kernels: dynamic shared memory", "[kernels]") {
  const devmem::Stream s = devmem::stream();
  std::vector<double> host(100);
  std::iota(host.begin(), host.end(), 0.5);
  const DeviceArray d = devmem::to_device(host, s);
  devmem::launch({1, 100, 100 * sizeof(double), s}, reverse_with_dynamic_shared, d);
  const auto got = d.to_vector<double>(s);  // `host` is in use by the stream until then
  std::reverse(host.begin(), host.end());
  CHECK(got == host);
}

TEST_CASE("kernels: 100 KiB of dynamic shared memory, beyond the default limit", "[kernels]") {
  // 48 KiB is every device's default per-block limit; an H100 gives up to 227 KiB to a kernel that
  // opts in, which devmem::launch does. Devices without that much (AMD GPUs: 64 KiB) refuse it.
  const devmem::Stream s = devmem::stream();
  const auto props = devmem::current_context()->properties();
  constexpr unsigned kWords = 100 * 1024 / sizeof(unsigned);
  constexpr unsigned kBlocks = 3;
  constexpr unsigned kThreads = 128;
  const DeviceArray out = devmem::device_array<unsigned>({kBlocks, kThreads}, Order::C, s);
  const std::size_t bytes = kWords * sizeof(unsigned);
  if (props.max_shared_memory_per_block_optin < static_cast<int64_t>(bytes)) {
    CHECK_THROWS_MATCHES(
        devmem::launch({kBlocks, kThreads, bytes, s}, sum_large_dynamic_shared, out, kWords),
        devmem::InvalidArgument,
        MessageContains("allows at most " +
                        std::to_string(props.max_shared_memory_per_block_optin) +
                        " bytes per block (the opt-in limit"));
    return;
  }
  devmem::launch({kBlocks, kThreads, bytes, s}, sum_large_dynamic_shared, out, kWords);
  const std::vector<unsigned> got = out.to_vector<unsigned>(s);
  for (unsigned block = 0; block < kBlocks; ++block) {
    for (unsigned t = 0; t < kThreads; ++t) {
      unsigned expected = 0;
      for (unsigned i = t; i < kWords; i += kThreads) expected += (kWords - 1u - i) * 3u + block;
      REQUIRE(got[block * kThreads + t] == expected);
    }
  }
}

TEST_CASE("kernels: one kernel from two threads with different shared sizes beyond the default",
          "[kernels][thread]") {
  // Review 2, N13: the opt-in attribute was set to each launch's own size, so two threads could
  // interleave set and launch and one launch would fail. Only a GPU gives more than the default
  // (HIP-CPU's opt-in limit is its default; the host simulator does not opt in).
  const auto props = devmem::current_context()->properties();
  constexpr unsigned kThreads = 128;
  const unsigned small_words = 64 * 1024 / sizeof(unsigned);
  const unsigned large_words = 100 * 1024 / sizeof(unsigned);
  if (devmem::backend_name() == "host" ||
      props.max_shared_memory_per_block_optin <
          static_cast<int64_t>(large_words * sizeof(unsigned))) {
    WARN("the device gives no opt-in shared memory beyond 100 KiB: nothing to race");
    return;
  }
  const auto run = [&](unsigned words, int rounds, std::atomic<int>* failures) {
    const devmem::Stream s = devmem::stream();
    const DeviceArray out = devmem::device_array<unsigned>({1, kThreads}, Order::C, s);
    for (int round = 0; round < rounds; ++round) {
      try {
        devmem::launch({1, kThreads, words * sizeof(unsigned), s}, sum_large_dynamic_shared, out,
                       words);
      } catch (const std::exception&) {
        failures->fetch_add(1);
      }
    }
    const std::vector<unsigned> got = out.to_vector<unsigned>(s);
    unsigned expected = 0;
    for (unsigned i = 5; i < words; i += kThreads) expected += (words - 1u - i) * 3u;
    if (got[5] != expected) failures->fetch_add(1000);
  };
  std::atomic<int> failures{0};
  std::thread small([&] { run(small_words, 300, &failures); });
  std::thread large([&] { run(large_words, 300, &failures); });
  small.join();
  large.join();
  CHECK(failures.load() == 0);
}

TEST_CASE("kernels: static and dynamic shared memory count together against the opt-in limit",
          "[kernels]") {
  const auto props = devmem::current_context()->properties();
  if (devmem::backend_name() == "host" ||
      props.max_shared_memory_per_block_optin <= props.max_shared_memory_per_block) {
    WARN("the device has no opt-in shared memory: nothing to check");
    return;
  }
  const auto optin = static_cast<std::size_t>(props.max_shared_memory_per_block_optin);
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<unsigned>({kStaticSharedThreads}, Order::C, s);
  // 16 KiB static: the rest of the opt-in limit fits, 4 bytes more does not (the runtime's own
  // answer would be an invalid-argument launch error naming neither).
  const std::size_t fits = optin - 4096 * sizeof(unsigned);
  devmem::launch({1, kStaticSharedThreads, fits, s}, static_and_dynamic_shared, out);
  const std::vector<unsigned> got = out.to_vector<unsigned>(s);
  for (unsigned t = 0; t < kStaticSharedThreads; ++t) REQUIRE(got[t] == 3u * t);
  CHECK_THROWS_MATCHES(
      devmem::launch({1, kStaticSharedThreads, fits + 4, s}, static_and_dynamic_shared, out),
      devmem::InvalidArgument,
      MessageContains("bytes of static shared memory and " + std::to_string(fits + 4) +
                      " bytes of dynamic shared memory requested"));
}

TEST_CASE("kernels: thread, block and grid coordinates in 3 dimensions", "[kernels]") {
  const Dim3 grid(3, 2, 2);
  const Dim3 block(4, 5, 2);
  const DeviceArray out = devmem::device_array<long long>({4, 10, 12});
  devmem::launch({grid, block}, record_coordinates, out);
  const auto got = out.to_vector<long long>();
  for (int64_t z = 0; z < 4; ++z) {
    for (int64_t y = 0; y < 10; ++y) {
      for (int64_t x = 0; x < 12; ++x) {
        const long long expected =
            x + 100 * y + 10000 * z + 1000000LL * 12 + 100000000LL * 40 + 10000000000LL;
        CHECK(got[static_cast<std::size_t>((z * 10 + y) * 12 + x)] == expected);
      }
    }
  }
}

TEST_CASE("kernels: two shared arrays of the same type and shape", "[kernels]") {
  const DeviceArray out = devmem::device_array<int>({32});
  const DeviceArray aliasing = devmem::device_array<int>({2});
  devmem::launch({1, 32}, distinct_shared_arrays, out, aliasing);
  const auto got = out.to_vector<int>();
  for (int t = 0; t < 32; ++t) CHECK(got[static_cast<std::size_t>(t)] == (31 - t) + 100 + t);
  // Distinct tags: distinct arrays; one tag type at two call sites: one array.
  CHECK(aliasing.to_vector<int>() == std::vector<int>{1, 0});
}

TEST_CASE("kernels: an untagged shared array's call site reached twice is one array", "[kernels]") {
  const DeviceArray out = devmem::device_array<int>({32, 2});
  devmem::launch({1, 32}, untagged_site_reached_twice, out);
  const auto got = out.to_vector<int>();
  for (std::size_t t = 0; t < 32; ++t) {
    CHECK(got[2 * t] == 10);
    CHECK(got[2 * t + 1] == 20);
  }
}

TEST_CASE("kernels: every array kind answers shape, extent and size", "[kernels]") {
  // Constant shapes are known at compile time.
  static_assert(devmem::SharedArray<float, 4, 6>::shape(1) == 6);
  static_assert(devmem::SharedArray<float, 4, 6>::extent(0) == 4);
  static_assert(devmem::SharedArray<float, 4, 6>::size() == 24);
  static_assert(devmem::local_array<int, 3, 5, 2>::shape(0) == 3);
  static_assert(devmem::local_array<int, 3, 5, 2>::extent(2) == 2);
  static_assert(devmem::local_array<int, 3, 5, 2>::size() == 30);
  static_assert(devmem::local_array<double, 9>::extent(0) == 9);
  static_assert(
      std::is_same_v<decltype(std::declval<ArrayView<float, 2>>().extent(0)), std::int64_t>);
  static_assert(std::is_trivially_copyable_v<ArrayView<const float, 2>>);

  const DeviceArray d = devmem::device_array<float>({5, 7});
  const DeviceArray columns = d.slice(1, 1, std::nullopt, 3);  // shape (5, 2), strided
  const ArrayView<const float, 2> view = columns.view<const float, 2>();
  CHECK(view.shape(0) == 5);
  CHECK(view.extent(0) == 5);
  CHECK(view.shape(1) == 2);
  CHECK(view.extent(1) == 2);
  CHECK(view.size() == 10);

  const DeviceArray out = devmem::device_array<long long>({23});
  out.fill(-1LL);
  devmem::launch({1, 4}, report_array_shapes, view, out);
  CHECK(out.to_vector<long long>() ==
        std::vector<long long>{2,  4, 4, 6, 6, 24,            // shared float[4][6]
                               3,  3, 3, 5, 5, 2,  2, 30, 7,  // local int[3][5][2]
                               2,  5, 5, 2, 2, 10,            // the view (5, 2)
                               -1, -1});
}

TEST_CASE("kernels: strided and transposed views", "[kernels]") {
  std::vector<double> host(6 * 8);
  std::iota(host.begin(), host.end(), 0.0);
  const DeviceArray d = devmem::to_device(devmem::HostArray::view(host).reshape({6, 8}));

  SECTION("every other row, every third column") {
    const DeviceArray strided = d.slice({Slice{1, std::nullopt, 2}, Slice{0, std::nullopt, 3}});
    REQUIRE(strided.shape() == Shape{3, 3});
    devmem::launch({Dim3(1, 1), Dim3(4, 4)}, add_to_view, strided, 1000.0);
    const auto got = d.to_vector<double>();
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t j = 0; j < 8; ++j) {
        const double base = static_cast<double>(i * 8 + j);
        const bool in_view = i % 2 == 1 && j % 3 == 0;
        CHECK(got[static_cast<std::size_t>(i * 8 + j)] == (in_view ? base + 1000.0 : base));
      }
    }
  }
  SECTION("the transpose") {
    const DeviceArray t = d.T();
    const ArrayView<double, 2> view = t.view<double, 2>();
    CHECK(view.shape(0) == 8);
    CHECK(view.stride_bytes(0) == 8);
    CHECK(view.stride_bytes(1) == 64);
    devmem::launch({Dim3(1, 1), Dim3(8, 8)}, add_to_view, view, 0.25);
    const auto got = d.to_vector<double>();
    for (std::size_t i = 0; i < host.size(); ++i) CHECK(got[i] == host[i] + 0.25);
  }
}

TEST_CASE("kernels: DeviceArray::view checks dtype and rank", "[kernels]") {
  static_assert(std::is_trivially_copyable_v<ArrayView<float, 3>>);
  static_assert(std::is_trivially_copyable_v<ArrayView<const int, 0>>);
  const DeviceArray d = devmem::device_array<float>({3, 4});
  const ArrayView<float, 2> v = d.view<float, 2>();
  CHECK(v.data() == d.data());
  CHECK(v.size() == 12);
  CHECK(v.shape(1) == 4);
  CHECK(v.extent(0) == 3);
  CHECK(v.extent(1) == 4);
  CHECK(v.stride_bytes(0) == 16);
  const ArrayView<const float, 2> read_only = v;
  CHECK(read_only.data() == d.data());
  CHECK_THROWS_MATCHES(((void)d.view<int, 2>()), devmem::InvalidArgument,
                       Catch::Matchers::Message(
                           "DeviceArray::view<int32, 2>: the array's dtype is float32, not int32"));
  CHECK_THROWS_MATCHES(
      ((void)d.view<float, 1>()), devmem::InvalidArgument,
      Catch::Matchers::Message("DeviceArray::view<float32, 1>: the array has 2 dimensions, not 1"));
  CHECK_THROWS_MATCHES(
      ((void)d.index(0, 1).index(0, 2).view<float, 1>()), devmem::InvalidArgument,
      Catch::Matchers::Message("DeviceArray::view<float32, 1>: the array has 0 dimensions, not 1"));
  const ArrayView<float, 0> scalar = d.index(0, 1).index(0, 2).view<float, 0>();
  CHECK(scalar.size() == 1);
}

TEST_CASE("kernels: DeviceArray::view accepts aligned layouts of any sign and shape", "[kernels]") {
  SECTION("negative strides") {
    const DeviceArray d = devmem::device_array<int>({8});
    const DeviceArray reversed = d.slice(0, std::nullopt, std::nullopt, -1);
    const ArrayView<int, 1> v = reversed.view<int, 1>();
    CHECK(v.stride_bytes(0) == -4);
    CHECK(v.data() == reversed.data());
    devmem::launch({1, 8}, fill_iota, reversed, 0);
    CHECK(d.to_vector<int>() == std::vector<int>{7, 6, 5, 4, 3, 2, 1, 0});
  }
  SECTION("an axis of length 1 with an odd stride") {
    const DeviceArray row = devmem::device_array(Shape{1, 3}, f8(), Strides{5, 8});
    CHECK(row.view<double, 2>().stride_bytes(0) == 5);
    row.fill(1.0);
    devmem::launch({Dim3(1, 1), Dim3(4, 4)}, add_to_view, row, 1.5);
    CHECK(row.to_vector<double>() == std::vector<double>(3, 2.5));
    const DeviceArray one = devmem::device_array(Shape{1}, i4(), Strides{3});
    devmem::launch({1, 4}, fill_iota, one, 7);
    CHECK(one.to_vector<int>() == std::vector<int>{7});
  }
  SECTION("no elements: odd strides and a misaligned element 0 are never dereferenced") {
    const DeviceArray none = devmem::device_array(Shape{0, 3}, f8(), Strides{5, 8});
    CHECK(none.view<double, 2>().size() == 0);
    devmem::launch({Dim3(1, 1), Dim3(4, 4)}, add_to_view, none, 1.0);
    const DeviceArray shifted = devmem::device_array(Shape{2, 12}, u1()).slice(1, 1, 9).view(f4());
    const DeviceArray empty = shifted.slice(0, 0, 0);
    REQUIRE(empty.data() == shifted.data());
    CHECK(empty.view<float, 2>().size() == 0);
  }
  devmem::default_stream().synchronize();
}

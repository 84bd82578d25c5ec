// Cost of the host simulator's bounds checks (<devmem/array_view.hpp>): the same kernels built
// twice, as devmem_kernel_bench (checked, the default) and devmem_kernel_bench_unchecked
// (DEVMEM_HOST_NO_BOUNDS_CHECK compiles the comparisons out). Run both and compare the times;
// each prints the best of several runs per kernel. --quick: one small run (a smoke test).
#include "kernels.hpp"  // saxpy and the tiled matrix multiply, shared with `devmem bench`

#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using devmem::ArrayView;
namespace k = devmem::bench_kernels;

// One row per thread, a long inner loop of 2-d accesses: the checks' worst case.
DEVMEM_KERNEL void row_sums(ArrayView<const float, 2> m, ArrayView<float, 1> sums) {
  const std::int64_t r = devmem::global_id();
  if (r >= m.shape(0)) return;
  float sum = 0.0f;
  for (std::int64_t j = 0; j < m.shape(1); ++j) sum += m(r, j);
  sums[r] = sum;
}

template <class Launch>
double best_ms(int runs, Launch launch) {
  double best = 1e300;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    launch();
    devmem::current_context()->synchronize();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const int runs = quick ? 1 : 7;
#ifdef DEVMEM_HOST_NO_BOUNDS_CHECK
  const char* variant = "unchecked";
#else
  const char* variant = "checked";
#endif
  const std::int64_t n = quick ? 4096 : (1 << 20);
  const auto x = devmem::device_array<float>({n});
  const auto y = devmem::device_array<float>({n});
  x.fill(1.0f);
  y.fill(2.0f);
  fmt::print("{} saxpy ({} threads): {:.2f} ms\n", variant, n, best_ms(runs, [&] {
               devmem::launch({static_cast<unsigned>(n / 256), 256}, k::saxpy, x, y, 0.5f);
             }));

  const std::int64_t rows = quick ? 256 : 4096;
  const std::int64_t columns = quick ? 256 : 4096;
  const auto m = devmem::device_array<float>({rows, columns});
  const auto sums = devmem::device_array<float>({rows});
  m.fill(1.0f);
  fmt::print("{} row_sums ({}x{}, a loop per thread): {:.2f} ms\n", variant, rows, columns,
             best_ms(runs, [&] {
               devmem::launch({static_cast<unsigned>(rows / 64), 64}, row_sums, m, sums);
             }));

  const std::int64_t size = quick ? 64 : 256;
  const auto a = devmem::device_array<float>({size, size});
  const auto b = devmem::device_array<float>({size, size});
  const auto c = devmem::device_array<float>({size, size});
  a.fill(1.0f);
  b.fill(1.0f);
  const auto blocks = static_cast<unsigned>(size / k::kTile);
  fmt::print("{} tiled_matmul ({}x{}): {:.2f} ms\n", variant, size, size, best_ms(runs, [&] {
               devmem::launch({devmem::Dim3(blocks, blocks), devmem::Dim3(k::kTile, k::kTile)},
                              k::tiled_matmul, a, b, c);
             }));
  return 0;
}

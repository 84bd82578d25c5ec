// C = A x B with Numba's tiled shared-memory kernel, one source for every backend: compile it with
// the host compiler (the kernel runs in the host backend's simulator), with nvcc as a .cu file, or
// with hipcc -x hip. Usage: matmul [n] (default 256). Exit codes: 0 correct, 1 wrong result or
// error, 77 no device.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

constexpr int kTile = 16;

DEVMEM_KERNEL void tiled_matmul(devmem::ArrayView<const float, 2> a,
                                devmem::ArrayView<const float, 2> b,
                                devmem::ArrayView<float, 2> c) {
  // Two block-shared tiles; DEVMEM_SHARED_ARRAY gives each its own memory.
  DEVMEM_SHARED_ARRAY(tile_a, float, kTile, kTile);
  DEVMEM_SHARED_ARRAY(tile_b, float, kTile, kTile);
  const unsigned tx = devmem::thread_idx().x;
  const unsigned ty = devmem::thread_idx().y;
  const std::int64_t col = devmem::global_id(0);
  const std::int64_t row = devmem::global_id(1);
  const std::int64_t inner = a.shape(1);
  float acc = 0.0f;
  for (std::int64_t k0 = 0; k0 < inner; k0 += kTile) {
    // Each thread loads one element of each tile (0 outside the matrices), then the block waits.
    tile_a(ty, tx) = (row < a.shape(0) && k0 + tx < inner) ? a(row, k0 + tx) : 0.0f;
    tile_b(ty, tx) = (k0 + ty < inner && col < b.shape(1)) ? b(k0 + ty, col) : 0.0f;
    devmem::syncthreads();
    for (int k = 0; k < kTile; ++k) acc += tile_a(ty, k) * tile_b(k, tx);
    devmem::syncthreads();  // before the next iteration overwrites the tiles
  }
  if (row < c.shape(0) && col < c.shape(1)) c(row, col) = acc;
}

std::vector<float> random_matrix(std::int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> m(static_cast<std::size_t>(n * n));
  for (auto& x : m) x = dist(gen);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 256;
  if (n < 1 || n > 8192) {
    std::fprintf(stderr, "matmul: n must be in [1, 8192], got %s\n", argv[1]);
    return 1;
  }
  try {
    const auto a = random_matrix(n, 1);
    const auto b = random_matrix(n, 2);
    const devmem::Stream stream = devmem::stream();
    // Uploads, kernel and download are queued on one stream; the host waits once, at the end.
    const devmem::DeviceArray da =
        devmem::to_device(devmem::HostArray::view(a).reshape({n, n}), stream);
    const devmem::DeviceArray db =
        devmem::to_device(devmem::HostArray::view(b).reshape({n, n}), stream);
    const devmem::DeviceArray dc = devmem::device_array<float>({n, n}, devmem::Order::C, stream);
    const std::int64_t blocks = (n + kTile - 1) / kTile;  // Dim3 takes any integer type

    const devmem::Event start = stream.record();
    // Numba's order, kernel[grid, block, stream]; CUDA's {grid, block, shared_bytes, stream} works
    // too.
    devmem::launch({devmem::Dim3(blocks, blocks), devmem::Dim3(kTile, kTile), stream}, tiled_matmul,
                   da, db, dc);
    const devmem::Event stop = stream.record();
    const devmem::HostArray c = dc.copy_to_host(stream);
    stream.synchronize();

    // Check a sample of rows against a double-precision reference.
    double max_error = 0.0;
    for (std::int64_t i = 0; i < n; i += std::max<std::int64_t>(1, n / 16)) {
      for (std::int64_t j = 0; j < n; ++j) {
        double expected = 0.0;
        for (std::int64_t k = 0; k < n; ++k) {
          expected += static_cast<double>(a[static_cast<std::size_t>(i * n + k)]) *
                      b[static_cast<std::size_t>(k * n + j)];
        }
        max_error = std::max(max_error, std::abs(expected - c.at<float>(i, j)));
      }
    }
    const double ms = devmem::elapsed_ms(start, stop);
    const auto size = static_cast<double>(n);
    std::printf("matmul %lld x %lld on %s: %.3f ms (%.2f GFLOP/s), max error %.2e\n",
                static_cast<long long>(n), static_cast<long long>(n),
                devmem::backend_name().c_str(), ms, 2.0 * size * size * size / (ms * 1e6),
                max_error);
    return max_error <= 1e-3 * size ? 0 : 1;
  } catch (const devmem::NoDevice& e) {
    std::fprintf(stderr, "matmul: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "matmul: %s\n", e.what());
    return 1;
  }
}

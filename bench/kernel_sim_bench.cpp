// Speed of the host backend's kernel simulator (every GPU thread a fiber), in one run:
//
//   devmem_kernel_sim_bench [--quick]
//
//   empty      a kernel whose threads do nothing but start and end: simulated threads per second
//   barriers   five syncthreads() per thread over block-shared memory: threads and barrier waits
//              per second
//   histogram  a grid-stride loop of atomic_add over 2^22 values (2^18 with --quick): atomics
//              per second
// Each number is the best of 3 launches (after one warm-up), timed to completion (a synchronize
// after each: launch returns before the kernel has run, on the default stream too). Runs on the
// host backend whatever the build's default (DEVMEM_BACKEND is set to host when unset).
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

constexpr unsigned kBlock = 256;

DEVMEM_KERNEL void empty_kernel(devmem::ArrayView<int, 1> out) {
  if (devmem::grid<1>() == 0) out[0] = 1;
}

DEVMEM_KERNEL void barrier_kernel(devmem::ArrayView<int, 1> out) {
  DEVMEM_SHARED_ARRAY(cells, int, kBlock);
  const unsigned t = devmem::thread_idx().x;
  cells[t] = static_cast<int>(t);
  for (int k = 0; k < 4; ++k) {
    devmem::syncthreads();
    const int next = cells[(t + 1) % kBlock];
    devmem::syncthreads();
    cells[t] += next;
  }
  if (t == 0) out[devmem::block_idx().x] = cells[0];
}

DEVMEM_KERNEL void histogram_kernel(devmem::ArrayView<const int, 1> values,
                                    devmem::ArrayView<int, 1> bins) {
  for (std::int64_t i = devmem::grid<1>(); i < values.shape(0); i += devmem::gridsize<1>())
    devmem::atomic_add(bins, values[i], 1);
}

template <class Launch>
double best_seconds(Launch launch) {
  launch();  // warm-up: fiber stacks, worker threads
  devmem::synchronize();
  double best = 1e300;
  for (int r = 0; r < 3; ++r) {
    const auto start = std::chrono::steady_clock::now();
    launch();
    devmem::synchronize();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (took.count() < best) best = took.count();
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: devmem_kernel_sim_bench [--quick]\n");
      return 2;
    }
  }
  setenv("DEVMEM_BACKEND", "host", 0);
  try {
    const unsigned blocks = quick ? 32 : 256;
    const double threads = static_cast<double>(blocks) * kBlock;
    const devmem::DeviceArray out = devmem::device_array<int>({blocks});
    const double empty = best_seconds([&] { devmem::launch({blocks, kBlock}, empty_kernel, out); });
    std::printf("empty kernel, %u blocks x %u threads: %.4f s, %.2f M threads/s\n", blocks, kBlock,
                empty, threads / empty / 1e6);
    const double barriers = best_seconds([&] {
      devmem::launch({blocks, kBlock}, barrier_kernel, out);
    });
    std::printf(
        "8 syncthreads per thread, %u blocks x %u threads: %.4f s, %.2f M threads/s, "
        "%.2f M barrier waits/s\n",
        blocks, kBlock, barriers, threads / barriers / 1e6, 8 * threads / barriers / 1e6);
    std::vector<int> values(std::size_t{1} << (quick ? 18 : 22));
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<int>((i * 2654435761u) % 64);
    const devmem::DeviceArray d_values = devmem::to_device(values);
    const devmem::DeviceArray bins = devmem::to_device(std::vector<int>(64, 0));
    const double histogram = best_seconds([&] {
      devmem::launch({64, kBlock}, histogram_kernel, d_values, bins);
    });
    std::printf(
        "histogram, %zu values, 64 blocks x %u threads, grid-stride atomic_add: %.4f s, "
        "%.1f M atomics/s\n",
        values.size(), kBlock, histogram, static_cast<double>(values.size()) / histogram / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "devmem_kernel_sim_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

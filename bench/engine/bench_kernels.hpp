// The kernel group of `devmem bench`: kernels launched through devmem against the same
// computation written as a plain C++ loop, compiled into the same program and timed in the same
// run. The kernels are compiled by the host compiler, so they run on the host backend's simulator
// only; on another backend the group is skipped (and says so).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace devmem::app {

struct KernelResult {
  std::string kernel;    // saxpy, reduction, matmul, transpose
  std::int64_t size;     // elements (saxpy, reduction) or the side of the square matrices
  std::int64_t bytes;    // of the arrays the kernel reads and writes
  std::int64_t threads;  // simulated threads per launch
  int launches_per_sample;
  double kernel_seconds;  // per launch, median, wall clock to completion
  double loop_seconds;    // the plain loop, per run, median
  [[nodiscard]] double threads_per_second() const {
    return static_cast<double>(threads) / kernel_seconds;
  }
  /// How many times slower the kernel is than the plain loop.
  [[nodiscard]] double slowdown() const { return kernel_seconds / loop_seconds; }
};

/// Names of the cases, in the order they are measured (for the progress display).
[[nodiscard]] std::vector<std::string> kernel_case_labels();

/// Measures every case; `step` is called with the label before each.
[[nodiscard]] std::vector<KernelResult> measure_kernels(
    int repeats, bool quick, const std::function<void(std::string_view)>& step);

}  // namespace devmem::app

// `devmem bench`, the parts of a run that its files share: the results (Report and its rows), the
// progress bar, and the steps that bench_command.cpp calls: the sweep (bench_measure.cpp), the
// goals evaluated on it (bench_goals.cpp) and the output as a table, JSON or CSV
// (bench_output.cpp). Internal to the program; a header of its own so that each of those files
// holds one step of the run.
#pragma once

#include "bench_kernels.hpp"
#include "bench_options.hpp"
#include "raw_baseline.hpp"

#include <devmem/devmem.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::app {

// ---- Results ------------------------------------------------------------------------------------

struct CopyResult {
  Direction direction;
  HostMemory memory;
  std::int64_t bytes;
  int ops_per_sample;
  double devmem_seconds;  // per copy, median
  double raw_seconds;
  [[nodiscard]] double devmem_gbps() const {
    return static_cast<double>(bytes) / devmem_seconds / 1e9;
  }
  [[nodiscard]] double raw_gbps() const { return static_cast<double>(bytes) / raw_seconds / 1e9; }
  /// > 1: devmem is faster than the raw call.
  [[nodiscard]] double ratio() const { return raw_seconds / devmem_seconds; }
};

/// A strided transfer (a 4-d float32 array seen transposed or with its last axis reversed on the
/// device side, dense on the other) against the raw contiguous copy of the same bytes (the bound
/// a strided copy can approach) and, like with like, against the plain loop a programmer writes
/// for the same layout (the host backend only: a GPU's plain version is a kernel).
struct StridedResult {
  std::string layout;
  Direction direction;
  HostMemory memory;
  std::int64_t side;  // the array is side^4 float32
  std::int64_t bytes;
  int ops_per_sample;
  double devmem_seconds;  // per copy, median, wall clock to completion
  double raw_seconds;
  double loop_seconds = -1.0;  // the plain loop over the same layout; negative: not measured
  [[nodiscard]] double devmem_gbps() const {
    return static_cast<double>(bytes) / devmem_seconds / 1e9;
  }
  [[nodiscard]] double raw_gbps() const { return static_cast<double>(bytes) / raw_seconds / 1e9; }
  [[nodiscard]] bool has_loop() const { return loop_seconds > 0.0; }
  [[nodiscard]] double loop_gbps() const { return static_cast<double>(bytes) / loop_seconds / 1e9; }
  /// Strided throughput as a fraction of the contiguous copy's (1: as fast).
  [[nodiscard]] double ratio() const { return raw_seconds / devmem_seconds; }
  /// > 1: devmem's strided copy is faster than the plain loop over the same layout.
  [[nodiscard]] double ratio_vs_loop() const { return loop_seconds / devmem_seconds; }
};

struct AllocResult {
  std::int64_t bytes;
  double raw_ns;  // allocate + free pair, median
  double direct_ns;
  double pool_ns;
};

/// Allocation, first write of every byte, release: what a fresh allocation really costs.
struct FirstUseResult {
  std::int64_t bytes;
  double direct_ms;
  double pool_ms;
};

struct EnqueueResult {
  std::int64_t bytes;
  double api_ns;      // DeviceArray::copy_to_device on a stream
  double backend_ns;  // devmem::Backend::copy, the layer each backend implements
  double raw_ns;      // cudaMemcpyAsync / hipMemcpyAsync; < 0 when there is none (host)
};

struct Goal {
  std::string name;
  double measured;
  double target;
  bool at_most;  // the goal is measured <= target (a latency), else measured >= target
  std::string unit;
  [[nodiscard]] bool met() const { return at_most ? measured <= target : measured >= target; }
};

struct Report {
  std::string backend;
  std::string device;
  std::string architecture;
  std::string version;
  std::string date;
  std::string raw_copy_call;
  std::string raw_alloc_call;
  int repeats = 0;
  bool quick = false;
  std::vector<CopyResult> copies;
  std::vector<StridedResult> strided;
  std::vector<AllocResult> allocations;
  std::optional<FirstUseResult> first_use;
  std::optional<EnqueueResult> enqueue;
  std::vector<KernelResult> kernels;
  std::string kernels_skipped;  // why the kernel group did not run, when it was asked for
  std::vector<Goal> goals;
};

// ---- Progress -----------------------------------------------------------------------------------

/// A one-line bar on stderr, redrawn in place; only when stderr is a terminal, so that logs and
/// pipes get no control characters.
class Progress {
 public:
  Progress(bool wanted, int total)
      : enabled_(wanted && ::isatty(STDERR_FILENO) == 1), total_(total) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { clear(); }

  void step(std::string_view label) {
    ++done_;
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = total_ == 0 ? kWidth : std::min(kWidth, done_ * kWidth / total_);
    fmt::print(stderr, "\r[{:=<{}}{: <{}}] {:>3}/{} {:<32}", "", filled, "", kWidth - filled, done_,
               total_, label);
    std::fflush(stderr);
  }
  void clear() {
    if (!enabled_ || cleared_) return;
    fmt::print(stderr, "\r{: <80}\r", "");
    std::fflush(stderr);
    cleared_ = true;
  }

 private:
  bool enabled_;
  int total_;
  int done_ = 0;
  bool cleared_ = false;
};

// ---- The sweep (bench_measure.cpp) -------------------------------------------------------------

struct Combination {
  Direction direction;
  HostMemory memory;
};

std::vector<Combination> combinations(const BenchOptions& options);
std::vector<CopyResult> measure_copies(const BenchOptions& options, RawBaseline& raw,
                                       Progress& progress);
/// Strided layouts of the device side: a full transpose and a reversed innermost axis, the two
/// that were one vendor call per element before the bounded strided path.
const std::vector<std::pair<std::string, DeviceArray (*)(const DeviceArray&)>>& strided_layouts();
std::vector<StridedResult> measure_strided(const BenchOptions& options, RawBaseline& raw,
                                           Progress& progress);
std::vector<std::int64_t> alloc_sizes(const BenchOptions& options, std::int64_t capacity);
void measure_allocations(const BenchOptions& options, RawBaseline& raw, Report& report,
                         Progress& progress);
EnqueueResult measure_enqueue(const BenchOptions& options, RawBaseline& raw);

// ---- The goals (bench_goals.cpp) ---------------------------------------------------------------

void evaluate_goals(Report& report);

// ---- The output (bench_output.cpp) -------------------------------------------------------------

std::string print_table(const Report& r);
std::string print_json(const Report& r);
std::string print_csv(const Report& r);

}  // namespace devmem::app

// `devmem bench`, the command: parsing its options, the order of a run (the sweep, the goals, the
// output) and the files the output goes to. The steps themselves are in bench_measure.cpp,
// bench_goals.cpp and bench_output.cpp.
#include "bench_command.hpp"

#include "bench_kernels.hpp"
#include "bench_options.hpp"
#include "bench_report.hpp"
#include "raw_baseline.hpp"

#include <devmem/devmem.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devmem::app {
namespace {

constexpr int kExitRuntimeError = 1;
constexpr int kExitUsage = 2;

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { (void)std::fclose(f); }
};
using OutputFile = std::unique_ptr<std::FILE, FileCloser>;

/// Opens `path` for writing when `target` names a file (null for stdout or no output). Done before
/// the measurements, which take a while: an unwritable path fails at once, not after the run. An
/// error is a runtime error (exit 1).
OutputFile open_output(const OutputTarget& target) {
  if (!target.enabled || target.path.empty()) return nullptr;
  std::FILE* f = std::fopen(target.path.c_str(), "w");
  if (f == nullptr) {
    throw Error(fmt::format("cannot write {}: {}", target.path, std::strerror(errno)));
  }
  return OutputFile(f);
}

/// Writes `text` to `file` (opened by open_output for `path`) and closes it.
void write_file(OutputFile file, const std::string& path, const std::string& text) {
  const bool ok = std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
  const bool closed = std::fclose(file.release()) == 0;
  if (!ok || !closed) throw Error(fmt::format("cannot write {}", path));
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return fmt::format("{:%Y-%m-%d %H:%M}", local);
}

/// Writes `text` where `output` asks for it: stdout (no path) or its file, opened before the run.
void emit(const OutputTarget& output, OutputFile file, const std::string& text) {
  if (!output.enabled) return;
  if (output.path.empty()) {
    fmt::print("{}", text);
  } else {
    write_file(std::move(file), output.path, text);
  }
}

int run(const BenchOptions& options) {
  Report report;
  report.backend = backend_name();
  if (device_count() == 0) {
    fmt::print(stderr, "devmem bench: no device: {}\n", active_backend().no_device_reason());
    return kExitRuntimeError;
  }
  const auto ctx = current_context();
  const DeviceProperties props = ctx->properties();
  report.device = props.name;
  report.architecture = props.architecture;
  report.version = devmem::version();
  report.date = today();
  report.repeats = options.repeats;
  report.quick = options.quick;

  // devmem's two device buffers of the largest size (D2D), and on a GPU the raw baseline's two.
  const MemoryInfo memory = ctx->memory_info();
  const std::int64_t needed = options.max_size * (report.backend == "host" ? 2 : 4);
  if (options.measure_transfers && needed > memory.free) {
    fmt::print(stderr,
               "devmem bench: --max-size {} needs {} of device memory, the device has {} free\n",
               devmem::format_bytes(options.max_size), devmem::format_bytes(needed),
               devmem::format_bytes(memory.free));
    return kExitRuntimeError;
  }

  OutputFile json_file = open_output(options.json);
  OutputFile csv_file = open_output(options.csv);

  const std::unique_ptr<RawBaseline> raw = make_raw_baseline(report.backend);
  report.raw_copy_call = raw->copy_call();
  report.raw_alloc_call = raw->alloc_call();

  const bool transfers = options.measure_transfers;
  // The kernels of the group are compiled by the host compiler into this program: they run on the
  // host backend's simulator, not on a GPU backend.
  const bool kernels = options.measure_kernels && report.backend == "host";
  if (options.measure_kernels && !kernels) {
    report.kernels_skipped = fmt::format(
        "the kernel group runs on the host backend only (its kernels are compiled by the host "
        "compiler into this program); run with DEVMEM_BACKEND=host to measure it");
  }
  const std::vector<Combination> combos = combinations(options);
  const int alloc_steps = transfers && options.measure_alloc
                              ? static_cast<int>(alloc_sizes(options, memory.total).size()) + 1
                              : 0;
  const int strided_steps =
      transfers ? static_cast<int>(options.directions.size() * strided_layouts().size()) : 0;
  const int copy_steps = transfers ? static_cast<int>(combos.size() * options.sizes().size()) : 0;
  const int kernel_steps = kernels ? static_cast<int>(kernel_case_labels().size()) : 0;
  Progress progress(options.progress, copy_steps + strided_steps + alloc_steps + kernel_steps);
  if (transfers) {
    report.copies = measure_copies(options, *raw, progress);
    report.strided = measure_strided(options, *raw, progress);
    if (options.measure_alloc) {
      measure_allocations(options, *raw, report, progress);
      report.enqueue = measure_enqueue(options, *raw);
    }
  }
  if (kernels) {
    report.kernels = measure_kernels(options.repeats, options.quick,
                                     [&](std::string_view label) { progress.step(label); });
  }
  progress.clear();
  evaluate_goals(report);

  const bool table_to_stdout = !(options.json.enabled && options.json.path.empty()) &&
                               !(options.csv.enabled && options.csv.path.empty());
  if (table_to_stdout) fmt::print("{}", print_table(report));
  emit(options.json, std::move(json_file), print_json(report));
  emit(options.csv, std::move(csv_file), print_csv(report));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int run_bench(std::span<const std::string_view> args) {
  BenchOptions options;
  try {
    options = parse_bench_options(args);
  } catch (const UsageError& e) {
    fmt::print(stderr, "devmem bench: {}\n(see devmem bench --help)\n", e.what());
    return kExitUsage;
  }
  if (options.help) {
    fmt::print("{}", bench_usage());
    return 0;
  }
  try {
    return run(options);
  } catch (const NoDevice& e) {
    fmt::print(stderr, "devmem bench: no device: {}\n", e.what());
    return kExitRuntimeError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "devmem bench: {}\n", e.what());
    return kExitRuntimeError;
  }
}

}  // namespace devmem::app

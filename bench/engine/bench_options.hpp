// Options of `devmem bench`: parsing and validation, separate from running so that every usage
// error is found before any device work starts (exit code 2, nothing measured).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace devmem::app {

/// A copy direction the benchmark measures.
enum class Direction { HostToDevice, DeviceToHost, DeviceToDevice };
/// The host side of a transfer. Device-to-device copies have no host side (HostMemory::None).
enum class HostMemory { Pageable, Pinned, Mapped, None };

[[nodiscard]] std::string_view to_string(Direction direction) noexcept;
[[nodiscard]] std::string_view to_string(HostMemory memory) noexcept;

/// A command line that cannot be run: the message says which argument and why.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Where one output format goes: nowhere, stdout (instead of the table), or a file (besides it).
struct OutputTarget {
  bool enabled = false;
  std::string path;  // empty: stdout
};

struct BenchOptions {
  bool help = false;
  bool quick = false;
  std::int64_t min_size = 4;
  std::int64_t max_size = std::int64_t{1} << 30;
  int repeats = 5;
  std::vector<Direction> directions{Direction::HostToDevice, Direction::DeviceToHost,
                                    Direction::DeviceToDevice};
  std::vector<HostMemory> memories{HostMemory::Pageable, HostMemory::Pinned, HostMemory::Mapped};
  bool measure_alloc = true;
  bool measure_transfers = true;  // copies, strided copies, allocation (--kernels: none of them)
  bool measure_kernels = true;    // the kernel group (host backend only)
  OutputTarget json;
  OutputTarget csv;
  bool progress = true;

  /// The sizes swept: min_size, then x4 steps, and max_size itself.
  [[nodiscard]] std::vector<std::int64_t> sizes() const;
};

/// The largest transfer size accepted (--max-size): 16 GiB, beyond any device this runs on.
inline constexpr std::int64_t kLargestSize = std::int64_t{16} << 30;

/// "4", "64K", "16M", "1G", "1GiB", "512KB" (binary multiples): bytes. Throws UsageError naming
/// `option` when the text is not a size or lies outside [1 B, kLargestSize].
[[nodiscard]] std::int64_t parse_size(std::string_view option, std::string_view text);

/// Parses the arguments after `bench`. Throws UsageError.
[[nodiscard]] BenchOptions parse_bench_options(std::span<const std::string_view> args);

/// The text of `devmem bench --help`.
[[nodiscard]] std::string bench_usage();

}  // namespace devmem::app

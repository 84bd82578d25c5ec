// `devmem bench`: devmem's transfers, allocations and enqueue cost next to the raw vendor calls,
// measured in one run (see bench_usage() for the options).
#pragma once

#include <span>
#include <string_view>

namespace devmem::app {

/// Runs `devmem bench <args>`; returns the exit code (0 done, 1 no device or runtime error, 2 usage
/// error). Messages go to stderr, results to stdout (and files named by --json=/--csv=).
[[nodiscard]] int run_bench(std::span<const std::string_view> args);

}  // namespace devmem::app

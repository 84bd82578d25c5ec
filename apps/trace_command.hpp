// `devmem trace summarize FILE`: what a trace written by DEVMEM_TRACE or devmem::trace_to shows,
// in a few lines (devmem::summarize_trace does the reading).
#pragma once

#include <span>
#include <string_view>

namespace devmem::app {

/// Runs `devmem trace <args>`; returns the exit code (0 done, 1 the file could not be read, 2 usage
/// error). The summary goes to stdout, messages to stderr.
[[nodiscard]] int run_trace(std::span<const std::string_view> args);

}  // namespace devmem::app

#include "trace_command.hpp"

#include <devmem/byte_size.hpp>
#include <devmem/trace.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace devmem::app {

namespace {

constexpr int kUsageError = 2;

void trace_usage(std::FILE* out) {
  fmt::print(out,
             "usage: devmem trace summarize FILE\n"
             "  FILE: a trace written by a devmem program run with DEVMEM_TRACE=FILE (or by\n"
             "  devmem::trace_to / devmem.trace): peak device memory and when, the allocations\n"
             "  by operation and manager (and call site, DEVMEM_TRACE_CALL_SITES=1), transfer\n"
             "  totals by direction, time spent synchronizing, the frees deferred longest.\n"
             "  Open FILE itself in"
             " https://ui.perfetto.dev or chrome://tracing for the timeline.\n");
}

void print_summary(const std::string& file, const TraceSummary& s) {
  fmt::print("trace {}: {} events over {:.3f} s\n", file, s.events, s.duration_seconds);
  if (s.peaks.empty()) fmt::print("device memory: no allocation recorded\n");
  for (const auto& peak : s.peaks) {
    fmt::print("device {}: peak {} in use at {:.3f} s\n", peak.device,
               format_bytes(peak.peak_bytes), peak.at_seconds);
  }
  if (!s.top_sites.empty()) {
    fmt::print("allocations by operation and manager (largest first):\n");
    for (const auto& site : s.top_sites) {
      fmt::print("  {:<24} {:<10} {:>8} x  {:>12}{}{}\n", site.operation, site.manager, site.count,
                 format_bytes(site.bytes), site.call_site.empty() ? "" : "  from ", site.call_site);
    }
  }
  if (!s.transfers.empty()) {
    fmt::print("transfers (host time inside the copy calls):\n");
    for (const auto& t : s.transfers) {
      fmt::print("  {:<4} {:>8} x  {:>12}  {:.6f} s{}\n", t.direction, t.count,
                 format_bytes(t.bytes), t.seconds,
                 t.seconds > 0 ? fmt::format("  ({:.2f} GB/s)",
                                             static_cast<double>(t.bytes) / t.seconds / 1e9)
                               : std::string());
    }
  }
  fmt::print("synchronizations: {} taking {:.6f} s\n", s.synchronizations, s.synchronize_seconds);
  fmt::print("kernel launches: {}; pool hits {}, misses {}; deferred-free flushes: {}\n",
             s.launches, s.pool_hits, s.pool_misses, s.flushes);
  if (!s.longest_deferred.empty()) {
    fmt::print("frees deferred longest:\n");
    for (const auto& d : s.longest_deferred) {
      fmt::print("  {} ({}) freed {:.6f} s after its array let go\n", d.address,
                 format_bytes(d.bytes), d.deferred_seconds);
    }
  }
}

}  // namespace

int run_trace(std::span<const std::string_view> args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h")) {
    trace_usage(stdout);
    return 0;
  }
  if (args.size() != 2 || args[0] != "summarize") {
    trace_usage(stderr);
    return kUsageError;
  }
  const std::string file(args[1]);
  print_summary(file, summarize_trace(file));
  return 0;
}

}  // namespace devmem::app

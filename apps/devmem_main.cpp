// devmem: shows what devmem sees (backends, devices, memory, features) and how fast it is.
//   devmem info          compiled backends, the active one, every device
//   devmem bench [...]   transfers, allocation and enqueue cost next to the raw vendor calls
//   devmem trace summarize FILE   what a trace (DEVMEM_TRACE=FILE) shows
//   devmem --version
// Exit codes: 0 success, 1 runtime failure (e.g. no device), 2 usage error.
#include "bench/engine/bench_command.hpp"
#include "trace_command.hpp"

#include <devmem/devmem.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int kUsageError = 2;

// Checks a feature by using it on a small buffer: reports what works, not what is claimed.
std::string probe(const char* what, void (*use)()) {
  try {
    use();
    return fmt::format("{}: yes", what);
  } catch (const std::exception& e) {
    return fmt::format("{}: no ({})", what, e.what());
  }
}

int info() {
  fmt::print("devmem {} (compiled backends: {})\n", devmem::version(),
             fmt::join(devmem::compiled_backends(), ", "));
  const std::string backend = devmem::backend_name();
  fmt::print("active backend: {}\n", backend);
  const int n = devmem::device_count();
  if (n == 0) {
    fmt::print("no device: {}\n", devmem::active_backend().no_device_reason());
    return 1;
  }
  for (int d = 0; d < n; ++d) {
    devmem::select_device(d);
    const auto ctx = devmem::current_context();
    const devmem::DeviceProperties p = ctx->properties();
    const devmem::MemoryInfo m = ctx->memory_info();
    fmt::print("device {}: {} ({})\n", d, p.name, p.architecture);
    fmt::print("  memory: {} free of {}\n", devmem::format_bytes(m.free),
               devmem::format_bytes(m.total));
    fmt::print(
        "  multiprocessors: {}, warp size: {}, max threads per block: {}, shared memory "
        "per block: {} ({} with opt-in)\n",
        p.multiprocessor_count, p.warp_size, p.max_threads_per_block,
        devmem::format_bytes(p.max_shared_memory_per_block),
        devmem::format_bytes(p.max_shared_memory_per_block_optin));
    fmt::print("  {}\n",
               probe("pinned host memory", [] { (void)devmem::pinned_array<float>({1024}); }));
    fmt::print("  {}\n", probe("mapped host memory",
                               [] { (void)devmem::mapped_array<float>({1024}).device(); }));
    fmt::print("  {}\n", probe("host registration", [] {
                 devmem::HostArray a({1024}, devmem::dtype_of<float>());
                 (void)devmem::registered(a);
               }));
    fmt::print("  {}\n", probe("streams and events", [] {
                 const devmem::Stream s = devmem::stream();
                 const devmem::Event e = s.record();
                 e.synchronize();
               }));
  }
  return 0;
}

void usage(std::FILE* out) {
  fmt::print(
      out,
      "usage: devmem <command>\n"
      "commands:\n"
      "  info        backends, devices, memory and features\n"
      "  bench       transfer bandwidth, allocation latency and enqueue cost next to the raw\n"
      "              vendor calls (devmem bench --help)\n"
      "  trace       trace summarize FILE: peak memory, allocations, transfers and waits in a\n"
      "              trace written with DEVMEM_TRACE=FILE (devmem trace --help)\n"
      "  --version   the library version\n"
      "environment: DEVMEM_BACKEND picks a compiled backend ({}); DEVMEM_TRACE=FILE writes a\n"
      "trace of any devmem program (open it in https://ui.perfetto.dev).\n",
      fmt::join(devmem::compiled_backends(), ", "));
}

}  // namespace

int main(int argc, char* argv[]) {
  if (argc < 2) {
    usage(stderr);
    return kUsageError;
  }
  const std::string_view command = argv[1];
  if ((command == "info" || command == "--version") && argc > 2) {
    fmt::print(stderr, "devmem {}: unexpected argument '{}' (it takes none)\n", command, argv[2]);
    usage(stderr);
    return kUsageError;
  }
  try {
    if (command == "info") return info();
    if (command == "bench") {
      const std::vector<std::string_view> args(argv + 2, argv + argc);
      return devmem::app::run_bench(args);
    }
    if (command == "trace") {
      const std::vector<std::string_view> args(argv + 2, argv + argc);
      return devmem::app::run_trace(args);
    }
    if (command == "--version") {
      fmt::print("devmem {}\n", devmem::version());
      return 0;
    }
    if (command == "--help" || command == "-h") {
      usage(stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "devmem {}: {}\n", command, e.what());
    return 1;
  }
  fmt::print(stderr, "devmem: unknown command '{}'\n", command);
  usage(stderr);
  return kUsageError;
}

// `devmem bench`, the goals (docs/devmem-program.md#goals): evaluated on what the sweep measured.
// A file of its own because the goals change on their own schedule, not with the measurements or
// the output.
#include "bench_report.hpp"

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

// ---- Goals, evaluated on what was measured (docs/devmem-program.md#goals) -----------------------

/// The ratios of the copies matching `pick` of at least `from` bytes, in ascending order.
std::vector<double> sorted_ratios(const Report& report, std::int64_t from,
                                  const std::function<bool(const CopyResult&)>& pick) {
  std::vector<double> ratios;
  for (const CopyResult& c : report.copies) {
    if (c.bytes >= from && pick(c)) ratios.push_back(c.ratio());
  }
  std::sort(ratios.begin(), ratios.end());
  return ratios;
}

/// The smallest ratio among copies matching `pick` of at least `from` bytes, if any was measured.
std::optional<double> worst_ratio(const Report& report, std::int64_t from,
                                  const std::function<bool(const CopyResult&)>& pick) {
  const std::vector<double> ratios = sorted_ratios(report, from, pick);
  if (ratios.empty()) return std::nullopt;
  return ratios.front();
}

/// The median ratio over the same cells: the worst cell of a sweep is decided by its unluckiest
/// sample (a descheduled thread on a shared or virtual machine), the median by the typical one.
std::optional<double> median_ratio(const Report& report, std::int64_t from,
                                   const std::function<bool(const CopyResult&)>& pick) {
  const std::vector<double> ratios = sorted_ratios(report, from, pick);
  if (ratios.empty()) return std::nullopt;
  const std::size_t mid = ratios.size() / 2;
  return ratios.size() % 2 == 1 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
}

/// Times slower than the plain loop of kernel `name` at `size`, if it was measured.
std::optional<double> kernel_slowdown(const Report& report, std::string_view name,
                                      std::int64_t size) {
  for (const KernelResult& k : report.kernels) {
    if (k.kernel == name && k.size == size) return k.slowdown();
  }
  return std::nullopt;
}

}  // namespace

void evaluate_goals(Report& report) {
  const auto add = [&](std::string name, std::optional<double> measured, double target,
                       bool at_most, std::string unit) {
    if (measured) {
      report.goals.push_back({std::move(name), *measured, target, at_most, std::move(unit)});
    }
  };
  // The pool's goal on every backend: what an allocation costs a program that allocates in a loop.
  // (The host backend's goals were once direct / pool ratios at 64 MiB, re-allocation and
  // allocate + first write, 30x each: they measured the simulator's mmap and first-touch page
  // faults, which its block cache of freed blocks now avoids, as a GPU's allocator has none.)
  const auto pooled_goal = [&] {
    std::optional<double> worst_pool;
    for (const AllocResult& a : report.allocations) {
      worst_pool = worst_pool ? std::max(*worst_pool, a.pool_ns) : a.pool_ns;
    }
    add("pooled alloc+free (slowest size)", worst_pool, 1000, true, "ns");
  };
  // The simulator against plain loops: what bounds the size of a test or a CPU-only run.
  add("kernel matmul 256 vs plain loop (times slower)", kernel_slowdown(report, "matmul", 256), 60,
      true, "x");
  add("kernel saxpy 2^20 vs plain loop (times slower)",
      kernel_slowdown(report, "saxpy", std::int64_t{1} << 20), 20, true, "x");
  add("kernel reduction 2^20 vs plain loop (times slower)",
      kernel_slowdown(report, "reduction", std::int64_t{1} << 20), 60, true, "x");
  const auto any = [](const CopyResult&) { return true; };
  if (report.backend == "host") {
    add("copies >= 64 KiB vs 1-thread memcpy (worst)", worst_ratio(report, 64 << 10, any), 0.9,
        false, "x");
    add("copies >= 64 KiB vs 1-thread memcpy (median)", median_ratio(report, 64 << 10, any), 0.9,
        false, "x");
    add("copies >= 16 MiB vs 1-thread memcpy (worst)", worst_ratio(report, 16 << 20, any), 1.5,
        false, "x");
    add("copies >= 16 MiB vs 1-thread memcpy (median)", median_ratio(report, 16 << 20, any), 1.5,
        false, "x");
    if (report.enqueue) {
      add("enqueue of a 64 B copy, Backend::copy", report.enqueue->backend_ns, 500, true, "ns");
    }
    pooled_goal();
    return;
  }
  const auto pinned_host = [](const CopyResult& c) {
    return c.memory == HostMemory::Pinned && c.direction != Direction::DeviceToDevice;
  };
  add("pinned H2D/D2H >= 1 MiB vs raw (worst)", worst_ratio(report, 1 << 20, pinned_host), 0.95,
      false, "x");
  add("D2D vs raw (worst, >= 1 MiB)",
      worst_ratio(report, 1 << 20,
                  [](const CopyResult& c) { return c.direction == Direction::DeviceToDevice; }),
      0.95, false, "x");
  add("pageable H2D/D2H >= 16 MiB vs raw (worst)",
      worst_ratio(report, 16 << 20,
                  [](const CopyResult& c) { return c.memory == HostMemory::Pageable; }),
      2.0, false, "x");
  pooled_goal();
}

}  // namespace devmem::app

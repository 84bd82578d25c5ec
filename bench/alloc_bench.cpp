// Allocation latency of devmem's memory managers against the raw backend call, in one run.
//
//   devmem_alloc_bench [--quick] [--markdown]
//
// For each size: the median time of one allocate + free pair
//   raw     Backend::allocate + Backend::deallocate (what cudaMalloc + cudaFree cost)
//   direct  device_array + release through the deferred queue, DirectMemoryManager
//   pool    the same through PoolMemoryManager (blocks come back from its cache)
// and the ratios raw/pool and direct/pool (how many times faster the pool is). Then a random
// workload like RMM's random_allocations: N allocations of random sizes, freed in random order.
#include <devmem/devmem.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string human(std::int64_t bytes) {
  if (bytes >= (1 << 20)) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (1 << 10)) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

// Median nanoseconds of `op` over `repeats` timed batches of `batch` calls, after a warm-up batch.
template <class Op>
double time_ns(int repeats, int batch, Op&& op) {
  for (int i = 0; i < batch; ++i) op();
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < batch; ++i) op();
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
                      batch);
  }
  return median(std::move(samples));
}

double raw_pair_ns(std::int64_t bytes, int repeats, int batch) {
  devmem::Backend& backend = devmem::active_backend();
  const int device = devmem::current_device();
  return time_ns(repeats, batch, [&] {
    void* p = backend.allocate(device, static_cast<std::size_t>(bytes));
    backend.deallocate(device, p);
  });
}

double managed_pair_ns(std::int64_t bytes, int repeats, int batch) {
  return time_ns(repeats, batch, [&] {
    const devmem::DeviceArray a =
        devmem::device_array(devmem::Shape{bytes}, devmem::dtype_of<std::uint8_t>());
    (void)a;
  });
}

double random_workload_ms(int allocations, std::int64_t max_bytes, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> size(1, max_bytes);
  std::vector<devmem::DeviceArray> live;
  live.reserve(static_cast<std::size_t>(allocations));
  const auto start = Clock::now();
  for (int i = 0; i < allocations; ++i) {
    live.push_back(
        devmem::device_array(devmem::Shape{size(rng)}, devmem::dtype_of<std::uint8_t>()));
    // Free a random live array half of the time, like RMM's random_allocations.
    if (rng() % 2 == 0 && !live.empty()) {
      const std::size_t victim = rng() % live.size();
      std::swap(live[victim], live.back());
      live.pop_back();
    }
  }
  live.clear();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char* argv[]) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else {
      fmt::print(stderr, "usage: devmem_alloc_bench [--quick]\n");
      return 2;
    }
  }
  const auto ctx = devmem::current_context();
  const devmem::DeviceProperties props = ctx->properties();
  fmt::print("# devmem allocation benchmark\n\nbackend: {}, device: {} ({}), devmem {}\n\n",
             devmem::backend_name(), props.name, props.architecture, devmem::version());

  const int repeats = quick ? 3 : 15;
  const int batch = quick ? 11 : 55;  // multiples of 11: whole deferred-queue flush cycles
  std::vector<std::int64_t> sizes;
  for (std::int64_t s = 256; s <= (std::int64_t{64} << 20); s *= quick ? 64 : 4) sizes.push_back(s);

  const auto direct = devmem::make_memory_manager("direct", *ctx);
  const auto pool = devmem::make_memory_manager("pool", *ctx);

  fmt::print(
      "| size | raw alloc+free (ns) | direct (ns) | pool (ns) | raw / pool | direct / pool |\n");
  fmt::print("|---:|---:|---:|---:|---:|---:|\n");
  for (const std::int64_t bytes : sizes) {
    const double raw = raw_pair_ns(bytes, repeats, batch);
    ctx->set_memory_manager(direct);
    const double d = managed_pair_ns(bytes, repeats, batch);
    ctx->flush_deallocations();
    ctx->set_memory_manager(pool);
    const double p = managed_pair_ns(bytes, repeats, batch);
    ctx->flush_deallocations();
    pool->trim();
    fmt::print("| {} | {:.0f} | {:.0f} | {:.0f} | {:.1f}x | {:.1f}x |\n", human(bytes), raw, d, p,
               raw / p, d / p);
  }

  // About allocations / 2 arrays of max_bytes / 2 on average stay live: ~1 GiB at the peak, which
  // fits the host backend's default 4 GiB with the pool's rounding on top.
  const int allocations = quick ? 200 : 4000;
  const std::int64_t max_bytes = std::int64_t{1} << 20;
  fmt::print("\nrandom workload: {} allocations of 1 B .. {}, half freed at random (ms)\n\n",
             allocations, human(max_bytes));
  fmt::print("| manager | time (ms) |\n|---|---:|\n");
  for (const auto& [name, manager] : {std::pair{"direct", direct}, std::pair{"pool", pool}}) {
    ctx->set_memory_manager(manager);
    std::vector<double> runs;
    for (int r = 0; r < (quick ? 1 : 5); ++r) {
      runs.push_back(random_workload_ms(allocations, max_bytes, 42U + static_cast<unsigned>(r)));
      ctx->flush_deallocations();
    }
    fmt::print("| {} | {:.2f} |\n", name, median(runs));
  }
  ctx->set_memory_manager(direct);
  pool->trim();
  return 0;
}

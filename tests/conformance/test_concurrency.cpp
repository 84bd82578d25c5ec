// Thread safety of allocation and deallocation: 8 threads allocate, copy, free, flush and
// defer cleanup at once, with the direct and the pool manager, and while another thread switches
// managers. Each thread runs a fixed minimum of iterations, then more until an iteration limit or
// a time budget is reached, so the checks never depend on the machine's speed. Test names start
// with "concurrency:" so that CI runs them under ThreadSanitizer. Worker threads never use Catch2's
// assertions (not thread-safe): they collect failures, which the main thread checks.
#include "support.hpp"

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>

using namespace conformance;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

constexpr int kThreads = 8;
constexpr int kMinIterations = 12;  // every kind of iteration twice, however slow the machine
constexpr int kMaxIterations = 400;
constexpr auto kBudget = std::chrono::milliseconds(300);
using Clock = std::chrono::steady_clock;

struct WorkerResult {
  int iterations = 0;
  int64_t device_allocations = 0;
  int64_t host_allocations = 0;
  std::vector<std::string> errors;
  void fail(std::string what) {
    if (errors.size() < 8) errors.push_back(std::move(what));
  }
  void expect(bool ok, int iteration, const char* what) {
    if (!ok) fail("iteration " + std::to_string(iteration) + ": " + what);
  }
};

/// One thread's share of the stress: every iteration allocates, fills, reads back and releases
/// device memory in one of six ways.
WorkerResult stress_worker(int index, Clock::time_point deadline) {
  WorkerResult r;
  std::mt19937 rng(static_cast<unsigned>(index) * 7919u + 17u);
  std::uniform_int_distribution<int64_t> sizes(1, 4096);
  const auto ctx = devmem::current_context();
  for (int it = 0; it < kMaxIterations && (it < kMinIterations || Clock::now() < deadline); ++it) {
    try {
      const int64_t n = sizes(rng);
      const double start = index * 1e6 + it;
      const std::vector<double> values = iota_vec<double>(n, start);
      switch (it % 6) {
        case 0: {
          const DeviceArray d = devmem::device_array<double>(Shape{n});
          ++r.device_allocations;
          d.copy_to_device(std::span<const double>(values));
          r.expect(d.to_vector<double>() == values, it, "device_array round trip");
          break;
        }
        case 1: {
          const DeviceArray d = devmem::to_device(values);
          ++r.device_allocations;
          const HostArray h = d.copy_to_host();
          r.expect(h.to_vector<double>() == values, it, "to_device / copy_to_host");
          break;
        }
        case 2: {
          const devmem::Stream s = devmem::stream();
          std::vector<double> back(static_cast<std::size_t>(n));
          {
            const DeviceArray d = devmem::to_device(values, s);
            ++r.device_allocations;
            d.copy_to_host(std::span<double>(back), s);
          }  // released while the stream may still be working on it
          s.synchronize();
          r.expect(back == values, it, "copies on a new stream");
          break;
        }
        case 3: {
          const devmem::DeferCleanup defer =
              (it % 12 == 3) ? ctx->defer_cleanup() : devmem::defer_cleanup();
          for (int k = 0; k < 3; ++k) {
            const DeviceArray d = devmem::device_array<double>(Shape{n});
            ++r.device_allocations;
            d.fill(start + k);
            r.expect(d.item<double>(n - 1) == start + k, it, "fill inside defer_cleanup");
          }
          ctx->flush_deallocations();  // frees nothing while any thread defers
          break;
        }
        case 4: {
          ctx->flush_deallocations();
          const HostArray p = devmem::pinned_array<double>(Shape{n});
          ++r.host_allocations;
          p.copy_from(HostArray::view(std::span<const double>(values)));
          const DeviceArray d = devmem::to_device(p);
          ++r.device_allocations;
          const HostArray q = devmem::pinned_array<double>(Shape{n});
          ++r.host_allocations;
          d.copy_to_host(q);
          r.expect(q.to_vector<double>() == values, it, "pinned round trip");
          break;
        }
        default: {
          const DeviceArray d = devmem::to_device(values);
          const DeviceArray c = d.copy();
          r.device_allocations += 2;
          const int64_t half = n / 2 + 1;
          const DeviceArray view = c.slice(0, 0, half);
          r.expect(view.to_vector<double>() ==
                       std::vector<double>(values.begin(), values.begin() + half),
                   it, "copy and view");
          break;
        }
      }
    } catch (const std::exception& e) {
      r.fail("iteration " + std::to_string(it) + ": " + e.what());
    } catch (...) {
      r.fail("iteration " + std::to_string(it) + ": unknown exception");
    }
    ++r.iterations;
  }
  return r;
}

/// Runs stress_worker on kThreads threads (plus `extra`, if given, on one more thread until the
/// workers are done) and checks every thread's results.
template <class Extra>
std::vector<WorkerResult> run_stress(Extra&& extra) {
  std::vector<WorkerResult> results(kThreads);
  const Clock::time_point deadline = Clock::now() + kBudget;
  std::atomic<bool> done{false};
  std::thread side([&] { extra(done); });
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&results, t, deadline] {
        results[static_cast<std::size_t>(t)] = stress_worker(t, deadline);
      });
    }
    for (std::thread& th : threads) th.join();
  }
  done.store(true);
  side.join();
  for (int t = 0; t < kThreads; ++t) {
    const WorkerResult& r = results[static_cast<std::size_t>(t)];
    INFO("thread " << t << ": " << r.iterations << " iterations");
    CHECK(r.iterations >= kMinIterations);
    for (const std::string& e : r.errors) FAIL_CHECK(e);
    CHECK(r.errors.empty());
  }
  return results;
}

std::vector<WorkerResult> run_stress() {
  return run_stress([](const std::atomic<bool>&) {});
}

int64_t device_allocations(const std::vector<WorkerResult>& results) {
  int64_t n = 0;
  for (const WorkerResult& r : results) n += r.device_allocations;
  return n;
}
int64_t host_allocations(const std::vector<WorkerResult>& results) {
  int64_t n = 0;
  for (const WorkerResult& r : results) n += r.host_allocations;
  return n;
}

/// After a stress run: everything released and flushed, the statistics back where they were.
void check_all_released(devmem::Context& ctx, const devmem::MemoryStatistics& device0,
                        const devmem::MemoryStatistics& host0,
                        const std::vector<WorkerResult>& results) {
  ctx.synchronize();
  ctx.flush_deallocations();
  CHECK(ctx.pending_deallocations() == 0);
  CHECK(ctx.pending_deallocation_bytes() == 0);
  CHECK(ctx.take_deallocation_errors().empty());
  const devmem::MemoryStatistics d = ctx.device_statistics();
  CHECK(d.current_count == device0.current_count);
  CHECK(d.current_bytes == device0.current_bytes);
  CHECK(d.total_count == device0.total_count + device_allocations(results));
  CHECK(d.peak_count >= device0.current_count + 1);
  const devmem::MemoryStatistics h = ctx.host_statistics();
  CHECK(h.current_count == host0.current_count);
  CHECK(h.current_bytes == host0.current_bytes);
  CHECK(h.total_count == host0.total_count + host_allocations(results));
}

}  // namespace

TEST_CASE("concurrency: 8 threads allocate, copy and free with the direct manager",
          "[concurrency][threads][deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_memory_manager(devmem::make_memory_manager("direct", *ctx));
  ctx->set_deallocation_config(limits(10, 0.2));
  const devmem::MemoryStatistics device0 = ctx->device_statistics();
  const devmem::MemoryStatistics host0 = ctx->host_statistics();
  const auto results = run_stress();
  check_all_released(*ctx, device0, host0, results);
}

TEST_CASE("concurrency: 8 threads allocate, copy and free with the pool manager",
          "[concurrency][threads][deallocation][pool]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto pool = use_pool_manager();
  ctx->set_deallocation_config(limits(10, 0.2));
  const devmem::MemoryStatistics device0 = ctx->device_statistics();
  const devmem::MemoryStatistics host0 = ctx->host_statistics();
  const auto results = run_stress();
  check_all_released(*ctx, device0, host0, results);
  const devmem::PoolStatistics s = pool->statistics();
  CHECK(s.hits + s.misses >= device_allocations(results));
  CHECK(s.backend_bytes == s.cached_bytes);  // nothing in use any more
  pool->trim();
  CHECK(pool->cached_bytes() == 0);
  CHECK(pool->statistics().backend_bytes == 0);
}

TEST_CASE("concurrency: 8 threads allocate, copy and free through composed managers",
          "[concurrency][threads][deallocation][pool][adaptor]") {
  std::atomic<int64_t> events{0};  // before the guard, whose final flush still logs
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 0.2));
  const auto pool = std::make_shared<devmem::PoolMemoryManager>(
      *ctx, devmem::PoolMemoryManager::Options{}, nullptr);
  devmem::LimitAdaptor::Limits room;
  room.device_bytes = 1LL << 30;  // never reached: a refusal would fail a worker
  const auto limit = std::make_shared<devmem::LimitAdaptor>(*ctx, pool, room);
  const auto stats = std::make_shared<devmem::StatisticsAdaptor>(*ctx, limit);
  const auto logging = std::make_shared<devmem::LoggingAdaptor>(
      *ctx, stats, [&events](const devmem::MemoryEvent&) { events.fetch_add(1); });
  ctx->set_memory_manager(logging);
  const devmem::MemoryStatistics device0 = ctx->device_statistics();
  const devmem::MemoryStatistics host0 = ctx->host_statistics();
  const auto results = run_stress();
  check_all_released(*ctx, device0, host0, results);
  const devmem::MemoryStatistics s = stats->statistics();
  CHECK(s.current_bytes == 0);
  CHECK(s.total_count == device_allocations(results));
  CHECK(stats->host_statistics().total_count == host_allocations(results));
  CHECK(events.load() == 2 * (s.total_count + stats->host_statistics().total_count));
  CHECK(limit->device_bytes_in_use() == 0);  // above the pool: its cache is not counted
  logging->trim();                           // forwarded down to the pool
  CHECK(pool->statistics().backend_bytes == 0);
}

TEST_CASE("concurrency: 8 threads stress while another thread switches managers",
          "[concurrency][threads][deallocation][pool]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 0.2));
  const auto direct = devmem::make_memory_manager("direct", *ctx);
  const auto pool = std::make_shared<devmem::PoolMemoryManager>(*ctx);
  ctx->set_memory_manager(direct);
  const devmem::MemoryStatistics device0 = ctx->device_statistics();
  const devmem::MemoryStatistics host0 = ctx->host_statistics();
  int switches = 0;
  const auto results = run_stress([&](const std::atomic<bool>& done) {
    do {  // at least one switch, however fast the workers are
      ctx->set_memory_manager(switches % 2 == 0 ? std::shared_ptr<devmem::MemoryManager>(pool)
                                                : direct);
      ++switches;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } while (!done.load());
  });
  CHECK(switches > 0);
  ctx->set_memory_manager(direct);
  check_all_released(*ctx, device0, host0, results);
  CHECK(pool->statistics().backend_bytes == pool->cached_bytes());
  pool->trim();
  CHECK(pool->statistics().backend_bytes == 0);
}

TEST_CASE("concurrency: every release from 8 threads is freed exactly once",
          "[concurrency][threads][deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 0.2));
  const auto manager = use_recording_manager();
  std::vector<std::vector<std::string>> errors(kThreads);
  std::vector<int> made(kThreads, 0);
  const Clock::time_point deadline = Clock::now() + kBudget;
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const auto tt = static_cast<std::size_t>(t);
        try {
          for (int it = 0;
               it < 4 * kMaxIterations && (it < 2 * kMinIterations || Clock::now() < deadline);
               ++it) {
            if (it % 17 == 5) {
              const devmem::DeferCleanup defer = ctx->defer_cleanup();
              for (int k = 0; k < 12; ++k) (void)devmem::device_array(Shape{64 + k}, u1());
              made[tt] += 12;
            } else if (it % 13 == 7) {
              ctx->flush_deallocations();
            } else {
              (void)devmem::device_array(Shape{32 + it % 100}, u1());
              ++made[tt];
            }
            // pending counts are read concurrently too
            if (ctx->pending_deallocation_bytes() < 0) errors[tt].push_back("negative bytes");
          }
        } catch (const std::exception& e) {
          errors[tt].push_back(e.what());
        }
      });
    }
    for (std::thread& th : threads) th.join();
  }
  for (const auto& list : errors) {
    for (const std::string& e : list) FAIL_CHECK(e);
  }
  ctx->flush_deallocations();
  CHECK(ctx->pending_deallocations() == 0);
  int total = 0;
  for (const int n : made) total += n;
  const auto allocated = manager->allocations();
  const auto freed = manager->deallocations();
  CHECK(static_cast<int>(allocated.size()) == total);
  CHECK(freed.size() == allocated.size());
  // Each allocation freed exactly once, with its size: compare as multisets of (address, size)
  // per allocation lifetime, i.e. sorted sequences (an address may be reused after its free).
  std::multiset<std::pair<std::uintptr_t, std::size_t>> a;
  std::multiset<std::pair<std::uintptr_t, std::size_t>> f;
  for (const auto& b : allocated) a.emplace(reinterpret_cast<std::uintptr_t>(b.ptr), b.bytes);
  for (const auto& b : freed) f.emplace(reinterpret_cast<std::uintptr_t>(b.ptr), b.bytes);
  CHECK(a == f);
}

TEST_CASE("concurrency: device memory returns to its starting value after 8 threads",
          "[concurrency][threads][deallocation][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 0.2));
  ctx->set_memory_manager(devmem::make_memory_manager("direct", *ctx));
  const int64_t used = devmem::host::device_memory_used();
  SECTION("direct") {
    (void)run_stress();
    ctx->synchronize();
    ctx->flush_deallocations();
    CHECK(devmem::host::device_memory_used() == used);
  }
  SECTION("pool") {
    const auto pool = use_pool_manager();
    (void)run_stress();
    ctx->synchronize();
    ctx->flush_deallocations();
    CHECK(devmem::host::device_memory_used() == used + pool->cached_bytes());
    pool->trim();
    CHECK(devmem::host::device_memory_used() == used);
  }
}

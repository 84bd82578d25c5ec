// Concurrency stress: eight threads allocate, free, copy, synchronize streams and open
// defer_cleanup scopes at once for a bounded time, then every byte they allocated must have been
// freed. Runs in the ThreadSanitizer step of CI (its name matches "concurren").
#include "support.hpp"

#include <atomic>
#include <chrono>
#include <exception>
#include <random>
#include <thread>

namespace {

using namespace conformance;
using devmem::DeviceArray;
using devmem::HostArray;

#if defined(__SANITIZE_THREAD__)
constexpr auto kStressDuration = std::chrono::milliseconds(1500);  // TSan is ~10x slower
#else
constexpr auto kStressDuration = std::chrono::milliseconds(2500);
#endif
constexpr int kThreads = 8;

/// What one thread did, for the final accounting.
struct ThreadTally {
  std::int64_t device_allocations = 0;
  std::int64_t device_bytes = 0;
  std::int64_t pinned_allocations = 0;
  std::int64_t pinned_bytes = 0;
  std::int64_t operations = 0;
};

/// One thread's loop: random operations on arrays of its own, on a stream of its own.
void stress_thread(unsigned seed, std::chrono::steady_clock::time_point deadline,
                   ThreadTally& tally) {
  std::mt19937 rng(seed);
  const auto pick = [&rng](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  const devmem::Stream stream = devmem::stream();
  std::vector<DeviceArray> arrays;
  const auto allocate = [&](std::int64_t n) {
    DeviceArray a = devmem::device_array<double>(Shape{n}, Order::C, stream);
    ++tally.device_allocations;
    tally.device_bytes += a.nbytes();
    return a;
  };
  while (std::chrono::steady_clock::now() < deadline) {
    ++tally.operations;
    switch (pick(7)) {
      case 0: {  // allocate and fill
        DeviceArray a = allocate(1 + pick(4096));
        a.fill(static_cast<double>(seed), stream);
        arrays.push_back(std::move(a));
        if (arrays.size() > 8) arrays.erase(arrays.begin());
        break;
      }
      case 1:  // free
        if (!arrays.empty()) arrays.erase(arrays.begin() + pick(static_cast<int>(arrays.size())));
        break;
      case 2: {  // H2D and D2H on the thread's stream, checked
        const std::int64_t n = 1 + pick(2048);
        const std::vector<double> values = iota_vec<double>(n, static_cast<double>(seed));
        const DeviceArray d = devmem::to_device(values, stream);
        ++tally.device_allocations;
        tally.device_bytes += d.nbytes();
        HostArray back(Shape{n}, f8());
        d.copy_to_host(back, stream);
        stream.synchronize();
        if (back.to_vector<double>() != values) throw std::runtime_error("round trip differs");
        break;
      }
      case 3:  // D2D between two of the thread's arrays of the same size
        if (!arrays.empty()) {
          const DeviceArray& src =
              arrays[static_cast<std::size_t>(pick(static_cast<int>(arrays.size())))];
          DeviceArray dst = allocate(src.size());
          dst.copy_to_device(src, stream);
          arrays.push_back(std::move(dst));
        }
        break;
      case 4:  // synchronize, sometimes the whole context
        if (pick(4) == 0) {
          devmem::current_context()->synchronize();
        } else {
          stream.synchronize();
        }
        break;
      case 5: {  // a defer_cleanup scope with frees inside it
        const devmem::DeferCleanup scope = devmem::defer_cleanup();
        for (int i = 0; i < 3; ++i) (void)allocate(1 + pick(1024));
        arrays.clear();
        break;
      }
      default: {  // pinned host memory, counted toward the queue's byte limit
        const HostArray pinned = devmem::pinned_array<double>(Shape{1 + pick(512)});
        ++tally.pinned_allocations;
        tally.pinned_bytes += pinned.nbytes();
        if (!arrays.empty()) {
          const DeviceArray& a = arrays.back();
          if (a.size() <= pinned.size()) {
            a.copy_to_host(pinned.slice(0, 0, a.size()), stream);
            stream.synchronize();
          }
        }
        break;
      }
    }
  }
  arrays.clear();
  stream.synchronize();
}

}  // namespace

TEST_CASE("concurrency stress: 8 threads allocate, free, copy, sync and defer cleanup",
          "[concurrency][stress][host-only]") {
  const MemoryStateGuard state;
  const HostControlsGuard controls;
  const auto ctx = state.context();
  const std::int64_t memory_before = devmem::host::device_memory_used();
  const devmem::MemoryStatistics device_before = ctx->device_statistics();
  const devmem::MemoryStatistics host_before = ctx->host_statistics();

  std::vector<ThreadTally> tallies(kThreads);
  std::vector<std::exception_ptr> errors(kThreads);
  const auto deadline = std::chrono::steady_clock::now() + kStressDuration;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([t, deadline, &tallies, &errors] {
        try {
          stress_thread(static_cast<unsigned>(1000 + t), deadline,
                        tallies[static_cast<std::size_t>(t)]);
        } catch (...) {
          errors[static_cast<std::size_t>(t)] = std::current_exception();
        }
      });
    }
  }
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);  // Catch reports it as this test's failure
  }

  ThreadTally total;
  for (const ThreadTally& t : tallies) {
    total.device_allocations += t.device_allocations;
    total.device_bytes += t.device_bytes;
    total.pinned_allocations += t.pinned_allocations;
    total.pinned_bytes += t.pinned_bytes;
    total.operations += t.operations;
  }
  INFO(total.operations << " operations, " << total.device_allocations << " device allocations ("
                        << total.device_bytes << " bytes), " << total.pinned_allocations
                        << " pinned allocations");
  CHECK(total.operations > kThreads * 10);

  ctx->synchronize();
  ctx->flush_deallocations();
  CHECK(ctx->take_deallocation_errors().empty());
  CHECK(ctx->pending_deallocations() == 0);
  // Every allocation is accounted for, and every byte of it was given back.
  const devmem::MemoryStatistics device_after = ctx->device_statistics();
  const devmem::MemoryStatistics host_after = ctx->host_statistics();
  CHECK(device_after.total_count - device_before.total_count == total.device_allocations);
  CHECK(device_after.total_bytes - device_before.total_bytes == total.device_bytes);
  CHECK(device_after.current_bytes == device_before.current_bytes);
  CHECK(device_after.current_count == device_before.current_count);
  CHECK(host_after.total_count - host_before.total_count == total.pinned_allocations);
  CHECK(host_after.total_bytes - host_before.total_bytes == total.pinned_bytes);
  CHECK(host_after.current_bytes == host_before.current_bytes);
  CHECK(devmem::host::device_memory_used() == memory_before);
}

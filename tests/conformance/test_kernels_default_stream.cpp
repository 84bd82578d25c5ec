// Kernels launched on the default stream are asynchronous in the host simulator, as on CUDA
// (docs/kernels.md#errors-and-completion): launch returns before the kernel has run, host code sees
// its results only after an ordering operation, later work on the default stream (and, the legacy
// default stream's rule, on the device's other streams) runs after it, its failure comes from the
// next synchronize, and its arrays stay alive until it has run, from any number of threads.
// [host-only], in conformance_host only: the kernels here wait at a gate that the test opens, a
// namespace-scope atomic that only the simulator's kernels (host code) can read; on a GPU the
// same properties hold by construction.
#include "support.hpp"

#include <devmem/kernel.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;
using namespace std::chrono_literals;

namespace {

// Kernels wait at most this long for the gate, so that a launch that runs its kernel before it
// returns (the behaviour this file guards against) fails the test instead of hanging it.
constexpr auto kGateTimeout = 5s;
std::atomic<bool> g_gate_open{true};

/// Closes the gate while alive; opened by open() or at the end of the scope, so that no kernel is
/// left waiting when a check fails.
class Gate {
 public:
  Gate() { g_gate_open.store(false, std::memory_order_release); }
  ~Gate() { open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  static void open() { g_gate_open.store(true, std::memory_order_release); }
  static void close() { g_gate_open.store(false, std::memory_order_release); }
};

/// True once the gate is open; false when it stayed closed for kGateTimeout.
bool wait_at_gate() {
  const auto deadline = std::chrono::steady_clock::now() + kGateTimeout;
  while (!g_gate_open.load(std::memory_order_acquire)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

/// One thread: waits at the gate, then writes `value` to every element (-1 when the gate stayed
/// closed).
DEVMEM_KERNEL void gated_fill(ArrayView<int, 1> out, int value) {
  const int written = wait_at_gate() ? value : -1;
  for (std::int64_t i = 0; i < out.shape(0); ++i) out[i] = written;
}

/// One thread: waits at the gate, then copies `in` to `out` (-1 when the gate stayed closed).
DEVMEM_KERNEL void gated_copy(ArrayView<const int, 1> in, ArrayView<int, 1> out) {
  const bool opened = wait_at_gate();
  for (std::int64_t i = 0; i < out.shape(0); ++i) out[i] = opened ? in[i] : -1;
}

DEVMEM_KERNEL void add_one(ArrayView<int, 1> x) {
  const std::int64_t i = devmem::global_id();
  if (i < x.shape(0)) x[i] += 1;
}

/// One thread increments x[k]: not atomically, since kernels of one stream run one after another.
DEVMEM_KERNEL void increment(ArrayView<int, 1> x, int k) {
  x[k] += 1;
}

DEVMEM_KERNEL void fill_iota_from(ArrayView<int, 1> out, int start) {
  const std::int64_t i = devmem::global_id();
  if (i < out.shape(0)) out[i] = start + static_cast<int>(i);
}

DEVMEM_KERNEL void write_past_end(ArrayView<int, 1> x) {
  x[x.shape(0) + devmem::global_id()] = 1;
}

constexpr const char* kWritePastEnd =
    "host launch: LaunchFailure (719): write_past_end: ArrayView: index (4,) is out of bounds for "
    "shape (4,) in thread (0, 0, 0) of block (0, 0, 0)";

}  // namespace

TEST_CASE("kernels: a default-stream launch returns before its kernel has run",
          "[kernels][streams][host-only]") {
  const Gate gate;
  const DeviceArray out = devmem::device_array<int>({8});
  out.fill(0);
  const auto start = std::chrono::steady_clock::now();
  devmem::launch<gated_fill>({1, 1}, out, 5);
  // The kernel waits for the gate, which only this thread opens: launch did not wait for it.
  CHECK(std::chrono::steady_clock::now() - start < kGateTimeout / 2);
  CHECK_FALSE(devmem::default_stream().query());
  Gate::open();
  devmem::default_stream().synchronize();
  CHECK(devmem::default_stream().query());
  CHECK(out.to_vector<int>() == std::vector<int>(8, 5));
}

TEST_CASE(
    "kernels: host memory a default-stream kernel writes shows its writes after a synchronize",
    "[kernels][streams][events][managed][mapped][host-only]") {
  const Gate gate;
  const devmem::MappedArray mapped = devmem::mapped_array<int>({16});
  const devmem::ManagedArray managed = devmem::managed_array<int>({16});
  for (int i = 0; i < 16; ++i) {
    mapped.at<int>(i) = 0;
    managed.at<int>(i) = 0;
  }
  const devmem::Event start = devmem::default_stream().record();
  devmem::launch<gated_fill>({1, 1}, mapped, 3);
  devmem::launch<gated_fill>({1, 1}, managed, 4);
  const devmem::Event end = devmem::default_stream().record();
  // What a program that forgot to synchronize sees: the memory as it was, an event not reached
  // and no timing (the kernels wait at the gate, so this is not a race).
  for (int i = 0; i < 16; ++i) {
    CHECK(mapped.at<int>(i) == 0);
    CHECK(managed.at<int>(i) == 0);
  }
  CHECK_FALSE(end.query());
  CHECK_THROWS_MATCHES(devmem::elapsed_ms(start, end), devmem::BackendError,
                       MessageContains("has not completed yet"));
  Gate::open();
  end.synchronize();
  for (int i = 0; i < 16; ++i) {
    CHECK(mapped.at<int>(i) == 3);
    CHECK(managed.at<int>(i) == 4);
  }
  CHECK(devmem::elapsed_ms(start, end) >= 0.0f);
}

TEST_CASE("kernels: work issued after a default-stream launch runs after it",
          "[kernels][streams][host-only]") {
  const Gate gate;
  const DeviceArray d = devmem::device_array<int>({64});
  d.fill(0);
  const devmem::Stream s = devmem::stream();

  // A copy on the default stream returns with the kernel's results (another thread opens the
  // gate while this one waits in the copy).
  devmem::launch<gated_fill>({1, 1}, d, 5);
  std::thread opener([] {
    std::this_thread::sleep_for(50ms);
    Gate::open();
  });
  CHECK(d.to_vector<int>() == std::vector<int>(64, 5));
  opener.join();

  // Work on another stream waits for the default stream's launch (the legacy default stream
  // orders every blocking stream): add_one runs after gated_fill.
  Gate::close();
  devmem::launch<gated_fill>({1, 1}, d, 6);
  devmem::launch<add_one>({1, 64, s}, d);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(s.query());
  Gate::open();
  s.synchronize();
  CHECK(d.to_vector<int>(s) == std::vector<int>(64, 7));

  // And a default-stream launch waits for the work other streams queued before it.
  Gate::close();
  devmem::launch<gated_fill>({1, 1, s}, d, 8);
  devmem::launch<add_one>({1, 64}, d);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(devmem::default_stream().query());
  Gate::open();
  CHECK(d.to_vector<int>() == std::vector<int>(64, 9));
  CHECK(s.query());

  // A memset on the default stream waits for the queued launch too.
  Gate::close();
  devmem::launch<gated_fill>({1, 1}, d, 10);
  std::thread second_opener([] {
    std::this_thread::sleep_for(20ms);
    Gate::open();
  });
  d.fill(0);
  second_opener.join();
  CHECK(d.to_vector<int>() == std::vector<int>(64, 0));
}

TEST_CASE("kernels: a default-stream kernel's failure comes from the next synchronize",
          "[kernels][streams][host-only]") {
  const DeviceArray x = devmem::device_array<int>({4});
  devmem::launch<write_past_end>({1, 1}, x);  // returns: the kernel runs later
  SECTION("the default stream's synchronize, once") {
    CHECK_THROWS_MATCHES(devmem::default_stream().synchronize(), devmem::BackendError,
                         Catch::Matchers::Message(kWritePastEnd));
    devmem::default_stream().synchronize();
  }
  SECTION("the context's synchronize, with the error's code") {
    try {
      devmem::current_context()->synchronize();
      FAIL("Context::synchronize did not report the kernel's failure");
    } catch (const devmem::BackendError& e) {
      CHECK(e.code() == 719);
      CHECK(e.code_name() == "LaunchFailure");
      CHECK(std::string(e.what()) == kWritePastEnd);
    }
    devmem::current_context()->synchronize();
  }
  SECTION("a copy on the default stream, which waits for the kernel") {
    CHECK_THROWS_MATCHES(x.to_vector<int>(), devmem::BackendError,
                         Catch::Matchers::Message(kWritePastEnd));
  }
  // The stream goes on: a later launch runs.
  devmem::launch<fill_iota_from>({1, 4}, x, 1);
  CHECK(x.to_vector<int>() == std::vector<int>{1, 2, 3, 4});
}

TEST_CASE("kernels: arrays dropped right after a default-stream launch stay alive until it has run",
          "[kernels][host-only]") {
  const auto context = devmem::current_context();
  const DeviceArray out = devmem::device_array<int>({256});
  const devmem::MemoryStatistics before = context->device_statistics();
  {
    const Gate gate;
    devmem::launch<gated_copy>({1, 1}, devmem::to_device(std::vector<int>(256, 9)), out);
    // The source's only handle is gone, the kernel has not read it yet: its memory is held.
    CHECK(context->device_statistics().current_count == before.current_count + 1);
  }
  devmem::default_stream().synchronize();  // releases what the finished kernel kept alive
  CHECK(out.to_vector<int>() == std::vector<int>(256, 9));
  CHECK(context->device_statistics().current_count == before.current_count);
}

TEST_CASE("kernels: threads launching on one device's default stream",
          "[kernels][threads][host-only]") {
  constexpr int kThreads = 4;
  constexpr int kLaunches = 25;
  const DeviceArray counts = devmem::device_array<int>({kThreads});
  counts.fill(0);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&counts, &wrong, t] {
      const DeviceArray own = devmem::device_array<int>({64});
      for (int i = 0; i < kLaunches; ++i) {
        devmem::launch<fill_iota_from>({1, 64}, own, i);
        devmem::launch<increment>({1, 1}, counts, t);
      }
      // The thread's own copy on the default stream returns with its last launch's results.
      if (own.to_vector<int>() != iota_vec<int>(64, kLaunches - 1)) ++wrong;
    });
  }
  for (std::thread& thread : threads) thread.join();
  devmem::default_stream().synchronize();
  CHECK(wrong.load() == 0);
  CHECK(counts.to_vector<int>() == std::vector<int>(kThreads, kLaunches));
}

TEST_CASE("kernels: each device's default stream waits for its own kernels only",
          "[.][multi-device][kernels][streams][host-only]") {
  REQUIRE(devmem::device_count() >= 2);
  struct BackToDevice0 {
    ~BackToDevice0() { devmem::select_device(0); }
  } back_to_device_0;
  const Gate gate;
  devmem::select_device(0);
  const DeviceArray on_0 = devmem::device_array<int>({8});
  devmem::launch<gated_fill>({1, 1}, on_0, 1);  // held on device 0's default stream
  devmem::select_device(1);
  const DeviceArray on_1 = devmem::device_array<int>({8});
  devmem::launch<fill_iota_from>({1, 8}, on_1, 0);
  // Device 1's copy and synchronize wait for device 1's kernel, not for device 0's.
  CHECK(on_1.to_vector<int>() == iota_vec<int>(8, 0));
  devmem::default_stream().synchronize();
  CHECK_FALSE(devmem::context_for_device(0)->default_stream().query());
  Gate::open();
  devmem::select_device(0);
  CHECK(on_0.to_vector<int>() == std::vector<int>(8, 1));
}

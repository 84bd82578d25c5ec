// Kernel side, what the host simulator detects ([host-only]; device code cannot throw or share
// host atomics): barrier divergence, two untagged shared arrays of one type and shape, exceptions
// in kernel code, shared memory over the limit, out-of-bounds array accesses, stale views,
// injected failures. A file of its own beside test_kernels.cpp, whose kernels run on every
// backend. It is compiled like test_kernels.cpp (test_kernels_simulator.cu includes it for nvcc,
// hipcc builds it for conformance_roc), and is empty there: everything below is for the
// simulator only.
#if !defined(__CUDACC__) && !defined(__HIPCC__)

#include "kernel_test_support.hpp"
#include "support.hpp"

#include <devmem/kernel.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;

namespace {

DEVMEM_KERNEL void half_the_block_skips_the_barrier(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  if (t >= 16) return;
  devmem::syncthreads();
  out[t] = 1;
}

DEVMEM_KERNEL void odd_threads_use_another_barrier(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  if (t % 2 == 0) {
    devmem::syncthreads();
  } else {
    devmem::syncthreads();
  }
  out[t] = 1;
}

DEVMEM_KERNEL void block_barrier_against_warp_barrier(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  if (t == 0) {
    devmem::syncthreads();
  } else {
    devmem::wave_barrier();
  }
  out[t] = 1;
}

DEVMEM_KERNEL void syncwarp_without_the_caller(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  devmem::syncwarp(0x1);  // names lane 0 only, but every lane calls it
  out[t] = 1;
}

DEVMEM_KERNEL void syncwarp_masks_disagree(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  devmem::syncwarp(t == 0 ? 0x3u : 0xffffffffu);  // lane 0 waits for lane 1, which waits for all
  out[t] = 1;
}

DEVMEM_KERNEL void lane_skips_wave_barrier(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  if (t == 3) return;
  devmem::wave_barrier();
  out[t] = 1;
}

std::atomic<int> g_live_guards{0};
struct LiveGuard {
  LiveGuard() { ++g_live_guards; }
  LiveGuard(const LiveGuard&) = delete;
  LiveGuard& operator=(const LiveGuard&) = delete;
  ~LiveGuard() { --g_live_guards; }
};

DEVMEM_KERNEL void thread_five_throws(ArrayView<int, 1> out) {
  const LiveGuard guard;  // must be destroyed in every thread, including the suspended ones
  const unsigned t = devmem::thread_idx().x;
  if (t == 5) throw std::runtime_error("boom");
  devmem::syncthreads();
  out[t] = 1;
}

DEVMEM_KERNEL void too_much_static_shared(ArrayView<int, 1> out) {
  auto big = devmem::shared_array<char, 40000>();
  big[devmem::thread_idx().x] = 1;
  out[0] = big[0];
}

// Two static shared arrays of 32 KiB: each compiles (48 KiB at most), together they are more than
// nvcc builds.
constexpr unsigned kHalvesLine = __LINE__ + 2;  // the first array's line
DEVMEM_KERNEL void two_static_halves(ArrayView<float, 1> out) {
  DEVMEM_SHARED_ARRAY(first, float, 8192);
  DEVMEM_SHARED_ARRAY(second, float, 64, 128);
  const unsigned t = devmem::thread_idx().x;
  first[t] = 1.0f;
  second(0, t) = 2.0f;
  devmem::syncthreads();
  out[t] = first[t] + second(0, t);
}

// Two untagged call sites of one type and shape: on a GPU one array, in the simulator an error.
constexpr unsigned kUntaggedFirstLine = __LINE__ + 3;
DEVMEM_KERNEL void two_untagged_shared_arrays(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  const auto first = devmem::shared_array<int, 8>();
  const auto second = devmem::shared_array<int, 8>();
  first[t % 8] = 1;
  second[t % 8] = 2;
  out[t] = first[t % 8];
}

// The same from two device functions, reached by different threads of the block.
constexpr unsigned kUntaggedHelperLine = __LINE__ + 2;
DEVMEM_DEVICE float* untagged_tile_a() {
  return devmem::shared_array<float, 2, 3>().data();
}
DEVMEM_DEVICE float* untagged_tile_b() {
  return devmem::shared_array<float, 2, 3>().data();
}
DEVMEM_KERNEL void untagged_arrays_in_two_branches(ArrayView<int, 1> out) {
  const unsigned t = devmem::thread_idx().x;
  float* tile = t < 4 ? untagged_tile_a() : untagged_tile_b();
  tile[0] = 1.0f;
  out[t] = 1;
}

DEVMEM_KERNEL void wait_for_flag(const std::atomic<bool>* flag, ArrayView<int, 1> out) {
  while (!flag->load()) std::this_thread::yield();
  out[devmem::global_id()] = 42;
}

DEVMEM_KERNEL void launches_from_a_kernel(ArrayView<int, 1> out) {
  devmem::launch({1, 1}, fill_iota, out, 0);
}

// Out-of-bounds accesses, each reported by the simulator before it touches memory.
DEVMEM_KERNEL void write_global_id_unguarded(ArrayView<int, 1> y) {
  const std::int64_t i = devmem::global_id();
  y[i] = static_cast<int>(i);  // no `if (i < y.shape(0))`
}

DEVMEM_KERNEL void write_one_at(ArrayView<int, 1> y, long long index) {
  y[index] = 1;
}

DEVMEM_KERNEL void write_one_at_2d(ArrayView<int, 2> m, long long row, long long column) {
  m(row, column) = 1;
}

DEVMEM_KERNEL void shared_array_overrun(ArrayView<int, 1> out) {
  DEVMEM_SHARED_ARRAY(tile, int, 32);
  const unsigned t = devmem::thread_idx().x;
  tile[t] = 1;  // 40 threads, 32 elements
  devmem::syncthreads();
  out[t % 32] = tile[t % 32];
}

DEVMEM_KERNEL void shared_array_2d_overrun(ArrayView<int, 1> out, int column) {
  DEVMEM_SHARED_ARRAY(tile, int, 4, 8);
  tile(1, column) = 1;
  out[0] = tile(1, 0);
}

DEVMEM_KERNEL void local_array_overrun(ArrayView<int, 1> out, int count) {
  devmem::local_array<int, 4> scratch;
  for (int j = 0; j < count; ++j) scratch[static_cast<std::size_t>(j)] = j;
  out[0] = scratch[0];
}

DEVMEM_KERNEL void read_lut_at(ArrayView<float, 1> out, int key) {
  out[0] = conformance_lut[key];
}

// Sanitizer builds run every simulated thread switch through the sanitizer's fiber bookkeeping,
// orders of magnitude slower (ThreadSanitizer most: about 70 us a switch on the 2-core CI
// machine): fewer rounds keep the test within seconds there.
#if defined(__SANITIZE_THREAD__)
constexpr int kBarrierRounds = 10;
#elif defined(__SANITIZE_ADDRESS__)
constexpr int kBarrierRounds = 100;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr int kBarrierRounds = 10;
#elif __has_feature(address_sanitizer)
constexpr int kBarrierRounds = 100;
#else
constexpr int kBarrierRounds = 5000;
#endif
#else
constexpr int kBarrierRounds = 5000;
#endif

/// Two barriers per round: every thread writes its cell, then reads another thread's, which must
/// hold that thread's value of this round. Counts the reads that did not.
DEVMEM_KERNEL void barrier_rounds(ArrayView<int, 1> wrong_reads, int rounds) {
  DEVMEM_SHARED_ARRAY(cells, int, 1024);
  const unsigned t = devmem::thread_idx().x;
  const unsigned n = devmem::block_dim().x;
  int wrong = 0;
  for (int r = 0; r < rounds; ++r) {
    cells[t] = r + static_cast<int>(t);
    devmem::syncthreads();
    const unsigned other = (t + static_cast<unsigned>(r)) % n;
    if (cells[other] != r + static_cast<int>(other)) ++wrong;
    devmem::syncthreads();
  }
  wrong_reads[std::int64_t{devmem::block_idx().x} * n + t] = wrong;
}

/// Restores devmem::host::bounds_checking().
class BoundsCheckingGuard {
 public:
  BoundsCheckingGuard() = default;
  BoundsCheckingGuard(const BoundsCheckingGuard&) = delete;
  BoundsCheckingGuard& operator=(const BoundsCheckingGuard&) = delete;
  ~BoundsCheckingGuard() { devmem::host::set_bounds_checking(enabled_); }

 private:
  bool enabled_ = devmem::host::bounds_checking();
};

void check_launch_failure(const devmem::BackendError& e, const std::string& text) {
  CHECK(e.backend() == "host");
  CHECK(e.function() == "launch");
  CHECK(e.code() == 719);
  CHECK(e.code_name() == "LaunchFailure");
  CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains(text));
}

}  // namespace

TEST_CASE("kernels: the simulator reports barrier divergence", "[kernels][host-only]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({64}, Order::C, s);
  SECTION("threads return while others wait") {
    devmem::launch<half_the_block_skips_the_barrier>({1, 32, 0, s}, out);
    try {
      s.synchronize();
      FAIL("synchronize did not report the divergence");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "host launch: LaunchFailure (719): half_the_block_skips_the_barrier: "
                           "barrier divergence in block (0, 0, 0): 16 of 32 threads wait at "
                           "syncthreads() (test_kernels_simulator.cpp:");
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::Contains("but 16 threads (first: thread (16, 0, 0)) returned "
                                           "without reaching it"));
    }
  }
  SECTION("threads wait at different barriers") {
    try {
      devmem::launch({1, 8}, odd_threads_use_another_barrier, out);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the divergence");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "barrier divergence in block (0, 0, 0): thread (0, 0, 0) waits at "
                           "syncthreads() (test_kernels_simulator.cpp:");
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::Contains("but thread (1, 0, 0) waits at syncthreads()"));
    }
  }
  SECTION("a block barrier and a warp barrier wait for each other") {
    try {
      devmem::launch({1, 40}, block_barrier_against_warp_barrier, out);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the deadlock");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e, "deadlock in block (0, 0, 0): 1 threads wait at syncthreads()");
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::Contains("while 31 threads (first: thread (1, 0, 0)) wait at "
                                           "wave_barrier()"));
    }
  }
  SECTION("a lane returns before a wave barrier") {
    try {
      devmem::launch({1, 64}, lane_skips_wave_barrier, out);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the divergence");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "barrier divergence in warp 0 of block (0, 0, 0): 31 threads wait "
                           "at wave_barrier() (test_kernels_simulator.cpp:");
      CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("(first: thread (3, 0, 0))"));
    }
  }
  SECTION("syncwarp's mask does not name the calling thread") {
    devmem::launch({1, 32, s}, syncwarp_without_the_caller, out);
    try {
      s.synchronize();
      FAIL("synchronize did not report the mask");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e, "syncwarp(mask 0x1) at test_kernels_simulator.cpp:");
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::Contains("the mask does not name the calling thread (1, 0, 0) "
                                           "(lane 1 of warp 0) of block (0, 0, 0)"));
    }
    CHECK_NOTHROW(s.synchronize());  // reported once
  }
  SECTION("syncwarp masks that disagree") {
    devmem::launch({1, 32, s}, syncwarp_masks_disagree, out);
    try {
      s.synchronize();
      FAIL("synchronize did not report the deadlock");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "deadlock in block (0, 0, 0): thread (0, 0, 0) waits at syncwarp(mask "
                           "0x3) (test_kernels_simulator.cpp:");
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::Contains("for thread (1, 0, 0), which waits at syncwarp(mask "
                                           "0xffffffff) (test_kernels_simulator.cpp:"));
    }
    CHECK_NOTHROW(s.synchronize());  // reported once
  }
  // The stream and the simulator keep working afterwards.
  devmem::launch({1, 64, 0, s}, fill_iota, out, 1);
  CHECK(out.to_vector<int>(s)[63] == 64);
}

TEST_CASE("kernels: many barriers per thread in blocks of 1024 threads", "[kernels][host-only]") {
  // 10^4 barriers per thread (fewer under sanitizers): every thread suspends and resumes at each.
  const devmem::Stream s = devmem::stream();
  constexpr unsigned kBlocks = 4;
  constexpr unsigned kThreads = 1024;
  const DeviceArray wrong = devmem::device_array<int>({kBlocks * kThreads}, Order::C, s);
  wrong.fill(-1, s);
  devmem::launch({kBlocks, kThreads, 0, s}, barrier_rounds, wrong, kBarrierRounds);
  const std::vector<int> counts = wrong.to_vector<int>(s);
  CHECK(std::count(counts.begin(), counts.end(), 0) == std::ptrdiff_t{kBlocks * kThreads});
}

TEST_CASE("kernels: an exception in kernel code fails the launch and unwinds every thread",
          "[kernels][host-only]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({64}, Order::C, s);
  devmem::launch({3, 64, 0, s}, thread_five_throws, out);
  try {
    s.synchronize();
    FAIL("synchronize did not report the exception");
  } catch (const devmem::BackendError& e) {
    check_launch_failure(e, "kernel code threw in thread (5, 0, 0) of block (");
    CHECK_THAT(std::string(e.what()), Catch::Matchers::EndsWith("): boom"));
  }
  CHECK(g_live_guards.load() == 0);
  CHECK_NOTHROW(s.synchronize());  // reported once
}

TEST_CASE("kernels: the simulator refuses two untagged shared arrays of one type and shape",
          "[kernels][host-only]") {
  const std::string file = "test_kernels_simulator.cpp:";
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({32}, Order::C, s);
  SECTION("in the kernel itself") {
    devmem::launch<two_untagged_shared_arrays>({2, 32, 0, s}, out);
    try {
      s.synchronize();
      FAIL("synchronize did not report the untagged arrays");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(
          e,
          "host launch: LaunchFailure (719): two_untagged_shared_arrays: shared_array: two "
          "untagged shared arrays of shape (8,) with 4-byte elements (32 bytes) in one kernel, "
          "at " +
              file + std::to_string(kUntaggedFirstLine) + " and at " + file +
              std::to_string(kUntaggedFirstLine + 1) + " (thread (0, 0, 0) of block (");
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::EndsWith(
                     "): on a GPU they are one array, silently sharing its memory; give each a "
                     "tag: DEVMEM_SHARED_ARRAY(name, T, N...) or shared_array<T, N...>([] {})"));
    }
  }
  SECTION("in two device functions that different threads call") {
    try {
      devmem::launch({1, 8}, untagged_arrays_in_two_branches, out);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the untagged arrays");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "two untagged shared arrays of shape (2, 3) with 4-byte elements (24 "
                           "bytes) in one kernel, at " +
                               file + std::to_string(kUntaggedHelperLine) + " and at " + file +
                               std::to_string(kUntaggedHelperLine + 3) +
                               " (thread (4, 0, 0) of block (0, 0, 0))");
    }
  }
  // The stream and the simulator keep working afterwards.
  devmem::launch({1, 32, 0, s}, fill_iota, out, 1);
  CHECK(out.to_vector<int>(s)[31] == 32);
}

TEST_CASE("kernels: the simulator enforces the shared-memory limit", "[kernels][host-only]") {
  const DeviceArray out = devmem::device_array<int>({4});
  try {
    devmem::launch({1, 4, 10000}, too_much_static_shared, out);
    devmem::synchronize();  // reports the kernel's failure
    FAIL("launch did not report the shared memory");
  } catch (const devmem::BackendError& e) {
    CHECK(e.code_name() == "LaunchOutOfResources");
    CHECK(e.code() == 701);
    CHECK_THAT(std::string(e.what()),
               Catch::Matchers::Contains("block (0, 0, 0) needs more shared memory than device 0 "
                                         "has: 40000 bytes of shared arrays after 10000 bytes of "
                                         "dynamic shared memory (49152 bytes at most per block)"));
  }
  // Without the dynamic part it fits.
  devmem::launch({1, 4}, too_much_static_shared, out);
  CHECK(out.to_vector<int>()[0] == 1);
}

TEST_CASE("kernels: the simulator refuses static shared arrays over 48 KiB together, naming each",
          "[kernels][host-only]") {
  // nvcc refuses such a kernel at build time; the simulator at the launch, whatever the dynamic
  // shared memory (the opt-in above 48 KiB is for dynamic memory only).
  const DeviceArray out = devmem::device_array<float>({4});
  for (const std::size_t dynamic : {std::size_t{0}, std::size_t{100} * 1024}) {
    INFO("dynamic shared bytes " << dynamic);
    try {
      devmem::launch({1, 4, dynamic}, two_static_halves, out);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the static shared memory");
    } catch (const devmem::BackendError& e) {
      CHECK(e.code_name() == "LaunchOutOfResources");
      const std::string file = "test_kernels_simulator.cpp:";
      CHECK_THAT(
          std::string(e.what()),
          Catch::Matchers::Contains(
              "two_static_halves: block (0, 0, 0): the kernel's static shared arrays need "
              "65536 bytes, more than the 48 KiB (49152 bytes) CUDA allows a kernel's "
              "static shared memory (nvcc refuses to build it): 32768 bytes (shape (8192,) "
              "of 4-byte elements) at " +
              file + std::to_string(kHalvesLine) +
              ", 32768 bytes (shape (64, 128) of 4-byte elements) at " + file +
              std::to_string(kHalvesLine + 1) + "; use dynamic shared memory for some of them"));
    }
  }
}

TEST_CASE("kernels: after the opt-in, static and dynamic shared memory share the opt-in limit",
          "[kernels][host-only]") {
  // More than 48 KiB of dynamic shared memory opts the kernel in (as on an H100): its static shared
  // arrays then fit in what the opt-in limit leaves, and no more.
  const auto props = devmem::current_context()->properties();
  const auto optin = static_cast<std::size_t>(props.max_shared_memory_per_block_optin);
  REQUIRE(optin == 232448);
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({4}, Order::C, s);
  devmem::launch({1, 4, 100 * 1024, s}, too_much_static_shared, out);  // 102400 + 40000 fit
  CHECK(out.to_vector<int>(s)[0] == 1);
  const std::size_t dynamic = optin - 40000 + 1;  // one byte too many with the 40000 static bytes
  try {
    devmem::launch({1, 4, dynamic, s}, too_much_static_shared, out);
    s.synchronize();
    FAIL("launch did not report the shared memory");
  } catch (const devmem::BackendError& e) {
    CHECK(e.code_name() == "LaunchOutOfResources");
    CHECK_THAT(std::string(e.what()),
               Catch::Matchers::Contains(
                   "block (0, 0, 0) needs more shared memory than device 0 has: 40000 bytes of "
                   "shared arrays after " +
                   std::to_string(dynamic) +
                   " bytes of dynamic shared memory (232448 bytes at most per block)"));
  }
}

TEST_CASE("kernels: launch is asynchronous on its stream and keeps arrays alive",
          "[kernels][host-only]") {
  const MemoryStateGuard memory_guard;
  const devmem::Stream s = devmem::stream();
  // What earlier tests of the same process left queued or in flight is released below too:
  // release it before measuring (in one process with "[kernels]", 272 bytes were).
  devmem::current_context()->synchronize();
  devmem::current_context()->flush_deallocations();
  const std::int64_t used_before = devmem::host::device_memory_used();
  std::atomic<bool> flag{false};
  {
    const DeviceArray out = devmem::device_array<int>({256}, Order::C, s);
    devmem::launch({2, 128, 0, s}, wait_for_flag, &flag, out);
  }                        // the only handle is gone while the kernel still waits
  CHECK_FALSE(s.query());  // launch returned before the kernel finished
  CHECK(devmem::host::device_memory_used() >= used_before + 256 * 4);
  flag = true;
  s.synchronize();
  devmem::current_context()->synchronize();  // releases what the finished work kept alive
  devmem::current_context()->flush_deallocations();
  CHECK(devmem::host::device_memory_used() == used_before);
}

TEST_CASE("kernels: simulator-only misuse", "[kernels][host-only]") {
  CHECK_THROWS_MATCHES((void)devmem::thread_idx(), devmem::InvalidArgument,
                       MessageStartsWith("devmem::thread_idx: called outside a kernel"));
  CHECK_THROWS_MATCHES(devmem::syncthreads(), devmem::InvalidArgument,
                       MessageStartsWith("syncthreads(): called outside a kernel"));
  const DeviceArray out = devmem::device_array<int>({1});
  try {
    devmem::launch({1, 1}, launches_from_a_kernel, out);
    devmem::synchronize();  // reports the kernel's failure
    FAIL("a launch from a kernel was accepted");
  } catch (const devmem::BackendError& e) {
    check_launch_failure(e, "devmem::launch: cannot launch a kernel from inside a kernel");
  }
}

TEST_CASE("kernels: the simulator reports out-of-bounds array accesses", "[kernels][host-only]") {
  const BoundsCheckingGuard guard;
  devmem::host::set_bounds_checking(true);
  const devmem::Stream s = devmem::stream();
  constexpr int kSentinel = -7;
  // 100 elements of a 128-element array: the 28 beyond them are sentinels that must survive.
  const DeviceArray storage = devmem::device_array<int>({128}, Order::C, s);
  storage.fill(kSentinel, s);
  const DeviceArray y = storage.slice(0, 0, 100);
  const auto sentinels_intact = [&] {
    const std::vector<int> values = storage.to_vector<int>(s);
    return std::all_of(values.begin() + 100, values.end(), [](int v) { return v == kSentinel; });
  };
  SECTION("128 threads write 100 elements without a guard") {
    devmem::launch<write_global_id_unguarded>({2, 64, 0, s}, y);
    try {
      s.synchronize();
      FAIL("synchronize did not report the overrun");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "host launch: LaunchFailure (719): write_global_id_unguarded: "
                           "ArrayView: index (100,) is out of bounds for shape (100,) in thread "
                           "(36, 0, 0) of block (1, 0, 0)");
      CHECK_THAT(std::string(e.what()), Catch::Matchers::EndsWith("of block (1, 0, 0)"));
    }
    CHECK(sentinels_intact());
    CHECK(storage.to_vector<int>(s)[99] == 99);  // the threads before the failing one ran
  }
  SECTION("a far index") {
    try {
      devmem::launch({1, 1}, write_one_at, y, 1LL << 40);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "ArrayView: index (1099511627776,) is out of bounds for shape (100,) "
                           "in thread (0, 0, 0) of block (0, 0, 0)");
    }
    CHECK(sentinels_intact());
  }
  SECTION("a negative index is out of bounds, as on a GPU (no wrap-around)") {
    try {
      devmem::launch({1, 1}, write_one_at, storage.slice(0, 10, 20), -1LL);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "ArrayView: index (-1,) is out of bounds for shape (10,) in thread "
                           "(0, 0, 0) of block (0, 0, 0)");
    }
    CHECK(storage.to_vector<int>(s)[9] == kSentinel);
  }
  SECTION("the second index of a 2-d view") {
    const DeviceArray m = storage.slice(0, 0, 20).reshape({4, 5});
    try {
      devmem::launch({1, 1}, write_one_at_2d, m, 1LL, 5LL);  // (1, 5) would be element (2, 0)
      devmem::synchronize();                                 // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "ArrayView: index (1, 5) is out of bounds for shape (4, 5) in thread "
                           "(0, 0, 0) of block (0, 0, 0)");
    }
    CHECK(storage.to_vector<int>(s) == std::vector<int>(128, kSentinel));
  }
  SECTION("a shared array") {
    try {
      devmem::launch<shared_array_overrun>({1, 40}, y);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "host launch: LaunchFailure (719): shared_array_overrun: shared_array: "
                           "index (32,) is out of bounds for shape (32,) in thread (32, 0, 0) of "
                           "block (0, 0, 0)");
    }
    try {
      devmem::launch({1, 1}, shared_array_2d_overrun, y, 8);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "shared_array: index (1, 8) is out of bounds for shape (4, 8) in "
                           "thread (0, 0, 0) of block (0, 0, 0)");
    }
    CHECK(sentinels_intact());
  }
  SECTION("a local array") {
    devmem::launch({1, 1}, local_array_overrun, y, 4);  // in bounds
    try {
      devmem::launch({1, 2}, local_array_overrun, y, 5);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(
          e,
          "host launch: LaunchFailure (719): local_array_overrun: local_array: index (4,) is "
          "out of bounds for shape (4,) in thread (0, 0, 0) of block (0, 0, 0)");
    }
  }
  SECTION("a constant array") {
    const DeviceArray out = devmem::device_array<float>({1}, Order::C, s);
    try {
      devmem::launch({1, 1}, read_lut_at, out, kLutSize);
      devmem::synchronize();  // reports the kernel's failure
      FAIL("launch did not report the index");
    } catch (const devmem::BackendError& e) {
      check_launch_failure(e,
                           "constant array: index (16,) is out of bounds for shape (16,) in "
                           "thread (0, 0, 0) of block (0, 0, 0)");
    }
  }
  SECTION("host code indexing a view outside a kernel") {
    const ArrayView<int, 1> view = y.view<int, 1>();
    CHECK_THROWS_MATCHES(
        view[100], devmem::InvalidArgument,
        Catch::Matchers::Message(
            "ArrayView: index (100,) is out of bounds for shape (100,) (outside a kernel)"));
  }
  // The stream and the simulator keep working afterwards.
  devmem::launch({1, 128, 0, s}, fill_iota, storage, 1);
  CHECK(storage.to_vector<int>(s)[127] == 128);
}

TEST_CASE("kernels: a stale view is refused at launch", "[kernels][host-only]") {
  const BoundsCheckingGuard guard;
  devmem::host::set_bounds_checking(true);
  std::vector<int> values(16, -7);
  const devmem::HostArray h = devmem::HostArray::from(values);
  ArrayView<int, 1> stale;
  {
    const devmem::MappedScope scope = devmem::mapped({h});
    stale = scope[0].view<int, 1>();
    devmem::launch({1, 16}, fill_iota, stale, 0);  // valid while the scope is open
  }
  CHECK(static_cast<const int*>(h.data())[15] == 15);
  std::fill_n(static_cast<int*>(h.data()), 16, -7);
  try {
    devmem::launch<fill_iota>({1, 16}, stale, 100);
    FAIL("launch accepted a view from a closed mapped() scope");
  } catch (const devmem::InvalidArgument& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Matchers::StartsWith("devmem::launch(fill_iota): argument 0 (an ArrayView "
                                           "of shape (16,)) reaches 64 bytes at 0x"));
    CHECK_THAT(std::string(e.what()),
               Catch::Matchers::EndsWith(
                   ", which are not inside a live device allocation or mapped host memory (a "
                   "view of a freed array, or from a closed mapped() scope?)"));
  }
  CHECK(std::all_of(static_cast<const int*>(h.data()), static_cast<const int*>(h.data()) + 16,
                    [](int v) { return v == -7; }));  // the kernel never ran
  // A view reaching one element past its allocation is refused the same way.
  const DeviceArray a = devmem::device_array<int>({8});
  const std::int64_t shape[] = {9};
  const std::int64_t strides[] = {4};
  const ArrayView<int, 1> too_long(static_cast<int*>(a.data()), shape, strides);
  CHECK_THROWS_MATCHES(devmem::launch({1, 1}, fill_iota, too_long, 0), devmem::InvalidArgument,
                       MessageStartsWith("devmem::launch(fill_iota): argument 0 (an ArrayView of "
                                         "shape (9,)) reaches 36 bytes at 0x"));
}

TEST_CASE("kernels: bounds checking can be turned off", "[kernels][host-only]") {
  const BoundsCheckingGuard guard;
  devmem::host::set_bounds_checking(false);
  CHECK_FALSE(devmem::host::bounds_checking());
  const DeviceArray out = devmem::device_array<int>({64});
  devmem::launch({2, 32}, fill_iota, out, 3);  // in range: runs as before
  CHECK(out.to_vector<int>()[63] == 66);
  devmem::host::set_bounds_checking(true);
  CHECK(devmem::host::bounds_checking());
}

TEST_CASE("kernels: injected launch failures", "[kernels][host-only]") {
  const HostControlsGuard controls;
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({32}, Order::C, s);
  out.fill(-1, s);
  const std::int64_t launches = devmem::host::call_count(devmem::host::Call::Launch);
  devmem::host::fail_nth(devmem::host::Call::Launch, 1);
  devmem::launch({1, 32, 0, s}, fill_iota, out, 0);
  CHECK(devmem::host::call_count(devmem::host::Call::Launch) == launches + 1);
  CHECK_THROWS_MATCHES(s.synchronize(), devmem::BackendError,
                       MessageStartsWith("host launch: Injected (999): injected failure"));
  CHECK(out.to_vector<int>(s) == std::vector<int>(32, -1));  // the kernel did not run
  // On the default stream too the launch returns, and the failure comes from the next synchronize.
  devmem::host::fail_nth(devmem::host::Call::Launch, 1);
  devmem::launch({1, 32}, fill_iota, out, 0);
  CHECK_THROWS_MATCHES(devmem::default_stream().synchronize(), devmem::BackendError,
                       MessageStartsWith("host launch: Injected (999): injected failure"));
  devmem::launch({1, 32, 0, s}, fill_iota, out, 0);
  CHECK(out.to_vector<int>(s)[31] == 31);
}

#endif  // host simulator only

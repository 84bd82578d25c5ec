// Deferred deallocation, its safety: free failures during a flush, pinned/mapped/registered
// scopes that never go through the queue, the stream-ordered safety of released memory and the
// per-context queues. A file of its own because test_deallocation.cpp, which holds the queue's
// flush rules (docs/memory-managers.md#deallocation-queue), grew too long with these too.
//
// Every test sets the queue limits itself, starts from an empty queue (MemoryStateGuard) and
// releases arrays explicitly, so nothing depends on timing.
#include "deallocation_test_support.hpp"
#include "support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <stdexcept>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::host::Call;

namespace {

/// The message of a free that failed during a flush.
std::string free_failure(const char* what, void* ptr, int64_t bytes, int later,
                         const std::string& error) {
  return std::string("freeing ") + what + " of " + pointer_text(ptr) + " (" +
         std::to_string(bytes) + " bytes) failed; " + std::to_string(later) +
         " later deallocation(s) stay queued: " + error;
}

}  // namespace

// ---- free failures ------------------------------------------------------------------------------

TEST_CASE("deallocation: a free failing in flush_deallocations: dropped, the rest stay queued",
          "[deallocation][errors]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  std::vector<void*> released;
  for (int i = 0; i < 5; ++i) released.push_back(release_device(100 + i));
  manager->fail_deallocation_at(3);
  REQUIRE_THROWS_MATCHES(ctx->flush_deallocations(), devmem::BackendError,
                         Message(free_failure("device memory", released[2], 102, 2,
                                              "recording manager: injected deallocation failure")));
  CHECK(pending() == 2);
  CHECK(pending_bytes() == 103 + 104);
  CHECK(manager->freed() == std::vector<void*>(released.begin(), released.begin() + 3));
  // Thrown, so not kept for take_deallocation_errors.
  CHECK(ctx->take_deallocation_errors().empty());
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  CHECK(manager->freed() == released);  // the failed item was not given back a second time
}

TEST_CASE("deallocation: a free failing in flush_deallocations names the pointer",
          "[deallocation][errors]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  void* const first = release_device(64);
  void* const second = release_device(64);
  manager->fail_deallocation_at(1);
  try {
    ctx->flush_deallocations();
    FAIL("a failing free did not make flush_deallocations throw");
  } catch (const devmem::BackendError& e) {
    // The manager's error, same type and fields, with the pointer and the queue state.
    CHECK(e.backend() == "recording");
    CHECK(e.function() == "deallocate");
    CHECK(e.code() == 999);
    CHECK(e.code_name() == "Injected");
    CHECK(std::string(e.what()) ==
          free_failure("device memory", first, 64, 1,
                       "recording manager: injected deallocation failure"));
  }
  CHECK(pending() == 1);
  ctx->flush_deallocations();
  CHECK(manager->freed() == std::vector<void*>{first, second});
}

TEST_CASE("deallocation: a free failing in an implicit flush is reported, not thrown",
          "[deallocation][errors]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  std::vector<void*> released;
  for (int i = 1; i <= 10; ++i) released.push_back(release_device(200 + i));
  manager->fail_deallocation_at(2);
  StderrCapture capture;
  released.push_back(release_device(211));  // the 11th: flushes inside the array's destructor
  const std::string logged = capture.finish();
  CHECK(pending() == 9);
  CHECK(manager->freed() == std::vector<void*>(released.begin(), released.begin() + 2));
  CHECK_THAT(logged, Catch::Matchers::Contains("recording manager: injected deallocation failure"));
  CHECK_THAT(logged, Catch::Matchers::Contains(pointer_text(released[1])));
  const std::string expected = free_failure("device memory", released[1], 202, 9,
                                            "recording manager: injected deallocation failure");
  CHECK_THAT(logged, Catch::Matchers::Contains("devmem: error: " + expected));
  const std::vector<std::string> errors = ctx->take_deallocation_errors();
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == expected);
  CHECK(ctx->take_deallocation_errors().empty());  // taking clears the list
  // The queue goes on from the 9 items kept.
  released.push_back(release_device(1));
  CHECK(pending() == 10);
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  CHECK(manager->freed() == released);
  CHECK(ctx->take_deallocation_errors().empty());
}

TEST_CASE("deallocation: a free failing in the out-of-memory flush is reported, the retry goes on",
          "[deallocation][errors][oom]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  std::vector<void*> released;
  for (int i = 0; i < 3; ++i) released.push_back(release_device(300 + i));
  manager->fail_next_allocations(1);
  manager->fail_deallocation_at(2);
  StderrCapture capture;
  const DeviceArray d = devmem::device_array(Shape{32}, u1());
  const std::string logged = capture.finish();
  CHECK(d.alloc_size() == 32);
  CHECK(pending() == 1);
  CHECK(pending_bytes() == 302);
  CHECK(manager->freed() == std::vector<void*>{released[0], released[1]});
  CHECK_THAT(logged, Catch::Matchers::Contains("recording manager: injected deallocation failure"));
  const std::vector<std::string> errors = ctx->take_deallocation_errors();
  REQUIRE(errors.size() == 1);
  CHECK(errors[0] == free_failure("device memory", released[1], 301, 1,
                                  "recording manager: injected deallocation failure"));
}

TEST_CASE("deallocation: backend free failures during flushes",
          "[deallocation][errors][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  use_direct_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  const int64_t used = devmem::host::device_memory_used();
  SECTION("flush_deallocations throws the BackendError; the failed item is dropped") {
    std::vector<void*> released;
    for (int i = 0; i < 5; ++i) released.push_back(release_device(64 * kKiB));
    REQUIRE(devmem::host::device_memory_used() == used + 5 * 64 * kKiB);
    devmem::host::fail_nth(Call::Deallocate, 3);
    const int64_t calls = devmem::host::call_count(Call::Deallocate);
    try {
      ctx->flush_deallocations();
      FAIL("a failing free did not make flush_deallocations throw");
    } catch (const devmem::BackendError& e) {
      CHECK(e.backend() == "host");
      CHECK(e.code() == 999);
      CHECK(e.code_name() == "Injected");
      CHECK(e.function() == "deallocate");
      CHECK(std::string(e.what()) ==
            free_failure("device memory", released[2], 64 * kKiB, 2,
                         "host deallocate: Injected (999): injected failure of call 3 of "
                         "Deallocate (fail_nth)"));
    }
    CHECK(devmem::host::call_count(Call::Deallocate) == calls + 3);
    CHECK(pending() == 2);
    CHECK(pending_bytes() == 2 * 64 * kKiB);
    // Two freed; the failed one's state is unknown and it is not freed again.
    CHECK(devmem::host::device_memory_used() == used + 3 * 64 * kKiB);
    ctx->flush_deallocations();
    CHECK(pending() == 0);
    CHECK(devmem::host::call_count(Call::Deallocate) == calls + 5);
    CHECK(devmem::host::device_memory_used() == used + 64 * kKiB);
  }
  SECTION("the 11th release hits a failing free: logged and kept, never thrown") {
    std::vector<void*> released;
    for (int i = 0; i < 10; ++i) released.push_back(release_device(64 * kKiB));
    devmem::host::fail_nth(Call::Deallocate, 2);
    StderrCapture capture;
    released.push_back(release_device(64 * kKiB));
    const std::string logged = capture.finish();
    CHECK(pending() == 9);
    CHECK(devmem::host::device_memory_used() == used + 10 * 64 * kKiB);
    CHECK_THAT(logged, Catch::Matchers::Contains("injected failure of call 2 of Deallocate"));
    CHECK_THAT(logged, Catch::Matchers::Contains(pointer_text(released[1])));
    const std::vector<std::string> errors = ctx->take_deallocation_errors();
    REQUIRE(errors.size() == 1);
    CHECK(errors[0] ==
          free_failure("device memory", released[1], 64 * kKiB, 9,
                       "host deallocate: Injected (999): injected failure of call 2 of "
                       "Deallocate (fail_nth)"));
    CHECK(ctx->take_deallocation_errors().empty());
    ctx->flush_deallocations();
    CHECK(pending() == 0);
    CHECK(devmem::host::device_memory_used() == used + 64 * kKiB);
  }
}

// ---- pinned / mapped / registered scopes --------------------------------------------------------

TEST_CASE("deallocation: pinned, mapped and registered scopes unregister at once, never queued",
          "[deallocation][host-memory]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const HostArray h = page_aligned_iota(Shape{1024});
  const auto expected = iota_vec(1024);
  const auto pin_map_register_twice = [&] {
    for (int round = 0; round < 2; ++round) {
      {
        const devmem::PinnedScope scope = devmem::pinned(h);
        CHECK(scope.arrays().size() == 1);
      }
      CHECK(pending() == 0);
      {
        const devmem::MappedScope scope = devmem::mapped({h});
        CHECK(scope[0].to_vector<double>() == expected);
      }
      CHECK(pending() == 0);
      {
        const devmem::PinnedScope scope = devmem::registered(h);
        CHECK(scope.arrays()[0].data() == h.data());
      }
      CHECK(pending() == 0);
    }
  };
  SECTION("outside defer_cleanup") {
    pin_map_register_twice();
  }
  SECTION("inside defer_cleanup (numba#3508)") {
    const devmem::DeferCleanup defer = ctx->defer_cleanup();
    (void)release_device(64);
    REQUIRE(pending() == 1);
    for (int round = 0; round < 2; ++round) {
      { const devmem::PinnedScope scope = devmem::pinned(h); }
      { const devmem::MappedScope scope = devmem::mapped({h}); }
      { const devmem::PinnedScope scope = devmem::registered(h); }
      CHECK(pending() == 1);
    }
  }
  // The memory is usable as plain pageable memory afterwards, and can be registered again.
  devmem::register_host(h);
  devmem::deregister_host(h);
  CHECK(h.to_vector<double>() == expected);
}

TEST_CASE("deallocation: scope exit calls the backend's unregister at once",
          "[deallocation][host-memory][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const HostArray h = page_aligned_iota(Shape{512});
  const devmem::DeferCleanup defer = ctx->defer_cleanup();
  const int64_t unregisters = devmem::host::call_count(Call::HostUnregister);
  { const devmem::PinnedScope scope = devmem::pinned(h); }
  CHECK(devmem::host::call_count(Call::HostUnregister) == unregisters + 1);
  { const devmem::MappedScope scope = devmem::mapped({h}); }
  CHECK(devmem::host::call_count(Call::HostUnregister) == unregisters + 2);
  { const devmem::PinnedScope scope = devmem::registered(h); }
  CHECK(devmem::host::call_count(Call::HostUnregister) == unregisters + 3);
  CHECK(pending() == 0);
}

// ---- stream-ordered safety ----------------------------------------------------------------------

namespace {

constexpr int64_t kProbeElements = 4096;  // 32 KiB: a size class nothing else in the test uses

/// Blocks stream `s`, enqueues a copy into a new device array `d` on `s` and a copy out of it,
/// releases `d`, then calls `while_blocked(d's address)` while the stream still waits. Afterwards
/// lets the stream go and checks the data. Returns d's address.
template <class Fn>
void* probe_released_while_in_use(const devmem::Stream& s, Fn&& while_blocked) {
  const auto ctx = devmem::current_context();
  const HostArray src = devmem::pinned_array<double>(Shape{kProbeElements});
  src.copy_from(iota_host(Shape{kProbeElements}));
  const HostArray out = devmem::pinned_array<double>(Shape{kProbeElements});
  void* address = nullptr;
  {
    StreamGate gate(s);
    {
      const DeviceArray d = devmem::device_array<double>(Shape{kProbeElements}, Order::C, s);
      address = d.data();
      d.copy_to_device(src, s);
      d.copy_to_host(out, s);
    }
    // d's last handle is gone while the stream has not even started the copies.
    CHECK_FALSE(s.query());
    CHECK(ctx->pending_deallocations() == 0);
    ctx->flush_deallocations();
    while_blocked(address);
    CHECK_FALSE(s.query());
    gate.open();
    s.synchronize();
    CHECK_FALSE(gate.timed_out());
  }
  CHECK(out.to_vector<double>() == iota_vec(kProbeElements));
  return address;
}

}  // namespace

TEST_CASE("deallocation: memory released while a stream still uses it is freed after the work",
          "[deallocation][streams]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  const devmem::Stream s = devmem::stream();
  void* const address = probe_released_while_in_use(s, [&](void* d) {
    const std::vector<void*> freed = manager->freed();
    CHECK(std::find(freed.begin(), freed.end(), d) == freed.end());
  });
  ctx->synchronize();
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  const std::vector<void*> freed = manager->freed();
  CHECK(std::count(freed.begin(), freed.end(), address) == 1);
}

TEST_CASE("deallocation: the pool does not reuse memory a blocked stream still writes",
          "[deallocation][streams][pool]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto pool = use_pool_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  const devmem::Stream s = devmem::stream();
  std::vector<DeviceArray> during;
  void* const address = probe_released_while_in_use(s, [&](void* d) {
    for (int i = 0; i < 4; ++i) {
      during.push_back(devmem::device_array<double>(Shape{kProbeElements}));
      CHECK(during.back().data() != d);
    }
    for (int i = 0; i < 2; ++i) {
      during.push_back(devmem::device_array<double>(Shape{kProbeElements}, Order::C, s));
      CHECK(during.back().data() != d);
    }
  });
  CHECK(during.size() == 6);
  ctx->synchronize();
  ctx->flush_deallocations();
  // Now the block is back in the pool, the only one cached in its class, and is handed out again.
  const DeviceArray again = devmem::device_array<double>(Shape{kProbeElements});
  CHECK(again.data() == address);
  CHECK(pool->statistics().hits >= 1);
}

TEST_CASE("deallocation: nothing used by queued stream work is freed before the work is done",
          "[deallocation][streams]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(0, 1.0));  // free as soon as memory reaches the queue
  constexpr int64_t n = 1000;
  const devmem::Stream s = devmem::stream();
  const HostArray out_copy = devmem::pinned_array<double>(Shape{n});
  const HostArray out_fill = devmem::pinned_array<double>(Shape{n});
  const HostArray out_shifted = devmem::pinned_array<double>(Shape{n});
  std::vector<void*> device_used;
  void* pinned_source = nullptr;
  {
    StreamGate gate(s);
    {
      const HostArray src = devmem::pinned_array<double>(Shape{n});
      src.copy_from(iota_host(Shape{n}));
      pinned_source = src.data();
      const DeviceArray a = devmem::device_array<double>(Shape{n}, Order::C, s);
      a.copy_to_device(src, s);  // H2D
      const DeviceArray b = devmem::device_array<double>(Shape{n}, Order::C, s);
      b.copy_to_device(a, s);                     // D2D
      const DeviceArray c = b.copy(Order::K, s);  // allocating copy
      c.copy_to_host(out_copy, s);
      const DeviceArray e = devmem::device_array<double>(Shape{n}, Order::C, s);
      e.memset(0x3F, s);  // a device-side memset: no pageable staging on the blocked stream
      e.copy_to_host(out_fill, s);
      const DeviceArray f = devmem::device_array<double>(Shape{n}, Order::C, s);
      f.copy_to_device(a, s);
      f.slice(0, 1, std::nullopt).copy_to_device(f.slice(0, 0, n - 1), s);  // overlapping
      f.copy_to_host(out_shifted, s);
      for (const DeviceArray* d : {&a, &b, &c, &e, &f}) device_used.push_back(d->data());
    }
    // Every array and the pinned source are gone while the stream has not run anything.
    CHECK_FALSE(s.query());
    ctx->flush_deallocations();
    CHECK(pending() == 0);
    CHECK(manager->deallocations().empty());
    CHECK(manager->host_deallocations().empty());
    gate.open();
    s.synchronize();
    CHECK_FALSE(gate.timed_out());
  }
  CHECK(out_copy.to_vector<double>() == iota_vec(n));
  double pattern = 0.0;
  std::memset(&pattern, 0x3F, sizeof pattern);
  CHECK(out_fill.to_vector<double>() == std::vector<double>(n, pattern));
  std::vector<double> shifted = iota_vec(n);
  std::copy_backward(shifted.begin(), shifted.end() - 1, shifted.end());
  CHECK(out_shifted.to_vector<double>() == shifted);
  ctx->synchronize();
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  const std::vector<void*> freed = manager->freed();
  for (void* p : device_used) CHECK(std::count(freed.begin(), freed.end(), p) == 1);
  // The staging buffer of the overlapping copy is freed too: everything allocated is freed.
  CHECK(freed.size() == manager->allocations().size());
  const auto host_freed = manager->host_deallocations();
  CHECK(std::count_if(host_freed.begin(), host_freed.end(), [&](const RecordingManager::Block& b) {
          return b.ptr == pinned_source;
        }) == 1);
}

TEST_CASE("deallocation: queues and defer_cleanup are per context",
          "[deallocation][defer-cleanup][multi-device]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(0, 1.0));
  const int count = devmem::device_count();
  REQUIRE(count >= 1);
  if (count < 2) {
    // One device: its own scope holds its queue back.
    {
      const devmem::DeferCleanup defer = ctx->defer_cleanup();
      (void)release_device(64);
      CHECK(pending() == 1);
    }
    CHECK(pending() == 1);
    ctx->flush_deallocations();
    CHECK(manager->deallocations().size() == 1);
    return;
  }
  const auto other = devmem::context_for_device(1);
  REQUIRE(other.get() != ctx.get());
  const std::size_t other_pending = other->pending_deallocations();
  const devmem::DeferCleanup defer = other->defer_cleanup();  // holds back device 1 only
  void* const p = release_device(64);
  CHECK(pending() == 0);
  CHECK(manager->freed() == std::vector<void*>{p});
  CHECK(other->pending_deallocations() == other_pending);
}

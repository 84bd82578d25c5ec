// Deferred deallocation (docs/memory-managers.md#deallocation-queue): the per-context queue and its
// flush rules (Numba's: the 11th item flushes, strictly more bytes than the ratio of device memory
// flush, out of memory flushes and retries once), defer_cleanup, statistics and the limits read
// from the environment. Free failures during a flush, scopes that never go through the queue and
// the stream-ordered safety of released memory are in test_deallocation_safety.cpp.
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

/// The same for a pinned host array.
void* release_pinned(int64_t bytes) {
  const HostArray h = devmem::pinned_array(Shape{bytes}, u1());
  return h.data();
}

}  // namespace

// ---- configuration ------------------------------------------------------------------------------

TEST_CASE("deallocation: configuration defaults, round trip and validation", "[deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const devmem::DeallocationConfig defaults;
  CHECK(defaults.max_pending_count == 10);
  CHECK(defaults.max_pending_ratio == 0.2);

  ctx->set_deallocation_config(limits(3, 0.5));
  CHECK(ctx->deallocation_config().max_pending_count == 3);
  CHECK(ctx->deallocation_config().max_pending_ratio == 0.5);
  ctx->set_deallocation_config(limits(0, 0.0));
  CHECK(ctx->deallocation_config().max_pending_count == 0);
  CHECK(ctx->deallocation_config().max_pending_ratio == 0.0);
  ctx->set_deallocation_config(limits(10, 1.0));
  CHECK(ctx->deallocation_config().max_pending_ratio == 1.0);

  REQUIRE_THROWS_MATCHES(
      ctx->set_deallocation_config(limits(-1, 0.2)), devmem::InvalidArgument,
      Message("set_deallocation_config: max_pending_count must not be negative, got -1"));
  REQUIRE_THROWS_MATCHES(
      ctx->set_deallocation_config(limits(10, -0.1)), devmem::InvalidArgument,
      Message("set_deallocation_config: max_pending_ratio must be from 0 to 1, got -0.1"));
  REQUIRE_THROWS_MATCHES(
      ctx->set_deallocation_config(limits(10, 1.5)), devmem::InvalidArgument,
      Message("set_deallocation_config: max_pending_ratio must be from 0 to 1, got 1.5"));
  REQUIRE_THROWS_AS(ctx->set_deallocation_config(limits(10, std::nan(""))),
                    devmem::InvalidArgument);
  // A rejected config changes nothing.
  CHECK(ctx->deallocation_config().max_pending_count == 10);
  CHECK(ctx->deallocation_config().max_pending_ratio == 1.0);
}

// ---- the count limit ----------------------------------------------------------------------------

TEST_CASE("deallocation: the 11th queued release flushes the queue", "[deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  REQUIRE(pending() == 0);

  std::vector<void*> released;
  int64_t bytes = 0;
  for (int i = 1; i <= 10; ++i) {
    released.push_back(release_device(1000 + i));
    bytes += 1000 + i;
    CHECK(pending() == static_cast<std::size_t>(i));
    CHECK(pending_bytes() == bytes);
  }
  CHECK(manager->deallocations().empty());

  released.push_back(release_device(1011));
  CHECK(pending() == 0);
  CHECK(pending_bytes() == 0);
  // Every item went to the manager once, oldest first, with its size.
  CHECK(manager->freed() == released);
  const auto blocks = manager->deallocations();
  REQUIRE(blocks.size() == 11);
  for (std::size_t i = 0; i < blocks.size(); ++i) CHECK(blocks[i].bytes == 1001 + i);

  // The count starts again from zero.
  for (int i = 1; i <= 10; ++i) (void)release_device(64);
  CHECK(pending() == 10);
  CHECK(manager->deallocations().size() == 11);
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  CHECK(manager->deallocations().size() == 21);
}

TEST_CASE("deallocation: a count limit of 0 frees at every release", "[deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(0, 1.0));
  std::vector<void*> released;
  for (int i = 0; i < 3; ++i) {
    released.push_back(release_device(128));
    CHECK(pending() == 0);
    CHECK(manager->freed() == released);
  }
}

TEST_CASE("deallocation: queued memory stays allocated until the 11th release",
          "[deallocation][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  use_direct_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  const int64_t used = devmem::host::device_memory_used();
  for (int i = 1; i <= 10; ++i) {
    (void)release_device(64 * kKiB);
    CHECK(pending() == static_cast<std::size_t>(i));
    CHECK(devmem::host::device_memory_used() == used + i * 64 * kKiB);
  }
  (void)release_device(64 * kKiB);
  CHECK(pending() == 0);
  CHECK(devmem::host::device_memory_used() == used);
}

TEST_CASE("deallocation: memory is queued when its last array goes, not before", "[deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  void* base = nullptr;
  {
    DeviceArray d = devmem::device_array(Shape{100}, f8());
    base = d.data();
    DeviceArray copy = d;  // NOLINT(performance-unnecessary-copy-initialization)
    const DeviceArray view = d.slice(0, 10, 20);
    const DeviceArray reshaped = d.reshape(Shape{10, 10});
    d = DeviceArray();
    copy = DeviceArray();
    CHECK(pending() == 0);
    CHECK(view.data() == static_cast<std::byte*>(base) + 80);
    CHECK(reshaped.data() == base);
  }
  CHECK(pending() == 1);
  CHECK(pending_bytes() == 800);
  CHECK(manager->deallocations().empty());
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  REQUIRE(manager->deallocations().size() == 1);
  CHECK(manager->deallocations()[0] == RecordingManager::Block{base, 800});
}

TEST_CASE("deallocation: pinned and mapped host allocations are queued too", "[deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  void* const pinned = release_pinned(3000);
  CHECK(pending() == 1);
  CHECK(pending_bytes() == 3000);
  void* mapped = nullptr;
  {
    const devmem::MappedArray m = devmem::mapped_array(Shape{500}, f8());
    mapped = m.data();
  }
  CHECK(pending() == 2);
  CHECK(pending_bytes() == 3000 + 4000);
  CHECK(manager->host_deallocations().empty());
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  CHECK(manager->host_deallocations() ==
        std::vector<RecordingManager::Block>{{pinned, 3000}, {mapped, 4000}});
  CHECK(manager->host_deallocation_flags() ==
        std::vector<devmem::HostAllocFlags>{devmem::HostAllocFlags::None,
                                            devmem::HostAllocFlags::Mapped});
  CHECK(manager->deallocations().empty());
}

// ---- the byte limit -----------------------------------------------------------------------------

TEST_CASE("deallocation: strictly more pending bytes than the ratio of device memory flush",
          "[deallocation]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  const int64_t total = ctx->memory_info().total;
  REQUIRE(total > kMiB);
  SECTION("a limit of about 256 KiB") {
    const double ratio = 262144.0 / static_cast<double>(total);
    const auto limit = static_cast<int64_t>(static_cast<double>(total) * ratio);
    REQUIRE(limit > 2);
    ctx->set_deallocation_config(limits(1000, ratio));
    std::vector<void*> released;
    released.push_back(release_device(limit - 1));
    released.push_back(release_device(1));
    CHECK(pending() == 2);  // exactly the limit: no flush
    CHECK(pending_bytes() == limit);
    CHECK(manager->deallocations().empty());
    released.push_back(release_device(1));  // one byte more
    CHECK(pending() == 0);
    CHECK(pending_bytes() == 0);
    CHECK(manager->freed() == released);
  }
  SECTION("a ratio of 0 frees every non-empty release") {
    ctx->set_deallocation_config(limits(1000, 0.0));
    void* const p = release_device(1);
    CHECK(pending() == 0);
    CHECK(manager->freed() == std::vector<void*>{p});
  }
  SECTION("pinned host bytes count too") {
    const double ratio = 262144.0 / static_cast<double>(total);
    const auto limit = static_cast<int64_t>(static_cast<double>(total) * ratio);
    ctx->set_deallocation_config(limits(1000, ratio));
    (void)release_pinned(limit - 100);
    (void)release_device(100);
    CHECK(pending() == 2);
    CHECK(pending_bytes() == limit);
    (void)release_pinned(1);
    CHECK(pending() == 0);
    CHECK(manager->host_deallocations().size() == 2);
    CHECK(manager->deallocations().size() == 1);
  }
}

TEST_CASE("deallocation: byte limit of a 64 MiB device, device and pinned bytes",
          "[deallocation][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  use_direct_manager();
  const int64_t used = devmem::host::device_memory_used();
  REQUIRE(used <= 16 * kMiB);
  devmem::host::set_device_memory_capacity(64 * kMiB);
  CHECK(ctx->memory_info().total == 64 * kMiB);
  ctx->set_deallocation_config(limits(1000, 0.25));  // 16 MiB
  SECTION("device arrays") {
    (void)release_device(8 * kMiB);
    (void)release_device(8 * kMiB);
    CHECK(pending() == 2);
    CHECK(pending_bytes() == 16 * kMiB);
    CHECK(devmem::host::device_memory_used() == used + 16 * kMiB);
    (void)release_device(1);
    CHECK(pending() == 0);
    CHECK(devmem::host::device_memory_used() == used);
  }
  SECTION("a pinned array fills the rest") {
    (void)release_device(8 * kMiB);
    (void)release_pinned(8 * kMiB);
    CHECK(pending() == 2);
    CHECK(pending_bytes() == 16 * kMiB);
    CHECK(devmem::host::device_memory_used() == used + 8 * kMiB);
    (void)release_pinned(1);
    CHECK(pending() == 0);
    CHECK(devmem::host::device_memory_used() == used);
  }
  SECTION("mapped arrays") {
    { const devmem::MappedArray m = devmem::mapped_array(Shape{16 * kMiB}, u1()); }
    CHECK(pending() == 1);
    CHECK(pending_bytes() == 16 * kMiB);
    { const devmem::MappedArray m = devmem::mapped_array(Shape{1}, u1()); }
    CHECK(pending() == 0);
  }
}

// ---- defer_cleanup ------------------------------------------------------------------------------

TEST_CASE("deallocation: nested defer_cleanup frees nothing, leaving it does not flush",
          "[deallocation][defer-cleanup]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  std::vector<void*> released;
  {
    const devmem::DeferCleanup outer = ctx->defer_cleanup();
    {
      const devmem::DeferCleanup inner = devmem::defer_cleanup();
      for (int i = 1; i <= 15; ++i) {
        released.push_back(release_device(512));
        CHECK(pending() == static_cast<std::size_t>(i));
      }
      ctx->flush_deallocations();  // frees nothing inside defer_cleanup
      CHECK(pending() == 15);
      CHECK(manager->deallocations().empty());
    }
    // Still inside the outer scope.
    released.push_back(release_device(512));
    CHECK(pending() == 16);
    ctx->flush_deallocations();
    CHECK(pending() == 16);
    CHECK(manager->deallocations().empty());
  }
  CHECK(pending() == 16);
  CHECK(pending_bytes() == 16 * 512);
  CHECK(manager->deallocations().empty());
  SECTION("the next release over the limit flushes") {
    released.push_back(release_device(512));
    CHECK(pending() == 0);
    CHECK(manager->freed() == released);
  }
  SECTION("flush_deallocations flushes") {
    ctx->flush_deallocations();
    CHECK(pending() == 0);
    CHECK(manager->freed() == released);
  }
}

TEST_CASE("deallocation: defer_cleanup holds back the byte limit and the out-of-memory flush",
          "[deallocation][defer-cleanup]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(1000, 0.0));  // any pending byte is over the limit
  {
    const devmem::DeferCleanup defer = ctx->defer_cleanup();
    (void)release_device(4096);
    (void)release_device(4096);
    CHECK(pending() == 2);
    manager->fail_next_allocations(2);
    REQUIRE_THROWS_AS(devmem::device_array(Shape{64}, u1()), devmem::OutOfMemory);
    CHECK(pending() == 2);
    CHECK(manager->deallocations().empty());
  }
  CHECK(pending() == 2);
  (void)release_device(1);
  CHECK(pending() == 0);
  CHECK(manager->deallocations().size() == 3);
}

TEST_CASE("deallocation: DeferCleanup is movable and ends once", "[deallocation][defer-cleanup]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(0, 1.0));  // without a scope, every release frees
  {
    const devmem::DeferCleanup outer = devmem::defer_cleanup();
    {
      devmem::DeferCleanup a = ctx->defer_cleanup();
      const devmem::DeferCleanup b = std::move(a);
      std::vector<devmem::DeferCleanup> many;
      for (int i = 0; i < 5; ++i) many.push_back(ctx->defer_cleanup());  // moved on growth
    }
    // If a moved-from scope ended the deferral too, these would be freed.
    (void)release_device(256);
    (void)release_device(256);
    ctx->flush_deallocations();
    CHECK(pending() == 2);
    CHECK(manager->deallocations().empty());
  }
  CHECK(pending() == 2);
  // An exception leaving a scope ends it too.
  try {
    const devmem::DeferCleanup scope = ctx->defer_cleanup();
    throw std::runtime_error("leaving by exception");
  } catch (const std::runtime_error&) {
  }
  ctx->flush_deallocations();
  CHECK(pending() == 0);
  CHECK(manager->deallocations().size() == 2);
  (void)release_device(256);
  CHECK(pending() == 0);
  CHECK(manager->deallocations().size() == 3);
}

// ---- out of memory ------------------------------------------------------------------------------

TEST_CASE("deallocation: an allocation out of memory flushes the queue and retries once",
          "[deallocation][oom]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto manager = use_recording_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  std::vector<void*> released;
  for (int i = 0; i < 3; ++i) released.push_back(release_device(1024));
  REQUIRE(pending() == 3);
  const int calls = manager->allocate_calls();
  SECTION("the retry succeeds") {
    manager->fail_next_allocations(1);
    const DeviceArray d = devmem::device_array(Shape{256}, u1());
    CHECK(manager->allocate_calls() == calls + 2);
    CHECK(pending() == 0);
    CHECK(manager->freed() == released);
    REQUIRE(manager->allocations().size() == 4);
    CHECK(manager->allocations().back() == RecordingManager::Block{d.data(), 256});
  }
  SECTION("the retry fails too: OutOfMemory, no third attempt") {
    manager->fail_next_allocations(2);
    try {
      (void)devmem::device_array(Shape{256}, u1());
      FAIL("two failed attempts did not throw");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == 256);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith("device_array: "));
    }
    CHECK(manager->allocate_calls() == calls + 2);
    CHECK(pending() == 0);
    CHECK(manager->freed() == released);
  }
}

TEST_CASE("deallocation: out of device memory: the retry waits for what a stream's work holds",
          "[deallocation][oom][streams][host-only]") {
  // keep_alive.hpp: a stream's last operations share a completion event recorded late, so an
  // array dropped after a copy on a stream is held until the stream is synchronized; the retry
  // after a failed allocation waits for that work and frees it.
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  use_direct_manager();
  const devmem::Stream s = devmem::stream();
  const int64_t used = devmem::host::device_memory_used();
  devmem::host::set_device_memory_capacity(used + 8 * kMiB);
  const DeviceArray target = devmem::device_array(Shape{2 * kMiB}, u1(), {}, devmem::Order::C, s);
  {
    const DeviceArray source = devmem::device_array(Shape{4 * kMiB}, u1(), {}, devmem::Order::C, s);
    target.copy_to_device(source.slice(0, 0, 2 * kMiB), s);
  }
  REQUIRE(mem.context()->operations_in_flight() >= 1);
  const DeviceArray fits_after_wait = devmem::device_array(Shape{5 * kMiB}, u1());
  CHECK(fits_after_wait.alloc_size() == 5 * kMiB);
  CHECK(mem.context()->operations_in_flight() == 0);
  CHECK(devmem::host::device_memory_used() == used + 7 * kMiB);
}

TEST_CASE("deallocation: out of device memory: flush then retry, then OutOfMemory",
          "[deallocation][oom][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  use_direct_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  const int64_t used = devmem::host::device_memory_used();
  devmem::host::set_device_memory_capacity(used + 8 * kMiB);
  for (int i = 0; i < 3; ++i) (void)release_device(2 * kMiB);
  REQUIRE(pending() == 3);
  REQUIRE(devmem::host::device_memory_used() == used + 6 * kMiB);
  const int64_t calls = devmem::host::call_count(Call::Allocate);
  SECTION("an allocation that fits only after the flush succeeds") {
    const DeviceArray d = devmem::device_array(Shape{4 * kMiB}, u1());
    CHECK(d.alloc_size() == 4 * kMiB);
    CHECK(pending() == 0);
    CHECK(devmem::host::device_memory_used() == used + 4 * kMiB);
    CHECK(devmem::host::call_count(Call::Allocate) == calls + 2);
  }
  SECTION("an allocation that can never fit") {
    try {
      (void)devmem::device_array(Shape{16 * kMiB}, u1());
      FAIL("16 MiB on an 8 MiB device did not throw");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == 16 * kMiB);
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Matchers::StartsWith("device_array: "));
      const devmem::MemoryInfo info = ctx->memory_info();
      CHECK(info.free == 8 * kMiB);
      CHECK_THAT(what, Catch::Matchers::StartsWith(
                           "device_array: out of device memory allocating 16777216 bytes (16 "
                           "MiB) on device " +
                           std::to_string(ctx->device()) + " (" + devmem::format_bytes(info.free) +
                           " free of " + devmem::format_bytes(info.total) +
                           ", after flushing pending deallocations): host allocate: "));
    }
    CHECK(pending() == 0);  // flushed before the retry
    CHECK(devmem::host::device_memory_used() == used);
    CHECK(devmem::host::call_count(Call::Allocate) == calls + 2);
  }
  SECTION("inside defer_cleanup the retry cannot flush") {
    {
      const devmem::DeferCleanup defer = ctx->defer_cleanup();
      try {
        (void)devmem::device_array(Shape{4 * kMiB}, u1());
        FAIL("4 MiB with 2 MiB free inside defer_cleanup did not throw");
      } catch (const devmem::OutOfMemory& e) {
        // It says what defer_cleanup holds and what to do, and claims no flush.
        const std::string what = e.what();
        CHECK_THAT(what, Catch::Matchers::StartsWith("device_array: out of device memory "));
        CHECK_THAT(what, Catch::Matchers::Contains(
                             "nothing flushed: inside defer_cleanup, which is holding 3 pending "
                             "deallocation(s) of 6 MiB; leaving its outermost block does not free "
                             "them either: call flush_deallocations() after the block"));
        CHECK_THAT(what, !Catch::Matchers::Contains("after flushing"));
      }
      CHECK(pending() == 3);
      CHECK(devmem::host::device_memory_used() == used + 6 * kMiB);
    }
    const DeviceArray d = devmem::device_array(Shape{4 * kMiB}, u1());
    CHECK(pending() == 0);
    CHECK(devmem::host::device_memory_used() == used + 4 * kMiB);
  }
}

TEST_CASE("deallocation: out of page-locked host memory: flush then retry, then OutOfMemory",
          "[deallocation][oom][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  use_direct_manager();
  ctx->set_deallocation_config(limits(10, 1.0));
  for (int i = 0; i < 3; ++i) (void)release_pinned(4096);
  REQUIRE(pending() == 3);
  const int64_t calls = devmem::host::call_count(Call::HostAllocate);
  SECTION("the retry succeeds") {
    devmem::host::fail_nth(Call::HostAllocate, 1, devmem::host::Status::MemoryAllocation);
    const HostArray h = devmem::pinned_array(Shape{100}, u1());
    CHECK(h.kind() == devmem::HostMemoryKind::Pinned);
    CHECK(pending() == 0);
    CHECK(devmem::host::call_count(Call::HostAllocate) == calls + 2);
  }
  SECTION("the retry fails too") {
    devmem::host::fail_nth(Call::HostAllocate, 1, devmem::host::Status::MemoryAllocation, 2);
    try {
      (void)devmem::pinned_array(Shape{100}, u1());
      FAIL("two failed attempts did not throw");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == 100);
      CHECK_THAT(std::string(e.what()),
                 Catch::Matchers::StartsWith("pinned_array: out of page-locked host memory "
                                             "allocating 100 bytes (100 B) on device " +
                                             std::to_string(ctx->device()) + " ("));
    }
    CHECK(pending() == 0);
    CHECK(devmem::host::call_count(Call::HostAllocate) == calls + 2);
  }
}

// ---- statistics ---------------------------------------------------------------------------------

TEST_CASE("deallocation: device and host allocation statistics", "[deallocation][statistics]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const devmem::MemoryStatistics d0 = ctx->device_statistics();
  const devmem::MemoryStatistics h0 = ctx->host_statistics();
  {
    DeviceArray a = devmem::device_array(Shape{1000}, u1());
    const DeviceArray b = devmem::device_array(Shape{10}, f8());
    devmem::MemoryStatistics d = ctx->device_statistics();
    CHECK(d.current_bytes == d0.current_bytes + 1080);
    CHECK(d.current_count == d0.current_count + 2);
    CHECK(d.total_bytes == d0.total_bytes + 1080);
    CHECK(d.total_count == d0.total_count + 2);
    CHECK(d.peak_bytes == std::max(d0.peak_bytes, d0.current_bytes + 1080));
    CHECK(d.peak_count == std::max(d0.peak_count, d0.current_count + 2));
    // Views and handle copies are not allocations.
    const DeviceArray view = a.slice(0, 100, 200);
    const DeviceArray handle = b;  // NOLINT(performance-unnecessary-copy-initialization)
    const DeviceArray reshaped = b.reshape(Shape{2, 5});
    d = ctx->device_statistics();
    CHECK(d.current_count == d0.current_count + 2);
    CHECK(d.total_count == d0.total_count + 2);
    // A copy is.
    {
      const DeviceArray c = b.copy();
      d = ctx->device_statistics();
      CHECK(d.current_bytes == d0.current_bytes + 1160);
      CHECK(d.current_count == d0.current_count + 3);
      CHECK(d.total_count == d0.total_count + 3);
      CHECK(d.peak_bytes == std::max(d0.peak_bytes, d0.current_bytes + 1160));
    }
    // Released: no longer current, although its memory is still queued.
    CHECK(pending() == 1);
    d = ctx->device_statistics();
    CHECK(d.current_bytes == d0.current_bytes + 1080);
    CHECK(d.current_count == d0.current_count + 2);
    CHECK(d.total_bytes == d0.total_bytes + 1160);
    a = DeviceArray();
    CHECK(ctx->device_statistics().current_count == d0.current_count + 2);  // `view` holds it
    // Pinned and mapped host arrays count as host allocations, not device ones.
    {
      const HostArray p = devmem::pinned_array(Shape{3000}, u1());
      const devmem::MappedArray m = devmem::mapped_array(Shape{100}, f8());
      const devmem::MemoryStatistics h = ctx->host_statistics();
      CHECK(h.current_bytes == h0.current_bytes + 3800);
      CHECK(h.current_count == h0.current_count + 2);
      CHECK(h.total_bytes == h0.total_bytes + 3800);
      CHECK(h.total_count == h0.total_count + 2);
      CHECK(h.peak_bytes == std::max(h0.peak_bytes, h0.current_bytes + 3800));
      CHECK(ctx->device_statistics().total_count == d0.total_count + 3);
    }
    const devmem::MemoryStatistics h = ctx->host_statistics();
    CHECK(h.current_bytes == h0.current_bytes);
    CHECK(h.current_count == h0.current_count);
    CHECK(h.total_count == h0.total_count + 2);
  }
  const devmem::MemoryStatistics d = ctx->device_statistics();
  CHECK(d.current_bytes == d0.current_bytes);
  CHECK(d.current_count == d0.current_count);
  CHECK(d.total_bytes == d0.total_bytes + 1160);
  CHECK(d.total_count == d0.total_count + 3);
  CHECK(pending() == 3 + 2);  // a, b, the copy; the pinned and the mapped array
  ctx->flush_deallocations();
  CHECK(ctx->device_statistics().current_count == d0.current_count);
  CHECK(ctx->device_statistics().total_count == d0.total_count + 3);
}

// ---- limits from the environment ----------------------------------------------------------------
// Read when a context is created, so checked in a child process: the hidden ([.]) child test
// cases are run only by the test after them.

TEST_CASE("deallocation env child: queue limits from the environment", "[.][env-child]") {
  const auto ctx = devmem::current_context();
  CHECK(ctx->deallocation_config().max_pending_count == 3);
  CHECK(ctx->deallocation_config().max_pending_ratio == 0.5);
  ctx->flush_deallocations();
  for (int i = 1; i <= 3; ++i) {
    (void)release_device(64);
    CHECK(pending() == static_cast<std::size_t>(i));
  }
  (void)release_device(64);
  CHECK(pending() == 0);
}

TEST_CASE("deallocation env child: a bad DEVMEM_MAX_PENDING_DEALLOCS_COUNT", "[.][env-child]") {
  REQUIRE_THROWS_MATCHES(devmem::current_context(), devmem::InvalidArgument,
                         Message("DEVMEM_MAX_PENDING_DEALLOCS_COUNT: invalid value '12x' "
                                 "(expected a non-negative integer)"));
}

TEST_CASE("deallocation env child: a bad DEVMEM_MAX_PENDING_DEALLOCS_RATIO", "[.][env-child]") {
  REQUIRE_THROWS_MATCHES(devmem::current_context(), devmem::InvalidArgument,
                         Message("DEVMEM_MAX_PENDING_DEALLOCS_RATIO: invalid value '1.5' "
                                 "(expected a number from 0 to 1)"));
}

TEST_CASE("deallocation: queue limits from the environment, bad values rejected at first use",
          "[deallocation][env]") {
  struct Case {
    const char* env;
    const char* child;
  };
  const Case cases[] = {
      {"DEVMEM_MAX_PENDING_DEALLOCS_COUNT=3 DEVMEM_MAX_PENDING_DEALLOCS_RATIO=0.5",
       "deallocation env child: queue limits from the environment"},
      {"DEVMEM_MAX_PENDING_DEALLOCS_COUNT=12x",
       "deallocation env child: a bad DEVMEM_MAX_PENDING_DEALLOCS_COUNT"},
      {"DEVMEM_MAX_PENDING_DEALLOCS_RATIO=1.5",
       "deallocation env child: a bad DEVMEM_MAX_PENDING_DEALLOCS_RATIO"},
  };
  for (const Case& c : cases) {
    std::string output;
    const int rc = run_self_with_env(c.env, c.child, output);
    INFO(c.env << "\n" << output);
    CHECK(rc == 0);
    CHECK_THAT(output, Catch::Matchers::Contains("All tests passed"));
    CHECK_THAT(output, Catch::Matchers::Contains("in 1 test case"));
  }
}

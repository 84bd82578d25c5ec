// Deferred deallocation (docs/memory-managers.md#deallocation-queue): the per-context queue and its
// flush rules (Numba's: the 11th item flushes, strictly more bytes than the ratio of device memory
// flush, out of memory flushes and retries once), defer_cleanup, free failures during a flush,
// pinned/mapped/registered scopes that never go through the queue, stream-ordered safety of
// released memory, and statistics.
//
// Every test sets the queue limits itself, starts from an empty queue (MemoryStateGuard) and
// releases arrays explicitly, so nothing depends on timing.
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

devmem::DeallocationConfig limits(int64_t count, double ratio) {
  devmem::DeallocationConfig c;
  c.max_pending_count = count;
  c.max_pending_ratio = ratio;
  return c;
}

/// Allocates a device array of `bytes` bytes, releases it (drops its only handle) and returns the
/// address it had.
void* release_device(int64_t bytes) {
  const DeviceArray d = devmem::device_array(Shape{bytes}, u1());
  return d.data();
}

/// The same for a pinned host array.
void* release_pinned(int64_t bytes) {
  const HostArray h = devmem::pinned_array(Shape{bytes}, u1());
  return h.data();
}

/// The message of a free that failed during a flush.
std::string free_failure(const char* what, void* ptr, int64_t bytes, int later,
                         const std::string& error) {
  return std::string("freeing ") + what + " of " + pointer_text(ptr) + " (" +
         std::to_string(bytes) + " bytes) failed; " + std::to_string(later) +
         " later deallocation(s) stay queued: " + error;
}

std::size_t pending() {
  return devmem::current_context()->pending_deallocations();
}
int64_t pending_bytes() {
  return devmem::current_context()->pending_deallocation_bytes();
}

/// The direct manager, made anew, so that device_memory_used() sees every free at once.
void use_direct_manager() {
  auto ctx = devmem::current_context();
  ctx->set_memory_manager(devmem::make_memory_manager("direct", *ctx));
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
      REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{4 * kMiB}, u1()), devmem::OutOfMemory,
                             MessageStartsWith("device_array: "));
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

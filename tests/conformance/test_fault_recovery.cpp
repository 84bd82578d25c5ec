// Failure paths the fault-injection sweep (tests/reliability/fault_sweep.cpp) found broken, each
// pinned down by a test of its own.
#include "support.hpp"

namespace {

using namespace conformance;
using Catch::Matchers::Message;
using devmem::host::Call;

}  // namespace

TEST_CASE("fault recovery: a pinned scope retries a failed unregistration at scope exit",
          "[host][pinned][errors][host-only]") {
  const HostControlsGuard guard;
  const devmem::HostArray h = page_aligned_host(Shape{16}, f8());
  {
    devmem::PinnedScope scope = devmem::pinned(h);
    devmem::host::fail_nth(Call::HostUnregister, 1);
    REQUIRE_THROWS_MATCHES(scope.close(), devmem::BackendError,
                           MessageContains("injected failure of call 1 of HostUnregister"));
    // The range is still registered after the failure: the scope keeps it for another try.
    REQUIRE_THROWS_AS(devmem::pinned(h), devmem::BackendError);
  }
  // The scope's destructor tried again and succeeded: the memory can be pinned anew (before the
  // fix it stayed registered for ever, and this failed with HostMemoryAlreadyRegistered).
  devmem::PinnedScope again = devmem::pinned(h);
  again.close();
  REQUIRE_THROWS_MATCHES(devmem::deregister_host(h), devmem::BackendError,
                         MessageStartsWith("host host_unregister: HostMemoryNotRegistered (713)"));
}

TEST_CASE("fault recovery: the pool names the cached block it drops when freeing it fails",
          "[memory-manager][pool][errors][host-only]") {
  const MemoryStateGuard state;
  const HostControlsGuard guard;
  const auto pool = use_pool_manager();
  void* block = nullptr;
  {
    const devmem::DeviceArray a = iota_device(Shape{4});  // 32 bytes: the 256-byte size class
    block = a.data();
  }
  state.context()->flush_deallocations();  // the block goes back into the pool's cache
  REQUIRE(pool->statistics().cached_bytes == 256);
  const std::int64_t used_before = devmem::host::device_memory_used();
  devmem::host::fail_nth(Call::Deallocate, 1);
  REQUIRE_THROWS_MATCHES(
      pool->trim(), devmem::BackendError,
      Message("pool memory manager: freeing cached device memory of " + pointer_text(block) +
              " (256 bytes) failed; the block is dropped: host deallocate: Injected (999): "
              "injected failure of call 1 of Deallocate (fail_nth)"));
  // Dropped, as the message says: out of the cache, and still held by the (simulated) device.
  CHECK(pool->statistics().cached_bytes == 0);
  CHECK(devmem::host::device_memory_used() == used_before);
}

// Memory managers (docs/memory-managers.md): the MemoryManager interface and its checks (Numba's
// EMM plugins), set_memory_manager, the registry of named managers, memory returned to the manager
// that made it, and the caching pool: size classes, reuse, statistics, trim, pinned blocks, memory
// pressure and the cache limit. One file although over 800 lines: its cases share the recording
// managers and guards of this file's first part, and CTest names them by this file's tags.
#include "support.hpp"

#include <bit>
#include <concepts>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::PoolMemoryManager;

namespace {

/// A direct manager that claims the previous interface version (1: allocate took a native stream
/// handle, deallocate no stream), as a plugin built against that header would.
class Version1Manager : public devmem::DirectMemoryManager {
 public:
  using DirectMemoryManager::DirectMemoryManager;
  [[nodiscard]] int interface_version() const noexcept override { return 1; }
};

/// A manager written against the bare interface: it asks the backend for 256 bytes more than
/// requested and hands out the address 256 bytes in, so devmem must use exactly the pointers it
/// gets and give exactly those back.
class OffsetManager : public devmem::MemoryManager {
 public:
  static constexpr std::size_t kOffset = 256;
  explicit OffsetManager(devmem::Context& context) : MemoryManager(context) {}
  [[nodiscard]] std::string_view name() const noexcept override { return "offset"; }
  [[nodiscard]] void* allocate(std::size_t bytes, const devmem::Stream& /*stream*/) override {
    auto* base =
        static_cast<std::byte*>(context().backend().allocate(context().device(), bytes + kOffset));
    ++live_;
    return base + kOffset;
  }
  void deallocate(void* ptr, std::size_t /*bytes*/, const devmem::Stream& /*stream*/) override {
    context().backend().deallocate(context().device(), static_cast<std::byte*>(ptr) - kOffset);
    --live_;
  }
  [[nodiscard]] void* host_allocate(std::size_t bytes, devmem::HostAllocFlags flags) override {
    ++live_host_;
    return context().backend().host_allocate(context().device(), bytes, flags);
  }
  void host_deallocate(void* ptr, std::size_t /*bytes*/,
                       devmem::HostAllocFlags /*flags*/) override {
    context().backend().host_deallocate(context().device(), ptr);
    --live_host_;
  }
  [[nodiscard]] devmem::MemoryInfo memory_info() const override {
    return context().backend().memory_info(context().device());
  }
  [[nodiscard]] int live() const noexcept { return live_.load(); }
  [[nodiscard]] int live_host() const noexcept { return live_host_.load(); }

 private:
  std::atomic<int> live_{0};
  std::atomic<int> live_host_{0};
};

/// A plugin reporting its own numbers, as Numba's EMM test plugins do.
class FixedInfoManager : public devmem::DirectMemoryManager {
 public:
  using DirectMemoryManager::DirectMemoryManager;
  [[nodiscard]] std::string_view name() const noexcept override { return "fixed-info"; }
  [[nodiscard]] devmem::MemoryInfo memory_info() const override { return {32, 64}; }
};

std::int64_t i64(std::size_t v) {
  return static_cast<std::int64_t>(v);
}

}  // namespace

// ---- the interface and its checks ---------------------------------------------------------------

TEST_CASE("memory manager: the default manager", "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const std::shared_ptr<devmem::MemoryManager> m = ctx->memory_manager();
  REQUIRE(m != nullptr);
  const char* const env = std::getenv("DEVMEM_MEMORY_MANAGER");
  CHECK(m->name() == std::string_view(env != nullptr && *env != '\0' ? env : "direct"));
  CHECK(&m->context() == ctx.get());
  CHECK(m->interface_version() == devmem::MemoryManager::kInterfaceVersion);
  CHECK(devmem::MemoryManager::kInterfaceVersion == 3);
  CHECK(ctx->memory_manager() == m);  // the same instance every time
}

TEST_CASE("memory manager: make_memory_manager makes the built-in managers", "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto direct = devmem::make_memory_manager("direct", *ctx);
  REQUIRE(direct != nullptr);
  CHECK(direct->name() == "direct");
  CHECK(dynamic_cast<devmem::DirectMemoryManager*>(direct.get()) != nullptr);
  CHECK(&direct->context() == ctx.get());
  CHECK(direct->cached_bytes() == 0);
  direct->trim();  // nothing cached: a no-op
  CHECK(direct->cached_bytes() == 0);
  const auto pool = devmem::make_memory_manager("pool", *ctx);
  REQUIRE(pool != nullptr);
  CHECK(pool->name() == "pool");
  CHECK(dynamic_cast<PoolMemoryManager*>(pool.get()) != nullptr);
  CHECK(pool->interface_version() == 3);
  CHECK(pool->cached_bytes() == 0);
  CHECK(devmem::make_memory_manager("pool", *ctx) != pool);  // a new instance per call
  // Both report the device's memory.
  CHECK(direct->memory_info().total == ctx->memory_info().total);
  CHECK(direct->memory_info().free <= direct->memory_info().total);
}

TEST_CASE("memory manager: unknown names are rejected with the known ones listed",
          "[memory-manager][errors]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  try {
    (void)devmem::make_memory_manager("nope", *ctx);
    FAIL("an unknown manager name was accepted");
  } catch (const devmem::InvalidArgument& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::StartsWith(
                         "make_memory_manager: unknown memory manager 'nope' (known: "));
    CHECK_THAT(what, Catch::Matchers::Contains("direct"));
    CHECK_THAT(what, Catch::Matchers::Contains("pool"));
  }
  REQUIRE_THROWS_AS(devmem::make_memory_manager("", *ctx), devmem::InvalidArgument);
  REQUIRE_THROWS_AS(devmem::make_memory_manager("Direct", *ctx), devmem::InvalidArgument);
}

TEST_CASE("memory manager: set_memory_manager rejects null and other interface versions",
          "[memory-manager][errors]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto before = ctx->memory_manager();
  SECTION("interface version 1") {
    const auto v1 = std::make_shared<Version1Manager>(*ctx);
    const std::string expected =
        "set_memory_manager: memory manager 'direct' has interface version 1 - version 3 "
        "required";
    REQUIRE_THROWS_MATCHES(ctx->set_memory_manager(v1), devmem::InvalidArgument, Message(expected));
    REQUIRE_THROWS_MATCHES(devmem::set_memory_manager(v1), devmem::InvalidArgument,
                           Message(expected));
  }
  SECTION("null") {
    REQUIRE_THROWS_MATCHES(ctx->set_memory_manager(nullptr), devmem::InvalidArgument,
                           Message("set_memory_manager: the manager is null"));
    REQUIRE_THROWS_MATCHES(devmem::set_memory_manager(nullptr), devmem::InvalidArgument,
                           Message("set_memory_manager: the manager is null"));
  }
  CHECK(ctx->memory_manager() == before);  // unchanged
  const DeviceArray d = iota_device(Shape{8});
  CHECK(device_values(d) == iota_vec(8));
}

TEST_CASE("memory manager: a manager made for another context is rejected",
          "[memory-manager][errors][multi-device]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const int count = devmem::device_count();
  REQUIRE(count >= 1);
  if (count < 2) {
    // One device: a manager for this context is accepted.
    const auto own = std::make_shared<devmem::DirectMemoryManager>(*ctx);
    ctx->set_memory_manager(own);
    CHECK(ctx->memory_manager() == own);
    return;
  }
  const auto other = devmem::context_for_device(1);
  REQUIRE(other.get() != ctx.get());
  const auto foreign = devmem::make_memory_manager("direct", *other);
  const auto before = ctx->memory_manager();
  REQUIRE_THROWS_MATCHES(
      ctx->set_memory_manager(foreign), devmem::InvalidArgument,
      Message("set_memory_manager: manager 'direct' was made for device 1, not for device 0"));
  REQUIRE_THROWS_AS(devmem::set_memory_manager(foreign), devmem::InvalidArgument);
  CHECK(ctx->memory_manager() == before);
  // The other context accepts it.
  const auto other_before = other->memory_manager();
  other->set_memory_manager(foreign);
  CHECK(other->memory_manager() == foreign);
  other->set_memory_manager(other_before);
}

// ---- switching managers -------------------------------------------------------------------------

TEST_CASE("memory manager: set_memory_manager switches; earlier memory goes back to its manager",
          "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto recording = use_recording_manager();
  CHECK(ctx->memory_manager() == recording);
  CHECK(ctx->memory_manager()->name() == "recording");
  DeviceArray a = devmem::device_array(Shape{1000}, u1());
  HostArray pinned = devmem::pinned_array(Shape{5000}, u1());
  REQUIRE(recording->allocations().size() == 1);
  CHECK(recording->allocations()[0] == RecordingManager::Block{a.data(), 1000});
  REQUIRE(recording->host_allocations().size() == 1);
  CHECK(recording->host_allocations()[0] == RecordingManager::Block{pinned.data(), 5000});

  const auto pool_base = devmem::make_memory_manager("pool", *ctx);
  const auto pool = std::dynamic_pointer_cast<PoolMemoryManager>(pool_base);
  REQUIRE(pool != nullptr);
  devmem::set_memory_manager(pool_base);  // the free function: the current context
  CHECK(ctx->memory_manager() == pool_base);
  CHECK(ctx->memory_manager()->name() == "pool");
  DeviceArray b = devmem::device_array(Shape{1000}, u1());
  CHECK(recording->allocations().size() == 1);
  CHECK(pool->statistics().misses == 1);

  void* const a_ptr = a.data();
  a = DeviceArray();
  b = DeviceArray();
  pinned = HostArray();
  ctx->flush_deallocations();
  CHECK(recording->freed() == std::vector<void*>{a_ptr});
  CHECK(recording->host_deallocations().size() == 1);
  CHECK(pool->cached_bytes() == 1024);  // b went back to the pool, a did not
  CHECK(pool->statistics().cached_blocks == 1);
}

TEST_CASE("memory manager: after a switch, the old manager's memory goes back to the device",
          "[memory-manager][pool][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  ctx->set_memory_manager(devmem::make_memory_manager("direct", *ctx));
  const int64_t used = devmem::host::device_memory_used();
  DeviceArray a = devmem::device_array(Shape{256 * kKiB}, u1());
  CHECK(devmem::host::device_memory_used() == used + 256 * kKiB);
  const auto pool = use_pool_manager();
  const DeviceArray b = devmem::device_array(Shape{256 * kKiB}, u1());
  CHECK(devmem::host::device_memory_used() == used + 512 * kKiB);
  a = DeviceArray();
  ctx->flush_deallocations();
  CHECK(devmem::host::device_memory_used() == used + 256 * kKiB);  // freed by the direct manager
  CHECK(pool->cached_bytes() == 0);
  CHECK(pool->statistics().backend_bytes == 256 * kKiB);
}

TEST_CASE("memory manager: arrays work on memory from a custom manager", "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(0, 1.0));  // free at once
  const auto manager = std::make_shared<OffsetManager>(*ctx);
  ctx->set_memory_manager(manager);
  {
    const DeviceArray d = iota_device(Shape{300});
    CHECK(manager->live() == 1);
    CHECK(device_values(d) == iota_vec(300));
    const DeviceArray c = d.copy();
    CHECK(manager->live() == 2);
    CHECK(device_values(c) == iota_vec(300));
    const HostArray h = devmem::pinned_array<double>(Shape{300});
    d.copy_to_host(h);
    CHECK(h.to_vector<double>() == iota_vec(300));
    CHECK(manager->live_host() == 1);
  }
  CHECK(manager->live() == 0);
  CHECK(manager->live_host() == 0);
}

TEST_CASE("memory manager: registered factories", "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto made = std::make_shared<std::atomic<int>>(0);
  devmem::register_memory_manager("counting", [made](devmem::Context& c) {
    ++*made;
    return std::make_shared<RecordingManager>(c, "counting");
  });
  const auto m = devmem::make_memory_manager("counting", *ctx);
  CHECK(made->load() == 1);
  REQUIRE(m != nullptr);
  CHECK(m->name() == "counting");
  CHECK(&m->context() == ctx.get());
  const auto counting = std::dynamic_pointer_cast<RecordingManager>(m);
  REQUIRE(counting != nullptr);
  ctx->set_memory_manager(m);
  {
    const DeviceArray a = devmem::device_array(Shape{10}, f8());
    const DeviceArray b = devmem::to_device(iota_vec(20));
    const DeviceArray c = b.copy();
    const HostArray p = devmem::pinned_array(Shape{100}, u1());
    const devmem::MappedArray mapped = devmem::mapped_array(Shape{100}, u1());
    CHECK(counting->allocate_calls() == 3);
    CHECK(counting->allocations() ==
          std::vector<RecordingManager::Block>{{a.data(), 80}, {b.data(), 160}, {c.data(), 160}});
    CHECK(counting->host_allocations() ==
          std::vector<RecordingManager::Block>{{p.data(), 100}, {mapped.data(), 100}});
    CHECK(counting->host_flags() ==
          std::vector<devmem::HostAllocFlags>{devmem::HostAllocFlags::None,
                                              devmem::HostAllocFlags::Mapped});
    CHECK(device_values(c) == iota_vec(20));
  }
  CHECK(counting->deallocations().empty());  // queued
  ctx->flush_deallocations();
  CHECK(counting->deallocations().size() == 3);
  CHECK(counting->host_deallocations().size() == 2);

  // A second registration of the name replaces the first.
  devmem::register_memory_manager("counting", [](devmem::Context& c) {
    return std::make_shared<RecordingManager>(c, "counting-v2");
  });
  CHECK(devmem::make_memory_manager("counting", *ctx)->name() == "counting-v2");
  CHECK(made->load() == 1);
}

// ---- the streams a manager is given (RMM's stream-ordered contract) -----------------------------

namespace {

using StreamUse = RecordingManager::StreamUse;

StreamUse use_of(const devmem::Stream& s) {
  return {s.native_handle(), s.is_default(), true};
}

const StreamUse kDefaultStream{nullptr, true, true};

/// The stream deallocate() was given for `ptr` among the deallocations from the `from`-th on
/// (exactly one of them is expected: the backend may hand a freed address out again, so a test
/// that frees in rounds looks only at the round's own deallocations).
StreamUse freed_with(const RecordingManager& manager, void* ptr, std::size_t from = 0) {
  const std::vector<RecordingManager::Block> freed = manager.deallocations();
  const std::vector<StreamUse> streams = manager.deallocation_streams();
  REQUIRE(freed.size() == streams.size());
  std::vector<StreamUse> found;
  for (std::size_t i = from; i < freed.size(); ++i) {
    if (freed[i].ptr == ptr) found.push_back(streams[i]);
  }
  REQUIRE(found.size() == 1);
  return found.front();
}

}  // namespace

TEST_CASE("memory manager: allocate receives the stream the array is made on",
          "[memory-manager][stream]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto recording = use_recording_manager();
  const devmem::Stream s1 = devmem::stream();
  const devmem::Stream s2 = devmem::stream();
  REQUIRE(s1.native_handle() != nullptr);
  REQUIRE(s1.native_handle() != s2.native_handle());
  // Outlives the asynchronous copy from it.
  const std::vector<double> values = iota_vec(32);
  {
    const DeviceArray a = devmem::device_array(Shape{64}, f8(), {}, devmem::Order::C, s1);
    const DeviceArray b = devmem::to_device(values, s2);
    const DeviceArray c = b.copy();  // an array method: the array's stream
    const DeviceArray d = devmem::device_array_like(b, s1);
    const DeviceArray e = devmem::device_array(Shape{8}, f8());  // no stream: the default stream
    const DeviceArray f = devmem::to_device(values, devmem::default_stream());
    const DeviceArray g = devmem::device_array_like(b);  // no stream: the default, not b's
    CHECK(recording->allocation_streams() ==
          std::vector<StreamUse>{use_of(s1), use_of(s2), use_of(s2), use_of(s1), kDefaultStream,
                                 kDefaultStream, kDefaultStream});
    // The stream given is the array's own stream.
    const std::vector<StreamUse> given = recording->allocation_streams();
    const std::vector<const DeviceArray*> arrays{&a, &b, &c, &d, &e, &f, &g};
    REQUIRE(given.size() == arrays.size());
    for (std::size_t i = 0; i < arrays.size(); ++i) {
      CAPTURE(i);
      CHECK(given[i] == use_of(arrays[i]->stream()));
    }
    CHECK(device_values(c) == iota_vec(32));
  }
  // Zero-byte arrays allocate nothing and ask the manager nothing.
  { const DeviceArray empty = devmem::device_array(Shape{0}, f8(), {}, devmem::Order::C, s1); }
  CHECK(recording->allocation_streams().size() == 7);
}

TEST_CASE("memory manager: deallocate receives the stream the memory was allocated on",
          "[memory-manager][stream]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto recording = use_recording_manager();
  const devmem::Stream s = devmem::stream();
  const devmem::Stream other = devmem::stream();
  void* on_s = nullptr;
  void* rebound = nullptr;
  void* on_default = nullptr;
  const std::vector<double> values = iota_vec(64);
  {
    const DeviceArray a = devmem::to_device(values, s);
    // Bound to another stream later: the memory still goes back with the stream it came from.
    const DeviceArray b =
        devmem::device_array(Shape{16}, f8(), {}, devmem::Order::C, s).bind(other);
    b.fill(1.0);  // work on `other` holds the memory until it is done
    const DeviceArray c = devmem::device_array(Shape{16}, f8());
    on_s = a.data();
    rebound = b.data();
    on_default = c.data();
  }
  ctx->synchronize();  // the copies are done: the memory reaches the queue
  CHECK(ctx->pending_deallocations() == 3);
  CHECK(recording->deallocations().empty());
  ctx->flush_deallocations();
  CHECK(recording->deallocations().size() == 3);
  CHECK(freed_with(*recording, on_s) == use_of(s));
  CHECK(freed_with(*recording, rebound) == use_of(s));
  CHECK(freed_with(*recording, on_default) == kDefaultStream);
  // A full queue flushes on release: the stream goes along there too.
  ctx->set_deallocation_config(limits(0, 1.0));
  const std::size_t earlier = recording->deallocations().size();
  void* at_once = nullptr;
  {
    const DeviceArray d = devmem::device_array(Shape{16}, f8(), {}, devmem::Order::C, other);
    at_once = d.data();
  }
  CHECK(freed_with(*recording, at_once, earlier) == use_of(other));
}

TEST_CASE(
    "memory manager: deallocate receives the default stream when the allocation's stream "
    "is gone",
    "[memory-manager][stream]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto recording = use_recording_manager();
  std::optional<devmem::Stream> gone = devmem::stream();
  const devmem::Stream kept = devmem::stream();
  void* on_gone = nullptr;
  void* on_kept = nullptr;
  const std::vector<double> values = iota_vec(64);
  SECTION("the stream goes while its memory is queued, inside a defer_cleanup scope") {
    {
      const devmem::DeferCleanup scope = devmem::defer_cleanup();
      {
        const DeviceArray a = devmem::to_device(values, *gone);
        const DeviceArray b = devmem::to_device(values, kept);
        on_gone = a.data();
        on_kept = b.data();
      }
      ctx->synchronize();
      CHECK(ctx->pending_deallocations() == 2);
      gone.reset();  // the last handle: the stream is destroyed, its memory still queued
      ctx->flush_deallocations();
      CHECK(recording->deallocations().empty());  // deferred
    }
    CHECK(ctx->pending_deallocations() == 2);  // leaving the scope does not flush
  }
  SECTION("the stream goes while its work still holds the memory") {
    {
      const DeviceArray a = devmem::to_device(values, *gone);
      const DeviceArray b = devmem::to_device(values, kept);
      on_gone = a.data();
      on_kept = b.data();
    }
    gone.reset();
    ctx->synchronize();
    CHECK(ctx->pending_deallocations() == 2);
  }
  ctx->flush_deallocations();
  CHECK(freed_with(*recording, on_gone) == kDefaultStream);
  CHECK(freed_with(*recording, on_kept) == use_of(kept));
}

// ---- make_memory_manager for the current context, memory_info on a const manager -------------

TEST_CASE("memory manager: make_memory_manager without a context uses the current one",
          "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  for (const std::string_view name : {"direct", "pool"}) {
    CAPTURE(name);
    const auto m = devmem::make_memory_manager(name);
    REQUIRE(m != nullptr);
    CHECK(m->name() == name);
    CHECK(&m->context() == ctx.get());
  }
  CHECK(dynamic_cast<PoolMemoryManager*>(devmem::make_memory_manager("pool").get()) != nullptr);
  CHECK(devmem::make_memory_manager("pool") != devmem::make_memory_manager("pool"));
  REQUIRE_THROWS_MATCHES(
      devmem::make_memory_manager("nope"), devmem::InvalidArgument,
      MessageStartsWith("make_memory_manager: unknown memory manager 'nope' (known: "));
  REQUIRE_THROWS_MATCHES(devmem::make_memory_manager(""), devmem::InvalidArgument,
                         MessageStartsWith("make_memory_manager: unknown memory manager '' "));
  // What it makes is accepted by the current context.
  devmem::set_memory_manager(devmem::make_memory_manager("pool"));
  CHECK(ctx->memory_manager()->name() == "pool");
  const DeviceArray d = iota_device(Shape{8});
  CHECK(device_values(d) == iota_vec(8));
  if (devmem::device_count() >= 2) {
    const int original = devmem::current_device();
    devmem::select_device(1);
    const auto on_1 = devmem::make_memory_manager("direct");
    devmem::select_device(original);
    CHECK(&on_1->context() == devmem::context_for_device(1).get());
  }
}

TEST_CASE("memory manager: memory_info is callable on a const manager", "[memory-manager]") {
  STATIC_REQUIRE(requires(const devmem::MemoryManager& m) {
                   { m.memory_info() } -> std::same_as<devmem::MemoryInfo>;
                 });
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto direct = devmem::make_memory_manager("direct");
  const auto pool = devmem::make_memory_manager("pool");
  const devmem::MemoryManager& direct_ref = *direct;
  const devmem::MemoryManager& pool_ref = *pool;
  CHECK(direct_ref.memory_info().total == ctx->backend().memory_info(ctx->device()).total);
  CHECK(pool_ref.memory_info().total == direct_ref.memory_info().total);
  const std::shared_ptr<const devmem::MemoryManager> fixed =
      std::make_shared<FixedInfoManager>(*ctx);
  CHECK(fixed->memory_info().free == 32);
  CHECK(fixed->memory_info().total == 64);
}

// ---- the pool -----------------------------------------------------------------------------------

TEST_CASE("pool: size classes", "[memory-manager][pool]") {
  CHECK(PoolMemoryManager::size_class(1) == 256);
  CHECK(PoolMemoryManager::size_class(255) == 256);
  CHECK(PoolMemoryManager::size_class(256) == 256);
  CHECK(PoolMemoryManager::size_class(257) == 320);
  CHECK(PoolMemoryManager::size_class(320) == 320);
  CHECK(PoolMemoryManager::size_class(321) == 384);
  CHECK(PoolMemoryManager::size_class(449) == 512);
  CHECK(PoolMemoryManager::size_class(513) == 640);
  CHECK(PoolMemoryManager::size_class(1000) == 1024);
  CHECK(PoolMemoryManager::size_class(1024) == 1024);
  CHECK(PoolMemoryManager::size_class(1025) == 1280);
  CHECK(PoolMemoryManager::size_class(1300) == 1536);
  CHECK(PoolMemoryManager::size_class(1536) == 1536);
  CHECK(PoolMemoryManager::size_class(1537) == 1792);
  CHECK(PoolMemoryManager::size_class(1793) == 2048);
  CHECK(PoolMemoryManager::size_class(3000) == 3072);
  CHECK(PoolMemoryManager::size_class(1 << 20) == std::size_t{1} << 20);
  CHECK(PoolMemoryManager::size_class((1 << 20) + 1) == std::size_t{5} << 18);
  CHECK(PoolMemoryManager::size_class(std::size_t{3} << 20) == std::size_t{3} << 20);
  CHECK(PoolMemoryManager::size_class((std::size_t{1} << 40) + 1) == std::size_t{5} << 38);

  // Properties over many sizes: at least the request and 256, a class maps to itself, the
  // classes grow with the request, at most 25% is wasted above 256 bytes, and every class is
  // 4, 5, 6 or 7 times a power of two.
  std::vector<std::size_t> sizes;
  for (std::size_t b = 1; b <= 20000; ++b) sizes.push_back(b);
  for (int k = 15; k < 48; ++k) {
    const std::size_t p = std::size_t{1} << k;
    for (const std::size_t b : {p - 1, p, p + 1, p + p / 4, p + p / 4 + 1, p + p / 3}) {
      sizes.push_back(b);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  std::size_t previous = 0;
  int failures = 0;
  for (const std::size_t b : sizes) {
    const std::size_t c = PoolMemoryManager::size_class(b);
    const auto j = static_cast<unsigned>(std::bit_width(c)) - 3u;
    const bool ok = c >= b && c >= 256 && c >= previous && PoolMemoryManager::size_class(c) == c &&
                    (b <= 256 || 4 * c < 5 * b) && c % (std::size_t{1} << j) == 0;
    if (!ok && ++failures <= 5) {
      INFO("size_class(" << b << ") = " << c << " (previous class " << previous << ")");
      CHECK(ok);
    }
    previous = c;
  }
  CHECK(failures == 0);
}

TEST_CASE("pool: a released block is reused for the same size class", "[memory-manager][pool]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto pool = use_pool_manager();
  CHECK(pool->name() == "pool");
  CHECK(pool->statistics().misses == 0);
  CHECK(pool->statistics().hits == 0);
  void* first = nullptr;
  const devmem::MemoryStatistics device0 = ctx->device_statistics();
  {
    const DeviceArray a = devmem::device_array(Shape{1000}, u1());
    first = a.data();
    const devmem::PoolStatistics s = pool->statistics();
    CHECK(s.misses == 1);
    CHECK(s.hits == 0);
    CHECK(s.backend_bytes == 1024);
    CHECK(s.cached_bytes == 0);
    // The context's statistics count what the array asked for, not the size class.
    CHECK(ctx->device_statistics().current_bytes == device0.current_bytes + 1000);
  }
  CHECK(pool->cached_bytes() == 0);  // queued, not yet back in the pool
  ctx->flush_deallocations();
  devmem::PoolStatistics s = pool->statistics();
  CHECK(s.cached_bytes == 1024);
  CHECK(s.cached_blocks == 1);
  CHECK(pool->cached_bytes() == 1024);
  CHECK(s.backend_bytes == 1024);
  {
    const DeviceArray b = devmem::device_array(Shape{900}, u1());  // also the 1024 class
    CHECK(b.data() == first);
    s = pool->statistics();
    CHECK(s.hits == 1);
    CHECK(s.misses == 1);
    CHECK(s.cached_bytes == 0);
    CHECK(s.cached_blocks == 0);
    const DeviceArray c = devmem::device_array(Shape{1000}, u1());
    CHECK(c.data() != first);
    s = pool->statistics();
    CHECK(s.misses == 2);
    CHECK(s.backend_bytes == 2048);
    // Data written through a reused block reads back.
    b.memset(7);
    CHECK(b.item<std::uint8_t>(899) == 7);
  }
  ctx->flush_deallocations();
  s = pool->statistics();
  CHECK(s.cached_bytes == 2048);
  CHECK(s.cached_blocks == 2);
  // Another class is not served from the 1024 blocks.
  const DeviceArray other = devmem::device_array(Shape{2000}, u1());
  s = pool->statistics();
  CHECK(s.misses == 3);
  CHECK(s.hits == 1);
  CHECK(s.cached_bytes == 2048);
  CHECK(s.backend_bytes == 4096);
  // trim gives the cache back; what arrays use stays.
  pool->trim();
  s = pool->statistics();
  CHECK(s.cached_bytes == 0);
  CHECK(s.cached_blocks == 0);
  CHECK(s.trims == 1);
  CHECK(s.backend_bytes == 2048);
  CHECK(pool->cached_bytes() == 0);
}

TEST_CASE("pool: record_use keeps a block from reuse until the stream's work is done",
          "[memory-manager][pool][streams]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto pool = use_pool_manager();
  const devmem::Stream s = devmem::stream();
  void* first = nullptr;
  {
    StreamGate gate(s);  // the application's own work on `s`, still running
    {
      const DeviceArray a = devmem::device_array(Shape{1000}, u1());
      first = a.data();
      a.record_use(s);  // e.g. a kernel of its own on a.data(), enqueued on s
    }
    ctx->flush_deallocations();
    CHECK(pool->cached_bytes() == 0);  // not back in the pool while s may still use it
    {
      const DeviceArray b = devmem::device_array(Shape{1000}, u1());
      CHECK(b.data() != first);
    }
    gate.open();
    s.synchronize();
    CHECK_FALSE(gate.timed_out());
  }
  ctx->flush_deallocations();
  CHECK(pool->cached_bytes() == 2048);  // both blocks are back once the work is done
  const DeviceArray c = devmem::device_array(Shape{1000}, u1());
  CHECK(pool->statistics().hits == 1);

  SECTION("an unspecified stream is refused; an empty array has nothing to keep") {
    CHECK_THROWS_MATCHES(c.record_use(devmem::Stream{}), devmem::InvalidArgument,
                         Catch::Matchers::Message(
                             "DeviceArray::record_use: the stream is unspecified (pass the stream "
                             "that the untracked work runs on)"));
    const DeviceArray empty = devmem::device_array(Shape{0}, u1());
    CHECK_NOTHROW(empty.record_use(s));
  }
}

TEST_CASE(
    "pool: record_use on a foreign stream (Stream::external) holds the block until its work "
    "is done",
    "[memory-manager][pool][stream]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto pool = use_pool_manager();
  devmem::Backend& backend = ctx->backend();
  const int device = ctx->device();
  // A stream devmem did not make (PyTorch's or CuPy's side stream, in real use), destroyed by its
  // owner at the end and never by devmem.
  const devmem::NativeStream native = backend.create_stream(device);
  struct NativeStreamOwner {
    devmem::Backend& backend;
    int device;
    devmem::NativeStream stream;
    ~NativeStreamOwner() { backend.destroy_stream(device, stream); }
  } const owner{backend, device, native};

  void* first = nullptr;
  {
    const devmem::Stream foreign = devmem::Stream::external(native, device);
    CHECK(foreign.is_external());
    CHECK(foreign.native_handle() == native);
    CHECK(foreign == devmem::Stream::external(native, device));
    CHECK_FALSE(foreign == devmem::stream());
    CHECK_FALSE(devmem::stream().is_external());
    StreamGate gate(foreign);  // the consumer's kernels, still running on its own stream
    {
      const DeviceArray a = devmem::device_array(Shape{1000}, u1());
      first = a.data();
      a.record_use(foreign);
    }
    ctx->flush_deallocations();
    CHECK(pool->cached_bytes() == 0);  // not back in the pool while the consumer may use it
    {
      const DeviceArray b = devmem::device_array(Shape{1000}, u1());
      CHECK(b.data() != first);
    }
    gate.open();
    foreign.synchronize();
    CHECK_FALSE(gate.timed_out());
  }
  ctx->flush_deallocations();
  CHECK(pool->cached_bytes() == 2048);
  // Dropping every devmem handle left the native stream to its owner: it still takes work.
  const DeviceArray c = devmem::device_array(Shape{8}, u1());
  c.fill(std::uint8_t{7}, devmem::Stream::external(native, device));
  backend.synchronize_stream(device, native);
  CHECK(c.to_vector<std::uint8_t>() == std::vector<std::uint8_t>(8, 7));

  CHECK_THROWS_MATCHES(
      devmem::Stream::external(nullptr, device), devmem::InvalidArgument,
      Message("Stream::external: the native stream of device " + std::to_string(device) +
              " is null (the default stream is devmem::default_stream(); a foreign stream is a "
              "non-null cudaStream_t/hipStream_t)"));
  CHECK_THROWS_AS(devmem::Stream::external(native, devmem::device_count()), devmem::NoDevice);
}

TEST_CASE("pool: trim returns cached memory to the device", "[memory-manager][pool][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto pool = use_pool_manager();
  const int64_t used = devmem::host::device_memory_used();
  {
    std::vector<DeviceArray> arrays;
    for (int i = 0; i < 4; ++i) arrays.push_back(devmem::device_array(Shape{64 * kKiB}, u1()));
    CHECK(devmem::host::device_memory_used() == used + 256 * kKiB);
  }
  ctx->flush_deallocations();
  CHECK(pool->cached_bytes() == 256 * kKiB);
  CHECK(pool->statistics().cached_blocks == 4);
  CHECK(devmem::host::device_memory_used() == used + 256 * kKiB);  // cached, not freed
  pool->trim();
  CHECK(pool->cached_bytes() == 0);
  CHECK(devmem::host::device_memory_used() == used);
}

TEST_CASE("pool: pinned host blocks are cached per allocation flags", "[memory-manager][pool]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto pool = use_pool_manager();
  void* pinned = nullptr;
  void* mapped = nullptr;
  {
    const HostArray h = devmem::pinned_array(Shape{10000}, u1());
    pinned = h.data();
    const devmem::MappedArray m = devmem::mapped_array(Shape{10000}, u1());
    mapped = m.data();
  }
  ctx->flush_deallocations();
  CHECK(pool->statistics().cached_host_bytes == 2 * i64(PoolMemoryManager::size_class(10000)));
  CHECK(pool->statistics().cached_bytes == 0);  // device cache untouched
  {
    const HostArray h = devmem::pinned_array(Shape{10000}, u1());
    CHECK(h.data() == pinned);
    CHECK(h.kind() == devmem::HostMemoryKind::Pinned);
    const devmem::MappedArray m = devmem::mapped_array(Shape{10000}, u1());
    CHECK(m.data() == mapped);
    CHECK(m.kind() == devmem::HostMemoryKind::Mapped);
    // The reused mapped block works as mapped memory.
    std::fill_n(static_cast<std::uint8_t*>(m.data()), 10000, std::uint8_t{5});
    CHECK(m.device().item<std::uint8_t>(9999) == 5);
    CHECK(pool->statistics().cached_host_bytes == 0);
  }
  ctx->flush_deallocations();
  {
    // A pinned request is not served with the mapped block, nor the other way round.
    const HostArray h1 = devmem::pinned_array(Shape{10000}, u1());
    const HostArray h2 = devmem::pinned_array(Shape{10000}, u1());
    CHECK(h1.data() != mapped);
    CHECK(h2.data() != mapped);
    CHECK((h1.data() == pinned || h2.data() == pinned));
  }
  pool->trim();
  CHECK(pool->statistics().cached_host_bytes == 0);
}

TEST_CASE("pool: out of device memory, the pool gives back its cache and retries",
          "[memory-manager][pool][oom][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto pool = use_pool_manager();
  const int64_t used = devmem::host::device_memory_used();
  devmem::host::set_device_memory_capacity(used + 4 * kMiB);
  { const DeviceArray a = devmem::device_array(Shape{3 * kMiB}, u1()); }
  ctx->flush_deallocations();
  REQUIRE(pool->cached_bytes() == 3 * kMiB);
  REQUIRE(devmem::host::device_memory_used() == used + 3 * kMiB);
  const int64_t trims = pool->statistics().trims;
  const DeviceArray b = devmem::device_array(Shape{2 * kMiB}, u1());  // needs the cached room
  CHECK(b.alloc_size() == 2 * kMiB);
  CHECK(pool->statistics().trims > trims);
  CHECK(pool->cached_bytes() == 0);
  CHECK(devmem::host::device_memory_used() == used + 2 * kMiB);
  // Still too big after giving everything back: OutOfMemory.
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{3 * kMiB}, u1()), devmem::OutOfMemory,
                         MessageStartsWith("device_array: "));
  CHECK(devmem::host::device_memory_used() == used + 2 * kMiB);
}

TEST_CASE("pool: max_cached_bytes gives back blocks beyond the limit", "[memory-manager][pool]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  PoolMemoryManager::Options options;
  options.max_cached_bytes = 2048;
  const auto pool = use_pool_manager(options);
  {
    std::vector<DeviceArray> arrays;
    for (int i = 0; i < 3; ++i) arrays.push_back(devmem::device_array(Shape{1000}, u1()));
    CHECK(pool->statistics().backend_bytes == 3072);
  }
  ctx->flush_deallocations();
  const devmem::PoolStatistics s = pool->statistics();
  CHECK(s.cached_bytes == 2048);
  CHECK(s.cached_blocks == 2);
  CHECK(s.backend_bytes == 2048);
  CHECK(pool->cached_bytes() == 2048);
}

TEST_CASE("pool: the cache limit with the device's memory", "[memory-manager][pool][host-only]") {
  const MemoryStateGuard mem;
  const HostControlsGuard host;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  PoolMemoryManager::Options options;
  options.max_cached_bytes = 128 * kKiB;
  const auto pool = use_pool_manager(options);
  const int64_t used = devmem::host::device_memory_used();
  {
    std::vector<DeviceArray> arrays;
    for (int i = 0; i < 4; ++i) arrays.push_back(devmem::device_array(Shape{64 * kKiB}, u1()));
  }
  ctx->flush_deallocations();
  CHECK(pool->cached_bytes() == 128 * kKiB);
  CHECK(devmem::host::device_memory_used() == used + 128 * kKiB);
  pool->trim();
  CHECK(devmem::host::device_memory_used() == used);
  CHECK(i64(PoolMemoryManager::size_class(64 * kKiB)) == 64 * kKiB);
}

// ---- DEVMEM_MEMORY_MANAGER ----------------------------------------------------------------------
// The variable is read when a context is created, so the checks run in a child process: the
// hidden ([.]) child test cases below are run only by the test after them.

TEST_CASE("memory manager env child: the manager named by DEVMEM_MEMORY_MANAGER",
          "[.][env-child]") {
  const char* const expected = std::getenv("DEVMEM_EXPECT_MANAGER");
  REQUIRE(expected != nullptr);
  const auto ctx = devmem::current_context();
  CHECK(ctx->memory_manager()->name() == std::string_view(expected));
  CHECK(&ctx->memory_manager()->context() == ctx.get());
  if (std::string_view(expected) == "pool") {
    CHECK(dynamic_cast<PoolMemoryManager*>(ctx->memory_manager().get()) != nullptr);
  }
  const DeviceArray d = iota_device(Shape{16});
  CHECK(device_values(d) == iota_vec(16));
}

TEST_CASE("memory manager env child: an unknown DEVMEM_MEMORY_MANAGER", "[.][env-child]") {
  REQUIRE_THROWS_MATCHES(devmem::current_context(), devmem::InvalidArgument,
                         Message("DEVMEM_MEMORY_MANAGER: make_memory_manager: unknown memory "
                                 "manager 'bogus' (known: async, direct, managed, pool)"));
}

TEST_CASE("memory manager: DEVMEM_MEMORY_MANAGER chooses the manager of new contexts",
          "[memory-manager][env]") {
  std::string output;
  std::vector<std::string> names{"direct", "pool"};
  const auto ctx = devmem::current_context();
  if (ctx->backend().supports_async_allocation(ctx->device())) names.emplace_back("async");
  for (const std::string& name : names) {
    const int rc = run_self_with_env(
        "DEVMEM_MEMORY_MANAGER=" + name + " DEVMEM_EXPECT_MANAGER=" + name,
        "memory manager env child: the manager named by DEVMEM_MEMORY_MANAGER", output);
    INFO(output);
    CHECK(rc == 0);
    CHECK_THAT(output, Catch::Matchers::Contains("All tests passed"));
    CHECK_THAT(output, Catch::Matchers::Contains("in 1 test case"));
  }
  const int rc =
      run_self_with_env("DEVMEM_MEMORY_MANAGER=bogus",
                        "memory manager env child: an unknown DEVMEM_MEMORY_MANAGER", output);
  INFO(output);
  CHECK(rc == 0);
  CHECK_THAT(output, Catch::Matchers::Contains("All tests passed"));
}

// ---- async
// ---------------------------------------------------------------------------------------

TEST_CASE("async: the stream-ordered allocator where the device has one",
          "[memory-manager][async]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  if (!ctx->backend().supports_async_allocation(ctx->device())) {
    CHECK_THROWS_MATCHES(
        devmem::make_memory_manager("async", *ctx), devmem::InvalidArgument,
        Catch::Matchers::Message(
            "memory manager 'async': device " + std::to_string(ctx->device()) + " of backend '" +
            std::string(ctx->backend_name()) +
            "' has no stream-ordered allocator (cudaMallocAsync needs CUDA 11.2+, hipMallocAsync "
            "ROCm 5.3+, and a device with memory pools)"));
    return;
  }
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto async = devmem::make_memory_manager("async", *ctx);
  CHECK(async->name() == "async");
  CHECK(dynamic_cast<devmem::AsyncMemoryManager*>(async.get()) != nullptr);
  CHECK(async->memory_info().total == ctx->memory_info().total);
  devmem::set_memory_manager(async);
  const devmem::MemoryStatistics before = ctx->device_statistics();
  const bool host = ctx->backend_name() == "host";
  const std::int64_t used_before = host ? devmem::host::device_memory_used(ctx->device()) : 0;
  const devmem::Stream s = devmem::stream();
  std::vector<float> values(1 << 16);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  {
    const DeviceArray a = devmem::to_device(values, s);
    const DeviceArray b = devmem::device_array_like(a, s);
    b.copy_to_device(a, s);
    CHECK(b.to_vector<float>(s) == values);
    const DeviceArray c = devmem::device_array_like(a, s);
    c.copy_to_device(b, s);
  }
  // The copies' keep-alives go once their completion is seen; the frees are then queued and
  // flushed through cudaFreeAsync / hipFreeAsync on the legacy stream.
  ctx->synchronize();
  ctx->flush_deallocations();
  ctx->synchronize();
  CHECK(ctx->device_statistics().current_bytes == before.current_bytes);
  // The memory went back: what the device has in use is what it had (host backend's count).
  if (host) CHECK(devmem::host::device_memory_used(ctx->device()) == used_before);

  // Review 2, N3b: the pool keeps freed memory across synchronizations unless told otherwise
  // (the vendors' release threshold 0 gave it back at each one), and trim() hands it back.
  if (host) {
    CHECK(devmem::host::async_pool_state(ctx->device()).release_threshold ==
          std::numeric_limits<std::uint64_t>::max());
    const devmem::AsyncMemoryManager limited(*ctx, {.release_threshold = std::uint64_t{64} << 20});
    CHECK(limited.options().release_threshold == (std::uint64_t{64} << 20));
    CHECK(devmem::host::async_pool_state(ctx->device()).release_threshold ==
          (std::uint64_t{64} << 20));
    const std::int64_t trims = devmem::host::async_pool_state(ctx->device()).trims;
    async->trim();
    CHECK(devmem::host::async_pool_state(ctx->device()).trims == trims + 1);
    CHECK(devmem::host::async_pool_state(ctx->device()).last_trim_keep_bytes == 0);
  }
}

namespace {
/// The async manager installed for the test, or null where the device has none.
std::shared_ptr<devmem::MemoryManager> use_async_manager(
    const std::shared_ptr<devmem::Context>& ctx) {
  if (!ctx->backend().supports_async_allocation(ctx->device())) return nullptr;
  auto async = devmem::make_memory_manager("async", *ctx);
  devmem::set_memory_manager(async);
  return async;
}

/// Whether work on one stream runs while another stream is held up: on GPUs, the host backend and
/// the strict fake, not on HIP-CPU (the GPU backends without IPC), whose one worker thread runs
/// every stream's work in submission order and resolves stream waits on the calling thread (a
/// timing probe there passed or not from run to run).
bool streams_run_independently() {
  const std::string backend = devmem::backend_name();
  return !((backend == "cuda" || backend == "roc") && !devmem::ipc_supported());
}

/// Installs the async manager where the checks of stream independence can run; false (with a
/// warning saying why) where they cannot.
bool async_stream_checks_apply(const std::shared_ptr<devmem::Context>& ctx) {
  if (!streams_run_independently()) {
    WARN("the " << ctx->backend_name() << " backend runs streams one after another");
    return false;
  }
  if (!use_async_manager(ctx)) {
    WARN("device " << ctx->device() << " has no stream-ordered allocator");
    return false;
  }
  return true;
}
}  // namespace

TEST_CASE("async: allocating for one stream does not wait for another stream's work",
          "[memory-manager][async][stream]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  if (!async_stream_checks_apply(ctx)) return;
  const devmem::Stream busy = devmem::stream();
  const devmem::Stream other = devmem::stream();
  // `busy` runs a long kernel of the application's; `other` must not queue behind it (review 2,
  // N3: cudaMallocAsync on the legacy default stream waits for every blocking stream).
  StreamGate gate(busy, std::chrono::seconds(3));
  {
    const std::vector<float> values{1, 2, 3, 4};
    const DeviceArray a = devmem::to_device(values, other);
    CHECK(a.to_vector<float>(other) == values);
    other.synchronize();
  }
  CHECK_FALSE(gate.timed_out());  // `other` finished while `busy` was still held
  gate.open();
  busy.synchronize();
  ctx->synchronize();
  ctx->flush_deallocations();
}

TEST_CASE("async: work on another stream waits for the allocation on the array's stream",
          "[memory-manager][async][stream]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  if (!async_stream_checks_apply(ctx)) return;
  const devmem::Stream owner = devmem::stream();
  const devmem::Stream user = devmem::stream();
  std::vector<float> values(4096);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5F;
  const HostArray source = devmem::pinned_array(Shape{4096}, devmem::dtype_of<float>());
  std::memcpy(source.data(), values.data(), values.size() * sizeof(float));
  std::optional<DeviceArray> a;
  {
    // The allocation is queued on `owner` behind work that is still running: the memory is valid
    // in `owner`'s order only.
    StreamGate gate(owner);
    a.emplace(devmem::device_array<float>(Shape{4096}, devmem::Order::C, owner));
    a->copy_to_device(source, user);  // another stream: must wait for the allocation first
    const DeviceArray b = devmem::device_array<float>(Shape{4096}, devmem::Order::C, owner);
    b.fill(2.0F, user);
    gate.open();
    user.synchronize();
    CHECK(b.to_vector<float>(user) == std::vector<float>(4096, 2.0F));
    CHECK_FALSE(gate.timed_out());
  }
  CHECK(a->to_vector<float>(user) == values);
  a.reset();
  ctx->synchronize();
  ctx->flush_deallocations();
  ctx->synchronize();
}

TEST_CASE("memory manager: Context::memory_info is the manager's answer (Numba get_memory_info)",
          "[memory-manager]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  devmem::set_memory_manager(std::make_shared<FixedInfoManager>(*ctx));
  CHECK(ctx->memory_info().free == 32);
  CHECK(ctx->memory_info().total == 64);
  // The pool's cached blocks are free memory for this context.
  const auto pool_base = devmem::make_memory_manager("pool", *ctx);
  const auto pool = std::dynamic_pointer_cast<PoolMemoryManager>(pool_base);
  devmem::set_memory_manager(pool_base);
  ctx->set_deallocation_config(limits(0, 1.0));  // every release flushes into the pool at once
  { const DeviceArray d = devmem::device_array(Shape{1 << 20}, u1()); }
  ctx->synchronize();
  ctx->flush_deallocations();
  REQUIRE(pool->cached_bytes() >= (1 << 20));
  const devmem::MemoryInfo raw = ctx->backend().memory_info(ctx->device());
  CHECK(ctx->memory_info().total == raw.total);
  if (ctx->backend_name() == "host") {
    CHECK(ctx->memory_info().free == raw.free + pool->cached_bytes());
  } else {  // other processes may allocate between the two questions on a real device
    CHECK(ctx->memory_info().free >= pool->cached_bytes());
  }
}

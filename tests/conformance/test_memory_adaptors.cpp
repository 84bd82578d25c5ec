// Composed memory managers: the pool over an upstream manager, the statistics, limit and logging
// adaptors, chains of them installed on a context, composition by name (DEVMEM_MEMORY_MANAGER),
// and the deferred-deallocation rules through them (an OutOfMemory from any layer makes the
// context flush its queue and retry).
#include "support.hpp"

#include <devmem/memory_adaptors.hpp>

#include <optional>
#include <sstream>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::LimitAdaptor;
using devmem::LoggingAdaptor;
using devmem::MemoryEvent;
using devmem::PoolMemoryManager;
using devmem::StatisticsAdaptor;

namespace {

LimitAdaptor::Limits device_limit(int64_t bytes) {
  LimitAdaptor::Limits l;
  l.device_bytes = bytes;
  return l;
}

/// Events of a LoggingAdaptor, kept for the test (the adaptor serialises sink calls).
struct EventLog {
  std::vector<MemoryEvent> events;
  LoggingAdaptor::Sink sink() {
    return [this](const MemoryEvent& e) { events.push_back(e); };
  }
  [[nodiscard]] std::vector<MemoryEvent> of(MemoryEvent::Operation op) const {
    std::vector<MemoryEvent> out;
    for (const MemoryEvent& e : events) {
      if (e.operation == op) out.push_back(e);
    }
    return out;
  }
};

class Version1Manager : public devmem::DirectMemoryManager {
 public:
  using DirectMemoryManager::DirectMemoryManager;
  [[nodiscard]] int interface_version() const noexcept override { return 1; }
};

}  // namespace

// ---- the pool's upstream
// -------------------------------------------------------------------------

TEST_CASE("pool over an upstream: upstream sees only misses, blocks beyond the limit and trim",
          "[memory-manager][pool][adaptor]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto upstream = std::make_shared<RecordingManager>(*ctx, "counting");
  PoolMemoryManager::Options options;
  options.max_cached_bytes = 1024;
  const auto pool = std::make_shared<PoolMemoryManager>(*ctx, options, upstream);
  CHECK(pool->name() == "pool");
  CHECK(pool->upstream() == upstream);
  ctx->set_memory_manager(pool);
  const devmem::Stream s = devmem::stream();
  void* first = nullptr;
  {
    const DeviceArray a = devmem::device_array(Shape{1000}, u1(), {}, Order::C, s);
    first = a.data();
    // A miss: upstream gets the whole size class, on the array's stream.
    REQUIRE(upstream->allocations().size() == 1);
    CHECK(upstream->allocations()[0] == RecordingManager::Block{first, 1024});
    CHECK(upstream->allocation_streams()[0].handle == s.native_handle());
  }
  ctx->flush_deallocations();
  CHECK(upstream->deallocations().empty());  // cached, not given back
  {
    const DeviceArray b = devmem::device_array(Shape{900}, u1());  // a hit
    CHECK(b.data() == first);
    CHECK(upstream->allocate_calls() == 1);
    const DeviceArray c = devmem::device_array(Shape{1000}, u1());  // a miss
    CHECK(upstream->allocate_calls() == 2);
  }
  ctx->flush_deallocations();
  // The second block is beyond max_cached_bytes: it goes back at once, with its size class.
  REQUIRE(upstream->deallocations().size() == 1);
  CHECK(upstream->deallocations()[0].bytes == 1024);
  CHECK(pool->cached_bytes() == 1024);
  { const HostArray h = devmem::pinned_array(Shape{100}, u1()); }
  ctx->flush_deallocations();
  REQUIRE(upstream->host_allocations().size() == 1);
  CHECK(upstream->host_allocations()[0].bytes == PoolMemoryManager::size_class(100));
  // trim gives every cached block back through upstream, device ones on the default stream.
  pool->trim();
  REQUIRE(upstream->deallocations().size() == 2);
  CHECK(upstream->deallocation_streams()[1].is_default);
  CHECK(upstream->host_deallocations().size() == 1);
  CHECK(pool->cached_bytes() == 0);
  CHECK(pool->statistics().backend_bytes == 0);
  // memory_info is upstream's answer.
  const devmem::MemoryInfo info = pool->memory_info();
  CHECK(info.total == upstream->memory_info().total);
}

TEST_CASE("pool over an upstream: the default upstream is a direct manager of the context",
          "[memory-manager][pool][adaptor]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const PoolMemoryManager pool(*ctx, PoolMemoryManager::Options{}, nullptr);
  REQUIRE(pool.upstream() != nullptr);
  CHECK(pool.upstream()->name() == "direct");
  CHECK(&pool.upstream()->context() == ctx.get());
  const PoolMemoryManager plain(*ctx);
  CHECK(plain.upstream()->name() == "direct");
}

TEST_CASE("pool over a limit: OutOfMemory past the limit, flush-and-retry and trim-and-retry",
          "[memory-manager][pool][adaptor][oom]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));  // releases stay queued
  const auto limit = std::make_shared<LimitAdaptor>(*ctx, nullptr, device_limit(5 * kKiB));
  const auto pool = std::make_shared<PoolMemoryManager>(*ctx, PoolMemoryManager::Options{}, limit);
  ctx->set_memory_manager(pool);
  const DeviceArray a = devmem::device_array(Shape{2000}, u1());  // 2 KiB class
  void* second = nullptr;
  {
    const DeviceArray b = devmem::device_array(Shape{2000}, u1());
    second = b.data();
    CHECK(limit->device_bytes_in_use() == 4 * kKiB);
  }
  CHECK(ctx->pending_deallocations() == 1);
  // A third block would pass the limit: the limit refuses, the pool has nothing cached, the
  // context flushes its queue (b back into the pool) and retries: a hit.
  std::optional<DeviceArray> c = devmem::device_array(Shape{2000}, u1());
  CHECK(c->data() == second);
  CHECK(ctx->pending_deallocations() == 0);
  CHECK(limit->device_bytes_in_use() == 4 * kKiB);
  // Nothing to flush or trim makes room for 3 KiB more: OutOfMemory naming the limit.
  REQUIRE_THROWS_MATCHES(
      devmem::device_array(Shape{3000}, u1()), devmem::OutOfMemory,
      MessageContains("limit adaptor: allocating 3072 bytes of device memory would exceed the "
                      "limit of 5120 bytes (4096 bytes in use)"));
  CHECK(limit->device_bytes_in_use() == 4 * kKiB);
  // Once c goes, its block sits in the pool's cache; the pool gives it back to the limit and
  // retries.
  c.reset();
  ctx->flush_deallocations();
  CHECK(pool->cached_bytes() == 2 * kKiB);
  const int64_t trims = pool->statistics().trims;
  const DeviceArray d = devmem::device_array(Shape{3000}, u1());
  CHECK(pool->statistics().trims > trims);
  CHECK(limit->device_bytes_in_use() == 5 * kKiB);
  d.memset(3);
  CHECK(d.item<std::uint8_t>(2999) == 3);
}

// ---- the adaptors ------------------------------------------------------------------------------

TEST_CASE("limit adaptor: the context flushes its queue and retries when the limit refuses",
          "[memory-manager][adaptor][oom]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto limit = std::make_shared<LimitAdaptor>(*ctx, nullptr, device_limit(4 * kKiB));
  CHECK(limit->name() == "limit(direct)");
  CHECK(limit->limits().device_bytes == 4 * kKiB);
  CHECK(limit->limits().host_bytes == 0);
  ctx->set_memory_manager(limit);
  { const DeviceArray a = devmem::device_array(Shape{3000}, u1()); }
  CHECK(ctx->pending_deallocations() == 1);
  CHECK(limit->device_bytes_in_use() == 3000);  // queued memory is still outstanding
  const DeviceArray b = devmem::device_array(Shape{3000}, u1());
  CHECK(ctx->pending_deallocations() == 0);
  CHECK(limit->device_bytes_in_use() == 3000);
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2000}, u1()), devmem::OutOfMemory,
                         MessageStartsWith("device_array: "));
  CHECK(limit->device_bytes_in_use() == 3000);                    // the refusal reserved nothing
  const DeviceArray c = devmem::device_array(Shape{1096}, u1());  // exactly up to the limit
  CHECK(limit->device_bytes_in_use() == 4 * kKiB);

  SECTION("a host limit counts page-locked memory on its own") {
    LimitAdaptor::Limits l;
    l.host_bytes = 1000;
    const auto host_limit = std::make_shared<LimitAdaptor>(*ctx, nullptr, l);
    ctx->set_memory_manager(host_limit);
    const HostArray h = devmem::pinned_array(Shape{1000}, u1());
    CHECK(host_limit->host_bytes_in_use() == 1000);
    REQUIRE_THROWS_AS(devmem::pinned_array(Shape{1}, u1()), devmem::OutOfMemory);
    const DeviceArray big = devmem::device_array(Shape{64 * kKiB}, u1());  // device: no limit
    CHECK(host_limit->device_bytes_in_use() == 64 * kKiB);
  }
  SECTION("negative limits are refused") {
    REQUIRE_THROWS_MATCHES(
        LimitAdaptor(*ctx, nullptr, device_limit(-1)), devmem::InvalidArgument,
        Message("LimitAdaptor: limits must not be negative, got -1 device bytes and 0 host bytes"));
  }
}

TEST_CASE("statistics adaptor: current, peak and total through it, device and host apart",
          "[memory-manager][adaptor]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto stats = std::make_shared<StatisticsAdaptor>(*ctx, nullptr);
  CHECK(stats->name() == "statistics(direct)");
  ctx->set_memory_manager(stats);
  const devmem::MemoryStatistics context0 = ctx->device_statistics();
  {
    const DeviceArray a = devmem::device_array(Shape{100}, u1());
    const DeviceArray b = devmem::device_array(Shape{200}, u1());
    const devmem::MemoryStatistics s = stats->statistics();
    CHECK(s.current_bytes == 300);
    CHECK(s.current_count == 2);
    CHECK(s.peak_bytes == 300);
  }
  // Released by the arrays but still queued: outstanding for the adaptor, not for the context.
  CHECK(stats->statistics().current_bytes == 300);
  CHECK(ctx->device_statistics().current_bytes == context0.current_bytes);
  ctx->flush_deallocations();
  devmem::MemoryStatistics s = stats->statistics();
  CHECK(s.current_bytes == 0);
  CHECK(s.current_count == 0);
  CHECK(s.peak_bytes == 300);
  CHECK(s.peak_count == 2);
  CHECK(s.total_bytes == 300);
  CHECK(s.total_count == 2);
  {
    const DeviceArray c = devmem::device_array(Shape{50}, u1());
    CHECK(stats->statistics().current_bytes == 50);
    CHECK(stats->statistics().peak_bytes == 300);
    const HostArray h = devmem::pinned_array(Shape{64}, u1());
    CHECK(stats->host_statistics().current_bytes == 64);
    CHECK(stats->host_statistics().total_count == 1);
  }
  ctx->flush_deallocations();
  s = stats->statistics();
  CHECK(s.total_bytes == 350);
  CHECK(s.total_count == 3);
  CHECK(s.current_bytes == 0);
  CHECK(stats->host_statistics().current_bytes == 0);
  // Forwarded: trim and cached_bytes of a pool below.
  const auto pool_stats =
      std::make_shared<StatisticsAdaptor>(*ctx, std::make_shared<PoolMemoryManager>(*ctx));
  ctx->set_memory_manager(pool_stats);
  CHECK(pool_stats->name() == "statistics(pool)");
  { const DeviceArray d = devmem::device_array(Shape{1000}, u1()); }
  ctx->flush_deallocations();
  CHECK(pool_stats->cached_bytes() == 1024);
  CHECK(pool_stats->memory_info().free >= 1024);
  pool_stats->trim();
  CHECK(pool_stats->cached_bytes() == 0);
}

TEST_CASE("logging adaptor: every call with its bytes, pointer, stream and result",
          "[memory-manager][adaptor]") {
  // The sinks' targets first: the guard's final flush still logs through the adaptors.
  EventLog log;
  EventLog failures;
  std::ostringstream out;
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  ctx->set_deallocation_config(limits(10, 1.0));
  const auto logging = std::make_shared<LoggingAdaptor>(*ctx, nullptr, log.sink());
  CHECK(logging->name() == "logging(direct)");
  ctx->set_memory_manager(logging);
  const devmem::Stream s = devmem::stream();
  void* ptr = nullptr;
  {
    const DeviceArray a = devmem::device_array(Shape{1000}, u1(), {}, Order::C, s);
    ptr = a.data();
  }
  ctx->flush_deallocations();
  const auto allocations = log.of(MemoryEvent::Operation::Allocate);
  REQUIRE(allocations.size() == 1);
  CHECK(allocations[0].bytes == 1000);
  CHECK(allocations[0].pointer == ptr);
  CHECK(allocations[0].stream == s.native_handle());
  CHECK(allocations[0].thread == std::this_thread::get_id());
  CHECK(allocations[0].error.empty());
  CHECK(allocations[0].duration.count() >= 0);
  const auto deallocations = log.of(MemoryEvent::Operation::Deallocate);
  REQUIRE(deallocations.size() == 1);
  CHECK(deallocations[0].pointer == ptr);
  CHECK(deallocations[0].bytes == 1000);
  { const devmem::MappedArray m = devmem::mapped_array(Shape{10}, u1()); }
  ctx->flush_deallocations();
  REQUIRE(log.of(MemoryEvent::Operation::HostAllocate).size() == 1);
  CHECK(devmem::has_flag(log.of(MemoryEvent::Operation::HostAllocate)[0].flags,
                         devmem::HostAllocFlags::Mapped));
  CHECK(log.of(MemoryEvent::Operation::HostDeallocate).size() == 1);
  logging->trim();
  CHECK(log.events.back().operation == MemoryEvent::Operation::Trim);

  SECTION("a failed call is logged with its error and rethrown unchanged") {
    const auto over_limit = std::make_shared<LimitAdaptor>(*ctx, nullptr, device_limit(100));
    const auto logged = std::make_shared<LoggingAdaptor>(*ctx, over_limit, failures.sink());
    CHECK(logged->name() == "logging(limit(direct))");
    ctx->set_memory_manager(logged);
    REQUIRE_THROWS_AS(devmem::device_array(Shape{101}, u1()), devmem::OutOfMemory);
    // The context retried once after flushing: two refusals.
    REQUIRE(failures.events.size() == 2);
    CHECK(failures.events[0].pointer == nullptr);
    CHECK_THAT(failures.events[0].error,
               Catch::Matchers::StartsWith("limit adaptor: allocating 101 bytes"));
  }
  SECTION("CSV lines on a stream") {
    const auto to_stream = std::make_shared<LoggingAdaptor>(*ctx, nullptr, out);
    ctx->set_memory_manager(to_stream);
    { const DeviceArray a = devmem::device_array(Shape{77}, u1()); }
    ctx->flush_deallocations();
    std::vector<std::string> lines;
    std::istringstream in(out.str());
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == devmem::memory_event_csv_header());
    CHECK(lines[0] == "thread,operation,bytes,pointer,stream,flags,duration_ns,error");
    CHECK_THAT(lines[1], Catch::Matchers::Contains(",allocate,77,0x"));
    CHECK_THAT(lines[2], Catch::Matchers::Contains(",deallocate,77,0x"));
    CHECK(lines[2].back() == ',');  // no error
  }
  SECTION("format_memory_event quotes errors") {
    MemoryEvent e;
    e.operation = MemoryEvent::Operation::HostAllocate;
    e.bytes = 5;
    e.flags = devmem::HostAllocFlags::Portable;
    e.duration = std::chrono::nanoseconds(42);
    e.error = R"(no "room")";
    const std::string line = devmem::format_memory_event(e);
    CHECK_THAT(line, Catch::Matchers::EndsWith(R"(,host_allocate,5,0x0,0x0,2,42,"no ""room""")"));
    CHECK(devmem::to_string(MemoryEvent::Operation::Trim) == "trim");
  }
  SECTION("a sink that throws loses no memory; an empty sink is refused") {
    const auto throwing = std::make_shared<LoggingAdaptor>(
        *ctx, nullptr, [](const MemoryEvent&) { throw std::runtime_error("sink full"); });
    ctx->set_memory_manager(throwing);
    const DeviceArray d = iota_device(Shape{8});
    CHECK(device_values(d) == iota_vec(8));
    REQUIRE_THROWS_MATCHES(LoggingAdaptor(*ctx, nullptr, LoggingAdaptor::Sink{}),
                           devmem::InvalidArgument, Message("LoggingAdaptor: the sink is empty"));
  }
}

// ---- chains ------------------------------------------------------------------------------------

TEST_CASE("memory adaptors: logging(limit(pool(direct))) runs a normal workload",
          "[memory-manager][adaptor][pool]") {
  EventLog log;  // before the guard, whose final flush still logs
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto pool = std::make_shared<PoolMemoryManager>(
      *ctx, PoolMemoryManager::Options{}, std::make_shared<devmem::DirectMemoryManager>(*ctx));
  const auto limit = std::make_shared<LimitAdaptor>(*ctx, pool, device_limit(64 * kMiB));
  const auto logging = std::make_shared<LoggingAdaptor>(*ctx, limit, log.sink());
  CHECK(logging->name() == "logging(limit(pool))");
  devmem::set_memory_manager(logging);
  CHECK(ctx->memory_manager() == logging);
  {
    const std::vector<double> values = iota_vec(1000);
    const DeviceArray d = devmem::to_device(values);
    CHECK(device_values(d) == values);
    const DeviceArray e = d.copy();
    CHECK(device_values(e) == values);
    DeviceArray f = devmem::device_array<double>(Shape{1000});
    f.copy_to_device(e);
    const HostArray back = f.copy_to_host();
    CHECK(host_values(back) == values);
    const HostArray pinned = devmem::pinned_array(Shape{1000}, f8());
    f.copy_to_host(pinned);
    CHECK(host_values(pinned) == values);
    CHECK(limit->device_bytes_in_use() >= 3 * 8000);
  }
  ctx->synchronize();
  ctx->flush_deallocations();
  CHECK(ctx->pending_deallocations() == 0);
  CHECK(ctx->take_deallocation_errors().empty());
  // The limit is above the pool: it counts what the arrays hold, not the pool's cache.
  CHECK(limit->device_bytes_in_use() == 0);
  CHECK(pool->cached_bytes() > 0);
  CHECK(log.of(MemoryEvent::Operation::Allocate).size() ==
        log.of(MemoryEvent::Operation::Deallocate).size());
  CHECK(log.of(MemoryEvent::Operation::HostAllocate).size() >= 1);
  // The pool kept the blocks; a second round is served from its cache.
  const int64_t misses = pool->statistics().misses;
  {
    const DeviceArray d = devmem::to_device(iota_vec(1000));
    CHECK(device_values(d) == iota_vec(1000));
  }
  CHECK(pool->statistics().misses == misses);
  logging->trim();
  CHECK(pool->cached_bytes() == 0);
}

TEST_CASE("memory adaptors: an upstream of another context or interface version is refused",
          "[memory-manager][adaptor][errors][multi-device]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto v1 = std::make_shared<Version1Manager>(*ctx);
  REQUIRE_THROWS_MATCHES(StatisticsAdaptor(*ctx, v1), devmem::InvalidArgument,
                         Message("statistics: the upstream manager 'direct' has interface version "
                                 "1 - version 3 required"));
  if (devmem::device_count() < 2) return;
  const auto other = devmem::context_for_device(1);
  const auto foreign = devmem::make_memory_manager("direct", *other);
  REQUIRE_THROWS_MATCHES(
      StatisticsAdaptor(*ctx, foreign), devmem::InvalidArgument,
      Message("statistics: the upstream manager 'direct' was made for device 1, not for device 0"));
  REQUIRE_THROWS_MATCHES(LimitAdaptor(*ctx, foreign, device_limit(1)), devmem::InvalidArgument,
                         MessageStartsWith("limit: the upstream manager 'direct'"));
  REQUIRE_THROWS_MATCHES(
      LoggingAdaptor(*ctx, foreign, [](const MemoryEvent&) {}), devmem::InvalidArgument,
      MessageStartsWith("logging: the upstream manager 'direct' was made for device 1"));
  REQUIRE_THROWS_MATCHES(
      PoolMemoryManager(*ctx, PoolMemoryManager::Options{}, foreign), devmem::InvalidArgument,
      Message("PoolMemoryManager: the upstream manager 'direct' was made for device 1, not for "
              "device 0"));
  // An adaptor made for the other context is refused by this one, as any manager.
  const auto adaptor = std::make_shared<StatisticsAdaptor>(*other, foreign);
  REQUIRE_THROWS_AS(ctx->set_memory_manager(adaptor), devmem::InvalidArgument);
}

// ---- composition by name
// -------------------------------------------------------------------------

TEST_CASE("memory adaptors: make_memory_manager composes 'OUTER:...:INNER'",
          "[memory-manager][adaptor]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const auto chain = devmem::make_memory_manager("statistics:limit=1M:pool", *ctx);
  CHECK(chain->name() == "statistics(limit(pool))");
  const auto* stats = dynamic_cast<StatisticsAdaptor*>(chain.get());
  REQUIRE(stats != nullptr);
  const auto* limit = dynamic_cast<LimitAdaptor*>(stats->upstream().get());
  REQUIRE(limit != nullptr);
  CHECK(limit->limits().device_bytes == kMiB);
  CHECK(dynamic_cast<PoolMemoryManager*>(limit->upstream().get()) != nullptr);
  CHECK(devmem::make_memory_manager("statistics", *ctx)->name() == "statistics(direct)");
  CHECK(devmem::make_memory_manager("pool:limit=2G", *ctx)->name() == "pool");
  CHECK(devmem::make_memory_manager("limit=4096:direct", *ctx)->name() == "limit(direct)");
  ctx->set_memory_manager(chain);
  const DeviceArray d = iota_device(Shape{16});
  CHECK(device_values(d) == iota_vec(16));

  SECTION("bad compositions name the bad part") {
    REQUIRE_THROWS_MATCHES(
        devmem::make_memory_manager("limit=5X:direct", *ctx), devmem::InvalidArgument,
        Catch::Matchers::Message("make_memory_manager: bad limit in 'limit=5X' of "
                                 "'limit=5X:direct': '5X' has an unknown suffix 'X' (use K, M, G "
                                 "or T)"));
    REQUIRE_THROWS_MATCHES(
        devmem::make_memory_manager("limit=0:direct", *ctx), devmem::InvalidArgument,
        Catch::Matchers::Message("make_memory_manager: bad limit in 'limit=0' of "
                                 "'limit=0:direct': the limit must be more "
                                 "than 0 bytes"));
    REQUIRE_THROWS_AS(devmem::make_memory_manager("limit=:direct", *ctx), devmem::InvalidArgument);
    REQUIRE_THROWS_AS(devmem::make_memory_manager("limit=99999999999T", *ctx),
                      devmem::InvalidArgument);
    REQUIRE_THROWS_MATCHES(
        devmem::make_memory_manager("statistics:nope", *ctx), devmem::InvalidArgument,
        MessageStartsWith("make_memory_manager: unknown memory manager 'nope' in "
                          "'statistics:nope' (known: "));
    REQUIRE_THROWS_MATCHES(devmem::make_memory_manager("direct:pool", *ctx),
                           devmem::InvalidArgument,
                           MessageStartsWith("make_memory_manager: 'direct' in 'direct:pool' is "
                                             "not an adaptor"));
    REQUIRE_THROWS_MATCHES(devmem::make_memory_manager("statistics::pool", *ctx),
                           devmem::InvalidArgument,
                           MessageStartsWith("make_memory_manager: an empty part in "
                                             "'statistics::pool'"));
    REQUIRE_THROWS_AS(devmem::make_memory_manager(":", *ctx), devmem::InvalidArgument);
    REQUIRE_THROWS_MATCHES(
        devmem::register_memory_manager(
            "a:b",
            [](devmem::Context& c) { return std::make_shared<devmem::DirectMemoryManager>(c); }),
        devmem::InvalidArgument, MessageContains("contains ':' or '='"));
  }
}

TEST_CASE("memory adaptors: DEVMEM_MEMORY_MANAGER takes a composition", "[memory-manager][env]") {
  std::string output;
  const int rc = run_self_with_env(
      "DEVMEM_MEMORY_MANAGER=statistics:limit=1G:pool "
      "DEVMEM_EXPECT_MANAGER='statistics(limit(pool))'",
      "memory manager env child: the manager named by DEVMEM_MEMORY_MANAGER", output);
  INFO(output);
  CHECK(rc == 0);
  CHECK_THAT(output, Catch::Matchers::Contains("All tests passed"));
}

// ---- threads
// -------------------------------------------------------------------------------------

TEST_CASE("memory adaptors: threads allocate concurrently through statistics(limit(pool))",
          "[memory-manager][adaptor][threads]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  constexpr int64_t kLimit = 64 * kKiB;
  const auto limit = std::make_shared<LimitAdaptor>(*ctx, std::make_shared<PoolMemoryManager>(*ctx),
                                                    device_limit(kLimit));
  const auto stats = std::make_shared<StatisticsAdaptor>(*ctx, limit);
  ctx->set_memory_manager(stats);
  std::atomic<int64_t> over_limit{0};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> allocated{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const devmem::Stream stream = ctx->default_stream();
      for (int i = 0; i < kRounds; ++i) {
        try {
          const auto bytes = static_cast<std::size_t>(256 + ((t * 131 + i * 17) % 2048));
          if (i % 2 == 0) {
            // Through the context: arrays, the deferred queue and its flushes.
            const DeviceArray a = devmem::device_array(Shape{static_cast<int64_t>(bytes)}, u1());
            allocated.fetch_add(1);
          } else {
            // Straight through the chain.
            void* p = stats->allocate(bytes, stream);
            allocated.fetch_add(1);
            if (limit->device_bytes_in_use() > kLimit) over_limit.fetch_add(1);
            stats->deallocate(p, bytes, stream);
          }
        } catch (const devmem::OutOfMemory&) {
          // Possible when every thread holds blocks at once: the limit did its job.
        } catch (...) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ctx->synchronize();
  ctx->flush_deallocations();
  CHECK(failures.load() == 0);
  CHECK(over_limit.load() == 0);
  CHECK(ctx->take_deallocation_errors().empty());
  const devmem::MemoryStatistics s = stats->statistics();
  CHECK(s.current_bytes == 0);
  CHECK(s.current_count == 0);
  CHECK(s.total_count == allocated.load());
  CHECK(s.peak_count >= 1);
  CHECK(s.peak_bytes <= kLimit);
  // The limit is above the pool: nothing is outstanding through it; the cache is below it.
  CHECK(limit->device_bytes_in_use() == 0);
  stats->trim();  // forwarded down to the pool
  CHECK(limit->cached_bytes() == 0);
}

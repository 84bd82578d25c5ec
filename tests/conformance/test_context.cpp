// Devices, contexts and backends: device_count, select_device, current_context, properties,
// memory_info, backend_name, compiled_backends, select_backend, version.
#include "support.hpp"

#include <algorithm>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;

namespace {

std::string device_word(int n) {
  return n == 1 ? "device" : "devices";
}

}  // namespace

TEST_CASE("context: devices", "[context]") {
  const int n = devmem::device_count();
  CHECK(n >= 1);
  CHECK(n == devmem::active_backend().device_count());
  CHECK(devmem::current_device() >= 0);
  CHECK(devmem::current_device() < n);
  SECTION("select_device of an existing device") {
    devmem::select_device(0);
    CHECK(devmem::current_device() == 0);
    CHECK(devmem::current_context()->device() == 0);
  }
  SECTION("select_device of a missing device throws NoDevice") {
    const std::string backend = devmem::backend_name();
    REQUIRE_THROWS_MATCHES(
        devmem::select_device(n), devmem::NoDevice,
        Message("select_device: device " + std::to_string(n) + " does not exist (backend '" +
                backend + "' has " + std::to_string(n) + " " + device_word(n) + ")"));
    REQUIRE_THROWS_MATCHES(devmem::select_device(-1), devmem::NoDevice,
                           Message("select_device: device -1 does not exist (backend '" + backend +
                                   "' has " + std::to_string(n) + " " + device_word(n) + ")"));
    CHECK(devmem::current_device() == 0);  // unchanged
  }
  SECTION("context_for_device") {
    CHECK(devmem::context_for_device(0) == devmem::context_for_device(0));
    CHECK(devmem::context_for_device(devmem::current_device()) == devmem::current_context());
    REQUIRE_THROWS_MATCHES(devmem::context_for_device(n), devmem::NoDevice,
                           Message("device " + std::to_string(n) + " does not exist (backend '" +
                                   devmem::backend_name() + "' has " + std::to_string(n) + " " +
                                   device_word(n) + ")"));
  }
  SECTION("the current device is per thread; a new thread starts on device 0") {
    int seen = -1;
    std::thread([&seen] { seen = devmem::current_device(); }).join();
    CHECK(seen == 0);
  }
}

TEST_CASE("context: current_context", "[context]") {
  const std::shared_ptr<devmem::Context> ctx = devmem::current_context();
  REQUIRE(ctx != nullptr);
  CHECK(devmem::current_context() == ctx);
  CHECK(devmem::current_context().get() == ctx.get());
  CHECK(ctx->device() == devmem::current_device());
  CHECK(ctx->backend_name() == devmem::backend_name());
  CHECK(&ctx->backend() == &devmem::active_backend());
  SECTION("the same context from another thread") {
    std::shared_ptr<devmem::Context> other;
    std::thread([&other] { other = devmem::current_context(); }).join();
    CHECK(other == ctx);
  }
  SECTION("arrays and streams belong to it") {
    CHECK(devmem::device_array(Shape{2}, f8()).context() == ctx);
    CHECK(devmem::stream().context() == ctx);
    CHECK(ctx->default_stream() == devmem::default_stream());
    CHECK(ctx->default_stream().is_default());
  }
  SECTION("properties") {
    const devmem::DeviceProperties p = ctx->properties();
    CHECK_FALSE(p.name.empty());
    CHECK_FALSE(p.architecture.empty());
    CHECK(p.total_memory > 0);
    CHECK(p.warp_size > 0);
    CHECK(p.max_threads_per_block > 0);
    CHECK(p.max_shared_memory_per_block > 0);
    CHECK(p.multiprocessor_count > 0);
    if (on_host_backend()) {
      CHECK(p.name == "devmem host simulator");
      CHECK(p.architecture == "host");
      CHECK(p.warp_size == 32);
      CHECK(p.can_map_host_memory);
    }
    // device_properties(): the same record by reference, one address for every call and thread.
    const devmem::DeviceProperties& ref = ctx->device_properties();
    CHECK(&ref == &ctx->device_properties());
    CHECK(ref.name == p.name);
    CHECK(ref.architecture == p.architecture);
    CHECK(ref.total_memory == p.total_memory);
    CHECK(ref.warp_size == p.warp_size);
    CHECK(ref.max_shared_memory_per_block == p.max_shared_memory_per_block);
    CHECK(ref.multiprocessor_count == p.multiprocessor_count);
    const devmem::DeviceProperties* seen_by_thread = nullptr;
    std::thread([&] { seen_by_thread = &ctx->device_properties(); }).join();
    CHECK(seen_by_thread == &ref);
  }
  SECTION("memory_info") {
    const devmem::MemoryInfo info = ctx->memory_info();
    CHECK(info.total > 0);
    CHECK(info.free >= 0);
    CHECK(info.free <= info.total);
  }
  SECTION("synchronize with nothing pending") {
    ctx->synchronize();
    CHECK(devmem::default_stream().query());
  }
}

TEST_CASE("context: memory_info follows allocations", "[context][host-only]") {
  const HostControlsGuard guard;
  const std::shared_ptr<devmem::Context> ctx = devmem::current_context();
  CHECK(ctx->memory_info().total == devmem::host::device_memory_capacity());
  CHECK(ctx->properties().total_memory == devmem::host::device_memory_capacity());
  const int64_t used_before = devmem::host::device_memory_used();
  const int64_t free_before = ctx->memory_info().free;
  {
    const DeviceArray d = devmem::device_array(Shape{kMiB}, u1());
    CHECK(devmem::host::device_memory_used() == used_before + kMiB);
    CHECK(ctx->memory_info().free == free_before - kMiB);
  }
  // Freeing is deferred: the memory comes back when the queue is flushed.
  CHECK(ctx->pending_deallocations() == 1);
  CHECK(devmem::host::device_memory_used() == used_before + kMiB);
  ctx->flush_deallocations();
  CHECK(devmem::host::device_memory_used() == used_before);
  CHECK(ctx->memory_info().free == free_before);
  devmem::host::set_device_memory_capacity(used_before + 3 * kMiB);
  CHECK(ctx->memory_info().total == used_before + 3 * kMiB);
  CHECK(ctx->memory_info().free == 3 * kMiB);
}

TEST_CASE("context: backends", "[context]") {
  CHECK(devmem::backend_name() == DEVMEM_CONFORMANCE_BACKEND);
  CHECK(devmem::active_backend().name() == DEVMEM_CONFORMANCE_BACKEND);
  const std::vector<std::string> compiled = devmem::compiled_backends();
  CHECK(std::find(compiled.begin(), compiled.end(), "host") != compiled.end());
  CHECK(std::find(compiled.begin(), compiled.end(), DEVMEM_CONFORMANCE_BACKEND) != compiled.end());
  CHECK(compiled.back() == "host");  // the GPU backend, if any, comes first
  CHECK(compiled.size() <= 2);
  SECTION("selecting the active backend again is allowed") {
    devmem::select_backend(DEVMEM_CONFORMANCE_BACKEND);
    CHECK(devmem::backend_name() == DEVMEM_CONFORMANCE_BACKEND);
  }
  SECTION("a backend that is not compiled in") {
    REQUIRE_THROWS_MATCHES(devmem::select_backend("nonexistent"), devmem::InvalidArgument,
                           MessageStartsWith("select_backend: backend 'nonexistent' is not "
                                             "compiled in (compiled: "));
  }
  SECTION("another backend once one is in use") {
    for (const std::string& name : compiled) {
      if (name == DEVMEM_CONFORMANCE_BACKEND) continue;
      REQUIRE_THROWS_MATCHES(devmem::select_backend(name), devmem::InvalidArgument,
                             MessageStartsWith(std::string("select_backend: backend '") +
                                               DEVMEM_CONFORMANCE_BACKEND + "' is already in use"));
    }
    CHECK(devmem::backend_name() == DEVMEM_CONFORMANCE_BACKEND);
  }
}

TEST_CASE("context: version", "[context]") {
  const std::string v = devmem::version();
  CHECK(v == DEVMEM_VERSION_STRING);
  CHECK(v == std::to_string(DEVMEM_VERSION_MAJOR) + "." + std::to_string(DEVMEM_VERSION_MINOR) +
                 "." + std::to_string(DEVMEM_VERSION_PATCH));
  CHECK(DEVMEM_VERSION ==
        DEVMEM_VERSION_MAJOR * 10000 + DEVMEM_VERSION_MINOR * 100 + DEVMEM_VERSION_PATCH);
  CHECK(DEVMEM_HAS_HOST == 1);
}

TEST_CASE("context: names of enumerations", "[context]") {
  CHECK(std::string(devmem::to_string(devmem::CopyKind::HostToDevice)) == "HostToDevice");
  CHECK(std::string(devmem::to_string(devmem::CopyKind::DeviceToHost)) == "DeviceToHost");
  CHECK(std::string(devmem::to_string(devmem::CopyKind::DeviceToDevice)) == "DeviceToDevice");
  CHECK(std::string(devmem::to_string(devmem::CopyKind::HostToHost)) == "HostToHost");
  CHECK(std::string(devmem::to_string(devmem::HostMemoryKind::Pageable)) == "pageable");
  CHECK(std::string(devmem::to_string(devmem::HostMemoryKind::Pinned)) == "pinned");
  CHECK(std::string(devmem::to_string(devmem::HostMemoryKind::Mapped)) == "mapped");
}

// Bad-input catalogue, contexts and controls: devices, memory managers, deallocation
// settings, SmartArray state and the host backend's own controls, with exact types and messages.
#include "support.hpp"

namespace {

using namespace conformance;
using Catch::Matchers::Message;
using devmem::InvalidArgument;

/// A manager built for an interface version this devmem does not speak.
class FutureManager : public devmem::DirectMemoryManager {
 public:
  using DirectMemoryManager::DirectMemoryManager;
  [[nodiscard]] std::string_view name() const noexcept override { return "future"; }
  [[nodiscard]] int interface_version() const noexcept override { return 4; }
};

}  // namespace

TEST_CASE("bad input, context: devices and memory managers", "[bad-input][context]") {
  const MemoryStateGuard state;
  const std::string backend = devmem::backend_name();
  const int count = devmem::device_count();
  REQUIRE_THROWS_MATCHES(
      devmem::select_device(count), devmem::NoDevice,
      Message("select_device: device " + std::to_string(count) + " does not exist (backend '" +
              backend + "' has " + std::to_string(count) + " device" + (count == 1 ? "" : "s") +
              ")"));
  REQUIRE_THROWS_MATCHES(devmem::select_device(-1), devmem::NoDevice,
                         MessageStartsWith("select_device: device -1 does not exist"));
  const auto ctx = state.context();
  REQUIRE_THROWS_MATCHES(ctx->set_memory_manager(nullptr), InvalidArgument,
                         Message("set_memory_manager: the manager is null"));
  REQUIRE_THROWS_MATCHES(ctx->set_memory_manager(std::make_shared<FutureManager>(*ctx)),
                         InvalidArgument,
                         Message("set_memory_manager: memory manager 'future' has interface "
                                 "version 4 - version 3 required"));
  REQUIRE_THROWS_MATCHES(devmem::make_memory_manager("nonexistent", *ctx), InvalidArgument,
                         MessageStartsWith("make_memory_manager: unknown memory manager "
                                           "'nonexistent' (known: "));
  REQUIRE_THROWS_MATCHES(devmem::register_memory_manager("", devmem::MemoryManagerFactory{}),
                         InvalidArgument, Message("register_memory_manager: the name is empty"));
  REQUIRE_THROWS_MATCHES(
      devmem::register_memory_manager("empty-factory", devmem::MemoryManagerFactory{}),
      InvalidArgument,
      Message("register_memory_manager: the factory for 'empty-factory' is empty"));
  REQUIRE_THROWS_MATCHES(devmem::PoolMemoryManager(*ctx, {.max_cached_bytes = -1}), InvalidArgument,
                         Message("PoolMemoryManager: max_cached_bytes must not be negative, got "
                                 "-1"));
}

TEST_CASE("bad input, context: deallocation settings", "[bad-input][deallocation]") {
  const MemoryStateGuard state;
  const auto ctx = state.context();
  REQUIRE_THROWS_MATCHES(ctx->set_deallocation_config({.max_pending_count = -1}), InvalidArgument,
                         Message("set_deallocation_config: max_pending_count must not be "
                                 "negative, got -1"));
  REQUIRE_THROWS_MATCHES(ctx->set_deallocation_config({.max_pending_ratio = 1.5}), InvalidArgument,
                         Message("set_deallocation_config: max_pending_ratio must be from 0 to "
                                 "1, got 1.5"));
  REQUIRE_THROWS_MATCHES(
      ctx->set_deallocation_config({.max_pending_ratio = std::numeric_limits<double>::quiet_NaN()}),
      InvalidArgument,
      Message("set_deallocation_config: max_pending_ratio must be from 0 to 1, got nan"));
}

TEST_CASE("bad input, context: SmartArray", "[bad-input][smart-array]") {
  REQUIRE_THROWS_MATCHES(devmem::SmartArray(Shape{3}, f8(), Order::A), InvalidArgument,
                         Message("SmartArray: order must be 'C' or 'F', got 'A'"));
  devmem::SmartArray host_only(Shape{3}, f8());
  REQUIRE_THROWS_MATCHES(host_only.mark_changed(devmem::Where::Device), InvalidArgument,
                         Message("SmartArray::mark_changed: the device side has not been "
                                 "allocated (get it first)"));
  const std::vector<double> constant(3, 0.0);
  REQUIRE_THROWS_MATCHES(
      devmem::SmartArray(
          devmem::HostArray::view(static_cast<const void*>(constant.data()), Shape{3}, f8()),
          false),
      InvalidArgument,
      Message("SmartArray: a read-only host array needs copy = true (the host side is written "
              "when the device side changed)"));
}

TEST_CASE("bad input, context: host backend controls", "[bad-input][host-only]") {
  const HostControlsGuard guard;
  using devmem::host::Call;
  using devmem::host::Status;
  REQUIRE_THROWS_MATCHES(devmem::host::set_device_memory_capacity(-1), InvalidArgument,
                         Message("set_device_memory_capacity: capacity must be >= 0, got -1"));
  REQUIRE_THROWS_MATCHES(devmem::host::fail_nth(Call::Copy, 0), InvalidArgument,
                         Message("fail_nth: nth must be >= 1 (1 = the next call), got 0"));
  REQUIRE_THROWS_MATCHES(devmem::host::fail_nth(Call::Copy, 1, Status::Injected, 0),
                         InvalidArgument, Message("fail_nth: count must be >= 1, got 0"));
  REQUIRE_THROWS_MATCHES(devmem::host::fail_nth(Call::Copy, 1, Status::Success), InvalidArgument,
                         Message("fail_nth: status must be a failure, got Success (call Copy)"));
  REQUIRE_THROWS_MATCHES(
      devmem::host::fail_nth(Call::Count_, 1), InvalidArgument,
      Message("fail_nth: invalid call kind " + std::to_string(static_cast<int>(Call::Count_))));
  REQUIRE_THROWS_MATCHES(devmem::host::device_memory_used(7), devmem::BackendError,
                         MessageStartsWith("host device_memory_used: InvalidDevice (101): device 7 "
                                           "does not exist"));
}

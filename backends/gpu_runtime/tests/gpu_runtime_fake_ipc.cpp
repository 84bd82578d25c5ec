// gpu_runtime_fake_api, IPC (docs/scaling-out.md#ipc): RuntimeBackend's export, open and close go
// to the vendor's IPC calls on the right device, interior pointers find their allocation, opening
// reports the size the driver's address range gives (not the handle's), and every vendor failure
// is a BackendError naming the call, with the runtime's last error cleared and nothing left open.
#include "gpu_runtime_fake.hpp"

using namespace gpu_runtime_fake;
using Catch::Matchers::Contains;

TEST_CASE("gpu_runtime IPC: export, open and close go to the vendor's IPC calls", "[ipc]") {
  Fixture f;
  FakeBackend& backend = f.backend;
  CHECK(backend.supports_ipc(1));
  void* const block = backend.allocate(1, 4096);
  const devmem::AllocationRange range =
      backend.allocation_range(1, static_cast<char*>(block) + 100);
  CHECK(range.base == block);
  CHECK(range.bytes == 4096);
  const devmem::VendorIpcHandle handle = backend.ipc_get_handle(1, block);
  CHECK(f.called("fakeIpcGetMemHandle"));
  // Device 1 was made current for each call, and the caller's device 0 again after it.
  CHECK(f.count("fakeSetDevice(1)") == 4);  // allocate, allocation_range, ipc_get_handle...
  CHECK(f.state.current == 0);
  // Opened on another device: that device is made current for the call.
  f.backend.make_current(1);
  const devmem::AllocationRange opened = backend.ipc_open(0, handle);
  CHECK(opened.base == block);
  CHECK(opened.bytes == 4096);  // the driver's range of the mapping
  CHECK(f.count("fakeMemGetAddressRange") == 2);
  CHECK(f.state.current == 1);
  CHECK(f.state.ipc_mappings.size() == 1);
  backend.ipc_close(0, opened.base);
  CHECK(f.state.ipc_mappings.empty());
  CHECK(f.count("fakeIpcCloseMemHandle") == 1);
  backend.deallocate(1, block);
}

TEST_CASE("gpu_runtime IPC: vendor failures are BackendErrors naming the call", "[ipc]") {
  Fixture f;
  FakeBackend& backend = f.backend;
  void* const block = backend.allocate(0, 256);
  CHECK_THROWS_AS(backend.allocation_range(0, static_cast<char*>(block) + 256),
                  devmem::BackendError);
  CHECK_THROWS_WITH(backend.allocation_range(0, static_cast<char*>(block) + 256),
                    Contains("fakeMemGetAddressRange") && Contains("fakeErrorInvalidValue"));
  CHECK(f.state.last_error == kOk);
  f.state.fail["fakeIpcGetMemHandle"] = kInvalidValue;
  CHECK_THROWS_WITH(backend.ipc_get_handle(0, block),
                    Contains("fakeIpcGetMemHandle") && Contains("exporting the allocation"));
  CHECK(f.state.last_error == kOk);
  const devmem::VendorIpcHandle garbage{};
  CHECK_THROWS_WITH(backend.ipc_open(0, garbage),
                    Contains("fakeIpcOpenMemHandle") && Contains("another process"));
  CHECK(f.state.ipc_mappings.empty());
  CHECK_THROWS_WITH(backend.ipc_close(0, block), Contains("fakeIpcCloseMemHandle"));
  CHECK(f.state.last_error == kOk);
  backend.deallocate(0, block);
}

TEST_CASE("gpu_runtime IPC: a close after the runtime's teardown is silent", "[ipc]") {
  Fixture f;
  FakeBackend& backend = f.backend;
  void* const block = backend.allocate(0, 512);
  void* const opened = backend.ipc_open(0, backend.ipc_get_handle(0, block)).base;
  f.state.unloaded = true;
  CHECK_NOTHROW(backend.ipc_close(0, opened));
  f.state.unloaded = false;
  // The torn-down runtime's answer marked the process as exiting (ProcessExit): a live one again.
  devmem::gpu_runtime::ProcessExit::reset_for_testing();
  backend.ipc_close(0, opened);
  backend.deallocate(0, block);
}

TEST_CASE("gpu_runtime IPC: a mapping whose size the driver cannot give is closed again", "[ipc]") {
  // Without the driver's range, the size of what was mapped would be the handle's word only.
  Fixture f;
  FakeBackend& backend = f.backend;
  void* const block = backend.allocate(0, 1024);
  const devmem::VendorIpcHandle handle = backend.ipc_get_handle(0, block);
  f.state.fail["fakeMemGetAddressRange"] = kInvalidValue;
  CHECK_THROWS_WITH(backend.ipc_open(0, handle),
                    Contains("fakeMemGetAddressRange") && Contains("another process"));
  CHECK(f.count("fakeIpcCloseMemHandle") == 1);
  CHECK(f.state.ipc_mappings.empty());
  CHECK(f.state.last_error == kOk);
  // The next opening works: nothing of the refused one is left.
  const devmem::AllocationRange opened = backend.ipc_open(0, handle);
  CHECK(opened.bytes == 1024);
  backend.ipc_close(0, opened.base);
  CHECK(f.state.ipc_mappings.empty());
  backend.deallocate(0, block);
}

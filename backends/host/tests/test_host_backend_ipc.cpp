// The host backend's IPC through the Backend interface (backends/host/host_ipc.cpp,
// docs/scaling-out.md#ipc), within one process: exporting moves an allocation into a memfd
// without moving it or changing its bytes, and bad pointers and handles are BackendErrors naming
// the call. Opening in another process is tested by the conformance suite (test_ipc.cpp).
#include "host_backend_test_support.hpp"
#include "tests/common/exported_memfds.hpp"

using namespace host_backend_test;

namespace {

using devmem_test::exported_memfds;

}  // namespace

TEST_CASE("host backend IPC: exporting keeps the allocation's address and bytes",
          "[host_backend][ipc]") {
  Backend& b = backend();
  REQUIRE(b.supports_ipc(0));
  const int memfds_before = exported_memfds();
  {
    DeviceBuffer buffer(b, 10000);
    // Whole pages of its own: what lets an export remap exactly this allocation.
    CHECK(reinterpret_cast<std::uintptr_t>(buffer.get()) % 4096 == 0);
    for (std::size_t i = 0; i < 10000; ++i) buffer.get()[i] = static_cast<std::byte>(i * 7);
    const devmem::AllocationRange range = b.allocation_range(0, buffer.get() + 5000);
    CHECK(range.base == buffer.get());
    CHECK(range.bytes == 10000);
    const devmem::VendorIpcHandle first = b.ipc_get_handle(0, buffer.get());
    CHECK(exported_memfds() == memfds_before + 1);
    bool same = true;
    for (std::size_t i = 0; i < 10000; ++i)
      same = same && buffer.get()[i] == static_cast<std::byte>(i * 7);
    CHECK(same);
    buffer.get()[9999] = std::byte{42};  // still writable
    CHECK(buffer.get()[9999] == std::byte{42});
    // Exporting again gives the same handle, and no second memfd.
    CHECK(b.ipc_get_handle(0, buffer.get()) == first);
    CHECK(exported_memfds() == memfds_before + 1);
    // Device-side copies still accept it.
    std::vector<std::byte> out(16);
    b.copy(0, out.data(), buffer.get() + 100, out.size(), CopyKind::DeviceToHost, nullptr);
    CHECK(out[0] == static_cast<std::byte>(700 % 256));
  }
  CHECK(exported_memfds() == memfds_before);
}

TEST_CASE("host backend IPC: bad pointers and handles are BackendErrors", "[host_backend][ipc]") {
  Backend& b = backend();
  DeviceBuffer buffer(b, 256);
  int on_stack = 0;
  check_backend_error(capture<BackendError>([&] { (void)b.allocation_range(0, &on_stack); }),
                      "allocation_range", Status::InvalidValue);
  const auto interior = capture<BackendError>([&] { (void)b.ipc_get_handle(0, buffer.get() + 8); });
  check_backend_error(interior, "ipc_get_handle", Status::InvalidValue);
  CHECK_THAT(interior.what(), Contains("not the start of a device allocation"));
  const auto garbage =
      capture<BackendError>([&] { (void)b.ipc_open(0, devmem::VendorIpcHandle{}); });
  check_backend_error(garbage, "ipc_open", Status::InvalidValue);
  CHECK_THAT(garbage.what(), Contains("not a host backend IPC handle"));
  const devmem::VendorIpcHandle own = b.ipc_get_handle(0, buffer.get());
  const auto same_process = capture<BackendError>([&] { (void)b.ipc_open(0, own); });
  check_backend_error(same_process, "ipc_open", Status::InvalidValue);
  CHECK_THAT(same_process.what(), Contains("exported by this process"));
  const auto not_opened = capture<BackendError>([&] { b.ipc_close(0, buffer.get()); });
  check_backend_error(not_opened, "ipc_close", Status::InvalidValue);
  CHECK_THAT(not_opened.what(), Contains("not memory opened with ipc_open"));
  CHECK_THROWS_AS((void)b.ipc_get_handle(7, buffer.get()), BackendError);  // no device 7
}

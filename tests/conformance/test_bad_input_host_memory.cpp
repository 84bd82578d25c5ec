// Bad-input catalogue, host memory: views, page-locked scopes used twice or on memory
// that is already page-locked, mapped views of unmapped memory, and views of freed memory.
#include "support.hpp"

namespace {

using namespace conformance;
using Catch::Matchers::Message;
using devmem::BackendError;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::InvalidArgument;

}  // namespace

TEST_CASE("bad input, host memory: host array views", "[bad-input][host]") {
  REQUIRE_THROWS_MATCHES(HostArray::view(static_cast<void*>(nullptr), Shape{3}, f8()),
                         InvalidArgument, Message("HostArray::view: null data for shape (3,)"));
  std::vector<double> values(6, 0.0);
  REQUIRE_THROWS_MATCHES(HostArray::view(std::span<double>(values), Shape{2, 3}, Order::A),
                         InvalidArgument,
                         Message("HostArray::view: order must be 'C' or 'F', got 'A'"));
  const HostArray readonly =
      HostArray::view(static_cast<const void*>(values.data()), Shape{6}, f8());
  REQUIRE_THROWS_MATCHES(readonly.copy_from(HostArray(Shape{6}, f8())), InvalidArgument,
                         Message("copy_from: the destination host array is read-only"));
  REQUIRE_THROWS_MATCHES(readonly.fill(1.0), InvalidArgument,
                         Message("fill: the host array is read-only"));
  REQUIRE_THROWS_MATCHES(HostArray(Shape{6}, f8()).copy_from(HostArray(Shape{5}, f8())),
                         InvalidArgument,
                         Message("copy_from: shape mismatch: source (5,), destination (6,)"));
  REQUIRE_THROWS_MATCHES(HostArray(Shape{6}, f8()).at<double>(6), InvalidArgument,
                         Message("at: index 6 is out of bounds for axis 0 with size 6"));
  REQUIRE_THROWS_MATCHES(HostArray(Shape{6}, f8()).device_view(), InvalidArgument,
                         Message("device_view: a pageable host array is not mapped into the device "
                                 "address space (use mapped_array() or a mapped() scope)"));
}

TEST_CASE("bad input, host memory: typed access to misaligned host views", "[bad-input][host]") {
  // Host views accept any address and strides (copies move bytes); only typed access is refused.
  alignas(8) std::array<unsigned char, 64> bytes{};
  const HostArray shifted = HostArray::view(static_cast<void*>(bytes.data() + 2), Shape{3}, f4());
  REQUIRE_THROWS_MATCHES(shifted.data_as<float>(), InvalidArgument,
                         Message("data_as: data pointer " + pointer_text(bytes.data() + 2) +
                                 " is not aligned to 4 bytes for dtype float32"));
  REQUIRE_THROWS_MATCHES(shifted.at<float>(1), InvalidArgument,
                         Message("at: element address " + pointer_text(bytes.data() + 6) +
                                 " is not aligned to 4 bytes for dtype float32"));
  // Element 0 aligned, element 1 not: at() checks the element it hands out.
  const HostArray odd = HostArray::view(static_cast<void*>(bytes.data()), Shape{3}, f8(), {12});
  CHECK(odd.data_as<double>() == static_cast<void*>(bytes.data()));
  CHECK(odd.at<double>(2) == 0.0);
  REQUIRE_THROWS_MATCHES(odd.at<double>(1), InvalidArgument,
                         Message("at: element address " + pointer_text(bytes.data() + 12) +
                                 " is not aligned to 8 bytes for dtype float64"));
  // An empty view hands out no element, so its misaligned pointer is harmless.
  CHECK(HostArray::view(static_cast<void*>(bytes.data() + 1), Shape{0}, f8()).data_as<double>() ==
        static_cast<void*>(bytes.data() + 1));
}

TEST_CASE("bad input, host memory: memory that is already page-locked", "[bad-input][host]") {
  const HostArray pinned = devmem::pinned_array<double>(Shape{4});
  REQUIRE_THROWS_MATCHES(devmem::pinned(pinned), InvalidArgument,
                         Message("pinned: array 0 is already page-locked (pinned memory from "
                                 "pinned_array)"));
  const HostArray mapped = devmem::mapped_array<double>(Shape{4});
  const HostArray pageable = page_aligned_host(Shape{4}, f8());
  REQUIRE_THROWS_MATCHES(devmem::mapped({pageable, mapped}), InvalidArgument,
                         Message("mapped: array 1 is already page-locked (mapped memory from "
                                 "mapped_array)"));
  REQUIRE_THROWS_MATCHES(devmem::registered(pinned), InvalidArgument,
                         Message("registered: array 0 is already page-locked (pinned memory from "
                                 "pinned_array)"));
}

TEST_CASE("bad input, host memory: scopes over the same memory twice, unregistering twice",
          "[bad-input][host][host-only]") {
  const HostControlsGuard guard;
  const HostArray h = page_aligned_host(Shape{8}, f8());
  const std::string address = pointer_text(h.data());
  {
    const devmem::PinnedScope first = devmem::pinned(h);
    REQUIRE_THROWS_MATCHES(
        devmem::pinned(h), BackendError,
        Message("host host_register: HostMemoryAlreadyRegistered (712): " + address +
                " (64 bytes) overlaps a registered range (" + address + ", 64 bytes)"));
    REQUIRE_THROWS_MATCHES(
        devmem::mapped({h}), BackendError,
        Message("host host_register: HostMemoryAlreadyRegistered (712): " + address +
                " (64 bytes) overlaps a registered range (" + address + ", 64 bytes)"));
  }
  // The first scope ended: the memory is no longer registered.
  REQUIRE_THROWS_MATCHES(
      devmem::deregister_host(h), BackendError,
      MessageStartsWith("host host_unregister: HostMemoryNotRegistered (713): "));
}

TEST_CASE("bad input, host memory: views of freed or unmapped foreign memory",
          "[bad-input][interop][host-only]") {
  const HostControlsGuard guard;
  // An interface describing device memory that has been freed since.
  devmem::ArrayInterface iface;
  {
    const DeviceArray owner = iota_device(Shape{4});
    iface = owner.array_interface();
  }
  devmem::current_context()->flush_deallocations();
  const DeviceArray dangling = devmem::as_device_array(iface);
  REQUIRE_THROWS_MATCHES(
      dangling.copy_to_host(), BackendError,
      Message("host copy: IllegalAddress (700): source " + pointer_text(iface.data.pointer) +
              " (32 bytes) is not inside a live device allocation or mapped host memory"));
  // Ordinary process memory imported as if it were device memory.
  std::vector<double> process_memory(4, 1.0);
  devmem::ArrayInterface host_iface;
  host_iface.shape = {4};
  host_iface.typestr = "<f8";
  host_iface.data.pointer = process_memory.data();
  const DeviceArray not_device = devmem::as_device_array(host_iface);
  REQUIRE_THROWS_MATCHES(
      not_device.fill(2.0), BackendError,
      Message("host copy: IllegalAddress (700): destination " +
              pointer_text(process_memory.data()) +
              " (32 bytes) is not inside a live device allocation or mapped host memory"));
}

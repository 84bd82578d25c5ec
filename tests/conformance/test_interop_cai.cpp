// Interop, the CUDA Array Interface v3 (array_interface, as_device_array, is_device_array):
// metadata, round trips, lifetimes, stream semantics and every validation error. DLPack is in
// test_interop_dlpack.cpp.
#include "core/array_access.hpp"  // white-box: arrays over crafted layouts
#include "interop_test_support.hpp"
#include "support.hpp"

#include <devmem/kernel.hpp>  // detail::launch_view_owner

#include <atomic>
#include <chrono>
#include <climits>
#include <complex>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::ArrayInterface;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::InvalidArgument;

namespace {

// A type from "another library" that exposes an array interface.
struct ForeignArray {
  DeviceArray storage;
  [[nodiscard]] ArrayInterface array_interface() const { return storage.array_interface(); }
};
struct NotAnArray {
  int array_interface = 0;  // a data member, not a function
};
struct WrongReturn {
  [[nodiscard]] int array_interface() const { return 0; }
};

static_assert(devmem::is_device_array_v<DeviceArray>);
static_assert(devmem::is_device_array_v<const DeviceArray&>);
static_assert(devmem::is_device_array_v<ForeignArray>);
static_assert(!devmem::is_device_array_v<HostArray>);
static_assert(!devmem::is_device_array_v<int>);
static_assert(!devmem::is_device_array_v<NotAnArray>);
static_assert(!devmem::is_device_array_v<WrongReturn>);
static_assert(!devmem::is_device_array_v<ArrayInterface>);
static_assert(devmem::ArrayInterfaceProvider<ForeignArray>);

}  // namespace

// ---- CUDA Array Interface: producer ------------------------------------------------------------

TEST_CASE("array_interface: a C-contiguous array", "[interop][cai]") {
  const DeviceArray d = iota_device({3, 4});
  const ArrayInterface iface = d.array_interface();
  CHECK(iface.shape == Shape{3, 4});
  CHECK(iface.strides.empty());  // strides: None
  CHECK(iface.typestr == "<f8");
  CHECK(iface.data.pointer == d.data());
  CHECK(iface.data.pointer != nullptr);
  CHECK_FALSE(iface.data.readonly);
  CHECK(iface.version == 3);
  CHECK(iface.mask == nullptr);
  REQUIRE(iface.stream.has_value());
  CHECK(*iface.stream == 1);  // the legacy default stream, never 0

  const ArrayInterface free_fn = devmem::array_interface(d);
  CHECK(free_fn.shape == iface.shape);
  CHECK(free_fn.data.pointer == iface.data.pointer);
}

TEST_CASE("array_interface: explicit strides for every other layout", "[interop][cai]") {
  const DeviceArray base = iota_device({4, 6});
  SECTION("F-contiguous") {
    const DeviceArray f = devmem::device_array(Shape{3, 4}, f8(), {}, Order::F);
    CHECK(f.array_interface().strides == Strides{8, 24});
  }
  SECTION("transposed") {
    CHECK(base.T().array_interface().strides == Strides{8, 48});
  }
  SECTION("sliced columns (not dense)") {
    const ArrayInterface iface = base.slice(1, 0, 3).array_interface();
    CHECK(iface.shape == Shape{4, 3});
    CHECK(iface.strides == Strides{48, 8});
  }
  SECTION("sliced rows of a C array stay C-contiguous") {
    const ArrayInterface iface = base.slice(0, 1, 3).array_interface();
    CHECK(iface.strides.empty());
    CHECK(iface.data.pointer == byte_ptr(base.data()) + 48);
  }
  SECTION("negative stride: the pointer is element 0, as NumPy") {
    const DeviceArray v = iota_device({10});
    const ArrayInterface iface = v.slice(0, std::nullopt, std::nullopt, -1).array_interface();
    CHECK(iface.shape == Shape{10});
    CHECK(iface.strides == Strides{-8});
    CHECK(iface.data.pointer == byte_ptr(v.data()) + 72);
  }
  SECTION("broadcast (stride 0) is never reported dense") {
    const DeviceArray b = devmem::device_array(Shape{3, 4}, f8(), Strides{0, 8});
    CHECK(b.array_interface().strides == Strides{0, 8});
    const DeviceArray all_zero = devmem::device_array(Shape{5}, f8(), Strides{0});
    CHECK(all_zero.array_interface().strides == Strides{0});
  }
  SECTION("a size-1 axis with an unusual stride is exported as is") {
    const DeviceArray odd = devmem::device_array(Shape{1, 3}, f8(), Strides{8, 8});
    CHECK(odd.is_c_contiguous());  // NumPy's relaxed rule ignores the size-1 axis
    CHECK(odd.array_interface().strides == Strides{8, 8});
  }
  SECTION("0-d") {
    const ArrayInterface iface = base[1][2].array_interface();
    CHECK(iface.shape.empty());
    CHECK(iface.strides.empty());
    CHECK(iface.data.pointer == byte_ptr(base.data()) + 64);
  }
  SECTION("no elements: data pointer 0") {
    CHECK(base.slice(0, 2, 2).array_interface().data.pointer == nullptr);
    CHECK(devmem::device_array(Shape{0, 3}, f8()).array_interface().data.pointer == nullptr);
    CHECK(DeviceArray().array_interface().data.pointer == nullptr);
  }
}

TEST_CASE("array_interface: typestr of every kind", "[interop][cai]") {
  CHECK(devmem::device_array<bool>({2}).array_interface().typestr == "|b1");
  CHECK(devmem::device_array<std::uint8_t>({2}).array_interface().typestr == "|u1");
  CHECK(devmem::device_array<std::int32_t>({2}).array_interface().typestr == "<i4");
  CHECK(devmem::device_array<float>({2}).array_interface().typestr == "<f4");
  CHECK(devmem::device_array<std::complex<double>>({2}).array_interface().typestr == "<c16");
  CHECK(devmem::device_array(Shape{2}, DType::record(24)).array_interface().typestr == "|V24");
}

TEST_CASE("array_interface: stream is 1 for the default stream, the handle otherwise",
          "[interop][cai][stream]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray on_default = devmem::device_array<double>({4});
  const DeviceArray on_explicit_default = on_default.bind(devmem::default_stream());
  const DeviceArray on_stream = devmem::device_array<double>({4}, Order::C, s);
  CHECK(on_default.array_interface().stream == std::optional<std::intptr_t>(1));
  CHECK(on_explicit_default.array_interface().stream == std::optional<std::intptr_t>(1));
  const std::optional<std::intptr_t> exported = on_stream.array_interface().stream;
  REQUIRE(exported.has_value());
  CHECK(*exported == reinterpret_cast<std::intptr_t>(s.native_handle()));
  CHECK(*exported != 0);
  CHECK(*exported != 1);
  CHECK(*exported != 2);
  // Views keep the stream, so they export it too.
  CHECK(on_stream.slice(0, 1, 3).array_interface().stream == exported);
}

TEST_CASE("is_device_array: any type exposing an array interface", "[interop][cai]") {
  const DeviceArray d = devmem::device_array<double>({2});
  const ForeignArray foreign{d};
  const HostArray h(Shape{2});
  CHECK(devmem::is_device_array(d));
  CHECK(devmem::is_device_array(foreign));
  CHECK_FALSE(devmem::is_device_array(h));
  CHECK_FALSE(devmem::is_device_array(42));
}

// ---- CUDA Array Interface: consumer ------------------------------------------------------------

TEST_CASE("as_device_array: round trips keep shape, strides, dtype and pointer", "[interop][cai]") {
  const DeviceArray base = iota_device({4, 6});
  for (const auto& [name, original] : layouts_of(base)) {
    SECTION(name) {
      const ArrayInterface iface = original.array_interface();
      const DeviceArray view =
          devmem::as_device_array(iface, std::make_shared<const DeviceArray>(original));
      check_same_array(view, original);
      CHECK(view.array_interface().strides == iface.strides);
      CHECK(device_values(view) == device_values(original));
      CHECK(view.stream().is_default());
    }
  }
  SECTION("every dtype") {
    const DeviceArray b = devmem::device_array<bool>({3});
    const DeviceArray c = devmem::device_array<std::complex<float>>({3});
    const DeviceArray u = devmem::device_array<std::uint16_t>({3});
    for (const DeviceArray& a : {b, c, u}) {
      const DeviceArray view = devmem::as_device_array(a.array_interface());
      check_same_array(view, a);
    }
  }
  SECTION("records come back as raw bytes of the same size") {
    const DeviceArray r = devmem::device_array(Shape{2}, DType::record(24));
    const DeviceArray view = devmem::as_device_array(r.array_interface());
    CHECK(view.dtype() == DType::record(24));
    CHECK(view.data() == r.data());
  }
  SECTION("a broadcast array") {
    const DeviceArray one = iota_device({4});
    const DeviceArray b = devmem::detail::ArrayAccess::make(
        devmem::detail::ArrayAccess::memory(one),
        devmem::layout::broadcast_to(one.layout(), Shape{3, 4}), f8(), {});
    const DeviceArray view = devmem::as_device_array(b.array_interface());
    check_same_array(view, b);
    CHECK(device_values(view) == std::vector<double>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  }
}

TEST_CASE("as_device_array: a view, not a copy", "[interop][cai]") {
  const DeviceArray d = iota_device({2, 3});
  const DeviceArray view = devmem::as_device_array(d.array_interface());
  view.set_item(42.0, 1, 2);
  CHECK(d.item<double>(1, 2) == 42.0);
  d.fill(7.0);
  CHECK(device_values(view) == std::vector<double>(6, 7.0));
}

TEST_CASE("as_device_array: the owner keeps the memory alive", "[interop][cai][lifetime]") {
  DeviceArray original = iota_device({5, 4});
  const ArrayInterface iface = original.slice(1, std::nullopt, std::nullopt, -1).array_interface();
  auto owner = std::make_shared<const DeviceArray>(original);
  const std::weak_ptr<const DeviceArray> watch = owner;
  DeviceArray view = devmem::as_device_array(iface, owner);
  original = DeviceArray();
  owner.reset();
  // Freed memory would be reused, or reported by the host backend / ASan.
  devmem::current_context()->flush_deallocations();
  (void)devmem::device_array<double>({5, 4});
  CHECK_FALSE(watch.expired());
  const std::vector<double> expected = gather_iota({5, 4}, {32, -8}, 24);
  CHECK(device_values(view) == expected);
  // Views of the view keep it too.
  DeviceArray sub = view.slice(0, 1, 3);
  view = DeviceArray();
  CHECK_FALSE(watch.expired());
  CHECK(device_values(sub) == std::vector<double>(expected.begin() + 4, expected.begin() + 12));
  sub = DeviceArray();
  CHECK(watch.expired());
}

TEST_CASE("as_device_array: objects exposing an interface (Numba's as_cuda_array)",
          "[interop][cai][lifetime]") {
  SECTION("shared_ptr: the object itself is kept alive") {
    auto foreign = std::make_shared<ForeignArray>(ForeignArray{iota_device({3})});
    const std::weak_ptr<ForeignArray> watch = foreign;
    const void* data = foreign->storage.data();
    DeviceArray view = devmem::as_device_array(foreign);
    foreign.reset();
    CHECK_FALSE(watch.expired());
    CHECK(view.data() == data);
    CHECK(device_values(view) == std::vector<double>{0, 1, 2});
    view = DeviceArray();
    CHECK(watch.expired());
  }
  SECTION("by reference: a copy is kept alive") {
    DeviceArray d = iota_device({3});
    const std::weak_ptr<const void> watch = d.owner();
    const void* data = d.data();
    DeviceArray view = devmem::as_device_array(d);
    d = DeviceArray();
    CHECK_FALSE(watch.expired());
    CHECK(view.data() == data);
    CHECK(device_values(view) == std::vector<double>{0, 1, 2});
    view = DeviceArray();
    CHECK(watch.expired());
  }
  SECTION("a null shared_ptr") {
    REQUIRE_THROWS_MATCHES(devmem::as_device_array(std::shared_ptr<ForeignArray>()),
                           InvalidArgument, Message("as_device_array: null object"));
  }
}

TEST_CASE("as_device_array: version 2 without a stream is accepted", "[interop][cai]") {
  const DeviceArray d = iota_device({3});
  ArrayInterface iface = d.array_interface();
  iface.version = 2;
  iface.stream.reset();
  check_same_array(devmem::as_device_array(iface), d);
}

TEST_CASE("as_device_array: size-0 arrays with a null pointer", "[interop][cai]") {
  ArrayInterface iface;
  iface.shape = {0, 3};
  iface.typestr = "<f8";
  const DeviceArray view = devmem::as_device_array(iface);
  CHECK(view.shape() == Shape{0, 3});
  CHECK(view.data() == nullptr);
  CHECK(view.size() == 0);
  CHECK(device_values(view).empty());
}

TEST_CASE("as_device_array: strides need only be multiples of the dtype's alignment",
          "[interop][cai]") {
  const DeviceArray d = iota_device({3, 4});
  ArrayInterface iface = d.array_interface();
  iface.stream.reset();
  SECTION("negative strides") {
    iface.strides = {-32, -8};
    iface.data.pointer = byte_ptr(d.data()) + 88;
    const DeviceArray view = devmem::as_device_array(iface);
    CHECK(device_values(view) == std::vector<double>{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
    CHECK(view.view<double, 2>().stride_bytes(0) == -32);
  }
  SECTION("an axis of length 1 takes any stride") {
    iface.shape = {1, 4};
    iface.strides = {3, 8};
    const DeviceArray view = devmem::as_device_array(iface);
    CHECK(device_values(view) == std::vector<double>{0, 1, 2, 3});
    CHECK(view.view<double, 2>().stride_bytes(0) == 3);
  }
  SECTION("no elements: odd strides and a misaligned pointer are never dereferenced") {
    iface.shape = {0, 4};
    iface.strides = {3, 12};
    iface.data.pointer = byte_ptr(d.data()) + 1;
    const DeviceArray view = devmem::as_device_array(iface);
    CHECK(view.size() == 0);
    CHECK(view.view<double, 2>().size() == 0);
  }
  SECTION("the alignment, not the itemsize: complex64 aligns to 4") {
    iface.typestr = "<c8";
    iface.shape = {3};
    iface.strides = {12};
    const DeviceArray view = devmem::as_device_array(iface);
    CHECK(view.view<std::complex<float>, 1>().stride_bytes(0) == 12);
  }
}

TEST_CASE("as_device_array: the view uses devmem's own stream when given it",
          "[interop][cai][stream]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = iota_device({4}, Order::C, s);
  const DeviceArray on_s = d.bind(s);
  const DeviceArray view = devmem::as_device_array(on_s.array_interface());
  CHECK(view.stream() == s);
  CHECK(view.array_interface().stream == on_s.array_interface().stream);
  const DeviceArray default_view = devmem::as_device_array(d.bind({}).array_interface());
  CHECK(default_view.stream().is_default());
}

TEST_CASE("as_device_array: with sync, waits for the producer's stream", "[interop][cai][stream]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = devmem::device_array<double>({256}, Order::C, s);
  const ArrayInterface iface = d.array_interface();
  std::atomic<bool> opened{false};
  {
    StreamGate gate(s);
    d.memset(0, s);  // queued behind the gate
    SECTION("sync = false returns at once") {
      const DeviceArray view = devmem::as_device_array(iface, {}, false);
      CHECK_FALSE(opened.load());
      CHECK(view.data() == d.data());
      opened = true;
      gate.open();
    }
    SECTION("sync = true returns after the stream's work") {
      std::thread opener([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        opened = true;
        gate.open();
      });
      const DeviceArray view = devmem::as_device_array(iface);
      const bool was_open = opened.load();
      opener.join();
      CHECK(was_open);
      CHECK(device_values(view) == std::vector<double>(256, 0.0));
    }
    CHECK_FALSE(gate.timed_out());
  }
  s.synchronize();
}

TEST_CASE("as_device_array: which stream is synchronised", "[interop][cai][stream][host-only]") {
  HostControlsGuard guard;
  using devmem::host::Call;
  const auto syncs = [] { return devmem::host::call_count(Call::SynchronizeStream); };
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = iota_device({3});
  ArrayInterface iface = d.array_interface();
  SECTION("absent: none") {
    iface.stream.reset();
    const auto before = syncs();
    (void)devmem::as_device_array(iface);
    CHECK(syncs() == before);
  }
  SECTION("1 and 2: the default stream (the host backend has no per-thread stream)") {
    for (const std::intptr_t value : {std::intptr_t{1}, std::intptr_t{2}}) {
      iface.stream = value;
      const auto before = syncs();
      const DeviceArray view = devmem::as_device_array(iface);
      CHECK(syncs() == before + 1);
      CHECK(view.stream().is_default());
    }
  }
  SECTION("a stream handle: that stream; sync = false: none") {
    iface.stream = reinterpret_cast<std::intptr_t>(s.native_handle());
    auto before = syncs();
    (void)devmem::as_device_array(iface);
    CHECK(syncs() == before + 1);
    before = syncs();
    (void)devmem::as_device_array(iface, {}, false);
    CHECK(syncs() == before);
  }
  SECTION("a handle that is not a stream: the backend's error") {
    static int not_a_stream = 0;
    iface.stream = reinterpret_cast<std::intptr_t>(&not_a_stream);
    CHECK_THROWS_AS(devmem::as_device_array(iface), devmem::BackendError);
    // Without sync the handle is not used.
    CHECK(devmem::as_device_array(iface, {}, false).stream().is_default());
  }
}

TEST_CASE("as_device_array: validation errors", "[interop][cai][errors]") {
  const DeviceArray d = iota_device({3, 4});
  ArrayInterface iface = d.array_interface();
  const auto fails_with = [&](const std::string& message) {
    REQUIRE_THROWS_MATCHES(devmem::as_device_array(iface), InvalidArgument, Message(message));
  };
  SECTION("version") {
    for (const int version : {0, 1, 4}) {
      iface.version = version;
      fails_with("as_device_array: unsupported interface version " + std::to_string(version) +
                 " (expected 3, or 2 without a stream)");
    }
    iface.version = 2;
    fails_with(
        "as_device_array: a version 2 interface cannot have a stream (streams came with version "
        "3)");
  }
  SECTION("mask") {
    iface.mask = std::make_shared<ArrayInterface>(d.array_interface());
    fails_with("as_device_array: masked arrays are not supported");
  }
  SECTION("read-only") {
    iface.data.readonly = true;
    fails_with("as_device_array: read-only data is not supported (device arrays are writable)");
  }
  SECTION("typestr") {
    iface.typestr = "<x8";
    fails_with("as_device_array: unsupported typestr '<x8' (DType: unknown typestr '<x8')");
    iface.typestr = ">f8";
    fails_with(
        "as_device_array: unsupported typestr '>f8' (DType: big-endian typestr '>f8' is not "
        "supported)");
    iface.typestr = "<f3";
    fails_with(
        "as_device_array: unsupported typestr '<f3' (DType: float of 3 bytes does not exist "
        "(typestr '<f3'))");
    iface.typestr = "";
    fails_with("as_device_array: unsupported typestr '' (DType: unknown typestr '')");
  }
  SECTION("strides that do not match ndim") {
    iface.strides = {8};
    fails_with("as_device_array: 1 strides given for 2 dimensions (shape (3, 4))");
    iface.strides = {32, 8, 8};
    fails_with("as_device_array: 3 strides given for 2 dimensions (shape (3, 4))");
  }
  SECTION("negative dimension") {
    iface.shape = {3, -1};
    fails_with("as_device_array: negative dimension -1 in shape (3, -1)");
  }
  SECTION("stream 0") {
    iface.stream = 0;
    fails_with(
        "as_device_array: stream 0 is not allowed (1 = legacy default stream, 2 = per-thread "
        "default stream, other values are stream handles)");
  }
  SECTION("null data with elements") {
    iface.data.pointer = nullptr;
    fails_with("as_device_array: null data pointer for an array of 12 elements");
  }
  SECTION("misaligned data") {
    iface.data.pointer = byte_ptr(d.data()) + 4;
    fails_with("as_device_array: data pointer " + pointer_text(iface.data.pointer) +
               " is not aligned to 8 bytes for dtype float64");
    iface.typestr = "<c8";  // complex64 aligns to 4
    CHECK(devmem::as_device_array(iface).data() == iface.data.pointer);
  }
  SECTION("element count overflow") {
    iface.shape = {int64_t{1} << 62, 4};
    fails_with("as_device_array: element count of shape (4611686018427387904, 4) overflows int64");
  }
  SECTION("extent overflow") {
    iface.shape = {3};
    iface.strides = {int64_t{1} << 62};
    fails_with(
        "as_device_array: extent of shape (3,) with strides (4611686018427387904,) overflows "
        "int64");
  }
}

TEST_CASE("as_device_array: foreign memory is bound to the device that owns it",
          "[interop][cai][multi-device]") {
  const int original = devmem::current_device();
  const int owner = devmem::device_count() - 1;  // device 1 with two devices, else device 0
  devmem::select_device(owner);
  const DeviceArray source = devmem::to_device(std::vector<int>{1, 2, 3, 4});
  devmem::select_device(0);
  // Viewed while device 0 is current: the view belongs to the device of the memory.
  const DeviceArray view = devmem::as_device_array(source.array_interface(), nullptr);
  CHECK(view.context()->device() == owner);
  CHECK(view.context() == devmem::context_for_device(owner));
  CHECK(view.to_vector<int>() == std::vector<int>{1, 2, 3, 4});
  // Its copies run on that device: a device-to-device copy from an array of the same device.
  const DeviceArray twin = devmem::device_array_like(source);
  twin.copy_to_device(view);
  CHECK(twin.to_vector<int>() == std::vector<int>{1, 2, 3, 4});
  devmem::select_device(original);
}

TEST_CASE(
    "as_device_array: a re-import of devmem memory does not hide the allocation from launches",
    "[interop][cai][lifetime]") {
  // What a kernel launch keeps alive for an ArrayView argument (launch_view_owner) is the
  // allocation the address lies in, even when views re-imported through the array interface
  // without an owner start nearer to it (review 2, N14). Before, the nearest entry won: the launch
  // kept only a view that owns nothing, and the pool handed the block out while the kernel ran.
  const MemoryStateGuard mem;
  mem.context()->set_memory_manager(devmem::make_memory_manager("pool", *mem.context()));
  DeviceArray array = devmem::device_array<float>({1024});
  auto* const base = static_cast<std::byte*>(array.data());
  const DeviceArray whole = devmem::as_device_array(array.array_interface());
  const DeviceArray inner = devmem::as_device_array(array.slice(0, 16, 64).array_interface());
  std::shared_ptr<const void> owner = devmem::detail::launch_view_owner(base + 100 * sizeof(float));
  REQUIRE(owner != nullptr);
  array = DeviceArray();  // the only owning handle goes; `owner` stands for a launch in flight
  mem.context()->synchronize();
  mem.context()->flush_deallocations();
  const DeviceArray next = devmem::device_array<float>({1024});
  CHECK(static_cast<std::byte*>(next.data()) != base);  // still held by the launch's owner
  const DeviceArray reused = [&] {
    owner.reset();  // the launch completed: the block goes back to the pool
    mem.context()->synchronize();
    mem.context()->flush_deallocations();
    return devmem::device_array<float>({1024});
  }();
  CHECK(static_cast<std::byte*>(reused.data()) == base);
}

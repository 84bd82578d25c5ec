// SmartArray: lazily synchronised host and device copies. Values are checked on every backend;
// the number of transfers is counted through the host backend ([host-only]).
#include "core/array_access.hpp"  // white-box: arrays over crafted layouts
#include "support.hpp"

#include <atomic>
#include <thread>
#include <variant>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::InvalidArgument;
using devmem::SmartArray;
using devmem::Where;

namespace {

std::int64_t copies() {
  return devmem::host::call_count(devmem::host::Call::Copy);
}

// One "device step": overwrites every byte of the device side (a memset, not a copy) and says so.
void device_step(SmartArray& a, int byte_value) {
  a.get_device().memset(byte_value);
  a.mark_changed(Where::Device);
}

// The float64 whose 8 bytes are all `byte_value`.
double pattern(int byte_value) {
  double d = 0;
  std::memset(&d, byte_value, sizeof d);
  return d;
}

}  // namespace

TEST_CASE("SmartArray: from a host array", "[smart]") {
  const HostArray h = iota_host({3, 4});
  SECTION("copy = true: its own host memory") {
    SmartArray a(h);
    CHECK(a.shape() == Shape{3, 4});
    CHECK(a.strides() == Strides{32, 8});
    CHECK(a.dtype() == f8());
    CHECK(a.ndim() == 2);
    CHECK(a.size() == 12);
    CHECK(a.is_allocated(Where::Host));
    CHECK(a.is_valid(Where::Host));
    CHECK_FALSE(a.is_allocated(Where::Device));
    CHECK_FALSE(a.is_valid(Where::Device));
    CHECK(a.get_host().data() != h.data());
    CHECK(host_values(a.get_host()) == iota_vec(12));

    CHECK(device_values(a.get_device()) == iota_vec(12));
    CHECK(a.is_valid(Where::Device));
    CHECK(a.is_valid(Where::Host));
    device_step(a, 3);
    CHECK_FALSE(a.is_valid(Where::Host));
    CHECK(host_values(a.get_host()) == std::vector<double>(12, pattern(3)));
    CHECK(host_values(h) == iota_vec(12));  // the original is untouched
  }
  SECTION("copy = false: the caller's memory is the host side") {
    SmartArray a(h, false);
    CHECK(a.get_host().data() == h.data());
    device_step(a, 5);
    (void)a.get_host();
    CHECK(host_values(h) == std::vector<double>(12, pattern(5)));
  }
  SECTION("copy = true keeps the axis order") {
    SmartArray a(h.T());
    CHECK(a.strides() == Strides{8, 32});
    CHECK(a.get_device().strides() == Strides{8, 32});
    CHECK(device_values(a.get_device()) == host_values(h.T()));
  }
  SECTION("a strided view, copy = false: the device side is dense") {
    SmartArray a(h.slice(1, std::nullopt, std::nullopt, 2), false);
    CHECK(a.strides() == Strides{32, 16});
    CHECK(a.get_device().strides() == Strides{16, 8});
    CHECK(device_values(a.get_device()) == std::vector<double>{0, 2, 4, 6, 8, 10});
    device_step(a, 0);
    (void)a.get_host();
    // Only the viewed elements were written back.
    CHECK(host_values(h) == std::vector<double>{0, 1, 0, 3, 0, 5, 0, 7, 0, 9, 0, 11});
  }
  SECTION("where = Device: both sides up to date from the start") {
    SmartArray a(h, true, Where::Device);
    CHECK(a.is_allocated(Where::Device));
    CHECK(a.is_valid(Where::Device));
    CHECK(a.is_valid(Where::Host));
    CHECK(device_values(a.get_device()) == iota_vec(12));
  }
}

TEST_CASE("SmartArray: from a shape", "[smart]") {
  SECTION("on the host: zero-filled, the device side made on demand") {
    SmartArray a(Shape{2, 3}, devmem::dtype_of<std::int32_t>());
    CHECK(a.is_allocated(Where::Host));
    CHECK_FALSE(a.is_allocated(Where::Device));
    CHECK(a.get_host().to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 0));
    a.get_host().at<std::int32_t>(1, 2) = 9;
    a.mark_changed(Where::Host);
    CHECK(a.get_device().to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 0, 0, 0, 0, 9});
  }
  SECTION("on the device, F order: the host side made on demand with the same strides") {
    SmartArray a(Shape{2, 3}, f8(), Order::F, Where::Device);
    CHECK(a.strides() == Strides{8, 16});
    CHECK_FALSE(a.is_allocated(Where::Host));
    a.get_device().copy_to_device(iota_host({2, 3}));
    a.mark_changed(Where::Device);
    const HostArray& host = a.get_host();
    CHECK(host.strides() == Strides{8, 16});
    CHECK(host_values(host) == iota_vec(6));
  }
}

TEST_CASE("SmartArray: get(where), get<where>() and the aliases", "[smart]") {
  SmartArray a(iota_host({4}));
  const auto host = a.get(Where::Host);
  REQUIRE(std::holds_alternative<HostArray>(host));
  CHECK(std::get<HostArray>(host).data() == a.host().data());
  const auto device = a.get(Where::Device);
  REQUIRE(std::holds_alternative<DeviceArray>(device));
  CHECK(std::get<DeviceArray>(device).data() == a.device().data());
  CHECK(&a.get<Where::Host>() == &a.get_host());
  CHECK(&a.get<Where::Device>() == &a.get_device());
  CHECK(device_values(a.device()) == iota_vec(4));
}

TEST_CASE("SmartArray: copies share state", "[smart]") {
  SmartArray a(iota_host({3}));
  SmartArray b = a;
  (void)b.get_device();
  CHECK(a.is_allocated(Where::Device));
  device_step(b, 1);
  CHECK_FALSE(a.is_valid(Where::Host));
  CHECK(host_values(a.get_host()) == std::vector<double>(3, pattern(1)));
}

TEST_CASE("SmartArray: errors", "[smart][errors]") {
  SECTION("mark_changed on a side never allocated") {
    SmartArray a(Shape{2}, f8());
    REQUIRE_THROWS_MATCHES(
        a.mark_changed(Where::Device), InvalidArgument,
        Message("SmartArray::mark_changed: the device side has not been allocated (get it first)"));
    SmartArray b(Shape{2}, f8(), Order::C, Where::Device);
    REQUIRE_THROWS_MATCHES(
        b.mark_changed(Where::Host), InvalidArgument,
        Message("SmartArray::mark_changed: the host side has not been allocated (get it first)"));
  }
  SECTION("order") {
    REQUIRE_THROWS_MATCHES(SmartArray(Shape{2}, f8(), Order::K), InvalidArgument,
                           Message("SmartArray: order must be 'C' or 'F', got 'K'"));
    REQUIRE_THROWS_MATCHES(SmartArray(Shape{2}, f8(), Order::A, Where::Device), InvalidArgument,
                           Message("SmartArray: order must be 'C' or 'F', got 'A'"));
  }
  SECTION("a read-only host array without a copy") {
    const std::vector<double> values{1, 2, 3};
    const HostArray readonly = HostArray::view(values);
    REQUIRE_THROWS_MATCHES(SmartArray(readonly, false), InvalidArgument,
                           Message("SmartArray: a read-only host array needs copy = true (the "
                                   "host side is written when the device side changed)"));
    SmartArray copied(readonly);
    CHECK(host_values(copied.get_host()) == values);
  }
  SECTION("a broadcast host array without a copy") {
    const HostArray one = iota_host({3});
    const HostArray b = devmem::detail::ArrayAccess::make(
        devmem::detail::ArrayAccess::memory(one),
        devmem::layout::broadcast_to(one.layout(), Shape{2, 3}), f8());
    REQUIRE_THROWS_MATCHES(SmartArray(b, false), InvalidArgument,
                           Message("SmartArray: a broadcast host array (stride 0 on an axis of "
                                   "length > 1) needs copy = true"));
    SmartArray copied(b);
    CHECK(device_values(copied.get_device()) == std::vector<double>{0, 1, 2, 0, 1, 2});
  }
  SECTION("bad shapes and dtypes come from the allocation") {
    REQUIRE_THROWS_AS(SmartArray(Shape{-1}, f8()), InvalidArgument);
    REQUIRE_THROWS_AS(SmartArray(Shape{-1}, f8(), Order::C, Where::Device), InvalidArgument);
  }
}

TEST_CASE("SmartArray: several device steps transfer once", "[smart][host-only]") {
  HostControlsGuard guard;
  const HostArray h = iota_host({64});
  std::int64_t before = copies();
  SmartArray a(h);  // a host-to-host copy, made without the backend
  CHECK(copies() == before);

  before = copies();
  for (int step = 1; step <= 5; ++step) device_step(a, step);
  CHECK(copies() == before + 1);  // host -> device, once

  before = copies();
  CHECK(host_values(a.get_host()) == std::vector<double>(64, pattern(5)));
  CHECK(copies() == before + 1);  // device -> host, once
  before = copies();
  (void)a.get_host();
  (void)a.get_device();  // both sides are up to date: nothing to do
  CHECK(copies() == before);

  // Writing on the host makes the device stale again: one more transfer on the next device use.
  a.get_host().fill(2.0);
  a.mark_changed(Where::Host);
  before = copies();
  CHECK(device_values(a.get_device()) == std::vector<double>(64, 2.0));
  CHECK(copies() == before + 2);  // host -> device, and device_values' own copy back
}

TEST_CASE("SmartArray: where = Device transfers at construction only", "[smart][host-only]") {
  HostControlsGuard guard;
  const HostArray h = iota_host({8});
  std::int64_t before = copies();
  SmartArray a(h, true, Where::Device);
  CHECK(copies() == before + 1);
  before = copies();
  (void)a.get_device();
  (void)a.get_host();
  CHECK(copies() == before);

  before = copies();
  SmartArray b(Shape{8}, f8(), Order::C, Where::Device);
  CHECK(copies() == before);
  (void)b.get_device();
  CHECK(copies() == before);
  (void)b.get_host();
  CHECK(copies() == before + 1);
}

TEST_CASE("SmartArray: concurrent get(Device) transfers once", "[smart][host-only][concurrency]") {
  HostControlsGuard guard;
  SmartArray a(iota_host({1024}));
  const std::int64_t before = copies();
  std::atomic<int> go{0};
  std::vector<std::thread> threads;
  std::vector<const void*> seen(8);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] {
      ++go;
      while (go.load() < 8) std::this_thread::yield();
      seen[i] = a.get_device().data();
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(copies() == before + 1);
  for (const void* p : seen) CHECK(p == seen.front());
  CHECK(device_values(a.get_device()) == iota_vec(1024));
}

TEST_CASE("SmartArray: a Where outside Host and Device is refused everywhere (Numba: ValueError)",
          "[smart][errors]") {
  const auto bad = static_cast<Where>(7);
  const std::string what = "where must be Where::Host or Where::Device, got 7";
  const std::vector<float> values{1, 2, 3};
  const HostArray h = devmem::HostArray::view(std::span<const float>(values));
  CHECK_THROWS_MATCHES(SmartArray(h, true, bad), InvalidArgument, Message("SmartArray: " + what));
  CHECK_THROWS_MATCHES(SmartArray(Shape{3}, devmem::dtype_of<float>(), devmem::Order::C, bad),
                       InvalidArgument, Message("SmartArray: " + what));
  SmartArray s(h);
  (void)s.get_device();
  s.get_host().at<float>(0) = 42.0f;
  s.mark_changed(Where::Host);
  CHECK_THROWS_MATCHES(s.get(bad), InvalidArgument, Message("SmartArray::get: " + what));
  CHECK_THROWS_MATCHES(s.mark_changed(bad), InvalidArgument,
                       Message("SmartArray::mark_changed: " + what));
  CHECK_THROWS_MATCHES(s.is_allocated(bad), InvalidArgument,
                       Message("SmartArray::is_allocated: " + what));
  CHECK_THROWS_MATCHES(s.is_valid(bad), InvalidArgument, Message("SmartArray::is_valid: " + what));
  CHECK(std::string(devmem::to_string(bad)) == "invalid");
  // Nothing was lost: the host side is still the newest, and the device gets it.
  CHECK(s.is_valid(Where::Host));
  CHECK_FALSE(s.is_valid(Where::Device));
  CHECK(s.get_device().to_vector<float>() == std::vector<float>{42.0f, 2.0f, 3.0f});
}

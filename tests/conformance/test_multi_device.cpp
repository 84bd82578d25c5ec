// The multi-device group (docs/scaling-out.md#several-devices): device enumeration, the device
// scope, peer access, and copies between arrays of two devices, direct and staged, contiguous and
// strided. Every test here needs two devices: they are hidden ([.]) from the suite's ordinary run
// and run by the CTest entries of the group (host-2-devices, host-4-devices-staged,
// <backend>-multi-device), which set DEVMEM_CONFORMANCE_MIN_DEVICES=2 so that a backend with one
// device reports them "Not Run" (main.cpp). [host-only] tests drive the host backend's controls.
#include "support.hpp"

#include <devmem/host_controls.hpp>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

/// The group's tests run only with two devices or more (see the file comment); a run that reaches
/// one with fewer is misconfigured, and fails.
void require_two_devices() {
  REQUIRE(devmem::device_count() >= 2);
}

/// A device array of `shape` on `device` whose element at C-order position k is start + k.
DeviceArray iota_on(int device, const Shape& shape, Order order = Order::C, double start = 0) {
  const devmem::DeviceScope scope(device);
  return iota_device<double>(shape, order, {}, start);
}

/// A new stream of `device`.
devmem::Stream stream_on(int device) {
  const devmem::DeviceScope scope(device);
  return devmem::stream();
}

/// A device array of `shape` on `device` filled with `value`.
DeviceArray filled_on(int device, const Shape& shape, double value, Order order = Order::C) {
  const devmem::DeviceScope scope(device);
  DeviceArray d = devmem::device_array<double>(shape, order);
  d.fill(value);
  return d;
}

/// Restores the host backend's per-device controls (peer access, capacities, failures) and waits
/// for every device's work, so that each [host-only] test starts from the same state.
class DevicesGuard {
 public:
  DevicesGuard() : capacity_(devmem::host::device_memory_capacity()) { settle(); }
  DevicesGuard(const DevicesGuard&) = delete;
  DevicesGuard& operator=(const DevicesGuard&) = delete;
  ~DevicesGuard() {
    devmem::host::clear_failures();
    devmem::host::reset_peer_access();
    try {
      devmem::host::set_device_memory_capacity(capacity_);  // clears per-device capacities too
      settle();
    } catch (...) {  // a destructor must not throw; the test has failed already
    }
  }

 private:
  static void settle() {
    devmem::host::clear_failures();
    for (int d = 0; d < devmem::device_count(); ++d) {
      const auto ctx = devmem::context_for_device(d);
      ctx->synchronize();
      ctx->flush_deallocations();
    }
  }
  int64_t capacity_;
};

}  // namespace

// ---- Devices
// --------------------------------------------------------------------------------------

TEST_CASE("multi-device: gpus() lists every device with its properties", "[multi-device][.]") {
  require_two_devices();
  const std::vector<devmem::DeviceInfo> devices = devmem::gpus();
  REQUIRE(devices.size() == static_cast<std::size_t>(devmem::device_count()));
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const int id = static_cast<int>(i);
    CHECK(devices[i].id == id);
    const devmem::DeviceProperties props = devmem::context_for_device(id)->properties();
    CHECK(devices[i].name == props.name);
    CHECK(devices[i].properties.name == props.name);
    CHECK(devices[i].properties.architecture == props.architecture);
    CHECK(devices[i].properties.total_memory == props.total_memory);
    CHECK(devices[i].properties.total_memory > 0);
  }
  devmem::select_device(1);
  CHECK(devmem::get_current_device().id == 1);
  CHECK(devmem::current_context()->device() == 1);
  devmem::select_device(0);
  CHECK(devmem::get_current_device().id == 0);
}

TEST_CASE("multi-device: a device scope selects a device and restores the previous one",
          "[multi-device][.]") {
  require_two_devices();
  devmem::select_device(0);
  {
    const devmem::DeviceScope outer = devmem::device_scope(1);
    CHECK(outer.device() == 1);
    CHECK(outer.previous() == 0);
    CHECK(devmem::current_device() == 1);
    CHECK(devmem::current_context()->device() == 1);
    const DeviceArray on_one = devmem::device_array<double>(Shape{4});
    CHECK(on_one.context()->device() == 1);
    {
      const devmem::DeviceScope inner(0);
      CHECK(devmem::current_device() == 0);
    }
    CHECK(devmem::current_device() == 1);
  }
  CHECK(devmem::current_device() == 0);

  SECTION("also when the scope is left by an exception") {
    const auto leave_by_exception = [] {
      const devmem::DeviceScope scope(1);
      CHECK(devmem::current_device() == 1);
      throw std::runtime_error("leaving the scope");
    };
    CHECK_THROWS_AS(leave_by_exception(), std::runtime_error);
    CHECK(devmem::current_device() == 0);
  }
  SECTION("a device that does not exist is refused and nothing changes") {
    const int n = devmem::device_count();
    const auto make_scope = [](int device) { const devmem::DeviceScope scope(device); };
    REQUIRE_THROWS_MATCHES(
        make_scope(n), devmem::NoDevice,
        Message("select_device: device " + std::to_string(n) + " does not exist (backend '" +
                devmem::backend_name() + "' has " + std::to_string(n) + " devices)"));
    CHECK_THROWS_AS(make_scope(-1), devmem::NoDevice);
    CHECK(devmem::current_device() == 0);
  }
  SECTION("each thread has its own current device") {
    const devmem::DeviceScope scope(1);
    int seen = -1;
    std::thread([&seen] { seen = devmem::current_device(); }).join();
    CHECK(seen == 0);
    CHECK(devmem::current_device() == 1);
  }
}

TEST_CASE("multi-device: peer access", "[multi-device][.]") {
  require_two_devices();
  const auto ctx0 = devmem::context_for_device(0);
  CHECK_FALSE(ctx0->can_access_peer(0));  // a device is not its own peer
  const int n = devmem::device_count();
  REQUIRE_THROWS_MATCHES(
      ctx0->can_access_peer(n), devmem::NoDevice,
      Message("can_access_peer: device " + std::to_string(n) + " does not exist (backend '" +
              devmem::backend_name() + "' has " + std::to_string(n) + " devices)"));
  CHECK_THROWS_AS(ctx0->enable_peer_access(-1), devmem::NoDevice);
  CHECK_THROWS_AS(ctx0->disable_peer_access(n), devmem::NoDevice);
  CHECK(ctx0->can_access_peer(1) == devmem::active_backend().can_access_peer(0, 1));
  if (ctx0->can_access_peer(1)) {
    // Idempotent both ways, although the vendors report "already enabled" / "not enabled".
    ctx0->enable_peer_access(1);
    ctx0->enable_peer_access(1);
    ctx0->disable_peer_access(1);
    ctx0->disable_peer_access(1);
    ctx0->enable_peer_access(1);
  } else {
    CHECK_THROWS_AS(ctx0->enable_peer_access(1), devmem::BackendError);
    ctx0->disable_peer_access(1);  // nothing to withdraw: not an error
  }
}

// ---- Copies between devices ---------------------------------------------------------------------

TEST_CASE("multi-device: copies between arrays of two devices, both directions",
          "[multi-device][.]") {
  require_two_devices();
  const Shape shape{37, 5};
  SECTION("on the default streams") {
    const DeviceArray a = iota_on(0, shape);
    const DeviceArray b = filled_on(1, shape, -1.0);
    b.copy_to_device(a);
    CHECK(device_values(b) == iota_vec(185));
    const DeviceArray c = filled_on(0, shape, -1.0);
    const DeviceArray d = iota_on(1, shape, Order::C, 1000);
    c.copy_to_device(d);
    CHECK(device_values(c) == iota_vec(185, 1000.0));
  }
  SECTION("on streams of each device, ordered after the source's work") {
    const devmem::Stream s0 = stream_on(0);
    const devmem::Stream s1 = stream_on(1);
    const DeviceArray a = iota_on(0, shape).bind(s0);
    const DeviceArray b = filled_on(1, shape, -1.0).bind(s1);
    // Written on the source's stream and copied without waiting: the copy must see the fill.
    a.fill(7.0);
    b.copy_to_device(a);
    // Later work on the source's stream must not overwrite what the copy reads.
    a.fill(8.0);
    s1.synchronize();
    s0.synchronize();
    CHECK(device_values(b) == std::vector<double>(185, 7.0));
    CHECK(device_values(a) == std::vector<double>(185, 8.0));
  }
  SECTION("other dtypes, and a 0-d and an empty array") {
    DeviceArray src;
    {
      const devmem::DeviceScope scope(1);
      src = iota_device<std::int32_t>(Shape{1000});
    }
    DeviceArray dst;
    {
      const devmem::DeviceScope scope(0);
      dst = devmem::device_array<std::int32_t>(Shape{1000});
    }
    dst.copy_to_device(src);
    CHECK(device_values<std::int32_t>(dst) == iota_vec<std::int32_t>(1000));
    const DeviceArray empty0 = filled_on(0, Shape{0, 3}, 0.0);
    const DeviceArray empty1 = filled_on(1, Shape{0, 3}, 0.0);
    empty1.copy_to_device(empty0);
    const DeviceArray one0 = iota_on(0, Shape{}, Order::C, 42);
    const DeviceArray one1 = filled_on(1, Shape{}, 0.0);
    one1.copy_to_device(one0);
    CHECK(device_values(one1) == std::vector<double>{42.0});
  }
  SECTION("mismatched dtype or shape is refused before anything moves") {
    const DeviceArray a = iota_on(0, Shape{4});
    const DeviceArray b = filled_on(1, Shape{5}, -1.0);
    REQUIRE_THROWS_MATCHES(b.copy_to_device(a), devmem::InvalidArgument,
                           Message("copy_to_device: shape mismatch: source (4,), destination "
                                   "(5,)"));
    DeviceArray f;
    {
      const devmem::DeviceScope scope(1);
      f = devmem::device_array<float>(Shape{4});
    }
    REQUIRE_THROWS_MATCHES(f.copy_to_device(a), devmem::InvalidArgument,
                           Message("copy_to_device: dtype mismatch: source is float64, "
                                   "destination is float32"));
    CHECK(device_values(b) == std::vector<double>(5, -1.0));
  }
}

TEST_CASE("multi-device: strided views on either side of a copy between devices",
          "[multi-device][.]") {
  require_two_devices();
  SECTION("a strided source into a contiguous destination") {
    const DeviceArray base = iota_on(0, Shape{8, 10});
    const DeviceArray view = base.slice({Slice{1, 7, 2}, Slice{std::nullopt, std::nullopt, 3}});
    const DeviceArray dst = filled_on(1, view.shape(), -1.0);
    dst.copy_to_device(view);
    CHECK(device_values(dst) == gather_iota(view.shape(), view.strides(), view.layout().offset));
  }
  SECTION("a contiguous source into a strided destination: the gaps stay untouched") {
    const DeviceArray src = iota_on(1, Shape{3, 4}, Order::C, 100);
    const DeviceArray base = filled_on(0, Shape{6, 8}, -1.0);
    const DeviceArray view = base.slice({Slice{0, 6, 2}, Slice{0, 8, 2}});
    view.copy_to_device(src);
    const std::vector<double> all = device_values(base);
    for (int64_t r = 0; r < 6; ++r) {
      for (int64_t c = 0; c < 8; ++c) {
        const double expected =
            (r % 2 == 0 && c % 2 == 0) ? static_cast<double>(100 + (r / 2) * 4 + c / 2) : -1.0;
        CHECK(all[static_cast<std::size_t>(r * 8 + c)] == expected);
      }
    }
  }
  SECTION("C order into F order, and a broadcast source") {
    const DeviceArray src = iota_on(0, Shape{5, 7});
    const DeviceArray dst = filled_on(1, Shape{5, 7}, -1.0, Order::F);
    dst.copy_to_device(src);
    CHECK(device_values(dst) == iota_vec(35));
    DeviceArray broadcast;
    {
      const devmem::DeviceScope scope(1);
      broadcast = devmem::device_array(Shape{5, 7}, f8(), Strides{0, 8});
      broadcast[0].copy_to_device(iota_host(Shape{7}));
    }
    const DeviceArray dst0 = filled_on(0, Shape{5, 7}, -1.0);
    dst0.copy_to_device(broadcast);
    std::vector<double> expected;
    for (int r = 0; r < 5; ++r) {
      for (int c = 0; c < 7; ++c) expected.push_back(c);
    }
    CHECK(device_values(dst0) == expected);
  }
  SECTION("a broadcast destination is refused") {
    const DeviceArray src = iota_on(0, Shape{5, 7});
    DeviceArray broadcast;
    {
      const devmem::DeviceScope scope(1);
      broadcast = devmem::device_array(Shape{5, 7}, f8(), Strides{0, 8});
    }
    REQUIRE_THROWS_MATCHES(broadcast.copy_to_device(src), devmem::InvalidArgument,
                           Message("copy_to_device: the destination has a zero stride on axis 0 "
                                   "of length 5 (a broadcast array cannot be written element by "
                                   "element)"));
  }
}

TEST_CASE("multi-device: mapped host memory on either side of a copy between devices",
          "[multi-device][.]") {
  require_two_devices();
  const devmem::MappedArray mapped = [] {
    const devmem::DeviceScope scope(0);
    return devmem::mapped_array<double>(Shape{6, 4});
  }();
  mapped.copy_from(iota_host(Shape{6, 4}));
  const DeviceArray dst = filled_on(1, Shape{6, 4}, -1.0);
  dst.copy_to_device(mapped.device());
  CHECK(device_values(dst) == iota_vec(24));
  const DeviceArray src = iota_on(1, Shape{3, 4}, Order::C, 50);
  mapped.device().slice(0, 0, 6, 2).copy_to_device(src);
  const std::vector<double> all = mapped.to_vector<double>();
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t c = 0; c < 4; ++c) {
      const double expected = static_cast<double>(r % 2 == 0 ? 50 + (r / 2) * 4 + c : r * 4 + c);
      CHECK(all[static_cast<std::size_t>(r * 4 + c)] == expected);
    }
  }
}

TEST_CASE("multi-device: a large copy between devices (several staging chunks when staged)",
          "[multi-device][.]") {
  require_two_devices();
  // 9 MiB + 8 bytes: three 4 MiB chunks when staged, the last one partial.
  const int64_t n = (int64_t{9} * kMiB + 8) / 8;
  const DeviceArray a = iota_on(0, Shape{n});
  const DeviceArray b = filled_on(1, Shape{n}, -1.0);
  b.copy_to_device(a);
  CHECK(device_values(b) == iota_vec(n));
  // And a strided view of a large array, back to device 0.
  const DeviceArray every_other = b.slice(0, std::nullopt, std::nullopt, 2);
  const DeviceArray c = filled_on(0, every_other.shape(), -1.0);
  c.copy_to_device(every_other);
  const std::vector<double> got = device_values(c);
  REQUIRE(got.size() == static_cast<std::size_t>((n + 1) / 2));
  bool all_match = true;
  for (std::size_t i = 0; i < got.size(); ++i) all_match = all_match && got[i] == 2.0 * double(i);
  CHECK(all_match);
}

// ---- Arrays, streams and events of different devices in one call
// ---------------------------------

TEST_CASE("multi-device: arrays, streams and events of two devices mixed in one call are refused",
          "[multi-device][.]") {
  require_two_devices();
  devmem::Stream s1;
  devmem::Event e1;
  {
    const devmem::DeviceScope scope(1);
    s1 = devmem::stream();
    e1 = s1.record();
  }
  const DeviceArray a1 = iota_on(1, Shape{4});
  const devmem::DeviceScope scope(0);
  const DeviceArray a0 = iota_on(0, Shape{4});
  const devmem::Event e0 = devmem::default_stream().record();
  const std::string backend = devmem::backend_name();
  const std::string stream_error = "the stream belongs to device 1 of backend '" + backend +
                                   "' but the array is on device 0 of backend '" + backend + "'";
  REQUIRE_THROWS_MATCHES(a0.copy_to_device(a1, s1), devmem::InvalidArgument,
                         Message("copy_to_device: " + stream_error));
  HostArray h(Shape{4}, f8());
  REQUIRE_THROWS_MATCHES(a0.copy_to_host(h, s1), devmem::InvalidArgument,
                         Message("copy_to_host: " + stream_error));
  REQUIRE_THROWS_MATCHES(a0.copy_to_device(h, s1), devmem::InvalidArgument,
                         Message("copy_to_device: " + stream_error));
  REQUIRE_THROWS_MATCHES((void)a0.bind(s1), devmem::InvalidArgument,
                         Message("bind: " + stream_error));
  REQUIRE_THROWS_MATCHES(devmem::default_stream().wait(e1), devmem::InvalidArgument,
                         Message("Stream::wait: the event belongs to device 1 but the stream to "
                                 "device 0"));
  devmem::Event unrecorded;  // of device 0, the current one
  REQUIRE_THROWS_MATCHES(unrecorded.record(s1), devmem::InvalidArgument,
                         MessageStartsWith("Event::record: the stream belongs to device 1 of "
                                           "backend '" +
                                           backend + "'"));
  s1.synchronize();
  REQUIRE_THROWS_MATCHES((void)devmem::elapsed_ms(e0, e1), devmem::InvalidArgument,
                         Message("elapsed_ms: the events belong to devices 0 and 1"));
  // Nothing was written.
  CHECK(device_values(a0) == iota_vec(4));
}

// ---- The host backend's per-device controls --------------------------------------------------

TEST_CASE("multi-device: direct and staged copies between simulated devices",
          "[multi-device][host-only][.]") {
  require_two_devices();
  const DevicesGuard guard;
  devmem::Backend& backend = devmem::active_backend();
  const int64_t n = (int64_t{9} * kMiB) / 8;
  const DeviceArray a = iota_on(0, Shape{n});
  const DeviceArray b = filled_on(1, Shape{n}, -1.0);

  SECTION("with peer access: one peer copy, no page-locked staging") {
    devmem::host::set_peer_access(1, 0, true);
    CHECK(backend.can_access_peer(1, 0));
    const int64_t host_allocations = devmem::host::call_count(devmem::host::Call::HostAllocate);
    const int64_t copies = devmem::host::call_count(devmem::host::Call::Copy);
    b.copy_to_device(a);
    CHECK(devmem::host::call_count(devmem::host::Call::HostAllocate) == host_allocations);
    CHECK(devmem::host::call_count(devmem::host::Call::Copy) == copies + 1);
    CHECK(device_values(b) == iota_vec(n));
    // devmem enables the access once; withdrawn behind its back, it is enabled again.
    devmem::host::set_peer_access(1, 0, false);
    devmem::host::set_peer_access(1, 0, true);
    const DeviceArray c = filled_on(1, Shape{n}, -1.0);
    c.copy_to_device(a);
    CHECK(device_values(c) == iota_vec(n));
  }
  SECTION("without peer access: staged through page-locked memory, two buffers, three chunks") {
    devmem::host::set_peer_access(1, 0, false);
    CHECK_FALSE(backend.can_access_peer(1, 0));
    const int64_t host_allocations = devmem::host::call_count(devmem::host::Call::HostAllocate);
    const int64_t copies = devmem::host::call_count(devmem::host::Call::Copy);
    b.copy_to_device(a);
    CHECK(devmem::host::call_count(devmem::host::Call::HostAllocate) == host_allocations + 2);
    CHECK(devmem::host::call_count(devmem::host::Call::Copy) == copies + 6);  // 3 x (D2H + H2D)
    CHECK(device_values(b) == iota_vec(n));
    // The pair keeps its two buffers: the next copies allocate nothing (review 2, N15), and a
    // copy the other way has a pipeline of its own.
    devmem::host::set_peer_access(0, 1, false);
    const DeviceArray c = filled_on(1, Shape{n}, -2.0);
    c.copy_to_device(b);  // same device: no staging
    a.copy_to_device(c);  // 1 -> 0
    b.copy_to_device(a);
    CHECK(devmem::host::call_count(devmem::host::Call::HostAllocate) == host_allocations + 4);
    CHECK(device_values(b) == iota_vec(n));
    b.copy_to_device(a);
    CHECK(devmem::host::call_count(devmem::host::Call::HostAllocate) == host_allocations + 4);
    CHECK(devmem::context_for_device(0)->host_statistics().current_bytes == 8 * kMiB);
    // Freed on request once their last reads are done (and at exit).
    devmem::release_cached_buffers();
    for (int d = 0; d < 2; ++d) {
      devmem::context_for_device(d)->flush_deallocations();
      CHECK(devmem::context_for_device(d)->host_statistics().current_bytes == 0);
    }
  }
  SECTION("the backend refuses a peer copy without peer access") {
    devmem::host::set_peer_access(1, 0, false);
    void* const src = a.data();
    void* const dst = b.data();
    REQUIRE_THROWS_MATCHES(
        backend.enable_peer_access(1, 0), devmem::BackendError,
        MessageStartsWith("host enable_peer_access: PeerAccessUnsupported (217): "
                          "device 1 cannot access device 0"));
    REQUIRE_THROWS_MATCHES(backend.copy_peer(1, dst, 0, src, 64, nullptr), devmem::BackendError,
                           MessageStartsWith("host copy_peer: PeerAccessNotEnabled (705): device "
                                             "1 has no peer access to device 0"));
    // Allowed but not enabled yet: still refused; enabled: the copy runs.
    devmem::host::set_peer_access(1, 0, true);
    backend.disable_peer_access(1, 0);
    CHECK_THROWS_AS(backend.copy_peer(1, dst, 0, src, 64, nullptr), devmem::BackendError);
    backend.enable_peer_access(1, 0);
    backend.enable_peer_access(1, 0);  // idempotent
    backend.copy_peer(1, dst, 0, src, 64, nullptr);
    // Turning access off withdraws what was enabled.
    devmem::host::set_peer_access(1, 0, false);
    CHECK_THROWS_AS(backend.copy_peer(1, dst, 0, src, 64, nullptr), devmem::BackendError);
    // Each side must lie in its own device's memory.
    devmem::host::set_peer_access(1, 0, true);
    backend.enable_peer_access(1, 0);
    REQUIRE_THROWS_MATCHES(backend.copy_peer(1, src, 0, dst, 64, nullptr), devmem::BackendError,
                           MessageContains("must lie in memory of device 0"));
  }
  SECTION("invalid controls") {
    REQUIRE_THROWS_MATCHES(devmem::host::set_peer_access(1, 1, true), devmem::InvalidArgument,
                           Message("set_peer_access: device 1 cannot be its own peer"));
    REQUIRE_THROWS_MATCHES(devmem::host::set_peer_access(0, 64, true), devmem::InvalidArgument,
                           Message("set_peer_access: device 64 is outside [0, 64)"));
    CHECK_FALSE(devmem::host::peer_access(1, 1));
    REQUIRE_THROWS_MATCHES(devmem::host::set_device_memory_capacity(1, -1), devmem::InvalidArgument,
                           Message("set_device_memory_capacity: capacity of device 1 must be >= "
                                   "0, got -1"));
    REQUIRE_THROWS_MATCHES(devmem::host::fail_nth_on_device(-2, devmem::host::Call::Copy, 1),
                           devmem::InvalidArgument,
                           Message("fail_nth_on_device: device -2 is outside [0, 64)"));
  }
}

TEST_CASE("multi-device: each simulated device has its own capacity",
          "[multi-device][host-only][.]") {
  require_two_devices();
  const DevicesGuard guard;
  const int64_t used0 = devmem::host::device_memory_used(0);
  const int64_t used1 = devmem::host::device_memory_used(1);
  devmem::host::set_device_memory_capacity(1, used1 + kMiB);
  CHECK(devmem::host::device_memory_capacity(1) == used1 + kMiB);
  CHECK(devmem::host::device_memory_capacity(0) == devmem::host::device_memory_capacity());
  CHECK(devmem::active_backend().properties(1).total_memory == used1 + kMiB);
  CHECK(devmem::active_backend().memory_info(1).total == used1 + kMiB);
  {
    const devmem::DeviceScope scope(1);
    REQUIRE_THROWS_MATCHES((void)devmem::device_array<double>(Shape{2 * kMiB / 8}),
                           devmem::OutOfMemory, MessageContains("on device 1"));
  }
  // Device 0 is untouched by device 1's failure and still has its own room.
  CHECK(devmem::host::device_memory_used(0) == used0);
  CHECK(devmem::host::device_memory_used(1) == used1);
  {
    const DeviceArray big = filled_on(0, Shape{2 * kMiB / 8}, 1.0);
    CHECK(devmem::host::device_memory_used(0) >= used0 + 2 * kMiB);
  }
  // The capacity of every device clears the per-device one.
  devmem::host::set_device_memory_capacity(devmem::host::device_memory_capacity());
  CHECK(devmem::host::device_memory_capacity(1) == devmem::host::device_memory_capacity());
}

TEST_CASE("multi-device: fault injection for one simulated device",
          "[multi-device][host-only][.]") {
  require_two_devices();
  const DevicesGuard guard;
  devmem::host::fail_nth_on_device(1, devmem::host::Call::Allocate, 1,
                                   devmem::host::Status::MemoryAllocation, 2);
  // Device 0's allocations do not count toward the request.
  const DeviceArray on0 = filled_on(0, Shape{16}, 1.0);
  {
    const devmem::DeviceScope scope(1);
    CHECK_THROWS_AS((void)devmem::device_array<double>(Shape{16}), devmem::OutOfMemory);
    const DeviceArray on1 = devmem::device_array<double>(Shape{16});  // the request is used up
    CHECK(on1.context()->device() == 1);
  }
  CHECK(device_values(on0) == std::vector<double>(16, 1.0));
}

TEST_CASE("multi-device: a failure in the middle of a staged copy leaks nothing",
          "[multi-device][host-only][.]") {
  require_two_devices();
  const DevicesGuard guard;
  devmem::host::set_peer_access(1, 0, false);
  const int64_t n = (int64_t{9} * kMiB) / 8;  // three chunks: D2H, H2D, D2H (fails), ...
  const int64_t used0 = devmem::host::device_memory_used(0);
  const int64_t used1 = devmem::host::device_memory_used(1);
  {
    const DeviceArray a = iota_on(0, Shape{n});
    const DeviceArray b = filled_on(1, Shape{n}, -1.0);
    SECTION("on the default streams: the call reports it") {
      devmem::host::fail_nth_on_device(0, devmem::host::Call::Copy, 2);
      REQUIRE_THROWS_MATCHES(
          b.copy_to_device(a), devmem::BackendError,
          Message("copy_to_device: staged copy of " + std::to_string(n * 8) +
                  " bytes from device 0 to device 1 failed at chunk 2 of 3: host copy: Injected "
                  "(999): injected failure of call 2 of Copy (fail_nth)"));
    }
    SECTION("on streams: the destination's next synchronize reports it") {
      const devmem::Stream s0 = stream_on(0);
      const devmem::Stream s1 = stream_on(1);
      devmem::host::fail_nth_on_device(1, devmem::host::Call::Copy, 2);
      b.bind(s1).copy_to_device(a.bind(s0));
      CHECK_THROWS_AS(s1.synchronize(), devmem::BackendError);
      s0.synchronize();
    }
  }
  // The staging buffers are held by both devices' keep-alives until their streams are done, or
  // kept for the pair when the copy was enqueued whole (then freed on request).
  for (int d = 0; d < 2; ++d) devmem::context_for_device(d)->synchronize();
  devmem::release_cached_buffers();
  for (int d = 0; d < 2; ++d) {
    const auto ctx = devmem::context_for_device(d);
    ctx->flush_deallocations();
    CHECK(ctx->host_statistics().current_bytes == 0);
  }
  CHECK(devmem::host::device_memory_used(0) == used0);
  CHECK(devmem::host::device_memory_used(1) == used1);
}

TEST_CASE("multi-device: an invalid DEVMEM_HOST_PEER_ACCESS is reported by name",
          "[multi-device][host-only][.]") {
  std::string output;
  const int rc =
      run_self_with_env("DEVMEM_HOST_DEVICE_COUNT=2 DEVMEM_HOST_PEER_ACCESS=some",
                        "multi-device env child: an invalid DEVMEM_HOST_PEER_ACCESS", output);
  INFO(output);
  CHECK(rc == 0);
  CHECK_THAT(output, Catch::Matchers::Contains("All tests passed"));
}

TEST_CASE("multi-device env child: an invalid DEVMEM_HOST_PEER_ACCESS", "[.][env-child]") {
  const std::string message =
      "DEVMEM_HOST_PEER_ACCESS: invalid value 'some' (expected 'all' or 'none')";
  REQUIRE_THROWS_MATCHES(devmem::host::peer_access(0, 1), devmem::InvalidArgument,
                         Message(message));
  REQUIRE_THROWS_MATCHES(devmem::context_for_device(1)->can_access_peer(0), devmem::InvalidArgument,
                         Message(message));
  // A copy between the devices reports it before anything moves.
  const DeviceArray a = iota_on(0, Shape{8});
  const DeviceArray b = filled_on(1, Shape{8}, -1.0);
  REQUIRE_THROWS_MATCHES(b.copy_to_device(a), devmem::InvalidArgument, Message(message));
  CHECK(device_values(b) == std::vector<double>(8, -1.0));
  // Explicit settings do not need the variable.
  devmem::host::set_peer_access(1, 0, false);
  b.copy_to_device(a);
  CHECK(device_values(b) == iota_vec(8));
  devmem::host::reset_peer_access();
}

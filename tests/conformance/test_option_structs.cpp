// The option-struct forms of to_device and mapped_array (ToDeviceOptions, MappedArrayOptions;
// docs/migration.md) do what the positional forms do with the same values, and the calls that
// meant a positional form before the option structs existed (to_device(x, {}),
// mapped_array(shape, dtype, {})) still mean it.
#include "support.hpp"

#include <devmem/memory_adaptors.hpp>

using namespace conformance;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::MappedArrayOptions;
using devmem::MemoryEvent;
using devmem::ToDeviceOptions;

TEST_CASE("to_device with ToDeviceOptions: what the positional form does", "[transfers]") {
  const std::vector<double> values = iota_vec(6);
  const HostArray host = HostArray::view(values).reshape({2, 3});
  const devmem::Stream s = devmem::stream();

  SECTION("a new array on a stream, copied") {
    const DeviceArray a = devmem::to_device(host, {.stream = s});
    CHECK(a.stream() == s);
    s.synchronize();
    CHECK(a.shape() == Shape{2, 3});
    CHECK(a.strides() == devmem::to_device(host, s).strides());
    CHECK(a.to_vector<double>() == values);
  }
  SECTION("copy = false allocates only") {
    const DeviceArray a = devmem::to_device(host, ToDeviceOptions{.copy = false});
    const DeviceArray positional = devmem::to_device(host, {}, false);
    CHECK(a.shape() == positional.shape());
    CHECK(a.strides() == positional.strides());
    CHECK(a.dtype() == positional.dtype());
  }
  SECTION("into an existing array, which is returned") {
    const DeviceArray target = devmem::device_array<double>({2, 3});
    const DeviceArray r = devmem::to_device(host, {.to = &target});
    CHECK(r.data() == target.data());
    CHECK(target.to_vector<double>() == values);
    const DeviceArray wrong = devmem::device_array<double>({3, 2});
    CHECK_THROWS_AS(devmem::to_device(host, {.to = &wrong}), devmem::InvalidArgument);
  }
  SECTION("a range of elements") {
    const DeviceArray a = devmem::to_device(values, {.stream = s});
    CHECK(a.stream() == s);
    s.synchronize();
    CHECK(a.shape() == Shape{6});
    CHECK(a.to_vector<double>() == values);
  }
  SECTION("a record, new or into a 0-d array of its dtype") {
    const devmem::DeviceRecord<double> record = devmem::to_device(2.5, {.stream = s});
    CHECK(record.get() == 2.5);
    const devmem::DeviceRecord<double> into = devmem::to_device(7.0, {.to = &record.array()});
    CHECK(into.data() == record.data());
    CHECK(record.get() == 7.0);
    static_cast<void>(devmem::to_device(9.0, {.copy = false, .to = &record.array()}));
    CHECK(record.get() == 7.0);
    const DeviceArray not_0d = devmem::device_array<double>({1});
    CHECK_THROWS_AS(devmem::to_device(1.0, {.to = &not_0d}), devmem::InvalidArgument);
    const DeviceArray other_dtype = devmem::device_array(Shape{}, f4());
    CHECK_THROWS_AS(devmem::to_device(1.0, {.to = &other_dtype}), devmem::InvalidArgument);
  }
  SECTION("to_device(x, {}) still means the default stream") {
    CHECK_FALSE(devmem::to_device(host, {}).stream().is_specified());
    CHECK_FALSE(devmem::to_device(values, {}).stream().is_specified());
    CHECK(devmem::to_device(4.0, {}).get() == 4.0);
    CHECK(devmem::to_device(host, {}).to_vector<double>() == values);
  }
}

TEST_CASE("mapped_array with MappedArrayOptions: what the positional form does", "[host][mapped]") {
  SECTION("strides, order and stream") {
    const devmem::Stream s = devmem::stream();
    const devmem::MappedArray f =
        devmem::mapped_array(Shape{2, 3}, i4(), {.order = Order::F, .stream = s});
    CHECK(f.kind() == devmem::HostMemoryKind::Mapped);
    CHECK(f.strides() == devmem::mapped_array(Shape{2, 3}, i4(), {}, Order::F).strides());
    CHECK(f.stream() == s);
    CHECK(f.device().stream() == s);
    f.device().fill(std::int32_t{3});
    s.synchronize();
    CHECK(f.to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 3));
    const devmem::MappedArray strided =
        devmem::mapped_array(Shape{3}, f8(), MappedArrayOptions{.strides = {16}});
    CHECK(strided.strides() == Strides{16});
    const devmem::MappedArray typed = devmem::mapped_array<float>(Shape{4}, {.order = Order::C});
    CHECK(typed.dtype() == f4());
  }
  SECTION("mapped_array(shape, dtype, {}) and {strides...} still mean the positional form") {
    const devmem::MappedArray m = devmem::mapped_array(Shape{2, 3}, f8(), {});
    CHECK(m.strides() == Strides{24, 8});
    CHECK_FALSE(m.stream().is_specified());
    CHECK(devmem::mapped_array(Shape{2}, f8(), {16}).strides() == Strides{16});
    CHECK(devmem::mapped_array(Shape{2, 3}, f8(), {}, Order::F).strides() == Strides{8, 16});
  }
  SECTION("portable and wc reach the allocation as the positional flags do") {
    std::vector<MemoryEvent> events;
    const MemoryStateGuard mem;
    const auto& ctx = mem.context();
    ctx->set_memory_manager(std::make_shared<devmem::LoggingAdaptor>(
        *ctx, nullptr, [&events](const MemoryEvent& e) { events.push_back(e); }));
    const auto flags_of_last_host_allocation = [&] {
      for (auto e = events.rbegin(); e != events.rend(); ++e) {
        if (e->operation == MemoryEvent::Operation::HostAllocate) return e->flags;
      }
      FAIL("no host allocation was logged");
      return devmem::HostAllocFlags::None;
    };
    for (const bool portable : {false, true}) {
      for (const bool wc : {false, true}) {
        CAPTURE(portable, wc);
        {
          // The type named: g++ 12 finds {.portable = ..., .wc = ...} ambiguous (memory.hpp).
          const auto m = devmem::mapped_array(Shape{4}, f8(),
                                              MappedArrayOptions{.portable = portable, .wc = wc});
        }
        const devmem::HostAllocFlags named = flags_of_last_host_allocation();
        { const auto m = devmem::mapped_array(Shape{4}, f8(), {}, Order::C, {}, portable, wc); }
        CHECK(named == flags_of_last_host_allocation());
        CHECK(devmem::has_flag(named, devmem::HostAllocFlags::Mapped));
        CHECK(devmem::has_flag(named, devmem::HostAllocFlags::Portable) == portable);
        CHECK(devmem::has_flag(named, devmem::HostAllocFlags::WriteCombined) == wc);
      }
    }
    ctx->flush_deallocations();
  }
}

// Bad-input catalogue, device arrays: allocation, transfers, element access, shape
// changes and streams of another device, each with the exact exception type and message.
#include "core/array_access.hpp"  // white-box: arrays over crafted layouts
#include "support.hpp"

namespace {

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::InvalidArgument;

}  // namespace

TEST_CASE("bad input, arrays: allocation", "[bad-input][allocation]") {
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{-1}, f8()), InvalidArgument,
                         Message("device_array: negative dimension -1 in shape (-1,)"));
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2, 3}, f8(), Strides{8}), InvalidArgument,
                         Message("device_array: 1 strides given for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2, 3}, f8(), {}, Order::A), InvalidArgument,
                         Message("device_array: order must be C or F, got 'A'"));
  REQUIRE_THROWS_MATCHES(devmem::pinned_array(Shape{2, -3}, f8()), InvalidArgument,
                         Message("pinned_array: negative dimension -3 in shape (2, -3)"));
  REQUIRE_THROWS_MATCHES(devmem::mapped_array(Shape{4}, f8(), Strides{8, 8}), InvalidArgument,
                         Message("mapped_array: 2 strides given for 1 dimensions"));
}

TEST_CASE("bad input, arrays: transfers", "[bad-input][transfer]") {
  const DeviceArray d = iota_device(Shape{4});
  const std::vector<double> five(5, 1.0);
  const DeviceArray to = devmem::device_array<double>(Shape{5});
  REQUIRE_THROWS_MATCHES(devmem::to_device(iota_host(Shape{4}), {}, true, &to), InvalidArgument,
                         Message("to_device: shape mismatch: source (4,), `to` (5,)"));
  const DeviceArray to_f4 = devmem::device_array<float>(Shape{4});
  REQUIRE_THROWS_MATCHES(devmem::to_device(iota_host(Shape{4}), {}, true, &to_f4), InvalidArgument,
                         Message("to_device: dtype mismatch: source is float64, `to` is float32"));
  REQUIRE_THROWS_MATCHES(d.copy_to_host(HostArray(Shape{5}, f8())), InvalidArgument,
                         Message("copy_to_host: shape mismatch: source (4,), destination (5,)"));
  REQUIRE_THROWS_MATCHES(d.copy_to_host(HostArray(Shape{4}, f4())), InvalidArgument,
                         Message("copy_to_host: dtype mismatch: source is float64, destination "
                                 "is float32"));
  const std::vector<double> constant(4, 0.0);
  REQUIRE_THROWS_MATCHES(
      d.copy_to_host(HostArray::view(static_cast<const void*>(constant.data()), Shape{4}, f8())),
      InvalidArgument, Message("copy_to_host: the destination host array is read-only"));
  REQUIRE_THROWS_MATCHES(d.copy_to_device(HostArray(Shape{2, 2}, f8())), InvalidArgument,
                         Message("copy_to_device: shape mismatch: source (2, 2), destination "
                                 "(4,)"));
  REQUIRE_THROWS_MATCHES(d.copy_to_device(devmem::device_array<std::int64_t>(Shape{4})),
                         InvalidArgument,
                         Message("copy_to_device: dtype mismatch: source is int64, destination "
                                 "is float64"));
  const HostArray one(Shape{1}, f8());
  const HostArray broadcast =
      devmem::detail::ArrayAccess::make(devmem::detail::ArrayAccess::memory(one),
                                        devmem::layout::broadcast_to(one.layout(), Shape{4}), f8());
  REQUIRE_THROWS_MATCHES(d.copy_to_host(broadcast), InvalidArgument,
                         Message("copy_to_host: the destination has a zero stride on axis 0 of "
                                 "length 4 (a broadcast array cannot be written element by "
                                 "element)"));
}

TEST_CASE("bad input, arrays: element access and fills", "[bad-input][elements]") {
  const DeviceArray d = iota_device(Shape{4});
  REQUIRE_THROWS_MATCHES(d.item<double>(4), InvalidArgument,
                         Message("item: index 4 is out of bounds for axis 0 with size 4"));
  REQUIRE_THROWS_MATCHES(d.item<double>(-5), InvalidArgument,
                         Message("item: index -5 is out of bounds for axis 0 with size 4"));
  REQUIRE_THROWS_MATCHES(d.item<double>(0, 0), InvalidArgument,
                         Message("item: 2 indices given for an array of dimension 1"));
  REQUIRE_THROWS_MATCHES(d.item<float>(0), InvalidArgument,
                         Message("item: the array's dtype is float64, not float32"));
  REQUIRE_THROWS_MATCHES(d.set_item(std::int32_t{1}, 0), InvalidArgument,
                         Message("set_item: the array's dtype is float64, not int32"));
  REQUIRE_THROWS_MATCHES(d.fill(1.0F), InvalidArgument,
                         Message("fill: the array's dtype is float64, not float32"));
  REQUIRE_THROWS_MATCHES(d.memset(256), InvalidArgument,
                         Message("memset: byte value must be in 0..255, got 256"));
  REQUIRE_THROWS_MATCHES(d.memset(-1), InvalidArgument,
                         Message("memset: byte value must be in 0..255, got -1"));
  REQUIRE_THROWS_MATCHES(d.assign(HostArray(Shape{4}, f4())), InvalidArgument,
                         Message("assign: dtype mismatch: value is float32, array is float64"));
  REQUIRE_THROWS_MATCHES(d.assign(HostArray(Shape{1, 4}, f8())), InvalidArgument,
                         Message("assign: cannot assign a 2-d value to a 1-d array"));
  REQUIRE_THROWS_MATCHES(d.assign(HostArray(Shape{3}, f8())), InvalidArgument,
                         Message("assign: cannot broadcast shape (3,) to shape (4,)"));
  REQUIRE_THROWS_MATCHES(d.to_vector<float>(), InvalidArgument,
                         Message("to_vector: the array's dtype is float64, not float32"));
}

TEST_CASE("bad input, arrays: shape changes", "[bad-input][views]") {
  const DeviceArray d = iota_device(Shape{3, 4});
  REQUIRE_THROWS_MATCHES(d.reshape({5, 3}), InvalidArgument,
                         Message("reshape: cannot reshape array of size 12 into shape (5, 3)"));
  REQUIRE_THROWS_MATCHES(d.reshape({3, 4}, Order::K), InvalidArgument,
                         Message("reshape: order must be 'C', 'F' or 'A', got 'K'"));
  REQUIRE_THROWS_MATCHES(d.split(2), InvalidArgument,
                         Message("split: only 1-d arrays can be split, got ndim 2"));
  REQUIRE_THROWS_MATCHES(d.ravel().split(0), InvalidArgument,
                         Message("split: section must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(d[0][0].len(), InvalidArgument, Message("len: a 0-d array has no length"));
  REQUIRE_THROWS_MATCHES(d.view(devmem::dtype_of<std::array<char, 3>>()), InvalidArgument,
                         Message("view: when changing to a smaller itemsize, it must divide the "
                                 "original itemsize (3 does not divide 8)"));
  REQUIRE_THROWS_MATCHES(d.slice(1, 0, 4, 0), InvalidArgument,
                         Message("slice: slice step cannot be zero"));
  REQUIRE_THROWS_MATCHES(d.transpose({1, 1}), InvalidArgument,
                         Message("transpose: axes (1, 1) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(d.squeeze(0), InvalidArgument,
                         Message("squeeze: cannot select an axis to squeeze out which has size "
                                 "not equal to one (axis 0 has size 3)"));
  REQUIRE_THROWS_MATCHES(d.copy(static_cast<Order>('X')), InvalidArgument,
                         Message("copy: order must be 'C', 'F' or 'A', got 'X'"));
}

TEST_CASE("bad input, arrays: typed views of misaligned layouts", "[bad-input][views]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  const devmem::MemoryStatistics before = ctx->device_statistics();
  {
    // Odd strides given at allocation: element 0 is aligned, element 1 is not.
    const DeviceArray odd = devmem::device_array(Shape{3}, f8(), Strides{12});
    const DeviceArray odd_inner = devmem::device_array(Shape{2, 3}, f4(), Strides{20, 6});
    // view(DType) follows NumPy, which allows unaligned arrays: bytes 1..8 of each row as floats.
    const DeviceArray shifted = devmem::device_array(Shape{2, 12}, u1()).slice(1, 1, 9).view(f4());
    REQUIRE(shifted.shape() == Shape{2, 2});
    const DeviceArray rows_of_six =
        devmem::device_array(Shape{3, 6}, u1()).slice(1, 0, 4).view(i4());
    REQUIRE(rows_of_six.strides() == Strides{6, 4});
    // A record whose alignment (4) is below its itemsize (12): a "|V12" import has alignment 1,
    // so odd strides pass the import; the C++ type's dtype brings the alignment back.
    struct Record {
      std::int32_t a, b, c;
    };
    const DeviceArray storage = devmem::device_array(Shape{64}, u1());
    devmem::ArrayInterface iface;
    iface.shape = {3};
    iface.strides = {14};
    iface.typestr = "|V12";
    iface.data.pointer = storage.data();
    const DeviceArray records =
        devmem::as_device_array(iface, storage.owner()).view(devmem::dtype_of<Record>());
    const devmem::MemoryStatistics allocated = ctx->device_statistics();

    REQUIRE_THROWS_MATCHES(((void)odd.view<double, 1>()), InvalidArgument,
                           Message("DeviceArray::view<float64, 1>: byte stride 12 of axis 0 is not "
                                   "a multiple of the alignment 8 of dtype float64"));
    REQUIRE_THROWS_MATCHES(((void)odd_inner.view<const float, 2>()), InvalidArgument,
                           Message("DeviceArray::view<float32, 2>: byte stride 6 of axis 1 is not "
                                   "a multiple of the alignment 4 of dtype float32"));
    REQUIRE_THROWS_MATCHES(
        ((void)shifted.view<float, 2>()), InvalidArgument,
        Message("DeviceArray::view<float32, 2>: data pointer " + pointer_text(shifted.data()) +
                " is not aligned to 4 bytes for dtype float32"));
    REQUIRE_THROWS_MATCHES(((void)rows_of_six.view<std::int32_t, 2>()), InvalidArgument,
                           Message("DeviceArray::view<int32, 2>: byte stride 6 of axis 0 is not a "
                                   "multiple of the alignment 4 of dtype int32"));
    REQUIRE_THROWS_MATCHES(((void)records.view<Record, 1>()), InvalidArgument,
                           Message("DeviceArray::view<V12, 1>: byte stride 14 of axis 0 is not a "
                                   "multiple of the alignment 4 of dtype V12"));
    // The dtype and rank are checked first.
    REQUIRE_THROWS_MATCHES(((void)odd.view<float, 1>()), InvalidArgument,
                           Message("DeviceArray::view<float32, 1>: the array's dtype is float64, "
                                   "not float32"));

    // The refusals allocated nothing, and the arrays still work for copies, which move bytes.
    const devmem::MemoryStatistics after_views = ctx->device_statistics();
    CHECK(after_views.current_count == allocated.current_count);
    CHECK(after_views.total_count == allocated.total_count);
    odd.fill(2.5);
    CHECK(odd.to_vector<double>() == std::vector<double>(3, 2.5));
  }
  ctx->synchronize();
  ctx->flush_deallocations();
  const devmem::MemoryStatistics after = ctx->device_statistics();
  CHECK(after.current_count == before.current_count);
  CHECK(after.current_bytes == before.current_bytes);
}

TEST_CASE("bad input, arrays: streams and arrays of another device",
          "[bad-input][streams][multi-device]") {
  const int count = devmem::device_count();
  REQUIRE(count >= 1);
  if (count < 2) {
    // One device: nothing can be mixed up; the same calls with this device's stream succeed
    // (the host-2-devices run of this test checks the rejections).
    const devmem::Stream s = devmem::stream();
    const DeviceArray d = iota_device(Shape{4});
    const HostArray h(Shape{4}, f8());
    d.copy_to_host(h, s);
    s.synchronize();
    CHECK(h.to_vector<double>() == iota_vec(4));
    return;
  }
  devmem::select_device(1);
  const devmem::Stream other_stream = devmem::stream();
  const DeviceArray other_array = iota_device(Shape{4});
  const devmem::Event other_event = other_stream.record();
  devmem::select_device(0);
  const DeviceArray d = iota_device(Shape{4});
  const std::string backend = devmem::backend_name();
  REQUIRE_THROWS_MATCHES(d.fill(1.0, other_stream), InvalidArgument,
                         Message("fill: the stream belongs to device 1 of backend '" + backend +
                                 "' but the array is on device 0 of backend '" + backend + "'"));
  // A copy between the two devices' arrays is a peer copy (test_multi_device.cpp), but it runs on
  // a stream of the destination's device.
  REQUIRE_THROWS_MATCHES(
      d.copy_to_device(other_array, other_stream), InvalidArgument,
      Message("copy_to_device: the stream belongs to device 1 of backend '" + backend +
              "' but the array is on device 0 of backend '" + backend + "'"));
  REQUIRE_THROWS_MATCHES(devmem::default_stream().wait(other_event), InvalidArgument,
                         Message("Stream::wait: the event belongs to device 1 but the stream to "
                                 "device 0"));
}

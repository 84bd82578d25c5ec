// One element read to the host, untyped: DeviceArray::item_bytes (the typed item<T>() and the
// Python package's `d[i, j]` go through it). Its bytes, its stream ordering, and its refusals.
#include "support.hpp"

#include <devmem/managed.hpp>
#include <devmem/trace.hpp>

#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>

using namespace conformance;
using Catch::Matchers::Contains;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::Order;
using devmem::Shape;
using devmem::Slice;

namespace {

template <class T, std::size_t N>
T read_as(const DeviceArray& array, const std::array<std::int64_t, N>& index,
          const devmem::Stream& stream = {}) {
  std::array<std::byte, sizeof(T)> bytes{};
  array.item_bytes(index, bytes, stream);
  T value;
  std::memcpy(&value, bytes.data(), sizeof(T));
  return value;
}

}  // namespace

TEST_CASE("item_bytes: the element's bytes at every index of contiguous and strided views",
          "[item]") {
  const DeviceArray m = iota_device(Shape{3, 4});
  for (std::int64_t i = 0; i < 3; ++i) {
    for (std::int64_t j = 0; j < 4; ++j) {
      CHECK(read_as<double>(m, std::array{i, j}) == static_cast<double>(4 * i + j));
      CHECK(read_as<double>(m, std::array{i - 3, j - 4}) == static_cast<double>(4 * i + j));
    }
  }
  // A view with a reversed axis, a step and an offset: what NumPy's m[::-1, 1::2][i, j] is.
  const DeviceArray v = m.slice({Slice{{}, {}, -1}, Slice{1, {}, 2}});
  CHECK(read_as<double>(v, std::array<std::int64_t, 2>{0, 0}) == 9.0);
  CHECK(read_as<double>(v, std::array<std::int64_t, 2>{2, 1}) == 3.0);
  CHECK(read_as<double>(v.transpose(), std::array<std::int64_t, 2>{1, 0}) == 11.0);
  // A 0-d array: no index.
  const DeviceArray scalar = m.index(0, 1).index(0, 2);
  CHECK(read_as<double>(scalar, std::array<std::int64_t, 0>{}) == 6.0);
  // Any dtype, read as bytes: a 1-byte type and a reinterpreted view.
  const DeviceArray bytes = devmem::to_device(
      devmem::HostArray::view(std::vector<std::uint8_t>{7, 8, 9}.data(), Shape{3}, u1()));
  CHECK(read_as<std::uint8_t>(bytes, std::array<std::int64_t, 1>{-1}) == 9);
  const DeviceArray as_int = iota_device(Shape{4}).view(i8());
  std::int64_t expected = 0;
  const double three = 3.0;
  std::memcpy(&expected, &three, sizeof expected);
  CHECK(read_as<std::int64_t>(as_int, std::array<std::int64_t, 1>{3}) == expected);
}

TEST_CASE("item_bytes: ordered after earlier work on the stream it reads on", "[item][streams]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray a = devmem::device_array(Shape{1024}, f8(), {}, Order::C, s);
  // Written on s (asynchronously where the backend is), then read on s: the read comes after.
  a.copy_to_device(iota_host(Shape{1024}, Order::C, 1.0), s);
  CHECK(read_as<double>(a, std::array<std::int64_t, 1>{1023}) == 1024.0);
  // An explicit stream: written on the default stream's order, read on another stream after a
  // synchronize of the writer.
  const DeviceArray b = iota_device(Shape{16});
  b.fill(5.0, s);
  s.synchronize();
  const devmem::Stream other = devmem::stream();
  CHECK(read_as<double>(b, std::array<std::int64_t, 1>{15}, other) == 5.0);
}

TEST_CASE("item_bytes: mapped and managed memory", "[item]") {
  const devmem::MappedArray mapped = devmem::mapped_array<float>(Shape{4});
  for (std::int64_t i = 0; i < 4; ++i) mapped.at<float>(i) = 0.5F * static_cast<float>(i);
  CHECK(read_as<float>(mapped.device(), std::array<std::int64_t, 1>{3}) == 1.5F);
  if (devmem::current_context()->backend().supports_managed_memory(devmem::current_device())) {
    const devmem::ManagedArray managed = devmem::managed_array<double>({2, 2});
    managed.copy_to_device(iota_host(Shape{2, 2}, Order::C, 10.0));
    CHECK(read_as<double>(managed, std::array<std::int64_t, 2>{1, 0}) == 12.0);
  }
}

TEST_CASE("item_bytes: bad input names the values and leaves the array as it was",
          "[item][bad-input]") {
  const DeviceArray m = iota_device(Shape{3, 4});
  std::array<std::byte, 8> bytes{};
  REQUIRE_THROWS_MATCHES(m.item_bytes(std::array<std::int64_t, 2>{3, 0}, bytes),
                         devmem::InvalidArgument,
                         Message("item: index 3 is out of bounds for axis 0 with size 3"));
  REQUIRE_THROWS_MATCHES(m.item_bytes(std::array<std::int64_t, 2>{0, -5}, bytes),
                         devmem::InvalidArgument,
                         Message("item: index -5 is out of bounds for axis 1 with size 4"));
  REQUIRE_THROWS_MATCHES(m.item_bytes(std::array<std::int64_t, 1>{0}, bytes),
                         devmem::InvalidArgument,
                         Message("item: 1 indices given for an array of dimension 2"));
  std::array<std::byte, 4> small{};
  REQUIRE_THROWS_MATCHES(
      m.item_bytes(std::array<std::int64_t, 2>{0, 0}, small), devmem::InvalidArgument,
      Message("item: the destination has 4 bytes, an element of dtype float64 has 8"));
  const DeviceArray empty;  // no elements, no memory
  REQUIRE_THROWS_MATCHES(empty.item_bytes(std::array<std::int64_t, 1>{0}, bytes),
                         devmem::InvalidArgument,
                         Message("item: index 0 is out of bounds for axis 0 with size 0"));
  CHECK(m.to_vector<double>() == iota_vec(12));
}

TEST_CASE("item_bytes: the trace records the read as a copy", "[item][trace]") {
  char path[] = "/tmp/devmem-item-trace-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  const DeviceArray m = iota_device(Shape{8});
  {
    devmem::TraceSession session = devmem::trace_to(path);
    CHECK(read_as<double>(m, std::array<std::int64_t, 1>{7}) == 7.0);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  CHECK_THAT(text.str(), Contains("\"item\"") && Contains("\"d2h\""));
}

// Views and shape operations of DeviceArray: reshape, ravel, split, slice, index, operator[],
// transpose, T, squeeze, view(DType), element access, fill, memset, assign, copy, bind, len.
// Every view shares memory with its base and keeps the stream (docs/arrays-and-copies.md#views).
// One file although over 800 lines: each case checks a view operation against the same NumPy
// rules and helpers (iota arrays, gathered expectations), section by section as the docs list them.
#include "support.hpp"

#include <cstring>
#include <limits>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

const std::byte* bytes_of(const DeviceArray& a) {
  return static_cast<const std::byte*>(a.data());
}

}  // namespace

// ---- reshape
// -------------------------------------------------------------------------------------

TEST_CASE("reshape: views of contiguous arrays", "[views][reshape]") {
  const DeviceArray a = iota_device(Shape{2, 3, 4});
  SECTION("-1 is inferred") {
    const DeviceArray r = a.reshape(Shape{4, -1});
    CHECK(r.shape() == Shape{4, 6});
    CHECK(r.strides() == Strides{48, 8});
    CHECK(r.data() == a.data());
    CHECK(r.to_vector<double>() == iota_vec(24));
    CHECK(r.item<double>(3, 5) == 23.0);
  }
  SECTION("-1 first") {
    CHECK(a.reshape(Shape{-1, 2}).shape() == Shape{12, 2});
    CHECK(a.reshape(Shape{-1}).shape() == Shape{24});
  }
  SECTION("flat and back") {
    const DeviceArray flat = a.reshape(Shape{24});
    CHECK(flat.strides() == Strides{8});
    const DeviceArray back = flat.reshape(Shape{2, 3, 4});
    CHECK(back.strides() == a.strides());
    CHECK(back.data() == a.data());
  }
  SECTION("the same shape is a view") {
    const DeviceArray r = a.reshape(Shape{2, 3, 4});
    CHECK(r.data() == a.data());
    CHECK(r.strides() == a.strides());
  }
  SECTION("writes through the view reach the base") {
    const DeviceArray r = a.reshape(Shape{6, 4});
    r.set_item(-1.0, 5, 3);
    CHECK(a.item<double>(1, 2, 3) == -1.0);
  }
  SECTION("F order of an F array is a view") {
    const DeviceArray f = iota_device(Shape{2, 3}, Order::F);
    const DeviceArray r = f.reshape(Shape{3, 2}, Order::F);
    CHECK(r.data() == f.data());
    CHECK(r.strides() == Strides{8, 24});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 4, 3, 2, 1, 5});
  }
  SECTION("order A follows the array: F array") {
    const DeviceArray f = iota_device(Shape{2, 3}, Order::F);
    const DeviceArray r = f.reshape(Shape{3, 2}, Order::A);
    CHECK(r.data() == f.data());
    CHECK(r.to_vector<double>() == std::vector<double>{0, 4, 3, 2, 1, 5});
  }
  SECTION("order A follows the array: C array") {
    const DeviceArray r = a.reshape(Shape{4, 6}, Order::A);
    CHECK(r.data() == a.data());
    CHECK(r.to_vector<double>() == iota_vec(24));
  }
  SECTION("0-d to (1,) and back") {
    const DeviceArray z = devmem::device_array(Shape{}, f8());
    z.set_item(4.0);
    const DeviceArray one = z.reshape(Shape{1});
    CHECK(one.shape() == Shape{1});
    CHECK(one.item<double>(0) == 4.0);
    const DeviceArray back = one.reshape(Shape{});
    CHECK(back.ndim() == 0);
    CHECK(back.item<double>() == 4.0);
    CHECK(a.reshape(Shape{1, 24, 1}).shape() == Shape{1, 24, 1});
  }
  SECTION("arrays without elements") {
    const DeviceArray e = devmem::device_array(Shape{0, 5}, f8());
    CHECK(e.reshape(Shape{5, 0}).shape() == Shape{5, 0});
    CHECK(e.reshape(Shape{-1, 5}).shape() == Shape{0, 5});
    CHECK(e.reshape(Shape{0}).size() == 0);
  }
}

TEST_CASE("reshape: non-contiguous sources", "[views][reshape]") {
  const DeviceArray base = iota_device(Shape{4, 6});
  const DeviceArray v = base.slice(1, std::nullopt, std::nullopt, 2);  // (4, 3), strides (48, 16)
  REQUIRE(v.strides() == Strides{48, 16});
  SECTION("splitting an axis is still a view") {
    const DeviceArray r = v.reshape(Shape{2, 2, 3});
    CHECK(r.strides() == Strides{96, 48, 16});
    CHECK(r.data() == v.data());
    CHECK(r.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
  }
  SECTION("flattening evenly spaced elements is a view (stride 16, as NumPy)") {
    const DeviceArray r = v.reshape(Shape{12});
    CHECK(r.strides() == Strides{16});
    CHECK(r.data() == v.data());
    CHECK(r.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
  }
  SECTION("flattening rows with gaps needs a copy with NumPy's values") {
    const DeviceArray inner = base.slice(1, 1, 5);  // (4, 4), strides (48, 8)
    const DeviceArray r = inner.reshape(Shape{16});
    CHECK(r.shape() == Shape{16});
    CHECK(r.is_c_contiguous());
    CHECK(r.to_vector<double>() ==
          std::vector<double>{1, 2, 3, 4, 7, 8, 9, 10, 13, 14, 15, 16, 19, 20, 21, 22});
    // A copy: writing it leaves the source alone.
    r.set_item(100.0, 0);
    CHECK(base.item<double>(0, 1) == 1.0);
  }
  SECTION("a transposed array flattened in C order") {
    const DeviceArray c = iota_device(Shape{2, 3});
    const DeviceArray r = c.T().reshape(Shape{6});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  }
  SECTION("a reversed array") {
    const DeviceArray r = base.slice(0, std::nullopt, std::nullopt, -1).reshape(Shape{2, 12});
    CHECK(r.item<double>(0, 0) == 18.0);
    CHECK(r.item<double>(1, 11) == 5.0);
  }
}

TEST_CASE("reshape: order mismatch copies and gives NumPy's values (not Numba's view)",
          "[views][reshape]") {
  SECTION("F array [[0,1,2],[3,4,5]].reshape(3, 2) in C order") {
    const DeviceArray f = iota_device(Shape{2, 3}, Order::F);
    REQUIRE(f.to_vector<double>() == iota_vec(6));
    const DeviceArray r = f.reshape(Shape{3, 2});
    CHECK(r.shape() == Shape{3, 2});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5});
    CHECK(r.item<double>(0, 1) == 1.0);  // Numba's wrong view would give 3
    CHECK(r.is_c_contiguous());
    CHECK(r.data() != f.data());
  }
  SECTION("C array reshaped in F order") {
    const DeviceArray c = iota_device(Shape{2, 3});
    const DeviceArray r = c.reshape(Shape{3, 2}, Order::F);
    CHECK(r.to_vector<double>() == std::vector<double>{0, 4, 3, 2, 1, 5});
    CHECK(r.is_f_contiguous());
    CHECK(r.data() != c.data());
  }
  SECTION("3-d F array to 2-d C") {
    const DeviceArray f = iota_device(Shape{2, 3, 4}, Order::F);
    CHECK(f.reshape(Shape{6, 4}).to_vector<double>() == iota_vec(24));
    CHECK(f.reshape(Shape{-1}).to_vector<double>() == iota_vec(24));
  }
  SECTION("the copy is made on the array's stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray f = iota_device(Shape{2, 3}, Order::F).bind(s);
    const DeviceArray r = f.reshape(Shape{3, 2});
    CHECK(r.stream() == s);
    s.synchronize();
    CHECK(r.to_vector<double>() == iota_vec(6));
  }
}

TEST_CASE("reshape: errors", "[views][reshape][errors]") {
  const DeviceArray a = devmem::device_array(Shape{10, 10, 10}, f8());
  SECTION("size mismatch") {
    REQUIRE_THROWS_MATCHES(a.reshape(Shape{3, 7}), devmem::InvalidArgument,
                           Message("reshape: cannot reshape array of size 1000 into shape (3, 7)"));
  }
  SECTION("two unknown dimensions") {
    REQUIRE_THROWS_MATCHES(
        a.reshape(Shape{-1, -1}), devmem::InvalidArgument,
        Message("reshape: can only specify one unknown dimension, got shape (-1, -1)"));
  }
  SECTION("an unknown dimension that does not divide") {
    REQUIRE_THROWS_MATCHES(a.reshape(Shape{3, -1}), devmem::InvalidArgument,
                           Message("reshape: cannot infer the unknown dimension of shape (3, -1) "
                                   "for an array of size 1000"));
  }
  SECTION("other negative dimensions") {
    REQUIRE_THROWS_MATCHES(a.reshape(Shape{-2, 500}), devmem::InvalidArgument,
                           Message("reshape: negative dimension -2 in shape (-2, 500)"));
  }
  SECTION("order K") {
    REQUIRE_THROWS_MATCHES(a.reshape(Shape{1000}, Order::K), devmem::InvalidArgument,
                           Message("reshape: order must be 'C', 'F' or 'A', got 'K'"));
  }
  SECTION("-1 against a zero product") {
    const DeviceArray e = devmem::device_array(Shape{0, 4}, f8());
    REQUIRE_THROWS_MATCHES(e.reshape(Shape{0, -1}), devmem::InvalidArgument,
                           Message("reshape: cannot infer the unknown dimension of shape (0, -1) "
                                   "for an array of size 0"));
  }
}

// ---- ravel
// ---------------------------------------------------------------------------------------

TEST_CASE("ravel: views and copies in every order", "[views][ravel]") {
  const DeviceArray c = iota_device(Shape{3, 4});
  const DeviceArray f = iota_device(Shape{3, 4}, Order::F);
  SECTION("C array, order C: a view") {
    const DeviceArray r = c.ravel();
    CHECK(r.shape() == Shape{12});
    CHECK(r.strides() == Strides{8});
    CHECK(r.data() == c.data());
    CHECK(r.to_vector<double>() == iota_vec(12));
  }
  SECTION("C array, order F: a copy in F order") {
    const DeviceArray r = c.ravel(Order::F);
    CHECK(r.data() != c.data());
    CHECK(r.to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  }
  SECTION("C array, orders A and K: views") {
    CHECK(c.ravel(Order::A).data() == c.data());
    CHECK(c.ravel(Order::K).data() == c.data());
    CHECK(c.ravel(Order::K).to_vector<double>() == iota_vec(12));
  }
  SECTION("F array, order C: a copy with the logical values") {
    const DeviceArray r = f.ravel(Order::C);
    CHECK(r.data() != f.data());
    CHECK(r.to_vector<double>() == iota_vec(12));
  }
  SECTION("F array, orders F, A and K: views in memory order") {
    const std::vector<double> memory_order{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
    for (const Order o : {Order::F, Order::A, Order::K}) {
      const DeviceArray r = f.ravel(o);
      CHECK(r.data() == f.data());
      CHECK(r.to_vector<double>() == memory_order);
    }
  }
  SECTION("order K of a dense transpose is a view in memory order") {
    const DeviceArray b = iota_device(Shape{3, 4, 5});
    const DeviceArray t = b.transpose({1, 0, 2});
    const DeviceArray r = t.ravel(Order::K);
    CHECK(r.data() == b.data());
    CHECK(r.to_vector<double>() == iota_vec(60));
    // order C of the same transpose is a copy in logical order
    const DeviceArray rc = t.ravel(Order::C);
    CHECK(rc.data() != b.data());
    CHECK(rc.to_vector<double>() == gather_iota(Shape{4, 3, 5}, {40, 160, 8}, 0));
  }
  SECTION("order K of a strided view copies in memory order") {
    const DeviceArray v = iota_device(Shape{4, 6}).slice(1, std::nullopt, std::nullopt, 2);
    CHECK(v.ravel(Order::K).to_vector<double>() ==
          std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
  }
  SECTION("order K with a reversed axis keeps the view's order on that axis (NumPy)") {
    const DeviceArray v = iota_device(Shape{2, 3, 4}).slice(1, std::nullopt, std::nullopt, -1);
    CHECK(v.ravel(Order::K).to_vector<double>() ==
          std::vector<double>{8,  9,  10, 11, 4,  5,  6,  7,  0,  1,  2,  3,
                              20, 21, 22, 23, 16, 17, 18, 19, 12, 13, 14, 15});
  }
  SECTION("a reversed 1-d array") {
    const DeviceArray r = iota_device(Shape{5}).slice(0, std::nullopt, std::nullopt, -1).ravel();
    CHECK(r.to_vector<double>() == std::vector<double>{4, 3, 2, 1, 0});
  }
  SECTION("0-d") {
    const DeviceArray z = devmem::device_array(Shape{}, f8());
    z.set_item(9.0);
    const DeviceArray r = z.ravel();
    CHECK(r.shape() == Shape{1});
    CHECK(r.item<double>(0) == 9.0);
  }
  SECTION("the stream: the array's by default, else the argument") {
    const devmem::Stream s1 = devmem::stream();
    const devmem::Stream s2 = devmem::stream();
    const DeviceArray a = c.bind(s1);
    CHECK(a.ravel().stream() == s1);
    CHECK(a.ravel(Order::F).stream() == s1);
    CHECK(a.ravel(Order::C, s2).stream() == s2);
    const DeviceArray copied = a.ravel(Order::F, s2);
    CHECK(copied.stream() == s2);
    s2.synchronize();
    CHECK(copied.to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  }
}

// ---- split
// ---------------------------------------------------------------------------------------

TEST_CASE("split: consecutive views of section elements", "[views][split]") {
  const DeviceArray a = iota_device(Shape{10});
  SECTION("10 by 3 gives 3, 3, 3, 1") {
    const std::vector<DeviceArray> parts = a.split(3);
    REQUIRE(parts.size() == 4);
    CHECK(parts[0].shape() == Shape{3});
    CHECK(parts[1].shape() == Shape{3});
    CHECK(parts[2].shape() == Shape{3});
    CHECK(parts[3].shape() == Shape{1});
    CHECK(parts[0].to_vector<double>() == std::vector<double>{0, 1, 2});
    CHECK(parts[1].to_vector<double>() == std::vector<double>{3, 4, 5});
    CHECK(parts[2].to_vector<double>() == std::vector<double>{6, 7, 8});
    CHECK(parts[3].to_vector<double>() == std::vector<double>{9});
    for (std::size_t i = 0; i < parts.size(); ++i) {
      CHECK(bytes_of(parts[i]) - bytes_of(a) == static_cast<std::ptrdiff_t>(24 * i));
    }
  }
  SECTION("the parts share the array's memory") {
    const std::vector<DeviceArray> parts = a.split(4);
    parts[1].fill(-1.0);
    parts[2].set_item(50.0, 1);
    CHECK(a.to_vector<double>() == std::vector<double>{0, 1, 2, 3, -1, -1, -1, -1, 8, 50});
  }
  SECTION("a section that divides the size") {
    const std::vector<DeviceArray> parts = a.split(5);
    REQUIRE(parts.size() == 2);
    CHECK(parts[1].to_vector<double>() == std::vector<double>{5, 6, 7, 8, 9});
  }
  SECTION("a section larger than the array") {
    const std::vector<DeviceArray> parts = a.split(100);
    REQUIRE(parts.size() == 1);
    CHECK(parts[0].to_vector<double>() == iota_vec(10));
  }
  SECTION("a strided array") {
    const DeviceArray s = iota_device(Shape{20}).slice(0, std::nullopt, std::nullopt, 2);
    const std::vector<DeviceArray> parts = s.split(4);
    REQUIRE(parts.size() == 3);
    CHECK(parts[0].strides() == Strides{16});
    CHECK(parts[0].to_vector<double>() == std::vector<double>{0, 2, 4, 6});
    CHECK(parts[1].to_vector<double>() == std::vector<double>{8, 10, 12, 14});
    CHECK(parts[2].to_vector<double>() == std::vector<double>{16, 18});
  }
  SECTION("a reversed array") {
    const std::vector<DeviceArray> parts = a.slice(0, std::nullopt, std::nullopt, -1).split(4);
    REQUIRE(parts.size() == 3);
    CHECK(parts[0].to_vector<double>() == std::vector<double>{9, 8, 7, 6});
    CHECK(parts[2].to_vector<double>() == std::vector<double>{1, 0});
  }
  SECTION("an empty array gives no parts") {
    CHECK(devmem::device_array(Shape{0}, f8()).split(3).empty());
  }
  SECTION("the parts keep the stream, or take the argument") {
    const devmem::Stream s1 = devmem::stream();
    const devmem::Stream s2 = devmem::stream();
    for (const DeviceArray& p : a.bind(s1).split(3)) CHECK(p.stream() == s1);
    for (const DeviceArray& p : a.bind(s1).split(3, s2)) CHECK(p.stream() == s2);
  }
  SECTION("ndim != 1 is rejected eagerly") {
    const DeviceArray m = devmem::device_array(Shape{2, 5}, f8());
    REQUIRE_THROWS_MATCHES(m.split(2), devmem::InvalidArgument,
                           Message("split: only 1-d arrays can be split, got ndim 2"));
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{}, f8()).split(1), devmem::InvalidArgument,
                           Message("split: only 1-d arrays can be split, got ndim 0"));
  }
  SECTION("section <= 0 is rejected") {
    REQUIRE_THROWS_MATCHES(a.split(0), devmem::InvalidArgument,
                           Message("split: section must be positive, got 0"));
    REQUIRE_THROWS_MATCHES(a.split(-3), devmem::InvalidArgument,
                           Message("split: section must be positive, got -3"));
    REQUIRE_THROWS_AS(devmem::device_array(Shape{0}, f8()).split(0), devmem::InvalidArgument);
  }
}

// ---- slice, index, operator[]
// --------------------------------------------------------------------

TEST_CASE("slice: Python slice semantics", "[views][slice]") {
  const DeviceArray a = iota_device(Shape{10});
  const auto values = [](const DeviceArray& d) { return d.to_vector<double>(); };
  SECTION("start:stop:step") {
    const DeviceArray s = a.slice(0, 2, 8, 3);
    CHECK(s.shape() == Shape{2});
    CHECK(s.strides() == Strides{24});
    CHECK(values(s) == std::vector<double>{2, 5});
    CHECK(bytes_of(s) - bytes_of(a) == 16);
  }
  SECTION("negative start") {
    CHECK(values(a.slice(0, -3, std::nullopt)) == std::vector<double>{7, 8, 9});
  }
  SECTION("negative stop") {
    CHECK(values(a.slice(0, std::nullopt, -7)) == std::vector<double>{0, 1, 2});
  }
  SECTION("negative step with default bounds") {
    const DeviceArray r = a.slice(0, std::nullopt, std::nullopt, -1);
    CHECK(r.strides() == Strides{-8});
    CHECK(values(r) == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  }
  SECTION("[-1:-11:-1]") {
    CHECK(values(a.slice(0, -1, -11, -1)) == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  }
  SECTION("[8::-2]") {
    CHECK(values(a.slice(0, 8, std::nullopt, -2)) == std::vector<double>{8, 6, 4, 2, 0});
  }
  SECTION("out-of-range bounds are clamped") {
    CHECK(values(a.slice(0, -100, 3)) == std::vector<double>{0, 1, 2});
    CHECK(values(a.slice(0, 7, 100)) == std::vector<double>{7, 8, 9});
    CHECK(values(a.slice(0, 100, -100, -4)) == std::vector<double>{9, 5, 1});
  }
  SECTION("extreme steps") {
    const int64_t big = std::numeric_limits<int64_t>::max();
    const int64_t small = std::numeric_limits<int64_t>::min();
    CHECK(values(a.slice(0, std::nullopt, std::nullopt, big)) == std::vector<double>{0});
    CHECK(values(a.slice(0, std::nullopt, std::nullopt, small)) == std::vector<double>{9});
    CHECK(values(a.slice(0, -100, std::nullopt, -1)).empty());
    CHECK(values(a.slice(0, small, big)) == iota_vec(10));
  }
  SECTION("a step larger than the axis") {
    CHECK(values(a.slice(0, std::nullopt, std::nullopt, 20)) == std::vector<double>{0});
  }
  SECTION("empty results") {
    CHECK(a.slice(0, 5, 2).shape() == Shape{0});
    CHECK(a.slice(0, 3, 3).shape() == Shape{0});
    CHECK(a.slice(0, 100, std::nullopt).shape() == Shape{0});
    CHECK(a.slice(0, 2, 5, -1).shape() == Shape{0});
    CHECK(a.slice(0, 5, 2).to_vector<double>().empty());
    CHECK(a.slice(0, 5, 2).copy_to_host().size() == 0);
  }
  SECTION("the Slice struct form") {
    CHECK(values(a.slice(0, Slice{1, 6, 2})) == std::vector<double>{1, 3, 5});
    CHECK(values(a.slice(0, Slice{})) == iota_vec(10));
  }
  SECTION("2-d: both axes at once, and a negative dim") {
    const DeviceArray m = iota_device(Shape{4, 5});
    const DeviceArray s = m.slice({Slice{1, 3}, Slice{{}, {}, -2}});
    CHECK(s.shape() == Shape{2, 3});
    CHECK(s.strides() == Strides{40, -16});
    CHECK(values(s) == std::vector<double>{9, 7, 5, 14, 12, 10});
    const DeviceArray last = m.slice(-1, 1, 3);
    CHECK(last.shape() == Shape{4, 2});
    CHECK(values(last) == std::vector<double>{1, 2, 6, 7, 11, 12, 16, 17});
  }
  SECTION("slices of slices") {
    const DeviceArray s = a.slice(0, 1, std::nullopt, 2).slice(0, std::nullopt, std::nullopt, -2);
    CHECK(values(s) == std::vector<double>{9, 5, 1});
  }
  SECTION("step zero") {
    REQUIRE_THROWS_MATCHES(a.slice(0, std::nullopt, std::nullopt, 0), devmem::InvalidArgument,
                           Message("slice: slice step cannot be zero"));
  }
  SECTION("a dim out of range") {
    const DeviceArray m = devmem::device_array(Shape{2, 3}, f8());
    REQUIRE_THROWS_MATCHES(m.slice(2, 0, 1), devmem::InvalidArgument,
                           Message("slice: axis 2 is out of bounds for array of dimension 2"));
    REQUIRE_THROWS_MATCHES(m.slice(-3, 0, 1), devmem::InvalidArgument,
                           Message("slice: axis -3 is out of bounds for array of dimension 2"));
  }
}

TEST_CASE("index and operator[]", "[views][index]") {
  const DeviceArray m = iota_device(Shape{3, 4});
  SECTION("a row") {
    const DeviceArray r = m[1];
    CHECK(r.shape() == Shape{4});
    CHECK(r.to_vector<double>() == std::vector<double>{4, 5, 6, 7});
    CHECK(bytes_of(r) - bytes_of(m) == 32);
  }
  SECTION("negative indices") {
    CHECK(m[-1].to_vector<double>() == std::vector<double>{8, 9, 10, 11});
    CHECK(m.index(1, -1).to_vector<double>() == std::vector<double>{3, 7, 11});
    CHECK(m.index(-1, 0).to_vector<double>() == std::vector<double>{0, 4, 8});
  }
  SECTION("an element as a 0-d view") {
    const DeviceArray e = m[2][1];
    CHECK(e.ndim() == 0);
    CHECK(e.item<double>() == 9.0);
    e.set_item(-9.0);
    CHECK(m.item<double>(2, 1) == -9.0);
  }
  SECTION("index out of bounds") {
    REQUIRE_THROWS_MATCHES(m[3], devmem::InvalidArgument,
                           Message("index: index 3 is out of bounds for axis 0 with size 3"));
    REQUIRE_THROWS_MATCHES(m[-4], devmem::InvalidArgument,
                           Message("index: index -4 is out of bounds for axis 0 with size 3"));
    REQUIRE_THROWS_MATCHES(m.index(1, 4), devmem::InvalidArgument,
                           Message("index: index 4 is out of bounds for axis 1 with size 4"));
  }
  SECTION("axis out of range") {
    REQUIRE_THROWS_MATCHES(m.index(2, 0), devmem::InvalidArgument,
                           Message("index: axis 2 is out of bounds for array of dimension 2"));
    REQUIRE_THROWS_MATCHES(m[0][0][0], devmem::InvalidArgument,
                           Message("index: axis 0 is out of bounds for array of dimension 0"));
  }
}

// ---- transpose, squeeze
// --------------------------------------------------------------------------

TEST_CASE("transpose: views with permuted axes", "[views][transpose]") {
  const DeviceArray a = iota_device(Shape{2, 3, 4});
  SECTION("2-d T") {
    const DeviceArray m = iota_device(Shape{2, 3});
    const DeviceArray t = m.T();
    CHECK(t.shape() == Shape{3, 2});
    CHECK(t.strides() == Strides{8, 24});
    CHECK(t.data() == m.data());
    CHECK(t.is_f_contiguous());
    CHECK(t.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  }
  SECTION("3-d transpose() reverses the axes") {
    const DeviceArray t = a.transpose();
    CHECK(t.shape() == Shape{4, 3, 2});
    CHECK(t.strides() == Strides{8, 32, 96});
    CHECK(t.item<double>(3, 2, 1) == 23.0);
    CHECK(t.item<double>(1, 0, 1) == 13.0);
    CHECK(t.to_vector<double>() == gather_iota(Shape{4, 3, 2}, {8, 32, 96}, 0));
  }
  SECTION("explicit axes") {
    const DeviceArray t = a.transpose({1, 0, 2});
    CHECK(t.shape() == Shape{3, 2, 4});
    CHECK(t.strides() == Strides{32, 96, 8});
    CHECK(t.item<double>(2, 1, 3) == 23.0);
    CHECK(t.item<double>(1, 0, 2) == 6.0);
  }
  SECTION("negative axes") {
    const DeviceArray t = a.transpose({-1, 0, 1});
    CHECK(t.shape() == Shape{4, 2, 3});
    CHECK(t.strides() == Strides{8, 96, 32});
  }
  SECTION("the span form") {
    const std::vector<int> axes{2, 1, 0};
    CHECK(a.transpose(std::span<const int>(axes)).strides() == a.transpose().strides());
  }
  SECTION("transposing twice is the identity") {
    const DeviceArray t = a.transpose({2, 0, 1}).transpose({1, 2, 0});
    CHECK(t.shape() == a.shape());
    CHECK(t.strides() == a.strides());
    CHECK(t.to_vector<double>() == iota_vec(24));
  }
  SECTION("1-d and 0-d are unchanged") {
    const DeviceArray v = iota_device(Shape{5});
    CHECK(v.T().strides() == Strides{8});
    CHECK(v.T().to_vector<double>() == iota_vec(5));
    CHECK(devmem::device_array(Shape{}, f8()).T().ndim() == 0);
  }
  SECTION("writes through a transpose") {
    a.transpose().set_item(-5.0, 0, 1, 1);
    CHECK(a.item<double>(1, 1, 0) == -5.0);
  }
  SECTION("bad axes") {
    REQUIRE_THROWS_MATCHES(a.transpose({0, 0, 1}), devmem::InvalidArgument,
                           Message("transpose: axes (0, 0, 1) are not a permutation of 3 axes"));
    REQUIRE_THROWS_MATCHES(a.transpose({0, 1}), devmem::InvalidArgument,
                           Message("transpose: axes (0, 1) are not a permutation of 3 axes"));
    REQUIRE_THROWS_MATCHES(a.transpose({0, 1, 3}), devmem::InvalidArgument,
                           Message("transpose: axes (0, 1, 3) are not a permutation of 3 axes"));
    REQUIRE_THROWS_MATCHES(a.transpose({0, 1, -4}), devmem::InvalidArgument,
                           Message("transpose: axes (0, 1, -4) are not a permutation of 3 axes"));
  }
}

TEST_CASE("squeeze: removing size-1 axes", "[views][squeeze]") {
  const DeviceArray a = iota_device(Shape{1, 10, 1});
  SECTION("all") {
    const DeviceArray s = a.squeeze();
    CHECK(s.shape() == Shape{10});
    CHECK(s.strides() == Strides{8});
    CHECK(s.data() == a.data());
    CHECK(s.to_vector<double>() == iota_vec(10));
  }
  SECTION("one axis") {
    const DeviceArray s = a.squeeze(0);
    CHECK(s.shape() == Shape{10, 1});
    CHECK(s.strides() == Strides{8, 8});
    CHECK(a.squeeze(-1).shape() == Shape{1, 10});
    CHECK(a.squeeze(2).shape() == Shape{1, 10});
  }
  SECTION("to 0-d") {
    const DeviceArray one = iota_device(Shape{1, 1}, Order::C, {}, 3.0);
    const DeviceArray s = one.squeeze();
    CHECK(s.ndim() == 0);
    CHECK(s.item<double>() == 3.0);
  }
  SECTION("0-d arrays") {
    const DeviceArray z = devmem::device_array(Shape{}, f8());
    CHECK(z.squeeze().ndim() == 0);
    REQUIRE_THROWS_MATCHES(z.squeeze(0), devmem::InvalidArgument,
                           Message("squeeze: axis 0 is out of bounds for array of dimension 0"));
  }
  SECTION("nothing to squeeze") {
    const DeviceArray m = iota_device(Shape{2, 3});
    CHECK(m.squeeze().shape() == Shape{2, 3});
    CHECK(m.squeeze().strides() == m.strides());
  }
  SECTION("an axis whose size is not 1") {
    REQUIRE_THROWS_MATCHES(a.squeeze(1), devmem::InvalidArgument,
                           Message("squeeze: cannot select an axis to squeeze out which has size "
                                   "not equal to one (axis 1 has size 10)"));
  }
  SECTION("an axis out of range") {
    REQUIRE_THROWS_MATCHES(a.squeeze(3), devmem::InvalidArgument,
                           Message("squeeze: axis 3 is out of bounds for array of dimension 3"));
  }
}

// ---- view(DType)
// ---------------------------------------------------------------------------------

TEST_CASE("view: reinterpreting the bytes", "[views][view]") {
  SECTION("same itemsize keeps shape and strides") {
    const DeviceArray a = devmem::to_device(std::vector<double>{1.0, -2.0});
    const DeviceArray v = a.view(i8());
    CHECK(v.shape() == Shape{2});
    CHECK(v.strides() == Strides{8});
    CHECK(v.dtype() == i8());
    CHECK(v.data() == a.data());
    std::int64_t one_bits = 0;
    const double one = 1.0;
    std::memcpy(&one_bits, &one, sizeof one_bits);
    CHECK(v.item<std::int64_t>(0) == one_bits);
    CHECK(v.item<std::int64_t>(0) == std::int64_t{0x3FF0000000000000});
  }
  SECTION("a smaller itemsize rescales the last axis") {
    const DeviceArray a = iota_device(Shape{2, 3});
    const DeviceArray v = a.view(f4());
    CHECK(v.shape() == Shape{2, 6});
    CHECK(v.strides() == Strides{24, 4});
    std::vector<double> src = iota_vec(6);
    std::vector<float> expected(12);
    std::memcpy(expected.data(), src.data(), 48);
    CHECK(v.to_vector<float>() == expected);
  }
  SECTION("a larger itemsize") {
    std::vector<std::uint8_t> raw(32);
    const double x = 2.5;
    const double y = -0.75;
    std::memcpy(raw.data(), &x, 8);
    std::memcpy(raw.data() + 8, &y, 8);
    std::memcpy(raw.data() + 16, &y, 8);
    std::memcpy(raw.data() + 24, &x, 8);
    const DeviceArray a = devmem::to_device(raw).reshape(Shape{2, 16});
    const DeviceArray v = a.view(f8());
    CHECK(v.shape() == Shape{2, 2});
    CHECK(v.strides() == Strides{16, 8});
    CHECK(v.to_vector<double>() == std::vector<double>{2.5, -0.75, -0.75, 2.5});
  }
  SECTION("writes through the view") {
    const DeviceArray a = devmem::device_array(Shape{2}, i4());
    a.fill(std::int32_t{0});
    a.view(u1()).set_item(std::uint8_t{1}, 4);
    CHECK(a.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1});
  }
  SECTION("a larger itemsize must divide the last axis") {
    const DeviceArray a = devmem::device_array(Shape{3}, i4());
    REQUIRE_THROWS_MATCHES(a.view(i8()), devmem::InvalidArgument,
                           Message("view: when changing to a larger itemsize, it must divide the "
                                   "size in bytes of the last axis (8 does not divide 12 bytes)"));
  }
  SECTION("a smaller itemsize must divide the old one") {
    const DeviceArray a = devmem::device_array(Shape{4}, DType::record(3));
    REQUIRE_THROWS_MATCHES(a.view(devmem::dtype_of<std::int16_t>()), devmem::InvalidArgument,
                           Message("view: when changing to a smaller itemsize, it must divide the "
                                   "original itemsize (2 does not divide 3)"));
  }
  SECTION("the last axis must be contiguous") {
    const DeviceArray a =
        devmem::device_array(Shape{4, 4}, f8()).slice(1, std::nullopt, std::nullopt, 2);
    REQUIRE_THROWS_MATCHES(a.view(f4()), devmem::InvalidArgument,
                           Message("view: to change the itemsize from 8 to 4 bytes the last axis "
                                   "must be contiguous, but its stride is 16"));
    const DeviceArray f = devmem::device_array(Shape{2, 3}, f8(), {}, Order::F);
    REQUIRE_THROWS_AS(f.view(f4()), devmem::InvalidArgument);
  }
  SECTION("0-d arrays cannot change itemsize") {
    const DeviceArray z = devmem::device_array(Shape{}, f8());
    REQUIRE_THROWS_MATCHES(z.view(f4()), devmem::InvalidArgument,
                           Message("view: cannot change the itemsize of a 0-d array (from 8 to 4 "
                                   "bytes)"));
    CHECK(z.view(i8()).dtype() == i8());
  }
}

TEST_CASE("views keep the stream and share memory", "[views][streams]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray a = iota_device(Shape{4, 6}).bind(s);
  REQUIRE(a.stream() == s);
  CHECK(a.slice(0, 1, 3).stream() == s);
  CHECK(a.slice({Slice{}, Slice{{}, {}, 2}}).stream() == s);
  CHECK(a.index(1, 2).stream() == s);
  CHECK(a[0].stream() == s);
  CHECK(a.transpose().stream() == s);
  CHECK(a.transpose({1, 0}).stream() == s);
  CHECK(a.T().stream() == s);
  CHECK(a.reshape(Shape{1, 24}).squeeze().stream() == s);
  CHECK(a.squeeze().stream() == s);
  CHECK(a.view(i8()).stream() == s);
  CHECK(a.reshape(Shape{24}).stream() == s);
  CHECK(a.reshape(Shape{6, 4}, Order::F).stream() == s);  // a copy
  CHECK(a.ravel().stream() == s);
  CHECK(a.ravel(Order::F).stream() == s);  // a copy
  CHECK(a.reshape(Shape{24}).split(5).front().stream() == s);
  CHECK(a.copy().stream() == s);
  s.synchronize();

  // Writes through views land in the base array.
  a.slice({Slice{1, 3}, Slice{{}, {}, 5}}).fill(-1.0);
  a.T()[5].set_item(-2.0, 3);
  a.reshape(Shape{24}).split(6)[3].set_item(-3.0, 0);
  s.synchronize();
  std::vector<double> expected = iota_vec(24);
  expected[6] = expected[11] = expected[12] = expected[17] = -1.0;
  expected[3 * 6 + 5] = -2.0;
  expected[18] = -3.0;
  CHECK(a.to_vector<double>() == expected);
}

// ---- element access
// ------------------------------------------------------------------------------

TEST_CASE("item and set_item", "[views][item]") {
  const DeviceArray m = iota_device(Shape{3, 4});
  SECTION("positive and negative indices") {
    CHECK(m.item<double>(0, 0) == 0.0);
    CHECK(m.item<double>(2, 3) == 11.0);
    CHECK(m.item<double>(-1, -1) == 11.0);
    CHECK(m.item<double>(-3, 1) == 1.0);
    CHECK(m.item<double>(std::int64_t{1}, 2U) == 6.0);
  }
  SECTION("set_item writes one element") {
    m.set_item(42.0, 1, -1);
    m.set_item(-1.0, 0, 0);
    std::vector<double> expected = iota_vec(12);
    expected[7] = 42.0;
    expected[0] = -1.0;
    CHECK(m.to_vector<double>() == expected);
  }
  SECTION("on views") {
    const DeviceArray v = m.slice({Slice{{}, {}, -1}, Slice{1, {}, 2}});
    CHECK(v.item<double>(0, 0) == 9.0);
    CHECK(v.item<double>(2, 1) == 3.0);
    v.set_item(100.0, 1, 1);
    CHECK(m.item<double>(1, 3) == 100.0);
  }
  SECTION("on an array with a stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray a = devmem::device_array(Shape{3}, i4(), {}, Order::C, s);
    a.set_item(std::int32_t{7}, 2);
    CHECK(a.item<std::int32_t>(2) == 7);
  }
  SECTION("out of bounds") {
    REQUIRE_THROWS_MATCHES(m.item<double>(3, 0), devmem::InvalidArgument,
                           Message("item: index 3 is out of bounds for axis 0 with size 3"));
    REQUIRE_THROWS_MATCHES(m.item<double>(0, -5), devmem::InvalidArgument,
                           Message("item: index -5 is out of bounds for axis 1 with size 4"));
    REQUIRE_THROWS_MATCHES(m.set_item(1.0, 0, 4), devmem::InvalidArgument,
                           Message("set_item: index 4 is out of bounds for axis 1 with size 4"));
  }
  SECTION("wrong number of indices") {
    REQUIRE_THROWS_MATCHES(m.item<double>(1), devmem::InvalidArgument,
                           Message("item: 1 indices given for an array of dimension 2"));
    REQUIRE_THROWS_MATCHES(m.item<double>(1, 1, 1), devmem::InvalidArgument,
                           Message("item: 3 indices given for an array of dimension 2"));
    REQUIRE_THROWS_MATCHES(m.set_item(1.0), devmem::InvalidArgument,
                           Message("set_item: 0 indices given for an array of dimension 2"));
  }
  SECTION("wrong dtype") {
    REQUIRE_THROWS_MATCHES(m.item<std::int32_t>(0, 0), devmem::InvalidArgument,
                           Message("item: the array's dtype is float64, not int32"));
    REQUIRE_THROWS_MATCHES(m.set_item(1.0F, 0, 0), devmem::InvalidArgument,
                           Message("set_item: the array's dtype is float64, not float32"));
    CHECK(m.item<double>(0, 0) == 0.0);
  }
  SECTION("empty arrays have no elements") {
    const DeviceArray e = devmem::device_array(Shape{0}, f8());
    REQUIRE_THROWS_MATCHES(e.item<double>(0), devmem::InvalidArgument,
                           Message("item: index 0 is out of bounds for axis 0 with size 0"));
  }
}

TEST_CASE("fill: every element, never the gaps", "[views][fill]") {
  SECTION("a value whose bytes are all equal") {
    const DeviceArray a = iota_device(Shape{3, 4});
    a.fill(0.0);
    CHECK(a.to_vector<double>() == std::vector<double>(12, 0.0));
  }
  SECTION("a value with different bytes") {
    const DeviceArray a = devmem::device_array(Shape{3, 4}, f8(), {}, Order::F);
    a.fill(1.5);
    CHECK(a.to_vector<double>() == std::vector<double>(12, 1.5));
  }
  SECTION("integers") {
    const DeviceArray a = devmem::device_array(Shape{5}, i4());
    a.fill(std::int32_t{-1});
    CHECK(a.to_vector<std::int32_t>() == std::vector<std::int32_t>(5, -1));
    a.fill(std::int32_t{0x01020304});
    CHECK(a.to_vector<std::int32_t>() == std::vector<std::int32_t>(5, 0x01020304));
  }
  SECTION("a strided view: the gaps keep their values") {
    const DeviceArray base = iota_device(Shape{4, 6});
    base.slice({Slice{1, {}, 2}, Slice{{}, {}, 3}}).fill(-1.0);
    std::vector<double> expected = iota_vec(24);
    for (const int i : {6, 9, 18, 21}) expected[static_cast<std::size_t>(i)] = -1.0;
    CHECK(base.to_vector<double>() == expected);
  }
  SECTION("a strided view with a uniform-byte value") {
    const DeviceArray base = iota_device(Shape{8});
    base.slice(0, 1, std::nullopt, 2).fill(0.0);
    CHECK(base.to_vector<double>() == std::vector<double>{0, 0, 2, 0, 4, 0, 6, 0});
  }
  SECTION("a reversed view") {
    const DeviceArray base = iota_device(Shape{6});
    base.slice(0, 4, std::nullopt, -2).fill(9.0);
    CHECK(base.to_vector<double>() == std::vector<double>{9, 1, 9, 3, 9, 5});
  }
  SECTION("a 0-d array") {
    const DeviceArray z = devmem::device_array(Shape{}, f8());
    z.fill(6.25);
    CHECK(z.item<double>() == 6.25);
  }
  SECTION("a broadcast array") {
    const DeviceArray b = devmem::device_array(Shape{4, 3}, f8(), Strides{0, 8});
    b.fill(2.5);
    CHECK(b.to_vector<double>() == std::vector<double>(12, 2.5));
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray a = devmem::device_array(Shape{1000}, f8(), {}, Order::C, s);
    a.fill(3.0);
    s.synchronize();
    CHECK(a.to_vector<double>() == std::vector<double>(1000, 3.0));
  }
  SECTION("a record dtype") {
    struct Pair {
      std::int32_t a;
      std::int32_t b;
    };
    const DeviceArray r = devmem::device_array(Shape{3}, devmem::dtype_of<Pair>());
    r.fill(Pair{1, 2});
    const HostArray h = r.copy_to_host();
    CHECK(h.at<Pair>(2).a == 1);
    CHECK(h.at<Pair>(2).b == 2);
  }
  SECTION("wrong dtype") {
    const DeviceArray a = devmem::device_array(Shape{3}, f8());
    REQUIRE_THROWS_MATCHES(a.fill(std::int32_t{1}), devmem::InvalidArgument,
                           Message("fill: the array's dtype is float64, not int32"));
  }
}

TEST_CASE("memset: every byte of every element", "[views][memset]") {
  SECTION("byte values 0..255") {
    const DeviceArray a = devmem::device_array(Shape{16}, u1());
    for (const int b : {0, 1, 0x7F, 0x80, 0xAB, 255}) {
      a.memset(b);
      CHECK(a.to_vector<std::uint8_t>() ==
            std::vector<std::uint8_t>(16, static_cast<std::uint8_t>(b)));
    }
  }
  SECTION("multi-byte elements") {
    const DeviceArray a = devmem::device_array(Shape{4}, i4());
    a.memset(255);
    CHECK(a.to_vector<std::int32_t>() == std::vector<std::int32_t>(4, -1));
    a.memset(1);
    CHECK(a.to_vector<std::int32_t>() == std::vector<std::int32_t>(4, 0x01010101));
    const DeviceArray d = iota_device(Shape{3});
    d.memset(0);
    CHECK(d.to_vector<double>() == std::vector<double>(3, 0.0));
  }
  SECTION("a strided view leaves the gaps alone") {
    const DeviceArray base = devmem::to_device(std::vector<std::uint8_t>(10, 7));
    base.slice(0, 1, std::nullopt, 3).memset(0xEE);
    CHECK(base.to_vector<std::uint8_t>() ==
          std::vector<std::uint8_t>{7, 0xEE, 7, 7, 0xEE, 7, 7, 0xEE, 7, 7});
  }
  SECTION("a broadcast array") {
    const DeviceArray b = devmem::device_array(Shape{5, 2}, u1(), Strides{0, 1});
    b.memset(0x11);
    CHECK(b.to_vector<std::uint8_t>() == std::vector<std::uint8_t>(10, 0x11));
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray a = devmem::device_array(Shape{64}, u1(), {}, Order::C, s);
    a.memset(0x42);
    s.synchronize();
    CHECK(a.to_vector<std::uint8_t>() == std::vector<std::uint8_t>(64, 0x42));
  }
  SECTION("values outside 0..255") {
    const DeviceArray a = devmem::device_array(Shape{4}, u1());
    REQUIRE_THROWS_MATCHES(a.memset(256), devmem::InvalidArgument,
                           Message("memset: byte value must be in 0..255, got 256"));
    REQUIRE_THROWS_MATCHES(a.memset(-1), devmem::InvalidArgument,
                           Message("memset: byte value must be in 0..255, got -1"));
  }
}

TEST_CASE("assign: host data with NumPy broadcasting", "[views][assign]") {
  const DeviceArray a = devmem::device_array(Shape{3, 4}, f8());
  a.fill(0.0);
  SECTION("a full array") {
    a.assign(iota_host(Shape{3, 4}));
    CHECK(a.to_vector<double>() == iota_vec(12));
  }
  SECTION("a row (4,) is repeated") {
    a.assign(iota_host(Shape{4}, Order::C, 1.0));
    CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
  }
  SECTION("a row (1, 4) is repeated") {
    a.assign(iota_host(Shape{1, 4}, Order::C, 1.0));
    CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4});
  }
  SECTION("a column (3, 1) is repeated") {
    a.assign(iota_host(Shape{3, 1}, Order::C, 1.0));
    CHECK(a.to_vector<double>() == std::vector<double>{1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3});
  }
  SECTION("a 0-d value fills") {
    const HostArray v(Shape{}, f8());
    v.at<double>() = 5.5;
    a.assign(v);
    CHECK(a.to_vector<double>() == std::vector<double>(12, 5.5));
  }
  SECTION("into a strided view") {
    a.slice(1, std::nullopt, std::nullopt, 2).assign(iota_host(Shape{2}, Order::C, 7.0));
    CHECK(a.to_vector<double>() == std::vector<double>{7, 0, 8, 0, 7, 0, 8, 0, 7, 0, 8, 0});
  }
  SECTION("from a strided host view") {
    const HostArray src = iota_host(Shape{8});
    a.assign(src.slice(0, std::nullopt, std::nullopt, 2));
    CHECK(a.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6});
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    a.assign(iota_host(Shape{4}), s);
    s.synchronize();
    CHECK(a.item<double>(2, 3) == 3.0);
  }
  SECTION("too many dimensions") {
    REQUIRE_THROWS_MATCHES(a.assign(HostArray(Shape{2, 3, 4}, f8())), devmem::InvalidArgument,
                           Message("assign: cannot assign a 3-d value to a 2-d array"));
  }
  SECTION("incompatible shapes") {
    REQUIRE_THROWS_MATCHES(a.assign(HostArray(Shape{3}, f8())), devmem::InvalidArgument,
                           Message("assign: cannot broadcast shape (3,) to shape (3, 4)"));
    REQUIRE_THROWS_MATCHES(a.assign(HostArray(Shape{2, 4}, f8())), devmem::InvalidArgument,
                           Message("assign: cannot broadcast shape (2, 4) to shape (3, 4)"));
  }
  SECTION("dtype mismatch") {
    REQUIRE_THROWS_MATCHES(a.assign(HostArray(Shape{4}, f4())), devmem::InvalidArgument,
                           Message("assign: dtype mismatch: value is float32, array is float64"));
  }
}

// ---- copy, bind, len
// -----------------------------------------------------------------------------

TEST_CASE("copy: new device memory in the requested order", "[views][copy]") {
  const DeviceArray c = iota_device(Shape{3, 4});
  SECTION("order K of a C array") {
    const DeviceArray k = c.copy();
    CHECK(k.data() != c.data());
    CHECK(k.strides() == Strides{32, 8});
    CHECK(k.to_vector<double>() == iota_vec(12));
    k.set_item(-1.0, 0, 0);
    CHECK(c.item<double>(0, 0) == 0.0);
  }
  SECTION("order F") {
    const DeviceArray f = c.copy(Order::F);
    CHECK(f.strides() == Strides{8, 24});
    CHECK(f.to_vector<double>() == iota_vec(12));
  }
  SECTION("order C of a transpose") {
    const DeviceArray t = c.T().copy(Order::C);
    CHECK(t.strides() == Strides{24, 8});
    CHECK(t.to_vector<double>() == gather_iota(Shape{4, 3}, {8, 32}, 0));
  }
  SECTION("orders K and A of a transpose keep F") {
    CHECK(c.T().copy(Order::K).strides() == Strides{8, 32});
    CHECK(c.T().copy(Order::A).strides() == Strides{8, 32});
  }
  SECTION("order K of a strided view is dense") {
    const DeviceArray v = iota_device(Shape{10, 12}).slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}});
    const DeviceArray k = v.copy();
    CHECK(k.strides() == Strides{48, 8});
    CHECK(k.to_vector<double>() == gather_iota(Shape{5, 6}, {192, 16}, 0));
  }
  SECTION("0-d and empty") {
    const DeviceArray z = devmem::device_array(Shape{}, f8());
    z.set_item(1.0);
    CHECK(z.copy().item<double>() == 1.0);
    CHECK(devmem::device_array(Shape{0, 2}, f8()).copy().shape() == Shape{0, 2});
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray k = c.copy(Order::F, s);
    CHECK(k.stream() == s);
    s.synchronize();
    CHECK(k.to_vector<double>() == iota_vec(12));
  }
}

TEST_CASE("bind and len", "[views][streams]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray a = iota_device(Shape{5, 3});
  const DeviceArray b = a.bind(s);
  CHECK(b.stream() == s);
  CHECK_FALSE(a.stream().is_specified());
  CHECK(b.data() == a.data());
  CHECK(b.shape() == a.shape());
  CHECK(b.strides() == a.strides());
  CHECK_FALSE(b.bind(devmem::Stream{}).stream().is_specified());
  CHECK(b.bind(devmem::default_stream()).stream().is_default());
  CHECK(a.len() == 5);
  CHECK(a.T().len() == 3);
  CHECK(a[0].len() == 3);
  b.set_item(-1.0, 4, 2);
  s.synchronize();
  CHECK(a.item<double>(4, 2) == -1.0);
}

// Transfers: H2D, D2H and D2D copies for every layout (C, F, sliced with positive and negative
// steps, transposed, broadcast, 0-d, empty), copies into existing arrays, strided destinations
// whose gaps must never be written (numba#3553), overlapping copies, and the errors. One file
// although over 800 lines: every case runs the same layouts through the same three directions.
#include "support.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <complex>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

constexpr double kSentinel = -7.0;

// Values of a (rows, cols) C buffer after writing `written` (C order) into the view
// [r0::rs, c0::cs]; every other element keeps the sentinel.
std::vector<double> expected_after_strided_write(int64_t rows, int64_t cols, int64_t r0, int64_t rs,
                                                 int64_t c0, int64_t cs,
                                                 const std::vector<double>& written) {
  std::vector<double> out(static_cast<std::size_t>(rows * cols), kSentinel);
  std::size_t k = 0;
  for (int64_t i = r0; i < rows; i += rs) {
    for (int64_t j = c0; j < cols; j += cs) {
      out[static_cast<std::size_t>(i * cols + j)] = written.at(k++);
    }
  }
  REQUIRE(k == written.size());
  return out;
}

}  // namespace

TEST_CASE("transfers: round trips of dense arrays", "[transfers]") {
  SECTION("C (3, 4, 5)") {
    const HostArray h = iota_host(Shape{3, 4, 5});
    const DeviceArray d = devmem::to_device(h);
    const HostArray back = d.copy_to_host();
    CHECK(back.shape() == Shape{3, 4, 5});
    CHECK(back.strides() == Strides{160, 40, 8});
    CHECK(back.kind() == devmem::HostMemoryKind::Pageable);
    CHECK(back.to_vector<double>() == iota_vec(60));
    CHECK(back.data() != h.data());
  }
  SECTION("F (3, 4, 5) comes back F") {
    const HostArray h = iota_host(Shape{3, 4, 5}, Order::F);
    const DeviceArray d = devmem::to_device(h);
    CHECK(d.is_f_contiguous());
    const HostArray back = d.copy_to_host();
    CHECK(back.strides() == Strides{8, 24, 96});
    CHECK(back.to_vector<double>() == iota_vec(60));
    CHECK(back.at<double>(2, 3, 4) == 59.0);
  }
  SECTION("other dtypes") {
    const std::vector<std::uint8_t> bytes{0, 1, 127, 128, 255};
    CHECK(devmem::to_device(bytes).copy_to_host().to_vector<std::uint8_t>() == bytes);
    const std::array<bool, 3> flags{true, false, true};
    const DeviceArray db = devmem::to_device(std::span<const bool>(flags));
    CHECK(db.dtype().typestr() == "|b1");
    const HostArray hb = db.copy_to_host();
    CHECK(hb.at<bool>(0));
    CHECK_FALSE(hb.at<bool>(1));
    CHECK(hb.at<bool>(2));
    CHECK(db.item<bool>(2));
    const std::vector<std::complex<float>> c{{1, 2}, {-3, 4}};
    CHECK(devmem::to_device(c).to_vector<std::complex<float>>() == c);
    const std::vector<std::int16_t> s{-32768, -1, 0, 32767};
    CHECK(devmem::to_device(s).to_vector<std::int16_t>() == s);
  }
  SECTION("a large array (8 MiB)") {
    const std::vector<double> v = iota_vec(int64_t{1} << 20);
    const DeviceArray d = devmem::to_device(v);
    CHECK(d.to_vector<double>() == v);
  }
}

TEST_CASE("transfers: copy_to_host of device views", "[transfers][views]") {
  const DeviceArray base = iota_device(Shape{6, 8});
  SECTION("rows and columns with steps") {
    const DeviceArray v = base.slice({Slice{1, {}, 2}, Slice{{}, {}, 3}});
    REQUIRE(v.shape() == Shape{3, 3});
    REQUIRE(v.strides() == Strides{128, 24});
    const HostArray h = v.copy_to_host();
    CHECK(h.shape() == Shape{3, 3});
    CHECK(h.strides() == Strides{24, 8});
    CHECK(h.to_vector<double>() == std::vector<double>{8, 11, 14, 24, 27, 30, 40, 43, 46});
  }
  SECTION("negative steps") {
    const DeviceArray v = base.slice({Slice{1, {}, 2}, Slice{{}, {}, -3}});
    REQUIRE(v.shape() == Shape{3, 3});
    REQUIRE(v.strides() == Strides{128, -24});
    CHECK(v.copy_to_host().to_vector<double>() == gather_iota(Shape{3, 3}, {128, -24}, 120));
    CHECK(v.copy_to_host().to_vector<double>() ==
          std::vector<double>{15, 12, 9, 31, 28, 25, 47, 44, 41});
  }
  SECTION("fully reversed") {
    const DeviceArray v = base.slice({Slice{{}, {}, -1}, Slice{{}, {}, -1}});
    std::vector<double> expected = iota_vec(48);
    std::reverse(expected.begin(), expected.end());
    CHECK(v.copy_to_host().to_vector<double>() == expected);
    CHECK(v.to_vector<double>() == expected);
  }
  SECTION("transposed") {
    const DeviceArray t = base.T();
    const HostArray h = t.copy_to_host();
    CHECK(h.shape() == Shape{8, 6});
    CHECK(h.strides() == Strides{8, 64});  // same axis order as the view: F here
    CHECK(h.to_vector<double>() == gather_iota(Shape{8, 6}, {8, 64}, 0));
    CHECK(h.at<double>(7, 5) == 47.0);
  }
  SECTION("a column") {
    const DeviceArray c = base.index(1, 3);
    REQUIRE(c.shape() == Shape{6});
    CHECK(c.copy_to_host().to_vector<double>() == std::vector<double>{3, 11, 19, 27, 35, 43});
  }
  SECTION("a row") {
    CHECK(base[2].copy_to_host().to_vector<double>() == iota_vec(8, 16.0));
  }
  SECTION("a 0-d element view") {
    const DeviceArray e = base.index(0, 4).index(0, 5);
    REQUIRE(e.ndim() == 0);
    const HostArray h = e.copy_to_host();
    CHECK(h.ndim() == 0);
    CHECK(h.at<double>() == 37.0);
  }
  SECTION("an empty slice") {
    const DeviceArray e = base.slice(0, 4, 2);
    REQUIRE(e.shape() == Shape{0, 8});
    const HostArray h = e.copy_to_host();
    CHECK(h.shape() == Shape{0, 8});
    CHECK(h.size() == 0);
  }
  SECTION("3-d permuted view") {
    const DeviceArray b3 = iota_device(Shape{2, 3, 4});
    const DeviceArray p = b3.transpose({2, 0, 1});
    REQUIRE(p.shape() == Shape{4, 2, 3});
    REQUIRE(p.strides() == Strides{8, 96, 32});
    CHECK(p.copy_to_host().to_vector<double>() == gather_iota(Shape{4, 2, 3}, {8, 96, 32}, 0));
  }
}

TEST_CASE("transfers: a 4-d permuted view with a reversed axis, in every direction",
          "[transfers][views]") {
  // base (3, 4, 5, 6) C: strides (960, 240, 48, 8). transpose(2, 0, 3, 1): shape (5, 3, 6, 4),
  // strides (48, 960, 8, 240). [1:4] on axis 0 and [::-2] on axis 2: shape (3, 3, 3, 4),
  // strides (48, 960, -16, 240), element 0 at byte 48 + 5 * 8 = 88.
  const Shape shape{3, 3, 3, 4};
  const Strides strides{48, 960, -16, 240};
  const std::vector<double> expected = gather_iota(shape, strides, 88);
  const auto make_view = [](const DeviceArray& base) {
    return base.transpose({2, 0, 3, 1}).slice(0, 1, 4).slice(2, std::nullopt, std::nullopt, -2);
  };
  const DeviceArray base = iota_device(Shape{3, 4, 5, 6});
  const DeviceArray view = make_view(base);
  REQUIRE(view.shape() == shape);
  REQUIRE(view.strides() == strides);
  SECTION("D2H") {
    CHECK(view.copy_to_host().to_vector<double>() == expected);
  }
  SECTION("D2H into an F host array") {
    const HostArray h(shape, f8(), Order::F);
    view.copy_to_host(h);
    CHECK(h.to_vector<double>() == expected);
  }
  SECTION("D2D into a C device array") {
    const DeviceArray d = devmem::device_array(shape, f8());
    d.copy_to_device(view);
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("H2D into the same view of another array") {
    const DeviceArray other = devmem::device_array(Shape{3, 4, 5, 6}, f8());
    other.fill(kSentinel);
    make_view(other).copy_to_device(view.copy_to_host());
    const std::vector<double> all = other.to_vector<double>();
    std::size_t written = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i] != kSentinel) {
        ++written;
        CHECK(all[i] == static_cast<double>(i));  // each element lands where it came from
      }
    }
    CHECK(written == expected.size());
  }
}

TEST_CASE("transfers: record dtypes", "[transfers][record]") {
  struct Item {
    std::int16_t tag;
    double value;
  };
  std::vector<Item> items;
  for (std::int16_t i = 0; i < 5; ++i) items.push_back(Item{i, i * 1.5});
  const DeviceArray d = devmem::to_device(items);
  CHECK(d.dtype() == devmem::dtype_of<Item>());
  CHECK(d.itemsize() == static_cast<int64_t>(sizeof(Item)));
  const std::vector<Item> back = d.to_vector<Item>();
  REQUIRE(back.size() == 5);
  for (std::size_t i = 0; i < back.size(); ++i) {
    CHECK(back[i].tag == items[i].tag);
    CHECK(back[i].value == items[i].value);
  }
  const Item third = d.item<Item>(2);
  CHECK(third.value == 3.0);
  d.set_item(Item{-1, -1.0}, 4);
  CHECK(d.slice(0, std::nullopt, std::nullopt, -1).item<Item>(0).tag == -1);
}

TEST_CASE("transfers: broadcast sources", "[transfers]") {
  SECTION("device broadcast array to host") {
    const DeviceArray b = devmem::device_array(Shape{4, 3}, f8(), Strides{0, 8});
    // Every row is the same memory: writing row 0 writes them all.
    b[0].copy_to_device(HostArray::from(std::vector<double>{1, 2, 3}));
    const HostArray h = b.copy_to_host();
    CHECK(h.shape() == Shape{4, 3});
    CHECK(h.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  }
  SECTION("device broadcast array into a dense device array") {
    const DeviceArray b = devmem::device_array(Shape{3, 2}, f8(), Strides{8, 0});
    b.set_item(5.0, 0, 0);
    b.set_item(6.0, 1, 0);
    b.set_item(7.0, 2, 0);
    const DeviceArray d = devmem::device_array(Shape{3, 2}, f8());
    d.copy_to_device(b);
    CHECK(d.to_vector<double>() == std::vector<double>{5, 5, 6, 6, 7, 7});
  }
  SECTION("host broadcast view into a device array") {
    const std::vector<double> col{1, 2};
    const HostArray b =
        HostArray::view(static_cast<const void*>(col.data()), Shape{2, 3}, f8(), Strides{8, 0});
    const DeviceArray d = devmem::device_array(Shape{2, 3}, f8(), {}, Order::F);
    d.copy_to_device(b);
    CHECK(d.to_vector<double>() == std::vector<double>{1, 1, 1, 2, 2, 2});
  }
}

TEST_CASE("transfers: copy_to_host into existing host arrays", "[transfers]") {
  const DeviceArray d = iota_device(Shape{3, 4});
  SECTION("C destination") {
    const HostArray h(Shape{3, 4}, f8());
    d.copy_to_host(h);
    CHECK(h.to_vector<double>() == iota_vec(12));
  }
  SECTION("F destination") {
    const HostArray h(Shape{3, 4}, f8(), Order::F);
    d.copy_to_host(h);
    CHECK(h.to_vector<double>() == iota_vec(12));
    CHECK(h.at<double>(1, 0) == 4.0);
    // In memory, F order: column 0 first.
    const auto* raw = static_cast<const double*>(h.data());
    CHECK(raw[1] == 4.0);
  }
  SECTION("a std::span") {
    std::vector<double> out(12, kSentinel);
    d.copy_to_host(std::span<double>(out));
    CHECK(out == iota_vec(12));
  }
  SECTION("a view of user memory") {
    std::vector<double> out(12, kSentinel);
    d.copy_to_host(HostArray::view(static_cast<void*>(out.data()), Shape{3, 4}, f8()));
    CHECK(out == iota_vec(12));
  }
  SECTION("a transposed destination view") {
    const HostArray h(Shape{4, 3}, f8());
    d.copy_to_host(h.T());
    CHECK(h.to_vector<double>() == gather_iota(Shape{4, 3}, {8, 32}, 0));
  }
  SECTION("a pinned destination") {
    const HostArray p = devmem::pinned_array(Shape{3, 4}, f8());
    d.copy_to_host(p);
    CHECK(p.to_vector<double>() == iota_vec(12));
  }
  SECTION("on a stream into pinned memory") {
    const devmem::Stream s = devmem::stream();
    const HostArray p = devmem::pinned_array(Shape{3, 4}, f8());
    d.copy_to_host(p, s);
    s.synchronize();
    CHECK(p.to_vector<double>() == iota_vec(12));
  }
  SECTION("squeezed shapes are compatible: (3, 4) into (1, 3, 1, 4)") {
    const HostArray h(Shape{1, 3, 1, 4}, f8());
    d.copy_to_host(h);
    CHECK(h.to_vector<double>() == iota_vec(12));
  }
}

TEST_CASE("transfers: strided host destinations keep their gaps (numba#3553)", "[transfers]") {
  SECTION("contiguous device array into a strided host view") {
    const HostArray base(Shape{10, 12}, f8());
    base.fill(kSentinel);
    const HostArray view = base.slice({Slice{1, {}, 3}, Slice{{}, {}, 2}});
    REQUIRE(view.shape() == Shape{3, 6});
    const DeviceArray d = iota_device(Shape{3, 6});
    d.copy_to_host(view);
    CHECK(base.to_vector<double>() ==
          expected_after_strided_write(10, 12, 1, 3, 0, 2, iota_vec(18)));
  }
  SECTION("strided device view into a strided host view") {
    const DeviceArray dbase = iota_device(Shape{10, 12});
    const DeviceArray dview = dbase.slice({Slice{{}, {}, 2}, Slice{1, {}, 3}});
    REQUIRE(dview.shape() == Shape{5, 4});
    const HostArray base(Shape{10, 12}, f8());
    base.fill(kSentinel);
    const HostArray hview = base.slice({Slice{{}, {}, 2}, Slice{1, {}, 3}});
    dview.copy_to_host(hview);
    const std::vector<double> written = gather_iota(Shape{5, 4}, {192, 24}, 8);
    CHECK(base.to_vector<double>() == expected_after_strided_write(10, 12, 0, 2, 1, 3, written));
  }
  SECTION("rows of a wider buffer (pitched destination)") {
    const HostArray base(Shape{4, 10}, f8());
    base.fill(kSentinel);
    const HostArray view = base.slice(1, 2, 7);
    REQUIRE(view.shape() == Shape{4, 5});
    iota_device(Shape{4, 5}).copy_to_host(view);
    CHECK(base.to_vector<double>() == [] {
      std::vector<double> e(40, kSentinel);
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 5; ++j) e[static_cast<std::size_t>(i * 10 + 2 + j)] = i * 5 + j;
      return e;
    }());
  }
  SECTION("a reversed host destination") {
    const HostArray base(Shape{7}, f8());
    base.fill(kSentinel);
    const HostArray rev = base.slice(0, 5, 0, -2);  // elements 5, 3, 1
    REQUIRE(rev.shape() == Shape{3});
    iota_device(Shape{3}, Order::C, {}, 10.0).copy_to_host(rev);
    CHECK(base.to_vector<double>() ==
          std::vector<double>{kSentinel, 12, kSentinel, 11, kSentinel, 10, kSentinel});
  }
  SECTION("a strided destination on a stream") {
    const devmem::Stream s = devmem::stream();
    const HostArray base = devmem::pinned_array(Shape{6, 6}, f8());
    base.fill(kSentinel);
    const HostArray view = base.slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}});
    const DeviceArray d = iota_device(Shape{3, 3});
    d.copy_to_host(view, s);
    s.synchronize();
    CHECK(base.to_vector<double>() == expected_after_strided_write(6, 6, 0, 2, 0, 2, iota_vec(9)));
  }
}

TEST_CASE("transfers: strided device destinations keep their gaps", "[transfers]") {
  const DeviceArray dbase = devmem::device_array(Shape{10, 12}, f8());
  dbase.fill(kSentinel);
  const DeviceArray dview = dbase.slice({Slice{{}, {}, 2}, Slice{1, {}, 2}});
  REQUIRE(dview.shape() == Shape{5, 6});
  SECTION("H2D from a contiguous host array") {
    dview.copy_to_device(iota_host(Shape{5, 6}));
    CHECK(dbase.to_vector<double>() ==
          expected_after_strided_write(10, 12, 0, 2, 1, 2, iota_vec(30)));
  }
  SECTION("H2D from a strided host view") {
    const HostArray hbase = iota_host(Shape{10, 12});
    const HostArray hview = hbase.slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}});
    dview.copy_to_device(hview);
    const std::vector<double> written = gather_iota(Shape{5, 6}, {192, 16}, 0);
    CHECK(dbase.to_vector<double>() == expected_after_strided_write(10, 12, 0, 2, 1, 2, written));
  }
  SECTION("D2D from a contiguous device array") {
    dview.copy_to_device(iota_device(Shape{5, 6}));
    CHECK(dbase.to_vector<double>() ==
          expected_after_strided_write(10, 12, 0, 2, 1, 2, iota_vec(30)));
  }
  SECTION("D2D from a transposed device view") {
    const DeviceArray src = iota_device(Shape{6, 5});
    dview.copy_to_device(src.T());
    const std::vector<double> written = gather_iota(Shape{5, 6}, {8, 40}, 0);
    CHECK(dbase.to_vector<double>() == expected_after_strided_write(10, 12, 0, 2, 1, 2, written));
  }
  SECTION("H2D from a std::span") {
    const std::vector<double> v = iota_vec(30, 100.0);
    dview.copy_to_device(std::span<const double>(v));
    CHECK(dbase.to_vector<double>() == expected_after_strided_write(10, 12, 0, 2, 1, 2, v));
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const HostArray src = iota_host(Shape{5, 6});
    dview.copy_to_device(src, s);
    s.synchronize();
    CHECK(dbase.to_vector<double>() ==
          expected_after_strided_write(10, 12, 0, 2, 1, 2, iota_vec(30)));
  }
  SECTION("a reversed device destination") {
    const DeviceArray line = devmem::device_array(Shape{6}, f8());
    line.fill(kSentinel);
    line.slice(0, std::nullopt, std::nullopt, -2).copy_to_device(iota_host(Shape{3}));
    CHECK(line.to_vector<double>() ==
          std::vector<double>{kSentinel, 2, kSentinel, 1, kSentinel, 0});
  }
}

TEST_CASE("transfers: H2D and D2D between different layouts", "[transfers]") {
  SECTION("C host into F device") {
    const DeviceArray d = devmem::device_array(Shape{3, 4}, f8(), {}, Order::F);
    d.copy_to_device(iota_host(Shape{3, 4}));
    CHECK(d.to_vector<double>() == iota_vec(12));
    CHECK(d.item<double>(1, 2) == 6.0);
  }
  SECTION("F host into C device") {
    const DeviceArray d = devmem::device_array(Shape{3, 4}, f8());
    d.copy_to_device(iota_host(Shape{3, 4}, Order::F));
    CHECK(d.to_vector<double>() == iota_vec(12));
  }
  SECTION("D2D C into F") {
    const DeviceArray src = iota_device(Shape{4, 5});
    const DeviceArray dst = devmem::device_array(Shape{4, 5}, f8(), {}, Order::F);
    dst.copy_to_device(src);
    CHECK(dst.to_vector<double>() == iota_vec(20));
    CHECK(dst.copy_to_host().strides() == Strides{8, 32});
  }
  SECTION("D2D from a strided view into a dense array") {
    const DeviceArray src = iota_device(Shape{10});
    const DeviceArray dst = devmem::device_array(Shape{4}, f8());
    dst.copy_to_device(src.slice(0, 9, std::nullopt, -3));
    CHECK(dst.to_vector<double>() == std::vector<double>{9, 6, 3, 0});
  }
  SECTION("D2D of 0-d arrays") {
    const DeviceArray a = devmem::device_array(Shape{}, i8());
    const DeviceArray b = devmem::device_array(Shape{}, i8());
    a.set_item(std::int64_t{-5});
    b.copy_to_device(a);
    CHECK(b.item<std::int64_t>() == -5);
  }
  SECTION("H2D of a 0-d array") {
    const DeviceArray a = devmem::device_array(Shape{}, f8());
    const HostArray h(Shape{}, f8());
    h.at<double>() = 8.5;
    a.copy_to_device(h);
    CHECK(a.item<double>() == 8.5);
  }
  SECTION("arrays without elements copy nothing") {
    const DeviceArray a = devmem::device_array(Shape{0, 3}, f8());
    a.copy_to_device(HostArray(Shape{0, 3}, f8()));
    a.copy_to_device(devmem::device_array(Shape{0, 3}, f8()));
    a.copy_to_host(HostArray(Shape{0, 3}, f8()));
    CHECK(a.size() == 0);
  }
  SECTION("D2D on a stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray src = iota_device(Shape{256});
    const DeviceArray dst = devmem::device_array(Shape{256}, f8(), {}, Order::C, s);
    dst.copy_to_device(src);  // the destination's stream
    s.synchronize();
    CHECK(dst.to_vector<double>() == iota_vec(256));
  }
}

TEST_CASE("transfers: overlapping D2D copies give NumPy's result", "[transfers]") {
  SECTION("a <- a[::-1]") {
    const DeviceArray a = iota_device(Shape{10});
    a.copy_to_device(a.slice(0, std::nullopt, std::nullopt, -1));
    CHECK(a.to_vector<double>() == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  }
  SECTION("a[2:] <- a[:8]") {
    const DeviceArray a = iota_device(Shape{10});
    a.slice(0, 2, std::nullopt).copy_to_device(a.slice(0, std::nullopt, 8));
    CHECK(a.to_vector<double>() == std::vector<double>{0, 1, 0, 1, 2, 3, 4, 5, 6, 7});
  }
  SECTION("a[:8] <- a[2:]") {
    const DeviceArray a = iota_device(Shape{10});
    a.slice(0, std::nullopt, 8).copy_to_device(a.slice(0, 2, std::nullopt));
    CHECK(a.to_vector<double>() == std::vector<double>{2, 3, 4, 5, 6, 7, 8, 9, 8, 9});
  }
  SECTION("square a <- a.T") {
    const DeviceArray a = iota_device(Shape{4, 4});
    a.copy_to_device(a.T());
    CHECK(a.to_vector<double>() == gather_iota(Shape{4, 4}, {8, 32}, 0));
  }
  SECTION("a <- a[::-1] on a created stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray a = iota_device(Shape{1000});
    a.copy_to_device(a.slice(0, std::nullopt, std::nullopt, -1), s);
    s.synchronize();
    std::vector<double> expected = iota_vec(1000);
    std::reverse(expected.begin(), expected.end());
    CHECK(a.to_vector<double>() == expected);
  }
  SECTION("a <- a is a no-op") {
    const DeviceArray a = iota_device(Shape{3, 3});
    a.copy_to_device(a);
    CHECK(a.to_vector<double>() == iota_vec(9));
  }
  SECTION("two views of the same buffer that interleave but do not overlap elements") {
    const DeviceArray a = iota_device(Shape{10});
    a.slice(0, 1, std::nullopt, 2).copy_to_device(a.slice(0, 0, std::nullopt, 2));
    CHECK(a.to_vector<double>() == std::vector<double>{0, 0, 2, 2, 4, 4, 6, 6, 8, 8});
  }
}

TEST_CASE("transfers: mapped memory and its device view alias the same bytes",
          "[transfers][mapped]") {
  // H2D and D2H copies between a mapped array and its own device view overlap just like D2D
  // copies within one allocation; the result must still be NumPy's.
  SECTION("mapped memory: the device view <- a reversed host view of the same bytes") {
    const devmem::MappedArray m = devmem::mapped_array(Shape{10}, f8());
    m.copy_from(iota_host(Shape{10}));
    m.device().copy_to_device(m.slice(0, std::nullopt, std::nullopt, -1));
    CHECK(m.to_vector<double>() == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  }
  SECTION("mapped memory: a host view <- the reversed device view of the same bytes") {
    const devmem::MappedArray m = devmem::mapped_array(Shape{10}, f8());
    m.copy_from(iota_host(Shape{10}));
    m.device().slice(0, std::nullopt, std::nullopt, -1).copy_to_host(m);
    CHECK(m.to_vector<double>() == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  }
}

TEST_CASE("transfers: shape and dtype errors", "[transfers][errors]") {
  const DeviceArray d = iota_device(Shape{3, 4});
  SECTION("D2H dtype mismatch") {
    const HostArray h(Shape{3, 4}, f4());
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(h), devmem::InvalidArgument,
        Message("copy_to_host: dtype mismatch: source is float64, destination is float32"));
  }
  SECTION("D2H shape mismatch") {
    const HostArray h(Shape{4, 3}, f8());
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(h), devmem::InvalidArgument,
        Message("copy_to_host: shape mismatch: source (3, 4), destination (4, 3)"));
  }
  SECTION("D2H into a span of the wrong size") {
    std::vector<double> out(5);
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(std::span<double>(out)), devmem::InvalidArgument,
        Message("copy_to_host: the destination range has 5 elements, the array has 12"));
  }
  SECTION("D2H into a span of the wrong type") {
    std::vector<float> out(12);
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(std::span<float>(out)), devmem::InvalidArgument,
        Message("copy_to_host: dtype mismatch: source is float64, destination is float32"));
  }
  SECTION("D2H into read-only host memory") {
    const std::vector<double> v(12, kSentinel);
    const HostArray ro = HostArray::view(v).reshape(Shape{3, 4});
    REQUIRE(ro.is_readonly());
    REQUIRE_THROWS_MATCHES(d.copy_to_host(ro), devmem::InvalidArgument,
                           Message("copy_to_host: the destination host array is read-only"));
    CHECK(v == std::vector<double>(12, kSentinel));
  }
  SECTION("H2D dtype mismatch") {
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(HostArray(Shape{3, 4}, i8())), devmem::InvalidArgument,
        Message("copy_to_device: dtype mismatch: source is int64, destination is float64"));
  }
  SECTION("H2D shape mismatch") {
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(HostArray(Shape{12}, f8())), devmem::InvalidArgument,
        Message("copy_to_device: shape mismatch: source (12,), destination (3, 4)"));
  }
  SECTION("H2D from a span of the wrong size") {
    const std::vector<double> v(13);
    REQUIRE_THROWS_MATCHES(d.copy_to_device(std::span<const double>(v)), devmem::InvalidArgument,
                           Message("copy_to_device: the source range has 13 elements, the array "
                                   "has 12"));
  }
  SECTION("D2D dtype mismatch") {
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(devmem::device_array(Shape{3, 4}, f4())), devmem::InvalidArgument,
        Message("copy_to_device: dtype mismatch: source is float32, destination is float64"));
  }
  SECTION("D2D shape mismatch") {
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(devmem::device_array(Shape{3, 5}, f8())), devmem::InvalidArgument,
        Message("copy_to_device: shape mismatch: source (3, 5), destination (3, 4)"));
  }
  SECTION("empty arrays of different shapes are still a mismatch") {
    const DeviceArray e = devmem::device_array(Shape{0, 5}, f8());
    REQUIRE_THROWS_AS(e.copy_to_host(HostArray(Shape{5, 0}, f8())), devmem::InvalidArgument);
  }
  SECTION("errors leave the destination untouched") {
    const HostArray h(Shape{3, 5}, f8());
    h.fill(kSentinel);
    REQUIRE_THROWS_AS(d.copy_to_host(h), devmem::InvalidArgument);
    CHECK(h.to_vector<double>() == std::vector<double>(15, kSentinel));
  }
  SECTION("to_vector with the wrong type") {
    REQUIRE_THROWS_MATCHES(d.to_vector<float>(), devmem::InvalidArgument,
                           Message("to_vector: the array's dtype is float64, not float32"));
  }
}

TEST_CASE("transfers: contiguous ranges of elements, const or not", "[transfers][ranges]") {
  // Anything contiguous and sized with an element type: std::vector, std::array, std::span of
  // const or non-const elements.
  const DeviceArray d = devmem::device_array<double>(Shape{2, 3});
  const std::vector<double> expected = iota_vec(6);
  SECTION("copy_to_device from a std::vector") {
    std::vector<double> v = expected;
    d.copy_to_device(v);
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("copy_to_device from a const std::vector") {
    const std::vector<double>& v = expected;
    d.copy_to_device(v);
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("copy_to_device from a std::array") {
    const std::array<double, 6> a{0, 1, 2, 3, 4, 5};
    d.copy_to_device(a);
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("copy_to_device from a non-const span") {
    std::vector<double> v = expected;
    d.copy_to_device(std::span<double>(v));
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("copy_to_device from a const span") {
    d.copy_to_device(std::span<const double>(expected));
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("copy_to_device from a fixed-extent span on a stream") {
    const devmem::Stream s = devmem::stream();
    std::array<double, 6> a{0, 1, 2, 3, 4, 5};
    d.copy_to_device(std::span<double, 6>(a), s);
    s.synchronize();
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("copy_to_host into a std::vector") {
    d.copy_to_device(expected);
    std::vector<double> out(6, kSentinel);
    d.copy_to_host(out);
    CHECK(out == expected);
  }
  SECTION("copy_to_host into a std::array") {
    d.copy_to_device(expected);
    std::array<double, 6> out{};
    out.fill(kSentinel);
    d.copy_to_host(out);
    CHECK(std::vector<double>(out.begin(), out.end()) == expected);
  }
  SECTION("copy_to_host into a span") {
    d.copy_to_device(expected);
    std::vector<double> out(6, kSentinel);
    d.copy_to_host(std::span<double>(out));
    CHECK(out == expected);
  }
  SECTION("to_device of a std::array, a non-const span and a const vector") {
    const std::array<double, 6> a{0, 1, 2, 3, 4, 5};
    const DeviceArray from_array = devmem::to_device(a);
    CHECK(from_array.shape() == Shape{6});
    CHECK(from_array.to_vector<double>() == expected);
    std::vector<double> v = expected;
    CHECK(devmem::to_device(std::span<double>(v)).to_vector<double>() == expected);
    CHECK(devmem::to_device(expected).to_vector<double>() == expected);
  }
  SECTION("size mismatches") {
    std::vector<double> longer(7);
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(longer), devmem::InvalidArgument,
        Message("copy_to_device: the source range has 7 elements, the array has 6"));
    std::array<double, 4> shorter{};
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(shorter), devmem::InvalidArgument,
        Message("copy_to_host: the destination range has 4 elements, the array has 6"));
    CHECK(shorter == std::array<double, 4>{});
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(std::span<double>(longer)), devmem::InvalidArgument,
        Message("copy_to_host: the destination range has 7 elements, the array has 6"));
  }
  SECTION("an element type other than the dtype") {
    std::vector<float> floats(6);
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(floats), devmem::InvalidArgument,
        Message("copy_to_device: dtype mismatch: source is float32, destination is float64"));
    REQUIRE_THROWS_MATCHES(
        d.copy_to_host(floats), devmem::InvalidArgument,
        Message("copy_to_host: dtype mismatch: source is float64, destination is float32"));
  }
}

TEST_CASE("transfers: Numba's squeezed-shape compatibility", "[transfers]") {
  SECTION("(1, 5) device to (5,) host") {
    const DeviceArray d = iota_device(Shape{1, 5});
    const HostArray h(Shape{5}, f8());
    d.copy_to_host(h);
    CHECK(h.to_vector<double>() == iota_vec(5));
  }
  SECTION("(5,) device from (1, 5, 1) host") {
    const DeviceArray d = devmem::device_array(Shape{5}, f8());
    d.copy_to_device(iota_host(Shape{1, 5, 1}));
    CHECK(d.to_vector<double>() == iota_vec(5));
  }
  SECTION("(5, 1) device from (1, 5) device") {
    const DeviceArray d = devmem::device_array(Shape{5, 1}, f8());
    d.copy_to_device(iota_device(Shape{1, 5}));
    CHECK(d.to_vector<double>() == iota_vec(5));
  }
  SECTION("(5,) and (5, 2) are not compatible") {
    const DeviceArray d = devmem::device_array(Shape{5}, f8());
    REQUIRE_THROWS_MATCHES(
        d.copy_to_device(HostArray(Shape{5, 2}, f8())), devmem::InvalidArgument,
        Message("copy_to_device: shape mismatch: source (5, 2), destination (5,)"));
  }
  SECTION("0-d and (1,) are compatible") {
    const DeviceArray d = devmem::device_array(Shape{}, f8());
    d.copy_to_device(iota_host(Shape{1}, Order::C, 3.0));
    CHECK(d.item<double>() == 3.0);
    const HostArray h(Shape{1, 1}, f8());
    d.copy_to_host(h);
    CHECK(h.at<double>(0, 0) == 3.0);
  }
}

TEST_CASE("transfers: large transposes, reversals and gapped destinations round trip",
          "[transfers][views]") {
  // Many short rows in every direction: on the GPU backends these take the bounded path (the
  // strided-copy kernel and whole-extent copies) instead of one vendor copy per element.
  const Shape base_shape{12, 14, 16, 18};
  const Strides c = devmem::layout::dense_strides(base_shape, 4, Order::C);
  const DeviceArray base = iota_device<float>(base_shape);
  struct View {
    const char* name;
    DeviceArray (*make)(const DeviceArray&);
    Strides strides;
    int64_t offset;
  };
  const std::vector<View> views{
      {"transpose",
       [](const DeviceArray& a) {
         return a.transpose({3, 2, 1, 0});
       },
       Strides{c[3], c[2], c[1], c[0]}, 0},
      {"reversed innermost axis",
       [](const DeviceArray& a) { return a.slice(3, std::nullopt, std::nullopt, -1); },
       Strides{c[0], c[1], c[2], -c[3]}, 17 * 4},
      {"permute with a reversed axis",
       [](const DeviceArray& a) {
         return a.transpose({2, 0, 3, 1}).slice(0, std::nullopt, std::nullopt, -1);
       },
       Strides{-c[2], c[0], c[3], c[1]}, 15 * c[2]},
  };
  for (const View& v : views) {
    INFO(v.name);
    const DeviceArray view = v.make(base);
    REQUIRE(view.strides() == v.strides);
    const std::vector<double> expected = gather_iota(view.shape(), v.strides, v.offset, 4);
    const auto as_double = [](const std::vector<float>& values) {
      return std::vector<double>(values.begin(), values.end());
    };
    // D2H into a new C array.
    const HostArray h = view.copy_to_host();
    CHECK(as_double(h.to_vector<float>()) == expected);
    // D2D into a C device array.
    const DeviceArray d = devmem::device_array(view.shape(), f4());
    d.copy_to_device(view);
    CHECK(as_double(d.to_vector<float>()) == expected);
    // H2D into the same view of another array: each element lands where it came from.
    const DeviceArray other = devmem::device_array(base_shape, f4());
    other.fill(-1.0f);
    v.make(other).copy_to_device(h);
    CHECK(other.to_vector<float>() == base.to_vector<float>());
  }
  SECTION("every other element of a device destination; the others are never written") {
    const DeviceArray wide = devmem::device_array(Shape{12, 14, 16, 36}, f4());
    wide.fill(-1.0f);
    const DeviceArray gapped = wide.slice(3, std::nullopt, std::nullopt, 2);
    gapped.copy_to_device(base.copy_to_host());
    const std::vector<float> all = wide.to_vector<float>();
    for (std::size_t i = 0; i < all.size(); ++i) {
      const float want = i % 2 == 1 ? -1.0f : static_cast<float>(i / 2);
      if (all[i] != want) FAIL("element " << i << " is " << all[i] << ", expected " << want);
    }
    // And back: the gapped device view into a C host array.
    CHECK(gapped.copy_to_host().to_vector<float>() == base.to_vector<float>());
  }
}

namespace {

/// Opens `gate` from another thread after a short delay, recording that it did, so that a call
/// which (correctly) waits for the gated stream cannot hang the test.
class DelayedOpener {
 public:
  explicit DelayedOpener(StreamGate& gate)
      : thread_([this, &gate] {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          opened_.store(true);
          gate.open();
        }) {}
  DelayedOpener(const DelayedOpener&) = delete;
  DelayedOpener& operator=(const DelayedOpener&) = delete;
  ~DelayedOpener() { thread_.join(); }
  [[nodiscard]] bool opened() const noexcept { return opened_.load(); }

 private:
  std::atomic<bool> opened_{false};
  std::thread thread_;
};

}  // namespace

// cudaMemcpyAsync / hipMemcpyAsync with pageable host memory: device-to-host returns once the copy
// is complete, host-to-device once the source has been read; page-locked memory stays
// asynchronous. Every backend behaves so (docs/arrays-and-copies.md#transfer-completion).
TEST_CASE("transfers: pageable host memory follows the vendors' synchronisation rules",
          "[transfers][streams]") {
  const devmem::Stream s = devmem::stream();
  const Shape shape{64, 48};
  const std::vector<double> expected = iota_vec(count_of(shape));

  SECTION("copy_to_host() into new pageable memory returns with the data") {
    const DeviceArray d = iota_device(shape, Order::C, s);
    StreamGate gate(s);  // earlier work of the stream, still running
    DelayedOpener opener(gate);
    const HostArray h = d.copy_to_host();  // the array's stream: s
    CHECK(opener.opened());
    CHECK(h.to_vector<double>() == expected);
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("a strided pageable destination (one strided copy) is complete on return") {
    const DeviceArray d = iota_device(shape, Order::C, s);
    HostArray out(Shape{48, 64}, f8(), Order::C);
    StreamGate gate(s);
    DelayedOpener opener(gate);
    d.copy_to_host(out.transpose(), s);
    CHECK(opener.opened());
    CHECK(out.transpose().copy(Order::C).to_vector<double>() == expected);
  }
  SECTION("host-to-device from pageable memory has read its source on return") {
    std::vector<double> source = expected;
    const DeviceArray d = devmem::device_array<double>(shape, Order::C, s);
    StreamGate gate(s);
    DelayedOpener opener(gate);
    d.copy_to_device(HostArray::view(std::span<double>(source), shape), s);
    std::fill(source.begin(), source.end(), -1.0);  // the caller may reuse its buffer at once
    s.synchronize();
    CHECK(d.to_vector<double>() == expected);
  }
  SECTION("host-to-device from a strided pageable source has read it on return") {
    std::vector<double> source = iota_vec(count_of(shape));
    const HostArray transposed_source = HostArray::view(std::span<double>(source), Shape{48, 64});
    const DeviceArray d = devmem::device_array<double>(shape, Order::C, s);
    StreamGate gate(s);
    DelayedOpener opener(gate);
    d.copy_to_device(transposed_source.transpose(), s);
    const std::vector<double> want =
        transposed_source.transpose().copy(Order::C).to_vector<double>();
    std::fill(source.begin(), source.end(), -1.0);
    s.synchronize();
    CHECK(d.to_vector<double>() == want);
  }
  SECTION("page-locked memory stays asynchronous") {
    const DeviceArray d = iota_device(shape, Order::C, s);
    HostArray pinned = devmem::pinned_array<double>(shape);
    {
      StreamGate gate(s);
      d.copy_to_host(pinned, s);
      CHECK_FALSE(s.query());  // returned while the stream is still blocked
      gate.open();
      CHECK_FALSE(gate.timed_out());
    }
    s.synchronize();
    CHECK(pinned.to_vector<double>() == expected);
    StreamGate gate(s);
    const DeviceArray back = devmem::device_array<double>(shape, Order::C, s);
    back.copy_to_device(pinned, s);
    CHECK_FALSE(s.query());
    gate.open();
    s.synchronize();
    CHECK(back.to_vector<double>() == expected);
  }
}

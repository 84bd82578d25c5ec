// Allocation: device_array, device_array<T>, device_array_like, to_device (HostArray, span,
// vector, record, with copy = false and `to`), DeviceRecord's transfers, alloc_size (Numba's
// extent rules).
#include "support.hpp"

#include <array>
#include <complex>
#include <limits>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

struct Particle {
  std::int32_t id;
  double position[3];
  float mass;
};

bool same_particle(const Particle& a, const Particle& b) {
  return a.id == b.id && a.position[0] == b.position[0] && a.position[1] == b.position[1] &&
         a.position[2] == b.position[2] && a.mass == b.mass;
}

}  // namespace

TEST_CASE("device_array: dense C and F layouts", "[allocation]") {
  SECTION("C order (2, 3, 4) float64") {
    const DeviceArray d = devmem::device_array(Shape{2, 3, 4}, f8());
    CHECK(d.shape() == Shape{2, 3, 4});
    CHECK(d.strides() == Strides{96, 32, 8});
    CHECK(d.dtype() == f8());
    CHECK(d.ndim() == 3);
    CHECK(d.size() == 24);
    CHECK(d.itemsize() == 8);
    CHECK(d.nbytes() == 192);
    CHECK(d.alloc_size() == 192);
    CHECK(d.len() == 2);
    CHECK(d.data() != nullptr);
    CHECK(d.is_c_contiguous());
    CHECK_FALSE(d.is_f_contiguous());
  }
  SECTION("F order (2, 3, 4) float64") {
    const DeviceArray d = devmem::device_array(Shape{2, 3, 4}, f8(), {}, Order::F);
    CHECK(d.strides() == Strides{8, 16, 48});
    CHECK(d.alloc_size() == 192);
    CHECK(d.is_f_contiguous());
    CHECK_FALSE(d.is_c_contiguous());
  }
  SECTION("the default dtype is float64") {
    const DeviceArray d = devmem::device_array(Shape{5});
    CHECK(d.dtype() == f8());
    CHECK(d.dtype().typestr() == "<f8");
    CHECK(d.strides() == Strides{8});
  }
  SECTION("values written are read back") {
    const DeviceArray d = devmem::device_array(Shape{3, 4}, f8(), {}, Order::F);
    const std::vector<double> v = iota_vec(12);
    d.copy_to_device(HostArray::view(std::span<const double>(v)).reshape(Shape{3, 4}));
    CHECK(d.to_vector<double>() == v);
    CHECK(d.item<double>(1, 2) == 6.0);
  }
  SECTION("1-d arrays are both C and F contiguous") {
    const DeviceArray d = devmem::device_array(Shape{7}, i4());
    CHECK(d.is_c_contiguous());
    CHECK(d.is_f_contiguous());
    CHECK(d.strides() == Strides{4});
  }
}

TEST_CASE("device_array<T>: typed allocation", "[allocation]") {
  SECTION("int32 C") {
    const DeviceArray d = devmem::device_array<std::int32_t>(Shape{4, 5});
    CHECK(d.dtype() == i4());
    CHECK(d.dtype().typestr() == "<i4");
    CHECK(d.strides() == Strides{20, 4});
    CHECK(d.alloc_size() == 80);
  }
  SECTION("int16 F") {
    const DeviceArray d = devmem::device_array<std::int16_t>(Shape{2, 3}, Order::F);
    CHECK(d.dtype() == devmem::dtype_of<std::int16_t>());
    CHECK(d.strides() == Strides{2, 4});
  }
  SECTION("complex128") {
    const DeviceArray d = devmem::device_array<std::complex<double>>(Shape{3});
    CHECK(d.dtype().typestr() == "<c16");
    CHECK(d.itemsize() == 16);
    d.set_item(std::complex<double>(1.0, -2.0), 1);
    CHECK(d.item<std::complex<double>>(1) == std::complex<double>(1.0, -2.0));
  }
  SECTION("with a stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray d = devmem::device_array<float>(Shape{8}, Order::C, s);
    CHECK(d.stream() == s);
    CHECK(d.dtype() == f4());
  }
}

TEST_CASE("device_array: explicit strides", "[allocation]") {
  SECTION("(10,) with stride 16 spans 152 bytes") {
    const DeviceArray d = devmem::device_array(Shape{10}, f8(), Strides{16});
    CHECK(d.strides() == Strides{16});
    CHECK(d.alloc_size() == 152);
    CHECK(d.nbytes() == 80);
    CHECK_FALSE(d.is_c_contiguous());
    CHECK_FALSE(d.is_f_contiguous());
    for (int i = 0; i < 10; ++i) d.set_item(static_cast<double>(i * i), i);
    std::vector<double> expected;
    for (int i = 0; i < 10; ++i) expected.push_back(static_cast<double>(i * i));
    CHECK(d.to_vector<double>() == expected);
    const HostArray h = d.copy_to_host();
    CHECK(h.strides() == Strides{8});
    CHECK(h.to_vector<double>() == expected);
  }
  SECTION("(10,) with stride -8 spans 80 bytes, element 0 last in memory") {
    const DeviceArray d = devmem::device_array(Shape{10}, f8(), Strides{-8});
    CHECK(d.strides() == Strides{-8});
    CHECK(d.alloc_size() == 80);
    for (int i = 0; i < 10; ++i) d.set_item(static_cast<double>(i), i);
    CHECK(d.to_vector<double>() == iota_vec(10));
    // Reversing gives stride +8: memory order, i.e. 9, 8, ..., 0.
    const DeviceArray r = d.slice(0, std::nullopt, std::nullopt, -1);
    CHECK(r.strides() == Strides{8});
    CHECK(r.is_c_contiguous());
    const std::vector<double> rv = r.to_vector<double>();
    CHECK(rv == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
    CHECK(static_cast<char*>(d.data()) - static_cast<char*>(r.data()) == 72);
    const HostArray h = d.copy_to_host();
    CHECK(h.strides() == Strides{8});
    CHECK(h.to_vector<double>() == iota_vec(10));
  }
  SECTION("broadcast (4, 3) with strides (0, 8) spans 24 bytes") {
    const DeviceArray d = devmem::device_array(Shape{4, 3}, f8(), Strides{0, 8});
    CHECK(d.alloc_size() == 24);
    CHECK(d.nbytes() == 96);
    CHECK_FALSE(d.is_c_contiguous());
    CHECK_FALSE(d.is_f_contiguous());
    d.set_item(1.0, 0, 0);
    d.set_item(2.0, 0, 1);
    d.set_item(3.0, 0, 2);
    // Every row is the same memory.
    CHECK(d.item<double>(3, 1) == 2.0);
    CHECK(d.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  }
  SECTION("(2, 5) with strides (40, 16) spans 112 bytes") {
    const DeviceArray d = devmem::device_array(Shape{2, 5}, f8(), Strides{40, 16});
    CHECK(d.alloc_size() == 112);
    d.fill(4.5);
    CHECK(d.to_vector<double>() == std::vector<double>(10, 4.5));
  }
  SECTION("mixed negative strides (3, 4) with (-32, 8)") {
    const DeviceArray d = devmem::device_array(Shape{3, 4}, f8(), Strides{-32, 8});
    CHECK(d.alloc_size() == 96);
    d.copy_to_device(iota_host(Shape{3, 4}));
    CHECK(d.to_vector<double>() == iota_vec(12));
    CHECK(d.item<double>(2, 3) == 11.0);
  }
  SECTION("explicit strides of a dense F layout are F contiguous") {
    const DeviceArray d = devmem::device_array(Shape{3, 4}, f8(), Strides{8, 24});
    CHECK(d.is_f_contiguous());
    CHECK(d.alloc_size() == 96);
  }
}

TEST_CASE("device_array: allocation sizes follow Numba's extent rules", "[allocation]") {
  CHECK(devmem::device_array(Shape{20, 50}, f8()).alloc_size() == 8000);
  CHECK(devmem::device_array(Shape{20, 50}, f8(), {}, Order::F).alloc_size() == 8000);
  CHECK(devmem::device_array(Shape{20, 50}, f8(), {}, Order::F).strides() == Strides{8, 160});
  CHECK(devmem::device_array(Shape{10}, f8(), Strides{16}).alloc_size() == 152);
  CHECK(devmem::device_array(Shape{10}, f8(), Strides{-8}).alloc_size() == 80);
  CHECK(devmem::device_array(Shape{4, 3}, f8(), Strides{0, 8}).alloc_size() == 24);
  CHECK(devmem::device_array(Shape{}, f8()).alloc_size() == 8);
  CHECK(devmem::device_array(Shape{0, 5}, f8()).alloc_size() == 0);
  CHECK(devmem::device_array(Shape{2, 5}, f8(), Strides{40, 16}).alloc_size() == 112);
  CHECK(devmem::device_array(Shape{3}, u1()).alloc_size() == 3);
}

TEST_CASE("device_array: 0-d arrays", "[allocation]") {
  const DeviceArray d = devmem::device_array(Shape{}, f8());
  CHECK(d.ndim() == 0);
  CHECK(d.shape().empty());
  CHECK(d.strides().empty());
  CHECK(d.size() == 1);
  CHECK(d.nbytes() == 8);
  CHECK(d.alloc_size() == 8);
  CHECK(d.is_c_contiguous());
  CHECK(d.is_f_contiguous());
  CHECK(d.data() != nullptr);
  d.set_item(2.5);
  CHECK(d.item<double>() == 2.5);
  CHECK(d.to_vector<double>() == std::vector<double>{2.5});
  const HostArray h = d.copy_to_host();
  CHECK(h.ndim() == 0);
  CHECK(h.at<double>() == 2.5);
  REQUIRE_THROWS_MATCHES(d.len(), devmem::InvalidArgument,
                         Message("len: a 0-d array has no length"));
}

TEST_CASE("device_array: arrays without elements", "[allocation]") {
  SECTION("(0, 5)") {
    const DeviceArray d = devmem::device_array(Shape{0, 5}, f8());
    CHECK(d.size() == 0);
    CHECK(d.nbytes() == 0);
    CHECK(d.alloc_size() == 0);
    CHECK(d.data() == nullptr);
    CHECK(d.is_c_contiguous());
    CHECK(d.is_f_contiguous());
    CHECK(d.len() == 0);
    const HostArray h = d.copy_to_host();
    CHECK(h.shape() == Shape{0, 5});
    CHECK(h.size() == 0);
    CHECK(d.to_vector<double>().empty());
    d.fill(1.0);  // nothing to do, no error
    d.memset(7);
    d.copy_to_device(HostArray(Shape{0, 5}));
  }
  SECTION("(3, 0, 2)") {
    const DeviceArray d = devmem::device_array(Shape{3, 0, 2}, i4(), {}, Order::F);
    CHECK(d.size() == 0);
    CHECK(d.alloc_size() == 0);
    CHECK(d.shape() == Shape{3, 0, 2});
    CHECK(d.ndim() == 3);
  }
  SECTION("default-constructed DeviceArray") {
    const DeviceArray d;
    CHECK(d.shape() == Shape{0});
    CHECK(d.dtype() == f8());
    CHECK(d.size() == 0);
    CHECK(d.data() == nullptr);
    CHECK(d.to_vector<double>().empty());
  }
}

TEST_CASE("device_array: the stream is kept", "[allocation][streams]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = devmem::device_array(Shape{4}, f8(), {}, Order::C, s);
  CHECK(d.stream() == s);
  CHECK(d.stream().native_handle() == s.native_handle());
  const DeviceArray plain = devmem::device_array(Shape{4}, f8());
  CHECK_FALSE(plain.stream().is_specified());
  CHECK(plain.stream().is_default());
  const DeviceArray on_default =
      devmem::device_array(Shape{4}, f8(), {}, Order::C, devmem::default_stream());
  CHECK(on_default.stream().is_specified());
  CHECK(on_default.stream().is_default());
  CHECK(on_default.context() == devmem::current_context());
}

TEST_CASE("device_array: memory_context is context() without a reference", "[allocation]") {
  const DeviceArray d = devmem::device_array(Shape{4, 6}, f8());
  const std::shared_ptr<devmem::Context> context = d.context();
  const long references = context.use_count();
  CHECK(d.memory_context() == context.get());
  CHECK(context.use_count() == references);
  // Views of the same memory, and the same array bound to another stream, name the same context.
  CHECK(d.T().memory_context() == context.get());
  CHECK(d.bind(devmem::stream()).memory_context() == context.get());
  CHECK(DeviceArray{}.memory_context() == nullptr);
}

TEST_CASE("device_array: invalid arguments", "[allocation][errors]") {
  SECTION("negative dimension") {
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2, -1}, f8()), devmem::InvalidArgument,
                           Message("device_array: negative dimension -1 in shape (2, -1)"));
  }
  SECTION("wrong number of strides") {
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2, 3}, f8(), Strides{8}),
                           devmem::InvalidArgument,
                           Message("device_array: 1 strides given for 2 dimensions"));
  }
  SECTION("order A or K") {
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2, 3}, f8(), {}, Order::A),
                           devmem::InvalidArgument,
                           Message("device_array: order must be C or F, got 'A'"));
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{2, 3}, f8(), {}, Order::K),
                           devmem::InvalidArgument,
                           Message("device_array: order must be C or F, got 'K'"));
  }
  SECTION("element count overflow") {
    const int64_t big = int64_t{1} << 40;
    REQUIRE_THROWS_MATCHES(
        devmem::device_array(Shape{big, big}, f8()), devmem::InvalidArgument,
        Message("device_array: element count of shape (1099511627776, 1099511627776) overflows "
                "int64"));
  }
  SECTION("byte size overflow") {
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{int64_t{1} << 61}, f8()),
                           devmem::InvalidArgument,
                           Message("device_array: size in bytes of shape (2305843009213693952,) "
                                   "with itemsize 8 overflows int64"));
  }
  SECTION("extent overflow of explicit strides") {
    const int64_t huge = std::numeric_limits<int64_t>::max() / 2;
    REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{4}, f8(), Strides{huge}),
                           devmem::InvalidArgument,
                           MessageContains("device_array: extent of shape (4,) with strides"));
  }
}

TEST_CASE("device_array_like: same shape, dtype and NumPy order-K strides", "[allocation]") {
  SECTION("C-contiguous device array") {
    const DeviceArray like = devmem::device_array(Shape{3, 4}, i4());
    const DeviceArray d = devmem::device_array_like(like);
    CHECK(d.shape() == Shape{3, 4});
    CHECK(d.dtype() == i4());
    CHECK(d.strides() == Strides{16, 4});
    CHECK(d.data() != like.data());
  }
  SECTION("F-contiguous device array") {
    const DeviceArray like = devmem::device_array(Shape{3, 4}, f8(), {}, Order::F);
    CHECK(devmem::device_array_like(like).strides() == Strides{8, 24});
  }
  SECTION("view (10, 12)[::2, ::2] -> (48, 8)") {
    const DeviceArray base = devmem::device_array(Shape{10, 12}, f8());
    const DeviceArray view = base.slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}});
    REQUIRE(view.shape() == Shape{5, 6});
    REQUIRE(view.strides() == Strides{192, 16});
    const DeviceArray d = devmem::device_array_like(view);
    CHECK(d.shape() == Shape{5, 6});
    CHECK(d.strides() == Strides{48, 8});
    CHECK(d.alloc_size() == 240);
  }
  SECTION("F view (10, 12)[::2, ::2] -> (8, 40)") {
    const DeviceArray base = devmem::device_array(Shape{10, 12}, f8(), {}, Order::F);
    const DeviceArray view = base.slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}});
    REQUIRE(view.strides() == Strides{16, 160});
    CHECK(devmem::device_array_like(view).strides() == Strides{8, 40});
  }
  SECTION("(3, 4, 5).transpose(1, 0, 2) -> (40, 160, 8)") {
    const DeviceArray base = devmem::device_array(Shape{3, 4, 5}, f8());
    const DeviceArray t = base.transpose({1, 0, 2});
    REQUIRE(t.shape() == Shape{4, 3, 5});
    REQUIRE(t.strides() == Strides{40, 160, 8});
    const DeviceArray d = devmem::device_array_like(t);
    CHECK(d.shape() == Shape{4, 3, 5});
    CHECK(d.strides() == Strides{40, 160, 8});
  }
  SECTION("(3, 4, 6).transpose(1, 0, 2)[:, :, ::2] -> (24, 96, 8)") {
    const DeviceArray base = devmem::device_array(Shape{3, 4, 6}, f8());
    const DeviceArray v = base.transpose({1, 0, 2}).slice(2, std::nullopt, std::nullopt, 2);
    REQUIRE(v.shape() == Shape{4, 3, 3});
    CHECK(devmem::device_array_like(v).strides() == Strides{24, 96, 8});
  }
  SECTION("reversed rows (3, 4)[::-1] -> (32, 8)") {
    const DeviceArray base = devmem::device_array(Shape{3, 4}, f8());
    const DeviceArray v = base.slice(0, std::nullopt, std::nullopt, -1);
    REQUIRE(v.strides() == Strides{-32, 8});
    CHECK(devmem::device_array_like(v).strides() == Strides{32, 8});
  }
  SECTION("1-d strided view becomes dense") {
    const DeviceArray base = devmem::device_array(Shape{10}, f8());
    const DeviceArray v = base.slice(0, 1, std::nullopt, 3);
    CHECK(devmem::device_array_like(v).strides() == Strides{8});
    CHECK(devmem::device_array_like(v).shape() == Shape{3});
  }
  SECTION("broadcast (4, 3) strides (0, 8) -> (8, 32) like NumPy") {
    const DeviceArray b = devmem::device_array(Shape{4, 3}, f8(), Strides{0, 8});
    const DeviceArray d = devmem::device_array_like(b);
    CHECK(d.strides() == Strides{8, 32});
    CHECK(d.alloc_size() == 96);
  }
  SECTION("0-d and empty") {
    CHECK(devmem::device_array_like(devmem::device_array(Shape{}, f8())).ndim() == 0);
    const DeviceArray e = devmem::device_array_like(devmem::device_array(Shape{0, 3}, f8()));
    CHECK(e.shape() == Shape{0, 3});
    CHECK(e.alloc_size() == 0);
  }
  SECTION("the stream argument is the new array's stream") {
    const devmem::Stream s = devmem::stream();
    const DeviceArray like = devmem::device_array(Shape{3}, f8());
    CHECK(devmem::device_array_like(like, s).stream() == s);
    CHECK_FALSE(devmem::device_array_like(like).stream().is_specified());
    CHECK(devmem::device_array_like(HostArray(Shape{2}), s).stream() == s);
  }
}

TEST_CASE("device_array_like: from host arrays", "[allocation][host]") {
  SECTION("C host array") {
    const HostArray h(Shape{3, 4}, i8());
    const DeviceArray d = devmem::device_array_like(h);
    CHECK(d.shape() == Shape{3, 4});
    CHECK(d.dtype() == i8());
    CHECK(d.strides() == Strides{32, 8});
  }
  SECTION("F host array") {
    const HostArray h(Shape{3, 4}, f8(), Order::F);
    CHECK(devmem::device_array_like(h).strides() == Strides{8, 24});
  }
  SECTION("host views") {
    const HostArray base(Shape{10, 12}, f8());
    CHECK(devmem::device_array_like(base.slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}})).strides() ==
          Strides{48, 8});
    const HostArray fbase(Shape{10, 12}, f8(), Order::F);
    CHECK(devmem::device_array_like(fbase.slice({Slice{{}, {}, 2}, Slice{{}, {}, 2}})).strides() ==
          Strides{8, 40});
    const HostArray b3(Shape{3, 4, 5}, f8());
    CHECK(devmem::device_array_like(b3.transpose({1, 0, 2})).strides() == Strides{40, 160, 8});
  }
  SECTION("pinned host array") {
    const HostArray p = devmem::pinned_array(Shape{2, 3}, f4(), {}, Order::F);
    const DeviceArray d = devmem::device_array_like(p);
    CHECK(d.strides() == Strides{4, 8});
    CHECK(d.dtype() == f4());
  }
}

TEST_CASE("to_device: host arrays of every layout", "[allocation][transfers]") {
  SECTION("C host array") {
    const HostArray h = iota_host(Shape{3, 4});
    const DeviceArray d = devmem::to_device(h);
    CHECK(d.shape() == Shape{3, 4});
    CHECK(d.strides() == Strides{32, 8});
    CHECK(d.dtype() == f8());
    CHECK(d.to_vector<double>() == iota_vec(12));
    CHECK(d.item<double>(2, 1) == 9.0);
  }
  SECTION("F host array keeps F order") {
    const HostArray h = iota_host(Shape{3, 4}, Order::F);
    const DeviceArray d = devmem::to_device(h);
    CHECK(d.strides() == Strides{8, 24});
    CHECK(d.to_vector<double>() == iota_vec(12));
    CHECK(d.item<double>(2, 1) == 9.0);
  }
  SECTION("strided host view becomes dense") {
    const HostArray h = iota_host(Shape{6, 8});
    const HostArray v = h.slice({Slice{1, {}, 2}, Slice{{}, {}, 3}});
    REQUIRE(v.shape() == Shape{3, 3});
    const DeviceArray d = devmem::to_device(v);
    CHECK(d.strides() == Strides{24, 8});
    CHECK(d.to_vector<double>() == std::vector<double>{8, 11, 14, 24, 27, 30, 40, 43, 46});
  }
  SECTION("transposed host view") {
    const HostArray h = iota_host(Shape{2, 3});
    const DeviceArray d = devmem::to_device(h.T());
    CHECK(d.shape() == Shape{3, 2});
    CHECK(d.strides() == Strides{8, 24});
    CHECK(d.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  }
  SECTION("negative-stride host view") {
    const HostArray h = iota_host(Shape{5});
    const DeviceArray d = devmem::to_device(h.slice(0, std::nullopt, std::nullopt, -2));
    CHECK(d.to_vector<double>() == std::vector<double>{4, 2, 0});
  }
  SECTION("broadcast host view") {
    const std::vector<double> row{1, 2, 3};
    const HostArray b =
        HostArray::view(static_cast<const void*>(row.data()), Shape{4, 3}, f8(), Strides{0, 8});
    const DeviceArray d = devmem::to_device(b);
    CHECK(d.shape() == Shape{4, 3});
    CHECK(d.to_vector<double>() == std::vector<double>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  }
  SECTION("0-d host array") {
    const HostArray h(Shape{}, i4());
    h.at<std::int32_t>() = 42;
    const DeviceArray d = devmem::to_device(h);
    CHECK(d.ndim() == 0);
    CHECK(d.item<std::int32_t>() == 42);
  }
  SECTION("empty host array") {
    const DeviceArray d = devmem::to_device(HostArray(Shape{0}, f4()));
    CHECK(d.size() == 0);
    CHECK(d.dtype() == f4());
  }
  SECTION("read-only host memory is accepted") {
    const std::vector<std::int64_t> v{5, 6, 7};
    const HostArray ro = HostArray::view(v);
    REQUIRE(ro.is_readonly());
    CHECK(devmem::to_device(ro).to_vector<std::int64_t>() == v);
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const HostArray h = iota_host(Shape{1000});
    const DeviceArray d = devmem::to_device(h, s);
    CHECK(d.stream() == s);
    s.synchronize();
    CHECK(d.to_vector<double>() == iota_vec(1000));
  }
}

TEST_CASE("to_device: spans and vectors", "[allocation][transfers]") {
  SECTION("std::vector<double>") {
    const std::vector<double> v{1.5, -2.5, 3.25};
    const DeviceArray d = devmem::to_device(v);
    CHECK(d.shape() == Shape{3});
    CHECK(d.dtype() == f8());
    CHECK(d.to_vector<double>() == v);
  }
  SECTION("std::vector<int32>") {
    const std::vector<std::int32_t> v{-1, 0, 1, 2147483647};
    const DeviceArray d = devmem::to_device(v);
    CHECK(d.dtype() == i4());
    CHECK(d.to_vector<std::int32_t>() == v);
  }
  SECTION("std::span<const float>") {
    const std::array<float, 4> a{1.0F, 2.0F, 3.0F, 4.0F};
    const DeviceArray d = devmem::to_device(std::span<const float>(a));
    CHECK(d.dtype() == f4());
    CHECK(d.to_vector<float>() == std::vector<float>(a.begin(), a.end()));
  }
  SECTION("empty vector") {
    const std::vector<std::uint8_t> v;
    const DeviceArray d = devmem::to_device(v);
    CHECK(d.size() == 0);
    CHECK(d.dtype() == u1());
  }
  SECTION("vector on a stream") {
    const devmem::Stream s = devmem::stream();
    const std::vector<double> v = iota_vec(4096);
    const DeviceArray d = devmem::to_device(v, s);
    CHECK(d.stream() == s);
    s.synchronize();
    CHECK(d.to_vector<double>() == v);
  }
}

TEST_CASE("to_device: copy = false allocates without copying", "[allocation]") {
  const HostArray h = iota_host(Shape{4, 2}, Order::F);
  const DeviceArray d = devmem::to_device(h, {}, false);
  CHECK(d.shape() == Shape{4, 2});
  CHECK(d.dtype() == f8());
  CHECK(d.strides() == Strides{8, 32});
  CHECK(d.alloc_size() == 64);
  // The array is usable; filling it shows it is real memory of the right size.
  d.fill(-1.0);
  CHECK(d.to_vector<double>() == std::vector<double>(8, -1.0));
}

TEST_CASE("to_device: copying into an existing array with `to`", "[allocation][transfers]") {
  const DeviceArray target = devmem::device_array(Shape{3, 4}, f8());
  target.fill(0.0);
  SECTION("copies into the same memory and returns it") {
    const HostArray h = iota_host(Shape{3, 4});
    const DeviceArray r = devmem::to_device(h, {}, true, &target);
    CHECK(r.data() == target.data());
    CHECK(r.shape() == target.shape());
    CHECK(target.to_vector<double>() == iota_vec(12));
  }
  SECTION("copy = false leaves `to` untouched") {
    const HostArray h = iota_host(Shape{3, 4});
    const DeviceArray r = devmem::to_device(h, {}, false, &target);
    CHECK(r.data() == target.data());
    CHECK(target.to_vector<double>() == std::vector<double>(12, 0.0));
  }
  SECTION("an F host source into a C target") {
    const HostArray h = iota_host(Shape{3, 4}, Order::F);
    (void)devmem::to_device(h, {}, true, &target);
    CHECK(target.to_vector<double>() == iota_vec(12));
  }
  SECTION("squeezed shapes are compatible: (1, 12) into (12,)") {
    const DeviceArray flat = devmem::device_array(Shape{12}, f8());
    const HostArray h = iota_host(Shape{1, 12});
    const DeviceArray r = devmem::to_device(h, {}, true, &flat);
    CHECK(r.data() == flat.data());
    CHECK(flat.to_vector<double>() == iota_vec(12));
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const HostArray h = iota_host(Shape{3, 4}, Order::C, 100.0);
    (void)devmem::to_device(h, s, true, &target);
    s.synchronize();
    CHECK(target.item<double>(0, 0) == 100.0);
    CHECK(target.item<double>(2, 3) == 111.0);
  }
  SECTION("dtype mismatch") {
    const HostArray h(Shape{3, 4}, f4());
    REQUIRE_THROWS_MATCHES(devmem::to_device(h, {}, true, &target), devmem::InvalidArgument,
                           Message("to_device: dtype mismatch: source is float32, `to` is "
                                   "float64"));
    CHECK(target.to_vector<double>() == std::vector<double>(12, 0.0));
  }
  SECTION("shape mismatch") {
    const HostArray h(Shape{4, 3}, f8());
    REQUIRE_THROWS_MATCHES(devmem::to_device(h, {}, true, &target), devmem::InvalidArgument,
                           Message("to_device: shape mismatch: source (4, 3), `to` (3, 4)"));
  }
  SECTION("shape mismatch with copy = false is still an error") {
    const HostArray h(Shape{5}, f8());
    REQUIRE_THROWS_AS(devmem::to_device(h, {}, false, &target), devmem::InvalidArgument);
  }
}

TEST_CASE("to_device: records give a DeviceRecord", "[allocation][record]") {
  SECTION("a struct round trip") {
    const Particle p{7, {1.0, -2.0, 3.5}, 0.25F};
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p);
    CHECK(r.dtype().is_record());
    CHECK(r.dtype().kind() == 'V');
    CHECK(r.dtype().itemsize() == static_cast<int64_t>(sizeof(Particle)));
    CHECK(r.dtype() == devmem::dtype_of<Particle>());
    CHECK(r.array().ndim() == 0);
    CHECK(r.array().alloc_size() == static_cast<int64_t>(sizeof(Particle)));
    CHECK(r.data() != nullptr);
    CHECK(same_particle(r.get(), p));
  }
  SECTION("set replaces the value on the device") {
    const devmem::DeviceRecord<Particle> r = devmem::to_device(Particle{1, {0, 0, 0}, 1.0F});
    Particle q{2, {4.0, 5.0, 6.0}, 2.0F};
    r.set(q);
    q.id = 99;  // the device copy is independent of the host value after set()
    const Particle back = r.get();
    CHECK(back.id == 2);
    CHECK(back.position[2] == 6.0);
    CHECK(back.mass == 2.0F);
  }
  SECTION("a scalar") {
    const devmem::DeviceRecord<double> r = devmem::to_device(3.5);
    CHECK(r.dtype() == f8());
    CHECK(r.get() == 3.5);
    CHECK(r.array().item<double>() == 3.5);
  }
  SECTION("on a stream") {
    const devmem::Stream s = devmem::stream();
    const devmem::DeviceRecord<std::int64_t> r = devmem::to_device(std::int64_t{-12}, s);
    CHECK(r.stream() == s);
    CHECK(r.get() == -12);
    r.set(13, s);
    CHECK(r.get(s) == 13);
  }
  SECTION("a DeviceRecord wraps an existing 0-d array") {
    const DeviceArray a = devmem::device_array(Shape{}, f8());
    a.set_item(1.25);
    const devmem::DeviceRecord<double> r(a);
    CHECK(r.get() == 1.25);
    r.set(2.5);
    CHECK(a.item<double>() == 2.5);
  }
  SECTION("the array must be 0-d") {
    REQUIRE_THROWS_MATCHES(devmem::DeviceRecord<double>(devmem::device_array(Shape{2}, f8())),
                           devmem::InvalidArgument, Message("DeviceRecord: the array must be 0-d"));
  }
  SECTION("the dtype must match") {
    REQUIRE_THROWS_MATCHES(devmem::DeviceRecord<float>(devmem::device_array(Shape{}, f8())),
                           devmem::InvalidArgument,
                           Message("DeviceRecord: the array's dtype is float64, not float32"));
  }
}

namespace {
// Whether to_device(value, stream, copy, &record) compiles: `to` must be a DeviceRecord of the
// value's own type, so a dtype mismatch is a compile-time error rather than a run-time one.
template <class Value, class Record>
concept copies_into =
    requires(const Value& v, const Record* r) { devmem::to_device(v, devmem::Stream{}, true, r); };
static_assert(copies_into<Particle, devmem::DeviceRecord<Particle>>);
static_assert(copies_into<double, devmem::DeviceRecord<double>>);
static_assert(!copies_into<double, devmem::DeviceRecord<float>>);
static_assert(!copies_into<float, devmem::DeviceRecord<Particle>>);
}  // namespace

TEST_CASE("to_device: a record with copy = false or into an existing record (`to`)",
          "[allocation][record]") {
  SECTION("copy = false allocates an uninitialised record that is usable") {
    const devmem::Stream s = devmem::stream();
    const Particle p{3, {1.0, 2.0, 3.0}, 4.0F};
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p, s, false);
    CHECK(r.stream() == s);
    CHECK(r.dtype() == devmem::dtype_of<Particle>());
    CHECK(r.array().ndim() == 0);
    CHECK(r.array().alloc_size() == static_cast<int64_t>(sizeof(Particle)));
    CHECK(r.data() != nullptr);
    r.set(p);
    CHECK(same_particle(r.get(), p));
  }
  SECTION("copy = false: the record is real memory that takes values afterwards") {
    const devmem::DeviceRecord<std::int64_t> r = devmem::to_device(std::int64_t{5}, {}, false);
    r.array().fill(std::int64_t{-7});
    CHECK(r.get() == -7);
  }
  const devmem::DeviceRecord<Particle> target = devmem::to_device(Particle{0, {0, 0, 0}, 0.0F});
  SECTION("`to` copies into the same record and returns it") {
    const Particle p{9, {-1.0, -2.0, -3.0}, 0.5F};
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p, {}, true, &target);
    CHECK(r.data() == target.data());
    CHECK(r.array().owner() == target.array().owner());
    CHECK(same_particle(target.get(), p));
  }
  SECTION("`to` on a stream") {
    const devmem::Stream s = devmem::stream();
    const Particle p{11, {1.5, 2.5, 3.5}, 8.0F};
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p, s, true, &target);
    CHECK(r.data() == target.data());
    CHECK(same_particle(target.get(s), p));
  }
  SECTION("`to` with copy = false leaves the record untouched") {
    const devmem::DeviceRecord<Particle> r =
        devmem::to_device(Particle{1, {1, 1, 1}, 1.0F}, {}, false, &target);
    CHECK(r.data() == target.data());
    CHECK(same_particle(target.get(), Particle{0, {0, 0, 0}, 0.0F}));
  }
  SECTION("a scalar into an existing record") {
    const devmem::DeviceRecord<double> d = devmem::to_device(1.0);
    const devmem::DeviceRecord<double> r = devmem::to_device(2.25, {}, true, &d);
    CHECK(r.data() == d.data());
    CHECK(d.get() == 2.25);
  }
}

TEST_CASE("to_device: `to` and a stream of another device",
          "[allocation][record][errors][multi-device]") {
  if (devmem::device_count() < 2) {
    // One device: a stream of this device is accepted.
    const devmem::DeviceRecord<double> r = devmem::to_device(0.0);
    const devmem::Stream s = devmem::stream();
    (void)devmem::to_device(4.0, s, true, &r);
    CHECK(r.get() == 4.0);
    return;
  }
  const int original = devmem::current_device();
  devmem::select_device(1);
  const devmem::Stream other = devmem::stream();
  const devmem::DeviceRecord<double> on_device_1 = devmem::to_device(1.5, other);
  devmem::select_device(0);
  const devmem::DeviceRecord<double> r = devmem::to_device(0.5);
  const std::string backend = devmem::backend_name();
  const std::string message = "copy_to_device: the stream belongs to device 1 of backend '" +
                              backend + "' but the array is on device 0 of backend '" + backend +
                              "'";
  // As for arrays: the record `to` and the stream must be on one device.
  REQUIRE_THROWS_MATCHES(devmem::to_device(2.0, other, true, &r), devmem::InvalidArgument,
                         Message(message));
  CHECK(r.get() == 0.5);
  const DeviceArray array_target = devmem::device_array(Shape{1}, f8());
  REQUIRE_THROWS_MATCHES(devmem::to_device(HostArray(Shape{1}, f8()), other, true, &array_target),
                         devmem::InvalidArgument, Message(message));
  // A record of device 1 takes values on its own stream, whichever device is current.
  (void)devmem::to_device(2.5, {}, true, &on_device_1);
  CHECK(on_device_1.get() == 2.5);
  REQUIRE_THROWS_MATCHES(
      on_device_1.copy_to_device(1.0, devmem::default_stream()), devmem::InvalidArgument,
      Message("copy_to_device: the stream belongs to device 0 of backend '" + backend +
              "' but the array is on device 1 of backend '" + backend + "'"));
  double host = 0.0;
  REQUIRE_THROWS_MATCHES(
      on_device_1.copy_to_host(host, devmem::default_stream()), devmem::InvalidArgument,
      Message("copy_to_host: the stream belongs to device 0 of backend '" + backend +
              "' but the array is on device 1 of backend '" + backend + "'"));
  devmem::select_device(original);
}

TEST_CASE("DeviceRecord: copy_to_host and copy_to_device (Numba's names)", "[allocation][record]") {
  const Particle p{21, {0.5, 1.5, 2.5}, 3.0F};
  SECTION("copy_to_host() returns the value") {
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p);
    CHECK(same_particle(r.copy_to_host(), p));
  }
  SECTION("copy_to_host(stream) waits for the stream before returning the value") {
    const devmem::Stream s = devmem::stream();
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p, s);
    const Particle q{22, {1, 2, 3}, 4.0F};
    r.copy_to_device(q, s);  // asynchronous on s; q lives until s is synchronized below
    CHECK(same_particle(r.copy_to_host(s), q));
  }
  SECTION("copy_to_host(destination) on the default stream") {
    const devmem::DeviceRecord<Particle> r = devmem::to_device(p);
    Particle out{};
    r.copy_to_host(out);
    CHECK(same_particle(out, p));
  }
  SECTION("copy_to_host(destination, stream) is complete after the stream") {
    const devmem::Stream s = devmem::stream();
    const devmem::DeviceRecord<double> r = devmem::to_device(6.5, s);
    double out = 0.0;
    r.copy_to_host(out, s);
    s.synchronize();
    CHECK(out == 6.5);
  }
  SECTION("copy_to_device on the default stream") {
    const devmem::DeviceRecord<Particle> r = devmem::to_device(Particle{}, {}, false);
    Particle q = p;
    r.copy_to_device(q);
    q.id = -1;  // the default stream's copy is complete
    CHECK(r.get().id == 21);
  }
  SECTION("copy_to_device on the record's own stream (none given)") {
    const devmem::Stream s = devmem::stream();
    const devmem::DeviceRecord<std::int32_t> r = devmem::to_device(std::int32_t{1}, s);
    const std::int32_t value = 77;
    r.copy_to_device(value);
    s.synchronize();
    CHECK(r.array().item<std::int32_t>() == 77);
    CHECK(r.copy_to_host() == 77);
  }
  SECTION("get and set stay") {
    const devmem::DeviceRecord<double> r = devmem::to_device(1.0);
    r.set(2.0);
    CHECK(r.get() == 2.0);
    CHECK(r.copy_to_host() == 2.0);
  }
}

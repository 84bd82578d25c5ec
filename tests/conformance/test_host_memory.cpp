// Host memory: HostArray (constructors, views of user memory, element access, fill, copies,
// reshape/ravel), pinned_array, mapped_array, the pinned()/mapped()/registered() scopes and
// register_host/deregister_host.
#include "support.hpp"

#include <memory>
#include <stdexcept>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::HostMemoryKind;

namespace {

// Deregisters arrays at scope exit, ignoring errors, so that a failing test cannot leave host
// memory registered for the tests that follow.
struct DeregisterAtExit {
  std::vector<HostArray> arrays;
  DeregisterAtExit(std::initializer_list<HostArray> a) : arrays(a) {}
  DeregisterAtExit(const DeregisterAtExit&) = delete;
  DeregisterAtExit& operator=(const DeregisterAtExit&) = delete;
  ~DeregisterAtExit() {
    for (const HostArray& a : arrays) {
      try {
        devmem::deregister_host(a);
      } catch (const devmem::Error&) {  // not registered: nothing to undo
      }
    }
  }
};

}  // namespace

// ---- HostArray
// -----------------------------------------------------------------------------------

TEST_CASE("HostArray: owning constructors", "[host]") {
  SECTION("default: empty float64") {
    const HostArray h;
    CHECK(h.shape() == Shape{0});
    CHECK(h.dtype() == f8());
    CHECK(h.size() == 0);
    CHECK(h.kind() == HostMemoryKind::Pageable);
    CHECK(h.to_vector<double>().empty());
  }
  SECTION("C order, zero-filled") {
    const HostArray h(Shape{3, 4}, i4());
    CHECK(h.shape() == Shape{3, 4});
    CHECK(h.strides() == Strides{16, 4});
    CHECK(h.dtype() == i4());
    CHECK(h.kind() == HostMemoryKind::Pageable);
    CHECK_FALSE(h.is_readonly());
    CHECK(h.data() != nullptr);
    CHECK(h.to_vector<std::int32_t>() == std::vector<std::int32_t>(12, 0));
  }
  SECTION("F order") {
    const HostArray h(Shape{3, 4}, f8(), Order::F);
    CHECK(h.strides() == Strides{8, 24});
    CHECK(h.is_f_contiguous());
  }
  SECTION("0-d") {
    const HostArray h(Shape{}, f8());
    CHECK(h.ndim() == 0);
    CHECK(h.size() == 1);
    h.at<double>() = 1.5;
    CHECK(h.to_vector<double>() == std::vector<double>{1.5});
  }
  SECTION("from values") {
    const HostArray h = HostArray::from(std::vector<std::int64_t>{3, 1, 4});
    CHECK(h.dtype() == i8());
    CHECK(h.to_vector<std::int64_t>() == std::vector<std::int64_t>{3, 1, 4});
    CHECK_FALSE(h.is_readonly());
  }
  SECTION("copies of the handle share memory") {
    const HostArray h(Shape{2}, f8());
    const HostArray alias = h;  // NOLINT(performance-unnecessary-copy-initialization)
    alias.at<double>(1) = 7.0;
    CHECK(h.at<double>(1) == 7.0);
    CHECK(alias.data() == h.data());
  }
  SECTION("invalid shape") {
    REQUIRE_THROWS_MATCHES(HostArray(Shape{-1}, f8()), devmem::InvalidArgument,
                           Message("HostArray: negative dimension -1 in shape (-1,)"));
    REQUIRE_THROWS_MATCHES(HostArray(Shape{2}, f8(), Order::K), devmem::InvalidArgument,
                           Message("HostArray: order must be C or F, got 'K'"));
  }
}

TEST_CASE("HostArray: views of user memory", "[host]") {
  SECTION("a span is writable and shares memory") {
    std::vector<double> v{1, 2, 3};
    const HostArray h = HostArray::view(std::span<double>(v));
    CHECK(h.shape() == Shape{3});
    CHECK_FALSE(h.is_readonly());
    CHECK(h.data() == v.data());
    h.at<double>(0) = 10.0;
    CHECK(v[0] == 10.0);
  }
  SECTION("a vector") {
    std::vector<float> v{1, 2};
    const HostArray h = HostArray::view(v);
    CHECK(h.dtype() == f4());
    CHECK_FALSE(h.is_readonly());
    h.fill(5.0F);
    CHECK(v == std::vector<float>{5, 5});
  }
  SECTION("const data is read-only") {
    const std::vector<double> v{1, 2, 3};
    const HostArray h = HostArray::view(v);
    CHECK(h.is_readonly());
    CHECK(h.to_vector<double>() == v);
    CHECK(HostArray::view(std::span<const double>(v)).is_readonly());
    CHECK(HostArray::view(static_cast<const void*>(v.data()), Shape{3}, f8()).is_readonly());
    REQUIRE_THROWS_MATCHES(h.fill(0.0), devmem::InvalidArgument,
                           Message("fill: the host array is read-only"));
    REQUIRE_THROWS_MATCHES(h.copy_from(HostArray(Shape{3}, f8())), devmem::InvalidArgument,
                           Message("copy_from: the destination host array is read-only"));
    CHECK(v == std::vector<double>{1, 2, 3});
    // Views of a read-only array are read-only too.
    CHECK(h.slice(0, 1, 3).is_readonly());
    CHECK(h.reshape(Shape{3, 1}).is_readonly());
  }
  SECTION("a shaped view in C and F order") {
    std::vector<double> v = iota_vec(6);
    const HostArray c = HostArray::view(std::span<double>(v), Shape{2, 3});
    CHECK(c.strides() == Strides{24, 8});
    CHECK(c.at<double>(1, 0) == 3.0);
    const HostArray f = HostArray::view(std::span<double>(v), Shape{2, 3}, Order::F);
    CHECK(f.strides() == Strides{8, 16});
    CHECK(f.at<double>(1, 0) == 1.0);
    CHECK(f.to_vector<double>() == std::vector<double>{0, 2, 4, 1, 3, 5});
    CHECK(HostArray::view(std::span<double>(v), Shape{-1, 2}).shape() == Shape{3, 2});
  }
  SECTION("a pointer with explicit strides, including negative ones") {
    std::vector<double> v = iota_vec(10);
    const HostArray rev = HostArray::view(static_cast<void*>(&v[9]), Shape{10}, f8(), Strides{-8});
    CHECK(rev.data() == &v[9]);
    CHECK(rev.to_vector<double>() == std::vector<double>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
    CHECK(rev.at<double>(2) == 7.0);
    const HostArray m =
        HostArray::view(static_cast<void*>(&v[8]), Shape{3, 2}, f8(), Strides{-24, 8});
    CHECK(m.to_vector<double>() == std::vector<double>{8, 9, 5, 6, 2, 3});
    const HostArray cols =
        HostArray::view(static_cast<void*>(v.data()), Shape{2, 5}, f8(), Strides{8, 16});
    CHECK(cols.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 1, 3, 5, 7, 9});
  }
  SECTION("the owner is kept alive") {
    auto owner = std::make_shared<std::vector<double>>(iota_vec(4));
    HostArray h = HostArray::view(static_cast<void*>(owner->data()), Shape{4}, f8(), {},
                                  std::shared_ptr<const void>(owner));
    std::weak_ptr<std::vector<double>> weak = owner;
    owner.reset();
    CHECK_FALSE(weak.expired());
    CHECK(h.to_vector<double>() == iota_vec(4));
    h = HostArray();
    CHECK(weak.expired());
  }
  SECTION("errors") {
    REQUIRE_THROWS_MATCHES(HostArray::view(static_cast<void*>(nullptr), Shape{3}, f8()),
                           devmem::InvalidArgument,
                           Message("HostArray::view: null data for shape (3,)"));
    CHECK(HostArray::view(static_cast<void*>(nullptr), Shape{0}, f8()).size() == 0);
    std::vector<double> v(5);
    REQUIRE_THROWS_MATCHES(HostArray::view(std::span<double>(v), Shape{2, 3}),
                           devmem::InvalidArgument,
                           Message("reshape: cannot reshape array of size 5 into shape (2, 3)"));
    REQUIRE_THROWS_MATCHES(HostArray::view(std::span<double>(v), Shape{5}, Order::A),
                           devmem::InvalidArgument,
                           Message("HostArray::view: order must be 'C' or 'F', got 'A'"));
    REQUIRE_THROWS_MATCHES(
        HostArray::view(static_cast<void*>(v.data()), Shape{5}, f8(), Strides{8, 8}),
        devmem::InvalidArgument, Message("HostArray::view: 2 strides given for 1 dimensions"));
  }
}

TEST_CASE("HostArray: element access, fill and to_vector", "[host]") {
  const HostArray h = iota_host(Shape{3, 4});
  SECTION("at reads and writes, with negative indices") {
    CHECK(h.at<double>(1, 2) == 6.0);
    CHECK(h.at<double>(-1, -1) == 11.0);
    h.at<double>(0, -1) = -3.0;
    CHECK(h.to_vector<double>()[3] == -3.0);
  }
  SECTION("at errors") {
    REQUIRE_THROWS_MATCHES(h.at<double>(3, 0), devmem::InvalidArgument,
                           Message("at: index 3 is out of bounds for axis 0 with size 3"));
    REQUIRE_THROWS_MATCHES(h.at<double>(0), devmem::InvalidArgument,
                           Message("at: 1 indices given for an array of dimension 2"));
    REQUIRE_THROWS_MATCHES(h.at<float>(0, 0), devmem::InvalidArgument,
                           Message("at: the array's dtype is float64, not float32"));
  }
  SECTION("data_as") {
    CHECK(h.data_as<double>() == h.data());
    CHECK(h.data_as<double>()[5] == 5.0);
    REQUIRE_THROWS_MATCHES(h.data_as<std::int64_t>(), devmem::InvalidArgument,
                           Message("data_as: the array's dtype is float64, not int64"));
  }
  SECTION("fill of a strided view leaves the gaps") {
    h.slice({Slice{{}, {}, 2}, Slice{1, 3}}).fill(-1.0);
    CHECK(h.to_vector<double>() == std::vector<double>{0, -1, -1, 3, 4, 5, 6, 7, 8, -1, -1, 11});
  }
  SECTION("fill errors") {
    REQUIRE_THROWS_MATCHES(h.fill(1), devmem::InvalidArgument,
                           Message("fill: the array's dtype is float64, not int32"));
  }
  SECTION("to_vector of a transposed view is in its C order") {
    CHECK(h.T().to_vector<double>() == std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
    REQUIRE_THROWS_MATCHES(h.to_vector<float>(), devmem::InvalidArgument,
                           Message("to_vector: the array's dtype is float64, not float32"));
  }
  SECTION("views share memory") {
    h.T()[3].at<double>(2) = 100.0;                                       // h[2, 3]
    h.slice(1, std::nullopt, std::nullopt, -1)[1].at<double>(0) = 200.0;  // h[1, 3]
    CHECK(h.at<double>(2, 3) == 100.0);
    CHECK(h.at<double>(1, 3) == 200.0);
    CHECK(h.squeeze().data() == h.data());
  }
}

TEST_CASE("HostArray: copy_from and copy", "[host]") {
  SECTION("between different layouts") {
    const HostArray dst(Shape{3, 4}, f8(), Order::F);
    dst.copy_from(iota_host(Shape{3, 4}));
    CHECK(dst.to_vector<double>() == iota_vec(12));
    const HostArray back(Shape{4, 3}, f8());
    back.copy_from(dst.T());
    CHECK(back.to_vector<double>() == gather_iota(Shape{4, 3}, {8, 32}, 0));
  }
  SECTION("squeezed shapes are compatible") {
    const HostArray dst(Shape{1, 4}, f8());
    dst.copy_from(iota_host(Shape{4, 1}));
    CHECK(dst.to_vector<double>() == iota_vec(4));
  }
  SECTION("overlapping source and destination") {
    const HostArray a = iota_host(Shape{6});
    a.copy_from(a.slice(0, std::nullopt, std::nullopt, -1));
    CHECK(a.to_vector<double>() == std::vector<double>{5, 4, 3, 2, 1, 0});
    const HostArray b = iota_host(Shape{6});
    b.slice(0, 1, std::nullopt).copy_from(b.slice(0, std::nullopt, 5));
    CHECK(b.to_vector<double>() == std::vector<double>{0, 0, 1, 2, 3, 4});
  }
  SECTION("strided destination gaps are untouched") {
    const HostArray base(Shape{8}, f8());
    base.fill(-1.0);
    base.slice(0, 1, std::nullopt, 2).copy_from(iota_host(Shape{4}, Order::C, 10.0));
    CHECK(base.to_vector<double>() == std::vector<double>{-1, 10, -1, 11, -1, 12, -1, 13});
  }
  SECTION("errors") {
    const HostArray dst(Shape{4}, f8());
    REQUIRE_THROWS_MATCHES(
        dst.copy_from(HostArray(Shape{4}, f4())), devmem::InvalidArgument,
        Message("copy_from: dtype mismatch: source is float32, destination is float64"));
    REQUIRE_THROWS_MATCHES(dst.copy_from(HostArray(Shape{3}, f8())), devmem::InvalidArgument,
                           Message("copy_from: shape mismatch: source (3,), destination (4,)"));
  }
  SECTION("copy makes new memory in the requested order") {
    const HostArray c = iota_host(Shape{3, 4});
    const HostArray k = c.copy();
    CHECK(k.data() != c.data());
    CHECK(k.strides() == Strides{32, 8});
    k.at<double>(0, 0) = -1.0;
    CHECK(c.at<double>(0, 0) == 0.0);
    CHECK(c.copy(Order::F).strides() == Strides{8, 24});
    CHECK(c.copy(Order::F).to_vector<double>() == iota_vec(12));
    CHECK(c.T().copy().strides() == Strides{8, 32});
    CHECK(c.T().copy(Order::C).strides() == Strides{24, 8});
    CHECK(c.T().copy(Order::A).strides() == Strides{8, 32});
    const HostArray v = c.slice({Slice{{}, {}, 2}, Slice{{}, {}, -2}});
    CHECK(v.copy().to_vector<double>() == std::vector<double>{3, 1, 11, 9});
    CHECK(v.copy().kind() == HostMemoryKind::Pageable);
  }
  SECTION("copy of a read-only view is writable") {
    const std::vector<double> v{1, 2};
    const HostArray k = HostArray::view(v).copy();
    CHECK_FALSE(k.is_readonly());
    k.at<double>(0) = 3.0;
    CHECK(v[0] == 1.0);
  }
}

TEST_CASE("HostArray: reshape and ravel follow NumPy", "[host][reshape]") {
  SECTION("a view when the memory allows") {
    const HostArray c = iota_host(Shape{2, 3, 4});
    const HostArray r = c.reshape(Shape{4, -1});
    CHECK(r.shape() == Shape{4, 6});
    CHECK(r.data() == c.data());
    CHECK(c.ravel().data() == c.data());
    CHECK(c.ravel(Order::K).data() == c.data());
  }
  SECTION("F array [[0,1,2],[3,4,5]].reshape(3, 2): a copy with NumPy's values") {
    const HostArray f = iota_host(Shape{2, 3}, Order::F);
    const HostArray r = f.reshape(Shape{3, 2});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4, 5});
    CHECK(r.at<double>(0, 1) == 1.0);
    CHECK(r.data() != f.data());
    const HostArray rf = f.reshape(Shape{3, 2}, Order::F);
    CHECK(rf.data() == f.data());
    CHECK(rf.to_vector<double>() == std::vector<double>{0, 4, 3, 2, 1, 5});
  }
  SECTION("ravel in every order") {
    const HostArray c = iota_host(Shape{3, 4});
    CHECK(c.ravel(Order::F).to_vector<double>() ==
          std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
    const HostArray f = iota_host(Shape{3, 4}, Order::F);
    CHECK(f.ravel().to_vector<double>() == iota_vec(12));
    CHECK(f.ravel(Order::A).data() == f.data());
    const HostArray t = iota_host(Shape{3, 4, 5}).transpose({1, 0, 2});
    CHECK(t.ravel(Order::K).to_vector<double>() == iota_vec(60));
  }
  SECTION("errors") {
    const HostArray h(Shape{10, 10, 10}, f8());
    REQUIRE_THROWS_MATCHES(h.reshape(Shape{3, 7}), devmem::InvalidArgument,
                           Message("reshape: cannot reshape array of size 1000 into shape (3, 7)"));
    REQUIRE_THROWS_MATCHES(h.reshape(Shape{10, 100}, Order::K), devmem::InvalidArgument,
                           Message("reshape: order must be 'C', 'F' or 'A', got 'K'"));
  }
}

// ---- pinned_array, mapped_array
// ------------------------------------------------------------------

TEST_CASE("pinned_array: page-locked host arrays", "[host][pinned]") {
  SECTION("kind, layout and transfers") {
    const HostArray p = devmem::pinned_array(Shape{3, 4}, f8());
    CHECK(p.kind() == HostMemoryKind::Pinned);
    CHECK(std::string(devmem::to_string(p.kind())) == "pinned");
    CHECK(p.strides() == Strides{32, 8});
    CHECK_FALSE(p.is_readonly());
    p.copy_from(iota_host(Shape{3, 4}));
    const DeviceArray d = devmem::to_device(p);
    CHECK(d.to_vector<double>() == iota_vec(12));
    const HostArray q = devmem::pinned_array(Shape{3, 4}, f8(), {}, Order::F);
    CHECK(q.strides() == Strides{8, 24});
    d.copy_to_host(q);
    CHECK(q.to_vector<double>() == iota_vec(12));
  }
  SECTION("typed, with explicit strides, 0-d and empty") {
    CHECK(devmem::pinned_array<float>(Shape{5}).dtype() == f4());
    const HostArray s = devmem::pinned_array(Shape{4}, f8(), Strides{16});
    CHECK(s.strides() == Strides{16});
    s.fill(2.0);
    CHECK(s.to_vector<double>() == std::vector<double>(4, 2.0));
    CHECK(devmem::pinned_array(Shape{}, i4()).size() == 1);
    CHECK(devmem::pinned_array(Shape{0}, i4()).size() == 0);
  }
  SECTION("views of pinned memory are pinned") {
    const HostArray p = devmem::pinned_array(Shape{4, 4}, f8());
    CHECK(p.slice(0, 1, 3).kind() == HostMemoryKind::Pinned);
    CHECK(p.T().kind() == HostMemoryKind::Pinned);
  }
  SECTION("async round trip on a stream") {
    const devmem::Stream s = devmem::stream();
    const HostArray src = devmem::pinned_array(Shape{4096}, f8());
    src.copy_from(iota_host(Shape{4096}));
    const HostArray dst = devmem::pinned_array(Shape{4096}, f8());
    const DeviceArray d = devmem::to_device(src, s);
    d.copy_to_host(dst, s);
    s.synchronize();
    CHECK(dst.to_vector<double>() == iota_vec(4096));
  }
  SECTION("errors") {
    REQUIRE_THROWS_MATCHES(devmem::pinned_array(Shape{-2}, f8()), devmem::InvalidArgument,
                           Message("pinned_array: negative dimension -2 in shape (-2,)"));
    REQUIRE_THROWS_MATCHES(devmem::pinned_array(Shape{2}, f8(), Strides{8, 8}),
                           devmem::InvalidArgument,
                           Message("pinned_array: 2 strides given for 1 dimensions"));
  }
}

TEST_CASE("mapped_array: host memory the device sees", "[host][mapped]") {
  SECTION("kind and the device view of the same bytes") {
    const devmem::MappedArray m = devmem::mapped_array(Shape{2, 3}, f8());
    CHECK(m.kind() == HostMemoryKind::Mapped);
    CHECK(std::string(devmem::to_string(m.kind())) == "mapped");
    const DeviceArray d = m.device();
    CHECK(d.shape() == Shape{2, 3});
    CHECK(d.strides() == Strides{24, 8});
    CHECK(d.dtype() == f8());
    // host write, device read
    m.copy_from(iota_host(Shape{2, 3}));
    CHECK(d.to_vector<double>() == iota_vec(6));
    CHECK(d.item<double>(1, 2) == 5.0);
    // device write, host read
    d.set_item(-1.0, 0, 1);
    d[1].fill(9.0);
    CHECK(m.at<double>(0, 1) == -1.0);
    CHECK(m.to_vector<double>() == std::vector<double>{0, -1, 2, 9, 9, 9});
    // copies from and to ordinary device memory
    const DeviceArray other = devmem::to_device(m);
    CHECK(other.to_vector<double>() == std::vector<double>{0, -1, 2, 9, 9, 9});
    d.copy_to_device(iota_device(Shape{2, 3}, Order::C, {}, 10.0));
    CHECK(m.to_vector<double>() == iota_vec(6, 10.0));
  }
  SECTION("F order, typed, portable and write-combined flags") {
    const devmem::MappedArray f =
        devmem::mapped_array(Shape{2, 3}, i4(), {}, Order::F, {}, true, true);
    CHECK(f.kind() == HostMemoryKind::Mapped);
    CHECK(f.strides() == Strides{4, 8});
    f.device().fill(std::int32_t{3});
    CHECK(f.to_vector<std::int32_t>() == std::vector<std::int32_t>(6, 3));
    const devmem::MappedArray t = devmem::mapped_array<float>(Shape{4});
    CHECK(t.dtype() == f4());
    t.device().fill(0.5F);
    CHECK(t.at<float>(3) == 0.5F);
  }
  SECTION("the stream is kept") {
    const devmem::Stream s = devmem::stream();
    const devmem::MappedArray m = devmem::mapped_array(Shape{8}, f8(), {}, Order::C, s);
    CHECK(m.stream() == s);
    CHECK(m.device().stream() == s);
    m.device().fill(4.0);
    s.synchronize();
    CHECK(m.to_vector<double>() == std::vector<double>(8, 4.0));
    CHECK_FALSE(devmem::mapped_array(Shape{1}, f8()).stream().is_specified());
  }
  SECTION("device_view of the mapped array and of its views") {
    const devmem::MappedArray m = devmem::mapped_array(Shape{10}, f8());
    m.copy_from(iota_host(Shape{10}));
    const devmem::Stream s = devmem::stream();
    const DeviceArray v = m.device_view(s);
    CHECK(v.stream() == s);
    CHECK(v.to_vector<double>() == iota_vec(10));
    // A host slice of mapped memory still has its device view (numba#2987).
    const HostArray part = m.slice(0, 2, std::nullopt, 3);
    CHECK(part.kind() == HostMemoryKind::Mapped);
    CHECK(part.device_view().to_vector<double>() == std::vector<double>{2, 5, 8});
    part.device_view().fill(-1.0);
    CHECK(m.to_vector<double>() == std::vector<double>{0, 1, -1, 3, 4, -1, 6, 7, -1, 9});
  }
  SECTION("the device view keeps the memory alive") {
    DeviceArray d;
    {
      const devmem::MappedArray m = devmem::mapped_array(Shape{3}, f8());
      m.copy_from(iota_host(Shape{3}, Order::C, 1.0));
      d = m.device();
    }
    CHECK(d.to_vector<double>() == std::vector<double>{1, 2, 3});
  }
  SECTION("device_view of other kinds of memory") {
    REQUIRE_THROWS_MATCHES(HostArray(Shape{2}, f8()).device_view(), devmem::InvalidArgument,
                           Message("device_view: a pageable host array is not mapped into the "
                                   "device address space (use mapped_array() or a mapped() "
                                   "scope)"));
    REQUIRE_THROWS_MATCHES(devmem::pinned_array(Shape{2}, f8()).device_view(),
                           devmem::InvalidArgument,
                           Message("device_view: a pinned host array is not mapped into the device "
                                   "address space (use mapped_array() or a mapped() scope)"));
  }
  SECTION("errors") {
    REQUIRE_THROWS_MATCHES(devmem::mapped_array(Shape{2, 2}, f8(), {}, Order::A),
                           devmem::InvalidArgument,
                           Message("mapped_array: order must be C or F, got 'A'"));
  }
}

// ---- pinned()
// ------------------------------------------------------------------------------------

TEST_CASE("pinned: a scope that page-locks existing host arrays", "[host][pinned]") {
  const HostArray a = page_aligned_iota(Shape{512});
  const HostArray b = page_aligned_host(Shape{16, 16}, i4());
  SECTION("the arrays stay pageable and usable") {
    {
      const devmem::PinnedScope scope = devmem::pinned(a, b);
      CHECK(scope.arrays().size() == 2);
      CHECK(scope.arrays()[0].data() == a.data());
      CHECK(a.kind() == HostMemoryKind::Pageable);
      const devmem::Stream s = devmem::stream();
      const DeviceArray d = devmem::to_device(a, s);
      const HostArray out(Shape{512}, f8());
      d.copy_to_host(out, s);
      s.synchronize();
      CHECK(out.to_vector<double>() == iota_vec(512));
    }
    CHECK(a.kind() == HostMemoryKind::Pageable);
  }
  SECTION("a read-only array is registered read-only where the runtime can, and still copies") {
    const HostArray readonly =
        HostArray::view(static_cast<const void*>(a.data()), Shape{512}, f8());
    REQUIRE(readonly.is_readonly());
    const devmem::PinnedScope scope = devmem::pinned(readonly);
    const DeviceArray d = devmem::to_device(readonly);
    CHECK(d.to_vector<double>() == iota_vec(512));
  }
  SECTION("pinning the same array twice in a row works (numba#3508)") {
    for (int i = 0; i < 3; ++i) {
      const devmem::PinnedScope scope = devmem::pinned(a);
      CHECK(devmem::to_device(a).item<double>(511) == 511.0);
    }
    const devmem::PinnedScope again = devmem::pinned(std::vector<HostArray>{a, b});
    CHECK(again.arrays().size() == 2);
  }
  SECTION("pinning again after an exception left the scope") {
    try {
      const devmem::PinnedScope scope = devmem::pinned(a);
      throw std::runtime_error("leaving the scope");
    } catch (const std::runtime_error&) {
    }
    const devmem::PinnedScope scope = devmem::pinned(a);
    CHECK(scope.arrays().size() == 1);
  }
  SECTION("pinning inside a pinned scope of the same memory fails in the backend") {
    const devmem::PinnedScope outer = devmem::pinned(a);
    REQUIRE_THROWS_AS(devmem::pinned(a), devmem::BackendError);
    // A view of the same memory overlaps too.
    REQUIRE_THROWS_AS(devmem::pinned(a.slice(0, 10, 20)), devmem::BackendError);
    if (on_host_backend()) {
      try {
        (void)devmem::pinned(a);
        FAIL("pinned() of already pinned memory did not throw");
      } catch (const devmem::BackendError& e) {
        CHECK(e.backend() == "host");
        CHECK(e.code() == 712);
        CHECK(e.code_name() == "HostMemoryAlreadyRegistered");
      }
    }
  }
  SECTION("close unpins now; the destructor then does nothing") {
    devmem::PinnedScope scope = devmem::pinned(a, b);
    scope.close();
    scope.close();  // a second close is a no-op
    const devmem::PinnedScope again = devmem::pinned(a, b);
    CHECK(again.arrays().size() == 2);
  }
  SECTION("a moved scope unpins once") {
    {
      devmem::PinnedScope first = devmem::pinned(a);
      const devmem::PinnedScope second(std::move(first));
      CHECK(second.arrays().size() == 1);
    }
    const devmem::PinnedScope again = devmem::pinned(a);
    CHECK(again.arrays().size() == 1);
  }
  SECTION("user memory and empty arrays") {
    std::vector<double> v = iota_vec(100);
    const devmem::PinnedScope scope =
        devmem::pinned(HostArray::view(std::span<double>(v)), HostArray(Shape{0}, f8()));
    CHECK(devmem::to_device(v).to_vector<double>() == v);
    CHECK(scope.arrays().size() == 2);
  }
  SECTION("an empty list") {
    const devmem::PinnedScope none = devmem::pinned(std::vector<HostArray>{});
    CHECK(none.arrays().empty());
    const devmem::MappedScope nothing = devmem::mapped({});
    CHECK(nothing.size() == 0);
  }
  SECTION("memory that is already page-locked is rejected") {
    const HostArray p = devmem::pinned_array(Shape{4}, f8());
    REQUIRE_THROWS_MATCHES(devmem::pinned(p), devmem::InvalidArgument,
                           Message("pinned: array 0 is already page-locked (pinned memory from "
                                   "pinned_array)"));
    const devmem::MappedArray m = devmem::mapped_array(Shape{4}, f8());
    REQUIRE_THROWS_MATCHES(devmem::pinned(a, m), devmem::InvalidArgument,
                           Message("pinned: array 1 is already page-locked (mapped memory from "
                                   "mapped_array)"));
    // Nothing was pinned by the failed call.
    const devmem::PinnedScope scope = devmem::pinned(a);
    CHECK(scope.arrays().size() == 1);
  }
}

// ---- mapped()
// ------------------------------------------------------------------------------------

TEST_CASE("mapped: a scope that maps existing host arrays", "[host][mapped]") {
  const HostArray a = page_aligned_iota(Shape{4, 5});
  const HostArray b = page_aligned_host(Shape{6}, i8());
  SECTION("device views read and write the host memory") {
    const devmem::Stream s = devmem::stream();
    {
      const devmem::MappedScope scope = devmem::mapped({a, b}, devmem::MapOptions{s});
      REQUIRE(scope.size() == 2);
      const DeviceArray da = scope[0];
      const DeviceArray db = scope.device_arrays()[1];
      CHECK(da.shape() == Shape{4, 5});
      CHECK(da.strides() == a.strides());
      CHECK(da.dtype() == f8());
      CHECK(db.dtype() == i8());
      CHECK(da.stream() == s);
      CHECK(db.stream() == s);
      CHECK(da.to_vector<double>() == iota_vec(20));
      db.fill(std::int64_t{-4});
      da.set_item(99.0, 3, 4);
      s.synchronize();
      CHECK(b.to_vector<std::int64_t>() == std::vector<std::int64_t>(6, -4));
      CHECK(a.at<double>(3, 4) == 99.0);
      a.at<double>(0, 0) = 55.0;
      CHECK(da.item<double>(0, 0) == 55.0);
      const DeviceArray copy = devmem::device_array(Shape{4, 5}, f8());
      copy.copy_to_device(da);
      CHECK(copy.item<double>(0, 0) == 55.0);
    }
    CHECK(a.kind() == HostMemoryKind::Pageable);
  }
  SECTION("default options: unspecified stream") {
    const devmem::MappedScope scope = devmem::mapped({a});
    CHECK_FALSE(scope[0].stream().is_specified());
    CHECK(scope[0].item<double>(1, 1) == 6.0);
  }
  SECTION("a strided host view maps with its layout") {
    const HostArray v = a.slice({Slice{{}, {}, 2}, Slice{1, {}, 2}});
    const devmem::MappedScope scope = devmem::mapped({v}, devmem::MapOptions{{}, true});
    CHECK(scope[0].shape() == Shape{2, 2});
    CHECK(scope[0].to_vector<double>() == std::vector<double>{1, 3, 11, 13});
    scope[0].fill(0.0);
    CHECK(a.to_vector<double>()[11] == 0.0);
    CHECK(a.to_vector<double>()[12] == 12.0);
  }
  SECTION("mapping again right after the scope") {
    for (int i = 0; i < 3; ++i) {
      const devmem::MappedScope scope = devmem::mapped({a, b});
      CHECK(scope.size() == 2);
    }
  }
  SECTION("close unmaps now") {
    devmem::MappedScope scope = devmem::mapped({a});
    scope.close();
    const devmem::MappedScope again = devmem::mapped({a});
    CHECK(again.size() == 1);
  }
  SECTION("memory that is already page-locked is rejected") {
    REQUIRE_THROWS_MATCHES(devmem::mapped({devmem::pinned_array(Shape{2}, f8())}),
                           devmem::InvalidArgument,
                           Message("mapped: array 0 is already page-locked (pinned memory from "
                                   "pinned_array)"));
  }
  SECTION("pinned and mapped scopes of the same memory conflict") {
    const devmem::PinnedScope pins = devmem::pinned(a);
    REQUIRE_THROWS_AS(devmem::mapped({a}), devmem::BackendError);
  }
}

TEST_CASE("mapped: views are unmapped when the scope ends", "[host][mapped][host-only]") {
  const HostArray a = page_aligned_iota(Shape{8});
  DeviceArray stale;
  {
    const devmem::MappedScope scope = devmem::mapped({a});
    stale = scope[0];
    CHECK(stale.item<double>(7) == 7.0);
  }
  try {
    (void)stale.copy_to_host();
    FAIL("a copy through an unmapped view did not throw");
  } catch (const devmem::BackendError& e) {
    CHECK(e.backend() == "host");
    CHECK(e.code() == 700);
    CHECK(e.code_name() == "IllegalAddress");
  }
  // The host array itself is unharmed.
  CHECK(a.to_vector<double>() == iota_vec(8));
}

// ---- register_host / deregister_host / registered()
// ----------------------------------------------

TEST_CASE("register_host and deregister_host", "[host][register]") {
  const HostArray a = page_aligned_iota(Shape{256});
  const HostArray b = page_aligned_host(Shape{128}, i4());
  const DeregisterAtExit cleanup{a, b};
  SECTION("register, use, deregister, register again") {
    devmem::register_host(a, b);
    CHECK(devmem::to_device(a).to_vector<double>() == iota_vec(256));
    devmem::deregister_host(a, b);
    devmem::register_host(a);
    devmem::deregister_host(a);
  }
  SECTION("the span forms") {
    const std::vector<HostArray> both{a, b};
    devmem::register_host(std::span<const HostArray>(both));
    devmem::deregister_host(std::span<const HostArray>(both));
    devmem::register_host(std::span<const HostArray>(both));
    devmem::deregister_host(std::span<const HostArray>(both));
  }
  SECTION("registering twice is an error") {
    devmem::register_host(a);
    REQUIRE_THROWS_AS(devmem::register_host(a), devmem::BackendError);
    devmem::deregister_host(a);
  }
  SECTION("deregistering memory that is not registered is an error") {
    REQUIRE_THROWS_AS(devmem::deregister_host(a), devmem::BackendError);
    devmem::register_host(a);
    devmem::deregister_host(a);
    REQUIRE_THROWS_AS(devmem::deregister_host(a), devmem::BackendError);
  }
  SECTION("a failed registration undoes the ones this call made") {
    devmem::register_host(b);
    REQUIRE_THROWS_AS(devmem::register_host(a, b), devmem::BackendError);
    // `a` was registered first by the failed call, then unregistered again.
    devmem::register_host(a);
    devmem::deregister_host(a, b);
  }
  SECTION("deregister attempts every array and throws the first failure") {
    devmem::register_host(b);
    REQUIRE_THROWS_AS(devmem::deregister_host(a, b), devmem::BackendError);
    // `b` was deregistered despite the failure on `a`.
    devmem::register_host(b);
    devmem::deregister_host(b);
  }
  SECTION("page-locked memory is rejected") {
    REQUIRE_THROWS_MATCHES(devmem::register_host(devmem::pinned_array(Shape{2}, f8())),
                           devmem::InvalidArgument,
                           Message("register_host: array 0 is already page-locked (pinned memory "
                                   "from pinned_array)"));
  }
  SECTION("backend error codes on the host backend") {
    if (on_host_backend()) {
      devmem::register_host(a);
      try {
        devmem::register_host(a);
        FAIL("registering twice did not throw");
      } catch (const devmem::BackendError& e) {
        CHECK(e.code() == 712);
        CHECK(e.function() == "host_register");
      }
      devmem::deregister_host(a);
      try {
        devmem::deregister_host(a);
        FAIL("deregistering twice did not throw");
      } catch (const devmem::BackendError& e) {
        CHECK(e.code() == 713);
        CHECK(e.code_name() == "HostMemoryNotRegistered");
      }
    } else {
      CHECK(devmem::backend_name() != "host");
    }
  }
}

TEST_CASE("registered: a scope that registers and deregisters", "[host][register]") {
  const HostArray a = page_aligned_iota(Shape{64});
  const HostArray b = page_aligned_host(Shape{64}, f4());
  const DeregisterAtExit cleanup{a, b};
  {
    const devmem::PinnedScope scope = devmem::registered(a, b);
    CHECK(scope.arrays().size() == 2);
    REQUIRE_THROWS_AS(devmem::register_host(a), devmem::BackendError);
    CHECK(devmem::to_device(a).item<double>(63) == 63.0);
  }
  // Deregistered at scope exit: registering works again.
  devmem::register_host(a, b);
  devmem::deregister_host(a, b);
  {
    const devmem::PinnedScope scope = devmem::registered(std::vector<HostArray>{a});
    CHECK(scope.arrays().size() == 1);
  }
  REQUIRE_THROWS_MATCHES(devmem::registered(devmem::pinned_array(Shape{1}, f8())),
                         devmem::InvalidArgument,
                         Message("registered: array 0 is already page-locked (pinned memory from "
                                 "pinned_array)"));
}

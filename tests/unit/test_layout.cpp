// Layout math against hand-computed NumPy results, and every InvalidArgument message of layout.hpp
// except those of plan_copy (test_copy_plan.cpp). Expected values were worked out from NumPy's
// algorithms by hand; the ones taken from Numba's behaviour or tests say so. One file although over
// 800 lines: it follows layout.hpp function by function, so a rule and its test sit in one place.
#include "layout_test_utils.hpp"
#include "matchers.hpp"

#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

using Catch::Matchers::Message;
using devmem::Extent;
using devmem::InvalidArgument;
using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Slice;
using devmem::Strides;
using devmem_test::dense;
namespace layout = devmem::layout;

namespace {
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

Layout L(Shape shape, Strides strides, std::int64_t offset = 0, std::int64_t itemsize = 8) {
  return Layout{std::move(shape), std::move(strides), offset, itemsize};
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Formatting, counting, dense strides

TEST_CASE("format_tuple writes Python tuples", "[layout]") {
  CHECK(layout::format_tuple(Shape{}) == "()");
  CHECK(layout::format_tuple(Shape{10}) == "(10,)");
  CHECK(layout::format_tuple(Shape{3, 7}) == "(3, 7)");
  CHECK(layout::format_tuple(Shape{2, -3, 0}) == "(2, -3, 0)");
}

TEST_CASE("element_count and checked_nbytes", "[layout]") {
  CHECK(layout::element_count(Shape{2, 3, 4}) == 24);
  CHECK(layout::element_count(Shape{}) == 1);
  CHECK(layout::element_count(Shape{3, 0}) == 0);
  // A zero dimension makes the product 0 even when the others alone would overflow.
  CHECK(layout::element_count(Shape{std::int64_t{1} << 40, std::int64_t{1} << 40, 0}) == 0);
  CHECK(layout::checked_nbytes(Shape{2, 3}, 8) == 48);
  CHECK(layout::checked_nbytes(Shape{}, 16) == 16);
  CHECK(layout::checked_nbytes(Shape{0, 5}, 8) == 0);
}

TEST_CASE("element_count and checked_nbytes errors", "[layout][errors]") {
  REQUIRE_THROWS_MATCHES(layout::element_count(Shape{2, -3}), InvalidArgument,
                         Message("shape: negative dimension -3 in shape (2, -3)"));
  REQUIRE_THROWS_MATCHES(layout::element_count(Shape{-1}, "device_array"), InvalidArgument,
                         Message("device_array: negative dimension -1 in shape (-1,)"));
  REQUIRE_THROWS_MATCHES(
      layout::element_count(Shape{std::int64_t{1} << 32, std::int64_t{1} << 32}), InvalidArgument,
      Message("shape: element count of shape (4294967296, 4294967296) overflows int64"));
  REQUIRE_THROWS_MATCHES(layout::checked_nbytes(Shape{std::int64_t{1} << 31, std::int64_t{1} << 31},
                                                8, "pinned_array"),
                         InvalidArgument,
                         Message("pinned_array: size in bytes of shape (2147483648, 2147483648) "
                                 "with itemsize 8 overflows int64"));
  REQUIRE_THROWS_MATCHES(layout::checked_nbytes(Shape{2}, 0), InvalidArgument,
                         Message("shape: itemsize must be positive, got 0"));
}

TEST_CASE("dense_strides", "[layout]") {
  CHECK(layout::dense_strides(Shape{2, 3, 4}, 8, Order::C) == Strides{96, 32, 8});
  CHECK(layout::dense_strides(Shape{2, 3, 4}, 8, Order::F) == Strides{8, 16, 48});
  CHECK(layout::dense_strides(Shape{}, 8, Order::C).empty());
  CHECK(layout::dense_strides(Shape{5}, 4, Order::F) == Strides{4});
  // Zero-size shapes: we use NumPy's _array_fill_strides, which counts a 0 dimension as 1. That is
  // what NumPy gives views, e.g. numpy.empty((3, 0, 2)).reshape(2, 0, 3).strides == (24, 24, 8)
  // (checked with NumPy 1.24). Two other conventions exist and were not chosen: Numba computes
  // (0, 16, 8) for (3, 0, 2), and NumPy >= 1.23 zeroes all strides of a *newly allocated* empty
  // array (numpy.empty((3, 0, 2)).strides == (0, 0, 0)). Strides of empty arrays address nothing;
  // ours stay distinct per axis and agree with what a reshape of the array produces.
  CHECK(layout::dense_strides(Shape{3, 0, 2}, 8, Order::C) == Strides{16, 16, 8});
  CHECK(layout::dense_strides(Shape{3, 0, 2}, 8, Order::F) == Strides{8, 24, 24});
}

TEST_CASE("dense_strides errors", "[layout][errors]") {
  REQUIRE_THROWS_MATCHES(layout::dense_strides(Shape{2}, 8, Order::A), InvalidArgument,
                         Message("dense_strides: order must be C or F, got 'A'"));
  REQUIRE_THROWS_MATCHES(layout::dense_strides(Shape{2}, 8, Order::K), InvalidArgument,
                         Message("dense_strides: order must be C or F, got 'K'"));
  REQUIRE_THROWS_MATCHES(layout::dense_strides(Shape{2}, 0, Order::C), InvalidArgument,
                         Message("dense_strides: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(layout::dense_strides(Shape{2, -1}, 8, Order::C), InvalidArgument,
                         Message("dense_strides: negative dimension -1 in shape (2, -1)"));
  REQUIRE_THROWS_MATCHES(
      layout::dense_strides(Shape{0, std::int64_t{1} << 40, std::int64_t{1} << 40}, 8, Order::C),
      InvalidArgument,
      Message("dense_strides: strides of shape (0, 1099511627776, 1099511627776) with itemsize 8 "
              "overflow int64"));
}

// ---------------------------------------------------------------------------------------------
// Layout members

TEST_CASE("Layout size and nbytes", "[layout]") {
  CHECK(dense({2, 3, 4}).size() == 24);
  CHECK(dense({2, 3, 4}).nbytes() == 192);
  CHECK(dense({}).size() == 1);
  CHECK(dense({}).nbytes() == 8);
  CHECK(dense({3, 0}).size() == 0);
  CHECK(dense({2, 3}).ndim() == 2);
}

TEST_CASE("Layout contiguity follows NumPy's relaxed rules", "[layout]") {
  const auto flags = [](const Layout& l) {
    return std::pair{l.is_c_contiguous(), l.is_f_contiguous()};
  };
  using P = std::pair<bool, bool>;
  CHECK(flags(dense({2, 3, 4})) == P{true, false});
  CHECK(flags(dense({2, 3, 4}, 8, Order::F)) == P{false, true});
  CHECK(flags(dense({})) == P{true, true});
  CHECK(flags(dense({5})) == P{true, true});
  // Numba: (1,10) strides (800,8) is both (test_devicearray_relaxed_strides);
  // (1,4) and (4,1) in either order are both.
  CHECK(flags(L({1, 10}, {800, 8})) == P{true, true});
  CHECK(flags(dense({1, 4})) == P{true, true});
  CHECK(flags(dense({4, 1}, 8, Order::F)) == P{true, true});
  // Broadcast: neither.
  CHECK(flags(L({4, 3}, {0, 8})) == P{false, false});
  CHECK(flags(L({3}, {0})) == P{false, false});
  // A zero stride on a size-1 axis is harmless.
  CHECK(flags(L({1, 3}, {0, 8})) == P{true, true});
  // Empty arrays are both, whatever their strides.
  CHECK(flags(L({0}, {8})) == P{true, true});
  CHECK(flags(L({3, 0, 2}, {7, 0, -5})) == P{true, true});
  // Strided and reversed 1-d arrays are neither.
  CHECK(flags(L({10}, {16})) == P{false, false});
  CHECK(flags(L({10}, {-8}, 72)) == P{false, false});
  // Offset does not matter; itemsize does.
  CHECK(flags(L({2, 3}, {24, 8}, 40)) == P{true, false});
  CHECK(flags(L({2, 3}, {24, 8}, 0, 4)) == P{false, false});
  CHECK(dense({2, 3}).is_contiguous());
  CHECK_FALSE(L({10}, {16}).is_contiguous());
}

TEST_CASE("Layout is_dense", "[layout]") {
  CHECK(dense({2, 3, 4}).is_dense());
  CHECK(dense({2, 3, 4}, 8, Order::F).is_dense());
  CHECK(dense({}).is_dense());
  CHECK(L({0, 3}, {100, 8}).is_dense());
  // A transpose of a 3-d C array is neither C nor F contiguous but dense.
  const Layout t = layout::transpose(dense({3, 4, 5}), std::vector<int>{1, 0, 2});
  CHECK_FALSE(t.is_contiguous());
  CHECK(t.is_dense());
  // Reversed axes are dense too.
  CHECK(L({10}, {-8}, 72).is_dense());
  CHECK(L({2, 3}, {-24, 8}, 24).is_dense());
  CHECK(L({1, 3}, {1000, 8}).is_dense());
  CHECK_FALSE(L({5, 6}, {192, 16}).is_dense());      // gaps
  CHECK_FALSE(L({4, 3}, {0, 8}).is_dense());         // broadcast
  CHECK_FALSE(L({2, 2}, {8, 8}).is_dense());         // overlap
  CHECK_FALSE(L({2, 3}, {24, 8}, 0, 4).is_dense());  // gaps between 4-byte items
}

TEST_CASE("Layout extent", "[layout]") {
  // Values of Numba's memory_size_from_info.
  CHECK(dense({20, 50}).byte_extent().bytes() == 8000);
  CHECK(dense({20, 50}, 8, Order::F).byte_extent().bytes() == 8000);
  CHECK(L({10}, {16}).byte_extent() == Extent{0, 152});
  CHECK(L({10}, {-8}, 72).byte_extent() == Extent{0, 80});
  CHECK(L({4, 3}, {0, 8}).byte_extent() == Extent{0, 24});
  CHECK(dense({}).byte_extent() == Extent{0, 8});
  CHECK(L({0, 5}, {40, 8}, 16).byte_extent() == Extent{16, 16});
  CHECK(L({0, 5}, {40, 8}).byte_extent().bytes() == 0);
  CHECK(L({2, 5}, {40, 16}).byte_extent().bytes() == 112);
  // Offset-aware: a view in the middle of a buffer.
  CHECK(L({3}, {8}, 40).byte_extent() == Extent{40, 64});
  CHECK(L({2, 3}, {-24, 8}, 24).byte_extent() == Extent{0, 48});
}

TEST_CASE("Layout offset_of", "[layout]") {
  const Layout l = L({3, 4}, {32, 8}, 16);
  CHECK(l.offset_of(std::vector<std::int64_t>{0, 0}) == 16);
  CHECK(l.offset_of(std::vector<std::int64_t>{2, 3}) == 16 + 64 + 24);
  CHECK(L({10}, {-8}, 72).offset_of(std::vector<std::int64_t>{9}) == 0);
  CHECK(dense({}).offset_of({}) == 0);
}

// ---------------------------------------------------------------------------------------------
// make_layout

TEST_CASE("make_layout", "[layout]") {
  CHECK(layout::make_layout(Shape{2, 3}, 8) == L({2, 3}, {24, 8}));
  CHECK(layout::make_layout(Shape{2, 3}, 8, {}, Order::F) == L({2, 3}, {8, 16}));
  CHECK(layout::make_layout(Shape{}, 8) == L({}, {}));
  CHECK(layout::make_layout(Shape{3, 0, 2}, 8) == L({3, 0, 2}, {16, 16, 8}));
  // Given strides: element 0 is placed so that the extent starts at byte 0.
  CHECK(layout::make_layout(Shape{10}, 8, Strides{16}) == L({10}, {16}));
  CHECK(layout::make_layout(Shape{10}, 8, Strides{16}).byte_extent().bytes() == 152);
  const Layout reversed = layout::make_layout(Shape{10}, 8, Strides{-8});
  CHECK(reversed == L({10}, {-8}, 72));
  CHECK(reversed.byte_extent() == Extent{0, 80});
  CHECK(layout::make_layout(Shape{2, 3}, 8, Strides{-24, 8}) == L({2, 3}, {-24, 8}, 24));
  CHECK(layout::make_layout(Shape{4, 3}, 8, Strides{0, 8}).byte_extent() == Extent{0, 24});
  CHECK(layout::make_layout(Shape{0, 5}, 8, Strides{-40, 8}) == L({0, 5}, {-40, 8}));
  // Strides given: the order argument is not used.
  CHECK(layout::make_layout(Shape{2}, 8, Strides{8}, Order::K) == L({2}, {8}));
}

TEST_CASE("make_layout errors", "[layout][errors]") {
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, 3}, 8, Strides{8, 8, 8}), InvalidArgument,
                         Message("device_array: 3 strides given for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{}, 8, Strides{8}, Order::C, "mapped_array"),
                         InvalidArgument,
                         Message("mapped_array: 1 strides given for 0 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, 3}, 8, {}, Order::A), InvalidArgument,
                         Message("device_array: order must be C or F, got 'A'"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{}, 8, {}, Order::K, "pinned_array"),
                         InvalidArgument, Message("pinned_array: order must be C or F, got 'K'"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, -3}, 8, {}, Order::C, "pinned_array"),
                         InvalidArgument,
                         Message("pinned_array: negative dimension -3 in shape (2, -3)"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2}, 0), InvalidArgument,
                         Message("device_array: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(
      layout::make_layout(Shape{std::int64_t{1} << 62}, 8), InvalidArgument,
      Message("device_array: size in bytes of shape (4611686018427387904,) with itemsize 8 "
              "overflows int64"));
  REQUIRE_THROWS_MATCHES(
      layout::make_layout(Shape{3}, 8, Strides{kMax / 2}), InvalidArgument,
      Message("device_array: extent of shape (3,) with strides (4611686018427387903,) overflows "
              "int64"));
  REQUIRE_THROWS_MATCHES(
      layout::make_layout(Shape{3}, 8, Strides{kMax}), InvalidArgument,
      Message("device_array: extent of shape (3,) with strides (9223372036854775807,) overflows "
              "int64"));
  // Both halves fit on their own, the distance between them does not.
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, 2}, 8, Strides{kMax / 2, kMin / 2}),
                         InvalidArgument, devmem_test::MessageContains("device_array: extent of"));
}

// ---------------------------------------------------------------------------------------------
// strides_like / order_like (NumPy empty_like order K, as Numba's device_array_like)

TEST_CASE("strides_like", "[layout]") {
  // Examples of Numba's device_array_like.
  const Layout c = dense({10, 12});
  const Layout sub = layout::slice(layout::slice(c, 0, Slice{{}, {}, 2}), 1, Slice{{}, {}, 2});
  REQUIRE(sub == L({5, 6}, {192, 16}));
  CHECK(layout::strides_like(sub) == Strides{48, 8});

  const Layout f = dense({10, 12}, 8, Order::F);
  const Layout fsub = layout::slice(layout::slice(f, 0, Slice{{}, {}, 2}), 1, Slice{{}, {}, 2});
  REQUIRE(fsub.strides == Strides{16, 160});
  CHECK(layout::strides_like(fsub) == Strides{8, 40});

  const Layout t = layout::transpose(dense({3, 4, 5}), std::vector<int>{1, 0, 2});
  REQUIRE(t.strides == Strides{40, 160, 8});
  CHECK(layout::strides_like(t) == Strides{40, 160, 8});

  const Layout t2 = layout::slice(layout::transpose(dense({3, 4, 6}), std::vector<int>{1, 0, 2}), 2,
                                  Slice{{}, {}, 2});
  REQUIRE(t2 == L({4, 3, 3}, {48, 192, 16}));
  CHECK(layout::strides_like(t2) == Strides{24, 96, 8});

  // Contiguous sources: dense strides in their order (size-1 axes get canonical strides).
  CHECK(layout::strides_like(dense({2, 3})) == Strides{24, 8});
  CHECK(layout::strides_like(dense({2, 3}, 8, Order::F)) == Strides{8, 16});
  CHECK(layout::strides_like(L({1, 10}, {800, 8})) == Strides{80, 8});
  // ndim <= 1: dense.
  CHECK(layout::strides_like(L({10}, {16})) == Strides{8});
  CHECK(layout::strides_like(L({10}, {-8}, 72)) == Strides{8});
  CHECK(layout::strides_like(dense({})).empty());
  // Otherwise axes sorted by |stride| descending, ties in axis order (NumPy's
  // PyArray_CreateSortedStridePerm): a reversed axis keeps its place, broadcast axes go inside.
  CHECK(layout::strides_like(L({4, 3}, {-24, 8}, 72)) == Strides{24, 8});
  CHECK(layout::strides_like(L({4, 3}, {0, 8})) == Strides{8, 32});
  CHECK(layout::strides_like(L({2, 3, 4}, {8, 64, 16}, 0, 4)) == Strides{4, 32, 8});
}

TEST_CASE("order_like", "[layout]") {
  CHECK(layout::order_like(dense({2, 3})) == Order::C);
  CHECK(layout::order_like(dense({2, 3}, 8, Order::F)) == Order::F);
  CHECK(layout::order_like(dense({1, 3}, 8, Order::F)) == Order::C);  // both: C
  CHECK(layout::order_like(L({5, 6}, {192, 16})) == Order::C);        // neither: C
}

// ---------------------------------------------------------------------------------------------
// resolve_reshape / reshape_view

TEST_CASE("resolve_reshape", "[layout][reshape]") {
  CHECK(layout::resolve_reshape(12, Shape{3, 4}) == Shape{3, 4});
  CHECK(layout::resolve_reshape(12, Shape{-1, 3}) == Shape{4, 3});
  CHECK(layout::resolve_reshape(12, Shape{2, -1, 2}) == Shape{2, 3, 2});
  CHECK(layout::resolve_reshape(1, Shape{}) == Shape{});
  CHECK(layout::resolve_reshape(1, Shape{-1}) == Shape{1});
  CHECK(layout::resolve_reshape(0, Shape{0, 5}) == Shape{0, 5});
  CHECK(layout::resolve_reshape(0, Shape{-1, 5}) == Shape{0, 5});
  CHECK(layout::resolve_reshape(0, Shape{5, std::int64_t{1} << 62, 0}) ==
        Shape{5, std::int64_t{1} << 62, 0});
}

TEST_CASE("resolve_reshape errors", "[layout][reshape][errors]") {
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(1000, Shape{3, 7}), InvalidArgument,
                         Message("reshape: cannot reshape array of size 1000 into shape (3, 7)"));
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(1, Shape{0}), InvalidArgument,
                         Message("reshape: cannot reshape array of size 1 into shape (0,)"));
  REQUIRE_THROWS_MATCHES(
      layout::resolve_reshape(12, Shape{-1, -1}), InvalidArgument,
      Message("reshape: can only specify one unknown dimension, got shape (-1, -1)"));
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(6, Shape{2, -3}), InvalidArgument,
                         Message("reshape: negative dimension -3 in shape (2, -3)"));
  REQUIRE_THROWS_MATCHES(
      layout::resolve_reshape(10, Shape{3, -1}), InvalidArgument,
      Message("reshape: cannot infer the unknown dimension of shape (3, -1) for an array of size "
              "10"));
  REQUIRE_THROWS_MATCHES(
      layout::resolve_reshape(0, Shape{0, -1}), InvalidArgument,
      Message("reshape: cannot infer the unknown dimension of shape (0, -1) for an array of size "
              "0"));
  REQUIRE_THROWS_MATCHES(
      layout::resolve_reshape(4, Shape{std::int64_t{1} << 32, std::int64_t{1} << 32, -1}),
      InvalidArgument,
      Message("reshape: element count of shape (4294967296, 4294967296, -1) overflows int64"));
}

TEST_CASE("reshape_view of contiguous arrays", "[layout][reshape]") {
  const Layout c = L({2, 3}, {24, 8}, 40);
  auto v = layout::reshape_view(c, Shape{3, 2});
  REQUIRE(v);
  CHECK(*v == L({3, 2}, {16, 8}, 40));  // keeps the offset
  v = layout::reshape_view(c, Shape{-1});
  REQUIRE(v);
  CHECK(*v == L({6}, {8}, 40));
  v = layout::reshape_view(c, Shape{3, 2}, Order::A);
  REQUIRE(v);
  CHECK(v->strides == Strides{16, 8});
  // C array reshaped in F order: the F element sequence is not the memory sequence.
  CHECK_FALSE(layout::reshape_view(c, Shape{3, 2}, Order::F));
  CHECK_FALSE(layout::reshape_view(c, Shape{6}, Order::F));

  const Layout f = dense({2, 3}, 8, Order::F);
  v = layout::reshape_view(f, Shape{3, 2}, Order::F);
  REQUIRE(v);
  CHECK(v->strides == Strides{8, 24});
  v = layout::reshape_view(f, Shape{3, 2}, Order::A);  // A on an F-only array means F
  REQUIRE(v);
  CHECK(v->strides == Strides{8, 24});
  // The Numba bug (NVIDIA/numba-cuda-mlir#311): F [[0,1,2],[3,4,5]]
  // .reshape(3,2) in C order is [[0,1],[2,3],[4,5]] in NumPy, which needs a copy. Numba returns a
  // reinterpreting view ([[0,3],[1,4],[2,5]]); we must return nullopt.
  CHECK_FALSE(layout::reshape_view(f, Shape{3, 2}));
  CHECK_FALSE(layout::reshape_view(f, Shape{3, 2}, Order::C));
  CHECK_FALSE(layout::reshape_view(f, Shape{6}));

  // Same shape: always a view of the same layout, whatever the order.
  v = layout::reshape_view(f, Shape{2, 3}, Order::C);
  REQUIRE(v);
  CHECK(*v == f);
  v = layout::reshape_view(L({5, 6}, {192, 16}, 8), Shape{-1, 6});
  REQUIRE(v);
  CHECK(*v == L({5, 6}, {192, 16}, 8));
}

TEST_CASE("reshape_view of relaxed-contiguous and size-1 axes", "[layout][reshape]") {
  const Layout row = L({1, 10}, {800, 8}, 16);
  auto v = layout::reshape_view(row, Shape{10});
  REQUIRE(v);
  CHECK(*v == L({10}, {8}, 16));
  v = layout::reshape_view(row, Shape{2, 5});
  REQUIRE(v);
  CHECK(v->strides == Strides{40, 8});
  // Both C and F contiguous: F order reshapes are views too.
  v = layout::reshape_view(row, Shape{2, 5}, Order::F);
  REQUIRE(v);
  CHECK(v->strides == Strides{8, 16});
  // Only size-1 axes differ: a view in either order even for a non-contiguous array.
  const Layout strided = L({5}, {16});
  v = layout::reshape_view(strided, Shape{1, 5, 1});
  REQUIRE(v);
  CHECK(*v == L({1, 5, 1}, {80, 16, 16}));
  v = layout::reshape_view(strided, Shape{5, 1}, Order::F);
  REQUIRE(v);
  CHECK(*v == L({5, 1}, {16, 80}));
  v = layout::reshape_view(L({5, 1}, {16, 8}), Shape{5});
  REQUIRE(v);
  CHECK(*v == L({5}, {16}));
  // 0-d to and from size-1 shapes.
  v = layout::reshape_view(dense({}), Shape{1, 1});
  REQUIRE(v);
  CHECK(*v == L({1, 1}, {8, 8}));
  v = layout::reshape_view(L({1, 1}, {8, 8}, 24), Shape{});
  REQUIRE(v);
  CHECK(*v == L({}, {}, 24));
  v = layout::reshape_view(L({1}, {-8}, 24), Shape{1, 1}, Order::F);
  REQUIRE(v);
  CHECK(*v == L({1, 1}, {8, 8}, 24));
}

TEST_CASE("reshape_view of non-contiguous arrays (NumPy _attempt_nocopy_reshape)",
          "[layout][reshape]") {
  // A transposed (3,4) C array: shape (4,3), strides (8,32).
  const Layout t = layout::transpose(dense({3, 4}));
  REQUIRE(t == L({4, 3}, {8, 32}));
  CHECK_FALSE(layout::reshape_view(t, Shape{12}));
  auto v = layout::reshape_view(t, Shape{12}, Order::F);  // F-contiguous
  REQUIRE(v);
  CHECK(*v == L({12}, {8}));
  v = layout::reshape_view(t, Shape{12}, Order::A);
  REQUIRE(v);
  CHECK(*v == L({12}, {8}));

  // (4,6)[:, ::2]: shape (4,3), strides (48,16). Every other element of a C array is one evenly
  // strided run (stride 16), so NumPy makes views even of the flattening reshapes.
  const Layout s = layout::slice(dense({4, 6}), 1, Slice{{}, {}, 2});
  REQUIRE(s == L({4, 3}, {48, 16}));
  v = layout::reshape_view(s, Shape{12});
  REQUIRE(v);
  CHECK(*v == L({12}, {16}));
  v = layout::reshape_view(s, Shape{3, 4});
  REQUIRE(v);
  CHECK(*v == L({3, 4}, {64, 16}));
  CHECK(layout::reshape_view(s, Shape{4, 3}, Order::F) == std::optional<Layout>(s));
  v = layout::reshape_view(s, Shape{2, 2, 3});
  REQUIRE(v);
  CHECK(*v == L({2, 2, 3}, {96, 48, 16}));
  v = layout::reshape_view(s, Shape{4, 3, 1});
  REQUIRE(v);
  CHECK(*v == L({4, 3, 1}, {48, 16, 16}));
  v = layout::reshape_view(s, Shape{1, 4, 3});
  REQUIRE(v);
  CHECK(*v == L({1, 4, 3}, {192, 48, 16}));
  v = layout::reshape_view(s, Shape{4, 3, 1}, Order::F);
  REQUIRE(v);
  CHECK(*v == L({4, 3, 1}, {48, 16, 48}));
  // In F order the first axis splits F-wise; the two axes cannot be merged either.
  v = layout::reshape_view(s, Shape{2, 2, 3}, Order::F);
  REQUIRE(v);
  CHECK(*v == L({2, 2, 3}, {48, 96, 16}));
  CHECK_FALSE(layout::reshape_view(s, Shape{12}, Order::F));

  // (4,5)[:, ::2]: shape (4,3), strides (40,16). Rows are no longer evenly spaced: flattening
  // needs a copy, splitting the outer axis does not.
  const Layout g = layout::slice(dense({4, 5}), 1, Slice{{}, {}, 2});
  REQUIRE(g == L({4, 3}, {40, 16}));
  CHECK_FALSE(layout::reshape_view(g, Shape{12}));
  CHECK_FALSE(layout::reshape_view(g, Shape{3, 4}));
  CHECK_FALSE(layout::reshape_view(g, Shape{2, 6}));
  v = layout::reshape_view(g, Shape{2, 2, 3});
  REQUIRE(v);
  CHECK(*v == L({2, 2, 3}, {80, 40, 16}));

  // (2,3,4)[:, :, :3]: the first two axes merge, the last two do not.
  const Layout s3 = layout::slice(dense({2, 3, 4}), 2, Slice{{}, 3, 1});
  REQUIRE(s3 == L({2, 3, 3}, {96, 32, 8}));
  v = layout::reshape_view(s3, Shape{6, 3});
  REQUIRE(v);
  CHECK(*v == L({6, 3}, {32, 8}));
  CHECK_FALSE(layout::reshape_view(s3, Shape{2, 9}));
  CHECK_FALSE(layout::reshape_view(s3, Shape{18}));
  // (2,3,4)[:, :, ::2] is one evenly strided run: every reshape is a view.
  const Layout even = layout::slice(dense({2, 3, 4}), 2, Slice{{}, {}, 2});
  v = layout::reshape_view(even, Shape{12});
  REQUIRE(v);
  CHECK(*v == L({12}, {16}));
  v = layout::reshape_view(even, Shape{2, 6});
  REQUIRE(v);
  CHECK(*v == L({2, 6}, {96, 16}));

  // Broadcast arrays: the stride-0 axis stays an axis of its own.
  const Layout b = L({3, 4}, {0, 8});
  v = layout::reshape_view(b, Shape{3, 2, 2});
  REQUIRE(v);
  CHECK(*v == L({3, 2, 2}, {0, 16, 8}));
  CHECK_FALSE(layout::reshape_view(b, Shape{12}));

  // Reversed axes merge when they continue each other.
  const Layout r = L({2, 3}, {-24, -8}, 40);
  v = layout::reshape_view(r, Shape{6});
  REQUIRE(v);
  CHECK(*v == L({6}, {-8}, 40));
}

TEST_CASE("reshape_view of empty arrays", "[layout][reshape]") {
  // Size 0 arrays are contiguous in both orders: always a view with fresh dense strides.
  auto v = layout::reshape_view(L({0, 3}, {24, 8}, 16), Shape{3, 0});
  REQUIRE(v);
  CHECK(*v == L({3, 0}, {8, 8}, 16));
  v = layout::reshape_view(L({0, 3}, {-5, 0}), Shape{3, -1, 2}, Order::F);
  REQUIRE(v);
  CHECK(*v == L({3, 0, 2}, {8, 24, 24}));
}

TEST_CASE("reshape_view errors", "[layout][reshape][errors]") {
  REQUIRE_THROWS_MATCHES(layout::reshape_view(dense({2, 3}), Shape{6}, Order::K), InvalidArgument,
                         Message("reshape: order must be C, F or A, got 'K'"));
  REQUIRE_THROWS_MATCHES(layout::reshape_view(dense({10, 100}), Shape{3, 7}), InvalidArgument,
                         Message("reshape: cannot reshape array of size 1000 into shape (3, 7)"));
  REQUIRE_THROWS_MATCHES(
      layout::reshape_view(dense({2, 3}), Shape{-1, -1}), InvalidArgument,
      Message("reshape: can only specify one unknown dimension, got shape (-1, -1)"));
}

// ---------------------------------------------------------------------------------------------
// ravel_view

TEST_CASE("ravel_view", "[layout][ravel]") {
  const Layout c = L({2, 3}, {24, 8}, 16);
  for (const Order o : {Order::C, Order::A, Order::K}) {
    auto v = layout::ravel_view(c, o);
    REQUIRE(v);
    CHECK(*v == L({6}, {8}, 16));
  }
  CHECK_FALSE(layout::ravel_view(c, Order::F));

  const Layout f = dense({2, 3}, 8, Order::F);
  CHECK_FALSE(layout::ravel_view(f, Order::C));
  for (const Order o : {Order::F, Order::A, Order::K}) {
    auto v = layout::ravel_view(f, o);
    REQUIRE(v);
    CHECK(*v == L({6}, {8}));
  }
  // A C-contiguous 4-d array cannot be raveled in F order without a copy (NumPy copies there).
  CHECK_FALSE(layout::ravel_view(dense({2, 3, 4, 5}), Order::F));

  // Dense in some other axis order: only K gives a view (NumPy's ravel('K')).
  const Layout t = layout::transpose(dense({3, 4, 5}), std::vector<int>{1, 0, 2});
  CHECK_FALSE(layout::ravel_view(t, Order::C));
  CHECK_FALSE(layout::ravel_view(t, Order::F));
  CHECK_FALSE(layout::ravel_view(t, Order::A));
  auto v = layout::ravel_view(t, Order::K);
  REQUIRE(v);
  CHECK(*v == L({60}, {8}));

  // Gaps, reversed or broadcast: always a copy.
  for (const Order o : {Order::C, Order::F, Order::A, Order::K}) {
    CHECK_FALSE(layout::ravel_view(L({10}, {16}), o));
    CHECK_FALSE(layout::ravel_view(L({10}, {-8}, 72), o));
    CHECK_FALSE(layout::ravel_view(L({4, 3}, {0, 8}), o));
    CHECK_FALSE(layout::ravel_view(L({5, 6}, {192, 16}), o));
  }

  v = layout::ravel_view(L({1, 10}, {800, 8}));
  REQUIRE(v);
  CHECK(*v == L({10}, {8}));
  v = layout::ravel_view(L({}, {}, 8));
  REQUIRE(v);
  CHECK(*v == L({1}, {8}, 8));
  v = layout::ravel_view(L({0, 3}, {-3, 100}), Order::F);
  REQUIRE(v);
  CHECK(*v == L({0}, {8}));
}

// ---------------------------------------------------------------------------------------------
// slice / index

TEST_CASE("slice follows range(n)[start:stop:step]", "[layout][slice]") {
  const Layout a = dense({10});
  const auto sl = [&a](std::optional<std::int64_t> start, std::optional<std::int64_t> stop,
                       std::int64_t step) {
    return layout::slice(a, 0, Slice{start, stop, step});
  };
  CHECK(sl(2, 8, 2) == L({3}, {16}, 16));
  CHECK(sl({}, {}, 1) == a);
  CHECK(sl({}, {}, -1) == L({10}, {-8}, 72));
  CHECK(sl(-3, {}, 1) == L({3}, {8}, 56));
  CHECK(sl(8, 2, -2) == L({3}, {-16}, 64));
  CHECK(sl({}, {}, -3) == L({4}, {-24}, 72));
  CHECK(sl(-100, 3, 1) == L({3}, {8}, 0));
  CHECK(sl(3, 100, 1) == L({7}, {8}, 24));
  CHECK(sl(100, {}, -1) == L({10}, {-8}, 72));
  CHECK(sl({}, -100, -1) == L({10}, {-8}, 72));
  CHECK(sl(-1, -11, -1) == L({10}, {-8}, 72));
  CHECK(sl(-1, -10, -1) == L({9}, {-8}, 72));
  // Empty results keep the offset and the stride, like NumPy (which slices them as 0:0:1).
  CHECK(sl(100, {}, 1) == L({0}, {8}, 0));
  CHECK(sl(5, 5, 1) == L({0}, {8}, 0));
  CHECK(sl(2, 8, -1) == L({0}, {8}, 0));
  CHECK(sl(1, 9, 3) == L({3}, {24}, 8));
  // Extreme steps: one element, the stride is irrelevant and must not overflow.
  CHECK(sl({}, {}, kMax) == L({1}, {8}, 0));
  CHECK(sl({}, {}, kMin).shape == Shape{1});
  CHECK(sl({}, {}, kMin).offset == 72);
  CHECK(sl(kMin, kMax, 1) == a);
  CHECK(sl(kMax, kMin, -1) == L({10}, {-8}, 72));
}

TEST_CASE("slice of one axis of a multi-dimensional layout", "[layout][slice]") {
  const Layout a = L({4, 6}, {48, 8}, 8);
  CHECK(layout::slice(a, 1, Slice{1, {}, 2}) == L({4, 3}, {48, 16}, 16));
  CHECK(layout::slice(a, -1, Slice{1, {}, 2}) == L({4, 3}, {48, 16}, 16));
  CHECK(layout::slice(a, -2, Slice{{}, {}, -1}) == L({4, 6}, {-48, 8}, 152));
  CHECK(layout::slice(a, 0, Slice{1, 2, 1}) == L({1, 6}, {48, 8}, 56));
}

TEST_CASE("slice errors", "[layout][slice][errors]") {
  const Layout a = dense({4, 6});
  REQUIRE_THROWS_MATCHES(layout::slice(a, 0, Slice{{}, {}, 0}), InvalidArgument,
                         Message("slice: slice step cannot be zero"));
  REQUIRE_THROWS_MATCHES(layout::slice(a, 3, Slice{}), InvalidArgument,
                         Message("slice: axis 3 is out of bounds for array of dimension 2"));
  REQUIRE_THROWS_MATCHES(layout::slice(a, -3, Slice{}), InvalidArgument,
                         Message("slice: axis -3 is out of bounds for array of dimension 2"));
  REQUIRE_THROWS_MATCHES(layout::slice(dense({}), 0, Slice{}), InvalidArgument,
                         Message("slice: axis 0 is out of bounds for array of dimension 0"));
}

TEST_CASE("index removes an axis", "[layout][index]") {
  const Layout a = L({4, 6}, {48, 8}, 8);
  CHECK(layout::index(a, 0, 2) == L({6}, {8}, 104));
  CHECK(layout::index(a, 1, -1) == L({4}, {48}, 48));
  CHECK(layout::index(a, -1, 0) == L({4}, {48}, 8));
  CHECK(layout::index(layout::index(a, 0, 3), 0, 5) == L({}, {}, 8 + 144 + 40));
  CHECK(layout::index(L({10}, {-8}, 72), 0, 9) == L({}, {}, 0));
}

TEST_CASE("index errors", "[layout][index][errors]") {
  const Layout a = dense({10});
  REQUIRE_THROWS_MATCHES(layout::index(a, 0, 10), InvalidArgument,
                         Message("index: index 10 is out of bounds for axis 0 with size 10"));
  REQUIRE_THROWS_MATCHES(layout::index(a, 0, -11), InvalidArgument,
                         Message("index: index -11 is out of bounds for axis 0 with size 10"));
  REQUIRE_THROWS_MATCHES(layout::index(dense({3, 0}), -1, 0), InvalidArgument,
                         Message("index: index 0 is out of bounds for axis 1 with size 0"));
  REQUIRE_THROWS_MATCHES(layout::index(a, 1, 0), InvalidArgument,
                         Message("index: axis 1 is out of bounds for array of dimension 1"));
}

// ---------------------------------------------------------------------------------------------
// transpose / squeeze

TEST_CASE("transpose", "[layout]") {
  CHECK(layout::transpose(L({2, 3, 4}, {96, 32, 8}, 8)) == L({4, 3, 2}, {8, 32, 96}, 8));
  CHECK(layout::transpose(dense({})) == dense({}));
  CHECK(layout::transpose(dense({5})) == dense({5}));
  const Layout a = dense({2, 3, 4});
  CHECK(layout::transpose(a, std::vector<int>{1, 0, 2}) == L({3, 2, 4}, {32, 96, 8}));
  CHECK(layout::transpose(a, std::vector<int>{-1, 0, 1}) == L({4, 2, 3}, {8, 96, 32}));
  CHECK(layout::transpose(a, std::vector<int>{0, 1, 2}) == a);
  CHECK(layout::transpose(dense({}), std::vector<int>{}) == dense({}));
}

TEST_CASE("transpose errors", "[layout][errors]") {
  const Layout a = dense({2, 3});
  REQUIRE_THROWS_MATCHES(layout::transpose(a, std::vector<int>{0, 0}), InvalidArgument,
                         Message("transpose: axes (0, 0) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(layout::transpose(a, std::vector<int>{0, -2}), InvalidArgument,
                         Message("transpose: axes (0, -2) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(layout::transpose(a, std::vector<int>{0, 2}), InvalidArgument,
                         Message("transpose: axes (0, 2) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(layout::transpose(a, std::vector<int>{1, -3}), InvalidArgument,
                         Message("transpose: axes (1, -3) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(layout::transpose(a, std::vector<int>{0, 1, 2}), InvalidArgument,
                         Message("transpose: axes (0, 1, 2) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(layout::transpose(a, std::vector<int>{0}), InvalidArgument,
                         Message("transpose: axes (0,) are not a permutation of 2 axes"));
}

TEST_CASE("squeeze", "[layout]") {
  // Numba's squeeze: (1,10,1) f8 -> (10,) strides (8,); axis=0 -> (10,1) strides (8,8).
  const Layout a = L({1, 10, 1}, {80, 8, 8}, 16);
  CHECK(layout::squeeze(a) == L({10}, {8}, 16));
  CHECK(layout::squeeze(a, 0) == L({10, 1}, {8, 8}, 16));
  CHECK(layout::squeeze(a, -1) == L({1, 10}, {80, 8}, 16));
  CHECK(layout::squeeze(dense({1, 1})) == dense({}));
  CHECK(layout::squeeze(dense({2, 3})) == dense({2, 3}));
  CHECK(layout::squeeze(dense({})) == dense({}));
}

TEST_CASE("squeeze errors", "[layout][errors]") {
  REQUIRE_THROWS_MATCHES(layout::squeeze(dense({1, 3}), 1), InvalidArgument,
                         Message("squeeze: cannot select an axis to squeeze out which has size "
                                 "not equal to one (axis 1 has size 3)"));
  REQUIRE_THROWS_MATCHES(layout::squeeze(dense({1, 3}), -1), InvalidArgument,
                         Message("squeeze: cannot select an axis to squeeze out which has size "
                                 "not equal to one (axis -1 has size 3)"));
  REQUIRE_THROWS_MATCHES(layout::squeeze(dense({1, 3}), 2), InvalidArgument,
                         Message("squeeze: axis 2 is out of bounds for array of dimension 2"));
}

// ---------------------------------------------------------------------------------------------
// view_as

TEST_CASE("view_as rescales the last axis", "[layout][view]") {
  CHECK(layout::view_as(L({2, 3}, {24, 8}, 8), 8) == L({2, 3}, {24, 8}, 8));
  CHECK(layout::view_as(L({2, 3}, {24, 8}, 8), 4) == L({2, 6}, {24, 4}, 8, 4));
  CHECK(layout::view_as(L({2, 4}, {16, 4}, 0, 4), 8) == L({2, 2}, {16, 8}, 0, 8));
  CHECK(layout::view_as(L({2, 4}, {16, 4}, 0, 4), 16) == L({2, 1}, {16, 16}, 0, 16));
  CHECK(layout::view_as(L({5}, {24}, 0, 24), 8) == L({15}, {8}, 0, 8));
  // NumPy (not Numba): only the last axis has to be contiguous, e.g. (4,6)[::2, :].
  CHECK(layout::view_as(L({2, 6}, {96, 8}), 4) == L({2, 12}, {96, 4}, 0, 4));
  CHECK(layout::view_as(dense({2, 3}, 8, Order::F), 8) == dense({2, 3}, 8, Order::F));
  // A last axis of length 1 may have any stride; empty arrays too.
  CHECK(layout::view_as(L({3, 1}, {8, 800}), 4) == L({3, 2}, {8, 4}, 0, 4));
  CHECK(layout::view_as(L({0, 3}, {7, 16}), 4) == L({0, 6}, {7, 4}, 0, 4));
  // Same itemsize: everything kept, including broadcast or reversed strides and 0-d.
  CHECK(layout::view_as(L({4, 3}, {0, -8}, 16), 8) == L({4, 3}, {0, -8}, 16));
  CHECK(layout::view_as(dense({}), 8) == dense({}));
}

TEST_CASE("view_as errors", "[layout][view][errors]") {
  REQUIRE_THROWS_MATCHES(layout::view_as(dense({}), 4), InvalidArgument,
                         Message("view: cannot change the itemsize of a 0-d array (from 8 to 4 "
                                 "bytes)"));
  REQUIRE_THROWS_MATCHES(layout::view_as(dense({2, 3}, 8, Order::F), 4), InvalidArgument,
                         Message("view: to change the itemsize from 8 to 4 bytes the last axis "
                                 "must be contiguous, but its stride is 16"));
  REQUIRE_THROWS_MATCHES(layout::view_as(L({10}, {-8}, 72), 4), InvalidArgument,
                         Message("view: to change the itemsize from 8 to 4 bytes the last axis "
                                 "must be contiguous, but its stride is -8"));
  REQUIRE_THROWS_MATCHES(layout::view_as(dense({2, 3}), 3), InvalidArgument,
                         Message("view: when changing to a smaller itemsize, it must divide the "
                                 "original itemsize (3 does not divide 8)"));
  REQUIRE_THROWS_MATCHES(layout::view_as(dense({2, 3}, 4), 8), InvalidArgument,
                         Message("view: when changing to a larger itemsize, it must divide the "
                                 "size in bytes of the last axis (8 does not divide 12 bytes)"));
  REQUIRE_THROWS_MATCHES(layout::view_as(L({3, 1}, {8, 800}, 0, 2), 4), InvalidArgument,
                         Message("view: when changing to a larger itemsize, it must divide the "
                                 "size in bytes of the last axis (4 does not divide 2 bytes)"));
  REQUIRE_THROWS_MATCHES(layout::view_as(dense({2}), 0), InvalidArgument,
                         Message("view: itemsize must be positive, got 0"));
}

// ---------------------------------------------------------------------------------------------
// split / broadcast_to / same_squeezed_shape

TEST_CASE("split", "[layout][split]") {
  // Numba's split: 10 elements, section 3 -> sizes 3, 3, 3, 1.
  const auto parts = layout::split(L({10}, {8}, 8), 3);
  REQUIRE(parts.size() == 4);
  CHECK(parts[0] == L({3}, {8}, 8));
  CHECK(parts[1] == L({3}, {8}, 32));
  CHECK(parts[2] == L({3}, {8}, 56));
  CHECK(parts[3] == L({1}, {8}, 80));
  // Any stride (Numba only supports unit strides): parts keep the stride.
  const auto strided = layout::split(L({5}, {16}), 2);
  REQUIRE(strided.size() == 3);
  CHECK(strided[1] == L({2}, {16}, 32));
  CHECK(strided[2] == L({1}, {16}, 64));
  const auto reversed = layout::split(L({10}, {-8}, 72), 4);
  REQUIRE(reversed.size() == 3);
  CHECK(reversed[0] == L({4}, {-8}, 72));
  CHECK(reversed[1] == L({4}, {-8}, 40));
  CHECK(reversed[2] == L({2}, {-8}, 8));
  CHECK(layout::split(dense({0}), 3).empty());
  CHECK(layout::split(dense({6}), 3).size() == 2);
  const auto whole = layout::split(dense({6}), 100);
  REQUIRE(whole.size() == 1);
  CHECK(whole[0] == dense({6}));
}

TEST_CASE("split errors", "[layout][split][errors]") {
  REQUIRE_THROWS_MATCHES(layout::split(dense({2, 3}), 1), InvalidArgument,
                         Message("split: only 1-d arrays can be split, got ndim 2"));
  REQUIRE_THROWS_MATCHES(layout::split(dense({}), 1), InvalidArgument,
                         Message("split: only 1-d arrays can be split, got ndim 0"));
  REQUIRE_THROWS_MATCHES(layout::split(dense({10}), 0), InvalidArgument,
                         Message("split: section must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(layout::split(dense({10}), -2), InvalidArgument,
                         Message("split: section must be positive, got -2"));
}

TEST_CASE("broadcast_to", "[layout]") {
  CHECK(layout::broadcast_to(L({3}, {8}, 16), Shape{4, 3}) == L({4, 3}, {0, 8}, 16));
  CHECK(layout::broadcast_to(dense({3, 1}), Shape{3, 4}) == L({3, 4}, {8, 0}));
  CHECK(layout::broadcast_to(dense({}), Shape{2, 2}) == L({2, 2}, {0, 0}));
  CHECK(layout::broadcast_to(dense({1}), Shape{0}) == L({0}, {0}));
  CHECK(layout::broadcast_to(dense({0}), Shape{2, 0}) == L({2, 0}, {0, 8}));
  CHECK(layout::broadcast_to(dense({2, 3}), Shape{2, 3}) == dense({2, 3}));
  CHECK(layout::broadcast_to(L({1, 3}, {100, 8}), Shape{1, 3}) == L({1, 3}, {100, 8}));
}

TEST_CASE("broadcast_to errors", "[layout][errors]") {
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(dense({3}), Shape{4, 2}), InvalidArgument,
                         Message("broadcast_to: cannot broadcast shape (3,) to shape (4, 2)"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(dense({2, 3}), Shape{3}), InvalidArgument,
                         Message("broadcast_to: cannot broadcast shape (2, 3) to shape (3,)"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(dense({0}), Shape{1}), InvalidArgument,
                         Message("broadcast_to: cannot broadcast shape (0,) to shape (1,)"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(dense({3}), Shape{-1, 3}, "setitem"), InvalidArgument,
                         Message("setitem: negative dimension -1 in shape (-1, 3)"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(dense({3}), Shape{2}, "setitem"), InvalidArgument,
                         Message("setitem: cannot broadcast shape (3,) to shape (2,)"));
}

TEST_CASE("same_squeezed_shape", "[layout]") {
  CHECK(layout::same_squeezed_shape(Shape{1, 5}, Shape{5}));
  CHECK(layout::same_squeezed_shape(Shape{5, 1, 3}, Shape{1, 5, 3, 1}));
  CHECK(layout::same_squeezed_shape(Shape{}, Shape{1, 1}));
  CHECK(layout::same_squeezed_shape(Shape{}, Shape{}));
  CHECK_FALSE(layout::same_squeezed_shape(Shape{5}, Shape{10}));
  CHECK_FALSE(layout::same_squeezed_shape(Shape{0}, Shape{}));
  CHECK_FALSE(layout::same_squeezed_shape(Shape{2, 3}, Shape{3, 2}));
  CHECK_FALSE(layout::same_squeezed_shape(Shape{5}, Shape{5, 5}));
  CHECK_FALSE(layout::same_squeezed_shape(Shape{5, 5}, Shape{5}));
}

// ---------------------------------------------------------------------------------------------
// Malformed layouts are rejected by every function that takes one.

// ---------------------------------------------------------------------------------------------
// ravel_strides: the layout a ravel copy is written through

TEST_CASE("ravel_strides", "[layout][ravel]") {
  // C, F and A: dense strides in that order whatever the source's strides.
  const Layout padded = L({2, 3}, {48, 16});
  CHECK(layout::ravel_strides(padded, Order::C) == Strides{24, 8});
  CHECK(layout::ravel_strides(padded, Order::F) == Strides{8, 16});
  CHECK(layout::ravel_strides(padded, Order::A) == Strides{24, 8});
  CHECK(layout::ravel_strides(dense({2, 3}, 8, Order::F), Order::A) == Strides{8, 16});
  CHECK(layout::ravel_strides(dense({}), Order::K).empty());
  CHECK(layout::ravel_strides(L({0, 3}, {-3, 100}), Order::K) == Strides{24, 8});
  // K: NumPy's nditer order. A broadcast axis stays outermost, unlike strides_like (NumPy:
  // np.broadcast_to(np.arange(3.), (2, 3)).ravel('K') == [0, 1, 2, 0, 1, 2]).
  CHECK(layout::ravel_strides(L({2, 3}, {0, 8}), Order::K) == Strides{24, 8});
  CHECK(layout::strides_like(L({2, 3}, {0, 8})) == Strides{8, 16});
  // (3, 2, 3) strides (0, 8, 16): the broadcast axis outermost, then F order (NumPy ravel('K')
  // gives [0..5, 0..5, 0..5]).
  CHECK(layout::ravel_strides(L({3, 2, 3}, {0, 8, 16}), Order::K) == Strides{48, 8, 16});
  // Reversed axes are ordered by |stride| and read from index 0 up: strides stay positive.
  CHECK(layout::ravel_strides(L({4, 3}, {-24, 8}, 72), Order::K) == Strides{24, 8});
  CHECK(layout::ravel_strides(L({4, 2, 3}, {-8, 96, 32}, 24), Order::K) == Strides{8, 96, 32});
  // Size-1 axes compare with nothing, like broadcast ones.
  CHECK(layout::ravel_strides(L({1, 4, 1, 2}, {40, 32, 56, 8}), Order::K) ==
        Strides{64, 16, 16, 8});
  REQUIRE_THROWS_MATCHES(layout::ravel_strides(padded, static_cast<Order>('X')), InvalidArgument,
                         Message("ravel: order must be 'C', 'F', 'A' or 'K', got 'X'"));
}

TEST_CASE("functions taking a Layout reject malformed layouts", "[layout][errors]") {
  const Layout bad_strides = L({2, 3}, {8});
  const Layout bad_itemsize = L({2}, {8}, 0, 0);
  const Layout bad_dim = L({-2}, {8});
  const std::vector<int> axes{0, 1};

  REQUIRE_THROWS_MATCHES(layout::reshape_view(bad_strides, Shape{6}), InvalidArgument,
                         Message("reshape: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::ravel_view(bad_strides), InvalidArgument,
                         Message("ravel: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::slice(bad_strides, 0, Slice{}), InvalidArgument,
                         Message("slice: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::index(bad_strides, 0, 0), InvalidArgument,
                         Message("index: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::transpose(bad_strides), InvalidArgument,
                         Message("transpose: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::transpose(bad_strides, axes), InvalidArgument,
                         Message("transpose: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::squeeze(bad_strides), InvalidArgument,
                         Message("squeeze: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::view_as(bad_strides, 4), InvalidArgument,
                         Message("view: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::split(bad_strides, 1), InvalidArgument,
                         Message("split: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(bad_strides, Shape{2, 3}), InvalidArgument,
                         Message("broadcast_to: layout has 1 strides for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::strides_like(bad_strides), InvalidArgument,
                         Message("strides_like: layout has 1 strides for 2 dimensions"));

  REQUIRE_THROWS_MATCHES(layout::slice(bad_itemsize, 0, Slice{}), InvalidArgument,
                         Message("slice: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(layout::split(bad_dim, 1), InvalidArgument,
                         Message("split: negative dimension -2 in shape (-2,)"));

  // The noexcept members answer conservatively instead of reading out of bounds.
  CHECK_FALSE(bad_strides.is_c_contiguous());
  CHECK_FALSE(bad_strides.is_f_contiguous());
  CHECK_FALSE(bad_strides.is_dense());
}

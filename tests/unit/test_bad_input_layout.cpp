// Bad-input catalogue, layout math: every invalid shape, stride, order, axis, section
// and itemsize the layout functions reject, with the exact exception type and message.
#include <catch2/catch.hpp>

#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <cstdint>
#include <limits>
#include <vector>

namespace {

using Catch::Matchers::Message;
using devmem::InvalidArgument;
using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Strides;
namespace layout = devmem::layout;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

Layout c_layout(const Shape& shape, std::int64_t itemsize = 8) {
  return layout::make_layout(shape, itemsize);
}

}  // namespace

TEST_CASE("bad input, layout: shapes and sizes", "[bad-input][layout]") {
  REQUIRE_THROWS_MATCHES(layout::element_count(Shape{2, -1}), InvalidArgument,
                         Message("shape: negative dimension -1 in shape (2, -1)"));
  REQUIRE_THROWS_MATCHES(
      layout::element_count(Shape{std::int64_t{1} << 40, std::int64_t{1} << 40}), InvalidArgument,
      Message("shape: element count of shape (1099511627776, 1099511627776) overflows int64"));
  REQUIRE_THROWS_MATCHES(
      layout::checked_nbytes(Shape{std::int64_t{1} << 62}, 8), InvalidArgument,
      Message("shape: size in bytes of shape (4611686018427387904,) with itemsize 8 overflows "
              "int64"));
  REQUIRE_THROWS_MATCHES(layout::checked_nbytes(Shape{3}, 0), InvalidArgument,
                         Message("shape: itemsize must be positive, got 0"));
}

TEST_CASE("bad input, layout: strides and orders of new layouts", "[bad-input][layout]") {
  REQUIRE_THROWS_MATCHES(layout::dense_strides(Shape{2, 3}, 8, Order::A), InvalidArgument,
                         Message("dense_strides: order must be C or F, got 'A'"));
  REQUIRE_THROWS_MATCHES(layout::dense_strides(Shape{2, 3}, -8, Order::C), InvalidArgument,
                         Message("dense_strides: itemsize must be positive, got -8"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, 3}, 8, Strides{8}), InvalidArgument,
                         Message("device_array: 1 strides given for 2 dimensions"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, 3}, 0), InvalidArgument,
                         Message("device_array: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(layout::make_layout(Shape{2, 3}, 8, {}, Order::K), InvalidArgument,
                         Message("device_array: order must be C or F, got 'K'"));
  REQUIRE_THROWS_MATCHES(
      layout::make_layout(Shape{2, 2}, 8, Strides{kInt64Max, 8}), InvalidArgument,
      Message("device_array: extent of shape (2, 2) with strides (9223372036854775807, 8) "
              "overflows int64"));
}

TEST_CASE("bad input, layout: reshape and ravel", "[bad-input][layout]") {
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(12, Shape{-1, -1}), InvalidArgument,
                         Message("reshape: can only specify one unknown dimension, got shape "
                                 "(-1, -1)"));
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(12, Shape{-2, 6}), InvalidArgument,
                         Message("reshape: negative dimension -2 in shape (-2, 6)"));
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(12, Shape{5, -1}), InvalidArgument,
                         Message("reshape: cannot infer the unknown dimension of shape (5, -1) "
                                 "for an array of size 12"));
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(0, Shape{0, -1}), InvalidArgument,
                         Message("reshape: cannot infer the unknown dimension of shape (0, -1) "
                                 "for an array of size 0"));
  REQUIRE_THROWS_MATCHES(layout::resolve_reshape(12, Shape{5, 3}), InvalidArgument,
                         Message("reshape: cannot reshape array of size 12 into shape (5, 3)"));
  REQUIRE_THROWS_MATCHES(layout::reshape_view(c_layout({12}), Shape{3, 4}, Order::K),
                         InvalidArgument, Message("reshape: order must be C, F or A, got 'K'"));
  REQUIRE_THROWS_MATCHES(layout::ravel_view(c_layout({3, 4}), static_cast<Order>('X')),
                         InvalidArgument,
                         Message("ravel: order must be 'C', 'F', 'A' or 'K', got 'X'"));
}

TEST_CASE("bad input, layout: slicing, indexing, axes", "[bad-input][layout]") {
  const Layout a = c_layout({3, 4});
  REQUIRE_THROWS_MATCHES(layout::slice(a, 0, devmem::Slice{{}, {}, 0}), InvalidArgument,
                         Message("slice: slice step cannot be zero"));
  REQUIRE_THROWS_MATCHES(layout::slice(a, 2, devmem::Slice{}), InvalidArgument,
                         Message("slice: axis 2 is out of bounds for array of dimension 2"));
  REQUIRE_THROWS_MATCHES(layout::slice(a, -3, devmem::Slice{}), InvalidArgument,
                         Message("slice: axis -3 is out of bounds for array of dimension 2"));
  REQUIRE_THROWS_MATCHES(layout::index(a, 0, 3), InvalidArgument,
                         Message("index: index 3 is out of bounds for axis 0 with size 3"));
  REQUIRE_THROWS_MATCHES(layout::index(a, 1, -5), InvalidArgument,
                         Message("index: index -5 is out of bounds for axis 1 with size 4"));
  REQUIRE_THROWS_MATCHES(layout::index(c_layout({}), 0, 0), InvalidArgument,
                         Message("index: axis 0 is out of bounds for array of dimension 0"));
  const std::vector<int> repeated{0, 0};
  REQUIRE_THROWS_MATCHES(layout::transpose(a, repeated), InvalidArgument,
                         Message("transpose: axes (0, 0) are not a permutation of 2 axes"));
  const std::vector<int> too_few{0};
  REQUIRE_THROWS_MATCHES(layout::transpose(a, too_few), InvalidArgument,
                         Message("transpose: axes (0,) are not a permutation of 2 axes"));
  const std::vector<int> out_of_range{0, 2};
  REQUIRE_THROWS_MATCHES(layout::transpose(a, out_of_range), InvalidArgument,
                         Message("transpose: axes (0, 2) are not a permutation of 2 axes"));
  REQUIRE_THROWS_MATCHES(layout::squeeze(c_layout({1, 3}), 1), InvalidArgument,
                         Message("squeeze: cannot select an axis to squeeze out which has size "
                                 "not equal to one (axis 1 has size 3)"));
  REQUIRE_THROWS_MATCHES(layout::squeeze(c_layout({1, 3}), 2), InvalidArgument,
                         Message("squeeze: axis 2 is out of bounds for array of dimension 2"));
}

TEST_CASE("bad input, layout: view as another itemsize", "[bad-input][layout]") {
  REQUIRE_THROWS_MATCHES(layout::view_as(c_layout({4}), 0), InvalidArgument,
                         Message("view: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(layout::view_as(c_layout({}), 4), InvalidArgument,
                         Message("view: cannot change the itemsize of a 0-d array (from 8 to 4 "
                                 "bytes)"));
  REQUIRE_THROWS_MATCHES(layout::view_as(layout::transpose(c_layout({3, 4})), 4), InvalidArgument,
                         Message("view: to change the itemsize from 8 to 4 bytes the last axis "
                                 "must be contiguous, but its stride is 32"));
  REQUIRE_THROWS_MATCHES(layout::view_as(c_layout({4}), 3), InvalidArgument,
                         Message("view: when changing to a smaller itemsize, it must divide the "
                                 "original itemsize (3 does not divide 8)"));
  REQUIRE_THROWS_MATCHES(layout::view_as(c_layout({3}, 4), 8), InvalidArgument,
                         Message("view: when changing to a larger itemsize, it must divide the "
                                 "size in bytes of the last axis (8 does not divide 12 bytes)"));
}

TEST_CASE("bad input, layout: split, broadcast, copy plans", "[bad-input][layout]") {
  REQUIRE_THROWS_MATCHES(layout::split(c_layout({2, 3}), 1), InvalidArgument,
                         Message("split: only 1-d arrays can be split, got ndim 2"));
  REQUIRE_THROWS_MATCHES(layout::split(c_layout({6}), 0), InvalidArgument,
                         Message("split: section must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(layout::split(c_layout({6}), -2), InvalidArgument,
                         Message("split: section must be positive, got -2"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(c_layout({3}), Shape{2, 4}), InvalidArgument,
                         Message("broadcast_to: cannot broadcast shape (3,) to shape (2, 4)"));
  REQUIRE_THROWS_MATCHES(layout::broadcast_to(c_layout({2, 1, 3}), Shape{1, 3}), InvalidArgument,
                         Message("broadcast_to: cannot broadcast shape (2, 1, 3) to shape (1, 3)"));
  REQUIRE_THROWS_MATCHES(layout::plan_copy(Shape{3}, Strides{8}, Strides{0}, 8), InvalidArgument,
                         Message("copy: destination has a zero stride on axis 0 of length 3 (one "
                                 "element would be written 3 times)"));
  REQUIRE_THROWS_MATCHES(layout::plan_copy(Shape{3, 2}, Strides{16, 8}, Strides{8}, 8),
                         InvalidArgument,
                         Message("copy: shape (3, 2) has 2 dimensions but 2 source and 1 "
                                 "destination strides were given"));
  REQUIRE_THROWS_MATCHES(layout::plan_copy(Shape{3}, Strides{8}, Strides{8}, 0), InvalidArgument,
                         Message("copy: itemsize must be positive, got 0"));
}

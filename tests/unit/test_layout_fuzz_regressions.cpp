// Inputs fuzz/fuzz_layout found to overflow int64 inside the layout functions (undefined
// behaviour, caught by UBSan). Each must now give a correct result or InvalidArgument; under the
// host-asan preset UBSan checks that no overflow happens on the way.
#include <catch2/catch.hpp>

#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <cstdint>
#include <limits>
#include <optional>

namespace {

using Catch::Matchers::Message;
using devmem::InvalidArgument;
using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Strides;
namespace layout = devmem::layout;

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
// 2 * kHuge fits in int64, 3 * kHuge does not: an axis of length 3 with this stride has a valid
// extent, but stride * length overflows.
constexpr std::int64_t kHuge = 3834029160419368446;

}  // namespace

TEST_CASE("layout fuzz regressions: stride * length beyond int64 on a valid layout",
          "[layout][fuzz-regression]") {
  const Layout a = layout::make_layout(Shape{2, 3}, 8, Strides{8, kHuge});
  // plan_copy compared stride * length when merging axes.
  const layout::CopyPlan plan =
      layout::plan_copy(a.shape, a.strides, layout::dense_strides(a.shape, 8, Order::C), 8);
  CHECK(plan.total_bytes() == 48);
  CHECK(plan.block_count() * plan.height == 6);
  // reshape compared the same products when merging axes: these cannot merge.
  CHECK_FALSE(layout::reshape_view(a, Shape{6}, Order::C).has_value());
  // A size-1 axis next to the huge one gets some stride, not an overflowed one.
  const std::optional<Layout> with_unit_axis = layout::reshape_view(a, Shape{2, 1, 3}, Order::C);
  REQUIRE(with_unit_axis.has_value());
  CHECK(with_unit_axis->strides[0] == 8);
  CHECK(with_unit_axis->strides[2] == kHuge);
}

TEST_CASE("layout fuzz regressions: empty arrays with huge dimensions",
          "[layout][fuzz-regression]") {
  const std::int64_t big = kInt64Max - 2;
  // make_layout accepts them (no elements, so no extent to bound); size() must not multiply the
  // huge dimensions before reaching the zero.
  const Layout empty = layout::make_layout(Shape{big, big, 0}, 8, Strides{8, 8, 8});
  CHECK(empty.size() == 0);
  CHECK(empty.byte_extent().bytes() == 0);
  // Indexing and slicing an empty array keep its offset (there is no element 0 to move to)
  // instead of computing index * stride.
  const Layout rows = layout::make_layout(Shape{0, big}, 8, Strides{8, -12});
  CHECK(layout::index(rows, 1, big - 1).offset == rows.offset);
  CHECK(layout::slice(rows, 1, devmem::Slice{big - 5, {}, 1}).offset == rows.offset);
  // Reinterpreting the huge last axis as another itemsize: checked.
  REQUIRE_THROWS_MATCHES(layout::view_as(layout::make_layout(Shape{0, big}, 8, Strides{8, 8}), 16),
                         InvalidArgument,
                         Message("view: the last axis of 9223372036854775805 items of 8 bytes "
                                 "overflows int64"));
  REQUIRE_THROWS_MATCHES(layout::view_as(layout::make_layout(Shape{0, big}, 8, Strides{8, 8}), 4),
                         InvalidArgument,
                         Message("view: the last axis of 9223372036854775805 items of 8 bytes "
                                 "overflows int64 as items of 4 bytes"));
}

TEST_CASE("layout fuzz regressions: moving element 0 of a hand-built layout",
          "[layout][fuzz-regression]") {
  // Layouts are public aggregates: one built by hand may put element 1 beyond int64.
  const Layout hand_built{Shape{3}, Strides{kInt64Max / 2 + 1}, kInt64Max / 2, 1};
  REQUIRE_THROWS_MATCHES(layout::index(hand_built, 0, 2), InvalidArgument,
                         Message("index: moving to element 2 along an axis of stride "
                                 "4611686018427387904 overflows int64 (offset "
                                 "4611686018427387903)"));
}

// The names 0.1.0's API pass deprecated (docs/migration.md) still compile and mean what their
// replacements mean: Layout::extent() and ArrayView::stride(d). This file is the one place in
// devmem that uses them; the pragma below silences their warnings here as a user would during the
// transition (devmem's own code is built with -Werror, so any other use fails the build). That a
// use warns, and that the new names do not, is checked by compile:deprecated_names and
// compile:new_names (tests/compile_fail). devmem::mpi's old enumerators: tests/mpi.
#include "layout_test_utils.hpp"

#include <devmem/array_view.hpp>
#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

// For g++ and clang alike.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

using devmem::ArrayView;
using devmem::Extent;
using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Strides;
using devmem_test::dense;

TEST_CASE("deprecated names: Layout::extent() is byte_extent()", "[layout][deprecated]") {
  const std::vector<Layout> layouts{
      dense({20, 50}),
      dense({20, 50}, 8, Order::F),
      Layout{Shape{10}, Strides{-8}, 72, 8},       // reversed
      Layout{Shape{4, 3}, Strides{0, 8}, 0, 8},    // broadcast
      Layout{Shape{0, 5}, Strides{40, 8}, 16, 8},  // empty, at an offset
      dense({}),
  };
  for (const Layout& l : layouts) {
    CAPTURE(l);
    CHECK(l.extent() == l.byte_extent());
  }
  CHECK(layouts[2].extent() == Extent{0, 80});
}

TEST_CASE("deprecated names: ArrayView::stride(d) is stride_bytes(d)", "[views][deprecated]") {
  std::vector<double> data(12);
  const std::int64_t shape[] = {3, 4};
  const std::int64_t strides[] = {-32, 8};  // rows reversed
  const ArrayView<double, 2> v(data.data() + 8, shape, strides);
  CHECK(v.stride(0) == -32);
  CHECK(v.stride(1) == 8);
  for (std::size_t d = 0; d != 2; ++d) CHECK(v.stride(d) == v.stride_bytes(d));
  const ArrayView<const double, 1> row = v.row(1);
  CHECK(row.stride(0) == row.stride_bytes(0));
  CHECK(row.stride_bytes(0) == 8);
}

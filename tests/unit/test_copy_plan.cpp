// plan_copy and copy_host_strided: hand-checked plans for the common cases (they must be as few,
// as large blocks as possible), every error message, and a brute-force comparison over thousands
// of random layouts that also checks that no destination byte outside the elements is written
// (numba#3553: Numba's copy_to_host into a strided host view overwrote the gaps).
#include "layout_test_utils.hpp"

#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

using Catch::Matchers::Message;
using devmem::InvalidArgument;
using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Strides;
using devmem::layout::CopyPlan;
using devmem::layout::plan_copy;
using devmem_test::dense;

namespace {

CopyPlan plan_for(const Layout& src, const Layout& dst) {
  return plan_copy(src.shape, src.strides, dst.strides, src.itemsize);
}

std::vector<std::pair<std::int64_t, std::int64_t>> blocks(const CopyPlan& plan) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  plan.for_each_block([&out](std::int64_t s, std::int64_t d) { out.emplace_back(s, d); });
  return out;
}

// Copies src into dst both with the plan and element by element, then compares whole buffers.
void check_copy(const Layout& src, std::int64_t src_bytes, const Layout& dst,
                std::int64_t dst_bytes, std::mt19937& rng) {
  INFO("src " << Catch::StringMaker<Layout>::convert(src));
  INFO("dst " << Catch::StringMaker<Layout>::convert(dst));
  std::vector<unsigned char> source(static_cast<std::size_t>(src_bytes));
  for (auto& b : source) b = static_cast<unsigned char>(rng());
  std::vector<unsigned char> planned(static_cast<std::size_t>(dst_bytes));
  for (auto& b : planned) b = static_cast<unsigned char>(rng());
  std::vector<unsigned char> expected = planned;

  for (const Shape& idx : devmem_test::indices_in_order(src.shape, false)) {
    std::memcpy(expected.data() + dst.offset_of(idx), source.data() + src.offset_of(idx),
                static_cast<std::size_t>(src.itemsize));
  }
  const CopyPlan plan = plan_for(src, dst);
  // Structural promises of the header.
  CHECK(plan.total_bytes() == src.nbytes());
  if (!plan.empty()) {
    CHECK((plan.height == 1 || (plan.src_pitch >= plan.width && plan.dst_pitch >= plan.width)));
    CHECK(plan.outer_shape.size() == plan.outer_src_strides.size());
    CHECK(plan.outer_shape.size() == plan.outer_dst_strides.size());
  }
  devmem::layout::copy_host_strided(plan, planned.data() + dst.offset, source.data() + src.offset);
  CHECK(planned == expected);
}

}  // namespace

TEST_CASE("plan_copy: contiguous to contiguous is one block", "[layout][copy]") {
  const CopyPlan c = plan_for(dense({2, 3, 4}), dense({2, 3, 4}));
  CHECK(c.block_count() == 1);
  CHECK(c.width == 192);
  CHECK(c.height == 1);
  CHECK(c.total_bytes() == 192);
  CHECK(c.outer_shape.empty());
  CHECK(c.src_offset == 0);
  CHECK(c.dst_offset == 0);

  const CopyPlan f = plan_for(dense({2, 3, 4}, 8, Order::F), dense({2, 3, 4}, 8, Order::F));
  CHECK(f.block_count() == 1);
  CHECK(f.width == 192);

  // Size-1 axes with arbitrary strides do not split the block.
  const CopyPlan ones = plan_copy(Shape{1, 5, 1}, Strides{7, 8, -3}, Strides{40, 8, 8}, 8);
  CHECK(ones.block_count() == 1);
  CHECK(ones.width == 40);
  // A transposed source that is dense in the destination's order (both transposed alike).
  const Layout t = devmem::layout::transpose(dense({3, 4, 5}), std::vector<int>{1, 0, 2});
  const CopyPlan tt = plan_for(t, t);
  CHECK(tt.block_count() == 1);
  CHECK(tt.width == 480);
}

TEST_CASE("plan_copy: sliced rows are one 2-D block", "[layout][copy]") {
  // (4,6)[:, :3] into a dense (4,3) array: 4 rows of 24 bytes, source pitch 48.
  const Layout src{{4, 3}, {48, 8}, 0, 8};
  const CopyPlan p = plan_for(src, dense({4, 3}));
  CHECK(p.block_count() == 1);
  CHECK(p.width == 24);
  CHECK(p.height == 4);
  CHECK(p.src_pitch == 48);
  CHECK(p.dst_pitch == 24);
  CHECK(p.outer_shape.empty());
  // And back: a dense array into rows of a wider one.
  const CopyPlan back = plan_for(dense({4, 3}), src);
  CHECK(back.block_count() == 1);
  CHECK(back.height == 4);
  CHECK(back.src_pitch == 24);
  CHECK(back.dst_pitch == 48);
  // 3-d: (2,4,6)[:, :, :3] -> dense: the two outer axes merge into the height.
  const Layout src3{{2, 4, 3}, {192, 48, 8}, 0, 8};
  const CopyPlan p3 = plan_for(src3, dense({2, 4, 3}));
  CHECK(p3.block_count() == 1);
  CHECK(p3.height == 8);
}

TEST_CASE("plan_copy: element-wise strides become 2-D blocks of single items", "[layout][copy]") {
  // C (3,4) into F (3,4): the destination's fastest axis is axis 0.
  const CopyPlan p = plan_for(dense({3, 4}), dense({3, 4}, 8, Order::F));
  CHECK(p.width == 8);
  CHECK(p.height == 3);
  CHECK(p.src_pitch == 32);
  CHECK(p.dst_pitch == 8);
  CHECK(p.outer_shape == Shape{4});
  CHECK(p.outer_src_strides == Strides{8});
  CHECK(p.outer_dst_strides == Strides{24});
  CHECK(p.block_count() == 4);
  CHECK(p.total_bytes() == 96);
  // A strided 1-d source: one block of 10 single-item rows.
  const CopyPlan s = plan_copy(Shape{10}, Strides{16}, Strides{8}, 8);
  CHECK(s.block_count() == 1);
  CHECK(s.width == 8);
  CHECK(s.height == 10);
  CHECK(s.src_pitch == 16);
}

TEST_CASE("plan_copy: reversed and broadcast axes", "[layout][copy]") {
  // Both sides reversed: flipped into one forward block starting at the last element.
  const CopyPlan r = plan_copy(Shape{10}, Strides{-8}, Strides{-8}, 8);
  CHECK(r.block_count() == 1);
  CHECK(r.width == 80);
  CHECK(r.src_offset == -72);
  CHECK(r.dst_offset == -72);
  // Only the source reversed: cannot be a row; single items, but not with a negative pitch.
  const CopyPlan r1 = plan_copy(Shape{10}, Strides{-8}, Strides{8}, 8);
  CHECK(r1.width == 8);
  CHECK(r1.height == 1);
  CHECK(r1.block_count() == 10);
  CHECK(r1.outer_src_strides == Strides{-8});
  // A broadcast source row repeated 4 times: rows of 24 bytes, the source pitch 0 is no pitch.
  const CopyPlan b = plan_copy(Shape{4, 3}, Strides{0, 8}, Strides{24, 8}, 8);
  CHECK(b.width == 24);
  CHECK(b.height == 1);
  CHECK(b.block_count() == 4);
  CHECK(b.outer_src_strides == Strides{0});
  CHECK(blocks(b) ==
        std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 0}, {0, 24}, {0, 48}, {0, 72}});
}

TEST_CASE("plan_copy: 0-d and empty arrays", "[layout][copy]") {
  const CopyPlan scalar = plan_copy(Shape{}, Strides{}, Strides{}, 16);
  CHECK(scalar.block_count() == 1);
  CHECK(scalar.width == 16);
  CHECK(scalar.height == 1);
  CHECK(scalar.total_bytes() == 16);
  CHECK(blocks(scalar).size() == 1);

  const CopyPlan empty = plan_copy(Shape{3, 0}, Strides{0, 8}, Strides{0, 8}, 8);
  CHECK(empty.empty());
  CHECK(empty.block_count() == 0);
  CHECK(empty.total_bytes() == 0);
  CHECK(blocks(empty).empty());
  // A zero destination stride does not matter when there is nothing to write.
  CHECK(plan_copy(Shape{3, 0}, Strides{8, 8}, Strides{0, 0}, 8).empty());
}

TEST_CASE("plan_copy: for_each_block visits outer axes in row-major order", "[layout][copy]") {
  // Source with gaps on every axis: each element is its own block along 2 outer axes.
  const CopyPlan p = plan_copy(Shape{2, 3, 2}, Strides{-200, 64, 0}, Strides{48, 16, 8}, 8);
  // Destination dense C; axis 2 (dst 8, src 0) cannot be a row or a pitch: height 1.
  CHECK(p.width == 8);
  CHECK(p.outer_shape == Shape{2, 3, 2});
  const auto b = blocks(p);
  REQUIRE(b.size() == 12);
  CHECK(b[0] == std::pair<std::int64_t, std::int64_t>{0, 0});
  CHECK(b[1] == std::pair<std::int64_t, std::int64_t>{0, 8});
  CHECK(b[2] == std::pair<std::int64_t, std::int64_t>{64, 16});
  CHECK(b[6] == std::pair<std::int64_t, std::int64_t>{-200, 48});
  CHECK(b[11] == std::pair<std::int64_t, std::int64_t>{-200 + 128, 88});
}

TEST_CASE("plan_copy errors", "[layout][copy][errors]") {
  REQUIRE_THROWS_MATCHES(plan_copy(Shape{2, 3}, Strides{24, 8}, Strides{8, 0}, 8), InvalidArgument,
                         Message("copy: destination has a zero stride on axis 1 of length 3 (one "
                                 "element would be written 3 times)"));
  REQUIRE_THROWS_MATCHES(plan_copy(Shape{2, 3}, Strides{24}, Strides{24, 8}, 8), InvalidArgument,
                         Message("copy: shape (2, 3) has 2 dimensions but 1 source and 2 "
                                 "destination strides were given"));
  REQUIRE_THROWS_MATCHES(plan_copy(Shape{2}, Strides{8}, Strides{}, 8), InvalidArgument,
                         Message("copy: shape (2,) has 1 dimensions but 1 source and 0 "
                                 "destination strides were given"));
  REQUIRE_THROWS_MATCHES(plan_copy(Shape{2}, Strides{8}, Strides{8}, 0), InvalidArgument,
                         Message("copy: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(plan_copy(Shape{-1}, Strides{8}, Strides{8}, 8), InvalidArgument,
                         Message("copy: negative dimension -1 in shape (-1,)"));
}

TEST_CASE("copy_host_strided matches an element-by-element copy on random layouts",
          "[layout][copy][fuzz]") {
  std::mt19937 rng(20240611);
  const std::int64_t itemsizes[] = {1, 2, 3, 4, 8, 16};
  int non_trivial = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    const Shape shape = devmem_test::random_shape(rng);
    const std::int64_t itemsize = itemsizes[devmem_test::uniform(rng, 0, 5)];
    std::int64_t src_bytes = 0;
    std::int64_t dst_bytes = 0;
    const Layout src = devmem_test::random_layout(rng, shape, itemsize, true, &src_bytes);
    const Layout dst = devmem_test::random_layout(rng, shape, itemsize, false, &dst_bytes);
    check_copy(src, src_bytes, dst, dst_bytes, rng);
    if (plan_for(src, dst).block_count() > 1) ++non_trivial;
  }
  CHECK(non_trivial > 1000);  // the generator really produces strided layouts
}

TEST_CASE("copy_host_strided between common layouts", "[layout][copy]") {
  std::mt19937 rng(7);
  const Shape shape{4, 6, 5};
  const Layout c = dense(shape);
  const Layout f = dense(shape, 8, Order::F);
  const Layout t = devmem::layout::transpose(dense({6, 4, 5}), std::vector<int>{1, 0, 2});
  // A C array of (8, 12, 5) viewed as [::2, ::2, :] and a reversed version.
  const Layout strided{shape, {960, 80, 8}, 0, 8};
  const Layout reversed{shape, {-480, -40, -8}, 480 * 3 + 40 * 5 + 8 * 4, 8};
  const std::int64_t big = 8 * 12 * 5 * 8;
  for (const Layout& s : {c, f, t, strided, reversed}) {
    for (const Layout& d : {c, f, t, strided, reversed}) {
      check_copy(s, big, d, big, rng);
    }
  }
}

// The fixed-width row paths (element sizes 1, 2, 4, 8, 16): rows of one element with the
// innermost axis reversed on one side only, and a transpose (single-element rows with a pitch),
// both directions, next to a size without a fixed path (3).
TEST_CASE("copy_host_strided: one side reversed or transposed, for each element size",
          "[layout][copy]") {
  std::mt19937 rng(11);
  for (const std::int64_t itemsize : {1, 2, 3, 4, 8, 16}) {
    const Shape shape{3, 5, 7};
    const Layout c = dense(shape, itemsize);
    const std::int64_t bytes = 3 * 5 * 7 * itemsize;
    const Layout reversed_last{
        shape, {35 * itemsize, 7 * itemsize, -itemsize}, 6 * itemsize, itemsize};
    const Layout transposed =
        devmem::layout::transpose(dense({7, 5, 3}, itemsize), std::vector<int>{2, 1, 0});
    INFO("itemsize " << itemsize);
    for (const Layout& strided : {reversed_last, transposed}) {
      check_copy(strided, bytes, c, bytes, rng);
      check_copy(c, bytes, strided, bytes, rng);
    }
  }
}

// gpu_runtime_fake_api, the strided-copy kernel's choice of its tiled path (tiled_copy_args in
// backends/gpu_runtime/strided_copy_args.hpp, review 2 N12): which copies it takes, and that its
// reordering of the axes describes the same copy (every unit from and to the same place). The
// tiled kernel itself runs in the conformance suite's transposes (test_transposes.cpp) on the GPU
// backends, HIP-CPU included; this file needs no runtime.
#include "backends/gpu_runtime/strided_copy_args.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

using devmem::gpu_runtime::for_each_unit_offset;
using devmem::gpu_runtime::StridedCopyArgs;
using devmem::gpu_runtime::tiled_copy_args;

namespace {

/// A copy of `shape` units of `unit` bytes with byte strides `src` and `dst`.
StridedCopyArgs make_args(std::int32_t unit, const std::vector<std::int64_t>& shape,
                          const std::vector<std::int64_t>& src,
                          const std::vector<std::int64_t>& dst) {
  StridedCopyArgs args;
  args.unit = unit;
  args.rank = static_cast<std::int32_t>(shape.size());
  args.count = 1;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    args.shape[k] = shape[k];
    args.src_strides[k] = src[k];
    args.dst_strides[k] = dst[k];
    args.count *= shape[k];
  }
  return args;
}

/// Every unit's (source offset, destination offset), sorted: what the copy does, whatever the
/// order of its axes.
std::vector<std::pair<std::int64_t, std::int64_t>> moves(const StridedCopyArgs& a) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for_each_unit_offset(a, [&](std::int64_t s, std::int64_t d) { out.emplace_back(s, d); });
  std::sort(out.begin(), out.end());
  return out;
}

/// Takes the tiled path with the source's unit-stride axis at rank - 2 and the destination's at
/// rank - 1, moving the same units.
void check_tiled(const StridedCopyArgs& args) {
  StridedCopyArgs tiled;
  REQUIRE(tiled_copy_args(args, tiled));
  REQUIRE(tiled.rank == args.rank);
  CHECK(tiled.count == args.count);
  CHECK(tiled.unit == args.unit);
  const int a = tiled.rank - 2;
  const int b = tiled.rank - 1;
  CHECK((tiled.src_strides[a] == args.unit || tiled.src_strides[a] == -args.unit));
  CHECK((tiled.dst_strides[b] == args.unit || tiled.dst_strides[b] == -args.unit));
  CHECK(moves(tiled) == moves(args));
}

bool takes_tiled(const StridedCopyArgs& args) {
  StridedCopyArgs tiled;
  return tiled_copy_args(args, tiled);
}

}  // namespace

TEST_CASE("gpu_runtime: transposes take the strided-copy kernel's tiled path") {
  SECTION("a 2-D transpose of 4-byte units, as kernel_args gives it") {
    // (40, 50) C floats into (50, 40) C: the destination's row axis is last.
    check_tiled(make_args(4, {50, 40}, {4, 200}, {160, 4}));
  }
  SECTION("the (0, 2, 1) permutation of a batch of 16-byte matrices") {
    check_tiled(make_args(16, {7, 20, 30}, {9600, 16, 320}, {9600, 480, 16}));
  }
  SECTION("a 4-D full transpose: the middle axes are the batch, in their order") {
    // Base (9, 5, 6, 10) C of 8-byte units, reversed into (10, 6, 5, 9) C.
    const StridedCopyArgs args =
        make_args(8, {10, 6, 5, 9}, {8, 80, 480, 2400}, {2160, 360, 72, 8});
    check_tiled(args);
    StridedCopyArgs tiled;
    REQUIRE(tiled_copy_args(args, tiled));
    CHECK(tiled.shape[0] == 6);
    CHECK(tiled.shape[1] == 5);
    CHECK(tiled.shape[2] == 10);  // the source's rows
    CHECK(tiled.shape[3] == 9);   // the destination's rows
  }
  SECTION("reversed axes on either side") {
    check_tiled(make_args(2, {33, 65}, {-2, 66}, {130, -2}));
    check_tiled(make_args(1, {3, 8, 8}, {-64, 1, 8}, {64, 8, 1}));
  }
}

TEST_CASE("gpu_runtime: other copies keep the strided-copy kernel's gather") {
  SECTION("contiguous along the same axis on both sides") {
    CHECK_FALSE(takes_tiled(make_args(4, {1000}, {4}, {4})));
    CHECK_FALSE(takes_tiled(make_args(4, {30, 40}, {320, 4}, {160, 4})));
  }
  SECTION("an axis shorter than kTiledCopyMinExtent") {
    CHECK_FALSE(takes_tiled(make_args(4, {100, 7}, {4, 400}, {28, 4})));
    CHECK_FALSE(takes_tiled(make_args(4, {7, 100}, {4, 28}, {400, 4})));
    CHECK(takes_tiled(make_args(4, {8, 8}, {4, 32}, {32, 4})));
  }
  SECTION("a source without a unit-stride axis, or broadcast along the destination's rows") {
    CHECK_FALSE(takes_tiled(make_args(4, {35, 40}, {8, 280}, {160, 4})));
    CHECK_FALSE(takes_tiled(make_args(4, {35, 40}, {4, 0}, {160, 4})));
  }
}

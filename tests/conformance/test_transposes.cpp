// Transposes: copies whose destination runs along another axis than the source (2-D transposes,
// the (0, 2, 1) permutation of a batch of matrices, full reversals of the axes), combined with
// reversed axes and offsets, for every unit size (1, 2, 4, 8 and 16 bytes), device to device,
// device to host and host to device. On the GPU backends these take the strided-copy kernel's
// tiled path when both swapped axes have at least 8 elements (tiled_copy_args in
// backends/gpu_runtime/strided_copy_args.hpp), else its gather; edges of partial tiles, batches and
// more batches than a grid has blocks are covered (HIP-CPU's grids are smaller, 2 x 2 x 16 blocks,
// so there the copies of more than 2 x 2 tiles or 16 batches run the kernel's loops past the grid
// too). Sizes stay small: HIP-CPU runs every block of the tiled kernel as 256 fibers. The expected
// values come from the test's own index arithmetic, not from devmem's layout code.
#include "support.hpp"

#include <algorithm>
#include <complex>
#include <optional>
#include <string>

using namespace conformance;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

/// A value for element i of a base array, different for nearby i (uint8 repeats only after 256
/// elements, and then shifted).
template <class T>
T pattern(int64_t i) {
  if constexpr (std::is_same_v<T, std::complex<double>>) {
    return {static_cast<double>(i), -0.25 - static_cast<double>(i)};
  } else if constexpr (std::is_same_v<T, std::uint8_t>) {
    return static_cast<std::uint8_t>(i * 131 + (i >> 8));
  } else if constexpr (std::is_same_v<T, std::int16_t>) {
    return static_cast<std::int16_t>(i ^ 0x5a5a);
  } else {
    return static_cast<T>(i) + static_cast<T>(0.5);
  }
}

/// A slice of one axis of the base array: Python's [start:stop:step]. `start` is explicit, so that
/// the test maps indices without devmem's slice rules.
struct AxisSlice {
  int64_t start = 0;
  std::optional<int64_t> stop;
  int64_t step = 1;
};

/// A view of a base array: each base axis sliced, then the axes permuted (view axis k is base
/// axis perm[k]).
struct ViewCase {
  const char* name;
  Shape base;
  std::vector<int> perm;
  std::vector<AxisSlice> slices;  // per base axis; empty: none sliced
};

DeviceArray make_view(const DeviceArray& base, const ViewCase& c) {
  DeviceArray v = base;
  for (std::size_t axis = 0; axis < c.slices.size(); ++axis) {
    const AxisSlice& s = c.slices[axis];
    v = v.slice(static_cast<int>(axis), s.start, s.stop, s.step);
  }
  return v.transpose(std::span<const int>(c.perm));
}

/// The C-order position in the base array of every element of the view, in the view's C order.
std::vector<int64_t> base_positions(const ViewCase& c, const Shape& view_shape) {
  std::vector<int64_t> out;
  out.reserve(static_cast<std::size_t>(count_of(view_shape)));
  std::vector<int64_t> base_idx(c.base.size(), 0);
  for_each_index(view_shape, [&](std::span<const int64_t> idx) {
    for (std::size_t k = 0; k < idx.size(); ++k) {
      const auto axis = static_cast<std::size_t>(c.perm[k]);
      const AxisSlice s = axis < c.slices.size() ? c.slices[axis] : AxisSlice{};
      base_idx[axis] = s.start + idx[k] * s.step;
    }
    int64_t position = 0;
    for (std::size_t axis = 0; axis < c.base.size(); ++axis) {
      position = position * c.base[axis] + base_idx[axis];
    }
    out.push_back(position);
  });
  return out;
}

/// "equal", or where `got` first differs from `want`: Catch would print both vectors whole,
/// millions of elements for the largest case.
template <class T>
std::string compare(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return "sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size());
  }
  const auto g = std::mismatch(got.begin(), got.end(), want.begin()).first;
  if (g == got.end()) return "equal";
  return "element " + std::to_string(g - got.begin()) + " of " + std::to_string(got.size()) +
         " differs";
}

/// Whether check_case also copies between host and device (on the GPU backends mostly the same
/// kernel launch next to a contiguous copy), or only device to device both ways.
enum class Directions { All, DeviceToDevice };

template <class T>
void check_case(const ViewCase& c, Directions directions = Directions::All) {
  INFO(c.name << ", " << sizeof(T) << "-byte elements");
  std::vector<T> values(static_cast<std::size_t>(count_of(c.base)));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = pattern<T>(static_cast<int64_t>(i));
  const DeviceArray base = devmem::device_array<T>(c.base);
  base.copy_to_device(HostArray::view(std::span<T>(values), c.base));
  const DeviceArray view = make_view(base, c);
  const std::vector<int64_t> positions = base_positions(c, view.shape());
  REQUIRE(static_cast<int64_t>(positions.size()) == count_of(view.shape()));
  std::vector<T> expected;
  expected.reserve(positions.size());
  for (const int64_t p : positions) expected.push_back(values[static_cast<std::size_t>(p)]);
  // What a copy into the same view of a zeroed array leaves: the view's elements, zeros elsewhere.
  std::vector<T> scattered(values.size(), T{});
  for (const int64_t p : positions) {
    scattered[static_cast<std::size_t>(p)] = values[static_cast<std::size_t>(p)];
  }

  // Device to device: the view into a new C array (the destination dense, the source transposed).
  const DeviceArray dense = devmem::device_array<T>(view.shape(), Order::C);
  REQUIRE(dense.is_c_contiguous());
  dense.copy_to_device(view);
  CHECK(compare(dense.to_vector<T>(), expected) == "equal");
  // Device to device the other way: a dense source into the view of another array.
  const DeviceArray other = devmem::device_array<T>(c.base);
  other.memset(0);
  make_view(other, c).copy_to_device(dense);
  CHECK(compare(other.to_vector<T>(), scattered) == "equal");
  if (directions == Directions::DeviceToDevice) return;
  // Device to host: the view into a C host array (copy_to_host() would keep the view's layout).
  const HostArray host(view.shape(), devmem::dtype_of<T>(), Order::C);
  view.copy_to_host(host);
  CHECK(compare(host.to_vector<T>(), expected) == "equal");
  // Host to device: the dense host copy into the view of a third array.
  const DeviceArray third = devmem::device_array<T>(c.base);
  third.memset(0);
  make_view(third, c).copy_to_device(host);
  CHECK(compare(third.to_vector<T>(), scattered) == "equal");
}

template <class T>
void check_cases(const std::vector<ViewCase>& cases) {
  for (const ViewCase& c : cases) check_case<T>(c);
}

/// Every unit size: the kernel copies in units of the widest power of two up to 16 bytes that
/// divides the addresses and strides, here the element size.
void check_every_unit(const std::vector<ViewCase>& cases) {
  check_cases<std::uint8_t>(cases);
  check_cases<std::int16_t>(cases);
  check_cases<float>(cases);
  check_cases<double>(cases);
  check_cases<std::complex<double>>(cases);
}

}  // namespace

TEST_CASE("transposes: 2-d transposes, edges of partial tiles", "[transfers][views][transposes]") {
  check_every_unit({
      {"(1, 1)", Shape{1, 1}, {1, 0}, {}},
      {"(8, 9): both axes just long enough for the tiled path", Shape{8, 9}, {1, 0}, {}},
      {"(31, 33)", Shape{31, 33}, {1, 0}, {}},
      {"(33, 65)", Shape{33, 65}, {1, 0}, {}},
      {"(64, 32): whole tiles", Shape{64, 32}, {1, 0}, {}},
      {"(70, 100): 3 x 4 tiles", Shape{70, 100}, {1, 0}, {}},
      {"(100, 7): one axis too short to tile", Shape{100, 7}, {1, 0}, {}},
      {"(7, 100)", Shape{7, 100}, {1, 0}, {}},
  });
}

TEST_CASE("transposes: reversed axes and offsets", "[transfers][views][transposes]") {
  check_every_unit({
      {"(40, 70)[::-1].T", Shape{40, 70}, {1, 0}, {{39, std::nullopt, -1}}},
      {"(40, 70)[:, ::-1].T",
       Shape{40, 70},
       {1, 0},
       {{0, std::nullopt, 1}, {69, std::nullopt, -1}}},
      {"(40, 70)[::-1, ::-1].T",
       Shape{40, 70},
       {1, 0},
       {{39, std::nullopt, -1}, {69, std::nullopt, -1}}},
      {"(48, 66)[3:45, 1:64].T", Shape{48, 66}, {1, 0}, {{3, 45, 1}, {1, 64, 1}}},
      {"(48, 66)[40:2:-1, 5:].T", Shape{48, 66}, {1, 0}, {{40, 2, -1}, {5, std::nullopt, 1}}},
      {"(40, 70)[:, ::2].T: no unit-stride source axis",
       Shape{40, 70},
       {1, 0},
       {{0, std::nullopt, 1}, {0, std::nullopt, 2}}},
  });
}

TEST_CASE("transposes: batches of matrices and full reversals", "[transfers][views][transposes]") {
  check_every_unit({
      {"(3, 33, 40).transpose(0, 2, 1)", Shape{3, 33, 40}, {0, 2, 1}, {}},
      {"(40, 9, 8).transpose(0, 2, 1): 40 small matrices", Shape{40, 9, 8}, {0, 2, 1}, {}},
      {"(5, 20, 17)[::-1].transpose(0, 2, 1)",
       Shape{5, 20, 17},
       {0, 2, 1},
       {{4, std::nullopt, -1}}},
      {"(20, 3, 17).transpose(): the batch axis in the middle", Shape{20, 3, 17}, {2, 1, 0}, {}},
      {"(9, 5, 6, 10).transpose()", Shape{9, 5, 6, 10}, {3, 2, 1, 0}, {}},
      {"(10, 3, 4, 12)[1:, :, ::-1].transpose() with a reversed batch axis",
       Shape{10, 3, 4, 12},
       {3, 2, 1, 0},
       {{1, std::nullopt, 1}, {0, std::nullopt, 1}, {3, std::nullopt, -1}}},
      {"(3, 4, 5, 6).transpose(): axes too short to tile", Shape{3, 4, 5, 6}, {3, 2, 1, 0}, {}},
      {"(6, 12, 9, 16).transpose(2, 0, 3, 1)", Shape{6, 12, 9, 16}, {2, 0, 3, 1}, {}},
  });
}

TEST_CASE("transposes: more batches than a grid dimension has blocks",
          "[transfers][views][transposes]") {
  // 65,539 matrices of 8 x 8 bytes: a GPU's grid for the tiled kernel has at most 65,535 blocks
  // along the batch, so some blocks take two batches. Device to device only: on HIP-CPU each copy
  // is 65,539 tiles of 256 fibers, about a second.
  check_case<std::uint8_t>({"(65539, 8, 8).transpose(0, 2, 1)", Shape{65539, 8, 8}, {0, 2, 1}, {}},
                           Directions::DeviceToDevice);
}

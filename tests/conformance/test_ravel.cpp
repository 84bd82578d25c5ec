// ravel gives NumPy's result (docs/arrays-and-copies.md#reshape-and-ravel): always a C-contiguous
// 1-d array with stride itemsize, a view exactly when NumPy's ravel is one (the elements already
// lie contiguously in the requested order), otherwise a copy holding the elements in NumPy's order,
// for DeviceArray and HostArray.
// The expected values and view flags were computed by NumPy 1.24 (np.lib.stride_tricks.as_strided
// over np.arange(n), then a.ravel(order) and np.shares_memory(a, a.ravel(order)); for the empty
// arrays, whether the result has a base) and are written here literally.
#include "core/array_access.hpp"  // white-box: arrays over crafted layouts
#include "support.hpp"

#include <array>

using namespace conformance;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::Layout;

namespace {

struct RavelExpectation {
  std::vector<double> values;
  bool view;
};

struct RavelCase {
  const char* name;
  int64_t buffer;  // elements 0, 1, ..., buffer - 1
  Shape shape;
  Strides strides;                         // in elements
  int64_t offset;                          // of element 0, in elements
  std::vector<RavelExpectation> expected;  // orders C, F, A, K
};

constexpr std::array<Order, 4> kOrders{Order::C, Order::F, Order::A, Order::K};

// clang-format off
const std::vector<RavelCase> kRavelCases{
  {"C-contiguous 2x3", 6, {2, 3}, {3, 1}, 0,
   {{{0, 1, 2, 3, 4, 5}, true},
    {{0, 3, 1, 4, 2, 5}, false},
    {{0, 1, 2, 3, 4, 5}, true},
    {{0, 1, 2, 3, 4, 5}, true}}},
  {"F-contiguous 2x3", 6, {2, 3}, {1, 2}, 0,
   {{{0, 2, 4, 1, 3, 5}, false},
    {{0, 1, 2, 3, 4, 5}, true},
    {{0, 1, 2, 3, 4, 5}, true},
    {{0, 1, 2, 3, 4, 5}, true}}},
  {"reversed 1-d", 6, {6}, {-1}, 5,
   {{{5, 4, 3, 2, 1, 0}, false},
    {{5, 4, 3, 2, 1, 0}, false},
    {{5, 4, 3, 2, 1, 0}, false},
    {{5, 4, 3, 2, 1, 0}, false}}},
  {"reversed rows", 12, {3, 4}, {-4, 1}, 8,
   {{{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3}, false},
    {{8, 4, 0, 9, 5, 1, 10, 6, 2, 11, 7, 3}, false},
    {{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3}, false},
    {{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3}, false}}},
  {"reversed columns", 12, {3, 4}, {4, -1}, 3,
   {{{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}, false},
    {{3, 7, 11, 2, 6, 10, 1, 5, 9, 0, 4, 8}, false},
    {{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}, false},
    {{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}, false}}},
  {"reversed both axes", 12, {3, 4}, {-4, -1}, 11,
   {{{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, false},
    {{11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0}, false},
    {{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, false},
    {{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, false}}},
  {"1-d every other element", 12, {6}, {2}, 0,
   {{{0, 2, 4, 6, 8, 10}, false},
    {{0, 2, 4, 6, 8, 10}, false},
    {{0, 2, 4, 6, 8, 10}, false},
    {{0, 2, 4, 6, 8, 10}, false}}},
  {"padded: every other column", 12, {2, 3}, {6, 2}, 0,
   {{{0, 2, 4, 6, 8, 10}, false},
    {{0, 6, 2, 8, 4, 10}, false},
    {{0, 2, 4, 6, 8, 10}, false},
    {{0, 2, 4, 6, 8, 10}, false}}},
  {"padded rows", 12, {3, 3}, {4, 1}, 0,
   {{{0, 1, 2, 4, 5, 6, 8, 9, 10}, false},
    {{0, 4, 8, 1, 5, 9, 2, 6, 10}, false},
    {{0, 1, 2, 4, 5, 6, 8, 9, 10}, false},
    {{0, 1, 2, 4, 5, 6, 8, 9, 10}, false}}},
  {"padded F columns", 12, {3, 2}, {1, 4}, 0,
   {{{0, 4, 1, 5, 2, 6}, false},
    {{0, 1, 2, 4, 5, 6}, false},
    {{0, 4, 1, 5, 2, 6}, false},
    {{0, 1, 2, 4, 5, 6}, false}}},
  {"transpose of 3-d C (1,0,2)", 24, {3, 2, 4}, {4, 12, 1}, 0,
   {{{0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23}, false},
    {{0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23}, false},
    {{0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23}, false},
    {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}, true}}},
  {"transpose of 3-d C (2,0,1)", 24, {4, 2, 3}, {1, 12, 4}, 0,
   {{{0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23}, false},
    {{0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23}, false},
    {{0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23}, false},
    {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}, true}}},
  {"transpose (2,0,1), first axis reversed", 24, {4, 2, 3}, {-1, 12, 4}, 3,
   {{{3, 7, 11, 15, 19, 23, 2, 6, 10, 14, 18, 22, 1, 5, 9, 13, 17, 21, 0, 4, 8, 12, 16, 20}, false},
    {{3, 2, 1, 0, 15, 14, 13, 12, 7, 6, 5, 4, 19, 18, 17, 16, 11, 10, 9, 8, 23, 22, 21, 20}, false},
    {{3, 7, 11, 15, 19, 23, 2, 6, 10, 14, 18, 22, 1, 5, 9, 13, 17, 21, 0, 4, 8, 12, 16, 20}, false},
    {{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 19, 18, 17, 16, 23, 22, 21, 20}, false}}},
  {"broadcast rows", 3, {2, 3}, {0, 1}, 0,
   {{{0, 1, 2, 0, 1, 2}, false},
    {{0, 0, 1, 1, 2, 2}, false},
    {{0, 1, 2, 0, 1, 2}, false},
    {{0, 1, 2, 0, 1, 2}, false}}},
  {"broadcast columns", 3, {3, 2}, {1, 0}, 0,
   {{{0, 0, 1, 1, 2, 2}, false},
    {{0, 1, 2, 0, 1, 2}, false},
    {{0, 0, 1, 1, 2, 2}, false},
    {{0, 0, 1, 1, 2, 2}, false}}},
  {"broadcast middle axis", 6, {2, 3, 3}, {3, 0, 1}, 0,
   {{{0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5}, false},
    {{0, 3, 0, 3, 0, 3, 1, 4, 1, 4, 1, 4, 2, 5, 2, 5, 2, 5}, false},
    {{0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5}, false},
    {{0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 3, 4, 5}, false}}},
  {"broadcast outer axis of an F array", 6, {3, 2, 3}, {0, 1, 2}, 0,
   {{{0, 2, 4, 1, 3, 5, 0, 2, 4, 1, 3, 5, 0, 2, 4, 1, 3, 5}, false},
    {{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5}, false},
    {{0, 2, 4, 1, 3, 5, 0, 2, 4, 1, 3, 5, 0, 2, 4, 1, 3, 5}, false},
    {{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, false}}},
  {"broadcast rows, reversed row", 3, {2, 3}, {0, -1}, 2,
   {{{2, 1, 0, 2, 1, 0}, false},
    {{2, 2, 1, 1, 0, 0}, false},
    {{2, 1, 0, 2, 1, 0}, false},
    {{2, 1, 0, 2, 1, 0}, false}}},
  {"0-d", 6, {}, {}, 4,
   {{{4}, true},
    {{4}, true},
    {{4}, true},
    {{4}, true}}},
  {"empty (0, 3)", 6, {0, 3}, {3, 1}, 0,
   {{{}, true},
    {{}, true},
    {{}, true},
    {{}, true}}},
  {"empty (2, 0) strided", 6, {2, 0}, {1, 2}, 0,
   {{{}, true},
    {{}, true},
    {{}, true},
    {{}, true}}},
  {"size-1 axes, contiguous", 8, {1, 4, 1, 2}, {5, 2, 7, 1}, 0,
   {{{0, 1, 2, 3, 4, 5, 6, 7}, true},
    {{0, 2, 4, 6, 1, 3, 5, 7}, false},
    {{0, 1, 2, 3, 4, 5, 6, 7}, true},
    {{0, 1, 2, 3, 4, 5, 6, 7}, true}}},
  {"size-1 axes, strided", 16, {1, 4, 1, 2}, {5, 4, 7, 1}, 0,
   {{{0, 1, 4, 5, 8, 9, 12, 13}, false},
    {{0, 4, 8, 12, 1, 5, 9, 13}, false},
    {{0, 1, 4, 5, 8, 9, 12, 13}, false},
    {{0, 1, 4, 5, 8, 9, 12, 13}, false}}},
  {"size-1 1-d with a large stride", 5, {1}, {4}, 2,
   {{{2}, true},
    {{2}, true},
    {{2}, true},
    {{2}, true}}},
  {"size-1 axes beside a broadcast axis", 3, {1, 2, 3}, {9, 0, 1}, 0,
   {{{0, 1, 2, 0, 1, 2}, false},
    {{0, 0, 1, 1, 2, 2}, false},
    {{0, 1, 2, 0, 1, 2}, false},
    {{0, 1, 2, 0, 1, 2}, false}}},

};
// clang-format on

Layout case_layout(const RavelCase& c) {
  Strides bytes;
  for (const int64_t s : c.strides) bytes.push_back(s * 8);
  return Layout{c.shape, bytes, c.offset * 8, 8};
}

}  // namespace

TEST_CASE("ravel: NumPy's values, contiguity and view-or-copy for every layout and order",
          "[views][ravel]") {
  for (const RavelCase& c : kRavelCases) {
    for (std::size_t k = 0; k < kOrders.size(); ++k) {
      const Order order = kOrders[k];
      const RavelExpectation& want = c.expected[k];
      INFO(c.name << ", order " << static_cast<char>(order));
      const DeviceArray base = iota_device(Shape{c.buffer});
      const DeviceArray a = devmem::detail::ArrayAccess::make(
          devmem::detail::ArrayAccess::memory(base), case_layout(c), f8(), base.stream());
      const DeviceArray r = a.ravel(order);
      CHECK(r.shape() == Shape{static_cast<int64_t>(want.values.size())});
      CHECK(r.strides() == Strides{8});
      CHECK(r.is_c_contiguous());
      CHECK(r.to_vector<double>() == want.values);
      if (want.values.empty()) continue;
      CHECK((r.data() == a.data()) == want.view);
      // Element 0 of every order is a's element (0, ..., 0): a write through a view shows in a.
      r.set_item(-1.0, 0);
      CHECK((base.item<double>(c.offset) == -1.0) == want.view);
    }
  }
}

TEST_CASE(
    "HostArray::ravel: NumPy's values, contiguity and view-or-copy for every layout and "
    "order",
    "[host-memory][ravel]") {
  for (const RavelCase& c : kRavelCases) {
    for (std::size_t k = 0; k < kOrders.size(); ++k) {
      const Order order = kOrders[k];
      const RavelExpectation& want = c.expected[k];
      INFO(c.name << ", order " << static_cast<char>(order));
      const HostArray base = iota_host(Shape{c.buffer});
      const HostArray a = devmem::detail::ArrayAccess::make(
          devmem::detail::ArrayAccess::memory(base), case_layout(c), f8());
      const HostArray r = a.ravel(order);
      CHECK(r.shape() == Shape{static_cast<int64_t>(want.values.size())});
      CHECK(r.strides() == Strides{8});
      CHECK(r.is_c_contiguous());
      CHECK(r.to_vector<double>() == want.values);
      if (want.values.empty()) continue;
      CHECK((r.data() == a.data()) == want.view);
      r.at<double>(0) = -1.0;
      CHECK((base.at<double>(c.offset) == -1.0) == want.view);
    }
  }
}

TEST_CASE("ravel of a padded array is a contiguous copy, not a strided view", "[views][ravel]") {
  SECTION("device") {
    const DeviceArray a = iota_device(Shape{2, 6});
    const DeviceArray r = a.slice(1, 0, std::nullopt, 2).ravel();
    CHECK(r.strides() == Strides{8});
    CHECK(r.is_c_contiguous());
    CHECK(r.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10});
    r.set_item(-1.0, 1);
    CHECK(a.item<double>(0, 2) == 2.0);  // a copy: a is unchanged
  }
  SECTION("host") {
    const HostArray a = iota_host(Shape{2, 6});
    const HostArray r = a.slice(1, 0, std::nullopt, 2).ravel();
    CHECK(r.strides() == Strides{8});
    CHECK(r.is_c_contiguous());
    CHECK(r.to_vector<double>() == std::vector<double>{0, 2, 4, 6, 8, 10});
    r.at<double>(1) = -1.0;
    CHECK(a.at<double>(0, 2) == 2.0);
  }
}

TEST_CASE("ravel(K) of a broadcast array keeps the broadcast axis in place", "[views][ravel]") {
  // NumPy: np.broadcast_to(np.arange(3.), (2, 3)).ravel('K') == [0, 1, 2, 0, 1, 2].
  SECTION("device") {
    const DeviceArray row = iota_device(Shape{3});
    const DeviceArray b = devmem::detail::ArrayAccess::make(
        devmem::detail::ArrayAccess::memory(row),
        devmem::layout::broadcast_to(row.layout(), Shape{2, 3}), f8(), row.stream());
    REQUIRE(b.strides() == Strides{0, 8});
    const DeviceArray r = b.ravel(Order::K);
    CHECK(r.strides() == Strides{8});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 1, 2, 0, 1, 2});
  }
  SECTION("host") {
    const HostArray row = iota_host(Shape{3});
    const HostArray b = devmem::detail::ArrayAccess::make(
        devmem::detail::ArrayAccess::memory(row),
        devmem::layout::broadcast_to(row.layout(), Shape{2, 3}), f8());
    REQUIRE(b.strides() == Strides{0, 8});
    const HostArray r = b.ravel(Order::K);
    CHECK(r.strides() == Strides{8});
    CHECK(r.to_vector<double>() == std::vector<double>{0, 1, 2, 0, 1, 2});
  }
}

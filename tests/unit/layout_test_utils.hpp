// Helpers shared by the layout unit tests: short constructors for layouts, Catch2 printing of
// layouts, and brute-force references that enumerate every element of a layout.
#pragma once

#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace devmem_test {

using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Strides;

/// A fresh dense allocation layout (offset 0) in C or F order.
inline Layout dense(const Shape& shape, std::int64_t itemsize = 8, Order order = Order::C) {
  return devmem::layout::make_layout(shape, itemsize, {}, order);
}

/// Every multi-index of `shape`, in C order (last index fastest) or F order (first fastest).
inline std::vector<Shape> indices_in_order(const Shape& shape, bool f_order) {
  std::vector<Shape> out;
  std::int64_t total = 1;
  for (const std::int64_t d : shape) total *= d;
  if (total == 0) return out;
  Shape idx(shape.size(), 0);
  for (std::int64_t n = 0; n < total; ++n) {
    out.push_back(idx);
    for (std::size_t i = 0; i < shape.size(); ++i) {
      const std::size_t k = f_order ? i : shape.size() - 1 - i;
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
    }
  }
  return out;
}

/// Byte offsets of all elements of `l`, visited in C or F index order.
inline std::vector<std::int64_t> addresses(const Layout& l, bool f_order) {
  std::vector<std::int64_t> out;
  for (const Shape& idx : indices_in_order(l.shape, f_order)) out.push_back(l.offset_of(idx));
  return out;
}

/// Uniform integer in [lo, hi].
inline std::int64_t uniform(std::mt19937& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

/// A random shape of ndim 0..max_ndim with dimensions 0..max_dim (zeros are made rarer so most
/// arrays have elements).
inline Shape random_shape(std::mt19937& rng, int max_ndim = 4, std::int64_t max_dim = 4) {
  Shape shape(static_cast<std::size_t>(uniform(rng, 0, max_ndim)));
  for (std::int64_t& d : shape) d = uniform(rng, 0, 5) == 0 ? 0 : uniform(rng, 1, max_dim);
  return shape;
}

/// A layout of `shape` the way real arrays get one: a view into a dense parent buffer whose axes
/// are in a random memory order (C, F, transposed), possibly padded, then sliced with steps of
/// either sign and, if allowed, broadcast (stride 0) on some axes. Element addresses lie inside
/// [0, *buffer_bytes).
inline Layout random_layout(std::mt19937& rng, const Shape& shape, std::int64_t itemsize,
                            bool allow_broadcast, std::int64_t* buffer_bytes) {
  const std::size_t n = shape.size();
  Shape parent(n);
  Strides step(n);
  for (std::size_t k = 0; k < n; ++k) {
    step[k] = uniform(rng, 1, 3) * (uniform(rng, 0, 2) == 0 ? -1 : 1);
    const std::int64_t need = shape[k] == 0 ? 0 : (shape[k] - 1) * std::abs(step[k]) + 1;
    parent[k] = std::max<std::int64_t>(need, 1) + uniform(rng, 0, 2) * (uniform(rng, 0, 1));
  }
  std::vector<std::size_t> perm(n);  // memory order of the parent, outermost first
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  Strides parent_strides(n);
  // Sometimes leave a gap after each element, so that copies must not touch the bytes between.
  std::int64_t stride = itemsize * uniform(rng, 1, 2);
  for (auto it = perm.rbegin(); it != perm.rend(); ++it) {
    parent_strides[*it] = stride;
    stride *= parent[*it];
  }
  *buffer_bytes = stride + itemsize;  // generous: covers the padding of the innermost axis
  Layout l{shape, Strides(n), 0, itemsize};
  for (std::size_t k = 0; k < n; ++k) {
    const std::int64_t used = shape[k] == 0 ? 0 : (shape[k] - 1) * std::abs(step[k]);
    // First selected parent index: the slice must fit inside the parent axis.
    const std::int64_t first =
        step[k] > 0 ? uniform(rng, 0, parent[k] - 1 - used) : uniform(rng, used, parent[k] - 1);
    l.offset += first * parent_strides[k];
    l.strides[k] = parent_strides[k] * step[k];
    if (allow_broadcast && uniform(rng, 0, 3) == 0) l.strides[k] = 0;
  }
  return l;
}

}  // namespace devmem_test

namespace Catch {
template <>
struct StringMaker<devmem::Layout> {
  static std::string convert(const devmem::Layout& l) {
    return "Layout{shape " + devmem::layout::format_tuple(l.shape) + ", strides " +
           devmem::layout::format_tuple(l.strides) + ", offset " + std::to_string(l.offset) +
           ", itemsize " + std::to_string(l.itemsize) + "}";
  }
};
}  // namespace Catch

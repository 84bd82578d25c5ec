// Fuzz-style property tests of the layout math with fixed seeds: results are checked against
// brute-force references that enumerate every element address, so they hold for any layout the
// generator produces (C, F, transposed, padded, sliced with negative steps, broadcast).
#include "layout_test_utils.hpp"

#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Slice;
using devmem::Strides;
using devmem_test::addresses;
using devmem_test::indices_in_order;
using devmem_test::uniform;
namespace layout = devmem::layout;

namespace {

std::string show(const Layout& l) {
  return Catch::StringMaker<Layout>::convert(l);
}

// A random shape with `size` elements (size > 0) in 0..4 dimensions, spreading the prime factors
// of size over the axes and sprinkling size-1 axes; sometimes one dimension becomes -1.
Shape random_shape_of_size(std::mt19937& rng, std::int64_t size) {
  std::vector<std::int64_t> primes;
  for (std::int64_t p = 2, rest = size; rest > 1;) {
    if (rest % p == 0) {
      primes.push_back(p);
      rest /= p;
    } else {
      ++p;
    }
  }
  const auto ndim = std::max<std::int64_t>(uniform(rng, 0, 4), primes.empty() ? 0 : 1);
  Shape shape(static_cast<std::size_t>(ndim), 1);
  for (const std::int64_t p : primes)
    shape[static_cast<std::size_t>(uniform(rng, 0, ndim - 1))] *= p;
  return shape;
}

// Strides that give `shape` exactly the address sequence `addr` (in C or F index order), when
// such strides exist: the brute-force definition of "a reshape can be a view".
bool affine_view_exists(const Shape& shape, const std::vector<std::int64_t>& addr, bool f_order) {
  const std::vector<Shape> idx = indices_in_order(shape, f_order);
  if (idx.empty()) return true;
  Strides strides(shape.size(), 0);
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] < 2) continue;
    Shape unit(shape.size(), 0);
    unit[k] = 1;
    const auto pos = std::find(idx.begin(), idx.end(), unit) - idx.begin();
    strides[k] = addr[static_cast<std::size_t>(pos)] - addr[0];
  }
  const Layout candidate{shape, strides, addr[0], 1};
  for (std::size_t n = 0; n < idx.size(); ++n) {
    if (candidate.offset_of(idx[n]) != addr[n]) return false;
  }
  return true;
}

// range(n)[start:stop:step] by the definition of Python list slicing, as a list of indices.
std::vector<std::int64_t> python_slice(std::int64_t n, std::optional<std::int64_t> start,
                                       std::optional<std::int64_t> stop, std::int64_t step) {
  std::vector<std::int64_t> out;
  if (step > 0) {
    std::int64_t b = start.value_or(0);
    std::int64_t e = stop.value_or(n);
    if (b < 0) b = std::max<std::int64_t>(b + n, 0);
    if (e < 0) e = std::max<std::int64_t>(e + n, 0);
    b = std::min(b, n);
    e = std::min(e, n);
    for (std::int64_t i = b; i < e; i += step) out.push_back(i);
  } else {
    std::int64_t b = start.value_or(n - 1);
    std::int64_t e = stop.value_or(-1 - n);  // "to the beginning", below any real index
    if (b < 0) b = std::max<std::int64_t>(b + n, -1);
    if (e < 0) e = std::max<std::int64_t>(e + n, -1);
    b = std::min(b, n - 1);
    e = std::min(e, n - 1);
    for (std::int64_t i = b; i > e; i += step) out.push_back(i);
  }
  return out;
}

}  // namespace

TEST_CASE("reshape_view returns exactly the views that preserve the element order",
          "[layout][reshape][fuzz]") {
  std::mt19937 rng(1234);
  int views = 0;
  int copies = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    const Shape shape = devmem_test::random_shape(rng);
    std::int64_t bytes = 0;
    const Layout src = devmem_test::random_layout(rng, shape, 8, true, &bytes);
    const std::int64_t size = src.size();
    Shape target = size == 0 ? Shape{0, uniform(rng, 1, 3)} : random_shape_of_size(rng, size);
    if (size == 0) std::shuffle(target.begin(), target.end(), rng);
    if (!target.empty() && uniform(rng, 0, 3) == 0) {
      const auto last = static_cast<std::int64_t>(target.size()) - 1;
      target[static_cast<std::size_t>(uniform(rng, 0, last))] = -1;
    }
    const Order order = std::vector<Order>{Order::C, Order::F,
                                           Order::A}[static_cast<std::size_t>(uniform(rng, 0, 2))];
    INFO("source " << show(src) << " -> " << layout::format_tuple(target) << " order "
                   << static_cast<char>(order));
    std::optional<Layout> view;
    try {
      view = layout::reshape_view(src, target, order);
    } catch (const devmem::InvalidArgument& e) {
      // Only a -1 next to a 0 cannot be inferred.
      INFO(e.what());
      CHECK(size == 0);
      continue;
    }
    const bool f = order == Order::F || (order == Order::A && layout::order_like(src) == Order::F);
    const Shape resolved = layout::resolve_reshape(size, target);
    const std::vector<std::int64_t> expected = addresses(src, f);
    if (view) {
      ++views;
      INFO("view " << show(*view));
      CHECK(view->shape == resolved);
      CHECK(view->itemsize == src.itemsize);
      CHECK(addresses(*view, f) == expected);
      if (size > 0) CHECK(view->byte_extent() == src.byte_extent());
    } else {
      ++copies;
      CHECK_FALSE(affine_view_exists(resolved, expected, f));
    }
  }
  CHECK(views > 1000);
  CHECK(copies > 1000);
}

TEST_CASE("ravel_view agrees with the element order", "[layout][ravel][fuzz]") {
  std::mt19937 rng(99);
  int views = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const Shape shape = devmem_test::random_shape(rng);
    std::int64_t bytes = 0;
    const Layout src = devmem_test::random_layout(rng, shape, 4, uniform(rng, 0, 1) == 1, &bytes);
    INFO("source " << show(src));
    for (const Order order : {Order::C, Order::F, Order::A, Order::K}) {
      INFO("order " << static_cast<char>(order));
      const std::optional<Layout> v = layout::ravel_view(src, order);
      std::vector<std::int64_t> expected;
      if (order == Order::K) {
        expected = addresses(src, false);
        std::sort(expected.begin(), expected.end());  // K: memory order
      } else {
        const bool f =
            order == Order::F || (order == Order::A && layout::order_like(src) == Order::F);
        expected = addresses(src, f);
      }
      // A ravel view exists exactly when the elements, in that order, are one contiguous run.
      bool contiguous_run = true;
      for (std::size_t n = 1; n < expected.size(); ++n) {
        contiguous_run = contiguous_run && expected[n] == expected[n - 1] + src.itemsize;
      }
      if (order == Order::K && src.size() > 0) {
        // NumPy's K reads reversed axes in index order, so those need a copy even when dense.
        for (std::size_t k = 0; k < src.shape.size(); ++k) {
          contiguous_run = contiguous_run && (src.shape[k] < 2 || src.strides[k] > 0);
        }
      }
      CHECK(v.has_value() == contiguous_run);
      if (v) {
        ++views;
        CHECK(v->shape == Shape{src.size()});
        CHECK(addresses(*v, false) == expected);
      }
    }
  }
  CHECK(views > 1000);
}

TEST_CASE("ravel_strides is dense and agrees with ravel_view", "[layout][ravel][fuzz]") {
  std::mt19937 rng(2121);
  int views = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const Shape shape = devmem_test::random_shape(rng);
    std::int64_t bytes = 0;
    const Layout src = devmem_test::random_layout(rng, shape, 4, uniform(rng, 0, 1) == 1, &bytes);
    INFO("source " << show(src));
    for (const Order order : {Order::C, Order::F, Order::A, Order::K}) {
      INFO("order " << static_cast<char>(order));
      const Layout target{src.shape, layout::ravel_strides(src, order), 0, src.itemsize};
      // Every element gets its own slot of a dense 1-d buffer.
      std::vector<std::int64_t> slots = addresses(target, false);
      std::sort(slots.begin(), slots.end());
      for (std::size_t n = 0; n < slots.size(); ++n) {
        CHECK(slots[n] == static_cast<std::int64_t>(n) * src.itemsize);
      }
      // Where ravel is a view, the copy would put every element where the view sees it.
      const std::optional<Layout> v = layout::ravel_view(src, order);
      if (!v || src.size() == 0) continue;
      ++views;
      const std::vector<std::int64_t> at = addresses(src, false);
      const std::vector<std::int64_t> pos = addresses(target, false);
      for (std::size_t n = 0; n < at.size(); ++n) CHECK(at[n] - v->offset == pos[n]);
    }
  }
  CHECK(views > 1000);
}

TEST_CASE("slice and index agree with Python's range slicing", "[layout][slice][fuzz]") {
  std::mt19937 rng(4321);
  for (int iter = 0; iter < 5000; ++iter) {
    Shape shape = devmem_test::random_shape(rng, 3, 6);
    if (shape.empty()) shape = {uniform(rng, 0, 6)};
    std::int64_t bytes = 0;
    const Layout src = devmem_test::random_layout(rng, shape, 8, true, &bytes);
    const int ndim = src.ndim();
    const int axis = static_cast<int>(uniform(rng, -ndim, ndim - 1));
    const auto k = static_cast<std::size_t>(axis < 0 ? axis + ndim : axis);
    const std::int64_t n = src.shape[k];
    const auto bound = [&]() -> std::optional<std::int64_t> {
      if (uniform(rng, 0, 3) == 0) return std::nullopt;
      return uniform(rng, -2 * n - 2, 2 * n + 2);
    };
    const std::int64_t steps[] = {-5, -3, -2, -1, 1, 2, 3, 5};
    const Slice s{bound(), bound(), steps[uniform(rng, 0, 7)]};
    INFO("source " << show(src) << " axis " << axis << " slice "
                   << (s.start ? std::to_string(*s.start) : "") << ":"
                   << (s.stop ? std::to_string(*s.stop) : "") << ":" << s.step);

    const std::vector<std::int64_t> picked = python_slice(n, s.start, s.stop, s.step);
    const Layout sliced = layout::slice(src, axis, s);
    Shape expected_shape = src.shape;
    expected_shape[k] = static_cast<std::int64_t>(picked.size());
    REQUIRE(sliced.shape == expected_shape);
    for (const Shape& idx : indices_in_order(sliced.shape, false)) {
      Shape from = idx;
      from[k] = picked[static_cast<std::size_t>(idx[k])];
      CHECK(sliced.offset_of(idx) == src.offset_of(from));
    }

    if (n > 0) {
      const std::int64_t i = uniform(rng, -n, n - 1);
      const Layout picked_one = layout::index(src, axis, i);
      REQUIRE(picked_one.ndim() == ndim - 1);
      for (const Shape& idx : indices_in_order(picked_one.shape, false)) {
        Shape from = idx;
        from.insert(from.begin() + static_cast<std::ptrdiff_t>(k), i < 0 ? i + n : i);
        CHECK(picked_one.offset_of(idx) == src.offset_of(from));
      }
    }
  }
}

TEST_CASE("split, transpose and squeeze keep every element's address", "[layout][fuzz]") {
  std::mt19937 rng(777);
  for (int iter = 0; iter < 2000; ++iter) {
    const Shape shape = devmem_test::random_shape(rng);
    std::int64_t bytes = 0;
    const Layout src = devmem_test::random_layout(rng, shape, 2, true, &bytes);
    INFO("source " << show(src));

    // transpose(axes) maps index (i_axes[0], ...) to the same element.
    std::vector<int> axes(shape.size());
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), rng);
    const Layout t = layout::transpose(src, axes);
    for (const Shape& idx : indices_in_order(t.shape, false)) {
      Shape from(idx.size());
      for (std::size_t a = 0; a < axes.size(); ++a) {
        from[static_cast<std::size_t>(axes[a])] = idx[a];
      }
      CHECK(t.offset_of(idx) == src.offset_of(from));
    }

    // squeeze keeps the element order.
    CHECK(addresses(layout::squeeze(src), false) == addresses(src, false));

    // split of a 1-d view: the parts, concatenated, are the whole.
    const Layout flat{{src.size()}, {src.itemsize * uniform(rng, -2, 2)}, 64, src.itemsize};
    const std::int64_t section = uniform(rng, 1, 5);
    std::vector<std::int64_t> joined;
    for (const Layout& part : layout::split(flat, section)) {
      CHECK(part.shape[0] <= section);
      const auto a = addresses(part, false);
      joined.insert(joined.end(), a.begin(), a.end());
    }
    CHECK(joined == addresses(flat, false));
  }
}

TEST_CASE("make_layout places every element inside an extent starting at 0", "[layout][fuzz]") {
  std::mt19937 rng(55);
  for (int iter = 0; iter < 3000; ++iter) {
    const Shape shape = devmem_test::random_shape(rng);
    const std::int64_t itemsize = uniform(rng, 1, 16);
    Strides strides(shape.size());
    for (std::int64_t& s : strides) s = uniform(rng, -64, 64);
    const Layout l = layout::make_layout(shape, itemsize, strides);
    INFO("layout " << show(l));
    const auto addr = addresses(l, false);
    const devmem::Extent e = l.byte_extent();
    if (addr.empty()) {
      CHECK(e.bytes() == 0);
      continue;
    }
    CHECK(e.begin == 0);
    CHECK(*std::min_element(addr.begin(), addr.end()) == 0);
    CHECK(*std::max_element(addr.begin(), addr.end()) + itemsize == e.end);
    // Dense layouts fill their extent exactly.
    if (l.is_dense()) CHECK(e.bytes() == l.nbytes());
    if (l.is_contiguous()) CHECK(l.is_dense());
  }
}

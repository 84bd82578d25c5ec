// Layout math: NumPy's rules for shapes, byte strides, contiguity, reshape, ravel and slicing,
// ported from NumPy's C sources where the exact behaviour matters (the function names in the
// comments are NumPy's). Everything here is pure computation on metadata. How a strided copy
// between two layouts is cut into memcpy-able blocks is in copy_plan.cpp.
#include <devmem/layout.hpp>

#include "core/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <numeric>

namespace devmem {
namespace {

using std::int64_t;
using std::size_t;

// a * b, or false when that overflows int64.
[[nodiscard]] bool mul(int64_t a, int64_t b, int64_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}
[[nodiscard]] bool add(int64_t a, int64_t b, int64_t& out) noexcept {
  return !__builtin_add_overflow(a, b, &out);
}
[[nodiscard]] bool sub(int64_t a, int64_t b, int64_t& out) noexcept {
  return !__builtin_sub_overflow(a, b, &out);
}

size_t as_index(int64_t k) noexcept {
  return static_cast<size_t>(k);
}

char order_char(Order order) noexcept {
  return static_cast<char>(order);
}

// Rejects layouts that no function here can interpret: a stride count that is not the number of
// dimensions, negative dimensions, a non-positive itemsize.
void validate(const Layout& l, const char* operation) {
  if (l.strides.size() != l.shape.size()) {
    detail::throw_invalid(operation, "layout has {} strides for {} dimensions", l.strides.size(),
                          l.shape.size());
  }
  if (l.itemsize <= 0) {
    detail::throw_invalid(operation, "itemsize must be positive, got {}", l.itemsize);
  }
  (void)layout::element_count(l.shape, operation);
}

// Normalises a possibly negative axis, NumPy's check_and_adjust_axis.
size_t normalize_axis(int axis, size_t ndim, const char* operation) {
  const auto n = static_cast<int64_t>(ndim);
  const int64_t a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) {
    detail::throw_invalid(operation, "axis {} is out of bounds for array of dimension {}", axis,
                          ndim);
  }
  return as_index(a);
}

// Dense strides, NumPy's _array_fill_strides: a dimension of 0 counts as 1, so the axes of an
// empty array keep distinct strides, the ones NumPy gives views (numpy.empty((3, 0, 2)).reshape(2,
// 0, 3).strides == (24, 24, 8)). Numba would compute (0, 16, 8) for (3, 0, 2), and NumPy >= 1.23
// zeroes all strides of a newly allocated empty array; none of them address any memory.
Strides fill_dense_strides(std::span<const int64_t> shape, int64_t itemsize, Order order,
                           const char* operation) {
  if (order != Order::C && order != Order::F) {
    detail::throw_invalid(operation, "order must be C or F, got '{}'", order_char(order));
  }
  if (itemsize <= 0) {
    detail::throw_invalid(operation, "itemsize must be positive, got {}", itemsize);
  }
  (void)layout::element_count(shape, operation);
  const size_t n = shape.size();
  Strides strides(n);
  int64_t stride = itemsize;
  for (size_t i = 0; i < n; ++i) {
    const size_t k = order == Order::C ? n - 1 - i : i;
    strides[k] = stride;
    if (shape[k] != 0 && !mul(stride, shape[k], stride)) {
      detail::throw_invalid(operation, "strides of shape {} with itemsize {} overflow int64",
                            layout::format_tuple(shape), itemsize);
    }
  }
  return strides;
}

// NumPy's _UpdateContiguousFlags with relaxed strides: size-1 axes do not matter, an empty array
// is contiguous, and every other axis must have exactly the stride of the axes inside it.
bool contiguous_in(const Layout& l, bool c_order) noexcept {
  const size_t n = l.shape.size();
  if (l.strides.size() != n) return false;
  for (const int64_t d : l.shape) {
    if (d == 0) return true;
  }
  int64_t expected = l.itemsize;
  bool overflowed = false;  // only a problem when another axis longer than 1 follows
  for (size_t i = 0; i < n; ++i) {
    const size_t k = c_order ? n - 1 - i : i;
    if (l.shape[k] == 1) continue;
    if (overflowed || l.strides[k] != expected) return false;
    overflowed = !mul(expected, l.shape[k], expected);
  }
  return true;
}

// Axes sorted by |stride| descending, ties in axis order: NumPy's PyArray_CreateSortedStridePerm,
// which empty_like(order='K') and ravel(order='K') use to find an array's memory order.
std::vector<size_t> sorted_stride_perm(const Strides& strides) {
  std::vector<size_t> perm(strides.size());
  std::iota(perm.begin(), perm.end(), size_t{0});
  std::stable_sort(perm.begin(), perm.end(), [&strides](size_t a, size_t b) {
    return std::abs(strides[a]) > std::abs(strides[b]);
  });
  return perm;
}

// The axes of `layout` other than those of length 1, which have no effect on the element order
// but whose strides are arbitrary.
void squeeze(const Layout& layout, Shape& dims, Strides& strides) {
  for (size_t k = 0; k < layout.shape.size(); ++k) {
    if (layout.shape[k] != 1) {
      dims.push_back(layout.shape[k]);
      strides.push_back(layout.strides[k]);
    }
  }
}

// Whether the axes [first, last) of (dims, strides) merge into one axis that visits their
// elements in C or F order. The products are checked: stride * dim can pass int64 when
// stride * (dim - 1), the extent, does not (found by fuzz/fuzz_layout); a product that overflows
// equals no stride.
bool mergeable_axes(const Shape& dims, const Strides& strides, size_t first, size_t last,
                    bool f_order) {
  for (size_t k = first; k + 1 < last; ++k) {
    int64_t run = 0;
    const bool mergeable = f_order ? mul(dims[k], strides[k], run) && strides[k + 1] == run
                                   : mul(dims[k + 1], strides[k + 1], run) && strides[k] == run;
    if (!mergeable) return false;
  }
  return true;
}

// Splits one axis of stride `stride` into the axes [first, last) of `dims`, writing their strides
// (C or F order). A product that overflows can only be the stride of a size-1 axis (any other
// lies inside the extent), which is arbitrary.
void split_axis(const Shape& dims, Strides& strides, size_t first, size_t last, int64_t stride,
                bool f_order) {
  const auto next_stride = [](int64_t current, int64_t dim) {
    int64_t out = 0;
    return mul(current, dim, out) ? out : current;
  };
  if (f_order) {
    strides[first] = stride;
    for (size_t k = first + 1; k < last; ++k) strides[k] = next_stride(strides[k - 1], dims[k - 1]);
  } else {
    strides[last - 1] = stride;
    for (size_t k = last - 1; k > first; --k) strides[k - 1] = next_stride(strides[k], dims[k]);
  }
}

// NumPy's _attempt_nocopy_reshape: strides for `newdims` that visit the elements of `src` in the
// same order (C or F) as the source does, or nullopt when no such strides exist. The source's
// element count is non-zero and equal to that of `newdims`.
std::optional<Strides> attempt_nocopy_reshape(const Layout& src, const Shape& newdims,
                                              bool f_order) {
  Shape olddims;
  Strides oldstrides;
  squeeze(src, olddims, oldstrides);
  const size_t oldnd = olddims.size();
  const size_t newnd = newdims.size();
  Strides newstrides(newnd, 0);

  // [oi, oj) and [ni, nj) are the groups of old and new axes that span the same elements.
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < newnd && oi < oldnd) {
    int64_t np = newdims[ni];
    int64_t op = olddims[oi];
    while (np != op) {
      if (np < op) {
        if (nj >= newnd) return std::nullopt;  // unreachable for equal non-zero sizes
        np *= newdims[nj++];
      } else {
        if (oj >= oldnd) return std::nullopt;
        op *= olddims[oj++];
      }
    }
    // The old axes of the group must be mergeable into one axis in the requested order; that
    // merged axis is then split into the new axes of the group.
    if (!mergeable_axes(olddims, oldstrides, oi, oj, f_order)) return std::nullopt;
    split_axis(newdims, newstrides, ni, nj, f_order ? oldstrides[oi] : oldstrides[oj - 1], f_order);
    ni = nj++;
    oi = oj++;
  }
  // Trailing size-1 axes of the new shape: any stride works; NumPy continues the last one.
  int64_t last_stride = ni >= 1 ? newstrides[ni - 1] : src.itemsize;
  if (f_order && ni >= 1 && !mul(last_stride, newdims[ni - 1], last_stride)) {
    last_stride = newstrides[ni - 1];  // only size-1 axes follow: any stride will do
  }
  for (size_t nk = ni; nk < newnd; ++nk) newstrides[nk] = last_stride;
  return newstrides;
}

Layout flat_view(const Layout& source) {
  return Layout{{source.size()}, {source.itemsize}, source.offset, source.itemsize};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Layout members

int64_t Layout::size() const noexcept {
  // A zero dimension first: element_count accepts huge dimensions beside a zero one (the array is
  // empty), and their product must not even be formed (found by fuzz/fuzz_array_interface).
  if (std::find(shape.begin(), shape.end(), int64_t{0}) != shape.end()) return 0;
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

bool Layout::is_c_contiguous() const noexcept {
  return contiguous_in(*this, true);
}

bool Layout::is_f_contiguous() const noexcept {
  return contiguous_in(*this, false);
}

bool Layout::is_dense() const {
  if (strides.size() != shape.size()) return false;
  std::vector<size_t> axes;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) return true;  // no elements: nothing can be left out or overlap
    if (shape[k] > 1) axes.push_back(k);
  }
  // Innermost first: each axis must step over exactly the block of the axes inside it.
  std::stable_sort(axes.begin(), axes.end(), [this](size_t a, size_t b) {
    return std::abs(strides[a]) < std::abs(strides[b]);
  });
  int64_t expected = itemsize;
  for (const size_t k : axes) {
    if (std::abs(strides[k]) != expected) return false;  // also rejects broadcast (stride 0)
    if (!mul(expected, shape[k], expected)) return false;
  }
  return true;
}

Extent Layout::byte_extent() const noexcept {
  const size_t n = std::min(shape.size(), strides.size());
  for (size_t k = 0; k < n; ++k) {
    if (shape[k] == 0) return Extent{offset, offset};
  }
  int64_t begin = offset;
  int64_t end = offset + itemsize;
  for (size_t k = 0; k < n; ++k) {
    const int64_t span = strides[k] * (shape[k] - 1);
    (span < 0 ? begin : end) += span;
  }
  return Extent{begin, end};
}

// The deprecated name stays an exported function, so that programs compiled against the headers
// from before the rename still link (docs/migration.md).
Extent Layout::extent() const noexcept {
  return byte_extent();
}

int64_t Layout::offset_of(std::span<const int64_t> index) const noexcept {
  int64_t off = offset;
  const size_t n = std::min(index.size(), strides.size());
  for (size_t k = 0; k < n; ++k) off += index[k] * strides[k];
  return off;
}

namespace layout {

std::string format_tuple(std::span<const int64_t> values) {
  if (values.size() == 1) return fmt::format("({},)", values[0]);
  return fmt::format("({})", fmt::join(values, ", "));
}

int64_t element_count(std::span<const int64_t> shape, const char* operation) {
  bool empty = false;
  for (const int64_t d : shape) {
    if (d < 0) {
      detail::throw_invalid(operation, "negative dimension {} in shape {}", d, format_tuple(shape));
    }
    empty = empty || d == 0;
  }
  // A zero anywhere makes the product 0, however large the other dimensions are.
  if (empty) return 0;
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (!mul(n, d, n)) {
      detail::throw_invalid(operation, "element count of shape {} overflows int64",
                            format_tuple(shape));
    }
  }
  return n;
}

int64_t checked_nbytes(std::span<const int64_t> shape, int64_t itemsize, const char* operation) {
  if (itemsize <= 0) {
    detail::throw_invalid(operation, "itemsize must be positive, got {}", itemsize);
  }
  int64_t bytes = 0;
  if (!mul(element_count(shape, operation), itemsize, bytes)) {
    detail::throw_invalid(operation, "size in bytes of shape {} with itemsize {} overflows int64",
                          format_tuple(shape), itemsize);
  }
  return bytes;
}

Strides dense_strides(std::span<const int64_t> shape, int64_t itemsize, Order order) {
  return fill_dense_strides(shape, itemsize, order, "dense_strides");
}

Layout make_layout(std::span<const int64_t> shape, int64_t itemsize,
                   std::span<const int64_t> strides, Order order, const char* operation) {
  (void)checked_nbytes(shape, itemsize, operation);
  Layout l{Shape(shape.begin(), shape.end()), {}, 0, itemsize};
  if (strides.empty()) {
    l.strides = fill_dense_strides(shape, itemsize, order, operation);
    return l;
  }
  if (strides.size() != shape.size()) {
    detail::throw_invalid(operation, "{} strides given for {} dimensions", strides.size(),
                          shape.size());
  }
  l.strides.assign(strides.begin(), strides.end());
  if (l.size() == 0) return l;
  // Place element 0 so that the lowest addressed byte is byte 0 of the allocation (Numba's
  // memory_size_from_info), checking that every address of the extent is representable.
  int64_t low = 0;
  int64_t high = itemsize;
  int64_t bytes = 0;
  bool ok = true;
  for (size_t k = 0; ok && k < shape.size(); ++k) {
    int64_t span = 0;
    ok = mul(strides[k], shape[k] - 1, span) &&
         (span < 0 ? add(low, span, low) : add(high, span, high));
  }
  if (!ok || !sub(high, low, bytes)) {
    detail::throw_invalid(operation, "extent of shape {} with strides {} overflows int64",
                          format_tuple(shape), format_tuple(strides));
  }
  l.offset = -low;  // high - low fits, and high > 0, so -low fits too
  return l;
}

Strides strides_like(const Layout& source) {
  validate(source, "strides_like");
  if (source.ndim() <= 1 || source.is_contiguous()) {
    // Fresh dense strides rather than the source's: they agree except on size-1 axes (whose
    // strides relaxed contiguity ignores) and for 1-d strided arrays, which must become dense.
    return fill_dense_strides(source.shape, source.itemsize, order_like(source), "strides_like");
  }
  // NumPy's PyArray_NewLikeArrayWithShape for order K: dense strides assigned innermost first in
  // the source's memory order.
  const std::vector<size_t> perm = sorted_stride_perm(source.strides);
  Strides strides(source.strides.size());
  int64_t stride = source.itemsize;
  for (size_t k = perm.size(); k-- > 0;) {  // innermost first
    const size_t axis = perm[k];
    strides[axis] = stride;
    stride *= source.shape[axis];
  }
  return strides;
}

Strides ravel_strides(const Layout& source, Order order) {
  validate(source, "ravel");
  if (order != Order::C && order != Order::F && order != Order::A && order != Order::K) {
    detail::throw_invalid("ravel", "order must be 'C', 'F', 'A' or 'K', got '{}'",
                          order_char(order));
  }
  if (order == Order::A) order = order_like(source);
  // An empty array has no elements to order.
  if (order != Order::K || source.size() == 0) {
    return fill_dense_strides(source.shape, source.itemsize, order == Order::K ? Order::C : order,
                              "ravel");
  }
  // The axis order of NumPy's nditer for order K without stride negation (PyArray_CopyAsFlat
  // passes NPY_ITER_DONT_NEGATE_STRIDES), npyiter_find_best_axis_ordering: a stable insertion
  // sort by |stride|, innermost first, starting from the reversed C order, in which a zero stride
  // (a broadcast or size-1 axis) compares with nothing. So broadcast axes stay where C order puts
  // them, unlike in sorted_stride_perm, and reversed axes are still read from index 0 up.
  const size_t n = source.shape.size();
  Strides key(n);
  for (size_t k = 0; k < n; ++k) key[k] = source.shape[k] == 1 ? 0 : std::abs(source.strides[k]);
  std::vector<size_t> perm(n);  // innermost axis first
  for (size_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  for (size_t i0 = 1; i0 < n; ++i0) {
    const size_t axis = perm[i0];
    size_t pos = i0;
    for (size_t i1 = i0; i1-- > 0;) {
      const size_t other = perm[i1];
      if (key[axis] == 0 || key[other] == 0) continue;  // ambiguous: look further out
      if (key[other] <= key[axis]) break;
      pos = i1;
    }
    std::move_backward(perm.begin() + static_cast<std::ptrdiff_t>(pos),
                       perm.begin() + static_cast<std::ptrdiff_t>(i0),
                       perm.begin() + static_cast<std::ptrdiff_t>(i0) + 1);
    perm[pos] = axis;
  }
  Strides strides(n);
  int64_t stride = source.itemsize;
  for (const size_t k : perm) {
    strides[k] = stride;
    if (!mul(stride, source.shape[k], stride)) {
      detail::throw_invalid("ravel", "strides of shape {} with itemsize {} overflow int64",
                            format_tuple(source.shape), source.itemsize);
    }
  }
  return strides;
}

Order order_like(const Layout& source) {
  return source.is_f_contiguous() && !source.is_c_contiguous() ? Order::F : Order::C;
}

Shape resolve_reshape(int64_t size, std::span<const int64_t> new_shape) {
  Shape shape(new_shape.begin(), new_shape.end());
  std::optional<size_t> unknown;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == -1) {
      if (unknown) {
        detail::throw_invalid("reshape", "can only specify one unknown dimension, got shape {}",
                              format_tuple(shape));
      }
      unknown = k;
    } else if (shape[k] < 0) {
      detail::throw_invalid("reshape", "negative dimension {} in shape {}", shape[k],
                            format_tuple(shape));
    }
  }
  // Product of the given dimensions; a zero makes it 0 however large the others are.
  int64_t known = 1;
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    known = 0;
  } else {
    for (size_t k = 0; k < shape.size(); ++k) {
      if (k != unknown && !mul(known, shape[k], known)) {
        detail::throw_invalid("reshape", "element count of shape {} overflows int64",
                              format_tuple(shape));
      }
    }
  }
  if (unknown) {
    // NumPy refuses to infer against a zero product even for an empty array (0 * anything == 0).
    if (known == 0 || size % known != 0) {
      detail::throw_invalid(
          "reshape", "cannot infer the unknown dimension of shape {} for an array of size {}",
          format_tuple(shape), size);
    }
    shape[*unknown] = size / known;
  } else if (known != size) {
    detail::throw_invalid("reshape", "cannot reshape array of size {} into shape {}", size,
                          format_tuple(shape));
  }
  return shape;
}

std::optional<Layout> reshape_view(const Layout& source, std::span<const int64_t> new_shape,
                                   Order order) {
  validate(source, "reshape");
  if (order != Order::C && order != Order::F && order != Order::A) {
    detail::throw_invalid("reshape", "order must be C, F or A, got '{}'", order_char(order));
  }
  Shape shape = resolve_reshape(source.size(), new_shape);
  if (order == Order::A) order = order_like(source);
  // PyArray_Newshape: the same shape is always a plain view, whatever the order.
  if (shape == source.shape) return source;
  Layout result{std::move(shape), {}, source.offset, source.itemsize};
  const bool f_order = order == Order::F;
  // Contiguous in the requested order (always true for empty arrays): the element sequence is the
  // memory sequence, so fresh dense strides describe it.
  if (f_order ? source.is_f_contiguous() : source.is_c_contiguous()) {
    result.strides = fill_dense_strides(result.shape, source.itemsize, order, "reshape");
    return result;
  }
  std::optional<Strides> strides = attempt_nocopy_reshape(source, result.shape, f_order);
  if (!strides) return std::nullopt;
  result.strides = std::move(*strides);
  return result;
}

std::optional<Layout> ravel_view(const Layout& source, Order order) {
  validate(source, "ravel");
  if (order != Order::C && order != Order::F && order != Order::A && order != Order::K) {
    detail::throw_invalid("ravel", "order must be 'C', 'F', 'A' or 'K', got '{}'",
                          static_cast<char>(order));
  }
  // PyArray_Ravel.
  if (order == Order::A) {
    order = order_like(source);
  } else if (order == Order::K) {
    if (source.is_c_contiguous()) {
      order = Order::C;
    } else if (source.is_f_contiguous()) {
      order = Order::F;
    }
  }
  switch (order) {
    case Order::C:
      if (source.is_c_contiguous()) return flat_view(source);
      return std::nullopt;
    case Order::F:
      if (source.is_f_contiguous()) return flat_view(source);
      return std::nullopt;
    case Order::K:
    case Order::A:
      break;
  }
  // Order K of a non-contiguous array: a view when the elements are dense, with positive
  // strides, in the array's own memory order (e.g. a transpose of a 3-d C array).
  const std::vector<size_t> perm = sorted_stride_perm(source.strides);
  int64_t stride = source.itemsize;
  for (size_t k = perm.size(); k-- > 0;) {  // innermost first
    const size_t axis = perm[k];
    if (source.shape[axis] == 1) continue;
    if (source.strides[axis] != stride) return std::nullopt;
    stride *= source.shape[axis];
  }
  return flat_view(source);
}

namespace {

/// offset + i * stride for moving element 0 of a view. Checked: make_layout bounds the extent of
/// arrays with elements only, so an empty array may have huge dimensions and strides (found by
/// fuzz/fuzz_layout), and a hand-built Layout may have anything. An empty view keeps the offset:
/// it has no element 0 to move to.
int64_t moved_offset(const Layout& view, const char* operation, int64_t i, int64_t stride) {
  if (view.size() == 0) return view.offset;
  int64_t step = 0;
  int64_t out = 0;
  if (!mul(i, stride, step) || !add(view.offset, step, out)) {
    detail::throw_invalid(operation,
                          "moving to element {} along an axis of stride {} overflows int64 (offset "
                          "{})",
                          i, stride, view.offset);
  }
  return out;
}

}  // namespace

Layout slice(const Layout& source, int dim, const Slice& s) {
  validate(source, "slice");
  const size_t k = normalize_axis(dim, source.shape.size(), "slice");
  if (s.step == 0) detail::throw_invalid("slice", "slice step cannot be zero");
  // PySlice_AdjustIndices, i.e. range(n)[start:stop:step].
  const int64_t n = source.shape[k];
  const int64_t step = s.step;
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? n - 1 : n;
  const auto adjust = [n, lower, upper](int64_t i) {
    if (i < 0) return std::max(i + n, lower);
    return std::min(i, upper);
  };
  const int64_t start = s.start ? adjust(*s.start) : (step < 0 ? upper : lower);
  const int64_t stop = s.stop ? adjust(*s.stop) : (step < 0 ? lower : upper);
  int64_t length = 0;
  if (step > 0 && start < stop) {
    length = (stop - start - 1) / step + 1;
  } else if (step < 0 && start > stop) {
    // Dividing by the negative step avoids negating INT64_MIN.
    length = 1 - (start - stop - 1) / step;
  }
  Layout result = source;
  result.shape[k] = length;
  // An empty result keeps the offset and the stride, as NumPy does (it slices empty ranges as
  // 0:0:1): there is no first element to move to.
  if (length == 0) return result;
  result.offset = moved_offset(result, "slice", start, source.strides[k]);
  // A stride only matters when the axis has two or more elements, and then it fits: the elements
  // lie inside the source axis. Keep the old stride rather than overflow for a single element.
  int64_t stride = 0;
  result.strides[k] = mul(source.strides[k], step, stride) ? stride : source.strides[k];
  return result;
}

Layout index(const Layout& source, int dim, int64_t i) {
  validate(source, "index");
  const size_t k = normalize_axis(dim, source.shape.size(), "index");
  const int64_t n = source.shape[k];
  const int64_t j = i < 0 ? i + n : i;
  if (j < 0 || j >= n) {
    detail::throw_invalid("index", "index {} is out of bounds for axis {} with size {}", i, k, n);
  }
  Layout result = source;
  const auto pos = static_cast<std::ptrdiff_t>(k);
  result.shape.erase(result.shape.begin() + pos);
  result.strides.erase(result.strides.begin() + pos);
  result.offset = moved_offset(result, "index", j, source.strides[k]);
  return result;
}

Layout transpose(const Layout& source) {
  validate(source, "transpose");
  Layout result = source;
  std::reverse(result.shape.begin(), result.shape.end());
  std::reverse(result.strides.begin(), result.strides.end());
  return result;
}

Layout transpose(const Layout& source, std::span<const int> axes) {
  validate(source, "transpose");
  const size_t n = source.shape.size();
  const auto fail = [&]() {
    const std::vector<int64_t> values(axes.begin(), axes.end());
    detail::throw_invalid("transpose", "axes {} are not a permutation of {} axes",
                          format_tuple(values), n);
  };
  if (axes.size() != n) fail();
  std::vector<bool> seen(n, false);
  Layout result = source;
  for (size_t k = 0; k < n; ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + static_cast<int64_t>(n) : axes[k];
    if (a < 0 || a >= static_cast<int64_t>(n) || seen[as_index(a)]) fail();
    seen[as_index(a)] = true;
    result.shape[k] = source.shape[as_index(a)];
    result.strides[k] = source.strides[as_index(a)];
  }
  return result;
}

Layout squeeze(const Layout& source, std::optional<int> axis) {
  validate(source, "squeeze");
  Layout result{{}, {}, source.offset, source.itemsize};
  std::optional<size_t> only;
  if (axis) {
    only = normalize_axis(*axis, source.shape.size(), "squeeze");
    if (source.shape[*only] != 1) {
      detail::throw_invalid("squeeze",
                            "cannot select an axis to squeeze out which has size not equal to one "
                            "(axis {} has size {})",
                            *axis, source.shape[*only]);
    }
  }
  for (size_t k = 0; k < source.shape.size(); ++k) {
    const bool drop = only ? k == *only : source.shape[k] == 1;
    if (drop) continue;
    result.shape.push_back(source.shape[k]);
    result.strides.push_back(source.strides[k]);
  }
  return result;
}

// NumPy's rule (array_descr_set, NumPy >= 1.23), not Numba's stricter "must be C-contiguous": a
// different itemsize rescales the last axis, which must be contiguous (stride == itemsize) unless
// it has length 1 or the array is empty; 0-d arrays cannot change their itemsize at all.
Layout view_as(const Layout& source, int64_t new_itemsize) {
  validate(source, "view");
  if (new_itemsize <= 0) {
    detail::throw_invalid("view", "itemsize must be positive, got {}", new_itemsize);
  }
  const int64_t old_itemsize = source.itemsize;
  Layout result = source;
  result.itemsize = new_itemsize;
  if (new_itemsize == old_itemsize) return result;
  if (source.shape.empty()) {
    detail::throw_invalid("view", "cannot change the itemsize of a 0-d array (from {} to {} bytes)",
                          old_itemsize, new_itemsize);
  }
  const size_t last = source.shape.size() - 1;
  const int64_t n = source.shape[last];
  if (n != 1 && source.size() != 0 && source.strides[last] != old_itemsize) {
    detail::throw_invalid("view",
                          "to change the itemsize from {} to {} bytes the last axis must be "
                          "contiguous, but its stride is {}",
                          old_itemsize, new_itemsize, source.strides[last]);
  }
  if (new_itemsize < old_itemsize) {
    if (old_itemsize % new_itemsize != 0) {
      detail::throw_invalid("view",
                            "when changing to a smaller itemsize, it must divide the original "
                            "itemsize ({} does not divide {})",
                            new_itemsize, old_itemsize);
    }
    // Checked: the byte length of the last axis is bounded for arrays with elements only (an
    // empty array may have a huge last axis; found by fuzz/fuzz_layout).
    if (!mul(n, old_itemsize / new_itemsize, result.shape[last])) {
      detail::throw_invalid("view",
                            "the last axis of {} items of {} bytes overflows int64 as items of {} "
                            "bytes",
                            n, old_itemsize, new_itemsize);
    }
  } else {
    int64_t bytes = 0;
    if (!mul(n, old_itemsize, bytes)) {
      detail::throw_invalid("view", "the last axis of {} items of {} bytes overflows int64", n,
                            old_itemsize);
    }
    if (bytes % new_itemsize != 0) {
      detail::throw_invalid("view",
                            "when changing to a larger itemsize, it must divide the size in bytes "
                            "of the last axis ({} does not divide {} bytes)",
                            new_itemsize, bytes);
    }
    result.shape[last] = bytes / new_itemsize;
  }
  result.strides[last] = new_itemsize;
  return result;
}

std::vector<Layout> split(const Layout& source, int64_t section) {
  validate(source, "split");
  if (source.shape.size() != 1) {
    detail::throw_invalid("split", "only 1-d arrays can be split, got ndim {}", source.ndim());
  }
  if (section <= 0) detail::throw_invalid("split", "section must be positive, got {}", section);
  const int64_t n = source.shape[0];
  const int64_t stride = source.strides[0];
  std::vector<Layout> parts;
  parts.reserve(as_index(n / section + 1));
  for (int64_t begin = 0; begin < n;) {
    const int64_t count = std::min(section, n - begin);
    parts.push_back(Layout{{count}, {stride}, source.offset + begin * stride, source.itemsize});
    begin += count;
  }
  return parts;
}

Layout broadcast_to(const Layout& source, std::span<const int64_t> shape, const char* operation) {
  validate(source, operation);
  (void)element_count(shape, operation);
  const size_t n = shape.size();
  const size_t m = source.shape.size();
  const auto fail = [&]() {
    detail::throw_invalid(operation, "cannot broadcast shape {} to shape {}",
                          format_tuple(source.shape), format_tuple(shape));
  };
  if (m > n) fail();
  Layout result{Shape(shape.begin(), shape.end()), Strides(n, 0), source.offset, source.itemsize};
  // Trailing axes line up; new leading axes and stretched size-1 axes get stride 0.
  for (size_t k = 0; k < m; ++k) {
    const int64_t from = source.shape[m - 1 - k];
    const int64_t to = shape[n - 1 - k];
    if (from == to) {
      result.strides[n - 1 - k] = source.strides[m - 1 - k];
    } else if (from != 1) {
      fail();
    }
  }
  return result;
}

bool same_squeezed_shape(std::span<const int64_t> a, std::span<const int64_t> b) {
  const auto not_one = [](int64_t d) { return d != 1; };
  auto ia = std::find_if(a.begin(), a.end(), not_one);
  auto ib = std::find_if(b.begin(), b.end(), not_one);
  while (ia != a.end() && ib != b.end()) {
    if (*ia != *ib) return false;
    ia = std::find_if(ia + 1, a.end(), not_one);
    ib = std::find_if(ib + 1, b.end(), not_one);
  }
  return ia == a.end() && ib == b.end();
}

}  // namespace layout
}  // namespace devmem

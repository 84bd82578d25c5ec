// Fuzz target: layout math on arbitrary shapes, strides, itemsizes and arguments.
//
// Invariants: every call either returns or throws InvalidArgument (nothing else, no crash, no
// UB), and every result agrees with a simple reference that enumerates the byte offsets of the
// elements one by one: reshape/ravel views list the same elements in the requested order, slices
// and indices pick what Python would pick, transposes and broadcasts map indices as NumPy does,
// splits concatenate to the source, contiguity flags and extents match the enumeration, and a
// planned strided copy writes every destination element from the right source element and no
// other byte.
#include "fuzz/fuzz_input.hpp"

#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

namespace {

using devmem::Layout;
using devmem::Order;
using devmem::Shape;
using devmem::Strides;
using devmem_fuzz::FuzzInput;
namespace layout = devmem::layout;

constexpr const char* kTarget = "fuzz_layout";

void require(bool condition, const std::string& what) {
  if (!condition) devmem_fuzz::invariant_failed(kTarget, what);
}

/// Number of elements; -1 when a dimension is negative or passes 4096 (an empty array may have
/// huge dimensions beside a zero one), or the count passes 4096: too many to enumerate.
std::int64_t count_of(const Shape& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0 || d > 4096) return -1;
  }
  for (const std::int64_t d : shape) {
    if (d == 0) return 0;
  }
  for (const std::int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n) || n > 4096) return -1;
  }
  return n;
}

/// Multi-indices of `shape` in C order (last axis fastest) or F order (first axis fastest).
std::vector<std::vector<std::int64_t>> indices_of(const Shape& shape, bool fortran) {
  std::vector<std::vector<std::int64_t>> out;
  // Empty, whatever the other dimensions (callers only pass shapes of at most 4096 elements).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return out;
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (;;) {
    out.push_back(idx);
    bool carried_out = true;
    for (std::size_t step = 0; step < shape.size(); ++step) {
      const std::size_t k = fortran ? step : shape.size() - 1 - step;
      if (++idx[k] < shape[k]) {
        carried_out = false;
        break;
      }
      idx[k] = 0;
    }
    if (carried_out) return out;
  }
}

/// The reference: byte offset of an element, summed by hand.
std::int64_t offset_at(const Layout& l, const std::vector<std::int64_t>& idx) {
  std::int64_t byte = l.offset;
  for (std::size_t k = 0; k < idx.size(); ++k) byte += idx[k] * l.strides[k];
  return byte;
}

std::vector<std::int64_t> offsets_in_order(const Layout& l, bool fortran) {
  std::vector<std::int64_t> out;
  for (const auto& idx : indices_of(l.shape, fortran)) out.push_back(offset_at(l, idx));
  return out;
}

bool consecutive(const std::vector<std::int64_t>& offsets, std::int64_t itemsize) {
  for (std::size_t k = 1; k < offsets.size(); ++k) {
    if (offsets[k] != offsets[0] + static_cast<std::int64_t>(k) * itemsize) return false;
  }
  return true;
}

/// Python's range(n)[start:stop:step], computed the slow way.
std::vector<std::int64_t> python_slice(std::int64_t n, std::optional<std::int64_t> start,
                                       std::optional<std::int64_t> stop, std::int64_t step) {
  const std::int64_t lower = step > 0 ? 0 : -1;
  const std::int64_t upper = step > 0 ? n : n - 1;
  const auto adjust = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t x = *v;
    if (x < 0) x = x < -n ? lower : std::max(x + n, lower);
    return std::min(std::max(x, lower), upper);
  };
  const std::int64_t first = adjust(start, step > 0 ? lower : upper);
  const std::int64_t end = adjust(stop, step > 0 ? upper : lower);
  std::vector<std::int64_t> out;
  for (std::int64_t i = first; step > 0 ? i < end : i > end;) {
    out.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return out;
}

Order take_order(FuzzInput& in, const char* choices) {
  const std::string c(choices);
  return static_cast<Order>(
      c[static_cast<std::size_t>(in.take_small(0, static_cast<std::int64_t>(c.size()) - 1))]);
}

Shape take_shape(FuzzInput& in) {
  Shape shape(static_cast<std::size_t>(in.take_small(0, 4)));
  for (std::int64_t& d : shape) d = in.take_int(-1, 5);
  return shape;
}

void check_flags(const Layout& l) {
  const std::vector<std::int64_t> c = offsets_in_order(l, false);
  const std::vector<std::int64_t> f = offsets_in_order(l, true);
  require(l.is_c_contiguous() == consecutive(c, l.itemsize), "is_c_contiguous");
  require(l.is_f_contiguous() == consecutive(f, l.itemsize), "is_f_contiguous");
  std::vector<std::int64_t> sorted = c;
  std::sort(sorted.begin(), sorted.end());
  require(l.is_dense() == consecutive(sorted, l.itemsize), "is_dense");
  const devmem::Extent e = l.byte_extent();
  if (c.empty()) {
    require(e.bytes() == 0, "extent of an empty array");
  } else {
    require(e.begin == sorted.front() && e.end == sorted.back() + l.itemsize, "extent");
  }
}

void check_view_lists(const Layout& source, const Layout& view, bool fortran, const char* what) {
  require(offsets_in_order(view, fortran) == offsets_in_order(source, fortran), what);
}

/// Layouts too large to enumerate (huge dimensions, often beside a zero one): every operation
/// must still return or throw InvalidArgument without UB, and keep the element count.
void without_reference(FuzzInput& in, const Layout& source) {
  (void)source.is_dense();
  (void)source.byte_extent();
  switch (in.take_small(0, 6)) {
    case 0: {
      const Shape wanted = take_shape(in);
      if (const std::optional<Layout> view =
              layout::reshape_view(source, wanted, take_order(in, "CFA"))) {
        require(view->size() == source.size(), "reshape keeps the element count");
      }
      return;
    }
    case 1:
      if (const std::optional<Layout> view = layout::ravel_view(source, take_order(in, "CFAK"))) {
        require(view->size() == source.size(), "ravel keeps the element count");
      }
      return;
    case 2: {
      devmem::Slice s;
      if (in.take_bool()) s.start = in.take_int(-8, 8);
      if (in.take_bool()) s.stop = in.take_int(-8, 8);
      s.step = in.take_int(-4, 4);
      (void)layout::slice(source, static_cast<int>(in.take_small(-5, 5)), s).byte_extent();
      return;
    }
    case 3:
      (void)layout::index(source, static_cast<int>(in.take_small(-5, 5)), in.take_int(-6, 6))
          .byte_extent();
      return;
    case 4:
      (void)layout::view_as(source, in.take_int(-1, 33)).byte_extent();
      return;
    case 5:
      (void)layout::broadcast_to(source, take_shape(in)).byte_extent();
      return;
    default:
      (void)layout::plan_copy(source.shape, source.strides,
                              layout::dense_strides(source.shape, source.itemsize, Order::C),
                              source.itemsize);
      return;
  }
}

void run(FuzzInput& in) {
  const Shape shape = take_shape(in);
  const std::int64_t itemsize =
      in.take_bool() ? in.take_int(1, 16) : std::int64_t{1} << in.take_small(0, 4);
  Strides strides;
  if (in.take_bool()) {
    strides.resize(static_cast<std::size_t>(in.take_small(0, 4)) % 5);
    if (in.take_bool()) strides.resize(shape.size());
    for (std::int64_t& s : strides) s = in.take_int(-40, 40);
  }
  const Order order = take_order(in, "CFAK");
  Layout source;
  try {
    source = layout::make_layout(shape, itemsize, strides, order, "fuzz");
  } catch (const devmem::InvalidArgument&) {
    return;
  }
  // The reference enumerates every element: keep it cheap (make_layout has checked the shape).
  if (count_of(source.shape) < 0) {
    without_reference(in, source);
    return;
  }
  require(source.byte_extent().begin == 0, "make_layout puts the extent at byte 0");
  check_flags(source);

  switch (in.take_small(0, 10)) {
    case 0: {  // reshape
      const Shape wanted = take_shape(in);
      const Order o = take_order(in, "CFAK");
      const std::optional<Layout> view = layout::reshape_view(source, wanted, o);
      if (!view) return;
      const bool fortran =
          o == Order::F || (o == Order::A && source.is_f_contiguous() && !source.is_c_contiguous());
      check_view_lists(source, *view, fortran, "reshape view lists the elements in order");
      require(view->shape == layout::resolve_reshape(source.size(), wanted), "reshape shape");
      check_flags(*view);
      return;
    }
    case 1: {  // ravel
      const Order o = take_order(in, "CFAKX");
      const std::optional<Layout> view = layout::ravel_view(source, o);
      if (!view) return;
      require(view->ndim() == 1 && view->size() == source.size(), "ravel is 1-d of all elements");
      if (o == Order::C || o == Order::F) {
        check_view_lists(source, *view, o == Order::F, "ravel lists the elements in order");
      } else {
        std::vector<std::int64_t> a = offsets_in_order(source, false);
        std::vector<std::int64_t> b = offsets_in_order(*view, false);
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        require(a == b, "ravel A/K views the same elements");
      }
      return;
    }
    case 2: {  // slice
      const int dim = static_cast<int>(in.take_small(-5, 5));
      devmem::Slice s;
      if (in.take_bool()) s.start = in.take_int(-8, 8);
      if (in.take_bool()) s.stop = in.take_int(-8, 8);
      s.step = in.take_int(-4, 4);
      const Layout view = layout::slice(source, dim, s);
      const int n = source.ndim();
      const auto k = static_cast<std::size_t>(dim < 0 ? dim + n : dim);
      const std::vector<std::int64_t> picked =
          python_slice(source.shape[k], s.start, s.stop, s.step);
      require(view.shape[k] == static_cast<std::int64_t>(picked.size()), "slice length");
      for (const auto& idx : indices_of(view.shape, false)) {
        std::vector<std::int64_t> src = idx;
        src[k] = picked[static_cast<std::size_t>(idx[k])];
        require(offset_at(view, idx) == offset_at(source, src), "slice element");
      }
      check_flags(view);
      return;
    }
    case 3: {  // index
      const int dim = static_cast<int>(in.take_small(-5, 5));
      const std::int64_t i = in.take_int(-6, 6);
      const Layout view = layout::index(source, dim, i);
      const int n = source.ndim();
      const auto k = static_cast<std::size_t>(dim < 0 ? dim + n : dim);
      const std::int64_t j = i < 0 ? i + source.shape[k] : i;
      for (const auto& idx : indices_of(view.shape, false)) {
        std::vector<std::int64_t> src = idx;
        src.insert(src.begin() + static_cast<std::ptrdiff_t>(k), j);
        require(offset_at(view, idx) == offset_at(source, src), "index element");
      }
      return;
    }
    case 4: {  // transpose with axes
      std::vector<int> axes(static_cast<std::size_t>(in.take_small(0, 5)));
      for (int& a : axes) a = static_cast<int>(in.take_small(-5, 5));
      const Layout view = layout::transpose(source, axes);
      const int n = source.ndim();
      for (const auto& idx : indices_of(view.shape, false)) {
        std::vector<std::int64_t> src(idx.size());
        for (std::size_t r = 0; r < axes.size(); ++r) {
          src[static_cast<std::size_t>(axes[r] < 0 ? axes[r] + n : axes[r])] = idx[r];
        }
        require(offset_at(view, idx) == offset_at(source, src), "transpose element");
      }
      return;
    }
    case 5: {  // reversing transpose and squeeze
      const Layout t = layout::transpose(source);
      require(offsets_in_order(t, false) == offsets_in_order(source, true),
              "transpose() lists the source's F order as its C order");
      std::optional<int> axis;
      if (in.take_bool()) axis = static_cast<int>(in.take_small(-5, 5));
      const Layout squeezed = layout::squeeze(source, axis);
      check_view_lists(source, squeezed, false, "squeeze keeps the elements");
      return;
    }
    case 6: {  // view as another itemsize
      const std::int64_t new_itemsize = in.take_int(-1, 33);
      const Layout view = layout::view_as(source, new_itemsize);
      require(view.size() * view.itemsize == source.size() * source.itemsize,
              "view keeps the byte count");
      if (new_itemsize == source.itemsize) require(view == source, "same-itemsize view");
      return;
    }
    case 7: {  // split
      const std::int64_t section = in.take_int(-2, 6);
      const std::vector<Layout> parts = layout::split(source, section);
      std::vector<std::int64_t> joined;
      for (const Layout& p : parts) {
        require(p.size() <= section && p.size() > 0, "split part size");
        const std::vector<std::int64_t> offsets = offsets_in_order(p, false);
        joined.insert(joined.end(), offsets.begin(), offsets.end());
      }
      require(joined == offsets_in_order(source, false), "split parts concatenate to the source");
      return;
    }
    case 8: {  // broadcast
      const Shape target = take_shape(in);
      const Layout view = layout::broadcast_to(source, target);
      require(view.shape == target, "broadcast shape");
      if (count_of(target) < 0) return;
      const std::size_t lead = target.size() - source.shape.size();
      for (const auto& idx : indices_of(target, false)) {
        std::vector<std::int64_t> src(idx.begin() + static_cast<std::ptrdiff_t>(lead), idx.end());
        for (std::size_t k = 0; k < src.size(); ++k) {
          if (source.shape[k] == 1) src[k] = 0;
        }
        require(offset_at(view, idx) == offset_at(source, src), "broadcast element");
      }
      return;
    }
    default: {  // a strided copy between this layout and another of the same shape
      Strides dst_strides(source.shape.size());
      const bool dense_dst = in.take_bool();
      for (std::int64_t& s : dst_strides) s = in.take_int(-40, 40);
      const Layout dst = dense_dst
                             ? layout::make_layout(source.shape, itemsize, {}, take_order(in, "CF"))
                             : layout::make_layout(source.shape, itemsize, dst_strides);
      if (count_of(source.shape) == 0) return;
      const layout::CopyPlan plan =
          layout::plan_copy(source.shape, source.strides, dst.strides, itemsize);
      const std::int64_t src_bytes = source.byte_extent().bytes();
      const std::int64_t dst_bytes = dst.byte_extent().bytes();
      if (src_bytes > (1 << 20) || dst_bytes > (1 << 20)) return;
      std::vector<unsigned char> src(static_cast<std::size_t>(src_bytes));
      std::iota(src.begin(), src.end(), static_cast<unsigned char>(1));
      std::vector<unsigned char> out(static_cast<std::size_t>(dst_bytes), 0);
      layout::copy_host_strided(plan, out.data() + dst.offset, src.data() + source.offset);
      // Overlapping destination elements would make the result depend on the write order.
      std::vector<std::int64_t> dst_offsets = offsets_in_order(dst, false);
      std::sort(dst_offsets.begin(), dst_offsets.end());
      for (std::size_t k = 1; k < dst_offsets.size(); ++k) {
        if (dst_offsets[k] - dst_offsets[k - 1] < itemsize) return;
      }
      std::vector<unsigned char> expected(out.size(), 0);
      for (const auto& idx : indices_of(source.shape, false)) {
        const auto from = static_cast<std::size_t>(offset_at(source, idx));
        const auto to = static_cast<std::size_t>(offset_at(dst, idx));
        std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(from), itemsize,
                    expected.begin() + static_cast<std::ptrdiff_t>(to));
      }
      require(out == expected, "strided copy writes exactly the destination elements");
      return;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  try {
    run(in);
  } catch (const devmem::InvalidArgument&) {
    // The documented rejection of bad arguments.
  }
  return 0;
}

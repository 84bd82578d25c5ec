// Array layout math shared by host and device arrays: shapes, byte strides, contiguity, extents,
// reshape, ravel, slicing, transposes, splits and the plans that strided copies follow. Everything
// here is pure computation on metadata (no memory is touched) and follows NumPy's rules.
//
// Errors: every function validates its input and throws InvalidArgument with a message naming the
// operation and the values. Thread safety: all functions are pure and reentrant.
#pragma once

#include <devmem/export.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace devmem {

using Shape = std::vector<std::int64_t>;
/// Strides in bytes (like NumPy, Numba and the CUDA Array Interface).
using Strides = std::vector<std::int64_t>;

/// Memory order. A ("any") and K ("keep") are accepted where NumPy accepts them.
enum class Order : char { C = 'C', F = 'F', A = 'A', K = 'K' };

/// A Python slice `start:stop:step`; empty bounds mean "from the start" / "to the end" in the
/// direction of `step`. Negative bounds count from the end.
struct Slice {
  std::optional<std::int64_t> start;
  std::optional<std::int64_t> stop;
  std::int64_t step = 1;
};

/// The byte range [begin, end) that an array's elements occupy, relative to the base of its buffer.
/// Empty (begin == end) for arrays with no elements.
struct Extent {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  /// Bytes spanned: end - begin.
  [[nodiscard]] std::int64_t bytes() const noexcept { return end - begin; }
  friend bool operator==(const Extent&, const Extent&) = default;
};

/// Shape, byte strides and the byte offset of element (0, ..., 0) from the start of the buffer.
struct DEVMEM_API Layout {
  Shape shape;
  Strides strides;
  std::int64_t offset = 0;
  std::int64_t itemsize = 1;

  /// Number of axes.
  [[nodiscard]] int ndim() const noexcept { return static_cast<int>(shape.size()); }
  /// Number of elements (1 for a 0-d array).
  [[nodiscard]] std::int64_t size() const noexcept;
  /// size() * itemsize: the bytes of the elements, not of the extent they span.
  [[nodiscard]] std::int64_t nbytes() const noexcept { return size() * itemsize; }
  /// NumPy's relaxed rules: size-1 axes are ignored, an empty array is both C and F contiguous,
  /// an array with a zero stride on an axis longer than 1 (broadcast) is neither.
  [[nodiscard]] bool is_c_contiguous() const noexcept;
  /// The same rules for Fortran order.
  [[nodiscard]] bool is_f_contiguous() const noexcept;
  /// Contiguous in C or F order: the elements fill exactly nbytes() bytes with no gaps.
  [[nodiscard]] bool is_contiguous() const noexcept {
    return is_c_contiguous() || is_f_contiguous();
  }
  /// Elements occupy every byte of their extent exactly once in some axis order (no gaps, no
  /// overlaps), e.g. a transpose of a 3-d C array.
  [[nodiscard]] bool is_dense() const;
  /// The byte range [begin, end) the elements occupy, relative to the buffer's start (Numba's
  /// memory_size_from_info: end - begin is what an allocation of this layout needs). Empty at
  /// `offset` for an array with no elements. Throws nothing.
  [[nodiscard]] Extent byte_extent() const noexcept;
  /// The old name of byte_extent(), deprecated since 0.1.0: ArrayView::extent(d) is an axis
  /// length (std::mdspan's name), this a byte range (docs/migration.md).
  [[deprecated("use Layout::byte_extent() (docs/migration.md)")]] [[nodiscard]] Extent extent()
      const noexcept;
  /// Byte offset of the element at `index` from the start of the buffer (no bounds check).
  [[nodiscard]] std::int64_t offset_of(std::span<const std::int64_t> index) const noexcept;

  friend bool operator==(const Layout&, const Layout&) = default;
};

namespace layout {

/// Formats a shape or strides like a Python tuple: "(3, 7)", "(10,)", "()".
[[nodiscard]] DEVMEM_API std::string format_tuple(std::span<const std::int64_t> values);

/// Product of the dimensions, checked for negative dimensions and int64 overflow (InvalidArgument).
[[nodiscard]] DEVMEM_API std::int64_t element_count(std::span<const std::int64_t> shape,
                                                    const char* operation = "shape");
/// element_count(shape) * itemsize, overflow-checked.
[[nodiscard]] DEVMEM_API std::int64_t checked_nbytes(std::span<const std::int64_t> shape,
                                                     std::int64_t itemsize,
                                                     const char* operation = "shape");

/// Dense strides of `shape` in C or F order. Throws InvalidArgument for A or K.
[[nodiscard]] DEVMEM_API Strides dense_strides(std::span<const std::int64_t> shape,
                                               std::int64_t itemsize, Order order);

/// Validated layout for a new allocation: `strides` empty means dense in `order` (C or F);
/// otherwise there must be exactly one stride per dimension. Given strides may be zero (broadcast)
/// or negative; the offset is chosen so that the extent starts at byte 0, so the allocation needs
/// exactly byte_extent().bytes() bytes (Numba's memory_size_from_info).
[[nodiscard]] DEVMEM_API Layout make_layout(std::span<const std::int64_t> shape,
                                            std::int64_t itemsize,
                                            std::span<const std::int64_t> strides = {},
                                            Order order = Order::C,
                                            const char* operation = "device_array");

/// NumPy `empty_like(order='K')` strides (also a.copy(order='K')): dense strides in
/// order_like(source) when the source is C- or F-contiguous or has ndim <= 1 (so a strided 1-d
/// array gets stride itemsize), otherwise dense strides that keep the source's axis order (axes
/// sorted by |stride|, ties in axis order, so zero-stride broadcast axes go innermost; all strides
/// positive). Not the order ravel(K) reads elements in: see ravel_strides.
[[nodiscard]] DEVMEM_API Strides strides_like(const Layout& source);
/// The order a copy of `source` should use by default: F if it is F- and not C-contiguous, else C.
[[nodiscard]] DEVMEM_API Order order_like(const Layout& source);

/// Dense strides over source.shape that lay the elements out in the order NumPy's
/// ravel(`order`) reads them, so that copying `source` into memory with these strides and viewing
/// that memory as 1-d gives the ravel. C and F: dense strides in that order; A: in
/// order_like(source); K: NumPy's nditer order, in which axes are sorted by |stride| (a zero-stride
/// broadcast axis keeps its place in C order) and every axis is read from index 0 up, reversed ones
/// included. So for K a broadcast axis stays outermost where strides_like (NumPy's empty_like) puts
/// it innermost: shape (2, 3) strides (0, 8) ravels to the row twice. Errors: order not C/F/A/K,
/// overflow.
[[nodiscard]] DEVMEM_API Strides ravel_strides(const Layout& source, Order order);

/// Resolves a -1 in `new_shape` against `size` and checks the element count. Errors:
/// more than one -1 ("can only specify one unknown dimension"), other negative dimensions, a -1
/// that cannot be inferred, and a size mismatch ("cannot reshape array of size 1000 into shape
/// (3, 7)").
[[nodiscard]] DEVMEM_API Shape resolve_reshape(std::int64_t size,
                                               std::span<const std::int64_t> new_shape);

/// NumPy reshape without copying: the view layout, or nullopt when NumPy would have to copy.
/// `order` is C, F or A (A: F if the source is F- and not C-contiguous, else C). Never returns a
/// view that reorders elements (the Numba bug NVIDIA/numba-cuda-mlir#311).
[[nodiscard]] DEVMEM_API std::optional<Layout> reshape_view(const Layout& source,
                                                            std::span<const std::int64_t> new_shape,
                                                            Order order = Order::C);

/// 1-d view of all elements in `order` (C, F, A or K), or nullopt when a copy is required.
[[nodiscard]] DEVMEM_API std::optional<Layout> ravel_view(const Layout& source,
                                                          Order order = Order::C);

/// Python slicing of axis `dim` (negative dim counts from the end): the length is that of
/// `range(n)[slice]`. step == 0 and a bad dim throw InvalidArgument.
[[nodiscard]] DEVMEM_API Layout slice(const Layout& source, int dim, const Slice& s);
/// Integer indexing of axis `dim` (negative index counts from the end); removes that axis.
[[nodiscard]] DEVMEM_API Layout index(const Layout& source, int dim, std::int64_t i);

/// Reverses the axes (any ndim).
[[nodiscard]] DEVMEM_API Layout transpose(const Layout& source);
/// Permutes the axes: result axis k is source axis axes[k]. `axes` must be a permutation of
/// 0..ndim-1 (negative entries count from the end).
[[nodiscard]] DEVMEM_API Layout transpose(const Layout& source, std::span<const int> axes);

/// Removes all size-1 axes, or only `axis`, which must have size 1.
[[nodiscard]] DEVMEM_API Layout squeeze(const Layout& source, std::optional<int> axis = {});

/// Reinterprets the elements as items of `new_itemsize` bytes (NumPy `view(dtype)`): same itemsize
/// keeps shape and strides; otherwise the last axis must be contiguous (stride == itemsize) and
/// its byte length divisible by the new itemsize, and the last axis is rescaled.
[[nodiscard]] DEVMEM_API Layout view_as(const Layout& source, std::int64_t new_itemsize);

/// Splits a 1-d layout (any stride) into consecutive parts of `section` elements, the last one
/// smaller when `section` does not divide the size. An empty array gives no parts. Errors: ndim
/// != 1, section <= 0.
[[nodiscard]] DEVMEM_API std::vector<Layout> split(const Layout& source, std::int64_t section);

/// Broadcasts `source` to `shape` (NumPy rules: align trailing axes, size-1 axes stretch with
/// stride 0). Throws InvalidArgument when the shapes are incompatible.
[[nodiscard]] DEVMEM_API Layout broadcast_to(const Layout& source,
                                             std::span<const std::int64_t> shape,
                                             const char* operation = "broadcast_to");

/// Shapes equal after removing size-1 axes (the compatibility Numba uses for copies).
[[nodiscard]] DEVMEM_API bool same_squeezed_shape(std::span<const std::int64_t> a,
                                                  std::span<const std::int64_t> b);

/// How to copy an array between two layouts of the same shape and itemsize with as few, as large
/// 2-D block copies as possible. A block copies `height` rows of `width` bytes; row r of the block
/// starts at src + r * src_pitch and dst + r * dst_pitch. Blocks are repeated over `outer_shape`,
/// stepping by `outer_src_strides` / `outer_dst_strides`. All offsets are relative to the address
/// of element (0, ..., 0) of each side. Only the elements are written: bytes of the destination
/// between elements are never touched. Pitches are >= width, or the block has height 1.
struct DEVMEM_API CopyPlan {
  std::int64_t width = 0;
  std::int64_t height = 0;
  std::int64_t src_pitch = 0;
  std::int64_t dst_pitch = 0;
  std::int64_t src_offset = 0;  // added to every block (non-zero when negative axes were flipped)
  std::int64_t dst_offset = 0;
  Shape outer_shape;
  Strides outer_src_strides;
  Strides outer_dst_strides;

  /// No bytes to copy (some dimension is 0).
  [[nodiscard]] bool empty() const noexcept { return width == 0 || height == 0; }
  /// Number of blocks: the product of outer_shape (1 when it is empty).
  [[nodiscard]] std::int64_t block_count() const noexcept;
  /// Bytes the whole plan copies.
  [[nodiscard]] std::int64_t total_bytes() const noexcept { return block_count() * width * height; }

  /// Calls fn(src_offset, dst_offset) for every block, in row-major order of outer_shape.
  template <class Fn>
  void for_each_block(Fn&& fn) const {
    if (empty()) return;
    const std::size_t n = outer_shape.size();
    std::vector<std::int64_t> idx(n, 0);
    std::int64_t s = src_offset, d = dst_offset;
    for (;;) {
      fn(s, d);
      std::size_t k = n;
      for (; k > 0; --k) {
        const std::size_t a = k - 1;
        if (++idx[a] < outer_shape[a]) {
          s += outer_src_strides[a];
          d += outer_dst_strides[a];
          break;
        }
        s -= outer_src_strides[a] * (outer_shape[a] - 1);
        d -= outer_dst_strides[a] * (outer_shape[a] - 1);
        idx[a] = 0;
      }
      if (k == 0) return;
    }
  }
};

/// Plans a copy of `shape` elements of `itemsize` bytes from `src_strides` to `dst_strides`.
/// Source strides may be 0 (broadcast); destination strides must not be 0 on an axis longer than 1
/// (that would write one element several times) — InvalidArgument.
[[nodiscard]] DEVMEM_API CopyPlan plan_copy(std::span<const std::int64_t> shape,
                                            std::span<const std::int64_t> src_strides,
                                            std::span<const std::int64_t> dst_strides,
                                            std::int64_t itemsize);

/// Executes a plan with memcpy between two host-addressable pointers (the address of element
/// (0, ..., 0) on each side).
DEVMEM_API void copy_host_strided(const CopyPlan& plan, void* dst, const void* src) noexcept;

}  // namespace layout
}  // namespace devmem

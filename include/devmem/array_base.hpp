// Metadata and view operations shared by HostArray and DeviceArray. A view shares the memory of
// the array it came from; views of device arrays keep the stream (docs/arrays-and-copies.md#views).
#pragma once

#include <devmem/dtype.hpp>
#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <array>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

namespace devmem {

template <class Derived>
/// The metadata (shape, byte strides, dtype) and view operations of HostArray and DeviceArray
/// NumPy's and Numba's array attributes; every view shares its array's memory.
class ArrayBase {
 public:
  /// Length of each axis (NumPy's shape).
  [[nodiscard]] const Shape& shape() const noexcept { return layout_.shape; }
  /// The stride of each axis in bytes, as NumPy's and Numba's `strides` (not in elements, as
  /// std::mdspan's; ArrayView::stride_bytes(d) gives the same value inside a kernel).
  [[nodiscard]] const Strides& strides() const noexcept { return layout_.strides; }
  /// The element type (NumPy's dtype).
  [[nodiscard]] const DType& dtype() const noexcept { return dtype_; }
  /// Shape, byte strides and the byte offset of element 0 from the buffer's start.
  [[nodiscard]] const Layout& layout() const noexcept { return layout_; }
  /// Number of axes (0 for a scalar array).
  [[nodiscard]] int ndim() const noexcept { return layout_.ndim(); }
  /// Number of elements (1 for a 0-d array).
  [[nodiscard]] std::int64_t size() const noexcept { return layout_.size(); }
  /// size() * itemsize() (not the extent the elements span).
  [[nodiscard]] std::int64_t nbytes() const noexcept { return layout_.nbytes(); }
  /// Bytes per element.
  [[nodiscard]] std::int64_t itemsize() const noexcept { return dtype_.itemsize(); }
  /// NumPy's flags['C_CONTIGUOUS'] (size-1 axes ignore their stride).
  [[nodiscard]] bool is_c_contiguous() const noexcept { return layout_.is_c_contiguous(); }
  /// NumPy's flags['F_CONTIGUOUS'].
  [[nodiscard]] bool is_f_contiguous() const noexcept { return layout_.is_f_contiguous(); }
  /// Length of the first axis (InvalidArgument for a 0-d array).
  [[nodiscard]] std::int64_t len() const {
    if (layout_.shape.empty()) throw InvalidArgument("len: a 0-d array has no length");
    return layout_.shape.front();
  }

  /// Python slicing `[start:stop:step]` of axis `dim` (negative values count from the end).
  [[nodiscard]] Derived slice(int dim, std::optional<std::int64_t> start,
                              std::optional<std::int64_t> stop, std::int64_t step = 1) const {
    return derived().with_layout(layout::slice(layout_, dim, Slice{start, stop, step}), dtype_);
  }
  /// The same with a Slice value.
  [[nodiscard]] Derived slice(int dim, const Slice& s) const {
    return derived().with_layout(layout::slice(layout_, dim, s), dtype_);
  }
  /// Slices every leading axis at once: a[s0, s1, ...].
  [[nodiscard]] Derived slice(std::initializer_list<Slice> slices) const {
    Layout l = layout_;
    int dim = 0;
    for (const Slice& s : slices) l = layout::slice(l, dim++, s);
    return derived().with_layout(std::move(l), dtype_);
  }
  /// Integer index `i` of axis `dim`; the result has one axis less.
  [[nodiscard]] Derived index(int dim, std::int64_t i) const {
    return derived().with_layout(layout::index(layout_, dim, i), dtype_);
  }
  /// a[i]: index of the first axis.
  [[nodiscard]] Derived operator[](std::int64_t i) const { return index(0, i); }
  /// Reverses the axes (a view, any ndim).
  [[nodiscard]] Derived transpose() const {
    return derived().with_layout(layout::transpose(layout_), dtype_);
  }
  /// Permutes the axes: axis k of the result is axis axes[k] (NumPy's transpose(axes)).
  [[nodiscard]] Derived transpose(std::span<const int> axes) const {
    return derived().with_layout(layout::transpose(layout_, axes), dtype_);
  }
  /// The same, a.transpose({1, 0, 2}).
  [[nodiscard]] Derived transpose(std::initializer_list<int> axes) const {
    return transpose(std::span<const int>(axes.begin(), axes.size()));
  }
  /// Alias of transpose(), like NumPy's `.T`.
  [[nodiscard]] Derived T() const { return transpose(); }
  /// Removes all size-1 axes, or only `axis` (which must have size 1).
  [[nodiscard]] Derived squeeze(std::optional<int> axis = {}) const {
    return derived().with_layout(layout::squeeze(layout_, axis), dtype_);
  }
  /// Reinterprets the bytes as `dtype` (NumPy view rules for a different itemsize).
  [[nodiscard]] Derived view(const DType& dtype) const {
    return derived().with_layout(layout::view_as(layout_, dtype.itemsize()), dtype);
  }

 protected:
  ArrayBase() = default;
  ArrayBase(Layout layout, DType dtype) : layout_(std::move(layout)), dtype_(std::move(dtype)) {}
  [[nodiscard]] const Derived& derived() const noexcept {
    return static_cast<const Derived&>(*this);
  }
  /// Byte offset of the element at `indices` (bounds-checked) from the buffer start.
  [[nodiscard]] std::int64_t checked_offset(std::span<const std::int64_t> indices,
                                            const char* operation) const;

  Layout layout_;
  DType dtype_;
};

namespace detail {
/// Offset of an element after bounds checks; shared by both array kinds (defined in core/).
[[nodiscard]] DEVMEM_API std::int64_t checked_element_offset(const Layout& layout,
                                                             std::span<const std::int64_t> indices,
                                                             const char* operation);
/// Throws InvalidArgument unless `actual == expected`, naming the operation and both dtypes.
DEVMEM_API void check_dtype(const DType& expected, const DType& actual, const char* operation);
/// Throws InvalidArgument ("<operation>: <what> 0x... is not aligned to A bytes for dtype D")
/// unless `pointer` is a multiple of `dtype`'s alignment.
DEVMEM_API void check_pointer_alignment(const char* operation, const char* what,
                                        const void* pointer, const DType& dtype);
}  // namespace detail

template <class Derived>
std::int64_t ArrayBase<Derived>::checked_offset(std::span<const std::int64_t> indices,
                                                const char* operation) const {
  return detail::checked_element_offset(layout_, indices, operation);
}

}  // namespace devmem

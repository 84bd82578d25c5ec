// HostArray: an n-d array in host memory, owning its memory or viewing the user's.
//
// Kinds: Pageable (ordinary memory), Pinned (page-locked: faster and truly asynchronous
// transfers), Mapped (page-locked and mapped into the device address space: kernels read and
// write it directly; device_view() gives the DeviceArray of the same bytes).
//
// Copies of a HostArray share memory (it is a handle); copy() makes a deep copy.
// Thread safety: as for std::shared_ptr: distinct handles may be used concurrently; concurrent
// writes to the same elements are the caller's business.
#pragma once

#include <devmem/array_base.hpp>
#include <devmem/export.hpp>
#include <devmem/stream.hpp>

#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace devmem {

class DeviceArray;

/// What backs a HostArray: ordinary memory, page-locked memory, or page-locked memory mapped into
/// the device address space (Numba's pinned_array / mapped_array).
enum class HostMemoryKind { Pageable, Pinned, Mapped };
/// "pageable", "pinned" or "mapped".
[[nodiscard]] DEVMEM_API const char* to_string(HostMemoryKind kind) noexcept;

namespace detail {
struct HostMemory;
struct ArrayAccess;  // core/array_access.hpp
}  // namespace detail

class DEVMEM_API HostArray : public ArrayBase<HostArray> {
 public:
  /// An empty 1-d float64 array of size 0.
  HostArray();
  /// A new zero-filled pageable array.
  explicit HostArray(Shape shape, DType dtype = {}, Order order = Order::C);

  /// A non-owning view of user memory at `data` (the address of element (0, ..., 0)). `strides`
  /// empty means C-contiguous. `owner`, if given, is kept alive as long as any view exists.
  /// The memory must outlive all views and all asynchronous work using them.
  [[nodiscard]] static HostArray view(void* data, Shape shape, DType dtype, Strides strides = {},
                                      std::shared_ptr<const void> owner = {});
  /// A read-only view: writing into it (copy_to_host into it, fill) throws InvalidArgument.
  [[nodiscard]] static HostArray view(const void* data, Shape shape, DType dtype,
                                      Strides strides = {}, std::shared_ptr<const void> owner = {});
  /// 1-d view of a span, or a C/F-ordered view of it with `shape`.
  template <Element T>
  [[nodiscard]] static HostArray view(std::span<T> data) {
    return view(static_cast<void*>(data.data()), Shape{static_cast<std::int64_t>(data.size())},
                dtype_of<T>());
  }
  template <Element T>
  [[nodiscard]] static HostArray view(std::span<const T> data) {
    return view(static_cast<const void*>(data.data()),
                Shape{static_cast<std::int64_t>(data.size())}, dtype_of<T>());
  }
  template <class T>
    requires Element<std::remove_const_t<T>>
  [[nodiscard]] static HostArray view(std::span<T> data, const Shape& shape,
                                      Order order = Order::C) {
    return view_with_order(data.data(), data.size(), shape, dtype_of<std::remove_const_t<T>>(),
                           order, std::is_const_v<T>);
  }
  /// ArrayBase::view(DType): reinterpret the elements (the static view() overloads above would
  /// otherwise hide it).
  using ArrayBase<HostArray>::view;
  template <Element T>
  [[nodiscard]] static HostArray view(std::vector<T>& data) {
    return view(std::span<T>(data));
  }
  template <Element T>
  [[nodiscard]] static HostArray view(const std::vector<T>& data) {
    return view(std::span<const T>(data));
  }
  /// A new pageable 1-d array holding a copy of `values`.
  template <Element T>
  [[nodiscard]] static HostArray from(std::span<const T> values) {
    HostArray a(Shape{static_cast<std::int64_t>(values.size())}, dtype_of<T>());
    a.copy_from(view(values));
    return a;
  }
  template <Element T>
  [[nodiscard]] static HostArray from(const std::vector<T>& values) {
    return from(std::span<const T>(values));
  }

  [[nodiscard]] HostMemoryKind kind() const noexcept;
  [[nodiscard]] bool is_readonly() const noexcept;
  /// Address of element (0, ..., 0).
  [[nodiscard]] void* data() const noexcept;
  /// Typed address of element (0, ..., 0); InvalidArgument when T is not the dtype, or when the
  /// array has elements and that address is not a multiple of alignof(T) (a view of user memory
  /// or a view(DType) may be misaligned; a T* to it would be undefined behaviour).
  template <Element T>
  [[nodiscard]] T* data_as() const {
    detail::check_dtype(dtype_of<T>(), dtype_, "data_as");
    if (size() != 0) detail::check_pointer_alignment("data_as", "data pointer", data(), dtype_);
    return static_cast<T*>(data());
  }
  /// Reference to one element (bounds- and dtype-checked; InvalidArgument when its address is
  /// not a multiple of alignof(T), for the reason data_as() gives).
  template <Element T, std::integral... I>
  [[nodiscard]] T& at(I... indices) const {
    detail::check_dtype(dtype_of<T>(), dtype_, "at");
    const std::array<std::int64_t, sizeof...(I)> idx{static_cast<std::int64_t>(indices)...};
    std::byte* const element = base() + checked_offset(idx, "at");
    detail::check_pointer_alignment("at", "element address", element, dtype_);
    return *reinterpret_cast<T*>(element);
  }
  /// Sets every element to `value` (dtype-checked).
  template <Element T>
  void fill(const T& value) const {
    detail::check_dtype(dtype_of<T>(), dtype_, "fill");
    fill_bytes(&value);
  }
  /// The elements in C order.
  template <Element T>
  [[nodiscard]] std::vector<T> to_vector() const {
    detail::check_dtype(dtype_of<T>(), dtype_, "to_vector");
    const auto n = static_cast<std::size_t>(size());
    if constexpr (std::is_same_v<T, bool>) {
      // std::vector<bool> has no contiguous storage to copy into.
      const std::unique_ptr<bool[]> staging(new bool[n]);
      view(std::span<bool>(staging.get(), n), shape()).copy_from(*this);
      return std::vector<bool>(staging.get(), staging.get() + n);
    } else {
      std::vector<T> out(n);
      view(std::span<T>(out), shape()).copy_from(*this);
      return out;
    }
  }
  /// Copies the elements of `source` (same dtype, same shape after removing size-1 axes) into
  /// this array, whatever the strides of either side.
  void copy_from(const HostArray& source) const;
  /// A deep dense copy in pageable memory, in NumPy's copy(order) layout: C, F, A (F when F- and
  /// not C-contiguous, else C) or K (empty_like(order='K'): axis order by |stride|, positive
  /// strides, broadcast axes innermost and stored in full).
  [[nodiscard]] HostArray copy(Order order = Order::K) const;
  /// NumPy reshape: a view when possible, otherwise a copy.
  [[nodiscard]] HostArray reshape(Shape shape, Order order = Order::C) const;
  /// NumPy ravel: always a C-contiguous 1-d array (strides (itemsize,)) of the elements in `order`
  /// (C, F, A or K, as DeviceArray::ravel). A view exactly when NumPy's ravel is one, otherwise a
  /// new pageable array; never a strided view. InvalidArgument for another order.
  [[nodiscard]] HostArray ravel(Order order = Order::C) const;

  /// The device view of mapped memory (Mapped arrays, or memory inside a mapped() scope is
  /// returned by the scope instead). InvalidArgument for other kinds.
  [[nodiscard]] DeviceArray device_view(const Stream& stream) const;
  [[nodiscard]] DeviceArray device_view() const;

  /// The memory this array views, as an opaque owner: holding it keeps the memory alive, and two
  /// arrays view the same allocation exactly when their owners compare equal. Null for an array
  /// without memory. Thread safe.
  [[nodiscard]] std::shared_ptr<const void> owner() const noexcept { return memory_; }

 private:
  friend class ArrayBase<HostArray>;
  friend struct detail::ArrayAccess;
  HostArray(std::shared_ptr<detail::HostMemory> memory, Layout layout, DType dtype);
  [[nodiscard]] const std::shared_ptr<detail::HostMemory>& memory() const noexcept {
    return memory_;
  }
  [[nodiscard]] HostArray with_layout(Layout layout, DType dtype) const {
    return HostArray(memory_, std::move(layout), std::move(dtype));
  }
  [[nodiscard]] std::byte* base() const noexcept;
  void fill_bytes(const void* value) const;
  static HostArray view_with_order(const void* data, std::size_t count,
                                   std::span<const std::int64_t> shape, DType dtype, Order order,
                                   bool readonly);

  std::shared_ptr<detail::HostMemory> memory_;
};

/// The host array made by mapped_array(): pinned, device-mapped memory, plus the stream its device
/// view uses.
class DEVMEM_API MappedArray : public HostArray {
 public:
  MappedArray(HostArray host, Stream stream);
  /// The DeviceArray of the same bytes (on the mapped array's stream).
  [[nodiscard]] DeviceArray device() const;
  [[nodiscard]] const Stream& stream() const noexcept { return stream_; }

 private:
  Stream stream_;
};

}  // namespace devmem

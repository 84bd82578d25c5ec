// DeviceArray: an n-d array in device memory (Numba's DeviceNDArray), and DeviceRecord<T>, one
// structured value on the device.
//
// A DeviceArray is a handle: copies and views share the memory, which is released (through the
// context's deallocation path) when the last handle goes away and the streams using it are done.
// Every array remembers the stream it was made on; methods called without a stream use it. Work on
// the default stream completes before the method returns; on another stream it is asynchronous
// and host buffers involved must stay untouched until the stream is synchronized (buffers devmem
// allocates itself are kept alive automatically).
//
// Errors: InvalidArgument for bad arguments (messages name the method and the values),
// OutOfMemory, BackendError for vendor failures.
// Thread safety: distinct handles may be used from several threads; operations on the same
// elements from several threads need the caller's ordering (streams, events).
#pragma once

#include <devmem/array_base.hpp>
#include <devmem/array_view.hpp>
#include <devmem/export.hpp>
#include <devmem/host_array.hpp>
#include <devmem/stream.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <ranges>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

struct DLManagedTensor;  // <dlpack/dlpack.h>

namespace devmem {

struct ArrayInterface;  // <devmem/interop.hpp>
class IpcHandle;        // <devmem/ipc.hpp>

namespace detail {
struct DeviceMemory;
struct ArrayAccess;  // core/array_access.hpp
/// Throws InvalidArgument unless an array of `dtype` with `layout` whose element 0 is at `data`
/// can be viewed as ArrayView<`expected`, `rank`>: same dtype, `rank` dimensions, and (when it has
/// elements) `data` and every stride of an axis longer than 1 multiples of the alignment. The
/// message names the view and the offending values.
DEVMEM_API void check_view(const DType& expected, std::size_t rank, const DType& dtype,
                           const Layout& layout, const void* data);
/// What a view made of `memory` carries (see ArrayView): the allocation's generation (0 when
/// devmem did not allocate it) and whether it is device memory that host code may not index.
struct ViewOrigin {
  std::uint64_t generation = 0;
  bool device_memory = false;
};
[[nodiscard]] DEVMEM_API ViewOrigin view_origin(const DeviceMemory* memory) noexcept;

/// A contiguous, sized range of elements (std::vector, std::array, std::span, a C array, ...),
/// const or not: what the copies and to_device accept besides arrays.
template <class R>
concept ElementRange = std::ranges::contiguous_range<R> && std::ranges::sized_range<R> &&
                       Element<std::remove_cv_t<std::ranges::range_value_t<R>>>;
/// An ElementRange whose elements may be written (a copy's destination).
template <class R>
concept WritableElementRange = ElementRange<R> && !
std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

/// A 1-d host view of `range`'s elements (read-only for a range of const elements).
template <ElementRange R>
[[nodiscard]] HostArray view_range(R&& range) {
  using Value = std::remove_reference_t<std::ranges::range_reference_t<R>>;
  return HostArray::view(std::span<Value>(std::ranges::data(range),
                                          static_cast<std::size_t>(std::ranges::size(range))));
}

/// InvalidArgument unless a range of `count` elements fills an array of `size` elements:
/// "copy_to_host: the destination range has 3 elements, the array has 4".
inline void check_range_size(const char* operation, const char* side, std::size_t count,
                             std::int64_t size) {
  if (static_cast<std::int64_t>(count) != size) {
    throw InvalidArgument(std::string(operation) + ": the " + side + " range has " +
                          std::to_string(count) + " elements, the array has " +
                          std::to_string(size));
  }
}
}  // namespace detail

/// An n-d array in device memory (Numba's DeviceNDArray). A shared handle: copies and views share
/// the memory, which goes to the deferred-deallocation queue after the last one (and its queued
/// work) is gone. Methods may be called from several threads; writes to the same elements race.
class DEVMEM_API DeviceArray : public ArrayBase<DeviceArray> {
 public:
  /// An empty 1-d float64 array of size 0 (no device memory, no context needed).
  DeviceArray();

  /// Address of element (0, ..., 0) in the device address space (nullptr for size 0 arrays).
  [[nodiscard]] void* data() const noexcept;
  /// The stream this array's methods use by default.
  [[nodiscard]] const Stream& stream() const noexcept { return stream_; }
  /// The context (device) the memory belongs to; null for an empty default-constructed array.
  [[nodiscard]] std::shared_ptr<Context> context() const;
  /// The context of the memory this array views, without a reference of its own: it stays valid
  /// while this array, or another holder of its owner(), lives. Null for an array without memory
  /// (default-constructed). For loops of small operations that would otherwise pay context()'s
  /// reference count (two atomic operations) per call. Thread safe.
  [[nodiscard]] Context* memory_context() const noexcept;
  /// Bytes of device memory the elements span (Numba's alloc_size).
  [[nodiscard]] std::int64_t alloc_size() const noexcept { return layout_.byte_extent().bytes(); }
  /// The same array using `stream` by default (Numba's bind).
  [[nodiscard]] DeviceArray bind(const Stream& stream) const;

  // Transfers. A stream left unspecified means the array's stream. When a transfer returns
  // (every backend, any stream, as CUDA and HIP document for pageable memory):
  //  - into pageable host memory: the data is there (the call waits for the stream);
  //  - from pageable host memory: the source has been read (it may be reused at once), while the
  //    device side may still be in flight on a non-default stream;
  //  - to or from page-locked memory (pinned_array, mapped_array, pinned/registered scopes) on a
  //    non-default stream: nothing is waited for; synchronize the stream (or an event) before
  //    reading or reusing the host side;
  //  - on the default stream: complete.
  // Numba behaves the same for pageable memory; for pinned memory with a stream it is asynchronous
  // too.
  /// A new pageable host array with the same shape and dense strides in the same axis order
  /// (layout::strides_like, NumPy's empty_like(order='K'): reversed axes get positive strides,
  /// broadcast axes are stored in full, innermost) (Numba's copy_to_host(), which keeps the device
  /// strides instead). Returns with the data ready, on any stream.
  [[nodiscard]] HostArray copy_to_host(const Stream& stream = {}) const;
  /// Copies into `destination` (same dtype, same shape after removing size-1 axes; Numba's
  /// copy_to_host(ary)). Only the destination's elements are written, whatever its strides.
  /// Returns with the data ready for a pageable destination; a page-locked one is written
  /// asynchronously on a non-default stream.
  void copy_to_host(const HostArray& destination, const Stream& stream = {}) const;
  /// Copies into a contiguous range of exactly size() elements in C order (std::vector,
  /// std::array, std::span, ...; not a range of const elements, which does not compile). Throws
  /// InvalidArgument for another number of elements ("copy_to_host: the destination range has 3
  /// elements, the array has 4") or another element type than the dtype.
  template <class R>
    requires detail::WritableElementRange<R>
  void copy_to_host(R&& destination, const Stream& stream = {}) const {
    detail::check_range_size("copy_to_host", "destination",
                             static_cast<std::size_t>(std::ranges::size(destination)), size());
    copy_to_host(detail::view_range(destination).reshape(shape()), stream);
  }
  /// Copies host data into this array (H2D; Numba's copy_to_device); same dtype and shape rules.
  /// A pageable source has been read when the call returns; a page-locked one is read
  /// asynchronously on a non-default stream.
  void copy_to_device(const HostArray& source, const Stream& stream = {}) const;
  /// Copies from a contiguous range of exactly size() elements in C order (std::vector,
  /// std::array, std::span of const or non-const elements, ...). Throws InvalidArgument for
  /// another number of elements ("copy_to_device: the source range has 3 elements, the array has
  /// 4") or another element type than the dtype.
  template <class R>
    requires detail::ElementRange<R>
  void copy_to_device(R&& source, const Stream& stream = {}) const {
    detail::check_range_size("copy_to_device", "source",
                             static_cast<std::size_t>(std::ranges::size(source)), size());
    copy_to_device(detail::view_range(source).reshape(shape()), stream);
  }
  /// Copies another device array into this one (D2D), any strides, overlapping memory allowed.
  void copy_to_device(const DeviceArray& source, const Stream& stream = {}) const;
  /// The elements in C order as a std::vector (no Numba equivalent; copy_to_host().tolist()).
  /// Returns with the data ready, exactly as copy_to_host() does (it is copy_to_host() into
  /// pageable memory). InvalidArgument when T is not the array's dtype.
  template <Element T>
  [[nodiscard]] std::vector<T> to_vector(const Stream& stream = {}) const {
    detail::check_dtype(dtype_of<T>(), dtype_, "to_vector");
    return copy_to_host(stream).to_vector<T>();
  }

  // Shape changes: views where the memory allows, otherwise a copy on the stream.
  /// NumPy reshape; one dimension may be -1. Never a view that reorders elements.
  [[nodiscard]] DeviceArray reshape(Shape shape, Order order = Order::C,
                                    const Stream& stream = {}) const;
  /// NumPy ravel: always a C-contiguous 1-d array (strides (itemsize,)) of the elements in `order`:
  /// C, F, A (F when F- and not C-contiguous, else C) or K (NumPy's memory order: axes by |stride|,
  /// a broadcast axis where C order has it, every axis, reversed ones too, read from index 0 up).
  /// A view of the same memory exactly when NumPy's ravel is one (the elements already lie
  /// contiguously in that order), otherwise a new array filled on the stream. Either way the result
  /// has the stream `stream`, or this array's. Numba's ravel returns the same views but raises
  /// NotImplementedError("ravel on non-contiguous array") (and rejects K) where this copies; never
  /// a strided view, which reshape({size()}) may return. Errors: InvalidArgument for another order;
  /// allocation errors when it copies.
  [[nodiscard]] DeviceArray ravel(Order order = Order::C, const Stream& stream = {}) const;
  /// Consecutive views of `section` elements (the last smaller); 1-d arrays only.
  [[nodiscard]] std::vector<DeviceArray> split(std::int64_t section,
                                               const Stream& stream = {}) const;
  /// A new dense copy on the device: C, F, A (F when F- and not C-contiguous, else C) or K, NumPy's
  /// copy(order='K') = empty_like(order='K') layout: the source's axis order by |stride| with
  /// positive strides, and broadcast (zero-stride) axes innermost, so every element is stored
  /// once per index. The values at each index are the source's; only ravel(K) follows NumPy's
  /// memory-order reading (a broadcast axis stays in place), so ravel(K) != copy(K).ravel(K) for
  /// broadcast sources, as in NumPy.
  [[nodiscard]] DeviceArray copy(Order order = Order::K, const Stream& stream = {}) const;

  // Element access.
  /// Reads one element to the host (synchronizes the stream used).
  template <Element T, std::integral... I>
  [[nodiscard]] T item(I... indices) const {
    detail::check_dtype(dtype_of<T>(), dtype_, "item");
    const std::array<std::int64_t, sizeof...(I)> idx{static_cast<std::int64_t>(indices)...};
    T value;
    read_element(idx, &value);
    return value;
  }
  /// Reads the element at `index` (one index per axis, negative ones counting from the end, as
  /// NumPy) into `destination`, exactly itemsize() bytes of host memory, on `stream` (unspecified:
  /// the array's), and returns when the bytes are there (it synchronizes that stream): the untyped
  /// item(), for any dtype (records, strings, float16), and the one-element read behind the Python
  /// package's `d[i, j]`: one copy of itemsize() bytes, no view or host array made.
  /// Throws InvalidArgument for a wrong number of indices, an index out of bounds ("item: index 3
  /// is out of bounds for axis 0 with size 3"), a destination of another size, or during a
  /// capture of `stream` (`destination` is pageable memory). Thread safe.
  void item_bytes(std::span<const std::int64_t> index, std::span<std::byte> destination,
                  const Stream& stream = {}) const;
  /// Writes one element from the host.
  template <Element T, std::integral... I>
  void set_item(const T& value, I... indices) const {
    detail::check_dtype(dtype_of<T>(), dtype_, "set_item");
    const std::array<std::int64_t, sizeof...(I)> idx{static_cast<std::int64_t>(indices)...};
    write_element(idx, &value);
  }
  /// Sets every element to `value` (dtype-checked).
  template <Element T>
  void fill(const T& value, const Stream& stream = {}) const {
    detail::check_dtype(dtype_of<T>(), dtype_, "fill");
    fill_bytes(&value, stream);
  }
  /// Sets every byte of every element to `byte_value` (0..255).
  void memset(int byte_value, const Stream& stream = {}) const;
  /// Assigns host data with NumPy broadcasting (Numba's `ary[...] = value`): `value` may have
  /// fewer axes and size-1 axes that stretch.
  void assign(const HostArray& value, const Stream& stream = {}) const;

  // Kernel side (<devmem/kernel.hpp>).
  using ArrayBase<DeviceArray>::view;
  /// The view a kernel indexes: element type `T` (const for read-only) and `Rank` dimensions.
  /// Throws InvalidArgument when dtype_of<T>() is not the array's dtype, Rank is not ndim(), or,
  /// for an array with elements, data() is not a multiple of alignof(T) or the byte stride of an
  /// axis longer than 1 is not ("DeviceArray::view<float32, 2>: byte stride 6 of axis 0 is not a
  /// multiple of the alignment 4 of dtype float32"). A GPU faults on a misaligned typed access;
  /// such layouts come from odd strides given to device_array or an import, or from view(DType).
  /// Copies of a misaligned array work (they move bytes); only the typed view is refused.
  /// The view does not keep the memory alive; devmem::launch keeps it alive for the kernel (it
  /// finds the memory by the view's address).
  template <class T, std::size_t Rank>
    requires Element<std::remove_const_t<T>>
  [[nodiscard]] ArrayView<T, Rank> view() const {
    detail::check_view(dtype_of<std::remove_const_t<T>>(), Rank, dtype_, layout_, data());
    const detail::ViewOrigin origin = detail::view_origin(memory_.get());
    return detail::ViewAccess::make<T, Rank>(static_cast<T*>(data()), layout_.shape.data(),
                                             layout_.strides.data(), origin.generation,
                                             origin.device_memory);
  }

  // Interop (<devmem/interop.hpp> has the rules and the consumer side).
  /// The CUDA Array Interface (v3) of this array: no copy, no synchronisation.
  [[nodiscard]] ArrayInterface array_interface() const;
  /// A DLPack tensor viewing this array; its deleter keeps the array alive until it is called.
  [[nodiscard]] DLManagedTensor* to_dlpack() const;
  /// A handle other processes open to share this array's memory (Numba's get_ipc_handle();
  /// <devmem/ipc.hpp>, devmem::ipc_handle(array)).
  [[nodiscard]] IpcHandle ipc_handle() const;

  /// States that work devmem does not see uses this array's memory on `stream`: a kernel of the
  /// application's own on data() or a view<T, Rank>(), a consumer of array_interface() or
  /// to_dlpack() working on its stream. The memory is then not released (freed, or handed back to
  /// a memory manager's pool for another array) before the work enqueued on `stream` up to this
  /// call has completed, even if every DeviceArray viewing it is destroyed first. This is the
  /// stream-ordered rule every manager follows for devmem's own operations (copies, fills,
  /// launch), which record their uses themselves. Throws InvalidArgument for an unspecified
  /// stream. Thread safe.
  void record_use(const Stream& stream) const;

  /// The memory this array views, as an opaque owner: holding it keeps the memory alive (an
  /// exporter that hands the data to foreign code keeps it for as long as that code may use it),
  /// and two arrays view the same allocation exactly when their owners compare equal. Null for an
  /// array without memory (default-constructed). Thread safe.
  [[nodiscard]] std::shared_ptr<const void> owner() const noexcept { return memory_; }

 private:
  friend class ArrayBase<DeviceArray>;
  friend struct detail::ArrayAccess;
  DeviceArray(std::shared_ptr<detail::DeviceMemory> memory, Layout layout, DType dtype,
              Stream stream);
  [[nodiscard]] const std::shared_ptr<detail::DeviceMemory>& memory() const noexcept {
    return memory_;
  }
  [[nodiscard]] DeviceArray with_layout(Layout layout, DType dtype) const {
    return DeviceArray(memory_, std::move(layout), std::move(dtype), stream_);
  }
  [[nodiscard]] Stream resolve(const Stream& stream) const;
  void read_element(std::span<const std::int64_t> index, void* value) const;
  void write_element(std::span<const std::int64_t> index, const void* value) const;
  void fill_bytes(const void* value, const Stream& stream) const;

  std::shared_ptr<detail::DeviceMemory> memory_;
  Stream stream_;
};

/// One value of a trivially copyable type on the device (Numba's DeviceRecord): a 0-d DeviceArray
/// of dtype_of<T>(). Made by to_device(value) or from an existing 0-d array. A stream left
/// unspecified means the record's. Errors: InvalidArgument (a stream of another device, a wrong
/// array), BackendError. Thread safety: as DeviceArray.
template <Element T>
class DeviceRecord {
 public:
  /// Wraps a 0-d array of dtype_of<T>() (InvalidArgument otherwise); shares its memory.
  explicit DeviceRecord(DeviceArray array) : array_(std::move(array)) {
    detail::check_dtype(dtype_of<T>(), array_.dtype(), "DeviceRecord");
    if (array_.ndim() != 0) throw InvalidArgument("DeviceRecord: the array must be 0-d");
  }
  /// Copies the value to the host and returns it, after waiting for the stream used (so errors
  /// of earlier work on it are reported here too).
  [[nodiscard]] T get(const Stream& stream = {}) const {
    T value;
    copy_to_host(value, stream);
    (stream.is_specified() ? stream : array_.stream()).synchronize();
    return value;
  }
  /// Copies `value` to the device and waits for the stream used: the copy has reached the device
  /// when it returns.
  void set(const T& value, const Stream& stream = {}) const {
    copy_to_device(value, stream);
    (stream.is_specified() ? stream : array_.stream()).synchronize();
  }
  /// Numba's copy_to_host() without a destination: get(stream).
  [[nodiscard]] T copy_to_host(const Stream& stream = {}) const { return get(stream); }
  /// Copies the value into `destination` (Numba's copy_to_host(ary, stream)). The rules of
  /// DeviceArray::copy_to_host(destination): for ordinary (pageable) memory the value is there
  /// when the call returns; a `destination` inside page-locked memory is written asynchronously
  /// on a non-default stream.
  void copy_to_host(T& destination, const Stream& stream = {}) const {
    array_.copy_to_host(HostArray::view(static_cast<void*>(&destination), Shape{}, array_.dtype()),
                        stream);
  }
  /// Copies `value` to the device (Numba's copy_to_device), by DeviceArray::copy_to_device's
  /// rules: a `value` in pageable memory has been read when the call returns (it may change
  /// at once), while the device side may still be in flight on a non-default stream (set() waits
  /// for it).
  void copy_to_device(const T& value, const Stream& stream = {}) const {
    array_.copy_to_device(
        HostArray::view(static_cast<const void*>(&value), Shape{}, array_.dtype()), stream);
  }
  /// The 0-d array holding the value.
  [[nodiscard]] const DeviceArray& array() const noexcept { return array_; }
  /// The value's device address.
  [[nodiscard]] void* data() const noexcept { return array_.data(); }
  /// dtype_of<T>().
  [[nodiscard]] const DType& dtype() const noexcept { return array_.dtype(); }
  /// The stream the record's methods use by default.
  [[nodiscard]] const Stream& stream() const noexcept { return array_.stream(); }

 private:
  DeviceArray array_;
};

}  // namespace devmem

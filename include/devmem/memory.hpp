// Allocation, transfer and host-memory functions (Numba's cuda.device_array, to_device,
// pinned_array, mapped_array, pinned, mapped, and roc.register / roc.deregister).
//
// A stream left unspecified means the default stream; work on it completes before returning.
// Errors: InvalidArgument for bad arguments, OutOfMemory when an allocation fails, BackendError
// for vendor failures, NoDevice without a device. Thread safety: all functions may be called
// from several threads at once.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/export.hpp>
#include <devmem/host_array.hpp>
#include <devmem/stream.hpp>

#include <concepts>
#include <initializer_list>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

namespace devmem {

// ---- Device allocation ----

/// Uninitialised device memory for `shape` elements of `dtype`. `strides` (bytes) empty means
/// dense in `order` (C or F). The array's stream is `stream`.
[[nodiscard]] DEVMEM_API DeviceArray device_array(Shape shape, DType dtype = {},
                                                  Strides strides = {}, Order order = Order::C,
                                                  const Stream& stream = {});
/// The same for elements of type T: device_array<float>({n}) (Numba's device_array(n, np.float32)).
template <Element T>
[[nodiscard]] DeviceArray device_array(Shape shape, Order order = Order::C,
                                       const Stream& stream = {}) {
  return device_array(std::move(shape), dtype_of<T>(), {}, order, stream);
}
/// The same in C order on `stream`: device_array<float>({n}, stream) (Numba's
/// device_array(n, np.float32, stream=stream)); the allocation is ordered on the stream as above.
template <Element T>
[[nodiscard]] DeviceArray device_array(Shape shape, const Stream& stream) {
  return device_array(std::move(shape), dtype_of<T>(), {}, Order::C, stream);
}
/// Same shape and dtype as `like`; its strides when it is C- or F-contiguous, otherwise dense
/// strides in its axis order (layout::strides_like, NumPy's empty_like with order K: axes sorted
/// by |stride|, broadcast axes innermost). Numba sorts the signed strides, so there a reversed axis
/// becomes the innermost one; here it keeps its place, as in NumPy.
[[nodiscard]] DEVMEM_API DeviceArray device_array_like(const DeviceArray& like,
                                                       const Stream& stream = {});
/// The same for a host array (Numba's device_array_like(ary) of a NumPy array).
[[nodiscard]] DEVMEM_API DeviceArray device_array_like(const HostArray& like,
                                                       const Stream& stream = {});

// ---- Host to device ----

/// Copies `source` to a new device array (dense, in the source's axis order: the strides of
/// device_array_like; a reversed axis gets a positive stride and a broadcast axis is stored in
/// full). Numba's to_device keeps the source's strides and raises for a source that is not
/// contiguous once its broadcast axes are removed; this copies any source. With copy = false
/// the array is allocated but not filled. With `to`, copies into that array instead (shape and
/// dtype must match) and returns it.
[[nodiscard]] DEVMEM_API DeviceArray to_device(const HostArray& source, const Stream& stream = {},
                                               bool copy = true, const DeviceArray* to = nullptr);
/// to_device of a contiguous range of elements (std::vector, std::array, std::span, const or not):
/// a 1-d array of its size.
template <class R>
  requires detail::ElementRange<R>
[[nodiscard]] DeviceArray to_device(R&& source, const Stream& stream = {}, bool copy = true,
                                    const DeviceArray* to = nullptr) {
  return to_device(detail::view_range(source), stream, copy, to);
}

/// The options of to_device, as named fields (Numba's stream, copy and to): the preferred form,
/// to_device(source, {.stream = s, .copy = false}), beside the positional one.
struct ToDeviceOptions {
  /// The stream of the copy (and of a new array); the default stream when unspecified, on which
  /// the copy has completed when to_device returns.
  Stream stream = {};
  /// False: allocate without copying (a new array or record is uninitialised; with `to`, nothing
  /// is copied).
  bool copy = true;
  /// Copies into this existing device array and returns it (sharing its memory) instead of
  /// allocating one: shape and dtype must match the source (InvalidArgument otherwise). For a
  /// record (to_device of a value of type T), a 0-d array of dtype_of<T>(), e.g.
  /// &record.array() (InvalidArgument otherwise).
  const DeviceArray* to = nullptr;
};

/// to_device(source, options.stream, options.copy, options.to): copies `source` to a new device
/// array, or into options.to, by the rules above; the same errors (InvalidArgument, OutOfMemory,
/// BackendError). A template only so that to_device(source, {}) keeps meaning the stream
/// overload: write to_device(source, ToDeviceOptions{...}) or to_device(source, {.copy = ...}).
template <class Options = ToDeviceOptions>
  requires std::same_as<Options, ToDeviceOptions>
[[nodiscard]] DeviceArray to_device(const HostArray& source, const Options& options) {
  return to_device(source, options.stream, options.copy, options.to);
}
/// to_device of a contiguous range of elements with options: a 1-d array of its size.
template <class R, class Options = ToDeviceOptions>
  requires(detail::ElementRange<R> && std::same_as<Options, ToDeviceOptions>)
[[nodiscard]] DeviceArray to_device(R&& source, const Options& options) {
  return to_device(detail::view_range(source), options.stream, options.copy, options.to);
}

/// Copies one value to a new DeviceRecord on `stream` (Numba's to_device of a record or scalar).
/// A contiguous range of elements (std::array, std::span) is not a value here: it becomes a 1-d
/// array by the range overload above, as a NumPy array does in Numba.
/// With copy = false the record is allocated but not filled (uninitialised, like device_array).
/// With `to`, copies into that record instead (not at all with copy = false) and returns it,
/// sharing its memory; its dtype is T's by construction. The copy waits for the stream (as
/// DeviceRecord::set does), so `value` may be a temporary; Numba's copy on a stream is
/// asynchronous (use DeviceRecord::copy_to_device for that). Errors as the array overloads:
/// InvalidArgument when `stream` belongs to another device than `to` ("copy_to_device: the stream
/// belongs to device 1 ..."), OutOfMemory, BackendError.
template <Element T>
  requires(!detail::ElementRange<const T&>)
[[nodiscard]] DeviceRecord<T> to_device(const T& value, const Stream& stream = {}, bool copy = true,
                                        const std::type_identity_t<DeviceRecord<T>>* to = nullptr) {
  if (to != nullptr) {
    if (copy) to->set(value, stream);
    return *to;
  }
  DeviceRecord<T> record(device_array(Shape{}, dtype_of<T>(), {}, Order::C, stream));
  if (copy) record.set(value, stream);
  return record;
}
/// to_device of one value with options (see ToDeviceOptions): a new DeviceRecord, or options.to
/// (a 0-d array of dtype_of<T>(); InvalidArgument otherwise) filled with `value` and returned as a
/// record sharing its memory. Errors as the positional form.
template <Element T, class Options = ToDeviceOptions>
  requires(!detail::ElementRange<const T&> && std::same_as<Options, ToDeviceOptions>)
[[nodiscard]] DeviceRecord<T> to_device(const T& value, const Options& options) {
  if (options.to == nullptr) return to_device(value, options.stream, options.copy);
  const DeviceRecord<T> to(*options.to);
  return to_device(value, options.stream, options.copy, &to);
}

// ---- Page-locked host memory ----

/// Page-locked (pinned) host memory (Numba's pinned_array): faster transfers, truly asynchronous
/// on a non-default stream (synchronize before reading what a copy writes into it).
[[nodiscard]] DEVMEM_API HostArray pinned_array(Shape shape, DType dtype = {}, Strides strides = {},
                                                Order order = Order::C);
/// The same for elements of type T (Numba's pinned_array(shape, dtype)).
template <Element T>
[[nodiscard]] HostArray pinned_array(Shape shape, Order order = Order::C) {
  return pinned_array(std::move(shape), dtype_of<T>(), {}, order);
}
/// Pinned host memory mapped into the device address space. `portable` and `wc`
/// (write-combined) are passed to the vendor allocation. The preferred form names them:
/// mapped_array(shape, dtype, MappedArrayOptions{.portable = true}).
[[nodiscard]] DEVMEM_API MappedArray mapped_array(Shape shape, DType dtype = {},
                                                  Strides strides = {}, Order order = Order::C,
                                                  const Stream& stream = {}, bool portable = false,
                                                  bool wc = false);
/// The same for elements of type T (Numba's mapped_array(shape, dtype)).
template <Element T>
[[nodiscard]] MappedArray mapped_array(Shape shape, Order order = Order::C,
                                       const Stream& stream = {}) {
  return mapped_array(std::move(shape), dtype_of<T>(), {}, order, stream);
}

/// The options of mapped_array, as named fields (Numba's strides, order, stream, portable, wc).
struct MappedArrayOptions {
  /// Byte strides; empty means dense in `order`.
  Strides strides = {};
  /// C or F: the dense layout when `strides` is empty.
  Order order = Order::C;
  /// The stream of the device view (MappedArray::device()); the default stream when unspecified.
  Stream stream = {};
  /// Usable by every context, not only the current one (cudaHostAllocPortable).
  bool portable = false;
  /// Write-combined: faster for the device to read and the host to write, very slow for the host
  /// to read (cudaHostAllocWriteCombined).
  bool wc = false;
};
/// mapped_array(shape, dtype, options.strides, options.order, options.stream, options.portable,
/// options.wc): pinned, device-mapped host memory. InvalidArgument for a bad shape, strides or
/// order, OutOfMemory, BackendError (also where the device cannot map host memory), NoDevice.
/// mapped_array(shape, dtype, {}) means the same as before this overload existed (the
/// initializer-list overload below takes it). g++ 12 also tries a designated list such as
/// {.portable = true, .wc = true} against the positional form's Strides parameter (it ignores
/// the designators there) and reports the call as ambiguous instead of choosing this overload:
/// name the type there, mapped_array(shape, dtype, MappedArrayOptions{.portable = true}). clang
/// takes both spellings.
[[nodiscard]] inline MappedArray mapped_array(Shape shape, DType dtype,
                                              const MappedArrayOptions& options) {
  return mapped_array(std::move(shape), std::move(dtype), options.strides, options.order,
                      options.stream, options.portable, options.wc);
}
/// The positional form with the strides given as a braced list, mapped_array(shape, dtype,
/// {16, 8}) or {} (empty: dense in `order`): what such calls meant before the MappedArrayOptions
/// overload existed, now without a tie between Strides and MappedArrayOptions. Errors as the
/// positional form.
[[nodiscard]] inline MappedArray mapped_array(Shape shape, DType dtype,
                                              std::initializer_list<std::int64_t> strides,
                                              Order order = Order::C, const Stream& stream = {},
                                              bool portable = false, bool wc = false) {
  return mapped_array(std::move(shape), std::move(dtype), Strides(strides), order, stream, portable,
                      wc);
}
/// The same for elements of type T: mapped_array<float>({n}, {.portable = true}).
template <Element T>
[[nodiscard]] MappedArray mapped_array(Shape shape, const MappedArrayOptions& options) {
  return mapped_array(std::move(shape), dtype_of<T>(), options);
}

// ---- Scopes over existing host memory ----

/// Page-locks the memory of existing host arrays for the scope's lifetime (Numba's
/// `with cuda.pinned(*arrays)`). Unlocks immediately at scope exit, never through the deferred
/// queue, so the same memory can be pinned again right away. Move-only.
class [[nodiscard]] DEVMEM_API PinnedScope {
 public:
  /// Registers every array's memory with `flags` (use pinned(), registered() or mapped());
  /// `operation` names the caller in errors. On a failure nothing stays registered.
  PinnedScope(std::vector<HostArray> arrays, HostRegisterFlags flags, const char* operation);
  /// The moved-from scope unregisters nothing.
  PinnedScope(PinnedScope&& other) noexcept;
  PinnedScope& operator=(PinnedScope&&) = delete;
  PinnedScope(const PinnedScope&) = delete;
  PinnedScope& operator=(const PinnedScope&) = delete;
  /// Waits for the copies and kernels devmem enqueued that still use the memory (on any stream:
  /// unregistering memory a DMA or kernel still touches faults the device), then unregisters; a
  /// failure is written to stderr (destructors do not throw). Work devmem does not see (a kernel
  /// of the application's own on a raw pointer) must be finished by the caller first. While work
  /// captured into a graph uses the memory (its graph memory, Stream::take_graph_memory, is not
  /// released yet: the graph may run again), the memory stays page-locked and the scope ends
  /// when that graph memory is released.
  ~PinnedScope();
  /// Waits as the destructor does, then unregisters now, throwing the first failure (every range
  /// is still attempted); InvalidArgument, with nothing changed, while captured work uses the
  /// memory (see the destructor). Ranges whose
  /// unregistration failed are tried once more by the destructor (or the next close()), so a
  /// transient vendor failure does not leave the memory page-locked after the scope.
  void close();
  /// The arrays whose memory the scope holds page-locked.
  [[nodiscard]] const std::vector<HostArray>& arrays() const noexcept { return arrays_; }

 private:
  std::vector<HostArray> arrays_;
  std::vector<void*> registered_;  // start of each registered range, in order
  std::shared_ptr<Context> context_;
  const char* operation_;
};

/// Options of mapped(): the device views' stream, and whether the registration is portable.
struct MapOptions {
  Stream stream = {};
  bool portable = false;
  bool wc = false;  // accepted for symmetry with mapped_array; registration cannot change caching
};

/// Maps existing host memory into the device address space for the scope's lifetime (Numba's
/// `with cuda.mapped(*arrays)`), giving a DeviceArray view of each array. The views must not be
/// used after the scope ends (the host backend reports such use as IllegalAddress).
class [[nodiscard]] DEVMEM_API MappedScope {
 public:
  /// Registers and maps every array (use mapped()); on a failure nothing stays registered.
  MappedScope(std::vector<HostArray> arrays, const MapOptions& options);
  /// The moved-from scope unmaps nothing.
  MappedScope(MappedScope&& other) noexcept = default;
  MappedScope& operator=(MappedScope&&) = delete;
  /// Waits for the copies and kernels devmem enqueued that still use the memory (on any stream),
  /// then unmaps; a failure is written to stderr (destructors do not throw). Under a graph that
  /// may run again, ends when its graph memory is released (see ~PinnedScope).
  ~MappedScope();
  /// The device views, one per array, in order (what Numba's `with mapped(a) as d:` binds).
  [[nodiscard]] const std::vector<DeviceArray>& device_arrays() const noexcept { return views_; }
  /// The device view of array i (std::out_of_range past the end).
  [[nodiscard]] const DeviceArray& operator[](std::size_t i) const { return views_.at(i); }
  /// Number of arrays mapped.
  [[nodiscard]] std::size_t size() const noexcept { return views_.size(); }
  /// Waits for the work devmem enqueued that uses the memory, then unmaps now, throwing the first
  /// failure; InvalidArgument, with nothing changed, while captured work uses the memory.
  void close();

 private:
  void wait_for_views() const;
  [[nodiscard]] std::vector<const void*> view_memory() const;
  PinnedScope pins_;
  std::vector<DeviceArray> views_;
};

/// Page-locks `arrays` until the returned scope ends.
[[nodiscard]] DEVMEM_API PinnedScope pinned(std::vector<HostArray> arrays);
/// pinned(a, b, ...) for host arrays given one by one.
template <class... A>
  requires(sizeof...(A) > 0 && (std::is_convertible_v<const A&, const HostArray&> && ...))
[[nodiscard]] PinnedScope pinned(const A&... arrays) {
  return pinned(std::vector<HostArray>{static_cast<const HostArray&>(arrays)...});
}
/// Maps `arrays` into the device address space until the returned scope ends.
[[nodiscard]] DEVMEM_API MappedScope mapped(std::vector<HostArray> arrays,
                                            const MapOptions& options = {});

/// Registers host arrays with the device runtime (ROC's roc.register hint; cudaHostRegister on
/// CUDA): transfers from them are faster and the device can access them. If one registration fails,
/// those already made by this call are undone before the error is thrown.
DEVMEM_API void register_host(std::span<const HostArray> arrays);
/// register_host(a, b, ...).
template <class... A>
  requires(sizeof...(A) > 0 && (std::is_convertible_v<const A&, const HostArray&> && ...))
void register_host(const A&... arrays) {
  const std::vector<HostArray> list{static_cast<const HostArray&>(arrays)...};
  register_host(std::span<const HostArray>(list));
}
/// Undoes register_host. Every array is attempted; the first failure is thrown afterwards.
DEVMEM_API void deregister_host(std::span<const HostArray> arrays);
/// deregister_host(a, b, ...).
template <class... A>
  requires(sizeof...(A) > 0 && (std::is_convertible_v<const A&, const HostArray&> && ...))
void deregister_host(const A&... arrays) {
  const std::vector<HostArray> list{static_cast<const HostArray&>(arrays)...};
  deregister_host(std::span<const HostArray>(list));
}
/// register_host now, deregister at scope exit (Numba's `with roc.register(*arrays)`).
[[nodiscard]] DEVMEM_API PinnedScope registered(std::vector<HostArray> arrays);
/// registered(a, b, ...).
template <class... A>
  requires(sizeof...(A) > 0 && (std::is_convertible_v<const A&, const HostArray&> && ...))
[[nodiscard]] PinnedScope registered(const A&... arrays) {
  return registered(std::vector<HostArray>{static_cast<const HostArray&>(arrays)...});
}

}  // namespace devmem

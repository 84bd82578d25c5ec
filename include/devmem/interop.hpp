// Interop with other array libraries (CuPy, PyTorch, JAX, Numba, user code) through the two
// protocols they speak: the CUDA Array Interface (version 3) and DLPack.
//
// CUDA Array Interface (https://numba.readthedocs.io/en/stable/cuda/cuda_array_interface.html)
// - Producer: DeviceArray::array_interface() / array_interface(a) describe an array without
//   copying. `strides` is empty only when the strides are exactly the dense C-order strides of the
//   shape; any other layout (sliced, transposed, negative, broadcast with stride 0, odd strides on
//   size-1 axes) exports its byte strides explicitly, so the description is never denser than the
//   memory (docs/interop.md#array-interface). `data.pointer` is the address of element (0, ..., 0),
//   nullptr for an array with no elements; `data.readonly` is false; `version` is 3; no mask.
//   `stream` rule, the same on every backend: an array whose stream is the default stream exports
//   1 (the legacy default stream); an array on a stream made with stream() exports that stream's
//   native handle (cudaStream_t, hipStream_t, the host backend's queue) as an integer. `stream` is
//   never 0 and never absent in what devmem exports. Exporting does not synchronise: the consumer
//   does (below), as version 3 requires.
// - Consumer: as_device_array(iface, owner, sync) views foreign device memory without copying.
//   Accepted versions: 3, and 2 without a stream (the stream key was added in version 3); other
//   versions are rejected. Who synchronises: with sync = true (the default) and a `stream` present,
//   as_device_array synchronises that stream before it returns, so the producer's pending work on
//   the memory is complete when the view is used (1 = the default stream; 2 = the per-thread
//   default stream, which on the host backend is its default stream; any other value is a native
//   stream handle of the current device, synchronised through Backend::synchronize_stream). With
//   sync = false the caller takes over that duty (e.g. by making its own stream wait on an event
//   of the producer's stream). An absent `stream` means no synchronisation is needed.
//   The view's stream: the devmem stream whose native handle is `stream` when it is one of devmem's
//   live streams of the current context (so a devmem -> interface -> devmem round trip keeps the
//   stream), otherwise the default stream (devmem never adopts a foreign stream, whose lifetime
//   it does not control).
//   The memory belongs to the device the runtime says owns it (the current device when the
//   runtime cannot tell). `owner` (optional) is kept alive by every view of the result, and devmem
//   never frees foreign memory itself.
//
// DLPack (<dlpack/dlpack.h>, Debian's libdlpack-dev; this header only forward-declares
// DLManagedTensor, so only code that uses DLPack needs that header)
// - to_dlpack(DeviceArray): device type kDLCUDA / kDLROCM on the GPU backends, kDLCPU on the host
//   backend (its "device" memory is process memory); device_id is the array's device. `data` is
//   the address of element (0, ..., 0) with byte_offset 0 (what CuPy and PyTorch produce);
//   `strides` are always given, in elements (InvalidArgument when a byte stride is not a multiple
//   of the itemsize). dtype: kDLInt / kDLUInt / kDLFloat / kDLComplex with bits = 8 * itemsize and
//   lanes 1; bool is kDLUInt with 8 bits because DLPack 0.6 (Debian) has no kDLBool (kDLBool when
//   built against DLPack >= 0.8), so a bool array comes back from from_dlpack as uint8; records
//   and types DLPack cannot express (float128, complex256) are InvalidArgument. The tensor's
//   deleter keeps the array alive until it is called. An array on a non-default stream is
//   synchronised first (DLPack 0.6 has no stream; the consumer may use the memory right away).
// - to_dlpack(HostArray): kDLCUDAHost / kDLROCMHost for pinned and mapped arrays on the GPU
//   backends, kDLCPU for pageable arrays and for every host array on the host backend. A
//   read-only host array is rejected (DLPack 0.6 cannot say read-only).
// - from_dlpack(tensor): takes ownership of the tensor in every case: its deleter (when not null)
//   is called exactly once, when the last view of the result dies, or before from_dlpack throws.
//   Accepted device types: kDLCPU on the host backend, kDLCUDA and kDLCUDAManaged on CUDA, kDLROCM
//   on ROC; device_id must be a device of the active backend. `byte_offset` is added to `data`;
//   null `strides` means C-contiguous. The result uses the default stream (DLPack 0.6 has no
//   stream: the producer made the data ready).
//
// Round trips (devmem -> interface -> devmem, devmem -> DLPack -> devmem) give the same shape,
// byte strides, dtype (except bool through DLPack 0.6 and record alignment through the interface's
// "|V<n>" typestr) and data pointer, and the memory stays alive while any view exists.
//
// On the host backend, device pointers given to copies are checked against live simulated
// allocations and mapped host memory: a view of ordinary process memory imported with
// as_device_array or from_dlpack can be described and re-exported, but copies from or into it
// report IllegalAddress unless that memory is mapped (mapped_array, mapped()).
//
// Errors: InvalidArgument with messages starting "as_device_array: ", "to_dlpack: " or
// "from_dlpack: "; BackendError when synchronising an imported stream fails (e.g. an unknown
// handle). Thread safety: all functions may be called from several threads at once.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/error.hpp>
#include <devmem/export.hpp>
#include <devmem/host_array.hpp>
#include <devmem/layout.hpp>

#include <concepts>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

struct DLManagedTensor;  // <dlpack/dlpack.h>

namespace devmem {

/// The CUDA Array Interface (version 3) of an array, as a C++ value (the Python dict's keys).
struct ArrayInterface {
  /// `stream` values with a fixed meaning (0 is not allowed).
  static constexpr std::intptr_t kLegacyDefaultStream = 1;
  static constexpr std::intptr_t kPerThreadDefaultStream = 2;

  /// The interface's `data` tuple: (pointer, read-only flag).
  struct Data {
    void* pointer = nullptr;  // element (0, ..., 0); nullptr for an array with no elements
    bool readonly = false;
  };

  Shape shape;
  /// Byte strides; empty means C-contiguous (the interface's `strides: None`).
  Strides strides;
  /// NumPy typestr, e.g. "<f8", "|b1", "<c16", "|V24".
  std::string typestr;
  Data data;
  int version = 3;
  /// The interface's `mask`: another array's interface. Absent (null) in what devmem exports;
  /// as_device_array rejects a mask.
  std::shared_ptr<const ArrayInterface> mask;
  /// Absent: no synchronisation needed; 1: legacy default stream; 2: per-thread default stream;
  /// any other value: a native stream handle. Never 0.
  std::optional<std::intptr_t> stream;
};

/// The interface of `array` (same as array.array_interface()).
[[nodiscard]] DEVMEM_API ArrayInterface array_interface(const DeviceArray& array);

/// A DeviceArray viewing the device memory `iface` describes, without a copy. `owner` is kept
/// alive by every view of the result. With `sync`, a stream in `iface` is synchronised before
/// returning (see the file comment).
/// InvalidArgument ("as_device_array: ...") for: a version other than 3 (or 2 without a stream),
/// a mask, a read-only buffer (devmem device arrays are writable), an unknown typestr, a strides
/// count that is not the ndim, a negative dimension, stream 0, a null pointer with elements, a
/// pointer misaligned for the dtype, a byte stride of an axis longer than 1 that is not a
/// multiple of the dtype's alignment ("as_device_array: byte stride 12 of axis 1 is not a
/// multiple of the alignment 8 of dtype float64": a GPU faults on such elements), an extent that
/// overflows. Arrays with no elements are not checked for alignment.
[[nodiscard]] DEVMEM_API DeviceArray as_device_array(const ArrayInterface& iface,
                                                     std::shared_ptr<const void> owner = {},
                                                     bool sync = true);

/// Types that expose an array interface (Numba's is_cuda_array): a const member
/// array_interface() returning something convertible to ArrayInterface.
template <class T>
concept ArrayInterfaceProvider = requires(const T& t) {
                                   { t.array_interface() } -> std::convertible_to<ArrayInterface>;
                                 };
template <class T>
inline constexpr bool is_device_array_v = ArrayInterfaceProvider<std::remove_cvref_t<T>>;
/// True for any object exposing an array interface (no validation, like Numba's is_cuda_array).
template <class T>
[[nodiscard]] constexpr bool is_device_array(const T& /*object*/) noexcept {
  return is_device_array_v<T>;
}

/// Numba's as_cuda_array: a view of `object`'s memory that keeps `object` alive.
template <ArrayInterfaceProvider T>
[[nodiscard]] DeviceArray as_device_array(std::shared_ptr<T> object, bool sync = true) {
  if (!object) throw InvalidArgument("as_device_array: null object");
  const ArrayInterface iface = object->array_interface();
  return as_device_array(iface, std::shared_ptr<const void>(std::move(object)), sync);
}
/// The same for an object passed by reference: a copy of it is kept alive (and its interface is
/// read from that copy). For handle types such as DeviceArray the copy is cheap.
template <ArrayInterfaceProvider T>
  requires std::copy_constructible<T>
[[nodiscard]] DeviceArray as_device_array(const T& object, bool sync = true) {
  return as_device_array(std::make_shared<const T>(object), sync);
}

/// A DLPack tensor viewing `array` (see the file comment); call its deleter (or pass it to a
/// consumer that will) to release the array. InvalidArgument ("to_dlpack: ...") for a dtype
/// DLPack cannot express (records, float128, complex256) or a byte stride that is not a multiple
/// of the itemsize.
[[nodiscard]] DEVMEM_API DLManagedTensor* to_dlpack(const DeviceArray& array);
/// A DLPack tensor viewing a host array (pinned or mapped: kDLCUDAHost / kDLROCMHost on the GPU
/// backends; pageable, or any host array on the host backend: kDLCPU). InvalidArgument also for a
/// read-only array.
[[nodiscard]] DEVMEM_API DLManagedTensor* to_dlpack(const HostArray& array);
/// A DeviceArray viewing a DLPack tensor's memory, taking ownership of `tensor` (its deleter is
/// called exactly once: when the last view dies, or before this function throws).
/// InvalidArgument ("from_dlpack: ...") for: a null tensor, a device type that is not the active
/// backend's, a device_id that does not exist, an unsupported dtype, lanes != 1, a negative ndim
/// or dimension, a null shape with ndim > 0, a null pointer with elements, a pointer misaligned
/// for the dtype (data + byte_offset; the strides count elements, so they cannot misalign the
/// others), strides or an extent that overflow.
[[nodiscard]] DEVMEM_API DeviceArray from_dlpack(DLManagedTensor* tensor);

}  // namespace devmem

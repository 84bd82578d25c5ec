// Managed (unified) memory (Numba's cuda.managed_array; docs/managed-memory.md): one allocation
// that host code and the devices address with the same pointer, migrated between them by the
// driver (cudaMallocManaged / hipMallocManaged; the host backend simulates it, the strict fake
// has none).
//
// A ManagedArray is a DeviceArray (kernel argument, copies, views, copy_to_host, interop) whose
// memory host code may also read and write through host() or at(). Host access and device work
// must not overlap: synchronize the stream a kernel or copy ran on before the host touches the
// memory, as for mapped memory (Numba issue 6505).
//
// Errors: InvalidArgument for bad arguments (messages name the call and the values) and on a
// backend without managed memory, OutOfMemory (also for the oversubscription refusal: see
// ManagedArrayOptions::allow_oversubscription), BackendError for vendor failures, NoDevice.
// Thread safety: as DeviceArray; every function may be called from several threads.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/device_array.hpp>
#include <devmem/export.hpp>
#include <devmem/host_array.hpp>
#include <devmem/stream.hpp>

#include <concepts>
#include <optional>
#include <utility>

namespace devmem {

/// The options of managed_array, as named fields (Numba's strides, order, stream, attach_global).
struct ManagedArrayOptions {
  /// Byte strides; empty means dense in `order`.
  Strides strides = {};
  /// C or F: the dense layout when `strides` is empty.
  Order order = Order::C;
  /// The array's stream (the default stream when unspecified).
  Stream stream = {};
  /// True (Numba's default): every stream of every device may use the memory at once
  /// (cudaMemAttachGlobal). False: attached to the host (cudaMemAttachHost) until it is
  /// prefetched to a device, which spares devices without concurrent managed access from
  /// migrating it for every kernel of every stream.
  bool attach_global = true;
  /// False (the default): an array larger than the device's free memory is refused with
  /// OutOfMemory, because oversubscribed managed memory is paged in and out on every access,
  /// which can stall or hang the GPU for every process using it. True allows it.
  bool allow_oversubscription = false;
};

/// An array in managed memory: a DeviceArray whose bytes host code may also address.
class DEVMEM_API ManagedArray : public DeviceArray {
 public:
  /// An empty array without memory (a DeviceArray's default).
  ManagedArray() = default;

  /// A host view of the same bytes (same shape, strides and dtype; the view keeps the memory
  /// alive). Host code reads and writes through it directly; synchronize device work on the
  /// memory first.
  [[nodiscard]] HostArray host() const;
  /// Reference to one element for host code (bounds- and dtype-checked, as HostArray::at).
  template <Element T, std::integral... I>
  [[nodiscard]] T& at(I... indices) const {
    return host().at<T>(indices...);
  }
  /// Migrates the array's bytes to `location` (a device or the host), enqueued on `stream` (the
  /// array's stream when unspecified): later work on that stream finds them there. On the default
  /// stream it has completed when the call returns; on another stream it runs later. A hint: the
  /// contents never change. InvalidArgument for a device that does not exist.
  void prefetch(MemoryLocation location, const Stream& stream = {}) const;
  /// Gives `advice` about the array's bytes (cudaMemAdvise): PreferredLocation, AccessedBy and
  /// their unset forms need `location` (InvalidArgument without one, or for a device that does not
  /// exist); ReadMostly and UnsetReadMostly ignore it. Takes effect when the call returns, not in
  /// any stream's order.
  void advise(MemoryAdvice advice, std::optional<MemoryLocation> location = {}) const;

 private:
  friend struct detail::ArrayAccess;  // core/ makes them (managed_array)
  explicit ManagedArray(DeviceArray array) : DeviceArray(std::move(array)) {}
};

/// A new managed array of `shape` elements of `dtype` (Numba's managed_array): uninitialised
/// memory, as device_array. Refused with OutOfMemory when it needs more bytes than the device has
/// free, unless options.allow_oversubscription (the message gives both sizes and the reason).
/// InvalidArgument for a bad shape, strides or order, and on a backend without managed memory.
[[nodiscard]] DEVMEM_API ManagedArray managed_array(Shape shape, DType dtype = {},
                                                    const ManagedArrayOptions& options = {});
/// The same for elements of type T: managed_array<float>({n}).
template <Element T>
[[nodiscard]] ManagedArray managed_array(Shape shape, const ManagedArrayOptions& options = {}) {
  return managed_array(std::move(shape), dtype_of<T>(), options);
}

/// Migrates the bytes of `array`, which must lie in managed memory (a ManagedArray, or a
/// device_array of the "managed" memory manager), to `location` on `stream` (the array's stream
/// when unspecified), as ManagedArray::prefetch. BackendError from the vendor for memory that is
/// not managed.
DEVMEM_API void prefetch(const DeviceArray& array, MemoryLocation location,
                         const Stream& stream = {});
/// Gives `advice` about the bytes of `array` (managed memory), as ManagedArray::advise.
DEVMEM_API void advise(const DeviceArray& array, MemoryAdvice advice,
                       std::optional<MemoryLocation> location = {});

}  // namespace devmem

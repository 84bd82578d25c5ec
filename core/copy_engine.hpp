// The copy engine's internal interface: the one strided-copy path behind every transfer (H2D, D2H,
// D2D, H2H; core/copy_engine.cpp), copies between devices (core/peer_copy.cpp), and the new arrays
// and fills that transfers and shape changes are built from. Not installed; only core/ includes
// it.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/device_array.hpp>
#include <devmem/host_array.hpp>
#include <devmem/layout.hpp>
#include <devmem/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace devmem {

class Context;

namespace detail {

struct DeviceMemory;
struct StreamState;

/// One side of a copy: the address of element (0, ..., 0), its layout and whether it is in device
/// memory.
struct CopyEndpoint {
  std::byte* element0 = nullptr;
  // Where the bytes really are, for overlap checks: the host address for host memory and mapped
  // device views, the device address otherwise.
  std::byte* identity0 = nullptr;
  bool identity_on_host = false;
  const Layout* layout = nullptr;
  const DType* dtype = nullptr;
  bool on_device = false;
  bool readonly = false;
  std::shared_ptr<const void> keep_alive;
  // The device side's memory (null for host arrays), for order_after_allocation.
  const DeviceMemory* device_memory = nullptr;
  // Host memory that is not page-locked (as far as devmem knows): a copy into it from the device
  // must be complete when the call returns (see finish_copy).
  bool pageable = false;
};
CopyEndpoint endpoint(const DeviceArray& array);
CopyEndpoint endpoint(const HostArray& array);

/// Copies the elements of `src` into `dst` on `stream` of `context` whatever their strides, after
/// checking dtype and (squeezed) shape. Overlapping source and destination are staged through a
/// temporary. Only destination elements are written.
void copy_elements(const char* operation, Context& context, StreamState& stream,
                   const CopyEndpoint& dst, const CopyEndpoint& src);

/// Copies `destination.size()` bytes at byte `offset` of `memory` into `destination` (ordinary
/// host memory) on `stream` and waits for them: one element read (DeviceArray::item_bytes), with
/// copy_elements' ordering after the allocation, capture refusal and trace event, without the
/// endpoints' views.
void read_element_bytes(const char* operation, Context& context, StreamState& stream,
                        const std::shared_ptr<DeviceMemory>& memory, std::int64_t offset,
                        const DType& dtype, std::span<std::byte> destination);

/// Copies the elements of `src`, a device array of another device than `dst`'s, into `dst` on
/// `dst_stream` (of dst's device), whatever their strides (docs/scaling-out.md#several-devices):
/// with Backend::copy_peer where dst's device can access src's, else staged through page-locked
/// host memory. The source is read after the work enqueued so far on its own stream, and later
/// work there waits for the read. Defined in peer_copy.cpp.
void copy_between_devices(const char* operation, StreamState& dst_stream, const DeviceArray& dst,
                          const DeviceArray& src);

/// Frees the page-locked staging buffers kept for copies between devices without peer access
/// (peer_copy.cpp), after the host waited for their last reads: at exit and before an allocation
/// is retried for lack of memory. Thread-safe.
void release_idle_peer_staging() noexcept;
/// Forgets that devmem enabled `device`'s access to `peer` (Context::disable_peer_access).
void forget_peer_access(const Backend& backend, int device, int peer) noexcept;

/// C or F for a copy made under NumPy's `order` rules (A: F when F- and not C-contiguous).
Order resolve_copy_order(const Layout& source, Order order, const char* operation);

/// Writes `count` copies of the `itemsize`-byte `value` to dense memory at `dst`, doubling the
/// filled prefix with each memcpy (log2(count) calls instead of one per element).
void fill_pattern(std::byte* dst, std::int64_t count, const void* value,
                  std::int64_t itemsize) noexcept;

/// `layout` without its broadcast axes: every axis with stride 0 shrinks to length 1, so each
/// distinct element appears once (Numba's array_core). Used to write into broadcast arrays.
Layout broadcast_core(const Layout& layout);

/// A new pageable host array with `layout` (offset must make the extent start at 0).
HostArray make_host_array(Layout layout, DType dtype);
/// A new device array with `layout` on `context`.
DeviceArray make_device_array(Context& context, Layout layout, DType dtype, Stream stream,
                              const char* operation);
/// A new device array shaped like `like` (NumPy empty_like order K strides).
DeviceArray make_device_array_like(Context& context, const Layout& like, DType dtype, Stream stream,
                                   const char* operation);

}  // namespace detail
}  // namespace devmem

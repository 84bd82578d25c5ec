// SmartArray: an array with a host copy and a device copy that transfers lazily (Numba's
// SmartArray, numba 0.45).
//
// Each side is either up to date or stale. get(where) (get_host() / get_device(), host() /
// device()) returns that side after bringing it up to date: it is allocated on first use and
// copied from the other side only when it is stale, so a SmartArray passed through several device
// steps is transferred to the device once, and back once when the host reads it. After writing
// into one side, call mark_changed(that side): it becomes the newest and the other side stale.
//
// Construction:
// - SmartArray(host_obj, copy, where): the host side is a copy of `host_obj` (copy = true, in the
//   same axis order) or `host_obj` itself (copy = false: the SmartArray writes the device's data
//   back into the caller's memory, which therefore must be writable and free of broadcast axes).
//   With where = Where::Device the device side is allocated and filled right away (one transfer);
//   both sides are then up to date.
// - SmartArray(shape, dtype, order, where): only the `where` side is allocated and it is the up to
//   date one (a host side is zero-filled, a device side uninitialised, as device_array()).
// The missing side is allocated with the same shape and dtype, dense in the other side's axis
// order (device_array_like). shape(), strides(), dtype() are those of the side made at
// construction and never change.
//
// Transfers use the default stream and are complete when get() returns.
//
// Differences from Numba: there is no reference-count heuristic (Numba's mark_changed copied at
// once when the other side had outside references); devmem is always lazy, so a side must be
// fetched with get() again before it is read after the other side changed. mark_changed on a side
// that was never allocated is an error. `where` is an enum, so there is no invalid-target error.
//
// Copies of a SmartArray share state (it is a handle, like the arrays). Thread safety: every
// member may be called from several threads at once; get() and mark_changed() are serialised, so
// concurrent get(Where::Device) calls transfer once. Reading or writing the elements while another
// thread writes them needs the caller's ordering, as for any array.
// Errors: InvalidArgument ("SmartArray: ..." / "SmartArray::mark_changed: ..."), also from every
// member taking a Where other than Where::Host or Where::Device (Numba's ValueError for an invalid
// `where`; nothing changes), plus those of the allocations and transfers (OutOfMemory,
// BackendError).
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/dtype.hpp>
#include <devmem/export.hpp>
#include <devmem/host_array.hpp>
#include <devmem/layout.hpp>

#include <cstdint>
#include <memory>
#include <variant>

namespace devmem {

/// A memory space of a SmartArray.
enum class Where { Host, Device };
/// "host" / "device" ("invalid" for a value outside the enum).
[[nodiscard]] DEVMEM_API const char* to_string(Where where) noexcept;

/// An array with a host side and a device side that transfers only what is stale (Numba's
/// SmartArray). A shared handle; thread-safe as the file comment says.
class DEVMEM_API SmartArray {
 public:
  /// A SmartArray holding `host_obj` (copy = false) or a copy of it (copy = true).
  explicit SmartArray(const HostArray& host_obj, bool copy = true, Where where = Where::Host);
  /// A new array of `shape` elements of `dtype` (order C or F) allocated on the `where` side.
  SmartArray(Shape shape, DType dtype, Order order = Order::C, Where where = Where::Host);

  /// The up-to-date host side (allocated and transferred if needed).
  [[nodiscard]] const HostArray& get_host();
  /// The up-to-date device side (allocated and transferred if needed).
  [[nodiscard]] const DeviceArray& get_device();
  /// Same as get_host() (Numba's .host()).
  [[nodiscard]] const HostArray& host() { return get_host(); }
  /// Same as get_device() (Numba's .gpu()).
  [[nodiscard]] const DeviceArray& device() { return get_device(); }
  /// get_host() for Where::Host, get_device() for Where::Device.
  template <Where W>
  [[nodiscard]] const auto& get() {
    if constexpr (W == Where::Host) {
      return get_host();
    } else {
      return get_device();
    }
  }
  /// The up-to-date side `where` as a handle (HostArray or DeviceArray).
  [[nodiscard]] std::variant<HostArray, DeviceArray> get(Where where);

  /// Marks side `where` as the newest (after writing into it): the other side becomes stale.
  /// InvalidArgument when that side has not been allocated (there is nothing that could have
  /// changed).
  void mark_changed(Where where);

  /// Whether side `where` exists / is up to date.
  [[nodiscard]] bool is_allocated(Where where) const;
  /// True when side `where` holds the newest data.
  [[nodiscard]] bool is_valid(Where where) const;

  /// Frozen at construction.
  [[nodiscard]] const Shape& shape() const noexcept;
  /// Byte strides of the host side.
  [[nodiscard]] const Strides& strides() const noexcept;
  /// The element type.
  [[nodiscard]] const DType& dtype() const noexcept;
  /// Number of axes.
  [[nodiscard]] int ndim() const noexcept { return static_cast<int>(shape().size()); }
  /// Number of elements.
  [[nodiscard]] std::int64_t size() const noexcept;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace devmem

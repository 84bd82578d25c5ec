// SmartArray: lazily synchronised host and device copies (see include/devmem/smart_array.hpp).
#include <devmem/smart_array.hpp>

#include "core/format.hpp"

#include <devmem/error.hpp>
#include <devmem/memory.hpp>

#include <mutex>
#include <optional>
#include <utility>

namespace devmem {

const char* to_string(Where where) noexcept {
  switch (where) {
    case Where::Host:
      return "host";
    case Where::Device:
      return "device";
  }
  return "invalid";
}

struct SmartArray::State {
  mutable std::mutex mutex;  // guards everything below except the frozen metadata
  std::optional<HostArray> host;
  std::optional<DeviceArray> device;
  bool host_valid = false;
  bool device_valid = false;
  // Frozen at construction.
  Shape shape;
  Strides strides;
  DType dtype;

  void freeze(const Layout& layout, const DType& type) {
    shape = layout.shape;
    strides = layout.strides;
    dtype = type;
  }

  // Both functions expect `mutex` to be held.
  // A side that is missing or stale is made from the other, which then exists and holds the data
  // (the class invariant; the checker cannot see it).
  const HostArray& sync_host() {
    if (host && host_valid) return *host;
    DeviceArray& source = *device;  // NOLINT(bugprone-unchecked-optional-access): see above
    HostArray& target =
        host ? *host
             : host.emplace(source.shape(), source.dtype(), layout::order_like(source.layout()));
    source.copy_to_host(target);  // default stream: complete on return
    host_valid = true;
    return target;
  }
  const DeviceArray& sync_device() {
    if (device && device_valid) return *device;
    const HostArray& source = *host;  // NOLINT(bugprone-unchecked-optional-access): see above
    DeviceArray& target = device ? *device : device.emplace(device_array_like(source));
    target.copy_to_device(source);
    device_valid = true;
    return target;
  }
};

namespace {

bool has_broadcast_axis(const Layout& layout) {
  for (std::size_t k = 0; k < layout.shape.size(); ++k) {
    if (layout.strides[k] == 0 && layout.shape[k] > 1) return true;
  }
  return false;
}

/// Numba raises ValueError for a `where` other than 'host' or 'gpu': an out-of-range Where (a cast
/// integer) is refused in every entry point rather than read as one side or the other.
void check_where(const char* operation, Where where) {
  if (where != Where::Host && where != Where::Device) {
    detail::throw_invalid(operation, "where must be Where::Host or Where::Device, got {}",
                          static_cast<int>(where));
  }
}

}  // namespace

SmartArray::SmartArray(const HostArray& host_obj, bool copy, Where where)
    : state_(std::make_shared<State>()) {
  check_where("SmartArray", where);
  if (!copy && host_obj.is_readonly()) {
    detail::throw_invalid("SmartArray",
                          "a read-only host array needs copy = true (the host side "
                          "is written when the device side changed)");
  }
  if (!copy && has_broadcast_axis(host_obj.layout())) {
    detail::throw_invalid("SmartArray",
                          "a broadcast host array (stride 0 on an axis of length > 1) needs "
                          "copy = true");
  }
  const HostArray& host = state_->host.emplace(copy ? host_obj.copy(Order::K) : host_obj);
  state_->host_valid = true;
  state_->freeze(host.layout(), host.dtype());
  if (where == Where::Device) (void)state_->sync_device();
}

SmartArray::SmartArray(Shape shape, DType dtype, Order order, Where where)
    : state_(std::make_shared<State>()) {
  check_where("SmartArray", where);
  if (order != Order::C && order != Order::F) {
    detail::throw_invalid("SmartArray", "order must be 'C' or 'F', got '{}'",
                          static_cast<char>(order));
  }
  if (where == Where::Host) {
    const HostArray& host = state_->host.emplace(std::move(shape), std::move(dtype), order);
    state_->host_valid = true;
    state_->freeze(host.layout(), host.dtype());
  } else {
    const DeviceArray& device =
        state_->device.emplace(device_array(std::move(shape), std::move(dtype), {}, order));
    state_->device_valid = true;
    state_->freeze(device.layout(), device.dtype());
  }
}

const HostArray& SmartArray::get_host() {
  const std::lock_guard lock(state_->mutex);
  return state_->sync_host();
}

const DeviceArray& SmartArray::get_device() {
  const std::lock_guard lock(state_->mutex);
  return state_->sync_device();
}

std::variant<HostArray, DeviceArray> SmartArray::get(Where where) {
  check_where("SmartArray::get", where);
  if (where == Where::Host) return get_host();
  return get_device();
}

void SmartArray::mark_changed(Where where) {
  check_where("SmartArray::mark_changed", where);
  const std::lock_guard lock(state_->mutex);
  const bool allocated =
      where == Where::Host ? state_->host.has_value() : state_->device.has_value();
  if (!allocated) {
    detail::throw_invalid("SmartArray::mark_changed",
                          "the {} side has not been allocated (get it first)", to_string(where));
  }
  state_->host_valid = where == Where::Host;
  state_->device_valid = where == Where::Device;
}

bool SmartArray::is_allocated(Where where) const {
  check_where("SmartArray::is_allocated", where);
  const std::lock_guard lock(state_->mutex);
  return where == Where::Host ? state_->host.has_value() : state_->device.has_value();
}

bool SmartArray::is_valid(Where where) const {
  check_where("SmartArray::is_valid", where);
  const std::lock_guard lock(state_->mutex);
  return where == Where::Host ? state_->host_valid : state_->device_valid;
}

const Shape& SmartArray::shape() const noexcept {
  return state_->shape;
}
const Strides& SmartArray::strides() const noexcept {
  return state_->strides;
}
const DType& SmartArray::dtype() const noexcept {
  return state_->dtype;
}
std::int64_t SmartArray::size() const noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : state_->shape) n *= d;  // validated at construction
  return n;
}

}  // namespace devmem

// The array internals core/ works with: the memory an array views, and arrays made over memory
// with a layout. Kept out of the public headers (they name only the friend declaration), so that
// users see arrays only through their public operations. Tests include it for white-box checks.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/host_array.hpp>
#include <devmem/managed.hpp>

#include <memory>
#include <utility>

namespace devmem::detail {

struct ArrayAccess {
  [[nodiscard]] static const std::shared_ptr<DeviceMemory>& memory(const DeviceArray& a) noexcept {
    return a.memory();
  }
  [[nodiscard]] static const std::shared_ptr<HostMemory>& memory(const HostArray& a) noexcept {
    return a.memory();
  }
  /// An array viewing `memory` with `layout` (which must lie inside it: not checked here).
  [[nodiscard]] static DeviceArray make(std::shared_ptr<DeviceMemory> memory, Layout layout,
                                        DType dtype, Stream stream) {
    return DeviceArray(std::move(memory), std::move(layout), std::move(dtype), std::move(stream));
  }
  [[nodiscard]] static HostArray make(std::shared_ptr<HostMemory> memory, Layout layout,
                                      DType dtype) {
    return HostArray(std::move(memory), std::move(layout), std::move(dtype));
  }
  /// The ManagedArray of `array`, whose memory is managed memory (managed_array).
  [[nodiscard]] static ManagedArray make_managed(DeviceArray array) {
    return ManagedArray(std::move(array));
  }
};

}  // namespace devmem::detail

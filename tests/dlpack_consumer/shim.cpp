// Test helper for consumer.c: makes devmem arrays and exports them with to_dlpack(). It is built
// into its own shared library so that the C program links no C++ and includes no devmem header.
#include "shim.h"

#include <devmem/devmem.hpp>

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex mutex;
std::string last_error;
std::array<std::weak_ptr<const void>, DEVMEM_SHIM_CASE_COUNT> exported;

template <class T>
devmem::DeviceArray device_iota(std::int64_t n) {
  std::vector<T> values(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<T>(i);
  return devmem::to_device(values);
}

devmem::DeviceArray make_case(int which) {
  switch (which) {
    case DEVMEM_SHIM_C_FLOAT64:
      return device_iota<double>(12).reshape({3, 4});
    case DEVMEM_SHIM_TRANSPOSED_INT32:
      return device_iota<std::int32_t>(24).reshape({4, 6}).T();
    case DEVMEM_SHIM_REVERSED_FLOAT32:
      return device_iota<float>(10).slice(0, std::nullopt, std::nullopt, -2);
    case DEVMEM_SHIM_SCALAR_INT64: {
      devmem::DeviceArray a = devmem::device_array<std::int64_t>({});
      a.set_item(std::int64_t{42});
      return a;
    }
    case DEVMEM_SHIM_BOOL:
      return devmem::to_device(std::vector<std::uint8_t>{1, 0, 1, 1})
          .view(devmem::dtype_of<bool>());
    default:
      throw devmem::InvalidArgument("devmem_shim_export: unknown case " + std::to_string(which));
  }
}

}  // namespace

extern "C" int devmem_shim_device_count(void) {
  try {
    return devmem::device_count();
  } catch (const std::exception&) {
    return 0;
  }
}

extern "C" const char* devmem_shim_backend(void) {
  static const std::string name = devmem::backend_name();
  return name.c_str();
}

extern "C" DLManagedTensor* devmem_shim_export(int which) {
  try {
    const devmem::DeviceArray array = make_case(which);
    {
      const std::lock_guard lock(mutex);
      exported.at(static_cast<std::size_t>(which)) = array.owner();
    }
    return array.to_dlpack();
  } catch (const std::exception& e) {
    const std::lock_guard lock(mutex);
    last_error = e.what();
    return nullptr;
  }
}

extern "C" int devmem_shim_alive(int which) {
  if (which < 0 || which >= DEVMEM_SHIM_CASE_COUNT) return 0;
  const std::lock_guard lock(mutex);
  return exported[static_cast<std::size_t>(which)].expired() ? 0 : 1;
}

extern "C" const char* devmem_shim_last_error(void) {
  const std::lock_guard lock(mutex);
  return last_error.c_str();
}

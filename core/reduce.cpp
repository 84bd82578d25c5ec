// The host-side checks of <devmem/kernel_reduce.hpp>, out of line so that their messages are
// built once, not in every translation unit that instantiates a reduction.
#include <devmem/error.hpp>
#include <devmem/kernel_reduce.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <optional>

namespace devmem::detail::reduction {

void check_reduce_array(const char* operation, const char* what, const DType& expected,
                        const DeviceArray& array, std::int64_t min_size) {
  if (array.ndim() != 1) {
    throw InvalidArgument(fmt::format("{}: the {} has {} dimensions; it must be 1-d (ravel() it)",
                                      operation, what, array.ndim()));
  }
  if (array.dtype() != expected) {
    throw InvalidArgument(fmt::format("{}: the {} has dtype {}, the reduction's type is {}",
                                      operation, what, array.dtype().name(), expected.name()));
  }
  if (array.size() < min_size) {
    throw InvalidArgument(fmt::format("{}: the {} has {} elements; it needs at least {}", operation,
                                      what, array.size(), min_size));
  }
}

std::int64_t reduce_count(const char* operation, const DeviceArray& array,
                          std::optional<std::int64_t> size) {
  if (!size) return array.size();
  if (*size < 0 || *size > array.size()) {
    throw InvalidArgument(fmt::format("{}: size = {} is outside [0, {}] (the array's size)",
                                      operation, *size, array.size()));
  }
  return *size;
}

}  // namespace devmem::detail::reduction

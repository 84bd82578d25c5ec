// The host backend's checks of kernels' array accesses (<devmem/array_view.hpp>). An index out of
// range calls index_out_of_bounds, which fails the block (through the block scheduler,
// host_kernel.cpp) before the access, so nothing outside the array is touched. At launch,
// check_view_argument checks the memory every ArrayView argument can reach against the backend's
// live allocations and mapped host memory, as copies are checked, so a stale view is refused
// before it runs (InvalidArgument, as the other argument errors of launch).
#include "backends/host/host_backend.hpp"
#include "backends/host/host_kernel.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace devmem::detail::sim {
namespace {

using host::HostBackend;

/// Values as Python writes a tuple: (8,) or (16, 16).
std::string describe_tuple(std::span<const std::int64_t> values) {
  if (values.size() == 1) return fmt::format("({},)", values[0]);
  return fmt::format("({})", fmt::join(values, ", "));
}

}  // namespace

void index_out_of_bounds(const char* array_kind, const std::int64_t* index, std::size_t index_count,
                         const std::int64_t* shape, std::size_t rank) {
  if (!host::bounds_checking()) return;
  const std::span<const std::int64_t> shape_values(shape, rank);
  std::string what;
  if (index_count == rank) {
    what = fmt::format("{}: index {} is out of bounds for shape {}", array_kind,
                       describe_tuple(std::span(index, index_count)), describe_tuple(shape_values));
  } else {
    std::int64_t count = 1;
    for (const std::int64_t n : shape_values) count *= n;
    what = fmt::format("{}: flat index {} is out of bounds for shape {} ({} elements)", array_kind,
                       index_count == 1 ? index[0] : -1, describe_tuple(shape_values), count);
  }
  fail_kernel_access(what);
}

void check_view_argument(const PreparedLaunch& launch, std::size_t argument, const void* data,
                         std::size_t element_size, const std::int64_t* shape,
                         const std::int64_t* strides, std::size_t rank) {
  if (!host::bounds_checking()) return;
  // The bytes the view can reach, relative to data: [lo, hi).
  std::int64_t lo = 0;
  auto hi = static_cast<std::int64_t>(element_size);
  bool overflow = false;
  for (std::size_t d = 0; d != rank; ++d) {
    if (shape[d] <= 0) return;  // an empty view reaches nothing
    std::int64_t reach = 0;
    overflow |= __builtin_mul_overflow(strides[d], shape[d] - 1, &reach);
    overflow |= __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const auto begin = base + static_cast<std::uintptr_t>(lo);  // wraps for lo < 0, as intended
  const auto bytes = static_cast<std::uintptr_t>(hi) - static_cast<std::uintptr_t>(lo);
  const std::shared_ptr<Context> context = launch.stream.context();
  const auto* backend = dynamic_cast<const HostBackend*>(&context->backend());
  if (backend == nullptr) return;  // run_kernel refuses the launch
  if (!overflow && data != nullptr && begin + bytes >= begin &&
      backend->device_accessible(begin, bytes)) {
    return;
  }
  throw InvalidArgument(fmt::format(
      "devmem::launch({}): argument {} (an ArrayView of shape {}) reaches {} bytes at {:#x}, "
      "which are not inside a live device allocation or mapped host memory (a view of a freed "
      "array, or from a closed mapped() scope?)",
      launch.kernel_name, argument, describe_tuple(std::span(shape, rank)), bytes, begin));
}

}  // namespace devmem::detail::sim

// The host backend's checks of kernels' array accesses (<devmem/array_view.hpp>). An index out of
// range calls index_out_of_bounds, which fails the block (through the block scheduler,
// host_kernel.cpp) before the access, so nothing outside the array is touched. At launch,
// check_view_argument checks the memory every ArrayView argument can reach against the backend's
// live allocations and mapped host memory, as copies are checked, so a stale view is refused
// before it runs (InvalidArgument, as the other argument errors of launch). Also here: the report
// of writes into the red zones around a block's dynamic shared memory (dynamic_shared_overrun),
// and of element access through a view of device memory that launch never handed to a kernel
// (unlaunched_view_access: host code, or a view smuggled into a kernel in a struct).
#include "backends/host/host_backend.hpp"
#include "backends/host/host_kernel.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

std::optional<std::string> dynamic_shared_overrun(const std::byte* zones, std::size_t dynamic_bytes,
                                                  const std::string& block,
                                                  const std::string& where) {
  static const std::vector<unsigned char> clean(kRedZone, kRedZoneByte);
  const std::byte* const after = zones + kRedZone + dynamic_bytes;
  const bool before_clean = std::memcmp(zones, clean.data(), kRedZone) == 0;
  if (before_clean && std::memcmp(after, clean.data(), kRedZone) == 0) return std::nullopt;
  // The written bytes, as offsets from the start of the dynamic shared memory.
  const std::byte* const zone = before_clean ? after : zones;
  std::size_t first = kRedZone;
  std::size_t last = 0;
  for (std::size_t i = 0; i != kRedZone; ++i) {
    if (zone[i] != std::byte{kRedZoneByte}) {
      first = std::min(first, i);
      last = i;
    }
  }
  const auto dynamic = static_cast<std::int64_t>(dynamic_bytes);
  const std::int64_t base = before_clean ? dynamic : -static_cast<std::int64_t>(kRedZone);
  return fmt::format(
      "dynamic_shared: block {} wrote {} bytes {} its {} bytes of dynamic shared memory (bytes {} "
      "to {} of it, found {}); on a GPU these writes overwrite other shared memory of the block "
      "(check the indices and LaunchConfig::shared_bytes)",
      block, last - first + 1, before_clean ? "past the end of" : "before the start of", dynamic,
      base + static_cast<std::int64_t>(first), base + static_cast<std::int64_t>(last), where);
}

void unlaunched_view_access(const void* data, const std::int64_t* shape, std::size_t rank) {
  if (!host::bounds_checking()) return;
  const std::string view =
      fmt::format("ArrayView of shape {} at {}", describe_tuple(std::span(shape, rank)), data);
  if (in_kernel_thread()) {
    fail_kernel_access(fmt::format(
        "{}: the view reached the kernel without passing through launch (a member of a struct "
        "argument, or read from memory), so launch neither checked that its array is alive nor "
        "kept it alive; pass it as a kernel parameter of its own, or list the struct's views "
        "with a member `auto devmem_views() const {{ return std::tie(view, ...); }}`",
        view));
  }
  throw InvalidArgument(fmt::format(
      "{}: host code indexes device memory outside a kernel, which faults on a GPU; copy the "
      "elements instead (to_vector, item, set_item, copy_to_host), or use mapped memory "
      "(mapped_array), which host code and kernels both index",
      view));
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

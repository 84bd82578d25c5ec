// Whether a list of GPU architectures a kernel was compiled for covers a device: shared by
// devmem::launch's check of the application's kernels (core/kernel.cpp) and the GPU backends'
// check of libdevmem's own strided-copy kernel (backends/gpu_runtime/runtime_backend.hpp). Header
// only, so that the backends' templates use it without a library symbol. Not installed.
#pragma once

#include <cstddef>
#include <string_view>

namespace devmem::detail {

/// True when `architectures` (";"- or ","-separated --offload-arch entries, each possibly with
/// target features: "gfx90a:xnack+") has code for `architecture` ("gfx90a").
[[nodiscard]] inline bool has_code_for(std::string_view architectures,
                                       std::string_view architecture) {
  while (!architectures.empty()) {
    const std::size_t end = architectures.find_first_of(";,");
    std::string_view entry = architectures.substr(0, end);
    entry = entry.substr(0, entry.find(':'));
    if (entry == architecture) return true;
    if (end == std::string_view::npos) break;
    architectures.remove_prefix(end + 1);
  }
  return false;
}

}  // namespace devmem::detail

// The destructors of the memory objects arrays view (core/array_memory.hpp): the last array of
// owned memory hands it back to its context, which queues it for its manager (or frees pageable
// host memory at once).
#include "core/array_memory.hpp"

#include "core/context_state.hpp"

#include <cstdlib>

namespace devmem::detail {

DeviceMemory::~DeviceMemory() {
  untrack_device_memory(*this);
  if (owned && ptr != nullptr) {
    detail::ContextState::of(*context).release(manager, ptr, bytes, false, HostAllocFlags::None,
                                               stream);
  }
}

HostMemory::~HostMemory() {
  if (!owned || ptr == nullptr) return;
  if (kind == HostMemoryKind::Pageable) {
    std::free(ptr);  // NOLINT(cppcoreguidelines-no-malloc): paired with calloc in make_host_array
  } else {
    detail::ContextState::of(*context).release(manager, ptr, bytes, true, alloc_flags, {});
  }
}

}  // namespace devmem::detail

// Helpers shared by the deferred-deallocation tests (test_deallocation.cpp and
// test_deallocation_safety.cpp): releasing a device array, the queue's size and
// bytes, and switching to the direct manager. A header of its own so that the two test files do
// not each carry a copy.
#pragma once

#include "support.hpp"

#include <cstddef>
#include <cstdint>

namespace conformance {

/// Allocates a device array of `bytes` bytes, releases it (drops its only handle) and returns the
/// address it had.
inline void* release_device(int64_t bytes) {
  const devmem::DeviceArray d = devmem::device_array(Shape{bytes}, u1());
  return d.data();
}

inline std::size_t pending() {
  return devmem::current_context()->pending_deallocations();
}
inline int64_t pending_bytes() {
  return devmem::current_context()->pending_deallocation_bytes();
}

/// The direct manager, made anew, so that device_memory_used() sees every free at once.
inline void use_direct_manager() {
  auto ctx = devmem::current_context();
  ctx->set_memory_manager(devmem::make_memory_manager("direct", *ctx));
}

}  // namespace conformance

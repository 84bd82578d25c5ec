// The host ranges devmem has registered (pinned and mapped scopes, register_host), process-wide:
// page-locked memory that HostArray::kind() still calls pageable, because the array was made
// before it was registered. The copy engine asks here before it treats a host array as pageable.
// Defined in core/memory.cpp. Not installed; only core/ includes it.
#pragma once

#include <cstddef>

namespace devmem::detail {

struct HostSpan;  // core/keep_alive.hpp

/// Notes and forgets a registered range. Thread-safe.
void note_host_registered(const void* begin, std::size_t bytes);
void note_host_unregistered(const void* begin) noexcept;
/// True when `span` lies inside one range devmem has registered. Thread-safe.
[[nodiscard]] bool host_range_registered(const HostSpan& span);

}  // namespace devmem::detail

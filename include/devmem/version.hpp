// The version of the devmem library a program runs against (config.hpp has the one it was
// compiled against).
#pragma once

#include <devmem/export.hpp>

namespace devmem {
/// "MAJOR.MINOR.PATCH" of the loaded libdevmem.
[[nodiscard]] DEVMEM_API const char* version() noexcept;
}  // namespace devmem

#include <devmem/config.hpp>
#include <devmem/version.hpp>

namespace devmem {
const char* version() noexcept {
  return DEVMEM_VERSION_STRING;
}
}  // namespace devmem

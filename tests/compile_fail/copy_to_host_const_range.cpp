// Must not compile: copy_to_host into a range of const elements.
#include <devmem/devmem.hpp>

#include <vector>

void use(const devmem::DeviceArray& d, const std::vector<float>& v) {
  d.copy_to_host(v);
}

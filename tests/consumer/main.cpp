// Round-trips data through the default backend using only the installed headers and library.
#include <devmem/devmem.hpp>

#include <cstdio>
#include <numeric>
#include <vector>

int main() {
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), 0.0f);
  const devmem::DeviceArray d = devmem::to_device(host).reshape({10, 100});
  const std::vector<float> back = d.transpose().copy(devmem::Order::C).to_vector<float>();
  // back is the transpose: back[j * 10 + i] == host[i * 100 + j]
  for (int i = 0; i < 10; ++i) {
    for (int j = 0; j < 100; ++j) {
      if (back[static_cast<std::size_t>(j * 10 + i)] !=
          host[static_cast<std::size_t>(i * 100 + j)]) {
        std::printf("consumer: mismatch at (%d, %d)\n", i, j);
        return 1;
      }
    }
  }
  std::printf("consumer: devmem %s on backend '%s': ok\n", devmem::version(),
              devmem::backend_name().c_str());
  return 0;
}

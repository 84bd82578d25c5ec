// Scales a device array with the consumer's own kernel (scale.cu) and checks the result; draws
// random numbers and sums them (numba_pieces.cu) twice with one seed, which must agree.
#include "numba_pieces.hpp"
#include "scale.hpp"

#include <cmath>
#include <cstdio>
#include <numeric>
#include <vector>

int main() {
  if (devmem::device_count() == 0) {
    std::printf("consumer_kernels: backend '%s' has no device: skipped\n",
                devmem::backend_name().c_str());
    return 77;
  }
  std::vector<float> host(1000);
  std::iota(host.begin(), host.end(), 0.0f);
  const devmem::DeviceArray x = devmem::to_device(host);
  const devmem::DeviceArray touched = devmem::to_device(std::vector<int>{0});
  scale(x, 2.0f, touched);
  devmem::synchronize();
  const std::vector<float> back = x.to_vector<float>();
  for (std::size_t i = 0; i < host.size(); ++i) {
    if (back[i] != 2.0f * host[i]) {
      std::printf("consumer_kernels: mismatch at %zu: %g\n", i, static_cast<double>(back[i]));
      return 1;
    }
  }
  if (touched.to_vector<int>()[0] != 1000) {
    std::printf("consumer_kernels: %d elements scaled, not 1000\n", touched.to_vector<int>()[0]);
    return 1;
  }
  const double first = draw_and_sum(3, 42);
  const double again = draw_and_sum(3, 42);
  if (first != again || std::isnan(first)) {
    std::printf("consumer_kernels: two draws with one seed summed to %.17g and %.17g\n", first,
                again);
    return 1;
  }
  std::printf("consumer_kernels: devmem %s, kernel on backend '%s': ok\n", devmem::version(),
              devmem::backend_name().c_str());
  return 0;
}

// A consumer's kernel source, compiled by devmem_add_kernel_sources with the compiler of devmem's
// backend (a .cu file: the host compiler compiles it as C++ for a host-only devmem).
#include "scale.hpp"

#include <devmem/kernel.hpp>

#include <functional>

namespace {

DEVMEM_KERNEL void scale_kernel(devmem::ArrayView<float, 1> x, float factor,
                                devmem::ArrayView<int, 1> touched) {
  for (std::int64_t i = devmem::grid<1>(); i < x.shape(0); i += devmem::gridsize<1>()) {
    // std::plus<> is constexpr host code: nvcc accepts it in a kernel with
    // --expt-relaxed-constexpr, which devmem_add_kernel_sources passes.
    x[i] = std::plus<>{}(x[i] * factor, 0.0f);
    devmem::atomic_add(touched, 0, 1);
  }
}

}  // namespace

void scale(const devmem::DeviceArray& x, float factor, const devmem::DeviceArray& touched) {
  devmem::launch({4, 64}, scale_kernel, x, factor, touched);
}

// Device functions and shared arrays, the two snippets of docs/kernels.md#device-functions and
// docs/kernels.md#sharedarray as a program: a function called from a kernel and from host code
// (DEVMEM_HOST_DEVICE), and a block-shared array handed to a device function (SharedArray). One
// source for every backend, like matmul. Usage: device_functions [n] (default 1000). Exit codes:
// 0 correct, 1 wrong result or error, 77 no device.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// [device-functions]
// Called from kernels and from host code: __host__ __device__ for nvcc and hipcc, nothing for the
// host compiler. Host code uses it to check the kernel's results.
DEVMEM_HOST_DEVICE inline float smoothstep(float edge0, float edge1, float x) {
  float t = (x - edge0) / (edge1 - edge0);
  t = t < 0.0f ? 0.0f : (t > 1.0f ? 1.0f : t);
  return t * t * (3.0f - 2.0f * t);
}

DEVMEM_KERNEL void apply_smoothstep(devmem::ArrayView<float, 1> x) {
  const std::int64_t i = devmem::grid<1>();
  if (i < x.shape(0)) x[i] = smoothstep(0.0f, 1.0f, x[i]);
}
// [device-functions]

// [shared-array]
constexpr std::size_t kBlock = 256;
using Partials = devmem::SharedArray<float, kBlock>;

// A SharedArray is a handle to the block's memory: device functions take it by value. Every thread
// of the block calls this (it waits at barriers).
DEVMEM_DEVICE float tree_sum(Partials partial, unsigned tid) {
  for (std::size_t stride = Partials::size() / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    devmem::syncthreads();
  }
  return partial[0];
}

DEVMEM_KERNEL void block_sums(devmem::ArrayView<const float, 1> in,
                              devmem::ArrayView<float, 1> out) {
  DEVMEM_SHARED_ARRAY(partial, float, kBlock);  // a devmem::SharedArray<float, kBlock>
  const unsigned tid = devmem::thread_idx().x;
  const std::int64_t i = devmem::grid<1>();
  partial[tid] = i < in.shape(0) ? in[i] : 0.0f;
  devmem::syncthreads();
  const float total = tree_sum(partial, tid);
  if (tid == 0) out[devmem::block_idx().x] = total;
}
// [shared-array]

}  // namespace

int main(int argc, char** argv) {
  const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 1000;
  if (n < 1 || n > (std::int64_t{1} << 24)) {
    std::fprintf(stderr, "device_functions: n must be in [1, 2^24], got %s\n", argv[1]);
    return 1;
  }
  try {
    // Values in [-0.5, 1.5], multiples of 1/8: the block sums are exact in float.
    std::vector<float> values(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < values.size(); ++i) {
      values[i] = static_cast<float>(static_cast<int>(i % 17) - 4) / 8.0f;
    }
    const auto block = static_cast<std::int64_t>(kBlock);
    const std::int64_t blocks = (n + block - 1) / block;
    const devmem::Stream stream = devmem::stream();
    const devmem::DeviceArray in = devmem::to_device(values, stream);
    const devmem::DeviceArray sums =
        devmem::device_array<float>({blocks}, devmem::Order::C, stream);
    devmem::launch({blocks, kBlock, stream}, block_sums, in, sums);
    const devmem::DeviceArray x = devmem::to_device(values, stream);
    devmem::launch({blocks, kBlock, stream}, apply_smoothstep, x);
    const std::vector<float> got_sums = sums.to_vector<float>(stream);
    const std::vector<float> got_x = x.to_vector<float>(stream);
    stream.synchronize();

    int wrong = 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
      float expected = 0.0f;
      for (std::int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
        expected += values[static_cast<std::size_t>(i)];
      }
      if (got_sums[static_cast<std::size_t>(b)] != expected) {
        std::fprintf(stderr, "block_sums: block %lld is %g, expected %g\n",
                     static_cast<long long>(b),
                     static_cast<double>(got_sums[static_cast<std::size_t>(b)]),
                     static_cast<double>(expected));
        ++wrong;
      }
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      // The same function on the host; a GPU may contract it into fused multiply-adds.
      const float expected = smoothstep(0.0f, 1.0f, values[i]);
      if (std::fabs(got_x[i] - expected) > 1e-6f) {
        std::fprintf(stderr, "apply_smoothstep: element %zu is %g, expected %g\n", i,
                     static_cast<double>(got_x[i]), static_cast<double>(expected));
        ++wrong;
      }
    }
    if (wrong != 0) return 1;
    std::printf("device_functions: %lld block sums and %lld smoothstep values correct (%s)\n",
                static_cast<long long>(blocks), static_cast<long long>(n),
                devmem::backend_name().c_str());
    return 0;
  } catch (const devmem::NoDevice& e) {
    std::fprintf(stderr, "device_functions: no device: %s\n", e.what());
    return 77;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "device_functions: %s\n", e.what());
    return 1;
  }
}

// <devmem/kernel.hpp> under hipcc: the kernel API maps one to one onto HIP (__global__,
// __shared__, __syncthreads, __threadfence, the wavefront barrier, __constant__ +
// hipMemcpyToSymbol).
// Included by kernel.hpp only; the HIP headers reach only translation units that hipcc compiles.
#pragma once

#include <hip/hip_runtime.h>

#include <tuple>

#define DEVMEM_KERNEL __global__
#define DEVMEM_DEVICE __device__
/// Defines a constant-memory array (once, at namespace scope; prefix `static` for internal
/// linkage). Kernels read it directly; const_array_like fills it from the host.
#define DEVMEM_CONSTANT_ARRAY(name, T, N) __constant__ T name[N]

namespace devmem {
namespace detail {

inline constexpr std::string_view kKernelBackend = "roc";

template <class... Params, class Tuple, std::size_t... I>
void launch_hip(const LaunchConfig& config, hipStream_t stream, void (*kernel)(Params...),
                const Tuple& arguments, std::index_sequence<I...>) {
  const dim3 grid(config.grid.x, config.grid.y, config.grid.z);
  const dim3 block(config.block.x, config.block.y, config.block.z);
  kernel<<<grid, block, config.shared_bytes, stream>>>(std::get<I>(arguments)...);
}

template <class... Params, class Tuple>
void launch_on_backend(const PreparedLaunch& launch, const LaunchConfig& config,
                       void (*kernel)(Params...), Tuple&& arguments,
                       std::vector<std::shared_ptr<const void>> keep_alive) {
  // Clear an earlier, unrelated error so that the check below reports this launch's.
  static_cast<void>(hipGetLastError());
  launch_hip(config, static_cast<hipStream_t>(launch.stream.native_handle()), kernel, arguments,
             std::index_sequence_for<Params...>{});
  const hipError_t status = hipGetLastError();
  if (status != hipSuccess) {
    throw_launch_error("roc", "hipLaunchKernel", static_cast<int>(status), hipGetErrorName(status),
                       hipGetErrorString(status));
  }
  keep_alive_until_complete(launch.stream, std::move(keep_alive));
}

template <class T, std::size_t N>
void copy_to_constant(T (&symbol)[N], const void* values, std::size_t bytes) {
  const hipError_t status = hipMemcpyToSymbol(static_cast<const void*>(&symbol), values, bytes);
  if (status != hipSuccess) {
    static_cast<void>(hipGetLastError());
    throw_launch_error("roc", "hipMemcpyToSymbol", static_cast<int>(status),
                       hipGetErrorName(status), hipGetErrorString(status));
  }
}

}  // namespace detail

[[nodiscard]] __device__ inline Dim3 thread_idx() {
  return {threadIdx.x, threadIdx.y, threadIdx.z};
}
[[nodiscard]] __device__ inline Dim3 block_idx() {
  return {blockIdx.x, blockIdx.y, blockIdx.z};
}
[[nodiscard]] __device__ inline Dim3 block_dim() {
  return {blockDim.x, blockDim.y, blockDim.z};
}
[[nodiscard]] __device__ inline Dim3 grid_dim() {
  return {gridDim.x, gridDim.y, gridDim.z};
}
[[nodiscard]] __device__ inline std::int64_t global_id(int dim = 0) {
  const unsigned block = dim == 0 ? blockIdx.x : (dim == 1 ? blockIdx.y : blockIdx.z);
  const unsigned size = dim == 0 ? blockDim.x : (dim == 1 ? blockDim.y : blockDim.z);
  const unsigned thread = dim == 0 ? threadIdx.x : (dim == 1 ? threadIdx.y : threadIdx.z);
  return static_cast<std::int64_t>(block) * size + thread;
}
[[nodiscard]] __device__ inline int warp_size() {
  return warpSize;
}

template <class T, std::size_t... N, class Tag = detail::SharedArrayDefaultTag>
[[nodiscard]] __device__ SharedArray<T, N...> shared_array(Tag = {}) {
  // One __shared__ variable per instantiation (type, shape, tag), per block.
  __shared__ T storage[(N * ...)];
  return SharedArray<T, N...>(storage);
}
template <class T>
[[nodiscard]] __device__ T* dynamic_shared() {
  // One untyped declaration: extern __shared__ arrays of different types would conflict.
  extern __shared__ __attribute__((aligned(16))) unsigned char devmem_dynamic_shared_memory[];
  return reinterpret_cast<T*>(devmem_dynamic_shared_memory);
}

__device__ inline void syncthreads() {
  __syncthreads();
}
__device__ inline void barrier(FenceScope scope = FenceScope::Global) {
  if (has_scope(scope, FenceScope::Global)) {
    __threadfence();
  } else {
    __threadfence_block();
  }
  __syncthreads();
}
__device__ inline void wave_barrier() {
  __builtin_amdgcn_wave_barrier();
}

}  // namespace devmem

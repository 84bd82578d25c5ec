// <devmem/kernel.hpp> on a GPU compiler (nvcc or hipcc): written once, because HIP kept CUDA's
// kernel language (__global__, __shared__, __constant__, <<<>>>, __syncthreads, __threadfence).
// The vendor's names come from kernel_vendor.hpp, which includes this file after
// defining detail::KernelRuntime (the runtime calls) and detail::wave_sync() (the warp or
// wavefront barrier).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#if defined(__HIP_CPU_RT__)
// HIP-CPU (presets cuda-hipcpu, roc-hipcpu): kernels and device functions are host functions run
// on fibers. HIP-CPU's __global__ and __device__ expand to GCC's `simd` attribute (vector clones
// of the function), which does not fit them (class-type parameters, fiber switches) and which g++
// warns about, so they are left unmarked.
#define DEVMEM_KERNEL
#define DEVMEM_DEVICE
#define DEVMEM_DETAIL_DEVICE
#else
#define DEVMEM_KERNEL __global__
#define DEVMEM_DEVICE __device__
#define DEVMEM_DETAIL_DEVICE __device__
#endif
/// Defines a constant-memory array of shape `...` (one or two extents; once, at namespace scope;
/// prefix `static` for internal linkage). Kernels read it directly (name[i], name[i][j]);
/// const_array_like fills it from the host.
#define DEVMEM_CONSTANT_ARRAY(name, T, ...) \
  __constant__ typename ::devmem::detail::ConstantArrayType<T, __VA_ARGS__>::type name

namespace devmem {
namespace detail {

inline constexpr std::string_view kKernelBackend = KernelRuntime::kBackend;
inline constexpr std::string_view kKernelArchitectures = KernelRuntime::kArchitectures;

inline void check_kernel_runtime(typename KernelRuntime::Error status, const char* call) {
  if (status != KernelRuntime::kSuccess) {
    // The failure is this call's: it must not linger as the thread's last error for the next,
    // unrelated call to find (a sticky error stays whatever is done).
    static_cast<void>(KernelRuntime::last_error());
    throw_launch_error(KernelRuntime::kBackend, call, static_cast<int>(status),
                       KernelRuntime::error_name(status), KernelRuntime::error_string(status));
  }
}

/// Makes `device` current in the runtime this translation unit calls for the guard's lifetime,
/// then the caller's device again (review 2, N9: a launch leaves the application's current device
/// as it was). That runtime is not necessarily the instance libdevmem selects devices in: a CUDA
/// target linked with the static cudart has its own copy, with its own per-thread current device,
/// and a kernel launched there without this runs on that copy's device.
class [[nodiscard]] KernelDevice {
 public:
  explicit KernelDevice(int device) {
    int current = -1;
    check_kernel_runtime(KernelRuntime::get_device(&current), KernelRuntime::kGetDeviceCall);
    if (current != device) {
      check_kernel_runtime(KernelRuntime::set_device(device), KernelRuntime::kSetDeviceCall);
      previous_ = current;
    }
  }
  KernelDevice(const KernelDevice&) = delete;
  KernelDevice& operator=(const KernelDevice&) = delete;
  KernelDevice(KernelDevice&&) = delete;
  KernelDevice& operator=(KernelDevice&&) = delete;
  ~KernelDevice() {
    // Best effort: the launch's own outcome is what the caller hears about.
    if (previous_ >= 0 && KernelRuntime::set_device(previous_) != KernelRuntime::kSuccess) {
      static_cast<void>(KernelRuntime::last_error());
    }
  }

 private:
  int previous_ = -1;
};

/// Enqueues the kernel; returns this launch's own status (never an earlier error the thread's
/// last-error state may hold, which a triple-chevron launch followed by get-last-error would take
/// for its own, and clear).
template <class... Params, class Tuple, std::size_t... I>
typename KernelRuntime::Error enqueue_kernel(const LaunchConfig& config,
                                             typename KernelRuntime::Stream stream,
                                             void (*kernel)(Params...), Tuple& arguments,
                                             std::index_sequence<I...>) {
  const dim3 grid(config.grid.x, config.grid.y, config.grid.z);
  const dim3 block(config.block.x, config.block.y, config.block.z);
#if defined(__HIP_CPU_RT__)
  return ::devmem::hipcpu::launch_kernel(kernel, grid, block, config.shared_bytes, stream,
                                         std::get<I>(arguments)...);
#else
  // The runtime copies each parameter from these addresses; the trailing null keeps the array
  // non-empty for kernels without parameters.
  void* parameters[] = {static_cast<void*>(&std::get<I>(arguments))..., nullptr};
  return KernelRuntime::launch_kernel(reinterpret_cast<const void*>(kernel), grid, block,
                                      parameters, config.shared_bytes, stream);
#endif
}

/// More than the default per-block limit of dynamic shared memory: the kernel must opt in. Its
/// limit is raised once per kernel and device, to the largest the device allows it (the opt-in
/// maximum less the kernel's static shared memory), never per launch to that launch's size: two
/// threads launching one kernel with different sizes would interleave set and launch, and one
/// launch would fail (review 2, N13). The static size is asked once as well.
inline void opt_in_shared_memory(const void* kernel, const PreparedLaunch& launch,
                                 std::size_t dynamic_bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, std::size_t> static_bytes_of;  // once raised
  std::size_t static_bytes = 0;
  {
    const std::lock_guard lock(mutex);
    const auto key = std::make_pair(kernel, launch.device);
    if (const auto it = static_bytes_of.find(key); it != static_bytes_of.end()) {
      static_bytes = it->second;
    } else {
      check_kernel_runtime(KernelRuntime::static_shared_bytes(kernel, &static_bytes),
                           KernelRuntime::kFuncGetAttributesCall);
      if (static_bytes < launch.opt_in_shared_limit) {
        check_kernel_runtime(
            KernelRuntime::opt_in_dynamic_shared(kernel, launch.opt_in_shared_limit - static_bytes),
            KernelRuntime::kFuncAttributeCall);
      }
      static_bytes_of.emplace(key, static_bytes);
    }
  }
  check_shared_memory_total(launch, static_bytes, dynamic_bytes);
}

template <class... Params, class Tuple>
void launch_on_backend(const PreparedLaunch& launch, const LaunchConfig& config,
                       void (*kernel)(Params...), Tuple&& arguments,
                       std::vector<std::shared_ptr<const void>> keep_alive) {
  const KernelDevice on_device(launch.device);
  if (config.shared_bytes > launch.default_shared_limit) {
    opt_in_shared_memory(reinterpret_cast<const void*>(kernel), launch, config.shared_bytes);
  }
  order_launch_after_allocations(launch.stream, keep_alive);
  check_kernel_runtime(enqueue_kernel(config, KernelRuntime::stream(launch.stream.native_handle()),
                                      kernel, arguments, std::index_sequence_for<Params...>{}),
                       KernelRuntime::kLaunchCall);
  keep_alive_until_complete(launch.stream, std::move(keep_alive));
}

template <class Symbol>
void copy_to_constant(Symbol& symbol, int device, const void* values, std::size_t bytes) {
  // Constant memory is per device: the copy goes to the current device of this translation
  // unit's runtime, which must be the context's (see KernelDevice).
  const KernelDevice on_device(device);
  check_kernel_runtime(
      KernelRuntime::copy_to_symbol(static_cast<const void*>(&symbol), values, bytes),
      KernelRuntime::kToSymbolCall);
}

}  // namespace detail

/// Index of the calling thread in its block (threadIdx; Numba's cuda.threadIdx).
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline Dim3 thread_idx() {
  return {threadIdx.x, threadIdx.y, threadIdx.z};
}
/// Index of the calling thread's block in the grid (blockIdx).
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline Dim3 block_idx() {
  return {blockIdx.x, blockIdx.y, blockIdx.z};
}
/// Threads per block (blockDim).
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline Dim3 block_dim() {
  return {blockDim.x, blockDim.y, blockDim.z};
}
/// Blocks per grid (gridDim).
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline Dim3 grid_dim() {
  return {gridDim.x, gridDim.y, gridDim.z};
}
/// Global index of the calling thread along `dim` (0 = x, 1 = y, 2 = z): Numba's cuda.grid.
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline std::int64_t global_id(int dim = 0) {
  const unsigned block = dim == 0 ? blockIdx.x : (dim == 1 ? blockIdx.y : blockIdx.z);
  const unsigned size = dim == 0 ? blockDim.x : (dim == 1 ? blockDim.y : blockDim.z);
  const unsigned thread = dim == 0 ? threadIdx.x : (dim == 1 ? threadIdx.y : threadIdx.z);
  return static_cast<std::int64_t>(block) * size + thread;
}
/// Threads per warp (32) or wavefront (64 on most AMD GPUs): warpSize.
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline int warp_size() {
  return warpSize;
}

/// The block-shared array of type T and shape N... named by `Tag` (see kernel_host.hpp). Untagged
/// calls take the default tag, so two untagged call sites of the same type and shape in one kernel
/// are one array: the device compilers give no portable way to tell call sites apart (nvcc rejects
/// a lambda as a default template argument). The host simulator reports such kernels.
template <class T, std::size_t... N, class Tag = detail::SharedArrayDefaultTag>
[[nodiscard]] DEVMEM_DETAIL_DEVICE SharedArray<T, N...> shared_array(Tag = {}) {
  static_assert(detail::StaticSharedArrayBytes<sizeof(T) * (N * ...)>::fits);
  // One __shared__ variable per instantiation (type, shape, tag), per block.
  __shared__ T storage[(N * ...)];
  return SharedArray<T, N...>(storage);
}
namespace detail {
/// The block's dynamic shared memory, one untyped declaration for every element type (extern
/// __shared__ arrays of different types would conflict).
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline unsigned char* dynamic_shared_bytes() {
#if defined(__HIP_CPU_RT__)
  HIP_DYNAMIC_SHARED(unsigned char, devmem_dynamic_shared_memory)  // HIP-CPU's scheme
#else
  extern __shared__ __attribute__((aligned(16))) unsigned char devmem_dynamic_shared_memory[];
#endif
  return devmem_dynamic_shared_memory;
}
}  // namespace detail

/// The block's dynamic shared memory (LaunchConfig::shared_bytes bytes) as elements of T.
template <class T>
[[nodiscard]] DEVMEM_DETAIL_DEVICE T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::dynamic_shared_bytes());
}
/// The block's dynamic shared memory as a C-order ArrayView of shape `extents...` (Numba's
/// cuda.shared.array(0, dtype), with the shape given); unchecked, as every access on a GPU. The
/// simulator checks its accesses and that the launch's shared_bytes hold the shape.
template <class T, class... Extent>
  requires(sizeof...(Extent) >= 1 && (std::is_integral_v<Extent> && ...))
[[nodiscard]] DEVMEM_DETAIL_DEVICE ArrayView<T, sizeof...(Extent)> dynamic_shared_array(
    Extent... extents) {
  return detail::c_order_view(dynamic_shared<T>(), extents...);
}

/// Block barrier (__syncthreads; Numba's cuda.syncthreads).
DEVMEM_DETAIL_DEVICE inline void syncthreads() {
  __syncthreads();
}
/// Block barrier after a memory fence of `scope` (ROC's roc.barrier).
DEVMEM_DETAIL_DEVICE inline void barrier(FenceScope scope = FenceScope::Global) {
  if (has_scope(scope, FenceScope::Global)) {
    __threadfence();
  } else {
    __threadfence_block();
  }
  __syncthreads();
}
/// Warp (wavefront) barrier (ROC's roc.wavebarrier; __syncwarp).
DEVMEM_DETAIL_DEVICE inline void wave_barrier() {
  detail::wave_sync();
}
/// Warp barrier among the lanes `mask` names (Numba's cuda.syncwarp(mask)): CUDA's
/// __syncwarp(mask) (bits 32 to 63 dropped). On ROC the wavefront's active lanes run in lockstep:
/// the wavefront barrier with its fences (wave_barrier), whatever the mask, as HIP's own
/// __syncwarp. Under HIP-CPU (test builds) a block barrier, which every thread of the block must
/// reach. The simulator's checks (the calling thread in the mask, matching masks) are in
/// kernel_host.hpp.
DEVMEM_DETAIL_DEVICE inline void syncwarp(std::uint64_t mask = ~std::uint64_t{0}) {
  detail::warp_sync(mask);
}

}  // namespace devmem

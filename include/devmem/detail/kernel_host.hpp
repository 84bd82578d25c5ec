// <devmem/kernel.hpp> for the host compiler: kernels are ordinary functions run by the host
// backend's simulator (backends/host/host_kernel.cpp). Included by kernel.hpp only.
#pragma once

#include <cstring>
#include <functional>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

#define DEVMEM_KERNEL
#define DEVMEM_DEVICE
// The marker of the library's own device functions (empty: the simulator runs host code).
#define DEVMEM_DETAIL_DEVICE
/// Defines a constant-memory array of shape `...` (one or two extents; once, at namespace scope;
/// prefix `static` for internal linkage). Kernels read it directly (name[i], name[i][j];
/// bounds-checked like ArrayView); const_array_like fills it from the host.
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
#define DEVMEM_CONSTANT_ARRAY(name, T, ...) \
  ::devmem::detail::sim::ConstantArray<T, __VA_ARGS__> name
#else
#define DEVMEM_CONSTANT_ARRAY(name, T, ...) \
  typename ::devmem::detail::ConstantArrayType<T, __VA_ARGS__>::type name
#endif

namespace devmem {
namespace detail {

inline constexpr std::string_view kKernelBackend = "host";
inline constexpr std::string_view kKernelArchitectures = {};  // the host runs any kernel

namespace sim {

/// Where a barrier is in the kernel's source, for divergence reports. Like std::source_location,
/// built from the compiler builtins that clang 14 with libstdc++ also has (its
/// <source_location> is empty there); g++ 12 has no column builtin, so file and line only.
struct SourceSite {
  const char* file = "";
  unsigned line = 0;
  [[nodiscard]] static constexpr SourceSite current(const char* file_ = __builtin_FILE(),
                                                    unsigned line_ = __builtin_LINE()) noexcept {
    return SourceSite{file_, line_};
  }
};

/// Coordinates of a simulated GPU thread.
struct ThreadCoords {
  Dim3 thread_idx;
  Dim3 block_idx;
  Dim3 block_dim;
  Dim3 grid_dim;
};

/// The simulated thread running on the calling OS thread. InvalidArgument, naming `function`,
/// when called outside a kernel.
[[nodiscard]] DEVMEM_API const ThreadCoords& current_thread(const char* function);
/// The block's shared storage for the array identified by `key` (the same for every thread of the
/// block), of `shape` elements of `element_size` bytes, declared at `site`. For an `untagged`
/// shared_array, a second call site for the same key in the block fails the launch naming both,
/// since on a GPU the two would silently alias. Fails the launch (LaunchOutOfResources) too when
/// the block's static arrays together exceed 48 KiB (naming each one's size and site), or its
/// shared memory the device limit.
[[nodiscard]] DEVMEM_API void* shared_storage(const void* key, std::size_t element_size,
                                              std::span<const std::size_t> shape,
                                              std::size_t alignment, const SourceSite& site,
                                              bool untagged);
/// The block's dynamic shared memory (LaunchConfig::shared_bytes bytes). Fails the launch when
/// `view_bytes` (a dynamic_shared_array's size; 0 for dynamic_shared) is more than that.
[[nodiscard]] DEVMEM_API void* dynamic_shared_storage(std::size_t alignment,
                                                      std::size_t view_bytes = 0);
/// Waits until every thread of the block has arrived (at the same barrier).
DEVMEM_API void block_barrier(const char* function, const SourceSite& where);
/// Waits until every thread of the calling thread's warp has arrived.
DEVMEM_API void warp_barrier(const SourceSite& where);
/// Waits until every thread of the warp that `mask` names (bit k: lane k) and that has not
/// returned waits at a warp_sync with the same mask (see syncwarp).
DEVMEM_API void warp_sync(std::uint64_t mask, const SourceSite& where);
[[nodiscard]] DEVMEM_API int warp_size() noexcept;
/// Runs `body` once per simulated thread of the grid, enqueued on the prepared stream.
DEVMEM_API void run_kernel(const PreparedLaunch& launch, const LaunchConfig& config,
                           std::function<void()> body);
/// Waits for the device's work before a constant array is overwritten.
DEVMEM_API void prepare_constant_update();

/// One address per shared array (type, tag and shape) for the whole program.
template <class T, class Tag, std::size_t... N>
inline constexpr char shared_key = 0;

/// InvalidArgument naming argument `argument` of a launch unless the bytes that a view of `data`
/// with `shape` and byte `strides` (rank values each) of `element_size`-byte elements can reach lie
/// inside one live device allocation or mapped host memory, so that a stale view (of a freed
/// array, or from a closed mapped() scope) is refused before the kernel runs. Nothing when
/// devmem::host::bounds_checking() is off.
DEVMEM_API void check_view_argument(const PreparedLaunch& launch, std::size_t argument,
                                    const void* data, std::size_t element_size,
                                    const std::int64_t* shape, const std::int64_t* strides,
                                    std::size_t rank);
/// Kernel arguments other than views are not checked.
template <class Arg>
void check_argument(const PreparedLaunch&, const Arg&, std::size_t) {}
template <class T, std::size_t Rank>
void check_argument(const PreparedLaunch& launch, const ArrayView<T, Rank>& view,
                    std::size_t argument) {
  std::int64_t shape[Rank + 1] = {};
  std::int64_t strides[Rank + 1] = {};
  for (std::size_t d = 0; d != Rank; ++d) {
    shape[d] = view.shape(d);
    strides[d] = view.stride_bytes(d);
  }
  check_view_argument(launch, argument, view.data(), sizeof(T), shape, strides, Rank);
}
/// A struct's views listed by devmem_views() are checked like views given directly.
template <ListsKernelViews S>
void check_argument(const PreparedLaunch& launch, const S& object, std::size_t argument) {
  std::apply([&](const auto&... view) { (check_argument(launch, view, argument), ...); },
             object.devmem_views());
}

#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
/// What DEVMEM_CONSTANT_ARRAY declares in the simulator: the array, read-only to kernels as
/// __constant__ memory is, with bounds-checked element reads: name[i] for a 1-d array, name[i][j]
/// for a 2-d one (an index outside its extent fails the launch, see ArrayView).
template <class T, std::size_t... N>
struct ConstantArray {
  static_assert(sizeof...(N) == 1 || sizeof...(N) == 2, "constant arrays are 1-d or 2-d");
  using Elements = typename ConstantArrayType<T, N...>::type;
  static constexpr std::size_t rank = sizeof...(N);
  static constexpr std::size_t rows = static_extent<N...>(0);
  static constexpr std::size_t columns = static_extent<N...>(1);

  /// Row i of a 2-d array, whose [j] reads element (i, j) after checking both indices.
  struct Row {
    const T* first;  // element (0, 0)
    std::int64_t i;
    template <class Index>
      requires std::is_integral_v<Index>
    const T& operator[](Index j) const {
      const std::int64_t index[] = {i, static_cast<std::int64_t>(j)};
      static constexpr std::int64_t shape[] = {static_cast<std::int64_t>(N)...};
      if (out_of_bounds(index[0], shape[0]) || out_of_bounds(index[1], shape[1])) [[unlikely]] {
        index_out_of_bounds("constant array", index, 2, shape, 2);
      }
      return first[static_cast<std::size_t>(i) * columns + static_cast<std::size_t>(j)];
    }
  };

  /// Element i of a 1-d array (an index outside [0, N) fails the launch, see ArrayView), or row i
  /// of a 2-d one.
  template <class Index>
    requires std::is_integral_v<Index> decltype(auto)
  operator[](Index i) const {
    if constexpr (rank == 1) {
      check_flat_index<N...>("constant array", static_cast<std::size_t>(i));
      return static_cast<const T&>(elements[static_cast<std::size_t>(i)]);
    } else {
      return Row{data(), static_cast<std::int64_t>(i)};
    }
  }
  /// The first element's address.
  [[nodiscard]] const T* data() const { return reinterpret_cast<const T*>(&elements); }
  // NOLINTNEXTLINE: decays like the array it stands for (to const T* or const T (*)[N1])
  operator const std::remove_extent_t<Elements>*() const { return elements; }
  /// The number of elements.
  [[nodiscard]] static constexpr std::size_t size() { return (N * ...); }

  Elements elements;
};
#endif

}  // namespace sim

template <class... Params, class Tuple>
void launch_on_backend(const PreparedLaunch& launch, const LaunchConfig& config,
                       void (*kernel)(Params...), Tuple&& arguments,
                       std::vector<std::shared_ptr<const void>> keep_alive) {
  // Every simulated thread receives its own copy of the arguments, as kernel parameters are.
  auto bound = std::make_shared<const std::remove_cvref_t<Tuple>>(std::forward<Tuple>(arguments));
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (sim::check_argument(launch, std::get<I>(*bound), I), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<std::remove_cvref_t<Tuple>>>{});
  order_launch_after_allocations(launch.stream, keep_alive);
  sim::run_kernel(launch, config, [kernel, bound] { std::apply(kernel, *bound); });
  // Released later on a user thread, never on the stream's worker (releasing memory calls the
  // backend, which must not wait for the stream from inside it).
  keep_alive_until_complete(launch.stream, std::move(keep_alive));
}

template <class Symbol>
void copy_to_constant(Symbol& symbol, int /*device*/, const void* values, std::size_t bytes) {
  sim::prepare_constant_update();  // one constant memory for every simulated device
  std::memcpy(static_cast<void*>(&symbol), values, bytes);
}

}  // namespace detail

#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
/// const_array_like for a constant array of the simulator (see kernel.hpp): the same checks.
template <class T, std::size_t... N, class Values>
void const_array_like(detail::sim::ConstantArray<T, N...>& symbol, const Values& values,
                      const Stream& stream = {}) {
  const_array_like(symbol.elements, values, stream);
}
#endif

/// Index of the calling thread in its block.
[[nodiscard]] inline Dim3 thread_idx() {
  return detail::sim::current_thread("devmem::thread_idx").thread_idx;
}
/// Index of the calling thread's block in the grid.
[[nodiscard]] inline Dim3 block_idx() {
  return detail::sim::current_thread("devmem::block_idx").block_idx;
}
/// Threads per block.
[[nodiscard]] inline Dim3 block_dim() {
  return detail::sim::current_thread("devmem::block_dim").block_dim;
}
/// Blocks per grid.
[[nodiscard]] inline Dim3 grid_dim() {
  return detail::sim::current_thread("devmem::grid_dim").grid_dim;
}
/// Global index of the calling thread along dimension `dim` (0 = x, 1 = y, 2 = z): Numba's
/// cuda.grid.
[[nodiscard]] inline std::int64_t global_id(int dim = 0) {
  const auto& t = detail::sim::current_thread("devmem::global_id");
  return static_cast<std::int64_t>(t.block_idx[dim]) * t.block_dim[dim] + t.thread_idx[dim];
}
/// Threads per warp (wavefront).
[[nodiscard]] inline int warp_size() {
  return detail::sim::warp_size();
}

namespace detail::sim {
template <class T, std::size_t... N>
void* shared_array_storage(const void* key, const SourceSite& site, bool untagged) {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>,
                "shared memory holds trivial types only (as __shared__ does)");
  static_assert(detail::StaticSharedArrayBytes<sizeof(T) * (N * ...)>::fits);
  static constexpr std::size_t shape[] = {N...};
  return shared_storage(key, sizeof(T), shape, alignof(T), site, untagged);
}
}  // namespace detail::sim

/// The block-shared array of element type T and shape N... identified by T, N... and `Tag`: every
/// thread of a block gets the same memory, uninitialised at block start. Give every array its own
/// tag type (a lambda: `shared_array<float, 16, 16>([] {})`, or use DEVMEM_SHARED_ARRAY); call
/// sites passing the same tag type share one array, which is how two device functions share one
/// on purpose. Fails the launch (BackendError from the stream's next synchronize) when the block's
/// shared memory would exceed the device's limit, or its static shared arrays 48 KiB together.
/// `where` is the call site (left to its default), named in those messages. Thread safety: as a
/// __shared__ array.
template <class T, std::size_t... N, class Tag>
  requires(!std::is_same_v<Tag, detail::sim::SourceSite> &&
           !std::is_same_v<Tag, detail::SharedArrayDefaultTag>)
[[nodiscard]] SharedArray<T, N...> shared_array(
    Tag, const detail::sim::SourceSite& where = detail::sim::SourceSite::current()) {
  return SharedArray<T, N...>(static_cast<T*>(detail::sim::shared_array_storage<T, N...>(
      &detail::sim::shared_key<T, Tag, N...>, where, false)));
}
/// The untagged block-shared array of element type T and shape N...: one array per type and shape
/// in a kernel. On CUDA and ROC two untagged call sites of the same type and shape in one kernel
/// silently share their memory; the simulator fails the launch instead (LaunchFailure naming both
/// source lines, from the stream's next synchronize), so test kernels on the host backend. One call
/// site reached several times (a loop, a device function called twice) is one array, as a
/// __shared__ declaration is. Numba gives every cuda.shared.array call site its own array (its
/// simulator one per source line); here that takes a tag, as above. `where` is the call site
/// (left to its default).
template <class T, std::size_t... N>
[[nodiscard]] SharedArray<T, N...> shared_array(
    const detail::sim::SourceSite& where = detail::sim::SourceSite::current()) {
  return SharedArray<T, N...>(static_cast<T*>(detail::sim::shared_array_storage<T, N...>(
      &detail::sim::shared_key<T, detail::SharedArrayDefaultTag, N...>, where, true)));
}
/// The block's dynamic shared memory (LaunchConfig::shared_bytes bytes) as elements of T.
template <class T>
[[nodiscard]] T* dynamic_shared() {
  return static_cast<T*>(detail::sim::dynamic_shared_storage(alignof(T)));
}
/// The block's dynamic shared memory as a C-order ArrayView of shape `extents...` (Numba's
/// cuda.shared.array(0, dtype), with the shape given): indexed and bounds-checked like any view,
/// and taken by the atomics (atomic_add(view, i, v)). Fails the launch (LaunchFailure) when the
/// shape needs more bytes than the launch's shared_bytes.
template <class T, class... Extent>
  requires(sizeof...(Extent) >= 1 && (std::is_integral_v<Extent> && ...))
[[nodiscard]] ArrayView<T, sizeof...(Extent)> dynamic_shared_array(Extent... extents) {
  std::size_t count = 1;
  ((count *= static_cast<std::size_t>(extents)), ...);
  return detail::c_order_view(
      static_cast<T*>(detail::sim::dynamic_shared_storage(alignof(T), count * sizeof(T))),
      extents...);
}

/// Block barrier (__syncthreads): waits for every thread of the block; shared and global writes
/// before it are visible to the block after it.
inline void syncthreads(const detail::sim::SourceSite& where = detail::sim::SourceSite::current()) {
  detail::sim::block_barrier("syncthreads()", where);
}
/// Block barrier with a memory fence of `scope` (ROC's barrier(CLK_*_MEM_FENCE)). The simulator's
/// threads share one coherent memory, so every scope orders both kinds of memory.
inline void barrier(FenceScope scope = FenceScope::Global,
                    const detail::sim::SourceSite& where = detail::sim::SourceSite::current()) {
  detail::sim::block_barrier(
      has_scope(scope, FenceScope::Global) ? "barrier(Global)" : "barrier(Local)", where);
}
/// Warp (wavefront) barrier: waits for the threads of the calling thread's warp.
inline void wave_barrier(
    const detail::sim::SourceSite& where = detail::sim::SourceSite::current()) {
  detail::sim::warp_barrier(where);
}
/// Warp barrier among the lanes `mask` names (Numba's cuda.syncwarp(mask), CUDA's __syncwarp):
/// bit k is lane k of the calling thread's warp (lane: the thread's linear index in the block
/// modulo warp_size()); bits past the warp size are ignored. Waits until every thread the mask
/// names has called syncwarp with the same mask, or has returned (CUDA's rule); threads outside
/// the mask are not waited for. Memory written by the named threads before it is visible to them
/// after it. Fails the launch (LaunchFailure, from the stream's next synchronize) when the mask
/// does not name the calling thread, or when named threads wait at syncwarp calls with other
/// masks and nothing else can proceed (a deadlock on a GPU). `where` is the call site (left to its
/// default).
inline void syncwarp(std::uint64_t mask = ~std::uint64_t{0},
                     const detail::sim::SourceSite& where = detail::sim::SourceSite::current()) {
  detail::sim::warp_sync(mask, where);
}

}  // namespace devmem

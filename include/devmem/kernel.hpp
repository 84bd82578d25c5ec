// The kernel side of devmem: one kernel source for every backend (header-only).
//
// Compiled by nvcc (CUDA), hipcc (ROC) or the ordinary host compiler (host backend), the same
// source gets: kernel and device-function markers, launch, thread and block indices, block-shared
// memory (static and dynamic), per-thread local arrays, constant memory, block barriers with
// memory fences and warp (wavefront) barriers. This is Numba's cuda.shared.array,
// cuda.local.array, cuda.const.array_like, cuda.syncthreads, cuda.syncwarp and ROC's
// roc.shared.array, roc.barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE) and roc.wavebarrier.
// Random numbers (numba.cuda.random) are in <devmem/kernel_random.hpp>, reductions (cuda.reduce)
// in <devmem/kernel_reduce.hpp>.
//
//   DEVMEM_KERNEL void scale(devmem::ArrayView<float, 1> x, float factor) {
//     const std::int64_t i = devmem::global_id();
//     if (i < x.shape(0)) x[i] *= factor;
//   }
//   devmem::launch({(n + 255) / 256, 256, stream}, scale, device_array, 2.0f);  // Numba's order
//   devmem::launch({blocks, 256, shared_bytes, stream}, scale, device_array, 2.0f);  // CUDA's
//
// The host backend runs kernels in simulation, like Numba's CUDA simulator: every thread of a block
// really runs (as a fiber: a user-space thread with its own stack), barriers really wait until
// every thread of the block has arrived, shared memory is per block, local arrays are per thread,
// and blocks run in parallel on the machine's cores. A barrier that not every thread of the block
// reaches (some threads exited, or wait at another barrier) is reported as a launch failure naming
// the block, the threads and the barrier's source line, instead of hanging or silently passing.
// Array accesses are bounds-checked there too (LaunchFailure naming the index, the shape, the
// thread and the block; see <devmem/array_view.hpp> and devmem::host::set_bounds_checking).
//
// Which backend a launch uses: the kernel is compiled for one (nvcc: cuda, hipcc: roc, otherwise
// host) and runs on that backend's device; launching on another active backend throws
// InvalidArgument. An argument of the wrong kind for its parameter (host memory for an ArrayView,
// an array for a pointer, a number narrowed for an arithmetic parameter) is a compile error naming
// its position. Views inside a struct argument are checked and kept alive when the struct lists
// them (`auto devmem_views() const { return std::tie(x, y); }`); the simulator fails a kernel that
// indexes a view launch did not see. Errors of the launch
// configuration (a negative Dim3, block larger than the device allows, dynamic shared memory over
// its limit, an empty grid, a wrong view dtype or rank) throw InvalidArgument before anything is
// enqueued. A failure while the kernel runs is reported like
// an asynchronous device failure: BackendError from the next synchronize of its stream, on every
// backend and every stream (the default stream included: there the next synchronous operation on
// it, such as a copy to the host, reports it too).
//
// Thread safety: launch may be called from several threads; kernels on one stream run in launch
// order, kernels on different streams may run concurrently.
//
// The launch-time argument checks are in detail/kernel_arguments.hpp, the backend-specific parts
// in detail/kernel_{host,gpu,vendor}.hpp; this header includes them.
#pragma once

#include <devmem/array_view.hpp>
#include <devmem/device_array.hpp>
#include <devmem/error.hpp>
#include <devmem/export.hpp>
#include <devmem/stream.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace devmem {

/// Grid or block dimensions (CUDA's dim3). Unset dimensions are 1.
///
/// Built from any integer type, so that `{(n + 31) / 32, 32}` with an int or std::int64_t `n`
/// needs no cast: on the host a value that is negative or larger than UINT_MAX throws
/// InvalidArgument naming it ("Dim3: x = -3 is out of range (0 to 4294967295)"), instead of
/// wrapping around to a huge or small grid. In device code (a kernel building a Dim3) the value
/// is converted unchecked, as CUDA's dim3 converts. Values within range but past the device's
/// limits are refused by launch. Thread safety: a plain value.
struct Dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
  /// (1, 1, 1).
  constexpr Dim3() = default;
  /// (x, y, z); also the implicit conversion from one number, as for dim3.
  DEVMEM_HOST_DEVICE constexpr Dim3(unsigned x_, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
  /// The same from other integer types (checked on the host, see above).
  template <std::integral X, std::integral Y = unsigned, std::integral Z = unsigned>
    requires(!std::is_same_v<X, bool> && !std::is_same_v<Y, bool> && !std::is_same_v<Z, bool>)
  DEVMEM_HOST_DEVICE constexpr Dim3(X x_, Y y_ = 1u, Z z_ = 1u)
      : x(dimension(x_, "x")), y(dimension(y_, "y")), z(dimension(z_, "z")) {}
  /// Dimension 0 (x), 1 (y) or 2 (z).
  [[nodiscard]] DEVMEM_HOST_DEVICE constexpr unsigned operator[](int dim) const {
    return dim == 0 ? x : (dim == 1 ? y : z);
  }
  /// x * y * z: the number of blocks of a grid, or of threads of a block.
  [[nodiscard]] DEVMEM_HOST_DEVICE constexpr std::uint64_t volume() const {
    return std::uint64_t{x} * std::uint64_t{y} * std::uint64_t{z};
  }
  friend constexpr bool operator==(const Dim3&, const Dim3&) = default;

 private:
  template <class I>
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr unsigned dimension(
      I value, [[maybe_unused]] const char* axis) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
    // Device code cannot throw; a kernel computing dimensions gets dim3's plain conversion.
    return static_cast<unsigned>(value);
#else
    if (!std::in_range<unsigned>(value)) {
      if constexpr (std::is_signed_v<I>) {
        throw InvalidArgument(
            std::string("Dim3: ") + axis + " = " + std::to_string(static_cast<long long>(value)) +
            " is out of range (0 to " + std::to_string(std::numeric_limits<unsigned>::max()) + ")");
      } else {
        throw InvalidArgument(std::string("Dim3: ") + axis + " = " +
                              std::to_string(static_cast<unsigned long long>(value)) +
                              " is out of range (0 to " +
                              std::to_string(std::numeric_limits<unsigned>::max()) + ")");
      }
    }
    return static_cast<unsigned>(value);
#endif
  }
};

/// How a kernel is launched: `grid` blocks of `block` threads, `shared_bytes` of dynamic shared
/// memory per block (see dynamic_shared), on `stream` (unspecified: the current device's default
/// stream). Two orders are accepted:
///   {grid, block, shared_bytes = 0, stream = {}}  CUDA's <<<grid, block, shared_bytes, stream>>>
///   {grid, block, stream, shared_bytes = 0}       Numba's kernel[grid, block, stream, shared]
/// so `launch({blocks, threads, s}, k, ...)` runs on stream s. Thread safety: a plain value.
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  std::size_t shared_bytes = 0;
  Stream stream;

  /// An unset configuration: one block of one thread on the default stream.
  LaunchConfig() = default;
  /// {grid, block, shared_bytes, stream}, as CUDA's <<<grid, block, shared_bytes, stream>>>.
  // A constructor rather than an aggregate so that {grid, block} needs no trailing members
  // (-Wmissing-field-initializers would flag the aggregate form in users' code).
  LaunchConfig(Dim3 grid_, Dim3 block_, std::size_t shared_bytes_ = 0, Stream stream_ = {})
      : grid(grid_), block(block_), shared_bytes(shared_bytes_), stream(std::move(stream_)) {}
  /// {grid, block, stream, shared_bytes}, Numba's order (kernel[grid, block, stream, shared]).
  // The stream has no default here, so that {grid, block} stays unambiguous.
  LaunchConfig(Dim3 grid_, Dim3 block_, Stream stream_, std::size_t shared_bytes_ = 0)
      : grid(grid_), block(block_), shared_bytes(shared_bytes_), stream(std::move(stream_)) {}
};

/// Memory a barrier makes visible (ROC's CLK_LOCAL_MEM_FENCE / CLK_GLOBAL_MEM_FENCE); OR them
/// together for both.
enum class FenceScope : unsigned {
  Local = 1u << 0,   // shared (work-group) memory
  Global = 1u << 1,  // global (device) memory
};
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr FenceScope operator|(FenceScope a, FenceScope b) {
  return static_cast<FenceScope>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
/// True when `value` includes `scope`.
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr bool has_scope(FenceScope value, FenceScope scope) {
  return (static_cast<unsigned>(value) & static_cast<unsigned>(scope)) != 0;
}

namespace detail {
/// Extent `dim` of the constant shape N... (0 when dim >= sizeof...(N)). A fold rather than a
/// local array indexed at run time, which device compilers would have to place in memory.
template <std::size_t... N>
[[nodiscard]] DEVMEM_HOST_DEVICE constexpr std::size_t static_extent(std::size_t dim) {
  std::size_t result = 0;
  std::size_t d = 0;
  ((result = (d++ == dim) ? N : result), ...);
  return result;
}

/// Compiled by every shared_array declaration: a static shared array over 48 KiB (CUDA's limit for
/// a kernel's static __shared__ memory, which nvcc refuses to build) is a compile error on every
/// backend, the simulator included. `Bytes` (shown in the diagnostic) is the array's size.
template <std::size_t Bytes>
struct StaticSharedArrayBytes {
  static_assert(
      Bytes <= std::size_t{48} * 1024,
      "devmem::shared_array: this static shared array has more bytes (the Bytes of "
      "StaticSharedArrayBytes<Bytes>) than the 48 KiB (49152 bytes) CUDA allows a "
      "kernel's static shared memory: use dynamic shared memory instead "
      "(dynamic_shared<T>() with LaunchConfig's shared_bytes; launch opts in above 48 KiB)");
  static constexpr bool fits = true;
};
}  // namespace detail

template <class T, std::size_t... N>
class SharedArray;

namespace detail {
/// The type of a row of SharedArray<T, First, Rest...>: the same elements, shape Rest...
template <class T, std::size_t First, std::size_t... Rest>
struct SharedArrayRow {
  using type = SharedArray<T, Rest...>;
};

/// A C-order view of `extents` elements of T at `data`: what dynamic_shared_array returns.
template <class T, class... Extent>
[[nodiscard]] DEVMEM_HOST_DEVICE ArrayView<T, sizeof...(Extent)> c_order_view(T* data,
                                                                              Extent... extents) {
  constexpr std::size_t rank = sizeof...(Extent);
  const std::int64_t shape[rank] = {static_cast<std::int64_t>(extents)...};
  std::int64_t strides[rank] = {};
  auto stride = static_cast<std::int64_t>(sizeof(T));
  for (std::size_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return ArrayView<T, rank>(data, shape, strides);
}
}  // namespace detail

/// A block-shared array of constant shape N... (C order), as returned by shared_array.
/// Thread safety: every thread of the block sees the same elements; order accesses from several
/// threads with syncthreads() / barrier() as on a GPU.
template <class T, std::size_t... N>
class SharedArray {
  static_assert(sizeof...(N) >= 1, "a shared array has at least one dimension");

 public:
  /// Number of dimensions.
  static constexpr std::size_t rank = sizeof...(N);
  /// Number of elements, N0 * N1 * ...
  static constexpr std::size_t extent_count = (N * ...);

  /// Made by shared_array(), over the block's storage.
  DEVMEM_HOST_DEVICE explicit SharedArray(T* data) : data_(data) {}
  /// Element at the given indices, one per dimension, C order (bounds-checked by the host
  /// simulator only, as ArrayView is).
  template <class... Index>
    requires(sizeof...(Index) == rank && (std::is_integral_v<Index> && ...))
  DEVMEM_HOST_DEVICE T& operator()(Index... index) const {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    detail::sim::check_indices<N...>("shared_array", index...);
#endif
    std::size_t flat = 0;
    ((flat = flat * N + static_cast<std::size_t>(index)), ...);
    return data_[flat];
  }
  /// Element i in C order (flat index; checked by the host simulator only).
  DEVMEM_HOST_DEVICE T& operator[](std::size_t i) const {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    detail::sim::check_flat_index<N...>("shared_array", i);
#endif
    return data_[i];
  }
  /// Row i of an array of two or more dimensions (Numba's `tile[i]`): a SharedArray of shape
  /// N1, N2, ... over the same block memory, so writes through it are writes to this array, and it
  /// takes indexing and the atomics (atomic_add(tile.row(i), j, v)) as any shared array. An i
  /// outside [0, N0) fails the launch in the simulator (LaunchFailure, "shared_array row: index
  /// (i,) is out of bounds for shape (N0,)"); unchecked on a GPU.
  template <class Index>
    requires(rank >= 2 && std::is_integral_v<Index>)
  [[nodiscard]] DEVMEM_HOST_DEVICE auto row(Index i) const {
    constexpr std::size_t rows = detail::static_extent<N...>(0);
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    detail::sim::check_indices<rows>("shared_array row", i);
#endif
    return typename detail::SharedArrayRow<T, N...>::type(data_ + static_cast<std::size_t>(i) *
                                                                      (extent_count / rows));
  }
  /// The first element's address in shared memory.
  [[nodiscard]] DEVMEM_HOST_DEVICE T* data() const { return data_; }
  /// Number of elements (Numba's `arr.size`).
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr std::size_t size() { return extent_count; }
  /// Length of dimension `dim` < rank (Numba's `arr.shape[dim]`).
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr std::size_t shape(std::size_t dim) {
    return detail::static_extent<N...>(dim);
  }
  /// The same as shape(dim), the name ArrayView and std::mdspan use.
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr std::size_t extent(std::size_t dim) {
    return shape(dim);
  }

 private:
  T* data_;
};

/// A per-thread scratch array of constant shape N... (C order), Numba's cuda.local.array:
///   devmem::local_array<float, 8> scratch;   // in a kernel; uninitialised like a C array
/// An aggregate holding its elements, so each thread's copy lives in its own (local) memory.
template <class T, std::size_t... N>
struct local_array {
  static_assert(sizeof...(N) >= 1, "a local array has at least one dimension");
  /// Number of dimensions.
  static constexpr std::size_t rank = sizeof...(N);
  /// Number of elements, N0 * N1 * ...
  static constexpr std::size_t extent_count = (N * ...);

  /// Element at the given indices, one per dimension, C order (bounds-checked by the host
  /// simulator only, as ArrayView is).
  template <class... Index>
    requires(sizeof...(Index) == rank && (std::is_integral_v<Index> && ...))
  DEVMEM_HOST_DEVICE T& operator()(Index... index) {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    detail::sim::check_indices<N...>("local_array", index...);
#endif
    std::size_t flat = 0;
    ((flat = flat * N + static_cast<std::size_t>(index)), ...);
    return elements[flat];
  }
  /// Element i in C order (flat index; checked by the host simulator only).
  DEVMEM_HOST_DEVICE T& operator[](std::size_t i) {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    detail::sim::check_flat_index<N...>("local_array", i);
#endif
    return elements[i];
  }
  /// Element i of a const array.
  DEVMEM_HOST_DEVICE const T& operator[](std::size_t i) const {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    detail::sim::check_flat_index<N...>("local_array", i);
#endif
    return elements[i];
  }
  /// The first element's address.
  [[nodiscard]] DEVMEM_HOST_DEVICE T* data() { return elements; }
  /// Number of elements (Numba's `arr.size`).
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr std::size_t size() { return extent_count; }
  /// Length of dimension `dim` < rank (Numba's `arr.shape[dim]`).
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr std::size_t shape(std::size_t dim) {
    return detail::static_extent<N...>(dim);
  }
  /// The same as shape(dim), the name ArrayView and std::mdspan use.
  [[nodiscard]] DEVMEM_HOST_DEVICE static constexpr std::size_t extent(std::size_t dim) {
    return shape(dim);
  }

  T elements[extent_count];
};

namespace detail {

/// The tag of an untagged shared_array on the GPU backends: untagged arrays of the same type and
/// shape are one __shared__ variable there (see shared_array in the host simulator, which reports
/// two such call sites in one kernel as a launch failure).
struct SharedArrayDefaultTag {};

/// Where a launch goes, after launch_prepare checked it.
struct PreparedLaunch {
  Stream stream;  // the resolved stream (never unspecified)
  int device = 0;
  /// The kernel's name for error messages ("saxpy"; "kernel" when it is not known).
  std::string kernel_name;
  /// Dynamic shared memory a kernel may use without opting in (above it, the GPU layers opt in).
  std::size_t default_shared_limit = 0;
  /// Shared memory (static and dynamic together) a block may use after opting in.
  std::size_t opt_in_shared_limit = 0;
};

/// Resolves the stream, checks that the active backend is `compiled_for` and that the grid, block
/// and dynamic shared memory fit the device (InvalidArgument naming the values otherwise), and
/// makes the device current on this thread. `compiled_architectures` (";"- or ","-separated,
/// e.g. "gfx90a,gfx1030"; empty: not known) lists the GPU architectures the kernel has code for: a
/// device of another architecture is refused with InvalidArgument naming both, instead of the
/// runtime's abort at code-object load.
[[nodiscard]] DEVMEM_API PreparedLaunch
launch_prepare(const LaunchConfig& config, std::string_view compiled_for,
               std::string_view kernel_name, std::string_view compiled_architectures = {});
/// The device whose constant memory const_array_like fills: `stream`'s device, or the current
/// context's for an unspecified stream (copy_to_constant makes it current for the copy only).
[[nodiscard]] DEVMEM_API int constant_memory_device(const Stream& stream = {});
/// InvalidArgument "devmem::launch(<kernel>): argument <index>: <what>".
[[noreturn]] DEVMEM_API void throw_argument_error(const PreparedLaunch& launch, std::size_t index,
                                                  std::string_view what);
/// The name the enclosing function's signature gives its template parameter `Kernel`
/// (__PRETTY_FUNCTION__ of kernel_name_of<saxpy>: "... [with auto Kernel = saxpy; ...]" from GCC
/// and nvcc, "... [Kernel = &saxpy]" from Clang); empty when the signature has no such parameter.
[[nodiscard]] constexpr std::string_view kernel_name_in_signature(std::string_view signature) {
  constexpr std::string_view key = "Kernel = ";
  const std::size_t at = signature.find(key);
  if (at == std::string_view::npos) return {};
  std::string_view rest = signature.substr(at + key.size());
  if (rest.starts_with('&')) rest.remove_prefix(1);
  // A kernel in an unnamed namespace: GCC writes "{anonymous}::", Clang "(anonymous
  // namespace)::", and nvcc's front end, which gives unnamed namespaces a per-file name in the
  // host code, "_GLOBAL__N__<hash>_<length>_<file>_<hash>::" (seen on an H100 with CUDA 13);
  // the name alone reads better.
  for (const std::string_view unnamed :
       {std::string_view("{anonymous}::"), std::string_view("(anonymous namespace)::")}) {
    if (rest.starts_with(unnamed)) rest.remove_prefix(unnamed.size());
  }
  if (constexpr std::string_view nvcc_unnamed = "_GLOBAL__N__"; rest.starts_with(nvcc_unnamed)) {
    if (const std::size_t end = rest.find("::"); end != std::string_view::npos) {
      rest.remove_prefix(end + 2);
    }
  }
  int depth = 0;  // inside <...> or (...), where ';' ',' ']' belong to the name
  for (std::size_t i = 0; i != rest.size(); ++i) {
    const char c = rest[i];
    if (c == '<' || c == '(') ++depth;
    if (c == '>' || c == ')') --depth;
    if (depth == 0 && (c == ';' || c == ',' || c == ']')) return rest.substr(0, i);
  }
  return {};
}
/// The name of the kernel `Kernel` as the compiler spells it: "saxpy", "ns::scale<float>".
template <auto Kernel>
[[nodiscard]] std::string_view kernel_name_of() {
  return kernel_name_in_signature(__PRETTY_FUNCTION__);
}
/// The name of the function at `kernel` (demangled, without parameters or unnamed namespaces:
/// "saxpy", "scale<float>"), for kernels launched through a pointer: from the dynamic symbol
/// table, else from the static symbol table (.symtab) of the executable or library that holds it,
/// so that neither -rdynamic nor external linkage is needed. "kernel" when neither has it (a
/// stripped binary) or `kernel` is not the start of a function. Looked up once per address (the
/// file is mapped and read once), then cached; thread-safe; throws nothing but std::bad_alloc.
[[nodiscard]] DEVMEM_API std::string kernel_symbol_name(const void* kernel);
/// InvalidArgument unless every array passed to a launch is on the launch's device.
DEVMEM_API void launch_check_array(const PreparedLaunch& launch, const DeviceArray& array,
                                   std::size_t argument_index);
/// The device memory that an ArrayView argument's data lies in (a DeviceArray's allocation, a
/// mapped or foreign view devmem made), while an array still holds it; null for memory devmem does
/// not know (a view the application built over its own pointer).
[[nodiscard]] DEVMEM_API std::shared_ptr<const void> launch_view_owner(const void* data);
/// InvalidArgument naming argument `argument` of the launch, the view's `shape` (`rank` values)
/// and its allocation when the allocation `generation` a view carries (non-zero: the view came
/// from DeviceArray::view) is no longer alive: its array was freed, and the memory at `data` may
/// already be another array's.
DEVMEM_API void check_view_alive(const PreparedLaunch& launch, std::size_t argument,
                                 const void* data, std::uint64_t generation,
                                 const std::int64_t* shape, std::size_t rank);
/// Makes the launch on `stream` wait for the stream-ordered allocation of each of `memory` (what
/// launch_keep_alive collected: device memory owners only) made on another stream and not yet
/// known complete (MemoryManager::allocates_in_stream_order). Call before enqueueing the kernel.
DEVMEM_API void order_launch_after_allocations(
    const Stream& stream, const std::vector<std::shared_ptr<const void>>& memory);
/// InvalidArgument naming the values unless the kernel's `static_bytes` of shared memory and the
/// launch's `dynamic_bytes` fit the device's opt-in limit together (the GPU layers, which know the
/// kernel's static size, call it for launches above the default limit).
DEVMEM_API void check_shared_memory_total(const PreparedLaunch& launch, std::size_t static_bytes,
                                          std::size_t dynamic_bytes);
/// Keeps `objects` alive until the work enqueued on `stream` so far has completed.
DEVMEM_API void keep_alive_until_complete(const Stream& stream,
                                          std::vector<std::shared_ptr<const void>> objects);
/// InvalidArgument unless `count` values fill a constant array of `capacity` elements exactly.
DEVMEM_API void check_constant_size(const char* operation, std::size_t capacity, std::size_t count);
/// InvalidArgument naming both shapes unless a host array of `shape` fills a 2-d constant array of
/// shape `extents` exactly.
DEVMEM_API void check_constant_shape(const char* operation, std::span<const std::size_t> extents,
                                     const Shape& shape);

/// The C array type of a constant array of shape N... (T[N0][N1]...), what DEVMEM_CONSTANT_ARRAY
/// declares on the GPU backends.
template <class T, std::size_t First, std::size_t... Rest>
struct ConstantArrayType {
  using type = typename ConstantArrayType<T, Rest...>::type[First];
};
template <class T, std::size_t N>
struct ConstantArrayType<T, N> {
  using type = T[N];
};
/// BackendError for a failed vendor launch call.
[[noreturn]] DEVMEM_API void throw_launch_error(std::string_view backend, std::string_view function,
                                                int code, std::string_view code_name,
                                                std::string_view description);

}  // namespace detail
}  // namespace devmem

#include <devmem/detail/kernel_arguments.hpp>  // launch's argument checks

// DEVMEM_HIPCPU_CUDA / DEVMEM_HIPCPU_ROC: set by the cuda-hipcpu / roc-hipcpu presets for kernel
// sources that the host compiler builds against HIP-CPU (cpu_standins/hipcpu/).
#if defined(__CUDACC__) || defined(DEVMEM_HIPCPU_CUDA)
#include <devmem/detail/kernel_vendor.hpp>
#elif defined(__HIPCC__) || defined(DEVMEM_HIPCPU_ROC)
#define DEVMEM_KERNEL_VENDOR_HIP 1
#include <devmem/detail/kernel_vendor.hpp>
#else
#include <devmem/detail/kernel_host.hpp>
#endif
#include <devmem/kernel_atomic.hpp>  // atomics, grid<N>(), gridsize<N>()

/// Declares a block-shared array named `name` of element type T and shape `...`, distinct from
/// every other shared array of the kernel: DEVMEM_SHARED_ARRAY(tile, float, 16, 16);
///
/// shared_array<T, N...>() without a tag names the array by its type and shape alone: on CUDA and
/// ROC two untagged call sites of the same type and shape in one kernel are silently the same
/// memory (the GPU compilers cannot tell the call sites apart). The host backend's simulator
/// detects it and fails the launch naming both source lines, so run kernels on the host backend
/// in tests. Numba gives every cuda.shared.array call its own memory; here each array needs a tag
/// (this macro, or shared_array<T, N...>([] {})) unless it is the only one of its type and shape.
/// The same call site reached again (a loop, a device function called twice) is the same array,
/// as a __shared__ declaration is. An array of more than 48 KiB is a compile error on every backend
/// (detail::StaticSharedArrayBytes): use dynamic_shared<T>() for more.
#define DEVMEM_SHARED_ARRAY(name, T, ...) auto name = ::devmem::shared_array<T, __VA_ARGS__>([] {})

namespace devmem {

namespace detail {
/// launch(), with the kernel's name when known (empty: looked up from the symbol table).
template <class... Params, class... Args>
void launch_named(std::string_view name, const LaunchConfig& config, void (*kernel)(Params...),
                  Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args),
                "devmem::launch: the number of arguments must match the kernel's parameters");
  static_assert((!std::is_reference_v<Params> && ...),
                "devmem::launch: kernel parameters are passed by value (as on a GPU)");
  if constexpr (sizeof...(Params) == sizeof...(Args) && (!std::is_reference_v<Params> && ...)) {
    // Nothing below is instantiated for arguments that do not fit: the static_assert above is the
    // whole diagnostic, not the first of many inside KernelArgument.
    if constexpr (check_arguments<std::tuple<Params...>, std::tuple<Args...>>(
                      std::index_sequence_for<Args...>{})) {
      if (kernel == nullptr) throw InvalidArgument("devmem::launch: the kernel is a null pointer");
      const std::string known_name = name.empty()
                                         ? kernel_symbol_name(reinterpret_cast<const void*>(kernel))
                                         : std::string(name);
      const PreparedLaunch prepared =
          launch_prepare(config, kKernelBackend, known_name, kKernelArchitectures);
      [&](auto&&... passed) {
        auto keep_alive =
            launch_keep_alive(prepared, std::index_sequence_for<Args...>{}, passed...);
        auto arguments =
            convert_kernel_arguments<Params...>(prepared, std::index_sequence_for<Args...>{},
                                                std::forward<decltype(passed)>(passed)...);
        launch_on_backend(prepared, config, kernel, std::move(arguments), std::move(keep_alive));
      }(launch_argument<Params>(std::forward<Args>(args))...);
    }
  }
}
}  // namespace detail

/// Launches `kernel` with `config` on the stream's device: a DeviceArray argument becomes the
/// kernel's ArrayView parameter (dtype, rank and alignment checked as by DeviceArray::view), and so
/// does a MappedArray (its device() view, with the same checks); every other argument is copied.
/// The memory of every array argument is kept alive until the kernel has run: a DeviceArray's, a
/// MappedArray's, and that of an ArrayView into memory devmem allocated or viewed (so
/// `launch(cfg, k, devmem::device_array<float>({n}).view<float, 1>())` is safe; a view over a
/// pointer devmem never saw is the caller's to keep alive). Numba keeps its arguments alive the
/// same way.
///
/// Asynchronous on its stream, the default stream included: launch returns once the kernel is
/// enqueued, usually before it has run, as on CUDA (the host backend's simulator runs it on a
/// worker thread). Host code sees its results only after an ordering operation: a synchronize
/// (Stream, Context, Event), or a later operation on the stream that waits for it (a copy to the
/// host on the default stream returns with the kernel's results). Reading host-accessible memory
/// the kernel writes (managed, mapped or registered host memory) right after launch is a race,
/// on every backend.
///
/// Errors: an argument that cannot be given for its parameter, or a number that would be narrowed
/// for its arithmetic parameter (is_narrowing), is a compile error naming its position, counted
/// from 0 like the run-time messages ("devmem::launch: argument 2 is host memory
/// (HostArray): use to_device() or mapped_array()"); Numba would copy a NumPy array to the device
/// and back on every launch, devmem asks for the copy to be explicit. Throws InvalidArgument for a
/// bad configuration or argument (a grid or block past the device's limits, named with the
/// values; an array on another device; a wrong view dtype or rank; a view, given directly or
/// listed by a struct argument's devmem_views(), of an array that has been freed), BackendError
/// when the vendor rejects the launch. Messages name the kernel by its symbol (kernel_symbol_name).
template <class... Params, class... Args>
void launch(const LaunchConfig& config, void (*kernel)(Params...), Args&&... args) {
  detail::launch_named({}, config, kernel, std::forward<Args>(args)...);
}

/// The same for the kernel given as a template argument, Numba's `saxpy[grid, block](x, y)` as
/// `devmem::launch<saxpy>({grid, block}, x, y)`: the same checks and errors, and every message
/// (launch errors, and on the host backend bounds-check and barrier failures) names the kernel
/// as the compiler spells it; the pointer form finds the name in the binary's symbol tables (see
/// kernel_symbol_name), which a stripped binary does not have.
template <auto Kernel, class... Args>
  requires std::is_pointer_v<decltype(Kernel)> &&
           std::is_function_v<std::remove_pointer_t<decltype(Kernel)>>
void launch(const LaunchConfig& config, Args&&... args) {
  detail::launch_named(detail::kernel_name_of<Kernel>(), config, Kernel,
                       std::forward<Args>(args)...);
}

/// Fills the constant array `symbol` (declared with DEVMEM_CONSTANT_ARRAY, 1-d or 2-d) with
/// `values` in C order, which must have exactly as many elements (InvalidArgument otherwise), on
/// the device of `stream` (the current device for an unspecified stream): constant memory is per
/// device, so fill it for the device the kernels that read it are launched on. Waits for kernels
/// already launched on the device's default-synchronising streams, like cudaMemcpyToSymbol;
/// kernels launched later see the new values.
template <class Symbol, class Values>
  requires std::is_array_v<Symbol> && requires(const Values& v) {
                                        std::data(v);
                                        std::size(v);
                                      }
void const_array_like(Symbol& symbol, const Values& values, const Stream& stream = {}) {
  using T = std::remove_all_extents_t<Symbol>;
  using Value = std::remove_cv_t<std::remove_pointer_t<decltype(std::data(values))>>;
  static_assert(std::is_same_v<Value, std::remove_cv_t<T>>,
                "const_array_like: the values' element type must be the constant array's");
  constexpr std::size_t count = sizeof(Symbol) / sizeof(T);
  const auto given = static_cast<std::size_t>(std::size(values));
  detail::check_constant_size("const_array_like", count, given);
  // The smaller of two equal sizes: GCC's -Warray-bounds does not know that the check throws
  // otherwise, and would see a copy past the end of a shorter container.
  detail::copy_to_constant(symbol, detail::constant_memory_device(stream), std::data(values),
                           (given < count ? given : count) * sizeof(T));
}
/// The same from a host array (Numba's cuda.const.array_like(host_array)): its dtype must be the
/// element type, and its shape the constant array's (for a 1-d constant array, its size), else
/// InvalidArgument naming both.
template <class Symbol>
  requires std::is_array_v<Symbol>
void const_array_like(Symbol& symbol, const HostArray& values, const Stream& stream = {}) {
  using T = std::remove_all_extents_t<Symbol>;
  constexpr std::size_t count = sizeof(Symbol) / sizeof(T);
  detail::check_dtype(dtype_of<std::remove_cv_t<T>>(), values.dtype(), "const_array_like");
  if constexpr (std::rank_v<Symbol> == 1) {
    detail::check_constant_size("const_array_like", count, static_cast<std::size_t>(values.size()));
  } else {
    const std::size_t extents[] = {std::extent_v<Symbol, 0>, std::extent_v<Symbol, 1>};
    static_assert(std::rank_v<Symbol> == 2, "const_array_like: constant arrays are 1-d or 2-d");
    detail::check_constant_shape("const_array_like", extents, values.shape());
  }
  const HostArray dense = values.is_c_contiguous() ? values : values.copy(Order::C);
  detail::copy_to_constant(symbol, detail::constant_memory_device(stream), dense.data(),
                           count * sizeof(T));
}

}  // namespace devmem

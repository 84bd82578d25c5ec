// A reduction over a device array with a binary functor, as numba.cuda.reduce makes one:
//
//   struct Max {
//     DEVMEM_HOST_DEVICE float operator()(float a, float b) const { return a < b ? b : a; }
//   };
//   float m = devmem::reduce<float>(x, Max{}, {.init = -INFINITY});  // max_reduce(x, init=...)
//   devmem::reduce_into<double>(y, std::plus<>{}, result);           // sum_reduce(y, res=result)
//
// Two stages, both kernels compiled in the caller's translation unit (so by nvcc or hipcc for a
// GPU build, from the same source): up to 64 blocks of 256 threads each combine their share of the
// elements into one partial value per block (a grid-stride loop, then a tree in shared memory),
// and one block combines the partials and `init`. Any size works: 0 elements give `init`, one
// element gives op(init, x[0]). The functor must be associative and commutative (the order in
// which elements are combined is unspecified, as in Numba and std::reduce), callable in device
// code (a struct with a DEVMEM_HOST_DEVICE operator(), or std::plus<> and friends, which nvcc
// accepts with --expt-relaxed-constexpr as devmem_add_kernel_sources passes), and trivially
// copyable (it is a kernel argument).
#pragma once

#include <devmem/kernel.hpp>
#include <devmem/memory.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

namespace devmem {

/// What a reduction takes besides the array and the functor (Numba's keyword arguments).
template <class T>
struct ReduceOptions {
  /// Combined once with the elements; the result for an empty array (Numba's init, 0 there too).
  T init = T{};
  /// Reduces the first `size` elements only (Numba's size); unset: all of them.
  std::optional<std::int64_t> size = std::nullopt;
  /// The stream the kernels run on (unspecified: the array's stream).
  Stream stream = {};
};

namespace detail::reduction {

/// Threads per block of both stages, and blocks of the first stage at most (Numba uses 64 too).
inline constexpr unsigned kBlockThreads = 256;
inline constexpr unsigned kMaxBlocks = 64;

/// Whether the block combines its result with init (the single block of the last stage).
enum class Init : unsigned char { Skip, Apply };

/// The shared array of the per-thread values (one per element type).
struct PartialsTag {};

/// Block b combines elements i < n with i % threads == t for its threads t (every thread below
/// `threads` has at least one, since threads <= n), then its threads' values by a tree in shared
/// memory, into out[b] (combined with init when `init_use` says so). Every thread of the block
/// reaches the same barriers.
template <class T, class F>
DEVMEM_KERNEL void reduce_stage(ArrayView<const T, 1> in, std::int64_t n, std::int64_t threads,
                                ArrayView<T, 1> out, F op, T init, Init init_use) {
  auto partial = shared_array<T, kBlockThreads>(PartialsTag{});
  const auto tid = static_cast<std::int64_t>(thread_idx().x);
  const std::int64_t block_start = static_cast<std::int64_t>(block_idx().x) * block_dim().x;
  const std::int64_t gid = block_start + tid;
  // The block's threads that hold a value (std::min is host code for nvcc without
  // --expt-relaxed-constexpr).
  const std::int64_t block_threads = block_dim().x;
  const std::int64_t active =
      threads - block_start < block_threads ? threads - block_start : block_threads;
  if (gid < threads) {
    T acc = in[gid];
    for (std::int64_t i = gid + threads; i < n; i += threads) acc = op(acc, in[i]);
    partial[static_cast<std::size_t>(tid)] = acc;
  }
  syncthreads();
  std::int64_t span = 1;
  while (span < active) span *= 2;
  for (std::int64_t half = span / 2; half > 0; half /= 2) {
    if (tid < half && tid + half < active) {
      partial[static_cast<std::size_t>(tid)] =
          op(partial[static_cast<std::size_t>(tid)], partial[static_cast<std::size_t>(tid + half)]);
    }
    syncthreads();
  }
  if (tid == 0) {
    out[block_idx().x] = init_use == Init::Apply ? op(init, partial[0]) : partial[0];
  }
}

/// out[0] = init: the result of reducing no elements.
template <class T>
DEVMEM_KERNEL void store_init(ArrayView<T, 1> out, T init) {
  out[0] = init;
}

/// InvalidArgument naming `operation` unless `array` is a 1-d array of T's dtype with at least
/// `min_size` elements (`what`: "array" or "result").
DEVMEM_API void check_reduce_array(const char* operation, const char* what, const DType& expected,
                                   const DeviceArray& array, std::int64_t min_size);
/// The number of elements to reduce: `size` when set (InvalidArgument unless 0 <= size <= the
/// array's size), else the array's size.
[[nodiscard]] DEVMEM_API std::int64_t reduce_count(const char* operation, const DeviceArray& array,
                                                   std::optional<std::int64_t> size);

}  // namespace detail::reduction

/// Reduces the elements of the 1-d device array `array` (dtype T) with `op` and options.init into
/// result[0] (a 1-d device array of dtype T with at least one element; Numba's `res=`), on
/// options.stream (unspecified: the array's stream). Asynchronous: returns once the kernels are
/// enqueued (result[0] is written when the stream gets there; nothing is copied to the host). For
/// no elements, result[0] = init (Numba returns init and leaves res unwritten). Throws
/// InvalidArgument, before anything is enqueued, for an array or result that is not 1-d or not of
/// T's dtype, an empty result, or options.size outside [0, array.size()], each naming the values;
/// and what devmem::launch throws. Thread-safe (several reductions may run at once; each
/// allocates its own partials).
template <Element T, class F>
void reduce_into(const DeviceArray& array, F op, const DeviceArray& result,
                 const ReduceOptions<T>& options = {}) {
  static_assert(std::is_trivially_copyable_v<F>,
                "devmem::reduce: the functor is a kernel argument and must be trivially copyable");
  static_assert(std::is_invocable_r_v<T, const F&, T, T>,
                "devmem::reduce: the functor must combine two T values into a T");
  using detail::reduction::Init;
  using detail::reduction::kBlockThreads;
  using detail::reduction::kMaxBlocks;
  detail::reduction::check_reduce_array("reduce", "array", dtype_of<T>(), array, 0);
  detail::reduction::check_reduce_array("reduce", "result", dtype_of<T>(), result, 1);
  const std::int64_t n = detail::reduction::reduce_count("reduce", array, options.size);
  const Stream& stream = options.stream.is_specified() ? options.stream : array.stream();
  if (n == 0) {
    launch<&detail::reduction::store_init<T>>({1, 1, stream}, result, options.init);
    return;
  }
  const std::int64_t threads = std::min<std::int64_t>(n, std::int64_t{kBlockThreads} * kMaxBlocks);
  const std::int64_t block = std::min<std::int64_t>(threads, kBlockThreads);
  const std::int64_t blocks = (threads + block - 1) / block;
  if (blocks == 1) {
    launch<&detail::reduction::reduce_stage<T, F>>({1, block, stream}, array, n, threads, result,
                                                   op, options.init, Init::Apply);
    return;
  }
  const DeviceArray partials = device_array<T>({blocks}, stream);
  launch<&detail::reduction::reduce_stage<T, F>>({blocks, block, stream}, array, n, threads,
                                                 partials, op, options.init, Init::Skip);
  launch<&detail::reduction::reduce_stage<T, F>>({1, blocks, stream}, partials, blocks, blocks,
                                                 result, op, options.init, Init::Apply);
}

/// The same, returning the result to the host (Numba's `sum_reduce(x)` without res=): waits for
/// the reduction and the copy on the stream before it returns. Throws as reduce_into, and the
/// kernels' failures (BackendError) from that wait.
template <Element T, class F>
[[nodiscard]] T reduce(const DeviceArray& array, F op, const ReduceOptions<T>& options = {}) {
  const Stream& stream = options.stream.is_specified() ? options.stream : array.stream();
  const DeviceArray result = device_array<T>({1}, stream);
  reduce_into<T>(array, op, result, options);
  return result.to_vector<T>(stream)[0];
}

}  // namespace devmem

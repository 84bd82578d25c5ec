// Kernel conveniences with Numba's meaning on every backend: atomic operations on array elements
// (Numba's cuda.atomic.add/sub/max/min/exch/compare_and_swap/cas) and the absolute position and
// size of the grid (cuda.grid(ndim), cuda.gridsize(ndim)). Included by <devmem/kernel.hpp>.
//
//   DEVMEM_KERNEL void histogram(devmem::ArrayView<const int, 1> in, devmem::ArrayView<int, 1>
//   bins) {
//     for (std::int64_t i = devmem::grid<1>(); i < in.shape(0); i += devmem::gridsize<1>())
//       devmem::atomic_add(bins, in[i], 1);         // Numba: cuda.atomic.add(bins, in[i], 1)
//   }
//   auto [x, y] = devmem::grid<2>();                // Numba: x, y = cuda.grid(2)
//   devmem::atomic_max(image, {y, x}, value);       // Numba: cuda.atomic.max(image, (y, x), value)
//   devmem::atomic_max(image(y, x), value);         // the same on the element itself
//
// Element types: 32- and 64-bit signed and unsigned integers, float and double (compare-and-swap:
// the integers only, as in Numba). Each operation is one atomic read-modify-write of the element
// and returns the element's value before it ("old"), as Numba's do. The operations are relaxed
// (CUDA's atomicAdd and friends): they order nothing else; use syncthreads()/barrier() or the end
// of the kernel to publish other writes. The element must be in device (global) or shared memory
// and naturally aligned (DeviceArray::view checks that).
//
// Per backend: CUDA and HIP use their atomic intrinsics (atomicAdd, atomicMax, atomicExch,
// atomicCAS; float and double max/min, pre-sm_60 double add and HIP's signed 64-bit max/min are
// compare-and-swap loops, as in Numba); the host simulator uses std::atomic_ref, so races between
// simulated threads of different blocks, which run on different cores, are real and are handled as
// on a GPU.
//
// Differences from Numba: the index is an integer for 1-d views or a braced list ({i, j}) for
// others, instead of an int or a tuple; integer overflow wraps (two's complement) for signed types
// too, as on the GPU; grid<N>() and gridsize<N>() take the dimension count as a template argument,
// since it decides the return type (std::int64_t for 1, Coord<N> for 2 and 3).
//
// Thread safety: that is what they are for: any number of threads of any blocks may apply them to
// the same element concurrently. A plain (non-atomic) access racing with them is a data race.
#pragma once

// It builds on the backend's kernel layer (global_id, block_dim, DEVMEM_DETAIL_DEVICE), which
// kernel.hpp selects before including this file.
#if !defined(DEVMEM_DETAIL_DEVICE)
#error "include <devmem/kernel.hpp>, which includes <devmem/kernel_atomic.hpp>"
#endif

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#if !(defined(__CUDACC__) || defined(DEVMEM_HIPCPU_CUDA) || defined(__HIPCC__) || \
      defined(DEVMEM_HIPCPU_ROC))
#include <atomic>
#define DEVMEM_DETAIL_ATOMIC_SIMULATOR 1
#endif

namespace devmem {

/// N 64-bit values, x first: the position or size grid<N>() and gridsize<N>() return for N = 2 or
/// 3 (a tuple in Numba). An aggregate, usable in device code and with structured bindings:
/// `auto [x, y] = devmem::grid<2>();`.
template <std::size_t N>
struct Coord;
template <>
struct Coord<2> {
  std::int64_t x = 0;
  std::int64_t y = 0;
  /// Value `dim` (0 = x, 1 = y).
  [[nodiscard]] DEVMEM_HOST_DEVICE constexpr std::int64_t operator[](int dim) const {
    return dim == 0 ? x : y;
  }
  // Written out rather than defaulted: nvcc calls only __host__ __device__ functions from device
  // code.
  [[nodiscard]] DEVMEM_HOST_DEVICE friend constexpr bool operator==(const Coord& a,
                                                                    const Coord& b) {
    return a.x == b.x && a.y == b.y;
  }
};
template <>
struct Coord<3> {
  std::int64_t x = 0;
  std::int64_t y = 0;
  std::int64_t z = 0;
  /// Value `dim` (0 = x, 1 = y, 2 = z).
  [[nodiscard]] DEVMEM_HOST_DEVICE constexpr std::int64_t operator[](int dim) const {
    return dim == 0 ? x : (dim == 1 ? y : z);
  }
  [[nodiscard]] DEVMEM_HOST_DEVICE friend constexpr bool operator==(const Coord& a,
                                                                    const Coord& b) {
    return a.x == b.x && a.y == b.y && a.z == b.z;
  }
};

/// The calling thread's absolute position in the grid (Numba's cuda.grid(N)): for N = 1 the
/// global x index as one number, for N = 2 or 3 a Coord of the x, y (and z) indices. Only in
/// kernels (on the host backend: InvalidArgument outside a kernel, as thread_idx()).
template <std::size_t N>
  requires(N >= 1 && N <= 3)
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline auto grid() {
  if constexpr (N == 1) {
    return global_id(0);
  } else if constexpr (N == 2) {
    return Coord<2>{global_id(0), global_id(1)};
  } else {
    return Coord<3>{global_id(0), global_id(1), global_id(2)};
  }
}

/// The number of threads of the whole grid along each dimension, block_dim() * grid_dim()
/// (Numba's cuda.gridsize(N)): one number for N = 1, a Coord for 2 and 3; the stride of a
/// grid-stride loop. Only in kernels.
template <std::size_t N>
  requires(N >= 1 && N <= 3)
[[nodiscard]] DEVMEM_DETAIL_DEVICE inline auto gridsize() {
  const Dim3 block = block_dim();
  const Dim3 blocks = grid_dim();
  const auto along = [&](int dim) {
    return static_cast<std::int64_t>(block[dim]) * static_cast<std::int64_t>(blocks[dim]);
  };
  if constexpr (N == 1) {
    return along(0);
  } else if constexpr (N == 2) {
    return Coord<2>{along(0), along(1)};
  } else {
    return Coord<3>{along(0), along(1), along(2)};
  }
}

namespace detail {

/// Element types of the atomic operations.
template <class T>
inline constexpr bool is_atomic_integer =
    std::is_integral_v<T> && !std::is_same_v<T, bool> && (sizeof(T) == 4 || sizeof(T) == 8);
template <class T>
inline constexpr bool is_atomic_value =
    is_atomic_integer<T> || std::is_same_v<T, float> || std::is_same_v<T, double>;

/// The element of `view` at `index` (one index per dimension).
template <class T, std::size_t Rank, std::size_t... I>
DEVMEM_DETAIL_DEVICE inline T& atomic_element(const ArrayView<T, Rank>& view,
                                              const std::int64_t (&index)[Rank],
                                              std::index_sequence<I...>) {
  return view(index[I]...);
}

/// Numba's rule for float max/min: a NaN operand leaves the element as it is.
template <class T>
DEVMEM_DETAIL_DEVICE inline bool keeps_element(T old, T value, bool is_max) {
  if (value != value || old != old) return true;  // NaN
  return is_max ? !(old < value) : !(value < old);
}

/// The same bits as another type of the same size. __builtin_memcpy: the one spelling usable in
/// device code by nvcc, hipcc and g++ (std::bit_cast is a host function under nvcc, and hipcc's
/// std::memcpy is a host function).
template <class To, class From>
DEVMEM_DETAIL_DEVICE inline To same_bits(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  __builtin_memcpy(&to, &from, sizeof(To));
  return to;
}

#if defined(DEVMEM_DETAIL_ATOMIC_SIMULATOR)

// The simulator: std::atomic_ref on the element. Relaxed, as the GPU intrinsics are.
constexpr auto kAtomicOrder = std::memory_order_relaxed;

template <class T>
T atomic_fetch_add(T& target, T value) {
  return std::atomic_ref<T>(target).fetch_add(value, kAtomicOrder);
}
template <class T>
T atomic_fetch_sub(T& target, T value) {
  return std::atomic_ref<T>(target).fetch_sub(value, kAtomicOrder);
}
template <class T>
T atomic_fetch_max_min(T& target, T value, bool is_max) {
  std::atomic_ref<T> ref(target);
  T old = ref.load(kAtomicOrder);
  while (true) {
    if constexpr (std::is_floating_point_v<T>) {
      if (keeps_element(old, value, is_max)) return old;
    } else {
      if (is_max ? !(old < value) : !(value < old)) return old;
    }
    if (ref.compare_exchange_weak(old, value, kAtomicOrder)) return old;
  }
}
template <class T>
T atomic_swap(T& target, T value) {
  return std::atomic_ref<T>(target).exchange(value, kAtomicOrder);
}
template <class T>
T atomic_cas(T& target, T expected, T desired) {
  std::atomic_ref<T>(target).compare_exchange_strong(expected, desired, kAtomicOrder);
  return expected;  // the old value whether or not it was replaced
}

#else

// CUDA and HIP (also HIP-CPU): the vendors' intrinsics, which are declared for int, unsigned,
// (unsigned) long long, float and double only, so std::int64_t (long on Linux) and std::uint64_t
// go through the long long of the same size and signedness.
template <class T>
using atomic_native_t = std::conditional_t<
    std::is_floating_point_v<T>, T,
    std::conditional_t<sizeof(T) == 4, std::conditional_t<std::is_signed_v<T>, int, unsigned>,
                       std::conditional_t<std::is_signed_v<T>, long long, unsigned long long>>>;
/// The unsigned type atomicCAS / atomicExch take for T's bits.
template <class T>
using atomic_bits_t = std::conditional_t<sizeof(T) == 4, unsigned, unsigned long long>;

template <class T>
DEVMEM_DETAIL_DEVICE inline T atomic_cas(T& target, T expected, T desired) {
  using Bits = atomic_bits_t<T>;
  return same_bits<T>(atomicCAS(reinterpret_cast<Bits*>(&target), same_bits<Bits>(expected),
                                same_bits<Bits>(desired)));
}

template <class T>
DEVMEM_DETAIL_DEVICE inline T atomic_swap(T& target, T value) {
  using Bits = atomic_bits_t<T>;
  return same_bits<T>(atomicExch(reinterpret_cast<Bits*>(&target), same_bits<Bits>(value)));
}

/// old = target; target = update(old) unless keep(old), as one atomic step (a CAS loop over the
/// element's bits, which also compares NaNs and -0.0 exactly).
template <class T, class Keep, class Update>
DEVMEM_DETAIL_DEVICE inline T atomic_cas_loop(T& target, Keep keep, Update update) {
  using Bits = atomic_bits_t<T>;
  Bits* bits = reinterpret_cast<Bits*>(&target);
  Bits seen = *static_cast<volatile Bits*>(bits);
  while (true) {
    const T old = same_bits<T>(seen);
    if (keep(old)) return old;
    const Bits previous = atomicCAS(bits, seen, same_bits<Bits>(update(old)));
    if (previous == seen) return old;
    seen = previous;
  }
}

template <class T>
DEVMEM_DETAIL_DEVICE inline T atomic_fetch_add(T& target, T value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 600
  // atomicAdd(double*) needs sm_60: a compare-and-swap loop before it, as Numba does.
  if constexpr (std::is_same_v<T, double>) {
    return atomic_cas_loop(
        target, [](T) { return false; }, [=](T old) { return old + value; });
  } else
#endif
      if constexpr (std::is_integral_v<T> && sizeof(T) == 8) {
    // No signed 64-bit atomicAdd: the unsigned one gives the same bits (two's complement).
    using U = unsigned long long;
    return static_cast<T>(atomicAdd(reinterpret_cast<U*>(&target), static_cast<U>(value)));
  } else {
    using Native = atomic_native_t<T>;
    return static_cast<T>(
        atomicAdd(reinterpret_cast<Native*>(&target), static_cast<Native>(value)));
  }
}

template <class T>
DEVMEM_DETAIL_DEVICE inline T atomic_fetch_sub(T& target, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    return atomic_fetch_add(target, -value);
  } else if constexpr (sizeof(T) == 8) {
    // No 64-bit atomicSub: adding the two's complement negation subtracts.
    using U = unsigned long long;
    return static_cast<T>(atomicAdd(reinterpret_cast<U*>(&target), U{0} - static_cast<U>(value)));
  } else {
    using Native = atomic_native_t<T>;
    return static_cast<T>(
        atomicSub(reinterpret_cast<Native*>(&target), static_cast<Native>(value)));
  }
}

#if defined(__HIPCC__) && !defined(__HIP_CPU_RT__)
// HIP 5 has no atomicMax / atomicMin for long long (CUDA and HIP-CPU have).
inline constexpr bool kSigned64MinMaxByCas = true;
#else
inline constexpr bool kSigned64MinMaxByCas = false;
#endif

template <class T>
DEVMEM_DETAIL_DEVICE inline T atomic_fetch_max_min(T& target, T value, bool is_max) {
  if constexpr (std::is_floating_point_v<T>) {
    return atomic_cas_loop(
        target, [=](T old) { return keeps_element(old, value, is_max); }, [=](T) { return value; });
  } else if constexpr (std::is_signed_v<T> && sizeof(T) == 8 && kSigned64MinMaxByCas) {
    return atomic_cas_loop(
        target, [=](T old) { return is_max ? !(old < value) : !(value < old); },
        [=](T) { return value; });
  } else {
    using Native = atomic_native_t<T>;
    Native* native = reinterpret_cast<Native*>(&target);
    return static_cast<T>(is_max ? atomicMax(native, static_cast<Native>(value))
                                 : atomicMin(native, static_cast<Native>(value)));
  }
}

#endif

}  // namespace detail

// ---- On an element (T&): the forms every other form reaches ------------------------------------

/// target += value atomically; returns the old value (Numba's cuda.atomic.add).
template <class T>
  requires detail::is_atomic_value<T>
DEVMEM_DETAIL_DEVICE inline T atomic_add(T& target, std::type_identity_t<T> value) {
  return detail::atomic_fetch_add(target, value);
}
/// target -= value atomically; returns the old value (Numba's cuda.atomic.sub).
template <class T>
  requires detail::is_atomic_value<T>
DEVMEM_DETAIL_DEVICE inline T atomic_sub(T& target, std::type_identity_t<T> value) {
  return detail::atomic_fetch_sub(target, value);
}
/// target = max(target, value) atomically; returns the old value (Numba's cuda.atomic.max). Floats:
/// a NaN value, or a NaN already stored, leaves the element unchanged, as in Numba.
template <class T>
  requires detail::is_atomic_value<T>
DEVMEM_DETAIL_DEVICE inline T atomic_max(T& target, std::type_identity_t<T> value) {
  return detail::atomic_fetch_max_min(target, value, true);
}
/// target = min(target, value) atomically; returns the old value (Numba's cuda.atomic.min). Floats:
/// NaNs as for atomic_max.
template <class T>
  requires detail::is_atomic_value<T>
DEVMEM_DETAIL_DEVICE inline T atomic_min(T& target, std::type_identity_t<T> value) {
  return detail::atomic_fetch_max_min(target, value, false);
}
/// target = value atomically; returns the old value (Numba's cuda.atomic.exch).
template <class T>
  requires detail::is_atomic_value<T>
DEVMEM_DETAIL_DEVICE inline T atomic_exchange(T& target, std::type_identity_t<T> value) {
  return detail::atomic_swap(target, value);
}
/// If target == expected, target = desired, atomically; returns the old value either way (so the
/// swap happened when it equals `expected`). Numba's cuda.atomic.cas; integers only.
template <class T>
  requires detail::is_atomic_integer<T>
DEVMEM_DETAIL_DEVICE inline T atomic_compare_and_swap(T& target, std::type_identity_t<T> expected,
                                                      std::type_identity_t<T> desired) {
  return detail::atomic_cas(target, expected, desired);
}

// ---- On a view element, Numba style: (view, index, value) --------------------------------------
// The index is one integer for a 1-d view, or one per dimension in braces: {i, j}. Indexed through
// the view's operator(), so bounds-checked where it is (kernels simulated by the host backend).

#define DEVMEM_DETAIL_ATOMIC_VIEW_FORMS(name)                                                  \
  template <class T, class Index>                                                              \
    requires(detail::is_atomic_value<T> && std::is_integral_v<Index>)                          \
  DEVMEM_DETAIL_DEVICE inline T name(const ArrayView<T, 1>& view, Index index,                 \
                                     std::type_identity_t<T> value) {                          \
    return name(view(index), value);                                                           \
  }                                                                                            \
  template <class T, std::size_t Rank>                                                         \
    requires detail::is_atomic_value<T>                                                        \
  DEVMEM_DETAIL_DEVICE inline T name(const ArrayView<T, Rank>& view,                           \
                                     const std::int64_t(&index)[Rank],                         \
                                     std::type_identity_t<T> value) {                          \
    return name(detail::atomic_element(view, index, std::make_index_sequence<Rank>{}), value); \
  }

/// atomic_add(view, index, value): Numba's cuda.atomic.add(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_VIEW_FORMS(atomic_add)
/// atomic_sub(view, index, value): Numba's cuda.atomic.sub(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_VIEW_FORMS(atomic_sub)
/// atomic_max(view, index, value): Numba's cuda.atomic.max(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_VIEW_FORMS(atomic_max)
/// atomic_min(view, index, value): Numba's cuda.atomic.min(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_VIEW_FORMS(atomic_min)
/// atomic_exchange(view, index, value): Numba's cuda.atomic.exch(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_VIEW_FORMS(atomic_exchange)

#undef DEVMEM_DETAIL_ATOMIC_VIEW_FORMS

/// Compare-and-swap on view element `index` (Numba's cuda.atomic.cas(ary, idx, old, val)); returns
/// the old value.
template <class T, class Index>
  requires(detail::is_atomic_integer<T> && std::is_integral_v<Index>)
DEVMEM_DETAIL_DEVICE inline T
    atomic_cas(const ArrayView<T, 1>& view, Index index, std::type_identity_t<T> expected,
               std::type_identity_t<T> desired) {
  return atomic_compare_and_swap(view(index), expected, desired);
}
/// The same with one index per dimension, {i, j}.
template <class T, std::size_t Rank>
  requires detail::is_atomic_integer<T>
DEVMEM_DETAIL_DEVICE inline T atomic_cas(const ArrayView<T, Rank>& view,
                                         const std::int64_t (&index)[Rank],
                                         std::type_identity_t<T> expected,
                                         std::type_identity_t<T> desired) {
  return atomic_compare_and_swap(
      detail::atomic_element(view, index, std::make_index_sequence<Rank>{}), expected, desired);
}
/// Compare-and-swap on the first element of a 1-d view (Numba's
/// cuda.atomic.compare_and_swap(ary, old, val)); returns the old value.
template <class T>
  requires detail::is_atomic_integer<T>
DEVMEM_DETAIL_DEVICE inline T atomic_compare_and_swap(const ArrayView<T, 1>& view,
                                                      std::type_identity_t<T> expected,
                                                      std::type_identity_t<T> desired) {
  return atomic_compare_and_swap(view(0), expected, desired);
}

}  // namespace devmem

#undef DEVMEM_DETAIL_ATOMIC_SIMULATOR

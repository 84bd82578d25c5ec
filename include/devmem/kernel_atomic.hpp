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
// The array may be a global ArrayView, a SharedArray (shared_array, DEVMEM_SHARED_ARRAY; 1-d or
// n-d, or a row of one, tile.row(i)) or a view of dynamic shared memory (dynamic_shared_array):
//   DEVMEM_SHARED_ARRAY(counts, int, 16, 16);
//   devmem::atomic_add(counts, {ty, tx}, 1);        // Numba: cuda.atomic.add(counts, (ty, tx), 1)
//
// Element types: 32- and 64-bit signed and unsigned integers, float and double (compare-and-swap:
// the integers only, as in Numba). Each operation is one atomic read-modify-write of the element
// and returns the element's value before it ("old"), as Numba's do; the value is converted to the
// element type, as Numba converts it. The operations are relaxed
// (CUDA's atomicAdd and friends): they order nothing else; use syncthreads()/barrier() or the end
// of the kernel to publish other writes. The element must be in device (global) or shared memory
// and naturally aligned (DeviceArray::view checks that).
//
// Misuse is a compile error of one sentence (detail::AtomicCheck): an element of another type
// (int16, bool, a struct), a const element (a view of const elements), a value that does not
// convert to the element type, a non-integer index, or one integer for an n-d array.
// An index out of bounds fails the launch in the simulator (LaunchFailure), as any access does.
//
// Per backend: CUDA and HIP use their atomic intrinsics (atomicAdd, atomicMax, atomicExch,
// atomicCAS; float and double max/min, pre-sm_60 double add and HIP's signed 64-bit max/min are
// compare-and-swap loops, as in Numba); the host simulator uses std::atomic_ref, so races between
// simulated threads of different blocks, which run on different cores, are real and are handled as
// on a GPU.
//
// Differences from Numba: the index is an integer for 1-d arrays or a braced list ({i, j}, of any
// integer types) for others, instead of an int or a tuple; integer overflow wraps (two's
// complement) for signed types too, as on the GPU; grid<N>() and gridsize<N>() take the dimension
// count as a template argument, since it decides the return type (std::int64_t for 1, Coord<N> for
// 2 and 3).
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

namespace detail {

/// The arrays the Numba-style forms (array, index, value) take: global views and shared arrays
/// (static SharedArray, and views of dynamic shared memory, which are ArrayViews).
template <class A>
struct AtomicArray {
  static constexpr bool value = false;
};
template <class T, std::size_t Rank>
struct AtomicArray<ArrayView<T, Rank>> {
  static constexpr bool value = true;
  using element = T;
  static constexpr std::size_t rank = Rank;
};
template <class T, std::size_t... N>
struct AtomicArray<SharedArray<T, N...>> {
  static constexpr bool value = true;
  using element = T;
  static constexpr std::size_t rank = sizeof...(N);
};
template <class A>
inline constexpr bool is_atomic_array = AtomicArray<std::remove_cv_t<A>>::value;
template <class A>
using atomic_array_element_t = typename AtomicArray<A>::element;

/// Checked where an operation is instantiated, so that a misuse gets one sentence instead of the
/// list of every overload that did not match: the element must be writable and of an atomic type
/// (IntegersOnly: compare-and-swap), and the value must convert to it. `ok` guards the body, so
/// that nothing else is reported after the sentence.
template <class T, bool IntegersOnly, class... Values>
struct AtomicCheck {
  static constexpr bool writable = !std::is_const_v<T>;
  static constexpr bool typed =
      IntegersOnly ? is_atomic_integer<std::remove_cv_t<T>> : is_atomic_value<std::remove_cv_t<T>>;
  static constexpr bool converts = (std::is_convertible_v<const Values&, T> && ...);
  static_assert(writable,
                "devmem atomics: the element is const (a view of const elements or a const "
                "reference), and an atomic operation writes it: pass a view of non-const elements");
  static_assert(!writable || typed || IntegersOnly,
                "devmem atomics: the element type must be a 32- or 64-bit signed or unsigned "
                "integer, float or double (there are no atomics on 8- or 16-bit integers, bool, "
                "half or structs)");
  static_assert(!writable || typed || !IntegersOnly,
                "devmem::atomic_cas / atomic_compare_and_swap: the element type must be a 32- or "
                "64-bit signed or unsigned integer, as in Numba");
  static_assert(!writable || !typed || converts,
                "devmem atomics: the value does not convert to the element type: pass a number");
  static constexpr bool ok = writable && typed && converts;
};

/// The braced index of the (array, {i, j}, value) forms: one integer per dimension, of any integer
/// types (a size_t i and an int j are fine; a braced list of std::int64_t would narrow them, which
/// clang refuses).
template <std::size_t Rank>
struct AtomicIndex {
  template <class... I>
    requires(sizeof...(I) == Rank)
  DEVMEM_HOST_DEVICE constexpr AtomicIndex(I... index)  // NOLINT: {i, j} converts implicitly
      : values{static_cast<std::int64_t>(index)...} {
    static_assert((std::is_integral_v<I> && ...),
                  "devmem atomics: every index in {i, j} must be an integer");
  }
  std::int64_t values[Rank > 0 ? Rank : 1];

  /// The element of `array` at this index (through its operator(), so bounds-checked where that
  /// is).
  template <class A>
  DEVMEM_DETAIL_DEVICE auto& element_of(const A& array) const {
    return element_of(array, std::make_index_sequence<Rank>{});
  }

 private:
  template <class A, std::size_t... D>
  DEVMEM_DETAIL_DEVICE auto& element_of(const A& array, std::index_sequence<D...>) const {
    return array(values[D]...);
  }
};

/// The element (array, index) names in the one-integer form: only for 1-d arrays.
template <class A, class Index>
DEVMEM_DETAIL_DEVICE inline auto& atomic_element(const A& array, Index index) {
  static_assert(AtomicArray<A>::rank == 1,
                "devmem atomics: an array of more than one dimension takes one index per "
                "dimension in braces, {i, j}");
  static_assert(std::is_integral_v<Index>, "devmem atomics: the index must be an integer");
  if constexpr (AtomicArray<A>::rank == 1 && std::is_integral_v<Index>) {
    return array(index);
  } else {
    return *array.data();  // not reached: the assertions above failed
  }
}

}  // namespace detail

// ---- On an element (T&): the forms every other form reaches ------------------------------------
// T and the value's type are deduced unconstrained (but for arrays, which take the forms below),
// so that a wrong element or value type gets AtomicCheck's sentence rather than a list of
// candidates; the value is converted to the element type, as Numba converts it.

/// target += value atomically; returns the old value (Numba's cuda.atomic.add).
template <class T, class V>
  requires(!detail::is_atomic_array<T>)
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<T> atomic_add(T& target, const V& value) {
  if constexpr (detail::AtomicCheck<T, false, V>::ok) {
    return detail::atomic_fetch_add(target, static_cast<T>(value));
  } else {
    __builtin_unreachable();
  }
}
/// target -= value atomically; returns the old value (Numba's cuda.atomic.sub).
template <class T, class V>
  requires(!detail::is_atomic_array<T>)
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<T> atomic_sub(T& target, const V& value) {
  if constexpr (detail::AtomicCheck<T, false, V>::ok) {
    return detail::atomic_fetch_sub(target, static_cast<T>(value));
  } else {
    __builtin_unreachable();
  }
}
/// target = max(target, value) atomically; returns the old value (Numba's cuda.atomic.max). Floats:
/// a NaN value, or a NaN already stored, leaves the element unchanged, as in Numba.
template <class T, class V>
  requires(!detail::is_atomic_array<T>)
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<T> atomic_max(T& target, const V& value) {
  if constexpr (detail::AtomicCheck<T, false, V>::ok) {
    return detail::atomic_fetch_max_min(target, static_cast<T>(value), true);
  } else {
    __builtin_unreachable();
  }
}
/// target = min(target, value) atomically; returns the old value (Numba's cuda.atomic.min). Floats:
/// NaNs as for atomic_max.
template <class T, class V>
  requires(!detail::is_atomic_array<T>)
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<T> atomic_min(T& target, const V& value) {
  if constexpr (detail::AtomicCheck<T, false, V>::ok) {
    return detail::atomic_fetch_max_min(target, static_cast<T>(value), false);
  } else {
    __builtin_unreachable();
  }
}
/// target = value atomically; returns the old value (Numba's cuda.atomic.exch).
template <class T, class V>
  requires(!detail::is_atomic_array<T>)
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<T> atomic_exchange(T& target, const V& value) {
  if constexpr (detail::AtomicCheck<T, false, V>::ok) {
    return detail::atomic_swap(target, static_cast<T>(value));
  } else {
    __builtin_unreachable();
  }
}
/// If target == expected, target = desired, atomically; returns the old value either way (so the
/// swap happened when it equals `expected`). Numba's cuda.atomic.cas; integers only.
template <class T, class E, class D>
  requires(!detail::is_atomic_array<T>)
DEVMEM_DETAIL_DEVICE
    inline std::remove_cv_t<T> atomic_compare_and_swap(T& target, const E& expected,
                                                       const D& desired) {
  if constexpr (detail::AtomicCheck<T, true, E, D>::ok) {
    return detail::atomic_cas(target, static_cast<T>(expected), static_cast<T>(desired));
  } else {
    __builtin_unreachable();
  }
}

// ---- On an array element, Numba style: (array, index, value) ------------------------------------
// The array is an ArrayView (global memory, or a view of dynamic shared memory) or a SharedArray,
// of any rank. The index is one integer for a 1-d array, or one per dimension in braces: {i, j}
// (any integer types). Indexed through the array's operator(), so bounds-checked where it is
// (kernels simulated by the host backend: LaunchFailure naming the index and the shape).

#define DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS(name)                                          \
  template <class A, class Index, class V>                                              \
    requires detail::is_atomic_array<A>                                                 \
  DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<detail::atomic_array_element_t<A>> name( \
      const A& array, Index index, const V& value) {                                    \
    return name(detail::atomic_element(array, index), value);                           \
  }                                                                                     \
  template <class A, class V>                                                           \
    requires detail::is_atomic_array<A>                                                 \
  DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<detail::atomic_array_element_t<A>> name( \
      const A& array, const detail::AtomicIndex<detail::AtomicArray<A>::rank>& index,   \
      const V& value) {                                                                 \
    return name(index.element_of(array), value);                                        \
  }

/// atomic_add(array, index, value): Numba's cuda.atomic.add(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS(atomic_add)
/// atomic_sub(array, index, value): Numba's cuda.atomic.sub(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS(atomic_sub)
/// atomic_max(array, index, value): Numba's cuda.atomic.max(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS(atomic_max)
/// atomic_min(array, index, value): Numba's cuda.atomic.min(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS(atomic_min)
/// atomic_exchange(array, index, value): Numba's cuda.atomic.exch(ary, idx, val).
DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS(atomic_exchange)

#undef DEVMEM_DETAIL_ATOMIC_ARRAY_FORMS

/// Compare-and-swap on element `index` of a 1-d array (Numba's cuda.atomic.cas(ary, idx, old,
/// val)); returns the old value.
template <class A, class Index, class E, class D>
  requires detail::is_atomic_array<A>
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<detail::atomic_array_element_t<A>> atomic_cas(
    const A& array, Index index, const E& expected, const D& desired) {
  return atomic_compare_and_swap(detail::atomic_element(array, index), expected, desired);
}
/// The same with one index per dimension, {i, j}.
template <class A, class E, class D>
  requires detail::is_atomic_array<A>
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<detail::atomic_array_element_t<A>> atomic_cas(
    const A& array, const detail::AtomicIndex<detail::AtomicArray<A>::rank>& index,
    const E& expected, const D& desired) {
  return atomic_compare_and_swap(index.element_of(array), expected, desired);
}
/// Compare-and-swap on the first element of a 1-d array (Numba's
/// cuda.atomic.compare_and_swap(ary, old, val)); returns the old value.
template <class A, class E, class D>
  requires detail::is_atomic_array<A>
DEVMEM_DETAIL_DEVICE inline std::remove_cv_t<detail::atomic_array_element_t<A>>
atomic_compare_and_swap(const A& array, const E& expected, const D& desired) {
  return atomic_compare_and_swap(detail::atomic_element(array, 0), expected, desired);
}

}  // namespace devmem

#undef DEVMEM_DETAIL_ATOMIC_SIMULATOR

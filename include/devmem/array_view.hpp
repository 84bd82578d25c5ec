// ArrayView<T, Rank>: what a kernel receives for a device array. A trivially copyable strided
// view (pointer, shape, byte strides) that device code indexes directly; it owns nothing and, on
// a GPU, checks nothing, like a raw pointer. Make one with DeviceArray::view<T, Rank>(),
// which checks the dtype, the rank and the alignment of the data pointer and strides, or pass a
// DeviceArray straight to devmem::launch.
//
// Usable from host code, CUDA device code (nvcc), HIP device code (hipcc) and kernels simulated
// by the host backend. The view stays valid while the array's memory is alive; devmem::launch
// keeps the memory of every array argument alive until the kernel has run, views from
// DeviceArray::view included (it finds their memory by address).
//
// Bounds checking: compiled by the host compiler for the host backend (not by nvcc or hipcc, not
// for HIP-CPU), every element access checks each index against the shape. An index outside
// [0, shape) fails the running kernel's launch with LaunchFailure (719), reported like any
// simulated kernel failure: "ArrayView: index (128,) is out of bounds for shape (100,) in thread
// (28, 0, 0) of block (1, 0, 0)". Negative indices are out of bounds, as on a GPU (they do not
// wrap around as in NumPy). Outside a kernel (host code indexing a view) the same text is thrown
// as InvalidArgument. devmem::host::set_bounds_checking(false) or DEVMEM_HOST_BOUNDS_CHECK=0 turns
// the reports off (the access then goes ahead unchecked, as on a GPU); defining
// DEVMEM_HOST_NO_BOUNDS_CHECK for every translation unit compiles the comparisons out. GPU code is
// unchanged. See <devmem/host_controls.hpp>.
//
// Thread safety: a view is a value; concurrent element accesses follow the usual rules of the
// memory it points to.
#pragma once

#include <devmem/export.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

// Not under HIP-CPU (__HIP_CPU_RT__), where device code is host code and __device__ is GCC's simd
// attribute.
#if (defined(__CUDACC__) || defined(__HIPCC__)) && !defined(__HIP_CPU_RT__)
#define DEVMEM_HOST_DEVICE __host__ __device__
#else
#define DEVMEM_HOST_DEVICE
#endif

// DEVMEM_DETAIL_SIM_BOUNDS_CHECK: array accesses are checked, only in code compiled by the host
// compiler for the host backend's simulator (DEVMEM_HIPCPU_* mark kernel sources built for
// HIP-CPU), so that device code keeps raw, unchecked accesses.
#if !defined(__CUDACC__) && !defined(__HIPCC__) && !defined(__HIP_CPU_RT__) && \
    !defined(DEVMEM_HIPCPU_CUDA) && !defined(DEVMEM_HIPCPU_ROC) &&             \
    !defined(DEVMEM_HOST_NO_BOUNDS_CHECK)
#define DEVMEM_DETAIL_SIM_BOUNDS_CHECK 1
#endif

namespace devmem {

#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
namespace detail::sim {
/// Reports `index` (index_count values) as out of bounds for `shape` (rank values) of an array of
/// kind `array_kind` ("ArrayView", "shared_array", ...): in a simulated kernel thread it fails the
/// launch (LaunchFailure naming the thread and block) and unwinds the thread; outside a kernel it
/// throws InvalidArgument. Returns (and the access goes ahead) only when
/// devmem::host::bounds_checking() is off. Out of line and cold so that the inline check stays
/// one comparison and a not-taken branch.
[[gnu::cold]] DEVMEM_API void index_out_of_bounds(const char* array_kind, const std::int64_t* index,
                                                  std::size_t index_count,
                                                  const std::int64_t* shape, std::size_t rank);
/// True when `index` is outside [0, extent): one unsigned comparison covers negative indices.
[[nodiscard]] constexpr bool out_of_bounds(std::int64_t index, std::int64_t extent) noexcept {
  return static_cast<std::uint64_t>(index) >= static_cast<std::uint64_t>(extent);
}
/// Checks one index per dimension of an array of constant shape N... (shared and local arrays).
template <std::size_t... N, class... Index>
void check_indices(const char* array_kind, Index... index) {
  const std::int64_t indices[] = {static_cast<std::int64_t>(index)...};
  static constexpr std::int64_t shape[] = {static_cast<std::int64_t>(N)...};
  bool outside = false;
  for (std::size_t d = 0; d != sizeof...(N); ++d) outside |= out_of_bounds(indices[d], shape[d]);
  if (outside) [[unlikely]] {
    index_out_of_bounds(array_kind, indices, sizeof...(N), shape, sizeof...(N));
  }
}
/// Checks the flat (C-order) index `i` of an array of constant shape N...
template <std::size_t... N>
void check_flat_index(const char* array_kind, std::size_t i) {
  if (i >= (N * ...)) [[unlikely]] {
    const auto index = static_cast<std::int64_t>(i);
    static constexpr std::int64_t shape[] = {static_cast<std::int64_t>(N)...};
    index_out_of_bounds(array_kind, &index, 1, shape, sizeof...(N));
  }
}
}  // namespace detail::sim
#endif

/// A strided view of `Rank` dimensions over elements of type `T` (use `const T` for read-only
/// access). Strides are in bytes, like NumPy's and DeviceArray's.
template <class T, std::size_t Rank>
class ArrayView {
 public:
  using element_type = T;
  /// Number of dimensions (Numba's `arr.ndim`).
  static constexpr std::size_t rank = Rank;

  /// A null view of shape (0, ...): what a kernel gets for an empty array.
  ArrayView() = default;
  /// A view of `data` with the given shape and byte strides (arrays of Rank values).
  DEVMEM_HOST_DEVICE ArrayView(T* data, const std::int64_t* shape, const std::int64_t* strides)
      : data_(data) {
    for (std::size_t d = 0; d != Rank; ++d) {
      shape_[d] = shape[d];
      strides_[d] = strides[d];
    }
  }

  /// Element at the given indices (one per dimension). Bounds-checked only by the host
  /// simulator (see the file comment); unchecked on a GPU.
  template <class... Index>
    requires(sizeof...(Index) == Rank && (std::is_integral_v<Index> && ...))
  DEVMEM_HOST_DEVICE T& operator()(Index... index) const {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    if constexpr (Rank != 0) {
      const std::int64_t indices[] = {static_cast<std::int64_t>(index)...};
      bool outside = false;
      for (std::size_t d = 0; d != Rank; ++d) {
        outside |= detail::sim::out_of_bounds(indices[d], shape_[d]);
      }
      if (outside) [[unlikely]] {
        detail::sim::index_out_of_bounds("ArrayView", indices, Rank, shape_, Rank);
      }
    }
#endif
    return *address(static_cast<std::int64_t>(index)...);
  }
  /// Element i of a 1-d view (checked like operator()).
  DEVMEM_HOST_DEVICE T& operator[](std::int64_t i) const
    requires(Rank == 1)
  {
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    if (detail::sim::out_of_bounds(i, shape_[0])) [[unlikely]] {
      detail::sim::index_out_of_bounds("ArrayView", &i, 1, shape_, 1);
    }
#endif
    return *address(i);
  }

  /// Address of element (0, ..., 0).
  [[nodiscard]] DEVMEM_HOST_DEVICE T* data() const { return data_; }
  /// Length of dimension `dim` < Rank (Numba's `arr.shape[dim]`).
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t shape(std::size_t dim) const { return shape_[dim]; }
  /// The same as shape(dim), the name std::mdspan uses.
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t extent(std::size_t dim) const {
    return shape_[dim];
  }
  /// Byte stride of dimension `dim`.
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t stride(std::size_t dim) const {
    return strides_[dim];
  }
  /// Number of elements (Numba's `arr.size`; 1 for Rank 0).
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t size() const {
    std::int64_t n = 1;
    for (std::size_t d = 0; d != Rank; ++d) n *= shape_[d];
    return n;
  }
  /// A read-only view from a writable one.
  template <class U>
    requires(std::is_const_v<T> && std::is_same_v<const U, T> && !std::is_same_v<U, T>)
  DEVMEM_HOST_DEVICE ArrayView(const ArrayView<U, Rank>& other) : data_(other.data_) {
    for (std::size_t d = 0; d != Rank; ++d) {
      shape_[d] = other.shape_[d];
      strides_[d] = other.strides_[d];
    }
  }

 private:
  template <class, std::size_t>
  friend class ArrayView;

  template <class... Index>
  [[nodiscard]] DEVMEM_HOST_DEVICE T* address(Index... index) const {
    using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
    std::int64_t offset = 0;
    std::size_t dim = 0;
    ((offset += index * strides_[dim++]), ...);
    static_cast<void>(dim);  // unused for Rank 0
    return reinterpret_cast<T*>(reinterpret_cast<Byte*>(data_) + offset);
  }

  T* data_ = nullptr;
  // One extra element keeps the arrays legal for Rank 0 (a view of one element).
  std::int64_t shape_[Rank + 1] = {};
  std::int64_t strides_[Rank + 1] = {};
};

}  // namespace devmem

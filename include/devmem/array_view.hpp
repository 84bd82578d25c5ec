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
// Device memory and views launch never saw (same switches): a view DeviceArray::view makes of
// device memory (not of mapped or registered host memory) is marked until devmem::launch hands a
// copy of it to a kernel. Host code indexing a marked view throws InvalidArgument ("host code
// indexes device memory"), since on a GPU that access faults; a kernel indexing one fails its
// launch, since the view reached it without launch's checks (inside a struct argument that does
// not list its views with devmem_views(), see <devmem/kernel.hpp>). Views also carry the
// generation of the allocation they were made from, which launch compares on every backend: a
// view of a freed array is refused even after another array has been given its memory.
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
/// Element access through a view of device memory that launch has not handed to a kernel (see
/// ArrayView): from a simulated kernel thread it fails the launch (a view that reached the kernel
/// unchecked, in a struct argument without devmem_views()); from host code it throws
/// InvalidArgument (device memory read or written by the host faults on a GPU). Returns only when
/// devmem::host::bounds_checking() is off.
[[gnu::cold]] DEVMEM_API void unlaunched_view_access(const void* data, const std::int64_t* shape,
                                                     std::size_t rank);
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

namespace detail {
struct ViewAccess;
}

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
    if (unlaunched_) [[unlikely]] {
      detail::sim::unlaunched_view_access(data_, shape_, Rank);
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
    if (unlaunched_) [[unlikely]] {
      detail::sim::unlaunched_view_access(data_, shape_, 1);
    }
#endif
    return *address(i);
  }

  /// Row i of a view of two or more dimensions (Numba's `a[i]`): the view of Rank - 1 dimensions
  /// of the elements whose first index is i, over the same memory (it carries this view's
  /// allocation generation and launch mark). i is bounds-checked by the host simulator like an
  /// element index ("ArrayView row: index (i,) is out of bounds for shape (n,)"); unchecked on a
  /// GPU.
  template <class Index>
    requires(Rank >= 2 && std::is_integral_v<Index>)
  [[nodiscard]] DEVMEM_HOST_DEVICE auto row(Index i) const {
    const auto index = static_cast<std::int64_t>(i);
#ifdef DEVMEM_DETAIL_SIM_BOUNDS_CHECK
    if (detail::sim::out_of_bounds(index, shape_[0])) [[unlikely]] {
      detail::sim::index_out_of_bounds("ArrayView row", &index, 1, shape_, 1);
    }
#endif
    using Byte = std::conditional_t<std::is_const_v<T>, const unsigned char, unsigned char>;
    ArrayView<T, Rank - 1> result(
        reinterpret_cast<T*>(reinterpret_cast<Byte*>(data_) + index * strides_[0]), shape_ + 1,
        strides_ + 1);
    result.generation_ = generation_;
    result.unlaunched_ = unlaunched_;
    return result;
  }

  /// Address of element (0, ..., 0).
  [[nodiscard]] DEVMEM_HOST_DEVICE T* data() const { return data_; }
  /// Length of dimension `dim` < Rank (Numba's `arr.shape[dim]`).
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t shape(std::size_t dim) const { return shape_[dim]; }
  /// The same as shape(dim), the name std::mdspan uses.
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t extent(std::size_t dim) const {
    return shape_[dim];
  }
  /// Stride of dimension `dim` < Rank in bytes (NumPy's and Numba's `arr.strides[dim]`; an
  /// element stride is stride_bytes(dim) / sizeof(T) when it divides). May be 0 (broadcast) or
  /// negative. Unchecked: `dim` >= Rank is undefined, as for shape(dim). Throws nothing.
  [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t stride_bytes(std::size_t dim) const {
    return strides_[dim];
  }
  /// The old name of stride_bytes(dim), deprecated since 0.1.0: std::mdspan's stride(r), whose
  /// extent(r) this class shares, counts elements, this one bytes (docs/migration.md).
  [[deprecated("use stride_bytes(dim)")]] [[nodiscard]] DEVMEM_HOST_DEVICE std::int64_t stride(
      std::size_t dim) const {
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
  DEVMEM_HOST_DEVICE ArrayView(const ArrayView<U, Rank>& other)
      : data_(other.data_), generation_(other.generation_), unlaunched_(other.unlaunched_) {
    for (std::size_t d = 0; d != Rank; ++d) {
      shape_[d] = other.shape_[d];
      strides_[d] = other.strides_[d];
    }
  }

 private:
  template <class, std::size_t>
  friend class ArrayView;
  friend struct detail::ViewAccess;

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
  // The generation of the devmem allocation the view was made from (DeviceArray::view; 0: not
  // known), which launch compares with the live allocations: a view of a freed array is refused
  // even when a new array has been given the same memory.
  std::uint64_t generation_ = 0;
  // Set by DeviceArray::view in a view of device memory (not mapped or registered host memory),
  // cleared in the copy that launch hands a kernel. The simulator refuses element access through
  // a view still marked: from host code it is device memory, which faults on a GPU; from a kernel
  // it is a view that launch did not check or keep alive (in a struct without devmem_views()).
  bool unlaunched_ = false;
};

namespace detail {
/// What devmem reads and sets in a view besides its public members (DeviceArray::view, launch).
struct ViewAccess {
  template <class T, std::size_t Rank>
  [[nodiscard]] static ArrayView<T, Rank> make(T* data, const std::int64_t* shape,
                                               const std::int64_t* strides,
                                               std::uint64_t generation, bool device_memory) {
    ArrayView<T, Rank> view(data, shape, strides);
    view.generation_ = generation;
    view.unlaunched_ = device_memory;
    return view;
  }
  template <class T, std::size_t Rank>
  [[nodiscard]] static std::uint64_t generation(const ArrayView<T, Rank>& view) {
    return view.generation_;
  }
  /// Clears the mark of a view on its way into a kernel (see ArrayView::unlaunched_).
  template <class T, std::size_t Rank>
  static void mark_launched(ArrayView<T, Rank>& view) {
    view.unlaunched_ = false;
  }
};
}  // namespace detail

}  // namespace devmem

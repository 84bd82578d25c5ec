// ArrayView<T, Rank>: what a kernel receives for a device array. A trivially copyable strided
// view (pointer, shape, byte strides) that device code indexes directly; it owns nothing and
// checks nothing, like a raw pointer on the GPU. Make one with DeviceArray::view<T, Rank>(),
// which checks the dtype, the rank and the alignment of the data pointer and strides, or pass a
// DeviceArray straight to devmem::launch.
//
// Usable from host code, CUDA device code (nvcc), HIP device code (hipcc) and kernels simulated
// by the host backend. The view stays valid while the array's memory is alive; devmem::launch
// keeps the memory of every array argument alive until the kernel has run, views from
// DeviceArray::view included (it finds their memory by address).
//
// Thread safety: a view is a value; concurrent element accesses follow the usual rules of the
// memory it points to.
#pragma once

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

namespace devmem {

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

  /// Element at the given indices (one per dimension, not bounds-checked).
  template <class... Index>
    requires(sizeof...(Index) == Rank && (std::is_integral_v<Index> && ...))
  DEVMEM_HOST_DEVICE T& operator()(Index... index) const {
    return *address(static_cast<std::int64_t>(index)...);
  }
  /// Element i of a 1-d view.
  DEVMEM_HOST_DEVICE T& operator[](std::int64_t i) const
    requires(Rank == 1)
  {
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
  DEVMEM_HOST_DEVICE T* address(Index... index) const {
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

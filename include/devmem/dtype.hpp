// Element types, described the way NumPy and the CUDA Array Interface do: a kind character, an
// itemsize in bytes, an alignment and a typestr such as "<f8".
#pragma once

#include <devmem/export.hpp>

#include <complex>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>

namespace devmem {

class DType;
/// Declared before the class so that it is exported: a friend declaration cannot carry DEVMEM_API.
DEVMEM_API bool operator==(const DType& a, const DType& b) noexcept;

/// The element type of an array. Values are cheap to copy and compare.
///
/// Kinds follow NumPy: 'b' bool, 'i' signed integer, 'u' unsigned integer, 'f' floating point,
/// 'c' complex, 'V' raw bytes / records. Two record dtypes are equal when their size and alignment
/// match and, if both were made from C++ types, the types are the same.
class DEVMEM_API DType {
 public:
  /// float64, NumPy's default.
  DType() noexcept;
  /// Throws InvalidArgument for an unknown kind, an itemsize the kind does not have (e.g. 'f' of
  /// 3 bytes), a non-positive itemsize or an alignment that is not a power of two.
  DType(char kind, std::int64_t itemsize, std::int64_t alignment = 0);

  /// Parses a NumPy typestr: "<f8", "|b1", "<c16", "|u1", "|V24", "=i4"; the byte order must be
  /// little-endian or not applicable. Throws InvalidArgument naming the string otherwise.
  static DType from_typestr(std::string_view typestr);
  /// Raw bytes of a record type of `itemsize` bytes (kind 'V').
  static DType record(std::int64_t itemsize, std::int64_t alignment = 1,
                      std::string_view type_name = {});

  /// NumPy's kind character: 'b' bool, 'i' signed, 'u' unsigned, 'f' float, 'c' complex, 'V'
  /// record.
  [[nodiscard]] char kind() const noexcept { return kind_; }
  /// Bytes per element.
  [[nodiscard]] std::int64_t itemsize() const noexcept { return itemsize_; }
  /// Alignment a typed access needs, in bytes (a power of two).
  [[nodiscard]] std::int64_t alignment() const noexcept { return alignment_; }
  /// The NumPy typestr ("<f8", "|b1", "|V24").
  [[nodiscard]] std::string typestr() const;
  /// The NumPy name ("float64", "complex128", "bool", "V24").
  [[nodiscard]] std::string name() const;
  /// True for raw record bytes (kind 'V', NumPy's void / structured dtypes).
  [[nodiscard]] bool is_record() const noexcept { return kind_ == 'V'; }

  friend bool operator==(const DType& a, const DType& b) noexcept;

 private:
  char kind_;
  std::int64_t itemsize_;
  std::int64_t alignment_;
  std::string type_name_;  // only for records made from a C++ type; empty otherwise
};

namespace detail {
template <class T>
struct is_complex : std::false_type {};
template <class T>
struct is_complex<std::complex<T>> : std::true_type {};
}  // namespace detail

/// Types that have a dtype: bool, the fixed-width integers, float, double, std::complex<float>,
/// std::complex<double>, and any other trivially copyable type (as a record).
template <class T>
concept Element = std::is_trivially_copyable_v<T> && !
std::is_pointer_v<T> && !std::is_reference_v<T> && !std::is_const_v<T> && !std::is_volatile_v<T>;

/// The dtype of a C++ type.
template <Element T>
[[nodiscard]] DType dtype_of() {
  if constexpr (std::is_same_v<T, bool>) {
    return DType('b', 1, 1);
  } else if constexpr (std::is_integral_v<T>) {
    return DType(std::is_signed_v<T> ? 'i' : 'u', sizeof(T), alignof(T));
  } else if constexpr (std::is_floating_point_v<T>) {
    return DType('f', sizeof(T), alignof(T));
  } else if constexpr (detail::is_complex<T>::value) {
    return DType('c', sizeof(T), alignof(T));
  } else {
    return DType::record(sizeof(T), alignof(T), typeid(T).name());
  }
}

}  // namespace devmem

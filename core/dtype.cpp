// DType: NumPy-style element types. Only little-endian hosts are supported, so the byte order of a
// typestr is '<' for multi-byte numbers and '|' (not applicable) for single bytes and records.
#include <devmem/dtype.hpp>

#include "core/format.hpp"

#include <charconv>
#include <system_error>

namespace devmem {
namespace {

constexpr std::string_view kKinds = "biufcV";

// The word used for a kind in names and messages ("float of 3 bytes does not exist").
std::string_view kind_word(char kind) noexcept {
  switch (kind) {
    case 'b':
      return "bool";
    case 'i':
      return "int";
    case 'u':
      return "uint";
    case 'f':
      return "float";
    case 'c':
      return "complex";
    default:
      return "void";
  }
}

// The itemsizes NumPy has for each kind; records ('V') may have any positive size.
bool valid_itemsize(char kind, std::int64_t itemsize) noexcept {
  switch (kind) {
    case 'b':
      return itemsize == 1;
    case 'i':
    case 'u':
      return itemsize == 1 || itemsize == 2 || itemsize == 4 || itemsize == 8;
    case 'f':
      return itemsize == 2 || itemsize == 4 || itemsize == 8 || itemsize == 16;
    case 'c':
      return itemsize == 8 || itemsize == 16 || itemsize == 32;
    default:
      return itemsize >= 1;
  }
}

// Alignment used when the caller passes 0: numbers align to their size, complex numbers to the
// size of one component, raw bytes to 1 (as NumPy's unaligned void dtypes).
std::int64_t natural_alignment(char kind, std::int64_t itemsize) noexcept {
  switch (kind) {
    case 'c':
      return itemsize / 2;
    case 'V':
      return 1;
    default:
      return itemsize;
  }
}

bool is_power_of_two(std::int64_t v) noexcept {
  return v > 0 && (v & (v - 1)) == 0;
}

// Byte order does not apply to single bytes and raw records.
bool byte_order_applies(char kind, std::int64_t itemsize) noexcept {
  return kind != 'V' && itemsize > 1;
}

}  // namespace

DType::DType() noexcept : kind_('f'), itemsize_(8), alignment_(8) {}

DType::DType(char kind, std::int64_t itemsize, std::int64_t alignment)
    : kind_(kind), itemsize_(itemsize), alignment_(alignment) {
  if (kind == '\0' || kKinds.find(kind) == std::string_view::npos) {
    detail::throw_invalid("DType", "unknown kind '{}' (expected one of b, i, u, f, c, V)", kind);
  }
  if (itemsize <= 0) {
    detail::throw_invalid("DType", "itemsize must be positive, got {}", itemsize);
  }
  if (!valid_itemsize(kind, itemsize)) {
    detail::throw_invalid("DType", "{} of {} bytes does not exist", kind_word(kind), itemsize);
  }
  if (alignment == 0) alignment_ = natural_alignment(kind, itemsize);
  if (!is_power_of_two(alignment_)) {
    detail::throw_invalid("DType", "alignment must be a power of two, got {}", alignment);
  }
  // An array of such items could not keep every item aligned.
  if (itemsize % alignment_ != 0) {
    detail::throw_invalid("DType", "itemsize {} is not a multiple of alignment {}", itemsize,
                          alignment_);
  }
}

DType DType::from_typestr(std::string_view typestr) {
  const auto unknown = [typestr]() -> DType {
    detail::throw_invalid("DType", "unknown typestr '{}'", typestr);
  };
  if (typestr.size() < 3) return unknown();
  const char order = typestr[0];
  const char kind = typestr[1];
  if (order != '<' && order != '|' && order != '=' && order != '>') return unknown();
  if (kKinds.find(kind) == std::string_view::npos) return unknown();
  // Digits only: from_chars would accept a leading '-', and trailing characters are garbage too.
  const std::string_view digits = typestr.substr(2);
  for (const char ch : digits) {
    if (ch < '0' || ch > '9') return unknown();
  }
  std::int64_t itemsize = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), itemsize);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return unknown();
  if (itemsize <= 0 || !valid_itemsize(kind, itemsize)) {
    detail::throw_invalid("DType", "{} of {} bytes does not exist (typestr '{}')", kind_word(kind),
                          itemsize, typestr);
  }
  if (order == '>' && byte_order_applies(kind, itemsize)) {
    detail::throw_invalid("DType", "big-endian typestr '{}' is not supported", typestr);
  }
  return kind == 'V' ? record(itemsize) : DType(kind, itemsize);
}

DType DType::record(std::int64_t itemsize, std::int64_t alignment, std::string_view type_name) {
  DType d('V', itemsize, alignment);
  d.type_name_ = std::string(type_name);
  return d;
}

std::string DType::typestr() const {
  const char order = byte_order_applies(kind_, itemsize_) ? '<' : '|';
  return fmt::format("{}{}{}", order, kind_, itemsize_);
}

std::string DType::name() const {
  switch (kind_) {
    case 'b':
      return "bool";
    case 'V':
      return fmt::format("V{}", itemsize_);
    default:
      return fmt::format("{}{}", kind_word(kind_), itemsize_ * 8);
  }
}

bool operator==(const DType& a, const DType& b) noexcept {
  if (a.kind_ != b.kind_ || a.itemsize_ != b.itemsize_ || a.alignment_ != b.alignment_) {
    return false;
  }
  // Records made from two different C++ types are different dtypes even when their sizes agree;
  // a record without a type name (e.g. from a typestr) matches any record of its size.
  return a.type_name_.empty() || b.type_name_.empty() || a.type_name_ == b.type_name_;
}

}  // namespace devmem

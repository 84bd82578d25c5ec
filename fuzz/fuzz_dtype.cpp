// Fuzz target: NumPy typestr parsing (DType::from_typestr) on arbitrary strings.
//
// Invariants: a string is accepted exactly when a simple reference parser accepts it
// (byte order, kind, decimal itemsize that the kind has, no big-endian multi-byte numbers);
// rejections are InvalidArgument naming "DType"; an accepted dtype has the parsed kind and
// itemsize and its own typestr() parses back to an equal dtype.
#include "fuzz/fuzz_input.hpp"

#include <devmem/dtype.hpp>
#include <devmem/error.hpp>

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace {

constexpr const char* kTarget = "fuzz_dtype";

void require(bool condition, const std::string& what) {
  if (!condition) devmem_fuzz::invariant_failed(kTarget, what);
}

struct Parsed {
  char kind;
  std::int64_t itemsize;
};

/// The reference: NumPy's typestr grammar as the API documents it, checked character by
/// character.
std::optional<Parsed> reference_parse(std::string_view s) {
  if (s.size() < 3) return std::nullopt;
  const char order = s[0];
  const char kind = s[1];
  if (std::string_view("<|=>").find(order) == std::string_view::npos) return std::nullopt;
  if (std::string_view("biufcV").find(kind) == std::string_view::npos) return std::nullopt;
  std::int64_t size = 0;
  for (const char ch : s.substr(2)) {
    if (ch < '0' || ch > '9') return std::nullopt;
    if (__builtin_mul_overflow(size, 10, &size) || __builtin_add_overflow(size, ch - '0', &size)) {
      return std::nullopt;
    }
  }
  bool valid = false;
  switch (kind) {
    case 'b':
      valid = size == 1;
      break;
    case 'i':
    case 'u':
      valid = size == 1 || size == 2 || size == 4 || size == 8;
      break;
    case 'f':
      valid = size == 2 || size == 4 || size == 8 || size == 16;
      break;
    case 'c':
      valid = size == 8 || size == 16 || size == 32;
      break;
    default:
      valid = size >= 1;
  }
  if (!valid) return std::nullopt;
  if (order == '>' && kind != 'V' && size > 1) return std::nullopt;
  return Parsed{kind, size};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::optional<Parsed> expected = reference_parse(text);
  try {
    const devmem::DType dtype = devmem::DType::from_typestr(text);
    require(expected.has_value(), "accepted a typestr the reference rejects: '" + text + "'");
    require(dtype.kind() == expected->kind && dtype.itemsize() == expected->itemsize,
            "kind or itemsize differs from the reference for '" + text + "'");
    require(devmem::DType::from_typestr(dtype.typestr()) == dtype,
            "typestr() does not round-trip for '" + text + "'");
    require(!dtype.name().empty(), "empty name");
  } catch (const devmem::InvalidArgument& e) {
    require(!expected.has_value(), "rejected a typestr the reference accepts: '" + text + "'");
    require(std::string_view(e.what()).starts_with("DType: "), "message does not name DType");
  }
  return 0;
}

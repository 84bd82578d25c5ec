// One formatter and one parser for byte counts, shared by messages, the host backend's settings
// and the devmem program, so that a size reads the same everywhere.
#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <limits>
#include <string>

namespace devmem {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr std::array<std::string_view, 7> kUnits{"B",   "KiB", "MiB", "GiB",
                                                          "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  auto value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  std::string text = fmt::format("{:.1f}", value);
  if (text.ends_with(".0")) text.resize(text.size() - 2);
  return fmt::format("{} {}", text, kUnits[unit]);
}

std::string format_bytes(std::int64_t bytes) {
  if (bytes >= 0) return format_bytes(static_cast<std::uint64_t>(bytes));
  // Negated in unsigned arithmetic: -INT64_MIN does not fit an int64.
  return "-" + format_bytes(0 - static_cast<std::uint64_t>(bytes));
}

std::int64_t parse_byte_size(std::string_view text) {
  constexpr std::string_view kExpected =
      "a whole number of bytes with an optional K, M, G or T suffix, e.g. 512M";
  std::int64_t number = 0;
  const char* const end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, number);
  if (error == std::errc::result_out_of_range) {
    throw InvalidArgument(fmt::format("'{}' is out of range (at most {} bytes)", text,
                                      std::numeric_limits<std::int64_t>::max()));
  }
  if (error != std::errc{} || stop == text.data() || number < 0) {
    throw InvalidArgument(fmt::format("'{}' is not a byte size ({})", text, kExpected));
  }
  std::string suffix(stop, end);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = -1;
  if (suffix.empty() || suffix == "B") shift = 0;
  constexpr std::string_view kPrefixes = "KMGT";
  if (!suffix.empty() && kPrefixes.find(suffix[0]) != std::string_view::npos) {
    const std::string_view rest = std::string_view(suffix).substr(1);
    if (rest.empty() || rest == "B" || rest == "IB") {
      shift = 10 * (1 + static_cast<int>(kPrefixes.find(suffix[0])));
    }
  }
  if (shift < 0) {
    throw InvalidArgument(fmt::format("'{}' has an unknown suffix '{}' (use K, M, G or T)", text,
                                      std::string_view(stop, end)));
  }
  if (number > (std::numeric_limits<std::int64_t>::max() >> shift)) {
    throw InvalidArgument(fmt::format("'{}' is out of range (at most {} bytes)", text,
                                      std::numeric_limits<std::int64_t>::max()));
  }
  return number << shift;
}

}  // namespace devmem

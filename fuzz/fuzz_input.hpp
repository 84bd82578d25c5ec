// Decodes a fuzzer's bytes into typed values. Running out of bytes yields zeros, so every input
// decodes to something (libFuzzer explores the short inputs first).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace devmem_fuzz {

class FuzzInput {
 public:
  FuzzInput(const std::uint8_t* data, std::size_t size) : bytes_(data, size) {}

  [[nodiscard]] bool empty() const noexcept { return bytes_.empty(); }

  template <class T>
    requires std::is_trivially_copyable_v<T>
  T take() {
    T value{};
    const std::size_t n = std::min(sizeof(T), bytes_.size());
    if (n > 0) std::memcpy(&value, bytes_.data(), n);
    bytes_ = bytes_.subspan(n);
    return value;
  }

  bool take_bool() { return (take<std::uint8_t>() & 1U) != 0; }

  /// A value in [lo, hi] (inclusive), from one byte: enough for small choices.
  std::int64_t take_small(std::int64_t lo, std::int64_t hi) {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(take<std::uint8_t>() % span);
  }

  /// Mostly small values around zero (the interesting ones for layouts), sometimes extremes and
  /// sometimes any 64-bit value, so overflow checks are exercised too.
  std::int64_t take_int(std::int64_t small_lo, std::int64_t small_hi) {
    const std::uint8_t mode = take<std::uint8_t>();
    if (mode < 200) return take_small(small_lo, small_hi);
    if (mode < 215) return std::numeric_limits<std::int64_t>::max() - take_small(0, 3);
    if (mode < 230) return std::numeric_limits<std::int64_t>::min() + take_small(0, 3);
    return take<std::int64_t>();
  }

  /// Up to `max_length` bytes as a string (length from one byte).
  std::string take_string(std::size_t max_length) {
    // The length byte is taken first, in a statement of its own: in one expression with
    // bytes_.size() the order of evaluation is unspecified (g++ read the size before the take,
    // so the string ran one byte past the input).
    const std::size_t wanted = take<std::uint8_t>() % (max_length + 1);
    const std::size_t n = std::min(wanted, bytes_.size());
    std::string text(reinterpret_cast<const char*>(bytes_.data()), n);
    bytes_ = bytes_.subspan(n);
    return text;
  }

 private:
  std::span<const std::uint8_t> bytes_;
};

/// An invariant of a fuzz target does not hold: abort, so libFuzzer records the input (and the
/// corpus runner reports it).
[[noreturn]] inline void invariant_failed(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: invariant violated: %s\n", target, what.c_str());
  std::abort();
}

}  // namespace devmem_fuzz

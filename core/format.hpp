// Internal helpers for building devmem's error messages ("<operation>: <what is wrong>").
#pragma once

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <string_view>
#include <utility>

namespace devmem::detail {

/// Throws InvalidArgument with the message "<operation>: <formatted text>".
template <class... Args>
[[noreturn]] void throw_invalid(std::string_view operation, fmt::format_string<Args...> format,
                                Args&&... args) {
  throw InvalidArgument(
      fmt::format("{}: {}", operation, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace devmem::detail

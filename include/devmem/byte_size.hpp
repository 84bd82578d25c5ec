// Byte counts as text and back: how devmem writes sizes in messages and reports ("1.5 MiB") and
// reads them from settings (DEVMEM_HOST_DEVICE_MEMORY=512M, `devmem bench --max-size 64M`).
#pragma once

#include <devmem/export.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace devmem {

/// `bytes` in the largest binary unit (B, KiB, MiB, GiB, TiB, PiB, EiB) that leaves at least 1,
/// with one decimal, dropped when it is 0: "512 B", "1.5 MiB", "64 KiB", "4 GiB". Thread-safe;
/// never throws except std::bad_alloc.
[[nodiscard]] DEVMEM_API std::string format_bytes(std::uint64_t bytes);
/// The same for a signed count ("-1.5 MiB" for a negative one).
[[nodiscard]] DEVMEM_API std::string format_bytes(std::int64_t bytes);

/// Reads a byte count: a non-negative whole number with an optional binary suffix, K, M, G or T
/// (x 1024^1..4), in either case and optionally followed by "B" or "iB": "4096", "512M", "2g",
/// "64KiB", "1 GB" is refused (no spaces). Thread-safe.
/// Errors: InvalidArgument naming the text and what is wrong: "'12X' has an unknown suffix 'X'
/// (use K, M, G or T)", "'-3' is not a byte size (...)", "'99999999T' is out of range (...)".
[[nodiscard]] DEVMEM_API std::int64_t parse_byte_size(std::string_view text);

}  // namespace devmem

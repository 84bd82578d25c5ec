// format_bytes and parse_byte_size: the one way devmem writes and reads byte counts.
#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>

#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

using Catch::Matchers::Message;
using devmem::format_bytes;
using devmem::InvalidArgument;
using devmem::parse_byte_size;

TEST_CASE("format_bytes: the largest binary unit, one decimal unless it is 0", "[byte_size]") {
  CHECK(format_bytes(std::uint64_t{0}) == "0 B");
  CHECK(format_bytes(std::uint64_t{1023}) == "1023 B");
  CHECK(format_bytes(std::uint64_t{1024}) == "1 KiB");
  CHECK(format_bytes(std::uint64_t{1536}) == "1.5 KiB");
  CHECK(format_bytes(std::uint64_t{64} << 20) == "64 MiB");
  CHECK(format_bytes(std::uint64_t{3} << 29) == "1.5 GiB");
  CHECK(format_bytes(std::uint64_t{4} << 40) == "4 TiB");
  CHECK(format_bytes(std::numeric_limits<std::uint64_t>::max()) == "16 EiB");
  CHECK(format_bytes(std::int64_t{-1536}) == "-1.5 KiB");
  CHECK(format_bytes(std::numeric_limits<std::int64_t>::min()) == "-8 EiB");
  CHECK(format_bytes(std::int64_t{100}) == "100 B");
}

TEST_CASE("parse_byte_size: a whole number with an optional binary suffix", "[byte_size]") {
  CHECK(parse_byte_size("0") == 0);
  CHECK(parse_byte_size("4096") == 4096);
  CHECK(parse_byte_size("4096B") == 4096);
  CHECK(parse_byte_size("512M") == std::int64_t{512} << 20);
  CHECK(parse_byte_size("2g") == std::int64_t{2} << 30);
  CHECK(parse_byte_size("64KiB") == std::int64_t{64} << 10);
  CHECK(parse_byte_size("64kb") == std::int64_t{64} << 10);
  CHECK(parse_byte_size("3T") == std::int64_t{3} << 40);
  CHECK(parse_byte_size("8388607T") == std::int64_t{8388607} << 40);
  // What format_bytes writes for whole units reads back (without the space).
  CHECK(parse_byte_size("64MiB") == std::int64_t{64} << 20);
}

TEST_CASE("parse_byte_size: errors name the text and what is wrong", "[byte_size]") {
  const std::string expected_form =
      " (a whole number of bytes with an optional K, M, G or T suffix, e.g. 512M)";
  CHECK_THROWS_MATCHES(parse_byte_size(""), InvalidArgument,
                       Message("'' is not a byte size" + expected_form));
  CHECK_THROWS_MATCHES(parse_byte_size("abc"), InvalidArgument,
                       Message("'abc' is not a byte size" + expected_form));
  CHECK_THROWS_MATCHES(parse_byte_size("-3"), InvalidArgument,
                       Message("'-3' is not a byte size" + expected_form));
  CHECK_THROWS_MATCHES(parse_byte_size("M"), InvalidArgument,
                       Message("'M' is not a byte size" + expected_form));
  CHECK_THROWS_MATCHES(parse_byte_size("12X"), InvalidArgument,
                       Message("'12X' has an unknown suffix 'X' (use K, M, G or T)"));
  CHECK_THROWS_MATCHES(parse_byte_size("1 G"), InvalidArgument,
                       Message("'1 G' has an unknown suffix ' G' (use K, M, G or T)"));
  CHECK_THROWS_MATCHES(parse_byte_size("5MiBs"), InvalidArgument,
                       Message("'5MiBs' has an unknown suffix 'MiBs' (use K, M, G or T)"));
  CHECK_THROWS_MATCHES(parse_byte_size("8388608T"), InvalidArgument,
                       Message("'8388608T' is out of range (at most 9223372036854775807 bytes)"));
  CHECK_THROWS_MATCHES(parse_byte_size("99999999999999999999"), InvalidArgument,
                       Message("'99999999999999999999' is out of range (at most "
                               "9223372036854775807 bytes)"));
}

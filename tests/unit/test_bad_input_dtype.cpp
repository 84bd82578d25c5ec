// Bad-input catalogue, dtypes: every invalid kind, itemsize, alignment and typestr that
// DType rejects, with the exact exception type and message.
#include <catch2/catch.hpp>

#include <devmem/dtype.hpp>
#include <devmem/error.hpp>

using Catch::Matchers::Message;
using devmem::DType;
using devmem::InvalidArgument;

TEST_CASE("bad input, dtype: constructor arguments", "[bad-input][dtype]") {
  REQUIRE_THROWS_MATCHES(DType('x', 4), InvalidArgument,
                         Message("DType: unknown kind 'x' (expected one of b, i, u, f, c, V)"));
  REQUIRE_THROWS_MATCHES(DType('f', 0), InvalidArgument,
                         Message("DType: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(DType('f', 3), InvalidArgument,
                         Message("DType: float of 3 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('b', 2), InvalidArgument,
                         Message("DType: bool of 2 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('i', 4, 3), InvalidArgument,
                         Message("DType: alignment must be a power of two, got 3"));
  REQUIRE_THROWS_MATCHES(DType::record(6, 4), InvalidArgument,
                         Message("DType: itemsize 6 is not a multiple of alignment 4"));
}

TEST_CASE("bad input, dtype: typestr parsing", "[bad-input][dtype]") {
  REQUIRE_THROWS_MATCHES(DType::from_typestr(""), InvalidArgument,
                         Message("DType: unknown typestr ''"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("f8"), InvalidArgument,
                         Message("DType: unknown typestr 'f8'"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<z8"), InvalidArgument,
                         Message("DType: unknown typestr '<z8'"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<f-8"), InvalidArgument,
                         Message("DType: unknown typestr '<f-8'"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<f8 "), InvalidArgument,
                         Message("DType: unknown typestr '<f8 '"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<i99999999999999999999"), InvalidArgument,
                         Message("DType: unknown typestr '<i99999999999999999999'"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<f3"), InvalidArgument,
                         Message("DType: float of 3 bytes does not exist (typestr '<f3')"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("|V0"), InvalidArgument,
                         Message("DType: void of 0 bytes does not exist (typestr '|V0')"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr(">f8"), InvalidArgument,
                         Message("DType: big-endian typestr '>f8' is not supported"));
}

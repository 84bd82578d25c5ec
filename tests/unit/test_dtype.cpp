// DType: kinds, itemsizes, alignments, typestr round trips, names, equality and every error path.
#include <devmem/dtype.hpp>
#include <devmem/error.hpp>

#include "matchers.hpp"

#include <catch2/catch.hpp>

#include <complex>
#include <cstdint>
#include <string>

using Catch::Matchers::Message;
using devmem::DType;
using devmem::dtype_of;
using devmem::InvalidArgument;

namespace {
struct Particle {
  double x, y, z;
};
struct OtherRecord {
  double a, b, c;
};
struct Packed3 {
  char c[3];
};
}  // namespace

TEST_CASE("DType default is float64", "[dtype]") {
  const DType d;
  CHECK(d.kind() == 'f');
  CHECK(d.itemsize() == 8);
  CHECK(d.alignment() == 8);
  CHECK(d.typestr() == "<f8");
  CHECK(d.name() == "float64");
  CHECK_FALSE(d.is_record());
  CHECK(d == dtype_of<double>());
}

TEST_CASE("DType of C++ types", "[dtype]") {
  CHECK(dtype_of<bool>().typestr() == "|b1");
  CHECK(dtype_of<std::int8_t>().typestr() == "|i1");
  CHECK(dtype_of<std::uint8_t>().typestr() == "|u1");
  CHECK(dtype_of<std::int16_t>().typestr() == "<i2");
  CHECK(dtype_of<std::uint16_t>().typestr() == "<u2");
  CHECK(dtype_of<std::int32_t>().typestr() == "<i4");
  CHECK(dtype_of<std::uint32_t>().typestr() == "<u4");
  CHECK(dtype_of<std::int64_t>().typestr() == "<i8");
  CHECK(dtype_of<std::uint64_t>().typestr() == "<u8");
  CHECK(dtype_of<float>().typestr() == "<f4");
  CHECK(dtype_of<double>().typestr() == "<f8");
  CHECK(dtype_of<std::complex<float>>().typestr() == "<c8");
  CHECK(dtype_of<std::complex<double>>().typestr() == "<c16");

  CHECK(dtype_of<std::complex<float>>().alignment() == 4);
  CHECK(dtype_of<std::complex<double>>().alignment() == 8);
  CHECK(dtype_of<std::complex<double>>() == DType('c', 16));

  const DType rec = dtype_of<Particle>();
  CHECK(rec.is_record());
  CHECK(rec.kind() == 'V');
  CHECK(rec.itemsize() == 24);
  CHECK(rec.alignment() == 8);
  CHECK(rec.typestr() == "|V24");
  CHECK(rec.name() == "V24");
}

TEST_CASE("DType names", "[dtype]") {
  CHECK(DType('b', 1).name() == "bool");
  CHECK(DType('i', 1).name() == "int8");
  CHECK(DType('i', 2).name() == "int16");
  CHECK(DType('i', 4).name() == "int32");
  CHECK(DType('i', 8).name() == "int64");
  CHECK(DType('u', 1).name() == "uint8");
  CHECK(DType('u', 2).name() == "uint16");
  CHECK(DType('u', 4).name() == "uint32");
  CHECK(DType('u', 8).name() == "uint64");
  CHECK(DType('f', 2).name() == "float16");
  CHECK(DType('f', 4).name() == "float32");
  CHECK(DType('f', 8).name() == "float64");
  CHECK(DType('f', 16).name() == "float128");
  CHECK(DType('c', 8).name() == "complex64");
  CHECK(DType('c', 16).name() == "complex128");
  CHECK(DType('c', 32).name() == "complex256");
  CHECK(DType('V', 24).name() == "V24");
  CHECK(DType::record(5).name() == "V5");
}

TEST_CASE("DType natural and explicit alignment", "[dtype]") {
  CHECK(DType('i', 4).alignment() == 4);
  CHECK(DType('f', 16).alignment() == 16);
  CHECK(DType('c', 8).alignment() == 4);
  CHECK(DType('c', 32).alignment() == 16);
  CHECK(DType('V', 24).alignment() == 1);
  CHECK(DType('f', 8, 4).alignment() == 4);
  CHECK(DType::record(24, 8).alignment() == 8);
  CHECK(DType::record(3).alignment() == 1);
}

TEST_CASE("DType typestr round trips", "[dtype]") {
  for (const char* s : {"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "<f2", "<f4",
                        "<f8", "<f16", "<c8", "<c16", "<c32", "|V1", "|V24", "|V100"}) {
    INFO(s);
    CHECK(DType::from_typestr(s).typestr() == s);
  }
}

TEST_CASE("DType::from_typestr accepts native and not-applicable byte orders", "[dtype]") {
  CHECK(DType::from_typestr("=f8") == DType('f', 8));
  CHECK(DType::from_typestr("|f8") == DType('f', 8));
  CHECK(DType::from_typestr("=i4").typestr() == "<i4");
  CHECK(DType::from_typestr("<u1").typestr() == "|u1");
  // Big-endian marks are harmless where byte order does not apply (NumPy normalises them to '|').
  CHECK(DType::from_typestr(">u1") == DType('u', 1));
  CHECK(DType::from_typestr(">b1") == DType('b', 1));
  CHECK(DType::from_typestr(">V8") == DType::record(8));
  CHECK(DType::from_typestr("<V16").alignment() == 1);
}

TEST_CASE("DType::from_typestr errors", "[dtype][errors]") {
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<q9"), InvalidArgument,
                         Message("DType: unknown typestr '<q9'"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr(">f8"), InvalidArgument,
                         Message("DType: big-endian typestr '>f8' is not supported"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr(">c16"), InvalidArgument,
                         Message("DType: big-endian typestr '>c16' is not supported"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("<f3"), InvalidArgument,
                         Message("DType: float of 3 bytes does not exist (typestr '<f3')"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("|V0"), InvalidArgument,
                         Message("DType: void of 0 bytes does not exist (typestr '|V0')"));
  for (const char* bad : {"", "<", "<f", "f8", "<f8x", "<f-8", "<f+8", "<f 8", "#f8", "<M8", "<U4",
                          "<f99999999999999999999", "<f8\n"}) {
    INFO('"' << bad << '"');
    REQUIRE_THROWS_MATCHES(DType::from_typestr(bad), InvalidArgument,
                           Message("DType: unknown typestr '" + std::string(bad) + "'"));
  }
}

TEST_CASE("DType constructor errors", "[dtype][errors]") {
  REQUIRE_THROWS_MATCHES(DType('x', 4), InvalidArgument,
                         Message("DType: unknown kind 'x' (expected one of b, i, u, f, c, V)"));
  REQUIRE_THROWS_MATCHES(DType('\0', 4), InvalidArgument,
                         devmem_test::MessageContains("DType: unknown kind"));
  REQUIRE_THROWS_MATCHES(DType('f', 3), InvalidArgument,
                         Message("DType: float of 3 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('b', 2), InvalidArgument,
                         Message("DType: bool of 2 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('i', 16), InvalidArgument,
                         Message("DType: int of 16 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('u', 3), InvalidArgument,
                         Message("DType: uint of 3 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('c', 4), InvalidArgument,
                         Message("DType: complex of 4 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('f', 0), InvalidArgument,
                         Message("DType: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(DType::record(-4), InvalidArgument,
                         Message("DType: itemsize must be positive, got -4"));
  REQUIRE_THROWS_MATCHES(DType('f', 8, 3), InvalidArgument,
                         Message("DType: alignment must be a power of two, got 3"));
  REQUIRE_THROWS_MATCHES(DType('f', 8, -8), InvalidArgument,
                         Message("DType: alignment must be a power of two, got -8"));
  REQUIRE_THROWS_MATCHES(DType::record(12, 8), InvalidArgument,
                         Message("DType: itemsize 12 is not a multiple of alignment 8"));
}

TEST_CASE("DType equality", "[dtype]") {
  CHECK(DType('f', 8) == DType::from_typestr("<f8"));
  CHECK_FALSE(DType('f', 8) == DType('i', 8));
  CHECK_FALSE(DType('f', 8) == DType('f', 4));
  CHECK_FALSE(DType('f', 8) == DType('f', 8, 4));
  CHECK(DType('f', 8) != DType('c', 8));

  // Records: same C++ type, or no type name on one side.
  CHECK(dtype_of<Particle>() == dtype_of<Particle>());
  CHECK_FALSE(dtype_of<Particle>() == dtype_of<OtherRecord>());
  CHECK(dtype_of<Particle>() == DType::record(24, 8));
  CHECK_FALSE(dtype_of<Particle>() == DType::from_typestr("|V24"));  // alignment 1 vs 8
  CHECK(dtype_of<Packed3>() == DType::from_typestr("|V3"));
  CHECK(DType::record(24, 8, "a") != DType::record(24, 8, "b"));
  CHECK(DType::record(24) == DType('V', 24));
}

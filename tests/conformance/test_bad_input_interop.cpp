// Bad-input catalogue, interop: every CUDA Array Interface and DLPack tensor that
// as_device_array / from_dlpack / to_dlpack reject, with the exact exception type and message.
// A rejected DLPack tensor must still be released exactly once (devmem took ownership).
#include "support.hpp"

#include <dlpack/dlpack.h>

namespace {

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::InvalidArgument;

DLDeviceType active_device_type() {
  const std::string name = devmem::backend_name();
  if (name == "cuda" || name == "strict-fake") return kDLCUDA;
  if (name == "roc") return kDLROCM;
  return kDLCPU;
}

/// A valid interface of `array` that each case breaks in one way.
devmem::ArrayInterface interface_of(const DeviceArray& array) {
  devmem::ArrayInterface iface = array.array_interface();
  iface.stream.reset();
  return iface;
}

/// A DLPack tensor owning its shape and strides, counting deleter calls.
struct ForeignTensor {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  int* deleted = nullptr;
};

/// A valid tensor over `array` (C-contiguous float64) that each case then breaks in one way.
DLManagedTensor* tensor_over(const DeviceArray& array, int* deleted) {
  auto* holder = new ForeignTensor;  // NOLINT(cppcoreguidelines-owning-memory)
  holder->shape = array.shape();
  holder->deleted = deleted;
  DLTensor& t = holder->managed.dl_tensor;
  t.data = array.data();
  t.device = DLDevice{active_device_type(), devmem::current_device()};
  t.ndim = array.ndim();
  t.dtype = DLDataType{kDLFloat, 64, 1};
  t.shape = holder->shape.data();
  t.strides = nullptr;
  t.byte_offset = 0;
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<ForeignTensor*>(self->manager_ctx);
    ++*owner->deleted;
    delete owner;  // NOLINT(cppcoreguidelines-owning-memory)
  };
  return &holder->managed;
}

}  // namespace

TEST_CASE("bad input, interop: array interfaces", "[bad-input][interop]") {
  const DeviceArray d = iota_device(Shape{2, 3});
  const std::string op = "as_device_array: ";
  devmem::ArrayInterface bad = interface_of(d);
  bad.version = 1;
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "unsupported interface version 1 (expected 3, or 2 without "
                                      "a stream)"));
  bad = interface_of(d);
  bad.version = 2;
  bad.stream = devmem::ArrayInterface::kLegacyDefaultStream;
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "a version 2 interface cannot have a stream (streams came "
                                      "with version 3)"));
  bad = interface_of(d);
  bad.mask = std::make_shared<const devmem::ArrayInterface>(interface_of(d));
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "masked arrays are not supported"));
  bad = interface_of(d);
  bad.data.readonly = true;
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "read-only data is not supported (device arrays are "
                                      "writable)"));
  bad = interface_of(d);
  bad.typestr = ">f8";
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "unsupported typestr '>f8' (DType: big-endian typestr '>f8' "
                                      "is not supported)"));
  bad = interface_of(d);
  bad.strides = {8};
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "1 strides given for 2 dimensions (shape (2, 3))"));
  bad = interface_of(d);
  bad.shape = {2, -3};
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "negative dimension -3 in shape (2, -3)"));
  bad = interface_of(d);
  bad.stream = 0;
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "stream 0 is not allowed (1 = legacy default stream, 2 = "
                                      "per-thread default stream, other values are stream "
                                      "handles)"));
  bad = interface_of(d);
  bad.data.pointer = nullptr;
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "null data pointer for an array of 6 elements"));
  bad = interface_of(d);
  bad.data.pointer = static_cast<std::byte*>(d.data()) + 4;
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "data pointer " + pointer_text(bad.data.pointer) +
                                 " is not aligned to 8 bytes for dtype float64"));
  // An aligned element 0 is not enough: every other element is reached through the strides.
  bad = interface_of(d);
  bad.strides = {20, 8};
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "byte stride 20 of axis 0 is not a multiple of the alignment "
                                      "8 of dtype float64"));
  bad = interface_of(d);
  bad.shape = {2, 2};
  bad.strides = {-24, 12};
  bad.data.pointer = static_cast<std::byte*>(d.data()) + 24;
  const auto owner = std::make_shared<int>(0);
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad, owner), InvalidArgument,
                         Message(op + "byte stride 12 of axis 1 is not a multiple of the alignment "
                                      "8 of dtype float64"));
  CHECK(owner.use_count() == 1);  // the rejected import kept no reference to the owner
  // Found by fuzz/fuzz_array_interface: element 0 near address 0 with a negative stride puts
  // the first byte below address 0 (the view's base pointer wrapped around).
  bad = interface_of(d);
  bad.shape = {3};
  bad.strides = {-8};
  bad.data.pointer = reinterpret_cast<void*>(std::uintptr_t{8});
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "the elements at data pointer 0x8 with strides (-8,) span 24 "
                                      "bytes that wrap around the address space"));
  // Found by fuzz/fuzz_dlpack: the first byte exactly at address 0 (the base is the null pointer).
  bad = interface_of(d);
  bad.shape = {3};
  bad.strides = {-8};
  bad.data.pointer = reinterpret_cast<void*>(std::uintptr_t{16});
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "the elements at data pointer 0x10 with strides (-8,) start "
                                      "at address 0"));
  bad = interface_of(d);
  bad.strides = {std::numeric_limits<std::int64_t>::max(), 8};
  REQUIRE_THROWS_MATCHES(devmem::as_device_array(bad), InvalidArgument,
                         Message(op + "extent of shape (2, 3) with strides (9223372036854775807, "
                                      "8) overflows int64"));
}

TEST_CASE("bad input, interop: DLPack tensors", "[bad-input][interop]") {
  const DeviceArray d = iota_device(Shape{2, 3});
  const std::string op = "from_dlpack: ";
  REQUIRE_THROWS_MATCHES(devmem::from_dlpack(nullptr), InvalidArgument,
                         Message(op + "null tensor"));

  // Each case breaks one field of a valid tensor; the expected message follows it.
  const auto rejects = [&](void (*corrupt)(DLTensor&), const std::string& message) {
    int deleted = 0;
    DLManagedTensor* tensor = tensor_over(d, &deleted);
    corrupt(tensor->dl_tensor);
    REQUIRE_THROWS_MATCHES(devmem::from_dlpack(tensor), InvalidArgument, Message(op + message));
    CHECK(deleted == 1);  // released exactly once although rejected
  };
  const std::string backend = devmem::backend_name();
  const std::string expected_type = backend == "cuda" || backend == "strict-fake"
                                        ? "kDLCUDA or kDLCUDAManaged"
                                    : backend == "roc" ? "kDLROCM"
                                                       : "kDLCPU";
  rejects([](DLTensor& t) { t.device.device_type = kDLVulkan; },
          "device type kDLVulkan (7) is not usable on the " + backend + " backend (expected " +
              expected_type + ")");
  rejects([](DLTensor& t) { t.device.device_id = 99; },
          "device_id 99 does not exist (the " + backend + " backend has " +
              std::to_string(devmem::device_count()) + " device(s))");
  rejects([](DLTensor& t) { t.dtype.lanes = 4; }, "vector dtypes are not supported (lanes 4)");
  rejects([](DLTensor& t) { t.dtype.bits = 12; }, "unsupported dtype (code 2 (kDLFloat), bits 12)");
  rejects([](DLTensor& t) { t.ndim = -1; }, "negative ndim -1");
  rejects([](DLTensor& t) { t.shape = nullptr; }, "null shape for ndim 2");
  rejects([](DLTensor& t) { t.shape[1] = -3; }, "negative dimension -3 in shape (2, -3)");
  rejects([](DLTensor& t) { t.data = nullptr; }, "null data pointer for a tensor of 6 elements");
  static std::int64_t huge_strides[2] = {std::int64_t{1} << 61, 1};
  rejects([](DLTensor& t) { t.strides = huge_strides; },
          "stride 2305843009213693952 of axis 0 overflows int64 in bytes (itemsize 8)");
  // Found by fuzz/fuzz_dlpack: data + byte_offset, or the elements after it, past the top of
  // the address space.
  rejects(
      [](DLTensor& t) {
        t.data = reinterpret_cast<void*>(~std::uintptr_t{0} - 15);
        t.byte_offset = 32;
      },
      "data 0xfffffffffffffff0 + byte_offset 32 wraps around the address space");
  rejects(
      [](DLTensor& t) {
        t.data = reinterpret_cast<void*>(~std::uintptr_t{0} - 15);
        t.byte_offset = 0;
      },
      "the elements at data pointer 0xfffffffffffffff0 with strides (24, 8) span 48 bytes that "
      "wrap around the address space");
  rejects(
      [](DLTensor& t) {
        static std::int64_t backwards[2] = {-3, -1};
        t.strides = backwards;
        t.data = reinterpret_cast<void*>(std::uintptr_t{40});
        t.byte_offset = 0;
      },
      "the elements at data pointer 0x28 with strides (-24, -8) start at address 0");
  rejects([](DLTensor& t) { t.byte_offset = std::uint64_t{1} << 63; },
          "byte_offset 9223372036854775808 overflows int64");
  REQUIRE_THROWS_MATCHES(
      [&] {
        int deleted = 0;
        DLManagedTensor* tensor = tensor_over(d, &deleted);
        tensor->dl_tensor.byte_offset = 4;
        try {
          (void)devmem::from_dlpack(tensor);
        } catch (...) {
          CHECK(deleted == 1);
          throw;
        }
      }(),
      InvalidArgument,
      Message(op + "data pointer " + pointer_text(static_cast<std::byte*>(d.data()) + 4) +
              " (data + byte_offset) is not aligned to 8 bytes for dtype float64"));
}

TEST_CASE("bad input, interop: exports DLPack cannot express", "[bad-input][interop]") {
  struct Record {
    std::int32_t a;
    float b;
  };
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{3}, devmem::dtype_of<Record>()).to_dlpack(),
                         InvalidArgument,
                         Message("to_dlpack: record dtype V8 has no DLPack equivalent"));
  REQUIRE_THROWS_MATCHES(devmem::device_array(Shape{3}, f8(), Strides{12}).to_dlpack(),
                         InvalidArgument,
                         Message("to_dlpack: byte stride 12 of axis 0 is not a multiple of the "
                                 "itemsize 8 (DLPack strides count elements)"));
  const std::vector<double> constant(3, 0.0);
  REQUIRE_THROWS_MATCHES(
      devmem::to_dlpack(
          devmem::HostArray::view(static_cast<const void*>(constant.data()), Shape{3}, f8())),
      InvalidArgument,
      Message("to_dlpack: the host array is read-only (a DLPack 0.6 tensor cannot be marked "
              "read-only)"));
}

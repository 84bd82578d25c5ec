// Interop, DLPack (to_dlpack, from_dlpack): metadata, round trips, lifetimes, stream semantics and
// every validation error. A file of its own beside test_interop_cai.cpp: the two protocols share
// only the helpers in interop_test_support.hpp.
#include "interop_test_support.hpp"
#include "support.hpp"

#include <dlpack/dlpack.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <complex>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::ArrayInterface;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::InvalidArgument;

namespace {

// The DLPack device type of device memory on the backend under test.
DLDeviceType expected_device_type() {
  const std::string name = devmem::backend_name();
  if (name == "cuda" || name == "strict-fake") return kDLCUDA;
  if (name == "roc") return kDLROCM;
  return kDLCPU;
}
std::string expected_device_types_text() {
  const std::string name = devmem::backend_name();
  if (name == "cuda" || name == "strict-fake") return "kDLCUDA or kDLCUDAManaged";
  if (name == "roc") return "kDLROCM";
  return "kDLCPU";
}

// A DLManagedTensor made by "another library": its own shape/strides storage, a DeviceArray as the
// memory, and a counter of deleter calls.
struct TestTensor {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  DeviceArray memory;
  std::atomic<int>* deleted = nullptr;
};

void delete_test_tensor(DLManagedTensor* self) {
  auto* holder = static_cast<TestTensor*>(self->manager_ctx);
  if (holder->deleted != nullptr) ++*holder->deleted;
  delete holder;  // NOLINT(cppcoreguidelines-owning-memory)
}

struct TensorSpec {
  Shape shape;
  std::vector<std::int64_t> strides;  // elements; empty: null strides
  DLDataType dtype{kDLFloat, 64, 1};
  void* data = nullptr;
  std::uint64_t byte_offset = 0;
  DLDevice device{kDLCPU, 0};
  int ndim = -2;  // -2: shape.size()
  bool null_shape = false;
  bool null_deleter = false;
};

DLManagedTensor* make_tensor(const TensorSpec& spec, std::atomic<int>* deleted,
                             DeviceArray memory = {}) {
  auto* holder = new TestTensor;  // NOLINT(cppcoreguidelines-owning-memory)
  holder->shape = spec.shape;
  holder->strides = spec.strides;
  holder->memory = std::move(memory);
  holder->deleted = deleted;
  DLTensor& t = holder->managed.dl_tensor;
  t.data = spec.data;
  t.device = spec.device;
  t.ndim = spec.ndim == -2 ? static_cast<int>(spec.shape.size()) : spec.ndim;
  t.dtype = spec.dtype;
  t.shape = spec.null_shape ? nullptr : holder->shape.data();
  t.strides = spec.strides.empty() ? nullptr : holder->strides.data();
  t.byte_offset = spec.byte_offset;
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = spec.null_deleter ? nullptr : &delete_test_tensor;
  return &holder->managed;
}

TensorSpec spec_for_device(Shape shape) {
  TensorSpec s;
  s.shape = std::move(shape);
  s.device = DLDevice{expected_device_type(), devmem::current_device()};
  return s;
}

}  // namespace

// ---- DLPack: producer --------------------------------------------------------------------------

TEST_CASE("to_dlpack: the tensor describes the array", "[interop][dlpack]") {
  const DeviceArray base = iota_device({4, 6});
  SECTION("C-contiguous") {
    DLManagedTensor* m = base.to_dlpack();
    REQUIRE(m != nullptr);
    const DLTensor& t = m->dl_tensor;
    CHECK(t.device.device_type == expected_device_type());
    CHECK(t.device.device_id == base.context()->device());
    CHECK(t.ndim == 2);
    CHECK(t.dtype.code == kDLFloat);
    CHECK(t.dtype.bits == 64);
    CHECK(t.dtype.lanes == 1);
    CHECK(std::vector<int64_t>(t.shape, t.shape + 2) == std::vector<int64_t>{4, 6});
    REQUIRE(t.strides != nullptr);
    CHECK(std::vector<int64_t>(t.strides, t.strides + 2) == std::vector<int64_t>{6, 1});
    CHECK(t.byte_offset == 0);
    CHECK(t.data == base.data());
    REQUIRE(m->deleter != nullptr);
    m->deleter(m);
  }
  SECTION("transposed, sliced, negative strides") {
    const DeviceArray v =
        base.slice(0, std::nullopt, std::nullopt, -1).slice(1, 1, std::nullopt, 2).T();
    DLManagedTensor* m = devmem::to_dlpack(v);
    const DLTensor& t = m->dl_tensor;
    CHECK(std::vector<int64_t>(t.shape, t.shape + 2) == std::vector<int64_t>{3, 4});
    CHECK(std::vector<int64_t>(t.strides, t.strides + 2) == std::vector<int64_t>{2, -6});
    CHECK(t.data == byte_ptr(base.data()) + (3 * 6 + 1) * 8);
    CHECK(t.data == v.data());
    m->deleter(m);
  }
  SECTION("0-d") {
    DLManagedTensor* m = base[2][3].to_dlpack();
    CHECK(m->dl_tensor.ndim == 0);
    CHECK(m->dl_tensor.data == byte_ptr(base.data()) + 15 * 8);
    m->deleter(m);
  }
  SECTION("no elements") {
    DLManagedTensor* m = base.slice(0, 3, 1).to_dlpack();
    CHECK(m->dl_tensor.ndim == 2);
    CHECK(m->dl_tensor.shape[0] == 0);
    CHECK(m->dl_tensor.data == nullptr);
    m->deleter(m);
  }
}

TEST_CASE("to_dlpack: dtypes", "[interop][dlpack]") {
  const auto dl = [](const DType& dtype) {
    DLManagedTensor* m = devmem::to_dlpack(devmem::device_array(Shape{2}, dtype));
    const DLDataType out = m->dl_tensor.dtype;
    m->deleter(m);
    return std::tuple<int, int, int>(out.code, out.bits, out.lanes);
  };
  using T = std::tuple<int, int, int>;
  CHECK(dl(devmem::dtype_of<bool>()) == T(kDLUInt, 8, 1));  // DLPack 0.6 has no kDLBool
  CHECK(dl(devmem::dtype_of<std::int8_t>()) == T(kDLInt, 8, 1));
  CHECK(dl(devmem::dtype_of<std::int16_t>()) == T(kDLInt, 16, 1));
  CHECK(dl(devmem::dtype_of<std::int32_t>()) == T(kDLInt, 32, 1));
  CHECK(dl(devmem::dtype_of<std::int64_t>()) == T(kDLInt, 64, 1));
  CHECK(dl(devmem::dtype_of<std::uint8_t>()) == T(kDLUInt, 8, 1));
  CHECK(dl(devmem::dtype_of<std::uint64_t>()) == T(kDLUInt, 64, 1));
  CHECK(dl(DType('f', 2)) == T(kDLFloat, 16, 1));
  CHECK(dl(devmem::dtype_of<float>()) == T(kDLFloat, 32, 1));
  CHECK(dl(devmem::dtype_of<double>()) == T(kDLFloat, 64, 1));
  CHECK(dl(devmem::dtype_of<std::complex<float>>()) == T(kDLComplex, 64, 1));
  CHECK(dl(devmem::dtype_of<std::complex<double>>()) == T(kDLComplex, 128, 1));
}

TEST_CASE("to_dlpack: the deleter keeps the array alive", "[interop][dlpack][lifetime]") {
  DeviceArray d = iota_device({3, 2});
  const std::weak_ptr<const void> watch = d.owner();
  DLManagedTensor* m = d.T().to_dlpack();
  d = DeviceArray();
  devmem::current_context()->flush_deallocations();
  CHECK_FALSE(watch.expired());
  // Still readable through a view of the same pointer.
  const DeviceArray view = devmem::from_dlpack(m);  // now owns m
  CHECK(device_values(view) == std::vector<double>{0, 2, 4, 1, 3, 5});
  CHECK_FALSE(watch.expired());
}

TEST_CASE("to_dlpack: a DeviceArray deleted without a consumer", "[interop][dlpack][lifetime]") {
  DeviceArray d = iota_device({3});
  const std::weak_ptr<const void> watch = d.owner();
  DLManagedTensor* m = d.to_dlpack();
  d = DeviceArray();
  CHECK_FALSE(watch.expired());
  m->deleter(m);
  CHECK(watch.expired());
}

TEST_CASE("to_dlpack: an array on a stream is synchronised first", "[interop][dlpack][stream]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = devmem::device_array<double>({64}, Order::C, s);
  std::atomic<bool> opened{false};
  StreamGate gate(s);
  d.memset(0, s);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    opened = true;
    gate.open();
  });
  DLManagedTensor* m = d.to_dlpack();
  const bool was_open = opened.load();
  opener.join();
  CHECK(was_open);
  m->deleter(m);
}

TEST_CASE("to_dlpack: host arrays", "[interop][dlpack]") {
  const std::string backend = devmem::backend_name();
  const bool cuda_like = backend == "cuda" || backend == "strict-fake";
  // ROCm: page-locked memory is non-coherent there (kDLCPU), mapped memory coherent.
  const DLDeviceType pinned_type = cuda_like ? kDLCUDAHost : kDLCPU;
  const DLDeviceType mapped_type = cuda_like          ? kDLCUDAHost
                                   : backend == "roc" ? kDLROCMHost
                                                      : kDLCPU;
  SECTION("pageable: kDLCPU, values readable through the plain struct") {
    HostArray h = iota_host({2, 3});
    const std::weak_ptr<const void> watch = h.owner();
    DLManagedTensor* m = devmem::to_dlpack(h.T());
    h = HostArray();
    CHECK_FALSE(watch.expired());
    const DLTensor& t = m->dl_tensor;
    CHECK(t.device.device_type == kDLCPU);
    CHECK(t.device.device_id == 0);
    CHECK(std::vector<int64_t>(t.strides, t.strides + 2) == std::vector<int64_t>{1, 3});
    const auto* data = static_cast<const double*>(t.data);
    CHECK(data[2 * t.strides[0] + 1 * t.strides[1]] == 5.0);  // element (2, 1) of the transpose
    m->deleter(m);
    CHECK(watch.expired());
  }
  SECTION("pinned") {
    const HostArray p = devmem::pinned_array<double>({4});
    DLManagedTensor* m = devmem::to_dlpack(p);
    CHECK(m->dl_tensor.device.device_type == pinned_type);
    CHECK(m->dl_tensor.data == p.data());
    m->deleter(m);
  }
  SECTION("mapped") {
    const devmem::MappedArray mapped = devmem::mapped_array<double>({4});
    DLManagedTensor* m = devmem::to_dlpack(mapped);
    CHECK(m->dl_tensor.device.device_type == mapped_type);
    CHECK(m->dl_tensor.data == mapped.data());
    m->deleter(m);
  }
}

TEST_CASE("to_dlpack: errors", "[interop][dlpack][errors]") {
  SECTION("records") {
    REQUIRE_THROWS_MATCHES(devmem::to_dlpack(devmem::device_array(Shape{2}, DType::record(24))),
                           InvalidArgument,
                           Message("to_dlpack: record dtype V24 has no DLPack equivalent"));
  }
  SECTION("types DLPack cannot express") {
    REQUIRE_THROWS_MATCHES(devmem::to_dlpack(devmem::device_array(Shape{2}, DType('f', 16))),
                           InvalidArgument,
                           Message("to_dlpack: dtype float128 has no DLPack equivalent"));
    REQUIRE_THROWS_MATCHES(devmem::to_dlpack(devmem::device_array(Shape{2}, DType('c', 32))),
                           InvalidArgument,
                           Message("to_dlpack: dtype complex256 has no DLPack equivalent"));
  }
  SECTION("a byte stride that is not a multiple of the itemsize") {
    const DeviceArray odd = devmem::device_array(Shape{2, 3}, f8(), Strides{36, 12});
    REQUIRE_THROWS_MATCHES(odd.to_dlpack(), InvalidArgument,
                           Message("to_dlpack: byte stride 36 of axis 0 is not a multiple of the "
                                   "itemsize 8 (DLPack strides count elements)"));
    REQUIRE_THROWS_MATCHES(devmem::to_dlpack(odd.slice(0, 0, 1)), InvalidArgument,
                           Message("to_dlpack: byte stride 36 of axis 0 is not a multiple of the "
                                   "itemsize 8 (DLPack strides count elements)"));
  }
  SECTION("a read-only host array") {
    const std::vector<double> values{1, 2};
    REQUIRE_THROWS_MATCHES(devmem::to_dlpack(HostArray::view(values)), InvalidArgument,
                           Message("to_dlpack: the host array is read-only (a DLPack 0.6 tensor "
                                   "cannot be marked read-only)"));
  }
  SECTION("host arrays: records and strides too") {
    REQUIRE_THROWS_MATCHES(devmem::to_dlpack(HostArray(Shape{2}, DType::record(8))),
                           InvalidArgument,
                           Message("to_dlpack: record dtype V8 has no DLPack equivalent"));
  }
}

// ---- DLPack: consumer --------------------------------------------------------------------------

TEST_CASE("from_dlpack: round trips keep shape, strides, dtype, pointer and lifetime",
          "[interop][dlpack]") {
  const DeviceArray base = iota_device({4, 6});
  for (const auto& [name, original] : layouts_of(base)) {
    SECTION(name) {
      DeviceArray copy_of_handle = original;
      const std::weak_ptr<const void> watch = base.owner();
      DLManagedTensor* m = copy_of_handle.to_dlpack();
      copy_of_handle = DeviceArray();
      const DeviceArray view = devmem::from_dlpack(m);
      check_same_array(view, original);
      CHECK(device_values(view) == device_values(original));
      CHECK(view.stream().is_default());
      CHECK(view.context()->device() == original.context()->device());
      CHECK_FALSE(watch.expired());
    }
  }
  SECTION("dtypes") {
    for (const DType& dtype : {devmem::dtype_of<std::int8_t>(), devmem::dtype_of<std::uint32_t>(),
                               DType('f', 2), f4(), devmem::dtype_of<std::complex<double>>()}) {
      const DeviceArray a = devmem::device_array(Shape{3}, dtype);
      const DeviceArray view = devmem::from_dlpack(a.to_dlpack());
      check_same_array(view, a);
    }
  }
  SECTION("bool comes back as uint8 (DLPack 0.6 has no bool)") {
    const DeviceArray b = devmem::device_array<bool>({3});
    const DeviceArray view = devmem::from_dlpack(b.to_dlpack());
    CHECK(view.dtype() == u1());
    CHECK(view.data() == b.data());
  }
  SECTION("the round trip through both protocols") {
    const DeviceArray v = base.slice(1, std::nullopt, std::nullopt, -3).T();
    const DeviceArray once = devmem::from_dlpack(
        devmem::as_device_array(v.array_interface(), std::make_shared<const DeviceArray>(v))
            .to_dlpack());
    check_same_array(once, v);
    CHECK(device_values(once) == device_values(v));
  }
}

TEST_CASE("from_dlpack: tensors made by another library", "[interop][dlpack]") {
  const DeviceArray memory = iota_device({12});
  std::atomic<int> deleted{0};
  SECTION("null strides mean C-contiguous") {
    TensorSpec spec = spec_for_device({3, 4});
    spec.data = memory.data();
    DeviceArray view = devmem::from_dlpack(make_tensor(spec, &deleted, memory));
    CHECK(view.shape() == Shape{3, 4});
    CHECK(view.strides() == Strides{32, 8});
    CHECK(device_values(view) == iota_vec(12));
    view = DeviceArray();
    CHECK(deleted == 1);
  }
  SECTION("byte_offset is honoured") {
    TensorSpec spec = spec_for_device({2, 2});
    spec.data = memory.data();
    spec.byte_offset = 3 * 8;
    spec.strides = {4, 1};
    DeviceArray view = devmem::from_dlpack(make_tensor(spec, &deleted, memory));
    CHECK(view.data() == byte_ptr(memory.data()) + 24);
    CHECK(device_values(view) == std::vector<double>{3, 4, 7, 8});
    CHECK(view.array_interface().data.pointer == view.data());
  }
  SECTION("negative element strides") {
    TensorSpec spec = spec_for_device({3, 2});
    spec.data = byte_ptr(memory.data()) + 11 * 8;
    spec.strides = {-4, -1};
    const DeviceArray view = devmem::from_dlpack(make_tensor(spec, &deleted, memory));
    CHECK(view.strides() == Strides{-32, -8});
    CHECK(device_values(view) == std::vector<double>{11, 10, 7, 6, 3, 2});
  }
  SECTION("kDLBool of newer DLPack versions") {
    const DeviceArray flags = devmem::device_array<bool>({2});
    flags.fill(true);
    TensorSpec spec = spec_for_device({2});
    spec.data = flags.data();
    spec.dtype = DLDataType{6, 8, 1};
    const DeviceArray view = devmem::from_dlpack(make_tensor(spec, &deleted, flags));
    CHECK(view.dtype() == devmem::dtype_of<bool>());
    CHECK(view.to_vector<bool>() == std::vector<bool>{true, true});
  }
  SECTION("a null deleter") {
    TensorSpec spec = spec_for_device({12});
    spec.data = memory.data();
    spec.null_deleter = true;
    DLManagedTensor* m = make_tensor(spec, &deleted, memory);
    auto* holder = static_cast<TestTensor*>(m->manager_ctx);
    {
      const DeviceArray view = devmem::from_dlpack(m);
      CHECK(device_values(view) == iota_vec(12));
    }
    CHECK(deleted == 0);
    delete holder;  // NOLINT(cppcoreguidelines-owning-memory): the producer frees it itself
  }
  SECTION("no elements and a null pointer") {
    TensorSpec spec = spec_for_device({0, 5});
    const DeviceArray view = devmem::from_dlpack(make_tensor(spec, &deleted));
    CHECK(view.size() == 0);
    CHECK(view.data() == nullptr);
  }
}

TEST_CASE("from_dlpack: CPU memory on the host backend is registered while views live",
          "[interop][dlpack][host-memory]") {
  if (!on_host_backend()) {
    SUCCEED("kDLCPU tensors are device memory only on the host backend");
    return;
  }
  std::vector<double> values(12);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  std::atomic<int> deleted{0};
  TensorSpec whole;
  whole.shape = {3, 4};
  whole.data = values.data();
  {
    DeviceArray view = devmem::from_dlpack(make_tensor(whole, &deleted));
    CHECK(device_values(view) == iota_vec(12));
    view.slice(1, 0, 4, 2).fill(-1.0);  // writes through devmem land in the vector
    CHECK(values[0] == -1.0);
    CHECK(values[1] == 1.0);
    CHECK(values[10] == -1.0);
    // A second tensor over part of the same memory shares the first one's registration, and
    // keeps it when the first view dies.
    TensorSpec column;
    column.shape = {3};
    column.strides = {4};
    column.data = values.data() + 3;
    const DeviceArray last = devmem::from_dlpack(make_tensor(column, &deleted));
    view = DeviceArray();
    CHECK(deleted == 1);
    CHECK(device_values(last) == std::vector<double>{3, 7, 11});
    last.fill(5.0);
    CHECK(values[11] == 5.0);
  }
  CHECK(deleted == 2);
  // Unregistered with the last view: the memory can be pinned (registered) again at once.
  const HostArray host = HostArray::view(std::span<double>(values));
  auto pins = devmem::pinned(host);
  pins.close();
}

TEST_CASE("from_dlpack: the deleter runs exactly once, when the last view dies",
          "[interop][dlpack][lifetime]") {
  const DeviceArray memory = iota_device({6});
  std::atomic<int> deleted{0};
  TensorSpec spec = spec_for_device({2, 3});
  spec.data = memory.data();
  DeviceArray view = devmem::from_dlpack(make_tensor(spec, &deleted, memory));
  DeviceArray row = view[1];
  DeviceArray reshaped = view.reshape({3, 2});
  std::vector<DeviceArray> parts = view.ravel().split(4);
  view = DeviceArray();
  CHECK(deleted == 0);
  row = DeviceArray();
  CHECK(deleted == 0);
  parts.clear();
  CHECK(deleted == 0);
  CHECK(device_values(reshaped) == iota_vec(6));
  reshaped = DeviceArray();
  CHECK(deleted == 1);
}

TEST_CASE("from_dlpack: validation errors (the deleter still runs once)",
          "[interop][dlpack][errors]") {
  const DeviceArray memory = iota_device({12});
  std::atomic<int> deleted{0};
  TensorSpec spec = spec_for_device({3, 4});
  spec.data = memory.data();
  const auto fails_with = [&](const std::string& message) {
    deleted = 0;
    REQUIRE_THROWS_MATCHES(devmem::from_dlpack(make_tensor(spec, &deleted)), InvalidArgument,
                           Message(message));
    CHECK(deleted == 1);
  };
  SECTION("null tensor") {
    REQUIRE_THROWS_MATCHES(devmem::from_dlpack(nullptr), InvalidArgument,
                           Message("from_dlpack: null tensor"));
  }
  SECTION("a device type of another backend") {
    const std::string backend = devmem::backend_name();
    spec.device.device_type = kDLOpenCL;
    fails_with("from_dlpack: device type kDLOpenCL (4) is not usable on the " + backend +
               " backend (expected " + expected_device_types_text() + ")");
    spec.device.device_type = on_host_backend() ? kDLCUDA : kDLCPU;
    fails_with(std::string("from_dlpack: device type ") +
               (on_host_backend() ? "kDLCUDA (2)" : "kDLCPU (1)") + " is not usable on the " +
               backend + " backend (expected " + expected_device_types_text() + ")");
    spec.device.device_type = static_cast<DLDeviceType>(6);  // unused in every DLPack version
    fails_with("from_dlpack: device type unknown (6) is not usable on the " + backend +
               " backend (expected " + expected_device_types_text() + ")");
  }
  SECTION("a device that does not exist") {
    const int count = devmem::device_count();
    spec.device.device_id = count;
    fails_with("from_dlpack: device_id " + std::to_string(count) + " does not exist (the " +
               devmem::backend_name() + " backend has " + std::to_string(count) + " device(s))");
    spec.device.device_id = -1;
    fails_with("from_dlpack: device_id -1 does not exist (the " + devmem::backend_name() +
               " backend has " + std::to_string(count) + " device(s))");
  }
  SECTION("lanes") {
    spec.dtype = DLDataType{kDLFloat, 32, 4};
    fails_with("from_dlpack: vector dtypes are not supported (lanes 4)");
  }
  SECTION("unsupported dtypes") {
    spec.dtype = DLDataType{kDLBfloat, 16, 1};
    fails_with("from_dlpack: unsupported dtype (code 4 (kDLBfloat), bits 16)");
    spec.dtype = DLDataType{kDLOpaqueHandle, 64, 1};
    fails_with("from_dlpack: unsupported dtype (code 3 (kDLOpaqueHandle), bits 64)");
    spec.dtype = DLDataType{kDLInt, 24, 1};
    fails_with("from_dlpack: unsupported dtype (code 0 (kDLInt), bits 24)");
    spec.dtype = DLDataType{kDLUInt, 4, 1};
    fails_with("from_dlpack: unsupported dtype (code 1 (kDLUInt), bits 4)");
    spec.dtype = DLDataType{kDLFloat, 128, 1};
    fails_with("from_dlpack: unsupported dtype (code 2 (kDLFloat), bits 128)");
    spec.dtype = DLDataType{kDLComplex, 32, 1};
    fails_with("from_dlpack: unsupported dtype (code 5 (kDLComplex), bits 32)");
    spec.dtype = DLDataType{6, 16, 1};
    fails_with("from_dlpack: unsupported dtype (code 6 (kDLBool), bits 16)");
    spec.dtype = DLDataType{42, 8, 1};
    fails_with("from_dlpack: unsupported dtype (code 42 (unknown), bits 8)");
  }
  SECTION("ndim and shape") {
    spec.ndim = -1;
    fails_with("from_dlpack: negative ndim -1");
    spec.ndim = -2;
    spec.null_shape = true;
    fails_with("from_dlpack: null shape for ndim 2");
    spec.null_shape = false;
    spec.shape = {2, -3};
    fails_with("from_dlpack: negative dimension -3 in shape (2, -3)");
  }
  SECTION("strides overflow") {
    spec.shape = {3};
    spec.strides = {int64_t{1} << 61};
    fails_with(
        "from_dlpack: stride 2305843009213693952 of axis 0 overflows int64 in bytes (itemsize 8)");
    spec.strides = {int64_t{1} << 59};
    fails_with(
        "from_dlpack: extent of shape (3,) with strides (4611686018427387904,) overflows int64");
  }
  SECTION("null data with elements") {
    spec.data = nullptr;
    fails_with("from_dlpack: null data pointer for a tensor of 12 elements");
  }
  SECTION("misaligned data") {
    spec.byte_offset = 4;
    fails_with("from_dlpack: data pointer " + pointer_text(byte_ptr(memory.data()) + 4) +
               " (data + byte_offset) is not aligned to 8 bytes for dtype float64");
  }
  SECTION("byte_offset overflow") {
    spec.byte_offset = std::numeric_limits<std::uint64_t>::max();
    fails_with("from_dlpack: byte_offset 18446744073709551615 overflows int64");
  }
}

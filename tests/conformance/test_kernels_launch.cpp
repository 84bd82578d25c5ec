// Kernel launches (devmem::launch), on every backend: the messages that name the kernel, the
// launch errors every backend reports the same way (and that enqueue nothing), launch
// configurations in Numba's and CUDA's order, launches on several streams and devices, MappedArray
// arguments, what a launch keeps alive until its kernel has run, the GPU kernel layer's use of
// the vendor runtime, and 2-d constant arrays. Compiled like test_kernels.cpp: by the host
// compiler for conformance_host, by nvcc for conformance_cuda (test_kernels_launch.cu includes it)
// and by hipcc for conformance_roc. A file of its own beside test_kernels.cpp, whose kernels
// compute things.
#include "kernel_test_support.hpp"
#include "support.hpp"

#include <devmem/kernel.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

using namespace conformance;
using devmem::ArrayView;
using devmem::DeviceArray;
using devmem::Dim3;
using devmem::LaunchConfig;

namespace {

// Dim3 from signed integers in device code: the unchecked conversion there (nvcc and hipcc must
// compile it; device code cannot throw).
DEVMEM_KERNEL void dims_from_ints(ArrayView<unsigned, 1> out) {
  const std::int64_t i = devmem::global_id();
  const Dim3 d{static_cast<int>(i) + 1, std::int64_t{2}, 3L};
  if (i < out.shape(0)) out[i] = static_cast<unsigned>(d.volume());
}

// A kernel template, for the name a pointer launch finds ("fill_with<short>").
template <class T>
DEVMEM_KERNEL void fill_with(ArrayView<T, 1> out, T value) {
  const std::int64_t i = devmem::global_id();
  if (i < out.shape(0)) out[i] = value;
}

// A 2-d constant array (Numba's cuda.const.array_like of a 2-d host array), read as lut[y][x].
constexpr int kLutRows = 3;
constexpr int kLutColumns = 5;
DEVMEM_CONSTANT_ARRAY(conformance_lut_2d, std::int64_t, kLutRows, kLutColumns);

DEVMEM_KERNEL void read_lut_2d(ArrayView<std::int64_t, 2> out) {
  const auto [x, y] = devmem::grid<2>();
  if (y < out.shape(0) && x < out.shape(1)) out(y, x) = conformance_lut_2d[y][x];
}

}  // namespace

TEST_CASE("kernels: launch messages name the kernel", "[kernels]") {
  using devmem::detail::kernel_name_in_signature;
  // The signatures of kernel_name_of<K> as GCC, nvcc and Clang write them.
  static_assert(kernel_name_in_signature("std::string_view devmem::detail::kernel_name_of() [with "
                                         "auto Kernel = ns::scale<float, 2>; std::string_view = "
                                         "std::basic_string_view<char>]") == "ns::scale<float, 2>");
  static_assert(kernel_name_in_signature("std::string_view devmem::detail::kernel_name_of() "
                                         "[Kernel = &(anonymous namespace)::saxpy]") == "saxpy");
  static_assert(kernel_name_in_signature("[with auto Kernel = {anonymous}::saxpy; X = Y]") ==
                "saxpy");
  static_assert(kernel_name_in_signature(
                    "[with auto Kernel = _GLOBAL__N__bbbf4a82_22_test_kernels_launch_cu_7e4b64f5::"
                    "fill_iota; X = Y]") == "fill_iota");
  static_assert(kernel_name_in_signature("void f() [T = int]").empty());
  CHECK(devmem::detail::kernel_name_of<fill_iota>() == "fill_iota");
  // Through a pointer the name comes from the dynamic symbol table for an exported function, else
  // from the static symbol table of the file that holds it: this test's kernels (internal linkage,
  // in an executable linked without -rdynamic), templates included.
  CHECK(devmem::detail::kernel_symbol_name(
            reinterpret_cast<const void*>(&devmem::current_device)) == "devmem::current_device");
  CHECK(devmem::detail::kernel_symbol_name(reinterpret_cast<const void*>(&fill_iota)) ==
        "fill_iota");
  CHECK(devmem::detail::kernel_symbol_name(reinterpret_cast<const void*>(&fill_with<short>)) ==
        "fill_with<short>");
  // Not a function's start: no name.
  CHECK(devmem::detail::kernel_symbol_name(reinterpret_cast<const char*>(&fill_iota) + 1) ==
        "kernel");
  const DeviceArray ints = devmem::device_array<int>({64});
  CHECK_THROWS_MATCHES(
      devmem::launch<fill_iota>({0, 64}, ints, 0), devmem::InvalidArgument,
      Catch::Matchers::Message("devmem::launch(fill_iota): grid (0, 1, 1) has an empty dimension"));
  CHECK_THROWS_MATCHES(
      devmem::launch({0, 64}, fill_iota, ints, 0), devmem::InvalidArgument,
      Catch::Matchers::Message("devmem::launch(fill_iota): grid (0, 1, 1) has an empty dimension"));
  void (*const through_pointer)(ArrayView<int, 1>, int) = fill_iota;
  CHECK_THROWS_WITH(devmem::launch({1, 64}, through_pointer, devmem::device_array<float>({64}), 0),
                    Catch::Matchers::StartsWith("devmem::launch(fill_iota): argument 0: "));
  devmem::launch<fill_iota>({1, 64}, ints, 3);
  CHECK(ints.to_vector<int>() == iota_vec<int>(64, 3));
}

TEST_CASE("kernels: a 2-d constant array", "[kernels]") {
  std::vector<std::int64_t> table(kLutRows * kLutColumns);
  for (std::size_t i = 0; i != table.size(); ++i) {
    table[i] = static_cast<std::int64_t>(i * i) * (std::int64_t{1} << 33) - 7;
  }
  const DeviceArray out = devmem::device_array<std::int64_t>({kLutRows, kLutColumns});
  const auto read_back = [&] {
    devmem::launch({1, Dim3(8, 4)}, read_lut_2d, out);
    return out.to_vector<std::int64_t>();
  };
  devmem::const_array_like(conformance_lut_2d,
                           devmem::HostArray::view(table).reshape({kLutRows, kLutColumns}));
  CHECK(read_back() == table);
  // A container's values in C order.
  std::vector<std::int64_t> negated(table);
  for (auto& v : negated) v = -v;
  devmem::const_array_like(conformance_lut_2d, negated);
  CHECK(read_back() == negated);
  // A Fortran-order host array: its elements, not its memory order.
  const devmem::HostArray fortran =
      devmem::HostArray::view(table).reshape({kLutRows, kLutColumns}).copy(devmem::Order::F);
  devmem::const_array_like(conformance_lut_2d, fortran);
  CHECK(read_back() == table);
  CHECK_THROWS_MATCHES(
      devmem::const_array_like(conformance_lut_2d,
                               devmem::HostArray::view(table).reshape({kLutColumns, kLutRows})),
      devmem::InvalidArgument,
      Catch::Matchers::Message("const_array_like: the host array's shape (5, 3) is not the "
                               "constant array's shape (3, 5) (they must match)"));
  CHECK_THROWS_MATCHES(devmem::const_array_like(conformance_lut_2d, devmem::HostArray::view(table)),
                       devmem::InvalidArgument,
                       Catch::Matchers::Message("const_array_like: the host array's shape (15,) is "
                                                "not the constant array's shape (3, 5) (they must "
                                                "match)"));
  CHECK_THROWS_MATCHES(
      devmem::const_array_like(conformance_lut_2d, std::vector<std::int64_t>(14)),
      devmem::InvalidArgument,
      Catch::Matchers::Message("const_array_like: the constant array holds 15 elements but 14 "
                               "values were given (they must match)"));
}

TEST_CASE("kernels: launch errors are clear and enqueue nothing", "[kernels]") {
  const devmem::Stream s = devmem::stream();
  const DeviceArray ints = devmem::device_array<int>({64}, Order::C, s);
  ints.fill(5, s);
  const auto props = devmem::current_context()->properties();

  SECTION("block larger than the device allows") {
    CHECK_THROWS_MATCHES(
        devmem::launch({1, Dim3(64, 32), 0, s}, fill_iota, ints, 0), devmem::InvalidArgument,
        MessageContains("devmem::launch(fill_iota): block (64, 32, 1) has 2048 threads; device 0"));
    // One more than the device's z limit (CUDA: 64; ROCm and HIP-CPU: 1024).
    const auto z = static_cast<unsigned>(props.max_block_dim[2]) + 1;
    CHECK_THROWS_MATCHES(
        devmem::launch({1, Dim3(1, 1, z), 0, s}, fill_iota, ints, 0), devmem::InvalidArgument,
        MessageContains("block (1, 1, " + std::to_string(z) + ") exceeds the limit of device 0"));
  }
  SECTION("dynamic shared memory over the limit") {
    const auto too_much = static_cast<std::size_t>(props.max_shared_memory_per_block_optin) + 1;
    CHECK_THROWS_MATCHES(
        devmem::launch({1, 64, too_much, s}, fill_iota, ints, 0), devmem::InvalidArgument,
        MessageContains(std::to_string(too_much) +
                        " bytes of dynamic shared memory requested; device 0 (" + props.name +
                        ") allows at most " + std::to_string(too_much - 1) +
                        " bytes per block (the opt-in limit; " +
                        std::to_string(props.max_shared_memory_per_block) + " without it)"));
  }
  SECTION("an empty grid or block") {
    CHECK_THROWS_MATCHES(devmem::launch({0, 64, 0, s}, fill_iota, ints, 0), devmem::InvalidArgument,
                         Catch::Matchers::Message(
                             "devmem::launch(fill_iota): grid (0, 1, 1) has an empty dimension"));
    CHECK_THROWS_MATCHES(devmem::launch({1, Dim3(8, 0), 0, s}, fill_iota, ints, 0),
                         devmem::InvalidArgument,
                         Catch::Matchers::Message(
                             "devmem::launch(fill_iota): block (8, 0, 1) has an empty dimension"));
  }
  SECTION("an array of the wrong dtype or rank") {
    const DeviceArray floats = devmem::device_array<float>({64}, Order::C, s);
    CHECK_THROWS_MATCHES(devmem::launch<fill_iota>({1, 64, 0, s}, floats, 0),
                         devmem::InvalidArgument,
                         Catch::Matchers::Message("devmem::launch(fill_iota): argument 0: "
                                                  "DeviceArray::view<int32, 1>: the array's dtype "
                                                  "is float32, not int32"));
    const DeviceArray matrix = devmem::device_array<int>({8, 8}, Order::C, s);
    CHECK_THROWS_MATCHES(devmem::launch({1, 64, 0, s}, fill_iota, matrix, 0),
                         devmem::InvalidArgument,
                         MessageContains("argument 0: DeviceArray::view<int32, 1>: the "
                                         "array has 2 dimensions, not 1"));
  }
  SECTION("a misaligned array") {
    const DeviceArray odd = devmem::device_array(Shape{64}, i4(), Strides{6}, Order::C, s);
    CHECK_THROWS_MATCHES(devmem::launch<fill_iota>({1, 64, 0, s}, odd, 0), devmem::InvalidArgument,
                         Catch::Matchers::Message("devmem::launch(fill_iota): argument 0: "
                                                  "DeviceArray::view<int32, 1>: byte stride 6 of "
                                                  "axis 0 is not a multiple of the alignment 4 "
                                                  "of dtype int32"));
  }
  SECTION("a null kernel") {
    void (*no_kernel)(ArrayView<int, 1>, int) = nullptr;
    CHECK_THROWS_MATCHES(devmem::launch({1, 64, 0, s}, no_kernel, ints, 0), devmem::InvalidArgument,
                         Catch::Matchers::Message("devmem::launch: the kernel is a null pointer"));
  }
  SECTION("a kernel compiled for another backend") {
    const std::string other = devmem::backend_name() == "host" ? "cuda" : "host";
    CHECK_THROWS_MATCHES(
        (void)devmem::detail::launch_prepare({1, 1, 0, s}, other, "k"), devmem::InvalidArgument,
        MessageContains("devmem::launch(k): the kernel was compiled for the '" + other +
                        "' backend but the active backend is '" + devmem::backend_name() + "'"));
  }
  SECTION("a device of an architecture the kernel has no code for") {
    const std::string arch = devmem::current_context()->properties().architecture;
    CHECK_THROWS_MATCHES(
        (void)devmem::detail::launch_prepare({1, 1, 0, s}, devmem::backend_name(), "k",
                                             "gfx90a:xnack+,gfx1030"),
        devmem::InvalidArgument,
        MessageContains("devmem::launch(k): the kernel has no code for device 0 (") &&
            MessageContains(arch + "): it was compiled for gfx90a:xnack+,gfx1030; rebuild with "
                                   "the device's architecture in CMAKE_HIP_ARCHITECTURES"));
    // An entry with target features matches the device's architecture.
    CHECK_NOTHROW((void)devmem::detail::launch_prepare({1, 1, 0, s}, devmem::backend_name(), "k",
                                                       "gfx90a;" + arch + ":xnack-"));
  }
  if (devmem::backend_name() == "roc") {
    SECTION("more than 2^32 - 1 work-items along an axis (an AMD dispatch packet's limit)") {
      const unsigned block = static_cast<unsigned>(std::min(props.max_threads_per_block, 1024));
      const auto grid = static_cast<unsigned>((std::uint64_t{1} << 32) / block);
      REQUIRE(static_cast<std::int64_t>(grid) <= props.max_grid_dim[0]);
      CHECK_THROWS_MATCHES(
          devmem::launch({{grid, 1, 1}, {block, 1, 1}, 0, s}, fill_iota, ints, 0),
          devmem::InvalidArgument,
          MessageContains(" has 4294967296 threads along axis 0; AMD GPUs dispatch at most "
                          "2^32 - 1 = 4294967295 per axis (grid * block)"));
    }
  }
  // Nothing was enqueued: the array still holds the fill.
  CHECK(ints.to_vector<int>(s) == std::vector<int>(64, 5));
  // And the stream still works.
  devmem::launch({1, 64, 0, s}, fill_iota, ints, 10);
  CHECK(ints.to_vector<int>(s)[63] == 73);
}

TEST_CASE("kernels: launches on several streams", "[kernels][streams]") {
  constexpr int kStreams = 4;
  std::vector<devmem::Stream> streams;
  std::vector<DeviceArray> arrays;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(devmem::stream());
    arrays.push_back(devmem::device_array<int>({5000}, Order::C, streams.back()));
  }
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < kStreams; ++i) {
      devmem::launch({blocks_for(5000, 128), 128, 0, streams[static_cast<std::size_t>(i)]},
                     fill_iota, arrays[static_cast<std::size_t>(i)], i * 10000 + round);
    }
  }
  for (int i = 0; i < kStreams; ++i) {
    const auto got = arrays[static_cast<std::size_t>(i)].to_vector<int>();
    CHECK(got.front() == i * 10000 + 2);
    CHECK(got.back() == i * 10000 + 2 + 4999);
  }
}

TEST_CASE("kernels: launch configurations in Numba's order and from any integer type",
          "[kernels]") {
  const devmem::Stream s = devmem::stream();
  const int n = 1000;
  const std::int64_t n64 = 1000;
  const DeviceArray ints = devmem::device_array<int>({n}, Order::C, s);
  SECTION("{grid, block, stream} is Numba's kernel[grid, block, stream]") {
    const LaunchConfig config{(n + 127) / 128, 128, s};
    CHECK(config.stream == s);
    CHECK(config.shared_bytes == 0);
    devmem::launch({(n + 127) / 128, 128, s}, fill_iota, ints, 3);
    CHECK(ints.to_vector<int>(s) == iota_vec<int>(n, 3));
  }
  SECTION("{grid, block, stream, shared_bytes} and CUDA's {grid, block, shared_bytes, stream}") {
    const LaunchConfig numba{4, 256, s, 512};
    const LaunchConfig cuda{4, 256, 512, s};
    CHECK(numba.grid == cuda.grid);
    CHECK(numba.block == cuda.block);
    CHECK(numba.shared_bytes == 512);
    CHECK(cuda.shared_bytes == 512);
    CHECK(numba.stream == s);
    CHECK(cuda.stream == s);
    devmem::launch({(n64 + 255) / 256, 256, s, 512}, fill_iota, ints, 7);
    CHECK(ints.to_vector<int>(s) == iota_vec<int>(n, 7));
  }
  SECTION("Dim3 from int, std::int64_t and std::size_t") {
    CHECK(Dim3{(n + 31) / 32, 32} == Dim3(32u, 32u));
    CHECK(Dim3{(n64 + 31) / 32, 2, std::size_t{3}} == Dim3(32u, 2u, 3u));
    constexpr Dim3 at_compile_time{4, 5L, 6LL};
    static_assert(at_compile_time.volume() == 120);
    CHECK(Dim3(std::numeric_limits<unsigned>::max()).x == std::numeric_limits<unsigned>::max());
  }
  SECTION("Dim3 from ints in device code") {
    const DeviceArray out = devmem::device_array<unsigned>({64}, Order::C, s);
    devmem::launch({1, 64, s}, dims_from_ints, out);
    const std::vector<unsigned> got = out.to_vector<unsigned>(s);
    for (unsigned i = 0; i < 64; ++i) CHECK(got[i] == (i + 1) * 6);
  }
  SECTION("a negative or too large dimension is refused, naming it") {
    const int negative = -3;
    CHECK_THROWS_MATCHES(
        Dim3(negative), devmem::InvalidArgument,
        Catch::Matchers::Message("Dim3: x = -3 is out of range (0 to 4294967295)"));
    const std::int64_t huge = std::int64_t{1} << 32;
    CHECK_THROWS_MATCHES(
        Dim3(1, 1, huge), devmem::InvalidArgument,
        Catch::Matchers::Message("Dim3: z = 4294967296 is out of range (0 to 4294967295)"));
    CHECK_THROWS_MATCHES(devmem::launch({n - 2000, 128, s}, fill_iota, ints, 0),
                         devmem::InvalidArgument,
                         Catch::Matchers::Message("Dim3: x = -1000 is out of range (0 to "
                                                  "4294967295)"));
  }
  SECTION("a grid past the device's limit names the value") {
    const auto props = devmem::current_context()->properties();
    const std::int64_t y = props.max_grid_dim[1] + 1;
    CHECK_THROWS_MATCHES(devmem::launch({Dim3(1, y), 1, s}, fill_iota, ints, 0),
                         devmem::InvalidArgument,
                         MessageContains("devmem::launch(fill_iota): grid (1, " +
                                         std::to_string(y) + ", 1) exceeds the limit of device 0"));
  }
}

TEST_CASE("kernels: a MappedArray argument is its device view", "[kernels][mapped]") {
  const devmem::Stream s = devmem::stream();
  devmem::MappedArray mapped = devmem::mapped_array<int>(Shape{300}, Order::C, s);
  devmem::launch({(300 + 63) / 64, 64, s}, fill_iota, mapped, 5);
  s.synchronize();
  CHECK(mapped.to_vector<int>() == iota_vec<int>(300, 5));
  SECTION("dtype and rank are checked as for a DeviceArray") {
    const devmem::MappedArray floats = devmem::mapped_array<float>(Shape{64});
    CHECK_THROWS_MATCHES(devmem::launch<fill_iota>({1, 64, s}, floats, 0), devmem::InvalidArgument,
                         Catch::Matchers::Message("devmem::launch(fill_iota): argument 0: "
                                                  "DeviceArray::view<int32, 1>: the array's dtype "
                                                  "is float32, not int32"));
  }
  SECTION("the kernel keeps the mapped memory alive") {
    // The only handle goes away right after the launch; the kernel still writes into it.
    auto temporary =
        std::make_unique<devmem::MappedArray>(devmem::mapped_array<int>(Shape{4096}, Order::C, s));
    devmem::launch({4096 / 128, 128, s}, fill_iota, *temporary, 1);
    temporary.reset();
    s.synchronize();
  }
}

TEST_CASE("kernels: a kernel writes managed memory that the host wrote and reads",
          "[kernels][managed]") {
  // Every backend that compiles kernels has managed memory (the strict fake, which has none,
  // runs no kernels).
  REQUIRE(devmem::current_context()->backend().supports_managed_memory(devmem::current_device()));
  const devmem::Stream s = devmem::stream();
  devmem::ManagedArrayOptions options;
  options.stream = s;
  const devmem::ManagedArray managed = devmem::managed_array<int>(Shape{300}, options);
  for (int i = 0; i < 300; ++i) managed.at<int>(i) = -1;
  managed.prefetch(devmem::MemoryLocation::on_device(devmem::current_device()));
  devmem::launch({(300 + 63) / 64, 64, s}, fill_iota, managed, 7);
  managed.prefetch(devmem::MemoryLocation::host());
  s.synchronize();
  // The host reads the kernel's writes in place, and a copy sees the same bytes.
  for (int i = 0; i < 300; ++i) REQUIRE(managed.at<int>(i) == i + 7);
  CHECK(managed.to_vector<int>() == iota_vec<int>(300, 7));
}

TEST_CASE("kernels: arrays and the launch must be on one device",
          "[kernels][errors][multi-device]") {
  if (devmem::device_count() < 2) {
    // One device: a launch on another stream of the same device is fine.
    const DeviceArray d = devmem::device_array<int>({8});
    const devmem::Stream s = devmem::stream();
    devmem::launch({1, 8, 0, s}, fill_iota, d, 3);
    CHECK(d.to_vector<int>(s) == std::vector<int>{3, 4, 5, 6, 7, 8, 9, 10});
    return;
  }
  const int original = devmem::current_device();
  devmem::select_device(1);
  const devmem::Stream stream_1 = devmem::stream();
  const DeviceArray on_device_1 = devmem::device_array<int>({8}, Order::C, stream_1);
  devmem::select_device(0);
  const devmem::Stream stream_0 = devmem::stream();
  CHECK_THROWS_MATCHES(devmem::launch<fill_iota>({1, 8, 0, stream_0}, on_device_1, 0),
                       devmem::InvalidArgument,
                       Catch::Matchers::Message("devmem::launch(fill_iota): argument 0 is an array "
                                                "on device 1, but the kernel runs on device 0"));
  // On its own device's stream it works, whichever device is current.
  devmem::launch({1, 8, 0, stream_1}, fill_iota, on_device_1, 1);
  CHECK(on_device_1.to_vector<int>()[7] == 8);
  devmem::select_device(original);
}

#if defined(__CUDACC__) || defined(__HIPCC__) || defined(DEVMEM_HIPCPU_CUDA) || \
    defined(DEVMEM_HIPCPU_ROC)
// ---- The GPU kernel layer and the vendor runtime the kernel's translation unit calls ----------

namespace {
// The constant-memory lookup of test_kernels.cpp, for the test below (defined only where that test
// is compiled: an unused kernel in an unnamed namespace is a warning).
DEVMEM_KERNEL void lookup(ArrayView<const int, 1> keys, ArrayView<float, 1> out) {
  const std::int64_t i = devmem::global_id();
  if (i < keys.shape(0)) out[i] = conformance_lut[keys[i] % kLutSize];
}
}  // namespace

TEST_CASE("kernels: a launch neither reports nor swallows an earlier, unrelated runtime error",
          "[kernels][errors]") {
  using devmem::detail::KernelRuntime;
  const devmem::Stream s = devmem::stream();
  const DeviceArray out = devmem::device_array<int>({64}, Order::C, s);
  // The application's own failed call, left for it to read with cudaGetLastError/hipGetLastError.
  const auto earlier = KernelRuntime::opt_in_dynamic_shared(nullptr, 1);
  REQUIRE(earlier != KernelRuntime::kSuccess);
  devmem::launch({1, 64, 0, s}, fill_iota, out, 7);  // not reported as this launch's failure
  CHECK(out.to_vector<int>(s)[63] == 70);
#if !defined(__HIPCC__)
  // Still there for the application (ROCm versions differ on whether later successful calls
  // overwrite the last error, so this is checked on CUDA and HIP-CPU only).
  CHECK(KernelRuntime::last_error() == earlier);
  CHECK(KernelRuntime::last_error() == KernelRuntime::kSuccess);
#else
  static_cast<void>(KernelRuntime::last_error());
#endif
}

TEST_CASE(
    "kernels: launches and constant memory use devmem's device, whatever the kernel's "
    "runtime has current",
    "[kernels][multi-device]") {
  using devmem::detail::KernelRuntime;
  std::vector<float> table(kLutSize);
  for (int i = 0; i < kLutSize; ++i)
    table[static_cast<std::size_t>(i)] = 3.0f * static_cast<float>(i) + 1.0f;
  const std::vector<int> keys{0, 1, 2, 15, 16, 33};
  const int original = devmem::current_device();
  const int target = devmem::device_count() - 1;  // device 1 of two; device 0 of one
  devmem::select_device(target);
  // Someone (a library, the application) makes another device current in the kernel's runtime.
  const int other = 0;  // with one device, the same one: the calls are still exercised
  REQUIRE(KernelRuntime::set_device(other) == KernelRuntime::kSuccess);
  devmem::const_array_like(conformance_lut, table);
  int current = -1;
  REQUIRE(KernelRuntime::get_device(&current) == KernelRuntime::kSuccess);
  CHECK(current == target);  // constant memory was written on devmem's device
  const DeviceArray dkeys = devmem::to_device(keys);
  const DeviceArray out = devmem::device_array<float>({6});
  REQUIRE(KernelRuntime::set_device(other) == KernelRuntime::kSuccess);
  devmem::launch({1, 32}, lookup, dkeys, out);
  REQUIRE(KernelRuntime::get_device(&current) == KernelRuntime::kSuccess);
  CHECK(current == target);
  CHECK(out.to_vector<float>() == std::vector<float>{1.0f, 4.0f, 7.0f, 46.0f, 1.0f, 4.0f});
  devmem::select_device(original);
}
#endif

#if defined(__CUDACC__)
// A real CUDA runtime (HIP-CPU has no graphs): work captured into a graph runs at each launch of
// the graph, long after an event recorded at capture time would say anything.
TEST_CASE("kernels: work captured into a CUDA graph keeps its memory for every replay",
          "[kernels][graphs]") {
  const devmem::Stream s = devmem::stream();
  auto* const native = static_cast<cudaStream_t>(s.native_handle());
  const auto context = devmem::current_context();
  std::vector<int> values(4096);
  std::iota(values.begin(), values.end(), 11);
  const DeviceArray out = devmem::device_array<int>({4096}, Order::C, s);
  const std::size_t in_flight = context->operations_in_flight();
  cudaGraph_t graph = nullptr;
  {
    const DeviceArray source =
        devmem::to_device(values);  // before the capture: no allocation in it
    REQUIRE(cudaStreamBeginCapture(native, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    out.copy_to_device(source, s);
    devmem::launch({16, 256, 0, s}, fill_iota, out, 0);  // then overwritten by a captured kernel
    out.copy_to_device(source, s);                       // and copied again
    REQUIRE(cudaStreamEndCapture(native, &graph) == cudaSuccess);
    // No completion event was recorded into the graph; the memory is held for the context.
    CHECK(context->operations_in_flight() == in_flight);
  }  // `source` is released here, but the graph still reads it at every launch
  // The application takes what the graph uses, and keeps it while the graph exists.
  devmem::GraphMemory held = s.take_graph_memory();
  CHECK(held.size() >= 2);  // `out` and `source`
  CHECK(s.take_graph_memory().size() == 0);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    out.memset(0, s);
    REQUIRE(cudaGraphLaunch(exec, native) == cudaSuccess);
    CHECK(out.to_vector<int>(s) == values);
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  // Then `source` goes back to the context (compute-sanitizer's leak check saw it held at exit).
  const std::int64_t before_release = context->device_statistics().current_count;
  held.release();
  context->flush_deallocations();
  CHECK(context->device_statistics().current_count == before_release - 1);
}
#endif

// Reads a flag the host writes while the kernel runs. On a GPU a volatile load goes to memory
// every time; where kernels are host threads (the simulator, HIP-CPU) it must be an atomic load,
// or it is a data race (ThreadSanitizer reports it).
DEVMEM_DEVICE inline int read_host_flag(const int* flag) {
#if (defined(__CUDACC__) || defined(__HIPCC__)) && !defined(__HIP_CPU_RT__)
  return *static_cast<const volatile int*>(flag);
#else
  return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
#endif
}

// Spins (at most `max_spins` times) until the host sets flag[0], then fills `out`: a kernel still
// running after launch returns, on every backend (the flag is mapped host memory).
DEVMEM_KERNEL void fill_after_flag(ArrayView<int, 1> flag, ArrayView<int, 1> out, int value,
                                   long long max_spins) {
  for (long long spins = 0; read_host_flag(flag.data()) == 0 && spins < max_spins; ++spins) {
  }
  for (std::int64_t i = 0; i < out.shape(0); ++i) out[i] = value;
}

TEST_CASE("kernels: an ArrayView argument keeps its array's memory alive until the kernel has run",
          "[kernels]") {
  const devmem::Stream s = devmem::stream();
  const auto context = devmem::current_context();
  const devmem::MappedArray flag = devmem::mapped_array<int>({1}, Order::C, s);
  std::atomic_ref<int>(*static_cast<int*>(flag.data())).store(0);
  const devmem::MemoryStatistics before = context->device_statistics();
  // The array is a temporary: its last handle is gone when launch returns, while the kernel may
  // not even have started.
  devmem::launch({1, 1, 0, s}, fill_after_flag, flag.device().view<int, 1>(),
                 devmem::device_array<int>({1024}, Order::C, s).view<int, 1>(), 7, 1LL << 26);
  const devmem::MemoryStatistics during = context->device_statistics();
  CHECK(during.current_count == before.current_count + 1);
  CHECK(during.current_bytes == before.current_bytes + 1024 * 4);
  std::atomic_ref<int>(*static_cast<int*>(flag.data())).store(1);
  s.synchronize();
  context->synchronize();  // releases what finished work kept alive
  CHECK(context->device_statistics().current_count == before.current_count);

  // A view into the middle of a live array finds that array's memory; an address devmem never
  // allocated or viewed has no owner (such a view is the caller's to keep alive).
  const DeviceArray kept = devmem::device_array<int>({16}, Order::C, s);
  const auto middle = kept.slice(0, 4, 12).view<int, 1>();
  CHECK(devmem::detail::launch_view_owner(middle.data()) == kept.owner());
  int not_device_memory = 0;
  CHECK(devmem::detail::launch_view_owner(&not_device_memory) == nullptr);
  devmem::launch({1, 1, 0, s}, fill_after_flag, flag.device().view<int, 1>(), middle, 3, 1LL);
  // Only element 4 was written: reading the rest would copy uninitialised memory (initcheck).
  CHECK(kept.slice(0, 4, 5).to_vector<int>(s) == std::vector<int>{3});
}

namespace {

DEVMEM_KERNEL void fill_value(ArrayView<float, 1> x, float v) {
  const std::int64_t i = devmem::global_id();
  if (i < x.shape(0)) x[i] = v;
}

/// A struct argument that lists its views, so launch checks them and keeps their memory alive.
struct FillParams {
  ArrayView<float, 1> x;
  float v = 0.0f;
  auto devmem_views() const { return std::tie(x); }
};

DEVMEM_KERNEL void fill_from_params(FillParams p) {
  const std::int64_t i = devmem::global_id();
  if (i < p.x.shape(0)) p.x[i] = p.v;
}

}  // namespace

// Issue 34, d3: a view of a freed array used to pass launch's check once a new array had been
// given the same memory, and the kernel wrote into the new array.
TEST_CASE("kernels: a view of a freed array is refused, also when its memory is another array's",
          "[kernels]") {
  const MemoryStateGuard memory_guard;
  const std::string manager = GENERATE(std::string("direct"), std::string("pool"));
  CAPTURE(manager);
  devmem::set_memory_manager(devmem::make_memory_manager(manager));
  ArrayView<float, 1> stale;
  {
    const DeviceArray a = devmem::device_array<float>({256});
    stale = a.view<float, 1>();
    devmem::launch({1, 256}, fill_value, stale, 1.0f);  // valid while `a` lives
    devmem::synchronize();
  }
  devmem::current_context()->flush_deallocations();
  // Allocate until an array has the freed memory (the pool hands the block out again; the direct
  // manager may or may not).
  std::vector<DeviceArray> keep;
  while (keep.size() < 64 && (keep.empty() || keep.back().data() != stale.data())) {
    keep.push_back(devmem::device_array<float>({256}));
  }
  const bool reused = keep.back().data() == stale.data();
  if (manager == "pool") REQUIRE(reused);
  const DeviceArray& b = keep.back();
  b.fill(0.0f);
  try {
    devmem::launch<fill_value>({1, 256}, stale, 7.0f);
    FAIL("launch accepted a view of a freed array");
  } catch (const devmem::InvalidArgument& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Matchers::StartsWith(
                         "devmem::launch(fill_value): argument 0 (an ArrayView of shape (256,) "
                         "at 0x"));
    CHECK_THAT(what, Catch::Matchers::Contains(
                         ") was made from an array whose memory has been freed (allocation "));
    if (reused) {
      CHECK_THAT(
          what, Catch::Matchers::Contains("that memory now belongs to another array (allocation "));
    }
  }
  devmem::synchronize();
  CHECK(b.item<float>(0) == 0.0f);  // the kernel never ran
  // A fresh view of the new array is accepted.
  devmem::launch({1, 256}, fill_value, b.view<float, 1>(), 2.0f);
  CHECK(b.item<float>(255) == 2.0f);
}

// Issue 34, d4: views in a struct argument are checked and kept alive when the struct lists them
// with devmem_views() (the simulator fails a launch whose kernel indexes an unlisted one).
TEST_CASE("kernels: views a struct argument lists are checked and kept alive", "[kernels]") {
  const devmem::Stream s = devmem::stream();
  const auto context = devmem::current_context();
  const devmem::MemoryStatistics before = context->device_statistics();
  {
    const DeviceArray a = devmem::device_array<float>({256}, Order::C, s);
    devmem::launch({1, 256, 0, s}, fill_from_params, FillParams{a.view<float, 1>(), 3.0f});
    CHECK(a.to_vector<float>(s) == std::vector<float>(256, 3.0f));
  }
  // Kept alive: the struct's view is the only reference to a temporary array.
  devmem::launch(
      {1, 256, 0, s}, fill_from_params,
      FillParams{devmem::device_array<float>({256}, Order::C, s).view<float, 1>(), 1.0f});
  s.synchronize();
  context->synchronize();
  context->flush_deallocations();
  CHECK(context->device_statistics().current_count == before.current_count);
  // Refused once its array is gone, as a view argument is.
  FillParams stale{};
  {
    const DeviceArray a = devmem::device_array<float>({256});
    stale = FillParams{a.view<float, 1>(), 3.0f};
  }
  context->flush_deallocations();
  CHECK_THROWS_MATCHES(devmem::launch<fill_from_params>({1, 256}, stale), devmem::InvalidArgument,
                       MessageStartsWith("devmem::launch(fill_from_params): argument 0 (an "
                                         "ArrayView of shape (256,) at 0x"));
}

// Tests of the host backend through the Backend interface (devmem::active_backend()) and the
// devmem::host:: controls, plus the backend registry and the default Backend::copy_strided.
//
// The host backend is process-wide state, so every test frees what it allocates and resets the
// controls it changes (ControlsGuard). Behaviour that depends on environment variables read once
// per process (DEVMEM_BACKEND, DEVMEM_HOST_DEVICE_MEMORY, DEVMEM_HOST_DEVICE_COUNT) is tested in a
// fresh process: the test binary runs one of its hidden "[.]" test cases with that environment.
#include <devmem/backend.hpp>
#include <devmem/config.hpp>
#include <devmem/error.hpp>
#include <devmem/host_backend.hpp>  // the old name of host_controls.hpp still compiles
#include <devmem/host_controls.hpp>
#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host_backend_test_support.hpp"

extern char** environ;

using namespace host_backend_test;

namespace {

std::string compiled_list() {
  std::string list;
  for (const auto& name : devmem::compiled_backends()) list += (list.empty() ? "" : ", ") + name;
  return list;
}

/// Runs the hidden test case `name` of this binary in a new process whose environment has no
/// DEVMEM_ variable except `env` ("NAME=value" entries). Returns its exit status (0: passed).
int run_in_child(const std::string& name, const std::vector<std::string>& env) {
  std::vector<std::string> entries;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!std::string_view(*entry).starts_with("DEVMEM_")) entries.emplace_back(*entry);
  }
  // These are host-backend tests: in a GPU build the default backend would be the GPU one.
  const bool backend_given = std::any_of(env.begin(), env.end(), [](const std::string& e) {
    return std::string_view(e).starts_with("DEVMEM_BACKEND=");
  });
  if (!backend_given) entries.emplace_back("DEVMEM_BACKEND=host");
  entries.insert(entries.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& entry : entries) envp.push_back(entry.data());
  envp.push_back(nullptr);

  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string test = name;
  std::string warn = "--warn";
  std::string no_tests = "NoTests";  // a misspelt name then fails instead of passing
  std::vector<char*> argv{exe.data(), test.data(), warn.data(), no_tests.data(), nullptr};
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) == 0);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

// ---- Registry -----------------------------------------------------------------------------------

TEST_CASE("host backend: registry names and selection", "[host_backend][registry]") {
  std::vector<std::string> expected;
  if (DEVMEM_HAS_CUDA) expected.emplace_back("cuda");
  if (DEVMEM_HAS_ROC) expected.emplace_back("roc");
  expected.emplace_back("host");
  CHECK(devmem::compiled_backends() == expected);

  Backend& b = backend();
  CHECK(b.name() == "host");
  CHECK(devmem::backend_name() == "host");
  CHECK(&devmem::active_backend() == &b);
  CHECK_NOTHROW(devmem::select_backend("host"));  // the backend in use: a no-op

  const auto error = capture<devmem::InvalidArgument>([] { devmem::select_backend("xyz"); });
  CHECK(std::string(error.what()) ==
        "select_backend: backend 'xyz' is not compiled in (compiled: " + compiled_list() + ")");
  if (!DEVMEM_HAS_CUDA) {
    CHECK_THROWS_WITH(devmem::select_backend("cuda"),
                      Contains("backend 'cuda' is not compiled in"));
  }

  // Every thread sees the one instance.
  std::vector<Backend*> seen(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&seen, i] { seen[i] = &devmem::active_backend(); });
  }
  for (auto& t : threads) t.join();
  CHECK(std::all_of(seen.begin(), seen.end(), [&](Backend* p) { return p == &b; }));

  CHECK(std::string(devmem::to_string(CopyKind::HostToDevice)) == "HostToDevice");
  CHECK(std::string(devmem::to_string(CopyKind::DeviceToHost)) == "DeviceToHost");
  CHECK(std::string(devmem::to_string(CopyKind::DeviceToDevice)) == "DeviceToDevice");
  CHECK(std::string(devmem::to_string(CopyKind::HostToHost)) == "HostToHost");
  CHECK(host::to_string(Call::HostRegister) == "HostRegister");
  CHECK(host::to_string(Status::HostMemoryNotRegistered) == "HostMemoryNotRegistered");
}

TEST_CASE("host backend: environment is validated in a fresh process", "[host_backend][env]") {
  CHECK(run_in_child("child: DEVMEM_BACKEND not compiled in", {"DEVMEM_BACKEND=xyz"}) == 0);
  CHECK(run_in_child("child: two devices of 512M",
                     {"DEVMEM_HOST_DEVICE_MEMORY=512M", "DEVMEM_HOST_DEVICE_COUNT=2"}) == 0);
  CHECK(run_in_child("child: invalid DEVMEM_HOST_DEVICE_MEMORY",
                     {"DEVMEM_HOST_DEVICE_MEMORY=12X"}) == 0);
  CHECK(run_in_child("child: invalid DEVMEM_HOST_DEVICE_COUNT", {"DEVMEM_HOST_DEVICE_COUNT=two"}) ==
        0);
  CHECK(run_in_child("child: no device", {"DEVMEM_HOST_DEVICE_COUNT=0"}) == 0);
}

TEST_CASE("child: DEVMEM_BACKEND not compiled in", "[.][child]") {
  const std::string expected =
      "DEVMEM_BACKEND: backend 'xyz' is not compiled in (compiled: " + compiled_list() + ")";
  CHECK_THROWS_AS(devmem::backend_name(), devmem::InvalidArgument);
  CHECK_THROWS_WITH(devmem::backend_name(), expected);
  CHECK_THROWS_WITH(devmem::active_backend(), expected);
  devmem::select_backend("host");  // an explicit choice wins over the environment
  CHECK(devmem::backend_name() == "host");
  CHECK(devmem::active_backend().name() == "host");
}

TEST_CASE("child: two devices of 512M", "[.][child]") {
  Backend& b = backend();
  constexpr std::int64_t k512M = std::int64_t{512} << 20;
  REQUIRE(b.device_count() == 2);
  CHECK(b.no_device_reason().empty());
  CHECK(host::device_memory_capacity() == k512M);
  CHECK(b.properties(1).total_memory == k512M);
  CHECK(b.memory_info(1).total == k512M);
  check_backend_error(capture<BackendError>([&] { std::ignore = b.properties(2); }), "properties",
                      Status::InvalidDevice);

  // Each device has its own memory, and a copy may use memory of any device.
  DeviceBuffer on0(b, 1000, 0);
  DeviceBuffer on1(b, 3000, 1);
  CHECK(host::device_memory_used(0) == 1000);
  CHECK(host::device_memory_used(1) == 3000);
  CHECK(b.memory_info(1).free == k512M - 3000);
  CHECK_THROWS_WITH(b.allocate(1, 600u << 20), Contains("on device 1 (free "));
  std::memset(on1.get(), 7, 1000);
  b.copy(0, on0.get(), on1.get(), 1000, CopyKind::DeviceToDevice, nullptr);
  CHECK(on0.get()[999] == std::byte{7});

  // Memory, streams and events belong to their device.
  const auto wrong_device = capture<BackendError>([&] { b.deallocate(0, on1.get()); });
  check_backend_error(wrong_device, "deallocate", Status::InvalidValue);
  CHECK_THAT(wrong_device.what(), EndsWith("is an allocation of device 1, not of device 0"));
  StreamHandle stream1(b, 1);
  const auto foreign = capture<BackendError>(
      [&] { b.copy(0, on0.get(), on1.get(), 8, CopyKind::DeviceToDevice, stream1.get()); });
  check_backend_error(foreign, "copy", Status::InvalidResourceHandle);
  CHECK_THAT(foreign.what(), Contains("belongs to device 1, not device 0"));
  b.copy(1, on0.get(), on1.get(), 8, CopyKind::DeviceToDevice, stream1.get());
  b.synchronize_stream(1, stream1.get());
}

TEST_CASE("child: invalid DEVMEM_HOST_DEVICE_MEMORY", "[.][child]") {
  Backend& b = backend();
  const std::string expected =
      "DEVMEM_HOST_DEVICE_MEMORY: '12X' has an unknown suffix 'X' (use K, M, G or T)";
  CHECK_THROWS_AS(b.allocate(0, 16), devmem::InvalidArgument);
  CHECK_THROWS_WITH(b.allocate(0, 16), expected);
  CHECK_THROWS_WITH(b.memory_info(0), expected);
  CHECK_THROWS_WITH(b.properties(0), expected);
  host::set_device_memory_capacity(1 << 20);  // an explicit capacity replaces the variable
  void* ptr = b.allocate(0, 16);
  CHECK(ptr != nullptr);
  b.deallocate(0, ptr);
}

TEST_CASE("child: invalid DEVMEM_HOST_DEVICE_COUNT", "[.][child]") {
  CHECK_THROWS_AS(devmem::active_backend(), devmem::InvalidArgument);
  CHECK_THROWS_WITH(devmem::active_backend(),
                    "DEVMEM_HOST_DEVICE_COUNT: invalid value 'two' (expected an integer from 0 to "
                    "64)");
}

TEST_CASE("child: no device", "[.][child]") {
  Backend& b = backend();
  CHECK(b.device_count() == 0);
  CHECK_THAT(b.no_device_reason(), Contains("DEVMEM_HOST_DEVICE_COUNT is 0"));
  CHECK_THROWS_AS(b.allocate(0, 16), devmem::NoDevice);
  CHECK_THROWS_AS(b.create_stream(0), devmem::NoDevice);
}

// ---- Devices and device memory ------------------------------------------------------------------

TEST_CASE("host backend: device properties and memory info", "[host_backend]") {
  Backend& b = backend();
  REQUIRE(b.device_count() >= 1);
  CHECK(b.no_device_reason().empty());
  const devmem::DeviceProperties props = b.properties(0);
  CHECK(props.name == "devmem host simulator");
  CHECK(props.architecture == "host");
  CHECK(props.total_memory == host::device_memory_capacity());
  CHECK(props.warp_size == 32);
  CHECK(props.max_threads_per_block == 1024);
  CHECK(props.max_shared_memory_per_block == 48 * 1024);
  CHECK(props.max_shared_memory_per_block_optin == 227 * 1024);  // an H100's
  CHECK(props.multiprocessor_count >= 1);
  CHECK(props.can_map_host_memory);
  CHECK(props.unified_addressing);

  const devmem::MemoryInfo info = b.memory_info(0);
  CHECK(info.total == host::device_memory_capacity());
  CHECK(info.free == info.total - host::device_memory_used(0));

  const int bad = b.device_count();
  const auto error = capture<BackendError>([&] { std::ignore = b.properties(bad); });
  check_backend_error(error, "properties", Status::InvalidDevice);
  CHECK(std::string(error.what()) == "host properties: InvalidDevice (101): device " +
                                         std::to_string(bad) + " does not exist (device count " +
                                         std::to_string(bad) + ")");
  check_backend_error(capture<BackendError>([&] { std::ignore = b.allocate(-1, 8); }), "allocate",
                      Status::InvalidDevice);
  CHECK_THROWS_AS(host::device_memory_used(bad), BackendError);
}

TEST_CASE("host backend: allocate and free device memory", "[host_backend]") {
  Backend& b = backend();
  const ControlsGuard guard;
  const std::int64_t before = host::device_memory_used(0);

  void* ptr = b.allocate(0, 1000);
  REQUIRE(ptr != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(ptr) % 256 == 0);
  CHECK(host::device_memory_used(0) == before + 1000);
  CHECK(b.memory_info(0).free == host::device_memory_capacity() - before - 1000);
  std::memset(ptr, 0x5a, 1000);  // the simulated device memory is ordinary memory

  void* other = b.allocate(0, 1000);
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  const auto c = reinterpret_cast<std::uintptr_t>(other);
  CHECK((a + 1000 <= c || c + 1000 <= a));  // separate allocations
  b.deallocate(0, other);
  b.deallocate(0, ptr);
  CHECK(host::device_memory_used(0) == before);

  CHECK(b.allocate(0, 0) == nullptr);  // like cudaMalloc(0)
  CHECK_NOTHROW(b.deallocate(0, nullptr));
  CHECK(host::call_count(Call::Allocate) == 3);
  CHECK(host::call_count(Call::Deallocate) == 3);
  CHECK(host::device_memory_used(0) == before);
}

TEST_CASE("host backend: capacity and out-of-memory messages", "[host_backend]") {
  Backend& b = backend();
  const ControlsGuard guard;
  REQUIRE(host::device_memory_used(0) == 0);

  host::set_device_memory_capacity(1 << 20);
  CHECK(host::device_memory_capacity() == 1 << 20);
  CHECK(b.properties(0).total_memory == 1 << 20);
  DeviceBuffer half(b, 512 << 10);
  const auto oom = capture<devmem::OutOfMemory>([&] { std::ignore = b.allocate(0, 1536 << 10); });
  CHECK(std::string(oom.what()) ==
        "host allocate: out of memory allocating 1.5 MiB (1572864 bytes) on device 0 (free 512 KiB "
        "of 1 MiB)");
  CHECK(oom.requested_bytes() == 1536 << 10);
  CHECK(host::device_memory_used(0) == 512 << 10);  // the failed allocation took nothing

  {
    DeviceBuffer rest(b, 512 << 10);  // an exact fit succeeds
    CHECK(b.memory_info(0).free == 0);
    CHECK_THROWS_WITH(b.allocate(0, 1), EndsWith("(free 0 B of 1 MiB)"));
  }

  // Shrinking below what is in use: free is clamped at 0 and allocations fail until memory is
  // freed.
  host::set_device_memory_capacity(256 << 10);
  CHECK(b.memory_info(0).free == 0);
  CHECK(b.memory_info(0).total == 256 << 10);
  CHECK_THROWS_AS(b.allocate(0, 1), devmem::OutOfMemory);
  half.release();
  DeviceBuffer fits(b, 256 << 10);
  fits.release();

  host::set_device_memory_capacity(std::int64_t{1} << 30);
  CHECK_THROWS_WITH(b.allocate(0, std::size_t{3} << 29),
                    "host allocate: out of memory allocating 1.5 GiB (1610612736 bytes) on device "
                    "0 (free 1 GiB of 1 GiB)");
  CHECK_THROWS_AS(b.allocate(0, SIZE_MAX), devmem::OutOfMemory);
  CHECK_THROWS_WITH(host::set_device_memory_capacity(-1),
                    "set_device_memory_capacity: capacity must be >= 0, got -1");
  CHECK(host::device_memory_used(0) == 0);
}

TEST_CASE("host backend: freeing what is not an allocation", "[host_backend]") {
  Backend& b = backend();
  int on_stack = 0;

  const auto unknown = capture<BackendError>([&] { b.deallocate(0, &on_stack); });
  check_backend_error(unknown, "deallocate", Status::InvalidValue);
  CHECK(std::string(unknown.what()) ==
        "host deallocate: InvalidValue (1): " + hex(&on_stack) + " is not a device allocation");

  void* ptr = b.allocate(0, 4096);
  const auto interior = capture<BackendError>([&] { b.deallocate(0, bytes_of(ptr) + 16); });
  CHECK_THAT(interior.what(), EndsWith("is not the start of a device allocation (it lies 16 bytes "
                                       "into the 4096-byte allocation at " +
                                       hex(ptr) + ")"));
  b.deallocate(0, ptr);
  const auto twice = capture<BackendError>([&] { b.deallocate(0, ptr); });
  CHECK_THAT(twice.what(), EndsWith(hex(ptr) + " is not a device allocation"));

  const auto host_unknown = capture<BackendError>([&] { b.host_deallocate(0, &on_stack); });
  check_backend_error(host_unknown, "host_deallocate", Status::InvalidValue);
  CHECK_THAT(host_unknown.what(),
             EndsWith(hex(&on_stack) + " is not a page-locked host allocation"));
  CHECK_NOTHROW(b.host_deallocate(0, nullptr));
}

// ---- Host memory --------------------------------------------------------------------------------

TEST_CASE("host backend: page-locked allocations and mapped pointers", "[host_backend]") {
  Backend& b = backend();
  void* mapped = b.host_allocate(0, 10000, HostAllocFlags::Mapped | HostAllocFlags::Portable);
  void* pinned = b.host_allocate(0, 100, HostAllocFlags::WriteCombined);
  REQUIRE(mapped != nullptr);
  REQUIRE(pinned != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(mapped) % 4096 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(pinned) % 4096 == 0);
  std::memset(mapped, 1, 10000);
  CHECK(host::device_memory_used(0) == 0);  // pinned memory is not device memory

  // Unified addressing: the device address of mapped memory is its host address.
  CHECK(b.mapped_device_pointer(0, mapped) == mapped);
  CHECK(b.mapped_device_pointer(0, bytes_of(mapped) + 9999) == bytes_of(mapped) + 9999);
  const auto unmapped =
      capture<BackendError>([&] { std::ignore = b.mapped_device_pointer(0, pinned); });
  check_backend_error(unmapped, "mapped_device_pointer", Status::InvalidValue);
  CHECK_THAT(unmapped.what(), Contains("allocated without HostAllocFlags::Mapped"));
  int on_stack = 0;
  CHECK_THAT(
      capture<BackendError>([&] { std::ignore = b.mapped_device_pointer(0, &on_stack); }).what(),
      Contains("is not in mapped host memory"));

  const auto interior = capture<BackendError>([&] { b.host_deallocate(0, bytes_of(mapped) + 8); });
  CHECK_THAT(interior.what(), Contains("is not the start of a page-locked host allocation"));
  CHECK(b.host_allocate(0, 0, HostAllocFlags::None) == nullptr);
  b.host_deallocate(0, pinned);
  b.host_deallocate(0, mapped);
  CHECK_THROWS_AS(b.host_deallocate(0, mapped), BackendError);
}

TEST_CASE("host backend: host registration follows CUDA's rules", "[host_backend]") {
  Backend& b = backend();
  std::vector<std::byte> buffer(4 * 4096);
  std::byte* const base = buffer.data();

  b.host_register(0, base, 8192, HostRegisterFlags::Mapped | HostRegisterFlags::Portable);
  CHECK(b.mapped_device_pointer(0, base + 100) == base + 100);
  CHECK_THROWS_AS(b.mapped_device_pointer(0, base + 8192), BackendError);  // past the range

  const auto overlap = capture<BackendError>([&] { b.host_register(0, base + 4096, 8192, {}); });
  check_backend_error(overlap, "host_register", Status::HostMemoryAlreadyRegistered);
  CHECK(std::string(overlap.what()) ==
        "host host_register: HostMemoryAlreadyRegistered (712): " + hex(base + 4096) +
            " (8192 bytes) overlaps a registered range (" + hex(base) + ", 8192 bytes)");
  CHECK_THROWS_AS(b.host_register(0, base, 8192, {}), BackendError);  // the same range again

  // An adjacent range does not overlap.
  b.host_register(0, base + 8192, 4096, HostRegisterFlags::None);
  const auto not_mapped =
      capture<BackendError>([&] { std::ignore = b.mapped_device_pointer(0, base + 8192); });
  CHECK_THAT(not_mapped.what(), Contains("registered without HostRegisterFlags::Mapped"));
  b.host_unregister(0, base + 8192);

  check_backend_error(capture<BackendError>([&] { b.host_register(0, nullptr, 64, {}); }),
                      "host_register", Status::InvalidValue);
  check_backend_error(capture<BackendError>([&] { b.host_register(0, base, 0, {}); }),
                      "host_register", Status::InvalidValue);

  // Registering page-locked memory is an overlap too.
  void* pinned = b.host_allocate(0, 4096, HostAllocFlags::None);
  const auto pinned_overlap = capture<BackendError>([&] { b.host_register(0, pinned, 64, {}); });
  check_backend_error(pinned_overlap, "host_register", Status::HostMemoryAlreadyRegistered);
  CHECK_THAT(pinned_overlap.what(), Contains("overlaps a page-locked host allocation"));
  b.host_deallocate(0, pinned);

  const auto interior = capture<BackendError>([&] { b.host_unregister(0, base + 100); });
  check_backend_error(interior, "host_unregister", Status::HostMemoryNotRegistered);
  CHECK_THAT(interior.what(),
             EndsWith("(it lies 100 bytes into the range registered at " + hex(base) + ")"));
  b.host_unregister(0, base);
  const auto unknown = capture<BackendError>([&] { b.host_unregister(0, base); });
  check_backend_error(unknown, "host_unregister", Status::HostMemoryNotRegistered);
  CHECK(std::string(unknown.what()) == "host host_unregister: HostMemoryNotRegistered (713): " +
                                           hex(base) + " is not a registered range");
  CHECK_THROWS_AS(b.mapped_device_pointer(0, base), BackendError);

  // Unregistered memory can be registered again right away.
  b.host_register(0, base, 4 * 4096, HostRegisterFlags::Mapped);
  b.host_unregister(0, base);
}

// ---- Address checking ---------------------------------------------------------------------------

TEST_CASE("host backend: device-side ranges are checked", "[host_backend]") {
  Backend& b = backend();
  std::vector<std::byte> host_data(4096);
  const auto illegal = [&](auto&& call, const char* function, const std::string& what) {
    const auto error = capture<BackendError>(call);
    check_backend_error(error, function, Status::IllegalAddress);
    CHECK_THAT(error.what(), EndsWith(what + " is not inside a live device allocation or mapped "
                                             "host memory"));
  };

  DeviceBuffer dev(b, 1024);
  std::byte* const d = dev.get();
  CHECK_NOTHROW(b.copy(0, d, host_data.data(), 1024, CopyKind::HostToDevice, nullptr));
  illegal([&] { b.copy(0, d, host_data.data(), 1025, CopyKind::HostToDevice, nullptr); }, "copy",
          "destination " + hex(d) + " (1025 bytes)");
  illegal([&] { b.copy(0, d + 512, host_data.data(), 1024, CopyKind::HostToDevice, nullptr); },
          "copy", "destination " + hex(d + 512) + " (1024 bytes)");
  illegal([&] { b.copy(0, host_data.data(), d + 1000, 100, CopyKind::DeviceToHost, nullptr); },
          "copy", "source " + hex(d + 1000) + " (100 bytes)");
  illegal([&] { b.copy(0, d, host_data.data(), 8, CopyKind::DeviceToDevice, nullptr); }, "copy",
          "source " + hex(host_data.data()) + " (8 bytes)");
  illegal([&] { b.memset(0, d, 0, 2000, nullptr); }, "memset",
          "destination " + hex(d) + " (2000 bytes)");
  illegal([&] { b.copy(0, nullptr, host_data.data(), 4, CopyKind::HostToDevice, nullptr); }, "copy",
          "destination " + hex(nullptr) + " (4 bytes)");
  // Host sides are not checked (pageable memory is unknown to a driver too), zero bytes touch
  // nothing, and a null host pointer is an invalid value.
  CHECK_NOTHROW(
      b.copy(0, host_data.data(), host_data.data() + 2048, 64, CopyKind::HostToHost, nullptr));
  CHECK_NOTHROW(b.copy(0, nullptr, nullptr, 0, CopyKind::HostToDevice, nullptr));
  check_backend_error(
      capture<BackendError>([&] { b.copy(0, d, nullptr, 4, CopyKind::HostToDevice, nullptr); }),
      "copy", Status::InvalidValue);

  // 2-D copies: the device side spans (height - 1) * pitch + width bytes.
  CHECK_NOTHROW(b.copy_2d(0, d, 256, host_data.data(), 100, 100, 4, CopyKind::HostToDevice,
                          nullptr));  // 868 bytes
  illegal(
      [&] { b.copy_2d(0, d, 256, host_data.data(), 100, 100, 5, CopyKind::HostToDevice, nullptr); },
      "copy_2d", "destination " + hex(d) + " (1124 bytes)");
  check_backend_error(capture<BackendError>([&] {
                        b.copy_2d(0, d, 50, host_data.data(), 100, 100, 2, CopyKind::HostToDevice,
                                  nullptr);
                      }),
                      "copy_2d", Status::InvalidValue);

  // Strided copies: the whole extent of the plan, including negative strides.
  devmem::layout::CopyPlan plan;
  plan.width = 16;
  plan.height = 1;
  plan.outer_shape = {4};
  plan.outer_src_strides = {16};
  plan.outer_dst_strides = {-256};
  plan.dst_offset = 768;  // blocks at 768, 512, 256, 0
  CHECK_NOTHROW(b.copy_strided(0, d, host_data.data(), plan, CopyKind::HostToDevice, nullptr));
  plan.dst_offset = 512;  // the last block would be at d - 256
  illegal([&] { b.copy_strided(0, d, host_data.data(), plan, CopyKind::HostToDevice, nullptr); },
          "copy_strided", "destination " + hex(d - 256) + " (784 bytes)");

  // Mapped host memory is device-accessible, other page-locked memory is not.
  void* mapped = b.host_allocate(0, 256, HostAllocFlags::Mapped);
  void* pinned = b.host_allocate(0, 256, HostAllocFlags::None);
  CHECK_NOTHROW(b.copy(0, mapped, d, 256, CopyKind::DeviceToDevice, nullptr));
  illegal([&] { b.copy(0, pinned, d, 256, CopyKind::DeviceToDevice, nullptr); }, "copy",
          "destination " + hex(pinned) + " (256 bytes)");
  b.host_deallocate(0, pinned);
  b.host_deallocate(0, mapped);

  // Checked when enqueued: nothing reaches the stream.
  {
    StreamHandle stream(b);
    illegal([&] { b.memset(0, d + 1, 0, 1024, stream.get()); }, "memset",
            "destination " + hex(d + 1) + " (1024 bytes)");
    CHECK_NOTHROW(b.synchronize_stream(0, stream.get()));
  }

  // Use after free.
  dev.release();
  illegal([&] { b.copy(0, d, host_data.data(), 1, CopyKind::HostToDevice, nullptr); }, "copy",
          "destination " + hex(d) + " (1 bytes)");
}

// ---- Data movement ------------------------------------------------------------------------------

TEST_CASE("host backend: copies and memset move exactly the addressed bytes", "[host_backend]") {
  Backend& b = backend();
  for (const bool async : {false, true}) {
    CAPTURE(async);
    StreamHandle owned(b);
    const NativeStream stream = async ? owned.get() : nullptr;

    std::vector<std::uint8_t> input(256);
    for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<std::uint8_t>(i);
    std::vector<std::uint8_t> output(256, 0);
    DeviceBuffer first(b, 256);
    DeviceBuffer second(b, 256);
    b.copy(0, first.get(), input.data(), 256, CopyKind::HostToDevice, stream);
    b.copy(0, second.get(), first.get(), 256, CopyKind::DeviceToDevice, stream);
    b.copy(0, output.data(), second.get(), 256, CopyKind::DeviceToHost, stream);
    b.synchronize_stream(0, stream);
    CHECK(output == input);

    b.memset(0, first.get(), 0xab, 100, stream);
    b.copy(0, output.data(), first.get(), 256, CopyKind::DeviceToHost, stream);
    b.synchronize_stream(0, stream);
    CHECK(std::all_of(output.begin(), output.begin() + 100, [](auto v) { return v == 0xab; }));
    CHECK(output[100] == 100);  // past the memset

    // 2-D: 3 rows of 6 bytes from pitch 10 to pitch 8; bytes between rows stay untouched.
    b.memset(0, second.get(), 0xee, 256, stream);
    b.copy_2d(0, second.get(), 8, input.data(), 10, 6, 3, CopyKind::HostToDevice, stream);
    b.copy(0, output.data(), second.get(), 256, CopyKind::DeviceToHost, stream);
    b.synchronize_stream(0, stream);
    for (std::size_t row = 0; row < 3; ++row) {
      for (std::size_t col = 0; col < 8; ++col) {
        const std::uint8_t expected = col < 6 ? input[row * 10 + col] : std::uint8_t{0xee};
        CHECK(output[row * 8 + col] == expected);
      }
    }
    CHECK(output[24] == 0xee);

    // A whole strided plan as one operation: 2 blocks of 3 rows of 4 bytes, source pitch 8 and
    // block stride 32, packed densely on the device.
    devmem::layout::CopyPlan plan;
    plan.width = 4;
    plan.height = 3;
    plan.src_pitch = 8;
    plan.dst_pitch = 4;
    plan.outer_shape = {2};
    plan.outer_src_strides = {32};
    plan.outer_dst_strides = {12};
    host::reset_call_counts();
    b.memset(0, first.get(), 0, 256, stream);
    b.copy_strided(0, first.get(), input.data(), plan, CopyKind::HostToDevice, stream);
    CHECK(host::call_count(Call::Copy) == 1);  // one operation for the whole plan
    b.copy(0, output.data(), first.get(), 256, CopyKind::DeviceToHost, stream);
    b.synchronize_stream(0, stream);
    for (std::size_t block = 0; block < 2; ++block) {
      for (std::size_t row = 0; row < 3; ++row) {
        for (std::size_t col = 0; col < 4; ++col) {
          CHECK(output[block * 12 + row * 4 + col] == input[block * 32 + row * 8 + col]);
        }
      }
    }
    CHECK(output[24] == 0);
  }
}

namespace {

/// A backend whose only working members are copy and copy_2d, which it records, to test the
/// default Backend::copy_strided.
class RecordingBackend final : public Backend {
 public:
  struct Call2d {
    std::ptrdiff_t dst;
    std::size_t dst_pitch;
    std::ptrdiff_t src;
    std::size_t src_pitch;
    std::size_t width;
    std::size_t height;
    friend bool operator==(const Call2d&, const Call2d&) = default;
  };
  std::vector<Call2d> calls;
  const std::byte* dst_base = nullptr;
  const std::byte* src_base = nullptr;

  std::string_view name() const noexcept override { return "recording"; }
  int device_count() override { return 1; }
  devmem::DeviceProperties properties(int) override { throw std::logic_error("unused"); }
  devmem::MemoryInfo memory_info(int) override { throw std::logic_error("unused"); }
  void* allocate(int, std::size_t) override { throw std::logic_error("unused"); }
  void deallocate(int, void*) override { throw std::logic_error("unused"); }
  void* host_allocate(int, std::size_t, HostAllocFlags) override {
    throw std::logic_error("unused");
  }
  void host_deallocate(int, void*) override { throw std::logic_error("unused"); }
  void host_register(int, void*, std::size_t, HostRegisterFlags) override {
    throw std::logic_error("unused");
  }
  void host_unregister(int, void*) override { throw std::logic_error("unused"); }
  void* mapped_device_pointer(int, void*) override { throw std::logic_error("unused"); }
  NativeStream create_stream(int) override { throw std::logic_error("unused"); }
  void destroy_stream(int, NativeStream) override { throw std::logic_error("unused"); }
  void synchronize_stream(int, NativeStream) override { throw std::logic_error("unused"); }
  bool query_stream(int, NativeStream) override { throw std::logic_error("unused"); }
  NativeEvent create_event(int) override { throw std::logic_error("unused"); }
  void destroy_event(int, NativeEvent) override { throw std::logic_error("unused"); }
  void record_event(int, NativeEvent, NativeStream) override { throw std::logic_error("unused"); }
  void synchronize_event(int, NativeEvent) override { throw std::logic_error("unused"); }
  bool query_event(int, NativeEvent) override { throw std::logic_error("unused"); }
  float elapsed_ms(int, NativeEvent, NativeEvent) override { throw std::logic_error("unused"); }
  void stream_wait_event(int, NativeStream, NativeEvent) override {
    throw std::logic_error("unused");
  }
  void memset(int, void*, int, std::size_t, NativeStream) override {
    throw std::logic_error("unused");
  }
  void launch_host_function(int, NativeStream, std::function<void()>) override {
    throw std::logic_error("unused");
  }

  void copy(int, void* dst, const void* src, std::size_t bytes, CopyKind, NativeStream) override {
    calls.push_back({static_cast<const std::byte*>(dst) - dst_base, 0,
                     static_cast<const std::byte*>(src) - src_base, 0, bytes, 1});
  }
  void copy_2d(int, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t height, CopyKind, NativeStream) override {
    calls.push_back({static_cast<const std::byte*>(dst) - dst_base, dst_pitch,
                     static_cast<const std::byte*>(src) - src_base, src_pitch, width, height});
  }
};

}  // namespace

TEST_CASE("backend: default copy_strided issues one copy per block", "[host_backend][registry]") {
  std::vector<std::byte> src(1024);
  std::vector<std::byte> dst(1024);
  RecordingBackend recorder;
  recorder.src_base = src.data();
  recorder.dst_base = dst.data();

  devmem::layout::CopyPlan plan;
  plan.width = 8;
  plan.height = 2;
  plan.src_pitch = 16;
  plan.dst_pitch = 8;
  plan.src_offset = 4;
  plan.outer_shape = {2, 2};
  plan.outer_src_strides = {128, 32};
  plan.outer_dst_strides = {32, 16};
  recorder.copy_strided(0, dst.data(), src.data(), plan, CopyKind::HostToHost, nullptr);
  using C = RecordingBackend::Call2d;
  CHECK(recorder.calls == std::vector<C>{{0, 8, 4, 16, 8, 2},
                                         {16, 8, 36, 16, 8, 2},
                                         {32, 8, 132, 16, 8, 2},
                                         {48, 8, 164, 16, 8, 2}});

  recorder.calls.clear();
  plan.height = 1;  // rows of one block: plain copies
  recorder.copy_strided(0, dst.data(), src.data(), plan, CopyKind::HostToHost, nullptr);
  REQUIRE(recorder.calls.size() == 4);
  CHECK(recorder.calls[3] == C{48, 0, 164, 0, 8, 1});

  recorder.calls.clear();
  plan.width = 0;  // nothing to copy
  recorder.copy_strided(0, dst.data(), src.data(), plan, CopyKind::HostToHost, nullptr);
  CHECK(recorder.calls.empty());
}

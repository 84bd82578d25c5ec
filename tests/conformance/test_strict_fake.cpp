// The strict fake runtime's rules (docs/strict-fake.md), one test each, compiled only into
// conformance_strict-fake: each shows the fake catching a bug of its kind, which HIP-CPU lets
// through. They drive the backend (RuntimeBackend over the fake) and, where a bug must be made on
// purpose, the runtime's calls themselves (strict_fake_controls.hpp). Tests that crash or poison
// the process on purpose (a host dereference of device memory, a sticky error) do it in a child.
#include "support.hpp"

#include "backends/strict_fake/strict_fake_controls.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using conformance::Order;
using conformance::Shape;
using devmem::Backend;
using devmem::BackendError;
using devmem::CopyKind;
using devmem::DeviceArray;
using devmem::HostAllocFlags;
using devmem::HostRegisterFlags;
namespace fake = devmem::strict_fake;

constexpr int kInvalidResourceHandle = 400;
constexpr int kIllegalAddress = 700;
constexpr int kCaptureUnsupported = 900;
constexpr int kCaptureInvalidated = 901;
constexpr int kCaptureIsolation = 905;
constexpr int kCaptureImplicit = 906;
constexpr unsigned char kPoison = 0xDB;

Backend& backend() {
  return devmem::active_backend();
}

/// The code of the BackendError `fn` throws; -1 when it throws nothing, -2 another exception.
int error_code(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const BackendError& e) {
    return e.code();
  } catch (...) {
    return -2;
  }
  return -1;
}

/// Runs `child` in a forked process; its exit status (or -signal when a signal ended it).
int in_child(const std::function<int()>& child) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The default action, not Catch2's handler (which reports a failure from the child).
    std::signal(SIGSEGV, SIG_DFL);
    std::signal(SIGBUS, SIG_DFL);
    _exit(child());
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1000;
}

std::vector<unsigned char> read_device(int device, const void* src, std::size_t bytes) {
  std::vector<unsigned char> out(bytes);
  backend().copy(device, out.data(), src, bytes, CopyKind::DeviceToHost, nullptr);
  backend().synchronize_stream(device, nullptr);
  return out;
}

bool all_equal(const std::vector<unsigned char>& bytes, unsigned char value) {
  return std::all_of(bytes.begin(), bytes.end(), [value](unsigned char b) { return b == value; });
}

}  // namespace

TEST_CASE("strict fake: streams, events and launches carry their device",
          "[strict-fake][multi-device]") {
  Backend& b = backend();
  REQUIRE(b.device_count() == 2);
  constexpr std::size_t kBytes = 4096;
  void* const on0 = b.allocate(0, kBytes);
  void* const on1 = b.allocate(1, kBytes);
  const devmem::NativeStream stream0 = b.create_stream(0);
  const devmem::NativeStream stream1 = b.create_stream(1);
  const devmem::NativeEvent event0 = b.create_event(0);
  const devmem::NativeEvent event1 = b.create_event(1);

  // An event recorded on a stream of another device: CUDA's invalid resource handle, also when
  // the backend made the event's device current (a backend passing the wrong stream).
  CHECK(error_code([&] { b.record_event(0, event0, stream1); }) == kInvalidResourceHandle);
  CHECK(error_code([&] { b.record_event(1, event0, stream1); }) == kInvalidResourceHandle);
  CHECK(fake::raw_set_device(0) == 0);
  CHECK(fake::raw_event_record(event0, nullptr) == 0);  // the legacy stream of device 0
  CHECK(fake::raw_set_device(1) == 0);
  CHECK(fake::raw_event_record(event0, nullptr) == kInvalidResourceHandle);  // of device 1 now
  static_cast<void>(fake::raw_get_last_error());

  // A kernel launched on a stream of a device that is not current fails; on its own device it
  // runs.
  b.memset(1, on1, 0x5A, kBytes, stream1);
  CHECK(fake::raw_set_device(0) == 0);
  CHECK(fake::raw_launch_copy(on0, on1, kBytes, stream1) == kInvalidResourceHandle);
  static_cast<void>(fake::raw_get_last_error());
  CHECK(fake::raw_set_device(1) == 0);
  CHECK(fake::raw_launch_copy(on1, on1, kBytes, stream1) == 0);

  // What CUDA allows across devices is allowed: a copy from device 1 on a stream of device 0,
  // waiting on and synchronizing an event of the other device, and synchronizing another
  // device's stream.
  b.record_event(1, event1, stream1);
  b.stream_wait_event(0, stream0, event1);
  b.copy(0, on0, on1, kBytes, CopyKind::DeviceToDevice, stream0);
  b.record_event(0, event0, stream0);
  b.synchronize_event(1, event0);
  CHECK(b.query_event(1, event0));
  b.synchronize_stream(1, stream0);
  CHECK(all_equal(read_device(0, on0, kBytes), 0x5A));

  b.destroy_event(0, event0);
  b.destroy_event(1, event1);
  b.destroy_stream(0, stream0);
  b.destroy_stream(1, stream1);
  b.deallocate(0, on0);
  b.deallocate(1, on1);
}

TEST_CASE("strict fake: deferred work runs out of order across streams unless an event orders it",
          "[strict-fake]") {
  REQUIRE(fake::deferred_execution());
  INFO("seed " << fake::seed() << " (DEVMEM_STRICT_FAKE_SEED replays it)");
  Backend& b = backend();
  constexpr std::size_t kBytes = 1024;
  void* const device = b.allocate(0, kBytes);
  auto* const source =
      static_cast<unsigned char*>(b.host_allocate(0, kBytes, HostAllocFlags::None));
  auto* const result =
      static_cast<unsigned char*>(b.host_allocate(0, kBytes, HostAllocFlags::None));
  const devmem::NativeStream producer = b.create_stream(0);
  const devmem::NativeStream consumer = b.create_stream(0);
  const devmem::NativeEvent produced = b.create_event(0);
  std::memset(source, 1, kBytes);

  // The producer writes 1s into device memory; the consumer copies it back. Without a wait the
  // consumer may run first and read the 0s from before (a real GPU may do that too); with the
  // producer's event waited for it always reads the 1s.
  // `rerecorded`: the event is recorded again on an idle third stream, which is synchronized,
  // before the consumer's copy: as in CUDA the consumer still waits for the record it waited on
  // (devmem's event pool re-records recycled events whose earlier records may be pending).
  const devmem::NativeStream other = b.create_stream(0);
  const auto round = [&](bool ordered, bool rerecorded = false) {
    b.memset(0, device, 0, kBytes, nullptr);
    b.synchronize_stream(0, nullptr);
    std::memset(result, 7, kBytes);
    b.copy(0, device, source, kBytes, CopyKind::HostToDevice, producer);
    if (ordered) {
      b.record_event(0, produced, producer);
      b.stream_wait_event(0, consumer, produced);
    }
    if (rerecorded) {
      b.record_event(0, produced, other);
      b.synchronize_stream(0, other);
    }
    b.copy(0, result, device, kBytes, CopyKind::DeviceToHost, consumer);
    b.synchronize_stream(0, consumer);
    const bool right = std::all_of(result, result + kBytes, [](unsigned char v) { return v == 1; });
    b.synchronize_stream(0, producer);
    return right;
  };
  int stale = 0;
  for (int i = 0; i < 40; ++i) stale += round(/*ordered=*/false) ? 0 : 1;
  // The count depends only on the seed (one thread): strict_fake.cmake's replay test compares it.
  std::printf("strict fake: %d of 40 unordered rounds read stale data\n", stale);
  CHECK(stale > 0);  // all 40 right by chance: probability 2^-40
  int ordered_wrong = 0;
  for (int i = 0; i < 40; ++i) ordered_wrong += round(/*ordered=*/true) ? 0 : 1;
  CHECK(ordered_wrong == 0);
  int rerecorded_wrong = 0;
  for (int i = 0; i < 40; ++i) {
    rerecorded_wrong += round(/*ordered=*/true, /*rerecorded=*/true) ? 0 : 1;
  }
  CHECK(rerecorded_wrong == 0);

  // Nothing runs before a synchronisation point: work queued on a stream is not done yet.
  b.memset(0, device, 3, kBytes, producer);
  b.copy(0, result, device, kBytes, CopyKind::DeviceToHost, producer);
  CHECK(result[0] == 1);  // still the last round's value
  b.synchronize_stream(0, producer);
  CHECK(result[0] == 3);

  b.destroy_event(0, produced);
  b.destroy_stream(0, other);
  b.destroy_stream(0, producer);
  b.destroy_stream(0, consumer);
  b.host_deallocate(0, source);
  b.host_deallocate(0, result);
  b.deallocate(0, device);
}

TEST_CASE("strict fake: freed device, pool and page-locked memory read back as 0xDB",
          "[strict-fake]") {
  Backend& b = backend();
  constexpr std::size_t kBytes = 8192;

  // Device memory: a freed block is handed out again (first fit) and shows the poison, where a
  // use after free would read the old data.
  void* const first = b.allocate(0, kBytes);
  b.memset(0, first, 0x11, kBytes, nullptr);
  b.deallocate(0, first);
  void* const again = b.allocate(0, kBytes);
  CHECK(again == first);
  CHECK(all_equal(read_device(0, again, kBytes), kPoison));
  b.deallocate(0, again);

  // Stream-ordered memory: poisoned when the stream reaches the free (the pool return).
  REQUIRE(b.supports_async_allocation(0));
  const devmem::NativeStream stream = b.create_stream(0);
  void* const pooled = b.allocate_async(0, kBytes, stream);
  b.memset(0, pooled, 0x22, kBytes, stream);
  b.deallocate_async(0, pooled, stream);
  b.synchronize_stream(0, stream);
  void* const reused = b.allocate(0, kBytes);
  CHECK(reused == pooled);
  CHECK(all_equal(read_device(0, reused, kBytes), kPoison));
  b.deallocate(0, reused);
  b.destroy_stream(0, stream);

  // Page-locked host memory: poisoned when freed (the fake keeps it mapped for a while, so a
  // late reader sees the poison rather than the old data).
  auto* const pinned =
      static_cast<unsigned char*>(b.host_allocate(0, kBytes, HostAllocFlags::None));
  std::memset(pinned, 0x33, kBytes);
  b.host_deallocate(0, pinned);
  const auto* const freed = static_cast<const volatile unsigned char*>(pinned);
  CHECK(freed[0] == kPoison);
  CHECK(freed[kBytes - 1] == kPoison);
}

TEST_CASE("strict fake: a strided copy's temporaries read back as 0xDB once returned",
          "[strict-fake]") {
  // The bounded path of a strided copy keeps its temporaries for the next copy; when one is
  // retired (the work of its last use seen done: here, at the end of a copy from pageable memory)
  // the fake poisons it, so a copy that read a kept temporary before writing it would copy 0xDB
  // instead of stale data that happens to be right.
  constexpr std::int64_t kN = 256;
  std::vector<float> values(static_cast<std::size_t>(kN * kN));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  const devmem::HostArray host = devmem::HostArray::view(values).reshape({kN, kN});
  const std::size_t returns_before = fake::last_returned_scratch().returns;
  const devmem::DeviceArray device = devmem::device_array<float>({kN, kN});
  device.copy_to_device(host.T());  // 4-byte rows: the bounded path, with a staging temporary
  const fake::ReturnedScratch returned = fake::last_returned_scratch();
  REQUIRE(returned.returns > returns_before);
  REQUIRE(returned.ptr != nullptr);
  const std::vector<unsigned char> bytes =
      returned.host ? std::vector<unsigned char>(
                          static_cast<const unsigned char*>(returned.ptr),
                          static_cast<const unsigned char*>(returned.ptr) + returned.bytes)
                    : read_device(0, returned.ptr, returned.bytes);
  CHECK(all_equal(bytes, kPoison));
  // The copy itself was right: the poison came after it.
  const std::vector<float> back = device.to_vector<float>();
  CHECK(back[1] == values[static_cast<std::size_t>(kN)]);
  CHECK(back[static_cast<std::size_t>(kN)] == values[1]);
}

namespace {

// The square the no-code tests transpose: 4-byte rows, so the strided copy takes the bounded path
// (the library's kernel) whenever it may.
constexpr std::int64_t kSquare = 64;

/// 0, 1, 2, ... as a kSquare x kSquare float32 matrix in C order.
std::vector<float> counting_square() {
  std::vector<float> values(static_cast<std::size_t>(kSquare * kSquare));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  return values;
}

/// Whether `back` (kSquare x kSquare, C order) is the transpose of `values`.
bool is_transpose(const std::vector<float>& back, const std::vector<float>& values) {
  for (std::int64_t i = 0; i < kSquare; ++i) {
    for (std::int64_t j = 0; j < kSquare; ++j) {
      if (back[static_cast<std::size_t>(i * kSquare + j)] !=
          values[static_cast<std::size_t>(j * kSquare + i)]) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

TEST_CASE(
    "strict fake: strided copies fall back to the vendor's copies where the library's "
    "kernel has no code",
    "[strict-fake]") {
  // Review 2, N6: an A100 with an sm_90-only libdevmem, an MI300 with a gfx90a-only one.
  const std::vector<float> values = counting_square();
  const devmem::DeviceArray source = devmem::to_device(values);
  const devmem::DeviceArray square = source.reshape({kSquare, kSquare});
  fake::set_missing_kernel_image(0, true);
  struct Restore {
    ~Restore() { fake::set_missing_kernel_image(0, false); }
  } const restore;
  const std::size_t launches = fake::strided_copy_launches();
  const devmem::DeviceArray transposed = devmem::device_array<float>({kSquare, kSquare});
  transposed.copy_to_device(square.T());  // 4-byte rows: the bounded path, which finds no code
  CHECK(fake::strided_copy_launches() == launches + 1);
  const devmem::HostArray host = devmem::HostArray::view(values).reshape({kSquare, kSquare});
  const devmem::DeviceArray from_host = devmem::device_array<float>({kSquare, kSquare});
  from_host.copy_to_device(host.T());  // remembered: no second attempt
  CHECK(fake::strided_copy_launches() == launches + 1);
  CHECK(is_transpose(transposed.to_vector<float>(), values));
  CHECK(is_transpose(from_host.to_vector<float>(), values));
  CHECK(devmem::current_context()->take_deallocation_errors().empty());
}

TEST_CASE(
    "strict fake: the library's kernel is never launched on a device whose architecture its "
    "build did not list",
    "[strict-fake]") {
  // Review 2, N6: on ROCm a launch without a code object for the device may abort the process
  // rather than fail, so the architecture list hipcc recorded is checked before the first launch.
  const std::vector<float> values = counting_square();
  const devmem::DeviceArray square = devmem::to_device(values).reshape({kSquare, kSquare});
  const std::string architecture = devmem::current_context()->properties().architecture;
  struct Restore {
    ~Restore() { fake::set_strided_copy_architectures(""); }
  } const restore;
  const auto transposed_copy = [&] {
    const devmem::DeviceArray out = devmem::device_array<float>({kSquare, kSquare});
    out.copy_to_device(square.T());  // 4-byte rows: the bounded path when the kernel may run
    return out.to_vector<float>();
  };

  // Built for two AMD architectures only: the vendor's copies, no launch.
  fake::set_strided_copy_architectures("gfx90a,gfx1030");
  std::size_t launches = fake::strided_copy_launches();
  CHECK(is_transpose(transposed_copy(), values));
  CHECK(fake::strided_copy_launches() == launches);

  // A list with the device's architecture (target features after ':' do not matter): launched.
  REQUIRE(architecture == "strict_fake_90");
  fake::set_strided_copy_architectures("gfx90a:xnack-,strict_fake_90:sramecc+");
  launches = fake::strided_copy_launches();
  CHECK(is_transpose(transposed_copy(), values));
  CHECK(fake::strided_copy_launches() == launches + 1);
}

TEST_CASE("strict fake: a host dereference of device memory crashes", "[strict-fake]") {
  Backend& b = backend();
  constexpr std::size_t kBytes = 256;
  auto* const device = static_cast<unsigned char*>(b.allocate(0, kBytes));
  REQUIRE(fake::is_device_address(device));
  // The device reaches it: written and read back through copies.
  b.memset(0, device, 0x44, kBytes, nullptr);
  CHECK(all_equal(read_device(0, device, kBytes), 0x44));
  // The host does not: a read in a child process ends it with SIGSEGV.
  const int read_status = in_child([device] {
    const auto* const p = static_cast<const volatile unsigned char*>(device);
    return p[0] == 0x44 ? 0 : 1;
  });
  CHECK(read_status == -SIGSEGV);
  const int write_status = in_child([device] {
    auto* const p = static_cast<volatile unsigned char*>(device);
    p[1] = 1;
    return 0;
  });
  CHECK(write_status == -SIGSEGV);
  b.deallocate(0, device);
}

TEST_CASE("strict fake: capture-illegal calls fail and invalidate the capture", "[strict-fake]") {
  Backend& b = backend();
  const devmem::NativeStream stream = b.create_stream(0);
  const devmem::NativeStream other = b.create_stream(0);
  const devmem::NativeEvent outside = b.create_event(0);
  const devmem::NativeEvent inside = b.create_event(0);
  void* const device = b.allocate(0, 1024);
  std::size_t nodes = 0;

  SECTION("a capture of stream work alone succeeds") {
    REQUIRE(fake::begin_capture(stream) == 0);
    CHECK(b.is_capturing(0, stream));
    b.memset(0, device, 1, 1024, stream);
    b.record_event(0, inside, stream);
    CHECK(fake::end_capture(stream, &nodes) == 0);
    CHECK(nodes == 2);
    CHECK_FALSE(b.is_capturing(0, stream));
  }
  SECTION("allocating") {
    REQUIRE(fake::begin_capture(stream) == 0);
    CHECK(error_code([&] { static_cast<void>(b.allocate(0, 256)); }) == kCaptureUnsupported);
    CHECK(fake::end_capture(stream, &nodes) == kCaptureInvalidated);
  }
  SECTION("synchronizing the capturing stream") {
    REQUIRE(fake::begin_capture(stream) == 0);
    b.memset(0, device, 1, 1024, stream);
    CHECK(error_code([&] { b.synchronize_stream(0, stream); }) == kCaptureUnsupported);
    // Once invalidated, work on the stream fails until the capture ends.
    CHECK(error_code([&] { b.memset(0, device, 1, 1024, stream); }) == kCaptureInvalidated);
    CHECK(fake::end_capture(stream, &nodes) == kCaptureInvalidated);
  }
  SECTION("synchronizing an event recorded in the capture") {
    REQUIRE(fake::begin_capture(stream) == 0);
    b.record_event(0, inside, stream);
    CHECK(error_code([&] { b.synchronize_event(0, inside); }) == kCaptureUnsupported);
    CHECK(fake::end_capture(stream, &nodes) == kCaptureInvalidated);
  }
  SECTION("work on the legacy default stream") {
    REQUIRE(fake::begin_capture(stream) == 0);
    CHECK(error_code([&] { b.memset(0, device, 1, 1024, nullptr); }) == kCaptureImplicit);
    CHECK(fake::end_capture(stream, &nodes) == kCaptureInvalidated);
  }
  SECTION("waiting on an event recorded outside the capture") {
    b.record_event(0, outside, other);
    REQUIRE(fake::begin_capture(stream) == 0);
    CHECK(error_code([&] { b.stream_wait_event(0, stream, outside); }) == kCaptureIsolation);
    CHECK(fake::end_capture(stream, &nodes) == kCaptureInvalidated);
  }
  // Nothing is left capturing: the next sync of the stream works.
  b.synchronize_stream(0, stream);
  b.synchronize_stream(0, other);
  b.deallocate(0, device);
  b.destroy_event(0, outside);
  b.destroy_event(0, inside);
  b.destroy_stream(0, stream);
  b.destroy_stream(0, other);
}

TEST_CASE("strict fake: after a sticky error every call fails with it", "[strict-fake]") {
  Backend& b = backend();
  void* const device = b.allocate(0, 256);
  const devmem::NativeStream stream = b.create_stream(0);
  // In a child: the error stays for the rest of the process.
  const int status = in_child([&] {
    fake::inject_sticky_error();
    int failures = 0;
    const auto expect = [&failures](int code) { failures += code == kIllegalAddress ? 0 : 1; };
    expect(error_code([&] { b.synchronize_stream(0, stream); }));
    expect(error_code([&] { static_cast<void>(b.allocate(0, 256)); }));
    expect(error_code([&] { static_cast<void>(b.create_stream(0)); }));
    expect(error_code([&] { static_cast<void>(b.create_event(1)); }));
    expect(error_code([&] { static_cast<void>(b.memory_info(0)); }));
    expect(error_code([&] { b.memset(0, device, 0, 256, stream); }));
    expect(error_code([&] { static_cast<void>(b.query_stream(0, stream)); }));
    // Clearing the last error does not clear it.
    expect(fake::raw_get_last_error());
    expect(fake::raw_get_last_error());
    void* ptr = nullptr;
    expect(fake::raw_malloc(&ptr, 256));
    return failures;
  });
  CHECK(status == 0);
  // A kernel that touches pageable host memory faults when it runs: the illegal address comes
  // from the synchronisation that ran it, and stays.
  const int fault_status = in_child([&] {
    std::vector<unsigned char> pageable(256, 1);
    int failures = 0;
    failures += fake::raw_set_device(0) == 0 ? 0 : 1;
    failures += fake::raw_launch_copy(device, pageable.data(), 256, stream) == 0 ? 0 : 1;
    failures += fake::raw_stream_synchronize(stream) == kIllegalAddress ? 0 : 1;
    failures +=
        error_code([&] { static_cast<void>(b.allocate(0, 256)); }) == kIllegalAddress ? 0 : 1;
    return failures == 0 ? 0 : 1;
  });
  CHECK(fault_status == 0);
  // The parent is unaffected.
  b.synchronize_stream(0, stream);
  b.destroy_stream(0, stream);
  b.deallocate(0, device);
}

TEST_CASE("strict fake: page-locked, mapped and registered host memory stay host-accessible",
          "[strict-fake]") {
  Backend& b = backend();
  constexpr std::size_t kBytes = 4096;
  void* const device = b.allocate(0, kBytes);
  b.memset(0, device, 0x66, kBytes, nullptr);

  // Registered ordinary memory: the device writes it, the host reads it.
  std::vector<unsigned char> registered(kBytes, 0);
  b.host_register(0, registered.data(), kBytes, HostRegisterFlags::Mapped);
  void* const registered_device = b.mapped_device_pointer(0, registered.data());
  CHECK_FALSE(fake::is_device_address(registered_device));
  b.copy(0, registered_device, device, kBytes, CopyKind::DeviceToDevice, nullptr);
  b.synchronize_stream(0, nullptr);
  CHECK(all_equal(registered, 0x66));
  registered[0] = 1;  // and writes it
  b.host_unregister(0, registered.data());

  // Mapped page-locked memory, through its host and its device address.
  auto* const mapped =
      static_cast<unsigned char*>(b.host_allocate(0, kBytes, HostAllocFlags::Mapped));
  CHECK_FALSE(fake::is_device_address(mapped));
  auto* const mapped_device = static_cast<unsigned char*>(b.mapped_device_pointer(0, mapped));
  b.copy(0, mapped_device, device, kBytes, CopyKind::DeviceToDevice, nullptr);
  b.synchronize_stream(0, nullptr);
  CHECK(mapped[0] == 0x66);
  CHECK(mapped_device[kBytes - 1] == 0x66);
  b.host_deallocate(0, mapped);
  b.deallocate(0, device);
}

// ---- Stream capture and the current device (review 2, N2, N3, N9) ----------------------------
// These were hidden known-defect tests ([.][strict-fake-known-defects]) until their findings were
// fixed; a new defect the fake reproduces gets such a hidden test again (docs/strict-fake.md).

namespace {

/// Runs `op` on `stream` while it captures: true when the op neither failed with a vendor error
/// nor invalidated the capture (a clear InvalidArgument before any vendor call is acceptable).
bool capture_survives(const devmem::Stream& stream, const std::function<void()>& op) {
  REQUIRE(fake::begin_capture(stream.native_handle()) == 0);
  bool vendor_error = false;
  try {
    op();
  } catch (const BackendError& e) {
    UNSCOPED_INFO(e.what());
    vendor_error = true;
  } catch (const devmem::InvalidArgument&) {
  }
  std::size_t nodes = 0;
  const int end = fake::end_capture(stream.native_handle(), &nodes);
  return !vendor_error && end == 0;
}

}  // namespace

TEST_CASE("strict fake: capture-unsafe operations on a capturing stream are refused first",
          "[strict-fake]") {
  // Review 2, N2: each is an InvalidArgument naming the capture before any vendor call, and the
  // capture stays valid.
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = devmem::device_array<double>(Shape{64, 64});
  std::vector<double> pageable(64 * 64);
  s.synchronize();
  CHECK(capture_survives(s, [&] { d.copy_to_host(pageable, s); }));  // pageable D2H synchronizes
  CHECK(capture_survives(s, [&] { d.copy_to_device(pageable, s); }));
  CHECK(capture_survives(s, [&] {  // one element into pageable memory: item_bytes
    std::array<std::byte, sizeof(double)> element{};
    d.item_bytes(std::array<std::int64_t, 2>{1, 2}, element, s);
  }));
  CHECK(capture_survives(s, [&] { static_cast<void>(d.transpose().copy(Order::C, s)); }));
  CHECK(capture_survives(
      s, [&] { static_cast<void>(devmem::device_array<double>(Shape{8}, Order::C, s)); }));
  // The refusal says why and what to do.
  std::string refused;
  REQUIRE(fake::begin_capture(s.native_handle()) == 0);
  try {
    static_cast<void>(devmem::device_array<double>(Shape{8}, Order::C, s));
  } catch (const devmem::InvalidArgument& e) {
    refused = e.what();
  }
  std::size_t nodes = 0;
  REQUIRE(fake::end_capture(s.native_handle(), &nodes) == 0);
  CHECK_THAT(refused, Catch::Matchers::Contains("during stream capture") &&
                          Catch::Matchers::Contains("allocate the arrays before"));
}

TEST_CASE("strict fake: memory used by captured work is held until the application takes it",
          "[strict-fake]") {
  const devmem::Stream s = devmem::stream();
  const auto context = devmem::current_context();
  const DeviceArray d = devmem::device_array<double>(Shape{64});
  std::size_t nodes = 0;
  {
    const DeviceArray source = devmem::device_array<double>(Shape{64});
    REQUIRE(fake::begin_capture(s.native_handle()) == 0);
    d.copy_to_device(source, s);
    REQUIRE(fake::end_capture(s.native_handle(), &nodes) == 0);
  }
  CHECK(nodes >= 1);
  const std::int64_t held_count = context->device_statistics().current_count;
  devmem::GraphMemory held = s.take_graph_memory();
  CHECK(held.size() == 2);
  CHECK(s.take_graph_memory().size() == 0);
  held.release();
  context->flush_deallocations();
  CHECK(context->device_statistics().current_count == held_count - 1);
}

TEST_CASE("strict fake: a scope does not end under a graph that may still use its memory",
          "[strict-fake]") {
  // Review 2, N2: unregistering host memory that a captured copy reads would fault the device at
  // the graph's next launch. close() refuses; the destructor hands the end to the graph memory.
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = devmem::device_array<double>(Shape{256});
  std::vector<double> values(256, 1.5);
  const devmem::HostArray host = devmem::HostArray::view(values);
  s.synchronize();
  devmem::GraphMemory graph;
  {
    devmem::PinnedScope scope = devmem::pinned(host);
    REQUIRE(fake::begin_capture(s.native_handle()) == 0);
    d.copy_to_device(host, s);  // page-locked now: captured
    std::size_t nodes = 0;
    REQUIRE(fake::end_capture(s.native_handle(), &nodes) == 0);
    CHECK(nodes >= 1);
    CHECK_THROWS_WITH(scope.close(), Catch::Matchers::Contains("captured into a graph") &&
                                         Catch::Matchers::Contains("take_graph_memory"));
    graph = s.take_graph_memory();
    CHECK_THROWS_AS(scope.close(), devmem::InvalidArgument);  // the application holds it now
  }  // the scope's end waits for the graph memory: the memory is still registered
  CHECK_THROWS(devmem::pinned(host));  // registering it again is refused by the runtime
  graph.release();                     // the scope ends here
  CHECK_NOTHROW(devmem::pinned(host).close());

  // A mapped scope whose view a captured copy reads: the same.
  std::vector<double> mapped_values(256, 2.5);
  const devmem::HostArray mapped_host = devmem::HostArray::view(mapped_values);
  {
    devmem::MappedScope scope = devmem::mapped({mapped_host});
    REQUIRE(fake::begin_capture(s.native_handle()) == 0);
    d.copy_to_device(scope[0], s);
    std::size_t nodes = 0;
    REQUIRE(fake::end_capture(s.native_handle(), &nodes) == 0);
    CHECK_THROWS_AS(scope.close(), devmem::InvalidArgument);
    graph = s.take_graph_memory();
  }
  CHECK_THROWS(devmem::mapped({mapped_host}));
  graph.release();
  CHECK_NOTHROW(devmem::mapped({mapped_host}).close());
  CHECK(devmem::current_context()->take_deallocation_errors().empty());
}

TEST_CASE("strict fake: default-stream work beside a capture is refused first", "[strict-fake]") {
  // Review 2, N2: work on the legacy default stream while another stream of the device captures
  // would join the capture implicitly (906) and invalidate it. Each is refused before any vendor
  // call that could, and the capture stays valid.
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = devmem::device_array<double>(Shape{64, 64});
  const DeviceArray other = devmem::device_array<double>(Shape{64, 64});
  std::vector<double> host(64 * 64);
  s.synchronize();
  CHECK(capture_survives(s, [&] { d.memset(0); }));
  CHECK(capture_survives(s, [&] { d.copy_to_device(other); }));
  CHECK(capture_survives(s, [&] { d.copy_to_host(host); }));
  CHECK(capture_survives(s, [&] { d.copy_to_device(host); }));
  CHECK(capture_survives(s, [&] { static_cast<void>(devmem::device_array<double>(Shape{8})); }));
  // The refusal says why and what to do.
  std::string refused;
  REQUIRE(fake::begin_capture(s.native_handle()) == 0);
  try {
    d.memset(0);
  } catch (const devmem::InvalidArgument& e) {
    refused = e.what();
  }
  std::size_t nodes = 0;
  REQUIRE(fake::end_capture(s.native_handle(), &nodes) == 0);
  CHECK_THAT(refused, Catch::Matchers::Contains("default stream") &&
                          Catch::Matchers::Contains("during stream capture") &&
                          Catch::Matchers::Contains("pass the capturing stream"));
  // After the capture the default stream works again.
  d.memset(0);
  CHECK(d.to_vector<double>()[0] == 0.0);
}

TEST_CASE("strict fake: the async manager never allocates on the legacy stream beside a capture",
          "[strict-fake]") {
  // Review 2, N3. The manager is read when a context is made: device 1's, after the variable is
  // set (the known-defect tests use device 0). An allocation for a capturing stream:
  // cudaMallocAsync on the legacy stream was an implicit dependency on the capturing stream
  // (906); on the array's own stream it is refused before any vendor call.
  setenv("DEVMEM_MEMORY_MANAGER", "async", 1);
  const devmem::DeviceScope scope = devmem::device_scope(1);
  const devmem::Stream on_one = devmem::stream();
  CHECK(capture_survives(on_one, [&] {
    static_cast<void>(devmem::device_array<double>(Shape{8}, Order::C, on_one));
  }));
  unsetenv("DEVMEM_MEMORY_MANAGER");
}

TEST_CASE("strict fake: a thread's devmem device starts from the application's current device",
          "[strict-fake]") {
  // Review 2, N9.
  // The application makes device 1 current (cudaSetDevice) on a thread devmem has not used; a
  // devmem call must leave the runtime's device as the application set it.
  int after = -1;
  std::thread worker([&after] {
    if (fake::raw_set_device(1) != 0) return;
    static_cast<void>(devmem::device_array<double>(Shape{8}));
    after = fake::raw_get_device();
  });
  worker.join();
  CHECK(after == 1);
  // And devmem's own idea of the thread's device is the application's.
  int seen = -1;
  std::thread second([&seen] {
    if (fake::raw_set_device(1) != 0) return;
    seen = devmem::current_device();
  });
  second.join();
  CHECK(seen == 1);
}

TEST_CASE("strict fake: devmem calls leave the application's current device as they found it",
          "[strict-fake]") {
  // Review 2, N9 and finding 22 of the first review. The application works on device 1 (its
  // cudaSetDevice); devmem works on device 0 through a stream of device 0. Every devmem call, the
  // ones reached from destructors included, must leave device 1 current: the application's next
  // raw call (a kernel of its own, a cudaMalloc) would otherwise go to device 0.
  std::vector<std::string> moved;  // the operations after which the runtime's device was not 1
  bool scope_selects = false;
  std::thread worker([&] {
    if (fake::raw_set_device(1) != 0) return;
    const auto expect_one = [&](const char* what) {
      if (fake::raw_get_device() != 1) moved.emplace_back(what);
      static_cast<void>(fake::raw_set_device(1));
    };
    devmem::Stream on_zero;
    {
      // A DeviceScope selects device 0 for the runtime too (the application's own calls inside
      // it go there, as in Numba's `with cuda.gpus[0]`) and gives device 1 back at its end.
      const devmem::DeviceScope scope = devmem::device_scope(0);
      scope_selects = fake::raw_get_device() == 0;
      on_zero = devmem::stream();
    }
    expect_one("the end of a DeviceScope");
    {
      const DeviceArray a = devmem::device_array<float>(Shape{64, 64}, Order::C, on_zero);
      expect_one("device_array");
      a.memset(0);
      expect_one("memset");
      std::vector<float> values(64 * 64);
      for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
      a.copy_to_device(values, on_zero);
      expect_one("copy_to_device from the host");
      const DeviceArray b = devmem::device_array<float>(Shape{64, 64}, Order::C, on_zero);
      b.copy_to_device(a.transpose(), on_zero);  // a strided copy on the device
      expect_one("a strided device-to-device copy");
      const std::vector<float> back = b.to_vector<float>(on_zero);
      expect_one("to_vector");
      CHECK(back[1] == values[64]);
      on_zero.synchronize();
      expect_one("Stream::synchronize");
      static_cast<void>(on_zero.query());
      expect_one("Stream::query");
    }
    expect_one("an array's release");
    on_zero = devmem::Stream{};  // the stream's destructor: its pending uses are collected
    expect_one("a stream's release");
    devmem::context_for_device(0)->synchronize();
    expect_one("Context::synchronize");
  });
  worker.join();
  CHECK(scope_selects);
  for (const std::string& what : moved) {
    FAIL_CHECK("the runtime's current device was not the application's after " << what);
  }
}

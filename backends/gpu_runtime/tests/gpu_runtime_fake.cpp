// gpu_runtime_fake_api: the logic that the CUDA and ROC backends share
// (backends/gpu_runtime/runtime_backend.hpp) run against a fake vendor runtime, so that it is
// exercised on every machine, without a GPU: device selection, the error discipline (function
// names, codes, messages, the last error cleared, OutOfMemory with free/total), NotReady handling,
// flag and copy-kind translation, the legacy default stream, host functions (run once, deleted,
// nothing leaked when enqueuing fails), and the choice of copy calls (1-D, 2-D, 3-D, the fallbacks
// for pitches the runtime rejects), which must copy exactly what layout::copy_host_strided copies.
// The fake runtime's "device memory" is host memory, and its copies run at once.
//
// The tests are split by topic: this file holds devices, errors, flags, streams, events, host
// functions and the later single-call checks; gpu_runtime_fake_copies.cpp the copies (strided,
// bounded, staged); gpu_runtime_fake_failures.cpp every vendor call's failure and releases at exit.
#include <catch2/catch.hpp>

#include "gpu_runtime_fake.hpp"

using namespace gpu_runtime_fake;

// gpu_runtime::VendorApi (vendor_api.hpp) refuses a table that gets a call or a constant wrong,
// and asks for the IPC group only where kHasIpc: variants of the fake's table, checked at compile
// time.
namespace vendor_api_variants {
using devmem::gpu_runtime::VendorApi;
struct WrongReturnType : FakeApi {
  static int eventQuery(Event event);  // not a Status
};
struct WrongArgument : FakeApi {
  static S streamSynchronize(Event event);  // an event where a stream belongs
};
struct SignedMaxPitch : FakeApi {
  static constexpr int kMaxPitch = 1 << 30;  // not a std::size_t
};
struct SmallIpcHandle : FakeApi {
  struct IpcMemHandle {
    unsigned char bytes[32];  // devmem carries 64 bytes
  };
};
struct SmallIpcHandleWithoutIpc : SmallIpcHandle {
  static constexpr bool kHasIpc = false;
};
static_assert(VendorApi<FakeApi>);
static_assert(!VendorApi<WrongReturnType>);
static_assert(!VendorApi<WrongArgument>);
static_assert(!VendorApi<SignedMaxPitch>);
static_assert(!VendorApi<SmallIpcHandle>);
static_assert(VendorApi<SmallIpcHandleWithoutIpc>);
}  // namespace vendor_api_variants

TEST_CASE("gpu_runtime: no device is reported with the runtime's words") {
  Fixture f;
  f.state.count_error = kNoDevice;
  CHECK(f.backend.name() == "fake");
  CHECK(f.backend.device_count() == 0);
  CHECK(f.backend.no_device_reason() ==
        "fakeGetDeviceCount: fakeErrorNoDevice (100): no device found");
  CHECK(f.state.last_error == kOk);  // cleared
  CHECK(f.backend.device_count() == 0);
  CHECK(f.count("fakeGetDeviceCount") == 1);  // asked once
  REQUIRE_THROWS_AS(f.backend.allocate(0, 16), devmem::NoDevice);
  REQUIRE_THROWS_WITH(f.backend.memory_info(0),
                      "fake memory_info: no device: fakeGetDeviceCount: fakeErrorNoDevice (100): "
                      "no device found");
  REQUIRE_THROWS_AS(f.backend.properties(0), devmem::NoDevice);
  REQUIRE_THROWS_AS(f.backend.create_stream(0), devmem::NoDevice);
  CHECK_FALSE(f.called("fakeMalloc"));
}

TEST_CASE("gpu_runtime: a count of 0 without an error") {
  Fixture f;
  f.state.device_count = 0;
  CHECK(f.backend.device_count() == 0);
  CHECK(f.backend.no_device_reason() == "fakeGetDeviceCount reports 0 devices");
}

TEST_CASE("gpu_runtime: the device is made current only when it differs, and only for the call") {
  // Review 2, N9: after each call the caller's device (0 here) is current again.
  Fixture f;
  CHECK(f.backend.device_count() == 2);
  CHECK(f.backend.no_device_reason().empty());
  void* a = f.backend.allocate(0, 64);
  CHECK_FALSE(f.called("fakeSetDevice"));
  void* b = f.backend.allocate(1, 64);
  CHECK(f.count("fakeSetDevice(1)") == 1);
  CHECK(f.count("fakeSetDevice(0)") == 1);
  CHECK(f.state.current == 0);
  f.backend.deallocate(1, b);
  CHECK(f.count("fakeSetDevice") == 4);
  CHECK(f.state.current == 0);
  f.backend.deallocate(0, a);
  CHECK(f.count("fakeSetDevice") == 4);
  // Backend::make_current (devmem::select_device) leaves its device current.
  f.backend.make_current(1);
  CHECK(f.state.current == 1);
  SECTION("an index out of range fails in setDevice with the runtime's error") {
    try {
      (void)f.backend.allocate(5, 64);
      FAIL("no exception");
    } catch (const devmem::BackendError& e) {
      CHECK(e.backend() == "fake");
      CHECK(e.function() == "fakeSetDevice");
      CHECK(e.code() == kInvalidDevice);
      CHECK(e.code_name() == "fakeErrorInvalidDevice");
      CHECK(std::string(e.what()) ==
            "fake fakeSetDevice: fakeErrorInvalidDevice (101): invalid device ordinal; allocate: "
            "making device 5 current (device count 2)");
    }
    CHECK(f.state.last_error == kOk);
  }
}

TEST_CASE("gpu_runtime: properties") {
  Fixture f;
  const devmem::DeviceProperties p = f.backend.properties(1);
  CHECK(p.name == "Fake GPU");
  CHECK(p.architecture == "fake_91");
  CHECK(p.total_memory == (std::int64_t{2} << 30));
  CHECK(p.warp_size == 64);
  CHECK(p.max_threads_per_block == 1024);
  CHECK(p.max_shared_memory_per_block == 65536);
  CHECK(p.max_shared_memory_per_block_optin == 131072);
  CHECK(p.multiprocessor_count == 7);
  CHECK(p.can_map_host_memory);
  CHECK(p.unified_addressing);
  CHECK_FALSE(f.called("fakeSetDevice"));  // read by index, no context needed
  const devmem::MemoryInfo m = f.backend.memory_info(0);
  CHECK(m.free == (std::int64_t{1} << 30));
  CHECK(m.total == (std::int64_t{2} << 30));
}

TEST_CASE("gpu_runtime: failures become BackendError and clear the last error") {
  Fixture f;
  std::vector<char> src(64, 'a');
  std::vector<char> dst(64, 'b');
  f.state.fail["fakeMemcpy2DAsync"] = kInvalidValue;
  try {
    f.backend.copy_2d(0, dst.data(), 16, src.data(), 16, 8, 4, CopyKind::DeviceToHost, nullptr);
    FAIL("no exception");
  } catch (const devmem::BackendError& e) {
    CHECK(e.function() == "fakeMemcpy2DAsync");
    CHECK(e.code() == 1);
    CHECK(e.code_name() == "fakeErrorInvalidValue");
    const std::string message = e.what();
    CHECK(message.rfind("fake fakeMemcpy2DAsync: fakeErrorInvalidValue (1): invalid argument; "
                        "copying 4 rows of 8 bytes from ",
                        0) == 0);
    CHECK(message.find("(DeviceToHost) on the default stream") != std::string::npos);
  }
  CHECK(f.state.last_error == kOk);
  CHECK(f.state.clears >= 1);
  // The next call is not poisoned.
  f.backend.copy_2d(0, dst.data(), 16, src.data(), 16, 8, 4, CopyKind::DeviceToHost, nullptr);
  CHECK(dst[0] == 'a');
  CHECK(dst[8] == 'b');  // the gap is kept
}

TEST_CASE("gpu_runtime: out of memory") {
  Fixture f;
  SECTION("device memory names the bytes and free/total") {
    f.state.fail["fakeMalloc"] = kOutOfMemory;
    try {
      (void)f.backend.allocate(0, std::size_t{3} << 30);
      FAIL("no exception");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == (std::int64_t{3} << 30));
      CHECK(std::string(e.what()) ==
            "fake fakeMalloc: fakeErrorMemoryAllocation (2): out of memory; allocating 3 GiB "
            "(3221225472 bytes) of device memory on device 0 (free 1 GiB of 2 GiB)");
    }
    CHECK(f.state.last_error == kOk);
  }
  SECTION("page-locked host memory") {
    f.state.fail["fakeHostAlloc"] = kOutOfMemory;
    REQUIRE_THROWS_MATCHES(
        f.backend.host_allocate(0, 4096, HostAllocFlags::None), devmem::OutOfMemory,
        Catch::Matchers::Message("fake fakeHostAlloc: fakeErrorMemoryAllocation (2): out of "
                                 "memory; allocating 4 KiB (4096 bytes) of page-locked host "
                                 "memory on device 0"));
  }
  SECTION("zero bytes allocate nothing") {
    CHECK(f.backend.allocate(0, 0) == nullptr);
    CHECK(f.backend.host_allocate(0, 0, HostAllocFlags::Mapped) == nullptr);
    CHECK_FALSE(f.called("fakeMalloc"));
    CHECK_FALSE(f.called("fakeHostAlloc"));
  }
}

TEST_CASE("gpu_runtime: host allocation and registration flags") {
  Fixture f;
  const auto alloc = [&](HostAllocFlags flags) {
    void* p = f.backend.host_allocate(0, 64, flags);
    f.backend.host_deallocate(0, p);
    return f.state.host_alloc_flags.back();
  };
  CHECK(alloc(HostAllocFlags::None) == FakeApi::kHostAllocNonCoherent);
  CHECK(alloc(HostAllocFlags::Mapped) == (FakeApi::kHostAllocMapped | FakeApi::kHostAllocCoherent));
  CHECK(alloc(HostAllocFlags::Mapped | HostAllocFlags::Portable | HostAllocFlags::WriteCombined) ==
        (FakeApi::kHostAllocMapped | FakeApi::kHostAllocCoherent | FakeApi::kHostAllocPortable |
         FakeApi::kHostAllocWriteCombined));
  CHECK(alloc(HostAllocFlags::Portable) ==
        (FakeApi::kHostAllocNonCoherent | FakeApi::kHostAllocPortable));
  int x = 0;
  f.backend.host_register(0, &x, sizeof x, HostRegisterFlags::None);
  f.backend.host_register(0, &x, sizeof x, HostRegisterFlags::Mapped | HostRegisterFlags::Portable);
  CHECK(f.state.host_register_flags ==
        std::vector<unsigned>{0u, FakeApi::kHostRegisterMapped | FakeApi::kHostRegisterPortable});
  CHECK(f.backend.mapped_device_pointer(0, &x) == &x);
  f.backend.host_unregister(0, &x);
  CHECK(f.called("fakeHostUnregister"));
}

TEST_CASE("gpu_runtime: streams, events and NotReady") {
  Fixture f;
  const NativeStream s = f.backend.create_stream(0);
  REQUIRE(s != nullptr);
  CHECK(f.backend.query_stream(0, s));
  f.state.fail["fakeStreamQuery"] = kNotReady;
  CHECK_FALSE(f.backend.query_stream(0, s));  // not an error
  CHECK(f.state.last_error == kOk);           // and not left as the last error
  f.state.fail["fakeStreamQuery"] = kInvalidValue;
  REQUIRE_THROWS_AS(f.backend.query_stream(0, s), devmem::BackendError);

  const devmem::NativeEvent a = f.backend.create_event(0);
  const devmem::NativeEvent b = f.backend.create_event(0);
  f.backend.record_event(0, a, s);
  f.backend.record_event(0, b, nullptr);
  f.state.fail["fakeEventQuery"] = kNotReady;
  CHECK_FALSE(f.backend.query_event(0, a));
  CHECK(f.backend.query_event(0, a));
  f.backend.synchronize_event(0, a);
  CHECK(f.backend.elapsed_ms(0, a, b) == 1.5f);
  f.state.fail["fakeEventElapsedTime"] = kNotReady;  // an error here
  REQUIRE_THROWS_MATCHES(f.backend.elapsed_ms(0, a, b), devmem::BackendError,
                         Catch::Matchers::Predicate<devmem::BackendError>(
                             [](const devmem::BackendError& e) {
                               return e.code_name() == "fakeErrorNotReady" &&
                                      std::string(e.what()).rfind(
                                          "fake fakeEventElapsedTime: fakeErrorNotReady (600); "
                                          "elapsed time from event ",
                                          0) == 0;
                             },
                             "NotReady from elapsed_ms"));
  f.backend.stream_wait_event(0, s, a);
  f.backend.synchronize_stream(0, s);
  f.backend.synchronize_stream(0, nullptr);
  f.backend.destroy_event(0, a);
  f.backend.destroy_event(0, b);
  f.backend.destroy_stream(0, s);
  CHECK(f.called("fakeStreamWaitEvent"));
}

TEST_CASE("gpu_runtime: the nullptr stream is the runtime's legacy default stream") {
  Fixture f;
  std::vector<char> a(8, 'x');
  std::vector<char> b(8, 'y');
  const NativeStream s = f.backend.create_stream(0);
  f.backend.copy(0, b.data(), a.data(), 8, CopyKind::HostToDevice, nullptr);
  f.backend.copy(0, b.data(), a.data(), 8, CopyKind::DeviceToHost, s);
  f.backend.copy(0, b.data(), a.data(), 8, CopyKind::DeviceToDevice, s);
  f.backend.copy(0, b.data(), a.data(), 8, CopyKind::HostToHost, s);
  f.backend.memset(0, b.data(), 0x41, 8, nullptr);
  REQUIRE(f.state.copy_streams.size() == 5);
  CHECK(f.state.copy_streams[0] == &f.state.legacy);
  CHECK(f.state.copy_streams[1] == static_cast<FakeStream*>(s));
  CHECK(f.state.copy_streams[4] == &f.state.legacy);
  CHECK(f.state.copy_kinds == std::vector<int>{kH2D, kD2H, kD2D, kH2H, kDefault});
  CHECK(b == std::vector<char>(8, 'A'));
  f.backend.destroy_stream(0, s);
  SECTION("zero-byte operations call nothing") {
    const std::size_t before = f.state.calls.size();
    f.backend.copy(0, b.data(), a.data(), 0, CopyKind::HostToDevice, nullptr);
    f.backend.memset(0, b.data(), 0, 0, nullptr);
    f.backend.copy_2d(0, b.data(), 8, a.data(), 8, 0, 3, CopyKind::HostToDevice, nullptr);
    CHECK(std::none_of(f.state.calls.begin() + static_cast<std::ptrdiff_t>(before),
                       f.state.calls.end(), [](const std::string& c) {
                         return c.rfind("fakeMemcpy", 0) == 0 || c.rfind("fakeMemset", 0) == 0;
                       }));
  }
}

TEST_CASE("gpu_runtime: host functions run once and are deleted; nothing leaks on failure") {
  Fixture f;
  auto token = std::make_shared<int>(0);
  f.backend.launch_host_function(0, nullptr, [token] { ++*token; });
  CHECK(token.use_count() == 2);  // held by the enqueued function
  REQUIRE(f.state.host_functions.size() == 1);
  const auto [fn, user] = f.state.host_functions.front();
  fn(user);  // what the runtime's callback thread does
  CHECK(*token == 1);
  CHECK(token.use_count() == 1);  // deleted inside the callback
  SECTION("a throwing function is reported, not propagated") {
    f.backend.launch_host_function(0, nullptr, [] { throw std::runtime_error("boom"); });
    const auto [fn2, user2] = f.state.host_functions.back();
    fn2(user2);
  }
  SECTION("enqueuing fails: the function is destroyed and the error thrown") {
    f.state.fail["fakeLaunchHostFunc"] = kInvalidValue;
    REQUIRE_THROWS_AS(f.backend.launch_host_function(0, nullptr, [token] { ++*token; }),
                      devmem::BackendError);
    CHECK(token.use_count() == 1);
  }
  SECTION("an empty function is an invalid argument") {
    REQUIRE_THROWS_AS(f.backend.launch_host_function(0, nullptr, {}), devmem::InvalidArgument);
  }
}

TEST_CASE("gpu_runtime: read-only registration, and its fallback where it is refused") {
  Fixture f;
  std::vector<char> memory(64);
  f.backend.host_register(0, memory.data(), 64,
                          HostRegisterFlags::Mapped | HostRegisterFlags::ReadOnly);
  CHECK(f.state.host_register_flags ==
        std::vector<unsigned>{FakeApi::kHostRegisterMapped | FakeApi::kHostRegisterReadOnly});
  f.backend.host_unregister(0, memory.data());
  f.state.host_register_flags.clear();
  SECTION("a device without read-only registration: registered without it, no error left") {
    f.state.fail["fakeHostRegister"] = kInvalidValue;
    f.backend.host_register(0, memory.data(), 64, HostRegisterFlags::ReadOnly);
    CHECK(f.state.host_register_flags == std::vector<unsigned>{FakeApi::kHostRegisterReadOnly, 0u});
    CHECK(f.state.last_error == kOk);
    f.backend.host_unregister(0, memory.data());
  }
}

TEST_CASE("gpu_runtime: a release restores the caller's current device") {
  // Releases run in destructors, wherever the last reference goes: they must not leave another
  // device current behind the application's back.
  Fixture f;
  void* on_1 = f.backend.allocate(1, 64);
  const NativeStream stream_1 = f.backend.create_stream(1);
  const devmem::NativeEvent event_1 = f.backend.create_event(1);
  void* pinned_1 = f.backend.host_allocate(1, 64, HostAllocFlags::None);
  f.backend.make_current(0);
  const auto released_on_1_then_back = [&f](const char* release_call) {
    const auto at =
        std::find_if(f.state.calls.begin(), f.state.calls.end(),
                     [&](const std::string& c) { return c.rfind(release_call, 0) == 0; });
    REQUIRE(at != f.state.calls.end());
    REQUIRE(at != f.state.calls.begin());
    CHECK(*(at - 1) == "fakeSetDevice(1)");
    REQUIRE(at + 1 != f.state.calls.end());
    CHECK(*(at + 1) == "fakeSetDevice(0)");
    CHECK(f.state.current == 0);
    f.state.calls.clear();
  };
  f.state.calls.clear();
  f.backend.deallocate(1, on_1);
  released_on_1_then_back("fakeFree");
  f.backend.destroy_stream(1, stream_1);
  released_on_1_then_back("fakeStreamDestroy");
  f.backend.destroy_event(1, event_1);
  released_on_1_then_back("fakeEventDestroy");
  f.backend.host_deallocate(1, pinned_1);
  released_on_1_then_back("fakeHostFree");
  SECTION("a release on the current device switches nothing") {
    void* on_0 = f.backend.allocate(0, 64);
    f.state.calls.clear();
    f.backend.deallocate(0, on_0);
    CHECK(f.state.calls == std::vector<std::string>{"fakeGetDevice()", "fakeFree()"});
  }
  SECTION("a failed switch to the release's device throws; nothing is released or switched") {
    void* again = f.backend.allocate(1, 64);
    f.backend.make_current(0);
    f.state.fail["fakeSetDevice"] = kInvalidValue;
    CHECK_THROWS_AS(f.backend.deallocate(1, again), devmem::BackendError);
    CHECK(f.state.current == 0);
    f.backend.deallocate(1, again);  // the memory is still there to free
    CHECK(f.state.current == 0);
  }
  CHECK(f.state.live_blocks == 0);
}

TEST_CASE("gpu_runtime: a release that fails for another reason still throws") {
  Fixture f;
  void* device = f.backend.allocate(0, 64);
  f.state.fail["fakeFree"] = kInvalidValue;
  CHECK_THROWS_AS(f.backend.deallocate(0, device), devmem::BackendError);
  f.state.fail["fakeFree"] = kInvalidValue;
  CHECK_THROWS_WITH(f.backend.deallocate(0, device),
                    Catch::Matchers::StartsWith("fake fakeFree: fakeErrorInvalidValue (1): "
                                                "invalid argument; freeing device memory at"));
  f.backend.deallocate(0, device);
}

TEST_CASE("gpu_runtime: completion events have no timing and block their waiters") {
  Fixture f;
  const devmem::NativeEvent event = f.backend.create_completion_event(0);
  REQUIRE(f.state.event_flags.size() == 1);
  CHECK(f.state.event_flags[0] == (FakeApi::kEventDisableTiming | FakeApi::kEventBlockingSync));
  CHECK(f.state.live_events == 1);
  f.backend.destroy_event(0, event);
  CHECK(f.state.live_events == 0);
}

TEST_CASE("gpu_runtime: an event query says NotReady until the work before the event has run") {
  Fixture f;
  f.state.deferred = true;
  const NativeStream stream = f.backend.create_stream(0);
  const devmem::NativeEvent event = f.backend.create_completion_event(0);
  f.backend.record_event(0, event, stream);
  CHECK_FALSE(f.backend.query_event(0, event));
  f.backend.synchronize_event(0, event);
  CHECK(f.backend.query_event(0, event));
  f.backend.destroy_event(0, event);
  f.backend.destroy_stream(0, stream);
}

TEST_CASE(
    "gpu_runtime: stream capture is asked of the runtime; the default stream's answer says "
    "whether another stream captures") {
  Fixture f;
  const NativeStream stream = f.backend.create_stream(0);
  CHECK_FALSE(f.backend.is_capturing(0, stream));
  f.state.capturing.insert(static_cast<FakeStream*>(stream));
  CHECK(f.backend.is_capturing(0, stream));
  const long asked = f.count("fakeStreamIsCapturing");
  CHECK(asked == 2);
  // The legacy stream is never captured itself, but while a blocking stream captures the runtime
  // answers StreamCaptureImplicit for it (review 2, N2): work on it would join that capture.
  CHECK(f.backend.is_capturing(0, nullptr));
  CHECK(f.count("fakeStreamIsCapturing") == asked + 1);
  CHECK(f.state.last_error == kOk);  // the answer is not left for the next call to find
  f.state.capturing.clear();
  CHECK_FALSE(f.backend.is_capturing(0, nullptr));
  f.backend.destroy_stream(0, stream);
}

TEST_CASE("gpu_runtime: pointer_device names the device that owns the memory") {
  Fixture f;
  void* on0 = f.backend.allocate(0, 256);
  void* on1 = f.backend.allocate(1, 512);
  CHECK(f.backend.pointer_device(on0) == 0);
  CHECK(f.backend.pointer_device(static_cast<char*>(on1) + 500) == 1);
  std::vector<char> host(64);
  CHECK(f.backend.pointer_device(host.data()) == -1);
  CHECK(f.backend.pointer_device(nullptr) == -1);
  f.backend.deallocate(0, on0);
  f.backend.deallocate(1, on1);
}

TEST_CASE("gpu_runtime: stream-ordered allocation where the device has memory pools") {
  Fixture f;
  SECTION("asked once per device; allocation and free are ordered on the given stream") {
    CHECK(f.backend.supports_async_allocation(0));
    CHECK(f.backend.supports_async_allocation(0));
    CHECK(f.count("fakeDeviceGetAttribute") == 1);
    const NativeStream stream = f.backend.create_stream(0);
    void* block = f.backend.allocate_async(0, 1000, stream);
    CHECK(f.backend.pointer_device(block) == 0);
    f.backend.deallocate_async(0, block, nullptr);
    REQUIRE(f.state.async_streams.size() == 2);
    CHECK(f.state.async_streams[0] == static_cast<FakeStream*>(stream));
    CHECK(f.state.async_streams[1] == &f.state.legacy);  // nullptr: the legacy default stream
    CHECK_FALSE(f.called("fakeFree("));                  // no synchronising free
    CHECK(f.state.live_blocks == 0);
    f.backend.destroy_stream(0, stream);
  }
  SECTION("a device without memory pools refuses with the device and size named") {
    f.state.memory_pools = false;
    CHECK_FALSE(f.backend.supports_async_allocation(1));
    CHECK_THROWS_MATCHES(
        f.backend.allocate_async(1, 4096, nullptr), devmem::InvalidArgument,
        Catch::Matchers::Message("fake allocate_async: device 1 does not support memory pools "
                                 "(asked for 4096 bytes)"));
    CHECK_FALSE(f.called("fakeMallocAsync"));
  }
  SECTION("out of memory is OutOfMemory") {
    f.state.fail["fakeMallocAsync"] = kOutOfMemory;
    CHECK_THROWS_AS(f.backend.allocate_async(0, 1 << 20, nullptr), devmem::OutOfMemory);
    CHECK(f.state.live_blocks == 0);
  }
}

// ---- Several devices (docs/scaling-out.md#several-devices) --------------------------------------

TEST_CASE("gpu_runtime: can_access_peer asks the runtime, never for the device itself") {
  Fixture f;
  CHECK(f.backend.can_access_peer(0, 1));
  CHECK(f.count("fakeDeviceCanAccessPeer(0,1)") == 1);
  CHECK_FALSE(f.backend.can_access_peer(1, 1));
  CHECK_FALSE(f.called("fakeDeviceCanAccessPeer(1,1)"));
  f.state.peer_capable.clear();
  CHECK_FALSE(f.backend.can_access_peer(1, 0));
  f.state.fail["fakeDeviceCanAccessPeer"] = kInvalidDevice;
  REQUIRE_THROWS_MATCHES(f.backend.can_access_peer(0, 1), devmem::BackendError,
                         Catch::Matchers::Message(
                             "fake fakeDeviceCanAccessPeer: fakeErrorInvalidDevice (101): invalid "
                             "device ordinal; asking whether device 0 can access device 1"));
  CHECK(f.state.last_error == kOk);
}

TEST_CASE("gpu_runtime: enabling and disabling peer access are idempotent") {
  Fixture f;
  f.backend.enable_peer_access(1, 0);
  CHECK(f.count("fakeSetDevice(1)") == 1);  // enabled from the device that gains access
  CHECK(f.state.peers_enabled.contains({1, 0}));
  // The runtime answers "already enabled": success, and the last error is cleared.
  f.backend.enable_peer_access(1, 0);
  CHECK(f.count("fakeDeviceEnablePeerAccess(0)") == 2);
  CHECK(f.state.last_error == kOk);
  f.backend.disable_peer_access(1, 0);
  CHECK_FALSE(f.state.peers_enabled.contains({1, 0}));
  f.backend.disable_peer_access(1, 0);  // "not enabled": success too
  CHECK(f.state.last_error == kOk);
  SECTION("devices that cannot be peers: the runtime's error") {
    f.state.peer_capable.clear();
    REQUIRE_THROWS_MATCHES(
        f.backend.enable_peer_access(0, 1), devmem::BackendError,
        Catch::Matchers::Message("fake fakeDeviceEnablePeerAccess: fakeErrorPeerAccessUnsupported "
                                 "(217); letting device 0 access device 1"));
    CHECK(f.state.last_error == kOk);
  }
  SECTION("another failure of disable is reported") {
    f.state.fail["fakeDeviceDisablePeerAccess"] = kInvalidDevice;
    REQUIRE_THROWS_AS(f.backend.disable_peer_access(0, 1), devmem::BackendError);
  }
}

TEST_CASE("gpu_runtime: a peer copy is one memcpyPeerAsync on the destination device's stream") {
  Fixture f;
  void* const src = f.backend.allocate(0, 256);
  void* const dst = f.backend.allocate(1, 256);
  std::memset(src, 7, 256);
  std::memset(dst, 0, 256);
  const NativeStream stream = f.backend.create_stream(1);
  f.state.calls.clear();
  f.backend.copy_peer(1, dst, 0, src, 200, stream);
  REQUIRE(f.state.peer_copies.size() == 1);
  CHECK(f.state.peer_copies[0] == std::tuple<int, int, std::size_t>{1, 0, 200});
  CHECK(f.state.copy_streams.back() == static_cast<FakeStream*>(stream));
  CHECK(f.count("fakeSetDevice(1)") == 1);  // the destination's device, for the copy only
  CHECK(f.state.current == 0);
  CHECK(static_cast<unsigned char*>(dst)[199] == 7);
  CHECK(static_cast<unsigned char*>(dst)[200] == 0);
  // Nothing to copy: no call.
  f.backend.copy_peer(1, dst, 0, src, 0, nullptr);
  CHECK(f.state.peer_copies.size() == 1);
  SECTION("the legacy default stream") {
    f.backend.copy_peer(0, src, 1, dst, 8, nullptr);
    CHECK(f.state.copy_streams.back() == &f.state.legacy);
  }
  SECTION("a failure names both devices") {
    f.state.fail["fakeMemcpyPeerAsync"] = kInvalidValue;
    bool thrown = false;
    try {
      f.backend.copy_peer(1, dst, 0, src, 16, stream);
    } catch (const devmem::BackendError& e) {
      thrown = true;
      const std::string what = e.what();
      CHECK(e.function() == "fakeMemcpyPeerAsync");
      CHECK(what.rfind("fake fakeMemcpyPeerAsync: fakeErrorInvalidValue (1): invalid argument; "
                       "copying 16 bytes from ",
                       0) == 0);
      CHECK(what.find("on device 0 to") != std::string::npos);
      CHECK(what.find("on device 1 on") != std::string::npos);
    }
    CHECK(thrown);
    CHECK(f.state.last_error == kOk);
  }
  f.backend.destroy_stream(1, stream);
  f.backend.deallocate(0, src);
  f.backend.deallocate(1, dst);
  CHECK(f.state.live_blocks == 0);
}

// gpu_runtime_fake_api, the failure paths: every vendor call's failure is a BackendError naming it
// and leaks nothing, allocation calls out of memory give OutOfMemory, and releases after the
// runtime's teardown at process exit are silent. A file of its own so that gpu_runtime_fake.cpp
// holds one topic per file.
#include "gpu_runtime_fake.hpp"

using namespace gpu_runtime_fake;

// ---- Every vendor call's failure path
// ---------------------------------------------------

namespace {

/// The resources a backend call may need, made before the failure is injected and released after
/// it (a release that was the failing call is retried, as a caller would after a transient error).
struct Resources {
  explicit Resources(FakeBackend& b) : backend(b) {
    device_block = backend.allocate(0, 4096);
    host_block = backend.host_allocate(0, 4096, HostAllocFlags::Mapped);
    stream = backend.create_stream(0);
    event = backend.create_event(0);
    other_event = backend.create_event(0);
  }
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;
  ~Resources() {
    release([&] { backend.deallocate(0, device_block); });
    release([&] { backend.host_deallocate(0, host_block); });
    release([&] { backend.destroy_stream(0, stream); });
    release([&] { backend.destroy_event(0, event); });
    release([&] { backend.destroy_event(0, other_event); });
  }
  template <class Fn>
  static void release(Fn&& fn) {
    try {
      fn();
    } catch (const devmem::Error&) {  // the injected failure hit this release: once more
      fn();
    }
  }
  FakeBackend& backend;
  void* device_block = nullptr;
  void* host_block = nullptr;
  NativeStream stream = nullptr;
  devmem::NativeEvent event = nullptr;
  devmem::NativeEvent other_event = nullptr;
};

/// One vendor call and a backend method that reaches it.
struct VendorCall {
  const char* function;
  void (*invoke)(Resources&);
};

const std::vector<VendorCall>& vendor_calls() {
  static const std::vector<VendorCall> calls{
      {"fakeGetDevice", [](Resources& r) { (void)r.backend.memory_info(0); }},
      {"fakeSetDevice",
       [](Resources& r) {
         // Both switch the current device, whichever device the previous call left current.
         (void)r.backend.memory_info(1);
         (void)r.backend.memory_info(0);
       }},
      {"fakeGetDeviceProperties", [](Resources& r) { (void)r.backend.properties(0); }},
      {"fakeMemGetInfo", [](Resources& r) { (void)r.backend.memory_info(0); }},
      {"fakeMalloc", [](Resources& r) { r.backend.deallocate(0, r.backend.allocate(0, 256)); }},
      {"fakeFree", [](Resources& r) { r.backend.deallocate(0, r.device_block); }},
      {"fakeHostAlloc",
       [](Resources& r) {
         r.backend.host_deallocate(0, r.backend.host_allocate(0, 256, HostAllocFlags::None));
       }},
      {"fakeHostFree", [](Resources& r) { r.backend.host_deallocate(0, r.host_block); }},
      {"fakeHostRegister",
       [](Resources& r) {
         r.backend.host_register(0, r.host_block, 64, HostRegisterFlags::Mapped);
         r.backend.host_unregister(0, r.host_block);
       }},
      {"fakeHostUnregister", [](Resources& r) { r.backend.host_unregister(0, r.host_block); }},
      {"fakeHostGetDevicePointer",
       [](Resources& r) { (void)r.backend.mapped_device_pointer(0, r.host_block); }},
      {"fakeStreamCreate",
       [](Resources& r) { r.backend.destroy_stream(0, r.backend.create_stream(0)); }},
      {"fakeStreamDestroy", [](Resources& r) { r.backend.destroy_stream(0, r.stream); }},
      {"fakeStreamSynchronize", [](Resources& r) { r.backend.synchronize_stream(0, r.stream); }},
      {"fakeStreamQuery", [](Resources& r) { (void)r.backend.query_stream(0, r.stream); }},
      {"fakeStreamWaitEvent",
       [](Resources& r) { r.backend.stream_wait_event(0, r.stream, r.event); }},
      {"fakeEventCreate",
       [](Resources& r) { r.backend.destroy_event(0, r.backend.create_event(0)); }},
      {"fakeEventDestroy", [](Resources& r) { r.backend.destroy_event(0, r.event); }},
      {"fakeEventRecord", [](Resources& r) { r.backend.record_event(0, r.event, r.stream); }},
      {"fakeEventSynchronize", [](Resources& r) { r.backend.synchronize_event(0, r.event); }},
      {"fakeEventQuery", [](Resources& r) { (void)r.backend.query_event(0, r.event); }},
      {"fakeEventElapsedTime",
       [](Resources& r) { (void)r.backend.elapsed_ms(0, r.event, r.other_event); }},
      {"fakeMemcpyAsync",
       [](Resources& r) {
         r.backend.copy(0, r.device_block, r.host_block, 64, CopyKind::HostToDevice, r.stream);
       }},
      {"fakeMemcpy2DAsync",
       [](Resources& r) {
         r.backend.copy_2d(0, r.host_block, 64, r.device_block, 64, 32, 4, CopyKind::DeviceToHost,
                           nullptr);
       }},
      {"fakeMemcpy3DAsync",
       [](Resources& r) {
         // A 2x3x4 sub-block of a 4x4x8 byte array: one 3-D copy.
         const devmem::layout::CopyPlan plan = devmem::layout::plan_copy(
             devmem::Shape{2, 3, 4}, devmem::Strides{32, 8, 1}, devmem::Strides{32, 8, 1}, 1);
         r.backend.copy_strided(0, r.device_block, r.host_block, plan, CopyKind::HostToDevice,
                                r.stream);
       }},
      {"fakeLaunchCopyStrided",
       [](Resources& r) {
         // A 16x16 byte matrix transposed within device memory: one kernel launch.
         const devmem::layout::CopyPlan plan = devmem::layout::plan_copy(
             devmem::Shape{16, 16}, devmem::Strides{16, 1}, devmem::Strides{1, 16}, 1);
         auto* const block = static_cast<std::byte*>(r.device_block);
         r.backend.copy_strided(0, block + 256, block, plan, CopyKind::DeviceToDevice, r.stream);
       }},
      {"fakeMemsetAsync",
       [](Resources& r) { r.backend.memset(0, r.device_block, 7, 128, r.stream); }},
      {"fakeLaunchHostFunc",
       [](Resources& r) { r.backend.launch_host_function(0, r.stream, [] {}); }},
      {"fakeEventCreateWithFlags",
       [](Resources& r) { r.backend.destroy_event(0, r.backend.create_completion_event(0)); }},
      {"fakeStreamIsCapturing", [](Resources& r) { (void)r.backend.is_capturing(0, r.stream); }},
      {"fakePointerGetAttributes",
       [](Resources& r) { (void)r.backend.pointer_device(r.device_block); }},
      {"fakeDeviceGetAttribute",
       [](Resources& r) {
         // The answer is cached per device: the second invocation (the failing one) asks about
         // the other device, which has not been asked yet.
         static int device = 0;
         (void)r.backend.supports_async_allocation(device++ % 2);
       }},
      {"fakeMallocAsync",
       [](Resources& r) {
         r.backend.deallocate_async(0, r.backend.allocate_async(0, 256, r.stream), r.stream);
       }},
      {"fakeFreeAsync",
       [](Resources& r) {
         // Allocated by this call's own allocate_async, so that the failed free's block is known.
         void* block = r.backend.allocate_async(0, 256, nullptr);
         try {
           r.backend.deallocate_async(0, block, nullptr);
         } catch (...) {
           r.backend.deallocate_async(0, block, nullptr);
           throw;
         }
       }},
  };
  return calls;
}

}  // namespace

TEST_CASE("gpu_runtime: every vendor call's failure is a BackendError naming it; nothing leaks") {
  for (const VendorCall& call : vendor_calls()) {
    INFO(call.function);
    Fixture f;
    {
      Resources resources(f.backend);
      // The call is reachable: without a failure it runs.
      call.invoke(resources);
      if (std::string_view(call.function) == "fakeFree")
        resources.device_block = f.backend.allocate(0, 4096);
      if (std::string_view(call.function) == "fakeHostFree") {
        resources.host_block = f.backend.host_allocate(0, 4096, HostAllocFlags::Mapped);
      }
      if (std::string_view(call.function) == "fakeStreamDestroy")
        resources.stream = f.backend.create_stream(0);
      if (std::string_view(call.function) == "fakeEventDestroy")
        resources.event = f.backend.create_event(0);
      REQUIRE(f.called(call.function));

      f.state.fail[call.function] = kInvalidValue;
      try {
        call.invoke(resources);
        FAIL("no exception when " << call.function << " failed");
      } catch (const devmem::BackendError& e) {
        CHECK(e.backend() == "fake");
        CHECK(e.function() == call.function);
        CHECK(e.code() == kInvalidValue);
        CHECK(e.code_name() == "fakeErrorInvalidValue");
        const std::string prefix = std::string("fake ") + call.function +
                                   ": fakeErrorInvalidValue (1): invalid argument; ";
        CHECK(std::string(e.what()).rfind(prefix, 0) == 0);
      }
      CHECK(f.state.fail.empty());       // the failure really came from this call
      CHECK(f.state.last_error == kOk);  // cleared, so the next call is not blamed
    }
    // Everything made before the failure was released, nothing half-made was left behind.
    CHECK(f.state.live_blocks == 0);
    CHECK(f.state.live_streams == 0);
    CHECK(f.state.live_events == 0);
    for (const auto& [fn, user] : f.state.host_functions) fn(user);  // runs and deletes them
  }
}

TEST_CASE("gpu_runtime: allocation calls reporting out of memory give OutOfMemory; nothing leaks") {
  for (const char* function : {"fakeMalloc", "fakeHostAlloc"}) {
    INFO(function);
    Fixture f;
    f.state.fail[function] = kOutOfMemory;
    const bool device = std::string_view(function) == "fakeMalloc";
    try {
      if (device) {
        (void)f.backend.allocate(0, 1 << 20);
      } else {
        (void)f.backend.host_allocate(0, 1 << 20, HostAllocFlags::Portable);
      }
      FAIL("no exception");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == (1 << 20));
      const std::string message = e.what();
      CHECK(message.rfind(std::string("fake ") + function +
                              ": fakeErrorMemoryAllocation (2): out of memory; allocating 1 "
                              "MiB (1048576 bytes) of ",
                          0) == 0);
      CHECK(message.find(device ? "device memory on device 0 (free 1 GiB of 2 GiB)"
                                : "page-locked host memory on device 0") != std::string::npos);
    }
    CHECK(f.state.last_error == kOk);
    CHECK(f.state.live_blocks == 0);
  }
}

namespace {

/// One of each releasable resource on device 1, for the tests of releases at process exit.
struct HeldOnDevice1 {
  FakeBackend& backend;
  void* device = backend.allocate(1, 64);
  void* pinned = backend.host_allocate(1, 64, HostAllocFlags::Mapped);
  std::vector<char> registered = std::vector<char>(64);
  NativeStream stream = nullptr;
  devmem::NativeEvent event = nullptr;

  explicit HeldOnDevice1(FakeBackend& b) : backend(b) {
    backend.host_register(1, registered.data(), registered.size(), HostRegisterFlags::Mapped);
    stream = backend.create_stream(1);
    event = backend.create_event(1);
  }
  /// Releases everything; none of the releases may throw.
  void release_all() {
    CHECK_NOTHROW(backend.deallocate(1, device));
    CHECK_NOTHROW(backend.host_deallocate(1, pinned));
    CHECK_NOTHROW(backend.host_unregister(1, registered.data()));
    CHECK_NOTHROW(backend.destroy_stream(1, stream));
    CHECK_NOTHROW(backend.destroy_event(1, event));
  }
};

}  // namespace

TEST_CASE("gpu_runtime: releases after the runtime's teardown at exit are silent") {
  // Arrays, streams and events held by static objects are released at process exit, after the
  // vendor runtime has been torn down (cudaErrorCudartUnloading, hipErrorDeinitialized).
  Fixture f;
  HeldOnDevice1 held(f.backend);
  f.state.unloaded = true;
  f.state.current = 0;  // the releases must not even need the device switch to work
  {
    test_support::StderrCapture stderr_capture;
    held.release_all();
    CHECK(stderr_capture.finish().empty());
  }
  CHECK(f.state.last_error == kOk);  // cleared after each: nothing for the next call to report
  // Anything else than a release still reports the torn-down runtime.
  CHECK_THROWS_AS((void)f.backend.allocate(1, 64), devmem::BackendError);
  CHECK_THROWS_WITH((void)f.backend.allocate(1, 64),
                    Catch::Matchers::StartsWith(
                        "fake fakeGetDevice: fakeErrorRuntimeUnloading (4); allocate on device 1"));
  // The runtime freed everything at its teardown; the fake leaves that to the test.
  f.state.unloaded = false;
  std::free(held.device);
  std::free(held.pinned);
  delete static_cast<FakeStream*>(held.stream);
  delete static_cast<FakeEvent*>(held.event);
}

TEST_CASE("gpu_runtime: once the process has begun to exit, releases call nothing") {
  // ProcessExit's atexit handler runs before the vendor runtime's teardown: from then on a release
  // (of a static object's array, stream or event) must not reach the runtime at all, because
  // HIP's calls after its teardown are a use-after-free inside HIP, not a clean error.
  Fixture f;
  HeldOnDevice1 held(f.backend);
  const std::size_t calls_before = f.state.calls.size();
  devmem::gpu_runtime::ProcessExit::mark();
  held.release_all();
  devmem::gpu_runtime::ProcessExit::reset_for_testing();
  CHECK(f.state.calls.size() == calls_before);  // not even a device query
  // The process would hand everything back; the fake test does it itself.
  held.release_all();
  CHECK(f.state.live_blocks == 0);
  CHECK(f.state.live_streams == 0);
  CHECK(f.state.live_events == 0);
}

TEST_CASE(
    "gpu_runtime: after a sticky error every call fails fast with it and releases are silent") {
  // A kernel's illegal address is sticky: the runtime fails every later call of the process with
  // it. The backend latches it (review 2, N11): later calls throw the same error without calling
  // the runtime, releases call nothing and print nothing, and the error says it is sticky.
  Fixture f;
  HeldOnDevice1 held(f.backend);
  CHECK_FALSE(f.backend.device_lost());
  f.state.fail["fakeStreamSynchronize"] = kIllegalAddress;
  try {
    f.backend.synchronize_stream(1, held.stream);
    FAIL("the injected illegal address was not reported");
  } catch (const devmem::BackendError& e) {
    CHECK(e.sticky());
    CHECK(e.persistence() == devmem::ErrorPersistence::Sticky);
    CHECK(e.code() == kIllegalAddress);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("sticky error"));
  }
  CHECK(f.backend.device_lost());
  const std::size_t calls_before = f.state.calls.size();
  // The fake itself would allocate: the latch answers first, with the original error.
  try {
    (void)f.backend.allocate(0, 64);
    FAIL("an allocation after a sticky error succeeded");
  } catch (const devmem::BackendError& e) {
    CHECK(e.sticky());
    CHECK(e.function() == "fakeStreamSynchronize");
    CHECK(e.code() == kIllegalAddress);
  }
  CHECK_THROWS_AS((void)f.backend.query_event(1, held.event), devmem::BackendError);
  {
    test_support::StderrCapture stderr_capture;
    held.release_all();
    CHECK(stderr_capture.finish().empty());
  }
  CHECK(f.state.calls.size() == calls_before);  // not one vendor call since the error
  // A healthy runtime again, for the test's own cleanup.
  devmem::gpu_runtime::DeviceLost::reset_for_testing();
  held.release_all();
  CHECK(f.state.live_blocks == 0);
  CHECK(f.state.live_streams == 0);
  CHECK(f.state.live_events == 0);
}

TEST_CASE("gpu_runtime: errors that are not sticky leave the device usable") {
  Fixture f;
  f.state.fail["fakeMalloc"] = kInvalidValue;
  try {
    (void)f.backend.allocate(0, 64);
    FAIL("the injected failure was not reported");
  } catch (const devmem::BackendError& e) {
    CHECK_FALSE(e.sticky());
    CHECK(e.persistence() == devmem::ErrorPersistence::Recoverable);
  }
  CHECK_FALSE(f.backend.device_lost());
  void* const block = f.backend.allocate(0, 64);
  CHECK(block != nullptr);
  f.backend.deallocate(0, block);
}

// The HIP-CPU compatibility layer (cpu_standins/hipcpu/include/devmem_hipcpu/hip_compat.hpp)
// against ROCm's documented semantics, call by call, through the HIP names devmem's roc backend
// uses. Built in the roc-hipcpu and cuda-hipcpu presets only.
#include <catch2/catch.hpp>

#include <hip/hip_runtime_api.h>
#include <hsa/hsa.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

namespace {

/// Work that holds a stream until released (a host function waiting for a promise).
class Blocker {
 public:
  explicit Blocker(hipStream_t stream) {
    REQUIRE(hipLaunchHostFunc(stream, &Blocker::run, this) == hipSuccess);
  }
  Blocker(const Blocker&) = delete;
  Blocker& operator=(const Blocker&) = delete;
  ~Blocker() { release(); }
  void release() {
    if (!released_) {
      released_ = true;
      open_.set_value();
    }
  }

 private:
  static void run(void* self) { static_cast<Blocker*>(self)->opened_.wait(); }
  std::promise<void> open_;
  std::shared_future<void> opened_ = open_.get_future().share();
  bool released_ = false;
};

}  // namespace

TEST_CASE("hip_compat: device allocations and frees") {
  void* p = nullptr;
  REQUIRE(hipMalloc(&p, 1000) == hipSuccess);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
  hipPointerAttribute_t attributes{};
  REQUIRE(hipPointerGetAttributes(&attributes, static_cast<char*>(p) + 999) == hipSuccess);
  CHECK(attributes.memoryType == hipMemoryTypeDevice);
  CHECK(hipFree(p) == hipSuccess);
  CHECK(hipFree(p) == hipErrorInvalidValue);  // no longer allocated
  CHECK(hipGetLastError() == hipErrorInvalidValue);
  CHECK(hipGetLastError() == hipSuccess);  // reading it cleared it
  CHECK(hipFree(nullptr) == hipSuccess);
  void* zero = &p;
  CHECK(hipMalloc(&zero, 0) == hipSuccess);
  CHECK(zero == nullptr);
  void* huge = nullptr;
  CHECK(hipMalloc(&huge, std::size_t{1} << 62) == hipErrorOutOfMemory);
  CHECK(huge == nullptr);
  static_cast<void>(hipGetLastError());
}

TEST_CASE("hip_compat: page-locked allocations, flags and pointer attributes") {
  void* pinned = nullptr;
  REQUIRE(hipHostMalloc(&pinned, 100, hipHostMallocMapped | hipHostMallocCoherent) == hipSuccess);
  void* device_view = nullptr;
  CHECK(hipHostGetDevicePointer(&device_view, pinned, 0) == hipSuccess);
  CHECK(device_view == pinned);
  hipPointerAttribute_t attributes{};
  REQUIRE(hipPointerGetAttributes(&attributes, pinned) == hipSuccess);
  CHECK(attributes.memoryType == hipMemoryTypeHost);
  CHECK(attributes.hostPointer == pinned);
  CHECK(hipHostFree(pinned) == hipSuccess);

  void* bad = nullptr;
  CHECK(hipHostMalloc(&bad, 100, hipHostMallocCoherent | hipHostMallocNonCoherent) ==
        hipErrorInvalidValue);
  CHECK(hipHostMalloc(&bad, 100, 0x100u) == hipErrorInvalidValue);
  CHECK(bad == nullptr);

  std::vector<char> pageable(64);
  CHECK(hipPointerGetAttributes(&attributes, pageable.data()) == hipErrorInvalidValue);
  CHECK(hipHostGetDevicePointer(&device_view, pageable.data(), 0) == hipErrorInvalidValue);
  static_cast<void>(hipGetLastError());
}

TEST_CASE("hip_compat: registration is tracked like ROCm's") {
  std::vector<char> memory(8192);
  char* const p = memory.data();
  REQUIRE(hipHostRegister(p, 4096, hipHostRegisterMapped) == hipSuccess);
  CHECK(hipHostRegister(p, 4096, 0) == hipErrorHostMemoryAlreadyRegistered);
  CHECK(hipHostRegister(p + 100, 10, 0) == hipErrorHostMemoryAlreadyRegistered);  // overlaps
  CHECK(hipHostRegister(p + 4096, 100, 0) == hipSuccess);                         // adjacent
  hipPointerAttribute_t attributes{};
  CHECK(hipPointerGetAttributes(&attributes, p + 10) == hipSuccess);
  CHECK(hipHostUnregister(p + 1) == hipErrorHostMemoryNotRegistered);  // not a registration's start
  CHECK(hipHostUnregister(p) == hipSuccess);
  CHECK(hipHostUnregister(p) == hipErrorHostMemoryNotRegistered);
  CHECK(hipHostUnregister(p + 4096) == hipSuccess);
  CHECK(hipHostRegister(nullptr, 10, 0) == hipErrorInvalidValue);
  CHECK(hipHostRegister(p, 0, 0) == hipErrorInvalidValue);
  static_cast<void>(hipGetLastError());
}

TEST_CASE("hip_compat: pageable copies complete before the call returns") {
  hipStream_t stream = nullptr;
  REQUIRE(hipStreamCreate(&stream) == hipSuccess);
  void* device = nullptr;
  REQUIRE(hipMalloc(&device, 4 * sizeof(int)) == hipSuccess);
  {
    std::vector<int> source{1, 2, 3, 4};
    REQUIRE(hipMemcpyAsync(device, source.data(), 16, hipMemcpyHostToDevice, stream) == hipSuccess);
    source.assign(4, -1);  // the caller may reuse pageable memory at once
  }
  std::vector<int> out(4, 0);
  REQUIRE(hipMemcpyAsync(out.data(), device, 16, hipMemcpyDeviceToHost, stream) == hipSuccess);
  CHECK(out == std::vector<int>{1, 2, 3, 4});  // complete without a synchronize
  CHECK(hipMemcpyAsync(out.data(), device, 16, static_cast<hipMemcpyKind>(7), stream) ==
        hipErrorInvalidMemcpyDirection);
  static_cast<void>(hipGetLastError());
  REQUIRE(hipFree(device) == hipSuccess);
  REQUIRE(hipStreamDestroy(stream) == hipSuccess);
}

TEST_CASE("hip_compat: stream query, destroy and the legacy null stream's order") {
  hipStream_t a = nullptr;
  REQUIRE(hipStreamCreate(&a) == hipSuccess);
  CHECK(hipStreamQuery(a) == hipSuccess);  // nothing enqueued
  void* pinned = nullptr;
  REQUIRE(hipHostMalloc(&pinned, sizeof(int), 0) == hipSuccess);
  std::memset(pinned, 0, sizeof(int));
  void* device = nullptr;
  REQUIRE(hipMalloc(&device, sizeof(int)) == hipSuccess);
  {
    Blocker blocker(a);
    REQUIRE(hipMemsetAsync(device, 7, sizeof(int), a) == hipSuccess);
    CHECK(hipStreamQuery(a) == hipErrorNotReady);  // queued behind the blocker
    CHECK(hipGetLastError() == hipErrorNotReady);
    // Work on the null stream starts after a's earlier work: enqueued from another thread,
    // which waits until the blocker is released.
    std::atomic<bool> enqueued{false};
    std::thread null_stream_user([&] {
      REQUIRE(hipMemcpyAsync(pinned, device, sizeof(int), hipMemcpyDeviceToHost, nullptr) ==
              hipSuccess);
      enqueued = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(enqueued.load());
    blocker.release();
    null_stream_user.join();
  }
  REQUIRE(hipStreamSynchronize(nullptr) == hipSuccess);
  int value = 0;
  std::memcpy(&value, pinned, sizeof value);
  CHECK(value == 0x07070707);
  CHECK(hipStreamQuery(a) == hipSuccess);
  {
    Blocker blocker(a);
    REQUIRE(hipMemsetAsync(device, 1, sizeof(int), a) == hipSuccess);
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      blocker.release();
    });
    CHECK(hipStreamDestroy(a) == hipSuccess);  // lets the queued memset finish
    releaser.join();
  }
  CHECK(hipStreamDestroy(a) == hipErrorInvalidHandle);
  CHECK(hipStreamQuery(a) == hipErrorInvalidHandle);
  static_cast<void>(hipGetLastError());
  REQUIRE(hipMemcpyAsync(pinned, device, sizeof(int), hipMemcpyDeviceToHost, nullptr) ==
          hipSuccess);
  REQUIRE(hipDeviceSynchronize() == hipSuccess);
  std::memcpy(&value, pinned, sizeof value);
  CHECK(value == 0x01010101);
  REQUIRE(hipFree(device) == hipSuccess);
  REQUIRE(hipHostFree(pinned) == hipSuccess);
}

TEST_CASE("hip_compat: events, callbacks and waits") {
  hipEvent_t never = nullptr;
  REQUIRE(hipEventCreate(&never) == hipSuccess);
  CHECK(hipEventQuery(never) == hipSuccess);        // ROCm: a never-recorded event is complete
  CHECK(hipEventSynchronize(never) == hipSuccess);  // (HIP-CPU alone fails here)
  REQUIRE(hipEventDestroy(never) == hipSuccess);

  hipStream_t s = nullptr;
  REQUIRE(hipStreamCreate(&s) == hipSuccess);
  hipEvent_t event = nullptr;
  REQUIRE(hipEventCreate(&event) == hipSuccess);
  std::atomic<int> calls{0};
  struct Callback {
    static void run(hipStream_t, hipError_t status, void* user) {
      if (status == hipSuccess) ++*static_cast<std::atomic<int>*>(user);
    }
  };
  {
    Blocker blocker(s);
    REQUIRE(hipStreamAddCallback(s, &Callback::run, &calls, 0) == hipSuccess);
    REQUIRE(hipEventRecord(event, s) == hipSuccess);
    CHECK(hipEventQuery(event) == hipErrorNotReady);
    CHECK(calls.load() == 0);
  }
  REQUIRE(hipEventSynchronize(event) == hipSuccess);
  CHECK(calls.load() == 1);
  CHECK(hipEventQuery(event) == hipSuccess);
  CHECK(hipStreamAddCallback(s, &Callback::run, &calls, 1) == hipErrorInvalidValue);
  CHECK(hipStreamWaitEvent(s, event, 0) == hipSuccess);
  static_cast<void>(hipGetLastError());
  REQUIRE(hipEventDestroy(event) == hipSuccess);
  REQUIRE(hipStreamDestroy(s) == hipSuccess);
}

TEST_CASE("hip_compat: 2-D and 3-D copies and their pitch checks") {
  constexpr std::size_t kWidth = 3, kHeight = 2, kDepth = 2, kPitch = 5, kRows = 3;
  std::vector<unsigned char> source(kPitch * kRows * kDepth);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i);
  void* device = nullptr;
  REQUIRE(hipMalloc(&device, kWidth * kHeight * kDepth) == hipSuccess);
  hipMemcpy3DParms params{};
  params.srcPtr = hipPitchedPtr{source.data(), kPitch, kPitch, kRows};
  params.dstPtr = hipPitchedPtr{device, kWidth, kWidth, kHeight};
  params.extent = hipExtent{kWidth, kHeight, kDepth};
  params.kind = hipMemcpyHostToDevice;
  REQUIRE(hipMemcpy3DAsync(&params, nullptr) == hipSuccess);
  std::vector<unsigned char> out(kWidth * kHeight * kDepth);
  REQUIRE(hipMemcpy2DAsync(out.data(), kWidth, device, kWidth, kWidth, kHeight * kDepth,
                           hipMemcpyDeviceToHost, nullptr) == hipSuccess);
  const std::vector<unsigned char> expected{0, 1, 2, 5, 6, 7, 15, 16, 17, 20, 21, 22};
  CHECK(out == expected);
  params.dstPtr.pitch = kWidth - 1;
  CHECK(hipMemcpy3DAsync(&params, nullptr) == hipErrorInvalidPitchValue);
  CHECK(std::string(hipGetErrorName(hipGetLastError())) == "hipErrorInvalidPitchValue");
  CHECK(hipMemcpy2DAsync(out.data(), 1, device, kWidth, kWidth, 2, hipMemcpyDeviceToHost,
                         nullptr) == hipErrorInvalidPitchValue);
  static_cast<void>(hipGetLastError());
  REQUIRE(hipFree(device) == hipSuccess);
}

TEST_CASE("hip_compat: the HSA calls of the roc backend") {
  const char* text = nullptr;
  REQUIRE(hsa_status_string(HSA_STATUS_ERROR_NOT_INITIALIZED, &text) == HSA_STATUS_SUCCESS);
  CHECK(std::string(text).rfind("HSA_STATUS_ERROR_NOT_INITIALIZED: ", 0) == 0);
  char memory[16];
  CHECK(hsa_memory_register(memory, sizeof memory) == HSA_STATUS_ERROR_NOT_INITIALIZED);
  CHECK(hsa_shut_down() == HSA_STATUS_ERROR_NOT_INITIALIZED);
  REQUIRE(hsa_init() == HSA_STATUS_SUCCESS);
  CHECK(hsa_memory_register(memory, sizeof memory) == HSA_STATUS_SUCCESS);
  CHECK(hsa_memory_register(memory, 0) == HSA_STATUS_ERROR_INVALID_ARGUMENT);
  CHECK(hsa_memory_register(nullptr, 0) == HSA_STATUS_SUCCESS);  // NULL: no operation
  CHECK(hsa_memory_deregister(memory, sizeof memory) == HSA_STATUS_SUCCESS);
  int agents = 0;
  struct Count {
    static hsa_status_t agent(hsa_agent_t a, void* data) {
      hsa_device_type_t type{};
      if (const hsa_status_t s = hsa_agent_get_info(a, HSA_AGENT_INFO_DEVICE, &type);
          s != HSA_STATUS_SUCCESS) {
        return s;
      }
      if (type == HSA_DEVICE_TYPE_CPU) ++*static_cast<int*>(data);
      return HSA_STATUS_SUCCESS;
    }
  };
  CHECK(hsa_iterate_agents(&Count::agent, &agents) == HSA_STATUS_SUCCESS);
  CHECK(agents == 1);
  REQUIRE(hsa_shut_down() == HSA_STATUS_SUCCESS);
}

// gpu_runtime_fake_api: the logic that the CUDA and ROC backends share
// (backends/gpu_runtime/runtime_backend.hpp) run against a fake vendor runtime, so that it is
// exercised on every machine, without a GPU: device selection, the error discipline (function
// names, codes, messages, the last error cleared, OutOfMemory with free/total), NotReady handling,
// flag and copy-kind translation, the legacy default stream, host functions (run once, deleted,
// nothing leaked when enqueuing fails), and the choice of copy calls (1-D, 2-D, 3-D, the fallbacks
// for pitches the runtime rejects), which must copy exactly what layout::copy_host_strided copies.
// The fake runtime's "device memory" is host memory, and its copies run at once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include "../common/stderr_capture.hpp"
#include "backends/gpu_runtime/runtime_backend.hpp"

#include <devmem/backend.hpp>
#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

using devmem::CopyKind;
using devmem::HostAllocFlags;
using devmem::HostRegisterFlags;
using devmem::NativeStream;

struct FakeStream {
  int id = 0;
};
struct FakeEvent {
  bool done = true;
};

struct FakeState;
void run_pending_until(FakeState& state, const FakeEvent* event);

enum FakeError : int {
  kOk = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kUnloading = 4,  // the runtime has been torn down (process exit)
  kInvalidPitch = 12,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kNotReady = 600,
};

enum FakeKind : int { kH2H = 0, kH2D = 1, kD2H = 2, kD2D = 3, kDefault = 4 };

/// What the fake runtime was asked, and what it is told to answer.
struct FakeState {
  int device_count = 2;
  FakeError count_error = kOk;
  int current = 0;
  int last_error = kOk;  // like cudaGetLastError: the last failure until read
  int clears = 0;        // getLastError calls
  std::vector<std::string> calls;
  std::map<std::string, FakeError> fail;  // function -> error to return (once)
  bool unloaded = false;                  // torn down: every call fails with kUnloading
  FakeStream legacy{-1};
  std::vector<std::pair<void (*)(void*), void*>> host_functions;
  std::vector<unsigned> host_alloc_flags;
  std::vector<unsigned> host_register_flags;
  std::vector<unsigned> event_flags;  // eventCreateWithFlags
  std::vector<int> copy_kinds;
  std::vector<FakeStream*> copy_streams;
  std::size_t free_bytes = std::size_t{1} << 30;
  std::size_t total_bytes = std::size_t{2} << 30;
  // Deferred mode: asynchronous copies and event records run later, in enqueue order, when an event
  // or a stream is synchronized, like a device that is behind the host. Off: they run at once.
  bool deferred = false;
  std::deque<std::function<void()>> pending;
  std::map<const char*, std::size_t> page_locked;  // hostAlloc ranges: start -> bytes
  int live_host_allocations = 0;
  std::map<const char*, std::pair<std::size_t, int>>
      device_blocks;                       // malloc: start -> bytes, device
  std::set<const FakeStream*> capturing;   // streams being captured into a graph
  bool memory_pools = true;                // memoryPoolsSupported's answer
  std::vector<FakeStream*> async_streams;  // the stream of each mallocAsync / freeAsync
  // What the runtime has handed out and not yet taken back: a failed call must add nothing.
  int live_blocks = 0;  // device and page-locked host allocations
  int live_streams = 0;
  int live_events = 0;
  int launches = 0;  // strided-copy kernel launches
};

FakeState* g_state = nullptr;

struct FakeApi {
  using Error = FakeError;
  using Stream = FakeStream*;
  using Event = FakeEvent*;
  using MemcpyKind = FakeKind;
  struct DeviceProp {
    char name[256];
    std::size_t totalGlobalMem;
    std::size_t sharedMemPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int multiProcessorCount;
    int canMapHostMemory;
    int major;
    int minor;
  };
  using S = devmem::gpu_runtime::Status<FakeError>;

  static constexpr std::string_view kBackend = "fake";
  static constexpr Error kSuccess = kOk;
  static constexpr Error kErrorNotReady = kNotReady;
  static constexpr Error kErrorMemoryAllocation = kOutOfMemory;
  static constexpr Error kErrorInvalidPitchValue = kInvalidPitch;
  static constexpr Error kErrorRuntimeUnloading = kUnloading;
  static constexpr MemcpyKind kHostToHost = kH2H;
  static constexpr MemcpyKind kHostToDevice = kH2D;
  static constexpr MemcpyKind kDeviceToHost = kD2H;
  static constexpr MemcpyKind kDeviceToDevice = kD2D;
  static constexpr MemcpyKind kMemcpyDefault = kDefault;
  static constexpr unsigned kHostAllocMapped = 0x2;
  static constexpr unsigned kHostAllocPortable = 0x1;
  static constexpr unsigned kHostAllocWriteCombined = 0x4;
  static constexpr unsigned kHostAllocCoherent = 0x100;
  static constexpr unsigned kHostAllocNonCoherent = 0x200;
  static constexpr unsigned kHostRegisterMapped = 0x2;
  static constexpr unsigned kHostRegisterPortable = 0x1;
  static constexpr unsigned kHostRegisterReadOnly = 0x8;
  static constexpr unsigned kEventBlockingSync = 0x1;
  static constexpr unsigned kEventDisableTiming = 0x2;
  static constexpr std::size_t kMaxPitch = 1u << 20;

  /// Records the call; returns the error it was told to fail with (once), else success.
  static S call(const char* function, std::string args = {}) {
    g_state->calls.push_back(std::string(function) + "(" + args + ")");
    if (g_state->unloaded) {
      g_state->last_error = kUnloading;
      return {kUnloading, function};
    }
    const auto it = g_state->fail.find(function);
    if (it == g_state->fail.end()) return {kOk, function};
    const FakeError error = it->second;
    g_state->fail.erase(it);
    g_state->last_error = error;
    return {error, function};
  }

  static S getDeviceCount(int* count) {
    *count = g_state->count_error == kOk ? g_state->device_count : 0;
    S s = call("fakeGetDeviceCount");
    if (g_state->count_error != kOk) {
      g_state->last_error = g_state->count_error;
      s.code = g_state->count_error;
    }
    return s;
  }
  static S getDevice(int* device) {
    *device = g_state->current;
    return call("fakeGetDevice");
  }
  static S setDevice(int device) {
    if (device < 0 || device >= g_state->device_count) {
      g_state->last_error = kInvalidDevice;
      g_state->calls.push_back("fakeSetDevice(" + std::to_string(device) + ")");
      return {kInvalidDevice, "fakeSetDevice"};
    }
    S s = call("fakeSetDevice", std::to_string(device));
    if (s.code == kOk) g_state->current = device;
    return s;
  }
  static S getDeviceProperties(DeviceProp* prop, int device) {
    *prop = DeviceProp{};
    std::strcpy(prop->name, "Fake GPU");
    prop->totalGlobalMem = g_state->total_bytes;
    prop->sharedMemPerBlock = 65536;
    prop->warpSize = 64;
    prop->maxThreadsPerBlock = 1024;
    prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
    prop->maxThreadsDim[2] = 64;
    prop->maxGridSize[0] = 2147483647;
    prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
    prop->multiProcessorCount = 7;
    prop->canMapHostMemory = 1;
    prop->major = 9;
    prop->minor = device;
    return call("fakeGetDeviceProperties", std::to_string(device));
  }
  static S memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
    *free_bytes = g_state->free_bytes;
    *total_bytes = g_state->total_bytes;
    return call("fakeMemGetInfo");
  }
  static std::string architecture(const DeviceProp& prop) {
    return "fake_" + std::to_string(prop.major) + std::to_string(prop.minor);
  }
  static bool unifiedAddressing(const DeviceProp&) { return true; }
  static std::size_t sharedMemPerBlockOptin(const DeviceProp& prop) {
    return 2 * prop.sharedMemPerBlock;
  }

  static S malloc(void** ptr, std::size_t bytes) { return malloc_as(ptr, bytes, "fakeMalloc"); }
  static S free(void* ptr) { return free_as(ptr, "fakeFree"); }
  static S malloc_as(void** ptr, std::size_t bytes, const char* function) {
    S s = call(function, std::to_string(bytes));
    *ptr = s.code == kOk ? std::malloc(bytes) : nullptr;
    if (s.code == kOk) {
      ++g_state->live_blocks;
      g_state->device_blocks[static_cast<const char*>(*ptr)] = {bytes, g_state->current};
    }
    return s;
  }
  static S free_as(void* ptr, const char* function) {
    S s = call(function);
    if (s.code == kOk) {
      g_state->device_blocks.erase(static_cast<const char*>(ptr));
      std::free(ptr);
      --g_state->live_blocks;
    }
    return s;
  }
  static S mallocAsync(void** ptr, std::size_t bytes, Stream stream) {
    g_state->async_streams.push_back(stream);
    return malloc_as(ptr, bytes, "fakeMallocAsync");
  }
  static S freeAsync(void* ptr, Stream stream) {
    g_state->async_streams.push_back(stream);
    return free_as(ptr, "fakeFreeAsync");
  }
  static S memoryPoolsSupported(int, bool* supported) {
    *supported = g_state->memory_pools;
    return call("fakeDeviceGetAttribute");
  }
  static S pointerDevice(const void* ptr, int* device) {
    const auto* p = static_cast<const char*>(ptr);
    auto it = g_state->device_blocks.upper_bound(p);
    const bool found =
        it != g_state->device_blocks.begin() && (--it, p < it->first + it->second.first);
    *device = found ? it->second.second : -1;
    return call("fakePointerGetAttributes");
  }
  static S hostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
    g_state->host_alloc_flags.push_back(flags);
    S s = call("fakeHostAlloc", std::to_string(bytes));
    *ptr = s.code == kOk ? std::malloc(bytes) : nullptr;
    if (*ptr != nullptr) {
      g_state->page_locked.emplace(static_cast<const char*>(*ptr), bytes);
      ++g_state->live_host_allocations;
    }
    if (s.code == kOk) ++g_state->live_blocks;
    return s;
  }
  static S hostFree(void* ptr) {
    S s = call("fakeHostFree");
    if (s.code == kOk && ptr != nullptr) {
      if (g_state->page_locked.erase(static_cast<const char*>(ptr)) == 1) {
        --g_state->live_host_allocations;
      }
      std::free(ptr);
      --g_state->live_blocks;
    }
    return s;
  }
  static S isPageable(const void* ptr, bool* pageable) {
    const auto* p = static_cast<const char*>(ptr);
    auto it = g_state->page_locked.upper_bound(p);
    const bool locked = it != g_state->page_locked.begin() && (--it, p < it->first + it->second);
    *pageable = !locked;
    return call("fakePointerGetAttributes");
  }
  static S hostRegister(void*, std::size_t bytes, unsigned flags) {
    g_state->host_register_flags.push_back(flags);
    return call("fakeHostRegister", std::to_string(bytes));
  }
  static S hostUnregister(void*) { return call("fakeHostUnregister"); }
  static S hostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned) {
    *device_ptr = host_ptr;
    return call("fakeHostGetDevicePointer");
  }

  static Stream defaultStream() noexcept { return &g_state->legacy; }
  static S streamCreate(Stream* stream) {
    S s = call("fakeStreamCreate");
    *stream = s.code == kOk ? new FakeStream{static_cast<int>(g_state->calls.size())} : nullptr;
    if (s.code == kOk) ++g_state->live_streams;
    return s;
  }
  static S streamDestroy(Stream stream) {
    S s = call("fakeStreamDestroy");
    if (s.code == kOk) {
      delete stream;
      --g_state->live_streams;
    }
    return s;
  }
  static S streamSynchronize(Stream) {
    S s = call("fakeStreamSynchronize");
    if (s.code == kOk) run_pending_until(*g_state, nullptr);
    return s;
  }
  static S streamQuery(Stream) { return call("fakeStreamQuery"); }
  static S streamWaitEvent(Stream, Event, unsigned) { return call("fakeStreamWaitEvent"); }
  static S eventCreateWithFlags(Event* event, unsigned flags) {
    g_state->event_flags.push_back(flags);
    S s = call("fakeEventCreateWithFlags");
    *event = s.code == kOk ? new FakeEvent{} : nullptr;
    if (s.code == kOk) ++g_state->live_events;
    return s;
  }
  static S eventCreate(Event* event) {
    S s = call("fakeEventCreate");
    *event = s.code == kOk ? new FakeEvent{} : nullptr;
    if (s.code == kOk) ++g_state->live_events;
    return s;
  }
  static S eventDestroy(Event event) {
    S s = call("fakeEventDestroy");
    if (s.code == kOk) {
      delete event;
      --g_state->live_events;
    }
    return s;
  }
  static S eventRecord(Event event, Stream) {
    S s = call("fakeEventRecord");
    if (s.code == kOk && g_state->deferred) {
      event->done = false;
      g_state->pending.emplace_back([event] { event->done = true; });
    }
    return s;
  }
  static S eventSynchronize(Event event) {
    S s = call("fakeEventSynchronize");
    if (s.code == kOk) run_pending_until(*g_state, event);
    return s;
  }
  static S eventQuery(Event event) {
    S s = call("fakeEventQuery");
    if (s.code == kOk && !event->done) s.code = kNotReady;
    return s;
  }
  static S streamIsCapturing(Stream stream, bool* capturing) {
    *capturing = g_state->capturing.contains(stream);
    return call("fakeStreamIsCapturing");
  }
  static S eventElapsedTime(float* ms, Event, Event) {
    *ms = 1.5f;
    return call("fakeEventElapsedTime");
  }
  template <void (*Fn)(void*)>
  static S launchHostFunc(Stream, void* user) {
    S s = call("fakeLaunchHostFunc");
    if (s.code == kOk) g_state->host_functions.emplace_back(Fn, user);
    return s;
  }

  static S memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                       Stream stream) {
    record_copy(kind, stream);
    S s = call("fakeMemcpyAsync", std::to_string(bytes));
    if (s.code != kOk) return s;
    if (g_state->deferred) {
      g_state->pending.emplace_back([dst, src, bytes] { std::memcpy(dst, src, bytes); });
    } else {
      std::memcpy(dst, src, bytes);
    }
    return s;
  }
  static S memcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, MemcpyKind kind, Stream stream) {
    record_copy(kind, stream);
    S s = call("fakeMemcpy2DAsync", std::to_string(width) + "x" + std::to_string(height));
    if (s.code != kOk) return s;
    if (dst_pitch < width || src_pitch < width) {
      g_state->last_error = kInvalidValue;
      return {kInvalidValue, s.function};
    }
    for (std::size_t r = 0; r < height; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                  static_cast<const char*>(src) + r * src_pitch, width);
    }
    return s;
  }
  static S memcpy3DAsync(void* dst, std::size_t dst_pitch, std::size_t dst_height, const void* src,
                         std::size_t src_pitch, std::size_t src_height, std::size_t width,
                         std::size_t height, std::size_t depth, MemcpyKind kind, Stream stream) {
    record_copy(kind, stream);
    S s = call("fakeMemcpy3DAsync",
               std::to_string(width) + "x" + std::to_string(height) + "x" + std::to_string(depth));
    if (s.code != kOk) return s;
    if (dst_pitch < width || src_pitch < width || dst_height < height || src_height < height) {
      g_state->last_error = kInvalidValue;
      return {kInvalidValue, s.function};
    }
    for (std::size_t z = 0; z < depth; ++z) {
      for (std::size_t r = 0; r < height; ++r) {
        std::memcpy(static_cast<char*>(dst) + (z * dst_height + r) * dst_pitch,
                    static_cast<const char*>(src) + (z * src_height + r) * src_pitch, width);
      }
    }
    return s;
  }
  /// libdevmem's strided-copy kernel, run on the host: every unit where the kernel would put it.
  /// Addresses or strides that are not multiples of the unit fail like a misaligned access.
  static S launchCopyStrided(const devmem::gpu_runtime::StridedCopyArgs& args, Stream stream) {
    record_copy(kDefault, stream);
    S s =
        call("fakeLaunchCopyStrided", std::to_string(args.count) + "x" + std::to_string(args.unit) +
                                          "B rank " + std::to_string(args.rank));
    if (s.code != kOk) return s;
    const auto unit = static_cast<std::uintptr_t>(args.unit);
    bool aligned = args.rank >= 1 && args.rank <= devmem::gpu_runtime::kStridedCopyMaxRank &&
                   (reinterpret_cast<std::uintptr_t>(args.dst) % unit) == 0 &&
                   (reinterpret_cast<std::uintptr_t>(args.src) % unit) == 0;
    std::int64_t count = 1;
    for (int k = 0; aligned && k < args.rank; ++k) {
      aligned = args.src_strides[k] % args.unit == 0 && args.dst_strides[k] % args.unit == 0;
      count *= args.shape[k];
    }
    if (!aligned || count != args.count) {
      g_state->last_error = kInvalidValue;
      return {kInvalidValue, s.function};
    }
    const auto run = [args] {
      auto* const dst = static_cast<char*>(args.dst);
      const auto* const src = static_cast<const char*>(args.src);
      for (std::int64_t i = 0; i < args.count; ++i) {
        std::int64_t rest = i;
        std::int64_t so = 0;
        std::int64_t d = 0;
        for (int k = args.rank - 1; k >= 0; --k) {
          const std::int64_t c = rest % args.shape[k];
          rest /= args.shape[k];
          so += c * args.src_strides[k];
          d += c * args.dst_strides[k];
        }
        std::memcpy(dst + d, src + so, static_cast<std::size_t>(args.unit));
      }
    };
    ++g_state->launches;
    if (g_state->deferred) {
      g_state->pending.emplace_back(run);
    } else {
      run();
    }
    return s;
  }
  static S memsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
    record_copy(kDefault, stream);
    S s = call("fakeMemsetAsync", std::to_string(bytes));
    if (s.code == kOk) std::memset(dst, value, bytes);
    return s;
  }

  static Error getLastError() noexcept {
    ++g_state->clears;
    const auto error = static_cast<Error>(g_state->last_error);
    g_state->last_error = kOk;
    return error;
  }
  static const char* errorName(Error code) noexcept {
    switch (code) {
      case kOk:
        return "fakeSuccess";
      case kInvalidValue:
        return "fakeErrorInvalidValue";
      case kOutOfMemory:
        return "fakeErrorMemoryAllocation";
      case kUnloading:
        return "fakeErrorRuntimeUnloading";
      case kInvalidPitch:
        return "fakeErrorInvalidPitchValue";
      case kNoDevice:
        return "fakeErrorNoDevice";
      case kInvalidDevice:
        return "fakeErrorInvalidDevice";
      case kNotReady:
        return "fakeErrorNotReady";
    }
    return nullptr;
  }
  static const char* errorString(Error code) noexcept {
    switch (code) {
      case kInvalidValue:
        return "invalid argument";
      case kOutOfMemory:
        return "out of memory";
      case kNoDevice:
        return "no device found";
      case kInvalidDevice:
        return "invalid device ordinal";
      case kNotReady:
        return "fakeErrorNotReady";  // like HIP 5.2: the name again
      default:
        return "";
    }
  }

 private:
  static void record_copy(MemcpyKind kind, Stream stream) {
    g_state->copy_kinds.push_back(kind);
    g_state->copy_streams.push_back(stream);
  }
};

/// Runs deferred work in order until `event` has completed (all of it for nullptr).
void run_pending_until(FakeState& state, const FakeEvent* event) {
  while (!state.pending.empty() && (event == nullptr || !event->done)) {
    const std::function<void()> next = std::move(state.pending.front());
    state.pending.pop_front();
    next();
  }
}

using FakeBackend = devmem::gpu_runtime::RuntimeBackend<FakeApi>;

/// A fresh fake runtime for one test.
struct Fixture {
  /// Installs the fake runtime's state for the fixture's lifetime, the backend's destructor (which
  /// frees the temporaries it keeps) included.
  struct Installed {
    explicit Installed(FakeState* state) { g_state = state; }
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;
    ~Installed() { g_state = nullptr; }
  };
  FakeState state;
  Installed installed{&state};
  FakeBackend backend;
  bool called(const std::string& prefix) const {
    return std::any_of(state.calls.begin(), state.calls.end(),
                       [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  }
  long count(const std::string& prefix) const {
    return std::count_if(state.calls.begin(), state.calls.end(),
                         [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  }
};

}  // namespace

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

TEST_CASE("gpu_runtime: the device is made current only when it differs") {
  Fixture f;
  CHECK(f.backend.device_count() == 2);
  CHECK(f.backend.no_device_reason().empty());
  void* a = f.backend.allocate(0, 64);
  CHECK_FALSE(f.called("fakeSetDevice"));
  void* b = f.backend.allocate(1, 64);
  CHECK(f.count("fakeSetDevice(1)") == 1);
  f.backend.deallocate(1, b);
  CHECK(f.count("fakeSetDevice") == 1);
  f.backend.deallocate(0, a);
  CHECK(f.count("fakeSetDevice(0)") == 1);
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

namespace {

/// A side of a random copy: a strided view into a padded buffer, with a random axis order in
/// memory and possibly reversed axes.
struct Side {
  std::vector<unsigned char> buffer;
  std::int64_t origin = 0;  // byte offset of element (0, ..., 0)
  devmem::Strides strides;
};

Side make_side(std::mt19937& rng, const devmem::Shape& shape, std::int64_t itemsize,
               bool allow_negative) {
  const std::size_t n = shape.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> pad(0, 2);
  std::uniform_int_distribution<int> coin(0, 3);
  Side side;
  side.strides.assign(n, 0);
  std::int64_t stride = itemsize;
  for (std::size_t k = n; k-- > 0;) {  // order.back() varies fastest
    const std::size_t axis = order[k];
    side.strides[axis] = stride;
    stride *= shape[axis] + pad(rng);
  }
  side.buffer.resize(static_cast<std::size_t>(stride));
  for (std::size_t axis = 0; axis < n; ++axis) {
    if (allow_negative && coin(rng) == 0) {
      side.origin += side.strides[axis] * (shape[axis] - 1);
      side.strides[axis] = -side.strides[axis];
    }
  }
  return side;
}

}  // namespace

TEST_CASE("gpu_runtime: strided copies copy exactly what copy_host_strided copies") {
  std::mt19937 rng(20240613);
  std::uniform_int_distribution<int> dims(1, 4);
  std::uniform_int_distribution<int> extent(1, 5);
  std::uniform_int_distribution<int> item(0, 2);
  int used_3d = 0;
  int used_2d = 0;
  int used_kernel = 0;
  const CopyKind kinds[] = {CopyKind::HostToDevice, CopyKind::DeviceToHost,
                            CopyKind::DeviceToDevice, CopyKind::HostToHost};
  for (int trial = 0; trial < 3000; ++trial) {
    Fixture f;
    devmem::Shape shape(static_cast<std::size_t>(dims(rng)));
    for (auto& e : shape) e = extent(rng);
    const std::int64_t itemsize = std::int64_t{1} << (2 * item(rng));
    Side src = make_side(rng, shape, itemsize, true);
    Side dst = make_side(rng, shape, itemsize, trial % 2 == 0);
    for (std::size_t i = 0; i < src.buffer.size(); ++i) {
      src.buffer[i] = static_cast<unsigned char>(rng());
    }
    for (auto& byte : dst.buffer) byte = 0xEE;
    Side expected = dst;
    devmem::layout::CopyPlan plan;
    try {
      plan = devmem::layout::plan_copy(shape, src.strides, dst.strides, itemsize);
    } catch (const devmem::InvalidArgument&) {
      continue;  // e.g. a zero-stride destination; not what this test is about
    }
    devmem::layout::copy_host_strided(plan, expected.buffer.data() + expected.origin,
                                      src.buffer.data() + src.origin);
    // Every kind: the fake's device memory is host memory, and each kind takes its own way
    // through the bounded path.
    const CopyKind kind = kinds[trial % 4];
    f.backend.copy_strided(0, dst.buffer.data() + dst.origin, src.buffer.data() + src.origin, plan,
                           kind, nullptr);
    INFO("trial " << trial << ", " << devmem::to_string(kind));
    REQUIRE(dst.buffer == expected.buffer);
    used_3d += f.called("fakeMemcpy3DAsync") ? 1 : 0;
    used_2d += f.called("fakeMemcpy2DAsync") ? 1 : 0;
    used_kernel += f.state.launches;
    REQUIRE(f.state.launches <= 1);
  }
  CHECK(used_3d > 100);
  CHECK(used_2d > 100);
  CHECK(used_kernel > 100);
}

TEST_CASE("gpu_runtime: a sub-block of a 3-D array is one 3-D copy") {
  Fixture f;
  // a[:, :5, :5] of a C-contiguous (4, 6, 8) float64 array into a dense (4, 5, 5) array: rows of
  // 40 bytes, 5 of them per slice, slices 6 source rows and 5 destination rows apart.
  const devmem::Shape shape{4, 5, 5};
  const auto plan =
      devmem::layout::plan_copy(shape, devmem::Strides{384, 64, 8}, devmem::Strides{200, 40, 8}, 8);
  std::vector<double> src(4 * 6 * 8);
  std::iota(src.begin(), src.end(), 0.0);
  std::vector<double> dst(4 * 5 * 5, -1.0);
  const auto check_copied = [&] {
    for (std::size_t i = 0; i < 4; ++i) {
      for (std::size_t j = 0; j < 5; ++j) {
        for (std::size_t k = 0; k < 5; ++k) {
          REQUIRE(dst[(i * 5 + j) * 5 + k] == src[(i * 6 + j) * 8 + k]);
        }
      }
    }
  };
  f.backend.copy_strided(0, dst.data(), src.data(), plan, CopyKind::DeviceToDevice, nullptr);
  CHECK(f.count("fakeMemcpy3DAsync(40x5x4)") == 1);
  CHECK(f.count("fakeMemcpy") == 1);
  check_copied();
  SECTION("a pitch the runtime rejects falls back to 2-D copies, then to rows") {
    Fixture g;
    std::fill(dst.begin(), dst.end(), -1.0);
    g.state.fail["fakeMemcpy3DAsync"] = kInvalidPitch;
    g.state.fail["fakeMemcpy2DAsync"] = kInvalidPitch;
    g.backend.copy_strided(0, dst.data(), src.data(), plan, CopyKind::DeviceToDevice, nullptr);
    CHECK(g.count("fakeMemcpy3DAsync") == 1);
    CHECK(g.count("fakeMemcpy2DAsync") == 4);  // one per slice, the first rejected
    CHECK(g.count("fakeMemcpyAsync") == 5);    // the rejected slice, row by row
    CHECK(g.state.last_error == kOk);
    check_copied();
  }
}

TEST_CASE("gpu_runtime: pitches beyond the runtime's limit are copied row by row") {
  Fixture f;
  const std::size_t pitch = FakeApi::kMaxPitch + 16;
  std::vector<char> src(pitch * 2 + 8, 's');
  std::vector<char> dst(pitch * 2 + 8, 'd');
  f.backend.copy_2d(0, dst.data(), pitch, src.data(), pitch, 8, 3, CopyKind::HostToDevice, nullptr);
  CHECK_FALSE(f.called("fakeMemcpy2DAsync"));
  CHECK(f.count("fakeMemcpyAsync") == 3);
  CHECK(dst[pitch * 2 + 7] == 's');
  CHECK(dst[8] == 'd');
  SECTION("a single row is a 1-D copy whatever its pitch") {
    f.backend.copy_2d(0, dst.data(), 0, src.data(), 0, 8, 1, CopyKind::HostToDevice, nullptr);
    CHECK(f.count("fakeMemcpyAsync") == 4);
  }
}

// ---- Pinned staging of large pageable copies ---------------------------------------------------

namespace {

/// A fake runtime whose device runs behind the host (deferred mode), with staging options small
/// enough to exercise many chunks; the backend can be destroyed before the checks for leaks.
struct StagingFixture {
  FakeState state;
  std::unique_ptr<FakeBackend> backend;  // a pointer: the tests destroy it before their checks
  static constexpr std::size_t kThreshold = 100;
  static constexpr std::size_t kChunk = 48;
  StagingFixture() {
    g_state = &state;
    state.deferred = true;
    backend = std::make_unique<FakeBackend>();
    backend->set_staging_options({kThreshold, kChunk});
  }
  ~StagingFixture() {
    backend.reset();
    g_state = nullptr;
  }
  long count(const std::string& prefix) const {
    return std::count_if(state.calls.begin(), state.calls.end(),
                         [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  }
};

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> out(n);
  for (auto& b : out) b = static_cast<unsigned char>(rng());
  return out;
}

}  // namespace

// ---- Bounded strided copies (docs/arrays-and-copies.md#strided-copies)
// ---------------------------------------------------

namespace {

/// A layout of a strided copy on both sides, over buffers of the given sizes.
struct StridedCase {
  const char* name;
  devmem::Shape shape;
  devmem::Strides src_strides;
  devmem::Strides dst_strides;
  std::int64_t src_bytes;
  std::int64_t dst_bytes;
  std::int64_t src_origin = 0;  // byte offset of element (0, ..., 0) in its buffer
  std::int64_t dst_origin = 0;
};

constexpr std::int64_t kN = 32;  // 32^4 float32: 4 MiB, enough to make per-element calls absurd
constexpr std::int64_t kItem = 4;

devmem::Strides c_strides(const devmem::Shape& shape) {
  return devmem::layout::dense_strides(shape, kItem, devmem::Order::C);
}

/// The five layouts of the issue, each of kN^4 float32 elements.
std::vector<StridedCase> strided_cases() {
  const devmem::Shape shape{kN, kN, kN, kN};
  const devmem::Strides c = c_strides(shape);  // (131072, 4096, 128, 4)
  const std::int64_t bytes = kN * kN * kN * kN * kItem;
  std::vector<StridedCase> cases;
  // a.T of a C-contiguous array, into a C-contiguous one.
  cases.push_back({"transpose", shape, {c[3], c[2], c[1], c[0]}, c, bytes, bytes});
  // a[..., ::-1]: element 0 of each row is the row's last.
  cases.push_back({"reversed innermost axis",
                   shape,
                   {c[0], c[1], c[2], -c[3]},
                   c,
                   bytes,
                   bytes,
                   (kN - 1) * kItem,
                   0});
  // A (kN, kN) array broadcast to kN^4 (stride-0 leading axes).
  cases.push_back(
      {"broadcast source", shape, {0, 0, kN * kItem, kItem}, c, kN * kN * kItem, bytes});
  // a.transpose(2, 0, 3, 1).
  cases.push_back({"4-d permute", shape, {c[2], c[0], c[3], c[1]}, c, bytes, bytes});
  // Into b[..., ::2] of a C-contiguous (kN, kN, kN, 2 kN) array: every other element.
  const devmem::Strides wide = c_strides({kN, kN, kN, 2 * kN});
  cases.push_back({"destination with gaps",
                   shape,
                   c,
                   {wide[0], wide[1], wide[2], 2 * kItem},
                   bytes,
                   2 * bytes});
  return cases;
}

/// A backend over a fresh fake runtime, destroyed before the leak checks.
struct BoundedFixture {
  FakeState state;
  std::unique_ptr<FakeBackend> backend;
  BoundedFixture() {
    g_state = &state;
    backend = std::make_unique<FakeBackend>();
  }
  BoundedFixture(const BoundedFixture&) = delete;
  BoundedFixture& operator=(const BoundedFixture&) = delete;
  ~BoundedFixture() {
    backend.reset();
    g_state = nullptr;
  }
  long count(const std::string& prefix) const {
    return std::count_if(state.calls.begin(), state.calls.end(),
                         [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  }
};

/// The index of the first byte where `a` and `b` differ, -1 when they are equal (Catch would
/// print megabytes for a failed comparison of the vectors themselves).
long first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return 0;
  const auto at = std::mismatch(a.begin(), a.end(), b.begin());
  return at.first == a.end() ? -1L : static_cast<long>(at.first - a.begin());
}

/// Calls of one copy: the vendor calls other than kernel launches, and the launches.
struct CallCount {
  long vendor = 0;
  long launches = 0;
};

/// Runs one copy of `c` and checks its bytes against copy_host_strided; returns its calls.
CallCount run_case(BoundedFixture& f, const StridedCase& c, CopyKind kind, NativeStream stream,
                   unsigned seed) {
  const std::vector<unsigned char> src = random_bytes(static_cast<std::size_t>(c.src_bytes), seed);
  std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0xEE);
  std::vector<unsigned char> expected = dst;
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  devmem::layout::copy_host_strided(plan, expected.data() + c.dst_origin,
                                    src.data() + c.src_origin);
  const std::size_t calls_before = f.state.calls.size();
  const int launches_before = f.state.launches;
  f.backend->copy_strided(0, dst.data() + c.dst_origin, src.data() + c.src_origin, plan, kind,
                          stream);
  const long calls = static_cast<long>(f.state.calls.size() - calls_before);
  const long launches = f.state.launches - launches_before;
  // Copies from or to the host are complete on return (a deferred fake would show it otherwise);
  // a device-to-device copy is ordered on the stream like any kernel.
  if (kind == CopyKind::DeviceToDevice) f.backend->synchronize_stream(0, stream);
  CHECK(first_difference(dst, expected) == -1);
  return {calls - launches, launches};
}

}  // namespace

TEST_CASE("gpu_runtime: any strided copy takes at most 8 vendor calls and one kernel launch") {
  for (const StridedCase& c : strided_cases()) {
    for (const CopyKind kind :
         {CopyKind::HostToDevice, CopyKind::DeviceToHost, CopyKind::DeviceToDevice}) {
      for (const bool deferred : {false, true}) {
        INFO(c.name << ", " << devmem::to_string(kind) << (deferred ? ", deferred" : ""));
        BoundedFixture f;
        f.state.deferred = deferred;  // the device behind the host: completion is really waited
        const NativeStream stream = f.backend->create_stream(0);
        // Cold (temporaries allocated), then warm (temporaries reused).
        for (const bool warm : {false, true}) {
          const CallCount calls = run_case(f, c, kind, stream, warm ? 2u : 1u);
          INFO((warm ? "warm: " : "cold: ")
               << calls.vendor << " vendor calls, " << calls.launches << " launches");
          CHECK(calls.vendor <= 8);
          CHECK(calls.launches <= 1);
          // Each layout is kN^4 elements: one call per element, row or block would be thousands.
          if (kind == CopyKind::DeviceToDevice) CHECK(calls.launches == 1);
        }
        CHECK(f.count("fakeMemcpy2DAsync") == 0);
        CHECK(f.count("fakeMemcpy3DAsync") == 0);
        if (kind == CopyKind::DeviceToDevice) {
          // The widest unit the alignment allows: whole float32 elements where elements move
          // one by one, 16 bytes where rows of 32 of them are contiguous on both sides.
          const bool rows = std::string_view(c.name) == "broadcast source";
          CHECK(f.count(rows ? "fakeLaunchCopyStrided(262144x16B"
                             : "fakeLaunchCopyStrided(1048576x4B") == 2);
        }
        f.backend->synchronize_stream(0, stream);
        f.backend->destroy_stream(0, stream);
        f.backend.reset();
        CHECK(f.state.live_blocks == 0);  // temporaries, cached ones included, were freed
        CHECK(f.state.pending.empty());
      }
    }
  }
}

TEST_CASE("gpu_runtime: a few long rows keep the vendor's copies") {
  BoundedFixture f;
  // a[:, :100] of a C-contiguous (8, 128) float64 array into a dense (8, 100): one 2-D copy.
  std::vector<double> src(8 * 128);
  std::iota(src.begin(), src.end(), 0.0);
  std::vector<double> dst(8 * 100, -1.0);
  const auto plan = devmem::layout::plan_copy(devmem::Shape{8, 100}, devmem::Strides{1024, 8},
                                              devmem::Strides{800, 8}, 8);
  f.backend->copy_strided(0, dst.data(), src.data(), plan, CopyKind::HostToDevice, nullptr);
  CHECK(f.count("fakeMemcpy2DAsync(800x8)") == 1);
  CHECK(f.state.launches == 0);
  CHECK(dst[799] == src[7 * 128 + 99]);
}

TEST_CASE("gpu_runtime: bounded strided copies: failures propagate, leak nothing") {
  const StridedCase c = strided_cases()[0];  // the transpose
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  const std::vector<unsigned char> src = random_bytes(static_cast<std::size_t>(c.src_bytes), 9);
  std::vector<unsigned char> expected(static_cast<std::size_t>(c.dst_bytes), 0);
  devmem::layout::copy_host_strided(plan, expected.data(), src.data());
  int failures = 0;
  for (const CopyKind kind : {CopyKind::HostToDevice, CopyKind::DeviceToHost,
                              CopyKind::DeviceToDevice, CopyKind::HostToHost}) {
    for (const char* function : {"fakeHostAlloc", "fakeMalloc", "fakeStreamSynchronize",
                                 "fakeMemcpyAsync", "fakeLaunchCopyStrided"}) {
      INFO(devmem::to_string(kind) << ", " << function);
      BoundedFixture f;
      f.state.deferred = true;
      std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0);
      f.state.fail[function] = kInvalidValue;
      bool threw = false;
      try {
        f.backend->copy_strided(0, dst.data(), src.data(), plan, kind, nullptr);
      } catch (const devmem::BackendError& e) {
        threw = true;
        CHECK(e.function() == function);
        CHECK(f.state.last_error == kOk);
      }
      // A call this kind makes failed and was reported; one it does not make was never reached.
      CHECK(threw == f.state.fail.empty());
      failures += threw ? 1 : 0;
      f.state.fail.clear();
      f.backend->synchronize_stream(0, nullptr);
      // The next copy works, whatever the failure left behind.
      std::fill(dst.begin(), dst.end(), 0);
      f.backend->copy_strided(0, dst.data(), src.data(), plan, kind, nullptr);
      f.backend->synchronize_stream(0, nullptr);
      CHECK(first_difference(dst, expected) == -1);
      f.backend.reset();
      CHECK(f.state.live_blocks == 0);
      CHECK(f.state.pending.empty());
    }
  }
  // H2D (into a dense destination): staging, synchronize, copy; D2H (into a dense destination):
  // temporary, launch, copy, synchronize; D2D: launch; H2H: synchronize.
  CHECK(failures == 3 + 4 + 1 + 1);
}

TEST_CASE("gpu_runtime: bounded strided copies without memory for temporaries use vendor copies") {
  const StridedCase c = strided_cases()[0];
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  const std::vector<unsigned char> src = random_bytes(static_cast<std::size_t>(c.src_bytes), 11);
  std::vector<unsigned char> expected(static_cast<std::size_t>(c.dst_bytes), 0);
  devmem::layout::copy_host_strided(plan, expected.data(), src.data());
  for (const char* function : {"fakeHostAlloc", "fakeMalloc"}) {
    for (const CopyKind kind : {CopyKind::HostToDevice, CopyKind::DeviceToHost}) {
      INFO(function << ", " << devmem::to_string(kind));
      BoundedFixture f;
      f.state.fail[function] = kOutOfMemory;
      std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0);
      f.backend->copy_strided(0, dst.data(), src.data(), plan, kind, nullptr);
      CHECK(first_difference(dst, expected) == -1);
      CHECK(f.state.last_error == kOk);
      f.backend.reset();
      CHECK(f.state.live_blocks == 0);
    }
  }
}

TEST_CASE("gpu_runtime: a bounded H2D copy reads its source after earlier work on the stream") {
  BoundedFixture f;
  f.state.deferred = true;
  const StridedCase c = strided_cases()[3];  // the 4-d permute
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  const std::vector<unsigned char> device_src =
      random_bytes(static_cast<std::size_t>(c.src_bytes), 13);
  std::vector<unsigned char> host(static_cast<std::size_t>(c.src_bytes), 0);
  std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0);
  std::vector<unsigned char> expected = dst;
  devmem::layout::copy_host_strided(plan, expected.data(), device_src.data());
  const NativeStream s = f.backend->create_stream(0);
  // Enqueued, not yet run: the strided copy must see what it writes into `host`.
  f.backend->copy(0, host.data(), device_src.data(), host.size(), CopyKind::DeviceToHost, s);
  f.backend->copy_strided(0, dst.data(), host.data(), plan, CopyKind::HostToDevice, s);
  f.backend->synchronize_stream(0, s);
  CHECK(first_difference(dst, expected) == -1);
  f.backend->destroy_stream(0, s);
}

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

TEST_CASE("gpu_runtime: large pageable copies are staged chunk by chunk, exactly") {
  StagingFixture f;
  const NativeStream s = f.backend->create_stream(0);
  void* device = f.backend->allocate(0, 8192);
  // Sizes around the threshold and chunk multiples; misaligned starts on both sides.
  for (const std::size_t bytes : {std::size_t{100}, std::size_t{144}, std::size_t{145},
                                  std::size_t{1000}, std::size_t{4099}}) {
    for (const std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
      CAPTURE(bytes, offset);
      auto* const dev = static_cast<unsigned char*>(device) + offset;
      const std::vector<unsigned char> original =
          random_bytes(bytes + offset, static_cast<unsigned>(7 + bytes));
      std::vector<unsigned char> source = original;
      const long copies_before = f.count("fakeMemcpyAsync");

      f.backend->copy(0, dev, source.data() + offset, bytes, CopyKind::HostToDevice, s);
      // The source has been read when the call returns, even though the DMAs have not run yet:
      // overwriting it now must not change what arrives.
      CHECK_FALSE(f.state.pending.empty());
      std::fill(source.begin(), source.end(), 0xEE);
      f.backend->synchronize_stream(0, s);
      CHECK(std::equal(dev, dev + bytes, original.begin() + static_cast<std::ptrdiff_t>(offset)));
      const auto chunks =
          static_cast<long>((bytes + StagingFixture::kChunk - 1) / StagingFixture::kChunk);
      CHECK(f.count("fakeMemcpyAsync") - copies_before == chunks);

      // D2H into pageable memory is complete when the call returns, without a synchronize.
      std::vector<unsigned char> back(bytes + offset, 0);
      f.backend->copy(0, back.data() + offset, dev, bytes, CopyKind::DeviceToHost, s);
      CHECK(std::equal(back.begin() + static_cast<std::ptrdiff_t>(offset), back.end(),
                       original.begin() + static_cast<std::ptrdiff_t>(offset)));
      CHECK(f.count("fakeMemcpyAsync") - copies_before == 2 * chunks);
    }
  }
  // One pipeline (two page-locked buffers and two events) served every copy.
  CHECK(f.count("fakeHostAlloc") == 2);
  CHECK(f.count("fakeEventCreate") == 2);
  // Staging events neither time nor spin: DisableTiming | BlockingSync.
  CHECK(f.state.event_flags ==
        std::vector<unsigned>{FakeApi::kEventDisableTiming | FakeApi::kEventBlockingSync,
                              FakeApi::kEventDisableTiming | FakeApi::kEventBlockingSync});
  f.backend->deallocate(0, device);
  f.backend->destroy_stream(0, s);
  f.backend.reset();
  CHECK(f.state.live_host_allocations == 0);
  CHECK(f.state.live_events == 0);
}

TEST_CASE("gpu_runtime: H2D staging waits for earlier work on the stream that writes the source") {
  StagingFixture f;
  const NativeStream s = f.backend->create_stream(0);
  std::vector<unsigned char> device_a = random_bytes(500, 1);
  std::vector<unsigned char> device_b(500, 0);
  std::vector<unsigned char> host(500, 0);
  // Below the threshold: an ordinary (deferred) copy that fills `host` later...
  f.backend->copy(0, host.data(), device_a.data(), 50, CopyKind::DeviceToHost, s);
  // ...but the staged copy of all of `host` must see those 50 bytes.
  std::copy(device_a.begin() + 50, device_a.end(), host.begin() + 50);
  f.backend->copy(0, device_b.data(), host.data(), 500, CopyKind::HostToDevice, s);
  f.backend->synchronize_stream(0, s);
  CHECK(device_b == device_a);
  f.backend->destroy_stream(0, s);
}

TEST_CASE("gpu_runtime: small, pinned and device-to-device copies are not staged") {
  StagingFixture f;
  std::vector<unsigned char> a = random_bytes(400, 3);
  std::vector<unsigned char> b(400, 0);
  f.backend->copy(0, b.data(), a.data(), 99, CopyKind::HostToDevice, nullptr);  // below threshold
  void* pinned = f.backend->host_allocate(0, 400, HostAllocFlags::None);
  std::memcpy(pinned, a.data(), 400);
  f.backend->copy(0, b.data(), pinned, 400, CopyKind::HostToDevice, nullptr);
  f.backend->copy(0, b.data(), a.data(), 400, CopyKind::DeviceToDevice, nullptr);
  f.backend->synchronize_stream(0, nullptr);
  CHECK(b == a);
  CHECK(f.count("fakeMemcpyAsync") == 3);           // one call each
  CHECK(f.count("fakePointerGetAttributes") == 1);  // only the large host-device copy is looked up
  CHECK(f.count("fakeEventCreate") == 0);
  f.backend->host_deallocate(0, pinned);
}

TEST_CASE("gpu_runtime: staging errors propagate, leak nothing, and the next copy works") {
  StagingFixture f;
  const NativeStream s = f.backend->create_stream(0);
  const std::vector<unsigned char> source = random_bytes(1000, 5);
  std::vector<unsigned char> device(1000, 0);

  SECTION("a failing DMA") {
    f.state.fail["fakeMemcpyAsync"] = kInvalidValue;
    REQUIRE_THROWS_MATCHES(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s),
        devmem::BackendError,
        Catch::Matchers::Predicate<devmem::BackendError>(
            [](const devmem::BackendError& e) { return e.function() == "fakeMemcpyAsync"; },
            "names the vendor call"));
    CHECK(f.state.last_error == kOk);
  }
  SECTION("a failing event record") {
    f.state.fail["fakeEventRecord"] = kInvalidValue;
    REQUIRE_THROWS_AS(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::DeviceToHost, s),
        devmem::BackendError);
  }
  SECTION("a failing pointer lookup") {
    f.state.fail["fakePointerGetAttributes"] = kInvalidValue;
    REQUIRE_THROWS_AS(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s),
        devmem::BackendError);
  }
  SECTION("a failing staging event creation") {
    f.state.fail["fakeEventCreateWithFlags"] = kInvalidValue;
    REQUIRE_THROWS_MATCHES(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s),
        devmem::BackendError,
        Catch::Matchers::Predicate<devmem::BackendError>(
            [](const devmem::BackendError& e) {
              return e.function() == "fakeEventCreateWithFlags";
            },
            "names the vendor call"));
    CHECK(f.state.last_error == kOk);
  }
  SECTION("no page-locked memory for staging: the copy goes unstaged") {
    f.state.fail["fakeHostAlloc"] = kOutOfMemory;
    f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s);
    CHECK(f.count("fakeMemcpyAsync") == 1);
  }
  // A failed pipeline is freed, not reused; the next staged copy makes a fresh one and works.
  f.backend->synchronize_stream(0, s);
  std::fill(device.begin(), device.end(), 0);
  f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s);
  f.backend->synchronize_stream(0, s);
  CHECK(device == source);
  f.backend->destroy_stream(0, s);
  f.backend.reset();
  CHECK(f.state.live_host_allocations == 0);
  CHECK(f.state.live_events == 0);
  CHECK(f.state.pending.empty());
}

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

TEST_CASE("gpu_runtime: stream capture is asked of the runtime, never of the default stream") {
  Fixture f;
  const NativeStream stream = f.backend.create_stream(0);
  CHECK_FALSE(f.backend.is_capturing(0, stream));
  f.state.capturing.insert(static_cast<FakeStream*>(stream));
  CHECK(f.backend.is_capturing(0, stream));
  const long asked = f.count("fakeStreamIsCapturing");
  CHECK(asked == 2);
  // The legacy stream cannot be captured, and asking about it during another stream's global
  // capture is an error on CUDA: not asked.
  CHECK_FALSE(f.backend.is_capturing(0, nullptr));
  CHECK(f.count("fakeStreamIsCapturing") == asked);
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

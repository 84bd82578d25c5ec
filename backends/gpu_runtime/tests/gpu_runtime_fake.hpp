// The fake vendor runtime of gpu_runtime_fake_api: its state (what it was asked, what it is told to
// answer), FakeApi (the table of vendor calls that RuntimeBackend is instantiated with), and the
// per-test Fixture. A header of its own because the tests of that one executable are split by
// topic over gpu_runtime_fake*.cpp and all of them run against this runtime.
// The fake runtime's "device memory" is host memory, and its copies run at once unless deferred.
#pragma once

#include <catch2/catch.hpp>

#include "backends/gpu_runtime/runtime_backend.hpp"
#include "tests/common/stderr_capture.hpp"

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
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace gpu_runtime_fake {

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
inline void run_pending_until(FakeState& state, const FakeEvent* event);

enum FakeError : int {
  kOk = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kUnloading = 4,  // the runtime has been torn down (process exit)
  kInvalidPitch = 12,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kNotReady = 600,
  kPeerUnsupported = 217,
  kPeerAlreadyEnabled = 704,
  kPeerNotEnabled = 705,
  kIllegalAddress = 700,  // sticky (isSticky)
  kStreamCaptureImplicit = 906,
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
  // Several devices: which (device, peer) pairs deviceCanAccessPeer accepts, and which have been
  // enabled (deviceEnablePeerAccess from the current device).
  std::set<std::pair<int, int>> peer_capable{{0, 1}, {1, 0}};
  std::set<std::pair<int, int>> peers_enabled;
  // memcpyPeerAsync calls: destination device, source device, bytes.
  std::vector<std::tuple<int, int, std::size_t>> peer_copies;
  // IPC (gpu_runtime_fake_ipc.cpp): the fake "maps" a handle at the exported address itself (its
  // device memory is this process's memory); open mappings by address -> open count.
  std::map<const char*, int> ipc_mappings;
};

inline FakeState* g_state = nullptr;

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
  static constexpr Error kErrorPeerAccessAlreadyEnabled = kPeerAlreadyEnabled;
  static constexpr Error kErrorPeerAccessNotEnabled = kPeerNotEnabled;
  static constexpr Error kErrorStreamCaptureImplicit = kStreamCaptureImplicit;
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
  static S setPoolReleaseThreshold(int device, std::uint64_t bytes) {
    return call("fakeMemPoolSetAttribute", std::to_string(device) + ", " + std::to_string(bytes));
  }
  static S trimPoolTo(int device, std::size_t bytes) {
    return call("fakeMemPoolTrimTo", std::to_string(device) + ", " + std::to_string(bytes));
  }
  static bool missingKernelImage(Error) { return false; }
  static std::string_view stridedCopyArchitectures() noexcept { return {}; }
  static S pointerDevice(const void* ptr, int* device) {
    const auto* p = static_cast<const char*>(ptr);
    auto it = g_state->device_blocks.upper_bound(p);
    const bool found =
        it != g_state->device_blocks.begin() && (--it, p < it->first + it->second.first);
    *device = found ? it->second.second : -1;
    return call("fakePointerGetAttributes");
  }
  // Managed memory is tested on the backends that have it, not through this fake.
  static constexpr bool kHasManaged = false;
  // ---- IPC ----
  static constexpr bool kHasIpc = true;
  struct IpcMemHandle {
    char reserved[64];
  };
  static constexpr char kIpcMarker[] = "fakeipc";
  static S memGetAddressRange(void** base, std::size_t* bytes, const void* ptr) {
    const auto* p = static_cast<const char*>(ptr);
    auto it = g_state->device_blocks.upper_bound(p);
    const bool found =
        it != g_state->device_blocks.begin() && (--it, p < it->first + it->second.first);
    S s = call("fakeMemGetAddressRange");
    if (s.code == kOk && !found) {
      g_state->last_error = kInvalidValue;
      s.code = kInvalidValue;
    }
    *base = s.code == kOk ? const_cast<char*>(it->first) : nullptr;
    *bytes = s.code == kOk ? it->second.first : 0;
    return s;
  }
  static S ipcGetMemHandle(IpcMemHandle* handle, void* base) {
    S s = call("fakeIpcGetMemHandle");
    if (s.code == kOk && !g_state->device_blocks.contains(static_cast<const char*>(base))) {
      g_state->last_error = kInvalidValue;
      s.code = kInvalidValue;
    }
    if (s.code != kOk) return s;
    *handle = IpcMemHandle{};
    std::memcpy(handle->reserved, kIpcMarker, sizeof kIpcMarker);
    std::memcpy(handle->reserved + sizeof kIpcMarker, &base, sizeof base);
    return s;
  }
  static S ipcOpenMemHandle(void** base, IpcMemHandle handle) {
    S s = call("fakeIpcOpenMemHandle");
    *base = nullptr;
    if (s.code == kOk && std::memcmp(handle.reserved, kIpcMarker, sizeof kIpcMarker) != 0) {
      g_state->last_error = kInvalidValue;
      s.code = kInvalidValue;
    }
    if (s.code != kOk) return s;
    std::memcpy(base, handle.reserved + sizeof kIpcMarker, sizeof *base);
    ++g_state->ipc_mappings[static_cast<const char*>(*base)];
    return s;
  }
  static S ipcCloseMemHandle(void* base) {
    S s = call("fakeIpcCloseMemHandle");
    const auto it = g_state->ipc_mappings.find(static_cast<const char*>(base));
    if (s.code == kOk && it == g_state->ipc_mappings.end()) {
      g_state->last_error = kInvalidValue;
      s.code = kInvalidValue;
    }
    if (s.code == kOk && --it->second == 0) g_state->ipc_mappings.erase(it);
    return s;
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
    // The legacy stream while another stream captures: CUDA's answer (the capture stays valid).
    if (stream == &g_state->legacy && !g_state->capturing.empty()) {
      static_cast<void>(call("fakeStreamIsCapturing"));
      return fail_with(kStreamCaptureImplicit, "fakeStreamIsCapturing");
    }
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

  // Several devices: like CUDA, enabling twice is kPeerAlreadyEnabled and disabling what is not
  // enabled kPeerNotEnabled (the backend turns both into success).
  static S deviceCanAccessPeer(int* can_access, int device, int peer) {
    S s = call("fakeDeviceCanAccessPeer", std::to_string(device) + "," + std::to_string(peer));
    *can_access = g_state->peer_capable.contains({device, peer}) ? 1 : 0;
    return s;
  }
  static S deviceEnablePeerAccess(int peer) {
    S s = call("fakeDeviceEnablePeerAccess", std::to_string(peer));
    if (s.code != kOk) return s;
    const std::pair<int, int> pair{g_state->current, peer};
    if (!g_state->peer_capable.contains(pair)) return fail_with(kPeerUnsupported, s.function);
    if (!g_state->peers_enabled.insert(pair).second) {
      return fail_with(kPeerAlreadyEnabled, s.function);
    }
    return s;
  }
  static S deviceDisablePeerAccess(int peer) {
    S s = call("fakeDeviceDisablePeerAccess", std::to_string(peer));
    if (s.code != kOk) return s;
    if (g_state->peers_enabled.erase({g_state->current, peer}) == 0) {
      return fail_with(kPeerNotEnabled, s.function);
    }
    return s;
  }
  static S memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                           std::size_t bytes, Stream stream) {
    record_copy(kD2D, stream);
    g_state->peer_copies.emplace_back(dst_device, src_device, bytes);
    S s = call("fakeMemcpyPeerAsync", std::to_string(dst_device) + "<-" +
                                          std::to_string(src_device) + "," + std::to_string(bytes));
    if (s.code != kOk) return s;
    if (g_state->deferred) {
      g_state->pending.emplace_back([dst, src, bytes] { std::memcpy(dst, src, bytes); });
    } else {
      std::memcpy(dst, src, bytes);
    }
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
      devmem::gpu_runtime::for_each_unit_offset(args, [&](std::int64_t so, std::int64_t d) {
        std::memcpy(dst + d, src + so, static_cast<std::size_t>(args.unit));
      });
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
      case kStreamCaptureImplicit:
        return "fakeErrorStreamCaptureImplicit";
      case kNoDevice:
        return "fakeErrorNoDevice";
      case kInvalidDevice:
        return "fakeErrorInvalidDevice";
      case kNotReady:
        return "fakeErrorNotReady";
      case kPeerUnsupported:
        return "fakeErrorPeerAccessUnsupported";
      case kPeerAlreadyEnabled:
        return "fakeErrorPeerAccessAlreadyEnabled";
      case kPeerNotEnabled:
        return "fakeErrorPeerAccessNotEnabled";
      case kIllegalAddress:
        return "fakeErrorIllegalAddress";
    }
    return nullptr;
  }
  static constexpr bool isSticky(Error code) noexcept { return code == kIllegalAddress; }
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
  /// A failure the call itself decides on (not one the test asked for): set as the last error.
  static S fail_with(FakeError error, const char* function) {
    g_state->last_error = error;
    return {error, function};
  }
  static void record_copy(MemcpyKind kind, Stream stream) {
    g_state->copy_kinds.push_back(kind);
    g_state->copy_streams.push_back(stream);
  }
};
static_assert(devmem::gpu_runtime::VendorApi<FakeApi>);

/// Runs deferred work in order until `event` has completed (all of it for nullptr).
inline void run_pending_until(FakeState& state, const FakeEvent* event) {
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
    explicit Installed(FakeState* state) {
      g_state = state;
      // A test may inject a sticky error or the runtime's teardown, which latch process state.
      devmem::gpu_runtime::DeviceLost::reset_for_testing();
      devmem::gpu_runtime::ProcessExit::reset_for_testing();
    }
    Installed(const Installed&) = delete;
    Installed& operator=(const Installed&) = delete;
    ~Installed() {
      g_state = nullptr;
      devmem::gpu_runtime::DeviceLost::reset_for_testing();
      devmem::gpu_runtime::ProcessExit::reset_for_testing();
    }
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

}  // namespace gpu_runtime_fake

// The strict fake vendor runtime (test-only; DEVMEM_WITH_STRICT_FAKE, preset `strict-fake`), named
// for gpu_runtime::RuntimeBackend like backends/cuda/cuda_api.hpp names the CUDA runtime: a table
// that satisfies gpu_runtime::VendorApi (checked below the struct). It is
// as strict as a GPU where HIP-CPU cannot be (docs/strict-fake.md lists the rules):
// - two devices; streams, events and allocations carry the device current at their creation, and
//   the calls CUDA documents as failing across devices (a kernel launch on a stream of another
//   device, an event recorded on a stream of another device, elapsed time between devices) fail
//   with the invalid-resource-handle error; copies, queries and synchronisation across devices
//   are allowed as in CUDA;
// - deferred execution: asynchronous work waits in its stream's queue and runs only at
//   synchronisation points, in a random order across streams (as far as stream order, events and
//   the legacy stream allow), from a seed printed at start (DEVMEM_STRICT_FAKE_SEED replays it);
// - freed device memory, stream-ordered frees and freed page-locked memory are filled with 0xDB;
// - device memory is an inaccessible (PROT_NONE) mapping of a memfd; the fake copies through a
//   second, read-write mapping of the same memory, so a host dereference of a device pointer
//   crashes;
// - stream capture (global mode): synchronising a capturing stream or its events, allocating and
//   freeing, legacy-stream work and waits on events recorded outside the capture fail with CUDA's
//   codes and invalidate the capture;
// - a sticky error, once injected, is returned by every later call;
// - page-locked, mapped and registered host memory is ordinary host memory (host-accessible).
// Error codes are CUDA's numbers, with the fake's names.
#pragma once

#include "backends/gpu_runtime/strided_copy_args.hpp"
#include "backends/gpu_runtime/vendor_api.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace devmem::strict_fake {

struct StreamState;
struct EventState;

enum Error : int {
  kOk = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kUnloading = 4,
  kInvalidPitch = 12,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kNoKernelImageForDevice = 209,
  kPeerUnsupported = 217,
  kInvalidResourceHandle = 400,
  kIllegalState = 401,
  kNotReady = 600,
  kIllegalAddress = 700,
  kPeerAlreadyEnabled = 704,
  kPeerNotEnabled = 705,
  kHostMemoryAlreadyRegistered = 712,
  kHostMemoryNotRegistered = 713,
  kStreamCaptureUnsupported = 900,
  kStreamCaptureInvalidated = 901,
  kStreamCaptureIsolation = 905,
  kStreamCaptureImplicit = 906,
};

enum MemcpyKind : int { kH2H = 0, kH2D = 1, kD2H = 2, kD2D = 3, kDefault = 4 };

/// The fake's devices, and the device memory each has.
inline constexpr int kDevices = 2;
inline constexpr std::size_t kDeviceBytes = std::size_t{1} << 30;
/// What freed memory is filled with.
inline constexpr unsigned char kPoison = 0xDB;

struct StrictFakeApi {
  using Error = strict_fake::Error;
  using Stream = StreamState*;
  using Event = EventState*;
  using MemcpyKind = strict_fake::MemcpyKind;
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
  using S = gpu_runtime::Status<Error>;

  static constexpr std::string_view kBackend = "strict-fake";
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
  static constexpr unsigned kHostAllocPortable = 0x1;
  static constexpr unsigned kHostAllocMapped = 0x2;
  static constexpr unsigned kHostAllocWriteCombined = 0x4;
  static constexpr unsigned kHostAllocCoherent = 0;
  static constexpr unsigned kHostAllocNonCoherent = 0;
  static constexpr unsigned kHostRegisterPortable = 0x1;
  static constexpr unsigned kHostRegisterMapped = 0x2;
  static constexpr unsigned kHostRegisterReadOnly = 0x8;
  static constexpr unsigned kEventBlockingSync = 0x1;
  static constexpr unsigned kEventDisableTiming = 0x2;
  static constexpr std::size_t kMaxPitch = std::size_t{1} << 31;
  static constexpr bool kHasIpc = false;
  // No managed memory (docs/strict-fake.md#what-it-leaves-out): the backend says so.
  static constexpr bool kHasManaged = false;

  // ---- Devices ----
  static S getDeviceCount(int* count);
  static S getDevice(int* device);
  static S setDevice(int device);
  static S getDeviceProperties(DeviceProp* prop, int device);
  static S memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);
  static std::string architecture(const DeviceProp& prop) {
    return "strict_fake_" + std::to_string(prop.major) + std::to_string(prop.minor);
  }
  static bool unifiedAddressing(const DeviceProp&) { return true; }
  static std::size_t sharedMemPerBlockOptin(const DeviceProp& prop) {
    return 2 * prop.sharedMemPerBlock;
  }

  // ---- Memory ----
  static S malloc(void** ptr, std::size_t bytes);
  static S free(void* ptr);
  static S mallocAsync(void** ptr, std::size_t bytes, Stream stream);
  static S freeAsync(void* ptr, Stream stream);
  static S memoryPoolsSupported(int device, bool* supported);
  static bool missingKernelImage(Error code) { return code == kNoKernelImageForDevice; }
  static std::string_view stridedCopyArchitectures() noexcept;
  static S setPoolReleaseThreshold(int device, std::uint64_t bytes);
  static S trimPoolTo(int device, std::size_t bytes);
  static S hostAlloc(void** ptr, std::size_t bytes, unsigned flags);
  static S hostFree(void* ptr);
  static S hostRegister(void* ptr, std::size_t bytes, unsigned flags);
  static S hostUnregister(void* ptr);
  static S hostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags);
  static S isPageable(const void* ptr, bool* pageable);
  static S pointerDevice(const void* ptr, int* device);

  // ---- Streams and events ----
  static Stream defaultStream() noexcept;
  static S streamCreate(Stream* stream);
  static S streamDestroy(Stream stream);
  static S streamSynchronize(Stream stream);
  static S streamQuery(Stream stream);
  static S streamWaitEvent(Stream stream, Event event, unsigned flags);
  static S streamIsCapturing(Stream stream, bool* capturing);
  /// Not called by RuntimeBackend: the tests' way to capture (cudaStreamBeginCapture in
  /// cudaStreamCaptureModeGlobal, cudaStreamEndCapture; `nodes` is what the graph would hold).
  static S streamBeginCapture(Stream stream);
  static S streamEndCapture(Stream stream, std::size_t* nodes);
  static S eventCreate(Event* event);
  static S eventCreateWithFlags(Event* event, unsigned flags);
  static S eventDestroy(Event event);
  static S eventRecord(Event event, Stream stream);
  static S eventSynchronize(Event event);
  static S eventQuery(Event event);
  static S eventElapsedTime(float* ms, Event start, Event end);
  template <void (*Fn)(void*)>
  static S launchHostFunc(Stream stream, void* user) {
    return launch_host_function(stream, Fn, user);
  }
  static S launch_host_function(Stream stream, void (*fn)(void*), void* user);

  // ---- Several devices ----
  static S deviceCanAccessPeer(int* can_access, int device, int peer);
  static S deviceEnablePeerAccess(int peer);
  static S deviceDisablePeerAccess(int peer);
  static S memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                           std::size_t bytes, Stream stream);

  // ---- Copies and the strided-copy kernel ----
  static S memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind,
                       Stream stream);
  static S memcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                         std::size_t width, std::size_t height, MemcpyKind kind, Stream stream);
  static S memcpy3DAsync(void* dst, std::size_t dst_pitch, std::size_t dst_height, const void* src,
                         std::size_t src_pitch, std::size_t src_height, std::size_t width,
                         std::size_t height, std::size_t depth, MemcpyKind kind, Stream stream);
  static S memsetAsync(void* dst, int value, std::size_t bytes, Stream stream);
  static S launchCopyStrided(const gpu_runtime::StridedCopyArgs& args, Stream stream);
  /// RuntimeBackend's optional hook: a strided copy's temporary went back to the backend's cache
  /// with no work using it; the fake fills it with 0xDB (kPoison).
  static void scratchReturned(void* ptr, std::size_t bytes, bool host) noexcept;

  // ---- Errors ----
  static Error getLastError() noexcept;
  static const char* errorName(Error code) noexcept;
  static const char* errorString(Error code) noexcept;
  /// The fake's sticky error, as CUDA's illegal address: RuntimeBackend latches it (DeviceLost).
  static constexpr bool isSticky(Error code) noexcept { return code == kIllegalAddress; }
};
static_assert(gpu_runtime::VendorApi<StrictFakeApi>);

}  // namespace devmem::strict_fake

// The strict fake runtime (strict_fake_api.hpp says what it enforces; its state and shared
// rules are in strict_fake_runtime_state.hpp): the runtime's creation, the device calls, the
// copies, memsets and strided-copy kernel, peer access, the error names and the test controls
// (strict_fake_controls.hpp). Memory calls are in strict_fake_memory.cpp, stream, event and
// capture calls in strict_fake_streams.cpp.
#include "backends/strict_fake/strict_fake_runtime_state.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace devmem::strict_fake {

thread_local constinit int t_current = 0;
thread_local constinit int t_last_error = kOk;
// The handle of the legacy default stream: resolved to the current device's legacy stream.
StreamState g_legacy_handle;

namespace {

std::atomic<bool> g_missing_kernel_image[kDevices] = {};  // set_missing_kernel_image
std::atomic<std::size_t> g_strided_copy_launches{0};
std::atomic<const char*> g_strided_copy_architectures{""};  // set_strided_copy_architectures

std::uint64_t env_u64(const char* name, bool* found) {
  const char* const text = std::getenv(name);
  *found = text != nullptr && *text != '\0';
  return *found ? std::strtoull(text, nullptr, 10) : 0;
}

}  // namespace

Runtime::Runtime() {
  bool found = false;
  seed = env_u64("DEVMEM_STRICT_FAKE_SEED", &found);
  if (!found) seed = std::random_device{}();
  rng.seed(seed);
  bool deferred_set = false;
  deferred = env_u64("DEVMEM_STRICT_FAKE_DEFERRED", &deferred_set) != 0 || !deferred_set;
  // DEVMEM_STRICT_FAKE_QUIET=1: no line, for programs that must print nothing (the process-exit
  // tests).
  bool quiet_set = false;
  if (env_u64("DEVMEM_STRICT_FAKE_QUIET", &quiet_set) == 0 || !quiet_set) {
    std::fprintf(
        stderr,
        "devmem strict-fake: %s execution, seed %llu (replay: DEVMEM_STRICT_FAKE_SEED=%llu)"
        "\n",
        deferred ? "deferred" : "immediate", static_cast<unsigned long long>(seed),
        static_cast<unsigned long long>(seed));
  }
  arena_bytes = kDeviceBytes * kDevices;
  const int fd = memfd_create("devmem-strict-fake", 0);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(arena_bytes)) != 0) {
    std::perror("devmem strict-fake: memfd");
    std::abort();
  }
  void* const device = mmap(nullptr, arena_bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  void* const alias =
      mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (device == MAP_FAILED || alias == MAP_FAILED) {
    std::perror("devmem strict-fake: mmap");
    std::abort();
  }
  close(fd);
  device_base = static_cast<char*>(device);
  alias_base = static_cast<char*>(alias);
  for (int d = 0; d < kDevices; ++d) {
    free_ranges[d].emplace(static_cast<std::size_t>(d) * kDeviceBytes, kDeviceBytes);
    legacy[d] = std::make_shared<StreamState>();
    legacy[d]->device = d;
    legacy[d]->legacy = true;
  }
  std::thread([this] { run_host_functions(); }).detach();  // the runtime is never destroyed
}

Runtime& rt() {
  static auto* const runtime = new Runtime;  // never destroyed, see the file comment
  return *runtime;
}

namespace {

// Guarded by Runtime::mu: the last strided-copy temporary returned to the backend's cache.
ReturnedScratch g_returned_scratch;

/// A copy-like operation on `stream`: pageable sources are read at enqueue (like the vendor's
/// staging), pageable destinations make the call wait for the copy (like cudaMemcpyAsync into
/// pageable memory). `body` gets the host views of dst and src.
S enqueue_transfer(const char* function, void* dst, const void* src, std::size_t src_span,
                   StreamState* stream, std::function<void(char*, const char*)> body) {
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, function);
  bool captured = false;
  if (S a = admit(r, s, function, &captured); a.code != kOk || captured) return a;
  char* const dst_view = r.host_view(dst);
  const char* src_view = r.host_view(src);
  std::shared_ptr<std::vector<char>> snapshot;
  if (r.pageable(src) && src_span != 0) {
    snapshot = std::make_shared<std::vector<char>>(src_view, src_view + src_span);
    src_view = snapshot->data();
  }
  const bool wait = r.pageable(dst);
  // Stream-ordered allocations (mallocAsync) this work touches that their stream has not reached:
  // if the work runs first, it is not ordered after the allocation, and faults (a GPU would
  // silently use bytes the pool may still owe to another stream's pending work).
  std::vector<std::shared_ptr<std::atomic<bool>>> unreached;
  for (const void* p : {static_cast<const void*>(dst), src}) {
    const auto* block = r.in_arena(p) ? r.block_of(p, 1) : nullptr;
    if (block != nullptr && block->second.reached && !block->second.reached->load()) {
      unreached.push_back(block->second.reached);
    }
  }
  Op op;
  op.run = [body = std::move(body), dst_view, src_view, snapshot, unreached] {
    for (const auto& reached : unreached) {
      if (!reached->load()) {
        rt().sticky.store(kIllegalAddress, std::memory_order_release);
        return;
      }
    }
    body(dst_view, src_view);
  };
  const std::uint64_t seq = enqueue(r, lock, s, std::move(op));
  if (wait) r.run_until(lock, [&] { return s->completed >= seq; });
  return {kOk, function};
}

/// [p, p + span) is usable by the device: live device memory, or host memory.
bool valid_side(const Runtime& r, const void* p, std::size_t span) {
  return !r.in_arena(p) || span == 0 || r.block_of(p, span) != nullptr;
}

}  // namespace

// ---- Devices ----

S StrictFakeApi::getDeviceCount(int* count) {
  STRICT_FAKE_PROLOGUE("strictFakeGetDeviceCount");
  static_cast<void>(rt());
  *count = kDevices;
  return {kOk, kFn};
}
S StrictFakeApi::getDevice(int* device) {
  STRICT_FAKE_PROLOGUE("strictFakeGetDevice");
  *device = t_current;
  return {kOk, kFn};
}
S StrictFakeApi::setDevice(int device) {
  STRICT_FAKE_PROLOGUE("strictFakeSetDevice");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  t_current = device;
  return {kOk, kFn};
}
S StrictFakeApi::getDeviceProperties(DeviceProp* prop, int device) {
  STRICT_FAKE_PROLOGUE("strictFakeGetDeviceProperties");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  *prop = DeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "devmem strict fake GPU %d", device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = 49152;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = 4;
  prop->canMapHostMemory = 1;
  prop->major = 9;
  prop->minor = 0;
  return {kOk, kFn};
}
S StrictFakeApi::memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  STRICT_FAKE_PROLOGUE("strictFakeMemGetInfo");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - r.used[t_current];
  return {kOk, kFn};
}

// ---- Several devices ----

S StrictFakeApi::deviceCanAccessPeer(int* can_access, int device, int peer) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceCanAccessPeer");
  if (device < 0 || device >= kDevices || peer < 0 || peer >= kDevices) {
    return fail(kInvalidDevice, kFn);
  }
  *can_access = device != peer ? 1 : 0;
  return {kOk, kFn};
}
S StrictFakeApi::deviceEnablePeerAccess(int peer) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceEnablePeerAccess");
  if (peer < 0 || peer >= kDevices) return fail(kInvalidDevice, kFn);
  if (peer == t_current) return fail(kInvalidDevice, kFn);
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (!r.peers_enabled.insert({t_current, peer}).second) return fail(kPeerAlreadyEnabled, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::deviceDisablePeerAccess(int peer) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceDisablePeerAccess");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.peers_enabled.erase({t_current, peer}) == 0) return fail(kPeerNotEnabled, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                 std::size_t bytes, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpyPeerAsync");
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    const auto* d = r.block_of(dst, bytes);
    const auto* s = r.block_of(src, bytes);
    // Both sides must be device memory of the devices named.
    if (!r.in_arena(dst) || !r.in_arena(src) || d == nullptr || s == nullptr ||
        d->second.device != dst_device || s->second.device != src_device) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, src, bytes, stream,
                          [bytes](char* out, const char* in) { std::memmove(out, in, bytes); });
}

// ---- Copies ----

S StrictFakeApi::memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind,
                             Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpyAsync");
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, bytes) || !valid_side(r, src, bytes)) return fail(kInvalidValue, kFn);
  }
  return enqueue_transfer(kFn, dst, src, bytes, stream,
                          [bytes](char* out, const char* in) { std::memmove(out, in, bytes); });
}
S StrictFakeApi::memcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src,
                               std::size_t src_pitch, std::size_t width, std::size_t height,
                               MemcpyKind, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpy2DAsync");
  if (dst_pitch < width || src_pitch < width) return fail(kInvalidPitch, kFn);
  if (width == 0 || height == 0) return {kOk, kFn};
  const std::size_t dst_span = dst_pitch * (height - 1) + width;
  const std::size_t src_span = src_pitch * (height - 1) + width;
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, dst_span) || !valid_side(r, src, src_span)) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, src, src_span, stream, [=](char* out, const char* in) {
    for (std::size_t row = 0; row < height; ++row) {
      std::memmove(out + row * dst_pitch, in + row * src_pitch, width);
    }
  });
}
S StrictFakeApi::memcpy3DAsync(void* dst, std::size_t dst_pitch, std::size_t dst_height,
                               const void* src, std::size_t src_pitch, std::size_t src_height,
                               std::size_t width, std::size_t height, std::size_t depth, MemcpyKind,
                               Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpy3DAsync");
  if (dst_pitch < width || src_pitch < width || dst_height < height || src_height < height) {
    return fail(kInvalidValue, kFn);
  }
  if (width == 0 || height == 0 || depth == 0) return {kOk, kFn};
  const std::size_t dst_span = dst_pitch * (dst_height * (depth - 1) + height - 1) + width;
  const std::size_t src_span = src_pitch * (src_height * (depth - 1) + height - 1) + width;
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, dst_span) || !valid_side(r, src, src_span)) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, src, src_span, stream, [=](char* out, const char* in) {
    for (std::size_t z = 0; z < depth; ++z) {
      for (std::size_t row = 0; row < height; ++row) {
        std::memmove(out + (z * dst_height + row) * dst_pitch,
                     in + (z * src_height + row) * src_pitch, width);
      }
    }
  });
}
S StrictFakeApi::memsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemsetAsync");
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, bytes) || (r.pageable(dst) && bytes != 0)) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, dst, 0, stream, [value, bytes](char* out, const char*) {
    std::memset(out, value, bytes);
  });
}
void StrictFakeApi::scratchReturned(void* ptr, std::size_t bytes, bool host) noexcept {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  std::memset(host ? static_cast<char*>(ptr) : r.host_view(ptr), kPoison, bytes);
  g_returned_scratch = ReturnedScratch{ptr, bytes, host, g_returned_scratch.returns + 1};
}
std::string_view StrictFakeApi::stridedCopyArchitectures() noexcept {
  return g_strided_copy_architectures.load();
}

S StrictFakeApi::launchCopyStrided(const gpu_runtime::StridedCopyArgs& args, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeLaunchKernel");
  g_strided_copy_launches.fetch_add(1);
  if (t_current >= 0 && t_current < kDevices && g_missing_kernel_image[t_current].load()) {
    return fail(kNoKernelImageForDevice, kFn);
  }
  const auto unit = static_cast<std::uintptr_t>(args.unit);
  bool aligned = args.rank >= 1 && args.rank <= gpu_runtime::kStridedCopyMaxRank && unit != 0 &&
                 (reinterpret_cast<std::uintptr_t>(args.dst) % unit) == 0 &&
                 (reinterpret_cast<std::uintptr_t>(args.src) % unit) == 0;
  std::int64_t count = 1;
  for (int k = 0; aligned && k < args.rank; ++k) {
    aligned = args.src_strides[k] % args.unit == 0 && args.dst_strides[k] % args.unit == 0;
    count *= args.shape[k];
  }
  if (!aligned || count != args.count) return fail(kInvalidValue, kFn);
  bool faults = false;
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    const auto s = r.resolve(stream);
    if (!s) return fail(kInvalidResourceHandle, kFn);
    // CUDA: a kernel launch fails on a stream that does not belong to the current device.
    if (s->device != t_current) return fail(kInvalidResourceHandle, kFn);
    // Kernels read and write device memory (or mapped host memory), never pageable memory:
    // such a kernel faults when it runs, and the illegal address is sticky, as on a GPU.
    faults = r.pageable(args.dst) || r.pageable(args.src);
  }
  return enqueue_transfer(
      kFn, args.dst, args.src, 0, stream, [args, faults](char* dst, const char* src) {
        if (faults) {
          rt().sticky.store(kIllegalAddress, std::memory_order_release);
          return;
        }
        gpu_runtime::for_each_unit_offset(args, [&](std::int64_t so, std::int64_t d) {
          std::memcpy(dst + d, src + so, static_cast<std::size_t>(args.unit));
        });
      });
}

// ---- Errors ----

StrictFakeApi::Error StrictFakeApi::getLastError() noexcept {
  const int sticky_code = rt().sticky.load(std::memory_order_acquire);
  if (sticky_code != kOk) return static_cast<Error>(sticky_code);  // cannot be cleared
  const auto error = static_cast<Error>(t_last_error);
  t_last_error = kOk;
  return error;
}
const char* StrictFakeApi::errorName(Error code) noexcept {
  switch (code) {
    case kOk:
      return "strictFakeSuccess";
    case kInvalidValue:
      return "strictFakeErrorInvalidValue";
    case kOutOfMemory:
      return "strictFakeErrorMemoryAllocation";
    case kUnloading:
      return "strictFakeErrorRuntimeUnloading";
    case kInvalidPitch:
      return "strictFakeErrorInvalidPitchValue";
    case kNoDevice:
      return "strictFakeErrorNoDevice";
    case kInvalidDevice:
      return "strictFakeErrorInvalidDevice";
    case kNoKernelImageForDevice:
      return "strictFakeErrorNoKernelImageForDevice";
    case kPeerUnsupported:
      return "strictFakeErrorPeerAccessUnsupported";
    case kInvalidResourceHandle:
      return "strictFakeErrorInvalidResourceHandle";
    case kIllegalState:
      return "strictFakeErrorIllegalState";
    case kNotReady:
      return "strictFakeErrorNotReady";
    case kIllegalAddress:
      return "strictFakeErrorIllegalAddress";
    case kPeerAlreadyEnabled:
      return "strictFakeErrorPeerAccessAlreadyEnabled";
    case kPeerNotEnabled:
      return "strictFakeErrorPeerAccessNotEnabled";
    case kHostMemoryAlreadyRegistered:
      return "strictFakeErrorHostMemoryAlreadyRegistered";
    case kHostMemoryNotRegistered:
      return "strictFakeErrorHostMemoryNotRegistered";
    case kStreamCaptureUnsupported:
      return "strictFakeErrorStreamCaptureUnsupported";
    case kStreamCaptureInvalidated:
      return "strictFakeErrorStreamCaptureInvalidated";
    case kStreamCaptureIsolation:
      return "strictFakeErrorStreamCaptureIsolation";
    case kStreamCaptureImplicit:
      return "strictFakeErrorStreamCaptureImplicit";
  }
  return nullptr;
}
const char* StrictFakeApi::errorString(Error code) noexcept {
  switch (code) {
    case kInvalidValue:
      return "invalid argument";
    case kOutOfMemory:
      return "out of memory";
    case kInvalidDevice:
      return "invalid device ordinal";
    case kNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    case kInvalidResourceHandle:
      return "invalid resource handle";
    case kIllegalAddress:
      return "an illegal memory access was encountered";
    case kStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case kStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case kStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case kStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default:
      return "";
  }
}

// ---- Test controls (strict_fake_controls.hpp) ----

bool deferred_execution() {
  return rt().deferred;
}
std::uint64_t seed() {
  return rt().seed;
}
void inject_sticky_error() {
  rt().sticky.store(kIllegalAddress, std::memory_order_release);
}
bool is_device_address(const void* ptr) {
  return rt().in_arena(ptr);
}
int begin_capture(NativeStream stream) {
  return StrictFakeApi::streamBeginCapture(static_cast<StreamState*>(stream)).code;
}
int end_capture(NativeStream stream, std::size_t* nodes) {
  return StrictFakeApi::streamEndCapture(static_cast<StreamState*>(stream), nodes).code;
}
namespace {
StreamState* native_stream(NativeStream stream) {
  return stream == nullptr ? StrictFakeApi::defaultStream() : static_cast<StreamState*>(stream);
}
}  // namespace
int raw_event_record(NativeEvent event, NativeStream stream) {
  return StrictFakeApi::eventRecord(static_cast<EventState*>(event), native_stream(stream)).code;
}
int raw_stream_wait_event(NativeStream stream, NativeEvent event) {
  return StrictFakeApi::streamWaitEvent(native_stream(stream), static_cast<EventState*>(event), 0)
      .code;
}
int raw_malloc(void** ptr, std::size_t bytes) {
  return StrictFakeApi::malloc(ptr, bytes).code;
}
int raw_stream_synchronize(NativeStream stream) {
  return StrictFakeApi::streamSynchronize(native_stream(stream)).code;
}
int raw_set_device(int device) {
  return StrictFakeApi::setDevice(device).code;
}
int raw_get_device() {
  int device = -1;
  return StrictFakeApi::getDevice(&device).code == kOk ? device : -1;
}
int raw_get_last_error() {
  return StrictFakeApi::getLastError();
}
void set_missing_kernel_image(int device, bool missing) {
  if (device >= 0 && device < kDevices) g_missing_kernel_image[device].store(missing);
}
std::size_t strided_copy_launches() {
  return g_strided_copy_launches.load();
}
void set_strided_copy_architectures(const char* list) {
  g_strided_copy_architectures.store(list == nullptr ? "" : list);
}
void reset_counters() {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  r.counters = Counters{};
  r.device_level = r.device_live;
  r.pinned_level = r.pinned_live;
}
Counters counters() {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  return r.counters;
}
ReturnedScratch last_returned_scratch() {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  return g_returned_scratch;
}
int raw_launch_copy(void* dst, const void* src, std::size_t bytes, NativeStream stream) {
  gpu_runtime::StridedCopyArgs args{};
  args.dst = dst;
  args.src = src;
  args.unit = 1;
  args.rank = 1;
  args.count = static_cast<std::int64_t>(bytes);
  args.shape[0] = args.count;
  args.src_strides[0] = 1;
  args.dst_strides[0] = 1;
  return StrictFakeApi::launchCopyStrided(args, native_stream(stream)).code;
}

}  // namespace devmem::strict_fake

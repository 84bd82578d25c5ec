// One file although long: it is the one GPU implementation of the Backend interface, written once
// over a table of vendor calls (the `Api` traits described below) and instantiated for CUDA
// (backends/cuda) and HIP (backends/roc). Its methods share one class template, its traits and
// the conventions listed below (device selection, errors, staging); the parts that stand apart
// have headers of their own (strided_copy_args.hpp, strided_copy_kernel.hpp).
//
// The GPU backends' shared implementation: devmem::Backend written once over a vendor runtime whose
// API has the shape of the CUDA runtime (the CUDA runtime itself, and HIP, which mirrors it).
// backends/cuda/cuda_api.hpp and backends/roc/hip_api.hpp only name the vendor calls and constants
// (the `Api` traits below); everything that is the same for both vendors lives here, once: device
// selection, the error discipline, flag and copy-kind translation, the choice of copy call, the
// host-function trampoline. Not installed; vendor headers are never included by public headers.
//
// What an `Api` traits struct provides (see cuda_api.hpp for a complete one):
//   types       Error (the status enum), Stream, Event (opaque pointers), DeviceProp, MemcpyKind
//   constants   kBackend ("cuda", "roc"); kSuccess, kErrorNotReady, kErrorMemoryAllocation,
//               kErrorInvalidPitchValue, kErrorRuntimeUnloading (what every call returns once the
//               runtime has been torn down at process exit); kErrorPeerAccessAlreadyEnabled,
//               kErrorPeerAccessNotEnabled; kHostToHost, kHostToDevice,
//               kDeviceToHost, kDeviceToDevice, kMemcpyDefault; kHostAllocMapped / Portable /
//               WriteCombined / Coherent / NonCoherent; kHostRegisterMapped / Portable / ReadOnly
//               (0: none); kEventDisableTiming / BlockingSync; kMaxPitch (the largest pitch, row
//               width or row count a 2-D/3-D copy call accepts)
//   calls       static functions returning Status{vendor code, vendor function name}:
//               getDeviceCount, getDevice, setDevice, getDeviceProperties, memGetInfo, malloc,
//               free, hostAlloc, hostFree, hostRegister, hostUnregister, hostGetDevicePointer,
//               streamCreate, streamDestroy, streamSynchronize, streamQuery, streamWaitEvent,
//               eventCreate, eventCreateWithFlags, eventDestroy, eventRecord, eventSynchronize,
//               eventQuery, eventElapsedTime, memcpyAsync, memcpy2DAsync, memcpy3DAsync,
//               memsetAsync, launchHostFunc<Fn>, isPageable(const void*, bool*) (whether host
//               memory is ordinary pageable memory, neither page-locked nor device/managed memory),
//               pointerDevice(const void*, int*) (the device of device/managed memory, else -1),
//               streamIsCapturing(Stream, bool*), mallocAsync, freeAsync,
//               memoryPoolsSupported(int device, bool*),
//               launchCopyStrided(const StridedCopyArgs&, Stream) (one launch of libdevmem's
//               strided-copy kernel, strided_copy_kernel.hpp, compiled for that vendor),
//               deviceCanAccessPeer(int*, device, peer), deviceEnablePeerAccess(peer) and
//               deviceDisablePeerAccess(peer) (for the current device), memcpyPeerAsync(dst,
//               dst device, src, src device, bytes, Stream)
//   IPC         kHasIpc; where true: IpcMemHandle (the 64-byte vendor handle type),
//               ipcGetMemHandle, ipcOpenMemHandle(void**, IpcMemHandle) (lazy peer access),
//               ipcCloseMemHandle, memGetAddressRange(void** base, size_t*, const void*)
//   utilities   getLastError (clears the runtime's last-error state), errorName, errorString,
//               defaultStream (the handle of the legacy default stream), architecture(prop),
//               unifiedAddressing(prop), sharedMemPerBlockOptin(prop) (the per-block shared
//               memory after a kernel's opt-in)
// Pairing every call with its name keeps the name next to the call, so an error always names the
// vendor function that really failed.
//
// Conventions (backend.hpp has the contract):
// - Device selection: every method that needs a current device makes `device` current with
//   setDevice only when the runtime's current device differs. The comparison asks the runtime
//   (getDevice reads the runtime's own per-thread current device, no driver round trip), rather
//   than a private thread_local copy, which would go stale whenever the application or another
//   library calls cudaSetDevice/hipSetDevice on the same thread. The previous device is not
//   restored, like Numba's context activation.
// - The default stream (nullptr) is the legacy default stream: blocking with respect to the
//   device's other blocking streams. Streams are created with default flags (blocking, like
//   Numba's cuStreamCreate(flags=0)). No device-wide synchronisation is ever issued.
// - Copies pass the explicit memcpy kind that core/ already knows (CopyKind), like Numba's
//   cuMemcpyHtoD/DtoH/DtoD: no per-call pointer classification in the runtime (HIP looks every
//   pointer up for the Default kind), and host sides may be pageable, pinned or mapped memory.
//   Mapped host memory used as a device side is addressed by its device pointer, which is valid
//   for DeviceToDevice copies.
// - Errors: every vendor status is checked. A failure throws BackendError(backend, vendor
//   function, numeric code, code name, "<backend> <function>: <name> (<code>): <description>;
//   <context>") after clearing the runtime's last-error state, so that the next unrelated call is
//   not reported as failed (a sticky error, e.g. an illegal address in a kernel, cannot be
//   cleared: the runtime keeps reporting it, as it should). Allocation failures with the OOM code
//   throw OutOfMemory naming the bytes and, for device memory, free/total. Without a device every
//   method throws NoDevice with the runtime's reason.
// - Large copies between device memory and pageable host memory go through a pinned staging
//   pipeline (copy_staged below) instead of the runtime's own pageable path, which copies through
//   a small staging buffer one piece at a time.
// - A strided copy takes a bounded number of vendor calls whatever its layout: the vendor's 2-D
//   and 3-D copies when a few of them do it, otherwise at most 8 calls and one launch of the
//   strided-copy kernel (copy_bounded below).
// - Thread safety: the vendor runtimes are thread safe; the state here is the device census,
//   computed once under std::call_once, and the idle staging pipelines, under a mutex.
#pragma once

#include "backends/gpu_runtime/strided_copy_args.hpp"

#include <devmem/backend.hpp>
#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>
#include <devmem/layout.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::gpu_runtime {

/// What a traits call returns: the vendor status, and the vendor function that produced it.
template <class Code>
struct Status {
  Code code;
  const char* function;
};

inline std::int64_t clamp_to_int64(std::size_t value) noexcept {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  return value > static_cast<std::size_t>(kMax) ? kMax : static_cast<std::int64_t>(value);
}

/// Whether the process has begun to exit. watch() registers, once, an std::atexit handler that
/// sets the flag; it is called right after the vendor runtime has initialised (the device
/// census), so the handler runs before the runtime's own teardown, which was registered earlier
/// (exit handlers run in reverse order). Releases after that point (of arrays, streams, events
/// and staging buffers held by static objects, and of the deferred-free queue) call nothing: on
/// ROCm, hipFree/hipStreamDestroy/hipEventDestroy after HIP's teardown are a use-after-free
/// inside HIP, and on CUDA they fail with cudaErrorCudartUnloading; the process's memory and
/// handles go back to the system with the process anyway.
class ProcessExit {
 public:
  [[nodiscard]] static bool begun() noexcept { return flag().load(std::memory_order_acquire); }
  static void watch() noexcept {
    static const bool registered = std::atexit(&mark) == 0;
    static_cast<void>(registered);
  }
  static void mark() noexcept { flag().store(true, std::memory_order_release); }
  /// For tests that simulate the exit in a running process.
  static void reset_for_testing() noexcept { flag().store(false, std::memory_order_release); }

 private:
  static std::atomic<bool>& flag() noexcept {
    static std::atomic<bool> exiting{false};
    return exiting;
  }
};

/// The first sticky error of the process (ErrorPersistence::Sticky: illegal address, launch
/// failure, ...), after which the vendor runtime fails every call of the process with that same
/// error. Once latched, every backend call throws it again without calling the runtime, releases
/// call nothing (and report nothing), and devmem's destructors stop waiting and querying: the error
/// reaches the program once, from the call that met it and then from each later call it makes,
/// never as a line per destructor (review 2, N11).
class DeviceLost {
 public:
  [[nodiscard]] static bool latched() noexcept {
    return state().latched.load(std::memory_order_acquire);
  }
  /// Keeps the first sticky error (later ones are the same context loss again).
  static void latch(const BackendError& error) {
    State& s = state();
    const std::lock_guard lock(s.mutex);
    if (!s.error) s.error = error;
    s.latched.store(true, std::memory_order_release);
  }
  /// Throws the latched error (a copy).
  [[noreturn]] static void rethrow() {
    State& s = state();
    const std::lock_guard lock(s.mutex);
    throw BackendError(*s.error);
  }
  /// For tests that inject a sticky error into a fake runtime.
  static void reset_for_testing() noexcept {
    State& s = state();
    const std::lock_guard lock(s.mutex);
    s.error.reset();
    s.latched.store(false, std::memory_order_release);
  }

 private:
  struct State {
    std::mutex mutex;
    std::optional<BackendError> error;
    std::atomic<bool> latched{false};
  };
  static State& state() noexcept {
    static auto* const instance = new State;  // never destroyed: read by releases at exit
    return *instance;
  }
};

template <class Api>
class RuntimeBackend : public Backend {
 public:
  using Code = typename Api::Error;
  using ApiStatus = Status<Code>;
  using VendorStream = typename Api::Stream;
  using VendorEvent = typename Api::Event;
  using MemcpyKind = typename Api::MemcpyKind;

  /// When and how pageable copies are staged (see copy_staged).
  struct StagingOptions {
    /// Copies between device memory and pageable host memory of at least this many bytes are
    /// staged; smaller ones go straight to the runtime (its own path is fine for them).
    std::size_t threshold = std::size_t{16} << 20;
    /// Bytes per staging buffer (two per pipeline, so one is filled while the other is copied).
    std::size_t chunk = std::size_t{8} << 20;
  };

  RuntimeBackend() = default;
  /// Frees the idle staging pipelines (errors ignored: at process exit the runtime may already be
  /// shutting down).
  ~RuntimeBackend() override = default;

  /// Replaces the staging options; pipelines made for the old chunk size are freed.
  void set_staging_options(StagingOptions options) {
    if (options.chunk == 0) {
      throw InvalidArgument(
          fmt::format("{} set_staging_options: the chunk size must be > 0", Api::kBackend));
    }
    const std::lock_guard lock(staging_mutex_);
    staging_options_ = options;
    idle_staging_.clear();
  }
  void release_idle_buffers() noexcept override {
    std::map<int, std::vector<std::unique_ptr<StagingPipeline>>> staging;
    std::map<int, ScratchCache> scratch;
    {
      const std::lock_guard lock(staging_mutex_);
      staging.swap(idle_staging_);
      scratch.swap(scratch_);
    }
    // Freed here, outside the lock, by their destructors.
  }
  [[nodiscard]] StagingOptions staging_options() {
    const std::lock_guard lock(staging_mutex_);
    return staging_options_;
  }

  [[nodiscard]] std::string_view name() const noexcept override { return Api::kBackend; }

  // ---- Devices ------------------------------------------------------------------------------

  [[nodiscard]] int device_count() override { return census().count; }

  [[nodiscard]] std::string no_device_reason() override { return census().reason; }

  [[nodiscard]] DeviceProperties properties(int device) override {
    // Properties are read by index; no need to make the device current (and create its context).
    require_device("properties");
    typename Api::DeviceProp prop{};
    check(Api::getDeviceProperties(&prop, device), "properties of device {}", device);
    DeviceProperties out;
    out.name = std::string(prop.name, strnlen(prop.name, sizeof prop.name));
    out.architecture = Api::architecture(prop);
    out.total_memory = clamp_to_int64(prop.totalGlobalMem);
    out.warp_size = prop.warpSize;
    out.max_threads_per_block = prop.maxThreadsPerBlock;
    out.max_shared_memory_per_block = clamp_to_int64(prop.sharedMemPerBlock);
    out.max_shared_memory_per_block_optin = clamp_to_int64(
        std::max(Api::sharedMemPerBlockOptin(prop), std::size_t{prop.sharedMemPerBlock}));
    for (std::size_t d = 0; d < 3; ++d) {
      out.max_block_dim[d] = prop.maxThreadsDim[d];
      out.max_grid_dim[d] = prop.maxGridSize[d];
    }
    out.multiprocessor_count = prop.multiProcessorCount;
    out.can_map_host_memory = prop.canMapHostMemory != 0;
    out.unified_addressing = Api::unifiedAddressing(prop);
    return out;
  }

  [[nodiscard]] MemoryInfo memory_info(int device) override {
    use_device("memory_info", device);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    check(Api::memGetInfo(&free_bytes, &total_bytes), "memory_info of device {}", device);
    return MemoryInfo{clamp_to_int64(free_bytes), clamp_to_int64(total_bytes)};
  }

  // ---- Device memory --------------------------------------------------------------------------

  [[nodiscard]] void* allocate(int device, std::size_t bytes) override {
    use_device("allocate", device);
    if (bytes == 0) return nullptr;  // like cudaMalloc(0): success without memory
    void* ptr = nullptr;
    const ApiStatus status = Api::malloc(&ptr, bytes);
    if (status.code == Api::kErrorMemoryAllocation) {
      raise_out_of_memory(status, device, bytes, /*device_memory=*/true);
    }
    check(status, "allocating {} ({} bytes) of device memory on device {}", format_bytes(bytes),
          bytes, device);
    return ptr;
  }

  void deallocate(int device, void* ptr) override {
    const ReleaseDevice releasing = use_device_to_release("deallocate", device);
    if (!releasing || ptr == nullptr) return;
    release(Api::free(ptr), "freeing device memory at {} on device {}", fmt::ptr(ptr), device);
  }

  // ---- Stream-ordered device memory -----------------------------------------------------------

  [[nodiscard]] bool supports_async_allocation(int device) override {
    use_device("supports_async_allocation", device);
    {
      const std::lock_guard lock(pools_mutex_);
      if (const auto it = pools_supported_.find(device); it != pools_supported_.end()) {
        return it->second;
      }
    }
    bool supported = false;
    check(Api::memoryPoolsSupported(device, &supported),
          "asking whether device {} supports memory pools", device);
    const std::lock_guard lock(pools_mutex_);
    pools_supported_[device] = supported;
    return supported;
  }

  [[nodiscard]] void* allocate_async(int device, std::size_t bytes, NativeStream stream) override {
    if (!supports_async_allocation(device)) {
      throw InvalidArgument(fmt::format(
          "{} allocate_async: device {} does not support memory pools (asked for {} bytes)",
          Api::kBackend, device, bytes));
    }
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    const ApiStatus status = Api::mallocAsync(&ptr, bytes, native(stream));
    if (status.code == Api::kErrorMemoryAllocation) {
      raise_out_of_memory(status, device, bytes, /*device_memory=*/true);
    }
    check(status, "allocating {} ({} bytes) of device memory on device {}, ordered on {}",
          format_bytes(bytes), bytes, device, describe(stream));
    return ptr;
  }

  void deallocate_async(int device, void* ptr, NativeStream stream) override {
    const ReleaseDevice releasing = use_device_to_release("deallocate_async", device);
    if (!releasing || ptr == nullptr) return;
    release(Api::freeAsync(ptr, native(stream)),
            "freeing device memory at {} on device {}, ordered on {}", fmt::ptr(ptr), device,
            describe(stream));
  }

  // ---- Page-locked host memory ----------------------------------------------------------------

  [[nodiscard]] void* host_allocate(int device, std::size_t bytes, HostAllocFlags flags) override {
    use_device("host_allocate", device);
    if (bytes == 0) return nullptr;
    void* ptr = nullptr;
    const ApiStatus status = Api::hostAlloc(&ptr, bytes, host_alloc_flags(flags));
    if (status.code == Api::kErrorMemoryAllocation) {
      raise_out_of_memory(status, device, bytes, /*device_memory=*/false);
    }
    check(status, "allocating {} ({} bytes) of page-locked host memory ({}) for device {}",
          format_bytes(bytes), bytes, describe(flags), device);
    return ptr;
  }

  void host_deallocate(int device, void* ptr) override {
    const ReleaseDevice releasing = use_device_to_release("host_deallocate", device);
    if (!releasing || ptr == nullptr) return;
    release(Api::hostFree(ptr), "freeing page-locked host memory at {}", fmt::ptr(ptr));
  }

  void host_register(int device, void* ptr, std::size_t bytes, HostRegisterFlags flags) override {
    use_device("host_register", device);
    unsigned native = 0;
    if (has_flag(flags, HostRegisterFlags::Mapped)) native |= Api::kHostRegisterMapped;
    if (has_flag(flags, HostRegisterFlags::Portable)) native |= Api::kHostRegisterPortable;
    if (has_flag(flags, HostRegisterFlags::ReadOnly) && Api::kHostRegisterReadOnly != 0) {
      // Read-only registration is a hint the device may not take (CUDA: only where
      // cudaDevAttrHostRegisterReadOnlySupported): if it is refused, the memory is registered
      // without it; an error that has nothing to do with it comes back from that second call.
      if (Api::hostRegister(ptr, bytes, native | Api::kHostRegisterReadOnly).code ==
          Api::kSuccess) {
        return;
      }
      clear_last_error();
    }
    check(Api::hostRegister(ptr, bytes, native), "registering {} ({} bytes, {}) for device {}",
          fmt::ptr(ptr), bytes, describe(flags), device);
  }

  void host_unregister(int device, void* ptr) override {
    const ReleaseDevice releasing = use_device_to_release("host_unregister", device);
    if (!releasing) return;
    release(Api::hostUnregister(ptr), "unregistering {}", fmt::ptr(ptr));
  }

  [[nodiscard]] void* mapped_device_pointer(int device, void* host_ptr) override {
    use_device("mapped_device_pointer", device);
    void* device_ptr = nullptr;
    check(Api::hostGetDevicePointer(&device_ptr, host_ptr, 0u),
          "device address of mapped host memory at {} on device {}", fmt::ptr(host_ptr), device);
    return device_ptr;
  }

  [[nodiscard]] int pointer_device(const void* ptr) override {
    if (ptr == nullptr || device_count() == 0) return -1;
    int device = -1;
    check(Api::pointerDevice(ptr, &device), "looking up the device of memory at {}", fmt::ptr(ptr));
    return device;
  }

  // ---- Streams --------------------------------------------------------------------------------

  [[nodiscard]] bool exiting() const noexcept override { return ProcessExit::begun(); }
  [[nodiscard]] bool device_lost() const noexcept override { return DeviceLost::latched(); }

  [[nodiscard]] NativeStream create_stream(int device) override {
    use_device("create_stream", device);
    VendorStream stream{};
    check(Api::streamCreate(&stream), "creating a stream on device {}", device);
    return stream;
  }

  void destroy_stream(int device, NativeStream stream) override {
    const ReleaseDevice releasing = use_device_to_release("destroy_stream", device);
    if (!releasing) return;
    release(Api::streamDestroy(native(stream)), "destroying stream {} of device {}",
            fmt::ptr(stream), device);
  }

  // Once the process is exiting (ProcessExit, or the runtime answers that it is torn down), waits
  // and queries call nothing and the work counts as done: the runtime finishes or abandons it
  // with the process anyway (review 2, N5). See use_device_to_wait.
  void synchronize_stream(int device, NativeStream stream) override {
    if (!use_device_to_wait("synchronize_stream", device)) return;
    const ApiStatus status = Api::streamSynchronize(native(stream));
    if (runtime_unloaded(status)) return;
    check(status, "synchronizing {} of device {}", describe(stream), device);
  }

  [[nodiscard]] bool query_stream(int device, NativeStream stream) override {
    if (!use_device_to_wait("query_stream", device)) return true;
    const ApiStatus status = Api::streamQuery(native(stream));
    if (runtime_unloaded(status)) return true;
    return ready(status, "querying {} of device {}", describe(stream), device);
  }

  // ---- Events ---------------------------------------------------------------------------------

  [[nodiscard]] NativeEvent create_event(int device) override {
    use_device("create_event", device);
    VendorEvent event{};
    // Default flags: timing enabled (elapsed_ms), blocking synchronisation off.
    check(Api::eventCreate(&event), "creating an event on device {}", device);
    return event;
  }

  /// Without timing (cheaper to record) and with blocking synchronisation (a waiting thread
  /// sleeps instead of spinning): the events devmem records to learn that work is done.
  [[nodiscard]] NativeEvent create_completion_event(int device) override {
    use_device("create_completion_event", device);
    VendorEvent event{};
    check(Api::eventCreateWithFlags(&event, Api::kEventDisableTiming | Api::kEventBlockingSync),
          "creating a completion event on device {}", device);
    return event;
  }

  void destroy_event(int device, NativeEvent event) override {
    const ReleaseDevice releasing = use_device_to_release("destroy_event", device);
    if (!releasing) return;
    release(Api::eventDestroy(native_event(event)), "destroying event {} of device {}",
            fmt::ptr(event), device);
  }

  void record_event(int device, NativeEvent event, NativeStream stream) override {
    use_device("record_event", device);
    check(Api::eventRecord(native_event(event), native(stream)), "recording event {} on {}",
          fmt::ptr(event), describe(stream));
  }

  void synchronize_event(int device, NativeEvent event) override {
    if (!use_device_to_wait("synchronize_event", device)) return;
    const ApiStatus status = Api::eventSynchronize(native_event(event));
    if (runtime_unloaded(status)) return;
    check(status, "synchronizing event {}", fmt::ptr(event));
  }

  [[nodiscard]] bool query_event(int device, NativeEvent event) override {
    if (!use_device_to_wait("query_event", device)) return true;
    const ApiStatus status = Api::eventQuery(native_event(event));
    if (runtime_unloaded(status)) return true;
    return ready(status, "querying event {}", fmt::ptr(event));
  }

  [[nodiscard]] float elapsed_ms(int device, NativeEvent start, NativeEvent end) override {
    use_device("elapsed_ms", device);
    float ms = 0.0f;
    // NotReady (an event not yet completed) is an error here, unlike in the queries.
    check(Api::eventElapsedTime(&ms, native_event(start), native_event(end)),
          "elapsed time from event {} to event {}", fmt::ptr(start), fmt::ptr(end));
    return ms;
  }

  void stream_wait_event(int device, NativeStream stream, NativeEvent event) override {
    use_device("stream_wait_event", device);
    check(Api::streamWaitEvent(native(stream), native_event(event), 0u), "{} waiting for event {}",
          describe(stream), fmt::ptr(event));
  }

  [[nodiscard]] int runtime_current_device() noexcept override {
    try {
      const int count = census().count;
      if (count <= 0 || ProcessExit::begun()) return 0;
      int current = 0;
      if (Api::getDevice(&current).code != Api::kSuccess) {
        clear_last_error();
        return 0;
      }
      return current >= 0 && current < count ? current : 0;
    } catch (...) {  // the census could not be taken: device 0, whose use reports why
      return 0;
    }
  }

  [[nodiscard]] bool is_capturing(int device, NativeStream stream) override {
    // The legacy default stream cannot be captured, and asking about it while another stream
    // captures in global mode is itself an error.
    if (stream == nullptr) return false;
    use_device("is_capturing", device);
    bool capturing = false;
    check(Api::streamIsCapturing(native(stream), &capturing), "asking whether {} is capturing",
          describe(stream));
    return capturing;
  }

  // ---- Several devices (docs/scaling-out.md#several-devices) ------------------------------------

  [[nodiscard]] bool can_access_peer(int device, int peer) override {
    require_device("can_access_peer");
    if (device == peer) return false;  // what the vendors answer too
    int can_access = 0;
    check(Api::deviceCanAccessPeer(&can_access, device, peer),
          "asking whether device {} can access device {}", device, peer);
    return can_access != 0;
  }

  /// Idempotent: the vendors' "already enabled" status is success here (and cleared from the
  /// runtime's last-error state, so that it is not reported by a later unrelated call).
  void enable_peer_access(int device, int peer) override {
    use_device("enable_peer_access", device);
    const ApiStatus status = Api::deviceEnablePeerAccess(peer);
    if (status.code == Api::kErrorPeerAccessAlreadyEnabled) {
      clear_last_error();
      return;
    }
    check(status, "letting device {} access device {}", device, peer);
  }

  /// Idempotent: "not enabled" is success here.
  void disable_peer_access(int device, int peer) override {
    use_device("disable_peer_access", device);
    const ApiStatus status = Api::deviceDisablePeerAccess(peer);
    if (status.code == Api::kErrorPeerAccessNotEnabled) {
      clear_last_error();
      return;
    }
    check(status, "withdrawing device {}'s access to device {}", device, peer);
  }

  /// On `stream` of `dst_device`, which is made current (the stream must belong to it).
  void copy_peer(int dst_device, void* dst, int src_device, const void* src, std::size_t bytes,
                 NativeStream stream) override {
    use_device("copy_peer", dst_device);
    if (bytes == 0) return;
    check(Api::memcpyPeerAsync(dst, dst_device, src, src_device, bytes, native(stream)),
          "copying {} bytes from {} on device {} to {} on device {} on {}", bytes, fmt::ptr(src),
          src_device, fmt::ptr(dst), dst_device, describe(stream));
  }

  // ---- Data movement --------------------------------------------------------------------------

  void copy(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
            NativeStream stream) override {
    use_device("copy", device);
    if (bytes == 0) return;
    if (should_stage(dst, src, bytes, kind)) {
      copy_staged(device, dst, src, bytes, kind, stream);
      return;
    }
    copy_1d(dst, src, bytes, kind, stream);
  }

  void copy_2d(int device, void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t height, CopyKind kind, NativeStream stream) override {
    use_device("copy_2d", device);
    copy_rows(dst, dst_pitch, src, src_pitch, width, height, kind, stream);
  }

  /// The vendor's copies when a few of them do it well (vendor_copies_suffice); otherwise a
  /// bounded number of calls and one kernel launch (copy_bounded). A plan with more axes than the
  /// kernel takes (at least 2^32 units), or whose temporaries cannot be allocated, keeps the
  /// vendor's copies.
  void copy_strided(int device, void* dst, const void* src, const layout::CopyPlan& plan,
                    CopyKind kind, NativeStream stream) override {
    use_device("copy_strided", device);
    if (plan.empty()) return;
    auto* const dst0 = static_cast<std::byte*>(dst);
    const auto* const src0 = static_cast<const std::byte*>(src);
    if (!vendor_copies_suffice(plan) && kernel_args(plan, dst0, src0)) {
      // During stream capture the bounded path cannot run between host and device (it allocates
      // temporaries and waits for them); the vendor's copies can be captured, one graph node
      // each, up to a bound (review 2, N2). The core refused pageable host memory already.
      if (kind != CopyKind::DeviceToDevice && is_capturing(device, stream)) {
        const std::int64_t calls = vendor_copy_calls(plan);
        if (calls > kMaxCapturedCopies) {
          throw InvalidArgument(fmt::format(
              "{} copy_strided: a strided {} copy of {} separate rows cannot be captured into a "
              "graph (at most {} copy nodes); capture a copy between contiguous arrays, or a "
              "device-to-device copy, instead",
              Api::kBackend, kind == CopyKind::HostToDevice ? "host-to-device" : "device-to-host",
              calls, kMaxCapturedCopies));
        }
        copy_blocks(dst0, src0, plan, kind, stream);
        return;
      }
      if (copy_bounded(device, dst0, src0, plan, kind, stream)) return;
    }
    copy_blocks(dst0, src0, plan, kind, stream);
  }

  /// The most vendor copies (graph nodes) a strided host-device copy may become during capture.
  static constexpr std::int64_t kMaxCapturedCopies = 1024;

  /// The most vendor copy calls a strided copy takes on the vendor path.
  static constexpr std::int64_t kMaxVendorCopies = 4;
  /// Rows of at least this many bytes keep a DMA engine near its bandwidth; shorter rows are
  /// moved at a row rate instead (4-byte rows at a small fraction of the bus).
  static constexpr std::int64_t kMinDmaRowBytes = 512;
  /// Up to this many rows in all, the vendor path is still the cheapest, whatever their length:
  /// the copy is small, and the bounded path's extra calls would cost more than the rows.
  static constexpr std::int64_t kMaxShortRows = 64;
  /// Temporaries of the bounded path up to this size are kept for the next copy (one device and
  /// one page-locked buffer per device); larger ones are freed after their copy.
  static constexpr std::size_t kMaxCachedScratch = std::size_t{64} << 20;

  /// The number of vendor copy calls copy_blocks issues for `plan`.
  static std::int64_t vendor_copy_calls(const layout::CopyPlan& plan) {
    if (plan.empty()) return 0;
    if (slice_heights(plan)) return plan.block_count() / plan.outer_shape.back();
    const bool one_call_per_block =
        plan.height == 1 ||
        static_cast<std::size_t>(
            std::max({plan.src_pitch, plan.dst_pitch, plan.width, plan.height})) <= Api::kMaxPitch;
    return plan.block_count() * (one_call_per_block ? 1 : plan.height);
  }

  /// Whether the vendor's copies do `plan` well: few calls, of long rows or of few rows.
  static bool vendor_copies_suffice(const layout::CopyPlan& plan) {
    if (vendor_copy_calls(plan) > kMaxVendorCopies) return false;
    return plan.height == 1 || plan.width >= kMinDmaRowBytes ||
           plan.height * plan.block_count() <= kMaxShortRows;
  }

  /// The kernel's arguments for `plan` between element (0, ..., 0) at `dst` and at `src`: the
  /// plan's axes (rows as an axis of `unit`-byte units), merged where one continues another on
  /// both sides, with the widest unit that divides every address and stride. Nothing when the
  /// kernel cannot take that many axes.
  static std::optional<StridedCopyArgs> kernel_args(const layout::CopyPlan& plan, std::byte* dst,
                                                    const std::byte* src) {
    StridedCopyArgs args;
    args.dst = dst + plan.dst_offset;
    args.src = src + plan.src_offset;
    const std::vector<PlanAxis> bytes = plan_axes(plan);
    auto common = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(args.dst) |
                                             reinterpret_cast<std::uintptr_t>(args.src));
    for (std::size_t k = 0; k + 1 < bytes.size(); ++k) {  // the row's bytes: `width` below
      common |= static_cast<std::uint64_t>(bytes[k].src) | static_cast<std::uint64_t>(bytes[k].dst);
    }
    const auto width = static_cast<std::uint64_t>(plan.width);
    std::int64_t unit = 16;
    while (unit > 1 && ((common | width) & static_cast<std::uint64_t>(unit - 1)) != 0) unit /= 2;
    args.unit = static_cast<std::int32_t>(unit);
    std::vector<PlanAxis> axes;
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      PlanAxis axis = bytes[k];
      if (k + 1 == bytes.size()) axis = PlanAxis{axis.n / unit, unit, unit};  // the row's units
      if (axis.n == 1) continue;
      if (!axes.empty() && axes.back().src == axis.src * axis.n &&
          axes.back().dst == axis.dst * axis.n) {
        axes.back() = PlanAxis{axes.back().n * axis.n, axis.src, axis.dst};
        continue;
      }
      axes.push_back(axis);
    }
    if (axes.empty()) axes.push_back(PlanAxis{1, unit, unit});  // a single unit
    if (axes.size() > static_cast<std::size_t>(kStridedCopyMaxRank)) return std::nullopt;
    args.rank = static_cast<std::int32_t>(axes.size());
    args.count = 1;
    for (std::size_t k = 0; k < axes.size(); ++k) {
      args.shape[k] = axes[k].n;
      args.src_strides[k] = axes[k].src;
      args.dst_strides[k] = axes[k].dst;
      args.count *= axes[k].n;
    }
    return args;
  }

  /// `plan` with one side replaced by the dense row-major image of the plan's axes (the order of
  /// the destination's strides, which plan_copy sorts by), starting at element (0, ..., 0).
  static layout::CopyPlan with_dense(const layout::CopyPlan& plan, bool dense_dst) {
    layout::CopyPlan out = plan;
    (dense_dst ? out.dst_pitch : out.src_pitch) = plan.width;
    (dense_dst ? out.dst_offset : out.src_offset) = 0;
    Strides& strides = dense_dst ? out.outer_dst_strides : out.outer_src_strides;
    std::int64_t stride = plan.width * plan.height;
    for (std::size_t k = plan.outer_shape.size(); k-- > 0;) {
      strides[k] = stride;
      stride *= plan.outer_shape[k];
    }
    return out;
  }

  /// The bytes one side of `plan` spans, relative to its element (0, ..., 0).
  static Extent side_extent(const layout::CopyPlan& plan, bool dst_side) {
    Extent extent{dst_side ? plan.dst_offset : plan.src_offset, 0};
    extent.end = extent.begin + 1;
    for (const PlanAxis& axis : plan_axes(plan)) {
      const std::int64_t span = (axis.n - 1) * (dst_side ? axis.dst : axis.src);
      (span < 0 ? extent.begin : extent.end) += span;
    }
    return extent;
  }

  /// One side's extent when that side's elements fill every byte of it exactly once (in some
  /// axis order): a single contiguous copy of the extent then moves exactly those elements.
  static std::optional<Extent> dense_extent(const layout::CopyPlan& plan, bool dst_side) {
    std::vector<PlanAxis> axes = plan_axes(plan);
    const auto stride = [dst_side](const PlanAxis& a) {
      return dst_side ? std::abs(a.dst) : std::abs(a.src);
    };
    std::sort(axes.begin(), axes.end(),
              [&](const PlanAxis& a, const PlanAxis& b) { return stride(a) < stride(b); });
    std::int64_t expected = 1;
    for (const PlanAxis& axis : axes) {
      if (axis.n == 1) continue;
      if (stride(axis) != expected) return std::nullopt;
      expected *= axis.n;
    }
    return side_extent(plan, dst_side);
  }

  void memset(int device, void* dst, int byte_value, std::size_t bytes,
              NativeStream stream) override {
    use_device("memset", device);
    if (bytes == 0) return;
    check(Api::memsetAsync(dst, byte_value, bytes, native(stream)),
          "setting {} bytes at {} to {:#04x} on {}", bytes, fmt::ptr(dst), byte_value & 0xff,
          describe(stream));
  }

  void make_current(int device) override { use_device("make_current", device); }

  // ---- Inter-process sharing (docs/scaling-out.md#ipc) ----------------------------------------
  // A runtime without IPC (Api::kHasIpc false: HIP-CPU) keeps Backend's defaults, which say so.

  [[nodiscard]] bool supports_ipc(int device) override {
    if constexpr (Api::kHasIpc) {
      use_device("supports_ipc", device);
      return true;
    } else {
      return Backend::supports_ipc(device);
    }
  }

  [[nodiscard]] AllocationRange allocation_range(int device, const void* ptr) override {
    if constexpr (Api::kHasIpc) {
      use_device("allocation_range", device);
      void* base = nullptr;
      std::size_t bytes = 0;
      check(Api::memGetAddressRange(&base, &bytes, ptr),
            "finding the device allocation that {} lies in on device {}", fmt::ptr(ptr), device);
      return AllocationRange{base, bytes};
    } else {
      return Backend::allocation_range(device, ptr);
    }
  }

  [[nodiscard]] VendorIpcHandle ipc_get_handle(int device, void* base) override {
    if constexpr (Api::kHasIpc) {
      use_device("ipc_get_handle", device);
      typename Api::IpcMemHandle native{};
      static_assert(sizeof native == kVendorIpcHandleBytes);
      check(Api::ipcGetMemHandle(&native, base), "exporting the allocation at {} of device {}",
            fmt::ptr(base), device);
      VendorIpcHandle handle{};
      std::memcpy(handle.data(), &native, sizeof native);
      return handle;
    } else {
      return Backend::ipc_get_handle(device, base);
    }
  }

  [[nodiscard]] void* ipc_open(int device, const VendorIpcHandle& handle) override {
    if constexpr (Api::kHasIpc) {
      use_device("ipc_open", device);
      typename Api::IpcMemHandle native{};
      std::memcpy(&native, handle.data(), sizeof native);
      void* base = nullptr;
      check(Api::ipcOpenMemHandle(&base, native),
            "opening an allocation of another process on device {}", device);
      return base;
    } else {
      return Backend::ipc_open(device, handle);
    }
  }

  void ipc_close(int device, void* base) override {
    if constexpr (Api::kHasIpc) {
      const ReleaseDevice releasing = use_device_to_release("ipc_close", device);
      if (!releasing) return;
      release(Api::ipcCloseMemHandle(base), "closing the mapping at {} on device {}",
              fmt::ptr(base), device);
    } else {
      Backend::ipc_close(device, base);
    }
  }

  void launch_host_function(int device, NativeStream stream, std::function<void()> fn) override {
    use_device("launch_host_function", device);
    if (!fn) {
      throw InvalidArgument(fmt::format("{} launch_host_function: empty function", Api::kBackend));
    }
    // Owned by the callback once enqueued; deleted here when enqueuing fails.
    auto owned = std::make_unique<std::function<void()>>(std::move(fn));
    check(Api::template launchHostFunc<&run_host_function>(native(stream), owned.get()),
          "enqueuing a host function on {}", describe(stream));
    static_cast<void>(owned.release());
  }

 protected:
  /// Why the runtime sees no device, in its words; a subclass may add what it can find out
  /// elsewhere (the ROC backend asks HSA's agent discovery).
  [[nodiscard]] virtual std::string explain_no_device(std::string runtime_reason) {
    return runtime_reason;
  }

  /// NoDevice when the runtime has no device.
  void require_device(const char* operation) {
    const Census& devices = census();
    if (devices.count == 0) {
      throw NoDevice(fmt::format("{} {}: no device: {}", Api::kBackend, operation, devices.reason));
    }
  }

  /// Makes `device` the calling thread's current device (see the conventions above). An index out
  /// of range fails in setDevice with the runtime's invalid-device error.
  void use_device(const char* operation, int device) {
    static_cast<void>(select_device(operation, device, /*releasing=*/false));
  }

  /// Makes a release's device current for the release only: releases run in destructors, at
  /// points the caller did not choose, so the caller's current device is restored afterwards.
  /// Inactive (the release must call nothing) once the process has begun to exit (ProcessExit)
  /// or when the runtime has already been torn down (see release).
  class ReleaseDevice {
   public:
    ReleaseDevice(RuntimeBackend& backend, const char* operation, int device) {
      if (ProcessExit::begun()) return;
      int previous = -1;
      active_ = backend.select_device(operation, device, /*releasing=*/true, &previous);
      if (active_ && previous != device) previous_ = previous;
    }
    ReleaseDevice(const ReleaseDevice&) = delete;
    ReleaseDevice& operator=(const ReleaseDevice&) = delete;
    ~ReleaseDevice() {
      // Best effort: a failure to switch back is not the release's failure.
      if (previous_ && Api::setDevice(*previous_).code != Api::kSuccess) clear_last_error();
    }
    [[nodiscard]] explicit operator bool() const noexcept { return active_; }

   private:
    bool active_ = false;
    std::optional<int> previous_;
  };

  /// For waits and queries, which destructors reach at points the caller did not choose: makes
  /// `device` current, or returns false (call nothing, the work counts as done) once the process
  /// is exiting or the runtime answers that it has been torn down. After a sticky error it throws
  /// that error (see DeviceLost).
  [[nodiscard]] bool use_device_to_wait(const char* operation, int device) {
    if (ProcessExit::begun()) return false;
    if (DeviceLost::latched()) DeviceLost::rethrow();  // fail fast: the work will never finish
    return select_device(operation, device, /*releasing=*/true);
  }

  /// A ReleaseDevice for `device` (see there).
  [[nodiscard]] ReleaseDevice use_device_to_release(const char* operation, int device) {
    return ReleaseDevice(*this, operation, device);
  }

  /// Like check, for the call that releases a resource. At process exit, arrays, streams and
  /// events held by static objects and the deferred-free queue are released after the runtime
  /// has been torn down, and every call answers kErrorRuntimeUnloading (CUDA's
  /// cudaErrorCudartUnloading, HIP's hipErrorDeinitialized): the runtime has already released
  /// everything it held for the process, so there is nothing left to do and nothing to report.
  /// Any other failure throws as usual.
  template <class... Args>
  void release(ApiStatus status, fmt::format_string<Args...> context, Args&&... args) {
    if (runtime_unloaded(status)) return;
    check(status, context, std::forward<Args>(args)...);
  }

  /// True (and the last error cleared) when `status` says the runtime has been torn down.
  [[nodiscard]] static bool runtime_unloaded(ApiStatus status) noexcept {
    if (status.code != Api::kErrorRuntimeUnloading) return false;
    clear_last_error();
    // The runtime tore itself down before ProcessExit's handler ran (HIP-CPU, for one, makes
    // parts of itself after the device census): the process is exiting all the same.
    ProcessExit::mark();
    return true;
  }

  /// Throws BackendError unless `status` is success.
  template <class... Args>
  void check(ApiStatus status, fmt::format_string<Args...> context, Args&&... args) {
    if (status.code == Api::kSuccess) [[likely]] {
      return;
    }
    raise(status, fmt::format(context, std::forward<Args>(args)...));
  }

  /// Clears the runtime's last error and throws the BackendError of `status`.
  [[noreturn]] static void raise(ApiStatus status, std::string_view context) {
    clear_last_error();
    throw make_error(status, context);
  }

  [[nodiscard]] static BackendError make_error(ApiStatus status, std::string_view context) {
    const bool sticky = Api::isSticky(status.code);
    BackendError error(std::string(Api::kBackend), status.function, static_cast<int>(status.code),
                       code_name(status.code),
                       fmt::format("{} {}: {}{}{}{}", Api::kBackend, status.function,
                                   describe(status.code), context.empty() ? "" : "; ", context,
                                   sticky ? " (a sticky error: the device is lost to this "
                                            "process, which must be restarted)"
                                          : ""),
                       sticky ? ErrorPersistence::Sticky : ErrorPersistence::Recoverable);
    if (sticky) DeviceLost::latch(error);
    return error;
  }

  /// "cudaErrorInvalidValue (1): invalid argument"; the description is left out when the runtime
  /// has none beyond the name (HIP 5.2 returns the name from hipGetErrorString).
  [[nodiscard]] static std::string describe(Code code) {
    const std::string name = code_name(code);
    const char* const text = Api::errorString(code);
    const std::string_view description = text != nullptr ? text : "";
    if (description.empty() || description == name) {
      return fmt::format("{} ({})", name, static_cast<int>(code));
    }
    return fmt::format("{} ({}): {}", name, static_cast<int>(code), description);
  }

  [[nodiscard]] static std::string code_name(Code code) {
    const char* const name = Api::errorName(code);
    return name != nullptr ? std::string(name) : fmt::format("error {}", static_cast<int>(code));
  }

  static void clear_last_error() noexcept { static_cast<void>(Api::getLastError()); }

  /// The vendor handle of a devmem stream handle: nullptr is the legacy default stream.
  [[nodiscard]] static VendorStream native(NativeStream stream) noexcept {
    return stream == nullptr ? Api::defaultStream() : static_cast<VendorStream>(stream);
  }
  [[nodiscard]] static VendorEvent native_event(NativeEvent event) noexcept {
    return static_cast<VendorEvent>(event);
  }

 private:
  struct Census {
    int count = 0;
    std::string reason;  // why count is 0
  };
  /// The heights (in rows) of one 3-D slice on each side.
  struct SliceHeights {
    std::size_t src = 0;
    std::size_t dst = 0;
  };

  /// The device count cannot change during a process (the runtimes read their visibility settings
  /// once), so it is asked for once. An error from getDeviceCount (no driver, no device) is not
  /// an exception: it is the reason for a count of 0.
  const Census& census() {
    std::call_once(census_once_, [this] {
      int count = 0;
      const ApiStatus status = Api::getDeviceCount(&count);
      Census result;
      if (status.code != Api::kSuccess) {
        clear_last_error();
        result.reason =
            explain_no_device(fmt::format("{}: {}", status.function, describe(status.code)));
      } else if (count <= 0) {
        result.reason = explain_no_device(fmt::format("{} reports 0 devices", status.function));
      } else {
        result.count = count;
        ProcessExit::watch();  // after the runtime's initialisation: see ProcessExit
      }
      census_ = std::move(result);
    });
    return census_;
  }

  /// use_device; when `releasing`, returns false instead of throwing if the runtime has been torn
  /// down.
  bool select_device(const char* operation, int device, bool releasing, int* previous = nullptr) {
    require_device(operation);
    if (DeviceLost::latched()) {  // fail fast, release nothing (see DeviceLost)
      if (releasing) return false;
      DeviceLost::rethrow();
    }
    int current = -1;
    const ApiStatus got = Api::getDevice(&current);
    if (releasing && runtime_unloaded(got)) return false;
    check(got, "{} on device {}", operation, device);
    if (previous != nullptr) *previous = current;
    if (current == device) return true;
    const ApiStatus set = Api::setDevice(device);
    if (releasing && runtime_unloaded(set)) return false;
    check(set, "{}: making device {} current (device count {})", operation, device, census().count);
    return true;
  }

  [[noreturn]] void raise_out_of_memory(ApiStatus status, int device, std::size_t bytes,
                                        bool device_memory) {
    clear_last_error();
    std::string room;
    if (device_memory) {
      std::size_t free_bytes = 0;
      std::size_t total_bytes = 0;
      if (Api::memGetInfo(&free_bytes, &total_bytes).code == Api::kSuccess) {
        room = fmt::format(" (free {} of {})", format_bytes(free_bytes), format_bytes(total_bytes));
      } else {
        clear_last_error();
      }
    }
    throw OutOfMemory(
        fmt::format("{} {}: {}; allocating {} ({} bytes) of {} on device {}{}", Api::kBackend,
                    status.function, describe(status.code), format_bytes(bytes), bytes,
                    device_memory ? "device memory" : "page-locked host memory", device, room),
        clamp_to_int64(bytes));
  }

  /// True on success, false on NotReady (not an error), BackendError otherwise.
  template <class... Args>
  bool ready(ApiStatus status, fmt::format_string<Args...> context, Args&&... args) {
    if (status.code == Api::kSuccess) return true;
    if (status.code == Api::kErrorNotReady) {
      clear_last_error();  // HIP records NotReady as the last error
      return false;
    }
    raise(status, fmt::format(context, std::forward<Args>(args)...));
  }

  void copy_1d(void* dst, const void* src, std::size_t bytes, CopyKind kind, NativeStream stream) {
    check(Api::memcpyAsync(dst, src, bytes, memcpy_kind(kind), native(stream)),
          "copying {} bytes from {} to {} ({}) on {}", bytes, fmt::ptr(src), fmt::ptr(dst),
          to_string(kind), describe(stream));
  }

  /// `height` rows of `width` bytes: one memcpy for a single row, else one 2-D copy; rows one by
  /// one when a pitch is beyond what the runtime's 2-D copy accepts.
  void copy_rows(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                 std::size_t width, std::size_t height, CopyKind kind, NativeStream stream) {
    if (width == 0 || height == 0) return;
    if (height == 1) {
      copy_1d(dst, src, width, kind, stream);
      return;
    }
    if (std::max({dst_pitch, src_pitch, width, height}) <= Api::kMaxPitch) {
      const ApiStatus status = Api::memcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height,
                                                  memcpy_kind(kind), native(stream));
      if (status.code != Api::kErrorInvalidPitchValue) {
        check(status, "copying {} rows of {} bytes from {} (pitch {}) to {} (pitch {}) ({}) on {}",
              height, width, fmt::ptr(src), src_pitch, fmt::ptr(dst), dst_pitch, to_string(kind),
              describe(stream));
        return;
      }
      clear_last_error();  // a pitch this device does not take: copy the rows one by one
    }
    auto* const out = static_cast<std::byte*>(dst);
    const auto* const in = static_cast<const std::byte*>(src);
    for (std::size_t row = 0; row < height; ++row) {
      copy_1d(out + row * dst_pitch, in + row * src_pitch, width, kind, stream);
    }
  }

  /// `depth` slices of `height` rows of `width` bytes; slice k at ptr + k * pitch * slice height.
  void copy_volume(void* dst, std::size_t dst_pitch, std::size_t dst_height, const void* src,
                   std::size_t src_pitch, std::size_t src_height, std::size_t width,
                   std::size_t height, std::size_t depth, CopyKind kind, NativeStream stream) {
    const ApiStatus status =
        Api::memcpy3DAsync(dst, dst_pitch, dst_height, src, src_pitch, src_height, width, height,
                           depth, memcpy_kind(kind), native(stream));
    if (status.code != Api::kErrorInvalidPitchValue) {
      check(status,
            "copying {} slices of {} rows of {} bytes from {} (pitch {}, {} rows per slice) to {} "
            "(pitch {}, {} rows per slice) ({}) on {}",
            depth, height, width, fmt::ptr(src), src_pitch, src_height, fmt::ptr(dst), dst_pitch,
            dst_height, to_string(kind), describe(stream));
      return;
    }
    clear_last_error();  // a pitch this device does not take: one 2-D copy per slice
    auto* const out = static_cast<std::byte*>(dst);
    const auto* const in = static_cast<const std::byte*>(src);
    for (std::size_t k = 0; k < depth; ++k) {
      copy_rows(out + k * dst_pitch * dst_height, dst_pitch, in + k * src_pitch * src_height,
                src_pitch, width, height, kind, stream);
    }
  }

  /// One axis of a plan: `n` steps of `src` and `dst` bytes.
  struct PlanAxis {
    std::int64_t n = 1;
    std::int64_t src = 0;
    std::int64_t dst = 0;
  };

  /// The plan's axes, outermost first: the outer axes, the rows of a block, then the bytes of a
  /// row (always last, with strides 1).
  static std::vector<PlanAxis> plan_axes(const layout::CopyPlan& plan) {
    std::vector<PlanAxis> axes;
    axes.reserve(plan.outer_shape.size() + 2);
    for (std::size_t k = 0; k < plan.outer_shape.size(); ++k) {
      axes.push_back(
          PlanAxis{plan.outer_shape[k], plan.outer_src_strides[k], plan.outer_dst_strides[k]});
    }
    axes.push_back(PlanAxis{plan.height, plan.src_pitch, plan.dst_pitch});
    axes.push_back(PlanAxis{plan.width, 1, 1});
    return axes;
  }

  /// Today's vendor path: one 3-D copy call per block group when the plan's innermost outer axis
  /// steps whole slices of rows on both sides (the common case of a sub-block of a 3-D array);
  /// otherwise one 2-D copy per block.
  void copy_blocks(std::byte* dst0, const std::byte* src0, const layout::CopyPlan& plan,
                   CopyKind kind, NativeStream stream) {
    const auto width = static_cast<std::size_t>(plan.width);
    const auto height = static_cast<std::size_t>(plan.height);
    const auto src_pitch = static_cast<std::size_t>(plan.src_pitch);
    const auto dst_pitch = static_cast<std::size_t>(plan.dst_pitch);
    if (const auto slices = slice_heights(plan)) {
      // The plan without its innermost outer axis enumerates the 3-D blocks.
      layout::CopyPlan outer = plan;
      const auto depth = static_cast<std::size_t>(outer.outer_shape.back());
      outer.outer_shape.pop_back();
      outer.outer_src_strides.pop_back();
      outer.outer_dst_strides.pop_back();
      outer.for_each_block([&](std::int64_t src_offset, std::int64_t dst_offset) {
        copy_volume(dst0 + dst_offset, dst_pitch, slices->dst, src0 + src_offset, src_pitch,
                    slices->src, width, height, depth, kind, stream);
      });
      return;
    }
    plan.for_each_block([&](std::int64_t src_offset, std::int64_t dst_offset) {
      copy_rows(dst0 + dst_offset, dst_pitch, src0 + src_offset, src_pitch, width, height, kind,
                stream);
    });
  }

  // ---- Bounded strided copies -----------------------------------------------------------------
  //
  // A plan of many blocks or short rows is copied with at most 8 vendor calls (device selection,
  // synchronisation and temporaries included) and one launch of the strided-copy kernel:
  // - D2D: the kernel, from one side to the other; nothing else.
  // - H2D: the host packs the source (layout::copy_host_strided) into page-locked staging, as an
  //   image of the destination's extent when the destination has no gaps (then one copy of the
  //   extent), else densely in the destination's axis order, copied to a device temporary that
  //   the kernel unpacks. A source without gaps skips the host pack: its extent is copied to the
  //   device temporary as it is. The destination's bytes between its elements are never written.
  // - D2H: the kernel packs the source into a device temporary as an image of the destination's
  //   extent when the destination has no gaps (then one copy of the extent); otherwise the source's
  //   extent, when at most twice the elements' bytes, is copied to staging as it is, else the
  //   kernel packs it densely first; the host then places the elements (copy_host_strided).
  // - H2H: the host copies, once earlier work on the stream is done.
  // Completion: the host reads the source only after earlier work on the stream (which may write
  // it) is done, and the copy is complete when the call returns, whatever the host memory: the
  // temporaries are reused or freed only once the stream has finished with them. (The runtimes'
  // pageable copies behave the same; for page-locked host memory this path is synchronous where
  // the vendor copies are not.)

  /// A temporary buffer of the bounded path: device memory or page-locked host memory. Owns it.
  struct ScratchBuffer {
    std::byte* ptr = nullptr;
    std::size_t bytes = 0;
    bool host = false;

    ScratchBuffer() = default;
    ScratchBuffer(const ScratchBuffer&) = delete;
    ScratchBuffer& operator=(const ScratchBuffer&) = delete;
    ScratchBuffer(ScratchBuffer&& other) noexcept
        : ptr(std::exchange(other.ptr, nullptr)), bytes(other.bytes), host(other.host) {}
    ScratchBuffer& operator=(ScratchBuffer&& other) noexcept {
      if (this != &other) {
        reset();
        ptr = std::exchange(other.ptr, nullptr);
        bytes = other.bytes;
        host = other.host;
      }
      return *this;
    }
    ~ScratchBuffer() { reset(); }
    /// Frees the memory (errors ignored: nothing can be done about them here). The caller makes
    /// sure no work enqueued on a stream still uses it.
    void reset() noexcept {
      if (ptr == nullptr) return;
      if (!ProcessExit::begun()) {  // the runtime may be gone: see ProcessExit
        static_cast<void>(host ? Api::hostFree(ptr) : Api::free(ptr));
        clear_last_error();
      }
      ptr = nullptr;
    }
  };

  /// The temporaries of one bounded copy. Until finish() says the stream is done with them, they
  /// are released only after synchronizing the stream (a failure path: its errors are ignored,
  /// the copy's own error is the one reported, and the buffers are freed rather than reused).
  class BoundedTemporaries {
   public:
    BoundedTemporaries(RuntimeBackend& backend, int device, NativeStream stream)
        : backend_(backend), device_(device), stream_(stream) {}
    BoundedTemporaries(const BoundedTemporaries&) = delete;
    BoundedTemporaries& operator=(const BoundedTemporaries&) = delete;
    ~BoundedTemporaries() {
      if (in_use_ && !ProcessExit::begun()) {
        static_cast<void>(Api::streamSynchronize(native(stream_)));
        clear_last_error();
      }
      if (!finished_) return;  // freed by the members' destructors
      backend_.return_scratch(device_, std::move(device_buffer_));
      backend_.return_scratch(device_, std::move(host_buffer_));
    }
    /// `bytes` of device memory, or nullptr when the device has no room for them.
    [[nodiscard]] std::byte* device(std::size_t bytes) {
      return take(device_buffer_, bytes, /*host=*/false);
    }
    /// `bytes` of page-locked host memory, or nullptr when none can be had.
    [[nodiscard]] std::byte* host(std::size_t bytes) {
      return take(host_buffer_, bytes, /*host=*/true);
    }
    /// From here enqueued work may use the temporaries.
    void in_use() noexcept { in_use_ = true; }
    /// Waits for the stream to be done with the temporaries.
    void finish() {
      if (in_use_) {
        backend_.check(Api::streamSynchronize(native(stream_)), "waiting for a strided copy on {}",
                       describe(stream_));
      }
      in_use_ = false;
      finished_ = true;
    }

   private:
    std::byte* take(ScratchBuffer& buffer, std::size_t bytes, bool host) {
      buffer = backend_.take_scratch(device_, bytes, host);
      return buffer.ptr;
    }

    RuntimeBackend& backend_;
    int device_;
    NativeStream stream_;
    ScratchBuffer device_buffer_;
    ScratchBuffer host_buffer_;
    bool in_use_ = false;
    bool finished_ = false;
  };

  /// The kept temporaries of one device: at most one of each kind, idle.
  struct ScratchCache {
    ScratchBuffer device;
    ScratchBuffer host;
  };

  /// A buffer of at least `bytes`: the kept one when it is large enough (a smaller one is freed:
  /// the cache holds the largest recent size), else a new one; empty when out of memory.
  ScratchBuffer take_scratch(int device, std::size_t bytes, bool host) {
    ScratchBuffer buffer;
    {
      const std::lock_guard lock(staging_mutex_);
      ScratchCache& cache = scratch_[device];
      buffer = std::move(host ? cache.host : cache.device);
    }
    if (buffer.ptr != nullptr && buffer.bytes >= bytes) return buffer;
    buffer.reset();
    void* ptr = nullptr;
    // Portable: page-locked for every device's context, whichever is current.
    const ApiStatus status =
        host ? Api::hostAlloc(&ptr, bytes, Api::kHostAllocPortable) : Api::malloc(&ptr, bytes);
    if (status.code == Api::kErrorMemoryAllocation) {
      clear_last_error();
      return buffer;
    }
    check(status, "allocating a {} ({} bytes) {} temporary of a strided copy on device {}",
          format_bytes(bytes), bytes, host ? "page-locked" : "device", device);
    buffer.ptr = static_cast<std::byte*>(ptr);
    buffer.bytes = bytes;
    buffer.host = host;
    return buffer;
  }

  /// Keeps an idle buffer for the next bounded copy, or frees it (too large, or one is kept
  /// already).
  void return_scratch(int device, ScratchBuffer buffer) noexcept {
    if (buffer.ptr == nullptr || buffer.bytes > kMaxCachedScratch) return;
    // A test runtime may poison a buffer when it goes back to the cache (the strict fake fills it
    // with 0xDB), so that a later copy that reads it before writing it is caught. No work uses it
    // any more: BoundedTemporaries::finish synchronized the stream.
    if constexpr (requires { Api::scratchReturned(buffer.ptr, buffer.bytes, buffer.host); }) {
      Api::scratchReturned(buffer.ptr, buffer.bytes, buffer.host);
    }
    try {
      const std::lock_guard lock(staging_mutex_);
      ScratchCache& cache = scratch_[device];
      ScratchBuffer& kept = buffer.host ? cache.host : cache.device;
      if (kept.ptr == nullptr) kept = std::move(buffer);
    } catch (...) {
      // Out of memory growing the map: the buffer is freed instead (its destructor).
    }
  }

  void launch_strided_copy(const std::optional<StridedCopyArgs>& found, NativeStream stream) {
    if (!found) {
      // copy_strided checked the plan's axes, and its dense variants never have more.
      throw Error(
          fmt::format("{} copy_strided: internal error: a strided copy needs more than {} "
                      "axes after the plan was found to need at most that many",
                      Api::kBackend, kStridedCopyMaxRank));
    }
    const StridedCopyArgs& args = *found;
    check(Api::launchCopyStrided(args, native(stream)),
          "launching the strided-copy kernel ({} units of {} bytes in {} axes, {} to {}) on {}",
          args.count, args.unit, args.rank, fmt::ptr(args.src), fmt::ptr(args.dst),
          describe(stream));
  }

  /// The bounded path (see above); false, with nothing done, when its temporaries cannot be
  /// allocated (the caller then uses the vendor's copies).
  bool copy_bounded(int device, std::byte* dst, const std::byte* src, const layout::CopyPlan& plan,
                    CopyKind kind, NativeStream stream) {
    const auto payload = static_cast<std::size_t>(plan.total_bytes());
    const auto synchronize = [&] {
      check(Api::streamSynchronize(native(stream)), "synchronizing {} before a strided copy",
            describe(stream));
    };
    BoundedTemporaries temps(*this, device, stream);
    switch (kind) {
      case CopyKind::DeviceToDevice:
        launch_strided_copy(kernel_args(plan, dst, src), stream);
        return true;
      case CopyKind::HostToHost:
        synchronize();
        layout::copy_host_strided(plan, dst, src);
        return true;
      case CopyKind::HostToDevice: {
        // A dense source goes over as it is and the device reorders it: on an H100 a transposing
        // copy from pinned memory ran at 0.4 GB/s when the host packed it first (a transpose on
        // one core) and the contiguous copy runs at 52 GB/s. Packing on the host is the fallback
        // when the device has no room for the temporary.
        const auto source = dense_extent(plan, /*dst_side=*/false);
        std::byte* const source_copy =
            source ? temps.device(static_cast<std::size_t>(source->bytes())) : nullptr;
        if (source_copy != nullptr) {
          temps.in_use();
          copy_1d(source_copy, src + source->begin, static_cast<std::size_t>(source->bytes()), kind,
                  stream);
          launch_strided_copy(kernel_args(plan, dst, source_copy - source->begin), stream);
        } else if (const auto image = dense_extent(plan, /*dst_side=*/true)) {
          const auto bytes = static_cast<std::size_t>(image->bytes());
          std::byte* const staging = temps.host(bytes);
          if (staging == nullptr) return false;
          synchronize();
          layout::copy_host_strided(plan, staging - image->begin, src);
          temps.in_use();
          copy_1d(dst + image->begin, staging, bytes, kind, stream);
        } else if (source) {
          return false;  // no device memory for the temporary: the vendor's copies
        } else {
          std::byte* const staging = temps.host(payload);
          std::byte* const temp = staging == nullptr ? nullptr : temps.device(payload);
          if (temp == nullptr) return false;
          synchronize();
          layout::copy_host_strided(with_dense(plan, /*dense_dst=*/true), staging, src);
          temps.in_use();
          copy_1d(temp, staging, payload, kind, stream);
          launch_strided_copy(kernel_args(with_dense(plan, /*dense_dst=*/false), dst, temp),
                              stream);
        }
        break;
      }
      case CopyKind::DeviceToHost:
        if (const auto image = dense_extent(plan, /*dst_side=*/true)) {
          const auto bytes = static_cast<std::size_t>(image->bytes());
          std::byte* const temp = temps.device(bytes);
          if (temp == nullptr) return false;
          temps.in_use();
          launch_strided_copy(kernel_args(plan, temp - image->begin, src), stream);
          copy_1d(dst + image->begin, temp, bytes, kind, stream);
          break;
        }
        if (const Extent source = side_extent(plan, /*dst_side=*/false);
            static_cast<std::size_t>(source.bytes()) <= 2 * payload) {
          const auto bytes = static_cast<std::size_t>(source.bytes());
          std::byte* const staging = temps.host(bytes);
          if (staging == nullptr) return false;
          temps.in_use();
          copy_1d(staging, src + source.begin, bytes, kind, stream);
          temps.finish();
          layout::copy_host_strided(plan, dst, staging - source.begin);
        } else {
          std::byte* const temp = temps.device(payload);
          std::byte* const staging = temp == nullptr ? nullptr : temps.host(payload);
          if (staging == nullptr) return false;
          temps.in_use();
          launch_strided_copy(kernel_args(with_dense(plan, /*dense_dst=*/true), temp, src), stream);
          copy_1d(staging, temp, payload, kind, stream);
          temps.finish();
          layout::copy_host_strided(with_dense(plan, /*dense_dst=*/false), dst, staging);
        }
        break;
    }
    temps.finish();
    return true;
  }

  /// When the plan's innermost outer axis advances by a whole number of rows, at least `height`
  /// of them, on both sides (forwards), its steps are the slices of a 3-D copy; returns the slice
  /// heights, or nothing when the plan does not have that shape.
  static std::optional<SliceHeights> slice_heights(const layout::CopyPlan& plan) {
    if (plan.outer_shape.empty() || plan.height < 2 || plan.outer_shape.back() < 2) return {};
    const std::int64_t src_step = plan.outer_src_strides.back();
    const std::int64_t dst_step = plan.outer_dst_strides.back();
    if (plan.src_pitch < plan.width || plan.dst_pitch < plan.width || plan.src_pitch <= 0 ||
        plan.dst_pitch <= 0 || src_step <= 0 || dst_step <= 0 || src_step % plan.src_pitch != 0 ||
        dst_step % plan.dst_pitch != 0) {
      return {};
    }
    const SliceHeights slices{static_cast<std::size_t>(src_step / plan.src_pitch),
                              static_cast<std::size_t>(dst_step / plan.dst_pitch)};
    const auto height = static_cast<std::size_t>(plan.height);
    if (slices.src < height || slices.dst < height) return {};
    const auto largest =
        std::max({slices.src, slices.dst, height, static_cast<std::size_t>(plan.src_pitch),
                  static_cast<std::size_t>(plan.dst_pitch),
                  static_cast<std::size_t>(plan.outer_shape.back())});
    if (largest > Api::kMaxPitch) return {};
    return slices;
  }

  static MemcpyKind memcpy_kind(CopyKind kind) noexcept {
    switch (kind) {
      case CopyKind::HostToDevice:
        return Api::kHostToDevice;
      case CopyKind::DeviceToHost:
        return Api::kDeviceToHost;
      case CopyKind::DeviceToDevice:
        return Api::kDeviceToDevice;
      case CopyKind::HostToHost:
        return Api::kHostToHost;
    }
    return Api::kMemcpyDefault;  // not a CopyKind: let the runtime classify the pointers
  }

  static unsigned host_alloc_flags(HostAllocFlags flags) noexcept {
    unsigned native_flags = 0;
    if (has_flag(flags, HostAllocFlags::Mapped)) {
      // Mapped memory is read and written by kernels while the host may look at it (Numba's
      // mapped arrays): coherent (see kHostAllocCoherent in the traits; 0 on CUDA, whose mapped
      // memory is always coherent).
      native_flags |= Api::kHostAllocMapped | Api::kHostAllocCoherent;
    } else {
      // Pinned-only memory is a DMA staging buffer, touched by stream-ordered copies only.
      native_flags |= Api::kHostAllocNonCoherent;
    }
    if (has_flag(flags, HostAllocFlags::Portable)) native_flags |= Api::kHostAllocPortable;
    if (has_flag(flags, HostAllocFlags::WriteCombined)) {
      native_flags |= Api::kHostAllocWriteCombined;
    }
    return native_flags;
  }

  static std::string describe(HostAllocFlags flags) {
    std::string out;
    const auto add = [&out](const char* word) {
      if (!out.empty()) out += '|';
      out += word;
    };
    if (has_flag(flags, HostAllocFlags::Mapped)) add("mapped");
    if (has_flag(flags, HostAllocFlags::Portable)) add("portable");
    if (has_flag(flags, HostAllocFlags::WriteCombined)) add("write-combined");
    return out.empty() ? "pinned" : out;
  }

  static std::string describe(HostRegisterFlags flags) {
    std::string out = has_flag(flags, HostRegisterFlags::Mapped) ? "mapped" : "";
    if (has_flag(flags, HostRegisterFlags::Portable)) out += out.empty() ? "portable" : "|portable";
    if (out.empty()) out = "pinned";
    if (has_flag(flags, HostRegisterFlags::ReadOnly)) out += "|read-only";
    return out;
  }

  static std::string describe(NativeStream stream) {
    if (stream == nullptr) return "the default stream";
    return fmt::format("stream {}", fmt::ptr(stream));
  }

  /// Runs a launch_host_function callback on the runtime's callback thread and deletes it. It must
  /// not call the runtime: core/ hands over keep-alive references so that nothing is released
  /// (and freed through the runtime) here. An exception cannot cross the C callback: reported.
  static void run_host_function(void* user) noexcept {
    const std::unique_ptr<std::function<void()>> fn(static_cast<std::function<void()>*>(user));
    try {
      (*fn)();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "devmem: error: %s host function threw: %s\n", Api::kBackend.data(),
                   e.what());
    } catch (...) {
      std::fprintf(stderr, "devmem: error: %s host function threw a non-standard exception\n",
                   Api::kBackend.data());
    }
  }

  // ---- Pinned staging of large pageable copies ------------------------------------------------
  //
  // The runtimes copy pageable memory through a small internal staging buffer, synchronously and
  // piece by piece, at a fraction of the bus speed. Instead, a staged copy moves `chunk` bytes at
  // a time through two page-locked buffers: while the DMA engine copies one buffer, the host fills
  // (H2D) or drains (D2H) the other; an event recorded after each chunk's DMA says when its buffer
  // is free again. The semantics are those of the runtime's pageable copies:
  // - H2D: work enqueued before on the stream completes first (the source may be its output);
  //   the call returns once the whole source has been read into staging buffers, the last DMAs
  //   may still be running (ordered on `stream` like any copy).
  // - D2H: the copy is complete when the call returns.
  // Pipelines are pooled per device (events belong to a device) and reused; a pipeline is used by
  // one copy at a time. A pipeline whose copy failed is freed, not reused: after an error the
  // state of its DMAs is unknown, and freeing waits for them.

  /// A page-locked buffer and the event recorded after the last DMA that uses it. Owns both.
  struct StagingBuffer {
    void* host = nullptr;
    VendorEvent done{};
    bool in_flight = false;  // `done` recorded after a DMA using `host` that may still run

    StagingBuffer() = default;
    StagingBuffer(const StagingBuffer&) = delete;
    StagingBuffer& operator=(const StagingBuffer&) = delete;
    ~StagingBuffer() {
      if (ProcessExit::begun()) return;  // the runtime may be gone: see ProcessExit
      // Never free memory a DMA may still use; errors are ignored (nothing can be done about them
      // in a destructor).
      if (in_flight) static_cast<void>(Api::eventSynchronize(done));
      if (done != VendorEvent{}) static_cast<void>(Api::eventDestroy(done));
      if (host != nullptr) static_cast<void>(Api::hostFree(host));
      clear_last_error();
    }
  };

  struct StagingPipeline {
    std::size_t chunk = 0;
    std::array<StagingBuffer, 2> buffers;
  };

  /// Returns the pipeline to the idle pool when the copy succeeded; frees it otherwise.
  class StagingLease {
   public:
    StagingLease(RuntimeBackend& backend, int device, std::unique_ptr<StagingPipeline> pipeline)
        : backend_(backend), device_(device), pipeline_(std::move(pipeline)) {}
    StagingLease(const StagingLease&) = delete;
    StagingLease& operator=(const StagingLease&) = delete;
    ~StagingLease() {
      if (succeeded_) backend_.return_pipeline(device_, std::move(pipeline_));
    }
    void succeeded() noexcept { succeeded_ = true; }
    [[nodiscard]] StagingPipeline& operator*() const noexcept { return *pipeline_; }

   private:
    RuntimeBackend& backend_;
    int device_;
    std::unique_ptr<StagingPipeline> pipeline_;
    bool succeeded_ = false;
  };

  /// True for a copy worth staging: large, between device memory and pageable host memory.
  bool should_stage(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
    if (kind != CopyKind::HostToDevice && kind != CopyKind::DeviceToHost) return false;
    if (bytes < staging_options().threshold) return false;
    const void* const host_side = kind == CopyKind::HostToDevice ? src : dst;
    bool pageable = false;
    check(Api::isPageable(host_side, &pageable), "looking up host memory at {}",
          fmt::ptr(host_side));
    return pageable;
  }

  /// An idle pipeline of `device`, or a new one; nullptr when page-locked memory for one cannot be
  /// had (out of memory), in which case the copy goes to the runtime unstaged.
  std::unique_ptr<StagingPipeline> take_pipeline(int device) {
    std::size_t chunk = 0;
    {
      const std::lock_guard lock(staging_mutex_);
      auto& idle = idle_staging_[device];
      if (!idle.empty()) {
        std::unique_ptr<StagingPipeline> pipeline = std::move(idle.back());
        idle.pop_back();
        return pipeline;
      }
      chunk = staging_options_.chunk;
    }
    auto pipeline = std::make_unique<StagingPipeline>();
    pipeline->chunk = chunk;
    for (StagingBuffer& buffer : pipeline->buffers) {
      // Portable: the buffer is page-locked for every device's context, whichever is current.
      const ApiStatus status = Api::hostAlloc(&buffer.host, chunk, Api::kHostAllocPortable);
      if (status.code == Api::kErrorMemoryAllocation) {
        clear_last_error();
        buffer.host = nullptr;
        return nullptr;
      }
      check(status, "allocating a {} page-locked staging buffer for device {}", format_bytes(chunk),
            device);
      // No timing (cheaper records), and a waiting host thread sleeps instead of spinning on a
      // core for up to a whole chunk's DMA.
      check(Api::eventCreateWithFlags(&buffer.done,
                                      Api::kEventDisableTiming | Api::kEventBlockingSync),
            "creating a staging event on device {}", device);
    }
    return pipeline;
  }

  void return_pipeline(int device, std::unique_ptr<StagingPipeline> pipeline) noexcept {
    try {
      const std::lock_guard lock(staging_mutex_);
      // A pipeline made before set_staging_options changed the chunk size is not kept.
      if (pipeline->chunk == staging_options_.chunk) {
        idle_staging_[device].push_back(std::move(pipeline));
      }
    } catch (...) {
      // Out of memory growing the pool: the pipeline is freed instead (its destructor).
    }
  }

  /// Waits until no DMA uses `buffer`.
  void wait_idle(StagingBuffer& buffer) {
    if (!buffer.in_flight) return;
    check(Api::eventSynchronize(buffer.done), "waiting for a staging buffer");
    buffer.in_flight = false;
  }

  /// Enqueues a DMA between `buffer` and device memory, then the event that marks its end.
  void enqueue_chunk(StagingBuffer& buffer, void* dst, const void* src, std::size_t bytes,
                     CopyKind kind, NativeStream stream) {
    copy_1d(dst, src, bytes, kind, stream);
    // From here a DMA may use the buffer: if recording fails, freeing the pipeline must still
    // wait for it, which synchronizing the (unrecorded) event cannot do; the stream can.
    buffer.in_flight = true;
    const ApiStatus status = Api::eventRecord(buffer.done, native(stream));
    if (status.code != Api::kSuccess) {
      static_cast<void>(Api::streamSynchronize(native(stream)));
      buffer.in_flight = false;
      check(status, "recording a staging event on {}", describe(stream));
    }
  }

  void copy_staged(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                   NativeStream stream) {
    std::unique_ptr<StagingPipeline> pipeline = take_pipeline(device);
    if (pipeline == nullptr) {
      copy_1d(dst, src, bytes, kind, stream);  // no page-locked memory to stage through
      return;
    }
    StagingLease lease(*this, device, std::move(pipeline));
    StagingPipeline& p = *lease;
    const std::size_t chunks = (bytes + p.chunk - 1) / p.chunk;
    const auto part = [&](std::size_t i) { return std::min(p.chunk, bytes - i * p.chunk); };
    if (kind == CopyKind::HostToDevice) {
      auto* const out = static_cast<std::byte*>(dst);
      const auto* const in = static_cast<const std::byte*>(src);
      // Like the runtime's pageable copy: earlier work on the stream may still write the source.
      check(Api::streamSynchronize(native(stream)), "synchronizing {} before a staged copy",
            describe(stream));
      for (std::size_t i = 0; i < chunks; ++i) {
        StagingBuffer& buffer = p.buffers[i % 2];
        wait_idle(buffer);
        std::memcpy(buffer.host, in + i * p.chunk, part(i));
        enqueue_chunk(buffer, out + i * p.chunk, buffer.host, part(i), kind, stream);
      }
    } else {
      auto* const out = static_cast<std::byte*>(dst);
      const auto* const in = static_cast<const std::byte*>(src);
      for (StagingBuffer& buffer : p.buffers) wait_idle(buffer);
      // Two chunks in flight; each drained chunk's buffer takes the chunk two ahead.
      for (std::size_t i = 0; i < std::min<std::size_t>(2, chunks); ++i) {
        enqueue_chunk(p.buffers[i], p.buffers[i].host, in + i * p.chunk, part(i), kind, stream);
      }
      for (std::size_t i = 0; i < chunks; ++i) {
        StagingBuffer& buffer = p.buffers[i % 2];
        wait_idle(buffer);
        std::memcpy(out + i * p.chunk, buffer.host, part(i));
        if (i + 2 < chunks) {
          enqueue_chunk(buffer, buffer.host, in + (i + 2) * p.chunk, part(i + 2), kind, stream);
        }
      }
    }
    lease.succeeded();
  }

  std::once_flag census_once_;
  Census census_;

  std::mutex pools_mutex_;
  std::map<int, bool> pools_supported_;  // per device: memoryPoolsSupported, asked once
  std::mutex staging_mutex_;             // guards staging_options_, idle_staging_ and scratch_
  StagingOptions staging_options_;
  std::map<int, std::vector<std::unique_ptr<StagingPipeline>>> idle_staging_;
  std::map<int, ScratchCache> scratch_;  // guarded by staging_mutex_
};

}  // namespace devmem::gpu_runtime

// What HIP-CPU (ROCm's HIP runtime API on the CPU; see ../shared/third_party/hip-cpu/PROVENANCE.md)
// lacks or does differently from ROCm's HIP, supplied for the `roc-hipcpu` and `cuda-hipcpu`
// presets only: no production build includes this file. Included through the wrappers
// <hip/hip_runtime_api.h> and <hip/hip_runtime.h> beside it, after HIP-CPU itself. One header
// although over 800 lines: its definitions share one allocation table and one lock, which the
// wrappers must see before any of HIP-CPU's inline calls (managed memory, the newest part, is in
// hip_compat_managed.hpp).
//
// Every call here follows ROCm's documented semantics (HIP 5.2, the version the `roc` preset
// builds against), built on HIP-CPU's own streams, tasks and events:
// - bookkeeping of device allocations, page-locked allocations and registrations, which ROCm keeps
//   and HIP-CPU does not: hipFree/hipHostFree of unknown pointers, overlapping registrations
//   (hipErrorHostMemoryAlreadyRegistered, 712), unregistering unknown memory
//   (hipErrorHostMemoryNotRegistered, 713), hipPointerGetAttributes (hipErrorInvalidValue for
//   memory HIP neither allocated nor registered), hipHostGetDevicePointer of pageable memory;
// - out of memory reported as hipErrorOutOfMemory (HIP-CPU returns success and a null pointer);
// - copies from or to pageable host memory complete before the call returns (the vendors'
//   documented behaviour: the source of a pageable H2D copy is staged before the call returns, a
//   D2H copy into pageable memory has completed; HIP-CPU would read the source later, after the
//   caller may have reused it);
// - the null stream is the legacy blocking stream: work enqueued on it starts after all earlier
//   work of the device, and work enqueued on another stream starts after earlier null-stream work
//   (HIP-CPU runs the null stream concurrently with the others). This is emulated on the host
//   side: the enqueuing thread waits first, which keeps the order and never makes one queued task
//   wait for another (HIP-CPU drains its queues round by round, so a task that waits for another
//   queue's later task would deadlock);
// - hipStreamWaitEvent is likewise resolved on the host: the calling thread waits for the event;
// - hipStreamQuery reports whether the stream's work has finished (HIP-CPU reports an empty queue,
//   also while its last task still runs);
// - hipStreamIsCapturing (HIP-CPU has no graphs: never capturing), hipDeviceGetAttribute (memory
//   pools only), hipMallocAsync / hipFreeAsync tracked like hipMalloc, hipEventQuery,
//   hipStreamAddCallback, hipLaunchHostFunc, hipMemcpy3DAsync, hipFuncSetAttribute
//   (which HIP-CPU lacks), hipEventSynchronize of a never-recorded event (success, as on ROCm),
//   hipHostMalloc with `unsigned` flags and their validation, hipStreamDestroy letting the
//   stream's work finish (HIP-CPU drops it), hipMemcpyToSymbol(const void* symbol, ...);
// - failing calls set the thread's last error (hipGetLastError), as on ROCm;
// - after the runtime has been torn down at process exit, calls return hipErrorDeinitialized
//   instead of waiting for HIP-CPU's stopped worker thread forever.
//
// Names HIP-CPU lacks are added to the global namespace; names HIP-CPU has with other semantics are
// redirected to these definitions by macros at the end of this file.
//
// One file although long: every call here works on the same runtime state (devmem::hipcpu::State:
// the allocation and registration tables, the legacy-stream order) and the redirecting macros at
// the end must follow all the definitions; the wrappers include it as one layer over HIP-CPU.
#pragma once

#if !defined(__HIP_CPU_RT__)
#error "devmem_hipcpu/hip_compat.hpp is included by the <hip/...> wrappers, after HIP-CPU"
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

// Defined in ROCm's enum, absent from HIP-CPU's (the value is ROCm's).
inline constexpr hipError_t hipErrorInvalidPitchValue = static_cast<hipError_t>(12);
// HIP-CPU never captures, so never answers this.
inline constexpr hipError_t hipErrorStreamCaptureImplicit = static_cast<hipError_t>(906);

// ROCm's pointer attributes (HIP 5.2 layout).
enum hipMemoryType {
  hipMemoryTypeHost,
  hipMemoryTypeDevice,
  hipMemoryTypeArray,
  hipMemoryTypeUnified
};
struct hipPointerAttribute_t {
  hipMemoryType memoryType;
  int device;
  void* devicePointer;
  void* hostPointer;
  int isManaged;
  unsigned allocationFlags;
};

// ROCm's 3-D copy descriptor for linear memory (arrays are not modelled).
struct hipPitchedPtr {
  void* ptr;
  std::size_t pitch;
  std::size_t xsize;
  std::size_t ysize;
};
struct hipExtent {
  std::size_t width;  // bytes, for linear memory
  std::size_t height;
  std::size_t depth;
};
struct hipPos {
  std::size_t x;
  std::size_t y;
  std::size_t z;
};
struct hipMemcpy3DParms {
  void* srcArray;
  hipPos srcPos;
  hipPitchedPtr srcPtr;
  void* dstArray;
  hipPos dstPos;
  hipPitchedPtr dstPtr;
  hipExtent extent;
  hipMemcpyKind kind;
};

using hipStreamCallback_t = void (*)(hipStream_t stream, hipError_t status, void* user_data);
using hipHostFn_t = void (*)(void* user_data);

enum hipFuncAttribute {
  hipFuncAttributeMaxDynamicSharedMemorySize = 8,
  hipFuncAttributePreferredSharedMemoryCarveout = 9,
};

#pragma GCC visibility push(default)

// HIP's stream-capture states (HIP-CPU has no graphs).
enum hipStreamCaptureStatus {
  hipStreamCaptureStatusNone = 0,
  hipStreamCaptureStatusActive = 1,
  hipStreamCaptureStatusInvalidated = 2,
};
// HIP's device attributes, of which the compat layer answers one (see hipDeviceGetAttribute).
enum hipDeviceAttribute_t {
  hipDeviceAttributeMemoryPoolsSupported = 1,
};

namespace devmem::hipcpu {

using Clock = std::chrono::steady_clock;

// ---- Runtime state shared by libdevmem.so and the programs that launch kernels
// -------------------- (default visibility: one copy per process, like HIP-CPU's own Runtime)

enum class MemoryKind { Device, PinnedHost, RegisteredHost, Managed };

struct MemoryRange {
  std::uintptr_t begin = 0;
  std::size_t bytes = 0;
  MemoryKind kind = MemoryKind::Device;
  unsigned flags = 0;
  [[nodiscard]] bool contains(std::uintptr_t address) const noexcept {
    return address >= begin && address - begin < bytes;
  }
};

class State {
 public:
  /// Never destroyed: frees at process exit still find it.
  static State& get() {
    static State* const state = new State;
    return *state;
  }

  /// False when [begin, begin + bytes) overlaps a known range.
  bool insert(const MemoryRange& range) {
    const std::lock_guard lock(mutex_);
    auto next = ranges_.lower_bound(range.begin);
    if (next != ranges_.end() && next->first < range.begin + range.bytes) return false;
    if (next != ranges_.begin() && std::prev(next)->second.contains(range.begin)) return false;
    ranges_.emplace(range.begin, range);
    return true;
  }
  [[nodiscard]] std::optional<MemoryRange> find(const void* address) {
    const auto a = reinterpret_cast<std::uintptr_t>(address);
    const std::lock_guard lock(mutex_);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return {};
    --it;
    if (!it->second.contains(a)) return {};
    return it->second;
  }
  /// Removes the range starting exactly at `address` when it is of `kind`.
  [[nodiscard]] bool erase(const void* address, MemoryKind kind) {
    const std::lock_guard lock(mutex_);
    const auto it = ranges_.find(reinterpret_cast<std::uintptr_t>(address));
    if (it == ranges_.end() || it->second.kind != kind) return false;
    ranges_.erase(it);
    return true;
  }

  void add_stream(hipStream_t stream) {
    const std::lock_guard lock(mutex_);
    streams_.emplace(stream, std::shared_future<void>{});
  }
  [[nodiscard]] bool remove_stream(hipStream_t stream) {
    const std::lock_guard lock(mutex_);
    return streams_.erase(stream) == 1;
  }
  /// A destroyed stream's queue, to reuse (see hipStreamDestroy), or nullptr.
  [[nodiscard]] hipStream_t take_idle_stream() {
    const std::lock_guard lock(mutex_);
    if (idle_streams_.empty()) return nullptr;
    const hipStream_t stream = idle_streams_.back();
    idle_streams_.pop_back();
    return stream;
  }
  void add_idle_stream(hipStream_t stream) {
    const std::lock_guard lock(mutex_);
    idle_streams_.push_back(stream);
  }
  [[nodiscard]] bool has_stream(hipStream_t stream) {
    const std::lock_guard lock(mutex_);
    return streams_.count(stream) == 1;
  }

  /// Remembers the completion of the task just enqueued on `stream` (nullptr: the null stream).
  /// A stream runs its tasks in order, so it is the completion of all the stream's work so far.
  void set_last(hipStream_t stream, std::shared_future<void> done) {
    const std::lock_guard lock(mutex_);
    if (stream == nullptr) {
      null_last_ = std::move(done);
    } else if (const auto it = streams_.find(stream); it != streams_.end()) {
      it->second = std::move(done);
    }
  }
  /// The completion of the work enqueued on `stream` so far (invalid: none was).
  [[nodiscard]] std::shared_future<void> last(hipStream_t stream) {
    const std::lock_guard lock(mutex_);
    if (stream == nullptr) return null_last_;
    const auto it = streams_.find(stream);
    return it != streams_.end() ? it->second : std::shared_future<void>{};
  }
  /// The completions of every stream's work so far, the null stream's included.
  [[nodiscard]] std::vector<std::shared_future<void>> all_last() {
    const std::lock_guard lock(mutex_);
    std::vector<std::shared_future<void>> out{null_last_};
    for (const auto& [stream, done] : streams_) out.push_back(done);
    return out;
  }

  [[nodiscard]] bool deinitialized() const noexcept { return deinitialized_.load(); }
  void mark_deinitialized() noexcept { deinitialized_.store(true); }

 private:
  State() = default;
  std::mutex mutex_;
  std::map<std::uintptr_t, MemoryRange> ranges_;
  std::map<hipStream_t, std::shared_future<void>> streams_;  // created streams, their last work
  std::shared_future<void> null_last_;
  std::vector<hipStream_t> idle_streams_;
  std::atomic<bool> deinitialized_{false};
};

/// Marks the runtime torn down when static destruction reaches it. It is created right after
/// HIP-CPU's worker thread (a function-local static of HIP-CPU's), so it is destroyed before that
/// thread is stopped: from then on calls fail with hipErrorDeinitialized, as ROCm's do once
/// HIP has been unloaded, instead of waiting for a worker that no longer runs.
struct TeardownMark {
  ~TeardownMark() { State::get().mark_deinitialized(); }
};

/// Starts HIP-CPU's runtime (its worker thread) and the teardown mark after it.
inline void ensure_started() {
  static const bool started = [] {
    static_cast<void>(::hip::detail::Runtime::null_stream());
    static TeardownMark mark;
    return true;
  }();
  static_cast<void>(started);
}

/// Records `status` as the thread's last error when it is a failure (ROCm's rule) and returns it.
inline hipError_t result(hipError_t status) noexcept {
  if (status != hipSuccess) ::hip::detail::Runtime::set_last_error(status);
  return status;
}

/// hipErrorDeinitialized after teardown, otherwise starts the runtime and returns success.
inline hipError_t enter() {
  if (State::get().deinitialized()) return hipErrorDeinitialized;
  ensure_started();
  return hipSuccess;
}

[[nodiscard]] inline bool is_page_locked(const void* address) {
  const std::optional<MemoryRange> range = State::get().find(address);
  return range &&
         (range->kind == MemoryKind::PinnedHost || range->kind == MemoryKind::RegisteredHost);
}
/// Device or managed memory (hipMalloc, hipMallocAsync, hipMallocManaged).
[[nodiscard]] inline bool is_device(const void* address) {
  const std::optional<MemoryRange> range = State::get().find(address);
  return range && (range->kind == MemoryKind::Device || range->kind == MemoryKind::Managed);
}

// ---- Stream order -------------------------------------------------------------------------------

/// Appends `work` to `stream`'s queue (nullptr: the null stream) and records it as the stream's
/// last work.
inline void push(hipStream_t stream, std::function<void()> work) {
  ::hip::detail::Task task([work = std::move(work)](bool&) { work(); });
  std::shared_future<void> done = task.get_future().share();
  ::hip::detail::Stream* const queue =
      stream != nullptr ? stream : ::hip::detail::Runtime::null_stream();
  // The queue's lock orders the pushes, the state's lock the records: push and record under one
  // more lock so that a concurrent push cannot record its task before this earlier one.
  static std::mutex order;
  const std::lock_guard lock(order);
  queue->apply([&task](auto&& tasks) { tasks.push_back(std::move(task)); });
  State::get().set_last(stream, std::move(done));
}

/// Records the end of what HIP-CPU itself just enqueued on `stream` (an event, a kernel).
inline void mark_enqueued(hipStream_t stream) {
  push(stream, [] {});
}

inline void wait(const std::shared_future<void>& done) {
  if (done.valid()) done.wait();
}
[[nodiscard]] inline bool finished(const std::shared_future<void>& done) {
  return !done.valid() || done.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

/// Waits until the work enqueued on `stream` so far has finished; for the null stream, the work of
/// every stream (the legacy stream's synchronisation).
inline void drain(hipStream_t stream) {
  if (stream != nullptr) {
    wait(State::get().last(stream));
    return;
  }
  for (const std::shared_future<void>& done : State::get().all_last()) wait(done);
}

/// The legacy null stream's ordering, kept by the enqueuing thread (see the top of the file).
inline void order_before_enqueue(hipStream_t stream) {
  if (stream == nullptr) {
    drain(nullptr);  // every stream's earlier work
  } else {
    wait(State::get().last(nullptr));  // earlier null-stream work
  }
}

[[nodiscard]] inline hipError_t check_stream(hipStream_t stream) {
  if (stream != nullptr && !State::get().has_stream(stream)) return hipErrorInvalidHandle;
  return hipSuccess;
}

/// hipErrorDeinitialized / hipErrorInvalidHandle, or success after ordering the enqueue.
inline hipError_t enter_enqueue(hipStream_t stream) {
  if (const hipError_t status = enter(); status != hipSuccess) return status;
  if (const hipError_t status = check_stream(stream); status != hipSuccess) return status;
  order_before_enqueue(stream);
  return hipSuccess;
}

// ---- Devices ------------------------------------------------------------------------------------

inline hipError_t hipFuncSetAttribute(const void* function, hipFuncAttribute attribute, int value) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (function == nullptr) return result(hipErrorInvalidDeviceFunction);
  if (attribute != hipFuncAttributeMaxDynamicSharedMemorySize &&
      attribute != hipFuncAttributePreferredSharedMemoryCarveout) {
    return result(hipErrorInvalidValue);
  }
  if (value < 0) return result(hipErrorInvalidValue);
  // HIP-CPU gives a block any amount of dynamic shared memory: nothing to raise.
  return hipSuccess;
}

// ---- Device memory ------------------------------------------------------------------------------

/// Allocates `bytes` (> 0) aligned to `alignment` and records them; out of memory (HIP-CPU's own
/// allocation returns success with a null pointer instead).
inline hipError_t allocate_tracked(void** ptr, std::size_t bytes, std::size_t alignment,
                                   MemoryKind kind, unsigned flags) {
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded < bytes) return hipErrorOutOfMemory;
  void* const memory = std::aligned_alloc(alignment, rounded);
  if (memory == nullptr) return hipErrorOutOfMemory;
  State::get().insert({reinterpret_cast<std::uintptr_t>(memory), bytes, kind, flags});
  *ptr = memory;
  return hipSuccess;
}

/// Frees memory allocate_tracked returned as `kind`, after the device's work (ROCm's frees wait
/// for it too); hipErrorInvalidValue for anything else.
inline hipError_t free_tracked(void* ptr, MemoryKind kind) {
  if (ptr == nullptr) return hipSuccess;
  if (!State::get().erase(ptr, kind)) return hipErrorInvalidValue;
  drain(nullptr);
  std::free(ptr);
  return hipSuccess;
}

/// ROCm's allocation granularity for device memory.
inline constexpr std::size_t kDeviceAlignment = 256;

inline hipError_t hipMalloc(void** ptr, std::size_t bytes) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (ptr == nullptr) return result(hipErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return hipSuccess;
  return result(allocate_tracked(ptr, bytes, kDeviceAlignment, MemoryKind::Device, 0));
}

/// Device memory, and managed memory (hip_compat_managed.hpp), which ROCm frees with hipFree too.
inline hipError_t hipFree(void* ptr) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  const std::optional<MemoryRange> range = State::get().find(ptr);
  const bool managed = range && range->kind == MemoryKind::Managed;
  return result(free_tracked(ptr, managed ? MemoryKind::Managed : MemoryKind::Device));
}

/// Stream-ordered allocation: HIP-CPU's memory is usable at once, so an allocation ordered on
/// `stream` is an ordinary one (tracked like hipMalloc's; HIP-CPU's own hipMallocAsync is not).
inline hipError_t hipMallocAsync(void** ptr, std::size_t bytes, hipStream_t stream) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (ptr == nullptr) return result(hipErrorInvalidValue);
  if (const hipError_t status = check_stream(stream); status != hipSuccess) return result(status);
  *ptr = nullptr;
  if (bytes == 0) return hipSuccess;
  return result(allocate_tracked(ptr, bytes, kDeviceAlignment, MemoryKind::Device, 0));
}

/// Frees once the work enqueued on `stream` before the call has run (a task of the stream), without
/// waiting for it; hipErrorInvalidValue at once for memory hipMalloc(Async) did not return.
inline hipError_t hipFreeAsync(void* ptr, hipStream_t stream) {
  if (ptr == nullptr) return hipSuccess;
  if (const hipError_t status = enter_enqueue(stream); status != hipSuccess) {
    return result(status);
  }
  const std::optional<MemoryRange> range = State::get().find(ptr);
  if (!range || range->kind != MemoryKind::Device ||
      range->begin != reinterpret_cast<std::uintptr_t>(ptr)) {
    return result(hipErrorInvalidValue);
  }
  push(stream, [ptr] {
    if (State::get().erase(ptr, MemoryKind::Device)) std::free(ptr);
  });
  return hipSuccess;
}

/// HIP-CPU's one device has the stream-ordered allocator above; other attributes are not known.
inline hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attribute, int device) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (value == nullptr) return result(hipErrorInvalidValue);
  if (device != 0) return result(hipErrorInvalidDevice);
  if (attribute != hipDeviceAttributeMemoryPoolsSupported) return result(hipErrorInvalidValue);
  *value = 1;
  return hipSuccess;
}

// ---- Page-locked host memory --------------------------------------------------------------------

inline constexpr unsigned kHostMallocFlags = hipHostMallocPortable | hipHostMallocMapped |
                                             hipHostMallocWriteCombined | hipHostMallocCoherent |
                                             hipHostMallocNonCoherent;
inline constexpr std::size_t kPageSize = 4096;

inline hipError_t hipHostMalloc(void** ptr, std::size_t bytes, unsigned flags) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (ptr == nullptr) return result(hipErrorInvalidValue);
  *ptr = nullptr;
  if ((flags & ~kHostMallocFlags) != 0) return result(hipErrorInvalidValue);
  if ((flags & hipHostMallocCoherent) != 0 && (flags & hipHostMallocNonCoherent) != 0) {
    return result(hipErrorInvalidValue);
  }
  if (bytes == 0) return hipSuccess;
  return result(allocate_tracked(ptr, bytes, kPageSize, MemoryKind::PinnedHost, flags));
}

inline hipError_t hipHostFree(void* ptr) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  return result(free_tracked(ptr, MemoryKind::PinnedHost));
}

inline hipError_t hipHostRegister(void* ptr, std::size_t bytes, unsigned flags) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  constexpr unsigned kKnown = hipHostRegisterPortable | hipHostRegisterMapped |
                              hipHostRegisterIoMemory | hipExtHostRegisterCoarseGrained;
  if (ptr == nullptr || bytes == 0 || (flags & ~kKnown) != 0) return result(hipErrorInvalidValue);
  if (!State::get().insert(
          {reinterpret_cast<std::uintptr_t>(ptr), bytes, MemoryKind::RegisteredHost, flags})) {
    return result(hipErrorHostMemoryAlreadyRegistered);
  }
  return result(::hipHostRegister(ptr, bytes, flags));
}

inline hipError_t hipHostUnregister(void* ptr) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (ptr == nullptr) return result(hipErrorInvalidValue);
  if (!State::get().erase(ptr, MemoryKind::RegisteredHost)) {
    return result(hipErrorHostMemoryNotRegistered);
  }
  return result(::hipHostUnregister(ptr));
}

/// On ROCm all page-locked memory is mapped into the device's address space; under HIP-CPU the
/// device address is the host address.
inline hipError_t hipHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (device_ptr == nullptr || host_ptr == nullptr || flags != 0) {
    return result(hipErrorInvalidValue);
  }
  if (!is_page_locked(host_ptr)) return result(hipErrorInvalidValue);
  *device_ptr = host_ptr;
  return hipSuccess;
}

inline hipError_t hipPointerGetAttributes(hipPointerAttribute_t* attributes, const void* ptr) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (attributes == nullptr || ptr == nullptr) return result(hipErrorInvalidValue);
  const std::optional<MemoryRange> range = State::get().find(ptr);
  if (!range) return result(hipErrorInvalidValue);  // HIP 5.2: neither allocated nor registered
  auto* const address = const_cast<void*>(ptr);
  *attributes = hipPointerAttribute_t{};
  attributes->device = 0;
  attributes->devicePointer = address;
  attributes->allocationFlags = range->flags;
  if (range->kind == MemoryKind::Device) {
    attributes->memoryType = hipMemoryTypeDevice;
  } else if (range->kind == MemoryKind::Managed) {  // ROCm 5: unified memory, flagged managed
    attributes->memoryType = hipMemoryTypeUnified;
    attributes->isManaged = 1;
    attributes->hostPointer = address;
  } else {
    attributes->memoryType = hipMemoryTypeHost;
    attributes->hostPointer = address;
  }
  return hipSuccess;
}

// ---- Streams and events -------------------------------------------------------------------------

inline hipError_t hipStreamCreate(hipStream_t* stream) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (stream == nullptr) return result(hipErrorInvalidValue);
  *stream = State::get().take_idle_stream();
  if (*stream == nullptr) {
    if (const hipError_t status = ::hipStreamCreate(stream); status != hipSuccess) {
      return result(status);
    }
  }
  State::get().add_stream(*stream);
  return hipSuccess;
}

/// ROCm lets the stream's pending work finish; HIP-CPU would drop it. The queue is kept for the
/// next hipStreamCreate instead of being destroyed: HIP-CPU gives every thread that touches a
/// queue a slot for it, 255 per thread and never released, so a process could otherwise create
/// only a few hundred streams in its lifetime (CUDA and ROCm reuse stream handles too).
inline hipError_t hipStreamDestroy(hipStream_t stream) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (stream == nullptr || !State::get().has_stream(stream)) return result(hipErrorInvalidHandle);
  drain(stream);
  static_cast<void>(State::get().remove_stream(stream));
  State::get().add_idle_stream(stream);
  return hipSuccess;
}

inline hipError_t hipStreamSynchronize(hipStream_t stream) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (const hipError_t status = check_stream(stream); status != hipSuccess) return result(status);
  drain(stream);
  return hipSuccess;
}

inline hipError_t hipDeviceSynchronize() {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  drain(nullptr);
  return hipSuccess;
}

/// HIP-CPU has no graphs, so no stream is ever being captured: ROCm's answer for a stream outside
/// a capture (hipStreamCaptureStatusNone), after its checks of the arguments.
inline hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus* status) {
  if (const hipError_t entered = enter(); entered != hipSuccess) return result(entered);
  if (status == nullptr) return result(hipErrorInvalidValue);
  if (const hipError_t checked = check_stream(stream); checked != hipSuccess) {
    return result(checked);
  }
  *status = hipStreamCaptureStatusNone;
  return hipSuccess;
}

/// Success once the work enqueued so far has finished, hipErrorNotReady before.
inline hipError_t hipStreamQuery(hipStream_t stream) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (const hipError_t status = check_stream(stream); status != hipSuccess) return result(status);
  if (!finished(State::get().last(stream))) return result(hipErrorNotReady);
  return hipSuccess;
}

inline hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream = nullptr) {
  if (event == nullptr) return result(hipErrorInvalidHandle);
  if (const hipError_t status = enter_enqueue(stream); status != hipSuccess) {
    return result(status);
  }
  const hipError_t status = ::hipEventRecord(event, stream);
  if (status == hipSuccess) mark_enqueued(stream);
  return result(status);
}

/// A never-recorded event counts as complete (ROCm returns success; HIP-CPU an error).
inline hipError_t hipEventSynchronize(hipEvent_t event) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (event == nullptr) return result(hipErrorInvalidHandle);
  if (!is_done(*event).valid()) return hipSuccess;
  is_done(*event).wait();
  return hipSuccess;
}

inline hipError_t hipEventQuery(hipEvent_t event) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (event == nullptr) return result(hipErrorInvalidHandle);
  if (!is_done(*event).valid()) return hipSuccess;
  if (is_done(*event).wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    return result(hipErrorNotReady);
  }
  return hipSuccess;
}

inline hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  return result(::hipEventElapsedTime(ms, start, stop));
}

/// Resolved on the host: the calling thread waits for the event (see the top of the file).
inline hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned flags) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (event == nullptr) return result(hipErrorInvalidHandle);
  if (flags != 0) return result(hipErrorInvalidValue);
  if (const hipError_t status = check_stream(stream); status != hipSuccess) return result(status);
  if (is_done(*event).valid()) is_done(*event).wait();
  return hipSuccess;
}

inline hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t function, void* user_data) {
  if (function == nullptr) return result(hipErrorInvalidValue);
  if (const hipError_t status = enter_enqueue(stream); status != hipSuccess) {
    return result(status);
  }
  push(stream, [function, user_data] { function(user_data); });
  return hipSuccess;
}

inline hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback,
                                       void* user_data, unsigned flags) {
  if (callback == nullptr || flags != 0) return result(hipErrorInvalidValue);
  if (const hipError_t status = enter_enqueue(stream); status != hipSuccess) {
    return result(status);
  }
  push(stream, [stream, callback, user_data] { callback(stream, hipSuccess, user_data); });
  return hipSuccess;
}

// ---- Copies and memset --------------------------------------------------------------------------

/// Whether a copy touches pageable host memory (ROCm copies it before returning).
[[nodiscard]] inline bool touches_pageable(void* dst, const void* src, hipMemcpyKind kind) {
  const auto pageable = [](const void* p) { return !is_page_locked(p) && !is_device(p); };
  switch (kind) {
    case hipMemcpyHostToDevice:
      return pageable(src);
    case hipMemcpyDeviceToHost:
      return pageable(dst);
    case hipMemcpyHostToHost:
    case hipMemcpyDefault:
      return pageable(src) || pageable(dst);
    case hipMemcpyDeviceToDevice:
      return false;
  }
  return false;
}

[[nodiscard]] inline bool known_kind(hipMemcpyKind kind) {
  return kind == hipMemcpyHostToHost || kind == hipMemcpyHostToDevice ||
         kind == hipMemcpyDeviceToHost || kind == hipMemcpyDeviceToDevice ||
         kind == hipMemcpyDefault;
}

/// Runs `copy` in stream order: at once after the stream's earlier work when it touches pageable
/// memory, otherwise as a task of the stream.
inline hipError_t enqueue_copy(hipStream_t stream, bool pageable, std::function<void()> copy) {
  if (const hipError_t status = enter_enqueue(stream); status != hipSuccess) return status;
  if (pageable) {
    drain(stream);
    copy();
  } else {
    push(stream, std::move(copy));
  }
  return hipSuccess;
}

inline hipError_t hipMemcpyAsync(void* dst, const void* src, std::size_t bytes, hipMemcpyKind kind,
                                 hipStream_t stream = nullptr) {
  if (!known_kind(kind)) return result(hipErrorInvalidMemcpyDirection);
  if (bytes == 0) return hipSuccess;
  if (dst == nullptr || src == nullptr) return result(hipErrorInvalidValue);
  return result(enqueue_copy(stream, touches_pageable(dst, src, kind),
                             [=] { std::memmove(dst, src, bytes); }));
}

/// HIP-CPU has one device and no hipMemcpyPeerAsync: a copy within that device once both indices
/// are checked (hipErrorInvalidDevice otherwise, as ROCm answers).
inline hipError_t hipMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                     std::size_t bytes, hipStream_t stream = nullptr) {
  int count = 0;
  if (const hipError_t status = ::hipGetDeviceCount(&count); status != hipSuccess) {
    return result(status);
  }
  if (dst_device < 0 || dst_device >= count || src_device < 0 || src_device >= count) {
    return result(hipErrorInvalidDevice);
  }
  return ::devmem::hipcpu::hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToDevice, stream);
}

inline hipError_t hipMemcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src,
                                   std::size_t src_pitch, std::size_t width, std::size_t height,
                                   hipMemcpyKind kind, hipStream_t stream = nullptr) {
  if (!known_kind(kind)) return result(hipErrorInvalidMemcpyDirection);
  if (width == 0 || height == 0) return hipSuccess;
  if (dst == nullptr || src == nullptr) return result(hipErrorInvalidValue);
  if (dst_pitch < width || src_pitch < width) return result(hipErrorInvalidPitchValue);
  return result(enqueue_copy(stream, touches_pageable(dst, src, kind), [=] {
    for (std::size_t row = 0; row < height; ++row) {
      std::memmove(static_cast<std::byte*>(dst) + row * dst_pitch,
                   static_cast<const std::byte*>(src) + row * src_pitch, width);
    }
  }));
}

inline hipError_t hipMemcpy3DAsync(const hipMemcpy3DParms* p, hipStream_t stream = nullptr) {
  if (p == nullptr || p->srcArray != nullptr || p->dstArray != nullptr) {
    return result(hipErrorInvalidValue);  // only linear memory is modelled
  }
  if (!known_kind(p->kind)) return result(hipErrorInvalidMemcpyDirection);
  const hipExtent e = p->extent;
  if (e.width == 0 || e.height == 0 || e.depth == 0) return hipSuccess;
  const hipPitchedPtr s = p->srcPtr;
  const hipPitchedPtr d = p->dstPtr;
  if (s.ptr == nullptr || d.ptr == nullptr) return result(hipErrorInvalidValue);
  if (s.pitch < e.width || d.pitch < e.width) return result(hipErrorInvalidPitchValue);
  if (s.ysize < e.height || d.ysize < e.height) return result(hipErrorInvalidValue);
  auto* const dst = static_cast<std::byte*>(d.ptr) + p->dstPos.z * d.pitch * d.ysize +
                    p->dstPos.y * d.pitch + p->dstPos.x;
  const auto* const src = static_cast<const std::byte*>(s.ptr) + p->srcPos.z * s.pitch * s.ysize +
                          p->srcPos.y * s.pitch + p->srcPos.x;
  return result(enqueue_copy(stream, touches_pageable(dst, src, p->kind), [=] {
    for (std::size_t k = 0; k < e.depth; ++k) {
      for (std::size_t row = 0; row < e.height; ++row) {
        std::memmove(dst + (k * d.ysize + row) * d.pitch, src + (k * s.ysize + row) * s.pitch,
                     e.width);
      }
    }
  }));
}

inline hipError_t hipMemsetAsync(void* dst, int value, std::size_t bytes,
                                 hipStream_t stream = nullptr) {
  if (bytes == 0) return hipSuccess;
  if (dst == nullptr) return result(hipErrorInvalidValue);
  return result(enqueue_copy(stream, false, [=] { std::memset(dst, value, bytes); }));
}

/// ROCm's signature: the symbol is the address of the __constant__/__device__ variable.
inline hipError_t hipMemcpyToSymbol(const void* symbol, const void* src, std::size_t bytes,
                                    std::size_t offset = 0,
                                    hipMemcpyKind kind = hipMemcpyHostToDevice) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (symbol == nullptr) return result(hipErrorInvalidSymbol);
  if (bytes == 0) return hipSuccess;
  if (src == nullptr) return result(hipErrorInvalidValue);
  if (!known_kind(kind)) return result(hipErrorInvalidMemcpyDirection);
  // Synchronous, like ROCm's: after the device's earlier work, before the call returns.
  order_before_enqueue(nullptr);
  std::memcpy(static_cast<std::byte*>(const_cast<void*>(symbol)) + offset, src, bytes);
  return hipSuccess;
}

// ---- Errors -------------------------------------------------------------------------------------

inline const char* hipGetErrorName(hipError_t status) noexcept {
  if (status == hipErrorInvalidPitchValue) return "hipErrorInvalidPitchValue";
  return ::hipGetErrorName(status);
}
inline const char* hipGetErrorString(hipError_t status) noexcept {
  if (status == hipErrorInvalidPitchValue) return "invalid pitch argument";
  return ::hipGetErrorString(status);
}

/// Enqueues a kernel (hipLaunchKernelGGL below) after the legacy stream ordering. A launch on a
/// destroyed or unknown stream, or after teardown, is refused like the runtime's launch errors:
/// the error is left as the thread's last error for hipGetLastError.
[[nodiscard]] inline bool prepare_launch(hipStream_t stream) {
  const hipError_t status = enter_enqueue(stream);
  if (status == hipSuccess) return true;
  static_cast<void>(result(status));
  return false;
}

/// ROCm's signature (`unsigned` flags; HIP-CPU takes its enum), with ROCm's validation.
inline hipError_t hipEventCreateWithFlags(hipEvent_t* event, unsigned flags) {
  constexpr unsigned kKnown = hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess |
                              hipEventReleaseToDevice | hipEventReleaseToSystem;
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (event == nullptr || (flags & ~kKnown) != 0) return result(hipErrorInvalidValue);
  return result(::hipEventCreateWithFlags(event, static_cast<hipEventFlags>(flags)));
}

/// hipLaunchKernelGGL as a call that returns the launch's status (like hipLaunchKernel), for the
/// kernel layer: a refused launch also leaves its error as the thread's last error, as HIP does.
template <class... Params, class... Args>
[[nodiscard]] hipError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block,
                                       std::size_t shared_bytes, hipStream_t stream,
                                       const Args&... args) {
  const hipError_t status = enter_enqueue(stream);
  if (status != hipSuccess) return result(status);
  ::hip::detail::launch(
      grid, block, static_cast<std::uint32_t>(shared_bytes), stream,
      [=](auto&&... xs) noexcept { kernel(std::forward<decltype(xs)>(xs)...); },
      std::make_tuple(args...));
  mark_enqueued(stream);
  return hipSuccess;
}

}  // namespace devmem::hipcpu

#pragma GCC visibility pop

// Managed memory: hipMallocManaged tracked like hipMalloc, hipMemPrefetchAsync, hipMemAdvise.
#include <devmem_hipcpu/hip_compat_managed.hpp>

// Names HIP-CPU lacks.
using devmem::hipcpu::hipDeviceGetAttribute;
using devmem::hipcpu::hipEventCreateWithFlags;  // an overload next to HIP-CPU's
using devmem::hipcpu::hipEventQuery;
using devmem::hipcpu::hipFuncSetAttribute;
using devmem::hipcpu::hipLaunchHostFunc;
using devmem::hipcpu::hipMemcpy3DAsync;
using devmem::hipcpu::hipMemcpyPeerAsync;
using devmem::hipcpu::hipMemcpyToSymbol;  // an overload next to HIP-CPU's
using devmem::hipcpu::hipPointerGetAttributes;
using devmem::hipcpu::hipStreamAddCallback;
using devmem::hipcpu::hipStreamIsCapturing;

// Names HIP-CPU has, with other semantics.
#define hipMalloc ::devmem::hipcpu::hipMalloc
#define hipFree ::devmem::hipcpu::hipFree
#define hipMallocAsync ::devmem::hipcpu::hipMallocAsync
#define hipFreeAsync ::devmem::hipcpu::hipFreeAsync
#define hipHostMalloc ::devmem::hipcpu::hipHostMalloc
#define hipHostFree ::devmem::hipcpu::hipHostFree
#define hipHostRegister ::devmem::hipcpu::hipHostRegister
#define hipHostUnregister ::devmem::hipcpu::hipHostUnregister
#define hipHostGetDevicePointer ::devmem::hipcpu::hipHostGetDevicePointer
#define hipStreamCreate ::devmem::hipcpu::hipStreamCreate
#define hipStreamDestroy ::devmem::hipcpu::hipStreamDestroy
#define hipStreamSynchronize ::devmem::hipcpu::hipStreamSynchronize
#define hipStreamQuery ::devmem::hipcpu::hipStreamQuery
#define hipStreamWaitEvent ::devmem::hipcpu::hipStreamWaitEvent
#define hipDeviceSynchronize ::devmem::hipcpu::hipDeviceSynchronize
#define hipEventRecord ::devmem::hipcpu::hipEventRecord
#define hipEventSynchronize ::devmem::hipcpu::hipEventSynchronize
#define hipEventElapsedTime ::devmem::hipcpu::hipEventElapsedTime
#define hipMemcpyAsync ::devmem::hipcpu::hipMemcpyAsync
#define hipMemcpy2DAsync ::devmem::hipcpu::hipMemcpy2DAsync
#define hipMemsetAsync ::devmem::hipcpu::hipMemsetAsync
#define hipGetErrorName ::devmem::hipcpu::hipGetErrorName
#define hipGetErrorString ::devmem::hipcpu::hipGetErrorString

// HIP-CPU's launch macro, after the legacy stream ordering.
#undef hipLaunchKernelGGL
#define hipLaunchKernelGGL(kernel_name, num_blocks, dim_blocks, group_mem_bytes, stream, ...) \
  do {                                                                                        \
    if (::devmem::hipcpu::prepare_launch(stream)) {                                           \
      ::hip::detail::launch(                                                                  \
          num_blocks, dim_blocks, static_cast<std::uint32_t>(group_mem_bytes), stream,        \
          [=](auto&&... xs) noexcept { kernel_name(std::forward<decltype(xs)>(xs)...); },     \
          std::make_tuple(__VA_ARGS__));                                                      \
      ::devmem::hipcpu::mark_enqueued(stream);                                                \
    }                                                                                         \
  } while (false)

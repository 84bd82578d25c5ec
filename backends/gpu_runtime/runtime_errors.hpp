// Error handling of the GPU backends' shared implementation (runtime_backend.hpp): what a vendor
// status means and how it reaches the program, written once for every table of vendor calls
// (VendorApi, vendor_api.hpp). Device selection lives here too, because selecting the device is
// where every call first meets the states that change what an error means: no device, a device
// lost to a sticky error, and a runtime torn down at process exit. Not installed.
//
// - Errors: every vendor status is checked (VendorCalls::check). A failure throws
//   BackendError(backend, vendor function, numeric code, code name, "<backend> <function>: <name>
//   (<code>): <description>; <context>") after clearing the runtime's last-error state, so that
//   the next unrelated call is not reported as failed (a sticky error, e.g. an illegal address in
//   a kernel, cannot be cleared: the runtime keeps reporting it, and DeviceLost latches it).
//   Allocation failures with the OOM code throw OutOfMemory naming the bytes and, for device
//   memory, free/total. Without a device every method throws NoDevice with the runtime's reason.
// - Releases (frees, stream and event destruction) run in destructors, also at process exit after
//   the runtime's teardown: they call nothing once ProcessExit has begun, and "the runtime is torn
//   down" is success for them (VendorCalls::release). Waits and queries reached from destructors
//   count their work as done then (DeviceSelection::use_device_to_wait).
// - Device selection: every method that needs a current device makes `device` current with
//   setDevice only when the runtime's current device differs. The comparison asks the runtime
//   (getDevice reads the runtime's own per-thread current device, no driver round trip), rather
//   than a private thread_local copy, which would go stale whenever the application or another
//   library calls cudaSetDevice/hipSetDevice on the same thread. The previous device is
//   restored when the call ends (ScopedDevice), so that devmem never changes the device the
//   application's own vendor calls go to; only Backend::make_current (devmem::select_device and
//   DeviceScope) leaves a device current on purpose.
#pragma once

#include "backends/gpu_runtime/vendor_api.hpp"

#include <devmem/backend.hpp>
#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace devmem::gpu_runtime {

inline std::int64_t clamp_to_int64(std::size_t value) noexcept {
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  return value > static_cast<std::size_t>(kMax) ? kMax : static_cast<std::int64_t>(value);
}

/// Message text made only when a message is: check(), release() and ready() format their
/// arguments only on failure, but an argument that is itself a std::string (a stream's name, a
/// byte count in words) was built on every call, successful or not. Measured on the strict fake
/// with callgrind (bench/results/gpu-proof-h100-2026-11-27.md): about 5,000 of the instructions
/// of a stream-ordered allocate / free / synchronize round went to formatting such names.
template <class Make>
struct LazyText {
  Make make;  // returns the text; called by the formatter only
};
template <class Make>
LazyText(Make) -> LazyText<Make>;

/// A byte count as "1.5 MiB", formatted only when the message is.
[[nodiscard]] inline auto bytes_text(std::uint64_t bytes) noexcept {
  return LazyText{[bytes] { return format_bytes(bytes); }};
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
  /// Throws the latched error (a copy). Called only once latched() is true, which latch() sets
  /// after storing the error.
  [[noreturn]] static void rethrow() {
    State& s = state();
    const std::lock_guard lock(s.mutex);
    if (!s.error) throw Error("gpu_runtime: internal error: no sticky error was latched");
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
  /// Made at the first use; out of memory then propagates (and ends the process from the
  /// noexcept callers, which cannot go on without it).
  static State& state() {
    static auto* const instance = new State;  // never destroyed: read by releases at exit
    return *instance;
  }
};

/// Calling the vendor: what a status means (check, release, ready), the errors thrown, and the
/// translations every call needs (stream and event handles, copy kinds, the checked 1-D copy).
/// Static only: the backend and its helpers (strided_copies.hpp, staging_pipeline.hpp) derive from
/// it for the names.
template <VendorApi Api>
class VendorCalls {
 public:
  using Code = typename Api::Error;
  using ApiStatus = Status<Code>;
  using VendorStream = typename Api::Stream;
  using VendorEvent = typename Api::Event;
  using MemcpyKind = typename Api::MemcpyKind;

  /// Throws BackendError unless `status` is success.
  template <class... Args>
  static void check(ApiStatus status, fmt::format_string<Args...> context, Args&&... args) {
    if (status.code == Api::kSuccess) [[likely]] {
      return;
    }
    raise(status, fmt::format(context, std::forward<Args>(args)...));
  }

  /// Like check, for the call that releases a resource. At process exit, arrays, streams and
  /// events held by static objects and the deferred-free queue are released after the runtime
  /// has been torn down, and every call answers kErrorRuntimeUnloading (CUDA's
  /// cudaErrorCudartUnloading, HIP's hipErrorDeinitialized): the runtime has already released
  /// everything it held for the process, so there is nothing left to do and nothing to report.
  /// Any other failure throws as usual.
  template <class... Args>
  static void release(ApiStatus status, fmt::format_string<Args...> context, Args&&... args) {
    if (runtime_unloaded(status)) return;
    check(status, context, std::forward<Args>(args)...);
  }

  /// True on success, false on NotReady (not an error), BackendError otherwise.
  template <class... Args>
  static bool ready(ApiStatus status, fmt::format_string<Args...> context, Args&&... args) {
    if (status.code == Api::kSuccess) return true;
    if (status.code == Api::kErrorNotReady) {
      clear_last_error();  // HIP records NotReady as the last error
      return false;
    }
    raise(status, fmt::format(context, std::forward<Args>(args)...));
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

  /// OutOfMemory for an allocation of `bytes` that `status` refused (the OOM code).
  [[noreturn]] static void raise_out_of_memory(ApiStatus status, int device, std::size_t bytes,
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

  /// "the default stream" or "stream 0x...", for messages: formatted only when the message is
  /// (LazyText).
  [[nodiscard]] static auto describe(NativeStream stream) noexcept {
    return LazyText{[stream]() -> std::string {
      if (stream == nullptr) return "the default stream";
      return fmt::format("stream {}", fmt::ptr(stream));
    }};
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

  /// One checked contiguous copy: what every copy path ends in.
  static void copy_1d(void* dst, const void* src, std::size_t bytes, CopyKind kind,
                      NativeStream stream) {
    check(Api::memcpyAsync(dst, src, bytes, memcpy_kind(kind), native(stream)),
          "copying {} bytes from {} to {} ({}) on {}", bytes, fmt::ptr(src), fmt::ptr(dst),
          to_string(kind), describe(stream));
  }
};

/// The device census and device selection (see the file's comment), for RuntimeBackend, which
/// derives from it.
template <VendorApi Api>
class DeviceSelection : protected VendorCalls<Api> {
 public:
  DeviceSelection(const DeviceSelection&) = delete;
  DeviceSelection& operator=(const DeviceSelection&) = delete;
  DeviceSelection(DeviceSelection&&) = delete;
  DeviceSelection& operator=(DeviceSelection&&) = delete;

 protected:
  using Calls = VendorCalls<Api>;
  using Calls::check;
  using Calls::clear_last_error;
  using Calls::runtime_unloaded;
  using typename Calls::ApiStatus;

  struct Census {
    int count = 0;
    std::string reason;  // why count is 0
  };

  DeviceSelection() = default;
  virtual ~DeviceSelection() = default;

  /// Why the runtime sees no device, in its words; a subclass may add what it can find out
  /// elsewhere (the ROC backend asks HSA's agent discovery).
  [[nodiscard]] virtual std::string explain_no_device(std::string runtime_reason) {
    return runtime_reason;
  }

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
            explain_no_device(fmt::format("{}: {}", status.function, Calls::describe(status.code)));
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

  /// NoDevice when the runtime has no device.
  void require_device(const char* operation) {
    const Census& devices = census();
    if (devices.count == 0) {
      throw NoDevice(fmt::format("{} {}: no device: {}", Api::kBackend, operation, devices.reason));
    }
  }

  /// Makes a device current for one backend call, and the caller's device current again when
  /// the call ends (review 2, N9): an application that chose its device with cudaSetDevice,
  /// torch.cuda.set_device or a rank binding finds it unchanged after any devmem call, including
  /// those reached from destructors (a stream's, a scope's). Inactive (the call must do nothing)
  /// when a wait, query or release finds the process exiting or the runtime torn down.
  class [[nodiscard]] ScopedDevice {
   public:
    enum class Purpose {
      Use,      // an ordinary call: every failure throws
      Wait,     // a wait or query: inactive once exiting; rethrows a latched device loss
      Release,  // a release: inactive once exiting or after a device loss
    };
    ScopedDevice(DeviceSelection& selection, const char* operation, int device, Purpose purpose) {
      if (purpose != Purpose::Use && ProcessExit::begun()) return;
      if (purpose == Purpose::Wait && DeviceLost::latched()) DeviceLost::rethrow();
      int previous = -1;
      active_ = selection.select_device(operation, device, purpose != Purpose::Use, &previous);
      if (active_ && previous != device && previous >= 0) previous_ = previous;
    }
    ScopedDevice(const ScopedDevice&) = delete;
    ScopedDevice& operator=(const ScopedDevice&) = delete;
    ScopedDevice(ScopedDevice&&) = delete;
    ScopedDevice& operator=(ScopedDevice&&) = delete;
    ~ScopedDevice() {
      // Best effort: a failure to switch back is not the call's failure (and a destructor must
      // not throw); the runtime's last-error state is left clean.
      if (previous_ && Api::setDevice(*previous_).code != Api::kSuccess) clear_last_error();
    }
    [[nodiscard]] explicit operator bool() const noexcept { return active_; }

   private:
    bool active_ = false;
    std::optional<int> previous_;
  };

  /// `device` current for the call (see ScopedDevice). An index out of range fails in setDevice
  /// with the runtime's invalid-device error.
  [[nodiscard]] ScopedDevice use_device(const char* operation, int device) {
    return ScopedDevice(*this, operation, device, ScopedDevice::Purpose::Use);
  }

  /// For waits and queries, which destructors reach at points the caller did not choose:
  /// inactive (call nothing, the work counts as done) once the process is exiting or the runtime
  /// answers that it has been torn down. After a sticky error it throws that error (see
  /// DeviceLost).
  [[nodiscard]] ScopedDevice use_device_to_wait(const char* operation, int device) {
    return ScopedDevice(*this, operation, device, ScopedDevice::Purpose::Wait);
  }

  /// For releases (frees, stream and event destruction): inactive (the release must call
  /// nothing) once the process has begun to exit (ProcessExit), after a device loss, or when the
  /// runtime has already been torn down (see VendorCalls::release).
  [[nodiscard]] ScopedDevice use_device_to_release(const char* operation, int device) {
    return ScopedDevice(*this, operation, device, ScopedDevice::Purpose::Release);
  }

  /// Makes `device` the calling thread's current device and leaves it so: for the application's
  /// own vendor calls after devmem::select_device (Backend::make_current).
  void make_device_current(const char* operation, int device) {
    static_cast<void>(select_device(operation, device, /*releasing=*/false));
  }

 private:
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

  std::once_flag census_once_;
  Census census_;
};

}  // namespace devmem::gpu_runtime

/// Formats a LazyText by calling its maker: only when the message is formatted.
template <class Make>
struct fmt::formatter<devmem::gpu_runtime::LazyText<Make>> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(const devmem::gpu_runtime::LazyText<Make>& text, FormatContext& ctx) const {
    const std::string made = text.make();
    return fmt::formatter<std::string_view>::format(made, ctx);
  }
};

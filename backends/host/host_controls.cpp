// The devmem::host:: controls and the process-wide state they drive (see host_controls.hpp).
#include "backends/host/host_controls.hpp"

#include "backends/host/host_backend.hpp"

#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <string_view>

namespace devmem::host {
namespace {

constexpr std::int64_t kDefaultCapacity = std::int64_t{4} << 30;
constexpr auto kCallKinds = static_cast<std::size_t>(Call::Count_);

std::size_t index_of(Call kind) noexcept {
  return static_cast<std::size_t>(kind);
}
bool valid_kind(Call kind) noexcept {
  return index_of(kind) < kCallKinds;
}

// Call counters are plain atomics: they are bumped on every backend call from any thread.
std::array<std::atomic<std::int64_t>, kCallKinds> g_call_counts{};

// fail_nth requests. `armed` lets the common case (no request for this kind) skip the mutex; the
// request itself is read and consumed under the mutex so that exactly one call fires it.
struct FailureRequest {
  std::int64_t remaining = 0;  // calls left until the failing one; 0 = no request
  std::int64_t nth = 0;
  Status status = Status::Injected;
  std::int64_t count = 1;  // consecutive calls to fail, starting with the nth
  int device = -1;         // only calls on this device count (fail_nth_on_device); -1: any
};
std::mutex g_failure_mutex;
std::array<FailureRequest, kCallKinds> g_failures{};
std::array<std::atomic<bool>, kCallKinds> g_armed{};

// -1 until set_device_memory_capacity is called; from then on it overrides the environment.
std::atomic<std::int64_t> g_explicit_capacity{-1};
// The per-device controls, under one mutex (read once per allocation or peer copy).
std::mutex g_devices_mutex;
// Per-device capacities (set_device_memory_capacity(device, bytes)); -1: the one above.
std::array<std::int64_t, detail::kMaxDevices> g_device_capacity = [] {
  std::array<std::int64_t, detail::kMaxDevices> result{};
  result.fill(-1);
  return result;
}();
// Peer access per (device, peer): -1 until set_peer_access, then 0 or 1.
constexpr auto kPairs =
    static_cast<std::size_t>(detail::kMaxDevices) * static_cast<std::size_t>(detail::kMaxDevices);
std::array<signed char, kPairs> g_peer_access = [] {
  std::array<signed char, kPairs> result{};
  result.fill(-1);
  return result;
}();

/// The capacity override of `device` (in range), or -1.
std::int64_t own_capacity(int device) {
  const std::lock_guard lock(g_devices_mutex);
  return g_device_capacity[static_cast<std::size_t>(device)];
}

std::size_t pair_index(int device, int peer) noexcept {
  return static_cast<std::size_t>(device) * static_cast<std::size_t>(detail::kMaxDevices) +
         static_cast<std::size_t>(peer);
}

void check_device_index(const char* function, int device) {
  if (device < 0 || device >= detail::kMaxDevices) {
    throw InvalidArgument(
        fmt::format("{}: device {} is outside [0, {})", function, device, detail::kMaxDevices));
  }
}

// DEVMEM_HOST_PEER_ACCESS, parsed once: true for "all" (or unset), false for "none"; an invalid
// value is kept as an error message for every use to report.
struct EnvPeerAccess {
  bool all = true;
  std::string error;
};
const EnvPeerAccess& env_peer_access() {
  static const EnvPeerAccess parsed = [] {
    EnvPeerAccess result;
    const char* const text = std::getenv("DEVMEM_HOST_PEER_ACCESS");
    if (text == nullptr || *text == '\0') return result;
    const std::string_view value(text);
    if (value == "none") {
      result.all = false;
    } else if (value != "all") {
      result.error = fmt::format(
          "DEVMEM_HOST_PEER_ACCESS: invalid value '{}' (expected 'all' or 'none')", value);
    }
    return result;
  }();
  return parsed;
}

// -1 until set_bounds_checking is called; from then on it overrides DEVMEM_HOST_BOUNDS_CHECK.
std::atomic<int> g_explicit_bounds_checking{-1};

// DEVMEM_HOST_DEVICE_MEMORY, parsed once. An invalid value is kept as an error message so that
// every use reports it (rather than silently falling back to the default).
struct EnvCapacity {
  std::optional<std::int64_t> value;
  std::string error;
};
const EnvCapacity& env_capacity() {
  static const EnvCapacity parsed = [] {
    EnvCapacity result;
    const char* const text = std::getenv("DEVMEM_HOST_DEVICE_MEMORY");
    if (text == nullptr || *text == '\0') return result;
    try {
      result.value = parse_byte_size(text);
    } catch (const InvalidArgument& e) {
      result.error = fmt::format("DEVMEM_HOST_DEVICE_MEMORY: {}", e.what());
    }
    return result;
  }();
  return parsed;
}

}  // namespace

std::string_view to_string(Call call) noexcept {
  switch (call) {
    case Call::Allocate:
      return "Allocate";
    case Call::Deallocate:
      return "Deallocate";
    case Call::HostAllocate:
      return "HostAllocate";
    case Call::HostDeallocate:
      return "HostDeallocate";
    case Call::HostRegister:
      return "HostRegister";
    case Call::HostUnregister:
      return "HostUnregister";
    case Call::Copy:
      return "Copy";
    case Call::Memset:
      return "Memset";
    case Call::CreateStream:
      return "CreateStream";
    case Call::DestroyStream:
      return "DestroyStream";
    case Call::SynchronizeStream:
      return "SynchronizeStream";
    case Call::CreateEvent:
      return "CreateEvent";
    case Call::RecordEvent:
      return "RecordEvent";
    case Call::Launch:
      return "Launch";
    case Call::AllocateManaged:
      return "AllocateManaged";
    case Call::Prefetch:
      return "Prefetch";
    case Call::Advise:
      return "Advise";
    case Call::Count_:
      break;
  }
  return "UnknownCall";
}

std::string_view to_string(Status status) noexcept {
  switch (status) {
    case Status::Success:
      return "Success";
    case Status::InvalidValue:
      return "InvalidValue";
    case Status::MemoryAllocation:
      return "MemoryAllocation";
    case Status::InvalidDevice:
      return "InvalidDevice";
    case Status::InvalidResourceHandle:
      return "InvalidResourceHandle";
    case Status::NotReady:
      return "NotReady";
    case Status::IllegalAddress:
      return "IllegalAddress";
    case Status::LaunchOutOfResources:
      return "LaunchOutOfResources";
    case Status::LaunchFailure:
      return "LaunchFailure";
    case Status::HostMemoryAlreadyRegistered:
      return "HostMemoryAlreadyRegistered";
    case Status::HostMemoryNotRegistered:
      return "HostMemoryNotRegistered";
    case Status::PeerAccessUnsupported:
      return "PeerAccessUnsupported";
    case Status::PeerAccessNotEnabled:
      return "PeerAccessNotEnabled";
    case Status::Injected:
      return "Injected";
  }
  return "UnknownStatus";
}

void set_device_memory_capacity(std::int64_t bytes) {
  if (bytes < 0) {
    throw InvalidArgument(
        fmt::format("set_device_memory_capacity: capacity must be >= 0, got {}", bytes));
  }
  g_explicit_capacity.store(bytes, std::memory_order_relaxed);
  // The capacity of every device: per-device overrides go.
  const std::lock_guard lock(g_devices_mutex);
  g_device_capacity.fill(-1);
}

// noexcept by contract, so an invalid DEVMEM_HOST_DEVICE_MEMORY cannot be reported here: this
// returns the default then, and the backend reports the invalid value on its first use of it.
std::int64_t device_memory_capacity() noexcept {
  const std::int64_t explicit_capacity = g_explicit_capacity.load(std::memory_order_relaxed);
  if (explicit_capacity >= 0) return explicit_capacity;
  try {
    const EnvCapacity& env = env_capacity();
    if (env.value) return *env.value;
  } catch (...) {  // allocating the error message failed: fall back to the default
  }
  return kDefaultCapacity;
}

AsyncPoolState async_pool_state(int device) {
  if (HostBackend* const backend = HostBackend::live_instance()) {
    return backend->async_pool_state(device);
  }
  return {};
}

ManagedMemoryState managed_memory_state(int device) {
  if (HostBackend* const backend = HostBackend::live_instance()) {
    return backend->managed_memory_state(device);
  }
  return {};
}

ManagedRangeState managed_range_state(const void* ptr) {
  if (HostBackend* const backend = HostBackend::live_instance()) {
    return backend->managed_range_state(ptr);
  }
  throw InvalidArgument(fmt::format(
      "host::managed_range_state: {} is not managed memory (the host backend does not exist yet)",
      ptr));
}

std::int64_t live_event_count(int device) {
  if (HostBackend* const backend = HostBackend::live_instance()) {
    return backend->live_event_count(device);
  }
  return 0;
}

std::int64_t device_memory_used(int device) {
  // Before the host backend exists nothing can have been allocated; the index is still checked so
  // that a wrong device is reported the same way in both cases.
  if (HostBackend* const backend = HostBackend::live_instance()) {
    return backend->device_memory_used(device);
  }
  const int count = detail::configured_device_count();
  if (device < 0 || device >= count) {
    throw BackendError("host", "device_memory_used", static_cast<int>(Status::InvalidDevice),
                       std::string(to_string(Status::InvalidDevice)),
                       fmt::format("host device_memory_used: {} ({}): device {} does not exist "
                                   "(device count {})",
                                   to_string(Status::InvalidDevice),
                                   static_cast<int>(Status::InvalidDevice), device, count));
  }
  return 0;
}

void fail_nth(Call kind, std::int64_t nth, Status status, std::int64_t count) {
  fail_nth_on_device(-1, kind, nth, status, count);
}

void fail_nth_on_device(int device, Call kind, std::int64_t nth, Status status,
                        std::int64_t count) {
  if (device != -1) check_device_index("fail_nth_on_device", device);
  if (!valid_kind(kind)) {
    throw InvalidArgument(
        fmt::format("fail_nth: invalid call kind {}", static_cast<int>(index_of(kind))));
  }
  if (nth < 1) {
    throw InvalidArgument(
        fmt::format("fail_nth: nth must be >= 1 (1 = the next call), got {}", nth));
  }
  if (status == Status::Success) {
    throw InvalidArgument(
        fmt::format("fail_nth: status must be a failure, got Success (call {})", to_string(kind)));
  }
  if (count < 1) {
    throw InvalidArgument(fmt::format("fail_nth: count must be >= 1, got {}", count));
  }
  const std::lock_guard lock(g_failure_mutex);
  g_failures[index_of(kind)] = FailureRequest{nth, nth, status, count, device};
  g_armed[index_of(kind)].store(true, std::memory_order_release);
}

void set_device_memory_capacity(int device, std::int64_t bytes) {
  check_device_index("set_device_memory_capacity", device);
  if (bytes < 0) {
    throw InvalidArgument(fmt::format(
        "set_device_memory_capacity: capacity of device {} must be >= 0, got {}", device, bytes));
  }
  const std::lock_guard lock(g_devices_mutex);
  g_device_capacity[static_cast<std::size_t>(device)] = bytes;
}

std::int64_t device_memory_capacity(int device) {
  check_device_index("device_memory_capacity", device);
  const std::int64_t own = own_capacity(device);
  return own >= 0 ? own : device_memory_capacity();
}

void set_peer_access(int device, int peer, bool accessible) {
  check_device_index("set_peer_access", device);
  check_device_index("set_peer_access", peer);
  if (device == peer) {
    throw InvalidArgument(fmt::format("set_peer_access: device {} cannot be its own peer", device));
  }
  const std::lock_guard lock(g_devices_mutex);
  g_peer_access[pair_index(device, peer)] = accessible ? 1 : 0;
}

void reset_peer_access() noexcept {
  const std::lock_guard lock(g_devices_mutex);
  g_peer_access.fill(-1);
}

bool peer_access(int device, int peer) {
  if (device == peer || device < 0 || peer < 0 || device >= detail::kMaxDevices ||
      peer >= detail::kMaxDevices) {
    return false;
  }
  signed char set = -1;
  {
    const std::lock_guard lock(g_devices_mutex);
    set = g_peer_access[pair_index(device, peer)];
  }
  if (set >= 0) return set != 0;
  const EnvPeerAccess& env = env_peer_access();
  if (!env.error.empty()) throw InvalidArgument(env.error);
  return env.all;
}

void clear_failures() noexcept {
  const std::lock_guard lock(g_failure_mutex);
  for (std::size_t i = 0; i < kCallKinds; ++i) {
    g_failures[i] = FailureRequest{};
    g_armed[i].store(false, std::memory_order_release);
  }
}

void set_bounds_checking(bool enabled) noexcept {
  g_explicit_bounds_checking.store(enabled ? 1 : 0, std::memory_order_relaxed);
}

bool bounds_checking() noexcept {
  const int explicit_setting = g_explicit_bounds_checking.load(std::memory_order_relaxed);
  if (explicit_setting >= 0) return explicit_setting != 0;
  // Read once: a thread-safe static. Any value but an explicit "off" keeps the checks, so that a
  // typo cannot silently disable them.
  static const bool from_environment = [] {
    const char* const text = std::getenv("DEVMEM_HOST_BOUNDS_CHECK");
    if (text == nullptr) return true;
    const std::string_view value(text);
    return !(value == "0" || value == "off" || value == "OFF" || value == "false" ||
             value == "FALSE");
  }();
  return from_environment;
}

std::int64_t call_count(Call kind) noexcept {
  if (!valid_kind(kind)) return 0;
  return g_call_counts[index_of(kind)].load(std::memory_order_relaxed);
}

void reset_call_counts() noexcept {
  for (auto& count : g_call_counts) count.store(0, std::memory_order_relaxed);
}

namespace detail {

Injection begin_call(Call kind, int device) noexcept {
  const std::size_t i = index_of(kind);
  g_call_counts[i].fetch_add(1, std::memory_order_relaxed);
  if (!g_armed[i].load(std::memory_order_acquire)) return {};
  const std::lock_guard lock(g_failure_mutex);
  FailureRequest& request = g_failures[i];
  if (request.remaining == 0) return {};
  if (request.device >= 0 && request.device != device) return {};  // another device's calls
  if (--request.remaining != 0) return {};
  const Injection injection{request.status, request.nth};
  if (--request.count > 0) {
    // Stay armed for the very next call (e.g. to make an allocation and its retry both fail).
    request.remaining = 1;
    ++request.nth;
  } else {
    g_armed[i].store(false, std::memory_order_release);
  }
  return injection;
}

std::int64_t effective_capacity() {
  const std::int64_t explicit_capacity = g_explicit_capacity.load(std::memory_order_relaxed);
  if (explicit_capacity >= 0) return explicit_capacity;
  const EnvCapacity& env = env_capacity();
  if (!env.error.empty()) throw InvalidArgument(env.error);
  return env.value.value_or(kDefaultCapacity);
}

std::int64_t effective_capacity(int device) {
  if (device >= 0 && device < kMaxDevices) {
    const std::int64_t own = own_capacity(device);
    if (own >= 0) return own;
  }
  return effective_capacity();
}

int configured_device_count() {
  // A function-local static: read once, thread-safely. When the variable is invalid the
  // initialisation throws and is retried (and reported) by the next call.
  static const int count = [] {
    const char* const text = std::getenv("DEVMEM_HOST_DEVICE_COUNT");
    if (text == nullptr || *text == '\0') return 1;
    const std::string_view view(text);
    int value = -1;
    const auto [stop, error] = std::from_chars(view.data(), view.data() + view.size(), value);
    if (error != std::errc{} || stop != view.data() + view.size() || value < 0 ||
        value > kMaxDevices) {
      throw InvalidArgument(fmt::format(
          "DEVMEM_HOST_DEVICE_COUNT: invalid value '{}' (expected an integer from 0 to {})", text,
          kMaxDevices));
    }
    return value;
  }();
  return count;
}

}  // namespace detail
}  // namespace devmem::host

// Process-wide state behind the devmem::host:: controls (include/devmem/host_controls.hpp) that the
// host backend consults on every call: the simulated capacity, the simulated device count, the
// call counters and the pending fail_nth requests. Not installed; only backends/host includes it.
#pragma once

#include <devmem/host_controls.hpp>

#include <cstdint>
#include <string>

namespace devmem::host::detail {

/// A fail_nth request that fired on this call: the status to fail with and the `nth` it was
/// requested for (for the message). Converts to false when the call proceeds normally.
struct Injection {
  Status status = Status::Success;
  std::int64_t nth = 0;
  explicit operator bool() const noexcept { return status != Status::Success; }
};

/// Counts one call of `kind` and consumes the matching fail_nth request when this call is the
/// one it designates. Every host backend entry point of a counted kind calls this first.
/// `device`: the device the call is made for (-1: none); a fail_nth_on_device request counts only
/// that device's calls.
[[nodiscard]] Injection begin_call(Call kind, int device = -1) noexcept;

/// The capacity of every simulated device: set_device_memory_capacity's value if it was called,
/// else DEVMEM_HOST_DEVICE_MEMORY (parsed on first use), else 4 GiB. Throws InvalidArgument naming
/// the variable and its value when the variable is set but invalid.
[[nodiscard]] std::int64_t effective_capacity();
/// The capacity of `device`: its set_device_memory_capacity(device, bytes) override, else
/// effective_capacity().
[[nodiscard]] std::int64_t effective_capacity(int device);

/// DEVMEM_HOST_DEVICE_COUNT (default 1), read once. Throws InvalidArgument when it is not an
/// integer in [0, kMaxDevices].
[[nodiscard]] int configured_device_count();
inline constexpr int kMaxDevices = 64;

}  // namespace devmem::host::detail

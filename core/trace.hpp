// The recorder behind include/devmem/trace.hpp, for devmem's own sources (not installed). Each
// place that records checks active() first, so that a process that does not trace pays one relaxed
// atomic load per place; the arguments are formatted only when a trace is being written.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <variant>

namespace devmem::detail::trace {

extern std::atomic<bool> g_active;

[[nodiscard]] inline bool active() noexcept {
  return g_active.load(std::memory_order_relaxed);
}

using Clock = std::chrono::steady_clock;

/// One named argument of an event ("args" in the file).
struct Arg {
  std::string_view key;
  std::variant<std::int64_t, double, std::string_view, const void*> value;
};

/// An event at one moment ("ph": "i").
void instant(std::string_view category, std::string_view name,
             std::initializer_list<Arg> args) noexcept;
/// An event from `start` to now ("ph": "X").
void complete(std::string_view category, std::string_view name, Clock::time_point start,
              std::initializer_list<Arg> args) noexcept;
/// A counter's values now ("ph": "C"): each argument one series of the counter `name`.
void counter(std::string_view name, std::initializer_list<Arg> args) noexcept;

/// Whether allocations record their call site (TraceOptions::call_sites, or
/// DEVMEM_TRACE_CALL_SITES=1 beside DEVMEM_TRACE).
[[nodiscard]] bool call_sites() noexcept;
/// The first two callers outside devmem's own libraries, "function (object+0xoffset) from
/// function (object+0xoffset)" (the function is "?" where the object does not export it:
/// `addr2line -e object 0xoffset` names it); empty when the stack cannot be read.
[[nodiscard]] std::string call_site() noexcept;

/// The counter "device N memory": `in_use` bytes of device memory that devmem's arrays hold.
void device_memory(int device, std::int64_t in_use) noexcept;

/// Starts the trace DEVMEM_TRACE names, if it names one and none is being written; called once,
/// when the first context is made. The file is completed at the process's exit, after devmem's
/// own exit handler (registered after this) has flushed what it holds.
void start_from_environment() noexcept;

/// The start of an event to be completed later: now() when tracing, else no clock read at all.
[[nodiscard]] inline Clock::time_point start_time() noexcept {
  return active() ? Clock::now() : Clock::time_point{};
}

}  // namespace devmem::detail::trace

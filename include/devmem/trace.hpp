// The memory timeline: a Chrome trace-event file (https://ui.perfetto.dev and chrome://tracing open
// it) of what devmem does: allocations and frees, deferred-free flushes, pool hits and misses,
// copies, kernel launches, synchronizations, and counters over time (bytes in use per device, the
// pool's cached bytes, pending deallocations). docs/trace.md describes the file.
//
// Two ways to turn it on: DEVMEM_TRACE=path in the environment of any devmem program (the file is
// written from the first context's creation to the process's exit), or a TraceSession in code
// (`auto session = devmem::trace_to("run.json");`). Off by default: then each place that would
// record an event costs one relaxed atomic load.
#pragma once

#include <devmem/export.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace devmem {

class TraceSession;

/// What a trace records beyond its default events.
struct TraceOptions {
  /// Each allocation event gets a "site" argument: the first two callers outside devmem's
  /// libraries (the first is often one of devmem's inline templates, compiled into the caller), as
  /// "function (object+0xoffset) from function (object+0xoffset)" (function "?" where the object
  /// does not export it, as in an executable linked without -rdynamic: `addr2line -f -C -e object
  /// 0xoffset` names it), and `devmem trace summarize` groups allocations by it. Costs a stack walk
  /// per allocation (a few microseconds). In Python programs the site is devmem's extension module.
  /// For DEVMEM_TRACE, DEVMEM_TRACE_CALL_SITES=1 turns it on.
  bool call_sites = false;
};

/// Starts writing a trace to `path` (created or truncated) and returns its session. Returns at
/// once; nothing waits for device work. Throws InvalidArgument when another trace is being written
/// (DEVMEM_TRACE's or another session's, naming its path), Error naming the path when the file
/// cannot be created.
[[nodiscard]] DEVMEM_API TraceSession trace_to(const std::filesystem::path& path);
/// The same, with `options`.
[[nodiscard]] DEVMEM_API TraceSession trace_to(const std::filesystem::path& path,
                                               const TraceOptions& options);

/// One trace being written. Movable, not copyable; the file is complete (valid JSON) when the
/// session ends: at stop(), at destruction, or at the process's exit for DEVMEM_TRACE. At most one
/// session records at a time in a process.
/// Thread safety: events are recorded from any thread; stop() and the destructor must not race
/// with each other on the same object.
class DEVMEM_API TraceSession {
 public:
  TraceSession(const TraceSession&) = delete;
  TraceSession& operator=(const TraceSession&) = delete;
  TraceSession(TraceSession&& other) noexcept;
  TraceSession& operator=(TraceSession&& other) noexcept;
  /// Stops recording and completes the file; a write error is printed on stderr (a destructor
  /// cannot throw): call stop() to see it as an exception.
  ~TraceSession();

  /// Stops recording and completes the file. Throws Error naming the path when the file cannot be
  /// written. A second call does nothing.
  void stop();
  /// The file being written.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Events recorded so far by this session (the file's metadata events not counted).
  [[nodiscard]] std::int64_t events() const noexcept;

 private:
  friend TraceSession trace_to(const std::filesystem::path& path, const TraceOptions& options);
  explicit TraceSession(std::filesystem::path path) : path_(std::move(path)), active_(true) {}
  std::filesystem::path path_;
  bool active_ = false;
};

/// Whether a trace is being written now.
[[nodiscard]] DEVMEM_API bool tracing() noexcept;

/// What `devmem trace summarize` prints, read back from a file devmem wrote.
struct TraceSummary {
  struct DevicePeak {
    int device = 0;
    std::int64_t peak_bytes = 0;  ///< the highest device memory in use that the trace saw
    double at_seconds = 0;        ///< when, from the trace's start
  };
  struct Site {
    std::string operation;  ///< the API call that allocated (to_device, device_array, ...)
    std::string manager;    ///< the memory manager that served it
    std::string call_site;  ///< where it was called from (TraceOptions::call_sites), else empty
    std::int64_t count = 0;
    std::int64_t bytes = 0;
  };
  struct Transfers {
    std::string direction;  ///< h2d, d2h, d2d or h2h
    std::int64_t count = 0;
    std::int64_t bytes = 0;
    double seconds = 0;  ///< host time inside the copy calls
  };
  struct DeferredFree {
    std::string address;
    std::int64_t bytes = 0;
    double deferred_seconds = 0;  ///< from the array's release to the memory's free
  };
  std::int64_t events = 0;
  double duration_seconds = 0;       ///< from the first to the last event
  std::vector<DevicePeak> peaks;     ///< one per device that allocated, by device
  std::vector<Site> top_sites;       ///< by bytes, at most 10
  std::vector<Transfers> transfers;  ///< by direction
  std::int64_t synchronizations = 0;
  double synchronize_seconds = 0;  ///< host time spent inside synchronize calls
  std::int64_t flushes = 0;
  std::vector<DeferredFree> longest_deferred;  ///< at most 5, longest first
  std::int64_t pool_hits = 0;
  std::int64_t pool_misses = 0;
  std::int64_t launches = 0;
};

/// Reads a trace file written by devmem (one event per line, as devmem writes it; a file rewritten
/// by another tool is refused) and summarizes it. Throws Error naming the path and line when the
/// file cannot be read or is not in devmem's form.
[[nodiscard]] DEVMEM_API TraceSummary summarize_trace(const std::filesystem::path& path);

}  // namespace devmem

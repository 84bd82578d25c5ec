// Memory-manager adaptors: managers that wrap another manager (their upstream) and add one thing
// to it - statistics, a byte limit, a log - forwarding everything else, as RMM's resource
// adaptors wrap a memory resource. They compose with each other and with the pool, whose upstream
// is also a manager:
//
//   using namespace devmem;
//   auto pool = std::make_shared<PoolMemoryManager>(ctx, PoolMemoryManager::Options{}, nullptr);
//   auto limit = std::make_shared<LimitAdaptor>(ctx, pool, LimitAdaptor::Limits{1 << 30});
//   auto stats = std::make_shared<StatisticsAdaptor>(ctx, limit);
//   ctx.set_memory_manager(stats);  // statistics(limit(pool))
//
// An adaptor sees exactly what passes through it: installed on a context it sees the context's
// allocations and, later, the frees of its deferred-deallocation queue (memory_manager.hpp); as
// the pool's upstream it sees the pool's misses (whole size classes) and the blocks the pool gives
// back. The deferred-deallocation rules do not change: an OutOfMemory from any layer makes the
// context flush its queue and retry once.
//
// Ownership: an adaptor holds its upstream (std::shared_ptr), so a chain lives as long as its
// outermost manager; an upstream may be shared by several adaptors.
//
// Thread safety: as every manager (memory_manager.hpp), all functions may be called concurrently.
#pragma once

#include <devmem/export.hpp>
#include <devmem/memory_manager.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace devmem {

/// The base of the adaptors: every call is forwarded to the upstream manager. Derive from it to
/// write an adaptor of your own and override what it changes.
/// name() is "KIND(UPSTREAM)", e.g. "statistics(pool)", fixed at construction.
/// Errors at construction: InvalidArgument when `upstream` was made for another context ("KIND:
/// the upstream manager 'NAME' was made for device D, not for device E") or has another interface
/// version than kInterfaceVersion. A null upstream is a new DirectMemoryManager for `context`.
class DEVMEM_API MemoryAdaptor : public MemoryManager {
 public:
  MemoryAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream, std::string_view kind);
  ~MemoryAdaptor() override;
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override;
  [[nodiscard]] MemoryInfo memory_info() const override;
  void trim() override;
  [[nodiscard]] std::int64_t cached_bytes() const noexcept override;
  /// The upstream's answer: an adaptor hands out the upstream's memory.
  [[nodiscard]] bool allocates_in_stream_order() const noexcept override;
  /// The wrapped manager.
  [[nodiscard]] const std::shared_ptr<MemoryManager>& upstream() const noexcept {
    return upstream_;
  }

 private:
  std::shared_ptr<MemoryManager> upstream_;
  std::string name_;
};

/// Counts the memory handed out through it ("statistics(UPSTREAM)"): bytes and numbers of
/// allocations now outstanding (allocated, not yet deallocated through it), their peaks and the
/// totals since construction - device memory and page-locked host memory separately, in `bytes`
/// as requested. Installed on a context, "outstanding" includes memory waiting in the deferred
/// queue, unlike Context::device_statistics(), which counts memory in use by arrays. Failed
/// allocations are not counted. Counters are updated atomically; a snapshot read while other
/// threads allocate may combine fields from slightly different moments.
class DEVMEM_API StatisticsAdaptor : public MemoryAdaptor {
 public:
  StatisticsAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream);
  ~StatisticsAdaptor() override;
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override;
  /// Device memory.
  [[nodiscard]] MemoryStatistics statistics() const noexcept;
  /// Page-locked host memory.
  [[nodiscard]] MemoryStatistics host_statistics() const noexcept;

 private:
  struct Counters;
  std::unique_ptr<Counters> counters_;
};

/// Refuses allocations that would bring the bytes outstanding through it above a limit
/// ("limit(UPSTREAM)"), device and page-locked host memory each against its own limit. A refusal
/// is an OutOfMemory ("limit adaptor: allocating N bytes of device memory would exceed the limit
/// of L bytes (U bytes in use)") thrown without calling upstream, so the context flushes its
/// deferred queue (whose frees come back through the adaptor) and retries once, as for a full
/// device. Bytes are counted as requested; a failed upstream allocation counts nothing. The
/// limits hold under concurrency: room is reserved before upstream is called. memory_info() is
/// the upstream's.
class DEVMEM_API LimitAdaptor : public MemoryAdaptor {
 public:
  struct Limits {
    std::int64_t device_bytes = 0;  // 0: no limit
    std::int64_t host_bytes = 0;    // page-locked host memory; 0: no limit
  };
  /// InvalidArgument for a negative limit, and as MemoryAdaptor.
  LimitAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream, Limits limits);
  ~LimitAdaptor() override;
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override;
  [[nodiscard]] Limits limits() const noexcept { return limits_; }
  /// Device bytes outstanding through the adaptor now.
  [[nodiscard]] std::int64_t device_bytes_in_use() const noexcept;
  /// Page-locked host bytes outstanding through the adaptor now.
  [[nodiscard]] std::int64_t host_bytes_in_use() const noexcept;

 private:
  struct State;
  Limits limits_;
  std::unique_ptr<State> state_;
};

/// One call through a LoggingAdaptor.
struct MemoryEvent {
  enum class Operation { Allocate, Deallocate, HostAllocate, HostDeallocate, Trim };
  Operation operation = Operation::Allocate;
  std::size_t bytes = 0;    // 0 for trim
  void* pointer = nullptr;  // the memory allocated or deallocated (null when allocation failed)
  NativeStream stream = nullptr;                // device operations: the stream's native handle
  HostAllocFlags flags = HostAllocFlags::None;  // host operations
  std::chrono::nanoseconds duration{0};         // time spent in the upstream call
  std::thread::id thread;
  std::string error;  // the exception's message when the call threw, else empty
};

/// The name of `operation`: "allocate", "deallocate", "host_allocate", "host_deallocate", "trim".
[[nodiscard]] DEVMEM_API std::string_view to_string(MemoryEvent::Operation operation) noexcept;
/// One CSV line (no newline) for `event`, with the columns of memory_event_csv_header().
/// The error, if any, is quoted with embedded quotes doubled.
[[nodiscard]] DEVMEM_API std::string format_memory_event(const MemoryEvent& event);
/// "thread,operation,bytes,pointer,stream,flags,duration_ns,error".
[[nodiscard]] DEVMEM_API std::string_view memory_event_csv_header() noexcept;

/// Reports every call to a sink ("logging(UPSTREAM)"): the operation, bytes, pointer, stream or
/// flags, the time the upstream call took, and the error when it threw (the exception is then
/// rethrown unchanged). Calls of memory_info, cached_bytes and name are not reported. The sink
/// is called after the upstream call, under the adaptor's mutex, so it needs no locking of its
/// own and events arrive one at a time (in the order the calls completed); it should be quick and
/// must not call back into the adaptor. An exception from the sink is written to stderr and
/// otherwise ignored: memory must not be lost because a log line failed.
/// Lifetime: memory keeps the manager that made it until it is handed back (the deferred queue
/// included), so the adaptor, and whatever its sink writes to, may be used after the application
/// has dropped its own reference; flush_deallocations() before such targets go.
class DEVMEM_API LoggingAdaptor : public MemoryAdaptor {
 public:
  using Sink = std::function<void(const MemoryEvent&)>;
  /// InvalidArgument for an empty sink, and as MemoryAdaptor.
  LoggingAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream, Sink sink);
  /// Writes memory_event_csv_header() and then one format_memory_event() line per event to
  /// `out`, which must outlive the adaptor (see Lifetime above).
  LoggingAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream, std::ostream& out);
  ~LoggingAdaptor() override;
  [[nodiscard]] void* allocate(std::size_t bytes, const Stream& stream) override;
  void deallocate(void* ptr, std::size_t bytes, const Stream& stream) override;
  [[nodiscard]] void* host_allocate(std::size_t bytes, HostAllocFlags flags) override;
  void host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) override;
  void trim() override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace devmem

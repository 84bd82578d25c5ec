// The memory-manager adaptors (statistics, limit, logging) and the upstream checks they share
// with the pool.
#include "core/internal.hpp"
#include "core/memory_counter.hpp"
#include "core/report_error.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>
#include <devmem/memory_adaptors.hpp>

#include <fmt/format.h>
#include <fmt/std.h>

#include <atomic>
#include <mutex>
#include <ostream>
#include <utility>

namespace devmem {

namespace detail {

std::shared_ptr<MemoryManager> checked_upstream(Context& context,
                                                std::shared_ptr<MemoryManager> upstream,
                                                std::string_view who) {
  if (!upstream) return std::make_shared<DirectMemoryManager>(context);
  // A chain spans one context: the context's checks of its manager (set_memory_manager) see only
  // the outermost one, and memory of one device handed to another's manager would be freed there.
  if (&upstream->context() != &context) {
    throw InvalidArgument(
        fmt::format("{}: the upstream manager '{}' was made for device {}, not for device {}", who,
                    upstream->name(), upstream->context().device(), context.device()));
  }
  if (upstream->interface_version() != MemoryManager::kInterfaceVersion) {
    throw InvalidArgument(fmt::format(
        "{}: the upstream manager '{}' has interface version {} - version {} required", who,
        upstream->name(), upstream->interface_version(), MemoryManager::kInterfaceVersion));
  }
  return upstream;
}

}  // namespace detail

// ---- MemoryAdaptor ----

MemoryAdaptor::MemoryAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream,
                             std::string_view kind)
    : MemoryManager(context),
      upstream_(detail::checked_upstream(context, std::move(upstream), kind)),
      name_(fmt::format("{}({})", kind, upstream_->name())) {}

MemoryAdaptor::~MemoryAdaptor() = default;

void* MemoryAdaptor::allocate(std::size_t bytes, const Stream& stream) {
  return upstream_->allocate(bytes, stream);
}
void MemoryAdaptor::deallocate(void* ptr, std::size_t bytes, const Stream& stream) {
  upstream_->deallocate(ptr, bytes, stream);
}
void* MemoryAdaptor::host_allocate(std::size_t bytes, HostAllocFlags flags) {
  return upstream_->host_allocate(bytes, flags);
}
void MemoryAdaptor::host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) {
  upstream_->host_deallocate(ptr, bytes, flags);
}
MemoryInfo MemoryAdaptor::memory_info() const {
  return upstream_->memory_info();
}
void MemoryAdaptor::trim() {
  upstream_->trim();
}
std::int64_t MemoryAdaptor::cached_bytes() const noexcept {
  return upstream_->cached_bytes();
}

bool MemoryAdaptor::allocates_in_stream_order() const noexcept {
  return upstream_->allocates_in_stream_order();
}

// ---- StatisticsAdaptor ----

struct StatisticsAdaptor::Counters {
  detail::MemoryCounter device;
  detail::MemoryCounter host;
};

StatisticsAdaptor::StatisticsAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream)
    : MemoryAdaptor(context, std::move(upstream), "statistics"),
      counters_(std::make_unique<Counters>()) {}

StatisticsAdaptor::~StatisticsAdaptor() = default;

void* StatisticsAdaptor::allocate(std::size_t bytes, const Stream& stream) {
  void* ptr = MemoryAdaptor::allocate(bytes, stream);
  counters_->device.add(static_cast<std::int64_t>(bytes));
  return ptr;
}
void StatisticsAdaptor::deallocate(void* ptr, std::size_t bytes, const Stream& stream) {
  // Counted before the call: a throwing deallocate drops the block (memory_manager.hpp), so it is
  // not outstanding any more either way.
  counters_->device.remove(static_cast<std::int64_t>(bytes));
  MemoryAdaptor::deallocate(ptr, bytes, stream);
}
void* StatisticsAdaptor::host_allocate(std::size_t bytes, HostAllocFlags flags) {
  void* ptr = MemoryAdaptor::host_allocate(bytes, flags);
  counters_->host.add(static_cast<std::int64_t>(bytes));
  return ptr;
}
void StatisticsAdaptor::host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) {
  counters_->host.remove(static_cast<std::int64_t>(bytes));
  MemoryAdaptor::host_deallocate(ptr, bytes, flags);
}
MemoryStatistics StatisticsAdaptor::statistics() const noexcept {
  return counters_->device.snapshot();
}
MemoryStatistics StatisticsAdaptor::host_statistics() const noexcept {
  return counters_->host.snapshot();
}

// ---- LimitAdaptor ----

struct LimitAdaptor::State {
  std::atomic<std::int64_t> device_in_use{0};
  std::atomic<std::int64_t> host_in_use{0};
};

namespace {

/// Reserves `bytes` of `in_use` under `limit` (0: none) or throws OutOfMemory; lock-free, so that
/// concurrent allocations cannot overshoot the limit together.
void reserve(std::atomic<std::int64_t>& in_use, std::int64_t limit, std::int64_t bytes,
             const char* what) {
  if (limit == 0) {
    in_use.fetch_add(bytes);
    return;
  }
  std::int64_t seen = in_use.load();
  do {
    if (bytes > limit - seen) {
      throw OutOfMemory(fmt::format("limit adaptor: allocating {} bytes of {} would exceed the "
                                    "limit of {} bytes ({} bytes in use)",
                                    bytes, what, limit, seen),
                        bytes);
    }
  } while (!in_use.compare_exchange_weak(seen, seen + bytes));
}

/// Calls `allocate` with `bytes` reserved; gives the reservation back if it throws.
template <class Allocate>
void* allocate_reserved(std::atomic<std::int64_t>& in_use, std::int64_t limit, std::size_t bytes,
                        const char* what, Allocate&& allocate) {
  const auto size = static_cast<std::int64_t>(bytes);
  reserve(in_use, limit, size, what);
  try {
    return std::forward<Allocate>(allocate)();
  } catch (...) {
    in_use.fetch_sub(size);
    throw;
  }
}

}  // namespace

LimitAdaptor::LimitAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream, Limits limits)
    : MemoryAdaptor(context, std::move(upstream), "limit"),
      limits_(limits),
      state_(std::make_unique<State>()) {
  if (limits.device_bytes < 0 || limits.host_bytes < 0) {
    throw InvalidArgument(
        fmt::format("LimitAdaptor: limits must not be negative, got {} device bytes and {} host "
                    "bytes",
                    limits.device_bytes, limits.host_bytes));
  }
}

LimitAdaptor::~LimitAdaptor() = default;

void* LimitAdaptor::allocate(std::size_t bytes, const Stream& stream) {
  return allocate_reserved(state_->device_in_use, limits_.device_bytes, bytes, "device memory",
                           [&] { return MemoryAdaptor::allocate(bytes, stream); });
}
void LimitAdaptor::deallocate(void* ptr, std::size_t bytes, const Stream& stream) {
  // Given back first: a failed deallocate drops the block, it does not stay in use.
  state_->device_in_use.fetch_sub(static_cast<std::int64_t>(bytes));
  MemoryAdaptor::deallocate(ptr, bytes, stream);
}
void* LimitAdaptor::host_allocate(std::size_t bytes, HostAllocFlags flags) {
  return allocate_reserved(state_->host_in_use, limits_.host_bytes, bytes,
                           "page-locked host memory",
                           [&] { return MemoryAdaptor::host_allocate(bytes, flags); });
}
void LimitAdaptor::host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) {
  state_->host_in_use.fetch_sub(static_cast<std::int64_t>(bytes));
  MemoryAdaptor::host_deallocate(ptr, bytes, flags);
}
std::int64_t LimitAdaptor::device_bytes_in_use() const noexcept {
  return state_->device_in_use.load();
}
std::int64_t LimitAdaptor::host_bytes_in_use() const noexcept {
  return state_->host_in_use.load();
}

// ---- LoggingAdaptor ----

std::string_view to_string(MemoryEvent::Operation operation) noexcept {
  switch (operation) {
    case MemoryEvent::Operation::Allocate:
      return "allocate";
    case MemoryEvent::Operation::Deallocate:
      return "deallocate";
    case MemoryEvent::Operation::HostAllocate:
      return "host_allocate";
    case MemoryEvent::Operation::HostDeallocate:
      return "host_deallocate";
    case MemoryEvent::Operation::Trim:
      return "trim";
  }
  return "unknown";
}

std::string_view memory_event_csv_header() noexcept {
  return "thread,operation,bytes,pointer,stream,flags,duration_ns,error";
}

std::string format_memory_event(const MemoryEvent& event) {
  std::string error;
  if (!event.error.empty()) {
    error.reserve(event.error.size() + 2);
    error += '"';
    for (const char c : event.error) {
      if (c == '"') error += '"';
      error += c;
    }
    error += '"';
  }
  return fmt::format("{},{},{},{},{},{},{},{}", event.thread, to_string(event.operation),
                     event.bytes, event.pointer, static_cast<const void*>(event.stream),
                     static_cast<unsigned>(event.flags), event.duration.count(), error);
}

struct LoggingAdaptor::State {
  std::mutex mutex;
  Sink sink;
};

namespace {

/// Times `call`, fills `event` (pointer for allocations, error when it throws), hands it to `emit`
/// and returns or rethrows what `call` did.
template <class Call, class Emit>
auto logged(MemoryEvent event, Call&& call, Emit&& emit) {
  using Result = decltype(call());
  event.thread = std::this_thread::get_id();
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                start);
  };
  try {
    if constexpr (std::is_void_v<Result>) {
      call();
      event.duration = elapsed();
      emit(event);
    } else {
      Result result = call();
      event.duration = elapsed();
      event.pointer = result;
      emit(event);
      return result;
    }
  } catch (const std::exception& e) {
    event.duration = elapsed();
    event.error = e.what();
    emit(event);
    throw;
  }
}

}  // namespace

LoggingAdaptor::LoggingAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream, Sink sink)
    : MemoryAdaptor(context, std::move(upstream), "logging"), state_(std::make_unique<State>()) {
  if (!sink) throw InvalidArgument("LoggingAdaptor: the sink is empty");
  state_->sink = std::move(sink);
}

LoggingAdaptor::LoggingAdaptor(Context& context, std::shared_ptr<MemoryManager> upstream,
                               std::ostream& out)
    : LoggingAdaptor(context, std::move(upstream), [&out](const MemoryEvent& event) {
        out << format_memory_event(event) << '\n';
      }) {
  const std::lock_guard lock(state_->mutex);
  out << memory_event_csv_header() << '\n';
}

LoggingAdaptor::~LoggingAdaptor() = default;

namespace {

struct Emitter {
  std::mutex& mutex;
  const LoggingAdaptor::Sink& sink;
  void operator()(const MemoryEvent& event) const noexcept {
    try {
      const std::lock_guard lock(mutex);
      sink(event);
    } catch (const std::exception& e) {
      detail::report_error(fmt::format("logging memory manager: the sink failed: {}", e.what()));
    } catch (...) {
      detail::report_error("logging memory manager: the sink failed");
    }
  }
};

}  // namespace

void* LoggingAdaptor::allocate(std::size_t bytes, const Stream& stream) {
  MemoryEvent event;
  event.operation = MemoryEvent::Operation::Allocate;
  event.bytes = bytes;
  event.stream = stream.native_handle();
  return logged(
      std::move(event), [&] { return MemoryAdaptor::allocate(bytes, stream); },
      Emitter{state_->mutex, state_->sink});
}
void LoggingAdaptor::deallocate(void* ptr, std::size_t bytes, const Stream& stream) {
  MemoryEvent event;
  event.operation = MemoryEvent::Operation::Deallocate;
  event.bytes = bytes;
  event.pointer = ptr;
  event.stream = stream.native_handle();
  logged(
      std::move(event), [&] { MemoryAdaptor::deallocate(ptr, bytes, stream); },
      Emitter{state_->mutex, state_->sink});
}
void* LoggingAdaptor::host_allocate(std::size_t bytes, HostAllocFlags flags) {
  MemoryEvent event;
  event.operation = MemoryEvent::Operation::HostAllocate;
  event.bytes = bytes;
  event.flags = flags;
  return logged(
      std::move(event), [&] { return MemoryAdaptor::host_allocate(bytes, flags); },
      Emitter{state_->mutex, state_->sink});
}
void LoggingAdaptor::host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) {
  MemoryEvent event;
  event.operation = MemoryEvent::Operation::HostDeallocate;
  event.bytes = bytes;
  event.pointer = ptr;
  event.flags = flags;
  logged(
      std::move(event), [&] { MemoryAdaptor::host_deallocate(ptr, bytes, flags); },
      Emitter{state_->mutex, state_->sink});
}
void LoggingAdaptor::trim() {
  MemoryEvent event;
  event.operation = MemoryEvent::Operation::Trim;
  logged(
      std::move(event), [&] { MemoryAdaptor::trim(); }, Emitter{state_->mutex, state_->sink});
}

}  // namespace devmem

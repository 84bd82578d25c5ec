// The deallocation queue of a context (DeallocationQueue, a context's `deallocations`): memory is
// obtained through the context's manager and returned to a queue that is flushed by Numba's rules
// (a count and a byte limit, out of memory, defer_cleanup), and the manager and limits are set
// here.
#include "core/deallocation_queue.hpp"

#include "core/context_state.hpp"
#include "core/copy_engine.hpp"
#include "core/report_error.hpp"
#include "core/stream_state.hpp"
#include "core/trace.hpp"

#include <devmem/byte_size.hpp>

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <exception>
#include <iterator>
#include <utility>

namespace devmem::detail {

namespace {

std::int64_t byte_limit(const DeallocationConfig& config, std::int64_t manager_total) {
  return static_cast<std::int64_t>(static_cast<double>(manager_total) * config.max_pending_ratio);
}

/// What the out-of-memory retry freed, for its message.
std::string flush_outcome(int defer_depth, std::size_t pending, std::int64_t pending_bytes) {
  if (defer_depth == 0) return "after flushing pending deallocations";
  // Numba's rule frees nothing inside defer_cleanup (docs/memory-managers.md#defer-cleanup): say
  // what is held and how to get it back, rather than claim a flush that did not happen.
  return fmt::format(
      "nothing flushed: inside defer_cleanup, which is holding {} pending deallocation(s) of {}; "
      "leaving its outermost block does not free them either: call flush_deallocations() after "
      "the block, or allocate outside it",
      pending, format_bytes(pending_bytes));
}

}  // namespace

template <class Allocate>
void* DeallocationQueue::allocate_with_retry(Allocate&& allocate, const char* operation,
                                             std::int64_t bytes, const char* what) {
  try {
    return allocate();
  } catch (const OutOfMemory&) {
    // Numba's rule: free what is pending, then try exactly once more. The staging buffers kept
    // for copies between devices are pending memory too, and so is what asynchronous work still
    // holds (keep_alive.hpp: a stream's last operations share one completion event, recorded
    // late): waited for here, on this path only.
    release_idle_peer_staging();
    try {
      ContextState::of(owner_).in_flight.release_all_after_waiting();
    } catch (const std::exception& e) {
      report_error(fmt::format("{}: waiting for asynchronous work before retrying failed: {}",
                               operation, e.what()));
    }
    flush(true);
    try {
      return allocate();
    } catch (const OutOfMemory& e) {
      MemoryInfo info{};
      try {
        info = manager()->memory_info();
      } catch (...) {  // the size and the vendor's error still make a useful message
      }
      std::string outcome;
      {
        std::lock_guard lock(mutex_);
        outcome = flush_outcome(defer_depth_, queue_.size(), queue_bytes_);
      }
      throw OutOfMemory(
          fmt::format("{}: out of {} allocating {} bytes ({}) on device {} ({} "
                      "free of {}, {}): {}",
                      operation, what, bytes, format_bytes(bytes), owner_.device(),
                      format_bytes(info.free), format_bytes(info.total), outcome, e.what()),
          bytes);
    }
  }
}

std::shared_ptr<MemoryManager> DeallocationQueue::manager() const {
  std::lock_guard lock(mutex_);
  return current_manager_;
}

void DeallocationQueue::set_manager(std::shared_ptr<MemoryManager> manager) {
  if (!manager) throw InvalidArgument("set_memory_manager: the manager is null");
  if (&manager->context() != &owner_) {
    throw InvalidArgument(
        fmt::format("set_memory_manager: manager '{}' was made for device {}, not for device {}",
                    manager->name(), manager->context().device(), owner_.device()));
  }
  if (manager->interface_version() != MemoryManager::kInterfaceVersion) {
    throw InvalidArgument(fmt::format(
        "set_memory_manager: memory manager '{}' has interface version {} - version {} required",
        manager->name(), manager->interface_version(), MemoryManager::kInterfaceVersion));
  }
  // The manager is asked outside the lock (it may call the backend); the limit is computed under
  // it, so a concurrent set_config and set_manager cannot leave a limit made from a stale pair.
  const std::int64_t total = manager->memory_info().total;
  std::lock_guard lock(mutex_);
  current_manager_ = std::move(manager);
  manager_total_ = total;
  max_pending_bytes_ = byte_limit(config_, manager_total_);
}

void DeallocationQueue::set_config(const DeallocationConfig& new_config) {
  if (new_config.max_pending_count < 0) {
    throw InvalidArgument(
        fmt::format("set_deallocation_config: max_pending_count must not be negative, got {}",
                    new_config.max_pending_count));
  }
  if (!(new_config.max_pending_ratio >= 0.0 && new_config.max_pending_ratio <= 1.0)) {
    throw InvalidArgument(
        fmt::format("set_deallocation_config: max_pending_ratio must be from 0 to 1, got {}",
                    new_config.max_pending_ratio));
  }
  // The total is read again (a device's capacity can change); kept only if the manager it came
  // from is still the current one.
  const std::shared_ptr<MemoryManager> asked = manager();
  const std::int64_t total = asked->memory_info().total;
  std::lock_guard lock(mutex_);
  if (asked == current_manager_) manager_total_ = total;
  config_ = new_config;
  max_pending_bytes_ = byte_limit(config_, manager_total_);
}

void DeallocationQueue::set_initial_config(const DeallocationConfig& config) {
  std::lock_guard lock(mutex_);
  config_ = config;
}

DeallocationConfig DeallocationQueue::config() const {
  std::lock_guard lock(mutex_);
  return config_;
}

std::size_t DeallocationQueue::size() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::int64_t DeallocationQueue::bytes() const {
  std::lock_guard lock(mutex_);
  return queue_bytes_;
}

std::vector<std::string> DeallocationQueue::take_errors() {
  std::lock_guard lock(mutex_);
  return std::exchange(errors_, {});
}

void DeallocationQueue::defer() {
  std::lock_guard lock(mutex_);
  ++defer_depth_;
}

void DeallocationQueue::end_defer() {
  std::lock_guard lock(mutex_);
  --defer_depth_;
}

DeallocationQueue::Allocation DeallocationQueue::allocate_device(
    std::int64_t bytes, const Stream& stream, const char* operation,
    std::shared_ptr<MemoryManager> by) {
  Allocation result{nullptr, by ? std::move(by) : manager()};
  MemoryManager& mgr = *result.manager;
  const auto size = static_cast<std::size_t>(bytes);
  result.ptr = allocate_with_retry([&] { return mgr.allocate(size, stream); }, operation, bytes,
                                   "device memory");
  return result;
}

DeallocationQueue::Allocation DeallocationQueue::allocate_host(std::int64_t bytes,
                                                               HostAllocFlags flags,
                                                               const char* operation) {
  Allocation result{nullptr, manager()};
  MemoryManager& mgr = *result.manager;
  const auto size = static_cast<std::size_t>(bytes);
  result.ptr = allocate_with_retry([&] { return mgr.host_allocate(size, flags); }, operation, bytes,
                                   "page-locked host memory");
  return result;
}

Stream DeallocationQueue::deallocation_stream(
    const std::weak_ptr<StreamState>& stream) const noexcept {
  if (auto alive = stream.lock()) return StreamState::wrap(std::move(alive));
  return StreamState::wrap(ContextState::of(owner_).default_stream);
}

void DeallocationQueue::release(const std::shared_ptr<MemoryManager>& manager, void* ptr,
                                std::int64_t bytes, bool host, HostAllocFlags flags,
                                const std::weak_ptr<StreamState>& stream) noexcept {
  bool over_limit = false;
  try {
    std::lock_guard lock(mutex_);
    queue_.push_back(Pending{manager, ptr, bytes, host, flags, stream, trace::start_time()});
    queue_bytes_ += bytes;
    if (trace::active()) {
      trace::counter("pending deallocations", {{"count", static_cast<std::int64_t>(queue_.size())},
                                               {"bytes", queue_bytes_}});
    }
    // Strict comparisons, as Numba: with the default count of 10 the 11th item flushes.
    over_limit = static_cast<std::int64_t>(queue_.size()) > config_.max_pending_count ||
                 queue_bytes_ > max_pending_bytes_;
  } catch (const std::exception& e) {
    // Only push_back can fail (no memory for the queue node): free right away instead.
    report_error(fmt::format("queueing a deallocation of {} failed ({}); freeing it now",
                             static_cast<void*>(ptr), e.what()));
    try {
      if (host) {
        manager->host_deallocate(ptr, static_cast<std::size_t>(bytes), flags);
      } else {
        manager->deallocate(ptr, static_cast<std::size_t>(bytes), deallocation_stream(stream));
      }
    } catch (const std::exception& e2) {
      report_error(fmt::format("freeing {}: {}", static_cast<void*>(ptr), e2.what()));
    }
    return;
  }
  if (over_limit) flush(true);
}

namespace {

/// The trace's "flush" event (core/trace.hpp), recorded when the flush ends, however it ends.
struct TraceFlush {
  trace::Clock::time_point start;
  std::size_t count = 0;
  std::int64_t bytes = 0;
  bool implicit = false;
  ~TraceFlush() {
    if (count == 0) return;
    trace::complete("flush", implicit ? "flush (over the limits)" : "flush", start,
                    {{"count", static_cast<std::int64_t>(count)}, {"bytes", bytes}});
    trace::counter("pending deallocations",
                   {{"count", std::int64_t{0}}, {"bytes", std::int64_t{0}}});
  }
};

}  // namespace

void DeallocationQueue::trace_free(const Pending& pending) {
  if (!trace::active()) return;
  const double deferred =
      std::chrono::duration<double, std::micro>(trace::Clock::now() - pending.released_at).count();
  trace::instant("free", pending.host ? "free host" : "free",
                 {{"bytes", pending.bytes},
                  {"address", static_cast<const void*>(pending.ptr)},
                  {"manager", pending.manager->name()},
                  {"deferred us", deferred}});
}

void DeallocationQueue::flush(bool implicit) {
  std::deque<Pending> batch;
  std::int64_t batch_bytes = 0;
  {
    std::lock_guard lock(mutex_);
    if (defer_depth_ > 0) return;
    batch.swap(queue_);
    batch_bytes = std::exchange(queue_bytes_, 0);
  }
  // Recorded however the flush ends (a failed free throws or returns below).
  const TraceFlush trace_flush{trace::start_time(), batch.size(), batch_bytes, implicit};
  for (auto it = batch.begin(); it != batch.end(); ++it) {
    trace_free(*it);
    try {
      if (it->host) {
        it->manager->host_deallocate(it->ptr, static_cast<std::size_t>(it->bytes), it->flags);
      } else {
        it->manager->deallocate(it->ptr, static_cast<std::size_t>(it->bytes),
                                deallocation_stream(it->stream));
      }
    } catch (const std::exception& e) {
      // The failed item is dropped: its state is unknown and freeing it twice would be worse.
      // Everything after it goes back to the front of the queue for the next flush.
      const std::string message = fmt::format(
          "freeing {} of {} ({} bytes) failed; {} later deallocation(s) stay queued: {}",
          it->host ? "page-locked host memory" : "device memory", it->ptr, it->bytes,
          std::distance(std::next(it), batch.end()), e.what());
      {
        std::lock_guard lock(mutex_);
        for (auto rest = batch.rbegin(); rest.base() != std::next(it); ++rest) {
          queue_bytes_ += rest->bytes;
          queue_.push_front(std::move(*rest));
        }
        if (implicit) errors_.push_back(message);
      }
      if (implicit) {
        report_error(message);
        return;
      }
      // Same exception type, with the pointer and the queue state in the message.
      if (const auto* backend_error = dynamic_cast<const BackendError*>(&e)) {
        throw BackendError(backend_error->backend(), backend_error->function(),
                           backend_error->code(), backend_error->code_name(), message);
      }
      throw Error(message);
    }
  }
}

}  // namespace devmem::detail

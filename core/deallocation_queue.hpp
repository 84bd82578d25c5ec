// The deallocation queue of a context (ContextState::deallocations): the context's memory manager,
// the memory whose last user is gone, and Numba's rules for when it is freed (a count and a byte
// limit, out of memory, defer_cleanup). Not installed; only core/ includes it (through
// core/context_state.hpp).
#pragma once

#include <devmem/memory_manager.hpp>
#include <devmem/stream.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace devmem {

class Context;

namespace detail {

struct StreamState;

/// Memory obtained through a context's manager and returned to a queue that is flushed by Numba's
/// rules. Thread-safe: one mutex guards the manager, the limits, the queue, the defer depth and
/// the errors; it is never held while the manager allocates or frees.
class DeallocationQueue {
 public:
  /// The queue of `owner`, with no manager until set_manager.
  explicit DeallocationQueue(Context& owner) noexcept : owner_(owner) {}
  DeallocationQueue(const DeallocationQueue&) = delete;
  DeallocationQueue& operator=(const DeallocationQueue&) = delete;
  ~DeallocationQueue() = default;

  /// Memory obtained from a manager, and that manager (which it must be returned to).
  struct Allocation {
    void* ptr = nullptr;
    std::shared_ptr<MemoryManager> manager;
  };
  /// `bytes` (more than 0) of device memory allocated on `stream` by `manager` (null: the current
  /// manager), with Numba's out-of-memory rule: on OutOfMemory the queue is flushed and the
  /// allocation tried once more; a second OutOfMemory is rethrown naming `operation`, the size
  /// and free/total memory.
  [[nodiscard]] Allocation allocate_device(std::int64_t bytes, const Stream& stream,
                                           const char* operation,
                                           std::shared_ptr<MemoryManager> manager = nullptr);
  /// The same for page-locked host memory allocated with `flags`.
  [[nodiscard]] Allocation allocate_host(std::int64_t bytes, HostAllocFlags flags,
                                         const char* operation);
  /// Queues memory whose last user is gone; flushes when a limit is exceeded. Never throws.
  /// `stream`: the stream device memory was allocated on (unused for host memory).
  void release(const std::shared_ptr<MemoryManager>& manager, void* ptr, std::int64_t bytes,
               bool host, HostAllocFlags flags, const std::weak_ptr<StreamState>& stream) noexcept;
  /// Frees the queue now unless deferred. `implicit`: started by devmem (errors are reported and
  /// kept instead of thrown).
  void flush(bool implicit);

  [[nodiscard]] std::shared_ptr<MemoryManager> manager() const;
  /// InvalidArgument for a null manager, one made for another context, or another interface
  /// version.
  void set_manager(std::shared_ptr<MemoryManager> manager);
  [[nodiscard]] DeallocationConfig config() const;
  /// InvalidArgument for a negative count or a ratio outside [0, 1].
  void set_config(const DeallocationConfig& config);
  /// The limits read from the environment when the context is created (already checked), before
  /// its first manager is set: set_config needs a manager to turn the ratio into bytes.
  void set_initial_config(const DeallocationConfig& config);

  /// Queued deallocations and their bytes.
  [[nodiscard]] std::size_t size() const;
  [[nodiscard]] std::int64_t bytes() const;
  /// The free failures of implicit flushes, oldest first; clears the list.
  [[nodiscard]] std::vector<std::string> take_errors();
  /// Enters and leaves a defer_cleanup scope: nothing is freed while one is open.
  void defer();
  void end_defer();

 private:
  struct Pending {
    std::shared_ptr<MemoryManager> manager;
    void* ptr = nullptr;
    std::int64_t bytes = 0;
    bool host = false;
    HostAllocFlags flags = HostAllocFlags::None;
    // Weak: a strong Stream here would make a cycle (context -> queue -> stream -> context) and
    // keep destroyed streams' vendor queues alive until the next flush.
    std::weak_ptr<StreamState> stream;
    // When the array let go of it: the trace's "deferred us" of its free. Zero when not tracing.
    std::chrono::steady_clock::time_point released_at;
  };
  /// The trace's "free" event for `pending` (core/trace.hpp), when a trace is being written.
  static void trace_free(const Pending& pending);
  template <class Allocate>
  void* allocate_with_retry(Allocate&& allocate, const char* operation, std::int64_t bytes,
                            const char* what);
  /// The stream to hand to MemoryManager::deallocate for memory allocated on `stream`: that
  /// stream while it exists, else the context's default stream.
  [[nodiscard]] Stream deallocation_stream(const std::weak_ptr<StreamState>& stream) const noexcept;

  Context& owner_;
  mutable std::mutex mutex_;  // guards the members below
  std::deque<Pending> queue_;
  std::int64_t queue_bytes_ = 0;
  int defer_depth_ = 0;
  DeallocationConfig config_;
  std::int64_t max_pending_bytes_ = 0;
  // The current manager's memory_info().total when it was set: max_pending_bytes_ is
  // config_.max_pending_ratio of it.
  std::int64_t manager_total_ = 0;
  std::shared_ptr<MemoryManager> current_manager_;
  std::vector<std::string> errors_;
};

}  // namespace detail
}  // namespace devmem

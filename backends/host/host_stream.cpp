#include "backends/host/host_stream.hpp"

#include <devmem/error.hpp>

#include <chrono>
#include <exception>
#include <utility>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace devmem::host {
namespace {

// Runs the operations of `batch` in order and empties it; the first exception any of them throws
// goes to `failure` unless that already holds one. Each finished operation leaves `outstanding`.
void run_batch(std::vector<StreamOperation>& batch, std::exception_ptr& failure,
               std::atomic<std::int64_t>* outstanding) {
  for (StreamOperation& op : batch) {
    try {
      op();
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
    // Destroy each operation before the next runs and before idle is reported: its captures
    // (keep-alive references, event records) must be released by the time a waiter sees the
    // work as complete.
    op = nullptr;
    // Release: a thread that reads the count as 0 (acquire) sees everything the operation wrote.
    if (outstanding != nullptr) outstanding->fetch_sub(1, std::memory_order_acq_rel);
  }
  batch.clear();
}

// The stream whose worker is the current thread, if any: waiting for that stream from one of its
// own operations could never return.
thread_local const HostStream* t_running_stream = nullptr;

/// Counts the calling thread as waiting for the stream while alive: a worker that is spinning for
/// more work before it reports idle reports it at once instead.
class WaiterMark {
 public:
  explicit WaiterMark(std::atomic<int>& waiters) noexcept : waiters_(waiters) {
    waiters_.fetch_add(1, std::memory_order_acq_rel);
  }
  ~WaiterMark() { waiters_.fetch_sub(1, std::memory_order_acq_rel); }
  WaiterMark(const WaiterMark&) = delete;
  WaiterMark& operator=(const WaiterMark&) = delete;

 private:
  std::atomic<int>& waiters_;
};

}  // namespace

HostStream::HostStream(int device, std::atomic<std::int64_t>* outstanding)
    : device_(device), outstanding_(outstanding), worker_([this] { run(); }) {}

HostStream::~HostStream() {
  shutdown();
}

std::unique_lock<std::mutex> HostStream::lock_spinning() {
  constexpr int kSpins = 256;
  for (int i = 0; i < kSpins; ++i) {
    if (mutex_.try_lock()) return std::unique_lock<std::mutex>(mutex_, std::adopt_lock);
#if defined(__SSE2__)
    _mm_pause();
#endif
  }
  return std::unique_lock<std::mutex>(mutex_);
}

void HostStream::enqueue(Operation op) {
  // Counted before the worker can see it (and so before it can leave the count).
  if (outstanding_ != nullptr) outstanding_->fetch_add(1, std::memory_order_acq_rel);
  {
    const std::unique_lock lock = lock_spinning();
    queue_.push_back(std::move(op));
    queued_.store(queue_.size(), std::memory_order_release);
  }
  work_available_.notify_one();
}

void HostStream::wait_idle() {
  if (t_running_stream == this) {
    throw InvalidArgument(
        "host backend: an operation of a stream waited for that same stream (a host function "
        "called the backend, which host functions must not do)");
  }
  const WaiterMark waiting(waiters_);
  std::unique_lock lock(mutex_);
  became_idle_.wait(lock, [this] { return idle_locked(); });
}

bool HostStream::idle() {
  const WaiterMark waiting(waiters_);
  const std::lock_guard lock(mutex_);
  return idle_locked();
}

std::exception_ptr HostStream::take_error() {
  const std::lock_guard lock(mutex_);
  return std::exchange(error_, nullptr);
}

void HostStream::shutdown() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_one();
  if (worker_.joinable()) worker_.join();
}

bool HostStream::spin_for_work(bool until_waited_for) const noexcept {
  // Long enough to bridge the gap between two enqueues of a loop (a microsecond or two), short
  // enough that an idle stream gives its core back almost at once.
  constexpr auto kSpinTime = std::chrono::microseconds(20);
  constexpr int kChecksPerClockRead = 64;
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < kChecksPerClockRead; ++i) {
      if (queued_.load(std::memory_order_acquire) != 0) return true;
      if (until_waited_for && waiters_.load(std::memory_order_acquire) != 0) return false;
#if defined(__SSE2__)
      _mm_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

void HostStream::run() {
  t_running_stream = this;
  std::unique_lock lock = lock_spinning();
  for (;;) {
    if (queue_.empty() && !stopping_) {
      lock.unlock();
      static_cast<void>(spin_for_work(false));
      lock = lock_spinning();
    }
    work_available_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything enqueued has run
    // Take everything queued at once: the enqueuing thread and the worker then meet at the mutex
    // once per batch instead of once per operation.
    running_ = true;
    std::exception_ptr failure;
    do {
      batch_.swap(queue_);
      queued_.store(0, std::memory_order_relaxed);
      lock.unlock();
      run_batch(batch_, failure, outstanding_);
      // While operations keep coming and nobody waits for the stream, take the next batch
      // without reporting idle in between: one visit to the mutex per batch instead of two.
      const bool more = spin_for_work(true);
      lock = lock_spinning();
      if (!more || queue_.empty() || waiters_.load(std::memory_order_acquire) != 0) break;
    } while (true);
    running_ = false;
    if (failure && !error_) error_ = std::move(failure);
    if (queue_.empty()) became_idle_.notify_all();
  }
}

}  // namespace devmem::host

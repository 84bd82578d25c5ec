// A simulated stream of the host backend: a FIFO of operations run in order by one worker thread,
// so that work enqueued on a non-default stream really completes later than the call that
// enqueued it. Not installed; only backends/host includes it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace devmem::host {

/// One queued operation: a callable run once by a stream's worker. Small trivially copyable
/// callables (a plain copy's or memset's pointers and size) are stored inline, everything else in
/// a std::function. Inline storage matters because an operation is built on the enqueuing thread
/// and destroyed on the worker: memory allocated on one thread and freed on another takes glibc's
/// malloc through its locked arena path on every operation.
class StreamOperation {
 public:
  StreamOperation() = default;
  StreamOperation(std::nullptr_t) noexcept {}  // NOLINT: like std::function's
  template <class F>
    requires(std::is_invocable_r_v<void, std::decay_t<F>&> &&
             !std::is_same_v<std::decay_t<F>, StreamOperation>)
  StreamOperation(F&& f) {  // NOLINT: implicit, like std::function's
    using Fn = std::decay_t<F>;
    if constexpr (std::is_trivially_copyable_v<Fn> && sizeof(Fn) <= kInlineBytes &&
                  alignof(Fn) <= alignof(std::max_align_t)) {
      ::new (static_cast<void*>(inline_)) Fn(std::forward<F>(f));
      run_inline_ = [](void* callable) { (*static_cast<Fn*>(callable))(); };
    } else {
      general_ = std::function<void()>(std::forward<F>(f));
    }
  }

  void operator()() {
    if (run_inline_ != nullptr) {
      run_inline_(inline_);
    } else {
      general_();
    }
  }
  [[nodiscard]] explicit operator bool() const noexcept {
    return run_inline_ != nullptr || static_cast<bool>(general_);
  }

 private:
  static constexpr std::size_t kInlineBytes = 32;
  // Trivially copyable contents: the implicit copy and move of the bytes are correct.
  alignas(std::max_align_t) std::byte inline_[kInlineBytes]{};
  void (*run_inline_)(void*) = nullptr;
  std::function<void()> general_;
};

class HostStream {
 public:
  using Operation = StreamOperation;

  /// Starts the worker thread (std::system_error when the thread cannot be created). When
  /// `outstanding` is given, every operation counts in it from its enqueue until it has run and
  /// been destroyed (the backend's drain skips its streams while the count is 0).
  explicit HostStream(int device, std::atomic<std::int64_t>* outstanding = nullptr);
  /// Runs what is still queued, then joins the worker (see shutdown()).
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  [[nodiscard]] int device() const noexcept { return device_; }

  /// Appends `op`. An exception escaping `op` is stored (the first one until it is taken) and the
  /// following operations still run, like an asynchronous failure of a real device.
  void enqueue(Operation op);
  /// Blocks until every operation enqueued so far has run. Does not take the stored error.
  /// Throws InvalidArgument when called from one of this stream's own operations (which would
  /// wait forever).
  void wait_idle();
  /// True when no operation is queued or running.
  [[nodiscard]] bool idle();
  /// The stored error of a failed operation, cleared by taking it; null when there is none.
  [[nodiscard]] std::exception_ptr take_error();
  /// Runs the remaining work and joins the worker. Idempotent; must not be called concurrently
  /// with enqueue() (the backend removes a stream from its table before shutting it down).
  void shutdown();

 private:
  void run();
  /// Locks mutex_, spinning briefly before blocking: the critical sections are a few
  /// instructions, while a contended std::mutex sleeps in the kernel at once (a futex wait and
  /// wake, tens of microseconds on a virtual machine).
  [[nodiscard]] std::unique_lock<std::mutex> lock_spinning();
  /// Spins for a few microseconds until something is queued: a host thread that enqueues a run of
  /// small operations then never has to wake a sleeping worker (a futex wake and a context switch,
  /// several microseconds), like the spin-wait of a GPU runtime. True when work arrived.
  /// With `until_waited_for`, also gives up (false) as soon as a thread waits for the stream.
  [[nodiscard]] bool spin_for_work(bool until_waited_for) const noexcept;
  [[nodiscard]] bool idle_locked() const noexcept { return queue_.empty() && !running_; }

  const int device_;
  std::atomic<std::int64_t>* const outstanding_;
  std::mutex mutex_;
  std::condition_variable work_available_;  // the worker waits here for work or shutdown
  std::condition_variable became_idle_;     // wait_idle() waits here
  // Vectors swapped between the two threads keep their capacity: after warm-up, queueing
  // allocates nothing (memory freed on another thread than the one that allocated it is what
  // glibc's malloc handles worst).
  std::vector<Operation> queue_;
  std::vector<Operation> batch_;        // owned by the worker: what it took off queue_ in one go
  std::atomic<std::size_t> queued_{0};  // queue_.size(), readable without the mutex (spinning)
  std::atomic<int> waiters_{0};         // threads in wait_idle() or idle(): report idle at once
  bool running_ = false;                // the worker is executing operations taken off the queue
  bool stopping_ = false;               // shutdown() was called: exit once the queue is empty
  std::exception_ptr error_;
  std::thread worker_;  // declared last: it starts after the state it uses is constructed
};

}  // namespace devmem::host

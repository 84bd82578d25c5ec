// A simulated stream of the host backend: a FIFO of operations run in order by one worker thread,
// so that work enqueued on a non-default stream really completes later than the call that
// enqueued it. Not installed; only backends/host includes it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace devmem::host {

class HostStream {
 public:
  using Operation = std::function<void()>;

  /// Starts the worker thread (std::system_error when the thread cannot be created).
  explicit HostStream(int device);
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
  /// Spins for a few microseconds until something is queued: a host thread that enqueues a run of
  /// small operations then never has to wake a sleeping worker (a futex wake and a context switch,
  /// several microseconds), like the spin-wait of a GPU runtime. True when work arrived.
  [[nodiscard]] bool spin_for_work() const noexcept;
  [[nodiscard]] bool idle_locked() const noexcept { return queue_.empty() && !running_; }

  const int device_;
  std::mutex mutex_;
  std::condition_variable work_available_;  // the worker waits here for work or shutdown
  std::condition_variable became_idle_;     // wait_idle() waits here
  std::deque<Operation> queue_;
  std::atomic<std::size_t> queued_{0};  // queue_.size(), readable without the mutex (spinning)
  bool running_ = false;                // the worker is executing an operation taken off the queue
  bool stopping_ = false;               // shutdown() was called: exit once the queue is empty
  std::exception_ptr error_;
  std::thread worker_;  // declared last: it starts after the state it uses is constructed
};

}  // namespace devmem::host

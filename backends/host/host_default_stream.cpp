// The host backend's legacy default stream (HostBackend::DefaultStream; host_backend.hpp says what
// the backend simulates and why). On CUDA a kernel launched on the default stream runs after
// launch returns, like one on any other stream; here it is queued on a worker of its device,
// started at the first such launch, so that a program that reads a kernel's results without a
// synchronize (host-accessible memory, timings) fails on the host as it would on a GPU. The legacy
// ordering is kept: an operation queued there runs after the work the device's other streams had
// queued (a marker on each busy stream, which the operation waits for: the host does not), and
// work enqueued on another stream later waits for the default stream's queued operations (for the
// latest one's completion record, `tail`).
#include "backends/host/host_backend.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <utility>
#include <vector>

namespace devmem::host {
namespace {

/// The backends whose default-stream workers have started, for the exit handler. Never
/// destroyed: the handler runs during exit, when a function-local static made later may be gone.
struct StartedBackends {
  std::mutex mutex;
  std::vector<HostBackend*> backends;
};

StartedBackends& started_backends() {
  static auto* const started = new StartedBackends;
  return *started;
}

/// Registered with std::atexit when the first default-stream worker starts, so it runs before
/// the handlers registered earlier (devmem's own, which frees what contexts still hold): work a
/// program left queued on the default stream is finished, and its failures reported, first.
void finish_default_streams_at_exit() noexcept {
  StartedBackends& started = started_backends();
  const std::lock_guard lock(started.mutex);
  for (HostBackend* backend : started.backends) backend->finish_default_streams(true);
}

void note_started(HostBackend* backend) {
  static std::once_flag registered;
  std::call_once(registered,
                 [] { static_cast<void>(std::atexit(&finish_default_streams_at_exit)); });
  StartedBackends& started = started_backends();
  const std::lock_guard lock(started.mutex);
  started.backends.push_back(backend);
}

void note_destroyed(HostBackend* backend) noexcept {
  StartedBackends& started = started_backends();
  const std::lock_guard lock(started.mutex);
  std::erase(started.backends, backend);
}

}  // namespace

bool HostBackend::default_busy(int device) const noexcept {
  return default_work_.load(std::memory_order_acquire) != 0 &&
         default_stream_of(device).pending.load(std::memory_order_acquire) != 0;
}

void HostBackend::enqueue_default(const char* function, int device, HostStream::Operation op) {
  // After what the device's other (blocking) streams have queued so far: a marker on each busy
  // one, which the operation waits for on the worker, so that the host never waits here.
  std::vector<std::shared_ptr<EventRecord>> after;
  if (stream_work_.load(std::memory_order_acquire) != 0) {
    for (const auto& stream : streams_of(device)) {
      if (stream->idle()) continue;
      auto marker = std::make_shared<EventRecord>();
      stream->enqueue([marker] { marker->complete(); });
      after.push_back(std::move(marker));
    }
  }
  DefaultStream& defaults = default_stream_of(device);
  auto done = std::make_shared<EventRecord>();
  bool started = false;
  {
    const std::lock_guard lock(defaults.mutex);
    if (!defaults.worker) {
      try {
        defaults.worker = std::make_shared<HostStream>(device, &default_work_);
      } catch (const std::system_error& error) {
        fail(function, Status::MemoryAllocation,
             "cannot start the default stream's worker thread of device {}: {}", device,
             error.what());
      }
      started = true;
    }
    defaults.pending.fetch_add(1, std::memory_order_acq_rel);
    defaults.tail = done;
    // The failure is kept on the default stream (not the worker's error), so that its
    // synchronize finds it with one atomic load when there is none.
    defaults.worker->enqueue(
        [&defaults, after = std::move(after), op = std::move(op), done]() mutable {
          try {
            for (const auto& marker : after) marker->wait();
            op();
          } catch (...) {
            const std::lock_guard failure_lock(defaults.mutex);
            if (!defaults.error) defaults.error = std::current_exception();
            defaults.failed.store(true, std::memory_order_release);
          }
          done->complete();
          defaults.pending.fetch_sub(1, std::memory_order_acq_rel);
        });
  }
  if (started) note_started(this);
}

void HostBackend::enqueue_on(HostStream& target, HostStream::Operation op) {
  if (default_work_.load(std::memory_order_acquire) != 0) {
    DefaultStream& defaults = default_stream_of(target.device());
    std::shared_ptr<EventRecord> tail;
    if (defaults.pending.load(std::memory_order_acquire) != 0) {
      const std::lock_guard lock(defaults.mutex);
      tail = defaults.tail;
    }
    if (tail != nullptr && !tail->is_complete()) target.enqueue([tail] { tail->wait(); });
  }
  target.enqueue(std::move(op));
}

void HostBackend::wait_for_default_streams(int device) {
  if (default_work_.load(std::memory_order_acquire) == 0) return;
  const int first = device < 0 ? 0 : device;
  const int last = device < 0 ? device_count_ : device + 1;
  for (int d = first; d < last; ++d) {
    DefaultStream& defaults = default_stream_of(d);
    std::shared_ptr<HostStream> worker;
    {
      const std::lock_guard lock(defaults.mutex);
      worker = defaults.worker;
    }
    if (worker != nullptr) worker->wait_idle();
  }
}

void HostBackend::take_default_failure(int device) {
  DefaultStream& defaults = default_stream_of(device);
  std::exception_ptr error;
  {
    const std::lock_guard lock(defaults.mutex);
    error = std::exchange(defaults.error, nullptr);
    defaults.failed.store(false, std::memory_order_relaxed);
  }
  if (error) std::rethrow_exception(error);
}

void HostBackend::finish_default_streams(bool at_exit) noexcept {
  for (int device = 0; device < device_count_; ++device) {
    DefaultStream& defaults = default_stream_of(device);
    std::shared_ptr<HostStream> worker;
    {
      const std::lock_guard lock(defaults.mutex);
      worker = defaults.worker;
    }
    if (worker == nullptr) continue;
    try {
      worker->wait_idle();
    } catch (const std::exception&) {
      continue;  // called from that worker itself (a kernel that ended the process): cannot wait
    }
    try {
      rethrow_default_failure(device);
    } catch (const std::exception& e) {
      // Like destroy_stream's report of a stream's failure (docs/errors.md): the error, and that
      // no synchronize reported it. The program's exit status stays its own.
      try {
        fmt::print(stderr,
                   "devmem: error: {} the default stream of device {}: {} (never synchronized: "
                   "{} before a synchronize reported this failure of its default-stream work)\n",
                   at_exit ? "at exit," : "destroying the host backend,", device, e.what(),
                   at_exit ? "the process ended" : "the backend was destroyed");
        std::fflush(stderr);
      } catch (...) {
        std::fputs("devmem: error (message could not be formatted)\n", stderr);
      }
    }
  }
}

void HostBackend::stop_default_streams() noexcept {
  note_destroyed(this);
  finish_default_streams(false);
  for (int device = 0; device < device_count_; ++device) {
    DefaultStream& defaults = default_stream_of(device);
    std::shared_ptr<HostStream> worker;
    {
      const std::lock_guard lock(defaults.mutex);
      worker = std::move(defaults.worker);
    }
    if (worker != nullptr) worker->shutdown();
  }
}

}  // namespace devmem::host

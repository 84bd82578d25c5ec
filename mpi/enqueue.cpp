// devmem::mpi's stream-ordered communication: send_enqueue, recv_enqueue, allreduce_enqueue
// (declared in <devmem/mpi.hpp>), after MPICH's MPIX_*_enqueue. Each call enqueues on the stream
// (1) the copy of the array into a page-locked staging buffer, (2) a host function that hands an
// operation on that buffer to devmem::mpi's progress thread and blocks the stream until it has
// finished, and (3) for receives the copy back. The host function itself only waits on a
// condition variable: a stream's host functions must not call the device runtime (CUDA forbids
// it), while the operation's MPI calls belong to the progress thread, which starts with the first
// enqueued call and sleeps when it has nothing to do. Neither ever waits for a stream: the
// progress thread advances only the enqueued operations (not the application's, whose staging
// copies wait for events on streams an enqueued operation may be holding), and it never frees a
// finished operation's buffers itself (freeing device-runtime memory waits for the streams that
// may use it, the very stream that waits for the progress thread): the application's threads
// free them at their next enqueue call or check_enqueued().
#include "collective_agreement.hpp"
#include "message.hpp"
#include "point_to_point.hpp"
#include "progress.hpp"

#include <devmem/backend.hpp>
#include <devmem/context.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace devmem::mpi {

using namespace detail;

namespace {

// One enqueued operation, between the stream's host function and the progress thread. Once done
// it holds nothing but the flag: the stream's host function may drop the last reference on the
// stream's own thread.
struct Enqueued {
  std::function<std::shared_ptr<Operation>()> make;  // run by the progress thread
  std::shared_ptr<Operation> op;
  bool done = false;  // guarded by the engine's mutex
};

// What a finished operation leaves to be freed by an application thread.
struct Retired {
  std::function<std::shared_ptr<Operation>()> make;  // holds the staging buffer
  std::shared_ptr<Operation> op;
};

// The progress thread and the enqueued operations it runs.
class EnqueueEngine {
 public:
  static EnqueueEngine& instance() {
    // Never destroyed: host functions of streams that outlive main may still reach it.
    static auto* engine = new EnqueueEngine();  // NOLINT(cppcoreguidelines-owning-memory)
    return *engine;
  }

  // Called by the stream's host function: hands `work` over and waits until it has finished.
  void run_and_wait(const std::shared_ptr<Enqueued>& work) {
    std::unique_lock lock(mutex_);
    incoming_.push_back(work);
    wake_.notify_all();
    finished_.wait(lock, [&] { return work->done; });
  }

  void ensure_started() {
    const std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }

  // The first error of an enqueued operation since the last call, cleared; frees what finished
  // operations left (called by application threads only).
  std::exception_ptr take_error() {
    std::vector<Retired> freed;
    std::exception_ptr error;
    {
      const std::lock_guard lock(mutex_);
      freed.swap(retired_);
      error = std::exchange(error_, nullptr);
    }
    return error;  // `freed` goes here, outside the lock, on the application's thread
  }

 private:
  EnqueueEngine() = default;

  void loop() {
    std::vector<std::shared_ptr<Enqueued>> running;
    std::uint64_t idle_polls = 0;
    while (true) {
      std::deque<std::shared_ptr<Enqueued>> arrived;
      {
        std::unique_lock lock(mutex_);
        if (running.empty()) {
          wake_.wait(lock, [&] { return !incoming_.empty(); });
        }
        arrived.swap(incoming_);
      }
      for (auto& work : arrived) {
        try {
          work->op = work->make();
          launch(work->op);
          running.push_back(std::move(work));
        } catch (...) {
          finish(*work, std::current_exception());
        }
      }
      for (const auto& work : running) advance_started(work->op);
      bool moved = !arrived.empty();
      std::erase_if(running, [&](const std::shared_ptr<Enqueued>& work) {
        if (!work->op->finished.load(std::memory_order_acquire)) return false;
        finish(*work, work->op->error);
        moved = true;
        return true;
      });
      // A dedicated thread: spin briefly after progress, then sleep a little between polls.
      idle_polls = moved ? 0 : idle_polls + 1;
      if (idle_polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  void finish(Enqueued& work, std::exception_ptr error) {
    const std::lock_guard lock(mutex_);
    if (error && !error_) error_ = std::move(error);
    retired_.push_back(Retired{std::move(work.make), std::move(work.op)});
    work.make = nullptr;
    work.done = true;
    finished_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::deque<std::shared_ptr<Enqueued>> incoming_;
  std::exception_ptr error_;
  std::vector<Retired> retired_;
  std::thread thread_;
};

// Enqueued operations run MPI calls on the progress thread while the application's threads call
// MPI too.
void require_thread_multiple(const char* operation) {
  int provided = MPI_THREAD_SINGLE;
  check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
  if (provided < MPI_THREAD_MULTIPLE) {
    throw InvalidArgument(fmt::format(
        "{}: stream-ordered communication makes MPI calls on devmem::mpi's progress thread: "
        "initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) (provided: {})",
        operation, provided));
  }
}

void check_stream(const char* operation, const DeviceArray& array, const Stream& stream) {
  const std::shared_ptr<Context> of_array = array.context();
  const std::shared_ptr<Context> of_stream = stream.context();
  if (of_array && of_stream && of_array->device() != of_stream->device()) {
    throw InvalidArgument(fmt::format("{}: the stream is of device {}, the array of device {}",
                                      operation, of_stream->device(), of_array->device()));
  }
}

// Enqueues the host function that runs `make`'s operation on the progress thread and blocks
// `stream` until it has finished.
void enqueue_operation(const Stream& stream, std::function<std::shared_ptr<Operation>()> make) {
  EnqueueEngine& engine = EnqueueEngine::instance();
  engine.ensure_started();
  auto work = std::make_shared<Enqueued>();
  work->make = std::move(make);
  const std::shared_ptr<Context> context = stream.context();
  context->backend().launch_host_function(context->device(), stream.native_handle(),
                                          [work, &engine] { engine.run_and_wait(work); });
}

// A C-contiguous page-locked copy of `array`'s shape and dtype (the staging buffer).
HostArray staging_for(const DeviceArray& array) {
  return pinned_array(array.shape(), array.dtype());
}

// allreduce_enqueue's operation: MPI_Iallreduce in place on the staging buffer, posted in its
// turn among the communicator's non-blocking collectives.
class HostAllreduce final : public Operation {
 public:
  HostAllreduce(HostArray buffer, MPI_Datatype type, MPI_Op op, MPI_Comm comm)
      : buffer_(std::move(buffer)), type_(type), op_(op), comm_(comm) {
    enqueue_collective(comm_, this);
  }
  ~HostAllreduce() override { dequeue_collective(comm_, this); }
  HostAllreduce(const HostAllreduce&) = delete;
  HostAllreduce& operator=(const HostAllreduce&) = delete;
  HostAllreduce(HostAllreduce&&) = delete;
  HostAllreduce& operator=(HostAllreduce&&) = delete;

  bool advance() override {
    if (!posted_) {
      if (!collective_turn(comm_, this)) return false;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buffer_.data(),
                               checked_int(buffer_.size(), "an element count"), type_, op_, comm_,
                               &request_),
                "MPI_Iallreduce (devmem::mpi::allreduce_enqueue)");
      posted_ = true;
      dequeue_collective(comm_, this);
    }
    return test_request(request_, "MPI_Iallreduce (devmem::mpi::allreduce_enqueue)");
  }
  bool abandon() noexcept override {
    dequeue_collective(comm_, this);
    return cancel_request(request_);
  }
  [[nodiscard]] std::string describe() const override {
    return "mpi::allreduce_enqueue of " + std::to_string(buffer_.size()) + " elements";
  }

 private:
  HostArray buffer_;
  MPI_Datatype type_;
  MPI_Op op_;
  MPI_Comm comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool posted_ = false;
};

}  // namespace

void check_enqueued() {
  if (std::exception_ptr error = EnqueueEngine::instance().take_error()) {
    std::rethrow_exception(error);
  }
}

void send_enqueue(const DeviceArray& array, int destination, int tag, const Stream& stream,
                  MPI_Comm comm) {
  const char* const name = "mpi::send_enqueue";
  check_enqueued();
  require_thread_multiple(name);
  check_envelope(name, comm, destination, tag, false);
  check_stream(name, array, stream);
  if (destination == MPI_PROC_NULL) return;
  HostArray staging = staging_for(array);
  array.copy_to_host(staging, stream);
  enqueue_operation(stream, [staging, destination, tag, comm] {
    return make_send_operation(Endpoint(staging), destination, tag, comm, MessageRole{});
  });
}

void recv_enqueue(const DeviceArray& array, int source, int tag, const Stream& stream,
                  MPI_Comm comm) {
  const char* const name = "mpi::recv_enqueue";
  check_enqueued();
  require_thread_multiple(name);
  check_envelope(name, comm, source, tag, true);
  check_stream(name, array, stream);
  if (source == MPI_PROC_NULL) return;
  HostArray staging = staging_for(array);
  // The array's own values first: a receive that fails leaves the staging buffer as it was, and
  // the copy back then rewrites what was there.
  array.copy_to_host(staging, stream);
  enqueue_operation(stream, [staging, source, tag, comm] {
    return make_recv_operation(Endpoint(staging), source, tag, comm, MessageRole{});
  });
  array.copy_to_device(staging, stream);
}

void allreduce_enqueue(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                       const Stream& stream, MPI_Comm comm) {
  const char* const name = "mpi::allreduce_enqueue";
  check_enqueued();
  require_thread_multiple(name);
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument(fmt::format("{}: the communicator is MPI_COMM_NULL", name));
  }
  if (input.dtype() != output.dtype() || input.shape() != output.shape()) {
    throw InvalidArgument(fmt::format("{}: the input ({} {}) and the output ({} {}) differ", name,
                                      input.dtype().name(), layout::format_tuple(input.shape()),
                                      output.dtype().name(), layout::format_tuple(output.shape())));
  }
  const std::optional<MPI_Datatype> type = reduce_type(output.dtype(), op);
  if (!type) {
    throw InvalidArgument(
        fmt::format("{}: {}", name, reduce_problem(output.dtype(), op).value_or("unsupported")));
  }
  check_stream(name, input, stream);
  check_stream(name, output, stream);
  HostArray staging = staging_for(input);
  input.copy_to_host(staging, stream);
  const MPI_Op mpi_reduction = mpi_op(op);
  enqueue_operation(stream, [staging, type = *type, mpi_reduction, comm] {
    return std::make_shared<HostAllreduce>(staging, type, mpi_reduction, comm);
  });
  output.copy_to_device(staging, stream);
}

}  // namespace devmem::mpi

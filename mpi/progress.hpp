// devmem::mpi's progress engine (private to mpi/, not installed): the non-blocking operations
// behind Request (point-to-point sends and receives) are state machines that every test(), wait()
// and blocking call advances, as MPI's own progress does, so that an exchange of isend/irecv
// pairs never deadlocks on the order the requests are waited for, and a rank inside a collective
// still acknowledges its peers. Operations that fail with MPI requests pending keep their buffers
// until the process ends.
#pragma once

#include <devmem/mpi.hpp>

#include <exception>
#include <memory>
#include <utility>

namespace devmem::mpi::detail {

// One non-blocking operation: a state machine that advance() moves forward without blocking.
struct Operation {
  Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;
  Operation(Operation&&) = delete;
  Operation& operator=(Operation&&) = delete;
  virtual ~Operation() = default;
  // True when finished; throws to fail the operation.
  virtual bool advance() = 0;
  // After a failure: cancels the MPI requests still pending; true when there were some (MPI may
  // still touch the operation's buffers, which must then outlive it).
  virtual bool abandon() noexcept = 0;

  bool finished = false;
  std::exception_ptr error;

  static Request make_request(std::shared_ptr<Operation> operation) noexcept {
    return Request(std::move(operation));
  }
};

// Adds `op` to the operations that progress advances.
void start(const std::shared_ptr<Operation>& op);
// Advances every operation in progress once; a failed one keeps its error for wait().
void progress_all();
// Waits for one MPI request of a blocking call while advancing the non-blocking operations, as
// MPI's own progress does, so that a rank inside a collective still acknowledges its peers.
void wait_request(MPI_Request& request, const char* call);
// True when `request` has completed (or is MPI_REQUEST_NULL); never blocks.
bool test_request(MPI_Request& request, const char* call, MPI_Status* status = MPI_STATUS_IGNORE);
// Cancels and frees a pending request; true when there was one.
bool cancel_request(MPI_Request& request) noexcept;

}  // namespace devmem::mpi::detail

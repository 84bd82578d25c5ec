// devmem::mpi's progress engine (private to mpi/, not installed): the non-blocking operations
// behind Request (point-to-point sends and receives) are state machines that every test(), wait()
// and blocking call advances, as MPI's own progress does, so that an exchange of isend/irecv
// pairs never deadlocks on the order the requests are waited for, and a rank inside a collective
// still acknowledges its peers. Operations that fail with MPI requests pending keep their buffers
// until the process ends.
#pragma once

#include <devmem/mpi.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
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

  // For DEVMEM_MPI_TIMEOUT's report: what the operation is and what it waits for.
  [[nodiscard]] virtual std::string describe() const { return "a devmem::mpi operation"; }

  std::atomic<bool> finished{false};  // written under the progress lock, read without it
  std::exception_ptr error;
  Status status;  // set by the operation before it finishes
  // Where the operation sits in the list of operations in progress (kNotListed when it is not),
  // under the progress lock: a wait takes its finished operation out without searching the list.
  static constexpr std::size_t kNotListed = static_cast<std::size_t>(-1);
  std::size_t list_index = kNotListed;
  // An operation started by start_borrowed() is in the lock-free stack of those started since the
  // lock's last holder moved them into their list (Incoming), in that list (Listed), or in neither;
  // `next` links the stack, then the list with `prev`. Under the progress lock once listed.
  enum class Borrowed : unsigned char { No, Incoming, Listed };
  Borrowed borrowed = Borrowed::No;
  Operation* borrowed_next = nullptr;
  Operation* borrowed_prev = nullptr;
  // A borrowed operation that failed with MPI requests pending: its list holds no reference to
  // keep it, so its wait parks it (written before `finished`).
  bool park_on_wait = false;

  static Request make_request(std::shared_ptr<Operation> operation) noexcept {
    return Request(std::move(operation));
  }
  // The operation behind `request` (null when it has none).
  static const std::shared_ptr<Operation>& of(const Request& request) noexcept {
    return request.operation_;
  }
};

// Adds `op` to the operations that progress advances (once: it must not be listed).
void start(const std::shared_ptr<Operation>& op);
// start() for an operation owned by one Request only (an eager receive, a persistent pair's eager
// round), whose wait, or parking while an exception unwinds, takes it out before it can be
// destroyed: listed by address, pushed without the lock or a reference (the lock, the list's
// shared_ptr and taking it out again were a tenth of a small receive's instructions). Every
// progress pass, test and wait still advances it, and the timeout report names it.
void start_borrowed(Operation& op) noexcept;
// Advances a started operation once (under the progress lock) unless it has finished.
void advance_started(const std::shared_ptr<Operation>& op);
// Advances a new operation once (a small message often completes at once: it then never enters
// the list) and adds it to the list if it has not finished; a failure is kept for wait().
void launch(const std::shared_ptr<Operation>& op);
// Runs a blocking call's operation, which is not in the list (no other thread needs to see it):
// advances it, and every listed operation, until it finishes; rethrows its error. `what` names the
// call in DEVMEM_MPI_TIMEOUT's report.
void run_blocking(const std::shared_ptr<Operation>& op, const char* what);
// Waits until `op` (started) has finished, advancing every operation; rethrows its error once.
void wait_operation(const std::shared_ptr<Operation>& op);
// The lock that guards the operations in progress (and mpi/message.hpp's probe stash).
[[nodiscard]] std::unique_lock<std::recursive_mutex> progress_lock();

// Pauses a polling loop: returns at once for the first polls (a small message's round trip is
// shorter than a context switch), then yields the processor between polls. Enforces
// DEVMEM_MPI_TIMEOUT: past it, prints `what` and the pending operations and calls MPI_Abort.
class Backoff {
 public:
  // `waiting` (optional): the operation this loop waits for, when it is not in the list.
  explicit Backoff(const char* what, const Operation* waiting = nullptr);
  void pause();

 private:
  const char* what_;
  const Operation* waiting_;
  std::uint64_t polls_ = 0;
  double timeout_ = 0;  // seconds; 0: none
  std::chrono::steady_clock::time_point start_;
};
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

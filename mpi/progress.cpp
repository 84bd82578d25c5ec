// devmem::mpi's progress engine (declared in mpi/progress.hpp, which says why it exists): the list
// of operations in progress, the loops that advance them, and Request, the user's handle of one
// operation, whose test() and wait() drive the engine.
#include "progress.hpp"

#include "protocol.hpp"

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace devmem::mpi {

namespace detail {

namespace {

std::recursive_mutex g_progress_mutex;
std::vector<std::shared_ptr<Operation>> g_active;
// Operations that failed with MPI requests still pending keep their buffers here until the
// process ends: MPI may still write into them.
std::vector<std::shared_ptr<Operation>> g_abandoned;

}  // namespace

void progress_all() {
  const std::lock_guard lock(g_progress_mutex);
  for (const auto& op : g_active) {
    if (op->finished) continue;
    try {
      op->finished = op->advance();
    } catch (...) {
      op->error = std::current_exception();
      op->finished = true;
      if (op->abandon()) g_abandoned.push_back(op);
    }
  }
  std::erase_if(g_active, [](const auto& op) { return op->finished; });
}

void start(const std::shared_ptr<Operation>& op) {
  const std::lock_guard lock(g_progress_mutex);
  g_active.push_back(op);
}

// Waits for one MPI request of a blocking call while advancing the non-blocking operations, as
// MPI's own progress does, so that a rank inside a collective still acknowledges its peers.
void wait_request(MPI_Request& request, const char* call) {
  while (true) {
    int flag = 0;
    check_mpi(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), call);
    if (flag != 0) return;
    progress_all();
    std::this_thread::yield();
  }
}

bool test_request(MPI_Request& request, const char* call, MPI_Status* status) {
  if (request == MPI_REQUEST_NULL) return true;
  int flag = 0;
  check_mpi(MPI_Test(&request, &flag, status), call);
  return flag != 0;
}

bool cancel_request(MPI_Request& request) noexcept {
  if (request == MPI_REQUEST_NULL) return false;
  MPI_Cancel(&request);
  MPI_Request_free(&request);
  return true;
}

}  // namespace detail

// The engine's internals.
using namespace detail;

namespace {

std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// A destructor cannot throw: what would have reached the caller from wait() goes to stderr
// (docs/errors.md), once per request.
void report_dropped(const char* how, const std::exception_ptr& error) {
  std::fprintf(stderr, "devmem::mpi: %s: %s\n", how, what_of(error).c_str());
}

// Called while an exception propagates through the request's scope: waiting there could wait for a
// message the peer sends only after one this rank never sent, and the handler that would call
// MPI_Abort would never run. The operation is cancelled and parked instead (MPI may still touch
// its buffers, which it keeps until the process ends).
void park_during_unwinding(const std::shared_ptr<Operation>& op) noexcept {
  const std::lock_guard lock(g_progress_mutex);
  if (op->finished) return;
  op->finished = true;
  op->error = nullptr;
  try {
    if (op->abandon()) g_abandoned.push_back(op);
  } catch (...) {  // out of memory keeping it: MPI's requests were cancelled already
  }
  std::fputs(
      "devmem::mpi: a pending Request was destroyed while an exception propagated; its operation "
      "was cancelled instead of waited for (waiting could hang the job). Its peer's matching "
      "operation will not complete: end the job (MPI_Abort) or match it again.\n",
      stderr);
}

void wait_operation(Operation& op) {
  while (true) {
    progress_all();
    {
      const std::lock_guard lock(g_progress_mutex);
      if (op.finished) break;
    }
    std::this_thread::yield();
  }
  if (op.error) std::rethrow_exception(std::exchange(op.error, nullptr));
}

}  // namespace

// ---- Request ------------------------------------------------------------------------------------

Request::Request() noexcept = default;
Request::Request(std::shared_ptr<detail::Operation> operation) noexcept
    : operation_(std::move(operation)), unwinding_at_start_(std::uncaught_exceptions()) {}
Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    try {
      if (operation_) wait();
    } catch (...) {
      report_dropped("the Request replaced by an assignment failed", std::current_exception());
    }
    operation_ = std::move(other.operation_);
    unwinding_at_start_ = other.unwinding_at_start_;
  }
  return *this;
}

Request::~Request() {
  if (!operation_) return;
  if (std::uncaught_exceptions() > unwinding_at_start_) {
    park_during_unwinding(operation_);
    return;
  }
  try {
    wait();
  } catch (...) {
    report_dropped("a Request destroyed without wait() failed", std::current_exception());
  }
}

void Request::wait() {
  if (!operation_) return;
  const std::shared_ptr<detail::Operation> op = std::move(operation_);
  wait_operation(*op);
}

bool Request::test() {
  if (!operation_) return true;
  progress_all();
  {
    const std::lock_guard lock(g_progress_mutex);
    if (!operation_->finished) return false;
  }
  wait();
  return true;
}

bool Request::done() const noexcept {
  if (!operation_) return true;
  const std::lock_guard lock(g_progress_mutex);
  return operation_->finished;
}

void wait_all(std::span<Request> requests) {
  std::exception_ptr first;
  for (Request& r : requests) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace devmem::mpi

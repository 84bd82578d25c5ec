// devmem::mpi's progress engine (declared in mpi/progress.hpp, which says why it exists): the list
// of operations in progress, the loops that advance them, and Request, the user's handle of one
// operation, whose test() and wait() drive the engine.
#include "progress.hpp"

#include "protocol.hpp"

#include <exception>
#include <memory>
#include <mutex>
#include <span>
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
    : operation_(std::move(operation)) {}
Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    try {
      if (operation_) wait();
    } catch (...) {
      // Documented: the replaced request's error is dropped.
    }
    operation_ = std::move(other.operation_);
  }
  return *this;
}

Request::~Request() {
  try {
    if (operation_) wait();
  } catch (...) {
    // Documented: a destructor cannot report the error; wait() does.
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

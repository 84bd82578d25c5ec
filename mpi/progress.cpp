// devmem::mpi's progress engine (declared in mpi/progress.hpp, which says why it exists): the list
// of operations in progress, the loops that advance them with their backoff and timeout, and
// Request, the user's handle of one operation, whose test() and wait() drive the engine.
#include "progress.hpp"

#include "protocol.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
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
// Operations started by start_borrowed(): a stack pushed without the lock, which the lock's
// holder moves into the list (g_borrowed_*, oldest first) before it looks at them.
std::atomic<Operation*> g_borrowed_incoming{nullptr};
Operation* g_borrowed_first = nullptr;
Operation* g_borrowed_last = nullptr;
std::size_t g_borrowed_count = 0;
// g_active.size() + g_borrowed_count, for a lock-free "nothing to do" (with g_borrowed_incoming).
std::atomic<std::size_t> g_active_count{0};
// Operations that failed with MPI requests still pending keep their buffers here until the
// process ends: MPI may still write into them.
std::vector<std::shared_ptr<Operation>> g_abandoned;

// Polls before a waiting loop starts yielding: about the time of a few small-message round trips,
// so that a waiting rank answers at once, while ranks sharing cores still let each other run.
constexpr std::uint64_t kSpinPolls = 2000;

// DEVMEM_MPI_TIMEOUT in seconds (0: none), read once.
double timeout_seconds() {
  static const double seconds = [] {
    const char* env = std::getenv("DEVMEM_MPI_TIMEOUT");  // NOLINT(concurrency-mt-unsafe): once
    if (env == nullptr || *env == '\0') return 0.0;
    char* end = nullptr;
    const double value = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(value > 0)) {
      std::fprintf(stderr,
                   "devmem::mpi: DEVMEM_MPI_TIMEOUT='%s' is not a positive number of seconds; "
                   "no timeout is applied\n",
                   env);
      return 0.0;
    }
    return value;
  }();
  return seconds;
}

void store_active_count() {
  g_active_count.store(g_active.size() + g_borrowed_count, std::memory_order_release);
}

// Moves the operations that start_borrowed() pushed into their list, in the order they were
// started (the timeout report lists them so). Under the lock.
void take_incoming() {
  if (g_borrowed_incoming.load(std::memory_order_relaxed) == nullptr) return;
  Operation* op = g_borrowed_incoming.exchange(nullptr, std::memory_order_acquire);
  Operation* const newest = op;
  Operation* oldest = nullptr;
  while (op != nullptr) {  // newest first: each goes before the ones started after it
    Operation* const older = op->borrowed_next;
    op->borrowed_next = oldest;
    if (oldest != nullptr) oldest->borrowed_prev = op;
    op->borrowed = Operation::Borrowed::Listed;
    oldest = op;
    op = older;
    ++g_borrowed_count;
  }
  if (oldest == nullptr) return;
  oldest->borrowed_prev = g_borrowed_last;
  (g_borrowed_last != nullptr ? g_borrowed_last->borrowed_next : g_borrowed_first) = oldest;
  g_borrowed_last = newest;
  store_active_count();
}

// Takes a borrowed operation out of its list. Under the lock.
void unlist_borrowed(Operation& op) {
  if (op.borrowed == Operation::Borrowed::Incoming) take_incoming();
  if (op.borrowed != Operation::Borrowed::Listed) return;
  (op.borrowed_prev != nullptr ? op.borrowed_prev->borrowed_next : g_borrowed_first) =
      op.borrowed_next;
  (op.borrowed_next != nullptr ? op.borrowed_next->borrowed_prev : g_borrowed_last) =
      op.borrowed_prev;
  op.borrowed_next = nullptr;
  op.borrowed_prev = nullptr;
  op.borrowed = Operation::Borrowed::No;
  --g_borrowed_count;
  store_active_count();
}

[[noreturn]] void abort_on_timeout(const char* what, const Operation* waiting, double seconds) {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string report = fmt::format(
      "devmem::mpi: rank {}: {} has waited more than DEVMEM_MPI_TIMEOUT ({} s); pending "
      "operations of this rank:\n",
      rank, what, seconds);
  if (waiting != nullptr) report += fmt::format("  - {}\n", waiting->describe());
  {
    const std::unique_lock lock(g_progress_mutex, std::try_to_lock);
    if (!lock.owns_lock()) {
      report += "  (the list is locked by another thread)\n";
    } else {
      int listed = 0;
      for (const auto& op : g_active) {
        if (op->finished) continue;
        report += fmt::format("  - {}\n", op->describe());
        ++listed;
      }
      take_incoming();
      for (const Operation* op = g_borrowed_first; op != nullptr; op = op->borrowed_next) {
        report += fmt::format("  - {}\n", op->describe());
        ++listed;
      }
      if (listed == 0 && waiting == nullptr) {
        report += "  (none: the wait is for a collective or an MPI request)\n";
      }
    }
  }
  report += "devmem::mpi: calling MPI_Abort\n";
  std::fputs(report.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return
}

}  // namespace

Backoff::Backoff(const char* what, const Operation* waiting)
    : what_(what), waiting_(waiting), timeout_(timeout_seconds()) {
  if (timeout_ > 0) start_ = std::chrono::steady_clock::now();
}

void Backoff::pause() {
  ++polls_;
  if (polls_ > kSpinPolls) std::this_thread::yield();
  if (timeout_ > 0 && polls_ % 1024 == 0) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (waited > timeout_) abort_on_timeout(what_, waiting_, timeout_);
  }
}

std::unique_lock<std::recursive_mutex> progress_lock() {
  return std::unique_lock(g_progress_mutex);
}

// Advances `op` once; a failure becomes its error (and parks it when MPI may still touch its
// buffers). Under the progress lock, or before anyone else can see `op`.
void advance_once(const std::shared_ptr<Operation>& op) {
  try {
    // Release stores, as advance_owned's: a waiter that sees `finished` with its acquire load sees
    // the status and error written before it.
    if (op->advance()) op->finished.store(true, std::memory_order_release);
  } catch (...) {
    op->error = std::current_exception();
    op->finished.store(true, std::memory_order_release);
    if (op->abandon()) g_abandoned.push_back(op);
  }
}

namespace {

// Takes the operation at `index` out of the list (the last one takes its place). Under the lock.
void unlist(std::size_t index) {
  g_active[index]->list_index = Operation::kNotListed;
  if (index + 1 != g_active.size()) {
    g_active[index] = std::move(g_active.back());
    g_active[index]->list_index = index;
  }
  g_active.pop_back();
  store_active_count();
}

// Takes `op` out of whichever list it is in. Under the lock.
void unlist(Operation& op) {
  if (op.list_index != Operation::kNotListed) unlist(op.list_index);
  if (op.borrowed != Operation::Borrowed::No) unlist_borrowed(op);
}

// Advances `op` once; true when it finished or failed (then its error is kept, and
// park_on_wait tells whether MPI may still touch its buffers). Does not mark it finished.
bool step(Operation& op) noexcept {
  try {
    return op.advance();
  } catch (...) {
    op.error = std::current_exception();
    op.park_on_wait = op.abandon();
    return true;
  }
}

// Advances a borrowed operation once. Finished, it leaves its list before `finished` is set: its
// owner may destroy it as soon as it sees that. Under the lock.
void advance_borrowed(Operation& op) {
  if (!step(op)) return;
  unlist_borrowed(op);
  op.finished.store(true, std::memory_order_release);
}

// Advances an operation whose owner the caller holds once; finished, it leaves its list (and a
// failed one whose MPI requests were pending is parked). Under the lock.
void advance_owned(const std::shared_ptr<Operation>& op) {
  if (!step(*op)) return;
  unlist(*op);
  if (std::exchange(op->park_on_wait, false)) g_abandoned.push_back(op);
  op->finished.store(true, std::memory_order_release);
}

// A failed borrowed operation's wait: parks it when MPI may still touch its buffers.
void park_if_needed(const std::shared_ptr<Operation>& op) {
  if (!op->park_on_wait) return;
  const std::lock_guard lock(g_progress_mutex);
  if (std::exchange(op->park_on_wait, false)) g_abandoned.push_back(op);
}

}  // namespace

void progress_all() {
  if (g_active_count.load(std::memory_order_acquire) == 0 &&
      g_borrowed_incoming.load(std::memory_order_acquire) == nullptr) {
    return;
  }
  const std::lock_guard lock(g_progress_mutex);
  take_incoming();
  // Each advance may take only its own operation out of the list.
  for (Operation* op = g_borrowed_first; op != nullptr;) {
    Operation* const next = op->borrowed_next;
    advance_borrowed(*op);
    op = next;
  }
  bool any_finished = false;
  for (const auto& op : g_active) {
    // An operation finished by its own wait (wait_operation) is still listed: erased here.
    if (!op->finished) advance_once(op);
    any_finished = any_finished || op->finished;
  }
  if (any_finished) {
    for (std::size_t i = g_active.size(); i-- > 0;) {
      if (g_active[i]->finished.load()) unlist(i);
    }
  }
}

void start(const std::shared_ptr<Operation>& op) {
  const std::lock_guard lock(g_progress_mutex);
  op->list_index = g_active.size();
  g_active.push_back(op);
  store_active_count();
}

void start_borrowed(Operation& op) noexcept {
  op.borrowed = Operation::Borrowed::Incoming;
  Operation* head = g_borrowed_incoming.load(std::memory_order_relaxed);
  do {
    op.borrowed_next = head;
  } while (!g_borrowed_incoming.compare_exchange_weak(head, &op, std::memory_order_release,
                                                      std::memory_order_relaxed));
}

void run_blocking(const std::shared_ptr<Operation>& op, const char* what) {
  Backoff backoff(what, op.get());
  while (true) {
    try {
      if (op->advance()) break;
    } catch (...) {
      op->finished = true;
      if (op->abandon()) {
        const std::lock_guard lock(g_progress_mutex);
        g_abandoned.push_back(op);
      }
      throw;
    }
    progress_all();
    backoff.pause();
  }
  op->finished = true;
}

void advance_started(const std::shared_ptr<Operation>& op) {
  const std::lock_guard lock(g_progress_mutex);
  if (!op->finished) advance_owned(op);
}

void launch(const std::shared_ptr<Operation>& op) {
  // No other thread sees `op` before start(): only parking a failed one needs the lock.
  try {
    // Release stores, not exchanges: no other thread has seen `op` yet.
    if (op->advance()) op->finished.store(true, std::memory_order_release);
  } catch (...) {
    op->error = std::current_exception();
    op->finished.store(true, std::memory_order_release);
    if (op->abandon()) {
      const std::lock_guard lock(g_progress_mutex);
      g_abandoned.push_back(op);
    }
  }
  if (!op->finished.load(std::memory_order_relaxed)) start(op);
}

// Waits for one MPI request of a blocking call while advancing the non-blocking operations, as
// MPI's own progress does, so that a rank inside a collective still acknowledges its peers.
void wait_request(MPI_Request& request, const char* call) {
  Backoff backoff(call);
  while (true) {
    int flag = 0;
    check_mpi(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), call);
    if (flag != 0) return;
    progress_all();
    backoff.pause();
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

void wait_operation(const std::shared_ptr<Operation>& op) {
  // A small send finishes when it is launched: its wait costs no backoff or lock.
  if (op->finished.load(std::memory_order_acquire)) {
    if (op->error) {
      park_if_needed(op);
      std::rethrow_exception(std::exchange(op->error, nullptr));
    }
    return;
  }
  Backoff backoff("a devmem::mpi wait");
  while (!op->finished.load(std::memory_order_acquire)) {
    // This operation first: waiting for many in turn (wait_all) then costs one test each, not one
    // pass over all of them each.
    {
      const std::lock_guard lock(g_progress_mutex);
      // Out of the list at once (progress_all would erase it only when it next runs).
      if (!op->finished) advance_owned(op);
      // One that advance_started() finished is still listed.
      if (op->finished && op->list_index != Operation::kNotListed) unlist(op->list_index);
    }
    if (op->finished.load(std::memory_order_acquire)) break;
    progress_all();
    if (op->finished.load(std::memory_order_acquire)) break;
    backoff.pause();
  }
  if (op->error) {
    park_if_needed(op);
    std::rethrow_exception(std::exchange(op->error, nullptr));
  }
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
  if (op->finished) {
    // A failed borrowed operation is parked by whoever waits for it: this destructor.
    if (std::exchange(op->park_on_wait, false)) {
      try {
        g_abandoned.push_back(op);
      } catch (...) {  // out of memory keeping it: MPI's requests were cancelled already
      }
    }
    return;
  }
  unlist(*op);  // a borrowed one's list does not keep it
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

bool finished(const Request& r) {
  return r.done();
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
    status_ = other.status_;
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

Status Request::wait() {
  if (!operation_) return status_;
  const std::shared_ptr<detail::Operation> op = std::move(operation_);
  wait_operation(op);
  status_ = op->status;
  return status_;
}

bool Request::test() {
  if (!operation_) return true;
  progress_all();
  if (!operation_->finished.load(std::memory_order_acquire)) return false;
  wait();
  return true;
}

bool Request::done() const noexcept {
  return !operation_ || operation_->finished.load(std::memory_order_acquire);
}

void wait_all(std::span<Request> requests) {
  // One pass over the operations under one lock first: a window of small messages has mostly
  // arrived by its wait, and waiting for each in turn took the lock (and a backoff) per message.
  // The waits below then find those finished, and complete them without the lock.
  if (requests.size() > 1) {
    const std::lock_guard lock(g_progress_mutex);
    for (const Request& r : requests) {
      const std::shared_ptr<Operation>& op = Operation::of(r);
      if (!op || op->finished.load(std::memory_order_acquire)) continue;
      advance_owned(op);
    }
  }
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

namespace {

// The indices of the requests that were pending and have finished; `any_pending` tells whether
// there were pending ones at all. Completes (wait()) the finished ones; the first error is
// rethrown after all of them were completed.
std::vector<std::size_t> collect_finished(std::span<Request> requests, bool first_only,
                                          bool& any_pending) {
  std::vector<std::size_t> indices;
  any_pending = false;
  std::exception_ptr first;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Request& r = requests[i];
    if (!r.active()) continue;
    any_pending = true;
    if (!finished(r)) continue;
    indices.push_back(i);
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    if (first_only) break;
  }
  if (first) std::rethrow_exception(first);
  return indices;
}

std::vector<std::size_t> wait_for_some(std::span<Request> requests, bool first_only,
                                       bool blocking) {
  Backoff backoff(first_only ? "mpi::wait_any" : "mpi::wait_some");
  while (true) {
    progress_all();
    bool any_pending = false;
    std::vector<std::size_t> done = collect_finished(requests, first_only, any_pending);
    if (!done.empty() || !any_pending || !blocking) return done;
    backoff.pause();
  }
}

}  // namespace

std::optional<std::size_t> wait_any(std::span<Request> requests) {
  const std::vector<std::size_t> done = wait_for_some(requests, true, true);
  if (done.empty()) return std::nullopt;
  return done.front();
}

std::optional<std::size_t> test_any(std::span<Request> requests) {
  const std::vector<std::size_t> done = wait_for_some(requests, true, false);
  if (done.empty()) return std::nullopt;
  return done.front();
}

std::vector<std::size_t> wait_some(std::span<Request> requests) {
  return wait_for_some(requests, false, true);
}

std::vector<std::size_t> test_some(std::span<Request> requests) {
  return wait_for_some(requests, false, false);
}

}  // namespace devmem::mpi

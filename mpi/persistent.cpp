// devmem::mpi's point-to-point calls built on the operations of mpi/point_to_point.hpp:
// persistent requests (the handshake once, then payload-only rounds), sendrecv, and probe.
#include "point_to_point.hpp"

#include "eager.hpp"

#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace devmem::mpi {

using namespace detail;

struct PersistentRequest::State {
  State(Endpoint a, bool s, int p, int t, MPI_Comm c)
      : array(std::move(a)), sending(s), peer(p), tag(t), comm(c) {}
  Endpoint array;
  bool sending;
  int peer;
  int tag;
  MPI_Comm comm;
  bool established = false;  // the first round succeeded: later rounds move the payload only
  bool failed = false;       // the first round failed: the pair is unusable
  RoundInfo info;
  // Set once established when the rounds take the eager path (mpi/eager.hpp): small payloads on
  // the default stream, which the general operations moved at twice a plain send's cost.
  std::optional<RoundEnvelope> eager;
  Status status;
  std::shared_ptr<Operation> round;  // the round in flight
};

// Makes PersistentRequests (their constructor is private).
struct PersistentAccess {
  static PersistentRequest make(const Endpoint& array, bool sending, int peer, int tag,
                                MPI_Comm comm) {
    return PersistentRequest(
        std::make_unique<PersistentRequest::State>(array, sending, peer, tag, comm));
  }
};

PersistentRequest::PersistentRequest() noexcept = default;
PersistentRequest::PersistentRequest(std::unique_ptr<State> state) noexcept
    : state_(std::move(state)) {}
PersistentRequest::PersistentRequest(PersistentRequest&& other) noexcept = default;
PersistentRequest& PersistentRequest::operator=(PersistentRequest&& other) noexcept {
  if (this != &other) {
    round_ = std::move(other.round_);  // waits for this request's round first (Request's rule)
    state_ = std::move(other.state_);
  }
  return *this;
}
PersistentRequest::~PersistentRequest() = default;  // round_'s destructor waits or parks

void PersistentRequest::start() {
  if (!state_) throw InvalidArgument("PersistentRequest::start: the request is empty");
  State& s = *state_;
  const char* const name = s.sending ? "mpi::send_init" : "mpi::recv_init";
  if (round_.active()) {
    throw InvalidArgument(fmt::format(
        "{} (rank {}, tag {}): start() while the previous round is active: wait() for it first",
        name, s.peer, s.tag));
  }
  if (s.failed) {
    throw InvalidArgument(fmt::format(
        "{} (rank {}, tag {}): the first round failed (its error was reported by wait()); make a "
        "new request",
        name, s.peer, s.tag));
  }
  if (s.peer == MPI_PROC_NULL) return;  // a round with nobody: nothing to do
  if (s.eager) {
    if (s.sending) {
      auto op = make_eager_round_send(s.array.device(), *s.eager);
      launch(op);
      round_ = Operation::make_request(std::move(op));
    } else {
      auto op = make_eager_round_recv(s.array.device(), *s.eager);
      detail::start_borrowed(*op);  // round_ is its only owner
      round_ = Operation::make_request(std::move(op));
    }
    return;
  }
  const MessageRole role{true, s.established ? &s.info : nullptr};
  s.round = s.sending ? start_send(s.array, s.peer, s.tag, s.comm, role)
                      : start_recv(s.array, s.peer, s.tag, s.comm, role);
  round_ = Operation::make_request(s.round);
}

Status PersistentRequest::wait() {
  if (!state_ || !round_.active()) return state_ ? state_->status : Status{};
  State& s = *state_;
  try {
    s.status = round_.wait();
  } catch (...) {
    if (!s.established) s.failed = true;
    s.round.reset();
    throw;
  }
  if (!s.established) {
    s.info = round_info(*s.round);
    s.established = true;
    if (s.array.on_device() && (s.sending ? eager_round_send_fits(s.array.device())
                                          : eager_round_recv_fits(s.array.device()))) {
      s.eager = round_envelope(s.array.device(), s.info.peer, s.tag, s.comm, s.info.seq);
    }
  }
  s.round.reset();
  return s.status;
}

bool PersistentRequest::test() {
  if (!round_.active()) return true;
  if (!round_.done()) {
    detail::progress_all();
    if (!round_.done()) return false;
  }
  wait();
  return true;
}

bool PersistentRequest::active() const noexcept {
  return round_.active();
}

void start_all(std::span<PersistentRequest> requests) {
  for (PersistentRequest& r : requests) r.start();
}

PersistentRequest send_init(const DeviceArray& array, int destination, int tag, MPI_Comm comm) {
  check_envelope("mpi::send_init", comm, destination, tag, false);
  return PersistentAccess::make(Endpoint(array), true, destination, tag, comm);
}

PersistentRequest recv_init(const DeviceArray& array, int source, int tag, MPI_Comm comm) {
  if (source == MPI_ANY_SOURCE || tag == MPI_ANY_TAG) {
    throw InvalidArgument(fmt::format(
        "mpi::recv_init: a persistent receive needs a fixed source and tag (got {} and {}; "
        "MPI_ANY_SOURCE is {}, MPI_ANY_TAG {})",
        source, tag, MPI_ANY_SOURCE, MPI_ANY_TAG));
  }
  check_envelope("mpi::recv_init", comm, source, tag, true);
  return PersistentAccess::make(Endpoint(array), false, source, tag, comm);
}

// ---- sendrecv -----------------------------------------------------------------------------------

namespace {

// The byte ranges [first, last) an array's elements occupy, one per element or per run of
// contiguous innermost elements, sorted; nullopt past `limit` ranges (then not checked).
std::optional<std::vector<std::pair<std::intptr_t, std::intptr_t>>> byte_runs(
    const DeviceArray& array, std::size_t limit) {
  std::vector<std::pair<std::intptr_t, std::intptr_t>> runs;
  if (array.size() == 0) return runs;
  const auto base = reinterpret_cast<std::intptr_t>(array.data());  // NOLINT: addresses compared
  const int ndim = array.ndim();
  const bool inner_dense = ndim > 0 && array.strides().back() == array.itemsize();
  const std::int64_t run_bytes =
      inner_dense ? array.shape().back() * array.itemsize() : array.itemsize();
  const int outer = inner_dense ? ndim - 1 : ndim;
  std::int64_t count = 1;
  for (int d = 0; d < outer; ++d) count *= array.shape()[static_cast<std::size_t>(d)];
  if (static_cast<std::size_t>(count) > limit) return std::nullopt;
  std::vector<std::int64_t> index(static_cast<std::size_t>(std::max(outer, 1)), 0);
  for (std::int64_t i = 0; i < count; ++i) {
    std::int64_t offset = 0;
    for (int d = 0; d < outer; ++d) {
      offset += index[static_cast<std::size_t>(d)] * array.strides()[static_cast<std::size_t>(d)];
    }
    runs.emplace_back(base + offset, base + offset + run_bytes);
    for (int d = outer - 1; d >= 0; --d) {
      auto& k = index[static_cast<std::size_t>(d)];
      if (++k < array.shape()[static_cast<std::size_t>(d)]) break;
      k = 0;
    }
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

// True when the arrays share an element (false when too many pieces to tell cheaply).
bool share_elements(const DeviceArray& a, const DeviceArray& b) {
  constexpr std::size_t kLimit = std::size_t{1} << 20;
  const auto ra = byte_runs(a, kLimit);
  const auto rb = byte_runs(b, kLimit);
  if (!ra || !rb) return false;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < ra->size() && j < rb->size()) {
    const auto& x = (*ra)[i];
    const auto& y = (*rb)[j];
    if (x.first < y.second && y.first < x.second) return true;
    (x.second <= y.second ? i : j) += 1;
  }
  return false;
}

}  // namespace

Status sendrecv(const DeviceArray& send_array, int destination, int send_tag,
                const DeviceArray& recv_array, int source, int recv_tag, MPI_Comm comm) {
  if (send_array.owner() == recv_array.owner() && share_elements(send_array, recv_array)) {
    throw InvalidArgument(
        "mpi::sendrecv: the send and receive arrays overlap (MPI_Sendrecv needs disjoint "
        "buffers; send a copy)");
  }
  std::array<Request, 2> requests{irecv(recv_array, source, recv_tag, comm),
                                  isend(send_array, destination, send_tag, comm)};
  wait_all(requests);
  return requests[0].status();
}

// ---- probe --------------------------------------------------------------------------------------

std::optional<MessageInfo> iprobe(int source, int tag, MPI_Comm comm) {
  check_envelope("mpi::iprobe", comm, source, tag, true);
  if (source == MPI_PROC_NULL) return MessageInfo{};
  progress_all();
  const auto lock = progress_lock();
  return probe_once(comm, source, tag);
}

MessageInfo probe(int source, int tag, MPI_Comm comm) {
  check_envelope("mpi::probe", comm, source, tag, true);
  if (source == MPI_PROC_NULL) return MessageInfo{};
  Backoff backoff("mpi::probe");
  while (true) {
    {
      const auto lock = progress_lock();
      if (auto info = probe_once(comm, source, tag)) return *std::move(info);
    }
    progress_all();
    backoff.pause();
  }
}

}  // namespace devmem::mpi

// devmem::mpi's point-to-point operations as the other parts of mpi/ start them (private, not
// installed): a send or receive of one Endpoint, plain or as a round of a persistent pair.
// mpi/point_to_point.cpp has the state machines; mpi/persistent.cpp the persistent requests.
#pragma once

#include "message.hpp"
#include "progress.hpp"
#include "protocol.hpp"

#include <cstdint>
#include <memory>

namespace devmem::mpi::detail {

// What the later rounds of a persistent pair reuse from the first: the sender's sequence number
// (the payload tag), the chunk plan and the peer's rank in the communicator.
struct RoundInfo {
  std::int64_t seq = 0;
  Plan plan;
  int peer = MPI_PROC_NULL;
};

// What kind of message an operation is.
struct MessageRole {
  bool persistent = false;           // a round of a persistent pair
  const RoundInfo* later = nullptr;  // a later round: payload only, with the first round's facts
};

// Started operations (in the progress engine's list). The envelope must have been checked
// (check_envelope) and must not name MPI_PROC_NULL.
std::shared_ptr<Operation> start_send(Endpoint array, int destination, int tag, MPI_Comm comm,
                                      MessageRole role);
std::shared_ptr<Operation> start_recv(Endpoint array, int source, int tag, MPI_Comm comm,
                                      MessageRole role);
// The same operations, not started: for run_blocking (progress.hpp).
std::shared_ptr<Operation> make_send_operation(Endpoint array, int destination, int tag,
                                               MPI_Comm comm, MessageRole role);
std::shared_ptr<Operation> make_recv_operation(Endpoint array, int source, int tag, MPI_Comm comm,
                                               MessageRole role);
// The facts of a finished first round of a persistent pair (from start_send or start_recv).
RoundInfo round_info(const Operation& finished_first_round);

}  // namespace devmem::mpi::detail

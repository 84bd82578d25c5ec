// devmem::mpi's eager fast path (private to mpi/, not installed): plain sends and receives of small
// arrays whose copy to or from the message buffer finishes within the call (host arrays, device
// arrays on the default stream), which halo codes make by the thousand per step. The general
// operations of mpi/point_to_point.cpp copy the caller's array handle (its shape and strides
// vectors) into a heap-allocated state machine with room for every protocol; per 8-byte message
// that cost ten times MPI's own work (bench/results/mpi-host-2026-11-27.md). Here:
// - a send packs the array while the caller's handle is borrowed, sends header and payload as one
//   message and keeps nothing of the array: it needs only its buffer and MPI request;
// - a receive keeps what it needs to unpack (the memory's owner, the address, dtype and a
//   fixed-size shape), posts its receive and does not test it at once (an MPI_Test of a message
//   that has not arrived runs MPI's whole progress engine);
// - both live in memory reused per thread (mpi/operation_pool.hpp).
// The messages are the same as the general path's (docs/scaling-out.md#mpi-checks), so either side
// may take either path.
#pragma once

#include "message.hpp"
#include "progress.hpp"

#include <devmem/device_array.hpp>
#include <devmem/host_array.hpp>
#include <devmem/mpi.hpp>

#include <memory>

namespace devmem::mpi::detail {

// Receives with more axes take the general path (the fast one keeps the shape inline).
inline constexpr int kEagerRecvMaxDims = 8;

// The operations of plain sends and receives that take the eager fast path, with their message
// posted (not started); null when `array` does not fit it. A send fits with at most
// eager_limit_bytes and kMaxWireDims axes, a host array or a device array on the default stream
// (whose copy is complete on return); a receive also C-contiguous, with at most kEagerRecvMaxDims
// axes. The envelope must have been checked and must not name MPI_PROC_NULL. A send is started
// with launch(), a receive with start_eager_recv(); run_blocking() runs either. `caches` are the
// calling thread's (thread_caches()).
std::shared_ptr<Operation> make_eager_send(ThreadCaches& caches, const DeviceArray& array,
                                           int destination, int tag, MPI_Comm comm);
std::shared_ptr<Operation> make_eager_send(ThreadCaches& caches, const HostArray& array,
                                           int destination, int tag, MPI_Comm comm);
std::shared_ptr<Operation> make_eager_recv(ThreadCaches& caches, const DeviceArray& array,
                                           int source, int tag, MPI_Comm comm);
std::shared_ptr<Operation> make_eager_recv(ThreadCaches& caches, const HostArray& array, int source,
                                           int tag, MPI_Comm comm);
// The later rounds of a persistent pair (mpi/persistent.cpp) whose payload is at most
// eager_limit_bytes, on the same terms: the payload alone on the pair's payload tag, the message
// of mpi/point_to_point.cpp's small rounds, so either side may take either path. The first round
// settled dtype, shape and sequence number; what a round needs is worked out once per pair.
struct RoundEnvelope {
  int peer = MPI_PROC_NULL;  // the user's rank and tag, for Status and describe()
  int tag = 0;
  Channel channel;  // where the payload goes
  int payload_tag = 0;
  // The array's facts, fixed for the pair: a round reuses them instead of working them out again
  // (a C-contiguous send packs with one backend copy, without DeviceArray's checks and lookups).
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
  bool contiguous = false;
  Context* context = nullptr;  // the array's; alive while the pair's request keeps its array
};
// The envelope of the rounds of `array`'s pair with `peer` (its rank in `comm`) on sequence number
// `seq`, for the user's `tag`.
RoundEnvelope round_envelope(const DeviceArray& array, int peer, int tag, MPI_Comm comm,
                             std::int64_t seq);
// Whether the pair's rounds take this path: at most eager_limit_bytes on the default stream (a
// receive also C-contiguous). Fixed for a pair: an array's stream and layout do not change.
bool eager_round_send_fits(const DeviceArray& array);
bool eager_round_recv_fits(const DeviceArray& array);
// The round's operation with its MPI request posted; a send is started with launch(), a receive
// with start_borrowed() (its message has rarely arrived yet; its Request is its only owner).
std::shared_ptr<Operation> make_eager_round_send(const DeviceArray& array,
                                                 const RoundEnvelope& envelope);
std::shared_ptr<Operation> make_eager_round_recv(const DeviceArray& array,
                                                 const RoundEnvelope& envelope);

// Starts a receive made by make_eager_recv: into the progress list without a first test
// (start_borrowed: the caller makes its Request at once), unless its message was stashed by
// probe() (then advanced once, as launch() does).
void start_eager_recv(const std::shared_ptr<Operation>& op);

}  // namespace devmem::mpi::detail

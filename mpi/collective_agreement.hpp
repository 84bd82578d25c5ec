// devmem::mpi's collectives' shared pieces (private to mpi/, not installed): the descriptor every
// rank contributes before a collective moves any data (agree), the staging pipeline, the
// reductions' MPI types and operations, and the choice between device-direct and staged transfers.
// Used by mpi/collectives.cpp (bcast, allreduce, allgather), mpi/collectives_rooted.cpp (barrier,
// reduce, gather(v), scatter(v), scan, exscan), mpi/collectives_alltoall.cpp (alltoall(v),
// reduce_scatter, allreduce_loc) and mpi/collectives_nonblocking.cpp (ibarrier, ibcast,
// iallreduce, iallgather).
#pragma once

#include "progress.hpp"
#include "protocol.hpp"

#include <devmem/mpi.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devmem::mpi::detail {

// What one rank says before a collective: the collective it called and the block every rank must
// agree on (Wire: dtype and shape, the rank's preferred chunk rows, or a local problem), its root
// and reduction, and a hash of the counts of a v-form. Sent as raw bytes (same layout everywhere).
struct Descriptor {
  Wire wire;
  std::int32_t root = -1;       // rooted collectives; -1 otherwise
  std::int32_t reduction = -1;  // static_cast<int>(ReduceOp); -1 for none
  std::uint64_t counts = 0;     // v-forms: a hash of the counts (they must be equal on every rank)
  std::int32_t blocking = 0;    // 1: this rank makes blocking MPI calls (Path::DirectBlocking)
  std::int32_t unused = 0;
};

struct Agreement {
  int rank = 0;
  int size = 0;
  Plan plan;              // chunks of the agreed block's first axis
  bool blocking = false;  // some rank makes blocking MPI calls: every rank does (MPI does not
                          // match a blocking collective with a non-blocking one)
};

// The communicator's size and this rank; InvalidArgument naming `operation` for MPI_COMM_NULL.
std::pair<int, int> rank_and_size(const char* operation, MPI_Comm comm);
// A Wire describing a block of `dtype` and `shape` (kLocalError when it has too many dimensions).
Wire describe_block(const DType& dtype, std::span<const std::int64_t> shape);
// Marks `mine` as failed with `message` unless it already failed (the first problem is reported).
void fail(Descriptor& mine, std::string_view message);
// Rows per chunk this rank prefers for a block of `shape` and `itemsize` (all rows for
// device_direct).
std::int64_t preferred_block_rows(std::span<const std::int64_t> shape, std::int64_t itemsize,
                                  Transport transport);
// FNV-1a hash of counts (v-forms).
std::uint64_t hash_counts(std::span<const std::int64_t> counts);

// Puts `operation` into `mine`. Then the exchange: posts the MPI_Iallgather of every rank's
// descriptor into `all` (which must stay alive until the request completes).
MPI_Request start_agreement(const char* operation, MPI_Comm comm, Descriptor& mine,
                            std::vector<Descriptor>& all);
// Checks the exchanged descriptors: throws the same InvalidArgument on every rank when a rank
// reported a local problem, called another collective, or has another block, root, reduction or
// counts. `plan_rank` picks whose chunk plan every rank follows.
Agreement check_agreement(const char* operation, std::span<const Descriptor> all, int rank,
                          int plan_rank);
// Both, waiting with wait_request (the point-to-point operations progress meanwhile).
Agreement agree(const char* operation, MPI_Comm comm, Descriptor mine, int plan_rank);
// After the agreement: each rank's `problem` (nullopt when none) is exchanged, and every rank
// throws the first one (rank order) as InvalidArgument "operation: rank r: problem". For checks
// that need values only some ranks know (alltoallv's counts against the senders').
void agree_on_problems(const char* operation, MPI_Comm comm,
                       const std::optional<std::string>& problem);

// ---- the order of collective calls on a communicator ------------------------------------------
//
// MPI matches collectives on a communicator by the order they are posted in, which must be the
// same on every rank. The non-blocking collectives post their MPI calls (descriptor exchange, then
// one per chunk) as they progress, whose timing differs between ranks: so they post in the order
// they were called, one operation after another (a queue per communicator), and a blocking
// collective first lets the queued ones post all their calls (drain_collectives).

// Appends `op` to `comm`'s queue.
void enqueue_collective(MPI_Comm comm, const void* op);
// True when `op` is first in `comm`'s queue: it may post its next MPI call.
bool collective_turn(MPI_Comm comm, const void* op);
// Removes `op` from `comm`'s queue (after its last MPI call, or when it failed); idempotent.
void dequeue_collective(MPI_Comm comm, const void* op) noexcept;
// Advances the operations in progress until `comm`'s queue is empty.
void drain_collectives(MPI_Comm comm);

// ---- reductions ---------------------------------------------------------------------------------

const char* op_name(ReduceOp op);
MPI_Op mpi_op(ReduceOp op);
// The MPI type of `dtype` for `op`; nullopt when MPI cannot reduce it with `op` (minloc and maxloc
// are allreduce_loc's).
std::optional<MPI_Datatype> reduce_type(const DType& dtype, ReduceOp op);
// "MPI cannot reduce dtype complex128 with min" and the like; nullopt when reduce_type has one.
std::optional<std::string> reduce_problem(const DType& dtype, ReduceOp op);

// The elements of one first-axis row of an array of shape `block` (1 for 0-d and 1-d shapes).
std::int64_t row_elements(std::span<const std::int64_t> block);
// "float64 (4, 5)".
std::string shape_text(const DeviceArray& array);

// allreduce's and iallreduce's local checks of their arguments; nullopt when fine.
std::optional<std::string> allreduce_problem(const DeviceArray& input, const DeviceArray& output,
                                             ReduceOp op);
// allgather's and iallgather's: `output` must be (size, *input.shape) of input's dtype.
std::optional<std::string> allgather_problem(const DeviceArray& input, const DeviceArray& output,
                                             int size);

// ---- transports ---------------------------------------------------------------------------------

// How a blocking collective moves device memory.
enum class Path {
  Staged,             // page-locked slots, chunked, non-blocking MPI collectives with progress
  DirectNonblocking,  // device pointers to MPI_I* collectives, waited with progress (host)
  DirectBlocking,     // device pointers to blocking MPI collectives (GPU backends)
};
// The path of a blocking collective on `array` under `transport`. A device-aware Open MPI 4.x
// takes device pointers in blocking collectives only: GPU backends use them (after the agreement,
// which every rank has passed, so no rank waits on a point-to-point operation of another to reach
// the MPI call); the host backend's device memory is host memory: MPI_I* with progress.
// DEVMEM_MPI_DIRECT_COLLECTIVES=blocking|nonblocking overrides the choice (tests).
Path blocking_path(const DeviceArray& array, Transport transport);
// The path of a non-blocking collective (ibcast, ...): device_direct on a GPU backend stages.
Path nonblocking_path(const DeviceArray& array, Transport transport);

// A C-contiguous view of `shape` at the start of `slot` (a staging slot big enough for it).
HostArray dense_view(const HostArray& slot, Shape shape);
// `array` itself when C-contiguous, else a dense device copy of it (on its stream).
DeviceArray dense_copy(const DeviceArray& array);
// A dense device array like `array` (same shape and dtype) when it is not C-contiguous, else
// `array` itself: where MPI writes before the result is copied into `array`.
DeviceArray dense_target(const DeviceArray& array);
// Runs one MPI call, blocking or MPI_I* waited with wait_request: `call(request)` makes the
// blocking call when request is nullptr, else the non-blocking one.
template <class Call>
void run_direct(Path path, const char* name, Call call) {
  if (path == Path::DirectBlocking) {
    check_mpi(call(nullptr), name);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(call(&request), name);
  wait_request(request, name);
}

// Runs chunk k's device-to-host copy (pre), MPI call (mpi: starts a non-blocking collective on
// slot k % 2 and returns its request) and host-to-device copy (post) for k = 0, 1, ...; the copy
// of chunk k + 1 is enqueued while MPI moves chunk k. Slot k % 2 is reused by chunk k + 2: its
// ready event is recorded after the copy out of it (post(k)), in stream order.
template <class Pre, class Mpi, class Post>
void pipeline(std::int64_t chunks, const Stream& stream, Pre pre, Mpi mpi, Post post) {
  if (chunks == 0) return;
  std::array<std::optional<Event>, 2> ready;
  pre(0);
  ready[0] = stream.record();
  for (std::int64_t k = 0; k < chunks; ++k) {
    const auto s = static_cast<std::size_t>(k % 2);
    if (auto& r = ready.at(s); r.has_value()) r->synchronize();
    MPI_Request request = mpi(k);
    if (k + 1 < chunks) {
      pre(k + 1);
      ready.at(1 - s) = stream.record();
    }
    wait_request(request, "devmem::mpi collective");
    post(k);
  }
  stream.synchronize();
}

// One side of a collective that moves per-rank blocks: `array` has the block's shape, or
// (ranks, *block) when `leading`. `active`: this rank reads (send) or writes (receive) it.
// `discard` (receive side): MPI writes into a buffer that is not copied back (exscan on rank 0).
struct Side {
  DeviceArray array;
  bool leading = false;
  bool active = false;
  bool discard = false;
};
// `call(send, receive, rows, request)` makes the MPI call for one chunk of `rows` rows of the block
// (host slots or dense device memory; nullptr for an inactive side), blocking when request is
// nullptr; returns MPI's code.
using BlockCall = std::function<int(const void*, void*, std::int64_t, MPI_Request*)>;
// Moves the blocks chunk by chunk along the agreed plan: staged through two page-locked slots per
// side, or straight from device memory (strided chunks packed into dense device arrays first).
void run_blocks(const char* name, Path path, const Agreement& agreement,
                std::span<const std::int64_t> block, const Side& send, const Side& recv,
                const BlockCall& call);

// v-forms: the whole arrays in one step (staged: one page-locked copy of each side; direct:
// dense device arrays). `call(send, receive, request)` as for run_blocks.
using WholeCall = std::function<int(const void*, void*, MPI_Request*)>;
void run_whole(const char* name, Path path, const Agreement& agreement, const Side& send,
               const Side& recv, const WholeCall& call);

// v-form counts: one per rank, none negative; the first problem goes into `mine`. True when
// well formed.
bool check_counts(Descriptor& mine, const char* what, std::span<const std::int64_t> counts,
                  int size);

// Rows of chunk k (1 for a 0-d block).
std::int64_t rows_in_chunk(const Plan& plan, std::int64_t k, int block_ndim);
// The block's shape with its first axis cut to `rows` (a 0-d block stays 0-d), with a leading
// axis of `leading` when positive.
Shape chunk_shape(std::span<const std::int64_t> block, std::int64_t rows, std::int64_t leading);

}  // namespace devmem::mpi::detail

// devmem::mpi: DeviceArrays sent over MPI (point-to-point and collectives), strided views included.
// The optional component devmem::mpi (CMake option DEVMEM_WITH_MPI; find_package(devmem
// COMPONENTS mpi)). docs/scaling-out.md#mpi explains the transports and the wire protocol.
//
// The API takes MPI_Comm: an MPI program already has its communicators (split, Cartesian, ...),
// and a wrapper of our own would only stand between them and devmem. So this header includes
// <mpi.h>, and the component links MPI::MPI_C publicly.
//
// Transports. A device-aware MPI library (CUDA-aware or ROCm-aware Open MPI / MPICH) takes device
// pointers: contiguous arrays go to MPI as they are, strided views packed on the device into dense
// temporaries first (MPI packs element-sized derived datatypes in device memory one piece at a
// time). Otherwise the elements are staged
// through page-locked host buffers in chunks (whole slices of the first axis), the device-host copy
// of one chunk overlapping the MPI transfer of the previous one. The host backend stages unless
// device_direct is asked for (set_transport or DEVMEM_MPI_TRANSPORT=device_direct).
//
// Checks. A point-to-point message carries a small header (dtype, shape) that the receiver checks.
// Messages of at most eager_limit_bytes travel with their header in one MPI message (the eager
// protocol: the send completes without waiting for the receiver, and a shape or dtype mismatch
// throws InvalidArgument on the receiver only). Larger messages are a handshake: the receiver
// checks the header and answers, then the payload moves, so a mismatch throws on both ranks,
// naming both arrays, and neither rank hangs; such a send completes once the receiver has matched
// it (MPI_Ssend's semantics). Two ranks sending to each other use isend/irecv or sendrecv.
// Collectives exchange the same descriptor first and throw on every rank when the ranks disagree.
//
// Ordering with streams. An operation is ordered after the work enqueued on the array's stream
// before the call (staging copies are enqueued on that stream; the device-direct path waits for
// it before MPI touches the memory). When a blocking call returns, or a Request completes, the
// array has been read (send side) or written (receive side) and may be reused.
//
// Tags. After initialize() (collective over MPI_COMM_WORLD, once, after MPI_Init) devmem's own
// traffic (acknowledgements, payloads of the handshake protocol) goes over a private duplicate of
// MPI_COMM_WORLD: every tag 0..MPI_TAG_UB and MPI_ANY_TAG are the application's. Without it
// (point-to-point calls cannot create a communicator: that is collective) that traffic uses the
// application's communicator with tags above MPI_TAG_UB / 2, so the caller's tags must be in
// [0, MPI_TAG_UB / 2], MPI_ANY_TAG is refused, and the application's own messages on the
// communicator should stay in that range. MPI_ANY_SOURCE and MPI_PROC_NULL are accepted always.
//
// Errors: InvalidArgument (mismatches, bad arguments: messages name the operation, the ranks and
// the values), MpiError (an MPI call returned an error, which only happens on a communicator whose
// error handler returns errors; MPI's default handler aborts), the devmem errors of the copies
// (OutOfMemory, BackendError).
// Thread safety: calls from several threads need MPI initialised with MPI_THREAD_MULTIPLE; the
// component's own state (settings, staging-buffer cache, list of operations in progress) is locked.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/dtype.hpp>
#include <devmem/error.hpp>
#include <devmem/export.hpp>
#include <devmem/host_array.hpp>
#include <devmem/layout.hpp>
#include <devmem/stream.hpp>

// The C API only: Open MPI's and MPICH's mpi.h otherwise pull in the removed C++ bindings, whose
// symbols live in a library MPI::MPI_C does not link. (The devmem::mpi target also defines these
// for its consumers' own files that include <mpi.h> first; this covers builds without it.)
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::mpi {

/// An MPI call failed: carries the MPI error code; the message names the call and MPI's error
/// string.
class DEVMEM_MPI_API MpiError : public Error {
 public:
  MpiError(const std::string& message, int code);
  ~MpiError() override;
  /// The MPI error code the call returned.
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// How device memory reaches MPI.
///  - Automatic: DeviceDirect when the MPI library accepts the array's backend's device pointers
///    (device_aware()), Staged otherwise; the host backend stages.
///  - DeviceDirect: device pointers (and derived datatypes for strided views) go to MPI; only
///    correct with a device-aware MPI library, or on the host backend, whose device memory is host
///    memory.
///  - Staged: through page-locked host buffers, in chunks, with the copies overlapping the
///    transfers.
/// The lower-case enumerators are the old names, deprecated aliases of the same values since 0.1.0
/// (docs/migration.md).
enum class Transport {
  Automatic,
  DeviceDirect,
  Staged,
  automatic [[deprecated("use devmem::mpi::Transport::Automatic (docs/migration.md)")]] = Automatic,
  device_direct [[deprecated("use devmem::mpi::Transport::DeviceDirect (docs/migration.md)")]] =
      DeviceDirect,
  staged [[deprecated("use devmem::mpi::Transport::Staged (docs/migration.md)")]] = Staged,
};

/// "automatic", "device_direct" or "staged" (the names DEVMEM_MPI_TRANSPORT and the Python
/// module accept, unchanged by the enumerators' renaming).
[[nodiscard]] DEVMEM_MPI_API const char* to_string(Transport transport) noexcept;
/// Parses the names to_string gives; InvalidArgument naming the value otherwise.
[[nodiscard]] DEVMEM_MPI_API Transport parse_transport(std::string_view name);

/// The transport setting: the last set_transport(), else the environment variable
/// DEVMEM_MPI_TRANSPORT (read at the first call; InvalidArgument naming a bad value), else
/// Automatic. Thread safe.
[[nodiscard]] DEVMEM_MPI_API Transport transport();
/// Sets the transport for operations that start after the call (process-wide). Thread safe.
DEVMEM_MPI_API void set_transport(Transport transport) noexcept;
/// The transport an operation on `array` takes now (never Automatic).
[[nodiscard]] DEVMEM_MPI_API Transport transport_for(const DeviceArray& array);
/// True when the MPI library accepts device pointers of `backend` ("cuda": a CUDA-aware build,
/// MPIX_Query_cuda_support; "roc": ROCm-aware, MPIX_Query_rocm_support; false for "host" and for
/// libraries without these queries). Needs MPI to be initialised.
[[nodiscard]] DEVMEM_MPI_API bool device_aware(std::string_view backend);

/// Bytes per staging chunk (a chunk is a whole number of slices of the first axis, at least one):
/// the last set_staging_chunk_bytes(), else DEVMEM_MPI_CHUNK_BYTES, else 1 MiB. Thread safe.
[[nodiscard]] DEVMEM_MPI_API std::int64_t staging_chunk_bytes();
/// Sets the staging chunk size (> 0; InvalidArgument otherwise). A size of at least the array's
/// bytes sends it in one chunk: copy, then send, without overlap. Thread safe.
DEVMEM_MPI_API void set_staging_chunk_bytes(std::int64_t bytes);

/// Payloads of at most this many bytes travel in one message with their header (the eager
/// protocol: no handshake, mismatches reported by the receiver only); larger ones take the
/// handshake. A constant, not a setting: every rank must agree on it.
inline constexpr std::int64_t eager_limit_bytes = 4096;

/// Collective over MPI_COMM_WORLD, after MPI_Init (MPI_Init_thread) and before any other
/// devmem::mpi call that may be in flight: creates devmem::mpi's private duplicate of
/// MPI_COMM_WORLD, which from then on carries its point-to-point protocol traffic, so that every
/// tag 0..MPI_TAG_UB and MPI_ANY_TAG belong to the application (see "Tags" above). Optional; every
/// rank must call it or none. A second call does nothing. The duplicate is freed by MPI_Finalize.
/// Throws MpiError (MPI_Comm_dup failed) or InvalidArgument (MPI is not initialised). Thread safe.
DEVMEM_MPI_API void initialize();
/// True after initialize().
[[nodiscard]] DEVMEM_MPI_API bool initialized() noexcept;
/// The largest tag point-to-point calls accept: MPI_TAG_UB after initialize(), MPI_TAG_UB / 2
/// otherwise.
[[nodiscard]] DEVMEM_MPI_API int max_tag(MPI_Comm comm = MPI_COMM_WORLD);

/// What a completed operation did. A receive: the sender's rank in the communicator, its tag (the
/// actual ones when MPI_ANY_SOURCE / MPI_ANY_TAG were given) and the elements and bytes received
/// (the array's size; 0 from MPI_PROC_NULL, whose source is MPI_PROC_NULL and tag MPI_ANY_TAG). A
/// send: the destination, the tag and the elements and bytes sent.
struct Status {
  int source = MPI_PROC_NULL;
  int tag = MPI_ANY_TAG;
  std::int64_t elements = 0;
  std::int64_t bytes = 0;
};

/// A message waiting to be received, as probe() sees it: who sent it with which tag, and the
/// dtype and shape of the sender's array (so that the receiver can allocate a matching one).
struct MessageInfo {
  int source = MPI_PROC_NULL;
  int tag = MPI_ANY_TAG;
  DType dtype;
  Shape shape;
};

namespace detail {
struct Operation;
}  // namespace detail

/// A non-blocking operation (isend, irecv, ibcast, ...). Move-only RAII handle: the operation holds
/// the array and its staging buffers until it completes, whether or not the Request still exists.
/// Progress: test() and wait() of any Request, and blocking calls, advance every outstanding
/// operation of the process, so an exchange of isend/irecv pairs never deadlocks on the order the
/// requests are waited for. Waiting polls MPI (as MPI_Wait does) and yields the processor only
/// after a while without progress. With DEVMEM_MPI_TIMEOUT=<seconds> set, a wait that makes no
/// progress for that long prints the process's pending operations (peer, tag, array, state) to
/// stderr and calls MPI_Abort. Thread safety: one Request is used by one thread at a time.
class DEVMEM_MPI_API Request {
 public:
  /// A completed request (nothing to wait for).
  Request() noexcept;
  Request(Request&& other) noexcept;
  /// Waits for the operation this request held (its error, if any, written to stderr), then takes
  /// `other`'s.
  Request& operator=(Request&& other) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  /// Waits for an unfinished operation; its error, if any, is written to stderr (call wait() to
  /// receive it). While an exception thrown after the request was made propagates, it does not
  /// wait (that could hang the job before the handler that would call MPI_Abort runs): the
  /// operation is cancelled and its buffers kept until the process ends, with a warning on stderr.
  ~Request();

  /// Blocks until the operation completes and returns its Status; throws its error (mismatch,
  /// MpiError, copy errors) once, after which the request is complete. On a completed request:
  /// the Status it completed with.
  Status wait();
  /// Advances outstanding operations; true when this one has completed (then as wait(), whose
  /// Status status() gives).
  [[nodiscard]] bool test();
  /// True when complete (no progress made).
  [[nodiscard]] bool done() const noexcept;
  /// The Status of the completed operation (a default Status before it completed).
  [[nodiscard]] const Status& status() const noexcept { return status_; }
  /// True while the request holds an operation that was not yet completed by wait() or test()
  /// (wait_any and friends look only at these).
  [[nodiscard]] bool active() const noexcept { return operation_ != nullptr; }

 private:
  friend struct detail::Operation;
  explicit Request(std::shared_ptr<detail::Operation> operation) noexcept;
  std::shared_ptr<detail::Operation> operation_;
  int unwinding_at_start_ = 0;  // std::uncaught_exceptions() when the operation was started
  Status status_;
};

/// Waits for every request (in any completion order); throws the first error after all are done.
DEVMEM_MPI_API void wait_all(std::span<Request> requests);
/// Waits until one of the requests that are not yet complete completes and returns its index
/// (its Status in requests[i].status()); nullopt when none was pending. Throws that request's
/// error.
DEVMEM_MPI_API std::optional<std::size_t> wait_any(std::span<Request> requests);
/// As wait_any without blocking: the index of a pending request that has completed, or nullopt.
DEVMEM_MPI_API std::optional<std::size_t> test_any(std::span<Request> requests);
/// Waits until at least one pending request completes; returns the indices of all that have
/// (empty when none was pending). Throws the first error after collecting the others' completion.
DEVMEM_MPI_API std::vector<std::size_t> wait_some(std::span<Request> requests);
/// As wait_some without blocking (possibly empty).
DEVMEM_MPI_API std::vector<std::size_t> test_some(std::span<Request> requests);

/// A persistent send or receive (send_init, recv_init), for loops that exchange the same arrays
/// with the same peer and tag again and again (halo exchanges): the first start() checks dtype and
/// shape on both ranks (the handshake, whatever the size); later ones move only the payload. Both
/// ranks must use persistent requests for the pair (a plain recv matching a persistent send's first
/// message, or the reverse, is a mismatch on both ranks). Move-only; the arrays are kept alive.
/// Destroying an active request waits for its round (as Request does, including the unwinding
/// rule). Thread safety: one thread at a time.
class DEVMEM_MPI_API PersistentRequest {
 public:
  /// An inactive request of nothing (start() throws).
  PersistentRequest() noexcept;
  PersistentRequest(PersistentRequest&& other) noexcept;
  PersistentRequest& operator=(PersistentRequest&& other) noexcept;
  PersistentRequest(const PersistentRequest&) = delete;
  PersistentRequest& operator=(const PersistentRequest&) = delete;
  ~PersistentRequest();

  /// Starts one round (returns at once, as isend/irecv do; the round is ordered after the work
  /// enqueued on the array's stream before the call). InvalidArgument when the previous round has
  /// not been waited for, when the request is empty, or when its first round failed.
  void start();
  /// Blocks until the round completes; throws its error. Inactive: returns the last Status.
  Status wait();
  /// Advances all operations; true when the round has completed (then as wait()).
  [[nodiscard]] bool test();
  /// True while a round is started and not yet waited for.
  [[nodiscard]] bool active() const noexcept;

 private:
  struct State;
  friend struct PersistentAccess;
  explicit PersistentRequest(std::unique_ptr<State> state) noexcept;
  std::unique_ptr<State> state_;
  Request round_;
};

/// Starts every request (PersistentRequest::start on each).
DEVMEM_MPI_API void start_all(std::span<PersistentRequest> requests);

/// Sends `array` to rank `destination` (or MPI_PROC_NULL: nothing happens) with `tag` (0 ..
/// max_tag(comm)). Returns once the array has been read and, for messages above
/// eager_limit_bytes, the receiver has matched it. Strided views are sent as their elements in C
/// order.
DEVMEM_MPI_API void send(const DeviceArray& array, int destination, int tag,
                         MPI_Comm comm = MPI_COMM_WORLD);
/// Receives into `array` (same dtype and shape as the sender's; any strides without overlapping
/// elements) from `source` (or MPI_ANY_SOURCE, or MPI_PROC_NULL: nothing is received) with `tag`
/// (or MPI_ANY_TAG, after initialize()).
DEVMEM_MPI_API Status recv(const DeviceArray& array, int source, int tag,
                           MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking send.
[[nodiscard]] DEVMEM_MPI_API Request isend(const DeviceArray& array, int destination, int tag,
                                           MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking receive.
[[nodiscard]] DEVMEM_MPI_API Request irecv(const DeviceArray& array, int source, int tag,
                                           MPI_Comm comm = MPI_COMM_WORLD);
/// Host arrays (pageable or page-locked: pinned_array, mapped_array, registered memory) as
/// buffers: the same protocol, so a host array on one rank matches a device array of the same
/// dtype and shape on the other. MPI reads and writes them in place.
DEVMEM_MPI_API void send(const HostArray& array, int destination, int tag,
                         MPI_Comm comm = MPI_COMM_WORLD);
DEVMEM_MPI_API Status recv(const HostArray& array, int source, int tag,
                           MPI_Comm comm = MPI_COMM_WORLD);
[[nodiscard]] DEVMEM_MPI_API Request isend(const HostArray& array, int destination, int tag,
                                           MPI_Comm comm = MPI_COMM_WORLD);
[[nodiscard]] DEVMEM_MPI_API Request irecv(const HostArray& array, int source, int tag,
                                           MPI_Comm comm = MPI_COMM_WORLD);
/// Sends `send_array` to `destination` and receives `recv_array` from `source` at the same time
/// (MPI_Sendrecv: no deadlock when two ranks exchange). The two arrays must not overlap.
DEVMEM_MPI_API Status sendrecv(const DeviceArray& send_array, int destination, int send_tag,
                               const DeviceArray& recv_array, int source, int recv_tag,
                               MPI_Comm comm = MPI_COMM_WORLD);
/// A persistent send of `array` to `destination` with `tag` (see PersistentRequest). The peer
/// must be a rank (MPI_PROC_NULL gives a request whose rounds do nothing).
[[nodiscard]] DEVMEM_MPI_API PersistentRequest send_init(const DeviceArray& array, int destination,
                                                         int tag, MPI_Comm comm = MPI_COMM_WORLD);
/// A persistent receive into `array` from `source` with `tag` (no MPI_ANY_SOURCE / MPI_ANY_TAG:
/// the pair is fixed).
[[nodiscard]] DEVMEM_MPI_API PersistentRequest recv_init(const DeviceArray& array, int source,
                                                         int tag, MPI_Comm comm = MPI_COMM_WORLD);
/// Waits for a devmem::mpi message from `source` (or MPI_ANY_SOURCE) with `tag` (or MPI_ANY_TAG,
/// after initialize()) and describes it without receiving it: the next matching recv receives
/// that message. Advances outstanding operations while it waits.
DEVMEM_MPI_API MessageInfo probe(int source, int tag, MPI_Comm comm = MPI_COMM_WORLD);
/// As probe without blocking: nullopt when no matching message has arrived.
DEVMEM_MPI_API std::optional<MessageInfo> iprobe(int source, int tag,
                                                 MPI_Comm comm = MPI_COMM_WORLD);

/// The reductions (MPI_SUM, MPI_MIN, ...). Which dtypes each takes (InvalidArgument naming the
/// dtype and the reduction otherwise, on every rank):
///  - Sum, Prod: integers (1, 2, 4, 8 bytes, signed or not), float32, float64, complex64,
///    complex128;
///  - Min, Max: integers and float32, float64;
///  - LogicalAnd, LogicalOr, LogicalXor: integers and bool (nonzero is true; the result is 0
///    or 1);
///  - BitwiseAnd, BitwiseOr, BitwiseXor: integers;
///  - MinLoc, MaxLoc: allreduce_loc only (values paired with int32 indices).
/// float16 and bfloat16 are refused (MPI has no type for them).
/// The lower-case enumerators are the old names, deprecated aliases of the same values since 0.1.0
/// (docs/migration.md).
enum class ReduceOp {
  Sum,
  Min,
  Max,
  Prod,
  LogicalAnd,
  LogicalOr,
  LogicalXor,
  BitwiseAnd,
  BitwiseOr,
  BitwiseXor,
  MinLoc,
  MaxLoc,
  sum [[deprecated("use devmem::mpi::ReduceOp::Sum (docs/migration.md)")]] = Sum,
  min [[deprecated("use devmem::mpi::ReduceOp::Min (docs/migration.md)")]] = Min,
  max [[deprecated("use devmem::mpi::ReduceOp::Max (docs/migration.md)")]] = Max,
  prod [[deprecated("use devmem::mpi::ReduceOp::Prod (docs/migration.md)")]] = Prod,
  logical_and [[deprecated("use devmem::mpi::ReduceOp::LogicalAnd (docs/migration.md)")]] =
      LogicalAnd,
  logical_or [[deprecated("use devmem::mpi::ReduceOp::LogicalOr (docs/migration.md)")]] = LogicalOr,
  logical_xor [[deprecated("use devmem::mpi::ReduceOp::LogicalXor (docs/migration.md)")]] =
      LogicalXor,
  bitwise_and [[deprecated("use devmem::mpi::ReduceOp::BitwiseAnd (docs/migration.md)")]] =
      BitwiseAnd,
  bitwise_or [[deprecated("use devmem::mpi::ReduceOp::BitwiseOr (docs/migration.md)")]] = BitwiseOr,
  bitwise_xor [[deprecated("use devmem::mpi::ReduceOp::BitwiseXor (docs/migration.md)")]] =
      BitwiseXor,
  minloc [[deprecated("use devmem::mpi::ReduceOp::MinLoc (docs/migration.md)")]] = MinLoc,
  maxloc [[deprecated("use devmem::mpi::ReduceOp::MaxLoc (docs/migration.md)")]] = MaxLoc,
};

/// "sum", "min", ..., "maxloc".
[[nodiscard]] DEVMEM_MPI_API const char* to_string(ReduceOp op) noexcept;

/// Root's `array` into every rank's `array` (same dtype and shape on every rank).
DEVMEM_MPI_API void bcast(const DeviceArray& array, int root, MPI_Comm comm = MPI_COMM_WORLD);
/// Element-wise reduction over the ranks of `input`, written to `output` (same shape and dtype;
/// `output` may be `input` itself or a view of other memory). Dtypes: as ReduceOp says for `op`.
DEVMEM_MPI_API void allreduce(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                              MPI_Comm comm = MPI_COMM_WORLD);
/// In place: allreduce(array, array, op, comm).
DEVMEM_MPI_API void allreduce(const DeviceArray& array, ReduceOp op,
                              MPI_Comm comm = MPI_COMM_WORLD);
/// Every rank's `input` into `output`, of shape (ranks, *input.shape) (output[r] is rank r's).
DEVMEM_MPI_API void allgather(const DeviceArray& input, const DeviceArray& output,
                              MPI_Comm comm = MPI_COMM_WORLD);

// ---- more collectives -------------------------------------------------------------------------
//
// Rules shared by every collective below (and bcast, allreduce, allgather above):
//  - Every rank of `comm` calls the same collective, in the same order, with the same root,
//    reduction and counts. The ranks first exchange a small descriptor (which collective, dtype,
//    shape, root, reduction, counts); a difference, or a local problem on any rank (a wrong output
//    shape, an unsupported dtype, a root outside the communicator, bad counts), throws the same
//    InvalidArgument on every rank, naming the ranks and the values, before any data moves.
//  - Strided views are accepted for inputs and outputs (not overlapping outputs: broadcast views
//    are refused). `input` and `output` must not overlap unless documented.
//  - Root-only arrays (reduce's and gather's output, scatter's input) are not read or written on
//    the other ranks: pass an empty DeviceArray{} there (any array is accepted and left alone).
//  - Transports as for point-to-point: staged through two page-locked slots in chunks of the
//    first axis of the per-rank block (the copies overlapping MPI), or DeviceDirect. On a GPU
//    backend DeviceDirect uses MPI's blocking collectives (a device-aware Open MPI 4.x accepts
//    device pointers there, not in MPI_I* collectives); on the host backend MPI_I* collectives
//    waited for while point-to-point operations progress. Strided views are packed into dense
//    device arrays for DeviceDirect.
//  - Returns when this rank's part is complete: its inputs have been read and its outputs written
//    (work enqueued on the arrays' streams before the call comes first). Like MPI's collectives,
//    a return does not mean the other ranks have finished.
//  - Errors: InvalidArgument (above), MpiError, the copies' errors. Thread safety: as MPI's; two
//    threads must not run collectives on the same communicator at the same time.

/// Returns once every rank of `comm` has called it (MPI_Barrier; point-to-point operations
/// progress meanwhile).
DEVMEM_MPI_API void barrier(MPI_Comm comm = MPI_COMM_WORLD);
/// Element-wise reduction of every rank's `input` into root's `output` (same dtype and shape as
/// `input`; may be `input` itself on root). Other ranks: `output` is unused (DeviceArray{}).
DEVMEM_MPI_API void reduce(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                           int root, MPI_Comm comm = MPI_COMM_WORLD);
/// Every rank's `input` (same dtype and shape everywhere) into root's `output` of shape
/// (ranks, *input.shape): output[r] is rank r's (mpi4py's Gather; NumPy: np.stack).
DEVMEM_MPI_API void gather(const DeviceArray& input, const DeviceArray& output, int root,
                           MPI_Comm comm = MPI_COMM_WORLD);
/// gather with a different number of rows per rank: rank r's `input` has counts[r] rows (first
/// axis) and the same trailing shape and dtype everywhere; root's `output` is
/// (sum(counts), *trailing), rank r's rows following rank r - 1's (NumPy: np.concatenate).
/// `counts` has one entry per rank, >= 0, equal on every rank. Staged v-forms move the whole
/// arrays in one chunk.
DEVMEM_MPI_API void gatherv(const DeviceArray& input, const DeviceArray& output,
                            std::span<const std::int64_t> counts, int root,
                            MPI_Comm comm = MPI_COMM_WORLD);
/// Root's `input` of shape (ranks, *output.shape) to every rank: rank r's `output` receives
/// input[r]. Other ranks: `input` is unused (DeviceArray{}).
DEVMEM_MPI_API void scatter(const DeviceArray& input, const DeviceArray& output, int root,
                            MPI_Comm comm = MPI_COMM_WORLD);
/// scatter of counts[r] rows to rank r: root's `input` is (sum(counts), *trailing), rank r's
/// `output` is (counts[r], *trailing) (NumPy: np.split at the running sums). `counts` as gatherv.
DEVMEM_MPI_API void scatterv(const DeviceArray& input, const DeviceArray& output,
                             std::span<const std::int64_t> counts, int root,
                             MPI_Comm comm = MPI_COMM_WORLD);
/// Personalised exchange: `input` and `output` are (ranks, *block); rank r's output[s] is rank s's
/// input[r].
DEVMEM_MPI_API void alltoall(const DeviceArray& input, const DeviceArray& output,
                             MPI_Comm comm = MPI_COMM_WORLD);
/// alltoall with rows: `input` is (sum(send_counts), *trailing), send_counts[s] rows (in rank
/// order) going to rank s; `output` is (sum(recv_counts), *trailing), recv_counts[s] rows coming
/// from rank s. recv_counts[s] on rank r must equal send_counts[r] on rank s (checked: every rank
/// throws naming the rank and the counts). Staged in one chunk.
DEVMEM_MPI_API void alltoallv(const DeviceArray& input, std::span<const std::int64_t> send_counts,
                              const DeviceArray& output, std::span<const std::int64_t> recv_counts,
                              MPI_Comm comm = MPI_COMM_WORLD);
/// Element-wise reduction of every rank's `input` of shape (ranks, *block), then block r of the
/// result to rank r's `output` (shape block): MPI_Reduce_scatter_block.
DEVMEM_MPI_API void reduce_scatter(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                                   MPI_Comm comm = MPI_COMM_WORLD);
/// The same with blocks of different sizes (MPI_Reduce_scatter): every rank's `input` has
/// sum(counts) rows (shape (sum(counts), *rest)); the element-wise reduction's rows
/// [counts[0] + ... + counts[r-1], ... + counts[r]) go to rank r's `output`, of shape
/// (counts[r], *rest). `counts` has one entry per rank, none negative, and is the same on every
/// rank (checked: InvalidArgument on every rank naming the first difference). Staged in one
/// chunk.
DEVMEM_MPI_API void reduce_scatter(const DeviceArray& input, std::span<const std::int64_t> counts,
                                   const DeviceArray& output, ReduceOp op,
                                   MPI_Comm comm = MPI_COMM_WORLD);
/// Inclusive prefix reduction: rank r's `output` is op over ranks 0..r of `input` (same dtype and
/// shape; may be `input` itself).
DEVMEM_MPI_API void scan(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                         MPI_Comm comm = MPI_COMM_WORLD);
/// Exclusive prefix reduction: rank r's `output` is op over ranks 0..r-1 of `input`; rank 0's
/// `output` is left unchanged (MPI defines no value there). `output` must not overlap `input`.
DEVMEM_MPI_API void exscan(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                           MPI_Comm comm = MPI_COMM_WORLD);
/// MinLoc / MaxLoc, in place and element-wise over the ranks: `values` (int32, int64, float32 or
/// float64) becomes the minimum (maximum) and `indices` (int32, same shape: what the caller pairs
/// with each value, such as its rank or a global position) the index paired with it; ties take
/// the smallest index (MPI_MINLOC / MPI_MAXLOC on MPI_2INT, MPI_LONG_INT, MPI_FLOAT_INT,
/// MPI_DOUBLE_INT). The pairs are packed and reduced in host memory whatever the transport.
DEVMEM_MPI_API void allreduce_loc(const DeviceArray& values, const DeviceArray& indices,
                                  ReduceOp op, MPI_Comm comm = MPI_COMM_WORLD);

// ---- non-blocking collectives -----------------------------------------------------------------
//
// Each returns a Request (see Request: wait(), test(), wait_all) whose operation advances with
// every devmem::mpi call that waits or tests, as point-to-point operations do; the operation
// holds its arrays and staging slots until it completes. Like MPI's non-blocking collectives,
// they must be called in the same order on every rank of the communicator (relative to each other
// and to the blocking collectives on it); the arrays must not be touched until the request
// completes. The descriptor check runs inside the operation: a mismatch (as for the blocking
// forms) is thrown by wait() on every rank. Transports: Staged (chunked, one chunk at a time),
// or DeviceDirect with MPI_I* collectives on device pointers on the host backend; on a GPU
// backend DeviceDirect stages (device-aware Open MPI 4.x does not take device pointers in
// non-blocking collectives).

/// Non-blocking barrier: completes once every rank has called it.
[[nodiscard]] DEVMEM_MPI_API Request ibarrier(MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking bcast.
[[nodiscard]] DEVMEM_MPI_API Request ibcast(const DeviceArray& array, int root,
                                            MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking allreduce (`output` may be `input`).
[[nodiscard]] DEVMEM_MPI_API Request iallreduce(const DeviceArray& input, const DeviceArray& output,
                                                ReduceOp op, MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking allgather.
[[nodiscard]] DEVMEM_MPI_API Request iallgather(const DeviceArray& input, const DeviceArray& output,
                                                MPI_Comm comm = MPI_COMM_WORLD);

// ---- MPI datatypes for the application's own MPI calls ----------------------------------------

/// An owned, committed MPI datatype (freed by the destructor; MPI must still be initialised then).
/// Move-only. get() is valid while the object lives.
class Datatype {
 public:
  Datatype() = default;
  /// Takes ownership of `type` (committed or not: the caller commits; datatype_for does).
  explicit Datatype(MPI_Datatype type) noexcept : type_(type) {}
  Datatype(Datatype&& other) noexcept : type_(other.type_) { other.type_ = MPI_DATATYPE_NULL; }
  Datatype& operator=(Datatype&& other) noexcept {
    std::swap(type_, other.type_);
    return *this;
  }
  Datatype(const Datatype&) = delete;
  Datatype& operator=(const Datatype&) = delete;
  ~Datatype() {
    if (type_ != MPI_DATATYPE_NULL) MPI_Type_free(&type_);
  }
  [[nodiscard]] MPI_Datatype get() const noexcept { return type_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

/// The elements of `view` (from view.data(), its shape and byte strides, C order, each element as
/// itemsize bytes) as one committed MPI datatype: MPI_Send(view.data(), 1, type.get(), ...) sends
/// exactly the view's elements; received into, it writes exactly them. For the application's own
/// MPI calls; passing view.data() to MPI needs a device-aware MPI library or the host backend
/// (transport_for(view) == Transport::DeviceDirect). InvalidArgument when an axis is longer than
/// INT_MAX; MpiError when MPI fails.
[[nodiscard]] DEVMEM_MPI_API Datatype datatype_for(const DeviceArray& view);

// ---- stream-ordered communication -------------------------------------------------------------

/// Stream-ordered communication (MPICH's MPIX_Send_enqueue and friends, NCCL's model): the call
/// enqueues the operation on `stream` and returns at once. The operation starts after the work
/// enqueued on `stream` before the call, and work enqueued on `stream` after the call runs after it
/// has completed, so communication overlaps the host's own work without host threads in the
/// application. How: the array is copied into a page-locked staging buffer on the stream; a host
/// function on the stream (cudaLaunchHostFunc) hands the message on that buffer to devmem::mpi's
/// progress thread (started by the first such call) and holds the stream until it is done;
/// receives copy the buffer back on the stream. The message is an ordinary devmem::mpi message:
/// it matches send/recv/isend/irecv on the other rank. Needs MPI_THREAD_MULTIPLE (InvalidArgument
/// naming the level MPI provides otherwise). On the default stream of the host backend, whose
/// work runs when it is enqueued, the call returns only when the operation is done.
/// The progress thread advances only enqueued operations; their staging buffers are freed by the
/// next *_enqueue call or check_enqueued() on an application thread.
/// Errors of the operation itself (a mismatch, an MPI error) surface from check_enqueued() or the
/// next *_enqueue call, once; a failed receive leaves the array's values as they were (the
/// staging buffer first holds them). Argument errors throw at once, before anything is enqueued.
DEVMEM_MPI_API void send_enqueue(const DeviceArray& array, int destination, int tag,
                                 const Stream& stream, MPI_Comm comm = MPI_COMM_WORLD);
/// Stream-ordered receive into `array` (see send_enqueue).
DEVMEM_MPI_API void recv_enqueue(const DeviceArray& array, int source, int tag,
                                 const Stream& stream, MPI_Comm comm = MPI_COMM_WORLD);
/// Stream-ordered allreduce of `input` into `output` (same dtype and shape; may be the same
/// array). No descriptor exchange: every rank must enqueue the same allreduce (dtype, shape,
/// reduction), in the same order relative to the communicator's other non-blocking collectives.
DEVMEM_MPI_API void allreduce_enqueue(const DeviceArray& input, const DeviceArray& output,
                                      ReduceOp op, const Stream& stream,
                                      MPI_Comm comm = MPI_COMM_WORLD);
/// Throws the first error of an enqueued operation that failed since the last check (once).
DEVMEM_MPI_API void check_enqueued();

}  // namespace devmem::mpi

// devmem::mpi: DeviceArrays sent over MPI (point-to-point and collectives), strided views included.
// The optional component devmem::mpi (CMake option DEVMEM_WITH_MPI; find_package(devmem
// COMPONENTS mpi)). docs/scaling-out.md#mpi explains the transports and the wire protocol.
//
// The API takes MPI_Comm: an MPI program already has its communicators (split, Cartesian, ...),
// and a wrapper of our own would only stand between them and devmem. So this header includes
// <mpi.h>, and the component links MPI::MPI_C publicly.
//
// Transports. A device-aware MPI library (CUDA-aware or ROCm-aware Open MPI / MPICH) takes device
// pointers: contiguous arrays go to MPI as they are, strided views as MPI derived datatypes built
// from their byte strides (nested MPI_Type_create_hvector). Otherwise the elements are staged
// through page-locked host buffers in chunks (whole slices of the first axis), the device-host copy
// of one chunk overlapping the MPI transfer of the previous one. The host backend stages unless
// device_direct is asked for (set_transport or DEVMEM_MPI_TRANSPORT=device_direct).
//
// Checks. Every point-to-point message is preceded by a small header (dtype, shape) that the
// receiver checks and acknowledges: a shape or dtype mismatch throws InvalidArgument on both ranks,
// naming both arrays, and neither rank hangs. Collectives exchange the same descriptor first and
// throw on every rank when the ranks disagree. So send has MPI_Ssend's semantics: it completes
// once the receiver has matched it. Two ranks sending to each other use isend/irecv.
//
// Ordering with streams. An operation is ordered after the work enqueued on the array's stream
// before the call (staging copies are enqueued on that stream; the device-direct path waits for
// it before MPI touches the memory). When a blocking call returns, or a Request completes, the
// array has been read (send side) or written (receive side) and may be reused.
//
// Tags. Acknowledgements and payloads use the same communicator with tags above MPI_TAG_UB / 2
// (derived from a per-process sequence number), so the caller's tags must be in
// [0, MPI_TAG_UB / 2] and MPI_ANY_TAG is refused (MPI_ANY_SOURCE is accepted); the application's
// own messages on the communicator should stay in that range too.
//
// Errors: InvalidArgument (mismatches, bad arguments: messages name the operation, the ranks and
// the values), MpiError (an MPI call returned an error, which only happens on a communicator whose
// error handler returns errors; MPI's default handler aborts), the devmem errors of the copies
// (OutOfMemory, BackendError).
// Thread safety: calls from several threads need MPI initialised with MPI_THREAD_MULTIPLE; the
// component's own state (settings, staging-buffer cache, list of operations in progress) is locked.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/error.hpp>

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

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#if defined(DEVMEM_STATIC)
#define DEVMEM_MPI_API
#else
#define DEVMEM_MPI_API [[gnu::visibility("default")]]
#endif

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
///  - automatic: device_direct when the MPI library accepts the array's backend's device pointers
///    (device_aware()), staged otherwise; the host backend stages.
///  - device_direct: device pointers (and derived datatypes for strided views) go to MPI; only
///    correct with a device-aware MPI library, or on the host backend, whose device memory is host
///    memory.
///  - staged: through page-locked host buffers, in chunks, with the copies overlapping the
///    transfers.
enum class Transport { automatic, device_direct, staged };

/// "automatic", "device_direct" or "staged".
[[nodiscard]] DEVMEM_MPI_API const char* to_string(Transport transport) noexcept;
/// Parses the names to_string gives; InvalidArgument naming the value otherwise.
[[nodiscard]] DEVMEM_MPI_API Transport parse_transport(std::string_view name);

/// The transport setting: the last set_transport(), else the environment variable
/// DEVMEM_MPI_TRANSPORT (read at the first call; InvalidArgument naming a bad value), else
/// automatic. Thread safe.
[[nodiscard]] DEVMEM_MPI_API Transport transport();
/// Sets the transport for operations that start after the call (process-wide). Thread safe.
DEVMEM_MPI_API void set_transport(Transport transport) noexcept;
/// The transport an operation on `array` takes now (never automatic).
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

namespace detail {
struct Operation;
}  // namespace detail

/// A non-blocking operation (isend, irecv, ibcast, ...). Move-only RAII handle: the operation holds
/// the array and its staging buffers until it completes, whether or not the Request still exists.
/// Destroying an unfinished Request waits for it (and drops its error, if any: call wait() to see
/// errors). Progress: test() and wait() of any Request, and blocking calls, advance every
/// outstanding operation of the process, so an exchange of isend/irecv pairs never deadlocks on
/// the order the requests are waited for. Thread safety: one Request is used by one thread at a
/// time.
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

  /// Blocks until the operation completes; throws its error (mismatch, MpiError, copy errors)
  /// once, after which the request is complete.
  void wait();
  /// Advances outstanding operations; true when this one has completed (then as wait()).
  [[nodiscard]] bool test();
  /// True when complete (no progress made).
  [[nodiscard]] bool done() const noexcept;

 private:
  friend struct detail::Operation;
  explicit Request(std::shared_ptr<detail::Operation> operation) noexcept;
  std::shared_ptr<detail::Operation> operation_;
  int unwinding_at_start_ = 0;  // std::uncaught_exceptions() when the operation was started
};

/// Waits for every request (in any completion order).
DEVMEM_MPI_API void wait_all(std::span<Request> requests);

/// Sends `array` to rank `destination` with `tag` (0..MPI_TAG_UB / 2) and waits until the receiver
/// has matched it and the elements have been read. Strided views are sent as their elements in C
/// order.
DEVMEM_MPI_API void send(const DeviceArray& array, int destination, int tag,
                         MPI_Comm comm = MPI_COMM_WORLD);
/// Receives into `array` (same dtype and shape as the sender's; any strides without overlapping
/// elements) from `source` (or MPI_ANY_SOURCE) with `tag` (or MPI_ANY_TAG).
DEVMEM_MPI_API void recv(const DeviceArray& array, int source, int tag,
                         MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking send.
[[nodiscard]] DEVMEM_MPI_API Request isend(const DeviceArray& array, int destination, int tag,
                                           MPI_Comm comm = MPI_COMM_WORLD);
/// Non-blocking receive.
[[nodiscard]] DEVMEM_MPI_API Request irecv(const DeviceArray& array, int source, int tag,
                                           MPI_Comm comm = MPI_COMM_WORLD);

/// The reductions (MPI_SUM, MPI_MIN, ...). Which dtypes each takes (InvalidArgument naming the
/// dtype and the reduction otherwise, on every rank):
///  - sum, prod: integers (1, 2, 4, 8 bytes, signed or not), float32, float64, complex64,
///    complex128;
///  - min, max: integers and float32, float64;
///  - logical_and, logical_or, logical_xor: integers and bool (nonzero is true; the result is 0
///    or 1);
///  - bitwise_and, bitwise_or, bitwise_xor: integers;
///  - minloc, maxloc: allreduce_loc only (values paired with int32 indices).
/// float16 and bfloat16 are refused (MPI has no type for them).
enum class ReduceOp {
  sum,
  min,
  max,
  prod,
  logical_and,
  logical_or,
  logical_xor,
  bitwise_and,
  bitwise_or,
  bitwise_xor,
  minloc,
  maxloc
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
//    first axis of the per-rank block (the copies overlapping MPI), or device_direct. On a GPU
//    backend device_direct uses MPI's blocking collectives (a device-aware Open MPI 4.x accepts
//    device pointers there, not in MPI_I* collectives); on the host backend MPI_I* collectives
//    waited for while point-to-point operations progress. Strided views are packed into dense
//    device arrays for device_direct.
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
/// Inclusive prefix reduction: rank r's `output` is op over ranks 0..r of `input` (same dtype and
/// shape; may be `input` itself).
DEVMEM_MPI_API void scan(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                         MPI_Comm comm = MPI_COMM_WORLD);
/// Exclusive prefix reduction: rank r's `output` is op over ranks 0..r-1 of `input`; rank 0's
/// `output` is left unchanged (MPI defines no value there). `output` must not overlap `input`.
DEVMEM_MPI_API void exscan(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                           MPI_Comm comm = MPI_COMM_WORLD);
/// minloc / maxloc, in place and element-wise over the ranks: `values` (int32, int64, float32 or
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
// forms) is thrown by wait() on every rank. Transports: staged (chunked, one chunk at a time),
// or device_direct with MPI_I* collectives on device pointers on the host backend; on a GPU
// backend device_direct stages (device-aware Open MPI 4.x does not take device pointers in
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
/// (transport_for(view) == Transport::device_direct). InvalidArgument when an axis is longer than
/// INT_MAX; MpiError when MPI fails.
[[nodiscard]] DEVMEM_MPI_API Datatype datatype_for(const DeviceArray& view);

}  // namespace devmem::mpi

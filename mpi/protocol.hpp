// devmem::mpi's wire protocol (private to mpi/, not installed): the message descriptor (Wire),
// the tags, owned MPI datatypes, chunk plans and the page-locked staging buffers, shared by the
// point-to-point operations (mpi/point_to_point.cpp) and the collectives (mpi/collectives.cpp).
// docs/scaling-out.md#mpi describes the protocol: a header (dtype, shape, sequence number, chunk
// plan) on the user's tag, an acknowledgement from the receiver, then the payload in chunks, on
// tags from the upper half of the tag space (derived from the sender's sequence number, so that
// concurrent messages between the same ranks never match each other's payload).
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/dtype.hpp>
#include <devmem/host_array.hpp>
#include <devmem/mpi.hpp>
#include <devmem/stream.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace devmem::mpi::detail {

// Throws MpiError naming `call` and MPI's text for `rc` unless rc is MPI_SUCCESS.
void check_mpi(int rc, const char* call);

// ---- wire format --------------------------------------------------------------------------------

constexpr std::int32_t kMagic = 0x6d766564;  // "devm"
constexpr int kMaxWireDims = 32;
enum WireStatus : std::int32_t { kOk = 0, kMismatch = 1, kLocalError = 2 };

// Sent as raw bytes between processes of one program: every rank has the same layout.
struct Wire {
  std::int32_t magic = kMagic;
  std::int32_t status = kOk;
  std::int32_t ndim = 0;
  std::int32_t extra = 0;  // collectives: the reduction or the root
  std::int64_t seq = 0;
  std::int64_t chunk_rows = 0;
  std::array<char, 16> typestr{};
  // Collectives: which one the rank called ("mpi::bcast"), so that ranks calling different
  // collectives get an error on every rank instead of mismatched MPI calls (wrong data, a hang).
  std::array<char, 24> collective{};
  std::array<std::int64_t, kMaxWireDims> shape{};
  std::array<char, 200> message{};
};

void set_message(Wire& wire, std::string_view text);
std::string message_of(const Wire& wire);
// The descriptor of `array` (status kLocalError when it has more than kMaxWireDims dimensions).
Wire describe(const DeviceArray& array);
// The same from a dtype's typestr and a shape.
Wire describe(std::string_view typestr, std::span<const std::int64_t> shape);
// "float64 (4, 5)".
std::string format_wire(const Wire& wire);
bool same_array(const Wire& a, const Wire& b);

// ---- tags ---------------------------------------------------------------------------------------

// User tags: [0, tag_ub / 2]; devmem's acknowledgements and payloads: the upper half, two tags per
// sequence number.
int max_user_tag(MPI_Comm comm);
int ack_tag(MPI_Comm comm, std::int64_t seq);
int data_tag(MPI_Comm comm, std::int64_t seq);
// The next sequence number of this process's sends.
std::int64_t next_sequence();
// Throws InvalidArgument naming `operation` when `comm` is MPI_COMM_NULL, `peer` is not a rank of
// it (MPI_ANY_SOURCE passes when any_source_ok) or `tag` is outside the user tags.
void check_peer_tag(const char* operation, MPI_Comm comm, int peer, bool any_source_ok, int tag);

// ---- MPI datatypes ------------------------------------------------------------------------------

// An owned, committed MPI datatype (public: devmem::mpi::Datatype).
using Datatype = devmem::mpi::Datatype;

// `value` as an MPI count; InvalidArgument naming `what` when it exceeds INT_MAX.
int checked_int(std::int64_t value, const char* what);
// `bytes` contiguous bytes.
Datatype bytes_type(std::int64_t bytes);
// `type` with its extent set to `extent` (allgather: where the next rank's block starts).
Datatype resized_type(const Datatype& type, std::int64_t extent);
// An array's elements as raw bytes (point-to-point, bcast, allgather).
Datatype byte_elements_type(const DeviceArray& view);

// ---- chunk plans and staging --------------------------------------------------------------------

// Chunks are whole slices of the first axis (the whole array for 0-d arrays), so that every chunk
// of a strided view is itself a view and its packed bytes follow the previous chunk's.
struct Plan {
  std::int64_t rows = 0;            // length of the first axis (1 for 0-d)
  std::int64_t rows_per_chunk = 1;  // >= 1
  std::int64_t chunks = 0;          // 0 for an empty array
};

Plan make_plan(const DeviceArray& array, std::int64_t rows_per_chunk);
// The plan for `rows` first-axis rows holding `elements` elements in all (0-d arrays: one row).
Plan make_plan(std::int64_t rows, std::int64_t elements, std::int64_t rows_per_chunk);
// The rows per chunk this rank would choose for `array`.
std::int64_t preferred_rows(const DeviceArray& array, Transport transport);
// The first-axis rows [begin, end) of chunk k.
std::pair<std::int64_t, std::int64_t> chunk_rows(const Plan& plan, std::int64_t k);

// Chunk k of `array` (whose axis `axis` is the chunked one).
template <class Array>
Array chunk_view(const Array& array, const Plan& plan, std::int64_t k, int axis = 0) {
  if (array.ndim() == axis) return array;  // 0-d payload: one chunk, the whole array
  const auto [begin, end] = chunk_rows(plan, k);
  return array.slice(axis, begin, end);
}

// The packed bytes of chunk k.
std::int64_t chunk_bytes(const DeviceArray& array, const Plan& plan, std::int64_t k);
// The part of a staging slot that holds chunk k.
HostArray slot_view(const HostArray& slot, const DeviceArray& array, const Plan& plan,
                    std::int64_t k);
// A page-locked slot holding one chunk of `array` (C-contiguous: the payload's packed bytes), with
// a leading axis of `leading` slots when positive; from a cache of reused buffers.
HostArray staging_slot(const DeviceArray& array, const Plan& plan, std::int64_t leading = 0);

// ---- streams ------------------------------------------------------------------------------------

// Staging copies go on the array's stream: after the work already enqueued there. On the default
// stream they are synchronous, which still overlaps the transfers: MPI moves the previous chunk
// (a non-blocking request) while the copy of the next one runs.
Stream copy_stream(const DeviceArray& array);
// Receiving into an array whose elements overlap (a broadcast axis) would write an element twice.
// Returns why `array` cannot be received into, or nullopt.
std::optional<std::string> destination_problem(const DeviceArray& array);

}  // namespace devmem::mpi::detail

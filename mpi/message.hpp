// devmem::mpi's point-to-point message layer (private to mpi/, not installed): where protocol
// traffic goes (the private communicator of initialize(), or the upper half of the application's
// tag space), the header that starts every message, the pool of eager buffers, the probe stash,
// and Endpoint, one array (device or host) as a message buffer. mpi/point_to_point.cpp builds the
// send and receive state machines from these; docs/scaling-out.md#mpi describes the protocol.
#pragma once

#include "protocol.hpp"

#include <devmem/device_array.hpp>
#include <devmem/host_array.hpp>
#include <devmem/mpi.hpp>
#include <devmem/stream.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace devmem::mpi::detail {

// ---- where protocol traffic goes ----------------------------------------------------------------

// The communicator and rank that acknowledgements and payloads with one peer use: devmem's
// private duplicate of MPI_COMM_WORLD (the peer's world rank) after initialize(), else the
// application's communicator (the peer's rank there).
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL;
  int peer = MPI_PROC_NULL;
};
Channel channel(MPI_Comm comm, int peer);
// The largest user tag (MPI_TAG_UB after initialize(), else MPI_TAG_UB / 2).
int user_tag_limit(MPI_Comm comm);
// The tags of the acknowledgement and of the payload of the message with sequence number `seq`
// on `channel` (distinct per sequence number, above the user tags when the channel is the
// application's communicator).
int acknowledgement_tag(const Channel& channel, std::int64_t seq);
int payload_tag(const Channel& channel, std::int64_t seq);
// Throws InvalidArgument naming `operation` when `comm` is MPI_COMM_NULL, `peer` is neither a rank
// of it nor MPI_PROC_NULL (nor MPI_ANY_SOURCE when `receiving`), or `tag` is outside the user tags
// (MPI_ANY_TAG passes when receiving after initialize()).
void check_envelope(const char* operation, MPI_Comm comm, int peer, int tag, bool receiving);

// This thread's caches of the small-message path (the envelope that last passed each direction's
// checks, the last dtype's typestr, the free eager buffers) in one thread_local: libdevmem_mpi
// reaches a thread_local through a call (__tls_get_addr), and a small message looked up three.
// isend and irecv look this one up once and hand it to the overloads below.
struct ThreadCaches;
[[nodiscard]] ThreadCaches& thread_caches() noexcept;
void check_envelope(ThreadCaches& caches, const char* operation, MPI_Comm comm, int peer, int tag,
                    bool receiving);

// ---- the message header -------------------------------------------------------------------------

enum class MessageKind : std::uint8_t {
  Eager = 1,       // header and payload in one message, no acknowledgement
  Rendezvous = 2,  // header, acknowledgement, payload in the sender's chunks
  Persistent = 3,  // the first round of a persistent pair: as rendezvous
};

// The fixed part; the shape (ndim int64) follows, then, for eager messages, the payload at
// header_bytes(ndim). Raw bytes between processes of one program: every rank has the same layout.
struct MessageHeader {
  std::uint32_t magic = 0;
  MessageKind kind = MessageKind::Eager;
  std::uint8_t ndim = 0;
  std::uint8_t sender_error = 0;  // 1: the sender cannot send; the payload is its message
  std::uint8_t reserved = 0;
  std::int64_t seq = 0;
  std::int64_t chunk_rows = 0;
  std::int64_t payload_bytes = 0;
  std::array<char, 16> typestr{};
};

constexpr std::uint32_t kMessageMagic = 0x32766d64;  // "dmv2"
// Where the payload starts (16-byte aligned, for every dtype's alignment).
constexpr std::size_t header_bytes(int ndim) {
  return (sizeof(MessageHeader) + 8 * static_cast<std::size_t>(ndim) + 15) / 16 * 16;
}
// Every receive of a header can take any devmem message start: a mismatch must never truncate.
constexpr std::size_t kEagerCapacity =
    header_bytes(kMaxWireDims) + static_cast<std::size_t>(eager_limit_bytes);

// ---- eager buffers ------------------------------------------------------------------------------

// A page-locked buffer of kEagerCapacity bytes from a process-wide pool, returned when destroyed.
class EagerBuffer {
 public:
  EagerBuffer() = default;
  static EagerBuffer take();
  static EagerBuffer take(ThreadCaches& caches);  // the calling thread's (thread_caches())
  EagerBuffer(EagerBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), storage_(std::move(other.storage_)) {}
  EagerBuffer& operator=(EagerBuffer&& other) noexcept;
  EagerBuffer(const EagerBuffer&) = delete;
  EagerBuffer& operator=(const EagerBuffer&) = delete;
  ~EagerBuffer();
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] bool empty() const noexcept { return storage_ == nullptr; }
  [[nodiscard]] const MessageHeader& header() const noexcept {
    return *reinterpret_cast<const MessageHeader*>(data());  // NOLINT: raw wire bytes
  }
  [[nodiscard]] MessageHeader& header() noexcept {
    return *reinterpret_cast<MessageHeader*>(data());  // NOLINT: raw wire bytes
  }
  [[nodiscard]] const std::int64_t* shape() const noexcept {
    return reinterpret_cast<const std::int64_t*>(data() + sizeof(MessageHeader));  // NOLINT
  }
  // Where the payload of a message of `ndim` dimensions starts.
  [[nodiscard]] std::byte* payload(int ndim) const noexcept { return data() + header_bytes(ndim); }

 private:
  // The pool moves pointers, not arrays (a HostArray's move touches its shape, strides and owner).
  explicit EagerBuffer(std::unique_ptr<HostArray> storage)
      : data_(static_cast<std::byte*>(storage->data())), storage_(std::move(storage)) {}
  // A pooled buffer whose address `data` was kept with it.
  EagerBuffer(std::unique_ptr<HostArray> storage, std::byte* data) noexcept
      : data_(data), storage_(std::move(storage)) {}
  std::byte* data_ = nullptr;
  std::unique_ptr<HostArray> storage_;
};

// ---- one array as a message buffer --------------------------------------------------------------

// A dtype's NumPy typestr from a per-thread cache (DType::typestr() formats a new string); the
// string lives as long as the process.
const std::string& typestr_of(const DType& dtype);
const std::string& typestr_of(ThreadCaches& caches, const DType& dtype);

// The elements in C order into the host bytes at `destination` (nbytes() of them), on `stream`
// (host arrays: at once): a contiguous array as one raw copy (the general path builds views and a
// copy plan, which costs more than a small message's transfer), any other through a view.
void pack_elements(const DeviceArray& array, std::byte* destination, const Stream& stream);
void pack_elements(const HostArray& array, std::byte* destination);
// The elements in C order from the host bytes at `source`, on `stream` (host arrays: at once).
void unpack_elements(const DeviceArray& array, const std::byte* source, const Stream& stream);
void unpack_elements(const HostArray& array, const std::byte* source);

// A DeviceArray (staged or device-direct) or a HostArray (MPI reads and writes it in place).
class Endpoint {
 public:
  explicit Endpoint(const DeviceArray& array)
      : array_(array), typestr_(&typestr_of(array.dtype())) {}
  explicit Endpoint(const HostArray& array) : array_(array), typestr_(&typestr_of(array.dtype())) {}

  [[nodiscard]] bool on_device() const noexcept {
    return std::holds_alternative<DeviceArray>(array_);
  }
  [[nodiscard]] const DeviceArray& device() const { return std::get<DeviceArray>(array_); }
  [[nodiscard]] const HostArray& host() const { return std::get<HostArray>(array_); }
  [[nodiscard]] const Layout& layout() const noexcept;
  [[nodiscard]] const DType& dtype() const noexcept;
  [[nodiscard]] void* data() const noexcept;
  [[nodiscard]] int ndim() const noexcept { return layout().ndim(); }
  [[nodiscard]] const Shape& shape() const noexcept { return layout().shape; }
  [[nodiscard]] std::int64_t size() const noexcept;
  [[nodiscard]] std::int64_t nbytes() const noexcept { return size() * dtype().itemsize(); }
  [[nodiscard]] bool c_contiguous() const noexcept;
  // The device array's stream; the default stream for host arrays.
  [[nodiscard]] Stream stream() const;
  // device_direct for host arrays (MPI takes host memory as it is), else the array's transport.
  [[nodiscard]] Transport transport() const;
  // First-axis rows [begin, end) (the whole array when 0-d).
  [[nodiscard]] Endpoint rows(std::int64_t begin, std::int64_t end) const;
  // pack_elements and unpack_elements of the array.
  void pack(std::byte* destination, const Stream& stream) const;
  void unpack(const std::byte* source, const Stream& stream) const;
  // "float64 (4, 5)".
  [[nodiscard]] std::string describe() const;
  // The dtype's NumPy typestr.
  [[nodiscard]] const std::string& typestr() const noexcept { return *typestr_; }

 private:
  Endpoint(std::variant<DeviceArray, HostArray> array, const std::string* typestr)
      : array_(std::move(array)), typestr_(typestr) {}
  std::variant<DeviceArray, HostArray> array_;
  const std::string* typestr_;  // in typestr_of's cache, which lives as long as the process
};

// The header of a message carrying `array` (shape, dtype, kind, sequence number, chunk rows); the
// sender's own problem, if any, in `error` (then the header says so).
void write_header(EagerBuffer& buffer, const Endpoint& array, MessageKind kind, std::int64_t seq,
                  std::int64_t chunk_rows, const std::optional<std::string>& error);
// The header of an eager message of an array of `typestr` and `shape` (at most kMaxWireDims
// axes) whose payload is `payload_bytes`.
void write_eager_header(EagerBuffer& buffer, const std::string& typestr,
                        std::span<const std::int64_t> shape, std::int64_t payload_bytes);
// Checks a received message start of `count` bytes; returns what is wrong with it, or nullopt.
std::optional<std::string> header_problem(const EagerBuffer& buffer, int count);
// "float64 (4, 5)" of a checked header.
std::string describe_header(const EagerBuffer& buffer);
// The dtype and shape of a checked header equal `array`'s (or `typestr` and `shape`).
bool header_matches(const EagerBuffer& buffer, const Endpoint& array);
bool header_matches(const EagerBuffer& buffer, std::string_view typestr,
                    std::span<const std::int64_t> shape);

// The receiver's answer to a checked handshake message start (not eager) for an array of
// `typestr` and `shape`: the acknowledgement to send, and, when it refuses the payload, the error
// the receive throws once the acknowledgement is sent. `where` names the receive ("mpi::recv from
// rank 0 (tag 3)"), `description` gives the array's ("float64 (4, 5)"), `persistent` says whether
// the receive is a persistent pair's first round, `overlap` why the array cannot be received into.
struct HandshakeAnswer {
  Wire ack;
  std::optional<std::string> failure;
};
HandshakeAnswer answer_handshake(const EagerBuffer& start, const std::string& where,
                                 std::string_view typestr, std::span<const std::int64_t> shape,
                                 const std::function<std::string()>& description, bool persistent,
                                 const std::optional<std::string>& overlap);

// ---- matched messages not yet received (probe) --------------------------------------------------

// A message start that probe() received before any recv asked for it.
struct StashedMessage {
  MPI_Comm comm = MPI_COMM_NULL;
  int source = MPI_PROC_NULL;
  int tag = 0;
  int count = 0;
  EagerBuffer buffer;
};
// Callers hold the progress lock (progress.hpp: progress_lock()), except for stash_in_use(), which
// receives ask first: a receive posted while another thread probes the same envelope may take a
// later message than the probed one, as with MPI_Probe and MPI_Recv (MPI_Mprobe exists for that).
// True when probe() ever stashed a message (until it is received).
bool stash_in_use() noexcept;
// The first stashed message on `comm` matching (source, tag) (wildcards included), removed.
std::optional<StashedMessage> take_stashed(MPI_Comm comm, int source, int tag);
// Looks for a matching stashed message, else for an arrived one (MPI_Iprobe, then MPI_Improbe and
// MPI_Mrecv into the stash). Returns its description.
std::optional<MessageInfo> probe_once(MPI_Comm comm, int source, int tag);

}  // namespace devmem::mpi::detail

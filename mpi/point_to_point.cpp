// devmem::mpi's point-to-point operations (mpi/point_to_point.hpp): send and receive state
// machines of the progress engine (mpi/progress.hpp) speaking the protocol of mpi/message.hpp.
// Eager messages (payload of at most eager_limit_bytes) are one MPI message, header and payload,
// packed on the sender and unpacked on the receiver. Larger ones are a handshake: the sender's
// header, the receiver's acknowledgement (or its reason to refuse), then the payload in the
// sender's chunk plan, which the receiver follows whatever its own transport: staged through two
// page-locked slots (the copy of one chunk overlapping the transfer of the previous one), or
// straight from and into memory (device_direct; strided device arrays are packed on the device
// first, so MPI sees contiguous bytes).
#include "point_to_point.hpp"

#include "eager.hpp"

#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devmem::mpi {

// The protocol's and the progress engine's internals.
using namespace detail;

namespace {

// A device-direct payload moves in chunks of at most this many bytes (MPI counts are ints).
constexpr std::int64_t kDirectChunkBytes = std::int64_t{1} << 30;

std::int64_t rows_of(const Endpoint& array) {
  return array.ndim() == 0 ? 1 : array.shape()[0];
}

Plan plan_for(const Endpoint& array, std::int64_t rows_per_chunk) {
  return make_plan(rows_of(array), array.size(), rows_per_chunk);
}

std::int64_t row_bytes(const Endpoint& array) {
  return array.nbytes() / std::max<std::int64_t>(rows_of(array), 1);
}

// The rows per chunk a sender chooses.
std::int64_t sender_rows(const Endpoint& array, Transport transport) {
  if (transport == Transport::Staged) return preferred_rows(array.device(), transport);
  const std::int64_t row = std::max<std::int64_t>(row_bytes(array), 1);
  return std::clamp<std::int64_t>(kDirectChunkBytes / row, 1,
                                  std::max<std::int64_t>(rows_of(array), 1));
}

// Copies on a non-default stream to or from page-locked memory may still run after the call.
bool asynchronous(const Endpoint& array, const Stream& stream) {
  return array.on_device() && !stream.is_default();
}

// Receiving into an array whose elements overlap (a broadcast axis) would write an element twice.
std::optional<std::string> overlap_problem(const Endpoint& array) {
  for (int d = 0; d < array.ndim(); ++d) {
    const auto axis = static_cast<std::size_t>(d);
    if (array.shape()[axis] > 1 && array.layout().strides[axis] == 0) {
      return fmt::format(
          "the destination's axis {} has stride 0 (a broadcast view; its elements overlap)", d);
    }
  }
  return std::nullopt;
}

bool test_all(std::vector<MPI_Request>& requests, const char* call) {
  if (requests.empty()) return true;
  int flag = 0;
  check_mpi(
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE),
      call);
  return flag != 0;
}

// ---- what a send and a receive share ----------------------------------------------------------

class MessageOperation : public Operation {
 public:
  ~MessageOperation() override = default;
  MessageOperation(const MessageOperation&) = delete;
  MessageOperation& operator=(const MessageOperation&) = delete;
  MessageOperation(MessageOperation&&) = delete;
  MessageOperation& operator=(MessageOperation&&) = delete;

  bool abandon() noexcept override {
    bool pending = cancel_request(start_request_);
    pending = cancel_request(ack_request_) || pending;
    for (auto& r : payload_requests_) pending = cancel_request(r) || pending;
    for (auto& e : copy_events_) {
      try {
        if (e) e->synchronize();
      } catch (...) {
        // The copy's own error is the operation's; the slot must only outlive the copy.
      }
    }
    return pending;
  }

  [[nodiscard]] std::string describe() const override {
    return fmt::format("{} rank {} (tag {}), {}: {}", what_, peer_, tag_, array_.describe(),
                       state_);
  }

  [[nodiscard]] RoundInfo round() const { return {seq_, plan_, peer_}; }

 protected:
  MessageOperation(Endpoint array, int peer, int tag, MPI_Comm comm, const char* what)
      : array_(std::move(array)),
        peer_(peer),
        tag_(tag),
        comm_(comm),
        what_(what),
        stream_(array_.stream()) {}

  // The staging slots for plan_ (one when there is one chunk).
  void make_slots() {
    slots_.push_back(staging_slot(array_.device(), plan_));
    if (plan_.chunks > 1) slots_.push_back(staging_slot(array_.device(), plan_));
  }

  // Waits for the copies into or out of the slots (device work: bounded).
  void wait_for_copies() {
    for (auto& e : copy_events_) {
      if (e) e->synchronize();
    }
  }

  [[nodiscard]] std::int64_t chunk_bytes_of(std::int64_t k) const {
    const auto [begin, end] = chunk_rows(plan_, k);
    return (array_.ndim() == 0 ? 1 : end - begin) * row_bytes(array_);
  }

  // The byte offset of chunk k in a C-contiguous buffer of the array's elements.
  [[nodiscard]] std::int64_t chunk_offset(std::int64_t k) const {
    return chunk_rows(plan_, k).first * row_bytes(array_);
  }

  // ---- the staged payload: chunk k passes through slot k % 2 ----
  // A sender copies a chunk from the device into its slot, then sends it; a receiver receives a
  // chunk into its slot, then copies it to the device. Either way a slot's transfer is posted once
  // the copy that last used the slot has finished; a sender copies its next chunk into the free
  // slot once the chunk before it is posted, a receiver copies out a chunk once it has arrived, so
  // the copy of one chunk overlaps the transfer of the other.
  enum class Direction { Send, Receive };

  // Advances the staged payload as far as it can without waiting for MPI; true once it is done.
  bool advance_staged(Direction direction) {
    const bool sending = direction == Direction::Send;
    payload_requests_.resize(2, MPI_REQUEST_NULL);
    while (true) {
      bool moved = false;
      if (transfer_ready(direction)) {
        post_staged(direction);
        moved = true;
      }
      if (copy_ready(direction)) {
        copy_staged(direction);
        moved = true;
      }
      if (transferred_ < posted_) {
        const auto s = static_cast<std::size_t>(transferred_ % 2);
        if (test_request(payload_requests_.at(s), sending ? "MPI_Isend (devmem::mpi payload)"
                                                          : "MPI_Irecv (devmem::mpi payload)")) {
          ++transferred_;
          moved = true;
        }
      }
      if (transferred_ == plan_.chunks && copied_ == plan_.chunks) {
        if (!sending) wait_for_copies();  // a sender's copies were waited for before their sends
        return true;
      }
      if (!moved) return false;
    }
  }

  // Whether the next chunk's copy may start: a sender's into a free slot once the chunk before it
  // is on its way, a receiver's out of its slot once it has arrived.
  [[nodiscard]] bool copy_ready(Direction direction) const {
    if (direction == Direction::Receive) return copied_ < transferred_;
    return copied_ < plan_.chunks && copied_ == posted_ && copied_ - transferred_ < 2;
  }

  // Whether the next chunk's transfer may be posted: a sender's once the chunk's copy into its
  // slot has started, a receiver's once the slot's previous chunk has been copied out of it (the
  // post waits for that copy to finish).
  [[nodiscard]] bool transfer_ready(Direction direction) const {
    if (direction == Direction::Send) return posted_ < copied_;
    return posted_ < plan_.chunks && posted_ - copied_ < 2;
  }

  // Posts the next chunk's MPI_Isend from its slot, or MPI_Irecv into it.
  void post_staged(Direction direction) {
    const auto s = static_cast<std::size_t>(posted_ % 2);
    if (auto& e = copy_events_.at(s); e.has_value()) e->synchronize();  // bounded device work
    const int bytes = checked_int(chunk_bytes_of(posted_), "a chunk's byte count");
    if (direction == Direction::Send) {
      check_mpi(MPI_Isend(slots_.at(s).data(), bytes, MPI_BYTE, channel_.peer,
                          payload_tag(channel_, seq_), channel_.comm, &payload_requests_.at(s)),
                "MPI_Isend (devmem::mpi payload)");
    } else {
      check_mpi(MPI_Irecv(slots_.at(s).data(), bytes, MPI_BYTE, channel_.peer,
                          payload_tag(channel_, seq_), channel_.comm, &payload_requests_.at(s)),
                "MPI_Irecv (devmem::mpi payload)");
    }
    ++posted_;
  }

  // Starts the next chunk's copy on the stream: from the device into its slot, or out of its slot
  // to the device.
  void copy_staged(Direction direction) {
    const std::int64_t k = copied_;
    const auto s = static_cast<std::size_t>(k % 2);
    const DeviceArray chunk = chunk_view(array_.device(), plan_, k);
    const HostArray slot = slot_view(slots_.at(s), array_.device(), plan_, k);
    if (direction == Direction::Send) {
      chunk.copy_to_host(slot, stream_);
    } else {
      chunk.copy_to_device(slot, stream_);
    }
    copy_events_.at(s) = stream_.record();
    ++copied_;
  }

  Endpoint array_;
  int peer_;
  int tag_;
  MPI_Comm comm_;
  const char* what_;
  const char* state_ = "starting";
  Transport transport_ = Transport::Staged;  // known once the message is not eager
  Stream stream_;
  Channel channel_;
  std::int64_t seq_ = 0;  // the sender's sequence number
  Plan plan_;
  EagerBuffer start_;  // the message start: header, and the payload of an eager message
  int start_count_ = 0;
  MPI_Request start_request_ = MPI_REQUEST_NULL;
  Wire ack_;
  MPI_Request ack_request_ = MPI_REQUEST_NULL;
  std::optional<Event> ready_;    // the array's stream's earlier work, or a pack/unpack copy
  std::vector<HostArray> slots_;  // one or two, made when needed (an empty HostArray allocates)
  std::array<std::optional<Event>, 2> copy_events_;
  std::vector<MPI_Request> payload_requests_;
  bool payload_posted_ = false;
  std::int64_t copied_ = 0;       // staged chunks whose copy has started
  std::int64_t posted_ = 0;       // staged chunks whose transfer has been posted
  std::int64_t transferred_ = 0;  // staged chunks whose transfer has completed
};

// ---- send ---------------------------------------------------------------------------------------

class SendOperation final : public MessageOperation {
 public:
  SendOperation(Endpoint array, int destination, int tag, MPI_Comm comm, MessageRole role)
      : MessageOperation(std::move(array), destination, tag, comm, "mpi::send to") {
    status = Status{destination, tag, array_.size(), array_.nbytes()};
    channel_ = channel(comm_, destination);
    if (role.later != nullptr) {
      transport_ = array_.transport();
      seq_ = role.later->seq;
      plan_ = role.later->plan;
      handshake_ = false;
      state_ = "sending the payload";
      if (array_.nbytes() <= eager_limit_bytes) {
        // A small round: the payload alone, packed like an eager message (no slots, no events).
        small_round_ = true;
        start_ = EagerBuffer::take();
        array_.pack(start_.data(), stream_);
        if (asynchronous(array_, stream_)) packed_ = stream_.record();
        return;
      }
      prepare_payload();
      return;
    }
    seq_ = next_sequence();
    start_ = EagerBuffer::take();
    eager_ =
        !role.persistent && array_.nbytes() <= eager_limit_bytes && array_.ndim() <= kMaxWireDims;
    if (eager_) {
      write_header(start_, array_, MessageKind::Eager, seq_, 0, std::nullopt);
      if (array_.size() > 0) {
        array_.pack(start_.payload(array_.ndim()), stream_);
        if (asynchronous(array_, stream_)) packed_ = stream_.record();
      }
      start_count_ =
          static_cast<int>(header_bytes(array_.ndim()) + static_cast<std::size_t>(array_.nbytes()));
      state_ = "sending the message (eager)";
    } else {
      transport_ = array_.transport();
      const MessageKind kind = role.persistent ? MessageKind::Persistent : MessageKind::Rendezvous;
      const std::int64_t rows = array_.ndim() <= kMaxWireDims ? sender_rows(array_, transport_) : 1;
      write_header(start_, array_, kind, seq_, rows, std::nullopt);
      const MessageHeader& h = start_.header();
      start_count_ = static_cast<int>(header_bytes(h.sender_error != 0 ? 0 : h.ndim) +
                                      static_cast<std::size_t>(h.payload_bytes));
      plan_ = plan_for(array_, rows);
      // The payload is prepared by the first advance(), after the header is posted: the
      // handshake's round trip then overlaps the first chunk's copy (which on the host backend and
      // the default stream runs within the call), and a failed copy is the operation's error.
      payload_pending_ = h.sender_error == 0;
      check_mpi(MPI_Irecv(&ack_, sizeof(Wire), MPI_BYTE, channel_.peer,
                          acknowledgement_tag(channel_, seq_), channel_.comm, &ack_request_),
                "MPI_Irecv (devmem::mpi acknowledgement)");
      state_ = "waiting for the receiver's acknowledgement";
    }
    if (!packed_) post_start();
  }
  ~SendOperation() override = default;
  SendOperation(const SendOperation&) = delete;
  SendOperation& operator=(const SendOperation&) = delete;
  SendOperation(SendOperation&&) = delete;
  SendOperation& operator=(SendOperation&&) = delete;

  bool advance() override {
    if (handshake_) {
      if (!start_posted_) {
        if (packed_ && !packed_->query()) return false;
        post_start();
      }
      prepare_pending_payload();
      if (!test_request(start_request_, "MPI_Isend (devmem::mpi message)")) return false;
      if (eager_) return true;
      if (!acknowledged_) {
        if (!test_request(ack_request_, "MPI_Irecv (devmem::mpi acknowledgement)")) return false;
        acknowledged_ = true;
        check_acknowledgement();
        state_ = "sending the payload";
      }
    }
    if (small_round_) {
      if (!start_posted_) {
        if (packed_ && !packed_->query()) return false;
        check_mpi(
            MPI_Isend(start_.data(), static_cast<int>(array_.nbytes()), MPI_BYTE, channel_.peer,
                      payload_tag(channel_, seq_), channel_.comm, &start_request_),
            "MPI_Isend (devmem::mpi payload)");
        start_posted_ = true;
      }
      return test_request(start_request_, "MPI_Isend (devmem::mpi payload)");
    }
    if (plan_.chunks == 0) return true;
    return transport_ == Transport::Staged ? advance_staged(Direction::Send) : advance_direct();
  }

 private:
  void post_start() {
    check_mpi(MPI_Isend(start_.data(), start_count_, MPI_BYTE, peer_, tag_, comm_, &start_request_),
              "MPI_Isend (devmem::mpi message)");
    start_posted_ = true;
  }

  void prepare_pending_payload() {
    if (!payload_pending_) return;
    payload_pending_ = false;
    prepare_payload();
  }

  void check_acknowledgement() {
    const std::string where = fmt::format("mpi::send to rank {} (tag {})", peer_, tag_);
    if (ack_.magic != kMagic) {
      throw InvalidArgument(fmt::format(
          "{}: the acknowledgement is not devmem's (is the receiver using devmem::mpi?)", where));
    }
    const MessageHeader& h = start_.header();
    if (h.sender_error == 0 && ack_.status == kOk) return;
    wait_for_copies();  // the slots stay alive until the copies into them are done
    if (h.sender_error != 0) {
      throw InvalidArgument(fmt::format(
          "{}: cannot send {}", where,
          std::string(reinterpret_cast<const char*>(start_.data() + header_bytes(0)),  // NOLINT
                      static_cast<std::size_t>(h.payload_bytes))));
    }
    if (ack_.status == kLocalError) {
      throw InvalidArgument(
          fmt::format("{}: the receiver cannot receive: {}", where, message_of(ack_)));
    }
    throw InvalidArgument(
        fmt::format("{}: shape/dtype mismatch: this rank sends {}, the receiver expects {}", where,
                    array_.describe(), format_wire(ack_)));
  }

  // Staged: the first copies start now, overlapping the handshake: both slots' where the copies
  // are asynchronous (enqueued on a stream), else only the first chunk's, so that its transfer is
  // posted before the second chunk is copied (advance_staged). Direct: a strided device array is
  // packed on the device (devmem's copy kernel, not MPI's per-piece copies), a strided host array
  // on the host; the payload waits for the stream's earlier work.
  void prepare_payload() {
    if (plan_.chunks == 0) return;
    if (transport_ == Transport::Staged) {
      make_slots();
      const std::int64_t ahead = asynchronous(array_, stream_) ? 2 : 1;
      while (copied_ < std::min<std::int64_t>(plan_.chunks, ahead)) copy_staged(Direction::Send);
      return;
    }
    if (array_.on_device()) {
      if (!array_.c_contiguous()) packed_device_ = array_.device().copy(Order::C, stream_);
      ready_ = stream_.record();
    } else if (!array_.c_contiguous()) {
      packed_host_ = array_.host().copy(Order::C);
    }
  }

  bool advance_direct() {
    if (!payload_posted_) {
      if (ready_ && !ready_->query()) return false;
      const void* base = packed_device_ ? packed_device_->data()
                         : packed_host_ ? packed_host_->data()
                                        : array_.data();
      payload_requests_.assign(static_cast<std::size_t>(plan_.chunks), MPI_REQUEST_NULL);
      for (std::int64_t k = 0; k < plan_.chunks; ++k) {
        check_mpi(MPI_Isend(static_cast<const std::byte*>(base) + chunk_offset(k),
                            checked_int(chunk_bytes_of(k), "a chunk's byte count"), MPI_BYTE,
                            channel_.peer, payload_tag(channel_, seq_), channel_.comm,
                            &payload_requests_[static_cast<std::size_t>(k)]),
                  "MPI_Isend (devmem::mpi payload)");
      }
      payload_posted_ = true;
    }
    return test_all(payload_requests_, "MPI_Isend (devmem::mpi payload)");
  }

  std::optional<Event> packed_;   // an eager message's copy into its buffer
  bool small_round_ = false;      // a later persistent round of at most eager_limit_bytes
  bool payload_pending_ = false;  // prepare_payload() is due (handshake messages, after the header)
  bool handshake_ = true;
  bool eager_ = false;
  bool start_posted_ = false;
  bool acknowledged_ = false;
  std::optional<DeviceArray> packed_device_;
  std::optional<HostArray> packed_host_;
};

// ---- receive ------------------------------------------------------------------------------------

class RecvOperation final : public MessageOperation {
 public:
  RecvOperation(Endpoint array, int source, int tag, MPI_Comm comm, MessageRole role)
      : MessageOperation(std::move(array), source, tag, comm, "mpi::recv from") {
    status = Status{source, tag, array_.size(), array_.nbytes()};
    persistent_ = role.persistent;
    if (role.later != nullptr) {
      transport_ = array_.transport();
      seq_ = role.later->seq;
      plan_ = role.later->plan;
      peer_ = role.later->peer;
      status.source = peer_;
      channel_ = channel(comm_, peer_);
      have_start_ = true;
      state_ = "receiving the payload";
      if (array_.nbytes() <= eager_limit_bytes) {
        small_round_ = true;  // as the sender decides: both know the size from the first round
        start_ = EagerBuffer::take();
        check_mpi(
            MPI_Irecv(start_.data(), static_cast<int>(array_.nbytes()), MPI_BYTE, channel_.peer,
                      payload_tag(channel_, seq_), channel_.comm, &start_request_),
            "MPI_Irecv (devmem::mpi payload)");
        return;
      }
      prepare_receive();
      return;
    }
    state_ = "waiting for the sender's message";
    // The stash check and the receive's posting are one step for probe(): a message it stashed
    // in between would be received out of order.
    auto lock = stash_in_use() ? progress_lock() : std::unique_lock<std::recursive_mutex>();
    if (auto stashed = lock.owns_lock() ? take_stashed(comm_, source, tag) : std::nullopt) {
      start_ = std::move(stashed->buffer);
      start_count_ = stashed->count;
      matched_source_ = stashed->source;
      matched_tag_ = stashed->tag;
      stashed_ = true;
    } else {
      start_ = EagerBuffer::take();
      check_mpi(MPI_Irecv(start_.data(), static_cast<int>(kEagerCapacity), MPI_BYTE, source, tag,
                          comm_, &start_request_),
                "MPI_Irecv (devmem::mpi message)");
    }
  }
  ~RecvOperation() override = default;
  RecvOperation(const RecvOperation&) = delete;
  RecvOperation& operator=(const RecvOperation&) = delete;
  RecvOperation(RecvOperation&&) = delete;
  RecvOperation& operator=(RecvOperation&&) = delete;

  bool advance() override {
    if (!have_start_) {
      if (!stashed_) {
        MPI_Status received;
        if (!test_request(start_request_, "MPI_Irecv (devmem::mpi message)", &received)) {
          return false;
        }
        matched_source_ = received.MPI_SOURCE;
        matched_tag_ = received.MPI_TAG;
        check_mpi(MPI_Get_count(&received, MPI_BYTE, &start_count_), "MPI_Get_count");
      }
      have_start_ = true;
      on_start();
    }
    if (failure_) {
      if (!test_request(ack_request_, "MPI_Isend (devmem::mpi acknowledgement)")) return false;
      throw InvalidArgument(*failure_);
    }
    if (small_round_ && !eager_) {
      if (!test_request(start_request_, "MPI_Irecv (devmem::mpi payload)")) return false;
      array_.unpack(start_.data(), stream_);
      if (asynchronous(array_, stream_)) ready_ = stream_.record();
      eager_ = true;  // from here on as an eager message: done once the copy is
    }
    if (eager_) return !ready_ || ready_->query();
    const bool payload_done =
        plan_.chunks == 0 ||
        (transport_ == Transport::Staged ? advance_staged(Direction::Receive) : advance_direct());
    return payload_done && test_request(ack_request_, "MPI_Isend (devmem::mpi acknowledgement)");
  }

 private:
  void on_start() {
    peer_ = matched_source_;
    tag_ = matched_tag_;
    status.source = peer_;
    status.tag = tag_;
    const auto where = [this] {
      return fmt::format("mpi::recv from rank {} (tag {})", peer_, tag_);
    };
    if (const auto problem = header_problem(start_, start_count_)) {
      failure_ = fmt::format("{}: received {}", where(), *problem);
      return;
    }
    const MessageHeader& h = start_.header();
    if (h.kind == MessageKind::Eager) {
      eager_ = true;
      if (persistent_) {
        failure_ = fmt::format(
            "{}: the sender used a plain send, this rank a persistent receive (recv_init): both "
            "ranks of a pair must use persistent requests",
            where());
      } else if (!header_matches(start_, array_)) {
        failure_ = fmt::format(
            "{}: shape/dtype mismatch: the sender sends {}, this rank expects {} (the sender "
            "was not told: messages of at most {} bytes are eager, and only their receiver "
            "checks them)",
            where(), describe_header(start_), array_.describe(), eager_limit_bytes);
      } else if (const auto overlap = overlap_problem(array_)) {
        failure_ = fmt::format("{}: {}", where(), *overlap);
      } else if (array_.size() > 0) {
        array_.unpack(start_.payload(array_.ndim()), stream_);
        if (asynchronous(array_, stream_)) ready_ = stream_.record();
      }
      state_ = "copying the message into the array";
      return;
    }
    seq_ = h.seq;
    transport_ = array_.transport();
    channel_ = channel(comm_, peer_);
    HandshakeAnswer answer = answer_handshake(
        start_, where(), array_.typestr(), array_.shape(), [this] { return array_.describe(); },
        persistent_, overlap_problem(array_));
    ack_ = answer.ack;
    failure_ = std::move(answer.failure);
    if (!failure_) {
      plan_ = plan_for(array_, h.chunk_rows);
      prepare_receive();  // the first receives are posted before the sender may send
      state_ = "receiving the payload";
    }
    check_mpi(MPI_Isend(&ack_, sizeof(Wire), MPI_BYTE, channel_.peer,
                        acknowledgement_tag(channel_, seq_), channel_.comm, &ack_request_),
              "MPI_Isend (devmem::mpi acknowledgement)");
  }

  // Posts the payload's first receives: the first two staged chunks, or every direct chunk
  // (straight into a C-contiguous array, else into a contiguous buffer copied in at the end).
  void prepare_receive() {
    if (plan_.chunks == 0) return;
    if (transport_ == Transport::Staged) {
      make_slots();
      payload_requests_.resize(2, MPI_REQUEST_NULL);
      while (posted_ < std::min<std::int64_t>(plan_.chunks, 2)) post_staged(Direction::Receive);
      return;
    }
    void* base = array_.data();
    if (array_.on_device()) {
      if (!array_.c_contiguous()) {
        unpack_device_ = device_array(array_.shape(), array_.dtype(), {}, Order::C, stream_);
        base = unpack_device_->data();
      }
      // MPI writes device memory outside the stream: after the stream's earlier work.
      stream_.record().synchronize();
    } else if (!array_.c_contiguous()) {
      unpack_host_.emplace(array_.shape(), array_.dtype(), Order::C);
      base = unpack_host_->data();
    }
    payload_requests_.assign(static_cast<std::size_t>(plan_.chunks), MPI_REQUEST_NULL);
    for (std::int64_t k = 0; k < plan_.chunks; ++k) {
      check_mpi(MPI_Irecv(static_cast<std::byte*>(base) + chunk_offset(k),
                          checked_int(chunk_bytes_of(k), "a chunk's byte count"), MPI_BYTE,
                          channel_.peer, payload_tag(channel_, seq_), channel_.comm,
                          &payload_requests_[static_cast<std::size_t>(k)]),
                "MPI_Irecv (devmem::mpi payload)");
    }
  }

  bool advance_direct() {
    if (!test_all(payload_requests_, "MPI_Irecv (devmem::mpi payload)")) return false;
    if (unpack_device_) {
      array_.device().copy_to_device(*unpack_device_, stream_);
      stream_.record().synchronize();  // bounded device work; the request completes written
      unpack_device_.reset();
    } else if (unpack_host_) {
      array_.host().copy_from(*unpack_host_);
      unpack_host_.reset();
    }
    return true;
  }

  bool persistent_ = false;
  bool small_round_ = false;  // a later persistent round of at most eager_limit_bytes
  bool have_start_ = false;
  bool stashed_ = false;
  bool eager_ = false;
  int matched_source_ = MPI_PROC_NULL;
  int matched_tag_ = 0;
  std::optional<std::string> failure_;
  std::optional<DeviceArray> unpack_device_;
  std::optional<HostArray> unpack_host_;
};

// ---- the public calls ---------------------------------------------------------------------------

// Small plain messages whose copies finish within the call take the eager fast path
// (mpi/eager.hpp); the others the operations above.
template <class Array>
Request make_send(const Array& array, int destination, int tag, MPI_Comm comm) {
  ThreadCaches& caches = thread_caches();
  check_envelope(caches, "mpi::send", comm, destination, tag, false);
  if (destination == MPI_PROC_NULL) return {};
  if (auto op = make_eager_send(caches, array, destination, tag, comm)) {
    launch(op);
    return Operation::make_request(std::move(op));
  }
  return Operation::make_request(start_send(Endpoint(array), destination, tag, comm, {}));
}

template <class Array>
Request make_recv(const Array& array, int source, int tag, MPI_Comm comm) {
  ThreadCaches& caches = thread_caches();
  check_envelope(caches, "mpi::recv", comm, source, tag, true);
  if (source == MPI_PROC_NULL) return {};
  if (auto op = make_eager_recv(caches, array, source, tag, comm)) {
    start_eager_recv(op);
    return Operation::make_request(std::move(op));
  }
  return Operation::make_request(start_recv(Endpoint(array), source, tag, comm, {}));
}

template <class Array>
void blocking_send(const Array& array, int destination, int tag, MPI_Comm comm) {
  ThreadCaches& caches = thread_caches();
  check_envelope(caches, "mpi::send", comm, destination, tag, false);
  if (destination == MPI_PROC_NULL) return;
  std::shared_ptr<Operation> op = make_eager_send(caches, array, destination, tag, comm);
  if (!op)
    op = std::make_shared<SendOperation>(Endpoint(array), destination, tag, comm, MessageRole{});
  run_blocking(op, "mpi::send");
}

template <class Array>
Status blocking_recv(const Array& array, int source, int tag, MPI_Comm comm) {
  ThreadCaches& caches = thread_caches();
  check_envelope(caches, "mpi::recv", comm, source, tag, true);
  if (source == MPI_PROC_NULL) return {};
  std::shared_ptr<Operation> op = make_eager_recv(caches, array, source, tag, comm);
  if (!op) op = std::make_shared<RecvOperation>(Endpoint(array), source, tag, comm, MessageRole{});
  run_blocking(op, "mpi::recv");
  return op->status;
}

}  // namespace

namespace detail {

std::shared_ptr<Operation> make_send_operation(Endpoint array, int destination, int tag,
                                               MPI_Comm comm, MessageRole role) {
  return std::make_shared<SendOperation>(std::move(array), destination, tag, comm, role);
}

std::shared_ptr<Operation> make_recv_operation(Endpoint array, int source, int tag, MPI_Comm comm,
                                               MessageRole role) {
  return std::make_shared<RecvOperation>(std::move(array), source, tag, comm, role);
}

std::shared_ptr<Operation> start_send(Endpoint array, int destination, int tag, MPI_Comm comm,
                                      MessageRole role) {
  auto op = make_send_operation(std::move(array), destination, tag, comm, role);
  launch(op);
  return op;
}

std::shared_ptr<Operation> start_recv(Endpoint array, int source, int tag, MPI_Comm comm,
                                      MessageRole role) {
  auto op = make_recv_operation(std::move(array), source, tag, comm, role);
  launch(op);
  return op;
}

RoundInfo round_info(const Operation& finished_first_round) {
  return dynamic_cast<const MessageOperation&>(finished_first_round).round();
}

}  // namespace detail

Request isend(const DeviceArray& array, int destination, int tag, MPI_Comm comm) {
  return make_send(array, destination, tag, comm);
}
Request irecv(const DeviceArray& array, int source, int tag, MPI_Comm comm) {
  return make_recv(array, source, tag, comm);
}
void send(const DeviceArray& array, int destination, int tag, MPI_Comm comm) {
  blocking_send(array, destination, tag, comm);
}
Status recv(const DeviceArray& array, int source, int tag, MPI_Comm comm) {
  return blocking_recv(array, source, tag, comm);
}

Request isend(const HostArray& array, int destination, int tag, MPI_Comm comm) {
  return make_send(array, destination, tag, comm);
}
Request irecv(const HostArray& array, int source, int tag, MPI_Comm comm) {
  return make_recv(array, source, tag, comm);
}
void send(const HostArray& array, int destination, int tag, MPI_Comm comm) {
  blocking_send(array, destination, tag, comm);
}
Status recv(const HostArray& array, int source, int tag, MPI_Comm comm) {
  return blocking_recv(array, source, tag, comm);
}

}  // namespace devmem::mpi

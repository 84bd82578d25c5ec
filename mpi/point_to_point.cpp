// devmem::mpi's point-to-point operations: send, recv and their non-blocking forms isend and irecv,
// each a state machine of the progress engine (mpi/progress.hpp) speaking the protocol of
// mpi/protocol.hpp: the sender's header, the receiver's acknowledgement (or its reason to refuse),
// then the payload, either straight from device memory (device_direct) or through two page-locked
// staging slots so that the copy of one chunk overlaps the transfer of the previous one (staged).
#include "progress.hpp"
#include "protocol.hpp"

#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

namespace devmem::mpi {

// The protocol's and the progress engine's internals.
using namespace detail;

namespace {

// ---- what a send and a receive share ----------------------------------------------------------

// The array and the handshake's two messages, the chunk plan, the copy stream, the two staging
// slots with their copy events and datatypes, and the payload requests.
class MessageOperation : public Operation {
 public:
  ~MessageOperation() override = default;
  MessageOperation(const MessageOperation&) = delete;
  MessageOperation& operator=(const MessageOperation&) = delete;
  MessageOperation(MessageOperation&&) = delete;
  MessageOperation& operator=(MessageOperation&&) = delete;

  bool abandon() noexcept override {
    bool pending = cancel_request(header_request_);
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

 protected:
  MessageOperation(DeviceArray array, int tag, MPI_Comm comm)
      : array_(std::move(array)), tag_(tag), comm_(comm) {}

  /// The staging slots for plan_ (one when there is one chunk).
  void make_slots() {
    slots_[0] = staging_slot(array_, plan_);
    if (plan_.chunks > 1) slots_[1] = staging_slot(array_, plan_);
  }

  /// Waits for the copies into or out of the slots (device work: bounded).
  void wait_for_copies() {
    for (auto& e : copy_events_) {
      if (e) e->synchronize();
    }
  }

  /// device_direct: posts the whole payload once, straight from (sending) or into device memory
  /// after the array's earlier work, then tests it.
  bool advance_direct(int peer, bool sending) {
    const char* const call =
        sending ? "MPI_Isend (devmem::mpi payload)" : "MPI_Irecv (devmem::mpi payload)";
    if (!posted_direct_) {
      if (ready_.has_value()) ready_->synchronize();  // earlier work on the array's stream first
      type_ = byte_elements_type(array_);
      const int tag = data_tag(comm_, header_.seq);
      check_mpi(sending ? MPI_Isend(array_.data(), 1, type_.get(), peer, tag, comm_,
                                    &payload_requests_.at(0))
                        : MPI_Irecv(array_.data(), 1, type_.get(), peer, tag, comm_,
                                    &payload_requests_.at(0)),
                call);
      posted_direct_ = true;
    }
    return test_request(payload_requests_.at(0), call);
  }

  DeviceArray array_;
  int tag_;
  MPI_Comm comm_;
  Transport transport_ = Transport::staged;
  Wire header_;
  Wire ack_;
  Plan plan_;
  Stream stream_;
  std::optional<Event> ready_;
  std::array<HostArray, 2> slots_;
  std::array<std::optional<Event>, 2> copy_events_;
  std::array<Datatype, 2> types_;
  std::array<MPI_Request, 2> payload_requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  Datatype type_;
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  MPI_Request ack_request_ = MPI_REQUEST_NULL;
  bool posted_direct_ = false;
  std::int64_t copied_ = 0;
  std::int64_t posted_ = 0;
};

// ---- send ---------------------------------------------------------------------------------------

class SendOperation final : public MessageOperation {
 public:
  SendOperation(DeviceArray array, int destination, int tag, MPI_Comm comm)
      : MessageOperation(std::move(array), tag, comm), destination_(destination) {
    check_peer_tag("mpi::send", comm_, destination_, false, tag_);
    transport_ = transport_for(array_);
    header_ = describe(array_);
    header_.seq = next_sequence();
    header_.chunk_rows = preferred_rows(array_, transport_);
    plan_ = make_plan(array_, header_.chunk_rows);
    stream_ = transport_ == Transport::staged ? copy_stream(array_) : array_.stream();
    if (transport_ == Transport::staged && plan_.chunks > 0 && header_.status == kOk) {
      make_slots();
      // The first copies start now, overlapping the handshake.
      while (copied_ < std::min<std::int64_t>(plan_.chunks, 2)) start_copy();
    } else {
      ready_ = stream_.record();
    }
    check_mpi(MPI_Irecv(&ack_, sizeof(Wire), MPI_BYTE, destination_, ack_tag(comm_, header_.seq),
                        comm_, &ack_request_),
              "MPI_Irecv (devmem::mpi acknowledgement)");
    check_mpi(
        MPI_Isend(&header_, sizeof(Wire), MPI_BYTE, destination_, tag_, comm_, &header_request_),
        "MPI_Isend (devmem::mpi header)");
  }
  ~SendOperation() override = default;
  SendOperation(const SendOperation&) = delete;
  SendOperation& operator=(const SendOperation&) = delete;
  SendOperation(SendOperation&&) = delete;
  SendOperation& operator=(SendOperation&&) = delete;

  bool advance() override {
    if (!test_request(header_request_, "MPI_Isend (devmem::mpi header)")) return false;
    if (!acknowledged_) {
      if (!test_request(ack_request_, "MPI_Irecv (devmem::mpi acknowledgement)")) return false;
      acknowledged_ = true;
      if (ack_.magic != kMagic) {
        throw InvalidArgument(fmt::format(
            "mpi::send to rank {} (tag {}): the acknowledgement is not devmem's (is the receiver "
            "using devmem::mpi::recv?)",
            destination_, tag_));
      }
      if (header_.status != kOk || ack_.status != kOk) {
        wait_for_copies();  // the slots stay alive until the copies into them are done
        if (header_.status != kOk) {
          throw InvalidArgument(fmt::format("mpi::send to rank {} (tag {}): cannot send {}",
                                            destination_, tag_, message_of(header_)));
        }
        if (ack_.status == kLocalError) {
          throw InvalidArgument(
              fmt::format("mpi::send to rank {} (tag {}): the receiver cannot receive: {}",
                          destination_, tag_, message_of(ack_)));
        }
        throw InvalidArgument(fmt::format(
            "mpi::send to rank {} (tag {}): shape/dtype mismatch: this rank sends {}, the receiver "
            "expects {}",
            destination_, tag_, format_wire(header_), format_wire(ack_)));
      }
    }
    if (plan_.chunks == 0) return true;
    return transport_ == Transport::staged ? advance_staged() : advance_direct(destination_, true);
  }

 private:
  void start_copy() {
    const std::int64_t k = copied_++;
    const auto s = static_cast<std::size_t>(k % 2);
    chunk_view(array_, plan_, k).copy_to_host(slot_view(slots_.at(s), array_, plan_, k), stream_);
    copy_events_.at(s) = stream_.record();
  }

  bool advance_staged() {
    // Post the next send once its chunk has reached the slot; refill a slot once its send is done.
    while (true) {
      bool moved = false;
      if (posted_ < copied_) {
        const auto s = static_cast<std::size_t>(posted_ % 2);
        {
          // Local device work: bounded, and much cheaper than polling it.
          if (auto& e = copy_events_.at(s); e.has_value()) e->synchronize();
          types_.at(s) = bytes_type(chunk_bytes(array_, plan_, posted_));
          check_mpi(MPI_Isend(slots_.at(s).data(), 1, types_.at(s).get(), destination_,
                              data_tag(comm_, header_.seq), comm_, &payload_requests_.at(s)),
                    "MPI_Isend (devmem::mpi payload)");
          ++posted_;
          moved = true;
        }
      }
      if (completed_ < posted_) {
        const auto s = static_cast<std::size_t>(completed_ % 2);
        if (test_request(payload_requests_.at(s), "MPI_Isend (devmem::mpi payload)")) {
          ++completed_;
          if (copied_ < plan_.chunks) start_copy();
          moved = true;
        }
      }
      if (completed_ == plan_.chunks) return true;
      if (!moved) return false;
    }
  }

  int destination_;
  bool acknowledged_ = false;
  std::int64_t completed_ = 0;
};

// ---- receive ------------------------------------------------------------------------------------

class RecvOperation final : public MessageOperation {
 public:
  RecvOperation(DeviceArray array, int source, int tag, MPI_Comm comm)
      : MessageOperation(std::move(array), tag, comm), source_(source) {
    check_peer_tag("mpi::recv", comm_, source_, true, tag_);
    transport_ = transport_for(array_);
    stream_ = transport_ == Transport::staged ? copy_stream(array_) : array_.stream();
    ready_ = array_.stream().record();
    check_mpi(MPI_Irecv(&header_, sizeof(Wire), MPI_BYTE, source_, tag_, comm_, &header_request_),
              "MPI_Irecv (devmem::mpi header)");
  }
  ~RecvOperation() override = default;
  RecvOperation(const RecvOperation&) = delete;
  RecvOperation& operator=(const RecvOperation&) = delete;
  RecvOperation(RecvOperation&&) = delete;
  RecvOperation& operator=(RecvOperation&&) = delete;

  bool advance() override {
    if (!have_header_) {
      MPI_Status status;
      if (!test_request(header_request_, "MPI_Irecv (devmem::mpi header)", &status)) return false;
      have_header_ = true;
      peer_ = status.MPI_SOURCE;
      acknowledge();
    }
    if (!test_request(ack_request_, "MPI_Isend (devmem::mpi acknowledgement)")) {
      if (failure_) return false;  // report the mismatch once the sender has the answer
    }
    if (failure_) throw InvalidArgument(*failure_);
    if (plan_.chunks == 0) return ack_request_ == MPI_REQUEST_NULL;
    const bool payload_done =
        transport_ == Transport::staged ? advance_staged() : advance_direct(peer_, false);
    return payload_done && ack_request_ == MPI_REQUEST_NULL;
  }

 private:
  void acknowledge() {
    ack_ = describe(array_);
    ack_.seq = header_.seq;
    const std::string where = fmt::format("mpi::recv from rank {} (tag {})", peer_, tag_);
    if (header_.magic != kMagic) {
      ack_.status = kLocalError;
      set_message(ack_, "the message is not a devmem::mpi header");
      failure_ = where +
                 ": the message is not a devmem::mpi header (is the sender using "
                 "devmem::mpi::send?)";
    } else if (header_.status != kOk) {
      ack_.status = kMismatch;
      failure_ = fmt::format("{}: the sender cannot send {}", where, message_of(header_));
    } else if (ack_.status != kOk) {
      failure_ = fmt::format("{}: cannot receive into {}", where, message_of(ack_));
    } else if (!same_array(header_, ack_)) {
      ack_.status = kMismatch;
      failure_ = fmt::format("{}: shape/dtype mismatch: the sender sends {}, this rank expects {}",
                             where, format_wire(header_), format_wire(ack_));
    } else if (const auto problem = destination_problem(array_)) {
      ack_.status = kLocalError;
      set_message(ack_, *problem);
      failure_ = fmt::format("{}: {}", where, *problem);
    } else if (header_.chunk_rows < 1) {
      ack_.status = kLocalError;
      set_message(ack_, "the header's chunk plan is invalid");
      failure_ = fmt::format("{}: the header's chunk plan ({} rows) is invalid", where,
                             header_.chunk_rows);
    }
    check_mpi(MPI_Isend(&ack_, sizeof(Wire), MPI_BYTE, peer_, ack_tag(comm_, header_.seq), comm_,
                        &ack_request_),
              "MPI_Isend (devmem::mpi acknowledgement)");
    if (failure_) return;
    plan_ = make_plan(array_, header_.chunk_rows);
    if (transport_ == Transport::staged && plan_.chunks > 0) make_slots();
  }

  bool advance_staged() {
    while (true) {
      bool moved = false;
      // Post a receive into a slot whose previous chunk has reached the device.
      if (posted_ < plan_.chunks && posted_ - copied_ < 2) {
        const auto s = static_cast<std::size_t>(posted_ % 2);
        if (auto& e = copy_events_.at(s); e.has_value()) e->synchronize();
        {
          types_.at(s) = bytes_type(chunk_bytes(array_, plan_, posted_));
          check_mpi(MPI_Irecv(slots_.at(s).data(), 1, types_.at(s).get(), peer_,
                              data_tag(comm_, header_.seq), comm_, &payload_requests_.at(s)),
                    "MPI_Irecv (devmem::mpi payload)");
          ++posted_;
          moved = true;
        }
      }
      // A received chunk goes to the device on the stream.
      if (copied_ < posted_) {
        const auto s = static_cast<std::size_t>(copied_ % 2);
        if (test_request(payload_requests_.at(s), "MPI_Irecv (devmem::mpi payload)")) {
          chunk_view(array_, plan_, copied_)
              .copy_to_device(slot_view(slots_.at(s), array_, plan_, copied_), stream_);
          copy_events_.at(s) = stream_.record();
          ++copied_;
          moved = true;
        }
      }
      if (copied_ == plan_.chunks) {
        wait_for_copies();
        return true;
      }
      if (!moved) return false;
    }
  }

  int source_;
  int peer_ = MPI_PROC_NULL;
  std::optional<std::string> failure_;
  bool have_header_ = false;
};

}  // namespace

Request isend(const DeviceArray& array, int destination, int tag, MPI_Comm comm) {
  auto op = std::make_shared<SendOperation>(array, destination, tag, comm);
  start(op);
  return detail::Operation::make_request(std::move(op));
}

Request irecv(const DeviceArray& array, int source, int tag, MPI_Comm comm) {
  auto op = std::make_shared<RecvOperation>(array, source, tag, comm);
  start(op);
  return detail::Operation::make_request(std::move(op));
}

void send(const DeviceArray& array, int destination, int tag, MPI_Comm comm) {
  isend(array, destination, tag, comm).wait();
}

void recv(const DeviceArray& array, int source, int tag, MPI_Comm comm) {
  irecv(array, source, tag, comm).wait();
}

}  // namespace devmem::mpi

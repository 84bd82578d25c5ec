// devmem::mpi's eager fast path (declared in mpi/eager.hpp, which says what it is for): the send
// and receive operations of small messages whose copies finish within the call.
#include "eager.hpp"

#include "message.hpp"
#include "operation_pool.hpp"
#include "protocol.hpp"

#include <devmem/backend.hpp>
#include <devmem/context.hpp>
#include <devmem/layout.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

namespace devmem::mpi::detail {

namespace {

// The bytes of a C-contiguous destination from a message buffer: a device array's through its
// backend on `stream` (the default stream: complete on return), a host array's (no context) at
// once.
void unpack_contiguous(Context* context, void* data, const std::byte* payload, std::int64_t nbytes,
                       NativeStream stream) {
  const auto bytes = static_cast<std::size_t>(nbytes);
  if (bytes == 0) return;
  if (context != nullptr) {
    context->backend().copy(context->device(), data, payload, bytes, CopyKind::HostToDevice,
                            stream);
  } else {
    std::memcpy(data, payload, bytes);
  }
}

// ---- send ---------------------------------------------------------------------------------------

// What a plain eager message needs of its array, worked out once per call (Layout::size and the
// contiguity check are calls into libdevmem, which the general path made several times each).
struct EagerFacts {
  std::int64_t size = 0;
  std::int64_t nbytes = 0;
  bool contiguous = false;
};

// Layout::size() and Layout::is_c_contiguous() in one pass here instead of two calls into
// libdevmem per message (the same rules: a zero axis makes the array empty, and contiguous when it
// has a stride per axis; size-1 axes are ignored; every other axis has the stride of the axes
// inside it, without overflow).
struct LayoutFacts {
  std::int64_t size = 1;
  bool c_contiguous = true;
};
inline LayoutFacts layout_facts(const Layout& layout) noexcept {
  const std::size_t n = layout.shape.size();
  const std::int64_t* shape = layout.shape.data();
  const bool have_strides = layout.strides.size() == n;
  LayoutFacts facts{1, have_strides};
  std::int64_t expected = layout.itemsize;
  bool overflowed = false;  // only a problem when another axis longer than 1 follows
  for (std::size_t i = n; i-- > 0;) {
    const std::int64_t d = shape[i];
    if (d == 0) return {0, have_strides};
    // Wrapping (no undefined overflow before a zero axis further out is seen); a valid layout's
    // product fits.
    static_cast<void>(__builtin_mul_overflow(facts.size, d, &facts.size));
    if (d == 1 || !facts.c_contiguous) continue;
    if (overflowed || layout.strides[i] != expected) {
      facts.c_contiguous = false;
      continue;
    }
    overflowed = __builtin_mul_overflow(expected, d, &expected);
  }
  return facts;
}

// The facts of a send that takes the eager path: at most eager_limit_bytes and kMaxWireDims axes,
// a device array on the default stream (its copy is complete on return); nullopt otherwise.
template <class Array>
std::optional<EagerFacts> send_facts(const Array& array) {
  const Layout& layout = array.layout();
  if (layout.ndim() > kMaxWireDims) return std::nullopt;
  if constexpr (std::is_same_v<Array, DeviceArray>) {
    if (!array.stream().is_default()) return std::nullopt;
  }
  const LayoutFacts facts = layout_facts(layout);
  const std::int64_t nbytes = facts.size * array.itemsize();
  if (nbytes > eager_limit_bytes) return std::nullopt;
  return EagerFacts{facts.size, nbytes, nbytes > 0 && facts.c_contiguous};
}

// A receive's: also C-contiguous, with at most kEagerRecvMaxDims axes.
template <class Array>
std::optional<EagerFacts> recv_facts(const Array& array) {
  const Layout& layout = array.layout();
  if (layout.ndim() > kEagerRecvMaxDims) return std::nullopt;
  if constexpr (std::is_same_v<Array, DeviceArray>) {
    if (!array.stream().is_default()) return std::nullopt;
  }
  const LayoutFacts facts = layout_facts(layout);
  const std::int64_t nbytes = facts.size * array.itemsize();
  if (nbytes > eager_limit_bytes || !facts.c_contiguous) return std::nullopt;
  return EagerFacts{facts.size, nbytes, true};
}

// The elements of `array` in C order at `destination`: a C-contiguous array as one copy (a device
// array's through its backend on the default stream: complete on return).
void pack_eager(const DeviceArray& array, const EagerFacts& facts, std::byte* destination) {
  if (facts.nbytes == 0) return;
  if (facts.contiguous) {
    if (Context* const context = array.memory_context()) {
      context->backend().copy(context->device(), destination, array.data(),
                              static_cast<std::size_t>(facts.nbytes), CopyKind::DeviceToHost,
                              array.stream().native_handle());
      return;
    }
  }
  pack_elements(array, destination, array.stream());
}

void pack_eager(const HostArray& array, const EagerFacts& facts, std::byte* destination) {
  if (facts.nbytes == 0) return;
  if (facts.contiguous) {
    std::memcpy(destination, array.data(), static_cast<std::size_t>(facts.nbytes));
    return;
  }
  pack_elements(array, destination);
}

// Header and payload packed at construction, while the caller's array is borrowed; then only the
// buffer and the MPI request are left to wait for.
class EagerSend final : public Operation {
 public:
  template <class Array>
  EagerSend(ThreadCaches& caches, const Array& array, const EagerFacts& facts, int destination,
            int tag, MPI_Comm comm)
      : buffer_(EagerBuffer::take(caches)), peer_(destination), tag_(tag) {
    status = Status{peer_, tag_, facts.size, facts.nbytes};
    const int ndim = array.ndim();
    write_eager_header(buffer_, typestr_of(caches, array.dtype()), array.shape(), facts.nbytes);
    pack_eager(array, facts, buffer_.payload(ndim));
    const auto count = header_bytes(ndim) + static_cast<std::size_t>(facts.nbytes);
    check_mpi(
        MPI_Isend(buffer_.data(), static_cast<int>(count), MPI_BYTE, peer_, tag_, comm, &request_),
        "MPI_Isend (devmem::mpi message)");
  }
  ~EagerSend() override = default;
  EagerSend(const EagerSend&) = delete;
  EagerSend& operator=(const EagerSend&) = delete;
  EagerSend(EagerSend&&) = delete;
  EagerSend& operator=(EagerSend&&) = delete;

  bool advance() override { return test_request(request_, "MPI_Isend (devmem::mpi message)"); }
  bool abandon() noexcept override { return cancel_request(request_); }
  [[nodiscard]] std::string describe() const override {
    return fmt::format("mpi::send to rank {} (tag {}), {}: sending the message (eager)", peer_,
                       tag_, describe_header(buffer_));
  }

 private:
  EagerBuffer buffer_;
  int peer_;
  int tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// ---- receive ------------------------------------------------------------------------------------

// Keeps the destination's memory alive (its owner, which keeps its context) and what unpacking and
// the messages need; the message start goes into a pooled buffer, as on the general path.
class EagerRecv final : public Operation {
 public:
  EagerRecv(ThreadCaches& caches, const DeviceArray& array, const EagerFacts& facts, int source,
            int tag, MPI_Comm comm)
      : EagerRecv(caches, array, facts, source, tag, comm, array.memory_context(),
                  array.stream().native_handle()) {}
  EagerRecv(ThreadCaches& caches, const HostArray& array, const EagerFacts& facts, int source,
            int tag, MPI_Comm comm)
      : EagerRecv(caches, array, facts, source, tag, comm, nullptr, nullptr) {}
  ~EagerRecv() override = default;
  EagerRecv(const EagerRecv&) = delete;
  EagerRecv& operator=(const EagerRecv&) = delete;
  EagerRecv(EagerRecv&&) = delete;
  EagerRecv& operator=(EagerRecv&&) = delete;

  [[nodiscard]] bool stashed() const noexcept { return stashed_; }

  bool advance() override {
    if (!matched_) {
      if (!stashed_) {
        MPI_Status received;
        if (!test_request(request_, "MPI_Irecv (devmem::mpi message)", &received)) return false;
        source_ = received.MPI_SOURCE;
        tag_ = received.MPI_TAG;
        check_mpi(MPI_Get_count(&received, MPI_BYTE, &count_), "MPI_Get_count");
      }
      matched_ = true;
      status.source = source_;
      status.tag = tag_;
      on_start();
    }
    if (!failure_) return true;
    if (!test_request(ack_request_, "MPI_Isend (devmem::mpi acknowledgement)")) return false;
    throw InvalidArgument(*failure_);
  }

  bool abandon() noexcept override {
    bool pending = cancel_request(request_);
    pending = cancel_request(ack_request_) || pending;
    return pending;
  }

  [[nodiscard]] std::string describe() const override {
    return fmt::format("mpi::recv from rank {} (tag {}), {}: {}", source_, tag_, description(),
                       state_);
  }

 private:
  template <class Array>
  EagerRecv(ThreadCaches& caches, const Array& array, const EagerFacts& facts, int source, int tag,
            MPI_Comm comm, Context* context, NativeStream stream)
      : comm_(comm),
        source_(source),
        tag_(tag),
        owner_(array.owner()),
        data_(array.data()),
        nbytes_(facts.nbytes),
        context_(context),
        stream_(stream),
        typestr_(&typestr_of(caches, array.dtype())),
        ndim_(array.ndim()),
        buffer_(stash_in_use() ? EagerBuffer() : EagerBuffer::take(caches)) {
    const auto& extents = array.shape();
    std::copy(extents.begin(), extents.end(), shape_.begin());
    status = Status{source, tag, facts.size, facts.nbytes};
    if (buffer_.empty()) {
      // The stash check and the receive's posting are one step for probe(): a message it stashed
      // in between would be received out of order (as on the general path).
      const auto lock = progress_lock();
      if (auto stashed = take_stashed(comm, source, tag)) {
        buffer_ = std::move(stashed->buffer);
        count_ = stashed->count;
        source_ = stashed->source;
        tag_ = stashed->tag;
        stashed_ = true;
        return;
      }
      buffer_ = EagerBuffer::take(caches);
      post(source, tag);
      return;
    }
    post(source, tag);
  }

  void post(int source, int tag) {
    check_mpi(MPI_Irecv(buffer_.data(), static_cast<int>(kEagerCapacity), MPI_BYTE, source, tag,
                        comm_, &request_),
              "MPI_Irecv (devmem::mpi message)");
  }

  [[nodiscard]] std::span<const std::int64_t> shape() const noexcept {
    return {shape_.data(), static_cast<std::size_t>(ndim_)};
  }

  // "float64 (4, 5)" (a dtype's name follows from its typestr).
  [[nodiscard]] std::string description() const {
    std::string name = *typestr_;
    try {
      name = DType::from_typestr(*typestr_).name();
    } catch (const Error&) {  // not expected: the typestr is DType::typestr()'s
    }
    return fmt::format("{} {}", name, layout::format_tuple(shape()));
  }

  // The message is the eager message of exactly this array's dtype and shape, as an eager sender
  // writes it: then header_problem() finds nothing and header_matches() holds, which this
  // compares directly (those two cost about a tenth of a small message's receive). Anything else
  // takes them, and their messages.
  [[nodiscard]] bool exact_eager_message() const noexcept {
    if (static_cast<std::size_t>(count_) !=
        header_bytes(ndim_) + static_cast<std::size_t>(nbytes_)) {
      return false;
    }
    const MessageHeader& h = buffer_.header();
    const std::string& typestr = *typestr_;
    if (h.magic != kMessageMagic || h.kind != MessageKind::Eager || h.sender_error != 0 ||
        h.ndim != ndim_ || h.payload_bytes != nbytes_ || typestr.size() >= h.typestr.size() ||
        h.typestr.at(typestr.size()) != '\0') {
      return false;
    }
    // Loops rather than memcmp: a few bytes each, fewer instructions than the library call.
    for (std::size_t i = 0; i < typestr.size(); ++i) {
      if (h.typestr[i] != typestr[i]) return false;
    }
    // The receiver's shape has no negative axis: equal, the message's has none either.
    const std::int64_t* sent = buffer_.shape();
    for (std::size_t d = 0; d < static_cast<std::size_t>(ndim_); ++d) {
      if (sent[d] != shape_[d]) return false;
    }
    return true;
  }

  void on_start() {
    if (exact_eager_message()) {
      state_ = "copying the message into the array";
      unpack(buffer_.payload(ndim_));
      return;
    }
    const auto where = [this] {
      return fmt::format("mpi::recv from rank {} (tag {})", source_, tag_);
    };
    if (const auto problem = header_problem(buffer_, count_)) {
      throw InvalidArgument(fmt::format("{}: received {}", where(), *problem));
    }
    const MessageHeader& h = buffer_.header();
    if (h.kind == MessageKind::Eager) {
      if (!header_matches(buffer_, *typestr_, shape())) {
        throw InvalidArgument(fmt::format(
            "{}: shape/dtype mismatch: the sender sends {}, this rank expects {} (the sender was "
            "not told: messages of at most {} bytes are eager, and only their receiver checks "
            "them)",
            where(), describe_header(buffer_), description(), eager_limit_bytes));
      }
      state_ = "copying the message into the array";
      unpack(buffer_.payload(ndim_));
      return;
    }
    // A handshake message: the sender's array is larger than this one, it is a persistent pair's
    // first round, or the sender's own error. The sender waits for an answer: refuse it.
    HandshakeAnswer answer = answer_handshake(
        buffer_, where(), *typestr_, shape(), [this] { return description(); }, false,
        std::nullopt);
    if (!answer.failure) {
      // Not sent by devmem::mpi, which sends an array of this dtype and shape eagerly.
      answer.ack.status = kLocalError;
      set_message(answer.ack, "the receiver expected an eager message");
      answer.failure = fmt::format("{}: received a handshake message for {}, which is sent eagerly",
                                   where(), description());
    }
    failure_ = std::move(answer.failure);
    ack_ = std::make_unique<Wire>(answer.ack);
    state_ = "sending its refusal to the sender";
    const Channel to_sender = channel(comm_, source_);
    check_mpi(MPI_Isend(ack_.get(), sizeof(Wire), MPI_BYTE, to_sender.peer,
                        acknowledgement_tag(to_sender, h.seq), to_sender.comm, &ack_request_),
              "MPI_Isend (devmem::mpi acknowledgement)");
  }

  void unpack(const std::byte* payload) const {
    unpack_contiguous(context_, data_, payload, nbytes_, stream_);
  }

  MPI_Comm comm_;
  int source_;  // the requested source and tag until matched, then the sender's
  int tag_;
  std::shared_ptr<const void> owner_;  // the destination's memory
  void* data_;
  std::int64_t nbytes_;
  Context* context_;            // null for host arrays; kept alive by owner_
  NativeStream stream_;         // the default stream (recv_facts)
  const std::string* typestr_;  // in typestr_of's cache
  int ndim_;
  EagerBuffer buffer_;
  std::array<std::int64_t, kEagerRecvMaxDims> shape_{};
  const char* state_ = "waiting for the sender's message";
  MPI_Request request_ = MPI_REQUEST_NULL;
  int count_ = 0;
  bool stashed_ = false;
  bool matched_ = false;
  std::optional<std::string> failure_;
  std::unique_ptr<Wire> ack_;  // a refusal only (rare): not part of every receive
  MPI_Request ack_request_ = MPI_REQUEST_NULL;
};

// ---- later rounds of a persistent pair ----------------------------------------------------------

// Packed at construction, as EagerSend; no header (the first round checked dtype and shape).
class EagerRoundSend final : public Operation {
 public:
  EagerRoundSend(const DeviceArray& array, const RoundEnvelope& envelope)
      : buffer_(EagerBuffer::take()), peer_(envelope.peer), tag_(envelope.tag) {
    status = Status{peer_, tag_, envelope.elements, envelope.bytes};
    if (envelope.contiguous && envelope.context != nullptr) {
      if (envelope.bytes > 0) {
        envelope.context->backend().copy(envelope.context->device(), buffer_.data(), array.data(),
                                         static_cast<std::size_t>(envelope.bytes),
                                         CopyKind::DeviceToHost, array.stream().native_handle());
      }
    } else {
      pack_elements(array, buffer_.data(), array.stream());
    }
    check_mpi(
        MPI_Isend(buffer_.data(), static_cast<int>(envelope.bytes), MPI_BYTE, envelope.channel.peer,
                  envelope.payload_tag, envelope.channel.comm, &request_),
        "MPI_Isend (devmem::mpi payload)");
  }
  ~EagerRoundSend() override = default;
  EagerRoundSend(const EagerRoundSend&) = delete;
  EagerRoundSend& operator=(const EagerRoundSend&) = delete;
  EagerRoundSend(EagerRoundSend&&) = delete;
  EagerRoundSend& operator=(EagerRoundSend&&) = delete;

  bool advance() override { return test_request(request_, "MPI_Isend (devmem::mpi payload)"); }
  bool abandon() noexcept override { return cancel_request(request_); }
  [[nodiscard]] std::string describe() const override {
    return fmt::format("mpi::send_init to rank {} (tag {}): sending a round's payload (eager)",
                       peer_, tag_);
  }

 private:
  EagerBuffer buffer_;
  int peer_;
  int tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// Keeps the destination's memory alive (a cancelled round may outlive its PersistentRequest) and
// unpacks once the payload has arrived.
class EagerRoundRecv final : public Operation {
 public:
  EagerRoundRecv(const DeviceArray& array, const RoundEnvelope& envelope)
      : owner_(array.owner()),
        context_(array.context()),
        data_(array.data()),
        nbytes_(envelope.bytes),
        stream_(array.stream().native_handle()),
        buffer_(EagerBuffer::take()),
        peer_(envelope.peer),
        tag_(envelope.tag) {
    status = Status{peer_, tag_, envelope.elements, nbytes_};
    check_mpi(MPI_Irecv(buffer_.data(), static_cast<int>(nbytes_), MPI_BYTE, envelope.channel.peer,
                        envelope.payload_tag, envelope.channel.comm, &request_),
              "MPI_Irecv (devmem::mpi payload)");
  }
  ~EagerRoundRecv() override = default;
  EagerRoundRecv(const EagerRoundRecv&) = delete;
  EagerRoundRecv& operator=(const EagerRoundRecv&) = delete;
  EagerRoundRecv(EagerRoundRecv&&) = delete;
  EagerRoundRecv& operator=(EagerRoundRecv&&) = delete;

  bool advance() override {
    if (!test_request(request_, "MPI_Irecv (devmem::mpi payload)")) return false;
    unpack_contiguous(context_.get(), data_, buffer_.data(), nbytes_, stream_);
    return true;
  }
  bool abandon() noexcept override { return cancel_request(request_); }
  [[nodiscard]] std::string describe() const override {
    return fmt::format(
        "mpi::recv_init from rank {} (tag {}): waiting for a round's payload (eager)", peer_, tag_);
  }

 private:
  std::shared_ptr<const void> owner_;
  std::shared_ptr<Context> context_;
  void* data_;
  std::int64_t nbytes_;
  NativeStream stream_;
  EagerBuffer buffer_;
  int peer_;
  int tag_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

template <class Op, class Array>
std::shared_ptr<Operation> make_pooled(ThreadCaches& caches, const Array& array,
                                       const EagerFacts& facts, int peer, int tag, MPI_Comm comm) {
  return std::allocate_shared<Op>(PooledAllocator<Op>{}, caches, array, facts, peer, tag, comm);
}

}  // namespace

std::shared_ptr<Operation> make_eager_send(ThreadCaches& caches, const DeviceArray& array,
                                           int destination, int tag, MPI_Comm comm) {
  const auto facts = send_facts(array);
  if (!facts) return nullptr;
  return make_pooled<EagerSend>(caches, array, *facts, destination, tag, comm);
}

std::shared_ptr<Operation> make_eager_send(ThreadCaches& caches, const HostArray& array,
                                           int destination, int tag, MPI_Comm comm) {
  const auto facts = send_facts(array);
  if (!facts) return nullptr;
  return make_pooled<EagerSend>(caches, array, *facts, destination, tag, comm);
}

std::shared_ptr<Operation> make_eager_recv(ThreadCaches& caches, const DeviceArray& array,
                                           int source, int tag, MPI_Comm comm) {
  const auto facts = recv_facts(array);
  if (!facts) return nullptr;
  return make_pooled<EagerRecv>(caches, array, *facts, source, tag, comm);
}

std::shared_ptr<Operation> make_eager_recv(ThreadCaches& caches, const HostArray& array, int source,
                                           int tag, MPI_Comm comm) {
  const auto facts = recv_facts(array);
  if (!facts) return nullptr;
  return make_pooled<EagerRecv>(caches, array, *facts, source, tag, comm);
}

bool eager_round_send_fits(const DeviceArray& array) {
  return array.nbytes() <= eager_limit_bytes && array.stream().is_default();
}

bool eager_round_recv_fits(const DeviceArray& array) {
  return eager_round_send_fits(array) && array.is_c_contiguous();
}

RoundEnvelope round_envelope(const DeviceArray& array, int peer, int tag, MPI_Comm comm,
                             std::int64_t seq) {
  const Channel to_peer = channel(comm, peer);
  RoundEnvelope envelope{peer, tag, to_peer, payload_tag(to_peer, seq)};
  envelope.elements = array.size();
  envelope.bytes = array.nbytes();
  envelope.contiguous = array.is_c_contiguous();
  envelope.context = array.context().get();
  return envelope;
}

std::shared_ptr<Operation> make_eager_round_send(const DeviceArray& array,
                                                 const RoundEnvelope& envelope) {
  return std::allocate_shared<EagerRoundSend>(PooledAllocator<EagerRoundSend>{}, array, envelope);
}

std::shared_ptr<Operation> make_eager_round_recv(const DeviceArray& array,
                                                 const RoundEnvelope& envelope) {
  return std::allocate_shared<EagerRoundRecv>(PooledAllocator<EagerRoundRecv>{}, array, envelope);
}

void start_eager_recv(const std::shared_ptr<Operation>& op) {
  // A message that has not arrived is only found by MPI's progress, which the first wait or test
  // runs anyway: testing now would run it once more per receive.
  if (static_cast<const EagerRecv&>(*op).stashed()) {
    launch(op);
  } else {
    start_borrowed(*op);  // its Request is its only owner
  }
}

}  // namespace devmem::mpi::detail

// devmem::mpi: the wire protocol, the transports and the progress engine. docs/scaling-out.md#mpi
// describes the protocol: a header (dtype, shape, sequence number, chunk plan) on the user's tag,
// an acknowledgement from the receiver, then the payload in chunks, on tags from the upper half of
// the tag space (derived from the sender's sequence number, so that concurrent messages between
// the same ranks never match each other's payload).
#include <devmem/context.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace devmem::mpi {

MpiError::MpiError(const std::string& message, int code) : Error(message), code_(code) {}
MpiError::~MpiError() = default;

namespace {

// ---- settings -----------------------------------------------------------------------------------

std::mutex g_settings_mutex;
std::optional<Transport> g_transport;
std::optional<std::int64_t> g_chunk_bytes;
constexpr std::int64_t kDefaultChunkBytes = std::int64_t{1} << 20;

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  std::array<char, MPI_MAX_ERROR_STRING> text{};
  int length = 0;
  if (MPI_Error_string(rc, text.data(), &length) != MPI_SUCCESS) length = 0;
  throw MpiError(fmt::format("{} failed: {} (MPI error {})", call,
                             std::string_view(text.data(), static_cast<std::size_t>(length)), rc),
                 rc);
}

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
  std::array<std::int64_t, kMaxWireDims> shape{};
  std::array<char, 200> message{};
};

void set_message(Wire& wire, std::string_view text) {
  const std::size_t n = std::min(text.size(), wire.message.size() - 1);
  std::memcpy(wire.message.data(), text.data(), n);
  wire.message.at(n) = '\0';
}

std::string message_of(const Wire& wire) {
  return {wire.message.data(), strnlen(wire.message.data(), wire.message.size())};
}

Wire describe(const DeviceArray& array) {
  Wire wire;
  const std::string typestr = array.dtype().typestr();
  std::memcpy(wire.typestr.data(), typestr.data(),
              std::min(typestr.size(), wire.typestr.size() - 1));
  wire.ndim = array.ndim();
  if (array.ndim() > kMaxWireDims) {
    wire.status = kLocalError;
    set_message(wire, fmt::format("an array of {} dimensions (at most {} are sent)", array.ndim(),
                                  kMaxWireDims));
    return wire;
  }
  std::copy(array.shape().begin(), array.shape().end(), wire.shape.begin());
  return wire;
}

// "float64 (4, 5)".
std::string format_wire(const Wire& wire) {
  const std::string typestr(wire.typestr.data(), strnlen(wire.typestr.data(), wire.typestr.size()));
  std::string dtype = typestr;
  try {
    dtype = DType::from_typestr(typestr).name();
  } catch (const Error&) {
    // A typestr devmem cannot parse is shown as it came.
  }
  const int ndim = std::clamp(wire.ndim, 0, kMaxWireDims);
  return fmt::format(
      "{} {}", dtype,
      layout::format_tuple(std::span(wire.shape.data(), static_cast<std::size_t>(ndim))));
}

bool same_array(const Wire& a, const Wire& b) {
  return a.ndim == b.ndim && a.typestr == b.typestr && a.shape == b.shape;
}

// ---- tags ---------------------------------------------------------------------------------------

int tag_upper_bound(MPI_Comm comm) {
  void* value = nullptr;
  int flag = 0;
  check_mpi(MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  return flag != 0 ? *static_cast<int*>(value) : 32767;
}

// User tags: [0, tag_ub / 2]; devmem's acknowledgements and payloads: the upper half, two tags per
// sequence number.
int max_user_tag(MPI_Comm comm) {
  return tag_upper_bound(comm) / 2;
}
int ack_tag(MPI_Comm comm, std::int64_t seq) {
  const int base = max_user_tag(comm) + 1;
  const std::int64_t slots = (static_cast<std::int64_t>(tag_upper_bound(comm)) - base + 1) / 2;
  return base + static_cast<int>(2 * (seq % slots));
}
int data_tag(MPI_Comm comm, std::int64_t seq) {
  return ack_tag(comm, seq) + 1;
}

std::atomic<std::int64_t> g_next_seq{0};

void check_peer_tag(const char* operation, MPI_Comm comm, int peer, bool any_source_ok, int tag) {
  if (comm == MPI_COMM_NULL)
    throw InvalidArgument(fmt::format("{}: the communicator is MPI_COMM_NULL", operation));
  int size = 0;
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (!(any_source_ok && peer == MPI_ANY_SOURCE) && (peer < 0 || peer >= size)) {
    throw InvalidArgument(
        fmt::format("{}: rank {} is not in the communicator (size {})", operation, peer, size));
  }
  const int max_tag = max_user_tag(comm);
  if (tag < 0 || tag > max_tag) {
    throw InvalidArgument(fmt::format(
        "{}: tag {} is outside [0, {}] (devmem::mpi keeps the upper half of MPI_TAG_UB for its "
        "acknowledgements and payloads; MPI_ANY_TAG is not accepted)",
        operation, tag, max_tag));
  }
}

// ---- MPI datatypes ------------------------------------------------------------------------------

// An owned, committed MPI datatype.
class Datatype {
 public:
  Datatype() = default;
  explicit Datatype(MPI_Datatype type) : type_(type) {}
  Datatype(Datatype&& other) noexcept : type_(std::exchange(other.type_, MPI_DATATYPE_NULL)) {}
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

Datatype committed(MPI_Datatype type) {
  Datatype owned(type);
  MPI_Datatype handle = type;
  check_mpi(MPI_Type_commit(&handle), "MPI_Type_commit");
  return owned;
}

int checked_int(std::int64_t value, const char* what) {
  if (value > INT_MAX) {
    throw InvalidArgument(fmt::format("devmem::mpi: {} of {} exceeds MPI's int count limit {}",
                                      what, value, INT_MAX));
  }
  return static_cast<int>(value);
}

// The elements of `view` (shape and byte strides from element 0) as nested hvectors of `element`.
Datatype strided_type(const Layout& layout, MPI_Datatype element) {
  MPI_Datatype current = element;
  std::vector<Datatype> owned;
  for (int d = layout.ndim() - 1; d >= 0; --d) {
    const auto axis = static_cast<std::size_t>(d);
    MPI_Datatype next = MPI_DATATYPE_NULL;
    check_mpi(MPI_Type_create_hvector(checked_int(layout.shape[axis], "an axis length"), 1,
                                      static_cast<MPI_Aint>(layout.strides[axis]), current, &next),
              "MPI_Type_create_hvector");
    owned.emplace_back(next);
    current = next;
  }
  MPI_Datatype result = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_dup(current, &result), "MPI_Type_dup");
  return committed(result);
}

Datatype bytes_type(std::int64_t bytes) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_contiguous(checked_int(bytes, "a chunk's byte count"), MPI_BYTE, &type),
            "MPI_Type_contiguous");
  return committed(type);
}

// `type` with its extent set to `extent` (allgather: where the next rank's block starts).
Datatype resized_type(const Datatype& type, std::int64_t extent) {
  MPI_Datatype resized = MPI_DATATYPE_NULL;
  check_mpi(MPI_Type_create_resized(type.get(), 0, static_cast<MPI_Aint>(extent), &resized),
            "MPI_Type_create_resized");
  return committed(resized);
}

// An array's elements as raw bytes (point-to-point, bcast, allgather).
Datatype byte_elements_type(const DeviceArray& view) {
  const Datatype element = bytes_type(view.itemsize());
  return strided_type(view.layout(), element.get());
}

// ---- chunk plans --------------------------------------------------------------------------------

// Chunks are whole slices of the first axis (the whole array for 0-d arrays), so that every chunk
// of a strided view is itself a view and its packed bytes follow the previous chunk's.
struct Plan {
  std::int64_t rows = 0;            // length of the first axis (1 for 0-d)
  std::int64_t rows_per_chunk = 1;  // >= 1
  std::int64_t chunks = 0;          // 0 for an empty array
};

std::int64_t rows_of(const DeviceArray& array) {
  return array.ndim() == 0 ? 1 : array.shape()[0];
}

Plan make_plan(const DeviceArray& array, std::int64_t rows_per_chunk) {
  Plan plan;
  plan.rows = rows_of(array);
  plan.rows_per_chunk =
      std::clamp<std::int64_t>(rows_per_chunk, 1, std::max<std::int64_t>(plan.rows, 1));
  plan.chunks = array.size() == 0 ? 0 : (plan.rows + plan.rows_per_chunk - 1) / plan.rows_per_chunk;
  return plan;
}

// The rows per chunk this rank would choose for `array`.
std::int64_t preferred_rows(const DeviceArray& array, Transport transport) {
  const std::int64_t rows = std::max<std::int64_t>(rows_of(array), 1);
  if (transport == Transport::device_direct || array.size() == 0) return rows;
  const std::int64_t row_bytes = std::max<std::int64_t>(array.nbytes() / rows, 1);
  return std::clamp<std::int64_t>(staging_chunk_bytes() / row_bytes, 1, rows);
}

std::pair<std::int64_t, std::int64_t> chunk_rows(const Plan& plan, std::int64_t k) {
  const std::int64_t begin = k * plan.rows_per_chunk;
  return {begin, std::min(plan.rows, begin + plan.rows_per_chunk)};
}

template <class Array>
Array chunk_view(const Array& array, const Plan& plan, std::int64_t k, int axis = 0) {
  if (array.ndim() == axis) return array;  // 0-d payload: one chunk, the whole array
  const auto [begin, end] = chunk_rows(plan, k);
  return array.slice(axis, begin, end);
}

// The packed bytes of chunk k.
std::int64_t chunk_bytes(const DeviceArray& array, const Plan& plan, std::int64_t k) {
  const auto [begin, end] = chunk_rows(plan, k);
  const std::int64_t rows = array.ndim() == 0 ? 1 : end - begin;
  return rows * (array.nbytes() / std::max<std::int64_t>(plan.rows, 1));
}

// The part of a staging slot that holds chunk k.
HostArray slot_view(const HostArray& slot, const DeviceArray& array, const Plan& plan,
                    std::int64_t k) {
  if (array.ndim() == 0) return slot;
  const auto [begin, end] = chunk_rows(plan, k);
  return slot.slice(0, 0, end - begin);
}

// Page-locked staging buffers are reused: allocating and page-locking memory costs far more than a
// small message's transfer. A buffer goes back to the cache when the last view of it is gone.
std::mutex g_staging_mutex;
std::vector<HostArray> g_staging_cache;  // free buffers (1-d uint8)
constexpr std::size_t kMaxCachedBuffers = 8;

struct StagingReturn {
  HostArray buffer;
  StagingReturn(const StagingReturn&) = delete;
  StagingReturn& operator=(const StagingReturn&) = delete;
  StagingReturn(StagingReturn&&) = delete;
  StagingReturn& operator=(StagingReturn&&) = delete;
  explicit StagingReturn(HostArray b) : buffer(std::move(b)) {}
  ~StagingReturn() {
    const std::lock_guard lock(g_staging_mutex);
    // The smallest buffer goes when the cache is full: large transfers keep their buffers.
    g_staging_cache.push_back(std::move(buffer));
    if (g_staging_cache.size() > kMaxCachedBuffers) {
      g_staging_cache.erase(std::min_element(
          g_staging_cache.begin(), g_staging_cache.end(),
          [](const HostArray& a, const HostArray& b) { return a.nbytes() < b.nbytes(); }));
    }
  }
};

// A C-contiguous page-locked array of `shape` and `dtype` from the cache (or newly allocated).
HostArray staging_array(Shape shape, const DType& dtype) {
  const std::int64_t bytes =
      std::max<std::int64_t>(layout::checked_nbytes(shape, dtype.itemsize()), 1);
  HostArray buffer;
  {
    const std::lock_guard lock(g_staging_mutex);
    auto best = g_staging_cache.end();
    for (auto it = g_staging_cache.begin(); it != g_staging_cache.end(); ++it) {
      if (it->nbytes() >= bytes && (best == g_staging_cache.end() || it->nbytes() < best->nbytes()))
        best = it;
    }
    if (best != g_staging_cache.end()) {
      buffer = std::move(*best);
      g_staging_cache.erase(best);
    }
  }
  if (buffer.nbytes() < bytes) buffer = pinned_array(Shape{bytes}, DType('u', 1));
  void* data = buffer.data();
  auto owner = std::make_shared<StagingReturn>(std::move(buffer));
  return HostArray::view(data, std::move(shape), dtype, {}, std::move(owner));
}

// A page-locked slot holding one chunk (C-contiguous: the payload's packed bytes).
HostArray staging_slot(const DeviceArray& array, const Plan& plan, std::int64_t leading = 0) {
  Shape shape = array.shape();
  if (!shape.empty()) shape[0] = plan.rows_per_chunk;
  if (leading > 0) shape.insert(shape.begin(), leading);
  return staging_array(std::move(shape), array.dtype());
}

// ---- streams ------------------------------------------------------------------------------------

// Staging copies go on the array's stream: after the work already enqueued there. On the default
// stream they are synchronous, which still overlaps the transfers: MPI moves the previous chunk
// (a non-blocking request) while the copy of the next one runs.
Stream copy_stream(const DeviceArray& array) {
  return array.stream();
}

// Receiving into an array whose elements overlap (a broadcast axis) would write an element twice.
std::optional<std::string> destination_problem(const DeviceArray& array) {
  for (int d = 0; d < array.ndim(); ++d) {
    const auto axis = static_cast<std::size_t>(d);
    if (array.shape()[axis] > 1 && array.strides()[axis] == 0) {
      return fmt::format(
          "the destination's axis {} has stride 0 (a broadcast view; its elements "
          "overlap)",
          d);
    }
  }
  return std::nullopt;
}

}  // namespace

// ---- settings (public) --------------------------------------------------------------------------

const char* to_string(Transport transport) noexcept {
  switch (transport) {
    case Transport::automatic:
      return "automatic";
    case Transport::device_direct:
      return "device_direct";
    case Transport::staged:
      return "staged";
  }
  return "unknown";
}

Transport parse_transport(std::string_view name) {
  for (const Transport t : {Transport::automatic, Transport::device_direct, Transport::staged}) {
    if (name == to_string(t)) return t;
  }
  throw InvalidArgument(fmt::format(
      "devmem::mpi: unknown transport '{}' (known: automatic, device_direct, staged)", name));
}

Transport transport() {
  const std::lock_guard lock(g_settings_mutex);
  if (!g_transport) {
    const char* env =
        std::getenv("DEVMEM_MPI_TRANSPORT");  // NOLINT(concurrency-mt-unsafe): read once, locked
    if (env == nullptr || *env == '\0') {
      g_transport = Transport::automatic;
    } else {
      try {
        g_transport = parse_transport(env);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("DEVMEM_MPI_TRANSPORT: {}", e.what()));
      }
    }
  }
  return *g_transport;
}

void set_transport(Transport value) noexcept {
  const std::lock_guard lock(g_settings_mutex);
  g_transport = value;
}

bool device_aware(std::string_view backend) {
  if (backend == "cuda") {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() != 0;
#else
    return false;
#endif
  }
  if (backend == "roc") {
#if defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
    return MPIX_Query_rocm_support() != 0;
#else
    return false;
#endif
  }
  return false;
}

Transport transport_for(const DeviceArray& array) {
  const Transport setting = transport();
  if (setting != Transport::automatic) return setting;
  const std::shared_ptr<Context> context = array.context();
  const std::string backend = context ? std::string(context->backend_name()) : backend_name();
  return device_aware(backend) ? Transport::device_direct : Transport::staged;
}

std::int64_t staging_chunk_bytes() {
  const std::lock_guard lock(g_settings_mutex);
  if (!g_chunk_bytes) {
    const char* env =
        std::getenv("DEVMEM_MPI_CHUNK_BYTES");  // NOLINT(concurrency-mt-unsafe): locked
    if (env == nullptr || *env == '\0') {
      g_chunk_bytes = kDefaultChunkBytes;
    } else {
      char* end = nullptr;
      const long long value = std::strtoll(env, &end, 10);
      if (end == env || *end != '\0' || value <= 0) {
        throw InvalidArgument(
            fmt::format("DEVMEM_MPI_CHUNK_BYTES: '{}' is not a positive number of bytes", env));
      }
      g_chunk_bytes = value;
    }
  }
  return *g_chunk_bytes;
}

void set_staging_chunk_bytes(std::int64_t bytes) {
  if (bytes <= 0) {
    throw InvalidArgument(
        fmt::format("set_staging_chunk_bytes: the chunk size must be positive, got {}", bytes));
  }
  const std::lock_guard lock(g_settings_mutex);
  g_chunk_bytes = bytes;
}

// ---- operations and progress --------------------------------------------------------------------

namespace detail {

// One non-blocking operation: a state machine that advance() moves forward without blocking.
struct Operation {
  Operation() = default;
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;
  Operation(Operation&&) = delete;
  Operation& operator=(Operation&&) = delete;
  virtual ~Operation() = default;
  // True when finished; throws to fail the operation.
  virtual bool advance() = 0;
  // After a failure: cancels the MPI requests still pending; true when there were some (MPI may
  // still touch the operation's buffers, which must then outlive it).
  virtual bool abandon() noexcept = 0;

  bool finished = false;
  std::exception_ptr error;

  static Request make_request(std::shared_ptr<Operation> operation) noexcept {
    return Request(std::move(operation));
  }
};

}  // namespace detail

namespace {

using detail::Operation;

std::recursive_mutex g_progress_mutex;
std::vector<std::shared_ptr<Operation>> g_active;
// Operations that failed with MPI requests still pending keep their buffers here until the
// process ends: MPI may still write into them.
std::vector<std::shared_ptr<Operation>> g_abandoned;

void progress_all() {
  const std::lock_guard lock(g_progress_mutex);
  for (const auto& op : g_active) {
    if (op->finished) continue;
    try {
      op->finished = op->advance();
    } catch (...) {
      op->error = std::current_exception();
      op->finished = true;
      if (op->abandon()) g_abandoned.push_back(op);
    }
  }
  std::erase_if(g_active, [](const auto& op) { return op->finished; });
}

void start(const std::shared_ptr<Operation>& op) {
  const std::lock_guard lock(g_progress_mutex);
  g_active.push_back(op);
}

void wait_operation(Operation& op) {
  while (true) {
    progress_all();
    {
      const std::lock_guard lock(g_progress_mutex);
      if (op.finished) break;
    }
    std::this_thread::yield();
  }
  if (op.error) std::rethrow_exception(std::exchange(op.error, nullptr));
}

// Waits for one MPI request of a blocking call while advancing the non-blocking operations, as
// MPI's own progress does, so that a rank inside a collective still acknowledges its peers.
void wait_request(MPI_Request& request, const char* call) {
  while (true) {
    int flag = 0;
    check_mpi(MPI_Test(&request, &flag, MPI_STATUS_IGNORE), call);
    if (flag != 0) return;
    progress_all();
    std::this_thread::yield();
  }
}

bool test_request(MPI_Request& request, const char* call, MPI_Status* status = MPI_STATUS_IGNORE) {
  if (request == MPI_REQUEST_NULL) return true;
  int flag = 0;
  check_mpi(MPI_Test(&request, &flag, status), call);
  return flag != 0;
}

bool cancel_request(MPI_Request& request) noexcept {
  if (request == MPI_REQUEST_NULL) return false;
  MPI_Cancel(&request);
  MPI_Request_free(&request);
  return true;
}

// ---- send ---------------------------------------------------------------------------------------

class SendOperation final : public Operation {
 public:
  SendOperation(DeviceArray array, int destination, int tag, MPI_Comm comm)
      : array_(std::move(array)), destination_(destination), tag_(tag), comm_(comm) {
    check_peer_tag("mpi::send", comm_, destination_, false, tag_);
    transport_ = transport_for(array_);
    header_ = describe(array_);
    header_.seq = g_next_seq.fetch_add(1);
    header_.chunk_rows = preferred_rows(array_, transport_);
    plan_ = make_plan(array_, header_.chunk_rows);
    stream_ = transport_ == Transport::staged ? copy_stream(array_) : array_.stream();
    if (transport_ == Transport::staged && plan_.chunks > 0 && header_.status == kOk) {
      slots_[0] = staging_slot(array_, plan_);
      if (plan_.chunks > 1) slots_[1] = staging_slot(array_, plan_);
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
        for (auto& e : copy_events_) {
          if (e) e->synchronize();  // the slots stay alive until the copies into them are done
        }
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
    return transport_ == Transport::staged ? advance_staged() : advance_direct();
  }

  bool abandon() noexcept override {
    bool pending = cancel_request(header_request_);
    pending = cancel_request(ack_request_) || pending;
    for (auto& r : send_requests_) pending = cancel_request(r) || pending;
    for (auto& e : copy_events_) {
      try {
        if (e) e->synchronize();
      } catch (...) {
        // The copy's own error is the operation's; the slot must only outlive the copy.
      }
    }
    return pending;
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
                              data_tag(comm_, header_.seq), comm_, &send_requests_.at(s)),
                    "MPI_Isend (devmem::mpi payload)");
          ++posted_;
          moved = true;
        }
      }
      if (completed_ < posted_) {
        const auto s = static_cast<std::size_t>(completed_ % 2);
        if (test_request(send_requests_.at(s), "MPI_Isend (devmem::mpi payload)")) {
          ++completed_;
          if (copied_ < plan_.chunks) start_copy();
          moved = true;
        }
      }
      if (completed_ == plan_.chunks) return true;
      if (!moved) return false;
    }
  }

  bool advance_direct() {
    if (!posted_direct_) {
      if (ready_.has_value()) ready_->synchronize();  // earlier work on the array's stream first
      type_ = byte_elements_type(array_);
      check_mpi(MPI_Isend(array_.data(), 1, type_.get(), destination_, data_tag(comm_, header_.seq),
                          comm_, &send_requests_.at(0)),
                "MPI_Isend (devmem::mpi payload)");
      posted_direct_ = true;
    }
    return test_request(send_requests_.at(0), "MPI_Isend (devmem::mpi payload)");
  }

  DeviceArray array_;
  int destination_;
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
  std::array<MPI_Request, 2> send_requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  Datatype type_;
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  MPI_Request ack_request_ = MPI_REQUEST_NULL;
  bool acknowledged_ = false;
  bool posted_direct_ = false;
  std::int64_t copied_ = 0;
  std::int64_t posted_ = 0;
  std::int64_t completed_ = 0;
};

// ---- receive ------------------------------------------------------------------------------------

class RecvOperation final : public Operation {
 public:
  RecvOperation(DeviceArray array, int source, int tag, MPI_Comm comm)
      : array_(std::move(array)), source_(source), tag_(tag), comm_(comm) {
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
    const bool payload_done = transport_ == Transport::staged ? advance_staged() : advance_direct();
    return payload_done && ack_request_ == MPI_REQUEST_NULL;
  }

  bool abandon() noexcept override {
    bool pending = cancel_request(header_request_);
    pending = cancel_request(ack_request_) || pending;
    for (auto& r : recv_requests_) pending = cancel_request(r) || pending;
    for (auto& e : copy_events_) {
      try {
        if (e) e->synchronize();
      } catch (...) {
        // The copy's own error is the operation's; the slot must only outlive the copy.
      }
    }
    return pending;
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
    if (transport_ == Transport::staged && plan_.chunks > 0) {
      slots_[0] = staging_slot(array_, plan_);
      if (plan_.chunks > 1) slots_[1] = staging_slot(array_, plan_);
    }
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
                              data_tag(comm_, header_.seq), comm_, &recv_requests_.at(s)),
                    "MPI_Irecv (devmem::mpi payload)");
          ++posted_;
          moved = true;
        }
      }
      // A received chunk goes to the device on the stream.
      if (copied_ < posted_) {
        const auto s = static_cast<std::size_t>(copied_ % 2);
        if (test_request(recv_requests_.at(s), "MPI_Irecv (devmem::mpi payload)")) {
          chunk_view(array_, plan_, copied_)
              .copy_to_device(slot_view(slots_.at(s), array_, plan_, copied_), stream_);
          copy_events_.at(s) = stream_.record();
          ++copied_;
          moved = true;
        }
      }
      if (copied_ == plan_.chunks) {
        for (auto& e : copy_events_) {
          if (e) e->synchronize();
        }
        return true;
      }
      if (!moved) return false;
    }
  }

  bool advance_direct() {
    if (!posted_direct_) {
      if (ready_.has_value()) ready_->synchronize();  // earlier work on the array's stream first
      type_ = byte_elements_type(array_);
      check_mpi(MPI_Irecv(array_.data(), 1, type_.get(), peer_, data_tag(comm_, header_.seq), comm_,
                          &recv_requests_.at(0)),
                "MPI_Irecv (devmem::mpi payload)");
      posted_direct_ = true;
    }
    return test_request(recv_requests_.at(0), "MPI_Irecv (devmem::mpi payload)");
  }

  DeviceArray array_;
  int source_;
  int tag_;
  MPI_Comm comm_;
  int peer_ = MPI_PROC_NULL;
  Transport transport_ = Transport::staged;
  Wire header_;
  Wire ack_;
  Plan plan_;
  Stream stream_;
  std::optional<Event> ready_;
  std::optional<std::string> failure_;
  std::array<HostArray, 2> slots_;
  std::array<std::optional<Event>, 2> copy_events_;
  std::array<Datatype, 2> types_;
  std::array<MPI_Request, 2> recv_requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  Datatype type_;
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  MPI_Request ack_request_ = MPI_REQUEST_NULL;
  bool have_header_ = false;
  bool posted_direct_ = false;
  std::int64_t posted_ = 0;
  std::int64_t copied_ = 0;
};

}  // namespace

// ---- Request ------------------------------------------------------------------------------------

Request::Request() noexcept = default;
Request::Request(std::shared_ptr<detail::Operation> operation) noexcept
    : operation_(std::move(operation)) {}
Request::Request(Request&& other) noexcept = default;

Request& Request::operator=(Request&& other) noexcept {
  if (this != &other) {
    try {
      if (operation_) wait();
    } catch (...) {
      // Documented: the replaced request's error is dropped.
    }
    operation_ = std::move(other.operation_);
  }
  return *this;
}

Request::~Request() {
  try {
    if (operation_) wait();
  } catch (...) {
    // Documented: a destructor cannot report the error; wait() does.
  }
}

void Request::wait() {
  if (!operation_) return;
  const std::shared_ptr<detail::Operation> op = std::move(operation_);
  wait_operation(*op);
}

bool Request::test() {
  if (!operation_) return true;
  progress_all();
  {
    const std::lock_guard lock(g_progress_mutex);
    if (!operation_->finished) return false;
  }
  wait();
  return true;
}

bool Request::done() const noexcept {
  if (!operation_) return true;
  const std::lock_guard lock(g_progress_mutex);
  return operation_->finished;
}

void wait_all(std::span<Request> requests) {
  std::exception_ptr first;
  for (Request& r : requests) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

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

// ---- collectives --------------------------------------------------------------------------------

namespace {

struct Agreement {
  int rank = 0;
  int size = 0;
  Plan plan;
};

// Exchanges every rank's descriptor; throws the same InvalidArgument on every rank when one rank
// reported a local problem or the arrays differ. `plan_rank` picks whose chunk plan all follow.
Agreement agree(const char* operation, MPI_Comm comm, const DeviceArray& array, Wire mine,
                int plan_rank_or_root) {
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument(fmt::format("{}: the communicator is MPI_COMM_NULL", operation));
  }
  Agreement agreement;
  check_mpi(MPI_Comm_rank(comm, &agreement.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &agreement.size), "MPI_Comm_size");
  std::vector<Wire> all(static_cast<std::size_t>(agreement.size));
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm,
                           &request),
            "MPI_Iallgather (devmem::mpi descriptors)");
  wait_request(request, "MPI_Iallgather (devmem::mpi descriptors)");
  for (int r = 0; r < agreement.size; ++r) {
    const Wire& w = all[static_cast<std::size_t>(r)];
    if (w.status != kOk) {
      throw InvalidArgument(fmt::format("{}: rank {}: {}", operation, r, message_of(w)));
    }
  }
  const Wire& first = all.front();
  for (int r = 1; r < agreement.size; ++r) {
    const Wire& w = all[static_cast<std::size_t>(r)];
    if (!same_array(w, first)) {
      throw InvalidArgument(fmt::format("{}: shape/dtype mismatch: rank {} has {}, rank 0 has {}",
                                        operation, r, format_wire(w), format_wire(first)));
    }
    if (w.extra != first.extra) {
      throw InvalidArgument(
          fmt::format("{}: rank {} passed {} {}, rank 0 passed {}", operation, r,
                      std::string_view(operation) == "mpi::bcast" ? "root" : "reduction", w.extra,
                      first.extra));
    }
  }
  const int plan_rank = std::clamp(plan_rank_or_root, 0, agreement.size - 1);
  agreement.plan = make_plan(array, all[static_cast<std::size_t>(plan_rank)].chunk_rows);
  return agreement;
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

int reduce_extra(ReduceOp op) {
  return static_cast<int>(op) + 1;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

// The MPI type of a dtype for reductions; nullopt for those MPI cannot reduce with `op`.
std::optional<MPI_Datatype> reduce_type(const DType& dtype, ReduceOp op) {
  switch (dtype.kind()) {
    case 'i':
      switch (dtype.itemsize()) {
        case 1:
          return MPI_INT8_T;
        case 2:
          return MPI_INT16_T;
        case 4:
          return MPI_INT32_T;
        case 8:
          return MPI_INT64_T;
        default:
          return std::nullopt;
      }
    case 'u':
      switch (dtype.itemsize()) {
        case 1:
          return MPI_UINT8_T;
        case 2:
          return MPI_UINT16_T;
        case 4:
          return MPI_UINT32_T;
        case 8:
          return MPI_UINT64_T;
        default:
          return std::nullopt;
      }
    case 'f':
      if (dtype.itemsize() == 4) return MPI_FLOAT;
      if (dtype.itemsize() == 8) return MPI_DOUBLE;
      return std::nullopt;
    case 'c':
      if (op != ReduceOp::sum) return std::nullopt;
      if (dtype.itemsize() == 8) return MPI_C_FLOAT_COMPLEX;
      if (dtype.itemsize() == 16) return MPI_C_DOUBLE_COMPLEX;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::int64_t row_bytes(const DeviceArray& array, const Plan& plan) {
  return array.nbytes() / std::max<std::int64_t>(plan.rows, 1);
}

std::int64_t rows_in(const DeviceArray& array, const Plan& plan, std::int64_t k) {
  if (array.ndim() == 0) return 1;
  const auto [begin, end] = chunk_rows(plan, k);
  return end - begin;
}

}  // namespace

void bcast(const DeviceArray& array, int root, MPI_Comm comm) {
  const char* op = "mpi::bcast";
  Wire mine = describe(array);
  mine.extra = root;
  int size = 0;
  if (comm != MPI_COMM_NULL) check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const Transport transport = transport_for(array);
  mine.chunk_rows = preferred_rows(array, transport);
  int rank = 0;
  if (comm != MPI_COMM_NULL) check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  if (mine.status == kOk && (root < 0 || root >= size)) {
    mine.status = kLocalError;
    set_message(mine, fmt::format("root {} is not in the communicator (size {})", root, size));
  } else if (mine.status == kOk && rank != root) {
    if (const auto problem = destination_problem(array)) {
      mine.status = kLocalError;
      set_message(mine, *problem);
    }
  }
  const Agreement agreement = agree(op, comm, array, mine, root);
  const Plan& plan = agreement.plan;
  const bool is_root = agreement.rank == root;
  if (transport == Transport::device_direct) {
    array.stream().synchronize();
    for (std::int64_t k = 0; k < plan.chunks; ++k) {
      const DeviceArray chunk = chunk_view(array, plan, k);
      const Datatype type = byte_elements_type(chunk);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibcast(chunk.data(), 1, type.get(), root, comm, &request), "MPI_Ibcast");
      wait_request(request, "MPI_Ibcast");
    }
    return;
  }
  if (plan.chunks == 0) return;
  const Stream stream = copy_stream(array);
  const std::array<HostArray, 2> slots{staging_slot(array, plan),
                                       plan.chunks > 1 ? staging_slot(array, plan) : HostArray()};
  auto host_chunk = [&](std::int64_t k) {
    return slot_view(slots.at(static_cast<std::size_t>(k % 2)), array, plan, k);
  };
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) {
        if (is_root) chunk_view(array, plan, k).copy_to_host(host_chunk(k), stream);
      },
      [&](std::int64_t k) {
        const Datatype type = bytes_type(rows_in(array, plan, k) * row_bytes(array, plan));
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Ibcast(slots.at(static_cast<std::size_t>(k % 2)).data(), 1, type.get(), root,
                             comm, &request),
                  "MPI_Ibcast");
        return request;
      },
      [&](std::int64_t k) {
        if (!is_root) chunk_view(array, plan, k).copy_to_device(host_chunk(k), stream);
      });
}

void allreduce(const DeviceArray& input, const DeviceArray& output, ReduceOp reduction,
               MPI_Comm comm) {
  const char* op = "mpi::allreduce";
  Wire mine = describe(output);
  mine.extra = reduce_extra(reduction);
  const Transport transport = transport_for(output);
  mine.chunk_rows = preferred_rows(output, transport);
  const std::optional<MPI_Datatype> element = reduce_type(output.dtype(), reduction);
  if (mine.status == kOk) {
    if (input.dtype() != output.dtype() || input.shape() != output.shape()) {
      mine.status = kLocalError;
      set_message(mine, fmt::format("the input ({} {}) and the output ({} {}) differ",
                                    input.dtype().name(), layout::format_tuple(input.shape()),
                                    output.dtype().name(), layout::format_tuple(output.shape())));
    } else if (!element) {
      mine.status = kLocalError;
      set_message(mine, fmt::format("MPI cannot reduce dtype {} with {}", output.dtype().name(),
                                    op_name(reduction)));
    } else if (const auto problem = destination_problem(output)) {
      mine.status = kLocalError;
      set_message(mine, *problem);
    }
  }
  const Agreement agreement = agree(op, comm, output, mine, 0);
  const Plan& plan = agreement.plan;
  const bool in_place = input.data() == output.data() && input.layout() == output.layout() &&
                        input.owner() == output.owner();
  if (!in_place) {
    if (input.stream() != output.stream()) input.stream().synchronize();
    output.copy_to_device(input, output.stream());
  }
  if (plan.chunks == 0) return;
  const MPI_Op mpi_reduction = mpi_op(reduction);
  if (transport == Transport::device_direct) {
    // MPI's reductions take predefined types only: a strided output is packed on the device.
    const bool dense = output.is_c_contiguous();
    const DeviceArray work = dense ? output : output.copy(Order::C, output.stream());
    work.stream().synchronize();
    const std::int64_t row_elements = output.size() / std::max<std::int64_t>(plan.rows, 1);
    for (std::int64_t k = 0; k < plan.chunks; ++k) {
      const auto [begin, end] = chunk_rows(plan, k);
      auto* data = static_cast<std::byte*>(work.data()) + begin * row_bytes(output, plan);
      const int count =
          checked_int(rows_in(output, plan, k) * row_elements, "a chunk's element count");
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count, element.value_or(MPI_DATATYPE_NULL),
                               mpi_reduction, comm, &request),
                "MPI_Iallreduce");
      wait_request(request, "MPI_Iallreduce");
    }
    if (!dense) output.copy_to_device(work, output.stream());
    output.stream().synchronize();
    return;
  }
  const Stream stream = copy_stream(output);
  const std::array<HostArray, 2> slots{staging_slot(output, plan),
                                       plan.chunks > 1 ? staging_slot(output, plan) : HostArray()};
  auto host_chunk = [&](std::int64_t k) {
    return slot_view(slots.at(static_cast<std::size_t>(k % 2)), output, plan, k);
  };
  const std::int64_t row_elements = output.size() / std::max<std::int64_t>(plan.rows, 1);
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) { chunk_view(output, plan, k).copy_to_host(host_chunk(k), stream); },
      [&](std::int64_t k) {
        const int count =
            checked_int(rows_in(output, plan, k) * row_elements, "a chunk's element count");
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(
            MPI_Iallreduce(MPI_IN_PLACE, slots.at(static_cast<std::size_t>(k % 2)).data(), count,
                           element.value_or(MPI_DATATYPE_NULL), mpi_reduction, comm, &request),
            "MPI_Iallreduce");
        return request;
      },
      [&](std::int64_t k) { chunk_view(output, plan, k).copy_to_device(host_chunk(k), stream); });
}

void allreduce(const DeviceArray& array, ReduceOp op, MPI_Comm comm) {
  allreduce(array, array, op, comm);
}

void allgather(const DeviceArray& input, const DeviceArray& output, MPI_Comm comm) {
  const char* op = "mpi::allgather";
  Wire mine = describe(input);
  const Transport transport = transport_for(input);
  mine.chunk_rows = preferred_rows(input, transport);
  int size = 0;
  if (comm != MPI_COMM_NULL) check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (mine.status == kOk) {
    Shape expected = input.shape();
    expected.insert(expected.begin(), size);
    if (output.dtype() != input.dtype() || output.shape() != expected) {
      mine.status = kLocalError;
      set_message(mine, fmt::format("the output is {} {}, expected {} {} (ranks, *input.shape)",
                                    output.dtype().name(), layout::format_tuple(output.shape()),
                                    input.dtype().name(), layout::format_tuple(expected)));
    } else if (const auto problem = destination_problem(output)) {
      mine.status = kLocalError;
      set_message(mine, *problem);
    }
  }
  const Agreement agreement = agree(op, comm, input, mine, 0);
  const Plan& plan = agreement.plan;
  if (plan.chunks == 0) return;
  const std::int64_t ranks = agreement.size;
  if (transport == Transport::device_direct) {
    // Each rank's block lands at the output's first-axis stride: a dense C output receives in
    // place, any other goes through a dense device array.
    const bool dense = output.is_c_contiguous();
    const DeviceArray work =
        dense ? output
              : device_array(output.shape(), output.dtype(), {}, Order::C, output.stream());
    input.stream().synchronize();
    output.stream().synchronize();
    for (std::int64_t k = 0; k < plan.chunks; ++k) {
      const DeviceArray in_chunk = chunk_view(input, plan, k);
      const DeviceArray out_chunk = chunk_view(work, plan, k, 1);
      const Datatype send_type = byte_elements_type(in_chunk);
      const Datatype recv_type = resized_type(byte_elements_type(out_chunk[0]), work.strides()[0]);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallgather(in_chunk.data(), 1, send_type.get(), out_chunk.data(), 1,
                               recv_type.get(), comm, &request),
                "MPI_Iallgather");
      wait_request(request, "MPI_Iallgather");
    }
    if (!dense) output.copy_to_device(work, output.stream());
    output.stream().synchronize();
    return;
  }
  const Stream stream = copy_stream(input);
  // The copies into the output go on the input's stream: work already enqueued on the output's
  // own stream comes first.
  if (output.stream() != stream) output.stream().synchronize();
  const std::array<HostArray, 2> in_slots{
      staging_slot(input, plan), plan.chunks > 1 ? staging_slot(input, plan) : HostArray()};
  const std::array<HostArray, 2> out_slots{
      staging_slot(input, plan, ranks),
      plan.chunks > 1 ? staging_slot(input, plan, ranks) : HostArray()};
  auto in_host = [&](std::int64_t k) {
    return slot_view(in_slots.at(static_cast<std::size_t>(k % 2)), input, plan, k);
  };
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) { chunk_view(input, plan, k).copy_to_host(in_host(k), stream); },
      [&](std::int64_t k) {
        const auto s = static_cast<std::size_t>(k % 2);
        const std::int64_t bytes = rows_in(input, plan, k) * row_bytes(input, plan);
        const Datatype type = bytes_type(bytes);
        // Rank r's chunk goes to the start of its full-chunk block, so the block stride is the
        // full chunk's bytes: a resized type covering the slot's first-axis stride.
        const Datatype recv_type = resized_type(type, out_slots.at(s).strides()[0]);
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Iallgather(in_slots.at(s).data(), 1, type.get(), out_slots.at(s).data(), 1,
                                 recv_type.get(), comm, &request),
                  "MPI_Iallgather");
        return request;
      },
      [&](std::int64_t k) {
        const HostArray& slot = out_slots.at(static_cast<std::size_t>(k % 2));
        const HostArray host = input.ndim() == 0 ? slot : slot.slice(1, 0, rows_in(input, plan, k));
        chunk_view(output, plan, k, 1).copy_to_device(host, stream);
      });
}

}  // namespace devmem::mpi

// devmem::mpi's point-to-point message layer (declared in mpi/message.hpp, which says what it
// holds): initialize() and the private communicator, per-communicator facts cached as MPI
// attributes, tags, the header format, the eager-buffer pool, Endpoint and the probe stash.
#include "message.hpp"

#include "progress.hpp"

#include <devmem/backend.hpp>
#include <devmem/context.hpp>
#include <devmem/layout.hpp>
#include <devmem/memory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::mpi {

namespace detail {

namespace {

// ---- the private communicator and per-communicator facts ----------------------------------------

std::mutex g_comm_mutex;
std::atomic<bool> g_initialized{false};
MPI_Comm g_private = MPI_COMM_NULL;  // written under g_comm_mutex before g_initialized is set
int g_info_keyval = MPI_KEYVAL_INVALID;

// What every message on a communicator needs, computed once per communicator and kept as an MPI
// attribute (freed with the communicator, so a reused handle never sees stale facts).
struct CommInfo {
  int size = 0;
  int tag_ub = 0;
  bool inter = false;
  std::vector<int> world_ranks;  // rank r's rank in MPI_COMM_WORLD (after initialize())
};

// Counts CommInfo deletions: a thread's cached (communicator, facts) pair is valid while the count
// has not changed (a handle is reused only after its communicator, and so its facts, were freed).
std::atomic<std::uint64_t> g_comm_info_deletions{0};

int delete_comm_info(MPI_Comm /*comm*/, int /*keyval*/, void* value, void* /*extra*/) {
  delete static_cast<CommInfo*>(value);  // NOLINT(cppcoreguidelines-owning-memory): MPI's callback
  g_comm_info_deletions.fetch_add(1, std::memory_order_acq_rel);
  return MPI_SUCCESS;
}

// The last communicator this thread asked about, and its facts: MPI_Comm_get_attr is a hash-table
// lookup that cost a small message's devmem work a tenth of its total.
// Constant-initialised (MPI_COMM_NULL's cast is not a constant expression): no guard per access.
struct LastCommInfo {
  MPI_Comm comm{};
  const CommInfo* info = nullptr;
  std::uint64_t deletions = 0;
};
thread_local LastCommInfo t_last_comm_info;

// MPI_Finalize deletes MPI_COMM_SELF's attributes first: the private communicator goes then.
int free_private_comm(MPI_Comm /*comm*/, int /*keyval*/, void* /*value*/, void* /*extra*/) {
  const std::lock_guard lock(g_comm_mutex);
  if (g_private != MPI_COMM_NULL) MPI_Comm_free(&g_private);
  g_initialized = false;
  return MPI_SUCCESS;
}

int world_tag_ub() {
  void* value = nullptr;
  int flag = 0;
  check_mpi(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag),
            "MPI_Comm_get_attr(MPI_TAG_UB)");
  return flag != 0 ? *static_cast<int*>(value) : 32767;
}

std::atomic<int> g_info_keyval_ready{MPI_KEYVAL_INVALID};

const CommInfo& comm_info_uncached(MPI_Comm comm);

const CommInfo& comm_info(MPI_Comm comm) {
  LastCommInfo& last = t_last_comm_info;
  const std::uint64_t deletions = g_comm_info_deletions.load(std::memory_order_acquire);
  if (last.comm == comm && last.info != nullptr && last.deletions == deletions) return *last.info;
  const CommInfo& info = comm_info_uncached(comm);
  last = LastCommInfo{comm, &info, deletions};
  return info;
}

const CommInfo& comm_info_uncached(MPI_Comm comm) {
  // The common case without a lock: the facts are cached already (MPI_Comm_get_attr is as
  // thread safe as the MPI library's thread level allows devmem::mpi calls to be).
  if (const int keyval = g_info_keyval_ready.load(std::memory_order_acquire);
      keyval != MPI_KEYVAL_INVALID) {
    void* value = nullptr;
    int flag = 0;
    check_mpi(MPI_Comm_get_attr(comm, keyval, &value, &flag), "MPI_Comm_get_attr");
    if (flag != 0) return *static_cast<const CommInfo*>(value);
  }
  const std::lock_guard lock(g_comm_mutex);
  if (g_info_keyval == MPI_KEYVAL_INVALID) {
    check_mpi(
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_comm_info, &g_info_keyval, nullptr),
        "MPI_Comm_create_keyval");
    g_info_keyval_ready.store(g_info_keyval, std::memory_order_release);
  }
  void* value = nullptr;
  int flag = 0;
  check_mpi(MPI_Comm_get_attr(comm, g_info_keyval, &value, &flag), "MPI_Comm_get_attr");
  if (flag != 0) return *static_cast<const CommInfo*>(value);
  auto made = std::make_unique<CommInfo>();
  int inter = 0;
  check_mpi(MPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
  made->inter = inter != 0;
  check_mpi(MPI_Comm_size(comm, &made->size), "MPI_Comm_size");
  made->tag_ub = world_tag_ub();
  check_mpi(MPI_Comm_set_attr(comm, g_info_keyval, made.get()), "MPI_Comm_set_attr");
  return *made.release();
}

// Rank `rank` of `comm` in MPI_COMM_WORLD (the private communicator's numbering).
int world_rank(MPI_Comm comm, int rank) {
  if (comm == MPI_COMM_WORLD) return rank;
  const CommInfo& info = comm_info(comm);
  const std::lock_guard lock(g_comm_mutex);
  auto& ranks = const_cast<CommInfo&>(info).world_ranks;  // NOLINT: the cache fills in once
  if (ranks.empty()) {
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group world = MPI_GROUP_NULL;
    check_mpi(MPI_Comm_group(comm, &group), "MPI_Comm_group");
    check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    std::vector<int> mine(static_cast<std::size_t>(info.size));
    for (int r = 0; r < info.size; ++r) mine[static_cast<std::size_t>(r)] = r;
    std::vector<int> theirs(mine.size(), MPI_UNDEFINED);
    const int rc = MPI_Group_translate_ranks(group, info.size, mine.data(), world, theirs.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    check_mpi(rc, "MPI_Group_translate_ranks");
    ranks = std::move(theirs);
  }
  const int translated = ranks.at(static_cast<std::size_t>(rank));
  if (translated == MPI_UNDEFINED) {
    throw InvalidArgument(fmt::format(
        "devmem::mpi: rank {} of the communicator is not in MPI_COMM_WORLD (spawned processes "
        "are not supported after initialize())",
        rank));
  }
  return translated;
}

// ---- eager buffers ------------------------------------------------------------------------------

std::mutex g_eager_mutex;
std::vector<std::unique_ptr<HostArray>> g_eager_pool;
constexpr std::size_t kMaxPooledEagerBuffers = 256;

// Each thread keeps free buffers of its own: a window of small messages takes and returns one per
// message, and the shared pool's lock cost as much as the rest of a buffer's handling. Constant-
// initialised and trivially destructible, so that buffers returned while the thread's other
// thread_local objects are destroyed still find it (closed by then: they go to the shared pool).
constexpr std::size_t kThreadEagerBuffers = 128;  // two windows of 64 messages in flight
struct ThreadEagerBuffers {
  // Each buffer with its address: HostArray::data() is a call into libdevmem per message.
  struct Slot {
    HostArray* storage = nullptr;  // owned
    std::byte* data = nullptr;
  };
  std::array<Slot, kThreadEagerBuffers> free{};
  std::size_t count = 0;
  bool closed = false;
};

// The last envelope this thread passed, per direction: a program sends to the same peers with the
// same tags again and again, and the checks with the communicator's facts cost a small message
// about a twentieth of its instructions. The verdict depends only on the envelope, the
// communicator's facts (fixed while it lives: a freed one's facts are deleted, which the count
// tells) and whether initialize() ran. No MPI_COMM_NULL in the initialiser (its cast is not a
// constant expression).
struct PassedEnvelope {
  bool valid = false;
  MPI_Comm comm{};
  int peer = 0;
  int tag = 0;
  bool initialized = false;
  std::uint64_t deletions = 0;
};

}  // namespace

// Constant-initialised and trivially destructible: a thread_local with a dynamic initialiser
// costs a guard and a second TLS lookup per access, and the eager buffers must stay reachable
// while the thread's other thread_local objects are destroyed.
struct ThreadCaches {
  std::array<PassedEnvelope, 2> passed_envelope{};              // [receiving]
  const std::pair<DType, std::string>* last_typestr = nullptr;  // in typestr_of's cache
  ThreadEagerBuffers eager;
};

namespace {

thread_local ThreadCaches t_caches;

// Hands the thread's free buffers to the shared pool (or frees them) when the thread ends.
struct ThreadEagerCloser {
  ThreadEagerCloser() = default;
  ThreadEagerCloser(const ThreadEagerCloser&) = delete;
  ThreadEagerCloser& operator=(const ThreadEagerCloser&) = delete;
  ThreadEagerCloser(ThreadEagerCloser&&) = delete;
  ThreadEagerCloser& operator=(ThreadEagerCloser&&) = delete;
  ~ThreadEagerCloser() {
    ThreadEagerBuffers& local = t_caches.eager;
    local.closed = true;
    while (local.count > 0) {
      std::unique_ptr<HostArray> buffer(local.free.at(--local.count).storage);
      try {
        const std::lock_guard lock(g_eager_mutex);
        if (g_eager_pool.size() < kMaxPooledEagerBuffers) g_eager_pool.push_back(std::move(buffer));
      } catch (...) {  // out of memory growing the pool: the buffer is freed instead
      }
    }
  }
};

// Registers the closer when the thread keeps its first buffer; called only then (a thread_local
// with a destructor costs a lookup and a guard per access), out of line and after the list's
// update (before it, the call made the caller look its own list up a second time).
[[gnu::noinline]] void register_eager_closer() {
  thread_local const ThreadEagerCloser closer;
  static_cast<void>(closer);
}

// ---- probe stash --------------------------------------------------------------------------------

std::deque<StashedMessage> g_stash;  // guarded by the progress lock
std::atomic<std::size_t> g_stash_size{0};

bool envelope_matches(const StashedMessage& m, MPI_Comm comm, int source, int tag) {
  return m.comm == comm && (source == MPI_ANY_SOURCE || m.source == source) &&
         (tag == MPI_ANY_TAG || m.tag == tag);
}

MessageInfo info_of(const StashedMessage& m) {
  MessageInfo info;
  info.source = m.source;
  info.tag = m.tag;
  const MessageHeader& h = m.buffer.header();
  info.dtype = DType::from_typestr(
      std::string(h.typestr.data(), strnlen(h.typestr.data(), h.typestr.size())));
  info.shape.assign(m.buffer.shape(), m.buffer.shape() + h.ndim);
  return info;
}

}  // namespace

// ---- where protocol traffic goes ----------------------------------------------------------------

Channel channel(MPI_Comm comm, int peer) {
  if (!g_initialized.load(std::memory_order_acquire)) return {comm, peer};
  return {g_private, world_rank(comm, peer)};
}

int user_tag_limit(MPI_Comm comm) {
  const int ub = comm_info(comm).tag_ub;
  return g_initialized.load(std::memory_order_acquire) ? ub : ub / 2;
}

int acknowledgement_tag(const Channel& channel, std::int64_t seq) {
  const int ub = comm_info(channel.comm).tag_ub;
  // The private communicator carries nothing else: all tags. The application's: the upper half.
  const int base = channel.comm == g_private && g_private != MPI_COMM_NULL ? 0 : ub / 2 + 1;
  const std::int64_t slots = (static_cast<std::int64_t>(ub) - base + 1) / 2;
  return base + static_cast<int>(2 * (seq % slots));
}

int payload_tag(const Channel& channel, std::int64_t seq) {
  return acknowledgement_tag(channel, seq) + 1;
}

namespace {

void check_envelope_uncached(const char* operation, MPI_Comm comm, int peer, int tag,
                             bool receiving, bool private_traffic);

}  // namespace

ThreadCaches& thread_caches() noexcept {
  return t_caches;
}

void check_envelope(const char* operation, MPI_Comm comm, int peer, int tag, bool receiving) {
  check_envelope(t_caches, operation, comm, peer, tag, receiving);
}

void check_envelope(ThreadCaches& caches, const char* operation, MPI_Comm comm, int peer, int tag,
                    bool receiving) {
  PassedEnvelope& passed = caches.passed_envelope.at(receiving ? 1 : 0);
  const std::uint64_t deletions = g_comm_info_deletions.load(std::memory_order_acquire);
  const bool initialized = g_initialized.load(std::memory_order_acquire);
  if (passed.valid && passed.comm == comm && passed.peer == peer && passed.tag == tag &&
      passed.initialized == initialized && passed.deletions == deletions) {
    return;
  }
  check_envelope_uncached(operation, comm, peer, tag, receiving, initialized);
  passed = PassedEnvelope{true, comm, peer, tag, initialized, deletions};
}

namespace {

void check_envelope_uncached(const char* operation, MPI_Comm comm, int peer, int tag,
                             bool receiving, bool private_traffic) {
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument(fmt::format("{}: the communicator is MPI_COMM_NULL", operation));
  }
  const CommInfo& info = comm_info(comm);
  if (info.inter) {
    throw InvalidArgument(
        fmt::format("{}: intercommunicators are not supported (merge it first: "
                    "MPI_Intercomm_merge)",
                    operation));
  }
  const bool any_source = receiving && peer == MPI_ANY_SOURCE;
  if (!any_source && peer != MPI_PROC_NULL && (peer < 0 || peer >= info.size)) {
    throw InvalidArgument(fmt::format("{}: rank {} is not in the communicator (size {})", operation,
                                      peer, info.size));
  }
  if (tag == MPI_ANY_TAG && receiving) {
    if (private_traffic) return;
    throw InvalidArgument(fmt::format(
        "{}: MPI_ANY_TAG needs devmem::mpi::initialize() (collective, after MPI_Init): without "
        "it devmem's own messages share the communicator and a wildcard tag would match them",
        operation));
  }
  const int limit = private_traffic ? info.tag_ub : info.tag_ub / 2;
  if (tag < 0 || tag > limit) {
    throw InvalidArgument(fmt::format(
        "{}: tag {} is outside [0, {}]{}", operation, tag, limit,
        private_traffic ? ""
                        : " (without devmem::mpi::initialize() devmem keeps the upper half of "
                          "MPI_TAG_UB for its acknowledgements and payloads)"));
  }
}

}  // namespace

// ---- eager buffers ------------------------------------------------------------------------------

EagerBuffer EagerBuffer::take() {
  return take(t_caches);
}

EagerBuffer EagerBuffer::take(ThreadCaches& caches) {
  if (ThreadEagerBuffers& local = caches.eager; local.count > 0) {
    const ThreadEagerBuffers::Slot slot = local.free.at(--local.count);
    return EagerBuffer(std::unique_ptr<HostArray>(slot.storage), slot.data);
  }
  {
    const std::lock_guard lock(g_eager_mutex);
    if (!g_eager_pool.empty()) {
      EagerBuffer buffer(std::move(g_eager_pool.back()));
      g_eager_pool.pop_back();
      return buffer;
    }
  }
  return EagerBuffer(std::make_unique<HostArray>(
      pinned_array(Shape{static_cast<std::int64_t>(kEagerCapacity)}, DType('u', 1))));
}

EagerBuffer& EagerBuffer::operator=(EagerBuffer&& other) noexcept {
  std::swap(storage_, other.storage_);
  std::swap(data_, other.data_);
  return *this;
}

EagerBuffer::~EagerBuffer() {
  if (storage_ == nullptr) return;
  ThreadEagerBuffers& local = t_caches.eager;
  if (!local.closed && local.count < kThreadEagerBuffers) {
    const bool first = local.count == 0;
    local.free.at(local.count++) = {storage_.release(), data_};
    if (first) register_eager_closer();
    return;
  }
  try {
    const std::lock_guard lock(g_eager_mutex);
    if (g_eager_pool.size() < kMaxPooledEagerBuffers) g_eager_pool.push_back(std::move(storage_));
  } catch (...) {  // out of memory growing the pool: the buffer is freed instead
  }
}

// ---- Endpoint -----------------------------------------------------------------------------------

const std::string& typestr_of(const DType& dtype) {
  return typestr_of(t_caches, dtype);
}

const std::string& typestr_of(ThreadCaches& caches, const DType& dtype) {
  // The cache entry of the last dtype this thread asked for, without a lock.
  const std::pair<DType, std::string>*& last = caches.last_typestr;
  if (const auto* entry = last; entry != nullptr && entry->first == dtype) return entry->second;
  // A program uses a handful of dtypes; a deque keeps the entries where they are, for the life of
  // the process (operations move between threads).
  static std::mutex mutex;
  static std::deque<std::pair<DType, std::string>> cache;
  const std::lock_guard lock(mutex);
  for (const auto& entry : cache) {
    if (entry.first == dtype) return (last = &entry)->second;
  }
  return (last = &cache.emplace_back(dtype, dtype.typestr()))->second;
}

// get_if rather than visit: these are noexcept, and the variant always holds one of the two.
const Layout& Endpoint::layout() const noexcept {
  if (const auto* d = std::get_if<DeviceArray>(&array_)) return d->layout();
  return std::get_if<HostArray>(&array_)->layout();
}
const DType& Endpoint::dtype() const noexcept {
  if (const auto* d = std::get_if<DeviceArray>(&array_)) return d->dtype();
  return std::get_if<HostArray>(&array_)->dtype();
}
void* Endpoint::data() const noexcept {
  if (const auto* d = std::get_if<DeviceArray>(&array_)) return d->data();
  return std::get_if<HostArray>(&array_)->data();
}
std::int64_t Endpoint::size() const noexcept {
  return layout().size();
}
bool Endpoint::c_contiguous() const noexcept {
  return layout().is_c_contiguous();
}
Stream Endpoint::stream() const {
  return on_device() ? device().stream() : Stream();
}
Transport Endpoint::transport() const {
  return on_device() ? transport_for(device()) : Transport::DeviceDirect;
}
Endpoint Endpoint::rows(std::int64_t begin, std::int64_t end) const {
  if (ndim() == 0) return *this;
  return std::visit(
      [&](const auto& a) {
        return Endpoint(std::variant<DeviceArray, HostArray>(a.slice(0, begin, end)), typestr_);
      },
      array_);
}
void pack_elements(const DeviceArray& array, std::byte* destination, const Stream& stream) {
  const auto bytes = static_cast<std::size_t>(array.nbytes());
  if (bytes == 0) return;
  if (array.is_c_contiguous()) {
    if (const std::shared_ptr<Context> context = array.context()) {
      context->backend().copy(context->device(), destination, array.data(), bytes,
                              CopyKind::DeviceToHost, stream.native_handle());
      return;
    }
  }
  array.copy_to_host(HostArray::view(static_cast<void*>(destination), array.shape(), array.dtype()),
                     stream);
}

void pack_elements(const HostArray& array, std::byte* destination) {
  const auto bytes = static_cast<std::size_t>(array.nbytes());
  if (bytes == 0) return;
  if (array.is_c_contiguous()) {
    std::memcpy(destination, array.data(), bytes);
    return;
  }
  HostArray::view(static_cast<void*>(destination), array.shape(), array.dtype()).copy_from(array);
}

void unpack_elements(const DeviceArray& array, const std::byte* source, const Stream& stream) {
  const auto bytes = static_cast<std::size_t>(array.nbytes());
  if (bytes == 0) return;
  if (array.is_c_contiguous()) {
    if (const std::shared_ptr<Context> context = array.context()) {
      context->backend().copy(context->device(), array.data(), source, bytes,
                              CopyKind::HostToDevice, stream.native_handle());
      return;
    }
  }
  array.copy_to_device(
      HostArray::view(static_cast<const void*>(source), array.shape(), array.dtype()), stream);
}

void unpack_elements(const HostArray& array, const std::byte* source) {
  const auto bytes = static_cast<std::size_t>(array.nbytes());
  if (bytes == 0) return;
  if (array.is_c_contiguous()) {
    std::memcpy(array.data(), source, bytes);
    return;
  }
  array.copy_from(HostArray::view(static_cast<const void*>(source), array.shape(), array.dtype()));
}

void Endpoint::pack(std::byte* destination, const Stream& stream) const {
  if (on_device()) {
    pack_elements(device(), destination, stream);
  } else {
    pack_elements(host(), destination);
  }
}

void Endpoint::unpack(const std::byte* source, const Stream& stream) const {
  if (on_device()) {
    unpack_elements(device(), source, stream);
  } else {
    unpack_elements(host(), source);
  }
}

std::string Endpoint::describe() const {
  return fmt::format("{} {}", dtype().name(), layout::format_tuple(shape()));
}

// ---- the message header -------------------------------------------------------------------------

void write_header(EagerBuffer& buffer, const Endpoint& array, MessageKind kind, std::int64_t seq,
                  std::int64_t chunk_rows, const std::optional<std::string>& error) {
  MessageHeader& h = buffer.header();
  h = MessageHeader{};
  h.magic = kMessageMagic;
  h.kind = kind;
  h.seq = seq;
  h.chunk_rows = chunk_rows;
  const std::string& typestr = array.typestr();
  std::memcpy(h.typestr.data(), typestr.data(), std::min(typestr.size(), h.typestr.size() - 1));
  std::string problem = error.value_or("");
  if (problem.empty() && array.ndim() > kMaxWireDims) {
    problem =
        fmt::format("an array of {} dimensions (at most {} are sent)", array.ndim(), kMaxWireDims);
  }
  if (!problem.empty()) {
    h.sender_error = 1;
    h.kind = MessageKind::Rendezvous;  // both ranks report it
    problem.resize(std::min<std::size_t>(problem.size(), eager_limit_bytes));
    h.payload_bytes = static_cast<std::int64_t>(problem.size());
    std::memcpy(buffer.data() + header_bytes(0), problem.data(), problem.size());
    return;
  }
  h.ndim = static_cast<std::uint8_t>(array.ndim());
  std::memcpy(buffer.data() + sizeof(MessageHeader), array.shape().data(),
              array.shape().size() * sizeof(std::int64_t));
  h.payload_bytes = kind == MessageKind::Eager ? array.nbytes() : 0;
}

void write_eager_header(EagerBuffer& buffer, const std::string& typestr,
                        std::span<const std::int64_t> shape, std::int64_t payload_bytes) {
  MessageHeader& h = buffer.header();
  h = MessageHeader{};
  h.magic = kMessageMagic;
  h.kind = MessageKind::Eager;
  std::memcpy(h.typestr.data(), typestr.data(), std::min(typestr.size(), h.typestr.size() - 1));
  h.ndim = static_cast<std::uint8_t>(shape.size());
  h.payload_bytes = payload_bytes;
  std::memcpy(buffer.data() + sizeof(MessageHeader), shape.data(),
              shape.size() * sizeof(std::int64_t));
}

std::optional<std::string> header_problem(const EagerBuffer& buffer, int count) {
  const auto bytes = static_cast<std::size_t>(count);
  if (bytes < sizeof(MessageHeader) || buffer.header().magic != kMessageMagic) {
    return fmt::format("a message of {} bytes that is not a devmem::mpi message", count);
  }
  const MessageHeader& h = buffer.header();
  if (h.kind != MessageKind::Eager && h.kind != MessageKind::Rendezvous &&
      h.kind != MessageKind::Persistent) {
    return fmt::format("a devmem::mpi message of unknown kind {}", static_cast<int>(h.kind));
  }
  const int ndim = h.sender_error != 0 ? 0 : h.ndim;
  const bool payload_allowed = h.kind == MessageKind::Eager || h.sender_error != 0;
  if (ndim > kMaxWireDims || h.payload_bytes < 0 || (!payload_allowed && h.payload_bytes != 0) ||
      h.payload_bytes > eager_limit_bytes ||
      header_bytes(ndim) + static_cast<std::size_t>(h.payload_bytes) != bytes) {
    return fmt::format("a malformed devmem::mpi message ({} bytes, {} dimensions, payload {})",
                       count, static_cast<int>(h.ndim), h.payload_bytes);
  }
  for (int d = 0; d < ndim; ++d) {
    if (buffer.shape()[d] < 0)
      return std::string("a devmem::mpi message with a negative axis length");
  }
  return std::nullopt;
}

std::string describe_header(const EagerBuffer& buffer) {
  const MessageHeader& h = buffer.header();
  if (h.sender_error != 0) return "(none: the sender failed)";
  const std::string typestr(h.typestr.data(), strnlen(h.typestr.data(), h.typestr.size()));
  std::string dtype = typestr;
  try {
    dtype = DType::from_typestr(typestr).name();
  } catch (const Error&) {
    // A typestr devmem cannot parse is shown as it came.
  }
  return fmt::format(
      "{} {}", dtype,
      layout::format_tuple(std::span(buffer.shape(), static_cast<std::size_t>(h.ndim))));
}

bool header_matches(const EagerBuffer& buffer, std::string_view typestr,
                    std::span<const std::int64_t> shape) {
  const MessageHeader& h = buffer.header();
  if (h.ndim != shape.size()) return false;
  if (strnlen(h.typestr.data(), h.typestr.size()) != typestr.size() ||
      std::memcmp(h.typestr.data(), typestr.data(), typestr.size()) != 0) {
    return false;
  }
  return std::equal(shape.begin(), shape.end(), buffer.shape());
}

bool header_matches(const EagerBuffer& buffer, const Endpoint& array) {
  return header_matches(buffer, array.typestr(), array.shape());
}

HandshakeAnswer answer_handshake(const EagerBuffer& start, const std::string& where,
                                 std::string_view typestr, std::span<const std::int64_t> shape,
                                 const std::function<std::string()>& description, bool persistent,
                                 const std::optional<std::string>& overlap) {
  const MessageHeader& h = start.header();
  HandshakeAnswer answer{describe(typestr, shape), std::nullopt};
  Wire& ack = answer.ack;
  ack.seq = h.seq;
  const bool persistent_sender = h.kind == MessageKind::Persistent;
  if (h.sender_error != 0) {
    ack.status = kMismatch;
    answer.failure = fmt::format(
        "{}: the sender cannot send {}", where,
        std::string(reinterpret_cast<const char*>(start.data() + header_bytes(0)),  // NOLINT
                    static_cast<std::size_t>(h.payload_bytes)));
  } else if (persistent_sender != persistent) {
    const char* text = persistent ? "this rank receives with a persistent request (recv_init), the "
                                    "sender used a plain send"
                                  : "this rank receives with a plain recv, the sender uses a "
                                    "persistent request (send_init)";
    ack.status = kLocalError;
    set_message(ack, text);
    answer.failure =
        fmt::format("{}: {} (both ranks of a pair must use persistent requests)", where, text);
  } else if (ack.status != kOk) {
    answer.failure = fmt::format("{}: cannot receive into {}", where, message_of(ack));
  } else if (!header_matches(start, typestr, shape)) {
    ack.status = kMismatch;
    answer.failure =
        fmt::format("{}: shape/dtype mismatch: the sender sends {}, this rank expects {}", where,
                    describe_header(start), description());
  } else if (overlap) {
    ack.status = kLocalError;
    set_message(ack, *overlap);
    answer.failure = fmt::format("{}: {}", where, *overlap);
  } else if (h.chunk_rows < 1) {
    ack.status = kLocalError;
    set_message(ack, "the header's chunk plan is invalid");
    answer.failure =
        fmt::format("{}: the header's chunk plan ({} rows) is invalid", where, h.chunk_rows);
  }
  return answer;
}

// ---- matched messages not yet received (probe) --------------------------------------------------

bool stash_in_use() noexcept {
  return g_stash_size.load(std::memory_order_acquire) != 0;
}

std::optional<StashedMessage> take_stashed(MPI_Comm comm, int source, int tag) {
  const auto it = std::find_if(g_stash.begin(), g_stash.end(), [&](const StashedMessage& m) {
    return envelope_matches(m, comm, source, tag);
  });
  if (it == g_stash.end()) return std::nullopt;
  StashedMessage taken = std::move(*it);
  g_stash.erase(it);
  g_stash_size.store(g_stash.size(), std::memory_order_release);
  return taken;
}

std::optional<MessageInfo> probe_once(MPI_Comm comm, int source, int tag) {
  for (const StashedMessage& m : g_stash) {
    if (envelope_matches(m, comm, source, tag)) return info_of(m);
  }
  int flag = 0;
  MPI_Status status;
  check_mpi(MPI_Iprobe(source, tag, comm, &flag, &status), "MPI_Iprobe");
  if (flag == 0) return std::nullopt;
  int count = 0;
  check_mpi(MPI_Get_count(&status, MPI_BYTE, &count), "MPI_Get_count");
  if (count < static_cast<int>(sizeof(MessageHeader)) || count > static_cast<int>(kEagerCapacity)) {
    throw InvalidArgument(fmt::format(
        "mpi::probe: the message from rank {} (tag {}, {} bytes) is not a devmem::mpi message "
        "(it was left for an MPI receive)",
        status.MPI_SOURCE, status.MPI_TAG, count));
  }
  // The message MPI_Iprobe saw is the first from its source with its tag: that one is taken.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status matched;
  check_mpi(MPI_Improbe(status.MPI_SOURCE, status.MPI_TAG, comm, &flag, &message, &matched),
            "MPI_Improbe");
  StashedMessage stashed;
  stashed.comm = comm;
  stashed.source = matched.MPI_SOURCE;
  stashed.tag = matched.MPI_TAG;
  check_mpi(MPI_Get_count(&matched, MPI_BYTE, &stashed.count), "MPI_Get_count");
  stashed.buffer = EagerBuffer::take();
  check_mpi(MPI_Mrecv(stashed.buffer.data(), stashed.count, MPI_BYTE, &message, MPI_STATUS_IGNORE),
            "MPI_Mrecv");
  if (const auto problem = header_problem(stashed.buffer, stashed.count)) {
    throw InvalidArgument(
        fmt::format("mpi::probe: rank {} (tag {}) sent {}; it was received and dropped",
                    stashed.source, stashed.tag, *problem));
  }
  MessageInfo info = info_of(stashed);
  g_stash.push_back(std::move(stashed));
  g_stash_size.store(g_stash.size(), std::memory_order_release);
  return info;
}

}  // namespace detail

// ---- public -------------------------------------------------------------------------------------

using namespace detail;

void initialize() {
  int mpi_ready = 0;
  check_mpi(MPI_Initialized(&mpi_ready), "MPI_Initialized");
  if (mpi_ready == 0) {
    throw InvalidArgument("devmem::mpi::initialize: MPI is not initialised (call MPI_Init first)");
  }
  const std::lock_guard lock(g_comm_mutex);
  if (g_initialized.load()) return;
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup (devmem::mpi::initialize)");
  MPI_Comm_set_name(dup, "devmem::mpi protocol");
  int keyval = MPI_KEYVAL_INVALID;
  const int rc = MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, free_private_comm, &keyval, nullptr);
  if (rc != MPI_SUCCESS) MPI_Comm_free(&dup);
  check_mpi(rc, "MPI_Comm_create_keyval");
  g_private = dup;
  check_mpi(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr), "MPI_Comm_set_attr");
  g_initialized.store(true, std::memory_order_release);
}

bool initialized() noexcept {
  return g_initialized.load(std::memory_order_acquire);
}

int max_tag(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL)
    throw InvalidArgument("mpi::max_tag: the communicator is MPI_COMM_NULL");
  return user_tag_limit(comm);
}

}  // namespace devmem::mpi

// devmem::mpi's wire protocol (declared in mpi/protocol.hpp, which says how it works): MpiError and
// MPI error checks, the message descriptor, the tags and sequence numbers, MPI datatypes for
// strided arrays, chunk plans, and the cache of page-locked staging buffers.
#include "protocol.hpp"

#include <devmem/layout.hpp>
#include <devmem/memory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

namespace devmem::mpi {

MpiError::MpiError(const std::string& message, int code) : Error(message), code_(code) {}
MpiError::~MpiError() = default;

namespace detail {

namespace {

int tag_upper_bound(MPI_Comm comm) {
  void* value = nullptr;
  int flag = 0;
  check_mpi(MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  return flag != 0 ? *static_cast<int*>(value) : 32767;
}

std::atomic<std::int64_t> g_next_seq{0};

Datatype committed(MPI_Datatype type) {
  Datatype owned(type);
  MPI_Datatype handle = type;
  check_mpi(MPI_Type_commit(&handle), "MPI_Type_commit");
  return owned;
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

std::int64_t rows_of(const DeviceArray& array) {
  return array.ndim() == 0 ? 1 : array.shape()[0];
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

}  // namespace

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

void set_message(Wire& wire, std::string_view text) {
  const std::size_t n = std::min(text.size(), wire.message.size() - 1);
  std::memcpy(wire.message.data(), text.data(), n);
  wire.message.at(n) = '\0';
}

std::string message_of(const Wire& wire) {
  return {wire.message.data(), strnlen(wire.message.data(), wire.message.size())};
}

Wire describe(std::string_view typestr, std::span<const std::int64_t> shape) {
  Wire wire;
  std::memcpy(wire.typestr.data(), typestr.data(),
              std::min(typestr.size(), wire.typestr.size() - 1));
  wire.ndim = static_cast<std::int32_t>(shape.size());
  if (wire.ndim > kMaxWireDims) {
    wire.status = kLocalError;
    set_message(wire, fmt::format("an array of {} dimensions (at most {} are sent)", wire.ndim,
                                  kMaxWireDims));
    return wire;
  }
  std::copy(shape.begin(), shape.end(), wire.shape.begin());
  return wire;
}

Wire describe(const DeviceArray& array) {
  return describe(array.dtype().typestr(), array.shape());
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

std::int64_t next_sequence() {
  return g_next_seq.fetch_add(1);
}

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

int checked_int(std::int64_t value, const char* what) {
  if (value > INT_MAX) {
    throw InvalidArgument(fmt::format("devmem::mpi: {} of {} exceeds MPI's int count limit {}",
                                      what, value, INT_MAX));
  }
  return static_cast<int>(value);
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

// ---- chunk plans and staging --------------------------------------------------------------------

Plan make_plan(std::int64_t rows, std::int64_t elements, std::int64_t rows_per_chunk) {
  Plan plan;
  plan.rows = rows;
  plan.rows_per_chunk =
      std::clamp<std::int64_t>(rows_per_chunk, 1, std::max<std::int64_t>(plan.rows, 1));
  plan.chunks = elements == 0 ? 0 : (plan.rows + plan.rows_per_chunk - 1) / plan.rows_per_chunk;
  return plan;
}

Plan make_plan(const DeviceArray& array, std::int64_t rows_per_chunk) {
  return make_plan(rows_of(array), array.size(), rows_per_chunk);
}

// The rows per chunk this rank would choose for `array`.
std::int64_t preferred_rows(const DeviceArray& array, Transport transport) {
  const std::int64_t rows = std::max<std::int64_t>(rows_of(array), 1);
  if (transport == Transport::DeviceDirect || array.size() == 0) return rows;
  const std::int64_t row_bytes = std::max<std::int64_t>(array.nbytes() / rows, 1);
  return std::clamp<std::int64_t>(staging_chunk_bytes() / row_bytes, 1, rows);
}

std::pair<std::int64_t, std::int64_t> chunk_rows(const Plan& plan, std::int64_t k) {
  const std::int64_t begin = k * plan.rows_per_chunk;
  return {begin, std::min(plan.rows, begin + plan.rows_per_chunk)};
}

std::int64_t chunk_bytes(const DeviceArray& array, const Plan& plan, std::int64_t k) {
  const auto [begin, end] = chunk_rows(plan, k);
  const std::int64_t rows = array.ndim() == 0 ? 1 : end - begin;
  return rows * (array.nbytes() / std::max<std::int64_t>(plan.rows, 1));
}

HostArray slot_view(const HostArray& slot, const DeviceArray& array, const Plan& plan,
                    std::int64_t k) {
  if (array.ndim() == 0) return slot;
  const auto [begin, end] = chunk_rows(plan, k);
  return slot.slice(0, 0, end - begin);
}

HostArray staging_slot(const DeviceArray& array, const Plan& plan, std::int64_t leading) {
  Shape shape = array.shape();
  if (!shape.empty()) shape[0] = plan.rows_per_chunk;
  if (leading > 0) shape.insert(shape.begin(), leading);
  return staging_array(std::move(shape), array.dtype());
}

// ---- streams ------------------------------------------------------------------------------------

Stream copy_stream(const DeviceArray& array) {
  return array.stream();
}

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

}  // namespace detail

}  // namespace devmem::mpi

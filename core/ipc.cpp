// IPC handles (include/devmem/ipc.hpp; docs/scaling-out.md#ipc): exporting an array, the byte
// format, and the per-process table of opened mappings that makes every handle mapped once and
// unmapped once.
#include <devmem/ipc.hpp>

#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/format.hpp"
#include "core/internal.hpp"
#include "core/ipc_format.hpp"
#include "core/report_error.hpp"

#include <devmem/context.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <tuple>
#include <utility>

#include <unistd.h>

namespace devmem {
namespace {

constexpr std::array<char, 8> kMagic{'D', 'E', 'V', 'M', 'E', 'M', 'I', 'P'};
// magic, version, total length: enough to tell what the bytes are before reading the rest.
constexpr std::size_t kPreambleBytes = kMagic.size() + 4 + 4;
constexpr std::size_t kChecksumBytes = 8;
// More axes than any array devmem makes (NumPy's limit is 64).
constexpr std::uint32_t kMaxAxes = 64;

using detail::ipc::Reader;
using detail::ipc::Writer;

/// This process, as far as handles tell processes apart: a random number drawn once (pids are
/// reused, and repeat across pid namespaces) together with the pid (a child made by fork without
/// exec inherits the number, not the pid).
std::uint64_t process_token() {
  static const std::uint64_t token = [] {
    std::random_device random;
    return (std::uint64_t{random()} << 32) | random();
  }();
  return token;
}

std::uint64_t fnv1a(std::span<const std::byte> bytes) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::byte b : bytes) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

// ---- The mappings this process has opened ----

/// Backend::ipc_close, its failure reported (it runs in destructors).
void close_quietly(Context& context, void* base) noexcept {
  try {
    context.backend().ipc_close(context.device(), base);
  } catch (const std::exception& e) {
    detail::report_error(fmt::format("closing the IPC mapping at {} on device {}: {}", base,
                                     context.device(), e.what()));
  }
}

struct MappingKey {
  std::string backend;
  int device = 0;
  VendorIpcHandle vendor{};
  friend bool operator<(const MappingKey& a, const MappingKey& b) noexcept {
    return std::tie(a.backend, a.device, a.vendor) < std::tie(b.backend, b.device, b.vendor);
  }
};

/// One vendor mapping of another process's allocation, shared by every array over it; closed by
/// the destructor, once, when the last of them is gone.
struct Mapping {
  MappingKey key;
  std::shared_ptr<Context> context;
  void* base = nullptr;
  std::size_t bytes = 0;  // what the backend really mapped from `base` (not what a handle says)

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();
};

class MappingTable {
 public:
  /// The mapping of `key`: the live one, else a new one from Backend::ipc_open.
  std::shared_ptr<Mapping> open(const MappingKey& key, const std::shared_ptr<Context>& context) {
    const std::lock_guard lock(mutex_);
    const auto it = table_.find(key);
    if (it != table_.end()) {
      if (std::shared_ptr<Mapping> live = it->second.lock()) return live;
    }
    // The mapping object is made once the vendor mapping exists: its destructor closes it (and
    // takes this table's mutex, held here).
    const AllocationRange opened = context->backend().ipc_open(context->device(), key.vendor);
    std::shared_ptr<Mapping> mapping;
    try {
      mapping = std::make_shared<Mapping>();
      table_.insert_or_assign(key, mapping);
    } catch (...) {
      close_quietly(*context, opened.base);
      throw;
    }
    mapping->key = key;
    mapping->context = context;
    mapping->base = opened.base;
    mapping->bytes = opened.bytes;
    return mapping;
  }
  /// Forgets `key` unless a live mapping took its place.
  void forget(const MappingKey& key) noexcept {
    const std::lock_guard lock(mutex_);
    const auto it = table_.find(key);
    if (it != table_.end() && it->second.expired()) table_.erase(it);
  }

 private:
  std::mutex mutex_;
  std::map<MappingKey, std::weak_ptr<Mapping>> table_;
};

MappingTable& mappings() {
  // Never destroyed: arrays held by static objects may close their mapping after static
  // destructors of this library have run.
  static auto* const table = new MappingTable;
  return *table;
}

Mapping::~Mapping() {
  if (!context) return;  // never mapped
  mappings().forget(key);
  close_quietly(*context, base);
}

}  // namespace

struct IpcHandle::State {
  std::string backend;
  int device = 0;
  Shape shape;
  Strides strides;
  DType dtype;
  DTypeDescription description;
  std::int64_t offset = 0;
  std::int64_t allocation_bytes = 0;
  std::int64_t pid = 0;
  std::uint64_t process = 0;
  VendorIpcHandle vendor{};
  std::shared_ptr<const void> exported;  // in the exporter: keeps the memory alive

  mutable std::mutex mutex;            // guards `opened`
  std::shared_ptr<const void> opened;  // open()'s reference to the mapping
};

namespace {

bool exported_by_this_process(const IpcHandle::State& s) {
  return s.exported != nullptr || (s.process == process_token() && s.pid == ::getpid());
}

/// The array `s` describes, mapped on `device` (default: the handle's).
DeviceArray open_state(const IpcHandle::State& s, std::optional<int> requested, const char* op) {
  Backend& backend = active_backend();
  if (s.backend != backend.name()) {
    detail::throw_invalid(op,
                          "the handle was exported by the '{}' backend; this process uses the "
                          "'{}' backend",
                          s.backend, backend.name());
  }
  if (exported_by_this_process(s)) {
    detail::throw_invalid(op,
                          "the handle was exported by this process (pid {}): opening it in the "
                          "exporting process is not allowed (as in CUDA and Numba); use the "
                          "exported array itself",
                          s.pid);
  }
  const int device = requested.value_or(s.device);
  const int count = device_count();
  if (device < 0 || device >= count) {
    detail::throw_invalid(op, "device {} does not exist (the {} backend has {} device(s))", device,
                          backend.name(), count);
  }
  if (!backend.supports_ipc(device)) {
    detail::throw_invalid(op, "the {} backend does not support IPC on device {}", backend.name(),
                          device);
  }
  // The layout must lie inside the allocation: a handle is input from another process.
  const Layout dense = layout::make_layout(s.shape, s.dtype.itemsize(), s.strides, Order::C, op);
  Layout layout = dense;
  layout.offset = s.offset;
  if (dense.size() > 0) {
    const std::int64_t begin = s.offset - dense.offset;  // the extent's first byte
    const std::int64_t span = dense.byte_extent().bytes();
    if (begin < 0 || span > s.allocation_bytes || begin > s.allocation_bytes - span) {
      detail::throw_invalid(op,
                            "the array (shape {}, strides {}, element 0 at byte {}) does not fit "
                            "the exported allocation of {} bytes",
                            layout::format_tuple(s.shape), layout::format_tuple(s.strides),
                            s.offset, s.allocation_bytes);
    }
    if (s.offset % s.dtype.alignment() != 0) {
      detail::throw_invalid(op, "element 0 at byte {} is not aligned to {} bytes for dtype {}",
                            s.offset, s.dtype.alignment(), s.dtype.name());
    }
    detail::check_stride_alignment(op, dense, s.dtype);
  }
  std::shared_ptr<Context> context = context_for_device(device);
  std::shared_ptr<Mapping> mapping =
      mappings().open(MappingKey{s.backend, device, s.vendor}, context);
  // The sizes above are the handle's, and a handle is only checksummed: what bounds the array is
  // the mapping the backend really made. Refusing drops `mapping`, which closes it unless
  // another array shares it.
  if (static_cast<std::uint64_t>(s.allocation_bytes) > mapping->bytes) {
    detail::throw_invalid(op,
                          "the handle says the exported allocation has {} bytes, but the {} "
                          "backend mapped {} bytes of it on device {}: the handle is forged or "
                          "corrupt, and is refused",
                          s.allocation_bytes, s.backend, mapping->bytes, device);
  }

  auto memory = std::make_shared<detail::DeviceMemory>();
  memory->context = context;
  memory->ptr = static_cast<std::byte*>(mapping->base);
  memory->bytes = s.allocation_bytes;
  memory->owned = false;
  memory->keep_alive = std::move(mapping);
  detail::track_device_memory(memory);
  return detail::ArrayAccess::make(std::move(memory), std::move(layout), s.dtype, Stream{});
}

}  // namespace

IpcHandle::IpcHandle(std::shared_ptr<State> state) noexcept : state_(std::move(state)) {}

IpcHandle ipc_handle(const DeviceArray& array) {
  return ipc_handle(array, DTypeDescription::of(array.dtype()));
}

IpcHandle ipc_handle(const DeviceArray& array, DTypeDescription description) {
  constexpr const char* op = "ipc_handle";
  detail::ipc::check_description(description, array.dtype(), op);
  const auto& memory = detail::ArrayAccess::memory(array);
  if (!memory || memory->ptr == nullptr) {
    detail::throw_invalid(op, "the array (shape {}) has no device memory to share",
                          layout::format_tuple(array.shape()));
  }
  if (memory->host_alias != nullptr) {
    detail::throw_invalid(op,
                          "the array views mapped host memory at {}, not device memory: share "
                          "host memory with the operating system's means",
                          static_cast<const void*>(memory->host_alias));
  }
  Context& context = *memory->context;
  Backend& backend = context.backend();
  const int device = context.device();
  if (!backend.supports_ipc(device)) {
    detail::throw_invalid(op, "the {} backend does not support IPC on device {}", backend.name(),
                          device);
  }
  const AllocationRange range = backend.allocation_range(device, memory->ptr);
  auto state = std::make_shared<IpcHandle::State>();
  state->backend = std::string(backend.name());
  state->device = device;
  state->shape = array.shape();
  state->strides = array.strides();
  state->dtype = array.dtype();
  state->description = std::move(description);
  state->offset = (memory->ptr - static_cast<std::byte*>(range.base)) + array.layout().offset;
  state->allocation_bytes = static_cast<std::int64_t>(range.bytes);
  state->pid = ::getpid();
  state->process = process_token();
  state->vendor = backend.ipc_get_handle(device, range.base);
  state->exported = array.owner();
  return IpcHandle(std::move(state));
}

IpcHandle DeviceArray::ipc_handle() const {
  return devmem::ipc_handle(*this);
}

std::vector<std::byte> IpcHandle::to_bytes() const {
  const State& s = *state_;
  Writer w;
  w.put_bytes(std::as_bytes(std::span(kMagic)));
  w.put(kFormatVersion);
  w.put(std::uint32_t{0});  // the total length, written below
  w.put(s.process);
  w.put(s.pid);
  w.put(static_cast<std::int32_t>(s.device));
  w.put_string(s.backend);
  w.put(static_cast<std::uint8_t>(s.dtype.kind()));
  w.put(s.dtype.itemsize());
  w.put(s.dtype.alignment());
  w.put_string(s.description.typestr);
  w.put(s.allocation_bytes);
  w.put(s.offset);
  w.put(static_cast<std::uint32_t>(s.shape.size()));
  for (const std::int64_t n : s.shape) w.put(n);
  for (const std::int64_t stride : s.strides) w.put(stride);
  w.put_bytes(s.vendor);
  detail::ipc::put_fields(w, s.description.fields);
  std::vector<std::byte>& bytes = w.bytes();
  const auto total = static_cast<std::uint32_t>(bytes.size() + kChecksumBytes);
  std::memcpy(bytes.data() + kMagic.size() + 4, &total, sizeof total);
  const std::uint64_t checksum = fnv1a(bytes);
  w.put(checksum);
  return std::move(w.bytes());
}

IpcHandle IpcHandle::from_bytes(std::span<const std::byte> bytes) {
  constexpr const char* op = "IpcHandle::from_bytes";
  if (bytes.size() < kMagic.size() ||
      std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    detail::throw_invalid(
        op, "the {} bytes are not a devmem IPC handle (it starts with 'DEVMEMIP')", bytes.size());
  }
  if (bytes.size() < kPreambleBytes + kChecksumBytes) {
    detail::throw_invalid(op, "the handle is truncated: {} bytes, a handle has at least {}",
                          bytes.size(), kPreambleBytes + kChecksumBytes);
  }
  Reader r(bytes);
  std::array<std::byte, kMagic.size()> magic{};
  r.get_bytes(magic, "magic");
  const auto version = r.get<std::uint32_t>("version");
  if (version != kFormatVersion) {
    detail::throw_invalid(op,
                          "the handle has format version {}; this devmem reads version {} (export "
                          "and import with the same devmem version)",
                          version, kFormatVersion);
  }
  const auto total = r.get<std::uint32_t>("length");
  if (bytes.size() < total) {
    detail::throw_invalid(op, "the handle is truncated: {} bytes of {}", bytes.size(), total);
  }
  if (bytes.size() > total) {
    detail::throw_invalid(op, "the handle has {} trailing bytes after its {} bytes",
                          bytes.size() - total, total);
  }
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + total - kChecksumBytes, sizeof stored);
  if (fnv1a(bytes.first(total - kChecksumBytes)) != stored) {
    detail::throw_invalid(op, "the handle is corrupt: its checksum does not match its {} bytes",
                          total);
  }
  Reader f(bytes.first(total - kChecksumBytes));
  f.get_bytes(magic, "magic");
  static_cast<void>(f.get<std::uint32_t>("version"));
  static_cast<void>(f.get<std::uint32_t>("length"));
  auto state = std::make_shared<State>();
  state->process = f.get<std::uint64_t>("process");
  state->pid = f.get<std::int64_t>("pid");
  state->device = f.get<std::int32_t>("device");
  state->backend = f.get_string("backend name");
  const auto kind = static_cast<char>(f.get<std::uint8_t>("dtype kind"));
  const auto itemsize = f.get<std::int64_t>("dtype itemsize");
  const auto alignment = f.get<std::int64_t>("dtype alignment");
  std::string typestr = f.get_string("dtype typestr");
  try {
    state->dtype = DType(kind, itemsize, alignment);
  } catch (const InvalidArgument& e) {
    detail::throw_invalid(op, "the handle's dtype ({}) is invalid: {}", typestr, e.what());
  }
  state->description.typestr = std::move(typestr);
  state->description.itemsize = itemsize;
  state->description.alignment = alignment;
  state->allocation_bytes = f.get<std::int64_t>("allocation size");
  state->offset = f.get<std::int64_t>("offset");
  const auto ndim = f.get<std::uint32_t>("number of axes");
  if (ndim > kMaxAxes) {
    detail::throw_invalid(op, "the handle has {} axes (at most {})", ndim, kMaxAxes);
  }
  state->shape.resize(ndim);
  state->strides.resize(ndim);
  for (std::int64_t& n : state->shape) n = f.get<std::int64_t>("shape");
  for (std::int64_t& stride : state->strides) stride = f.get<std::int64_t>("strides");
  f.get_bytes(state->vendor, "vendor handle");
  state->description.fields = detail::ipc::get_fields(f);
  if (f.position() != total - kChecksumBytes) {
    detail::throw_invalid(op, "the handle is malformed: {} unread bytes before its checksum",
                          total - kChecksumBytes - f.position());
  }
  if (state->backend.empty() || state->pid <= 0 || state->allocation_bytes <= 0 ||
      state->offset < 0) {
    detail::throw_invalid(op,
                          "the handle is malformed (backend '{}', pid {}, allocation of {} bytes, "
                          "offset {})",
                          state->backend, state->pid, state->allocation_bytes, state->offset);
  }
  detail::ipc::check_description(state->description, state->dtype, op);
  return IpcHandle(std::move(state));
}

std::string IpcHandle::to_hex() const {
  const std::vector<std::byte> bytes = to_bytes();
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (const std::byte b : bytes)
    fmt::format_to(std::back_inserter(hex), "{:02x}", std::to_integer<unsigned>(b));
  return hex;
}

IpcHandle IpcHandle::from_hex(std::string_view hex) {
  constexpr const char* op = "IpcHandle::from_hex";
  if (hex.size() % 2 != 0) {
    detail::throw_invalid(op, "the text has an odd number of digits ({})", hex.size());
  }
  const auto digit = [&](std::size_t at) -> unsigned {
    const char c = hex[at];
    if (c >= '0' && c <= '9') return static_cast<unsigned>(c - '0');
    if (c >= 'a' && c <= 'f') return static_cast<unsigned>(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return static_cast<unsigned>(c - 'A' + 10);
    detail::throw_invalid(
        op, "character {} ('{}') is not a hexadecimal digit", at,
        std::isprint(static_cast<unsigned char>(c)) != 0 ? std::string(1, c) : std::string("?"));
  };
  std::vector<std::byte> bytes(hex.size() / 2);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::byte>(digit(2 * i) * 16 + digit(2 * i + 1));
  }
  return from_bytes(bytes);
}

const std::string& IpcHandle::backend() const noexcept {
  return state_->backend;
}
int IpcHandle::device() const noexcept {
  return state_->device;
}
const Shape& IpcHandle::shape() const noexcept {
  return state_->shape;
}
const Strides& IpcHandle::strides() const noexcept {
  return state_->strides;
}
const DType& IpcHandle::dtype() const noexcept {
  return state_->dtype;
}
const DTypeDescription& IpcHandle::dtype_description() const noexcept {
  return state_->description;
}
std::int64_t IpcHandle::offset() const noexcept {
  return state_->offset;
}
std::int64_t IpcHandle::allocation_bytes() const noexcept {
  return state_->allocation_bytes;
}
std::int64_t IpcHandle::exporter_pid() const noexcept {
  return state_->pid;
}
const std::array<std::byte, IpcHandle::kVendorHandleBytes>& IpcHandle::vendor_handle()
    const noexcept {
  return state_->vendor;
}
bool IpcHandle::is_exporter() const noexcept {
  return exported_by_this_process(*state_);
}
bool IpcHandle::is_open() const {
  const std::lock_guard lock(state_->mutex);
  return state_->opened != nullptr;
}

DeviceArray IpcHandle::open(std::optional<int> device) {
  constexpr const char* op = "IpcHandle::open";
  const std::lock_guard lock(state_->mutex);
  if (state_->opened) {
    detail::throw_invalid(op, "the handle is already open (close() it first)");
  }
  DeviceArray array = open_state(*state_, device, op);
  state_->opened = array.owner();
  return array;
}

void IpcHandle::close() {
  std::shared_ptr<const void> opened;
  {
    const std::lock_guard lock(state_->mutex);
    if (!state_->opened) {
      detail::throw_invalid("IpcHandle::close", "the handle is not open");
    }
    opened = std::move(state_->opened);
  }
  // Released outside the lock: the last reference unmaps.
}

DeviceArray open_ipc_array(const IpcHandle& handle, std::optional<int> device) {
  return open_state(*handle.state_, device, "open_ipc_array");
}

DeviceArray open_ipc_array(std::span<const std::byte> bytes, std::optional<int> device) {
  return open_ipc_array(IpcHandle::from_bytes(bytes), device);
}

bool ipc_supported(int device) {
  Backend& backend = active_backend();
  if (device < 0 || device >= backend.device_count()) return false;
  return backend.supports_ipc(device);
}

}  // namespace devmem

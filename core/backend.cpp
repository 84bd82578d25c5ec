// The parts of the backend interface that are not per vendor: the default strided copy, and the
// registry that picks and creates the one backend a process uses.
#include <devmem/backend.hpp>
#include <devmem/config.hpp>
#include <devmem/error.hpp>

#include "core/backend_factories.hpp"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>

namespace devmem {

Backend::~Backend() = default;

void Backend::make_current(int /*device*/) {}

int Backend::pointer_device(const void* /*ptr*/) {
  return -1;
}

bool Backend::supports_async_allocation(int /*device*/) {
  return false;
}

void* Backend::allocate_async(int device, std::size_t bytes, NativeStream /*stream*/) {
  throw InvalidArgument(fmt::format(
      "{} allocate_async: device {} has no stream-ordered allocator (asked for {} bytes)", name(),
      device, bytes));
}

void Backend::deallocate_async(int device, void* ptr, NativeStream /*stream*/) {
  throw InvalidArgument(
      fmt::format("{} deallocate_async: device {} has no stream-ordered allocator (freeing {})",
                  name(), device, ptr));
}

void Backend::set_async_release_threshold(int device, std::uint64_t bytes) {
  throw InvalidArgument(fmt::format(
      "{} set_async_release_threshold: device {} has no stream-ordered allocator (threshold {} "
      "bytes)",
      name(), device, bytes));
}

void Backend::trim_async_pool(int device, std::size_t keep_bytes) {
  throw InvalidArgument(fmt::format(
      "{} trim_async_pool: device {} has no stream-ordered allocator (keeping {} bytes)", name(),
      device, keep_bytes));
}

bool Backend::is_capturing(int /*device*/, NativeStream /*stream*/) {
  return false;
}

// ---- Several devices: a backend without peer access (docs/scaling-out.md#several-devices) ----

bool Backend::can_access_peer(int /*device*/, int /*peer*/) {
  return false;
}

void Backend::enable_peer_access(int device, int peer) {
  throw BackendError(std::string(name()), "enable_peer_access", 217, "PeerAccessUnsupported",
                     fmt::format("{} enable_peer_access: device {} cannot access device {} (the "
                                 "backend has no peer access)",
                                 name(), device, peer));
}

void Backend::disable_peer_access(int /*device*/, int /*peer*/) {}

void Backend::copy_peer(int dst_device, void* dst, int src_device, const void* src,
                        std::size_t bytes, NativeStream /*stream*/) {
  throw InvalidArgument(fmt::format(
      "{} copy_peer: the backend has no peer copies (asked for {} bytes from {} on device {} to "
      "{} on device {})",
      name(), bytes, src, src_device, dst, dst_device));
}

// ---- Managed memory: a backend without it (docs/managed-memory.md) ----

bool Backend::supports_managed_memory(int /*device*/) {
  return false;
}

void* Backend::allocate_managed(int device, std::size_t bytes, ManagedAttach /*attach*/) {
  throw InvalidArgument(fmt::format(
      "{} allocate_managed: the {} backend does not support managed memory (asked for {} bytes on "
      "device {})",
      name(), name(), bytes, device));
}

void Backend::deallocate_managed(int device, void* ptr) {
  throw InvalidArgument(fmt::format(
      "{} deallocate_managed: the {} backend does not support managed memory (freeing {} on "
      "device {})",
      name(), name(), ptr, device));
}

void Backend::prefetch_managed(int device, const void* ptr, std::size_t bytes,
                               MemoryLocation location, NativeStream /*stream*/) {
  throw InvalidArgument(fmt::format(
      "{} prefetch_managed: the {} backend does not support managed memory (prefetching {} bytes "
      "at {} to {} for device {})",
      name(), name(), bytes, ptr, to_string(location), device));
}

void Backend::advise_managed(int device, const void* ptr, std::size_t bytes, MemoryAdvice advice,
                             MemoryLocation location) {
  throw InvalidArgument(fmt::format(
      "{} advise_managed: the {} backend does not support managed memory (advice {} for {} bytes "
      "at {}, {}, device {})",
      name(), name(), to_string(advice), bytes, ptr, to_string(location), device));
}

std::string to_string(const MemoryLocation& location) {
  if (location.is_host()) return "the host";
  return fmt::format("device {}", location.device);
}

const char* to_string(MemoryAdvice advice) noexcept {
  switch (advice) {
    case MemoryAdvice::ReadMostly:
      return "ReadMostly";
    case MemoryAdvice::UnsetReadMostly:
      return "UnsetReadMostly";
    case MemoryAdvice::PreferredLocation:
      return "PreferredLocation";
    case MemoryAdvice::UnsetPreferredLocation:
      return "UnsetPreferredLocation";
    case MemoryAdvice::AccessedBy:
      return "AccessedBy";
    case MemoryAdvice::UnsetAccessedBy:
      return "UnsetAccessedBy";
  }
  return "UnknownAdvice";
}

// ---- Inter-process sharing: a backend without IPC (docs/scaling-out.md#ipc) ----

bool Backend::supports_ipc(int /*device*/) {
  return false;
}

AllocationRange Backend::allocation_range(int device, const void* ptr) {
  throw InvalidArgument(fmt::format(
      "{} allocation_range: the {} backend does not support IPC (looking up {} on device {})",
      name(), name(), ptr, device));
}

VendorIpcHandle Backend::ipc_get_handle(int device, void* base) {
  throw InvalidArgument(
      fmt::format("{} ipc_get_handle: the {} backend does not support IPC (exporting {} of device "
                  "{})",
                  name(), name(), base, device));
}

AllocationRange Backend::ipc_open(int device, const VendorIpcHandle& /*handle*/) {
  throw InvalidArgument(fmt::format(
      "{} ipc_open: the {} backend does not support IPC (opening a handle on device {})", name(),
      name(), device));
}

void Backend::ipc_close(int device, void* base) {
  throw InvalidArgument(
      fmt::format("{} ipc_close: the {} backend does not support IPC (closing {} on device {})",
                  name(), name(), base, device));
}

void Backend::copy_strided(int device, void* dst, const void* src, const layout::CopyPlan& plan,
                           CopyKind kind, NativeStream stream) {
  auto* const dst0 = static_cast<std::byte*>(dst);
  const auto* const src0 = static_cast<const std::byte*>(src);
  const auto width = static_cast<std::size_t>(plan.width);
  const auto height = static_cast<std::size_t>(plan.height);
  plan.for_each_block([&](std::int64_t src_offset, std::int64_t dst_offset) {
    if (height == 1) {
      copy(device, dst0 + dst_offset, src0 + src_offset, width, kind, stream);
    } else {
      copy_2d(device, dst0 + dst_offset, static_cast<std::size_t>(plan.dst_pitch),
              src0 + src_offset, static_cast<std::size_t>(plan.src_pitch), width, height, kind,
              stream);
    }
  });
}

const char* to_string(CopyKind kind) noexcept {
  switch (kind) {
    case CopyKind::HostToDevice:
      return "HostToDevice";
    case CopyKind::DeviceToHost:
      return "DeviceToHost";
    case CopyKind::DeviceToDevice:
      return "DeviceToDevice";
    case CopyKind::HostToHost:
      return "HostToHost";
  }
  return "UnknownCopyKind";
}

namespace {

struct BackendEntry {
  const char* name;
  std::unique_ptr<Backend> (*make)();
};

// The compiled backends, the default first: a GPU backend when one is configured, then host.
constexpr std::array kCompiled {
#if DEVMEM_HAS_CUDA
  BackendEntry{"cuda", &make_cuda_backend},
#endif
#if DEVMEM_HAS_ROC
      BackendEntry{"roc", &make_roc_backend},
#endif
#if DEVMEM_HAS_STRICT_FAKE
      // Test-only (preset strict-fake): RuntimeBackend over the strict fake runtime.
      BackendEntry{"strict-fake", &make_strict_fake_backend},
#endif
      BackendEntry{"host", &make_host_backend},
};

const BackendEntry* find_compiled(std::string_view name) noexcept {
  for (const BackendEntry& entry : kCompiled) {
    if (name == entry.name) return &entry;
  }
  return nullptr;
}

std::string compiled_list() {
  std::string list;
  for (const BackendEntry& entry : kCompiled) {
    if (!list.empty()) list += ", ";
    list += entry.name;
  }
  return list;
}

[[noreturn]] void throw_not_compiled(std::string_view who, std::string_view name) {
  throw InvalidArgument(fmt::format("{}: backend '{}' is not compiled in (compiled: {})", who, name,
                                    compiled_list()));
}

struct Registry {
  std::mutex mutex;
  const BackendEntry* selected = nullptr;  // set by select_backend
  // The active backend. Created once and intentionally never destroyed: objects with static
  // storage duration (contexts, arrays in globals) may still release memory through it while the
  // process exits, and stream workers of a leaked stream must not be joined from exit handlers.
  // It stays reachable from this (leaked) registry, so leak checkers do not report it.
  std::atomic<Backend*> instance{nullptr};
};

Registry& registry() {
  static auto* const instance = new Registry;  // never destroyed, see Registry::instance
  return *instance;
}

// The backend to create: select_backend's choice, else DEVMEM_BACKEND, else the default.
const BackendEntry& resolve_locked(const Registry& reg) {
  if (reg.selected != nullptr) return *reg.selected;
  const char* const env = std::getenv("DEVMEM_BACKEND");
  if (env != nullptr && *env != '\0') {
    const BackendEntry* const entry = find_compiled(env);
    if (entry == nullptr) throw_not_compiled("DEVMEM_BACKEND", env);
    return *entry;
  }
  return kCompiled.front();
}

}  // namespace

std::vector<std::string> compiled_backends() {
  std::vector<std::string> names;
  names.reserve(kCompiled.size());
  for (const BackendEntry& entry : kCompiled) names.emplace_back(entry.name);
  return names;
}

std::string backend_name() {
  Registry& reg = registry();
  if (const Backend* const active = reg.instance.load(std::memory_order_acquire)) {
    return std::string(active->name());
  }
  const std::lock_guard lock(reg.mutex);
  if (const Backend* const active = reg.instance.load(std::memory_order_acquire)) {
    return std::string(active->name());
  }
  return resolve_locked(reg).name;
}

void select_backend(std::string_view name) {
  const BackendEntry* const entry = find_compiled(name);
  if (entry == nullptr) throw_not_compiled("select_backend", name);
  Registry& reg = registry();
  const std::lock_guard lock(reg.mutex);
  if (const Backend* const active = reg.instance.load(std::memory_order_acquire)) {
    if (active->name() == name) return;
    throw InvalidArgument(fmt::format(
        "select_backend: backend '{}' is already in use; select a backend before the first devmem "
        "call",
        active->name()));
  }
  reg.selected = entry;
}

Backend& active_backend() {
  Registry& reg = registry();
  if (Backend* const active = reg.instance.load(std::memory_order_acquire)) return *active;
  const std::lock_guard lock(reg.mutex);
  if (Backend* const active = reg.instance.load(std::memory_order_acquire)) return *active;
  std::unique_ptr<Backend> created = resolve_locked(reg).make();
  Backend* const active = created.release();
  reg.instance.store(active, std::memory_order_release);
  return *active;
}

}  // namespace devmem

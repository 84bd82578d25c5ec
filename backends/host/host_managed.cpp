// Managed memory of the host backend (docs/managed-memory.md): one page-aligned host allocation
// that host code and every simulated device address with the same pointer, so copies, memsets and
// kernels accept it as device memory (device_accessible_locked) and host code reads and writes it.
// There is one memory, so nothing migrates: a prefetch is an operation of its stream that records
// where it took the allocation when it runs, and advice is recorded when it is given, for tests
// to read back (host::managed_range_state, host::managed_memory_state). The checks are CUDA's:
// InvalidValue for a range outside managed memory, InvalidDevice for a location that is not a
// device or the host, InvalidResourceHandle for a stream of another device.
#include "backends/host/host_backend.hpp"

#include <devmem/byte_size.hpp>

#include <algorithm>
#include <limits>
#include <new>

namespace devmem::host {

namespace {

std::uintptr_t address_of(const void* ptr) noexcept {
  return reinterpret_cast<std::uintptr_t>(ptr);
}

std::int64_t clamp_to_int64(std::size_t value) noexcept {
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(std::min(value, kMax));
}

}  // namespace

HostBackend::ManagedMap::iterator HostBackend::find_managed_locked(std::uintptr_t begin,
                                                                   std::size_t bytes) {
  auto it = managed_.upper_bound(begin);
  if (it == managed_.begin()) return managed_.end();
  --it;
  const std::size_t into = begin - it->first;
  if (into < it->second.bytes && bytes <= it->second.bytes - into) return it;
  return managed_.end();
}

void HostBackend::check_location(const char* function, MemoryLocation location) const {
  if (location.is_host()) return;
  if (location.device < 0 || location.device >= device_count_) {
    fail(function, Status::InvalidDevice, "{} does not exist (device count {})",
         to_string(location), device_count_);
  }
}

bool HostBackend::supports_managed_memory(int device) {
  check_device("supports_managed_memory", device);
  return true;
}

void* HostBackend::allocate_managed(int device, std::size_t bytes, ManagedAttach attach) {
  const detail::Injection injection = detail::begin_call(Call::AllocateManaged, device);
  if (injection) {
    throw_injected("allocate_managed", Call::AllocateManaged, injection, device, bytes);
  }
  check_device("allocate_managed", device);
  if (bytes == 0) return nullptr;
  const std::size_t rounded =
      (bytes + kManagedAlignment - 1) / kManagedAlignment * kManagedAlignment;
  void* const ptr =
      rounded < bytes ? nullptr
                      : ::operator new(rounded, std::align_val_t{kManagedAlignment}, std::nothrow);
  if (ptr == nullptr) {
    throw OutOfMemory(fmt::format("host allocate_managed: out of memory allocating {} ({} bytes) "
                                  "of managed memory for device {} (the process is out of memory)",
                                  format_bytes(bytes), bytes, device),
                      clamp_to_int64(bytes));
  }
  ManagedRangeState range;
  range.base = ptr;
  range.bytes = bytes;
  range.device = device;
  range.attach = attach;
  const std::lock_guard lock(memory_mutex_);
  managed_.emplace(address_of(ptr), std::move(range));
  ManagedMemoryState& counts = devices_[static_cast<std::size_t>(device)].managed;
  ++counts.allocations;
  counts.bytes += static_cast<std::int64_t>(bytes);
  return ptr;
}

void HostBackend::deallocate_managed(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::Deallocate, device);
  if (injection) throw_injected("deallocate_managed", Call::Deallocate, injection, device);
  check_device("deallocate_managed", device);
  if (ptr == nullptr) return;
  // Like cudaFree, which synchronises: work enqueued before the free may still use the memory.
  drain(device);
  {
    const std::lock_guard lock(memory_mutex_);
    const auto it = managed_.find(address_of(ptr));
    if (it == managed_.end() || it->second.device != device) {
      fail("deallocate_managed", Status::InvalidValue,
           "{} is not the start of a managed allocation of device {}", fmt::ptr(ptr), device);
    }
    ManagedMemoryState& counts = devices_[static_cast<std::size_t>(device)].managed;
    --counts.allocations;
    counts.bytes -= static_cast<std::int64_t>(it->second.bytes);
    managed_.erase(it);
  }
  ::operator delete(ptr, std::align_val_t{kManagedAlignment});
}

void HostBackend::prefetch_managed(int device, const void* ptr, std::size_t bytes,
                                   MemoryLocation location, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Prefetch, device);
  check_device("prefetch_managed", device);
  check_location("prefetch_managed", location);
  if (bytes == 0) return;
  {
    const std::lock_guard lock(memory_mutex_);
    if (find_managed_locked(address_of(ptr), bytes) == managed_.end()) {
      fail("prefetch_managed", Status::InvalidValue,
           "{} bytes at {} do not lie in one managed allocation", bytes, fmt::ptr(ptr));
    }
  }
  const auto begin = address_of(ptr);
  submit(
      "prefetch_managed", Call::Prefetch, device, stream, injection,
      [this, device, begin, bytes, location] {
        const std::lock_guard lock(memory_mutex_);
        // Freed meanwhile (a use-after-free of the caller's): nothing to record.
        const auto it = find_managed_locked(begin, bytes);
        if (it == managed_.end()) return;
        it->second.last_prefetch = location;
        ++it->second.prefetches;
        ManagedMemoryState& counts = devices_[static_cast<std::size_t>(device)].managed;
        ++(location.is_host() ? counts.prefetches_to_host : counts.prefetches_to_device);
      },
      OnDefault::QueueWhenBusy);
}

void HostBackend::advise_managed(int device, const void* ptr, std::size_t bytes,
                                 MemoryAdvice advice, MemoryLocation location) {
  const detail::Injection injection = detail::begin_call(Call::Advise, device);
  if (injection) throw_injected("advise_managed", Call::Advise, injection, device);
  check_device("advise_managed", device);
  const bool uses_location =
      advice != MemoryAdvice::ReadMostly && advice != MemoryAdvice::UnsetReadMostly;
  if (uses_location) check_location("advise_managed", location);
  if (bytes == 0) return;
  const std::lock_guard lock(memory_mutex_);
  const auto it = find_managed_locked(address_of(ptr), bytes);
  if (it == managed_.end()) {
    fail("advise_managed", Status::InvalidValue,
         "{} bytes at {} do not lie in one managed allocation", bytes, fmt::ptr(ptr));
  }
  ManagedRangeState& range = it->second;
  std::vector<MemoryLocation>& accessed = range.accessed_by;
  switch (advice) {
    case MemoryAdvice::ReadMostly:
      range.read_mostly = true;
      break;
    case MemoryAdvice::UnsetReadMostly:
      range.read_mostly = false;
      break;
    case MemoryAdvice::PreferredLocation:
      range.preferred_location = location;
      break;
    case MemoryAdvice::UnsetPreferredLocation:
      range.preferred_location.reset();
      break;
    case MemoryAdvice::AccessedBy:
      if (std::find(accessed.begin(), accessed.end(), location) == accessed.end()) {
        accessed.push_back(location);
      }
      break;
    case MemoryAdvice::UnsetAccessedBy:
      accessed.erase(std::remove(accessed.begin(), accessed.end(), location), accessed.end());
      break;
    default:
      fail("advise_managed", Status::InvalidValue, "invalid advice {}", static_cast<int>(advice));
  }
  ++devices_[static_cast<std::size_t>(device)].managed.advice;
}

ManagedMemoryState HostBackend::managed_memory_state(int device) {
  check_device("managed_memory_state", device);
  const std::lock_guard lock(memory_mutex_);
  return devices_[static_cast<std::size_t>(device)].managed;
}

ManagedRangeState HostBackend::managed_range_state(const void* ptr) {
  const std::lock_guard lock(memory_mutex_);
  const auto it = find_managed_locked(address_of(ptr), 1);
  if (ptr == nullptr || it == managed_.end()) {
    throw InvalidArgument(
        fmt::format("host::managed_range_state: {} is not inside managed memory", fmt::ptr(ptr)));
  }
  return it->second;
}

}  // namespace devmem::host

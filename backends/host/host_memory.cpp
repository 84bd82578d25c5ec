// Device memory and page-locked host memory of the host backend: allocation and release (with
// the cache of freed large blocks), stream-ordered allocation, page-locked allocations and
// registrations, and the lookups that say which addresses are device-accessible and whose they
// are. Apart from host_backend.cpp because it is a job of its own over the memory books
// (memory_mutex_'s maps), which the streams, events and launches there never touch; managed
// memory (host_managed.cpp) and IPC (host_ipc.cpp) are its neighbours.
#include "backends/host/host_backend.hpp"

#include <devmem/byte_size.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <new>
#include <string>

namespace devmem::host {
namespace {

// Below this, operator new serves blocks from the heap without page faults: not cached.
constexpr std::size_t kCachedBlockMinBytes = std::size_t{64} << 10;
constexpr std::size_t kCachedBytesLimit = std::size_t{64} << 20;
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCacheBlocks = false;
#else
constexpr bool kCacheBlocks = true;
#endif
#else
constexpr bool kCacheBlocks = true;
#endif

std::uintptr_t address_of(const void* ptr) noexcept {
  return reinterpret_cast<std::uintptr_t>(ptr);
}

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

std::int64_t clamp_to_int64(std::size_t value) noexcept {
  return value > static_cast<std::size_t>(kInt64Max) ? kInt64Max : static_cast<std::int64_t>(value);
}

}  // namespace

bool HostBackend::device_accessible_locked(std::uintptr_t begin, std::size_t bytes) const {
  for (const DeviceMemory& memory : devices_) {
    if (find_containing(memory.allocations, begin, bytes, size_of_allocation) !=
        memory.allocations.end()) {
      return true;
    }
  }
  const auto host_range_size = [](const HostRange& range) { return range.bytes; };
  for (const HostRangeMap* ranges : {&host_allocations_, &registrations_}) {
    const auto it = find_containing(*ranges, begin, bytes, host_range_size);
    if (it != ranges->end() && it->second.mapped) return true;
  }
  const auto managed_size = [](const ManagedRangeState& range) { return range.bytes; };
  if (find_containing(managed_, begin, bytes, managed_size) != managed_.end()) return true;
  return imported_device_locked(begin, bytes) >= 0;
}

bool HostBackend::device_accessible(std::uintptr_t begin, std::size_t bytes) const {
  const std::lock_guard lock(memory_mutex_);
  return device_accessible_locked(begin, bytes);
}
std::string HostBackend::describe_device_pointer_locked(int device, std::uintptr_t address) const {
  for (std::size_t other = 0; other < devices_.size(); ++other) {
    const AllocationMap& allocations = devices_[other].allocations;
    if (allocations.contains(address)) {
      return fmt::format("{:#x} is an allocation of device {}, not of device {}", address, other,
                         device);
    }
    const auto it = find_containing(allocations, address, 1, size_of_allocation);
    if (it != allocations.end()) {
      return fmt::format(
          "{:#x} is not the start of a device allocation (it lies {} bytes into the {}-byte "
          "allocation at {:#x})",
          address, address - it->first, it->second, it->first);
    }
  }
  return fmt::format("{:#x} is not a device allocation", address);
}

// ---- Device memory ------------------------------------------------------------------------------

void* HostBackend::allocate(int device, std::size_t bytes) {
  const detail::Injection injection = detail::begin_call(Call::Allocate, device);
  if (injection) throw_injected("allocate", Call::Allocate, injection, device, bytes);
  check_device("allocate", device);
  if (bytes == 0) return nullptr;  // like cudaMalloc(0): success without memory
  const std::int64_t capacity = detail::effective_capacity(device);

  const std::lock_guard lock(memory_mutex_);
  DeviceMemory& memory = devices_[static_cast<std::size_t>(device)];
  const std::int64_t free = std::max<std::int64_t>(0, capacity - memory.used);
  const auto out_of_memory = [&](std::string_view reason) {
    return OutOfMemory(
        fmt::format("host allocate: out of memory allocating {} ({} bytes) on device "
                    "{} ({})",
                    format_bytes(bytes), bytes, device, reason),
        clamp_to_int64(bytes));
  };
  if (clamp_to_int64(bytes) > free) {
    throw out_of_memory(fmt::format("free {} of {}", format_bytes(free), format_bytes(capacity)));
  }
  const std::size_t reserved = device_pages(bytes);
  void* ptr = nullptr;
  if (const auto cached = cached_blocks_.find(reserved); cached != cached_blocks_.end()) {
    ptr = cached->second;
    cached_blocks_.erase(cached);
    cached_bytes_ -= reserved;
  } else if (reserved != 0) {
    ptr = ::operator new(reserved, std::align_val_t{kDeviceAlignment}, std::nothrow);
  }
  if (ptr == nullptr) throw out_of_memory("the process is out of memory");
  memory.allocations.emplace(address_of(ptr), bytes);
  memory.used += static_cast<std::int64_t>(bytes);
  return ptr;
}

void HostBackend::deallocate(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::Deallocate, device);
  if (injection) throw_injected("deallocate", Call::Deallocate, injection, device);
  check_device("deallocate", device);
  if (ptr == nullptr) return;
  // Like cudaFree, which synchronises: work enqueued before the free may still use the memory.
  drain(device);
  release_allocation("deallocate", device, ptr);
}

void HostBackend::release_allocation(const char* function, int device, void* ptr) {
  {
    const std::lock_guard lock(memory_mutex_);
    DeviceMemory& memory = devices_[static_cast<std::size_t>(device)];
    const auto it = memory.allocations.find(address_of(ptr));
    if (it == memory.allocations.end()) {
      fail(function, Status::InvalidValue, "{}",
           describe_device_pointer_locked(device, address_of(ptr)));
    }
    const std::size_t bytes = it->second;
    memory.used -= static_cast<std::int64_t>(bytes);
    memory.allocations.erase(it);
    g_allocations_freed.fetch_add(1, std::memory_order_acq_rel);  // every thread's hit is stale
    if (const auto exported = exports_.find(address_of(ptr)); exported != exports_.end()) {
      unshare(ptr, exported->second);
      exports_.erase(exported);
    }
    const std::size_t reserved = device_pages(bytes);
    if (kCacheBlocks && reserved >= kCachedBlockMinBytes &&
        cached_bytes_ + reserved <= kCachedBytesLimit) {
      try {
        cached_blocks_.emplace(reserved, ptr);
        cached_bytes_ += reserved;
        return;
      } catch (const std::bad_alloc&) {  // no room for the node: freed below instead
      }
    }
  }
  ::operator delete(ptr, std::align_val_t{kDeviceAlignment});
}

void HostBackend::release_idle_buffers() noexcept {
  std::multimap<std::size_t, void*> blocks;
  {
    const std::lock_guard lock(memory_mutex_);
    blocks.swap(cached_blocks_);
    cached_bytes_ = 0;
  }
  for (const auto& [bytes, ptr] : blocks) {
    ::operator delete(ptr, std::align_val_t{kDeviceAlignment});
  }
}

// The simulator's memory is usable at once, so a stream-ordered allocation is an ordinary one;
// its free is an operation of the stream, run after the work enqueued before it.
bool HostBackend::supports_async_allocation(int device) {
  check_device("supports_async_allocation", device);
  return true;
}

void* HostBackend::allocate_async(int device, std::size_t bytes, NativeStream stream) {
  if (stream != nullptr) static_cast<void>(find_stream("allocate_async", device, stream));
  return allocate(device, bytes);
}

// The simulator's stream-ordered "pool" keeps nothing (a free is a free), so the settings are only
// recorded, for tests of what devmem asks of a vendor pool.
void HostBackend::set_async_release_threshold(int device, std::uint64_t bytes) {
  check_device("set_async_release_threshold", device);
  const std::lock_guard lock(memory_mutex_);
  devices_[static_cast<std::size_t>(device)].async_pool.release_threshold = bytes;
}

void HostBackend::trim_async_pool(int device, std::size_t keep_bytes) {
  check_device("trim_async_pool", device);
  const std::lock_guard lock(memory_mutex_);
  AsyncPoolState& pool = devices_[static_cast<std::size_t>(device)].async_pool;
  ++pool.trims;
  pool.last_trim_keep_bytes = keep_bytes;
}

void HostBackend::deallocate_async(int device, void* ptr, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::Deallocate, device);
  check_device("deallocate_async", device);
  if (ptr == nullptr) return;
  {
    const std::lock_guard lock(memory_mutex_);
    const AllocationMap& allocations = devices_[static_cast<std::size_t>(device)].allocations;
    if (allocations.find(address_of(ptr)) == allocations.end()) {
      fail("deallocate_async", Status::InvalidValue, "{}",
           describe_device_pointer_locked(device, address_of(ptr)));
    }
  }
  submit(
      "deallocate_async", Call::Deallocate, device, stream, injection,
      [this, device, ptr] { release_allocation("deallocate_async", device, ptr); },
      OnDefault::QueueWhenBusy);
}

// ---- Page-locked host memory --------------------------------------------------------------------

void* HostBackend::host_allocate(int device, std::size_t bytes, HostAllocFlags flags) {
  const detail::Injection injection = detail::begin_call(Call::HostAllocate, device);
  if (injection) throw_injected("host_allocate", Call::HostAllocate, injection, device, bytes);
  check_device("host_allocate", device);
  if (bytes == 0) return nullptr;
  // Page-aligned and a whole number of pages, as page-locking works on pages.
  const std::size_t rounded = (bytes + kPageSize - 1) / kPageSize * kPageSize;
  void* const ptr = rounded < bytes
                        ? nullptr
                        : ::operator new(rounded, std::align_val_t{kPageSize}, std::nothrow);
  if (ptr == nullptr) {
    throw OutOfMemory(fmt::format("host host_allocate: out of memory allocating {} ({} bytes) of "
                                  "page-locked host memory",
                                  format_bytes(bytes), bytes),
                      clamp_to_int64(bytes));
  }
  const std::lock_guard lock(memory_mutex_);
  host_allocations_.emplace(address_of(ptr),
                            HostRange{bytes, has_flag(flags, HostAllocFlags::Mapped)});
  return ptr;
}

void HostBackend::host_deallocate(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::HostDeallocate, device);
  if (injection) throw_injected("host_deallocate", Call::HostDeallocate, injection, device);
  check_device("host_deallocate", device);
  if (ptr == nullptr) return;
  // Like cudaFreeHost, which synchronises: streams of any device may still copy from or to it.
  drain(-1);
  {
    const std::lock_guard lock(memory_mutex_);
    const auto it = host_allocations_.find(address_of(ptr));
    if (it == host_allocations_.end()) {
      const auto inside = find_containing(host_allocations_, address_of(ptr), 1,
                                          [](const HostRange& range) { return range.bytes; });
      if (inside != host_allocations_.end()) {
        fail("host_deallocate", Status::InvalidValue,
             "{} is not the start of a page-locked host allocation (it lies {} bytes into the "
             "allocation at {:#x})",
             fmt::ptr(ptr), address_of(ptr) - inside->first, inside->first);
      }
      fail("host_deallocate", Status::InvalidValue, "{} is not a page-locked host allocation",
           fmt::ptr(ptr));
    }
    host_allocations_.erase(it);
  }
  ::operator delete(ptr, std::align_val_t{kPageSize});
}

void HostBackend::host_register(int device, void* ptr, std::size_t bytes, HostRegisterFlags flags) {
  const detail::Injection injection = detail::begin_call(Call::HostRegister, device);
  if (injection) throw_injected("host_register", Call::HostRegister, injection, device);
  check_device("host_register", device);
  const std::uintptr_t begin = address_of(ptr);
  if (ptr == nullptr || bytes == 0 || begin + bytes < begin) {
    fail("host_register", Status::InvalidValue,
         "cannot register {} ({} bytes): the pointer must be non-null and the range non-empty",
         fmt::ptr(ptr), bytes);
  }
  const std::uintptr_t end = begin + bytes;
  const std::lock_guard lock(memory_mutex_);
  // Entries of one map never overlap each other, so the last one starting before `end` is the
  // only candidate for an overlap.
  const auto overlapping = [&](const HostRangeMap& ranges) {
    auto it = ranges.lower_bound(end);
    if (it == ranges.begin()) return ranges.end();
    --it;
    return it->first + it->second.bytes > begin ? it : ranges.end();
  };
  if (const auto it = overlapping(registrations_); it != registrations_.end()) {
    fail("host_register", Status::HostMemoryAlreadyRegistered,
         "{} ({} bytes) overlaps a registered range ({:#x}, {} bytes)", fmt::ptr(ptr), bytes,
         it->first, it->second.bytes);
  }
  if (const auto it = overlapping(host_allocations_); it != host_allocations_.end()) {
    fail("host_register", Status::HostMemoryAlreadyRegistered,
         "{} ({} bytes) overlaps a page-locked host allocation ({:#x}, {} bytes)", fmt::ptr(ptr),
         bytes, it->first, it->second.bytes);
  }
  registrations_.emplace(begin, HostRange{bytes, has_flag(flags, HostRegisterFlags::Mapped)});
}

void HostBackend::host_unregister(int device, void* ptr) {
  const detail::Injection injection = detail::begin_call(Call::HostUnregister, device);
  if (injection) throw_injected("host_unregister", Call::HostUnregister, injection, device);
  check_device("host_unregister", device);
  const std::lock_guard lock(memory_mutex_);
  const auto it = registrations_.find(address_of(ptr));
  if (it == registrations_.end()) {
    const auto inside = find_containing(registrations_, address_of(ptr), 1,
                                        [](const HostRange& range) { return range.bytes; });
    if (inside != registrations_.end()) {
      fail("host_unregister", Status::HostMemoryNotRegistered,
           "{} is not the start of a registered range (it lies {} bytes into the range "
           "registered at {:#x})",
           fmt::ptr(ptr), address_of(ptr) - inside->first, inside->first);
    }
    fail("host_unregister", Status::HostMemoryNotRegistered, "{} is not a registered range",
         fmt::ptr(ptr));
  }
  registrations_.erase(it);
}

int HostBackend::pointer_device(const void* ptr) {
  if (ptr == nullptr) return -1;
  const std::uintptr_t address = address_of(ptr);
  const std::lock_guard lock(memory_mutex_);
  for (std::size_t device = 0; device < devices_.size(); ++device) {
    const AllocationMap& allocations = devices_[device].allocations;
    if (find_containing(allocations, address, 1, size_of_allocation) != allocations.end()) {
      return static_cast<int>(device);
    }
  }
  // Managed memory belongs to the device it was allocated for, as CUDA reports it.
  const auto managed_size = [](const ManagedRangeState& range) { return range.bytes; };
  if (const auto it = find_containing(managed_, address, 1, managed_size); it != managed_.end()) {
    return it->second.device;
  }
  return imported_device_locked(address, 1);
}

void* HostBackend::mapped_device_pointer(int device, void* host_ptr) {
  check_device("mapped_device_pointer", device);
  const std::uintptr_t address = address_of(host_ptr);
  const auto host_range_size = [](const HostRange& range) { return range.bytes; };
  const std::lock_guard lock(memory_mutex_);
  if (host_ptr != nullptr) {
    const auto allocation = find_containing(host_allocations_, address, 1, host_range_size);
    if (allocation != host_allocations_.end()) {
      if (allocation->second.mapped) return host_ptr;  // unified addressing: same address
      fail("mapped_device_pointer", Status::InvalidValue,
           "{} lies in page-locked host memory allocated without HostAllocFlags::Mapped",
           fmt::ptr(host_ptr));
    }
    const auto registration = find_containing(registrations_, address, 1, host_range_size);
    if (registration != registrations_.end()) {
      if (registration->second.mapped) return host_ptr;
      fail("mapped_device_pointer", Status::InvalidValue,
           "{} lies in host memory registered without HostRegisterFlags::Mapped",
           fmt::ptr(host_ptr));
    }
  }
  fail("mapped_device_pointer", Status::InvalidValue,
       "{} is not in mapped host memory (allocate it with HostAllocFlags::Mapped or register it "
       "with HostRegisterFlags::Mapped)",
       fmt::ptr(host_ptr));
}

}  // namespace devmem::host

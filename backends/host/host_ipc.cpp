// Inter-process sharing of the host backend's device memory (docs/scaling-out.md#ipc).
//
// Design. Ordinary device allocations stay ordinary process memory (operator new, whole pages of
// their own: see kDeviceAlignment in host_backend.cpp), so allocating costs no file descriptor
// and no system call. An allocation becomes shareable only when it is exported:
// 1. the device's streams are drained (nothing may write it meanwhile);
// 2. a memfd of the allocation's pages is created and its current bytes copied into it;
// 3. the memfd is mapped MAP_SHARED | MAP_FIXED over the allocation's own pages, so every pointer
//    into it stays valid and now addresses shared memory.
// The memfd stays open in the exporter until the allocation is freed; then its pages are mapped
// private and anonymous again (before operator delete gives them back to the heap) and the memfd
// is closed. The handle names the exporter's pid, the memfd's descriptor number and a random
// token that is also the memfd's name; an importer opens /proc/<pid>/fd/<fd> (permitted for a
// process of the same user, as ptrace's read access), checks the name against the token (the
// number may have been reused after a free) and maps the memfd. Nothing is ever created in
// /dev/shm, so nothing is left behind when a process dies: the memfd disappears with its last
// descriptor and mapping.
// Caveat of the simulation: the remap copies the allocation, so exporting must not race with a
// host thread writing the allocation outside devmem's streams (a GPU exports without copying).
#include "backends/host/host_backend.hpp"

#include <cerrno>
#include <cstring>
#include <random>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace devmem::host {
namespace {

std::uintptr_t address_of(const void* ptr) noexcept {
  return reinterpret_cast<std::uintptr_t>(ptr);
}

// The first bytes of every host backend handle (format version 1 of the vendor part).
constexpr std::array<char, 8> kHandleMagic{'d', 'm', 'h', 'o', 's', 't', '0', '1'};

/// The vendor part of a host backend IPC handle.
struct HandleFields {
  std::uint32_t pid = 0;
  std::int32_t fd = -1;
  std::uint64_t token = 0;
  std::uint64_t bytes = 0;
  std::uint64_t mapped = 0;
};

template <class T>
void put(VendorIpcHandle& handle, std::size_t& at, T value) noexcept {
  std::memcpy(handle.data() + at, &value, sizeof value);
  at += sizeof value;
}

template <class T>
T get(const VendorIpcHandle& handle, std::size_t& at) noexcept {
  T value{};
  std::memcpy(&value, handle.data() + at, sizeof value);
  at += sizeof value;
  return value;
}

VendorIpcHandle encode(const HandleFields& fields) noexcept {
  VendorIpcHandle handle{};
  std::memcpy(handle.data(), kHandleMagic.data(), kHandleMagic.size());
  std::size_t at = kHandleMagic.size();
  put(handle, at, fields.pid);
  put(handle, at, fields.fd);
  put(handle, at, fields.token);
  put(handle, at, fields.bytes);
  put(handle, at, fields.mapped);
  return handle;
}

/// The fields, or nullopt when the bytes are not a host backend handle.
std::optional<HandleFields> decode(const VendorIpcHandle& handle) noexcept {
  if (std::memcmp(handle.data(), kHandleMagic.data(), kHandleMagic.size()) != 0) {
    return std::nullopt;
  }
  std::size_t at = kHandleMagic.size();
  HandleFields fields;
  fields.pid = get<std::uint32_t>(handle, at);
  fields.fd = get<std::int32_t>(handle, at);
  fields.token = get<std::uint64_t>(handle, at);
  fields.bytes = get<std::uint64_t>(handle, at);
  fields.mapped = get<std::uint64_t>(handle, at);
  return fields;
}

std::string memfd_name(std::uint64_t token) {
  return fmt::format("devmem-ipc-{:016x}", token);
}

std::string os_error(int error) {
  return std::string(std::strerror(error));
}

/// Closes a descriptor at scope exit unless released.
struct FdGuard {
  int fd = -1;
  explicit FdGuard(int descriptor) noexcept : fd(descriptor) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd >= 0) static_cast<void>(::close(fd));
  }
  int release() noexcept { return std::exchange(fd, -1); }
};

}  // namespace

void HostBackend::unshare(void* ptr, const Export& exported) noexcept {
  // Private anonymous pages over the shared ones: the heap gets back memory no other process can
  // see. Should that fail, the shared pages stay (still valid memory for the heap, only shared
  // with importers that kept a mapping).
  static_cast<void>(::mmap(ptr, exported.mapped, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
  static_cast<void>(::close(exported.fd));
}

int HostBackend::imported_device_locked(std::uintptr_t begin, std::size_t bytes) const {
  // Mappings never overlap: only the last one starting at or before `begin` can hold it.
  auto it = imports_.upper_bound(begin);
  if (it == imports_.begin()) return -1;
  --it;
  const std::size_t into = begin - it->first;
  const bool inside = into < it->second.bytes && bytes <= it->second.bytes - into;
  return inside ? it->second.device : -1;
}

bool HostBackend::supports_ipc(int device) {
  check_device("supports_ipc", device);
  return true;
}

AllocationRange HostBackend::allocation_range(int device, const void* ptr) {
  check_device("allocation_range", device);
  const std::lock_guard lock(memory_mutex_);
  const AllocationMap& allocations = devices_[static_cast<std::size_t>(device)].allocations;
  // Allocations never overlap: only the last one starting at or before `ptr` can hold it.
  auto it = allocations.upper_bound(address_of(ptr));
  bool found = false;
  if (it != allocations.begin()) {
    --it;
    found = address_of(ptr) - it->first < it->second;
  }
  if (!found) {
    const std::string what =
        imported_device_locked(address_of(ptr), 1) >= 0
            ? fmt::format("{} lies in memory opened from another process", fmt::ptr(ptr))
            : describe_device_pointer_locked(device, address_of(ptr));
    fail("allocation_range", Status::InvalidValue,
         "{} (not inside a device allocation of device {})", what, device);
  }
  return AllocationRange{reinterpret_cast<void*>(it->first), it->second};
}

VendorIpcHandle HostBackend::ipc_get_handle(int device, void* base) {
  check_device("ipc_get_handle", device);
  // The remap below copies the allocation: work already enqueued must not write it meanwhile.
  drain(-1);
  const std::lock_guard lock(memory_mutex_);
  const AllocationMap& allocations = devices_[static_cast<std::size_t>(device)].allocations;
  const auto allocation = allocations.find(address_of(base));
  if (allocation == allocations.end()) {
    fail("ipc_get_handle", Status::InvalidValue, "{}",
         describe_device_pointer_locked(device, address_of(base)));
  }
  const auto pid = static_cast<std::uint32_t>(::getpid());
  if (const auto it = exports_.find(address_of(base)); it != exports_.end()) {
    return encode({pid, it->second.fd, it->second.token, it->second.bytes, it->second.mapped});
  }
  Export exported;
  exported.bytes = allocation->second;
  exported.mapped = device_pages(exported.bytes);
  std::random_device random;
  exported.token = (std::uint64_t{random()} << 32) | random();
  const std::string name = memfd_name(exported.token);
  FdGuard fd{::memfd_create(name.c_str(), MFD_CLOEXEC)};
  if (fd.fd < 0) {
    fail("ipc_get_handle", Status::MemoryAllocation, "memfd_create for {} ({} bytes) failed: {}",
         fmt::ptr(base), exported.bytes, os_error(errno));
  }
  if (::ftruncate(fd.fd, static_cast<off_t>(exported.mapped)) != 0) {
    fail("ipc_get_handle", Status::MemoryAllocation,
         "sizing the memfd of {} to {} bytes failed: {}", fmt::ptr(base), exported.mapped,
         os_error(errno));
  }
  void* const staging =
      ::mmap(nullptr, exported.mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (staging == MAP_FAILED) {
    fail("ipc_get_handle", Status::MemoryAllocation, "mapping the memfd of {} failed: {}",
         fmt::ptr(base), os_error(errno));
  }
  std::memcpy(staging, base, exported.mapped);
  void* const shared =
      ::mmap(base, exported.mapped, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.fd, 0);
  const int map_error = errno;
  static_cast<void>(::munmap(staging, exported.mapped));
  if (shared == MAP_FAILED) {
    fail("ipc_get_handle", Status::MemoryAllocation,
         "mapping the memfd over the allocation at {} failed: {}", fmt::ptr(base),
         os_error(map_error));
  }
  exported.fd = fd.release();
  exports_.emplace(address_of(base), exported);
  return encode({pid, exported.fd, exported.token, exported.bytes, exported.mapped});
}

void* HostBackend::ipc_open(int device, const VendorIpcHandle& handle) {
  check_device("ipc_open", device);
  const std::optional<HandleFields> fields = decode(handle);
  if (!fields) {
    fail("ipc_open", Status::InvalidValue,
         "the vendor handle is not a host backend IPC handle (its first bytes are not 'dmhost01')");
  }
  if (fields->pid == 0 || fields->fd < 0 || fields->bytes == 0 ||
      fields->mapped != device_pages(fields->bytes)) {
    fail("ipc_open", Status::InvalidValue,
         "the vendor handle is malformed (pid {}, descriptor {}, {} bytes in {} mapped bytes)",
         fields->pid, fields->fd, fields->bytes, fields->mapped);
  }
  if (fields->pid == static_cast<std::uint32_t>(::getpid())) {
    fail("ipc_open", Status::InvalidValue,
         "the handle was exported by this process (pid {}): use the exported array itself",
         fields->pid);
  }
  const std::string process = fmt::format("/proc/{}", fields->pid);
  const std::string path = fmt::format("{}/fd/{}", process, fields->fd);
  FdGuard fd{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (fd.fd < 0) {
    const int error = errno;
    struct stat info {};
    if (::stat(process.c_str(), &info) != 0) {
      fail("ipc_open", Status::InvalidResourceHandle,
           "the exporting process {} has exited: its allocation is gone", fields->pid);
    }
    if (error == ENOENT) {
      fail("ipc_open", Status::InvalidResourceHandle,
           "process {} has freed the exported allocation (it has no descriptor {} any more)",
           fields->pid, fields->fd);
    }
    fail("ipc_open", Status::InvalidResourceHandle, "opening {} failed: {}", path, os_error(error));
  }
  // The descriptor number may have been reused for another file after a free: the memfd's name
  // carries the token.
  const std::string expected = "/memfd:" + memfd_name(fields->token);
  std::array<char, 256> target{};
  const ssize_t length =
      ::readlink(fmt::format("/proc/self/fd/{}", fd.fd).c_str(), target.data(), target.size() - 1);
  const std::string_view actual(target.data(), length > 0 ? static_cast<std::size_t>(length) : 0);
  if (!actual.starts_with(expected) ||
      (actual.size() != expected.size() && actual.substr(expected.size()) != " (deleted)")) {
    fail("ipc_open", Status::InvalidResourceHandle,
         "process {} has freed the exported allocation (its descriptor {} is now '{}')",
         fields->pid, fields->fd, actual);
  }
  struct stat info {};
  if (::fstat(fd.fd, &info) != 0 || static_cast<std::uint64_t>(info.st_size) < fields->mapped) {
    fail("ipc_open", Status::InvalidResourceHandle,
         "the shared memory of process {} holds fewer than the handle's {} bytes", fields->pid,
         fields->mapped);
  }
  void* const mapped =
      ::mmap(nullptr, fields->mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (mapped == MAP_FAILED) {
    fail("ipc_open", Status::MemoryAllocation, "mapping {} bytes shared by process {} failed: {}",
         fields->mapped, fields->pid, os_error(errno));
  }
  const std::lock_guard lock(memory_mutex_);
  imports_.emplace(address_of(mapped), Import{fields->bytes, fields->mapped, device});
  return mapped;
}

void HostBackend::ipc_close(int device, void* base) {
  check_device("ipc_close", device);
  // Like cudaIpcCloseMemHandle: work enqueued before may still use the mapping.
  drain(-1);
  Import imported;
  {
    const std::lock_guard lock(memory_mutex_);
    const auto it = imports_.find(address_of(base));
    if (it == imports_.end() || it->second.device != device) {
      fail("ipc_close", Status::InvalidValue, "{} is not memory opened with ipc_open on device {}",
           fmt::ptr(base), device);
    }
    imported = it->second;
    imports_.erase(it);
  }
  static_cast<void>(::munmap(base, imported.mapped));
}

}  // namespace devmem::host

// Inter-process sharing of the host backend's device memory (docs/scaling-out.md#ipc).
//
// Design. Ordinary device allocations stay ordinary process memory (operator new, whole pages of
// their own: see kDeviceAlignment in host_backend.hpp), so allocating costs no file descriptor
// and no system call. An allocation becomes shareable only when it is exported:
// 1. the device's streams are drained (nothing may write it meanwhile);
// 2. a memfd of the allocation's pages is created and its current bytes copied into it;
// 3. the memfd is mapped MAP_SHARED | MAP_FIXED over the allocation's own pages, so every pointer
//    into it stays valid and now addresses shared memory.
// The memfd stays open in the exporter until the allocation is freed; then its pages are mapped
// private and anonymous again (before operator delete gives them back to the heap) and the memfd
// is closed. The memfd is sealed against shrinking and growing, so the size an importer checks
// stays true. The handle names the exporter's pid, the memfd's descriptor number and a random
// token that is also the memfd's name. An importer checks /proc/<pid>/fd/<fd> before opening it:
// the link must name the memfd of that token (the number may have been reused after a free, or
// forged: opening an arbitrary file can have effects, a terminal can become the controlling one),
// then it opens it (permitted for a process of the same user, as ptrace's read access), checks
// that it opened the same inode, that it is sealed, and maps all of it: the memfd's size, not the
// handle's, is what the importer reports as mapped (Backend::ipc_open). Nothing is ever created in
// /dev/shm, so nothing is left behind when a process dies: the memfd disappears with its last
// descriptor and mapping.
// Caveat of the simulation: the remap copies the allocation, so exporting must not race with a
// host thread writing the allocation outside devmem's streams (a GPU exports without copying).
#include "backends/host/host_backend.hpp"

#include <algorithm>
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

constexpr std::string_view kMemfdPrefix = "devmem-ipc-";

std::string memfd_name(std::uint64_t token) {
  return fmt::format("{}{:016x}", kMemfdPrefix, token);
}

// Every exported memfd carries these: its size is fixed for as long as it exists.
constexpr int kExportSeals = F_SEAL_SHRINK | F_SEAL_GROW;

/// Whether `link` (a /proc/<pid>/fd/<n> link's text) names the memfd called `name`.
bool names_memfd(std::string_view link, std::string_view name) {
  constexpr std::string_view kPrefix = "/memfd:";
  constexpr std::string_view kDeleted = " (deleted)";  // memfds have no path: always shown
  if (!link.starts_with(kPrefix)) return false;
  link.remove_prefix(kPrefix.size());
  if (!link.starts_with(name)) return false;
  link.remove_prefix(name.size());
  return link.empty() || link == kDeleted;
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
  FdGuard fd{::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING)};
  if (fd.fd < 0) {
    fail("ipc_get_handle", Status::MemoryAllocation, "memfd_create for {} ({} bytes) failed: {}",
         fmt::ptr(base), exported.bytes, os_error(errno));
  }
  if (::ftruncate(fd.fd, static_cast<off_t>(exported.mapped)) != 0) {
    fail("ipc_get_handle", Status::MemoryAllocation,
         "sizing the memfd of {} to {} bytes failed: {}", fmt::ptr(base), exported.mapped,
         os_error(errno));
  }
  if (::fcntl(fd.fd, F_ADD_SEALS, kExportSeals | F_SEAL_SEAL) != 0) {
    fail("ipc_get_handle", Status::MemoryAllocation, "sealing the memfd of {} failed: {}",
         fmt::ptr(base), os_error(errno));
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

AllocationRange HostBackend::ipc_open(int device, const VendorIpcHandle& handle) {
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
  const auto gone = [&](int error) {
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
    fail("ipc_open", Status::InvalidResourceHandle, "reading {} failed: {}", path, os_error(error));
  };
  // Checked before anything is opened: the number is the handle's, and opening whatever it names
  // (a terminal, a FIFO, a device) can have effects of its own.
  const std::string name = memfd_name(fields->token);
  std::array<char, 256> target{};
  const ssize_t length = ::readlink(path.c_str(), target.data(), target.size() - 1);
  if (length < 0) gone(errno);
  const std::string_view found(target.data(), static_cast<std::size_t>(length));
  if (!names_memfd(found, name)) {
    if (found.starts_with(fmt::format("/memfd:{}", kMemfdPrefix))) {
      fail("ipc_open", Status::InvalidResourceHandle,
           "process {} has freed the exported allocation (its descriptor {} is now another "
           "export, '{}')",
           fields->pid, fields->fd, found);
    }
    throw InvalidArgument(fmt::format(
        "host ipc_open: descriptor {} of process {} is '{}', not the exporter's memfd "
        "'memfd:{}': the handle does not name a shared allocation (forged, or the allocation was "
        "freed and the number reused); it was not opened",
        fields->fd, fields->pid, found, name));
  }
  struct stat named {};
  if (::stat(path.c_str(), &named) != 0) gone(errno);
  FdGuard fd{::open(path.c_str(), O_RDWR | O_NOCTTY | O_CLOEXEC)};
  if (fd.fd < 0) gone(errno);
  struct stat opened {};
  if (::fstat(fd.fd, &opened) != 0) {
    fail("ipc_open", Status::InvalidResourceHandle, "fstat of {} failed: {}", path,
         os_error(errno));
  }
  if (opened.st_dev != named.st_dev || opened.st_ino != named.st_ino) {
    fail("ipc_open", Status::InvalidResourceHandle,
         "process {} has freed the exported allocation (its descriptor {} changed while it was "
         "being opened)",
         fields->pid, fields->fd);
  }
  const int seals = ::fcntl(fd.fd, F_GET_SEALS);
  if (!S_ISREG(opened.st_mode) || opened.st_size <= 0 || seals < 0 ||
      (seals & kExportSeals) != kExportSeals) {
    throw InvalidArgument(
        fmt::format("host ipc_open: descriptor {} of process {} ('{}') is not a sealed memfd of a "
                    "devmem export "
                    "(mode {:o}, {} bytes, seals {}); it was not mapped",
                    fields->fd, fields->pid, found, opened.st_mode, opened.st_size, seals));
  }
  // All of the memfd is mapped, and only it: its size, not the handle's, bounds what the caller
  // may address.
  const auto memfd_bytes = static_cast<std::size_t>(opened.st_size);
  void* const mapped = ::mmap(nullptr, memfd_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (mapped == MAP_FAILED) {
    fail("ipc_open", Status::MemoryAllocation, "mapping {} bytes shared by process {} failed: {}",
         memfd_bytes, fields->pid, os_error(errno));
  }
  const std::size_t bytes = std::min<std::size_t>(fields->bytes, memfd_bytes);
  try {
    const std::lock_guard lock(memory_mutex_);
    imports_.emplace(address_of(mapped), Import{bytes, memfd_bytes, device});
  } catch (...) {
    static_cast<void>(::munmap(mapped, memfd_bytes));
    throw;
  }
  return AllocationRange{mapped, bytes};
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

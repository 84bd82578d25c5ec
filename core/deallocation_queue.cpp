// The deallocation queue of a context (ContextState): memory is obtained through the context's
// manager and returned to a queue that is flushed by Numba's rules (a count and a byte limit, out
// of memory, defer_cleanup), and the manager and limits are set here. A file of its own beside
// context.cpp, which creates contexts, and keep_alive.cpp, which holds asynchronous work's memory.
#include "core/internal.hpp"

#include <devmem/byte_size.hpp>

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iterator>
#include <string_view>
#include <utility>

namespace devmem::detail {

namespace {

std::int64_t byte_limit(const DeallocationConfig& config, MemoryManager& manager) {
  const auto total = static_cast<double>(manager.memory_info().total);
  return static_cast<std::int64_t>(total * config.max_pending_ratio);
}

}  // namespace

template <class Allocate>
void* ContextState::allocate_with_retry(Allocate&& allocate, const char* operation,
                                        std::int64_t bytes, const char* what) {
  try {
    return allocate();
  } catch (const OutOfMemory&) {
    // Numba's rule: free what is pending, then try exactly once more.
    flush(true);
    try {
      return allocate();
    } catch (const OutOfMemory& e) {
      MemoryInfo info{};
      try {
        info = manager()->memory_info();
      } catch (...) {  // the size and the vendor's error still make a useful message
      }
      throw OutOfMemory(
          fmt::format("{}: out of {} allocating {} bytes ({}) on device {} ({} free of {}, after "
                      "flushing pending deallocations): {}",
                      operation, what, bytes, format_bytes(bytes), device(),
                      format_bytes(info.free), format_bytes(info.total), e.what()),
          bytes);
    }
  }
}

std::shared_ptr<MemoryManager> ContextState::manager() const {
  std::lock_guard lock(queue_mutex);
  return current_manager;
}

void ContextState::set_manager(std::shared_ptr<MemoryManager> manager) {
  if (!manager) throw InvalidArgument("set_memory_manager: the manager is null");
  if (&manager->context() != &self) {
    throw InvalidArgument(
        fmt::format("set_memory_manager: manager '{}' was made for device {}, not for device {}",
                    manager->name(), manager->context().device(), device()));
  }
  if (manager->interface_version() != MemoryManager::kInterfaceVersion) {
    throw InvalidArgument(fmt::format(
        "set_memory_manager: memory manager '{}' has interface version {} - version {} required",
        manager->name(), manager->interface_version(), MemoryManager::kInterfaceVersion));
  }
  const std::int64_t limit = byte_limit(config, *manager);
  std::lock_guard lock(queue_mutex);
  current_manager = std::move(manager);
  max_pending_bytes = limit;
}

void ContextState::set_config(const DeallocationConfig& new_config) {
  if (new_config.max_pending_count < 0) {
    throw InvalidArgument(
        fmt::format("set_deallocation_config: max_pending_count must not be negative, got {}",
                    new_config.max_pending_count));
  }
  if (!(new_config.max_pending_ratio >= 0.0 && new_config.max_pending_ratio <= 1.0)) {
    throw InvalidArgument(
        fmt::format("set_deallocation_config: max_pending_ratio must be from 0 to 1, got {}",
                    new_config.max_pending_ratio));
  }
  const std::int64_t limit = byte_limit(new_config, *manager());
  std::lock_guard lock(queue_mutex);
  config = new_config;
  max_pending_bytes = limit;
}

std::shared_ptr<DeviceMemory> ContextState::allocate_device(
    std::int64_t bytes, const std::shared_ptr<StreamState>& stream, const char* operation) {
  auto memory = std::make_shared<DeviceMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  if (bytes == 0) return memory;
  collect_retired();
  auto mgr = manager();
  const auto size = static_cast<std::size_t>(bytes);
  const Stream on = StreamState::wrap(stream);
  void* ptr = allocate_with_retry([&] { return mgr->allocate(size, on); }, operation, bytes,
                                  "device memory");
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->owned = true;
  memory->manager = std::move(mgr);
  memory->stream = stream;
  device_counters.add(bytes);
  track_device_memory(memory);
  return memory;
}

std::shared_ptr<HostMemory> ContextState::allocate_host(std::int64_t bytes, HostAllocFlags flags,
                                                        const char* operation) {
  auto memory = std::make_shared<HostMemory>();
  memory->context = shared();
  memory->bytes = bytes;
  memory->alloc_flags = flags;
  memory->kind =
      has_flag(flags, HostAllocFlags::Mapped) ? HostMemoryKind::Mapped : HostMemoryKind::Pinned;
  if (bytes == 0) return memory;
  collect_retired();
  auto mgr = manager();
  const auto size = static_cast<std::size_t>(bytes);
  void* ptr = allocate_with_retry([&] { return mgr->host_allocate(size, flags); }, operation, bytes,
                                  "page-locked host memory");
  memory->ptr = static_cast<std::byte*>(ptr);
  memory->owned = true;
  memory->manager = std::move(mgr);
  host_counters.add(bytes);
  // Page-locked memory from the vendor (or a pool) is not guaranteed to be zeroed; devmem's host
  // arrays are. Write-combined memory is left alone: reading it back would be very slow and the
  // caller asked for memory to write.
  if (!has_flag(flags, HostAllocFlags::WriteCombined)) {
    std::memset(ptr, 0, size);
  }
  if (memory->kind == HostMemoryKind::Mapped) {
    memory->device_ptr = static_cast<std::byte*>(backend().mapped_device_pointer(device(), ptr));
  }
  return memory;
}

Stream ContextState::deallocation_stream(const std::weak_ptr<StreamState>& stream) const noexcept {
  if (auto alive = stream.lock()) return StreamState::wrap(std::move(alive));
  return StreamState::wrap(default_stream);
}

void ContextState::release(const std::shared_ptr<MemoryManager>& manager, void* ptr,
                           std::int64_t bytes, bool host, HostAllocFlags flags,
                           const std::weak_ptr<StreamState>& stream) noexcept {
  (host ? host_counters : device_counters).remove(bytes);
  bool over_limit = false;
  try {
    std::lock_guard lock(queue_mutex);
    queue.push_back(Pending{manager, ptr, bytes, host, flags, stream});
    queue_bytes += bytes;
    // Strict comparisons, as Numba: with the default count of 10 the 11th item flushes.
    over_limit = static_cast<std::int64_t>(queue.size()) > config.max_pending_count ||
                 queue_bytes > max_pending_bytes;
  } catch (const std::exception& e) {
    // Only push_back can fail (no memory for the queue node): free right away instead.
    report_error(fmt::format("queueing a deallocation of {} failed ({}); freeing it now",
                             static_cast<void*>(ptr), e.what()));
    try {
      if (host) {
        manager->host_deallocate(ptr, static_cast<std::size_t>(bytes), flags);
      } else {
        manager->deallocate(ptr, static_cast<std::size_t>(bytes), deallocation_stream(stream));
      }
    } catch (const std::exception& e2) {
      report_error(fmt::format("freeing {}: {}", static_cast<void*>(ptr), e2.what()));
    }
    return;
  }
  if (over_limit) flush(true);
}

void ContextState::flush(bool implicit) {
  std::deque<Pending> batch;
  {
    std::lock_guard lock(queue_mutex);
    if (defer_depth > 0) return;
    batch.swap(queue);
    queue_bytes = 0;
  }
  for (auto it = batch.begin(); it != batch.end(); ++it) {
    try {
      if (it->host) {
        it->manager->host_deallocate(it->ptr, static_cast<std::size_t>(it->bytes), it->flags);
      } else {
        it->manager->deallocate(it->ptr, static_cast<std::size_t>(it->bytes),
                                deallocation_stream(it->stream));
      }
    } catch (const std::exception& e) {
      // The failed item is dropped: its state is unknown and freeing it twice would be worse.
      // Everything after it goes back to the front of the queue for the next flush.
      const std::string message = fmt::format(
          "freeing {} of {} ({} bytes) failed; {} later deallocation(s) stay queued: {}",
          it->host ? "page-locked host memory" : "device memory", it->ptr, it->bytes,
          std::distance(std::next(it), batch.end()), e.what());
      {
        std::lock_guard lock(queue_mutex);
        for (auto rest = batch.rbegin(); rest.base() != std::next(it); ++rest) {
          queue_bytes += rest->bytes;
          queue.push_front(std::move(*rest));
        }
        if (implicit) errors.push_back(message);
      }
      if (implicit) {
        report_error(message);
        return;
      }
      // Same exception type, with the pointer and the queue state in the message.
      if (const auto* backend_error = dynamic_cast<const BackendError*>(&e)) {
        throw BackendError(backend_error->backend(), backend_error->function(),
                           backend_error->code(), backend_error->code_name(), message);
      }
      throw Error(message);
    }
  }
}

}  // namespace devmem::detail

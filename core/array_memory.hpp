// The memory objects arrays view: DeviceMemory (device-addressable memory, owned by devmem or
// viewed) and HostMemory (pageable, pinned or mapped host memory), and the process-wide list that
// finds the device memory an address lies in. Their destructors, which hand owned memory back to
// its context, are in core/array_memory.cpp; the list is in core/memory_owners.cpp. Not installed;
// only core/ includes it.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/host_array.hpp>
#include <devmem/memory_manager.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace devmem {

class Context;

namespace detail {

struct StreamState;
struct EventState;

/// Device-addressable memory: a device allocation owned by devmem, or memory owned by someone
/// else (mapped host memory, foreign memory) kept alive by `keep_alive`.
struct DeviceMemory {
  std::shared_ptr<Context> context;
  std::byte* ptr = nullptr;  // base of the memory; elements live at ptr + layout offsets
  std::int64_t bytes = 0;
  bool owned = false;
  std::shared_ptr<MemoryManager> manager;  // the manager that allocated `ptr` (owned memory)
  // The stream `ptr` was allocated on, handed to MemoryManager::deallocate. Weak: memory must not
  // keep a stream (and its vendor queue) alive after the last stream handle goes.
  std::weak_ptr<StreamState> stream;
  std::shared_ptr<const void> keep_alive;
  // For device views of mapped host memory: the host address of `ptr`. Lets the copy engine see
  // that a host array and a device view are the same bytes.
  std::byte* host_alias = nullptr;
  bool tracked = false;  // listed for device_memory_owner (track_device_memory)
  // Owned memory: a number no other allocation of the process has had (set by
  // track_device_memory), which views carry so that launch can tell a freed array's view from a
  // live one at the same address. 0 for memory devmem did not allocate.
  std::uint64_t generation = 0;
  // Memory of a stream-ordered manager (MemoryManager::allocates_in_stream_order) allocated on a
  // stream other than the default: valid in that stream's order only, until `allocated` completes.
  struct StreamOrder {
    std::shared_ptr<EventState> allocated;  // recorded on `stream` right after the allocation
    NativeStream stream = nullptr;
    std::atomic<bool> complete{false};  // `allocated` seen complete: no stream needs to wait
  };
  std::unique_ptr<StreamOrder> stream_order;

  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();
};

/// Makes work enqueued next on `use` wait until `memory`'s stream-ordered allocation is done, when
/// `use` is not the stream it was allocated on (review 2, N3). Nothing for other memory, and
/// nothing once the allocation is known complete (one event query until then). Defined in
/// context.cpp, next to the allocation that sets DeviceMemory::stream_order.
void order_after_allocation(const StreamState& use, const DeviceMemory& memory);

/// Lists `memory` (once its ptr and bytes are set) so that device_memory_owner finds it by any
/// address inside it; ~DeviceMemory takes it off the list. Thread-safe.
void track_device_memory(const std::shared_ptr<DeviceMemory>& memory);
void untrack_device_memory(const DeviceMemory& memory) noexcept;
/// The device memory (owned or viewed by devmem) that `address` lies in, while something still
/// holds it; null otherwise.
[[nodiscard]] std::shared_ptr<const void> device_memory_owner(const void* address);
/// Whether the owned allocation of `generation` (DeviceMemory::generation) is still alive.
[[nodiscard]] bool allocation_alive(std::uint64_t generation);

/// Host memory: pageable, pinned or mapped, owned by devmem or viewed.
struct HostMemory {
  std::byte* ptr = nullptr;
  std::int64_t bytes = 0;
  HostMemoryKind kind = HostMemoryKind::Pageable;
  bool owned = false;
  bool readonly = false;
  std::shared_ptr<Context> context;        // frees pinned / mapped allocations
  std::shared_ptr<MemoryManager> manager;  // the manager that allocated `ptr` (owned memory)
  HostAllocFlags alloc_flags = HostAllocFlags::None;
  std::byte* device_ptr = nullptr;  // device address of `ptr` for mapped memory
  std::shared_ptr<const void> keep_alive;

  HostMemory() = default;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  ~HostMemory();
};

}  // namespace detail
}  // namespace devmem

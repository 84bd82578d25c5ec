// Which device memory an address belongs to. A kernel's ArrayView parameter is a trivially
// copyable value (it must be, to be a kernel argument on a GPU), so it cannot own the memory it
// points into; devmem::launch instead looks up each view's address here and keeps that memory
// alive until the kernel has run, as it does for a DeviceArray argument.
#include "core/array_memory.hpp"

#include <devmem/device_array.hpp>

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <unordered_set>

namespace devmem::detail {
namespace {

class MemoryOwners {
 public:
  void add(const std::shared_ptr<DeviceMemory>& memory) {
    const std::lock_guard lock(mutex_);
    if (memory->owned) {
      memory->generation = ++last_generation_;
      live_generations_.insert(memory->generation);
    }
    entries_.emplace(memory->ptr,
                     Entry{memory->ptr + memory->bytes, memory.get(), memory, memory->owned});
  }

  void remove(const DeviceMemory& memory) noexcept {
    const std::lock_guard lock(mutex_);
    if (memory.generation != 0) live_generations_.erase(memory.generation);
    const auto [first, last] = entries_.equal_range(memory.ptr);
    for (auto it = first; it != last; ++it) {
      if (it->second.memory == &memory) {
        entries_.erase(it);
        return;
      }
    }
  }

  [[nodiscard]] bool alive(std::uint64_t generation) const {
    const std::lock_guard lock(mutex_);
    return live_generations_.contains(generation);
  }

  [[nodiscard]] std::shared_ptr<const void> owner_of(const void* address) const {
    const auto* byte = static_cast<const std::byte*>(address);
    const std::lock_guard lock(mutex_);
    // Allocations devmem owns never overlap, but views of foreign memory may lie inside them,
    // including devmem memory re-imported through an array interface without an owner: such a
    // view holds nothing, so the owning allocation is preferred (review 2, N14). Walking back
    // from the address, the first owned entry decides whether an owned allocation contains it
    // (no earlier one can); otherwise the nearest foreign entry that contains it is the answer.
    // The walk is bounded: a launch asks this for every view argument.
    std::shared_ptr<DeviceMemory> foreign;
    bool owned_decided = false;
    int looked = 0;
    for (auto it = entries_.upper_bound(byte); it != entries_.begin() && looked < kMaxLookBack;
         ++looked) {
      --it;
      const Entry& entry = it->second;
      if (entry.owned) {
        if (!owned_decided && byte < entry.end) {
          if (auto owner = entry.weak.lock()) return owner;
        }
        owned_decided = true;
      } else if (!foreign && byte < entry.end) {
        foreign = entry.weak.lock();
      }
      if (owned_decided && foreign) break;
    }
    return foreign;
  }

 private:
  static constexpr int kMaxLookBack = 64;
  struct Entry {
    const std::byte* end;
    const DeviceMemory* memory;
    std::weak_ptr<DeviceMemory> weak;
    bool owned;  // allocated by devmem (DeviceMemory::owned), not a view of foreign memory
  };
  mutable std::mutex mutex_;
  std::multimap<const std::byte*, Entry> entries_;  // by the memory's first byte
  std::uint64_t last_generation_ = 0;
  std::unordered_set<std::uint64_t> live_generations_;  // of the owned entries
};

MemoryOwners& owners() {
  // Never destroyed: device memory held by static objects is released after static destructors
  // of this library may have run.
  static auto* const instance = new MemoryOwners;
  return *instance;
}

}  // namespace

void track_device_memory(const std::shared_ptr<DeviceMemory>& memory) {
  if (memory->ptr == nullptr || memory->bytes <= 0) return;
  owners().add(memory);
  memory->tracked = true;
}

void untrack_device_memory(const DeviceMemory& memory) noexcept {
  if (memory.tracked) owners().remove(memory);
}

bool allocation_alive(std::uint64_t generation) {
  return owners().alive(generation);
}

ViewOrigin view_origin(const DeviceMemory* memory) noexcept {
  if (memory == nullptr) return {};
  // Owned memory without a host alias is device memory proper; mapped or registered host memory
  // (host_alias) stays host-accessible, and foreign memory is not devmem's to judge.
  return ViewOrigin{memory->generation, memory->owned && memory->host_alias == nullptr};
}

std::shared_ptr<const void> device_memory_owner(const void* address) {
  if (address == nullptr) return nullptr;
  return owners().owner_of(address);
}

}  // namespace devmem::detail

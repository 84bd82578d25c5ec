// The strict fake runtime's memory calls: device allocations (first fit from the arena, poisoned
// when freed), stream-ordered allocations (valid only once their stream reaches them), page-locked
// allocations (poisoned and quarantined when freed), registrations and pointer queries. Apart from
// the other calls because memory has rules of its own (capture forbids it, frees synchronise).
#include "backends/strict_fake/strict_fake_runtime_state.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

namespace devmem::strict_fake {

// ---- Memory ----

S StrictFakeApi::malloc(void** ptr, std::size_t bytes) {
  STRICT_FAKE_PROLOGUE("strictFakeMalloc");
  *ptr = nullptr;
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (bytes == 0) return {kOk, kFn};
  *ptr = r.allocate(t_current, bytes);
  return *ptr != nullptr ? S{kOk, kFn} : fail(kOutOfMemory, kFn);
}
S StrictFakeApi::free(void* ptr) {
  STRICT_FAKE_PROLOGUE("strictFakeFree");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (ptr == nullptr) return {kOk, kFn};
  const auto it = r.blocks.find(static_cast<const char*>(ptr));
  if (it == r.blocks.end()) return fail(kInvalidValue, kFn);
  const Block block = it->second;
  r.blocks.erase(it);
  ++r.counters.frees;
  r.run_all(lock);  // like cudaFree: the device's work has completed first
  r.give_back(static_cast<const char*>(ptr), block);
  return {kOk, kFn};
}
S StrictFakeApi::mallocAsync(void** ptr, std::size_t bytes, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMallocAsync");
  *ptr = nullptr;
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  if (bytes == 0) return {kOk, kFn};
  *ptr = r.allocate(s->device, bytes);
  if (*ptr == nullptr) return fail(kOutOfMemory, kFn);
  if (!captured) {
    // Valid in the stream's order only, as CUDA's stream-ordered allocator promises: until the
    // stream reaches it, the pool may still be handing the bytes over from another stream's free.
    auto reached = std::make_shared<std::atomic<bool>>(false);
    r.blocks[static_cast<const char*>(*ptr)].reached = reached;
    Op op;
    op.run = [reached] { reached->store(true); };
    op.under_lock = true;
    enqueue(r, lock, s, std::move(op));
  }
  return {kOk, kFn};
}
S StrictFakeApi::freeAsync(void* ptr, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeFreeAsync");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  const auto it = r.blocks.find(static_cast<const char*>(ptr));
  if (it == r.blocks.end()) return fail(kInvalidValue, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  const Block block = it->second;
  const char* const start = it->first;
  r.blocks.erase(it);
  Op op;
  // The block goes back to the pool, poisoned, when the stream reaches the free (under the
  // lock: the allocator is the runtime's state). Captured: when the graph would run, which the
  // fake never does, so the block stays out of the pool.
  op.run = [&r, start, block] { r.give_back(start, block); };
  op.under_lock = true;
  if (!captured) enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
S StrictFakeApi::memoryPoolsSupported(int device, bool* supported) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceGetAttribute");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  *supported = true;
  return {kOk, kFn};
}
// The fake's pool hands freed blocks back at once (its first-fit allocator): the settings are
// checked, not kept.
S StrictFakeApi::setPoolReleaseThreshold(int device, std::uint64_t /*bytes*/) {
  STRICT_FAKE_PROLOGUE("strictFakeMemPoolSetAttribute");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::trimPoolTo(int device, std::size_t /*bytes*/) {
  STRICT_FAKE_PROLOGUE("strictFakeMemPoolTrimTo");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::hostAlloc(void** ptr, std::size_t bytes, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeHostAlloc");
  *ptr = nullptr;
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (bytes == 0) return {kOk, kFn};
  void* const p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail(kOutOfMemory, kFn);
  *ptr = p;
  r.pinned.emplace(static_cast<const char*>(p), bytes);
  r.pinned_live += bytes;
  if (r.pinned_live > r.pinned_level) {
    r.counters.pinned_peak = std::max(r.counters.pinned_peak, r.pinned_live - r.pinned_level);
  }
  return {kOk, kFn};
}
S StrictFakeApi::hostFree(void* ptr) {
  STRICT_FAKE_PROLOGUE("strictFakeFreeHost");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (ptr == nullptr) return {kOk, kFn};
  const auto it = r.pinned.find(static_cast<const char*>(ptr));
  if (it == r.pinned.end()) return fail(kInvalidValue, kFn);
  const std::size_t bytes = it->second;
  r.pinned.erase(it);
  r.pinned_live -= bytes;
  ++r.counters.frees;
  r.run_all(lock);  // like cudaFreeHost: the device's work has completed first
  // Poisoned and kept mapped for a while, so a late reader (host or DMA) reads 0xDB.
  std::memset(ptr, kPoison, bytes);
  r.quarantine.emplace_back(static_cast<char*>(ptr), bytes);
  r.quarantine_bytes += bytes;
  while (r.quarantine_bytes > (std::size_t{64} << 20) && r.quarantine.size() > 1) {
    const auto [old, old_bytes] = r.quarantine.front();
    r.quarantine.pop_front();
    r.quarantine_bytes -= old_bytes;
    munmap(old, old_bytes);
  }
  return {kOk, kFn};
}
S StrictFakeApi::hostRegister(void* ptr, std::size_t bytes, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeHostRegister");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (ptr == nullptr || bytes == 0 || r.in_arena(ptr)) return fail(kInvalidValue, kFn);
  const auto* c = static_cast<const char*>(ptr);
  auto it = r.registered.lower_bound(c);
  const bool overlaps_next = it != r.registered.end() && it->first < c + bytes;
  const bool overlaps_prev = it != r.registered.begin() && (--it, it->first + it->second > c);
  if (overlaps_next || overlaps_prev) return fail(kHostMemoryAlreadyRegistered, kFn);
  r.registered.emplace(c, bytes);
  return {kOk, kFn};
}
S StrictFakeApi::hostUnregister(void* ptr) {
  STRICT_FAKE_PROLOGUE("strictFakeHostUnregister");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (r.registered.erase(static_cast<const char*>(ptr)) == 0) {
    return fail(kHostMemoryNotRegistered, kFn);
  }
  return {kOk, kFn};
}
S StrictFakeApi::hostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeHostGetDevicePointer");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *device_ptr = nullptr;
  if (!Runtime::contains(r.pinned, host_ptr) && !Runtime::contains(r.registered, host_ptr)) {
    return fail(kInvalidValue, kFn);
  }
  *device_ptr = host_ptr;  // unified addressing: mapped memory has one address
  return {kOk, kFn};
}
S StrictFakeApi::isPageable(const void* ptr, bool* pageable) {
  STRICT_FAKE_PROLOGUE("strictFakePointerGetAttributes");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *pageable = r.pageable(ptr);
  return {kOk, kFn};
}
S StrictFakeApi::pointerDevice(const void* ptr, int* device) {
  STRICT_FAKE_PROLOGUE("strictFakePointerGetAttributes");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  const auto* block = r.in_arena(ptr) ? r.block_of(ptr, 1) : nullptr;
  *device = block != nullptr ? block->second.device : -1;
  return {kOk, kFn};
}
}  // namespace devmem::strict_fake

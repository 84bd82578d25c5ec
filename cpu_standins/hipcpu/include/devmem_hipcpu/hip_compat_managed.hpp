// Managed memory for HIP-CPU (roc-hipcpu and cuda-hipcpu presets only), following ROCm's documented
// semantics (HIP 5.2) on HIP-CPU's one device, whose memory is the host's:
// - hipMallocManaged allocates tracked memory (MemoryKind::Managed), so that hipFree, which ROCm
//   uses for managed memory too, and hipPointerGetAttributes (unified memory, isManaged) know it;
//   HIP-CPU's own hipMallocManaged is an untracked allocation that ignores its flags. Flags other
//   than hipMemAttachGlobal and hipMemAttachHost, a null pointer or 0 bytes: hipErrorInvalidValue.
// - hipMemPrefetchAsync (absent from HIP-CPU): the range must lie in one managed allocation
//   (hipErrorInvalidValue), the device must be 0 or hipCpuDeviceId (hipErrorInvalidDevice), the
//   stream valid (hipErrorInvalidHandle). There is nothing to migrate: it is an operation of the
//   stream that moves nothing, ordered like every other.
// - hipMemAdvise (absent from HIP-CPU): the same checks, and the advice must be one of ROCm's six
//   (hipErrorInvalidValue); ReadMostly and its unset form ignore the device, as ROCm documents.
//   Nothing changes where the memory lives (there is one memory), so the advice is only checked.
// Included by hip_compat.hpp after its definitions; the redirecting macro is at the end.
#pragma once

#if !defined(__HIP_CPU_RT__)
#error "devmem_hipcpu/hip_compat_managed.hpp is included by devmem_hipcpu/hip_compat.hpp"
#endif

#include <cstddef>
#include <cstdint>
#include <optional>

// ROCm's names and values, absent from HIP-CPU.
inline constexpr int hipCpuDeviceId = -1;
enum hipMemoryAdvise {
  hipMemAdviseSetReadMostly = 1,
  hipMemAdviseUnsetReadMostly = 2,
  hipMemAdviseSetPreferredLocation = 3,
  hipMemAdviseUnsetPreferredLocation = 4,
  hipMemAdviseSetAccessedBy = 5,
  hipMemAdviseUnsetAccessedBy = 6,
};

#pragma GCC visibility push(default)

namespace devmem::hipcpu {

/// Whether [ptr, ptr + bytes) lies in one managed allocation (bytes > 0).
[[nodiscard]] inline bool in_managed_memory(const void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return false;
  const std::optional<MemoryRange> range = State::get().find(ptr);
  if (!range || range->kind != MemoryKind::Managed) return false;
  const auto offset = reinterpret_cast<std::uintptr_t>(ptr) - range->begin;
  return bytes <= range->bytes - offset;
}

/// HIP-CPU's one device, or the host.
[[nodiscard]] inline bool is_location(int device) noexcept {
  return device == 0 || device == hipCpuDeviceId;
}

inline hipError_t hipMallocManaged(void** ptr, std::size_t bytes,
                                   unsigned flags = hipMemAttachGlobal) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (ptr == nullptr) return result(hipErrorInvalidValue);
  *ptr = nullptr;
  const bool known = flags == static_cast<unsigned>(hipMemAttachGlobal) ||
                     flags == static_cast<unsigned>(hipMemAttachHost);
  if (!known || bytes == 0) return result(hipErrorInvalidValue);
  return result(allocate_tracked(ptr, bytes, kDeviceAlignment, MemoryKind::Managed, flags));
}

inline hipError_t hipMemPrefetchAsync(const void* ptr, std::size_t bytes, int device,
                                      hipStream_t stream = nullptr) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (!in_managed_memory(ptr, bytes)) return result(hipErrorInvalidValue);
  if (!is_location(device)) return result(hipErrorInvalidDevice);
  if (const hipError_t status = enter_enqueue(stream); status != hipSuccess) {
    return result(status);
  }
  push(stream, [] {});  // one memory: the migration moves nothing, in the stream's order
  return hipSuccess;
}

inline hipError_t hipMemAdvise(const void* ptr, std::size_t bytes, hipMemoryAdvise advice,
                               int device) {
  if (const hipError_t status = enter(); status != hipSuccess) return result(status);
  if (!in_managed_memory(ptr, bytes)) return result(hipErrorInvalidValue);
  switch (advice) {
    case hipMemAdviseSetReadMostly:
    case hipMemAdviseUnsetReadMostly:
      return hipSuccess;  // the device is ignored
    case hipMemAdviseSetPreferredLocation:
    case hipMemAdviseUnsetPreferredLocation:
    case hipMemAdviseSetAccessedBy:
    case hipMemAdviseUnsetAccessedBy:
      return is_location(device) ? hipSuccess : result(hipErrorInvalidDevice);
  }
  return result(hipErrorInvalidValue);
}

}  // namespace devmem::hipcpu

#pragma GCC visibility pop

// Names HIP-CPU lacks.
using devmem::hipcpu::hipMemAdvise;
using devmem::hipcpu::hipMemPrefetchAsync;

// A name HIP-CPU has, with other semantics (untracked, flags ignored).
#define hipMallocManaged ::devmem::hipcpu::hipMallocManaged

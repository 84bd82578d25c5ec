// <hsa/hsa.h> for the roc-hipcpu preset: the part of the HSA runtime API that the ROC backend calls
// (backends/roc/roc_backend.cpp), for HIP-CPU's platform, whose only agent is the host CPU. HIP-CPU
// has no HSA layer; this follows the HSA 1.1 specification's semantics for these calls:
// - hsa_init / hsa_shut_down keep a reference count; every other call fails with
//   HSA_STATUS_ERROR_NOT_INITIALIZED while it is zero;
// - hsa_iterate_agents reports one agent, a CPU (HIP-CPU's "device" is the host processor);
// - hsa_memory_register / hsa_memory_deregister are the registration hint, which for OS-allocated
//   memory validates its arguments and has no other effect (the specification calls it a no-op
//   in the base profile); a NULL pointer is a no-op, size 0 with another pointer is invalid.
// Not used by any production build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>

enum hsa_status_t {
  HSA_STATUS_SUCCESS = 0x0,
  HSA_STATUS_INFO_BREAK = 0x1,
  HSA_STATUS_ERROR = 0x1000,
  HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001,
  HSA_STATUS_ERROR_INVALID_AGENT = 0x1004,
  HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008,
  HSA_STATUS_ERROR_NOT_INITIALIZED = 0x100B,
  HSA_STATUS_ERROR_REFCOUNT_OVERFLOW = 0x100C,
};

struct hsa_agent_t {
  std::uint64_t handle;
};

enum hsa_device_type_t {
  HSA_DEVICE_TYPE_CPU = 0,
  HSA_DEVICE_TYPE_GPU = 1,
  HSA_DEVICE_TYPE_DSP = 2,
};

enum hsa_agent_info_t {
  HSA_AGENT_INFO_NAME = 0,
  HSA_AGENT_INFO_DEVICE = 17,
};

#pragma GCC visibility push(default)

namespace devmem::hipcpu::hsa {

/// The runtime's reference count (one per process, never destroyed).
struct Runtime {
  std::mutex mutex;
  std::int32_t references = 0;
  static Runtime& get() {
    static auto* const runtime = new Runtime;
    return *runtime;
  }
  [[nodiscard]] bool initialized() {
    const std::lock_guard lock(mutex);
    return references > 0;
  }
};

/// The CPU agent's handle (any non-zero value).
inline constexpr std::uint64_t kCpuAgent = 1;

}  // namespace devmem::hipcpu::hsa

inline hsa_status_t hsa_init() {
  auto& runtime = devmem::hipcpu::hsa::Runtime::get();
  const std::lock_guard lock(runtime.mutex);
  if (runtime.references == INT32_MAX) return HSA_STATUS_ERROR_REFCOUNT_OVERFLOW;
  ++runtime.references;
  return HSA_STATUS_SUCCESS;
}

inline hsa_status_t hsa_shut_down() {
  auto& runtime = devmem::hipcpu::hsa::Runtime::get();
  const std::lock_guard lock(runtime.mutex);
  if (runtime.references == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  --runtime.references;
  return HSA_STATUS_SUCCESS;
}

/// "<NAME>: <description>", like ROCr's strings; works before hsa_init.
inline hsa_status_t hsa_status_string(hsa_status_t status, const char** text) {
  if (text == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (status) {
    case HSA_STATUS_SUCCESS:
      *text = "HSA_STATUS_SUCCESS: The function has been executed successfully.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_INFO_BREAK:
      *text = "HSA_STATUS_INFO_BREAK: A traversal over a list of elements has been interrupted.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR:
      *text = "HSA_STATUS_ERROR: A generic error has occurred.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_INVALID_ARGUMENT:
      *text =
          "HSA_STATUS_ERROR_INVALID_ARGUMENT: One of the actual arguments does not meet a "
          "precondition stated in the documentation of the corresponding formal argument.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_INVALID_AGENT:
      *text = "HSA_STATUS_ERROR_INVALID_AGENT: The agent is invalid.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_OUT_OF_RESOURCES:
      *text =
          "HSA_STATUS_ERROR_OUT_OF_RESOURCES: The runtime failed to allocate the necessary "
          "resources.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_NOT_INITIALIZED:
      *text =
          "HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init has been invoked while "
          "the reference count of the HSA runtime is zero.";
      return HSA_STATUS_SUCCESS;
    case HSA_STATUS_ERROR_REFCOUNT_OVERFLOW:
      *text = "HSA_STATUS_ERROR_REFCOUNT_OVERFLOW: The HSA runtime reference count has overflowed.";
      return HSA_STATUS_SUCCESS;
  }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

inline hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void* data),
                                       void* data) {
  if (!devmem::hipcpu::hsa::Runtime::get().initialized()) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (callback == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  const hsa_status_t status = callback(hsa_agent_t{devmem::hipcpu::hsa::kCpuAgent}, data);
  return status == HSA_STATUS_INFO_BREAK ? HSA_STATUS_SUCCESS : status;
}

inline hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void* value) {
  if (!devmem::hipcpu::hsa::Runtime::get().initialized()) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (agent.handle != devmem::hipcpu::hsa::kCpuAgent) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (value == nullptr) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  switch (attribute) {
    case HSA_AGENT_INFO_NAME: {
      char name[64] = "CPU";  // a 64-character field
      std::memcpy(value, name, sizeof name);
      return HSA_STATUS_SUCCESS;
    }
    case HSA_AGENT_INFO_DEVICE:
      *static_cast<hsa_device_type_t*>(value) = HSA_DEVICE_TYPE_CPU;
      return HSA_STATUS_SUCCESS;
  }
  return HSA_STATUS_ERROR_INVALID_ARGUMENT;
}

inline hsa_status_t hsa_memory_register(void* ptr, std::size_t size) {
  if (!devmem::hipcpu::hsa::Runtime::get().initialized()) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  if (ptr != nullptr && size == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  return HSA_STATUS_SUCCESS;
}

inline hsa_status_t hsa_memory_deregister(void* ptr, std::size_t size) {
  static_cast<void>(ptr);
  static_cast<void>(size);
  if (!devmem::hipcpu::hsa::Runtime::get().initialized()) return HSA_STATUS_ERROR_NOT_INITIALIZED;
  return HSA_STATUS_SUCCESS;
}

#pragma GCC visibility pop

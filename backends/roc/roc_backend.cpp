// The ROC backend: devmem::Backend over the HIP runtime, plus the HSA runtime where HIP has no
// equivalent. What it shares with CUDA is written once in gpu_runtime::RuntimeBackend; hip_api.hpp
// names the HIP calls. The mapping of each Backend method:
//   device_count / no_device_reason  hipGetDeviceCount; without a device, HSA agent discovery
//                                    (hsa_init, hsa_iterate_agents, hsa_agent_get_info) says why
//   properties                       hipGetDeviceProperties (gcnArchName, e.g. "gfx90a")
//   memory_info                      hipMemGetInfo
//   allocate / deallocate            hipMalloc / hipFree
//   host_allocate / host_deallocate  hipHostMalloc (hipHostMallocMapped + Coherent, or
//                                    NonCoherent; Portable; WriteCombined) / hipHostFree
//   host_register / host_unregister  hipHostRegister (hipHostRegisterMapped, Portable) /
//                                    hipHostUnregister; for mapped registrations (register_host,
//                                    registered(), mapped()) also the HSA registration hint
//                                    hsa_memory_register / hsa_memory_deregister (Numba's
//                                    roc.register / roc.deregister)
//   mapped_device_pointer            hipHostGetDevicePointer
//   streams                          hipStreamCreate (hipStreamDefault: blocking),
//                                    hipStreamDestroy, hipStreamSynchronize, hipStreamQuery,
//                                    hipStreamWaitEvent; the nullptr stream is HIP's null stream
//   events                           hipEventCreate (timing enabled), hipEventDestroy,
//                                    hipEventRecord, hipEventSynchronize, hipEventQuery,
//                                    hipEventElapsedTime
//   copy / copy_2d / copy_strided    hipMemcpyAsync / hipMemcpy2DAsync / hipMemcpy3DAsync
//   memset                           hipMemsetAsync
//   managed memory                   hipMallocManaged (hipMemAttachGlobal / Host), hipFree,
//                                    hipMemPrefetchAsync, hipMemAdvise
//   launch_host_function             hipStreamAddCallback (hipLaunchHostFunc is not exported by
//                                    Debian's HIP 5.2; see hip_api.hpp)
//   device selection                 hipGetDevice, hipSetDevice (only when it differs)
//   errors                           hipGetErrorName, hipGetErrorString, hipGetLastError;
//                                    hsa_status_string for HSA statuses
//
// Why HIP for everything HIP has, and HSA only for the rest: HIP keeps its own table of pinned and
// registered memory. Memory locked behind HIP's back (hsa_amd_memory_lock) would be unknown to it:
// hipMemcpyAsync would stage it like pageable memory and hipHostGetDevicePointer would reject it.
// So hipHostRegister does the locking and mapping (it calls the HSA lock itself), and HSA adds
// what HIP does not have: the registration hint of Numba's roc API, and agent discovery to explain
// a missing device. Device memory information comes from hipMemGetInfo (per HIP device, honouring
// HIP_VISIBLE_DEVICES), so HSA's memory pools are not consulted.
#include "backends/gpu_runtime/runtime_backend.hpp"
#include "backends/roc/hip_api.hpp"

#include "core/backend_factories.hpp"

#include <hsa/hsa.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace devmem {
namespace roc {
namespace {

// ---- HSA statuses -------------------------------------------------------------------------------

/// "HSA_STATUS_ERROR_INVALID_ARGUMENT (0x1001): One of the actual arguments does not meet ...".
/// hsa_status_string gives "<NAME>: <description>" and works before hsa_init.
struct HsaStatusText {
  std::string name;
  std::string description;
};

HsaStatusText hsa_status_text(hsa_status_t status) {
  const char* text = nullptr;
  if (hsa_status_string(status, &text) != HSA_STATUS_SUCCESS || text == nullptr) {
    return {fmt::format("HSA status {:#x}", static_cast<unsigned>(status)), {}};
  }
  const std::string_view full(text);
  const std::size_t colon = full.find(':');
  if (colon == std::string_view::npos) return {std::string(full), {}};
  std::string_view description = full.substr(colon + 1);
  while (!description.empty() && description.front() == ' ') description.remove_prefix(1);
  return {std::string(full.substr(0, colon)), std::string(description)};
}

std::string describe_hsa(const char* function, hsa_status_t status) {
  const HsaStatusText text = hsa_status_text(status);
  return fmt::format("{}: {} ({:#x}){}{}", function, text.name, static_cast<unsigned>(status),
                     text.description.empty() ? "" : ": ", text.description);
}

/// BackendError("roc", function, status, name, "roc <function>: <name> (<code>): <text>;
/// <context>")
BackendError hsa_error(const char* function, hsa_status_t status, std::string_view context) {
  const HsaStatusText text = hsa_status_text(status);
  return BackendError("roc", function, static_cast<int>(status), text.name,
                      fmt::format("roc {}{}{}", describe_hsa(function, status),
                                  context.empty() ? "" : "; ", context));
}

// ---- HSA initialisation -------------------------------------------------------------------------

/// hsa_init / hsa_shut_down, reference-counted: devmem opens HSA when its first user needs it (an
/// agent discovery, a registration hint) and shuts it down when the last one is done, so every
/// successful hsa_init is balanced by exactly one hsa_shut_down and nothing stays open for
/// nothing. ROCr counts hsa_init calls too, so HIP's own reference is never affected.
class HsaRuntime {
 public:
  HsaRuntime() = default;
  HsaRuntime(const HsaRuntime&) = delete;
  HsaRuntime& operator=(const HsaRuntime&) = delete;
  ~HsaRuntime() {
    if (references_ > 0) {
      references_ = 1;
      release();
    }
  }

  /// Takes a reference, initialising HSA for the first; the hsa_init status on failure (then no
  /// reference is held).
  [[nodiscard]] hsa_status_t acquire() {
    const std::lock_guard lock(mutex_);
    if (references_ == 0) {
      const hsa_status_t status = hsa_init();
      if (status != HSA_STATUS_SUCCESS) return status;
    }
    ++references_;
    return HSA_STATUS_SUCCESS;
  }

  /// Drops a reference; the last one shuts HSA down. A failing hsa_shut_down is reported, not
  /// thrown (it runs in destructors and unwinding).
  void release() noexcept {
    const std::lock_guard lock(mutex_);
    if (references_ == 0 || --references_ > 0) return;
    const hsa_status_t status = hsa_shut_down();
    if (status != HSA_STATUS_SUCCESS) {
      try {
        std::fprintf(stderr, "devmem: error: roc %s\n",
                     describe_hsa("hsa_shut_down", status).c_str());
      } catch (...) {
        std::fputs("devmem: error: roc hsa_shut_down failed\n", stderr);
      }
    }
  }

 private:
  std::mutex mutex_;
  int references_ = 0;
};

/// A reference to HSA for the duration of a scope.
class HsaScope {
 public:
  explicit HsaScope(HsaRuntime& runtime) : runtime_(runtime), status_(runtime.acquire()) {}
  HsaScope(const HsaScope&) = delete;
  HsaScope& operator=(const HsaScope&) = delete;
  ~HsaScope() {
    if (status_ == HSA_STATUS_SUCCESS) runtime_.release();
  }
  [[nodiscard]] hsa_status_t status() const noexcept { return status_; }

 private:
  HsaRuntime& runtime_;
  hsa_status_t status_;
};

// ---- Agent discovery ----------------------------------------------------------------------------

struct AgentCensus {
  hsa_status_t status = HSA_STATUS_SUCCESS;
  const char* function = "";  // the HSA function that failed
  int cpus = 0;
  std::vector<std::string> gpus;  // agent names, e.g. "gfx90a"
};

hsa_status_t count_agent(hsa_agent_t agent, void* data) {
  auto& census = *static_cast<AgentCensus*>(data);
  hsa_device_type_t type{};
  if (const hsa_status_t status = hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, &type);
      status != HSA_STATUS_SUCCESS) {
    census.function = "hsa_agent_get_info";
    return status;
  }
  if (type == HSA_DEVICE_TYPE_CPU) ++census.cpus;
  if (type != HSA_DEVICE_TYPE_GPU) return HSA_STATUS_SUCCESS;
  char name[64] = {};  // HSA_AGENT_INFO_NAME is a 64-character field
  if (const hsa_status_t status = hsa_agent_get_info(agent, HSA_AGENT_INFO_NAME, name);
      status != HSA_STATUS_SUCCESS) {
    census.function = "hsa_agent_get_info";
    return status;
  }
  try {
    census.gpus.emplace_back(name, strnlen(name, sizeof name));
  } catch (...) {
    census.function = "hsa_iterate_agents";
    return HSA_STATUS_ERROR_OUT_OF_RESOURCES;  // no exception may cross the C callback
  }
  return HSA_STATUS_SUCCESS;
}

/// The agents HSA sees, with HSA open only for the discovery.
AgentCensus discover_agents(HsaRuntime& runtime) {
  AgentCensus census;
  const HsaScope hsa(runtime);
  if (hsa.status() != HSA_STATUS_SUCCESS) {
    census.status = hsa.status();
    census.function = "hsa_init";
    return census;
  }
  census.status = hsa_iterate_agents(&count_agent, &census);
  if (census.status != HSA_STATUS_SUCCESS && *census.function == '\0') {
    census.function = "hsa_iterate_agents";
  }
  return census;
}

// ---- The backend --------------------------------------------------------------------------------

class RocBackend final : public gpu_runtime::RuntimeBackend<HipApi> {
 public:
  RocBackend() = default;
  ~RocBackend() override {
    // Hints still registered when the backend goes away (it normally lives until the process
    // exits): withdraw them so that HSA's reference count returns to zero.
    const std::lock_guard lock(hints_mutex_);
    for (const auto& [address, bytes] : hints_) {
      static_cast<void>(hsa_memory_deregister(reinterpret_cast<void*>(address), bytes));
      hsa_.release();
    }
    hints_.clear();
  }

  /// hipHostRegister pins and maps the memory. A mapped registration is what Numba's
  /// roc.register is for (memory a kernel agent may access), so it also gets HSA's registration
  /// hint, hsa_memory_register. The hint is cheap (ROCr only validates it today) and is what the
  /// HSA specification asks of such memory; it is not the lock, which hsa_amd_memory_lock would
  /// be, because locking behind HIP's back would hide the memory from HIP (see above). Pinned-only
  /// registrations (pinned()) are DMA staging, like CUDA's, and get no hint.
  void host_register(int device, void* ptr, std::size_t bytes, HostRegisterFlags flags) override {
    RuntimeBackend::host_register(device, ptr, bytes, flags);
    if (!has_flag(flags, HostRegisterFlags::Mapped)) return;
    try {
      register_hint(ptr, bytes);
    } catch (...) {
      // Leave nothing half-registered.
      if (HipApi::hostUnregister(ptr).code != hipSuccess) clear_last_error();
      throw;
    }
  }

  /// The hint is withdrawn first (hsa_memory_deregister), then HIP unregisters the memory; a
  /// failure of the former is reported after the latter has run.
  void host_unregister(int device, void* ptr) override {
    const ScopedDevice releasing = use_device_to_release("host_unregister", device);
    if (!releasing) return;
    std::optional<std::size_t> hinted;
    {
      const std::lock_guard lock(hints_mutex_);
      if (const auto it = hints_.find(reinterpret_cast<std::uintptr_t>(ptr)); it != hints_.end()) {
        hinted = it->second;
        hints_.erase(it);
      }
    }
    std::exception_ptr hint_error;
    if (hinted) {
      const hsa_status_t status = hsa_memory_deregister(ptr, *hinted);
      hsa_.release();
      if (status != HSA_STATUS_SUCCESS) {
        hint_error = std::make_exception_ptr(
            hsa_error("hsa_memory_deregister", status,
                      fmt::format("withdrawing the registration hint of {} ({} bytes)",
                                  fmt::ptr(ptr), *hinted)));
      }
    }
    RuntimeBackend::host_unregister(device, ptr);
    if (hint_error) std::rethrow_exception(hint_error);
  }

 protected:
  /// hipGetDeviceCount says "no device"; HSA's agent discovery says whether the ROCm driver is
  /// there at all, whether it sees no GPU, or whether it sees GPUs that HIP does not use.
  std::string explain_no_device(std::string runtime_reason) override {
    const AgentCensus agents = discover_agents(hsa_);
    std::string reason = std::move(runtime_reason);
    if (agents.status != HSA_STATUS_SUCCESS) {
      reason += "; " + describe_hsa(agents.function, agents.status);
      std::error_code ignored;
      if (!std::filesystem::exists("/dev/kfd", ignored)) {
        reason += " (/dev/kfd, the ROCm kernel driver's device, does not exist)";
      }
    } else if (agents.gpus.empty()) {
      reason += fmt::format("; HSA agent discovery finds no GPU agent ({} CPU agent{})",
                            agents.cpus, agents.cpus == 1 ? "" : "s");
    } else {
      reason += fmt::format(
          "; HSA agent discovery finds {} GPU agent{} ({}) that HIP does not use: check "
          "HIP_VISIBLE_DEVICES and whether this HIP supports them",
          agents.gpus.size(), agents.gpus.size() == 1 ? "" : "s", fmt::join(agents.gpus, ", "));
    }
    return reason;
  }

 private:
  void register_hint(void* ptr, std::size_t bytes) {
    if (const hsa_status_t status = hsa_.acquire(); status != HSA_STATUS_SUCCESS) {
      throw hsa_error("hsa_init", status,
                      fmt::format("opening HSA for the registration hint of {} ({} bytes)",
                                  fmt::ptr(ptr), bytes));
    }
    if (const hsa_status_t status = hsa_memory_register(ptr, bytes); status != HSA_STATUS_SUCCESS) {
      hsa_.release();
      throw hsa_error("hsa_memory_register", status,
                      fmt::format("registration hint of {} ({} bytes)", fmt::ptr(ptr), bytes));
    }
    try {
      const std::lock_guard lock(hints_mutex_);
      hints_.emplace(reinterpret_cast<std::uintptr_t>(ptr), bytes);
    } catch (...) {
      static_cast<void>(hsa_memory_deregister(ptr, bytes));
      hsa_.release();
      throw;
    }
  }

  HsaRuntime hsa_;
  std::mutex hints_mutex_;
  std::map<std::uintptr_t, std::size_t> hints_;  // hinted ranges: start -> bytes
};

}  // namespace
}  // namespace roc

std::unique_ptr<Backend> make_roc_backend() {
  return std::make_unique<roc::RocBackend>();
}

}  // namespace devmem

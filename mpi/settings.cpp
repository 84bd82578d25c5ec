// devmem::mpi's settings: the transport (device_direct or staged, DEVMEM_MPI_TRANSPORT), whether
// the MPI library takes device pointers (Open MPI's MPIX queries) and the staging chunk size
// (DEVMEM_MPI_CHUNK_BYTES), each read from the environment once and then kept under a lock.
#include <devmem/context.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace devmem::mpi {

namespace {

std::mutex g_settings_mutex;
std::optional<Transport> g_transport;
std::optional<std::int64_t> g_chunk_bytes;
constexpr std::int64_t kDefaultChunkBytes = std::int64_t{1} << 20;

}  // namespace

const char* to_string(Transport transport) noexcept {
  switch (transport) {
    case Transport::Automatic:
      return "automatic";
    case Transport::DeviceDirect:
      return "device_direct";
    case Transport::Staged:
      return "staged";
  }
  return "unknown";
}

Transport parse_transport(std::string_view name) {
  for (const Transport t : {Transport::Automatic, Transport::DeviceDirect, Transport::Staged}) {
    if (name == to_string(t)) return t;
  }
  throw InvalidArgument(fmt::format(
      "devmem::mpi: unknown transport '{}' (known: automatic, device_direct, staged)", name));
}

Transport transport() {
  const std::lock_guard lock(g_settings_mutex);
  if (!g_transport) {
    const char* env =
        std::getenv("DEVMEM_MPI_TRANSPORT");  // NOLINT(concurrency-mt-unsafe): read once, locked
    if (env == nullptr || *env == '\0') {
      g_transport = Transport::Automatic;
    } else {
      try {
        g_transport = parse_transport(env);
      } catch (const InvalidArgument& e) {
        throw InvalidArgument(fmt::format("DEVMEM_MPI_TRANSPORT: {}", e.what()));
      }
    }
  }
  return *g_transport;
}

void set_transport(Transport value) noexcept {
  const std::lock_guard lock(g_settings_mutex);
  g_transport = value;
}

bool device_aware(std::string_view backend) {
  if (backend == "cuda") {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() != 0;
#else
    return false;
#endif
  }
  if (backend == "roc") {
#if defined(MPIX_ROCM_AWARE_SUPPORT) && MPIX_ROCM_AWARE_SUPPORT
    return MPIX_Query_rocm_support() != 0;
#else
    return false;
#endif
  }
  return false;
}

Transport transport_for(const DeviceArray& array) {
  const Transport setting = transport();
  if (setting != Transport::Automatic) return setting;
  const std::shared_ptr<Context> context = array.context();
  const std::string backend = context ? std::string(context->backend_name()) : backend_name();
  return device_aware(backend) ? Transport::DeviceDirect : Transport::Staged;
}

std::int64_t staging_chunk_bytes() {
  const std::lock_guard lock(g_settings_mutex);
  if (!g_chunk_bytes) {
    const char* env =
        std::getenv("DEVMEM_MPI_CHUNK_BYTES");  // NOLINT(concurrency-mt-unsafe): locked
    if (env == nullptr || *env == '\0') {
      g_chunk_bytes = kDefaultChunkBytes;
    } else {
      char* end = nullptr;
      const long long value = std::strtoll(env, &end, 10);
      if (end == env || *end != '\0' || value <= 0) {
        throw InvalidArgument(
            fmt::format("DEVMEM_MPI_CHUNK_BYTES: '{}' is not a positive number of bytes", env));
      }
      g_chunk_bytes = value;
    }
  }
  return *g_chunk_bytes;
}

void set_staging_chunk_bytes(std::int64_t bytes) {
  if (bytes <= 0) {
    throw InvalidArgument(
        fmt::format("set_staging_chunk_bytes: the chunk size must be positive, got {}", bytes));
  }
  const std::lock_guard lock(g_settings_mutex);
  g_chunk_bytes = bytes;
}

}  // namespace devmem::mpi

// Counting the memfds the host backend keeps for exported (IPC) allocations, so that tests can
// check that none outlives its allocation.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace devmem_test {

/// Open memfds of exported allocations in this process (host backend; "memfd:devmem-ipc-...").
inline int exported_memfds() {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const auto target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string().find("memfd:devmem-ipc-") != std::string::npos) ++count;
  }
  return count;
}

}  // namespace devmem_test

// What the IPC tests (test_ipc.cpp, test_ipc_hardening.cpp) share: running this executable as the
// second process, forging handles (the byte format is in docs/scaling-out.md#ipc), and counting
// what a process holds, to show that a refused handle leaves nothing behind.
#pragma once

#include "support.hpp"

#include <devmem/ipc.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace conformance::ipc_test {

/// Result of a child process: exit status and everything it printed.
struct ChildResult {
  int status = -1;
  std::string output;
};

/// Runs this executable as an IPC child: `mode` and `args` after --devmem-ipc-child.
inline ChildResult run_child(const std::string& mode, const std::vector<std::string>& args) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  exe[n] = '\0';
  char path[] = "/tmp/devmem-ipc-child-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  std::string command = "'" + std::string(exe) + "' --devmem-ipc-child " + mode;
  for (const std::string& arg : args) command += " '" + arg + "'";
  command += " > '" + std::string(path) + "' 2>&1";
  const int status = std::system(command.c_str());  // NOLINT(cert-env33-c)
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  ChildResult result;
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.output = text.str();
  return result;
}

/// The handle's bytes with the field at `at` replaced by `value`, the checksum made right again:
/// a well-formed handle that says something else. FNV-1a is no authenticity check, so this is
/// what anyone who can write a handle can do.
template <class T>
std::vector<std::byte> patched(std::vector<std::byte> bytes, std::size_t at, T value) {
  if (bytes.size() < at + sizeof value + 8) throw std::logic_error("patched: handle too short");
  std::memcpy(bytes.data() + at, &value, sizeof value);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i) {
    hash ^= static_cast<std::uint64_t>(bytes[i]);
    hash *= 0x100000001b3ULL;
  }
  std::memcpy(&*(bytes.end() - 8), &hash, sizeof hash);
  return bytes;
}

// Field offsets of format version 2 (the first fields are those of version 1).
constexpr std::size_t kVersionAt = 8;
constexpr std::size_t kPidAt = 24;
constexpr std::size_t kDeviceAt = 32;
constexpr std::size_t kBackendAt = 37;  // after its one-byte length

/// Offset of the allocation size: after the backend name, the dtype's kind, itemsize, alignment
/// and typestr (each string after its one-byte length).
inline std::size_t allocation_at(const std::vector<std::byte>& bytes) {
  const std::size_t typestr_length_at =
      kBackendAt + std::to_integer<std::size_t>(bytes.at(kBackendAt - 1)) + 1 + 8 + 8;
  return typestr_length_at + 1 + std::to_integer<std::size_t>(bytes.at(typestr_length_at));
}
/// Offset of shape[0]: after the allocation size, the offset and the number of axes.
inline std::size_t shape_at(const std::vector<std::byte>& bytes) {
  return allocation_at(bytes) + 8 + 8 + 4;
}
/// Offset of the vendor handle of a handle whose dtype has no fields: before the field count and
/// the checksum.
inline std::size_t vendor_at(const std::vector<std::byte>& bytes) {
  return bytes.size() - 8 - 4 - devmem::IpcHandle::kVendorHandleBytes;
}

inline std::string hex_of(const std::vector<std::byte>& bytes) {
  std::string hex;
  for (const std::byte b : bytes) {
    char digits[3];
    std::snprintf(digits, sizeof digits, "%02x", std::to_integer<unsigned>(b));
    hex += digits;
  }
  return hex;
}

/// Descriptors open in this process.
inline int open_descriptors() {
  int count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

/// Mappings in this process of host backend IPC memfds ("/memfd:devmem-ipc-...").
inline int ipc_mappings() {
  std::ifstream maps("/proc/self/maps");
  int count = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:devmem-ipc-") != std::string::npos) ++count;
  }
  return count;
}

}  // namespace conformance::ipc_test

namespace conformance {
/// The modes of the second process that test_ipc_hardening.cpp adds; -1 for a mode it does not
/// know. `argv` starts with the handle.
int ipc_hardening_child(std::string_view mode, int argc, char** argv);
}  // namespace conformance

#define IPC_OR_RETURN()                                                                    \
  if (!devmem::ipc_supported()) {                                                          \
    DeviceArray probe = devmem::device_array<float>({4});                                  \
    CHECK_THROWS_MATCHES(probe.ipc_handle(), InvalidArgument, MessageContains("IPC"));     \
    WARN("the " << devmem::backend_name() << " backend has no IPC: only that is checked"); \
    return;                                                                                \
  }

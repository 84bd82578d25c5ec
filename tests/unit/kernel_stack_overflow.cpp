// A kernel thread that recurses past its stack in the host backend's simulator: the process must
// end with SIGSEGV and a message naming the thread, its block and the stack size, not with a bare
// segmentation fault. The kernel runs in a child process (fork before devmem is touched, so the
// child starts with no threads of devmem's to lose); the parent reads the child's stderr through
// a pipe and checks how it ended. Exit 0: as expected, 1: not, 77: skipped.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

DEVMEM_DEVICE int recurse(int depth, volatile char* previous) {
  volatile char frame[512];
  frame[0] = static_cast<char>(depth);
  frame[1] = previous != nullptr ? previous[0] : 0;
  // The addition after the call keeps it from becoming a loop (no tail call).
  return depth == 0 ? frame[1] : recurse(depth - 1, frame) + frame[0];
}

DEVMEM_KERNEL void overflow_in_one_thread(devmem::ArrayView<int, 1> out) {
  const bool chosen = devmem::block_idx().x == 1 && devmem::thread_idx().x == 3;
  // Far deeper than any fiber stack: 10^8 frames of at least 512 bytes.
  out[devmem::global_id()] = chosen ? recurse(100'000'000, nullptr) : 1;
}

[[noreturn, maybe_unused]] void run_child(int write_end) {  // unused in sanitizer builds
  ::dup2(write_end, STDERR_FILENO);
  ::close(write_end);
  const rlimit no_core{0, 0};  // the crash is expected: no core file
  ::setrlimit(RLIMIT_CORE, &no_core);
  const devmem::DeviceArray out = devmem::device_array<int>({16});
  devmem::launch({2, 8}, overflow_in_one_thread, out);
  devmem::synchronize();  // the launch returns before the kernel has run
  std::fprintf(stderr, "the kernel returned\n");
  std::_Exit(0);
}

}  // namespace

int main() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // ASan and TSan handle SIGSEGV themselves (ASan reports the stack overflow on its own), and the
  // simulator leaves their handling in place, so there is no message of devmem's to check.
  std::puts("skipped: sanitizer build");
  return 77;
#else
  setenv("DEVMEM_BACKEND", "host", 1);
  int fds[2];
  if (::pipe(fds) != 0) return 1;
  const pid_t child = ::fork();
  if (child < 0) return 1;
  if (child == 0) {
    ::close(fds[0]);
    run_child(fds[1]);
  }
  ::close(fds[1]);
  std::string err;
  char buffer[4096];
  ssize_t n = 0;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0)
    err.append(buffer, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return 1;
  std::printf("child stderr:\n%s\n", err.c_str());
  bool ok = true;
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV) {
    std::printf("FAILED: the child did not end with SIGSEGV (status %d)\n", status);
    ok = false;
  }
  const std::string expected =
      "devmem: kernel thread (3, 0, 0) of block (1, 0, 0) overflowed its stack of ";
  if (err.find(expected) == std::string::npos || err.find(" bytes") == std::string::npos) {
    std::printf("FAILED: no message '%s... bytes' on the child's stderr\n", expected.c_str());
    ok = false;
  }
  return ok ? 0 : 1;
#endif
}

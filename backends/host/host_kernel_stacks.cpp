// The fiber stacks of the host backend's kernel simulator: the pool that keeps them across blocks
// and launches, and the report of a kernel thread overflowing one. A kernel thread that overflows
// its stack faults in the guard region below it; a SIGSEGV handler on an alternate signal stack
// recognises that fault (asking the block scheduler, host_kernel.cpp, which stack the thread runs
// on) and ends the process with a message naming the block, the thread and the stack size,
// instead of a bare segmentation fault (not in sanitizer builds, whose runtimes report stack
// overflows themselves).
#include "backends/host/host_kernel.hpp"

#include <csignal>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>

namespace devmem::detail::sim {

StackPool& stack_pool() {
  static auto* pool = new StackPool;  // never destroyed: launches may run during static teardown
  return *pool;
}

#if !defined(DEVMEM_FIBER_ASAN) && !defined(DEVMEM_FIBER_TSAN)
// A stack overflow in a kernel thread. The handler runs on an alternate signal stack (the faulting
// stack has no room left) and may only use async-signal-safe calls: the message is assembled by
// hand and written with write(2).
struct sigaction g_previous_segv {};

class SignalText {
 public:
  void add(std::string_view text) noexcept {
    for (const char c : text) {
      if (length_ < sizeof(buffer_)) buffer_[length_++] = c;
    }
  }
  void add(std::uint64_t value) noexcept {
    char digits[20];
    std::size_t n = 0;
    do {
      digits[n++] = static_cast<char>('0' + value % 10);
      value /= 10;
    } while (value != 0);
    while (n != 0) add(std::string_view(&digits[--n], 1));
  }
  void add(const Dim3& d) noexcept {
    add("(");
    add(std::uint64_t{d.x});
    add(", ");
    add(std::uint64_t{d.y});
    add(", ");
    add(std::uint64_t{d.z});
    add(")");
  }
  void write_to_stderr() const noexcept {
    std::size_t written = 0;
    while (written < length_) {
      const ssize_t n = ::write(STDERR_FILENO, buffer_ + written, length_ - written);
      if (n <= 0) break;
      written += static_cast<std::size_t>(n);
    }
  }

 private:
  char buffer_[512];
  std::size_t length_ = 0;
};

void on_segv(int signal, siginfo_t* info, void* /*context*/) {
  if (const ThreadCoords* overflowed = overflowed_kernel_thread(info->si_addr)) {
    const ThreadCoords& coords = *overflowed;
    SignalText text;
    text.add("devmem: kernel thread ");
    text.add(coords.thread_idx);
    text.add(" of block ");
    text.add(coords.block_idx);
    text.add(" overflowed its stack of ");
    text.add(std::uint64_t{FiberStack::size()});
    text.add(
        " bytes (the host backend runs every GPU thread on a fixed-size stack: deep recursion or "
        "large local arrays in a kernel do not fit)\n");
    text.write_to_stderr();
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    ::sigaction(SIGSEGV, &default_action, nullptr);
    return;  // the faulting instruction runs again and the default action ends the process
  }
  // Not ours: whoever handled SIGSEGV before (or the default action) sees the fault as if this
  // handler were not installed, when the instruction faults again on return.
  ::sigaction(SIGSEGV, &g_previous_segv, nullptr);
  if (info->si_code <= 0) ::raise(signal);  // sent, not a fault: it would not come again
}

/// An alternate signal stack for this OS thread, unless it has one already.
class AltSignalStack {
 public:
  AltSignalStack() {
    stack_t current{};
    if (::sigaltstack(nullptr, &current) != 0 || (current.ss_flags & SS_DISABLE) == 0) return;
    memory_ = std::make_unique<std::byte[]>(kBytes);
    stack_t ours{};
    ours.ss_sp = memory_.get();
    ours.ss_size = kBytes;
    if (::sigaltstack(&ours, nullptr) != 0) memory_.reset();
  }
  AltSignalStack(const AltSignalStack&) = delete;
  AltSignalStack& operator=(const AltSignalStack&) = delete;
  ~AltSignalStack() {
    if (memory_ == nullptr) return;
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    ::sigaltstack(&off, nullptr);
  }

 private:
  static constexpr std::size_t kBytes = std::size_t{64} * 1024;
  std::unique_ptr<std::byte[]> memory_;
};

/// Makes a stack overflow in a kernel thread on this OS thread end with a message.
void prepare_overflow_report() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction action {};
    action.sa_sigaction = &on_segv;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGSEGV, &action, &g_previous_segv);
  });
  thread_local AltSignalStack alt_stack;
}
#else
// ASan and TSan install their own SIGSEGV handling (ASan reports a stack overflow itself).
void prepare_overflow_report() {}
#endif

}  // namespace devmem::detail::sim

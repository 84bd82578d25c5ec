// What the pieces of the host backend's kernel simulator share (not installed): the fiber stacks
// its simulated threads run on (host_kernel_stacks.cpp keeps them and reports their overflows),
// and the hooks by which the stack-overflow report and the bounds checks (host_kernel_checks.cpp)
// ask the block scheduler (host_kernel.cpp) about the kernel thread running on the calling OS
// thread. host_kernel.cpp's opening comment describes the simulator as a whole.
#pragma once

#include <devmem/kernel.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define DEVMEM_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DEVMEM_FIBER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define DEVMEM_FIBER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DEVMEM_FIBER_TSAN 1
#endif
#endif
#ifdef DEVMEM_FIBER_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef DEVMEM_FIBER_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace devmem::detail::sim {

#if defined(DEVMEM_FIBER_ASAN) || defined(DEVMEM_FIBER_TSAN)
inline constexpr std::size_t kStackBytes = std::size_t{1024} * 1024;  // sanitizers enlarge frames
#else
inline constexpr std::size_t kStackBytes = std::size_t{256} * 1024;
#endif

/// A fiber stack: mmap'ed (pages are committed on first touch) with a guard region below it, so
/// an overflowing kernel faults instead of overwriting a neighbour's stack. Empty when
/// default-constructed; FiberStack::map() makes one.
class FiberStack {
 public:
  FiberStack() = default;
  static FiberStack map() {
    FiberStack s;
    const std::size_t guard = guard_bytes();
    s.mapped_bytes_ = kStackBytes + guard;
    void* base = ::mmap(nullptr, s.mapped_bytes_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    s.base_ = static_cast<std::byte*>(base);
    if (::mprotect(s.base_, guard, PROT_NONE) != 0) throw std::bad_alloc();  // ~s unmaps
    s.bottom_ = s.base_ + guard;
    return s;
  }
  FiberStack(FiberStack&& other) noexcept { *this = std::move(other); }
  FiberStack& operator=(FiberStack&& other) noexcept {
    if (this != &other) {
      release();
      base_ = std::exchange(other.base_, nullptr);
      bottom_ = std::exchange(other.bottom_, nullptr);
      mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    }
    return *this;
  }
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  ~FiberStack() { release(); }

  [[nodiscard]] bool empty() const noexcept { return base_ == nullptr; }
  [[nodiscard]] void* bottom() const noexcept { return bottom_; }
  [[nodiscard]] void* top() const noexcept { return bottom_ + kStackBytes; }
  [[nodiscard]] static std::size_t size() noexcept { return kStackBytes; }
  /// Whether `address` lies in the guard region (a fault there is this stack overflowing).
  [[nodiscard]] bool guards(const void* address) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(address);
    return base_ != nullptr && a >= reinterpret_cast<std::uintptr_t>(base_) &&
           a < reinterpret_cast<std::uintptr_t>(bottom_);
  }

 private:
  // Several pages: a frame larger than one page (a local array) could otherwise skip over the
  // guard into whatever is mapped below. It costs address space only.
  static std::size_t guard_bytes() noexcept {
    return 16 * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  }
  void release() noexcept {
    if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
    base_ = nullptr;
  }

  std::byte* base_ = nullptr;
  std::byte* bottom_ = nullptr;
  std::size_t mapped_bytes_ = 0;
};

/// Stacks kept across launches: mapping and unmapping a stack per thread (and the page faults of
/// touching fresh pages) would cost more than running a small kernel thread. Runners take stacks
/// from here and give them back when their launch ends.
class StackPool {
 public:
  FiberStack take() {
    {
      const std::lock_guard lock(mutex_);
      if (!stacks_.empty()) {
        FiberStack s = std::move(stacks_.back());
        stacks_.pop_back();
        return s;
      }
    }
    return FiberStack::map();
  }
  void give_back(std::vector<FiberStack>& stacks) {
    const std::lock_guard lock(mutex_);
    for (auto& s : stacks) {
      if (stacks_.size() >= kMaxKept) break;  // the rest are unmapped by the caller's vector
      stacks_.push_back(std::move(s));
    }
  }

 private:
  // Enough for a few cores' worth of 1024-thread blocks all waiting at barriers.
  static constexpr std::size_t kMaxKept = 4096;
  std::mutex mutex_;
  std::vector<FiberStack> stacks_;
};

/// The process's pool of fiber stacks (never destroyed).
[[nodiscard]] StackPool& stack_pool();

/// Makes a stack overflow in a kernel thread on the calling OS thread end the process with a
/// message naming the thread (nothing in sanitizer builds, whose runtimes report overflows).
void prepare_overflow_report();

// ---- Defined by the block scheduler (host_kernel.cpp) ----

/// The coordinates of the kernel thread running on the calling OS thread when `address` lies in
/// the guard region of its stack (it overflowed); null otherwise. Async-signal-safe: it only reads
/// the calling OS thread's scheduler.
[[nodiscard]] const ThreadCoords* overflowed_kernel_thread(const void* address) noexcept;

/// Fails the block of the kernel thread running on the calling OS thread with `what` (an
/// out-of-bounds access), followed by that thread's coordinates; InvalidArgument
/// ("<what> (outside a kernel)") when no kernel thread runs on it.
[[noreturn]] void fail_kernel_access(const std::string& what);

// dynamic_shared<T>() is a raw pointer, which nothing can bounds-check as it is used. Instead the
// block's dynamic shared memory lies between two red zones of kRedZone bytes, filled with
// kRedZoneByte when a thread first asks for it; the zones are compared at every barrier and when
// the block ends, so a write past either end fails the launch naming the bytes, and lands in the
// zone rather than in the block's static shared arrays (placed after the second zone).
inline constexpr std::size_t kRedZone = 512;  // keeps the memory 64-byte aligned
inline constexpr unsigned char kRedZoneByte = 0xDB;

/// The failure to report when the red zones around the `dynamic_bytes` of dynamic shared memory
/// at `zones` + kRedZone (the first zone at `zones`, the second right after the memory) were
/// written by block `block`, found `where` (host_kernel_checks.cpp); nullopt when they are intact.
[[nodiscard]] std::optional<std::string> dynamic_shared_overrun(const std::byte* zones,
                                                                std::size_t dynamic_bytes,
                                                                const std::string& block,
                                                                const std::string& where);

/// Whether a simulated kernel thread runs on the calling OS thread.
[[nodiscard]] bool in_kernel_thread() noexcept;

}  // namespace devmem::detail::sim

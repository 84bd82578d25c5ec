// The block scheduler of the host backend's kernel simulator (host_kernel.cpp's opening comment
// describes the simulator as a whole): BlockRunner, which runs the blocks of a launch on one OS
// thread, each simulated thread a fiber, with what every block of a launch shares (KernelGrid).
// A header because its parts share its private state and live in several files: the fiber
// switching is here, inline, as the hot path of every kernel thread; the barrier matching and its
// divergence reports are in host_kernel_barriers.cpp, a block's shared memory in
// host_kernel_shared_memory.cpp, the launch and the hooks kernel code calls in host_kernel.cpp.
// Not installed; included by those three files only.
#pragma once

#include "backends/host/host_backend.hpp"
#include "backends/host/host_kernel.hpp"

#include <devmem/error.hpp>
#include <devmem/kernel.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/context/detail/fcontext.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace devmem::detail::sim {

namespace fctx = boost::context::detail;
using host::HostBackend;
using host::Status;

inline constexpr std::size_t kSharedAlignment = 64;
// CUDA's limit of a kernel's static __shared__ memory (all its arrays together).
inline constexpr std::size_t kStaticSharedLimit = std::size_t{48} * 1024;
// Shared memory starts as garbage on a GPU.
inline constexpr unsigned char kUninitialisedShared = 0xA5;

/// Thrown into a suspended simulated thread to unwind it when its block is aborted. Not a
/// std::exception, so kernel code catching std::exception does not swallow it.
struct BlockAbort {};

/// What every block of one launch shares (immutable while the grid runs).
struct KernelGrid {
  Dim3 grid;
  Dim3 block;
  std::size_t dynamic_shared_bytes = 0;
  std::size_t shared_limit = 0;
  unsigned warp_size = 32;
  int device = 0;
  std::shared_ptr<const std::function<void()>> body;
  std::string kernel_name;
};

inline std::string describe(const Dim3& d) {
  return fmt::format("({}, {}, {})", d.x, d.y, d.z);
}

inline std::string describe(const SourceSite& where) {
  std::string_view file = where.file;
  if (const auto slash = file.find_last_of('/'); slash != std::string_view::npos) {
    file.remove_prefix(slash + 1);
  }
  return fmt::format("{}:{}", file, where.line);
}

/// A constant shape as Python writes a tuple: (8,) or (16, 16).
inline std::string describe_shape(std::span<const std::size_t> shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

inline bool same_site(const SourceSite& a, const SourceSite& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

class BlockRunner;
// The scheduler of this OS thread, if any (host_kernel.cpp). Read by every thread index and
// barrier call of a kernel: initial-exec is one load from the thread pointer, where the default
// model of a shared library calls __tls_get_addr (one pointer fits the static TLS reserve even
// when dlopen'ed). constinit: no TLS wrapper function, as when it was internal to host_kernel.cpp.
[[gnu::tls_model("initial-exec")]] extern thread_local constinit BlockRunner* t_runner;

/// Runs the blocks handed to it on the calling OS thread, one block at a time.
class BlockRunner {
 public:
  explicit BlockRunner(const KernelGrid& grid)
      : grid_(grid),
        block_threads_(static_cast<std::size_t>(grid.block.volume())),
        threads_(block_threads_),
        shared_(grid.shared_limit + 2 * kRedZone + kSharedAlignment) {
    const Dim3& b = grid_.block;
    for (std::size_t i = 0; i < block_threads_; ++i) {
      const auto linear = static_cast<unsigned>(i);
      threads_[i].coords =
          ThreadCoords{Dim3(linear % b.x, (linear / b.x) % b.y, linear / (b.x * b.y)), Dim3(),
                       grid_.block, grid_.grid};
    }
    const auto base = reinterpret_cast<std::uintptr_t>(shared_.data());
    shared_base_ =
        shared_.data() + ((kSharedAlignment - base % kSharedAlignment) % kSharedAlignment);
#ifdef DEVMEM_FIBER_TSAN
    scheduler_tsan_ = __tsan_get_current_fiber();
#endif
  }
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;
  ~BlockRunner() {
    // run_block leaves no thread suspended (it aborts the block when it cannot finish it).
    stack_pool().give_back(spare_stacks_);
#ifdef DEVMEM_FIBER_TSAN
    for (void* fiber : spare_tsan_fibers_) __tsan_destroy_fiber(fiber);
#endif
  }

  /// Runs every thread of block `index` to completion; BackendError when the block fails.
  void run_block(const Dim3& index) {
    BlockRunner* const previous = std::exchange(t_runner, this);
    struct Restore {
      BlockRunner* previous;
      ~Restore() { t_runner = previous; }
    } restore{previous};

    start_block(index);
    while (true) {
      // cursor_ is advanced by the fibers too, when a returning thread starts the next one.
      for (cursor_ = 0; cursor_ < block_threads_ && !aborting_; ++cursor_) {
        if (threads_[cursor_].state == State::Ready) switch_to(cursor_);
      }
      const bool released = !aborting_ && release_barriers();
      if (!aborting_) check_red_zones(released);
      if (aborting_ || !released) break;
    }
    if (aborting_) {
      abort_block();
      throw HostBackend::make_error("launch", failure_status_,
                                    fmt::format("{}: {}", grid_.kernel_name, failure_));
    }
  }

  [[nodiscard]] bool in_thread() const noexcept { return current_ != kScheduler; }

  /// Whether `address` is in the guard region of the stack the current thread runs on.
  [[nodiscard]] bool current_stack_guards(const void* address) const noexcept {
    return in_thread() && threads_[current_].stack.guards(address);
  }

  /// Fails the block with `what` (an out-of-bounds access) followed by the calling thread.
  [[noreturn]] void fail_access(std::string_view what) {
    fail_in_thread(
        Status::LaunchFailure,
        fmt::format("{} in thread {} of block {}", what,
                    describe(threads_[current_].coords.thread_idx), describe(block_index_)));
  }
  [[nodiscard]] const ThreadCoords& coords() const noexcept { return threads_[current_].coords; }
  [[nodiscard]] int warp_size() const noexcept { return static_cast<int>(grid_.warp_size); }

  void* shared_storage(const void* key, std::size_t element_size,
                       std::span<const std::size_t> shape, std::size_t alignment,
                       const SourceSite& site, bool untagged);

  void* dynamic_shared(std::size_t alignment, std::size_t view_bytes);

  void wait_at_block_barrier(const char* name, const SourceSite& where) {
    SimThread& t = threads_[current_];
    t.state = State::AtBlockBarrier;
    t.barrier_name = name;
    t.site = where;
    yield();
  }

  /// wave_barrier (`mask` empty: the whole warp, and a thread of it that returned is divergence)
  /// or syncwarp(mask) (the lanes named, lane k being bit k; lanes that returned or that the block
  /// does not have are not waited for). A mask that does not name the calling thread fails the
  /// launch, as it is undefined on CUDA.
  void wait_at_warp_barrier(const SourceSite& where, std::optional<std::uint64_t> mask) {
    SimThread& t = threads_[current_];
    const std::size_t lane = current_ % grid_.warp_size;
    if (mask && !names_lane(mask, lane)) {
      fail_in_thread(Status::LaunchFailure,
                     fmt::format("syncwarp(mask 0x{:x}) at {}: the mask does not name the calling "
                                 "thread {} (lane {} of warp {}) of block {}; a thread calling "
                                 "syncwarp must be in its mask",
                                 *mask, describe(where), describe(t.coords.thread_idx), lane,
                                 current_ / grid_.warp_size, describe(block_index_)));
    }
    t.state = State::AtWarpBarrier;
    t.barrier_name = mask ? "syncwarp()" : "wave_barrier()";
    t.warp_mask = mask;
    t.site = where;
    yield();
  }

 private:
  static constexpr std::size_t kScheduler = static_cast<std::size_t>(-1);
  enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

  struct SimThread {
    ThreadCoords coords;
    State state = State::Done;
    // The fiber the thread runs on, from its first run until it returns: the context is set
    // while it waits at a barrier, the stack while it runs or waits.
    fctx::fcontext_t context = nullptr;
    FiberStack stack;
    const char* barrier_name = "";
    // At a warp barrier: syncwarp's mask (lane k is bit k), none for wave_barrier.
    std::optional<std::uint64_t> warp_mask;
    SourceSite site;
    void* asan_fake_stack = nullptr;
    void* tsan_fiber = nullptr;
  };
  struct SharedArrayPlace {
    const void* key;
    std::size_t offset;
    std::size_t bytes;
    bool untagged;    // asked for by an untagged shared_array call
    SourceSite site;  // the call's site (the first one reached, for a tagged array)
    std::string shape;
    std::size_t element_size;
  };

  /// A kernel's static shared arrays together may not exceed 48 KiB, which nvcc and hipcc refuse
  /// to build (each one alone is a compile error past it, detail::StaticSharedArrayBytes). The
  /// simulator cannot add a kernel's declarations up at compile time, so it fails the launch when
  /// a block reaches the array that crosses the limit, naming each array reached so far, also
  /// when dynamic shared memory opted the kernel in to more: the opt-in is for dynamic memory.
  void check_static_shared_total(std::size_t bytes, std::span<const std::size_t> shape,
                                 std::size_t element_size, const SourceSite& site);

  [[nodiscard]] std::byte* dynamic_base() const noexcept { return shared_base_ + kRedZone; }
  [[nodiscard]] std::byte* static_base() const noexcept { return shared_base_ + 2 * kRedZone; }

  /// Records a launch failure when a red zone around the dynamic shared memory was written: at a
  /// barrier just released (`at_barrier`), or when the block has finished.
  void check_red_zones(bool at_barrier);

  void start_block(const Dim3& index) {
    block_index_ = index;
    aborting_ = false;
    failure_.clear();
    // Static shared arrays are placed after the dynamic region, in the order threads first ask for
    // them; the places are kept across blocks, the contents are not.
    shared_arrays_.clear();
    shared_end_ = grid_.dynamic_shared_bytes;
    std::memset(dynamic_base(), kUninitialisedShared, grid_.dynamic_shared_bytes);
    red_zones_filled_ = false;
    for (SimThread& t : threads_) {
      t.coords.block_idx = index;
      t.state = State::Ready;
    }
  }

  FiberStack take_stack() {
    if (spare_stacks_.empty()) return stack_pool().take();
    FiberStack s = std::move(spare_stacks_.back());
    spare_stacks_.pop_back();
    return s;
  }

  void run_body(SimThread& t) {
    try {
      (*grid_.body)();
    } catch (const BlockAbort&) {
      // The block was aborted by another thread's failure, or this thread's failure is recorded.
    } catch (const std::exception& e) {
      record_failure(Status::LaunchFailure,
                     fmt::format("kernel code threw in thread {} of block {}: {}",
                                 describe(t.coords.thread_idx), describe(block_index_), e.what()));
    } catch (...) {
      record_failure(Status::LaunchFailure,
                     fmt::format("kernel code threw a non-standard exception in thread {} "
                                 "of block {}",
                                 describe(t.coords.thread_idx), describe(block_index_)));
    }
    t.state = State::Done;
  }

  /// Every jump between the scheduler and the fibers passes where the context of the side that
  /// suspends is to be kept (null from a fiber that has finished): the side that resumes stores it.
  static void store_context(const fctx::transfer_t& from) noexcept {
    if (from.data != nullptr) *static_cast<fctx::fcontext_t*>(from.data) = from.fctx;
  }

  /// Gives thread `t`, which has not run yet, a fiber to start on.
  void start_fiber(SimThread& t) {
    t.stack = take_stack();
    t.context = fctx::make_fcontext(t.stack.top(), FiberStack::size(), &BlockRunner::fiber_main);
#ifdef DEVMEM_FIBER_TSAN
    // Reused: TSan sizes its vector clocks by every fiber ever created, so a fiber per thread
    // and block would make each switch slower than the last.
    if (spare_tsan_fibers_.empty()) {
      t.tsan_fiber = __tsan_create_fiber(0);
    } else {
      t.tsan_fiber = spare_tsan_fibers_.back();
      spare_tsan_fibers_.pop_back();
    }
#endif
  }

  /// Entry point of every fiber (on its own stack; never returns). Runs the thread it was started
  /// for, then, as long as the next thread of the scheduler's round has not started yet, that
  /// one too: threads that return without waiting cost no switch and share one stack.
  static void fiber_main(fctx::transfer_t from) {
    store_context(from);
    BlockRunner& self = *t_runner;
#ifdef DEVMEM_FIBER_ASAN
    const void* from_bottom = nullptr;
    std::size_t from_size = 0;
    __sanitizer_finish_switch_fiber(nullptr, &from_bottom, &from_size);
    if (from.data == &self.scheduler_context_) {
      self.scheduler_stack_bottom_ = from_bottom;
      self.scheduler_stack_size_ = from_size;
    }
#endif
    while (true) {
      SimThread& t = self.threads_[self.current_];
      self.run_body(t);
      t.context = nullptr;
      const std::size_t next = self.cursor_ + 1;
      if (self.aborting_ || next == self.block_threads_) break;
      SimThread& n = self.threads_[next];
      if (n.state != State::Ready || n.context != nullptr) break;
      n.stack = std::move(t.stack);
      n.tsan_fiber = std::exchange(t.tsan_fiber, nullptr);
      self.cursor_ = self.current_ = next;
    }
    // This fiber is finished: it is never resumed. The scheduler takes its stack (and its TSan
    // fiber) back, for a fiber started later.
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_start_switch_fiber(nullptr, self.scheduler_stack_bottom_,
                                   self.scheduler_stack_size_);
#endif
#ifdef DEVMEM_FIBER_TSAN
    __tsan_switch_to_fiber(self.scheduler_tsan_, 0);
#endif
    fctx::jump_fcontext(self.scheduler_context_, nullptr);
    std::abort();  // unreachable: nothing resumes a finished fiber
  }

  /// Scheduler -> simulated thread `index` (started on a fiber if it has not run yet), until a
  /// thread returns to the scheduler: the threads after it in the round may have run meanwhile
  /// (cursor_ says up to which), each switching to the next directly.
  void switch_to(std::size_t index) {
    SimThread& t = threads_[index];
    current_ = index;
    if (t.context == nullptr) start_fiber(t);
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_start_switch_fiber(&scheduler_fake_stack_, t.stack.bottom(), FiberStack::size());
#endif
#ifdef DEVMEM_FIBER_TSAN
    __tsan_switch_to_fiber(t.tsan_fiber, 0);
#endif
    store_context(fctx::jump_fcontext(t.context, &scheduler_context_));
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_finish_switch_fiber(scheduler_fake_stack_, nullptr, nullptr);
#endif
    SimThread& last = threads_[current_];  // the thread that came back
    if (last.state == State::Done) {
#ifdef DEVMEM_FIBER_TSAN
      spare_tsan_fibers_.push_back(std::exchange(last.tsan_fiber, nullptr));
#endif
      last.context = nullptr;
      spare_stacks_.push_back(std::move(last.stack));
    }
    current_ = kScheduler;
  }

  /// Simulated thread -> the next thread of the scheduler's round that is ready, directly, or
  /// the scheduler when there is none; throws BlockAbort when resumed to unwind.
  void yield() {
    SimThread& t = threads_[current_];
    std::size_t next = cursor_ + 1;
    if (aborting_) next = block_threads_;  // the scheduler resumes whom it needs to unwind
    while (next < block_threads_ && threads_[next].state != State::Ready) ++next;
    fctx::transfer_t from{};
    if (next < block_threads_) {
      SimThread& n = threads_[next];
      if (n.context == nullptr) start_fiber(n);
      cursor_ = current_ = next;
#ifdef DEVMEM_FIBER_ASAN
      __sanitizer_start_switch_fiber(&t.asan_fake_stack, n.stack.bottom(), FiberStack::size());
#endif
#ifdef DEVMEM_FIBER_TSAN
      __tsan_switch_to_fiber(n.tsan_fiber, 0);
#endif
      from = fctx::jump_fcontext(n.context, &t.context);
    } else {
#ifdef DEVMEM_FIBER_ASAN
      __sanitizer_start_switch_fiber(&t.asan_fake_stack, scheduler_stack_bottom_,
                                     scheduler_stack_size_);
#endif
#ifdef DEVMEM_FIBER_TSAN
      __tsan_switch_to_fiber(scheduler_tsan_, 0);
#endif
      from = fctx::jump_fcontext(scheduler_context_, &t.context);
    }
    store_context(from);
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_finish_switch_fiber(t.asan_fake_stack, nullptr, nullptr);
#endif
    if (aborting_) throw BlockAbort{};
  }

  void record_failure(Status status, std::string message) {
    if (!aborting_) {
      aborting_ = true;
      failure_status_ = status;
      failure_ = std::move(message);
    }
  }

  /// Fails the block from inside a simulated thread: records the failure and unwinds the thread.
  [[noreturn]] void fail_in_thread(Status status, std::string message) {
    record_failure(status, std::move(message));
    throw BlockAbort{};
  }

  /// Resumes every waiting thread so that it unwinds; threads that never ran are not started.
  void abort_block() {
    for (std::size_t i = 0; i < block_threads_; ++i) {
      SimThread& t = threads_[i];
      if (t.context != nullptr) {
        switch_to(i);
      } else {
        t.state = State::Done;
      }
    }
    // A thread that swallowed BlockAbort (catch (...)) and waits again is abandoned: it is never
    // resumed, so its stack can serve the next block.
    for (SimThread& t : threads_) {
      if (t.state == State::Done) continue;
      t.state = State::Done;
      t.context = nullptr;
#ifdef DEVMEM_FIBER_TSAN
      spare_tsan_fibers_.push_back(std::exchange(t.tsan_fiber, nullptr));
#endif
      spare_stacks_.push_back(std::move(t.stack));
    }
  }

  /// Called when no thread is ready. Releases the barriers every participant has reached and
  /// returns true, returns false when every thread is done, or records barrier divergence.
  bool release_barriers();

  /// The common case: the whole block waits at one barrier. False when the threads wait at
  /// different barriers.
  bool release_whole_block();

  enum class WarpRelease { None, Released, Diverged };

  /// True when a warp barrier with `mask` (none: wave_barrier, the whole warp) waits for `lane`.
  [[nodiscard]] static bool names_lane(const std::optional<std::uint64_t>& mask,
                                       std::size_t lane) noexcept {
    return !mask || (lane < 64 && ((*mask >> lane) & 1u) != 0);
  }

  /// What the threads of the warp [first, last) that the warp barrier of `t` waits for are doing.
  struct WarpGroup {
    std::size_t waiting = 0;                // at a warp barrier with t's mask (t among them)
    std::size_t done = 0;                   // returned
    std::size_t other = 0;                  // running or at a block barrier
    std::size_t first_done = 0;             // the first of those that returned
    const SimThread* mismatched = nullptr;  // the first at a warp barrier with another mask
    std::uint64_t lanes = 0;                // the lanes (below 64) at t's barrier
  };
  [[nodiscard]] WarpGroup examine_group(std::size_t first, std::size_t last,
                                        const SimThread& t) const;

  /// A warp barrier waiting for a thread at a warp barrier with another mask.
  struct WarpMismatch {
    const SimThread* waiter = nullptr;
    const SimThread* other = nullptr;
  };

  /// Releases the warp barriers of the warp [first, last) whose threads have all arrived (see
  /// release_warps); records the first mismatch of masks in `mismatch`.
  WarpRelease release_warp(std::size_t first, std::size_t last, WarpMismatch& mismatch);

  /// Releases every warp barrier whose threads have all arrived: a wave_barrier when the warp's
  /// live threads all wait at it, a syncwarp when the live threads its mask names all wait at a
  /// syncwarp with that mask. Diverged (recorded) when a wave_barrier's warp has threads that
  /// returned, or when nothing can be released and syncwarp masks disagree (a deadlock: nothing
  /// else runs while release_barriers is called).
  WarpRelease release_warps();

  /// "syncwarp(mask 0xffff)" or "wave_barrier()".
  static std::string describe_warp_barrier(const SimThread& t);

  /// Every live thread waits at a block barrier, or some at a warp barrier that cannot complete:
  /// releases the block barrier when all wait at the same one, else records the divergence.
  bool release_block_barrier(std::size_t done, std::size_t at_block);

  const KernelGrid& grid_;
  const std::size_t block_threads_;
  std::vector<SimThread> threads_;
  std::vector<std::byte> shared_;
  std::byte* shared_base_ = nullptr;  // the leading red zone, then the dynamic shared memory
  bool red_zones_filled_ = false;     // this block asked for its dynamic shared memory
  std::vector<SharedArrayPlace> shared_arrays_;
  std::size_t shared_end_ = 0;
  Dim3 block_index_;
  std::size_t current_ = kScheduler;
  std::size_t cursor_ = 0;  // the thread the scheduler's round is at
  fctx::fcontext_t scheduler_context_ = nullptr;
  std::vector<FiberStack> spare_stacks_;  // stacks of finished fibers, for the next ones
  [[maybe_unused]] std::vector<void*> spare_tsan_fibers_;  // likewise their TSan fibers
  bool aborting_ = false;
  Status failure_status_ = Status::LaunchFailure;
  std::string failure_;
  // Sanitizer fiber bookkeeping: used only when built with ASan or TSan.
  [[maybe_unused]] void* scheduler_fake_stack_ = nullptr;
  [[maybe_unused]] const void* scheduler_stack_bottom_ = nullptr;
  [[maybe_unused]] std::size_t scheduler_stack_size_ = 0;
  [[maybe_unused]] void* scheduler_tsan_ = nullptr;
};

}  // namespace devmem::detail::sim

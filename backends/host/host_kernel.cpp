// The host backend's kernel simulator (<devmem/kernel.hpp> compiled by the host compiler).
//
// Every thread of a block really runs: each simulated thread is a fiber (a Boost.Context fcontext
// on an mmap'ed stack with a guard region below it) and the threads of a block take turns on one
// OS thread, each running until it reaches a barrier or returns. Fibers rather than OS threads
// because a block barrier then costs about one user-space context switch per thread (a waiting
// thread switches straight to the next ready one; a few nanoseconds, no system call: glibc's
// swapcontext saves the signal mask with one) instead of waking hundreds of OS threads on two
// cores. Blocks are independent, so they are spread over the machine's cores, one scheduler
// (BlockRunner) per OS thread.
//
// What a thread costs beyond its own code is kept small: a thread gets a stack (from a pool kept
// across blocks and launches) only when it first runs, and a thread that returns without waiting
// at a barrier hands its stack straight to the next thread of the block, which then starts on the
// same fiber without a switch. A barrier-free block therefore runs its threads one after another,
// like a loop, while a thread that reaches a barrier still suspends there until the whole block
// (or warp) has arrived.
//
// The fiber stacks and the report of a kernel thread overflowing one are in
// host_kernel_stacks.cpp; the bounds checks of array accesses and ArrayView arguments in
// host_kernel_checks.cpp (both through host_kernel.hpp).
//
// A barrier completes when every thread of the block (or of the warp, for wave_barrier) waits at
// it; syncwarp(mask) when every thread of the warp that its mask names and that has not returned
// waits at a syncwarp with the same mask (CUDA's rule for __syncwarp). Anything else is barrier
// divergence, undefined behaviour on a GPU (a hang or silent corruption), and is reported as a
// LaunchFailure naming the block, the threads and the source lines of the barriers: threads that
// returned while others wait, threads waiting at different block barriers, a block barrier and a
// warp barrier waiting for each other, or syncwarp calls whose masks disagree.
//
// One file although long (past 800 lines): the scheduler, the barriers and the shared memory of a
// block are one class (BlockRunner) whose parts share its private state; the parts that do not need
// it (stacks, bounds checks) are in the files named above.
//
// Failures inside a block (divergence, shared memory over the device limit, an exception thrown
// by kernel code, an index out of bounds) abort the block: every suspended thread is resumed and
// unwinds (BlockAbort), so its stack objects are destroyed, and the launch reports the first
// failure like an asynchronous device error (stored on the stream, thrown by its next synchronize).
#include "backends/host/host_kernel.hpp"
#include "backends/host/host_backend.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>
#include <devmem/kernel.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace devmem::detail::sim {
namespace {

namespace fctx = boost::context::detail;
using host::HostBackend;
using host::Status;

constexpr std::size_t kSharedAlignment = 64;
// CUDA's limit of a kernel's static __shared__ memory (all its arrays together).
constexpr std::size_t kStaticSharedLimit = std::size_t{48} * 1024;
constexpr unsigned char kUninitialisedShared = 0xA5;  // shared memory starts as garbage on a GPU

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

std::string describe(const Dim3& d) {
  return fmt::format("({}, {}, {})", d.x, d.y, d.z);
}

std::string describe(const SourceSite& where) {
  std::string_view file = where.file;
  if (const auto slash = file.find_last_of('/'); slash != std::string_view::npos) {
    file.remove_prefix(slash + 1);
  }
  return fmt::format("{}:{}", file, where.line);
}

/// A constant shape as Python writes a tuple: (8,) or (16, 16).
std::string describe_shape(std::span<const std::size_t> shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

bool same_site(const SourceSite& a, const SourceSite& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

class BlockRunner;
// The scheduler of this OS thread, if any. Read by every thread index and barrier call of a
// kernel: initial-exec is one load from the thread pointer, where the default model of a shared
// library calls __tls_get_addr (one pointer fits the static TLS reserve even when dlopen'ed).
[[gnu::tls_model("initial-exec")]] thread_local BlockRunner* t_runner = nullptr;

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
                       const SourceSite& site, bool untagged) {
    const SourceSite* const untagged_site = untagged ? &site : nullptr;
    std::size_t count = 1;
    for (const std::size_t n : shape) count *= n;
    const std::size_t bytes = element_size * count;
    for (const auto& a : shared_arrays_) {
      if (a.key != key) continue;
      // Untagged arrays are keyed by type and shape only, as on a GPU, where two call sites
      // would silently share one __shared__ variable: only one call site may use the key.
      if (untagged_site != nullptr && a.untagged && !same_site(a.site, *untagged_site)) {
        fail_in_thread(
            Status::LaunchFailure,
            fmt::format(
                "shared_array: two untagged shared arrays of shape {} with {}-byte "
                "elements ({} bytes) in one kernel, at {} and at {} (thread {} of block "
                "{}): on a GPU they are one array, silently sharing its memory; give each "
                "a tag: DEVMEM_SHARED_ARRAY(name, T, N...) or shared_array<T, N...>([] {{}})",
                describe_shape(shape), element_size, bytes, describe(a.site),
                describe(*untagged_site), describe(threads_[current_].coords.thread_idx),
                describe(block_index_)));
      }
      return static_base() + a.offset;
    }
    check_static_shared_total(bytes, shape, element_size, site);
    const std::size_t offset = (shared_end_ + alignment - 1) / alignment * alignment;
    if (offset + bytes > grid_.shared_limit) {
      fail_in_thread(Status::LaunchOutOfResources,
                     fmt::format("block {} needs more shared memory than device {} has: {} bytes "
                                 "of shared arrays after {} bytes of dynamic shared memory ({} "
                                 "bytes at most per block)",
                                 describe(block_index_), grid_.device,
                                 offset + bytes - grid_.dynamic_shared_bytes,
                                 grid_.dynamic_shared_bytes, grid_.shared_limit));
    }
    shared_arrays_.push_back(
        SharedArrayPlace{key, offset, bytes, untagged, site, describe_shape(shape), element_size});
    shared_end_ = offset + bytes;
    std::memset(static_base() + offset, kUninitialisedShared, bytes);
    return static_base() + offset;
  }

  void* dynamic_shared(std::size_t alignment, std::size_t view_bytes) {
    if (view_bytes > grid_.dynamic_shared_bytes) {
      fail_in_thread(
          Status::LaunchFailure,
          fmt::format("dynamic_shared_array: the shape needs {} bytes, more than the {} "
                      "bytes of dynamic shared memory the launch gives (LaunchConfig's "
                      "shared_bytes), in thread {} of block {}",
                      view_bytes, grid_.dynamic_shared_bytes,
                      describe(threads_[current_].coords.thread_idx), describe(block_index_)));
    }
    if (alignment > kSharedAlignment) {
      fail_in_thread(Status::LaunchFailure,
                     fmt::format("dynamic_shared: alignment {} is larger than the {} bytes the "
                                 "simulator guarantees",
                                 alignment, kSharedAlignment));
    }
    if (!red_zones_filled_) {
      std::memset(shared_base_, kRedZoneByte, kRedZone);
      std::memset(dynamic_base() + grid_.dynamic_shared_bytes, kRedZoneByte, kRedZone);
      red_zones_filled_ = true;
    }
    return dynamic_base();
  }

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
                                 std::size_t element_size, const SourceSite& site) {
    std::size_t total = bytes;
    for (const auto& a : shared_arrays_) total += a.bytes;
    if (total <= kStaticSharedLimit) return;
    std::string arrays;
    for (const auto& a : shared_arrays_) {
      arrays += fmt::format("{} bytes (shape {} of {}-byte elements) at {}, ", a.bytes, a.shape,
                            a.element_size, describe(a.site));
    }
    arrays += fmt::format("{} bytes (shape {} of {}-byte elements) at {}", bytes,
                          describe_shape(shape), element_size, describe(site));
    fail_in_thread(Status::LaunchOutOfResources,
                   fmt::format("block {}: the kernel's static shared arrays need {} bytes, more "
                               "than the 48 KiB ({} bytes) CUDA allows a kernel's static shared "
                               "memory (nvcc refuses to build it): {}; use dynamic shared memory "
                               "for some of them",
                               describe(block_index_), total, kStaticSharedLimit, arrays));
  }

  [[nodiscard]] std::byte* dynamic_base() const noexcept { return shared_base_ + kRedZone; }
  [[nodiscard]] std::byte* static_base() const noexcept { return shared_base_ + 2 * kRedZone; }

  /// Records a launch failure when a red zone around the dynamic shared memory was written: at a
  /// barrier just released (`at_barrier`), or when the block has finished.
  void check_red_zones(bool at_barrier) {
    if (!red_zones_filled_ || !host::bounds_checking()) return;
    const std::string where = [&] {
      for (const SimThread& t : threads_) {
        if (at_barrier && t.state != State::Done) {
          return fmt::format("at {} ({})", t.barrier_name, describe(t.site));
        }
      }
      return std::string("when the block finished");
    }();
    if (auto failure = dynamic_shared_overrun(shared_base_, grid_.dynamic_shared_bytes,
                                              describe(block_index_), where)) {
      record_failure(Status::LaunchFailure, std::move(*failure));
    }
  }

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
  bool release_barriers() {
    std::size_t done = 0;
    std::size_t at_block = 0;
    for (const auto& t : threads_) {
      if (t.state == State::Done) ++done;
      if (t.state == State::AtBlockBarrier) ++at_block;
    }
    if (done == block_threads_) return false;
    if (at_block == block_threads_ && release_whole_block()) return true;
    switch (release_warps()) {
      case WarpRelease::Released:
        return true;
      case WarpRelease::Diverged:
        return false;
      case WarpRelease::None:
        break;
    }
    return release_block_barrier(done, at_block);
  }

  /// The common case: the whole block waits at one barrier. False when the threads wait at
  /// different barriers.
  bool release_whole_block() {
    const SourceSite& site = threads_.front().site;
    for (const auto& t : threads_) {
      if (!same_site(t.site, site)) return false;
    }
    for (auto& t : threads_) t.state = State::Ready;
    return true;
  }

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
                                        const SimThread& t) const {
    WarpGroup g;
    g.first_done = last;
    for (std::size_t k = first; k < last; ++k) {
      const SimThread& o = threads_[k];
      if (!names_lane(t.warp_mask, k - first)) continue;
      if (o.state == State::Done) {
        ++g.done;
        g.first_done = std::min(g.first_done, k);
      } else if (o.state != State::AtWarpBarrier) {
        ++g.other;
      } else if (o.warp_mask == t.warp_mask) {
        ++g.waiting;
        if (k - first < 64) g.lanes |= std::uint64_t{1} << (k - first);
      } else if (g.mismatched == nullptr) {
        g.mismatched = &o;
      }
    }
    return g;
  }

  /// A warp barrier waiting for a thread at a warp barrier with another mask.
  struct WarpMismatch {
    const SimThread* waiter = nullptr;
    const SimThread* other = nullptr;
  };

  /// Releases the warp barriers of the warp [first, last) whose threads have all arrived (see
  /// release_warps); records the first mismatch of masks in `mismatch`.
  WarpRelease release_warp(std::size_t first, std::size_t last, WarpMismatch& mismatch) {
    WarpRelease result = WarpRelease::None;
    std::uint64_t examined = 0;  // lanes whose barrier's group was looked at
    for (std::size_t i = first; i < last; ++i) {
      const SimThread& t = threads_[i];
      if (t.state != State::AtWarpBarrier || (i - first < 64 && ((examined >> (i - first)) & 1u))) {
        continue;
      }
      const WarpGroup g = examine_group(first, last, t);
      examined |= g.lanes;
      if (g.other != 0) continue;
      if (!t.warp_mask && g.done != 0) {
        record_failure(Status::LaunchFailure,
                       fmt::format("barrier divergence in warp {} of block {}: {} threads wait "
                                   "at {} ({}) but {} threads of the warp (first: thread {}) "
                                   "returned without reaching it",
                                   first / grid_.warp_size, describe(block_index_), g.waiting,
                                   t.barrier_name, describe(t.site), g.done,
                                   describe(threads_[g.first_done].coords.thread_idx)));
        return WarpRelease::Diverged;
      }
      if (g.mismatched != nullptr) {
        if (mismatch.waiter == nullptr) mismatch = WarpMismatch{&t, g.mismatched};
        continue;
      }
      for (std::size_t k = first; k < last; ++k) {
        SimThread& o = threads_[k];
        if (o.state == State::AtWarpBarrier && o.warp_mask == t.warp_mask) o.state = State::Ready;
      }
      result = WarpRelease::Released;
    }
    return result;
  }

  /// Releases every warp barrier whose threads have all arrived: a wave_barrier when the warp's
  /// live threads all wait at it, a syncwarp when the live threads its mask names all wait at a
  /// syncwarp with that mask. Diverged (recorded) when a wave_barrier's warp has threads that
  /// returned, or when nothing can be released and syncwarp masks disagree (a deadlock: nothing
  /// else runs while release_barriers is called).
  WarpRelease release_warps() {
    bool released = false;
    WarpMismatch mismatch;
    for (std::size_t first = 0; first < block_threads_; first += grid_.warp_size) {
      const WarpRelease warp =
          release_warp(first, std::min(block_threads_, first + grid_.warp_size), mismatch);
      if (warp == WarpRelease::Diverged) return warp;
      released = released || warp == WarpRelease::Released;
    }
    if (released) return WarpRelease::Released;
    if (mismatch.waiter == nullptr) return WarpRelease::None;
    record_failure(
        Status::LaunchFailure,
        fmt::format("deadlock in block {}: thread {} waits at {} ({}) for thread {}, "
                    "which waits at {} ({}); the threads a syncwarp mask names must "
                    "call syncwarp with the same mask",
                    describe(block_index_), describe(mismatch.waiter->coords.thread_idx),
                    describe_warp_barrier(*mismatch.waiter), describe(mismatch.waiter->site),
                    describe(mismatch.other->coords.thread_idx),
                    describe_warp_barrier(*mismatch.other), describe(mismatch.other->site)));
    return WarpRelease::Diverged;
  }

  /// "syncwarp(mask 0xffff)" or "wave_barrier()".
  static std::string describe_warp_barrier(const SimThread& t) {
    return t.warp_mask ? fmt::format("syncwarp(mask 0x{:x})", *t.warp_mask)
                       : std::string(t.barrier_name);
  }

  /// Every live thread waits at a block barrier, or some at a warp barrier that cannot complete:
  /// releases the block barrier when all wait at the same one, else records the divergence.
  bool release_block_barrier(std::size_t done, std::size_t at_block) {
    const SimThread* first_waiter = nullptr;
    const SimThread* first_done = nullptr;
    const SimThread* first_warp_waiter = nullptr;
    for (const auto& t : threads_) {
      if (t.state == State::AtBlockBarrier && first_waiter == nullptr) first_waiter = &t;
      if (t.state == State::Done && first_done == nullptr) first_done = &t;
      if (t.state == State::AtWarpBarrier && first_warp_waiter == nullptr) first_warp_waiter = &t;
    }
    if (at_block != block_threads_ - done) {
      record_failure(
          Status::LaunchFailure,
          fmt::format("deadlock in block {}: {} threads wait at {} ({}) while {} threads (first: "
                      "thread {}) wait at {} ({}), which needs the whole warp",
                      describe(block_index_), at_block, first_waiter->barrier_name,
                      describe(first_waiter->site), block_threads_ - done - at_block,
                      describe(first_warp_waiter->coords.thread_idx),
                      first_warp_waiter->barrier_name, describe(first_warp_waiter->site)));
      return false;
    }
    if (done != 0) {
      record_failure(
          Status::LaunchFailure,
          fmt::format("barrier divergence in block {}: {} of {} threads wait at {} ({}) "
                      "but {} threads (first: thread {}) returned without reaching it; "
                      "every thread of a block must reach the same barriers",
                      describe(block_index_), at_block, block_threads_, first_waiter->barrier_name,
                      describe(first_waiter->site), done, describe(first_done->coords.thread_idx)));
      return false;
    }
    for (const auto& t : threads_) {
      if (!same_site(t.site, first_waiter->site)) {
        record_failure(
            Status::LaunchFailure,
            fmt::format("barrier divergence in block {}: thread {} waits at {} ({}) "
                        "but thread {} waits at {} ({}); every thread of a block must "
                        "reach the same barriers",
                        describe(block_index_), describe(first_waiter->coords.thread_idx),
                        first_waiter->barrier_name, describe(first_waiter->site),
                        describe(t.coords.thread_idx), t.barrier_name, describe(t.site)));
        return false;
      }
    }
    for (auto& t : threads_) t.state = State::Ready;
    return true;
  }

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

[[noreturn, gnu::cold, gnu::noinline]] void outside_kernel(const char* function) {
  throw InvalidArgument(
      fmt::format("{}: called outside a kernel (the host backend provides it to kernels run by "
                  "devmem::launch)",
                  function));
}

inline BlockRunner& runner_in_thread(const char* function) {
  BlockRunner* runner = t_runner;
  if (runner == nullptr || !runner->in_thread()) [[unlikely]] {
    outside_kernel(function);
  }
  return *runner;
}

Dim3 block_at(const Dim3& grid, std::uint64_t linear) {
  return Dim3(static_cast<unsigned>(linear % grid.x),
              static_cast<unsigned>((linear / grid.x) % grid.y),
              static_cast<unsigned>(linear / (std::uint64_t{grid.x} * grid.y)));
}

/// Runs every block of `grid`, spread over the machine's cores; rethrows the first failure.
void execute_grid(const KernelGrid& grid) {
  const std::uint64_t blocks = grid.grid.volume();
  // Read once: hardware_concurrency opens and parses a file in /sys at every call.
  static const std::uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::uint64_t workers = std::min(blocks, cores);
  std::atomic<std::uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;

  auto work = [&] {
    try {
      prepare_overflow_report();
      BlockRunner runner(grid);
      while (!failed.load(std::memory_order_relaxed)) {
        const std::uint64_t b = next_block.fetch_add(1, std::memory_order_relaxed);
        if (b >= blocks) break;
        runner.run_block(block_at(grid.grid, b));
      }
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!first_error) first_error = std::current_exception();
      failed = true;
    }
  };
  std::vector<std::thread> helpers;
  for (std::uint64_t i = 1; i < workers; ++i) {
    try {
      helpers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer OS threads only make the simulation slower
    }
  }
  work();
  for (auto& h : helpers) h.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace

const ThreadCoords* overflowed_kernel_thread(const void* address) noexcept {
  const BlockRunner* runner = t_runner;
  if (runner != nullptr && runner->current_stack_guards(address)) return &runner->coords();
  return nullptr;
}

void fail_kernel_access(const std::string& what) {
  BlockRunner* runner = t_runner;
  if (runner == nullptr || !runner->in_thread()) {
    throw InvalidArgument(what + " (outside a kernel)");
  }
  runner->fail_access(what);
}

bool in_kernel_thread() noexcept {
  const BlockRunner* runner = t_runner;
  return runner != nullptr && runner->in_thread();
}

const ThreadCoords& current_thread(const char* function) {
  return runner_in_thread(function).coords();
}

void* shared_storage(const void* key, std::size_t element_size, std::span<const std::size_t> shape,
                     std::size_t alignment, const SourceSite& site, bool untagged) {
  return runner_in_thread("devmem::shared_array")
      .shared_storage(key, element_size, shape, alignment, site, untagged);
}

void* dynamic_shared_storage(std::size_t alignment, std::size_t view_bytes) {
  return runner_in_thread("devmem::dynamic_shared").dynamic_shared(alignment, view_bytes);
}

void block_barrier(const char* function, const SourceSite& where) {
  runner_in_thread(function).wait_at_block_barrier(function, where);
}

void warp_barrier(const SourceSite& where) {
  runner_in_thread("devmem::wave_barrier").wait_at_warp_barrier(where, std::nullopt);
}

void warp_sync(std::uint64_t mask, const SourceSite& where) {
  runner_in_thread("devmem::syncwarp").wait_at_warp_barrier(where, mask);
}

int warp_size() noexcept {
  const BlockRunner* runner = t_runner;
  return runner != nullptr ? runner->warp_size() : DeviceProperties{}.warp_size;
}

void run_kernel(const PreparedLaunch& launch, const LaunchConfig& config,
                std::function<void()> body) {
  if (t_runner != nullptr && t_runner->in_thread()) {
    throw InvalidArgument(
        "devmem::launch: cannot launch a kernel from inside a kernel (the host simulation has no "
        "dynamic parallelism)");
  }
  const std::shared_ptr<Context> context = launch.stream.context();
  auto* backend = dynamic_cast<HostBackend*>(&context->backend());
  if (backend == nullptr) {
    throw InvalidArgument(
        fmt::format("devmem::launch: the host simulation cannot run on the '{}' backend",
                    context->backend_name()));
  }
  const DeviceProperties& props = context->device_properties();
  // Like a GPU launch through devmem: more dynamic shared memory than the default limit opts the
  // kernel in to the larger one.
  const std::int64_t shared_limit =
      static_cast<std::int64_t>(config.shared_bytes) > props.max_shared_memory_per_block
          ? props.max_shared_memory_per_block_optin
          : props.max_shared_memory_per_block;
  auto grid = std::make_shared<const KernelGrid>(KernelGrid{
      config.grid, config.block, config.shared_bytes, static_cast<std::size_t>(shared_limit),
      static_cast<unsigned>(props.warp_size), launch.device,
      std::make_shared<const std::function<void()>>(std::move(body)), launch.kernel_name});
  backend->launch_kernel(launch.device, launch.stream.native_handle(),
                         [grid] { execute_grid(*grid); });
}

void prepare_constant_update() {
  if (t_runner != nullptr && t_runner->in_thread()) {
    throw InvalidArgument("const_array_like: cannot be called from inside a kernel");
  }
  current_context()->synchronize();
}

}  // namespace devmem::detail::sim

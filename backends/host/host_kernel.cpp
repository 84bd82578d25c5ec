// The host backend's kernel simulator (<devmem/kernel.hpp> compiled by the host compiler).
//
// Every thread of a block really runs: each simulated thread is a fiber (a ucontext with its own
// mmap'ed stack and a guard page) and the threads of a block take turns on one OS thread, each
// running until it reaches a barrier or returns. Fibers rather than OS threads because a block
// barrier then costs two context switches per thread instead of waking hundreds of OS threads
// on two cores: a 256x256 tiled matrix multiply (256 blocks x 256 threads x 32 barriers) takes
// well under a second instead of minutes. Blocks are independent, so they are spread over the
// machine's cores, one scheduler (BlockRunner) per OS thread.
//
// A barrier completes when every thread of the block (or of the warp, for wave_barrier) waits at
// it. Anything else is barrier divergence, undefined behaviour on a GPU (a hang or silent
// corruption), and is reported as a LaunchFailure naming the block, the threads and the source
// lines of the barriers: threads that returned while others wait, threads waiting at different
// block barriers, or a block barrier and a warp barrier waiting for each other.
//
// Array accesses in kernels are bounds-checked (<devmem/array_view.hpp>): an index out of range
// calls index_out_of_bounds, which fails the block like the failures below, before the access, so
// nothing outside the array is touched. At launch, check_view_argument checks the memory every
// ArrayView argument can reach against the backend's live allocations and mapped host memory,
// as copies are checked, so a stale view is refused before it runs (InvalidArgument, as the other
// argument errors of launch).
//
// Failures inside a block (divergence, shared memory over the device limit, an exception thrown
// by kernel code, an index out of bounds) abort the block: every suspended thread is resumed and
// unwinds (BlockAbort), so its stack objects are destroyed, and the launch reports the first
// failure like an asynchronous device error (stored on the stream, thrown by its next synchronize).
#include "backends/host/host_backend.hpp"
#include "core/internal.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>
#include <devmem/kernel.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
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
namespace {

using host::HostBackend;
using host::Status;

#if defined(DEVMEM_FIBER_ASAN) || defined(DEVMEM_FIBER_TSAN)
constexpr std::size_t kStackBytes = 1024 * 1024;  // sanitizers enlarge frames
#else
constexpr std::size_t kStackBytes = 256 * 1024;
#endif
constexpr std::size_t kSharedAlignment = 64;
constexpr unsigned char kUninitialisedShared = 0xA5;  // shared memory starts as garbage on a GPU

/// Thrown into a suspended simulated thread to unwind it when its block is aborted. Not a
/// std::exception, so kernel code catching std::exception does not swallow it.
struct BlockAbort {};

/// A fiber stack: mmap'ed (pages are committed on first touch) with a guard page below it, so
/// an overflowing kernel faults instead of overwriting a neighbour's stack.
class FiberStack {
 public:
  FiberStack() {
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    mapped_bytes_ = kStackBytes + page;
    void* base = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<std::byte*>(base);
    if (::mprotect(base_, page, PROT_NONE) != 0) {
      ::munmap(base_, mapped_bytes_);
      throw std::bad_alloc();
    }
    bottom_ = base_ + page;
  }
  FiberStack(FiberStack&& other) noexcept
      : base_(std::exchange(other.base_, nullptr)),
        bottom_(other.bottom_),
        mapped_bytes_(other.mapped_bytes_) {}
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  FiberStack& operator=(FiberStack&&) = delete;
  ~FiberStack() {
    if (base_ != nullptr) ::munmap(base_, mapped_bytes_);
  }
  [[nodiscard]] void* bottom() const noexcept { return bottom_; }
  [[nodiscard]] static std::size_t size() noexcept { return kStackBytes; }

 private:
  std::byte* base_ = nullptr;
  std::byte* bottom_ = nullptr;
  std::size_t mapped_bytes_ = 0;
};

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
  return a.line == b.line && std::strcmp(a.file, b.file) == 0;
}

class BlockRunner;
thread_local BlockRunner* t_runner = nullptr;  // the scheduler of this OS thread, if any

/// Runs the blocks handed to it on the calling OS thread, one block at a time.
class BlockRunner {
 public:
  explicit BlockRunner(const KernelGrid& grid)
      : grid_(grid),
        block_threads_(static_cast<std::size_t>(grid.block.volume())),
        shared_(grid.shared_limit + kSharedAlignment) {
    threads_.reserve(block_threads_);
    for (std::size_t i = 0; i < block_threads_; ++i) threads_.emplace_back();
    const auto base = reinterpret_cast<std::uintptr_t>(shared_.data());
    shared_base_ =
        shared_.data() + ((kSharedAlignment - base % kSharedAlignment) % kSharedAlignment);
#ifdef DEVMEM_FIBER_TSAN
    scheduler_tsan_ = __tsan_get_current_fiber();
    for (auto& t : threads_) t.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;
  ~BlockRunner() {
#ifdef DEVMEM_FIBER_TSAN
    for (auto& t : threads_) __tsan_destroy_fiber(t.tsan_fiber);
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
      for (std::size_t i = 0; i < block_threads_ && !aborting_; ++i) {
        if (threads_[i].state == State::Ready) switch_to(i);
      }
      if (aborting_ || !release_barriers()) break;
    }
    if (aborting_) {
      abort_block();
      throw HostBackend::make_error(
          "launch", failure_status_, fmt::format("{}: {}", grid_.kernel_name, failure_));
    }
  }

  [[nodiscard]] bool in_thread() const noexcept { return current_ != kScheduler; }

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
                       const SourceSite* untagged_site) {
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
      return shared_base_ + a.offset;
    }
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
        SharedArrayPlace{key, offset, untagged_site != nullptr,
                         untagged_site != nullptr ? *untagged_site : SourceSite{}});
    shared_end_ = offset + bytes;
    std::memset(shared_base_ + offset, kUninitialisedShared, bytes);
    return shared_base_ + offset;
  }

  void* dynamic_shared(std::size_t alignment) {
    if (alignment > kSharedAlignment) {
      fail_in_thread(Status::LaunchFailure,
                     fmt::format("dynamic_shared: alignment {} is larger than the {} bytes the "
                                 "simulator guarantees",
                                 alignment, kSharedAlignment));
    }
    return shared_base_;
  }

  void wait_at_block_barrier(const char* name, const SourceSite& where) {
    SimThread& t = threads_[current_];
    t.state = State::AtBlockBarrier;
    t.barrier_name = name;
    t.site = where;
    yield();
  }

  void wait_at_warp_barrier(const SourceSite& where) {
    SimThread& t = threads_[current_];
    t.state = State::AtWarpBarrier;
    t.barrier_name = "wave_barrier()";
    t.site = where;
    yield();
  }

 private:
  static constexpr std::size_t kScheduler = static_cast<std::size_t>(-1);
  enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

  struct SimThread {
    ThreadCoords coords;
    ucontext_t context{};
    FiberStack stack;
    State state = State::Done;
    const char* barrier_name = "";
    SourceSite site;
    void* asan_fake_stack = nullptr;
    void* tsan_fiber = nullptr;
  };
  struct SharedArrayPlace {
    const void* key;
    std::size_t offset;
    bool untagged;    // asked for by an untagged shared_array call
    SourceSite site;  // that call's site (untagged only)
  };

  void start_block(const Dim3& index) {
    block_index_ = index;
    aborting_ = false;
    failure_.clear();
    // Static shared arrays are placed after the dynamic region, in the order threads first ask for
    // them; the places are kept across blocks, the contents are not.
    shared_arrays_.clear();
    shared_end_ = grid_.dynamic_shared_bytes;
    std::memset(shared_base_, kUninitialisedShared, grid_.dynamic_shared_bytes);
    const Dim3& b = grid_.block;
    for (std::size_t i = 0; i < block_threads_; ++i) {
      SimThread& t = threads_[i];
      const auto linear = static_cast<unsigned>(i);
      t.coords = ThreadCoords{Dim3(linear % b.x, (linear / b.x) % b.y, linear / (b.x * b.y)), index,
                              grid_.block, grid_.grid};
      t.state = State::Ready;
      prepare_context(t);
    }
  }

  // Separate and not inlined: getcontext "returns twice" for the compiler, which would then
  // forbid keeping the caller's loop variables in registers (-Wclobbered).
  [[gnu::noinline]] static void prepare_context(SimThread& t) {
    if (::getcontext(&t.context) != 0) {
      throw HostBackend::make_error("launch", Status::LaunchFailure, "getcontext failed");
    }
    t.context.uc_stack.ss_sp = t.stack.bottom();
    t.context.uc_stack.ss_size = FiberStack::size();
    t.context.uc_link = nullptr;
    ::makecontext(&t.context, &BlockRunner::thread_main, 0);
  }

  /// Entry point of every simulated thread (on its own stack; never returns).
  static void thread_main() {
    BlockRunner& self = *t_runner;
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &self.scheduler_stack_bottom_,
                                    &self.scheduler_stack_size_);
#endif
    SimThread& t = self.threads_[self.current_];
    if (!self.aborting_) {
      try {
        (*self.grid_.body)();
      } catch (const BlockAbort&) {
        // The block was aborted by another thread's failure: nothing to report.
      } catch (const std::exception& e) {
        self.record_failure(
            Status::LaunchFailure,
            fmt::format("kernel code threw in thread {} of block {}: {}",
                        describe(t.coords.thread_idx), describe(self.block_index_), e.what()));
      } catch (...) {
        self.record_failure(
            Status::LaunchFailure,
            fmt::format("kernel code threw a non-standard exception in thread {} "
                        "of block {}",
                        describe(t.coords.thread_idx), describe(self.block_index_)));
      }
    }
    t.state = State::Done;
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_start_switch_fiber(nullptr, self.scheduler_stack_bottom_,
                                   self.scheduler_stack_size_);
#endif
#ifdef DEVMEM_FIBER_TSAN
    __tsan_switch_to_fiber(self.scheduler_tsan_, 0);
#endif
    ::setcontext(&self.scheduler_context_);
    std::terminate();  // setcontext returns only on failure
  }

  /// Scheduler -> simulated thread `index`, until it waits or returns.
  void switch_to(std::size_t index) {
    SimThread& t = threads_[index];
    current_ = index;
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_start_switch_fiber(&scheduler_fake_stack_, t.stack.bottom(), FiberStack::size());
#endif
#ifdef DEVMEM_FIBER_TSAN
    __tsan_switch_to_fiber(t.tsan_fiber, 0);
#endif
    ::swapcontext(&scheduler_context_, &t.context);
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_finish_switch_fiber(scheduler_fake_stack_, nullptr, nullptr);
#endif
    current_ = kScheduler;
  }

  /// Simulated thread -> scheduler; throws BlockAbort when resumed to unwind.
  void yield() {
    SimThread& t = threads_[current_];
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_start_switch_fiber(&t.asan_fake_stack, scheduler_stack_bottom_,
                                   scheduler_stack_size_);
#endif
#ifdef DEVMEM_FIBER_TSAN
    __tsan_switch_to_fiber(scheduler_tsan_, 0);
#endif
    ::swapcontext(&t.context, &scheduler_context_);
#ifdef DEVMEM_FIBER_ASAN
    __sanitizer_finish_switch_fiber(t.asan_fake_stack, &scheduler_stack_bottom_,
                                    &scheduler_stack_size_);
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

  /// Resumes every thread that has not finished so that it unwinds (or, never started, exits).
  void abort_block() {
    for (std::size_t i = 0; i < block_threads_; ++i) {
      if (threads_[i].state != State::Done) switch_to(i);
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

    // Warps whose live threads all wait at wave_barrier.
    bool released = false;
    for (std::size_t first = 0; first < block_threads_; first += grid_.warp_size) {
      const std::size_t last = std::min(block_threads_, first + grid_.warp_size);
      std::size_t waiting = 0;
      std::size_t warp_done = 0;
      std::size_t other = 0;
      std::size_t first_done = last;
      std::size_t first_waiting = last;
      for (std::size_t i = first; i < last; ++i) {
        switch (threads_[i].state) {
          case State::AtWarpBarrier:
            ++waiting;
            first_waiting = std::min(first_waiting, i);
            break;
          case State::Done:
            ++warp_done;
            first_done = std::min(first_done, i);
            break;
          default:
            ++other;
        }
      }
      if (waiting == 0 || other != 0) continue;
      if (warp_done != 0) {
        record_failure(Status::LaunchFailure,
                       fmt::format("barrier divergence in warp {} of block {}: {} threads wait at "
                                   "{} ({}) but {} threads of the warp (first: thread {}) "
                                   "returned without reaching it",
                                   first / grid_.warp_size, describe(block_index_), waiting,
                                   threads_[first_waiting].barrier_name,
                                   describe(threads_[first_waiting].site), warp_done,
                                   describe(threads_[first_done].coords.thread_idx)));
        return false;
      }
      for (std::size_t i = first; i < last; ++i) threads_[i].state = State::Ready;
      released = true;
    }
    if (released) return true;

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
  std::byte* shared_base_ = nullptr;
  std::vector<SharedArrayPlace> shared_arrays_;
  std::size_t shared_end_ = 0;
  Dim3 block_index_;
  std::size_t current_ = kScheduler;
  ucontext_t scheduler_context_{};
  bool aborting_ = false;
  Status failure_status_ = Status::LaunchFailure;
  std::string failure_;
  // Sanitizer fiber bookkeeping: used only when built with ASan or TSan.
  [[maybe_unused]] void* scheduler_fake_stack_ = nullptr;
  [[maybe_unused]] const void* scheduler_stack_bottom_ = nullptr;
  [[maybe_unused]] std::size_t scheduler_stack_size_ = 0;
  [[maybe_unused]] void* scheduler_tsan_ = nullptr;
};

BlockRunner& runner_in_thread(const char* function) {
  BlockRunner* runner = t_runner;
  if (runner == nullptr || !runner->in_thread()) {
    throw InvalidArgument(
        fmt::format("{}: called outside a kernel (the host backend provides it to kernels run by "
                    "devmem::launch)",
                    function));
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
  const std::uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::uint64_t workers = std::min(blocks, cores);
  std::atomic<std::uint64_t> next_block{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;

  auto work = [&] {
    try {
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

/// Values as Python writes a tuple: (8,) or (16, 16).
std::string describe_tuple(std::span<const std::int64_t> values) {
  if (values.size() == 1) return fmt::format("({},)", values[0]);
  return fmt::format("({})", fmt::join(values, ", "));
}

}  // namespace

void index_out_of_bounds(const char* array_kind, const std::int64_t* index, std::size_t index_count,
                         const std::int64_t* shape, std::size_t rank) {
  if (!host::bounds_checking()) return;
  const std::span<const std::int64_t> shape_values(shape, rank);
  std::string what;
  if (index_count == rank) {
    what = fmt::format("{}: index {} is out of bounds for shape {}", array_kind,
                       describe_tuple(std::span(index, index_count)), describe_tuple(shape_values));
  } else {
    std::int64_t count = 1;
    for (const std::int64_t n : shape_values) count *= n;
    what = fmt::format("{}: flat index {} is out of bounds for shape {} ({} elements)", array_kind,
                       index_count == 1 ? index[0] : -1, describe_tuple(shape_values), count);
  }
  BlockRunner* runner = t_runner;
  if (runner == nullptr || !runner->in_thread()) {
    throw InvalidArgument(what + " (outside a kernel)");
  }
  runner->fail_access(what);
}

void check_view_argument(const PreparedLaunch& launch, std::size_t argument, const void* data,
                         std::size_t element_size, const std::int64_t* shape,
                         const std::int64_t* strides, std::size_t rank) {
  if (!host::bounds_checking()) return;
  // The bytes the view can reach, relative to data: [lo, hi).
  std::int64_t lo = 0;
  auto hi = static_cast<std::int64_t>(element_size);
  bool overflow = false;
  for (std::size_t d = 0; d != rank; ++d) {
    if (shape[d] <= 0) return;  // an empty view reaches nothing
    std::int64_t reach = 0;
    overflow |= __builtin_mul_overflow(strides[d], shape[d] - 1, &reach);
    overflow |= __builtin_add_overflow(reach < 0 ? lo : hi, reach, reach < 0 ? &lo : &hi);
  }
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const auto begin = base + static_cast<std::uintptr_t>(lo);  // wraps for lo < 0, as intended
  const auto bytes = static_cast<std::uintptr_t>(hi) - static_cast<std::uintptr_t>(lo);
  const std::shared_ptr<Context> context = launch.stream.context();
  const auto* backend = dynamic_cast<const HostBackend*>(&context->backend());
  if (backend == nullptr) return;  // run_kernel refuses the launch
  if (!overflow && data != nullptr && begin + bytes >= begin &&
      backend->device_accessible(begin, bytes)) {
    return;
  }
  throw InvalidArgument(fmt::format(
      "devmem::launch({}): argument {} (an ArrayView of shape {}) reaches {} bytes at {:#x}, "
      "which are not inside a live device allocation or mapped host memory (a view of a freed "
      "array, or from a closed mapped() scope?)",
      launch.kernel_name, argument, describe_tuple(std::span(shape, rank)), bytes, begin));
}

const ThreadCoords& current_thread(const char* function) {
  return runner_in_thread(function).coords();
}

void* shared_storage(const void* key, std::size_t element_size, std::span<const std::size_t> shape,
                     std::size_t alignment, const SourceSite* untagged_site) {
  return runner_in_thread("devmem::shared_array")
      .shared_storage(key, element_size, shape, alignment, untagged_site);
}

void* dynamic_shared_storage(std::size_t alignment) {
  return runner_in_thread("devmem::dynamic_shared").dynamic_shared(alignment);
}

void block_barrier(const char* function, const SourceSite& where) {
  runner_in_thread(function).wait_at_block_barrier(function, where);
}

void warp_barrier(const SourceSite& where) {
  runner_in_thread("devmem::wave_barrier").wait_at_warp_barrier(where);
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
  const DeviceProperties& props = detail::ContextState::of(*context).properties();
  // Like a GPU launch through devmem: more dynamic shared memory than the default limit opts the
  // kernel in to the larger one.
  const std::int64_t shared_limit =
      static_cast<std::int64_t>(config.shared_bytes) > props.max_shared_memory_per_block
          ? props.max_shared_memory_per_block_optin
          : props.max_shared_memory_per_block;
  auto grid = std::make_shared<const KernelGrid>(
      KernelGrid{config.grid, config.block, config.shared_bytes,
                 static_cast<std::size_t>(shared_limit), static_cast<unsigned>(props.warp_size),
                 launch.device, std::make_shared<const std::function<void()>>(std::move(body)),
                 launch.kernel_name});
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

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
// The block scheduler (BlockRunner) is declared in host_block_runner.hpp, with its fiber switching
// inline there; its barrier matching and divergence reports are in host_kernel_barriers.cpp and a
// block's shared memory in host_kernel_shared_memory.cpp. This file holds the launch (run_kernel,
// which spreads the blocks over the cores) and the hooks kernel code calls
// (<devmem/detail/kernel_host.hpp>).
//
// Failures inside a block (divergence, shared memory over the device limit, an exception thrown
// by kernel code, an index out of bounds) abort the block: every suspended thread is resumed and
// unwinds (BlockAbort), so its stack objects are destroyed, and the launch reports the first
// failure like an asynchronous device error (stored on the stream, thrown by its next synchronize).
#include "backends/host/host_block_runner.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>
#include <devmem/kernel.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace devmem::detail::sim {

[[gnu::tls_model("initial-exec")]] thread_local constinit BlockRunner* t_runner = nullptr;

namespace {

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

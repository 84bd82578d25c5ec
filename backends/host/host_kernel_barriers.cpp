// Barrier matching in the host backend's kernel simulator (BlockRunner, host_block_runner.hpp):
// when no simulated thread of a block is ready, which block and warp barriers every participant
// has reached (and are released), and the reports of barrier divergence and of deadlocks between
// barriers, which a GPU would not report (host_kernel.cpp's opening comment lists them). Apart
// from the scheduler because it is the simulator's rule book for barriers, run once per round of
// the block's threads, not on the switching path.
#include "backends/host/host_block_runner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace devmem::detail::sim {

bool BlockRunner::release_barriers() {
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

bool BlockRunner::release_whole_block() {
  const SourceSite& site = threads_.front().site;
  for (const auto& t : threads_) {
    if (!same_site(t.site, site)) return false;
  }
  for (auto& t : threads_) t.state = State::Ready;
  return true;
}

BlockRunner::WarpGroup BlockRunner::examine_group(std::size_t first, std::size_t last,
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

BlockRunner::WarpRelease BlockRunner::release_warp(std::size_t first, std::size_t last,
                                                   WarpMismatch& mismatch) {
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

BlockRunner::WarpRelease BlockRunner::release_warps() {
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

std::string BlockRunner::describe_warp_barrier(const SimThread& t) {
  return t.warp_mask ? fmt::format("syncwarp(mask 0x{:x})", *t.warp_mask)
                     : std::string(t.barrier_name);
}

bool BlockRunner::release_block_barrier(std::size_t done, std::size_t at_block) {
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
                    describe(first_warp_waiter->coords.thread_idx), first_warp_waiter->barrier_name,
                    describe(first_warp_waiter->site)));
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
      record_failure(Status::LaunchFailure,
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

}  // namespace devmem::detail::sim

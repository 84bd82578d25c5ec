// Large copies and fills of the host backend split over the machine's cores. A real device copies
// with several DMA engines / many SMs; the simulator's equivalent is several CPU threads, each
// copying one contiguous part. Not installed; only backends/host includes it.
//
// The copy is still one operation of its stream: the calling thread (a stream worker, or the user
// thread for the default stream) copies a part itself and returns only when every part is done,
// so ordering, error reporting and fault injection are those of a plain memcpy.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace devmem::host {

class ParallelCopier {
 public:
  /// Copies of at least this many bytes are split (smaller ones stay in cache, where one core is
  /// as fast as two and waking a helper would cost more than it saves).
  static constexpr std::size_t kSplitThreshold = std::size_t{8} << 20;

  /// Starts `helpers` helper threads (0: every copy runs on the calling thread). Helpers that
  /// cannot be started are done without.
  explicit ParallelCopier(unsigned helpers);
  /// Stops and joins the helpers. No copy may be running.
  ~ParallelCopier();
  ParallelCopier(const ParallelCopier&) = delete;
  ParallelCopier& operator=(const ParallelCopier&) = delete;

  /// Helpers for this machine: one per core beyond the first, at most 3.
  [[nodiscard]] static unsigned default_helpers() noexcept;

  /// std::memcpy(dst, src, bytes) for non-overlapping ranges, split over the helpers when large.
  /// Safe to call from several threads at once (parts of concurrent copies share the helpers;
  /// a caller whose helpers are busy copies the remaining parts itself, so it never waits on
  /// another copy).
  void copy(void* dst, const void* src, std::size_t bytes) noexcept;
  /// std::memset(dst, byte_value, bytes), split the same way when large.
  void fill(void* dst, int byte_value, std::size_t bytes) noexcept;

 private:
  struct Job;
  /// Runs `job` on the calling thread and the helpers; returns when all of it is done.
  void run(const std::shared_ptr<Job>& job) noexcept;
  void helper_loop();

  std::mutex mutex_;
  std::condition_variable work_available_;
  std::deque<std::shared_ptr<Job>> jobs_;  // one entry per helper invited to a copy
  bool stopping_ = false;
  std::vector<std::thread> helpers_;  // last: started after the state they use
};

}  // namespace devmem::host

#include "backends/host/host_parallel_copy.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <system_error>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace devmem::host {
namespace {

/// memcpy whose stores bypass the cache (non-temporal): a copy far larger than the cache would
/// otherwise read every destination line before overwriting it (read-for-ownership) and evict
/// the whole cache on the way; a device copy does neither. glibc switches to such stores only
/// above about 3/4 of the L3 size, which leaves 4 MiB .. 24 MiB copies at half speed.
void copy_streaming(std::byte* dst, const std::byte* src, std::size_t bytes) noexcept {
#if defined(__SSE2__)
  constexpr std::size_t kLine = 64;
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(dst) % kLine;
  const std::size_t head = std::min(bytes, misalignment == 0 ? 0 : kLine - misalignment);
  std::memcpy(dst, src, head);
  std::size_t i = head;
  for (; i + kLine <= bytes; i += kLine) {
    const auto* in = reinterpret_cast<const __m128i*>(src + i);
    auto* out = reinterpret_cast<__m128i*>(dst + i);
    const __m128i a = _mm_loadu_si128(in);
    const __m128i b = _mm_loadu_si128(in + 1);
    const __m128i c = _mm_loadu_si128(in + 2);
    const __m128i d = _mm_loadu_si128(in + 3);
    _mm_stream_si128(out, a);
    _mm_stream_si128(out + 1, b);
    _mm_stream_si128(out + 2, c);
    _mm_stream_si128(out + 3, d);
  }
  // Streaming stores are weakly ordered: fence them before the copy counts as done.
  _mm_sfence();
  std::memcpy(dst + i, src + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// memset with non-temporal stores, for the same reason as copy_streaming.
void fill_streaming(std::byte* dst, int byte_value, std::size_t bytes) noexcept {
#if defined(__SSE2__)
  constexpr std::size_t kLine = 64;
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(dst) % kLine;
  const std::size_t head = std::min(bytes, misalignment == 0 ? 0 : kLine - misalignment);
  std::memset(dst, byte_value, head);
  const __m128i pattern = _mm_set1_epi8(static_cast<char>(byte_value));
  std::size_t i = head;
  for (; i + kLine <= bytes; i += kLine) {
    auto* out = reinterpret_cast<__m128i*>(dst + i);
    _mm_stream_si128(out, pattern);
    _mm_stream_si128(out + 1, pattern);
    _mm_stream_si128(out + 2, pattern);
    _mm_stream_si128(out + 3, pattern);
  }
  _mm_sfence();
  std::memset(dst + i, byte_value, bytes - i);
#else
  std::memset(dst, byte_value, bytes);
#endif
}

}  // namespace

/// One split copy: parts are claimed through `next` by the caller and the helpers alike, so a part
/// is copied exactly once whoever gets to it; the caller waits until `done` reaches `parts`.
struct ParallelCopier::Job {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;  // null: a fill with fill_value
  int fill_value = 0;
  std::size_t bytes = 0;
  std::size_t part_bytes = 0;
  std::size_t parts = 0;
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::condition_variable finished;
  std::size_t done = 0;  // guarded by mutex

  /// Copies parts until none is left to claim.
  void run() noexcept {
    for (std::size_t part = next.fetch_add(1); part < parts; part = next.fetch_add(1)) {
      const std::size_t offset = part * part_bytes;
      const std::size_t n = std::min(part_bytes, bytes - offset);
      if (src != nullptr) {
        copy_streaming(dst + offset, src + offset, n);
      } else {
        fill_streaming(dst + offset, fill_value, n);
      }
      const std::lock_guard lock(mutex);
      if (++done == parts) finished.notify_one();
    }
  }
};

ParallelCopier::ParallelCopier(unsigned helpers) {
  helpers_.reserve(helpers);
  for (unsigned i = 0; i < helpers; ++i) {
    try {
      helpers_.emplace_back([this] { helper_loop(); });
    } catch (const std::system_error&) {
      break;  // fewer helpers: copies are split less, never wrong
    }
  }
}

ParallelCopier::~ParallelCopier() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_available_.notify_all();
  for (std::thread& helper : helpers_) helper.join();
}

unsigned ParallelCopier::default_helpers() noexcept {
  const unsigned cores = std::thread::hardware_concurrency();
  return cores <= 1 ? 0 : std::min(cores - 1, 3u);
}

void ParallelCopier::copy(void* dst, const void* src, std::size_t bytes) noexcept {
  if (bytes == 0) return;
  if (bytes < kSplitThreshold || helpers_.empty()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  auto job = std::make_shared<Job>();
  job->dst = static_cast<std::byte*>(dst);
  job->src = static_cast<const std::byte*>(src);
  job->bytes = bytes;
  run(job);
}

void ParallelCopier::fill(void* dst, int byte_value, std::size_t bytes) noexcept {
  if (bytes == 0) return;
  if (bytes < kSplitThreshold || helpers_.empty()) {
    std::memset(dst, byte_value, bytes);
    return;
  }
  auto job = std::make_shared<Job>();
  job->dst = static_cast<std::byte*>(dst);
  job->fill_value = byte_value;
  job->bytes = bytes;
  run(job);
}

void ParallelCopier::run(const std::shared_ptr<Job>& job) noexcept {
  // Several parts per thread, claimed dynamically: a thread that is descheduled (the machine is
  // shared) holds up only its current part, the others take the rest. Parts start on 4 KiB
  // boundaries so that no two threads write the same page.
  constexpr std::size_t kPage = 4096;
  constexpr std::size_t kPartsPerThread = 4;
  constexpr std::size_t kSmallestPart = std::size_t{1} << 20;
  const std::size_t threads = helpers_.size() + 1;
  const std::size_t even = job->bytes / (threads * kPartsPerThread);
  job->part_bytes = (std::max(even, kSmallestPart) + kPage - 1) / kPage * kPage;
  job->parts = (job->bytes + job->part_bytes - 1) / job->part_bytes;
  {
    const std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < std::min(helpers_.size(), job->parts - 1); ++i) {
      jobs_.push_back(job);
    }
  }
  work_available_.notify_all();
  job->run();
  std::unique_lock lock(job->mutex);
  job->finished.wait(lock, [&] { return job->done == job->parts; });
}

void ParallelCopier::helper_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_available_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping
    const std::shared_ptr<Job> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job->run();
    lock.lock();
  }
}

}  // namespace devmem::host

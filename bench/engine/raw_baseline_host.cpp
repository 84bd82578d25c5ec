// The host backend's raw baseline: what the simulated device's copies would cost without devmem,
// a single-thread std::memcpy between two ordinary buffers, and malloc + free.
#include "raw_baseline.hpp"

#include <devmem/config.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

namespace devmem::app {
namespace {

using Clock = std::chrono::steady_clock;

/// 256-byte aligned like the host backend's device memory, written once.
struct AlignedBuffer {
  struct Free {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{256}); }
  };
  std::unique_ptr<std::byte, Free> data;
  std::size_t bytes = 0;

  void ensure(std::size_t wanted) {
    if (bytes >= wanted) return;
    data.reset();
    data.reset(static_cast<std::byte*>(::operator new(wanted, std::align_val_t{256})));
    bytes = wanted;
    std::memset(data.get(), 1, wanted);  // first touch now, not in a timed copy
  }
};

class HostBaseline final : public RawBaseline {
 public:
  [[nodiscard]] std::string copy_call() const override { return "memcpy (1 thread)"; }
  [[nodiscard]] std::string alloc_call() const override { return "malloc+free"; }

  // Host memory kinds and directions are all ordinary memory here: one pair of buffers serves.
  void prepare(Direction, HostMemory, std::size_t max_bytes) override {
    source_.ensure(max_bytes);
    destination_.ensure(max_bytes);
  }

  double time_copies(Direction, HostMemory, std::size_t bytes, int count) override {
    if (source_.bytes < bytes || destination_.bytes < bytes) {
      throw InvalidArgument("raw memcpy baseline: buffers were not prepared for this size");
    }
    const auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      std::memcpy(destination_.data.get(), source_.data.get(), bytes);
      // Keeps the compiler from merging or dropping the repeated identical copies.
      asm volatile("" : : "r"(destination_.data.get()) : "memory");
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  double time_strided_loop(const StridedLoop& loop, int count) override {
    const std::int64_t n = loop.side;
    if (n <= 0 || static_cast<std::size_t>(n * n * n * n) * sizeof(float) > source_.bytes ||
        static_cast<std::size_t>(n * n * n * n) * sizeof(float) > destination_.bytes) {
      throw InvalidArgument("raw strided-loop baseline: buffers were not prepared for this size");
    }
    const auto* src = reinterpret_cast<const float*>(source_.data.get());
    auto* dst = reinterpret_cast<float*>(destination_.data.get());
    const auto [s0, s1, s2, s3] = loop.strides;
    const auto start = Clock::now();
    for (int repeat = 0; repeat < count; ++repeat) {
      std::int64_t dense = 0;
      for (std::int64_t i0 = 0; i0 < n; ++i0) {
        for (std::int64_t i1 = 0; i1 < n; ++i1) {
          for (std::int64_t i2 = 0; i2 < n; ++i2) {
            const std::int64_t row = loop.base + i0 * s0 + i1 * s1 + i2 * s2;
            for (std::int64_t i3 = 0; i3 < n; ++i3, ++dense) {
              if (loop.strided_source) {
                dst[dense] = src[row + i3 * s3];
              } else {
                dst[row + i3 * s3] = src[dense];
              }
            }
          }
        }
      }
      asm volatile("" : : "r"(dst) : "memory");
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  double time_alloc_free(std::size_t bytes, int count) override {
    const auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      void* p = std::malloc(bytes);  // NOLINT(cppcoreguidelines-no-malloc): the raw call measured
      asm volatile("" : : "r"(p) : "memory");
      std::free(p);  // NOLINT(cppcoreguidelines-no-malloc)
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  double time_enqueue(std::size_t, int) override { return -1.0; }

  void release() override {
    source_ = {};
    destination_ = {};
  }

 private:
  AlignedBuffer source_;
  AlignedBuffer destination_;
};

}  // namespace

std::unique_ptr<RawBaseline> make_host_baseline() {
  return std::make_unique<HostBaseline>();
}

std::unique_ptr<RawBaseline> make_raw_baseline(std::string_view backend) {
#if DEVMEM_HAS_CUDA
  if (backend == "cuda") return make_cuda_baseline();
#endif
#if DEVMEM_HAS_ROC
  if (backend == "roc") return make_roc_baseline();
#endif
  if (backend == "host") return make_host_baseline();
  throw InvalidArgument(fmt::format("devmem bench: no raw baseline for backend '{}'", backend));
}

}  // namespace devmem::app

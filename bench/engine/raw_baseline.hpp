// The raw call devmem is compared with, measured in the same run on equivalent buffers:
// cudaMemcpyAsync / hipMemcpyAsync timed with events on a stream of their own, cudaMalloc /
// hipMalloc; on the host backend, which simulates a device in process memory, single-thread
// std::memcpy and malloc. Vendor headers stay in the .cpp files of this interface (compiled only
// when the backend is: DEVMEM_HAS_CUDA / DEVMEM_HAS_ROC).
#pragma once

#include "bench_options.hpp"

#include <devmem/config.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace devmem::app {

/// A strided copy written by hand: a side^4 float32 array, one side dense (C order), the other
/// addressed through `strides` (in elements, possibly negative) from element `base`.
struct StridedLoop {
  std::int64_t side = 0;
  std::array<std::int64_t, 4> strides{};
  std::int64_t base = 0;
  bool strided_source = true;  // false: the strided side is the destination
};

class RawBaseline {
 public:
  RawBaseline() = default;
  RawBaseline(const RawBaseline&) = delete;
  RawBaseline& operator=(const RawBaseline&) = delete;
  virtual ~RawBaseline() = default;

  /// What the copy numbers are ("cudaMemcpyAsync"), and what the allocation numbers are.
  [[nodiscard]] virtual std::string copy_call() const = 0;
  [[nodiscard]] virtual std::string alloc_call() const = 0;
  /// Buffers for copies of up to `max_bytes` in `direction` with `memory` on the host side,
  /// allocated and written once so that no timed copy pays for first-touch page faults.
  virtual void prepare(Direction direction, HostMemory memory, std::size_t max_bytes) = 0;
  /// Seconds from the start of the first to the end of the last of `count` back-to-back copies of
  /// `bytes` (device time, from events, where the vendor has them).
  [[nodiscard]] virtual double time_copies(Direction direction, HostMemory memory,
                                           std::size_t bytes, int count) = 0;
  /// Seconds for `count` runs of the plain loop a programmer writes for `loop` (four nested loops,
  /// one element at a time, one thread), over buffers prepared for its bytes; negative where the
  /// strided side cannot be reached by a host loop (a GPU's memory: there the plain version is a
  /// kernel, which this interface of vendor calls does not have).
  [[nodiscard]] virtual double time_strided_loop(const StridedLoop& loop, int count) = 0;
  /// Seconds for `count` allocate + free pairs of `bytes`.
  [[nodiscard]] virtual double time_alloc_free(std::size_t bytes, int count) = 0;
  /// Host seconds to enqueue `count` asynchronous pinned H2D copies of `bytes` (the enqueue cost
  /// alone; the work is waited for afterwards, untimed); negative when the vendor has no
  /// asynchronous copy to compare with (plain memcpy).
  [[nodiscard]] virtual double time_enqueue(std::size_t bytes, int count) = 0;
  /// Frees every buffer.
  virtual void release() = 0;
};

/// The baseline for the active backend ("host", "cuda", "roc").
[[nodiscard]] std::unique_ptr<RawBaseline> make_raw_baseline(std::string_view backend);

[[nodiscard]] std::unique_ptr<RawBaseline> make_host_baseline();
#if DEVMEM_HAS_CUDA
[[nodiscard]] std::unique_ptr<RawBaseline> make_cuda_baseline();
#endif
#if DEVMEM_HAS_ROC
[[nodiscard]] std::unique_ptr<RawBaseline> make_roc_baseline();
#endif

}  // namespace devmem::app

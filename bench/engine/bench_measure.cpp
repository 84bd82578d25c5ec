// `devmem bench`, the sweep: devmem's transfers (contiguous and strided), allocations and enqueue
// cost measured next to the raw vendor calls. A file of its own beside the goals
// (bench_goals.cpp) and the output (bench_output.cpp): this is the part that touches the device.
#include "bench_report.hpp"

#include <devmem/devmem.hpp>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace devmem::app {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t n = samples.size();
  return n % 2 == 1 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
}

/// Median of `repeats` samples after one warm-up sample; `sample` returns one measurement.
double median_of(int repeats, const std::function<double()>& sample) {
  static_cast<void>(sample());
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(repeats));
  for (int r = 0; r < repeats; ++r) samples.push_back(sample());
  return median(std::move(samples));
}

// ---- devmem's side of the transfers -------------------------------------------------------------

/// devmem arrays of the largest size, allocated and written once; each size uses a prefix view.
class DevmemBuffers {
 public:
  DevmemBuffers() : stream_(devmem::stream()) {}

  void prepare(Direction direction, HostMemory memory, std::int64_t bytes) {
    ensure_device(device_a_, bytes);
    if (direction == Direction::DeviceToDevice) {
      ensure_device(device_b_, bytes);
      return;
    }
    auto it = host_.find(memory);
    if (it != host_.end() && it->second.nbytes() >= bytes) return;
    if (it != host_.end()) host_.erase(it);
    const Shape shape{bytes};
    const DType u8 = dtype_of<std::uint8_t>();
    HostArray array = memory == HostMemory::Pinned   ? pinned_array(shape, u8)
                      : memory == HostMemory::Mapped ? HostArray(mapped_array(shape, u8))
                                                     : HostArray(shape, u8);
    std::memset(array.data(), 1, static_cast<std::size_t>(bytes));  // first touch, untimed
    host_.emplace(memory, std::move(array));
  }

  /// Enqueues one copy of `bytes` on the benchmark's stream.
  [[nodiscard]] std::function<void()> copy_op(Direction direction, HostMemory memory,
                                              std::int64_t bytes) const {
    const DeviceArray a = allocated(device_a_).slice(0, 0, bytes);
    switch (direction) {
      case Direction::HostToDevice: {
        const HostArray h = host_.at(memory).slice(0, 0, bytes);
        return [a, h, s = stream_] { a.copy_to_device(h, s); };
      }
      case Direction::DeviceToHost: {
        const HostArray h = host_.at(memory).slice(0, 0, bytes);
        return [a, h, s = stream_] { a.copy_to_host(h, s); };
      }
      case Direction::DeviceToDevice: {
        const DeviceArray b = allocated(device_b_).slice(0, 0, bytes);
        return [a, b, s = stream_] { b.copy_to_device(a, s); };
      }
    }
    throw InvalidArgument("devmem bench: unknown direction");
  }

  /// Seconds between events recorded around `count` calls of `op` (device time).
  [[nodiscard]] double time(const std::function<void()>& op, int count) const {
    start_.record(stream_);
    for (int i = 0; i < count; ++i) op();
    end_.record(stream_);
    end_.synchronize();
    return static_cast<double>(Event::elapsed_ms(start_, end_)) * 1e-3;
  }

  [[nodiscard]] const Stream& stream() const noexcept { return stream_; }
  [[nodiscard]] const DeviceArray& device() const { return allocated(device_a_); }
  [[nodiscard]] const HostArray& host(HostMemory memory) const { return host_.at(memory); }

 private:
  void ensure_device(std::optional<DeviceArray>& array, std::int64_t bytes) {
    if (array && array->nbytes() >= bytes) return;
    array.reset();
    array.emplace(device_array(Shape{bytes}, dtype_of<std::uint8_t>(), {}, Order::C, stream_));
    array->fill(std::uint8_t{1}, stream_);  // first touch, untimed
    stream_.synchronize();
  }

  /// A device buffer that ensure() has made (InvalidArgument before).
  static const DeviceArray& allocated(const std::optional<DeviceArray>& buffer) {
    if (!buffer) throw InvalidArgument("devmem bench: the device buffer is not allocated yet");
    return *buffer;
  }

  Stream stream_;
  mutable Event start_;
  mutable Event end_;
  std::optional<DeviceArray> device_a_;
  std::optional<DeviceArray> device_b_;
  std::map<HostMemory, HostArray> host_;
};

/// Copies per timed sample: enough bytes that the event timer's resolution and the per-sample
/// overhead do not matter, few enough that the sweep stays quick.
int ops_per_sample(std::int64_t bytes, bool quick) {
  const std::int64_t target = quick ? (std::int64_t{16} << 20) : (std::int64_t{64} << 20);
  const std::int64_t most = quick ? 200 : 2000;
  return static_cast<int>(std::clamp<std::int64_t>(target / bytes, 1, most));
}

}  // namespace

std::vector<Combination> combinations(const BenchOptions& options) {
  std::vector<Combination> out;
  for (const Direction d : options.directions) {
    if (d == Direction::DeviceToDevice) {
      out.push_back({d, HostMemory::None});
      continue;
    }
    for (const HostMemory m : options.memories) out.push_back({d, m});
  }
  return out;
}

std::vector<CopyResult> measure_copies(const BenchOptions& options, RawBaseline& raw,
                                       Progress& progress) {
  std::vector<CopyResult> results;
  const std::vector<std::int64_t> sizes = options.sizes();
  DevmemBuffers buffers;
  for (const Combination& c : combinations(options)) {
    buffers.prepare(c.direction, c.memory, options.max_size);
    raw.prepare(c.direction, c.memory, static_cast<std::size_t>(options.max_size));
    for (const std::int64_t bytes : sizes) {
      progress.step(fmt::format("{} {} {}", to_string(c.direction), to_string(c.memory),
                                devmem::format_bytes(bytes)));
      const int count = ops_per_sample(bytes, options.quick);
      const std::function<void()> op = buffers.copy_op(c.direction, c.memory, bytes);
      const double devmem_s =
          median_of(options.repeats, [&] { return buffers.time(op, count); }) / count;
      const double raw_s =
          median_of(options.repeats,
                    [&] {
                      return raw.time_copies(c.direction, c.memory, static_cast<std::size_t>(bytes),
                                             count);
                    }) /
          count;
      results.push_back({c.direction, c.memory, bytes, count, devmem_s, raw_s});
    }
  }
  raw.release();
  return results;
}

namespace {

// ---- Strided transfers --------------------------------------------------------------------------

/// The side of the 4-d float32 array of the strided cases: 4 MiB with --quick, 64 MiB otherwise.
std::int64_t strided_side(const BenchOptions& options) {
  return options.quick ? 32 : 64;
}

}  // namespace

/// Strided layouts of the device side: a full transpose and a reversed innermost axis, the two
/// that were one vendor call per element before the bounded strided path. The transpose takes the
/// strided-copy kernel's tiled path (review 2, N12; 4096 batches of a 64 x 64 transpose of
/// 4-byte units): on an H100 its device-to-device copy should come near a contiguous copy's
/// bandwidth, where the gather reached 0.3-0.5 TB/s; the reversed axis keeps the gather (coalesced
/// already).
const std::vector<std::pair<std::string, DeviceArray (*)(const DeviceArray&)>>& strided_layouts() {
  static const std::vector<std::pair<std::string, DeviceArray (*)(const DeviceArray&)>> layouts{
      {"transpose", [](const DeviceArray& a) { return a.transpose(); }},
      {"reverse-last-axis",
       [](const DeviceArray& a) { return a.slice(3, std::nullopt, std::nullopt, -1); }},
  };
  return layouts;
}

namespace {

/// The plain loop over the layout `name` of strided_layouts() on a side^4 array: the view's
/// element strides and the element its index 0 is.
StridedLoop plain_loop(std::string_view name, std::int64_t side, bool strided_source) {
  const std::int64_t s = side;
  if (name == "transpose") return {s, {1, s, s * s, s * s * s}, 0, strided_source};
  return {s, {s * s * s, s * s, s, -1}, s - 1, strided_source};  // reverse-last-axis
}

}  // namespace

std::vector<StridedResult> measure_strided(const BenchOptions& options, RawBaseline& raw,
                                           Progress& progress) {
  std::vector<StridedResult> results;
  const std::int64_t side = strided_side(options);
  const Shape shape{side, side, side, side};
  const DType f4 = dtype_of<float>();
  const std::int64_t bytes = side * side * side * side * 4;
  const Stream stream = devmem::stream();
  const DeviceArray a = device_array(shape, f4, {}, Order::C, stream);
  const DeviceArray b = device_array(shape, f4, {}, Order::C, stream);
  a.fill(1.0f, stream);
  b.fill(2.0f, stream);
  const HostArray host = pinned_array(shape, f4);
  std::memset(host.data(), 1, static_cast<std::size_t>(bytes));  // first touch, untimed
  stream.synchronize();
  for (const Direction direction : options.directions) {
    const HostMemory memory =
        direction == Direction::DeviceToDevice ? HostMemory::None : HostMemory::Pinned;
    raw.prepare(direction, memory, static_cast<std::size_t>(bytes));
    for (const auto& [name, make] : strided_layouts()) {
      progress.step(fmt::format("strided {} {}", to_string(direction), name));
      const DeviceArray view = make(a);
      std::function<void()> op;
      switch (direction) {
        case Direction::HostToDevice:
          op = [&] { view.copy_to_device(host, stream); };
          break;
        case Direction::DeviceToHost:
          op = [&] { view.copy_to_host(host, stream); };
          break;
        case Direction::DeviceToDevice:
          op = [&] { b.copy_to_device(view, stream); };
          break;
      }
      const int count = std::max(1, ops_per_sample(bytes, options.quick) / 4);
      // Wall clock to completion: a strided copy may do host work (packing) that device events
      // recorded around it would not see.
      const double devmem_s =
          median_of(options.repeats,
                    [&] {
                      const auto start = Clock::now();
                      for (int i = 0; i < count; ++i) op();
                      stream.synchronize();
                      return std::chrono::duration<double>(Clock::now() - start).count();
                    }) /
          count;
      const double raw_s =
          median_of(options.repeats,
                    [&] {
                      return raw.time_copies(direction, memory, static_cast<std::size_t>(bytes),
                                             count);
                    }) /
          count;
      // The strided side is the source when reading the view (D2H, D2D), the destination when
      // writing it (H2D).
      const StridedLoop loop = plain_loop(name, side, direction != Direction::HostToDevice);
      const double loop_s =
          raw.time_strided_loop(loop, 1) < 0.0 ? -1.0 : median_of(options.repeats, [&] {
                                                          return raw.time_strided_loop(loop, count);
                                                        }) / count;
      results.push_back({name, direction, memory, side, bytes, count, devmem_s, raw_s, loop_s});
    }
  }
  raw.release();
  return results;
}

namespace {

// ---- Allocation ---------------------------------------------------------------------------------

/// Nanoseconds per allocate + release pair of a device array through the context's manager.
double managed_pair_ns(std::int64_t bytes, int repeats, int batch) {
  return median_of(repeats,
                   [&] {
                     const auto start = Clock::now();
                     for (int i = 0; i < batch; ++i) {
                       const DeviceArray a = device_array(Shape{bytes}, dtype_of<std::uint8_t>());
                       static_cast<void>(a);
                     }
                     return std::chrono::duration<double, std::nano>(Clock::now() - start).count();
                   }) /
         batch;
}

/// Milliseconds per allocate + fill every byte + release: a fresh allocation pays for its pages
/// here (first touch), a pooled one does not. Each release is flushed at once, so that the pool
/// gets its block back before the next allocation instead of after ten more (deferred
/// deallocation would otherwise make every allocation of the batch a pool miss).
double first_use_ms(Context& ctx, std::int64_t bytes, int repeats) {
  constexpr int kBatch = 2;
  return median_of(repeats,
                   [&] {
                     const auto start = Clock::now();
                     for (int i = 0; i < kBatch; ++i) {
                       {
                         const DeviceArray a = device_array(Shape{bytes}, dtype_of<std::uint8_t>());
                         a.fill(std::uint8_t{0});
                       }
                       ctx.flush_deallocations();
                     }
                     return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
                   }) /
         kBatch;
}

}  // namespace

std::vector<std::int64_t> alloc_sizes(const BenchOptions& options, std::int64_t capacity) {
  std::vector<std::int64_t> sizes =
      options.quick ? std::vector<std::int64_t>{256, 64 << 10, 1 << 20, 64 << 20}
                    : std::vector<std::int64_t>{256,      4 << 10,  64 << 10, 1 << 20,
                                                16 << 20, 64 << 20, 256 << 20};
  // The direct manager keeps up to 11 freed blocks queued (deferred deallocation): leave room.
  std::erase_if(sizes, [&](std::int64_t s) { return s * 12 > capacity; });
  return sizes;
}

void measure_allocations(const BenchOptions& options, RawBaseline& raw, Report& report,
                         Progress& progress) {
  const auto ctx = current_context();
  const std::shared_ptr<MemoryManager> previous = ctx->memory_manager();
  const auto direct = make_memory_manager("direct", *ctx);
  const auto pool = make_memory_manager("pool", *ctx);
  // Multiples of 11: whole cycles of the deferred-deallocation queue (a flush every 11th free).
  const int batch = options.quick ? 11 : 55;
  const std::int64_t capacity = ctx->memory_info().total;
  for (const std::int64_t bytes : alloc_sizes(options, capacity)) {
    progress.step(fmt::format("alloc {}", devmem::format_bytes(bytes)));
    const double raw_ns =
        median_of(options.repeats,
                  [&] { return raw.time_alloc_free(static_cast<std::size_t>(bytes), batch); }) /
        batch * 1e9;
    ctx->flush_deallocations();
    ctx->set_memory_manager(direct);
    const double direct_ns = managed_pair_ns(bytes, options.repeats, batch);
    ctx->flush_deallocations();
    ctx->set_memory_manager(pool);
    const double pool_ns = managed_pair_ns(bytes, options.repeats, batch);
    ctx->flush_deallocations();
    pool->trim();
    report.allocations.push_back({bytes, raw_ns, direct_ns, pool_ns});
  }
  if (!report.allocations.empty()) {
    const std::int64_t bytes = report.allocations.back().bytes;
    progress.step(fmt::format("first use {}", devmem::format_bytes(bytes)));
    ctx->set_memory_manager(direct);
    const double direct_ms = first_use_ms(*ctx, bytes, options.repeats);
    ctx->flush_deallocations();
    ctx->set_memory_manager(pool);
    const double pool_ms = first_use_ms(*ctx, bytes, options.repeats);
    ctx->flush_deallocations();
    pool->trim();
    report.first_use = FirstUseResult{bytes, direct_ms, pool_ms};
  }
  ctx->set_memory_manager(previous);
}

namespace {

// ---- Enqueue cost -------------------------------------------------------------------------------

}  // namespace

EnqueueResult measure_enqueue(const BenchOptions& options, RawBaseline& raw) {
  constexpr std::int64_t kBytes = 64;
  const int count = options.quick ? 2000 : 20000;
  DevmemBuffers buffers;
  buffers.prepare(Direction::HostToDevice, HostMemory::Pinned, kBytes);
  const Stream& stream = buffers.stream();
  const auto host_ns = [&](const std::function<void()>& enqueue_all) {
    return median_of(options.repeats,
                     [&] {
                       const auto start = Clock::now();
                       enqueue_all();
                       const auto end = Clock::now();
                       stream.synchronize();  // the work itself is not what is measured
                       return std::chrono::duration<double, std::nano>(end - start).count();
                     }) /
           count;
  };
  const std::function<void()> api_op =
      buffers.copy_op(Direction::HostToDevice, HostMemory::Pinned, kBytes);
  const double api_ns = host_ns([&] {
    for (int i = 0; i < count; ++i) api_op();
  });
  current_context()->flush_deallocations();  // releases the copies' keep-alive bundles

  Backend& backend = active_backend();
  const int device = current_device();
  void* const dst = buffers.device().data();
  const void* const src = buffers.host(HostMemory::Pinned).data();
  const NativeStream native = stream.native_handle();
  const double backend_ns = host_ns([&] {
    for (int i = 0; i < count; ++i) {
      backend.copy(device, dst, src, kBytes, CopyKind::HostToDevice, native);
    }
  });
  const double raw_s = median_of(
      options.repeats, [&] { return raw.time_enqueue(static_cast<std::size_t>(kBytes), count); });
  raw.release();
  return {kBytes, api_ns, backend_ns, raw_s < 0 ? -1.0 : raw_s / count * 1e9};
}

}  // namespace devmem::app

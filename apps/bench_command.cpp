#include "bench_command.hpp"

#include "bench_kernels.hpp"
#include "bench_options.hpp"
#include "raw_baseline.hpp"

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

constexpr int kExitRuntimeError = 1;
constexpr int kExitUsage = 2;

using Clock = std::chrono::steady_clock;

// ---- Results ------------------------------------------------------------------------------------

struct CopyResult {
  Direction direction;
  HostMemory memory;
  std::int64_t bytes;
  int ops_per_sample;
  double devmem_seconds;  // per copy, median
  double raw_seconds;
  [[nodiscard]] double devmem_gbps() const {
    return static_cast<double>(bytes) / devmem_seconds / 1e9;
  }
  [[nodiscard]] double raw_gbps() const { return static_cast<double>(bytes) / raw_seconds / 1e9; }
  /// > 1: devmem is faster than the raw call.
  [[nodiscard]] double ratio() const { return raw_seconds / devmem_seconds; }
};

/// A strided transfer (a 4-d float32 array seen transposed or with its last axis reversed on the
/// device side, dense on the other) against the raw contiguous copy of the same bytes.
struct StridedResult {
  std::string layout;
  Direction direction;
  HostMemory memory;
  std::int64_t side;  // the array is side^4 float32
  std::int64_t bytes;
  int ops_per_sample;
  double devmem_seconds;  // per copy, median, wall clock to completion
  double raw_seconds;
  [[nodiscard]] double devmem_gbps() const {
    return static_cast<double>(bytes) / devmem_seconds / 1e9;
  }
  [[nodiscard]] double raw_gbps() const { return static_cast<double>(bytes) / raw_seconds / 1e9; }
  /// Strided throughput as a fraction of the contiguous copy's (1: as fast).
  [[nodiscard]] double ratio() const { return raw_seconds / devmem_seconds; }
};

struct AllocResult {
  std::int64_t bytes;
  double raw_ns;  // allocate + free pair, median
  double direct_ns;
  double pool_ns;
};

/// Allocation, first write of every byte, release: what a fresh allocation really costs.
struct FirstUseResult {
  std::int64_t bytes;
  double direct_ms;
  double pool_ms;
};

struct EnqueueResult {
  std::int64_t bytes;
  double api_ns;      // DeviceArray::copy_to_device on a stream
  double backend_ns;  // devmem::Backend::copy, the layer each backend implements
  double raw_ns;      // cudaMemcpyAsync / hipMemcpyAsync; < 0 when there is none (host)
};

struct Goal {
  std::string name;
  double measured;
  double target;
  bool at_most;  // the goal is measured <= target (a latency), else measured >= target
  std::string unit;
  [[nodiscard]] bool met() const { return at_most ? measured <= target : measured >= target; }
};

struct Report {
  std::string backend;
  std::string device;
  std::string architecture;
  std::string version;
  std::string date;
  std::string raw_copy_call;
  std::string raw_alloc_call;
  int repeats = 0;
  bool quick = false;
  std::vector<CopyResult> copies;
  std::vector<StridedResult> strided;
  std::vector<AllocResult> allocations;
  std::optional<FirstUseResult> first_use;
  std::optional<EnqueueResult> enqueue;
  std::vector<KernelResult> kernels;
  std::string kernels_skipped;  // why the kernel group did not run, when it was asked for
  std::vector<Goal> goals;
};

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

// ---- Progress -----------------------------------------------------------------------------------

/// A one-line bar on stderr, redrawn in place; only when stderr is a terminal, so that logs and
/// pipes get no control characters.
class Progress {
 public:
  Progress(bool wanted, int total)
      : enabled_(wanted && ::isatty(STDERR_FILENO) == 1), total_(total) {}
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  ~Progress() { clear(); }

  void step(std::string_view label) {
    ++done_;
    if (!enabled_) return;
    constexpr int kWidth = 30;
    const int filled = total_ == 0 ? kWidth : std::min(kWidth, done_ * kWidth / total_);
    fmt::print(stderr, "\r[{:=<{}}{: <{}}] {:>3}/{} {:<32}", "", filled, "", kWidth - filled, done_,
               total_, label);
    std::fflush(stderr);
  }
  void clear() {
    if (!enabled_ || cleared_) return;
    fmt::print(stderr, "\r{: <80}\r", "");
    std::fflush(stderr);
    cleared_ = true;
  }

 private:
  bool enabled_;
  int total_;
  int done_ = 0;
  bool cleared_ = false;
};

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

struct Combination {
  Direction direction;
  HostMemory memory;
};

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

// ---- Strided transfers --------------------------------------------------------------------------

/// The side of the 4-d float32 array of the strided cases: 4 MiB with --quick, 64 MiB otherwise.
std::int64_t strided_side(const BenchOptions& options) {
  return options.quick ? 32 : 64;
}

/// Strided layouts of the device side: a full transpose and a reversed innermost axis, the two
/// that were one vendor call per element before the bounded strided path.
const std::vector<std::pair<std::string, DeviceArray (*)(const DeviceArray&)>>& strided_layouts() {
  static const std::vector<std::pair<std::string, DeviceArray (*)(const DeviceArray&)>> layouts{
      {"transpose", [](const DeviceArray& a) { return a.transpose(); }},
      {"reverse-last-axis",
       [](const DeviceArray& a) { return a.slice(3, std::nullopt, std::nullopt, -1); }},
  };
  return layouts;
}

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
      results.push_back({name, direction, memory, side, bytes, count, devmem_s, raw_s});
    }
  }
  raw.release();
  return results;
}

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

// ---- Enqueue cost -------------------------------------------------------------------------------

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

// ---- Goals, evaluated on what was measured (docs/devmem-program.md#goals) -----------------------

/// The ratios of the copies matching `pick` of at least `from` bytes, in ascending order.
std::vector<double> sorted_ratios(const Report& report, std::int64_t from,
                                  const std::function<bool(const CopyResult&)>& pick) {
  std::vector<double> ratios;
  for (const CopyResult& c : report.copies) {
    if (c.bytes >= from && pick(c)) ratios.push_back(c.ratio());
  }
  std::sort(ratios.begin(), ratios.end());
  return ratios;
}

/// The smallest ratio among copies matching `pick` of at least `from` bytes, if any was measured.
std::optional<double> worst_ratio(const Report& report, std::int64_t from,
                                  const std::function<bool(const CopyResult&)>& pick) {
  const std::vector<double> ratios = sorted_ratios(report, from, pick);
  if (ratios.empty()) return std::nullopt;
  return ratios.front();
}

/// The median ratio over the same cells: the worst cell of a sweep is decided by its unluckiest
/// sample (a descheduled thread on a shared or virtual machine), the median by the typical one.
std::optional<double> median_ratio(const Report& report, std::int64_t from,
                                   const std::function<bool(const CopyResult&)>& pick) {
  const std::vector<double> ratios = sorted_ratios(report, from, pick);
  if (ratios.empty()) return std::nullopt;
  const std::size_t mid = ratios.size() / 2;
  return ratios.size() % 2 == 1 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
}

/// Times slower than the plain loop of kernel `name` at `size`, if it was measured.
std::optional<double> kernel_slowdown(const Report& report, std::string_view name,
                                      std::int64_t size) {
  for (const KernelResult& k : report.kernels) {
    if (k.kernel == name && k.size == size) return k.slowdown();
  }
  return std::nullopt;
}

void evaluate_goals(Report& report) {
  const auto add = [&](std::string name, std::optional<double> measured, double target,
                       bool at_most, std::string unit) {
    if (measured) {
      report.goals.push_back({std::move(name), *measured, target, at_most, std::move(unit)});
    }
  };
  // The simulator against plain loops: what bounds the size of a test or a CPU-only run.
  add("kernel matmul 256 vs plain loop (times slower)", kernel_slowdown(report, "matmul", 256), 60,
      true, "x");
  add("kernel saxpy 2^20 vs plain loop (times slower)",
      kernel_slowdown(report, "saxpy", std::int64_t{1} << 20), 20, true, "x");
  add("kernel reduction 2^20 vs plain loop (times slower)",
      kernel_slowdown(report, "reduction", std::int64_t{1} << 20), 60, true, "x");
  const auto any = [](const CopyResult&) { return true; };
  if (report.backend == "host") {
    add("copies >= 64 KiB vs 1-thread memcpy (worst)", worst_ratio(report, 64 << 10, any), 0.9,
        false, "x");
    add("copies >= 64 KiB vs 1-thread memcpy (median)", median_ratio(report, 64 << 10, any), 0.9,
        false, "x");
    add("copies >= 16 MiB vs 1-thread memcpy (worst)", worst_ratio(report, 16 << 20, any), 1.5,
        false, "x");
    add("copies >= 16 MiB vs 1-thread memcpy (median)", median_ratio(report, 16 << 20, any), 1.5,
        false, "x");
    if (report.enqueue) {
      add("enqueue of a 64 B copy, Backend::copy", report.enqueue->backend_ns, 500, true, "ns");
    }
    for (const AllocResult& a : report.allocations) {
      if (a.bytes == (64 << 20)) {
        add("64 MiB re-allocation, direct / pool", a.direct_ns / a.pool_ns, 30, false, "x");
      }
    }
    if (report.first_use && report.first_use->bytes == (64 << 20)) {
      add("64 MiB allocate+first write, direct / pool",
          report.first_use->direct_ms / report.first_use->pool_ms, 30, false, "x");
    }
    return;
  }
  const auto pinned_host = [](const CopyResult& c) {
    return c.memory == HostMemory::Pinned && c.direction != Direction::DeviceToDevice;
  };
  add("pinned H2D/D2H >= 1 MiB vs raw (worst)", worst_ratio(report, 1 << 20, pinned_host), 0.95,
      false, "x");
  add("D2D vs raw (worst, >= 1 MiB)",
      worst_ratio(report, 1 << 20,
                  [](const CopyResult& c) { return c.direction == Direction::DeviceToDevice; }),
      0.95, false, "x");
  add("pageable H2D/D2H >= 16 MiB vs raw (worst)",
      worst_ratio(report, 16 << 20,
                  [](const CopyResult& c) { return c.memory == HostMemory::Pageable; }),
      2.0, false, "x");
  std::optional<double> worst_pool;
  for (const AllocResult& a : report.allocations) {
    worst_pool = worst_pool ? std::max(*worst_pool, a.pool_ns) : a.pool_ns;
  }
  add("pooled alloc+free (slowest size)", worst_pool, 1000, true, "ns");
}

// ---- Output -------------------------------------------------------------------------------------

/// The lines of the text table, each added with its newline.
struct TableLines {
  std::string out;
  void operator()(std::string_view text) {
    out += text;
    out += '\n';
  }
};

/// Contiguous copies, one group per direction and memory kind.
void table_transfers(const Report& r, TableLines& line) {
  if (!r.copies.empty()) {
    line("");
    line("Transfers (GB/s = 1e9 bytes/s; ratio = devmem / raw, above 1 devmem is faster)");
    line(fmt::format("{:>9}  {:<4} {:<9} {:>6} {:>12} {:>12} {:>8}", "size", "dir", "memory", "ops",
                     "devmem GB/s", "raw GB/s", "ratio"));
    const CopyResult* previous = nullptr;
    for (const CopyResult& c : r.copies) {
      if (previous != nullptr &&
          (previous->direction != c.direction || previous->memory != c.memory)) {
        line("");
      }
      previous = &c;
      line(fmt::format("{:>9}  {:<4} {:<9} {:>6} {:>12.3f} {:>12.3f} {:>7.2f}x",
                       devmem::format_bytes(c.bytes), to_string(c.direction), to_string(c.memory),
                       c.ops_per_sample, c.devmem_gbps(), c.raw_gbps(), c.ratio()));
    }
  }
}

/// Strided copies against the raw contiguous copy of the same bytes.
void table_strided(const Report& r, TableLines& line) {
  if (!r.strided.empty()) {
    line("");
    line(fmt::format(
        "Strided transfers: a {}^4 float32 array, strided on the device side, dense on the other "
        "(ratio = strided GB/s / raw contiguous GB/s of the same bytes)",
        r.strided.front().side));
    line(fmt::format("{:<18} {:<4} {:<9} {:>9} {:>6} {:>12} {:>12} {:>8}", "layout", "dir",
                     "memory", "size", "ops", "devmem GB/s", "raw GB/s", "ratio"));
    for (const StridedResult& c : r.strided) {
      line(fmt::format("{:<18} {:<4} {:<9} {:>9} {:>6} {:>12.3f} {:>12.3f} {:>7.2f}x", c.layout,
                       to_string(c.direction), to_string(c.memory), devmem::format_bytes(c.bytes),
                       c.ops_per_sample, c.devmem_gbps(), c.raw_gbps(), c.ratio()));
    }
  }
}

/// Allocation latency, the first-use cost and the enqueue cost.
void table_allocations(const Report& r, TableLines& line) {
  if (!r.allocations.empty()) {
    line("");
    line(
        fmt::format("Allocation latency: allocate + free, ns (raw: {}; direct and pool: a "
                    "device array through that memory manager)",
                    r.raw_alloc_call));
    line(fmt::format("{:>9} {:>10} {:>10} {:>10} {:>12} {:>10}", "size", "raw", "direct", "pool",
                     "direct/pool", "raw/pool"));
    for (const AllocResult& a : r.allocations) {
      line(fmt::format("{:>9} {:>10.0f} {:>10.0f} {:>10.0f} {:>11.1f}x {:>9.1f}x",
                       devmem::format_bytes(a.bytes), a.raw_ns, a.direct_ns, a.pool_ns,
                       a.direct_ns / a.pool_ns, a.raw_ns / a.pool_ns));
    }
  }
  if (r.first_use) {
    const FirstUseResult& f = *r.first_use;
    line(fmt::format(
        "Allocate + write every byte + free, {}: direct {:.2f} ms, pool {:.2f} ms "
        "({:.1f}x)",
        devmem::format_bytes(f.bytes), f.direct_ms, f.pool_ms, f.direct_ms / f.pool_ms));
  }
  if (r.enqueue) {
    const EnqueueResult& e = *r.enqueue;
    line("");
    line(
        fmt::format("Enqueue cost of one asynchronous {} B pinned H2D copy on a stream (host "
                    "time per call): devmem API {:.0f} ns, Backend::copy {:.0f} ns, raw {}",
                    e.bytes, e.api_ns, e.backend_ns,
                    e.raw_ns < 0 ? std::string("n/a (memcpy has no enqueue)")
                                 : fmt::format("{} {:.0f} ns", r.raw_copy_call, e.raw_ns)));
  }
}

/// The simulator against plain loops, or why it was not measured.
void table_kernels(const Report& r, TableLines& line) {
  if (!r.kernels.empty()) {
    line("");
    line(
        "Kernels in the host backend's simulator against the same computation as a plain C++ "
        "loop in this program (per launch / per loop run; slower = kernel / loop)");
    line(fmt::format("{:<10} {:>8} {:>8} {:>6} {:>12} {:>12} {:>12} {:>9}", "kernel", "size",
                     "threads", "calls", "per launch", "plain loop", "threads/s", "slower"));
    for (const KernelResult& k : r.kernels) {
      line(fmt::format("{:<10} {:>8} {:>8} {:>6} {:>9.3f} ms {:>9.3f} ms {:>10.1f} M {:>8.1f}x",
                       k.kernel, k.size, k.threads, k.launches_per_sample, k.kernel_seconds * 1e3,
                       k.loop_seconds * 1e3, k.threads_per_second() / 1e6, k.slowdown()));
    }
  }
  if (!r.kernels_skipped.empty()) {
    line("");
    line(fmt::format("Kernels: not measured: {}", r.kernels_skipped));
  }
}

/// Each goal, measured and met or missed.
void table_goals(const Report& r, TableLines& line) {
  if (!r.goals.empty()) {
    line("");
    line("Goals");
    for (const Goal& g : r.goals) {
      line(fmt::format("  {:<48} {:>10.2f} {:<2} (goal {} {:g} {}) {}", g.name, g.measured, g.unit,
                       g.at_most ? "<=" : ">=", g.target, g.unit, g.met() ? "met" : "MISSED"));
    }
  }
}

std::string print_table(const Report& r) {
  TableLines line;
  line(fmt::format("devmem bench: backend {}, device {} ({}), devmem {}, {}", r.backend, r.device,
                   r.architecture, r.version, r.date));
  line(fmt::format("raw baseline: {} / {}; medians of {} repeats after a warm-up{}",
                   r.raw_copy_call, r.raw_alloc_call, r.repeats, r.quick ? " (--quick)" : ""));
  table_transfers(r, line);
  table_strided(r, line);
  table_allocations(r, line);
  table_kernels(r, line);
  table_goals(r, line);
  return line.out;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

/// A JSON number; non-finite values (a copy too fast to time) become null.
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{:.6g}", value) : "null";
}

/// `  "name": [rows],` with one row (a JSON object from `row`) per item, as the JSON output
/// writes every list; `last`: no comma after it.
template <class Item, class Row>
std::string json_list(std::string_view name, const std::vector<Item>& items, Row row,
                      bool last = false) {
  std::string out = fmt::format("  \"{}\": [", name);
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += fmt::format("{}\n    {}", i == 0 ? "" : ",", row(items[i]));
  }
  out += items.empty() ? "]" : "\n  ]";
  return out + (last ? "\n" : ",\n");
}

std::string print_json(const Report& r) {
  std::string out = "{\n";
  out += fmt::format(
      "  \"backend\": {}, \"device\": {}, \"architecture\": {}, \"devmem_version\": {},\n"
      "  \"date\": {}, \"raw_copy_call\": {}, \"raw_alloc_call\": {}, \"repeats\": {}, "
      "\"quick\": {},\n",
      json_string(r.backend), json_string(r.device), json_string(r.architecture),
      json_string(r.version), json_string(r.date), json_string(r.raw_copy_call),
      json_string(r.raw_alloc_call), r.repeats, r.quick);
  out += json_list("copies", r.copies, [](const CopyResult& c) {
    return fmt::format(
        "{{\"direction\": \"{}\", \"memory\": \"{}\", \"bytes\": {}, \"ops_per_sample\": "
        "{}, \"devmem_gbps\": {}, \"raw_gbps\": {}, \"ratio\": {}}}",
        to_string(c.direction), to_string(c.memory), c.bytes, c.ops_per_sample,
        json_number(c.devmem_gbps()), json_number(c.raw_gbps()), json_number(c.ratio()));
  });
  out += json_list("strided", r.strided, [](const StridedResult& c) {
    return fmt::format(
        "{{\"layout\": {}, \"direction\": \"{}\", \"memory\": \"{}\", \"side\": {}, "
        "\"bytes\": {}, \"ops_per_sample\": {}, \"devmem_gbps\": {}, \"raw_gbps\": {}, "
        "\"ratio\": {}}}",
        json_string(c.layout), to_string(c.direction), to_string(c.memory), c.side, c.bytes,
        c.ops_per_sample, json_number(c.devmem_gbps()), json_number(c.raw_gbps()),
        json_number(c.ratio()));
  });
  out += json_list("allocations", r.allocations, [](const AllocResult& a) {
    return fmt::format(
        "{{\"bytes\": {}, \"raw_ns\": {}, \"direct_ns\": {}, \"pool_ns\": {}, "
        "\"direct_over_pool\": {}, \"raw_over_pool\": {}}}",
        a.bytes, json_number(a.raw_ns), json_number(a.direct_ns), json_number(a.pool_ns),
        json_number(a.direct_ns / a.pool_ns), json_number(a.raw_ns / a.pool_ns));
  });
  if (r.first_use) {
    out += fmt::format(
        "  \"first_use\": {{\"bytes\": {}, \"direct_ms\": {}, \"pool_ms\": {}, \"ratio\": {}}},\n",
        r.first_use->bytes, json_number(r.first_use->direct_ms), json_number(r.first_use->pool_ms),
        json_number(r.first_use->direct_ms / r.first_use->pool_ms));
  } else {
    out += "  \"first_use\": null,\n";
  }
  if (r.enqueue) {
    out += fmt::format(
        "  \"enqueue\": {{\"bytes\": {}, \"api_ns\": {}, \"backend_ns\": {}, \"raw_ns\": {}}},\n",
        r.enqueue->bytes, json_number(r.enqueue->api_ns), json_number(r.enqueue->backend_ns),
        r.enqueue->raw_ns < 0 ? "null" : json_number(r.enqueue->raw_ns));
  } else {
    out += "  \"enqueue\": null,\n";
  }
  out += json_list("kernels", r.kernels, [](const KernelResult& k) {
    return fmt::format(
        "{{\"kernel\": {}, \"size\": {}, \"bytes\": {}, \"threads\": {}, "
        "\"launches_per_sample\": {}, \"seconds_per_launch\": {}, \"loop_seconds\": {}, "
        "\"threads_per_second\": {}, \"slowdown\": {}, \"ratio\": {}}}",
        json_string(k.kernel), k.size, k.bytes, k.threads, k.launches_per_sample,
        json_number(k.kernel_seconds), json_number(k.loop_seconds),
        json_number(k.threads_per_second()), json_number(k.slowdown()),
        json_number(k.loop_seconds / k.kernel_seconds));
  });
  out += fmt::format("  \"kernels_skipped\": {},\n",
                     r.kernels_skipped.empty() ? "null" : json_string(r.kernels_skipped));
  out += json_list(
      "goals", r.goals,
      [](const Goal& g) {
        return fmt::format(
            "{{\"name\": {}, \"measured\": {}, \"target\": {}, \"comparison\": \"{}\", "
            "\"unit\": {}, \"met\": {}}}",
            json_string(g.name), json_number(g.measured), json_number(g.target),
            g.at_most ? "<=" : ">=", json_string(g.unit), g.met());
      },
      true);
  return out + "}\n";
}

constexpr std::string_view kCsvHeader = "measurement,direction,memory,bytes,devmem,raw,unit,ratio";

/// One row per number pair; ratio is always "devmem is this many times faster than raw".
std::string print_csv(const Report& r) {
  std::string out(kCsvHeader);
  out += '\n';
  for (const CopyResult& c : r.copies) {
    out += fmt::format("copy,{},{},{},{},{},GB/s,{}\n", to_string(c.direction), to_string(c.memory),
                       c.bytes, json_number(c.devmem_gbps()), json_number(c.raw_gbps()),
                       json_number(c.ratio()));
  }
  for (const StridedResult& c : r.strided) {
    out += fmt::format("strided-{},{},{},{},{},{},GB/s,{}\n", c.layout, to_string(c.direction),
                       to_string(c.memory), c.bytes, json_number(c.devmem_gbps()),
                       json_number(c.raw_gbps()), json_number(c.ratio()));
  }
  for (const AllocResult& a : r.allocations) {
    out += fmt::format("alloc-direct,,device,{},{},{},ns,{}\n", a.bytes, json_number(a.direct_ns),
                       json_number(a.raw_ns), json_number(a.raw_ns / a.direct_ns));
    out += fmt::format("alloc-pool,,device,{},{},{},ns,{}\n", a.bytes, json_number(a.pool_ns),
                       json_number(a.raw_ns), json_number(a.raw_ns / a.pool_ns));
  }
  if (r.enqueue && r.enqueue->raw_ns >= 0) {
    out += fmt::format("enqueue,h2d,pinned,{},{},{},ns,{}\n", r.enqueue->bytes,
                       json_number(r.enqueue->api_ns), json_number(r.enqueue->raw_ns),
                       json_number(r.enqueue->raw_ns / r.enqueue->api_ns));
  } else if (r.enqueue) {
    out += fmt::format("enqueue,h2d,pinned,{},{},,ns,\n", r.enqueue->bytes,
                       json_number(r.enqueue->api_ns));
  }
  // devmem: the kernel, raw: the plain loop, seconds per run; bytes: the arrays it reads and
  // writes (the size is in the measurement's name).
  for (const KernelResult& k : r.kernels) {
    out += fmt::format("kernel-{}-{},,device,{},{},{},s,{}\n", k.kernel, k.size, k.bytes,
                       json_number(k.kernel_seconds), json_number(k.loop_seconds),
                       json_number(k.loop_seconds / k.kernel_seconds));
  }
  return out;
}

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { (void)std::fclose(f); }
};
using OutputFile = std::unique_ptr<std::FILE, FileCloser>;

/// Opens `path` for writing when `target` names a file (null for stdout or no output). Done before
/// the measurements, which take a while: an unwritable path fails at once, not after the run. An
/// error is a runtime error (exit 1).
OutputFile open_output(const OutputTarget& target) {
  if (!target.enabled || target.path.empty()) return nullptr;
  std::FILE* f = std::fopen(target.path.c_str(), "w");
  if (f == nullptr) {
    throw Error(fmt::format("cannot write {}: {}", target.path, std::strerror(errno)));
  }
  return OutputFile(f);
}

/// Writes `text` to `file` (opened by open_output for `path`) and closes it.
void write_file(OutputFile file, const std::string& path, const std::string& text) {
  const bool ok = std::fwrite(text.data(), 1, text.size(), file.get()) == text.size();
  const bool closed = std::fclose(file.release()) == 0;
  if (!ok || !closed) throw Error(fmt::format("cannot write {}", path));
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return fmt::format("{:%Y-%m-%d %H:%M}", local);
}

/// Writes `text` where `output` asks for it: stdout (no path) or its file, opened before the run.
void emit(const OutputTarget& output, OutputFile file, const std::string& text) {
  if (!output.enabled) return;
  if (output.path.empty()) {
    fmt::print("{}", text);
  } else {
    write_file(std::move(file), output.path, text);
  }
}

int run(const BenchOptions& options) {
  Report report;
  report.backend = backend_name();
  if (device_count() == 0) {
    fmt::print(stderr, "devmem bench: no device: {}\n", active_backend().no_device_reason());
    return kExitRuntimeError;
  }
  const auto ctx = current_context();
  const DeviceProperties props = ctx->properties();
  report.device = props.name;
  report.architecture = props.architecture;
  report.version = devmem::version();
  report.date = today();
  report.repeats = options.repeats;
  report.quick = options.quick;

  // devmem's two device buffers of the largest size (D2D), and on a GPU the raw baseline's two.
  const MemoryInfo memory = ctx->memory_info();
  const std::int64_t needed = options.max_size * (report.backend == "host" ? 2 : 4);
  if (options.measure_transfers && needed > memory.free) {
    fmt::print(stderr,
               "devmem bench: --max-size {} needs {} of device memory, the device has {} free\n",
               devmem::format_bytes(options.max_size), devmem::format_bytes(needed),
               devmem::format_bytes(memory.free));
    return kExitRuntimeError;
  }

  OutputFile json_file = open_output(options.json);
  OutputFile csv_file = open_output(options.csv);

  const std::unique_ptr<RawBaseline> raw = make_raw_baseline(report.backend);
  report.raw_copy_call = raw->copy_call();
  report.raw_alloc_call = raw->alloc_call();

  const bool transfers = options.measure_transfers;
  // The kernels of the group are compiled by the host compiler into this program: they run on the
  // host backend's simulator, not on a GPU backend.
  const bool kernels = options.measure_kernels && report.backend == "host";
  if (options.measure_kernels && !kernels) {
    report.kernels_skipped = fmt::format(
        "the kernel group runs on the host backend only (its kernels are compiled by the host "
        "compiler into this program); run with DEVMEM_BACKEND=host to measure it");
  }
  const std::vector<Combination> combos = combinations(options);
  const int alloc_steps = transfers && options.measure_alloc
                              ? static_cast<int>(alloc_sizes(options, memory.total).size()) + 1
                              : 0;
  const int strided_steps =
      transfers ? static_cast<int>(options.directions.size() * strided_layouts().size()) : 0;
  const int copy_steps = transfers ? static_cast<int>(combos.size() * options.sizes().size()) : 0;
  const int kernel_steps = kernels ? static_cast<int>(kernel_case_labels().size()) : 0;
  Progress progress(options.progress, copy_steps + strided_steps + alloc_steps + kernel_steps);
  if (transfers) {
    report.copies = measure_copies(options, *raw, progress);
    report.strided = measure_strided(options, *raw, progress);
    if (options.measure_alloc) {
      measure_allocations(options, *raw, report, progress);
      report.enqueue = measure_enqueue(options, *raw);
    }
  }
  if (kernels) {
    report.kernels = measure_kernels(options.repeats, options.quick,
                                     [&](std::string_view label) { progress.step(label); });
  }
  progress.clear();
  evaluate_goals(report);

  const bool table_to_stdout = !(options.json.enabled && options.json.path.empty()) &&
                               !(options.csv.enabled && options.csv.path.empty());
  if (table_to_stdout) fmt::print("{}", print_table(report));
  emit(options.json, std::move(json_file), print_json(report));
  emit(options.csv, std::move(csv_file), print_csv(report));
  std::fflush(stdout);
  return 0;
}

}  // namespace

int run_bench(std::span<const std::string_view> args) {
  BenchOptions options;
  try {
    options = parse_bench_options(args);
  } catch (const UsageError& e) {
    fmt::print(stderr, "devmem bench: {}\n(see devmem bench --help)\n", e.what());
    return kExitUsage;
  }
  if (options.help) {
    fmt::print("{}", bench_usage());
    return 0;
  }
  try {
    return run(options);
  } catch (const NoDevice& e) {
    fmt::print(stderr, "devmem bench: no device: {}\n", e.what());
    return kExitRuntimeError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "devmem bench: {}\n", e.what());
    return kExitRuntimeError;
  }
}

}  // namespace devmem::app

// The bounded strided copies (backends/gpu_runtime/strided_copies.hpp) on the strict fake, whose
// counters see what they allocate and wait for, whose deferred, out-of-order execution and
// poisoned temporaries catch a temporary reused too early, and whose device memory the host
// cannot read (review 2, N7): temporaries of at most two chunks a side, kept rather than freed,
// retired by events; a copy with a page-locked host side makes no synchronizing call where the
// host does not touch the bytes. Compiled only into conformance_strict-fake.
#include "support.hpp"

#include "backends/strict_fake/strict_fake_controls.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

using devmem::Backend;
using devmem::CopyKind;
using devmem::HostAllocFlags;
using devmem::NativeStream;
namespace fake = devmem::strict_fake;
namespace layout = devmem::layout;

Backend& backend() {
  return devmem::active_backend();
}

/// Sets the strict fake's copy chunk for one test; the temporaries kept before are freed first,
/// so that the counters see every allocation of the test's copies.
class CopyChunk {
 public:
  explicit CopyChunk(std::size_t chunk) : previous_(fake::set_copy_chunk(chunk)) {
    backend().release_idle_buffers();
  }
  CopyChunk(const CopyChunk&) = delete;
  CopyChunk& operator=(const CopyChunk&) = delete;
  ~CopyChunk() {
    backend().release_idle_buffers();
    static_cast<void>(fake::set_copy_chunk(previous_));
  }

 private:
  std::size_t previous_;
};

/// One side of a strided copy: byte strides, the offset of element (0, ..., 0) in its buffer,
/// and the buffer's bytes.
struct SideLayout {
  devmem::Strides strides;
  std::int64_t origin = 0;
  std::size_t bytes = 0;
};

/// A strided copy between a host side and a device side of one shape.
struct CopyCase {
  std::string name;
  devmem::Shape shape;
  std::int64_t itemsize = 4;
  SideLayout host;
  SideLayout device;
};

/// The bytes a side spans, and the elements' bytes.
std::int64_t span(const CopyCase& c, const SideLayout& side) {
  std::int64_t bytes = c.itemsize;
  for (std::size_t k = 0; k < c.shape.size(); ++k)
    bytes += (c.shape[k] - 1) * std::abs(side.strides[k]);
  return bytes;
}
std::int64_t payload(const CopyCase& c) {
  std::int64_t bytes = c.itemsize;
  for (const std::int64_t n : c.shape) bytes *= n;
  return bytes;
}

/// A side of `shape` whose axes lie in memory in `order` (outermost first), every `step`-th item
/// of the innermost, axes in `reversed` running backwards.
SideLayout side(const devmem::Shape& shape, std::int64_t itemsize,
                const std::vector<std::size_t>& order, std::int64_t step = 1,
                const std::vector<std::size_t>& reversed = {}) {
  SideLayout out;
  out.strides.assign(shape.size(), 0);
  std::int64_t stride = itemsize * step;  // the gaps between the innermost axis's items
  for (std::size_t k = order.size(); k-- > 0;) {
    out.strides[order[k]] = stride;
    stride *= shape[order[k]];
  }
  out.bytes = static_cast<std::size_t>(stride);
  for (const std::size_t axis : reversed) {
    out.origin += out.strides[axis] * (shape[axis] - 1);
    out.strides[axis] = -out.strides[axis];
  }
  return out;
}

/// Layouts with odd sizes (so the last chunk is partial) that take each way of the bounded path.
std::vector<CopyCase> cases() {
  const devmem::Shape square{509, 517};
  std::vector<CopyCase> out;
  // The device side is the host side's transpose: a dense source either way.
  out.push_back({"transpose", square, 4, side(square, 4, {0, 1}), side(square, 4, {1, 0})});
  // Every third item on the host: the H2D source is sparse (the host packs it), the D2H
  // destination has gaps (the host places the elements).
  out.push_back(
      {"host every third", square, 4, side(square, 4, {0, 1}, 3), side(square, 4, {0, 1})});
  // Gaps on both sides, sparser on the host: H2D packs on the host and unpacks on the device.
  out.push_back(
      {"gaps both sides", square, 4, side(square, 4, {1, 0}, 3), side(square, 4, {0, 1}, 2)});
  // Sparser on the device: D2H packs on the device and places on the host.
  out.push_back({"gaps both sides, sparser device", square, 4, side(square, 4, {0, 1}, 2),
                 side(square, 4, {1, 0}, 3)});
  // Reversed axes on both sides, transposed.
  out.push_back({"reversed and transposed", square, 4, side(square, 4, {0, 1}, 1, {0}),
                 side(square, 4, {1, 0}, 1, {0, 1})});
  // A block of 20000 rows (80 KB) is larger than a chunk: cut into runs of rows.
  const devmem::Shape tall{20000, 3};
  out.push_back(
      {"a block larger than a chunk", tall, 4, side(tall, 4, {0, 1}), side(tall, 4, {1, 0})});
  // Elements of 40 KiB + 12 bytes, larger than a chunk: cut into runs of bytes.
  const devmem::Shape few{6, 5};
  const std::int64_t big = (40 << 10) + 12;
  out.push_back(
      {"elements larger than a chunk", few, big, side(few, big, {0, 1}), side(few, big, {1, 0})});
  return out;
}

/// Host memory: page-locked from the backend, or pageable.
class HostBuffer {
 public:
  HostBuffer(std::size_t bytes, bool pinned) : pinned_(pinned) {
    if (pinned) {
      data_ = static_cast<unsigned char*>(backend().host_allocate(0, bytes, HostAllocFlags::None));
    } else {
      pageable_.resize(bytes);
      data_ = pageable_.data();
    }
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() {
    if (pinned_) backend().host_deallocate(0, data_);
  }
  [[nodiscard]] unsigned char* data() const noexcept { return data_; }

 private:
  bool pinned_;
  std::vector<unsigned char> pageable_;
  unsigned char* data_ = nullptr;
};

std::vector<unsigned char> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::uint32_t> words((bytes + 3) / 4);
  std::mt19937 rng(seed);
  const auto start = static_cast<std::uint32_t>(rng());
  std::iota(words.begin(), words.end(), start);
  for (auto& w : words) w = w * 2654435761U;  // distinct bytes everywhere, cheaply
  std::vector<unsigned char> out(bytes);
  std::memcpy(out.data(), words.data(), bytes);
  return out;
}

/// One strided copy of `c` in direction `kind` on `stream`, between a fresh device buffer and a
/// host buffer (page-locked or not): what the runtime was asked during the call, and whether the
/// destination holds exactly copy_host_strided's bytes once the stream is done (the bytes
/// between its elements untouched).
struct CopyRun {
  fake::Counters during;
  bool correct = false;
};

CopyRun run_copy(const CopyCase& c, CopyKind kind, bool pinned, NativeStream stream,
                 unsigned seed) {
  const bool h2d = kind == CopyKind::HostToDevice;
  const SideLayout& src = h2d ? c.host : c.device;
  const SideLayout& dst = h2d ? c.device : c.host;
  const layout::CopyPlan plan = layout::plan_copy(c.shape, src.strides, dst.strides, c.itemsize);
  const std::vector<unsigned char> source = pattern(src.bytes, seed);
  std::vector<unsigned char> expected(dst.bytes, 0xEE);
  layout::copy_host_strided(plan, expected.data() + dst.origin, source.data() + src.origin);
  const std::vector<unsigned char> untouched(dst.bytes, 0xEE);

  HostBuffer host(c.host.bytes, pinned);
  void* const device = backend().allocate(0, c.device.bytes);
  const std::vector<unsigned char>& device_start = h2d ? untouched : source;
  backend().copy(0, device, device_start.data(), c.device.bytes, CopyKind::HostToDevice, nullptr);
  std::memcpy(host.data(), h2d ? source.data() : untouched.data(), c.host.bytes);
  backend().synchronize_stream(0, nullptr);

  auto* const device_element0 = static_cast<unsigned char*>(device) + c.device.origin;
  unsigned char* const host_element0 = host.data() + c.host.origin;
  fake::reset_counters();
  if (h2d) {
    backend().copy_strided(0, device_element0, host_element0, plan, kind, stream);
  } else {
    backend().copy_strided(0, host_element0, device_element0, plan, kind, stream);
  }
  CopyRun run;
  run.during = fake::counters();
  backend().synchronize_stream(0, stream);
  std::vector<unsigned char> result(dst.bytes);
  if (h2d) {
    backend().copy(0, result.data(), device, dst.bytes, CopyKind::DeviceToHost, nullptr);
    backend().synchronize_stream(0, nullptr);
  } else {
    std::memcpy(result.data(), host.data(), dst.bytes);
  }
  backend().deallocate(0, device);
  run.correct = result == expected;
  return run;
}

/// Whether the host would touch the bytes of a page-locked host side (an H2D source spanning more
/// than twice its elements' bytes, a D2H destination with gaps): the kernel then reads or writes
/// them through their device address (the strict fake maps every page-locked allocation).
bool host_would_touch(const CopyCase& c, CopyKind kind) {
  if (kind == CopyKind::HostToDevice) return span(c, c.host) > 2 * payload(c);
  return span(c, c.host) != payload(c);
}

}  // namespace

TEST_CASE("strict fake: bounded strided copies use two chunks a side, kept, exactly",
          "[strict-fake]") {
  // Review 2, N7, scaled down: about 1 MiB through 32 KiB chunks, as 4 GiB through 8 MiB.
  constexpr std::size_t kChunk = std::size_t{32} << 10;
  const CopyChunk chunk(kChunk);
  const NativeStream stream = backend().create_stream(0);
  for (const CopyCase& c : cases()) {
    for (const CopyKind kind : {CopyKind::HostToDevice, CopyKind::DeviceToHost}) {
      for (const bool pinned : {false, true}) {
        INFO(c.name << ", " << devmem::to_string(kind) << (pinned ? ", pinned" : ", pageable"));
        backend().release_idle_buffers();
        // Cold: the temporaries are allocated, at most two chunks of each kind.
        const CopyRun cold = run_copy(c, kind, pinned, stream, 1);
        CHECK(cold.correct);
        CHECK(cold.during.device_peak <= 2 * kChunk);
        CHECK(cold.during.pinned_peak <= 2 * kChunk);
        CHECK(cold.during.frees == 0);
        // Warm: the same temporaries again, nothing allocated or freed.
        const CopyRun warm = run_copy(c, kind, pinned, stream, 2);
        CHECK(warm.correct);
        CHECK(warm.during.device_peak == 0);
        CHECK(warm.during.pinned_peak == 0);
        CHECK(warm.during.frees == 0);
        if (pinned) {
          // Enqueued and returned, whatever the layout: the host waited for nothing.
          CHECK(warm.during.stream_synchronizes == 0);
          CHECK(warm.during.event_synchronizes == 0);
          if (host_would_touch(c, kind)) {
            // One launch through the host memory's device address: no temporaries at all.
            CHECK(cold.during.device_peak == 0);
            CHECK(cold.during.pinned_peak == 0);
          }
        }
      }
    }
  }
  backend().destroy_stream(0, stream);
}

TEST_CASE("strict fake: a 72 MiB strided copy with a pinned host side is asynchronous and bounded",
          "[strict-fake]") {
  // Review 2, N7: with the default chunk (8 MiB), a transposing copy of 72 MiB between page-locked
  // memory and the device. Before, it allocated 72 MiB of device memory beside the arrays, freed it
  // after the copy (cudaFree synchronizes the device), and waited for the stream.
  constexpr std::size_t kDefaultChunk = std::size_t{8} << 20;  // StagingOptions::chunk's default
  const CopyChunk chunk(kDefaultChunk);
  const devmem::Shape shape{4096, 4608};
  const CopyCase c{"72 MiB transpose", shape, 4, side(shape, 4, {0, 1}), side(shape, 4, {1, 0})};
  const NativeStream stream = backend().create_stream(0);
  for (const CopyKind kind : {CopyKind::HostToDevice, CopyKind::DeviceToHost}) {
    INFO(devmem::to_string(kind));
    const CopyRun run = run_copy(c, kind, /*pinned=*/true, stream, 3);
    CHECK(run.correct);
    CHECK(run.during.device_peak <= 2 * kDefaultChunk);
    CHECK(run.during.pinned_peak == 0);
    CHECK(run.during.frees == 0);
    CHECK(run.during.stream_synchronizes == 0);
    CHECK(run.during.event_synchronizes == 0);
  }
  backend().destroy_stream(0, stream);
}

TEST_CASE("strict fake: in-flight temporaries are reused in order across streams",
          "[strict-fake]") {
  // Asynchronous copies on two streams, none waited for between them, all through the same two
  // slots of 32 KiB: a slot reused before the work of its last chunk ran would hand that work
  // poisoned or overwritten bytes, which the fake's out-of-order execution would run first.
  constexpr std::size_t kChunk = std::size_t{32} << 10;
  const CopyChunk chunk(kChunk);
  const devmem::Shape shape{300, 211};
  const CopyCase c{"transpose", shape, 4, side(shape, 4, {0, 1}), side(shape, 4, {1, 0})};
  const layout::CopyPlan to_device =
      layout::plan_copy(c.shape, c.host.strides, c.device.strides, c.itemsize);
  const layout::CopyPlan to_host =
      layout::plan_copy(c.shape, c.device.strides, c.host.strides, c.itemsize);
  const NativeStream streams[2] = {backend().create_stream(0), backend().create_stream(0)};
  constexpr int kCopies = 6;
  std::vector<std::vector<unsigned char>> sources;
  std::vector<std::unique_ptr<HostBuffer>> hosts;
  std::vector<std::unique_ptr<HostBuffer>> backs;
  std::vector<void*> devices;
  for (int i = 0; i < kCopies; ++i) {
    sources.push_back(pattern(c.host.bytes, 10U + static_cast<unsigned>(i)));
    hosts.push_back(std::make_unique<HostBuffer>(c.host.bytes, true));
    backs.push_back(std::make_unique<HostBuffer>(c.host.bytes, true));
    std::memcpy(hosts.back()->data(), sources.back().data(), c.host.bytes);
    std::memset(backs.back()->data(), 0xEE, c.host.bytes);
    devices.push_back(backend().allocate(0, c.device.bytes));
  }
  fake::reset_counters();
  for (int i = 0; i < kCopies; ++i) {
    // There and back on one stream (ordered by it); the next copy on the other stream.
    const NativeStream s = streams[i % 2];
    backend().copy_strided(0, devices[static_cast<std::size_t>(i)],
                           hosts[static_cast<std::size_t>(i)]->data(), to_device,
                           CopyKind::HostToDevice, s);
    backend().copy_strided(0, backs[static_cast<std::size_t>(i)]->data(),
                           devices[static_cast<std::size_t>(i)], to_host, CopyKind::DeviceToHost,
                           s);
  }
  const fake::Counters during = fake::counters();
  CHECK(during.stream_synchronizes == 0);
  CHECK(during.event_synchronizes == 0);
  CHECK(during.frees == 0);
  CHECK(during.device_peak <= 2 * kChunk);
  for (const NativeStream s : streams) backend().synchronize_stream(0, s);
  for (int i = 0; i < kCopies; ++i) {
    const auto* const back = backs[static_cast<std::size_t>(i)]->data();
    INFO("copy " << i);
    CHECK(std::equal(back, back + c.host.bytes, sources[static_cast<std::size_t>(i)].begin()));
    backend().deallocate(0, devices[static_cast<std::size_t>(i)]);
  }
  for (const NativeStream s : streams) backend().destroy_stream(0, s);
}

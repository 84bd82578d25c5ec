// gpu_runtime_fake_api, the copies: the choice of copy calls (1-D, 2-D, 3-D, the fallbacks for
// pitches the runtime rejects), which must copy exactly what layout::copy_host_strided copies; the
// bounded strided copies (a few vendor calls and one kernel launch per chunk, through two chunks of
// temporaries a side); and the pinned staging of large pageable copies. A file of its own so that
// gpu_runtime_fake.cpp holds one topic per file.
#include "gpu_runtime_fake.hpp"

using namespace gpu_runtime_fake;

namespace {

/// A side of a random copy: a strided view into a padded buffer, with a random axis order in
/// memory and possibly reversed axes.
struct Side {
  std::vector<unsigned char> buffer;
  std::int64_t origin = 0;  // byte offset of element (0, ..., 0)
  devmem::Strides strides;
};

Side make_side(std::mt19937& rng, const devmem::Shape& shape, std::int64_t itemsize,
               bool allow_negative) {
  const std::size_t n = shape.size();
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), rng);
  std::uniform_int_distribution<int> pad(0, 2);
  std::uniform_int_distribution<int> coin(0, 3);
  Side side;
  side.strides.assign(n, 0);
  std::int64_t stride = itemsize;
  for (std::size_t k = n; k-- > 0;) {  // order.back() varies fastest
    const std::size_t axis = order[k];
    side.strides[axis] = stride;
    stride *= shape[axis] + pad(rng);
  }
  side.buffer.resize(static_cast<std::size_t>(stride));
  for (std::size_t axis = 0; axis < n; ++axis) {
    if (allow_negative && coin(rng) == 0) {
      side.origin += side.strides[axis] * (shape[axis] - 1);
      side.strides[axis] = -side.strides[axis];
    }
  }
  return side;
}

}  // namespace

TEST_CASE("gpu_runtime: strided copies copy exactly what copy_host_strided copies") {
  std::mt19937 rng(20240613);
  std::uniform_int_distribution<int> dims(1, 4);
  std::uniform_int_distribution<int> extent(1, 5);
  std::uniform_int_distribution<int> item(0, 2);
  int used_3d = 0;
  int used_2d = 0;
  int used_kernel = 0;
  const CopyKind kinds[] = {CopyKind::HostToDevice, CopyKind::DeviceToHost,
                            CopyKind::DeviceToDevice, CopyKind::HostToHost};
  for (int trial = 0; trial < 3000; ++trial) {
    Fixture f;
    devmem::Shape shape(static_cast<std::size_t>(dims(rng)));
    for (auto& e : shape) e = extent(rng);
    const std::int64_t itemsize = std::int64_t{1} << (2 * item(rng));
    Side src = make_side(rng, shape, itemsize, true);
    Side dst = make_side(rng, shape, itemsize, trial % 2 == 0);
    for (std::size_t i = 0; i < src.buffer.size(); ++i) {
      src.buffer[i] = static_cast<unsigned char>(rng());
    }
    for (auto& byte : dst.buffer) byte = 0xEE;
    Side expected = dst;
    devmem::layout::CopyPlan plan;
    try {
      plan = devmem::layout::plan_copy(shape, src.strides, dst.strides, itemsize);
    } catch (const devmem::InvalidArgument&) {
      continue;  // e.g. a zero-stride destination; not what this test is about
    }
    devmem::layout::copy_host_strided(plan, expected.buffer.data() + expected.origin,
                                      src.buffer.data() + src.origin);
    // Every kind: the fake's device memory is host memory, and each kind takes its own way
    // through the bounded path.
    const CopyKind kind = kinds[trial % 4];
    f.backend.copy_strided(0, dst.buffer.data() + dst.origin, src.buffer.data() + src.origin, plan,
                           kind, nullptr);
    INFO("trial " << trial << ", " << devmem::to_string(kind));
    REQUIRE(dst.buffer == expected.buffer);
    used_3d += f.called("fakeMemcpy3DAsync") ? 1 : 0;
    used_2d += f.called("fakeMemcpy2DAsync") ? 1 : 0;
    used_kernel += f.state.launches;
    REQUIRE(f.state.launches <= 1);
  }
  CHECK(used_3d > 100);
  CHECK(used_2d > 100);
  CHECK(used_kernel > 100);
}

TEST_CASE("gpu_runtime: a sub-block of a 3-D array is one 3-D copy") {
  Fixture f;
  // a[:, :5, :5] of a C-contiguous (4, 6, 8) float64 array into a dense (4, 5, 5) array: rows of
  // 40 bytes, 5 of them per slice, slices 6 source rows and 5 destination rows apart.
  const devmem::Shape shape{4, 5, 5};
  const auto plan =
      devmem::layout::plan_copy(shape, devmem::Strides{384, 64, 8}, devmem::Strides{200, 40, 8}, 8);
  std::vector<double> src(4 * 6 * 8);
  std::iota(src.begin(), src.end(), 0.0);
  std::vector<double> dst(4 * 5 * 5, -1.0);
  const auto check_copied = [&] {
    for (std::size_t i = 0; i < 4; ++i) {
      for (std::size_t j = 0; j < 5; ++j) {
        for (std::size_t k = 0; k < 5; ++k) {
          REQUIRE(dst[(i * 5 + j) * 5 + k] == src[(i * 6 + j) * 8 + k]);
        }
      }
    }
  };
  f.backend.copy_strided(0, dst.data(), src.data(), plan, CopyKind::DeviceToDevice, nullptr);
  CHECK(f.count("fakeMemcpy3DAsync(40x5x4)") == 1);
  CHECK(f.count("fakeMemcpy") == 1);
  check_copied();
  SECTION("a pitch the runtime rejects falls back to 2-D copies, then to rows") {
    Fixture g;
    std::fill(dst.begin(), dst.end(), -1.0);
    g.state.fail["fakeMemcpy3DAsync"] = kInvalidPitch;
    g.state.fail["fakeMemcpy2DAsync"] = kInvalidPitch;
    g.backend.copy_strided(0, dst.data(), src.data(), plan, CopyKind::DeviceToDevice, nullptr);
    CHECK(g.count("fakeMemcpy3DAsync") == 1);
    CHECK(g.count("fakeMemcpy2DAsync") == 4);  // one per slice, the first rejected
    CHECK(g.count("fakeMemcpyAsync") == 5);    // the rejected slice, row by row
    CHECK(g.state.last_error == kOk);
    check_copied();
  }
}

TEST_CASE("gpu_runtime: pitches beyond the runtime's limit are copied row by row") {
  Fixture f;
  const std::size_t pitch = FakeApi::kMaxPitch + 16;
  std::vector<char> src(pitch * 2 + 8, 's');
  std::vector<char> dst(pitch * 2 + 8, 'd');
  f.backend.copy_2d(0, dst.data(), pitch, src.data(), pitch, 8, 3, CopyKind::HostToDevice, nullptr);
  CHECK_FALSE(f.called("fakeMemcpy2DAsync"));
  CHECK(f.count("fakeMemcpyAsync") == 3);
  CHECK(dst[pitch * 2 + 7] == 's');
  CHECK(dst[8] == 'd');
  SECTION("a single row is a 1-D copy whatever its pitch") {
    f.backend.copy_2d(0, dst.data(), 0, src.data(), 0, 8, 1, CopyKind::HostToDevice, nullptr);
    CHECK(f.count("fakeMemcpyAsync") == 4);
  }
}

// ---- Pinned staging of large pageable copies ---------------------------------------------------

namespace {

/// A fake runtime whose device runs behind the host (deferred mode), with staging options small
/// enough to exercise many chunks; the backend can be destroyed before the checks for leaks.
struct StagingFixture {
  FakeState state;
  std::unique_ptr<FakeBackend> backend;  // a pointer: the tests destroy it before their checks
  static constexpr std::size_t kThreshold = 100;
  static constexpr std::size_t kChunk = 48;
  StagingFixture() {
    g_state = &state;
    state.deferred = true;
    backend = std::make_unique<FakeBackend>();
    backend->set_staging_options({kThreshold, kChunk});
  }
  ~StagingFixture() {
    backend.reset();
    g_state = nullptr;
  }
  long count(const std::string& prefix) const {
    return std::count_if(state.calls.begin(), state.calls.end(),
                         [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  }
};

std::vector<unsigned char> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> out(n);
  for (auto& b : out) b = static_cast<unsigned char>(rng());
  return out;
}

}  // namespace

// ---- Bounded strided copies (docs/arrays-and-copies.md#strided-copies)
// ---------------------------------------------------

namespace {

/// A layout of a strided copy on both sides, over buffers of the given sizes.
struct StridedCase {
  const char* name;
  devmem::Shape shape;
  devmem::Strides src_strides;
  devmem::Strides dst_strides;
  std::int64_t src_bytes;
  std::int64_t dst_bytes;
  std::int64_t src_origin = 0;  // byte offset of element (0, ..., 0) in its buffer
  std::int64_t dst_origin = 0;
};

constexpr std::int64_t kN = 32;  // 32^4 float32: 4 MiB, enough to make per-element calls absurd
constexpr std::int64_t kItem = 4;

devmem::Strides c_strides(const devmem::Shape& shape) {
  return devmem::layout::dense_strides(shape, kItem, devmem::Order::C);
}

/// Five strided layouts (transposed, permuted, reversed, broadcast, with gaps), each of kN^4
/// float32 elements.
std::vector<StridedCase> strided_cases() {
  const devmem::Shape shape{kN, kN, kN, kN};
  const devmem::Strides c = c_strides(shape);  // (131072, 4096, 128, 4)
  const std::int64_t bytes = kN * kN * kN * kN * kItem;
  std::vector<StridedCase> cases;
  // a.T of a C-contiguous array, into a C-contiguous one.
  cases.push_back({"transpose", shape, {c[3], c[2], c[1], c[0]}, c, bytes, bytes});
  // a[..., ::-1]: element 0 of each row is the row's last.
  cases.push_back({"reversed innermost axis",
                   shape,
                   {c[0], c[1], c[2], -c[3]},
                   c,
                   bytes,
                   bytes,
                   (kN - 1) * kItem,
                   0});
  // A (kN, kN) array broadcast to kN^4 (stride-0 leading axes).
  cases.push_back(
      {"broadcast source", shape, {0, 0, kN * kItem, kItem}, c, kN * kN * kItem, bytes});
  // a.transpose(2, 0, 3, 1).
  cases.push_back({"4-d permute", shape, {c[2], c[0], c[3], c[1]}, c, bytes, bytes});
  // Into b[..., ::2] of a C-contiguous (kN, kN, kN, 2 kN) array: every other element.
  const devmem::Strides wide = c_strides({kN, kN, kN, 2 * kN});
  cases.push_back({"destination with gaps",
                   shape,
                   c,
                   {wide[0], wide[1], wide[2], 2 * kItem},
                   bytes,
                   2 * bytes});
  return cases;
}

/// A backend over a fresh fake runtime, destroyed before the leak checks.
struct BoundedFixture {
  FakeState state;
  std::unique_ptr<FakeBackend> backend;
  BoundedFixture() {
    g_state = &state;
    backend = std::make_unique<FakeBackend>();
  }
  BoundedFixture(const BoundedFixture&) = delete;
  BoundedFixture& operator=(const BoundedFixture&) = delete;
  ~BoundedFixture() {
    backend.reset();
    g_state = nullptr;
  }
  long count(const std::string& prefix) const {
    return std::count_if(state.calls.begin(), state.calls.end(),
                         [&](const std::string& c) { return c.rfind(prefix, 0) == 0; });
  }
};

/// The index of the first byte where `a` and `b` differ, -1 when they are equal (Catch would
/// print megabytes for a failed comparison of the vectors themselves).
long first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return 0;
  const auto at = std::mismatch(a.begin(), a.end(), b.begin());
  return at.first == a.end() ? -1L : static_cast<long>(at.first - a.begin());
}

/// Calls of one copy: the vendor calls other than kernel launches, and the launches.
struct CallCount {
  long vendor = 0;
  long launches = 0;
};

/// Runs one copy of `c` and checks its bytes against copy_host_strided; returns its calls.
CallCount run_case(BoundedFixture& f, const StridedCase& c, CopyKind kind, NativeStream stream,
                   unsigned seed) {
  const std::vector<unsigned char> src = random_bytes(static_cast<std::size_t>(c.src_bytes), seed);
  std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0xEE);
  std::vector<unsigned char> expected = dst;
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  devmem::layout::copy_host_strided(plan, expected.data() + c.dst_origin,
                                    src.data() + c.src_origin);
  const std::size_t calls_before = f.state.calls.size();
  const int launches_before = f.state.launches;
  f.backend->copy_strided(0, dst.data() + c.dst_origin, src.data() + c.src_origin, plan, kind,
                          stream);
  const long calls = static_cast<long>(f.state.calls.size() - calls_before);
  const long launches = f.state.launches - launches_before;
  // Copies from or to the host are complete on return (a deferred fake would show it otherwise);
  // a device-to-device copy is ordered on the stream like any kernel.
  if (kind == CopyKind::DeviceToDevice) f.backend->synchronize_stream(0, stream);
  CHECK(first_difference(dst, expected) == -1);
  return {calls - launches, launches};
}

}  // namespace

TEST_CASE("gpu_runtime: a strided copy of one chunk takes a few vendor calls and one launch") {
  // Each layout is 4 MiB, one chunk of the default 8 MiB. Its vendor calls beside the copy itself:
  // the capture query and the device selection of copy_strided, the host memory's lookup, the
  // event recorded after the chunk and, with pageable host memory, the wait for it; the first
  // copy also allocates its temporary and creates its event.
  for (const StridedCase& c : strided_cases()) {
    for (const CopyKind kind :
         {CopyKind::HostToDevice, CopyKind::DeviceToHost, CopyKind::DeviceToDevice}) {
      for (const bool deferred : {false, true}) {
        INFO(c.name << ", " << devmem::to_string(kind) << (deferred ? ", deferred" : ""));
        BoundedFixture f;
        f.state.deferred = deferred;  // the device behind the host: completion is really waited
        const NativeStream stream = f.backend->create_stream(0);
        // Cold (temporaries allocated), then warm (temporaries reused).
        for (const bool warm : {false, true}) {
          const CallCount calls = run_case(f, c, kind, stream, warm ? 2u : 1u);
          INFO((warm ? "warm: " : "cold: ")
               << calls.vendor << " vendor calls, " << calls.launches << " launches");
          CHECK(calls.vendor <= (warm ? 8 : 10));
          CHECK(calls.launches <= 1);
          // Each layout is kN^4 elements: one call per element, row or block would be thousands.
          if (kind == CopyKind::DeviceToDevice) CHECK(calls.launches == 1);
        }
        CHECK(f.count("fakeMemcpy2DAsync") == 0);
        CHECK(f.count("fakeMemcpy3DAsync") == 0);
        if (kind == CopyKind::DeviceToDevice) {
          // The widest unit the alignment allows: whole float32 elements where elements move
          // one by one, 16 bytes where rows of 32 of them are contiguous on both sides.
          const bool rows = std::string_view(c.name) == "broadcast source";
          CHECK(f.count(rows ? "fakeLaunchCopyStrided(262144x16B"
                             : "fakeLaunchCopyStrided(1048576x4B") == 2);
        }
        f.backend->synchronize_stream(0, stream);
        f.backend->destroy_stream(0, stream);
        f.backend.reset();
        CHECK(f.state.live_blocks == 0);  // temporaries, cached ones included, were freed
        CHECK(f.state.pending.empty());
      }
    }
  }
}

TEST_CASE("gpu_runtime: bounded strided copies go chunk by chunk through two chunks a side") {
  // Review 2, N7: random layouts (odd extents, reversed axes, gaps, items of 1 to 24 bytes) through
  // chunks of 16 bytes to 1000 bytes, with the device behind the host (deferred): each copy is
  // exactly copy_host_strided's, whatever the way it takes and whether the host side is
  // page-locked (then asynchronous), and its temporaries are at most two chunks of each kind.
  std::mt19937 rng(20261127);
  std::uniform_int_distribution<int> dims(2, 4);
  std::uniform_int_distribution<int> extent(1, 7);
  const std::int64_t itemsizes[] = {1, 4, 8, 24};
  const std::size_t chunks[] = {16, 40, 96, 1000};
  int bounded = 0;
  int split_elements = 0;
  for (int trial = 0; trial < 800; ++trial) {
    BoundedFixture f;
    f.state.deferred = true;
    const std::size_t chunk = chunks[static_cast<std::size_t>(trial) % 4];
    f.backend->set_staging_options({std::size_t{16} << 20, chunk});
    devmem::Shape shape(static_cast<std::size_t>(dims(rng)));
    for (auto& e : shape) e = extent(rng);
    const std::int64_t itemsize = itemsizes[static_cast<std::size_t>(trial / 4) % 4];
    Side src = make_side(rng, shape, itemsize, true);
    Side dst = make_side(rng, shape, itemsize, trial % 3 == 0);
    for (auto& byte : src.buffer) byte = static_cast<unsigned char>(rng());
    for (auto& byte : dst.buffer) byte = 0xEE;
    devmem::layout::CopyPlan plan;
    try {
      plan = devmem::layout::plan_copy(shape, src.strides, dst.strides, itemsize);
    } catch (const devmem::InvalidArgument&) {
      continue;  // a zero-stride destination
    }
    Side expected = dst;
    devmem::layout::copy_host_strided(plan, expected.buffer.data() + expected.origin,
                                      src.buffer.data() + src.origin);
    const CopyKind kind = trial % 2 == 0 ? CopyKind::HostToDevice : CopyKind::DeviceToHost;
    const bool pinned = (trial / 2) % 2 == 1;
    // The host side in the fake's page-locked memory when pinned, else in the vector.
    Side& host = kind == CopyKind::HostToDevice ? src : dst;
    unsigned char* host_data = host.buffer.data();
    void* locked = nullptr;
    if (pinned) {
      locked = f.backend->host_allocate(0, host.buffer.size(), HostAllocFlags::None);
      std::memcpy(locked, host.buffer.data(), host.buffer.size());
      host_data = static_cast<unsigned char*>(locked);
    }
    unsigned char* const src_data = kind == CopyKind::HostToDevice ? host_data : src.buffer.data();
    unsigned char* const dst_data = kind == CopyKind::HostToDevice ? dst.buffer.data() : host_data;
    const NativeStream s = f.backend->create_stream(0);
    f.backend->copy_strided(0, dst_data + dst.origin, src_data + src.origin, plan, kind, s);
    f.backend->synchronize_stream(0, s);
    INFO("trial " << trial << ", " << devmem::to_string(kind) << (pinned ? ", pinned" : "")
                  << ", chunk " << chunk << ", " << plan.total_bytes() << " bytes");
    if (kind == CopyKind::DeviceToHost && pinned) {
      std::memcpy(dst.buffer.data(), locked, dst.buffer.size());
    }
    CHECK(first_difference(dst.buffer, expected.buffer) == -1);
    // The temporaries still held (kept for the next copy): the device memory is all theirs, the
    // page-locked memory theirs but the test's own buffer.
    std::size_t device_bytes = 0;
    for (const auto& block : f.state.device_blocks) device_bytes += block.second.first;
    std::size_t locked_bytes = 0;
    for (const auto& block : f.state.page_locked) locked_bytes += block.second;
    if (pinned) locked_bytes -= host.buffer.size();
    CHECK(device_bytes <= 2 * chunk);
    CHECK(locked_bytes <= 2 * chunk);
    if (f.count("fakeEventRecord") > 0) ++bounded;
    if (f.count("fakeEventRecord") > 0 && itemsize > static_cast<std::int64_t>(chunk)) {
      ++split_elements;
    }
    if (pinned) f.backend->host_deallocate(0, locked);
    f.backend->destroy_stream(0, s);
  }
  CHECK(bounded > 200);
  CHECK(split_elements > 10);
}

TEST_CASE("gpu_runtime: a few long rows keep the vendor's copies") {
  BoundedFixture f;
  // a[:, :100] of a C-contiguous (8, 128) float64 array into a dense (8, 100): one 2-D copy.
  std::vector<double> src(8 * 128);
  std::iota(src.begin(), src.end(), 0.0);
  std::vector<double> dst(8 * 100, -1.0);
  const auto plan = devmem::layout::plan_copy(devmem::Shape{8, 100}, devmem::Strides{1024, 8},
                                              devmem::Strides{800, 8}, 8);
  f.backend->copy_strided(0, dst.data(), src.data(), plan, CopyKind::HostToDevice, nullptr);
  CHECK(f.count("fakeMemcpy2DAsync(800x8)") == 1);
  CHECK(f.state.launches == 0);
  CHECK(dst[799] == src[7 * 128 + 99]);
}

TEST_CASE("gpu_runtime: bounded strided copies: failures propagate, leak nothing") {
  const StridedCase c = strided_cases()[0];  // the transpose
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  const std::vector<unsigned char> src = random_bytes(static_cast<std::size_t>(c.src_bytes), 9);
  std::vector<unsigned char> expected(static_cast<std::size_t>(c.dst_bytes), 0);
  devmem::layout::copy_host_strided(plan, expected.data(), src.data());
  int failures = 0;
  for (const CopyKind kind : {CopyKind::HostToDevice, CopyKind::DeviceToHost,
                              CopyKind::DeviceToDevice, CopyKind::HostToHost}) {
    for (const char* function :
         {"fakeHostAlloc", "fakeMalloc", "fakeStreamSynchronize", "fakeMemcpyAsync",
          "fakeLaunchCopyStrided", "fakePointerGetAttributes", "fakeEventCreateWithFlags",
          "fakeEventRecord", "fakeEventSynchronize"}) {
      INFO(devmem::to_string(kind) << ", " << function);
      BoundedFixture f;
      f.state.deferred = true;
      std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0);
      f.state.fail[function] = kInvalidValue;
      bool threw = false;
      try {
        f.backend->copy_strided(0, dst.data(), src.data(), plan, kind, nullptr);
      } catch (const devmem::BackendError& e) {
        threw = true;
        CHECK(e.function() == function);
        CHECK(f.state.last_error == kOk);
      }
      // A call this kind makes failed and was reported; one it does not make was never reached.
      CHECK(threw == f.state.fail.empty());
      failures += threw ? 1 : 0;
      f.state.fail.clear();
      f.backend->synchronize_stream(0, nullptr);
      // The next copy works, whatever the failure left behind.
      std::fill(dst.begin(), dst.end(), 0);
      f.backend->copy_strided(0, dst.data(), src.data(), plan, kind, nullptr);
      f.backend->synchronize_stream(0, nullptr);
      CHECK(first_difference(dst, expected) == -1);
      f.backend.reset();
      CHECK(f.state.live_blocks == 0);
      CHECK(f.state.pending.empty());
    }
  }
  // H2D (from a dense source, pageable): lookup, event, temporary, copy, launch, record, wait;
  // D2H (into a dense destination, pageable): lookup, event, temporary, launch, copy, record,
  // wait; D2D: launch; H2H: synchronize. No page-locked temporary, no stream synchronize.
  CHECK(failures == 7 + 7 + 1 + 1);
}

TEST_CASE("gpu_runtime: bounded strided copies without memory for temporaries use vendor copies") {
  const StridedCase c = strided_cases()[0];
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  const std::vector<unsigned char> src = random_bytes(static_cast<std::size_t>(c.src_bytes), 11);
  std::vector<unsigned char> expected(static_cast<std::size_t>(c.dst_bytes), 0);
  devmem::layout::copy_host_strided(plan, expected.data(), src.data());
  for (const char* function : {"fakeHostAlloc", "fakeMalloc"}) {
    for (const CopyKind kind : {CopyKind::HostToDevice, CopyKind::DeviceToHost}) {
      INFO(function << ", " << devmem::to_string(kind));
      BoundedFixture f;
      f.state.fail[function] = kOutOfMemory;
      std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0);
      f.backend->copy_strided(0, dst.data(), src.data(), plan, kind, nullptr);
      CHECK(first_difference(dst, expected) == -1);
      CHECK(f.state.last_error == kOk);
      f.backend.reset();
      CHECK(f.state.live_blocks == 0);
    }
  }
}

TEST_CASE("gpu_runtime: a bounded H2D copy reads its source after earlier work on the stream") {
  BoundedFixture f;
  f.state.deferred = true;
  const StridedCase c = strided_cases()[3];  // the 4-d permute
  const auto plan = devmem::layout::plan_copy(c.shape, c.src_strides, c.dst_strides, kItem);
  const std::vector<unsigned char> device_src =
      random_bytes(static_cast<std::size_t>(c.src_bytes), 13);
  std::vector<unsigned char> host(static_cast<std::size_t>(c.src_bytes), 0);
  std::vector<unsigned char> dst(static_cast<std::size_t>(c.dst_bytes), 0);
  std::vector<unsigned char> expected = dst;
  devmem::layout::copy_host_strided(plan, expected.data(), device_src.data());
  const NativeStream s = f.backend->create_stream(0);
  // Enqueued, not yet run: the strided copy must see what it writes into `host`.
  f.backend->copy(0, host.data(), device_src.data(), host.size(), CopyKind::DeviceToHost, s);
  f.backend->copy_strided(0, dst.data(), host.data(), plan, CopyKind::HostToDevice, s);
  f.backend->synchronize_stream(0, s);
  CHECK(first_difference(dst, expected) == -1);
  f.backend->destroy_stream(0, s);
}

TEST_CASE("gpu_runtime: large pageable copies are staged chunk by chunk, exactly") {
  StagingFixture f;
  const NativeStream s = f.backend->create_stream(0);
  void* device = f.backend->allocate(0, 8192);
  // Sizes around the threshold and chunk multiples; misaligned starts on both sides.
  for (const std::size_t bytes : {std::size_t{100}, std::size_t{144}, std::size_t{145},
                                  std::size_t{1000}, std::size_t{4099}}) {
    for (const std::size_t offset : {std::size_t{0}, std::size_t{3}}) {
      CAPTURE(bytes, offset);
      auto* const dev = static_cast<unsigned char*>(device) + offset;
      const std::vector<unsigned char> original =
          random_bytes(bytes + offset, static_cast<unsigned>(7 + bytes));
      std::vector<unsigned char> source = original;
      const long copies_before = f.count("fakeMemcpyAsync");

      f.backend->copy(0, dev, source.data() + offset, bytes, CopyKind::HostToDevice, s);
      // The source has been read when the call returns, even though the DMAs have not run yet:
      // overwriting it now must not change what arrives.
      CHECK_FALSE(f.state.pending.empty());
      std::fill(source.begin(), source.end(), 0xEE);
      f.backend->synchronize_stream(0, s);
      CHECK(std::equal(dev, dev + bytes, original.begin() + static_cast<std::ptrdiff_t>(offset)));
      const auto chunks =
          static_cast<long>((bytes + StagingFixture::kChunk - 1) / StagingFixture::kChunk);
      CHECK(f.count("fakeMemcpyAsync") - copies_before == chunks);

      // D2H into pageable memory is complete when the call returns, without a synchronize.
      std::vector<unsigned char> back(bytes + offset, 0);
      f.backend->copy(0, back.data() + offset, dev, bytes, CopyKind::DeviceToHost, s);
      CHECK(std::equal(back.begin() + static_cast<std::ptrdiff_t>(offset), back.end(),
                       original.begin() + static_cast<std::ptrdiff_t>(offset)));
      CHECK(f.count("fakeMemcpyAsync") - copies_before == 2 * chunks);
    }
  }
  // One pipeline (two page-locked buffers and two events) served every copy.
  CHECK(f.count("fakeHostAlloc") == 2);
  CHECK(f.count("fakeEventCreate") == 2);
  // Staging events neither time nor spin: DisableTiming | BlockingSync.
  CHECK(f.state.event_flags ==
        std::vector<unsigned>{FakeApi::kEventDisableTiming | FakeApi::kEventBlockingSync,
                              FakeApi::kEventDisableTiming | FakeApi::kEventBlockingSync});
  f.backend->deallocate(0, device);
  f.backend->destroy_stream(0, s);
  f.backend.reset();
  CHECK(f.state.live_host_allocations == 0);
  CHECK(f.state.live_events == 0);
}

TEST_CASE("gpu_runtime: H2D staging waits for earlier work on the stream that writes the source") {
  StagingFixture f;
  const NativeStream s = f.backend->create_stream(0);
  std::vector<unsigned char> device_a = random_bytes(500, 1);
  std::vector<unsigned char> device_b(500, 0);
  std::vector<unsigned char> host(500, 0);
  // Below the threshold: an ordinary (deferred) copy that fills `host` later...
  f.backend->copy(0, host.data(), device_a.data(), 50, CopyKind::DeviceToHost, s);
  // ...but the staged copy of all of `host` must see those 50 bytes.
  std::copy(device_a.begin() + 50, device_a.end(), host.begin() + 50);
  f.backend->copy(0, device_b.data(), host.data(), 500, CopyKind::HostToDevice, s);
  f.backend->synchronize_stream(0, s);
  CHECK(device_b == device_a);
  f.backend->destroy_stream(0, s);
}

TEST_CASE("gpu_runtime: small, pinned and device-to-device copies are not staged") {
  StagingFixture f;
  std::vector<unsigned char> a = random_bytes(400, 3);
  std::vector<unsigned char> b(400, 0);
  f.backend->copy(0, b.data(), a.data(), 99, CopyKind::HostToDevice, nullptr);  // below threshold
  void* pinned = f.backend->host_allocate(0, 400, HostAllocFlags::None);
  std::memcpy(pinned, a.data(), 400);
  f.backend->copy(0, b.data(), pinned, 400, CopyKind::HostToDevice, nullptr);
  f.backend->copy(0, b.data(), a.data(), 400, CopyKind::DeviceToDevice, nullptr);
  f.backend->synchronize_stream(0, nullptr);
  CHECK(b == a);
  CHECK(f.count("fakeMemcpyAsync") == 3);           // one call each
  CHECK(f.count("fakePointerGetAttributes") == 1);  // only the large host-device copy is looked up
  CHECK(f.count("fakeEventCreate") == 0);
  f.backend->host_deallocate(0, pinned);
}

TEST_CASE("gpu_runtime: staging errors propagate, leak nothing, and the next copy works") {
  StagingFixture f;
  const NativeStream s = f.backend->create_stream(0);
  const std::vector<unsigned char> source = random_bytes(1000, 5);
  std::vector<unsigned char> device(1000, 0);

  SECTION("a failing DMA") {
    f.state.fail["fakeMemcpyAsync"] = kInvalidValue;
    REQUIRE_THROWS_MATCHES(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s),
        devmem::BackendError,
        Catch::Matchers::Predicate<devmem::BackendError>(
            [](const devmem::BackendError& e) { return e.function() == "fakeMemcpyAsync"; },
            "names the vendor call"));
    CHECK(f.state.last_error == kOk);
  }
  SECTION("a failing event record") {
    f.state.fail["fakeEventRecord"] = kInvalidValue;
    REQUIRE_THROWS_AS(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::DeviceToHost, s),
        devmem::BackendError);
  }
  SECTION("a failing pointer lookup") {
    f.state.fail["fakePointerGetAttributes"] = kInvalidValue;
    REQUIRE_THROWS_AS(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s),
        devmem::BackendError);
  }
  SECTION("a failing staging event creation") {
    f.state.fail["fakeEventCreateWithFlags"] = kInvalidValue;
    REQUIRE_THROWS_MATCHES(
        f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s),
        devmem::BackendError,
        Catch::Matchers::Predicate<devmem::BackendError>(
            [](const devmem::BackendError& e) {
              return e.function() == "fakeEventCreateWithFlags";
            },
            "names the vendor call"));
    CHECK(f.state.last_error == kOk);
  }
  SECTION("no page-locked memory for staging: the copy goes unstaged") {
    f.state.fail["fakeHostAlloc"] = kOutOfMemory;
    f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s);
    CHECK(f.count("fakeMemcpyAsync") == 1);
  }
  // A failed pipeline is freed, not reused; the next staged copy makes a fresh one and works.
  f.backend->synchronize_stream(0, s);
  std::fill(device.begin(), device.end(), 0);
  f.backend->copy(0, device.data(), source.data(), 1000, CopyKind::HostToDevice, s);
  f.backend->synchronize_stream(0, s);
  CHECK(device == source);
  f.backend->destroy_stream(0, s);
  f.backend.reset();
  CHECK(f.state.live_host_allocations == 0);
  CHECK(f.state.live_events == 0);
  CHECK(f.state.pending.empty());
}

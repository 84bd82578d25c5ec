// Streams and events: stream(), default_stream(), synchronize/query, native handles, asynchronous
// copies, events and cross-stream ordering, auto_synchronize (also on the error path), and the
// lifetime of buffers used by queued work, and the events devmem recycles for Stream::record() and
// stream-ordered allocations (core/event_pool.hpp). One file although over 800 lines: the cases
// share BusyWork, the queued copies that keep a stream busy while an ordering is checked.
#include "support.hpp"

#include "core/event_pool.hpp"  // white-box: the pool's capacity

#include <atomic>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;

namespace {

// Enqueues `rounds` device-to-device copies of 16 MiB on `s`, so that work enqueued after them
// on the same stream is still pending for a while.
struct BusyWork {
  DeviceArray src = devmem::device_array(Shape{2 * kMiB}, f8());
  DeviceArray dst = devmem::device_array(Shape{2 * kMiB}, f8());
  BusyWork() {
    src.memset(1);
    dst.memset(2);
  }
  void enqueue(const devmem::Stream& s, int rounds = 4) const {
    for (int i = 0; i < rounds; ++i) dst.copy_to_device(src, s);
  }
};

}  // namespace

TEST_CASE("stream: a new stream", "[streams]") {
  const devmem::Stream s = devmem::stream();
  CHECK(s.is_specified());
  CHECK_FALSE(s.is_default());
  CHECK(s.native_handle() != nullptr);
  CHECK(s.context() == devmem::current_context());
  CHECK(s.query());
  s.synchronize();
  const devmem::Stream copy = s;  // NOLINT(performance-unnecessary-copy-initialization)
  CHECK(copy == s);
  CHECK(copy.native_handle() == s.native_handle());
  const devmem::Stream other = devmem::stream();
  CHECK_FALSE(other == s);
  CHECK(other.native_handle() != s.native_handle());
  CHECK_FALSE(s == devmem::default_stream());
  CHECK_FALSE(s == devmem::Stream{});
}

TEST_CASE("default_stream and the unspecified stream", "[streams]") {
  const devmem::Stream d = devmem::default_stream();
  CHECK(d.is_specified());
  CHECK(d.is_default());
  CHECK(d.native_handle() == nullptr);
  CHECK(d == devmem::default_stream());
  CHECK(d == devmem::current_context()->default_stream());
  CHECK(d.context() == devmem::current_context());
  d.synchronize();
  CHECK(d.query());

  const devmem::Stream u;
  CHECK_FALSE(u.is_specified());
  CHECK(u.is_default());
  CHECK(u.native_handle() == nullptr);
  CHECK(u == d);
  CHECK(d == u);
  CHECK(u.context() == devmem::current_context());
  u.synchronize();
  CHECK(u.query());
}

TEST_CASE("streams: asynchronous copies complete at synchronize", "[streams][transfers]") {
  const devmem::Stream s = devmem::stream();
  const int64_t n = 512 * kKiB;  // 4 MiB of float64
  const HostArray src = devmem::pinned_array(Shape{n}, f8());
  src.copy_from(iota_host(Shape{n}));
  const HostArray dst = devmem::pinned_array(Shape{n}, f8());
  SECTION("H2D then D2H on the same stream") {
    const DeviceArray d = devmem::to_device(src, s);
    d.copy_to_host(dst, s);
    s.synchronize();
    CHECK(s.query());
    CHECK(dst.to_vector<double>() == iota_vec(n));
  }
  SECTION("an array's own stream is used by default") {
    const DeviceArray d = devmem::device_array(Shape{n}, f8(), {}, Order::C, s);
    d.copy_to_device(src);
    d.copy_to_host(dst);
    s.synchronize();
    CHECK(dst.to_vector<double>() == iota_vec(n));
  }
  SECTION("copy_to_host() returning a new array") {
    const DeviceArray d = devmem::to_device(src, s);
    const HostArray h = d.copy_to_host(s);
    s.synchronize();
    CHECK(h.to_vector<double>() == iota_vec(n));
  }
  SECTION("an explicit default stream completes before returning") {
    const DeviceArray d = devmem::to_device(src, s);
    s.synchronize();
    const HostArray h(Shape{n}, f8());
    d.copy_to_host(h, devmem::default_stream());
    CHECK(h.at<double>(n - 1) == static_cast<double>(n - 1));
  }
  SECTION("to_vector and item synchronize the stream they use") {
    const DeviceArray d = devmem::to_device(src, s);
    CHECK(d.to_vector<double>(s) == iota_vec(n));
    const DeviceArray e = d.bind(s);
    e.fill(2.0);
    CHECK(e.item<double>(n - 1) == 2.0);
  }
}

TEST_CASE("streams: many interleaved streams", "[streams]") {
  constexpr int kStreams = 8;
  constexpr int64_t kN = 10000;
  std::vector<devmem::Stream> streams;
  std::vector<HostArray> sources;
  std::vector<HostArray> results;
  std::vector<DeviceArray> devices;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(devmem::stream());
    sources.push_back(iota_host(Shape{kN}, Order::C, static_cast<double>(i * 1000)));
    results.emplace_back(Shape{kN}, f8());
    devices.push_back(devmem::device_array(Shape{kN}, f8(), {}, Order::C, streams.back()));
  }
  // Interleave: every stream gets its H2D, then every stream a partial fill, then every D2H.
  for (int i = 0; i < kStreams; ++i)
    devices[static_cast<std::size_t>(i)].copy_to_device(sources[static_cast<std::size_t>(i)]);
  for (int i = 0; i < kStreams; ++i)
    devices[static_cast<std::size_t>(i)].slice(0, 0, i + 1).fill(-1.0);
  for (int i = 0; i < kStreams; ++i)
    devices[static_cast<std::size_t>(i)].copy_to_host(results[static_cast<std::size_t>(i)]);
  for (const devmem::Stream& s : streams) s.synchronize();
  for (int i = 0; i < kStreams; ++i) {
    std::vector<double> expected = iota_vec(kN, static_cast<double>(i * 1000));
    for (int k = 0; k <= i; ++k) expected[static_cast<std::size_t>(k)] = -1.0;
    CHECK(results[static_cast<std::size_t>(i)].to_vector<double>() == expected);
    CHECK(streams[static_cast<std::size_t>(i)].query());
  }
}

TEST_CASE("streams: several threads, one stream each", "[streams]") {
  constexpr int kThreads = 4;
  std::vector<int> ok(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &ok] {
      const devmem::Stream s = devmem::stream();
      const std::vector<double> v = iota_vec(4096, static_cast<double>(t));
      const DeviceArray d = devmem::to_device(v, s);
      const HostArray out(Shape{4096}, f8());
      d.copy_to_host(out, s);
      s.synchronize();
      ok[static_cast<std::size_t>(t)] = out.to_vector<double>() == v ? 1 : 0;
    });
  }
  for (std::thread& th : threads) th.join();
  CHECK(ok == std::vector<int>(kThreads, 1));
}

TEST_CASE("events: record, query, synchronize, elapsed time", "[streams][events]") {
  const devmem::Stream s = devmem::stream();
  SECTION("an unrecorded event counts as complete") {
    const devmem::Event e;
    CHECK(e.query());
    e.synchronize();
    CHECK(e.native_handle() != nullptr);
  }
  SECTION("record on a stream, then wait for it") {
    const BusyWork busy;
    const devmem::Event start = s.record();
    busy.enqueue(s);
    const devmem::Event end = s.record();
    end.synchronize();
    CHECK(end.query());
    CHECK(start.query());
    const float ms = devmem::Event::elapsed_ms(start, end);
    CHECK(ms >= 0.0F);
    CHECK(devmem::elapsed_ms(start, end) == ms);
  }
  SECTION("Event::record re-records an event") {
    devmem::Event e;
    e.record(s);
    e.synchronize();
    CHECK(e.query());
    e.record();  // the default stream
    e.synchronize();
    CHECK(e.query());
    e.record(devmem::default_stream());
    e.synchronize();
    CHECK(e.query());
  }
  SECTION("events on the default stream") {
    const devmem::Event a = devmem::default_stream().record();
    const devmem::Event b = devmem::Stream{}.record();
    a.synchronize();
    b.synchronize();
    CHECK(devmem::Event::elapsed_ms(a, b) >= 0.0F);
  }
  SECTION("elapsed time needs recorded events") {
    const devmem::Event never;
    const devmem::Event done = s.record();
    done.synchronize();
    REQUIRE_THROWS_AS(devmem::Event::elapsed_ms(never, done), devmem::BackendError);
  }
}

TEST_CASE("Stream::wait orders two streams", "[streams][events]") {
  const BusyWork busy;
  const devmem::Stream s1 = devmem::stream();
  const devmem::Stream s2 = devmem::stream();
  const int64_t n = 64 * kKiB;
  const HostArray src = devmem::pinned_array(Shape{n}, f8());
  src.copy_from(iota_host(Shape{n}, Order::C, 3.0));
  const HostArray dst = devmem::pinned_array(Shape{n}, f8());
  const DeviceArray d = devmem::device_array(Shape{n}, f8());
  d.fill(0.0);

  busy.enqueue(s1);           // s1 is busy for a while ...
  d.copy_to_device(src, s1);  // ... before it writes d
  const devmem::Event written = s1.record();
  s2.wait(written);
  d.copy_to_host(dst, s2);  // must see the write
  s2.synchronize();
  CHECK(written.query());
  CHECK(dst.to_vector<double>() == iota_vec(n, 3.0));

  SECTION("the default stream can wait too") {
    busy.enqueue(s1, 2);
    d.fill(5.0, s1);
    const devmem::Event filled = s1.record();
    devmem::default_stream().wait(filled);
    // d's own stream is the default stream: the read is ordered after the fill.
    CHECK(d.item<double>(0) == 5.0);
    CHECK(d.item<double>(n - 1) == 5.0);
    CHECK(filled.query());
  }
}

TEST_CASE("Event::wait(stream) orders the stream after the event (Numba's event.wait)",
          "[streams][events]") {
  const BusyWork busy;
  const devmem::Stream s1 = devmem::stream();
  const devmem::Stream s2 = devmem::stream();
  const int64_t n = 64 * kKiB;
  const HostArray src = devmem::pinned_array(Shape{n}, f8());
  src.copy_from(iota_host(Shape{n}, Order::C, 7.0));
  const HostArray dst = devmem::pinned_array(Shape{n}, f8());
  // device_array<T>(shape, stream): C order, allocated on s1.
  const DeviceArray d = devmem::device_array<double>({n}, s1);
  CHECK(d.stream() == s1);
  CHECK(d.is_c_contiguous());

  busy.enqueue(s1);           // s1 is busy for a while ...
  d.copy_to_device(src, s1);  // ... before it writes d
  devmem::Event written;
  written.record(s1);
  written.wait(s2);
  d.copy_to_host(dst, s2);  // must see the write
  s2.synchronize();
  CHECK(written.query());
  CHECK(dst.to_vector<double>() == iota_vec(n, 7.0));

  SECTION("an event never recorded is complete: the stream does not wait") {
    const devmem::Event never;
    never.wait(s2);
    never.wait();  // the default stream
    CHECK_NOTHROW(s2.synchronize());
    CHECK(s2.query());
  }
}

TEST_CASE("auto_synchronize: the stream is idle when the scope ends", "[streams]") {
  const BusyWork busy;
  const devmem::Stream s = devmem::stream();
  const HostArray src = iota_host(Shape{1000});
  const HostArray dst(Shape{1000}, f8());
  const DeviceArray d = devmem::device_array(Shape{1000}, f8(), {}, Order::C, s);
  SECTION("normal exit") {
    {
      const devmem::AutoSynchronize sync = s.auto_synchronize();
      CHECK(sync.stream() == s);
      busy.enqueue(s);
      d.copy_to_device(src);
      d.copy_to_host(dst);
    }
    CHECK(s.query());
    CHECK(dst.to_vector<double>() == iota_vec(1000));
  }
  SECTION("exit by an exception: the exception propagates") {
    const auto body = [&] {
      const devmem::AutoSynchronize sync = s.auto_synchronize();
      busy.enqueue(s);
      d.copy_to_device(src);
      d.copy_to_host(dst);
      throw std::runtime_error("boom");
    };
    REQUIRE_THROWS_MATCHES(body(), std::runtime_error, Message("boom"));
    CHECK(s.query());
    CHECK(dst.to_vector<double>() == iota_vec(1000));
  }
  SECTION("close synchronizes now") {
    devmem::AutoSynchronize sync = s.auto_synchronize();
    busy.enqueue(s);
    d.copy_to_device(src);
    d.copy_to_host(dst);
    sync.close();
    CHECK(s.query());
    CHECK(dst.to_vector<double>() == iota_vec(1000));
    sync.close();  // again: nothing to do
  }
  SECTION("a moved scope synchronizes once, at the end of the new owner") {
    {
      devmem::AutoSynchronize first = s.auto_synchronize();
      const devmem::AutoSynchronize second(std::move(first));
      CHECK(second.stream() == s);
      busy.enqueue(s);
      d.copy_to_device(src);
      d.copy_to_host(dst);
    }
    CHECK(s.query());
    CHECK(dst.to_vector<double>() == iota_vec(1000));
  }
  SECTION("the default stream") {
    {
      const devmem::AutoSynchronize sync = devmem::default_stream().auto_synchronize();
      d.copy_to_host(dst, devmem::default_stream());
    }
    CHECK(devmem::default_stream().query());
  }
}

TEST_CASE("streams: buffers of queued work stay alive", "[streams][lifetime]") {
  const BusyWork busy;
  const devmem::Stream s = devmem::stream();
  const int64_t n = 100000;
  SECTION("dropping the only handle of a HostArray from an async copy_to_host") {
    const DeviceArray d = iota_device(Shape{n});
    busy.enqueue(s);
    HostArray h = d.copy_to_host(s);
    h = HostArray();  // the queued copy still writes into the dropped array's memory
    s.synchronize();
    // The data of a kept result is correct after synchronize.
    busy.enqueue(s);
    const HostArray kept = d.copy_to_host(s);
    s.synchronize();
    CHECK(kept.to_vector<double>() == iota_vec(n));
    CHECK(h.size() == 0);
  }
  SECTION("dropping a DeviceArray while a copy from it is queued") {
    DeviceArray d = iota_device(Shape{n});
    const HostArray out = devmem::pinned_array(Shape{n}, f8());
    busy.enqueue(s);
    d.copy_to_host(out, s);
    d = DeviceArray();
    s.synchronize();
    CHECK(out.to_vector<double>() == iota_vec(n));
  }
  SECTION("dropping a DeviceArray while a copy into it is queued") {
    DeviceArray d = devmem::device_array(Shape{n}, f8());
    const HostArray src = devmem::pinned_array(Shape{n}, f8());
    src.copy_from(iota_host(Shape{n}));
    busy.enqueue(s);
    d.copy_to_device(src, s);
    d = DeviceArray();
    s.synchronize();
    CHECK(src.to_vector<double>() == iota_vec(n));
  }
  SECTION("dropping the source HostArray of a queued H2D copy") {
    HostArray src = devmem::pinned_array(Shape{n}, f8());
    src.copy_from(iota_host(Shape{n}));
    const DeviceArray d = devmem::device_array(Shape{n}, f8());
    busy.enqueue(s);
    d.copy_to_device(src, s);
    src = HostArray();
    s.synchronize();
    CHECK(d.to_vector<double>() == iota_vec(n));
  }
  SECTION("a view keeps its base alive") {
    DeviceArray base = iota_device(Shape{n});
    const DeviceArray view = base.slice(0, 10, 20);
    base = DeviceArray();
    CHECK(view.to_vector<double>() == iota_vec(10, 10.0));
  }
  SECTION("dropping the last handle of a stream with queued work completes the work") {
    const DeviceArray d = iota_device(Shape{n});
    const HostArray out = devmem::pinned_array(Shape{n}, f8());
    {
      const devmem::Stream local = devmem::stream();
      busy.enqueue(local);
      d.copy_to_host(out, local);
    }
    devmem::current_context()->synchronize();
    CHECK(out.to_vector<double>() == iota_vec(n));
  }
  SECTION("an array keeps its stream alive") {
    DeviceArray d = devmem::device_array(Shape{n}, f8(), {}, Order::C, devmem::stream());
    d.fill(1.5);
    d.stream().synchronize();
    CHECK(d.to_vector<double>() == std::vector<double>(static_cast<std::size_t>(n), 1.5));
  }
}

TEST_CASE("Context::synchronize waits for every stream", "[streams][context]") {
  // One BusyWork per stream: two streams writing the same buffer at once would be a data race.
  const BusyWork busy1;
  const BusyWork busy2;
  const devmem::Stream s1 = devmem::stream();
  const devmem::Stream s2 = devmem::stream();
  const HostArray out1 = devmem::pinned_array(Shape{1000}, f8());
  const HostArray out2 = devmem::pinned_array(Shape{1000}, f8());
  const DeviceArray d = iota_device(Shape{1000});
  busy1.enqueue(s1);
  d.copy_to_host(out1, s1);
  busy2.enqueue(s2);
  d.copy_to_host(out2, s2);
  devmem::current_context()->synchronize();
  CHECK(s1.query());
  CHECK(s2.query());
  CHECK(out1.to_vector<double>() == iota_vec(1000));
  CHECK(out2.to_vector<double>() == iota_vec(1000));
}

TEST_CASE("streams: a stream of another device is rejected", "[streams][errors][multi-device]") {
  const int count = devmem::device_count();
  REQUIRE(count >= 1);
  if (count < 2) {
    // One device: nothing to mix up. A stream of this device is accepted by its arrays.
    const devmem::Stream s = devmem::stream();
    const DeviceArray d = iota_device(Shape{4});
    CHECK(s.context() == d.context());
    const HostArray h(Shape{4}, f8());
    d.copy_to_host(h, s);
    s.synchronize();
    CHECK(h.to_vector<double>() == iota_vec(4));
    return;
  }
  const int original = devmem::current_device();
  devmem::select_device(1);
  const devmem::Stream other = devmem::stream();
  devmem::select_device(0);
  const DeviceArray d = iota_device(Shape{4});
  const HostArray h(Shape{4}, f8());
  const std::string backend = devmem::backend_name();
  REQUIRE_THROWS_MATCHES(
      d.copy_to_host(h, other), devmem::InvalidArgument,
      Message("copy_to_host: the stream belongs to device 1 of backend '" + backend +
              "' but the array is on device 0 of backend '" + backend + "'"));
  REQUIRE_THROWS_AS(d.bind(other), devmem::InvalidArgument);
  REQUIRE_THROWS_AS(d.fill(1.0, other), devmem::InvalidArgument);
  // An array made for the other stream lives on its device; a copy into it from device 0 is a
  // peer copy (docs/scaling-out.md#copies-between-devices), not an error.
  const DeviceArray on_other = devmem::device_array_like(d, other);
  CHECK(on_other.context()->device() == 1);
  on_other.copy_to_device(d);
  other.synchronize();
  CHECK(on_other.to_vector<double>() == iota_vec(4));
  devmem::select_device(original);
}

/// The keep-alive tests' starting point: a stream of their own, and what the context held once
/// every earlier test's work was done.
struct InFlightBaseline {
  devmem::Stream s = devmem::stream();
  std::shared_ptr<devmem::Context> context = devmem::current_context();
  std::size_t before = settled_operations(*context);
  devmem::MemoryStatistics held = context->device_statistics();

  static std::size_t settled_operations(devmem::Context& ctx) {
    ctx.synchronize();
    return ctx.operations_in_flight();
  }
};

TEST_CASE("keep-alives: completed operations are let go without a host callback each",
          "[streams]") {
  const auto [s, context, before, held] = InFlightBaseline{};
  {
    const DeviceArray a = devmem::device_array(Shape{1024}, f8());
    const DeviceArray b = devmem::device_array(Shape{1024}, f8());
    for (int i = 0; i < 200; ++i) b.copy_to_device(a, s);
  }
  // Collected in passes of at most 64 pending operations, as they complete: the list does not
  // hold every operation of a long run until the next synchronisation.
  s.synchronize();
  CHECK(context->operations_in_flight() <= before + 64);
  context->synchronize();  // sees every completion event done
  CHECK(context->operations_in_flight() == before);
  CHECK(context->device_statistics().current_bytes == held.current_bytes);
}

TEST_CASE("keep-alives: a stream's operations share a completion event, released by a synchronize",
          "[streams]") {
  // keep_alive.hpp: up to 16 operations of a stream share one completion event, recorded when
  // the batch is full; a synchronize of the stream releases its operations without one.
  const auto [s, context, before, held] = InFlightBaseline{};
  const DeviceArray target = devmem::device_array(Shape{256}, f8());
  SECTION("fewer than a batch: held until the stream is synchronized") {
    {
      const DeviceArray source = devmem::to_device(iota_vec(256));
      for (int i = 0; i < 15; ++i) target.copy_to_device(source, s);
    }
    context->flush_deallocations();  // asks every recorded event: there is none yet
    CHECK(context->operations_in_flight() == before + 15);
    s.synchronize();
    CHECK(context->operations_in_flight() == before);
    CHECK(target.to_vector<double>() == iota_vec(256));
  }
  SECTION("full batches get their event: an event recorded after them sees them done") {
    {
      const DeviceArray source = devmem::to_device(iota_vec(256));
      for (int i = 0; i < 40; ++i) target.copy_to_device(source, s);
    }
    const devmem::Event after = s.record();
    after.synchronize();
    context->flush_deallocations();
    // 40 = two full batches, released once their events are seen done, and 8 still open.
    CHECK(context->operations_in_flight() == before + 8);
    s.synchronize();
    CHECK(context->operations_in_flight() == before);
  }
  SECTION("a stream destroyed with an open batch records its event first") {
    {
      const devmem::Stream short_lived = devmem::stream();
      const DeviceArray source = devmem::to_device(iota_vec(256));
      for (int i = 0; i < 3; ++i) target.copy_to_device(source, short_lived);
    }
    context->synchronize();
    CHECK(context->operations_in_flight() == before);
    CHECK(target.to_vector<double>() == iota_vec(256));
  }
  SECTION("a context synchronize releases every stream's open batch") {
    const devmem::Stream other = devmem::stream();
    {
      const DeviceArray source = devmem::to_device(iota_vec(256));
      const DeviceArray copy = devmem::device_array(Shape{256}, f8());
      target.copy_to_device(source, s);
      copy.copy_to_device(source, other);
    }
    CHECK(context->operations_in_flight() == before + 2);
    context->synchronize();
    CHECK(context->operations_in_flight() == before);
  }
  CHECK(context->device_statistics().current_bytes ==
        held.current_bytes + static_cast<std::int64_t>(target.nbytes()));
}

TEST_CASE("keep-alives: threads retiring on one stream while another synchronizes it",
          "[streams][thread]") {
  // Members, not structured bindings: lambdas below capture the stream (clang before 16 cannot
  // capture a binding).
  const InFlightBaseline base;
  const devmem::Stream& s = base.s;
  const DeviceArray source = devmem::to_device(iota_vec(64));
  std::vector<std::thread> copiers;
  for (int t = 0; t < 3; ++t) {
    copiers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        const DeviceArray target = devmem::device_array(Shape{64}, f8());
        target.copy_to_device(source, s);
      }
    });
  }
  std::atomic<bool> done{false};
  std::thread synchronizer([&] {
    while (!done.load()) s.synchronize();
  });
  for (auto& copier : copiers) copier.join();
  done.store(true);
  synchronizer.join();
  s.synchronize();
  CHECK(base.context->operations_in_flight() == base.before);
}

TEST_CASE("pinned and mapped scopes wait for work on other streams before unregistering",
          "[streams]") {
  const BusyWork busy;
  const devmem::Stream s = devmem::stream();
  const auto context = devmem::current_context();
  std::vector<double> values(4096);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i) * 0.5;
  const DeviceArray device = devmem::to_device(values);
  SECTION("pinned: a device-to-host copy queued behind other work") {
    const HostArray host(Shape{4096}, f8());
    {
      const devmem::PinnedScope pins = devmem::pinned(host);
      busy.enqueue(s);
      device.copy_to_host(host, s);
      CHECK(context->operations_in_flight() >= 1);
    }  // waits for the copy, then unregisters
    // Read without synchronising: the scope's exit has waited for the copy.
    CHECK(host.at<double>(4095) == values[4095]);
  }
  SECTION("mapped: a copy into the mapped view, closed explicitly") {
    const HostArray host(Shape{4096}, f8());
    devmem::MappedScope scope = devmem::mapped({host});
    busy.enqueue(s);
    scope[0].copy_to_device(device, s);
    scope.close();
    CHECK(host.at<double>(17) == values[17]);
  }
  SECTION("registered: deregister_host waits as well") {
    const HostArray host(Shape{4096}, f8());
    devmem::register_host(host);
    busy.enqueue(s);
    device.copy_to_host(host, s);
    devmem::deregister_host(host);
    CHECK(host.at<double>(100) == values[100]);
  }
}

// ---- Recycled events (core/event_pool.hpp) ------------------------------------------------------

TEST_CASE("events: Stream::record() events recycled across many calls still order two streams",
          "[streams][events][event-pool]") {
  const devmem::Stream a = devmem::stream();
  const devmem::Stream b = devmem::stream();
  const int64_t n = 4 * kKiB;
  const DeviceArray d = devmem::device_array(Shape{n}, f8());
  const HostArray out = devmem::pinned_array(Shape{n}, f8());
  const BusyWork busy;
  std::mt19937 random(20261127);
  std::vector<devmem::Event> held;
  int mismatches = 0;
  for (int i = 0; i < 1000; ++i) {
    if (i % 50 == 0) busy.enqueue(a, 1);  // now and then `a` lags well behind the host
    d.fill(static_cast<double>(i), a);
    const devmem::Event written = a.record();
    b.wait(written);
    d.copy_to_host(out, b);  // must see this iteration's fill, not an older one
    const devmem::Event read = b.record();
    a.wait(read);  // the next fill must not overwrite d before b has read it
    held.push_back(written);
    held.push_back(read);
    // Up to 100 events held at once (beyond the pool's capacity, so it is emptied and refilled
    // past its cap), dropped in a shuffled order and in varying numbers.
    if (held.size() >= 2 + random() % 100) {
      std::shuffle(held.begin(), held.end(), random);
      held.resize(random() % held.size());
    }
    b.synchronize();
    if (out.at<double>(0) != static_cast<double>(i) ||
        out.at<double>(n - 1) != static_cast<double>(i)) {
      ++mismatches;
    }
  }
  CHECK(mismatches == 0);
  held.clear();
  a.synchronize();
}

TEST_CASE("events: a user's Event is never a recycled one", "[streams][events][event-pool]") {
  const devmem::Stream s = devmem::stream();
  devmem::release_cached_buffers();  // the pool of the context is empty now
  std::set<devmem::NativeEvent> pooled;
  {
    std::vector<devmem::Event> records;
    for (std::size_t i = 0; i < devmem::detail::EventPool::kCapacity; ++i) {
      records.push_back(s.record());
    }
    s.synchronize();
    for (const devmem::Event& e : records) pooled.insert(e.native_handle());
  }  // all go back to the pool (exactly its capacity): their handles stay alive
  REQUIRE(pooled.size() == devmem::detail::EventPool::kCapacity);
  const devmem::Event fresh;
  CHECK(pooled.count(fresh.native_handle()) == 0);
  // Still never recorded: it counts as complete and cannot be timed, as before.
  CHECK(fresh.query());
  const devmem::Event done = s.record();
  CHECK(pooled.count(done.native_handle()) == 1);  // Stream::record() does take a pooled one
  done.synchronize();
  REQUIRE_THROWS_AS(devmem::Event::elapsed_ms(fresh, done), devmem::BackendError);
  // A recycled event carries no stale record: timing two of them measures the new records.
  const devmem::Event again = s.record();
  again.synchronize();
  CHECK(devmem::Event::elapsed_ms(done, again) >= 0.0F);
  devmem::release_cached_buffers();
}

TEST_CASE("events: the pool keeps at most its capacity and release_cached_buffers empties it",
          "[streams][events][event-pool][host-only]") {
  const devmem::Stream s = devmem::stream();
  const auto ctx = devmem::current_context();
  const int device = ctx->device();
  constexpr auto kCapacity = static_cast<int64_t>(devmem::detail::EventPool::kCapacity);
  ctx->synchronize();  // retires earlier work's completion events
  devmem::release_cached_buffers();
  const int64_t base = devmem::host::live_event_count(device);
  devmem::host::reset_call_counts();
  {
    std::vector<devmem::Event> records;
    for (int i = 0; i < 100; ++i) records.push_back(s.record());
    CHECK(devmem::host::live_event_count(device) == base + 100);
    CHECK(devmem::host::call_count(devmem::host::Call::CreateEvent) == 100);
  }
  // Beyond the cap the events were destroyed.
  CHECK(devmem::host::live_event_count(device) == base + kCapacity);
  {
    std::vector<devmem::Event> records;
    for (int i = 0; i < 100; ++i) records.push_back(s.record());
    CHECK(devmem::host::live_event_count(device) == base + 100);
    // Only what the pool could not give was created.
    CHECK(devmem::host::call_count(devmem::host::Call::CreateEvent) == 100 + 100 - kCapacity);
    s.synchronize();
  }
  CHECK(devmem::host::live_event_count(device) == base + kCapacity);
  devmem::release_cached_buffers();
  CHECK(devmem::host::live_event_count(device) == base);
  {
    // A user's event is destroyed with its last handle, not kept.
    const devmem::Event user;
    CHECK(devmem::host::live_event_count(device) == base + 1);
  }
  CHECK(devmem::host::live_event_count(device) == base);
  // A failed record gives the event back: nothing is lost or kept twice.
  devmem::host::fail_nth(devmem::host::Call::RecordEvent, 1);
  CHECK_THROWS_AS(s.record(), devmem::BackendError);
  CHECK(devmem::host::live_event_count(device) == base + 1);
  { const devmem::Event ok = s.record(); }
  CHECK(devmem::host::live_event_count(device) == base + 1);
  devmem::release_cached_buffers();
  CHECK(devmem::host::live_event_count(device) == base);
}

TEST_CASE("events: stream-ordered allocations' recycled events still order other streams",
          "[streams][events][event-pool][memory-manager][async]") {
  const MemoryStateGuard mem;
  const auto& ctx = mem.context();
  if (!ctx->backend().supports_async_allocation(ctx->device())) {
    WARN("device " << ctx->device() << " has no stream-ordered allocator");
    return;
  }
  devmem::set_memory_manager(devmem::make_memory_manager("async", *ctx));
  const devmem::Stream owner = devmem::stream();
  const devmem::Stream user = devmem::stream();
  // The host backend runs each stream on its own thread: a gate holds `owner` so that the
  // allocation is really still queued when `user` needs the memory. Elsewhere the strict fake's
  // random order (it faults on memory used before its allocation ran) and the GPU check it.
  const bool gate_owner = devmem::backend_name() == "host";
  std::mt19937 random(11272026);
  std::vector<DeviceArray> held;
  int mismatches = 0;
  for (int i = 0; i < 300; ++i) {
    const auto value = static_cast<float>(i);
    std::optional<StreamGate> gate;
    if (gate_owner && i % 10 == 0) gate.emplace(owner);
    const DeviceArray a = devmem::device_array<float>(Shape{256}, devmem::Order::C, owner);
    a.fill(value, user);  // another stream: waits for the allocation's (recycled) event
    if (gate) gate->open();
    const std::vector<float> got = a.to_vector<float>(user);
    if (got.front() != value || got.back() != value) ++mismatches;
    held.push_back(a);
    // Arrays (and with them their allocation events) go in a shuffled order, up to 80 at once.
    if (held.size() >= 1 + random() % 80) {
      std::shuffle(held.begin(), held.end(), random);
      held.resize(random() % held.size());
    }
  }
  CHECK(mismatches == 0);
  held.clear();
  owner.synchronize();
  user.synchronize();
}

TEST_CASE("events: threads recording on their own streams share the pool while it is emptied",
          "[streams][events][event-pool][threads]") {
  const auto ctx = devmem::current_context();
  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0};
  // One thread keeps emptying the pool while the others take events from it and give them back.
  std::thread releaser([&] {
    while (!done.load()) {
      devmem::release_cached_buffers();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      const devmem::DeviceScope scope(ctx->device());
      const devmem::Stream a = devmem::stream();
      const devmem::Stream b = devmem::stream();
      const DeviceArray d = devmem::device_array(Shape{256}, f8());
      const HostArray out = devmem::pinned_array(Shape{256}, f8());
      std::vector<devmem::Event> held;
      for (int i = 0; i < 200; ++i) {
        const double value = t * 1000 + i;
        d.fill(value, a);
        b.wait(a.record());
        d.copy_to_host(out, b);
        held.push_back(b.record());
        a.wait(held.back());
        if (held.size() > static_cast<std::size_t>(10 + t * 20)) held.clear();
        b.synchronize();
        if (out.at<double>(0) != value || out.at<double>(255) != value) ++mismatches;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  done = true;
  releaser.join();
  CHECK(mismatches.load() == 0);
  devmem::release_cached_buffers();
}

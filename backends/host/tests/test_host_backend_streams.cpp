// Tests of the host backend's streams and events through the Backend interface: stream work on a
// worker, the default stream, failures reported from a worker, events and stream_wait_event, and
// concurrent use from several threads. Split from test_host_backend.cpp, which holds the devices,
// memory and copies, so that each file holds one topic.
//
// The host backend is process-wide state, so every test frees what it allocates and resets the
// controls it changes (ControlsGuard).
#include "host_backend_test_support.hpp"

using namespace host_backend_test;

// ---- Streams ------------------------------------------------------------------------------------

TEST_CASE("host backend: stream work runs later, in order, on a worker", "[host_backend]") {
  Backend& b = backend();
  StreamHandle stream(b);
  DeviceBuffer dev(b, 64);
  b.memset(0, dev.get(), 0, 64, nullptr);
  std::vector<std::byte> input(64, std::byte{9});
  std::atomic<bool> ran{false};
  std::thread::id worker_id;

  {
    Gate gate;
    b.launch_host_function(0, stream.get(), gate.waiter());
    b.copy(0, dev.get(), input.data(), 64, CopyKind::HostToDevice, stream.get());
    b.launch_host_function(0, stream.get(), [&] {
      worker_id = std::this_thread::get_id();
      ran = true;
    });
    std::this_thread::sleep_for(5ms);
    // Nothing after the gate has run: the calls only enqueued.
    CHECK_FALSE(b.query_stream(0, stream.get()));
    CHECK_FALSE(ran.load());
    CHECK(dev.get()[0] == std::byte{0});
    gate.open();
    b.synchronize_stream(0, stream.get());
  }
  CHECK(b.query_stream(0, stream.get()));
  CHECK(ran.load());
  CHECK(worker_id != std::this_thread::get_id());
  CHECK(dev.get()[63] == std::byte{9});

  // FIFO: each memset must run after the previous read-back and before the next one.
  constexpr std::size_t kRounds = 200;
  std::vector<std::uint8_t> seen(kRounds);
  for (std::size_t i = 0; i < kRounds; ++i) {
    b.memset(0, dev.get(), static_cast<int>(i), 64, stream.get());
    b.copy(0, &seen[i], dev.get() + (i % 64), 1, CopyKind::DeviceToHost, stream.get());
  }
  b.synchronize_stream(0, stream.get());
  for (std::size_t i = 0; i < kRounds; ++i) CHECK(seen[i] == static_cast<std::uint8_t>(i));

  // On the default stream a host function runs inline.
  std::thread::id inline_id;
  b.launch_host_function(0, nullptr, [&] { inline_id = std::this_thread::get_id(); });
  CHECK(inline_id == std::this_thread::get_id());
  check_backend_error(capture<BackendError>([&] { b.launch_host_function(0, stream.get(), {}); }),
                      "launch_host_function", Status::InvalidValue);
}

TEST_CASE("host backend: the default stream waits for the device's streams", "[host_backend]") {
  Backend& b = backend();
  StreamHandle first(b);
  StreamHandle second(b);
  std::atomic<int> finished{0};
  std::vector<std::byte> data(16);
  DeviceBuffer dev(b, 16);
  Gate gate;
  b.launch_host_function(0, first.get(), gate.waiter());
  b.launch_host_function(0, first.get(), [&] { ++finished; });
  b.launch_host_function(0, second.get(), [&] {
    std::this_thread::sleep_for(10ms);
    ++finished;
  });
  CHECK_FALSE(b.query_stream(0, nullptr));

  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    gate.open();
  });
  // Legacy semantics: this copy starts only once both streams have drained.
  b.copy(0, dev.get(), data.data(), 16, CopyKind::HostToDevice, nullptr);
  CHECK(finished.load() == 2);
  opener.join();
  CHECK(b.query_stream(0, nullptr));

  // synchronize_stream on the default stream drains the device too.
  b.launch_host_function(0, second.get(), [&] {
    std::this_thread::sleep_for(10ms);
    ++finished;
  });
  b.synchronize_stream(0, nullptr);
  CHECK(finished.load() == 3);
}

TEST_CASE("host backend: failures on a worker are reported once", "[host_backend]") {
  Backend& b = backend();
  StreamHandle stream(b);
  std::atomic<bool> later_ran{false};

  b.launch_host_function(0, stream.get(), [] { throw std::runtime_error("boom"); });
  b.launch_host_function(0, stream.get(), [&] { later_ran = true; });
  CHECK_THROWS_WITH(b.synchronize_stream(0, stream.get()), "boom");
  CHECK(later_ran.load());                               // work after the failure still ran
  CHECK_NOTHROW(b.synchronize_stream(0, stream.get()));  // reported once

  b.launch_host_function(0, stream.get(), [] { throw std::runtime_error("seen by query"); });
  b.launch_host_function(0, stream.get(), [] {});
  std::this_thread::sleep_for(1ms);
  // query_stream reports the stored error once the failing operation has run.
  bool reported = false;
  for (int i = 0; i < 1000 && !reported; ++i) {
    try {
      std::ignore = b.query_stream(0, stream.get());
      std::this_thread::sleep_for(1ms);
    } catch (const std::runtime_error& error) {
      CHECK(std::string(error.what()) == "seen by query");
      reported = true;
    }
  }
  CHECK(reported);
  b.synchronize_stream(0, stream.get());
  CHECK(b.query_stream(0, stream.get()));

  // A host function must not call the backend; one that waits for its own stream gets an error
  // (reported like any failure of the stream) instead of a deadlock.
  b.launch_host_function(0, stream.get(), [&] { b.synchronize_stream(0, stream.get()); });
  CHECK_THROWS_WITH(b.synchronize_stream(0, stream.get()),
                    Contains("an operation of a stream waited for that same stream"));

  // destroy_stream reports an error nobody has seen yet; the stream is gone either way.
  NativeStream doomed = b.create_stream(0);
  b.launch_host_function(0, doomed, [] { throw std::runtime_error("unseen"); });
  CHECK_THROWS_WITH(b.destroy_stream(0, doomed), "unseen");
  check_backend_error(capture<BackendError>([&] { b.synchronize_stream(0, doomed); }),
                      "synchronize_stream", Status::InvalidResourceHandle);
  // A failed operation's BackendError (a kernel's, here made by hand) keeps its function and code
  // and says that no synchronize reported it (issue 34: it reaches stderr in a sentence).
  NativeStream failed = b.create_stream(0);
  b.launch_host_function(0, failed, [] {
    throw BackendError("host", "launch", 719, "LaunchFailure",
                       "host launch: LaunchFailure (719): k");
  });
  const auto unseen = capture<BackendError>([&] { b.destroy_stream(0, failed); });
  check_backend_error(unseen, "launch", Status::LaunchFailure);
  CHECK(
      std::string(unseen.what()) ==
      "host launch: LaunchFailure (719): k (never synchronized: the stream was destroyed before a "
      "synchronize reported this failure of its work)");
}

TEST_CASE("host backend: stream handles", "[host_backend]") {
  Backend& b = backend();
  int not_a_stream = 0;
  const auto unknown = capture<BackendError>([&] { b.destroy_stream(0, &not_a_stream); });
  check_backend_error(unknown, "destroy_stream", Status::InvalidResourceHandle);
  CHECK_THAT(unknown.what(), EndsWith(hex(&not_a_stream) + " is not a stream of the host backend"));
  check_backend_error(capture<BackendError>([&] { b.destroy_stream(0, nullptr); }),
                      "destroy_stream", Status::InvalidResourceHandle);
  check_backend_error(
      capture<BackendError>([&] { std::ignore = b.query_stream(0, &not_a_stream); }),
      "query_stream", Status::InvalidResourceHandle);
  std::vector<std::byte> data(8);
  check_backend_error(capture<BackendError>([&] {
                        b.copy(0, data.data(), data.data(), 8, CopyKind::HostToHost, &not_a_stream);
                      }),
                      "copy", Status::InvalidResourceHandle);

  // destroy_stream waits for the queued work.
  NativeStream stream = b.create_stream(0);
  REQUIRE(stream != nullptr);
  std::atomic<bool> done{false};
  b.launch_host_function(0, stream, [&] {
    std::this_thread::sleep_for(10ms);
    done = true;
  });
  b.destroy_stream(0, stream);
  CHECK(done.load());
}

// ---- Events -------------------------------------------------------------------------------------

TEST_CASE("host backend: events record completion and time", "[host_backend]") {
  Backend& b = backend();
  StreamHandle stream(b);
  EventHandle start(b);
  EventHandle end(b);

  // Never recorded: complete, but without a time.
  CHECK(b.query_event(0, start.get()));
  CHECK_NOTHROW(b.synchronize_event(0, start.get()));
  const auto unrecorded =
      capture<BackendError>([&] { std::ignore = b.elapsed_ms(0, start.get(), end.get()); });
  check_backend_error(unrecorded, "elapsed_ms", Status::InvalidValue);
  CHECK_THAT(unrecorded.what(), Contains("has never been recorded"));

  {
    Gate gate;
    b.record_event(0, start.get(), stream.get());
    b.launch_host_function(0, stream.get(), gate.waiter());
    b.record_event(0, end.get(), stream.get());
    b.synchronize_event(0, start.get());
    CHECK(b.query_event(0, start.get()));
    CHECK_FALSE(b.query_event(0, end.get()));
    const auto not_ready =
        capture<BackendError>([&] { std::ignore = b.elapsed_ms(0, start.get(), end.get()); });
    check_backend_error(not_ready, "elapsed_ms", Status::NotReady);
    CHECK(not_ready.code() == 600);
    std::this_thread::sleep_for(5ms);
    gate.open();
    b.synchronize_event(0, end.get());
  }
  CHECK(b.query_event(0, end.get()));
  const float ms = b.elapsed_ms(0, start.get(), end.get());
  CHECK(ms >= 4.9f);  // the end marker ran after the 5 ms the gate was closed
  CHECK(ms < 10000.0f);

  // On the default stream a record completes before the call returns.
  b.record_event(0, start.get(), nullptr);
  CHECK(b.query_event(0, start.get()));
  b.record_event(0, end.get(), nullptr);
  CHECK(b.elapsed_ms(0, start.get(), end.get()) >= 0.0f);

  // An event may be destroyed while its record is pending.
  {
    Gate gate;
    EventHandle pending(b);
    b.launch_host_function(0, stream.get(), gate.waiter());
    b.record_event(0, pending.get(), stream.get());
    b.destroy_event(0, pending.release());
    gate.open();
    b.synchronize_stream(0, stream.get());
  }
  int not_an_event = 0;
  const auto unknown = capture<BackendError>([&] { b.destroy_event(0, &not_an_event); });
  check_backend_error(unknown, "destroy_event", Status::InvalidResourceHandle);
  CHECK_THAT(unknown.what(), EndsWith(hex(&not_an_event) + " is not an event of the host backend"));
  CHECK_THROWS_AS(b.record_event(0, &not_an_event, nullptr), BackendError);
}

TEST_CASE("host backend: stream_wait_event orders two streams", "[host_backend]") {
  Backend& b = backend();
  StreamHandle producer(b);
  StreamHandle consumer(b);
  StreamHandle other(b);
  EventHandle event(b);
  std::mutex order_mutex;
  std::vector<std::string> order;
  const auto log = [&](std::string what) {
    return [&order_mutex, &order, what = std::move(what)] {
      const std::lock_guard lock(order_mutex);
      order.push_back(what);
    };
  };

  {
    Gate gate;
    b.launch_host_function(0, producer.get(), gate.waiter());
    b.launch_host_function(0, producer.get(), log("producer"));
    b.record_event(0, event.get(), producer.get());
    b.stream_wait_event(0, consumer.get(), event.get());
    b.launch_host_function(0, consumer.get(), log("consumer"));
    std::this_thread::sleep_for(10ms);
    CHECK_FALSE(b.query_stream(0, consumer.get()));  // held by the event
    {
      const std::lock_guard lock(order_mutex);
      CHECK(order.empty());
    }
    gate.open();
    b.synchronize_stream(0, consumer.get());
  }
  CHECK(order == std::vector<std::string>{"producer", "consumer"});

  // The wait is for the record that was latest when stream_wait_event was called: recording the
  // event again on a blocked stream does not hold the waiting stream.
  {
    Gate first;
    Gate second;
    b.launch_host_function(0, producer.get(), first.waiter());
    b.record_event(0, event.get(), producer.get());
    b.stream_wait_event(0, consumer.get(), event.get());
    b.launch_host_function(0, other.get(), second.waiter());
    b.record_event(0, event.get(), other.get());
    first.open();
    b.synchronize_stream(0, consumer.get());  // returns although `second` is still closed
    CHECK_FALSE(b.query_event(0, event.get()));
    second.open();
    b.synchronize_stream(0, other.get());
    CHECK(b.query_event(0, event.get()));
  }

  // Waiting for a completed event costs nothing; the default stream waits inline.
  b.stream_wait_event(0, consumer.get(), event.get());
  CHECK(b.query_stream(0, consumer.get()));
  b.launch_host_function(0, producer.get(), [] { std::this_thread::sleep_for(10ms); });
  b.record_event(0, event.get(), producer.get());
  b.stream_wait_event(0, nullptr, event.get());
  CHECK(b.query_event(0, event.get()));
}

// ---- Concurrency --------------------------------------------------------------------------------

namespace {

/// Runs body(t) for t = 0 .. count-1, each on a thread of its own, all at once; returns how many
/// of them threw.
template <class Body>
int run_on_threads(int count, const Body& body) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < count; ++t) {
    threads.emplace_back([&, t] {
      try {
        body(t);
      } catch (...) {
        ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  return failures.load();
}

}  // namespace

TEST_CASE("host backend: concurrent allocation, copies and frees from 8 threads",
          "[host_backend][threads]") {
  Backend& b = backend();
  const ControlsGuard guard;
  const std::int64_t used = host::device_memory_used(0);
  constexpr int kThreads = 8;
  constexpr int kIterations = 100;
  std::atomic<int> mismatches{0};
  const int failures = run_on_threads(kThreads, [&](int t) {
    StreamHandle stream(b);
    std::vector<std::uint8_t> back(64 * 8);
    for (int i = 0; i < kIterations; ++i) {
      const auto bytes = static_cast<std::size_t>(64 * (1 + (i + t) % 8));
      void* ptr = b.allocate(0, bytes);
      const auto value = static_cast<std::uint8_t>(t * 31 + i);
      b.memset(0, ptr, value, bytes, stream.get());
      b.copy(0, back.data(), ptr, bytes, CopyKind::DeviceToHost, stream.get());
      b.synchronize_stream(0, stream.get());
      if (!std::all_of(back.begin(), back.begin() + static_cast<std::ptrdiff_t>(bytes),
                       [&](std::uint8_t v) { return v == value; })) {
        ++mismatches;
      }
      b.deallocate(0, ptr);
    }
  });
  CHECK(failures == 0);
  CHECK(mismatches.load() == 0);
  CHECK(host::device_memory_used(0) == used);
  CHECK(host::call_count(Call::Allocate) == kThreads * kIterations);
  CHECK(host::call_count(Call::Deallocate) == kThreads * kIterations);
  CHECK(host::call_count(Call::CreateStream) == kThreads);
}

TEST_CASE(
    "host backend: large copies and memsets are split over the cores, exactly, on streams "
    "at once",
    "[host_backend][threads]") {
  // 8 MiB and more go through the parallel copier (several threads, streaming stores); odd sizes
  // and misaligned starts check that every part and every tail is copied exactly once.
  Backend& b = backend();
  const ControlsGuard guard;
  constexpr std::size_t kBytes = (std::size_t{9} << 20) + 4099;
  constexpr int kThreads = 3;
  std::atomic<int> mismatches{0};
  const int failures = run_on_threads(kThreads, [&](int t) {
    StreamHandle stream(b);
    DeviceBuffer device(b, kBytes + 64);
    const std::size_t offset = static_cast<std::size_t>(t) * 7 + 1;  // misaligned
    std::vector<std::uint8_t> input(kBytes);
    for (std::size_t i = 0; i < kBytes; ++i) {
      input[i] = static_cast<std::uint8_t>(i * 131 + static_cast<std::size_t>(t));
    }
    std::vector<std::uint8_t> output(kBytes + 2, 0x5a);
    for (int round = 0; round < 2; ++round) {
      b.copy(0, device.get() + offset, input.data(), kBytes, CopyKind::HostToDevice, stream.get());
      b.copy(0, output.data() + 1, device.get() + offset, kBytes, CopyKind::DeviceToHost,
             stream.get());
      b.synchronize_stream(0, stream.get());
      if (!std::equal(input.begin(), input.end(), output.begin() + 1) || output[0] != 0x5a ||
          output[kBytes + 1] != 0x5a) {
        ++mismatches;
      }
      const auto value = static_cast<std::uint8_t>(0x30 + t + round);
      b.memset(0, device.get() + offset, value, kBytes - 3, stream.get());
      b.copy(0, output.data() + 1, device.get() + offset, kBytes, CopyKind::DeviceToHost,
             stream.get());
      b.synchronize_stream(0, stream.get());
      const bool filled = std::all_of(output.begin() + 1, output.end() - 4,
                                      [&](std::uint8_t v) { return v == value; });
      // The memset stopped 3 bytes short: those still hold the copied input.
      if (!filled || !std::equal(input.end() - 3, input.end(), output.end() - 4)) {
        ++mismatches;
      }
    }
  });
  CHECK(failures == 0);
  CHECK(mismatches == 0);
}

// Tests of the host backend's fault injection (devmem::host::fail_nth and the call counters) on
// allocations, registration, copies and memsets, streams and events, and the vendors'
// synchronisation rules for pageable host memory. Split from test_host_backend.cpp so that each
// file holds one topic.
//
// The host backend is process-wide state, so every test frees what it allocates and resets the
// controls it changes (ControlsGuard).
#include "host_backend_test_support.hpp"

using namespace host_backend_test;

// ---- Fault injection ----------------------------------------------------------------------------

namespace {

void check_injected(const BackendError& error, const char* function, Call kind, std::int64_t nth) {
  check_backend_error(error, function, Status::Injected);
  CHECK_THAT(error.what(), EndsWith("injected failure of call " + std::to_string(nth) + " of " +
                                    std::string(host::to_string(kind)) + " (fail_nth)"));
}

}  // namespace

TEST_CASE("host backend: fail_nth on allocations", "[host_backend][fault]") {
  Backend& b = backend();
  const ControlsGuard guard;
  const std::int64_t used = host::device_memory_used(0);

  host::fail_nth(Call::Allocate, 2);
  DeviceBuffer first(b, 64);
  const auto error = capture<BackendError>([&] { std::ignore = b.allocate(0, 64); });
  check_injected(error, "allocate", Call::Allocate, 2);
  CHECK(host::device_memory_used(0) == used + 64);  // the failed call allocated nothing
  DeviceBuffer third(b, 64);                        // fails exactly once
  CHECK(host::call_count(Call::Allocate) == 3);

  host::fail_nth(Call::Allocate, 1, Status::MemoryAllocation);
  const auto oom = capture<devmem::OutOfMemory>([&] { std::ignore = b.allocate(0, 64); });
  CHECK(std::string(oom.what()) ==
        "host allocate: out of memory allocating 64 B (64 bytes) on device 0 (injected failure of "
        "call 1 of Allocate (fail_nth))");
  CHECK(oom.requested_bytes() == 64);

  host::fail_nth(Call::HostAllocate, 1, Status::MemoryAllocation);
  CHECK_THROWS_AS(b.host_allocate(0, 64, HostAllocFlags::None), devmem::OutOfMemory);
  host::fail_nth(Call::HostAllocate, 1);
  check_injected(capture<BackendError>([&] { std::ignore = b.host_allocate(0, 64, {}); }),
                 "host_allocate", Call::HostAllocate, 1);
  CHECK(host::call_count(Call::HostAllocate) == 2);

  // A failed free keeps the memory, which can then be freed.
  void* ptr = b.allocate(0, 128);
  host::fail_nth(Call::Deallocate, 1);
  check_injected(capture<BackendError>([&] { b.deallocate(0, ptr); }), "deallocate",
                 Call::Deallocate, 1);
  CHECK(host::device_memory_used(0) == used + 256);
  b.deallocate(0, ptr);

  void* pinned = b.host_allocate(0, 128, HostAllocFlags::Mapped);
  host::fail_nth(Call::HostDeallocate, 1, Status::InvalidValue);
  check_backend_error(capture<BackendError>([&] { b.host_deallocate(0, pinned); }),
                      "host_deallocate", Status::InvalidValue);
  CHECK(b.mapped_device_pointer(0, pinned) == pinned);  // still allocated
  b.host_deallocate(0, pinned);
  CHECK(host::call_count(Call::HostDeallocate) == 2);
}

TEST_CASE("host backend: fail_nth on registration", "[host_backend][fault]") {
  Backend& b = backend();
  const ControlsGuard guard;
  std::vector<std::byte> buffer(4096);

  host::fail_nth(Call::HostRegister, 1);
  check_injected(capture<BackendError>(
                     [&] { b.host_register(0, buffer.data(), 4096, HostRegisterFlags::Mapped); }),
                 "host_register", Call::HostRegister, 1);
  CHECK_THROWS_AS(b.mapped_device_pointer(0, buffer.data()), BackendError);  // not registered
  b.host_register(0, buffer.data(), 4096, HostRegisterFlags::Mapped);

  host::fail_nth(Call::HostUnregister, 1, Status::HostMemoryNotRegistered);
  check_backend_error(capture<BackendError>([&] { b.host_unregister(0, buffer.data()); }),
                      "host_unregister", Status::HostMemoryNotRegistered);
  CHECK(b.mapped_device_pointer(0, buffer.data()) == buffer.data());  // still registered
  b.host_unregister(0, buffer.data());
  CHECK(host::call_count(Call::HostRegister) == 2);
  CHECK(host::call_count(Call::HostUnregister) == 2);
}

TEST_CASE("host backend: fail_nth on copies and memsets", "[host_backend][fault]") {
  Backend& b = backend();
  const ControlsGuard guard;
  DeviceBuffer dev(b, 64);
  b.memset(0, dev.get(), 0, 64, nullptr);
  std::vector<std::byte> ones(64, std::byte{1});

  SECTION("on the default stream the call fails synchronously") {
    host::reset_call_counts();
    host::fail_nth(Call::Copy, 1);
    check_injected(capture<BackendError>([&] {
                     b.copy(0, dev.get(), ones.data(), 64, CopyKind::HostToDevice, nullptr);
                   }),
                   "copy", Call::Copy, 1);
    CHECK(dev.get()[0] == std::byte{0});  // nothing was copied
    // copy_2d and copy_strided are Copy calls too.
    host::fail_nth(Call::Copy, 2, Status::IllegalAddress);
    b.copy_2d(0, dev.get(), 8, ones.data(), 8, 8, 2, CopyKind::HostToDevice, nullptr);
    devmem::layout::CopyPlan plan;
    plan.width = 8;
    plan.height = 1;
    check_backend_error(capture<BackendError>([&] {
                          b.copy_strided(0, dev.get(), ones.data(), plan, CopyKind::HostToDevice,
                                         nullptr);
                        }),
                        "copy_strided", Status::IllegalAddress);
    CHECK(host::call_count(Call::Copy) == 3);

    host::fail_nth(Call::Memset, 1, Status::MemoryAllocation);
    check_backend_error(capture<BackendError>([&] { b.memset(0, dev.get(), 1, 64, nullptr); }),
                        "memset", Status::MemoryAllocation);
    CHECK(host::call_count(Call::Memset) == 1);
  }

  SECTION("a small copy into memory this thread copied to before fails the same way") {
    // The second copy of a range takes the small-copy path (the allocation found by the first is
    // cached for this thread); injected failures, counts and checks are those of the first.
    b.copy(0, dev.get(), ones.data(), 8, CopyKind::HostToDevice, nullptr);
    host::reset_call_counts();
    host::fail_nth(Call::Copy, 2);
    b.copy(0, dev.get() + 8, ones.data(), 8, CopyKind::HostToDevice, nullptr);
    check_injected(capture<BackendError>([&] {
                     b.copy(0, dev.get() + 16, ones.data(), 8, CopyKind::HostToDevice, nullptr);
                   }),
                   "copy", Call::Copy, 2);
    CHECK(dev.get()[8] == std::byte{1});
    CHECK(dev.get()[16] == std::byte{0});  // nothing was copied
    std::vector<std::byte> back(8);
    b.copy(0, back.data(), dev.get(), 8, CopyKind::DeviceToHost, nullptr);
    CHECK(back[0] == std::byte{1});
    CHECK(host::call_count(Call::Copy) == 3);
    check_backend_error(capture<BackendError>([&] {
                          b.copy(0, nullptr, dev.get(), 8, CopyKind::DeviceToHost, nullptr);
                        }),
                        "copy", Status::InvalidValue);
    check_backend_error(
        capture<BackendError>(
            [&] { b.copy(0, dev.get() + 60, ones.data(), 8, CopyKind::HostToDevice, nullptr); }),
        "copy", Status::IllegalAddress);
    check_backend_error(capture<BackendError>([&] {
                          b.copy(b.device_count(), dev.get(), ones.data(), 8,
                                 CopyKind::HostToDevice, nullptr);
                        }),
                        "copy", Status::InvalidDevice);
  }

  SECTION("on a stream the operation is dropped and reported by the next synchronize") {
    StreamHandle stream(b);
    host::reset_call_counts();
    host::fail_nth(Call::Copy, 2);
    b.copy(0, dev.get(), ones.data(), 8, CopyKind::HostToDevice, stream.get());
    b.copy(0, dev.get() + 8, ones.data(), 8, CopyKind::HostToDevice, stream.get());  // no throw
    b.copy(0, dev.get() + 16, ones.data(), 8, CopyKind::HostToDevice, stream.get());
    const auto error = capture<BackendError>([&] { b.synchronize_stream(0, stream.get()); });
    check_injected(error, "copy", Call::Copy, 2);
    CHECK(dev.get()[0] == std::byte{1});
    CHECK(dev.get()[8] == std::byte{0});   // the failed copy did not run
    CHECK(dev.get()[16] == std::byte{1});  // later operations did
    CHECK_NOTHROW(b.synchronize_stream(0, stream.get()));
    CHECK(host::call_count(Call::Copy) == 3);
  }

  SECTION("on a stream query_stream reports it too") {
    StreamHandle stream(b);
    host::fail_nth(Call::Memset, 1);
    b.memset(0, dev.get(), 0xff, 64, stream.get());
    b.launch_host_function(0, stream.get(), [] {});
    bool reported = false;
    for (int i = 0; i < 1000 && !reported; ++i) {
      try {
        std::ignore = b.query_stream(0, stream.get());
        std::this_thread::sleep_for(1ms);
      } catch (const BackendError& error) {
        check_injected(error, "memset", Call::Memset, 1);
        reported = true;
      }
    }
    CHECK(reported);
    b.synchronize_stream(0, stream.get());
    CHECK(dev.get()[0] == std::byte{0});
  }
}

TEST_CASE("host backend: pageable host memory follows the vendors' synchronisation rules",
          "[host_backend]") {
  Backend& b = backend();
  const ControlsGuard guard;
  StreamHandle stream(b);
  DeviceBuffer dev(b, 64);
  b.memset(0, dev.get(), 5, 64, nullptr);

  SECTION("device to pageable host: returns once the copy is complete") {
    std::vector<std::byte> out(64, std::byte{0});
    Gate gate;
    std::atomic<bool> opened{false};
    b.launch_host_function(0, stream.get(), gate.waiter());
    std::thread opener([&] {
      std::this_thread::sleep_for(20ms);
      opened = true;
      gate.open();
    });
    b.copy(0, out.data(), dev.get(), 64, CopyKind::DeviceToHost, stream.get());
    CHECK(opened.load());
    CHECK(out[63] == std::byte{5});
    opener.join();
  }
  SECTION("pageable host to device: the source is read before the call returns") {
    std::vector<std::byte> input(64, std::byte{9});
    Gate gate;
    b.launch_host_function(0, stream.get(), gate.waiter());
    b.copy(0, dev.get(), input.data(), 64, CopyKind::HostToDevice, stream.get());
    b.copy_2d(0, dev.get() + 32, 16, input.data(), 8, 8, 2, CopyKind::HostToDevice, stream.get());
    CHECK_FALSE(b.query_stream(0, stream.get()));  // the device side still waits
    std::fill(input.begin(), input.end(), std::byte{7});
    gate.open();
    b.synchronize_stream(0, stream.get());
    CHECK(dev.get()[0] == std::byte{9});
    CHECK(dev.get()[40] == std::byte{9});
  }
  SECTION("more pageable host memory than a staging buffer: the copy is waited for") {
    constexpr std::size_t kBig = 256 * 1024;  // above the host backend's 64 KiB staging limit
    DeviceBuffer big(b, kBig);
    std::vector<std::byte> input(kBig, std::byte{8});
    Gate gate;
    std::atomic<bool> opened{false};
    b.launch_host_function(0, stream.get(), gate.waiter());
    std::thread opener([&] {
      std::this_thread::sleep_for(20ms);
      opened = true;
      gate.open();
    });
    b.copy(0, big.get(), input.data(), kBig, CopyKind::HostToDevice, stream.get());
    CHECK(opened.load());
    CHECK(big.get()[kBig - 1] == std::byte{8});
    opener.join();
  }
  SECTION("page-locked memory stays asynchronous both ways") {
    void* pinned = b.host_allocate(0, 64, HostAllocFlags::None);
    auto* bytes = static_cast<std::byte*>(pinned);
    std::fill(bytes, bytes + 64, std::byte{3});
    {
      Gate gate;
      b.launch_host_function(0, stream.get(), gate.waiter());
      b.copy(0, dev.get(), pinned, 64, CopyKind::HostToDevice, stream.get());  // no wait
      bytes[0] = std::byte{4};  // read by the copy when it runs, as a DMA engine would
      CHECK_FALSE(b.query_stream(0, stream.get()));
      gate.open();
      b.synchronize_stream(0, stream.get());
    }
    CHECK(dev.get()[0] == std::byte{4});
    {
      Gate gate;
      b.launch_host_function(0, stream.get(), gate.waiter());
      b.memset(0, dev.get(), 6, 64, stream.get());
      b.copy(0, pinned, dev.get(), 64, CopyKind::DeviceToHost, stream.get());  // no wait
      CHECK(bytes[0] == std::byte{4});
      gate.open();
      b.synchronize_stream(0, stream.get());
    }
    CHECK(bytes[63] == std::byte{6});
    b.host_deallocate(0, pinned);
  }
  SECTION("a failing device-to-pageable copy on a stream fails the call itself") {
    std::vector<std::byte> out(64, std::byte{0});
    host::reset_call_counts();
    host::fail_nth(Call::Copy, 1);
    check_injected(capture<BackendError>([&] {
                     b.copy(0, out.data(), dev.get(), 64, CopyKind::DeviceToHost, stream.get());
                   }),
                   "copy", Call::Copy, 1);
    CHECK(out[0] == std::byte{0});
    CHECK_NOTHROW(b.synchronize_stream(0, stream.get()));  // nothing was left on the stream
  }
}

TEST_CASE("host backend: fail_nth on streams and events", "[host_backend][fault]") {
  Backend& b = backend();
  const ControlsGuard guard;

  host::fail_nth(Call::CreateStream, 1);
  check_injected(capture<BackendError>([&] { std::ignore = b.create_stream(0); }), "create_stream",
                 Call::CreateStream, 1);
  StreamHandle stream(b);
  CHECK(host::call_count(Call::CreateStream) == 2);

  // A failed destroy leaves the stream usable.
  host::fail_nth(Call::DestroyStream, 1);
  check_injected(capture<BackendError>([&] { b.destroy_stream(0, stream.get()); }),
                 "destroy_stream", Call::DestroyStream, 1);
  std::atomic<bool> ran{false};
  b.launch_host_function(0, stream.get(), [&] { ran = true; });

  // A failed synchronize does not wait; the work still runs and the next one succeeds.
  host::fail_nth(Call::SynchronizeStream, 1);
  check_injected(capture<BackendError>([&] { b.synchronize_stream(0, stream.get()); }),
                 "synchronize_stream", Call::SynchronizeStream, 1);
  b.synchronize_stream(0, stream.get());
  CHECK(ran.load());
  CHECK(host::call_count(Call::SynchronizeStream) == 2);

  host::fail_nth(Call::CreateEvent, 1);
  check_injected(capture<BackendError>([&] { std::ignore = b.create_event(0); }), "create_event",
                 Call::CreateEvent, 1);
  EventHandle event(b);
  host::fail_nth(Call::RecordEvent, 1);
  check_injected(capture<BackendError>([&] { b.record_event(0, event.get(), stream.get()); }),
                 "record_event", Call::RecordEvent, 1);
  // Not recorded: elapsed_ms still sees an event that was never recorded.
  CHECK_THROWS_WITH(b.elapsed_ms(0, event.get(), event.get()), Contains("never been recorded"));
  b.record_event(0, event.get(), stream.get());
  b.synchronize_event(0, event.get());
  CHECK(b.elapsed_ms(0, event.get(), event.get()) == 0.0f);
  CHECK(host::call_count(Call::CreateEvent) == 2);
  CHECK(host::call_count(Call::RecordEvent) == 2);
  CHECK(host::call_count(Call::DestroyStream) == 1);
}

TEST_CASE("host backend: fail_nth requests and call counters", "[host_backend][fault]") {
  Backend& b = backend();
  const ControlsGuard guard;

  CHECK_THROWS_WITH(host::fail_nth(Call::Allocate, 0),
                    "fail_nth: nth must be >= 1 (1 = the next call), got 0");
  CHECK_THROWS_AS(host::fail_nth(Call::Allocate, 1, Status::Success), devmem::InvalidArgument);
  CHECK_THROWS_AS(host::fail_nth(Call::Count_, 1), devmem::InvalidArgument);

  // A new request for a kind replaces the earlier one.
  host::fail_nth(Call::Allocate, 1);
  host::fail_nth(Call::Allocate, 3);
  DeviceBuffer first(b, 8);
  DeviceBuffer second(b, 8);
  CHECK_THROWS_AS(b.allocate(0, 8), BackendError);

  // clear_failures cancels every pending request.
  host::fail_nth(Call::Allocate, 1);
  host::fail_nth(Call::Memset, 1);
  host::clear_failures();
  DeviceBuffer third(b, 8);
  CHECK_NOTHROW(b.memset(0, third.get(), 0, 8, nullptr));

  CHECK(host::call_count(Call::Allocate) == 4);
  host::reset_call_counts();
  for (int kind = 0; kind < static_cast<int>(Call::Count_); ++kind) {
    CHECK(host::call_count(static_cast<Call>(kind)) == 0);
  }
}

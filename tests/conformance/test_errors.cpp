// Errors: the exception hierarchy, out-of-memory, fault injection in every kind of backend call
// (host backend only), and invalid arguments not covered by the other files.
#include "support.hpp"

#include <stdexcept>
#include <type_traits>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::DeviceArray;
using devmem::HostArray;
using devmem::host::Call;
using devmem::host::Status;

static_assert(std::is_base_of_v<std::runtime_error, devmem::Error>);
static_assert(std::is_base_of_v<devmem::Error, devmem::InvalidArgument>);
static_assert(std::is_base_of_v<devmem::Error, devmem::OutOfMemory>);
static_assert(std::is_base_of_v<devmem::Error, devmem::BackendError>);
static_assert(std::is_base_of_v<devmem::Error, devmem::NoDevice>);

TEST_CASE("errors: every devmem exception is a devmem::Error and a std::runtime_error",
          "[errors]") {
  SECTION("InvalidArgument") {
    REQUIRE_THROWS_AS(devmem::device_array(Shape{-1}, f8()), devmem::Error);
    REQUIRE_THROWS_AS(devmem::device_array(Shape{-1}, f8()), std::runtime_error);
  }
  SECTION("NoDevice") {
    REQUIRE_THROWS_AS(devmem::select_device(devmem::device_count()), devmem::Error);
    REQUIRE_THROWS_AS(devmem::select_device(devmem::device_count()), std::runtime_error);
  }
  SECTION("BackendError") {
    const HostArray a(Shape{4}, f8());
    REQUIRE_THROWS_AS(devmem::deregister_host(a), devmem::Error);
    REQUIRE_THROWS_AS(devmem::deregister_host(a), std::runtime_error);
    try {
      devmem::deregister_host(a);
      FAIL("deregistering unregistered memory did not throw");
    } catch (const devmem::BackendError& e) {
      CHECK(e.backend() == devmem::backend_name());
      CHECK_FALSE(e.function().empty());
      CHECK(e.code() != 0);
      CHECK_FALSE(e.code_name().empty());
      CHECK_FALSE(std::string(e.what()).empty());
    }
  }
  SECTION("constructed directly") {
    const devmem::OutOfMemory oom("op: out of memory", 42);
    CHECK(oom.requested_bytes() == 42);
    CHECK(std::string(oom.what()) == "op: out of memory");
    const devmem::BackendError be("host", "copy", 700, "IllegalAddress", "host copy: bad");
    CHECK(be.backend() == "host");
    CHECK(be.function() == "copy");
    CHECK(be.code() == 700);
    CHECK(be.code_name() == "IllegalAddress");
    CHECK(std::string(be.what()) == "host copy: bad");
    const devmem::Error& base = be;
    CHECK(std::string(base.what()) == "host copy: bad");
  }
}

// ---- out of memory
// -------------------------------------------------------------------------------

TEST_CASE("errors: out of device memory", "[errors][oom][host-only]") {
  const HostControlsGuard guard;
  const int64_t used = devmem::host::device_memory_used();
  devmem::host::set_device_memory_capacity(used + kMiB);
  SECTION("device_array names the operation and the size") {
    try {
      (void)devmem::device_array(Shape{2 * kMiB}, u1());
      FAIL("a 2 MiB allocation with 1 MiB free did not throw");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == 2 * kMiB);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith("device_array: "));
      CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("2097152 bytes"));
    }
    CHECK(devmem::host::device_memory_used() == used);
    // A smaller allocation then succeeds.
    const DeviceArray small = devmem::device_array(Shape{kMiB / 2}, u1());
    small.memset(3);
    CHECK(small.item<std::uint8_t>(kMiB / 2 - 1) == 3);
    CHECK(devmem::host::device_memory_used() == used + kMiB / 2);
  }
  SECTION("the whole capacity can be used, one byte more cannot") {
    {
      const DeviceArray all = devmem::device_array(Shape{kMiB}, u1());
      CHECK(devmem::current_context()->memory_info().free == 0);
      REQUIRE_THROWS_AS(devmem::device_array(Shape{1}, u1()), devmem::OutOfMemory);
    }
    const DeviceArray again = devmem::device_array(Shape{kMiB}, u1());
    CHECK(again.alloc_size() == kMiB);
  }
  SECTION("other allocating operations name themselves") {
    const DeviceArray big = devmem::device_array(Shape{640 * kKiB / 8}, f8());  // 640 KiB
    REQUIRE_THROWS_MATCHES(big.copy(), devmem::OutOfMemory, MessageStartsWith("copy: "));
    REQUIRE_THROWS_MATCHES(devmem::device_array_like(big), devmem::OutOfMemory,
                           MessageStartsWith("device_array_like: "));
    const HostArray h(Shape{kMiB / 8}, f8());
    REQUIRE_THROWS_MATCHES(devmem::to_device(h), devmem::OutOfMemory,
                           MessageStartsWith("to_device: "));
  }
  SECTION("a reshape that must copy") {
    const DeviceArray f = devmem::device_array(Shape{256, 320}, f8(), {}, Order::F);  // 640 KiB
    try {
      (void)f.reshape(Shape{320, 256});
      FAIL("reshape needing 640 KiB with 384 KiB free did not throw");
    } catch (const devmem::OutOfMemory& e) {
      CHECK(e.requested_bytes() == 640 * kKiB);
      CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith("reshape: "));
    }
  }
  SECTION("one out-of-memory failure is retried once after flushing pending deallocations") {
    devmem::host::reset_call_counts();
    devmem::host::fail_nth(Call::Allocate, 1, Status::MemoryAllocation);
    const DeviceArray d = devmem::device_array(Shape{100}, f8());
    CHECK(d.alloc_size() == 800);
    CHECK(devmem::host::call_count(Call::Allocate) == 2);
    CHECK(devmem::host::device_memory_used() == used + 800);
  }
  SECTION("an out-of-memory failure of the allocation and of its retry is final") {
    devmem::host::fail_nth(Call::Allocate, 1, Status::MemoryAllocation, 2);
    REQUIRE_THROWS_MATCHES(
        devmem::device_array(Shape{100}, f8()), devmem::OutOfMemory,
        MessageStartsWith("device_array: out of device memory allocating 800 bytes"));
    CHECK(devmem::host::device_memory_used() == used);
    CHECK(devmem::device_array(Shape{100}, f8()).alloc_size() == 800);
  }
}

TEST_CASE("errors: out of pinned host memory (injected)", "[errors][oom][host-only]") {
  const HostControlsGuard guard;
  // The first failure is retried after a flush (and then succeeds); the retry's failure is final.
  devmem::host::reset_call_counts();
  devmem::host::fail_nth(Call::HostAllocate, 1, Status::MemoryAllocation);
  CHECK(devmem::pinned_array(Shape{10}, f8()).size() == 10);
  CHECK(devmem::host::call_count(Call::HostAllocate) == 2);
  devmem::host::fail_nth(Call::HostAllocate, 1, Status::MemoryAllocation, 2);
  try {
    (void)devmem::pinned_array(Shape{1000}, f8());
    FAIL("an injected host allocation failure did not throw");
  } catch (const devmem::OutOfMemory& e) {
    CHECK(e.requested_bytes() == 8000);
    CHECK_THAT(std::string(e.what()), Catch::Matchers::StartsWith("pinned_array: "));
  }
  devmem::host::fail_nth(Call::HostAllocate, 1, Status::MemoryAllocation, 2);
  REQUIRE_THROWS_MATCHES(devmem::mapped_array(Shape{10}, f8()), devmem::OutOfMemory,
                         MessageStartsWith("mapped_array: "));
  CHECK(devmem::pinned_array(Shape{1000}, f8()).kind() == devmem::HostMemoryKind::Pinned);
}

// ---- fault injection
// -----------------------------------------------------------------------------

TEST_CASE("errors: a failing device allocation", "[errors][inject][host-only]") {
  const HostControlsGuard guard;
  const int64_t used = devmem::host::device_memory_used();
  devmem::host::reset_call_counts();
  devmem::host::fail_nth(Call::Allocate, 1);
  try {
    (void)devmem::device_array(Shape{1000}, f8());
    FAIL("an injected allocation failure did not throw");
  } catch (const devmem::BackendError& e) {
    CHECK(e.backend() == "host");
    CHECK(e.code() == 999);
    CHECK(e.code_name() == "Injected");
    CHECK(e.function() == "allocate");
    CHECK_THAT(std::string(e.what()), Catch::Matchers::Contains("Injected"));
  }
  CHECK(devmem::host::call_count(Call::Allocate) == 1);
  CHECK(devmem::host::device_memory_used() == used);
  // The failure was one-shot: the next allocation works.
  const DeviceArray d = devmem::device_array(Shape{1000}, f8());
  CHECK(devmem::host::device_memory_used() == used + 8000);
  CHECK(devmem::host::call_count(Call::Allocate) == 2);
  SECTION("the nth call fails, not the first") {
    devmem::host::fail_nth(Call::Allocate, 3);
    const DeviceArray a = devmem::device_array(Shape{10}, f8());
    const DeviceArray b = devmem::device_array(Shape{10}, f8());
    REQUIRE_THROWS_AS(devmem::device_array(Shape{10}, f8()), devmem::BackendError);
    CHECK(a.alloc_size() + b.alloc_size() == 160);
  }
  SECTION("a failure inside a copying operation leaks nothing") {
    const DeviceArray f = iota_device(Shape{4, 5}, Order::F);
    const int64_t before = devmem::host::device_memory_used();
    devmem::host::fail_nth(Call::Allocate, 1);
    REQUIRE_THROWS_AS(f.reshape(Shape{5, 4}), devmem::BackendError);
    devmem::host::fail_nth(Call::Allocate, 1);
    REQUIRE_THROWS_AS(f.copy(Order::C), devmem::BackendError);
    devmem::host::fail_nth(Call::Allocate, 1);
    REQUIRE_THROWS_AS(devmem::to_device(iota_host(Shape{3})), devmem::BackendError);
    CHECK(devmem::host::device_memory_used() == before);
    CHECK(f.to_vector<double>() == iota_vec(20));
  }
  SECTION("clear_failures cancels a request") {
    devmem::host::fail_nth(Call::Allocate, 1);
    devmem::host::clear_failures();
    CHECK(devmem::device_array(Shape{10}, f8()).alloc_size() == 80);
  }
}

TEST_CASE("errors: a failing copy on the default stream", "[errors][inject][host-only]") {
  const HostControlsGuard guard;
  const DeviceArray d = iota_device(Shape{3, 4});
  SECTION("copy_to_host") {
    devmem::host::fail_nth(Call::Copy, 1);
    try {
      (void)d.copy_to_host();
      FAIL("an injected copy failure did not throw");
    } catch (const devmem::BackendError& e) {
      CHECK(e.backend() == "host");
      CHECK(e.code() == 999);
    }
    CHECK(d.copy_to_host().to_vector<double>() == iota_vec(12));
  }
  SECTION("copy_to_device, item, set_item and strided fills") {
    devmem::host::fail_nth(Call::Copy, 1);
    REQUIRE_THROWS_AS(d.copy_to_device(iota_host(Shape{3, 4}, Order::C, 5.0)),
                      devmem::BackendError);
    devmem::host::fail_nth(Call::Copy, 1);
    REQUIRE_THROWS_AS(d.item<double>(0, 0), devmem::BackendError);
    devmem::host::fail_nth(Call::Copy, 1);
    REQUIRE_THROWS_AS(d.set_item(1.0, 0, 0), devmem::BackendError);
    devmem::host::fail_nth(Call::Copy, 1);
    REQUIRE_THROWS_AS(d.fill(1.5), devmem::BackendError);  // not a byte pattern: a broadcast copy
    CHECK(d.to_vector<double>() == iota_vec(12));
  }
  SECTION("memset") {
    devmem::host::fail_nth(Call::Memset, 1);
    REQUIRE_THROWS_AS(d.memset(0), devmem::BackendError);
    devmem::host::fail_nth(Call::Memset, 1);
    REQUIRE_THROWS_AS(d.fill(0.0), devmem::BackendError);
    CHECK(d.to_vector<double>() == iota_vec(12));
    d.memset(0);
    CHECK(d.to_vector<double>() == std::vector<double>(12, 0.0));
  }
}

TEST_CASE("errors: a failing copy on a created stream surfaces at synchronize",
          "[errors][inject][streams][host-only]") {
  const HostControlsGuard guard;
  const devmem::Stream s = devmem::stream();
  const DeviceArray d = iota_device(Shape{100});
  const HostArray h = devmem::pinned_array(Shape{100}, f8());
  h.fill(-1.0);
  devmem::host::fail_nth(Call::Copy, 1);
  d.copy_to_host(h, s);  // enqueued: no error yet
  SECTION("synchronize reports it, and the stream keeps working") {
    try {
      s.synchronize();
      FAIL("synchronize did not report the failed copy");
    } catch (const devmem::BackendError& e) {
      CHECK(e.backend() == "host");
      CHECK(e.code() == 999);
    }
    CHECK(h.to_vector<double>() == std::vector<double>(100, -1.0));  // the copy did not happen
    s.synchronize();                                                 // reported once
    d.copy_to_host(h, s);
    s.synchronize();
    CHECK(h.to_vector<double>() == iota_vec(100));
  }
  SECTION("auto_synchronize throws it at a normal scope exit") {
    const auto body = [&] { const devmem::AutoSynchronize sync = s.auto_synchronize(); };
    REQUIRE_THROWS_AS(body(), devmem::BackendError);
    s.synchronize();
  }
  SECTION("auto_synchronize during an exception keeps the original exception") {
    const auto body = [&] {
      const devmem::AutoSynchronize sync = s.auto_synchronize();
      throw std::logic_error("original");
    };
    REQUIRE_THROWS_MATCHES(body(), std::logic_error, Message("original"));
    CHECK(s.query());
    s.synchronize();  // the error was reported during unwinding, not kept
  }
  SECTION("close throws it") {
    devmem::AutoSynchronize sync = s.auto_synchronize();
    REQUIRE_THROWS_AS(sync.close(), devmem::BackendError);
  }
}

TEST_CASE("errors: failing stream and event calls", "[errors][inject][streams][host-only]") {
  const HostControlsGuard guard;
  SECTION("creating a stream") {
    devmem::host::fail_nth(Call::CreateStream, 1);
    REQUIRE_THROWS_AS(devmem::stream(), devmem::BackendError);
    CHECK(devmem::stream().native_handle() != nullptr);
  }
  SECTION("synchronizing a stream") {
    const devmem::Stream s = devmem::stream();
    devmem::host::fail_nth(Call::SynchronizeStream, 1);
    REQUIRE_THROWS_AS(s.synchronize(), devmem::BackendError);
    s.synchronize();
  }
  SECTION("synchronizing during an exception does not terminate") {
    const devmem::Stream s = devmem::stream();
    const auto body = [&] {
      const devmem::AutoSynchronize sync = s.auto_synchronize();
      devmem::host::fail_nth(Call::SynchronizeStream, 1);
      throw std::runtime_error("first");
    };
    REQUIRE_THROWS_MATCHES(body(), std::runtime_error, Message("first"));
    s.synchronize();
  }
  SECTION("creating and recording events") {
    const devmem::Stream s = devmem::stream();
    // Stream::record() creates an event only when the context's pool of recycled ones is empty.
    devmem::release_cached_buffers();
    devmem::host::fail_nth(Call::CreateEvent, 1);
    REQUIRE_THROWS_AS(s.record(), devmem::BackendError);
    devmem::Event e;
    devmem::host::fail_nth(Call::RecordEvent, 1);
    REQUIRE_THROWS_AS(e.record(s), devmem::BackendError);
    e.record(s);
    e.synchronize();
    CHECK(e.query());
  }
}

TEST_CASE("errors: a failing host registration leaves nothing registered",
          "[errors][inject][host][host-only]") {
  const HostControlsGuard guard;
  const HostArray a = page_aligned_iota(Shape{100});
  const HostArray b = page_aligned_iota(Shape{100});
  SECTION("the second registration of pinned(a, b) fails") {
    devmem::host::reset_call_counts();
    devmem::host::fail_nth(Call::HostRegister, 2);
    try {
      (void)devmem::pinned(a, b);
      FAIL("an injected registration failure did not throw");
    } catch (const devmem::BackendError& e) {
      CHECK(e.code() == 999);
      CHECK(e.function() == "host_register");
    }
    CHECK(devmem::host::call_count(Call::HostRegister) == 2);
    CHECK(devmem::host::call_count(Call::HostUnregister) == 1);  // `a` was undone
    const devmem::PinnedScope again = devmem::pinned(a, b);
    CHECK(again.arrays().size() == 2);
  }
  SECTION("the first registration fails") {
    devmem::host::fail_nth(Call::HostRegister, 1);
    REQUIRE_THROWS_AS(devmem::pinned(a), devmem::BackendError);
    const devmem::PinnedScope again = devmem::pinned(a);
    CHECK(again.arrays().size() == 1);
  }
  SECTION("mapped() and register_host() roll back too") {
    devmem::host::fail_nth(Call::HostRegister, 2);
    REQUIRE_THROWS_AS(devmem::mapped({a, b}), devmem::BackendError);
    devmem::host::fail_nth(Call::HostRegister, 2);
    REQUIRE_THROWS_AS(devmem::register_host(a, b), devmem::BackendError);
    devmem::register_host(a, b);
    devmem::deregister_host(a, b);
  }
  SECTION("a failing unregistration in close() is thrown") {
    devmem::PinnedScope scope = devmem::pinned(a, b);
    devmem::host::fail_nth(Call::HostUnregister, 1);
    REQUIRE_THROWS_AS(scope.close(), devmem::BackendError);
    // Every range was attempted: `b` is unpinned, `a` is still registered.
    REQUIRE_THROWS_AS(devmem::pinned(a), devmem::BackendError);
    const devmem::PinnedScope pb = devmem::pinned(b);
    devmem::deregister_host(a);  // clean up what the failure left behind
    const devmem::PinnedScope pa = devmem::pinned(a);
    CHECK(pa.arrays().size() == 1);
  }
  SECTION("a failing unregistration at scope exit is reported, not thrown") {
    {
      const devmem::PinnedScope scope = devmem::pinned(a);
      devmem::host::fail_nth(Call::HostUnregister, 1);
    }
    REQUIRE_THROWS_AS(devmem::pinned(a), devmem::BackendError);
    devmem::deregister_host(a);
    const devmem::PinnedScope again = devmem::pinned(a);
    CHECK(again.arrays().size() == 1);
  }
}

TEST_CASE("errors: host backend controls", "[errors][host-only]") {
  const HostControlsGuard guard;
  SECTION("call counts") {
    devmem::host::reset_call_counts();
    CHECK(devmem::host::call_count(Call::Allocate) == 0);
    const DeviceArray d = devmem::device_array(Shape{4}, f8());
    d.copy_to_device(iota_host(Shape{4}));
    d.memset(0);
    CHECK(devmem::host::call_count(Call::Allocate) == 1);
    CHECK(devmem::host::call_count(Call::Copy) == 1);
    CHECK(devmem::host::call_count(Call::Memset) == 1);
    CHECK(devmem::host::call_count(Call::Count_) == 0);
  }
  SECTION("names") {
    CHECK(devmem::host::to_string(Call::HostRegister) == "HostRegister");
    CHECK(devmem::host::to_string(Call::Copy) == "Copy");
    CHECK(devmem::host::to_string(Status::IllegalAddress) == "IllegalAddress");
    CHECK(devmem::host::to_string(Status::Injected) == "Injected");
  }
  SECTION("invalid requests") {
    REQUIRE_THROWS_MATCHES(devmem::host::fail_nth(Call::Copy, 0), devmem::InvalidArgument,
                           Message("fail_nth: nth must be >= 1 (1 = the next call), got 0"));
    REQUIRE_THROWS_MATCHES(devmem::host::fail_nth(Call::Copy, 1, Status::Success),
                           devmem::InvalidArgument,
                           Message("fail_nth: status must be a failure, got Success (call Copy)"));
    REQUIRE_THROWS_MATCHES(devmem::host::set_device_memory_capacity(-1), devmem::InvalidArgument,
                           Message("set_device_memory_capacity: capacity must be >= 0, got -1"));
    REQUIRE_THROWS_AS(devmem::host::device_memory_used(devmem::device_count()),
                      devmem::BackendError);
  }
  SECTION("a capacity with nothing free") {
    devmem::host::set_device_memory_capacity(devmem::host::device_memory_used());
    REQUIRE_THROWS_AS(devmem::device_array(Shape{1}, u1()), devmem::OutOfMemory);
    CHECK(devmem::device_array(Shape{0}, u1()).size() == 0);  // nothing to allocate
  }
}

// ---- invalid arguments not covered elsewhere
// -----------------------------------------------------

TEST_CASE("errors: invalid dtypes", "[errors]") {
  REQUIRE_THROWS_MATCHES(DType('x', 4), devmem::InvalidArgument,
                         Message("DType: unknown kind 'x' (expected one of b, i, u, f, c, V)"));
  REQUIRE_THROWS_MATCHES(DType('f', 3), devmem::InvalidArgument,
                         Message("DType: float of 3 bytes does not exist"));
  REQUIRE_THROWS_MATCHES(DType('i', 0), devmem::InvalidArgument,
                         Message("DType: itemsize must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr(">f8"), devmem::InvalidArgument,
                         Message("DType: big-endian typestr '>f8' is not supported"));
  REQUIRE_THROWS_MATCHES(DType::from_typestr("f8"), devmem::InvalidArgument,
                         Message("DType: unknown typestr 'f8'"));
  CHECK(DType::from_typestr("<f8") == f8());
  CHECK(DType::from_typestr("|u1") == u1());
}

TEST_CASE("errors: zero strides on a destination", "[errors][transfers]") {
  // Copying *into* a broadcast array would write one element several times with different values.
  const DeviceArray b = devmem::device_array(Shape{4, 3}, f8(), Strides{0, 8});
  REQUIRE_THROWS_MATCHES(b.copy_to_device(iota_host(Shape{4, 3})), devmem::InvalidArgument,
                         MessageStartsWith("copy_to_device: "));
  const DeviceArray src = devmem::device_array(Shape{4, 3}, f8());
  REQUIRE_THROWS_MATCHES(b.copy_to_device(src), devmem::InvalidArgument,
                         MessageStartsWith("copy_to_device: "));
}

TEST_CASE("errors: messages name the operation and the values", "[errors]") {
  const DeviceArray a = devmem::device_array(Shape{10, 10, 10}, f8());
  REQUIRE_THROWS_MATCHES(a.reshape(Shape{3, 7}), devmem::InvalidArgument,
                         Message("reshape: cannot reshape array of size 1000 into shape (3, 7)"));
  REQUIRE_THROWS_MATCHES(a.copy(Order::K).reshape(Shape{1000}).split(0), devmem::InvalidArgument,
                         Message("split: section must be positive, got 0"));
  REQUIRE_THROWS_MATCHES(a.copy(static_cast<Order>('Z')), devmem::InvalidArgument,
                         MessageStartsWith("copy: "));
  REQUIRE_THROWS_MATCHES(a.ravel(static_cast<Order>('Z')), devmem::InvalidArgument,
                         MessageStartsWith("ravel: "));
}

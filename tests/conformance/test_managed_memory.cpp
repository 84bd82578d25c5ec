// Managed memory (docs/managed-memory.md) on every backend: managed_array and its host view,
// copies in both directions, prefetch to the device and back on the default and another stream,
// advice, the host attachment, the "managed" memory manager, the oversubscription refusal, and bad
// input with messages that name the values and nothing leaked. The strict fake has no managed
// memory: there every call must say so. The host backend's records of prefetches and advice are
// checked in the [host-only] tests at the end. A kernel on managed memory is in
// test_kernels_launch.cpp (kernel sources are compiled by each backend's compiler).
#include "support.hpp"

#include <optional>
#include <vector>

using namespace conformance;
using Catch::Matchers::Message;
using devmem::InvalidArgument;
using devmem::ManagedArray;
using devmem::ManagedArrayOptions;
using devmem::MemoryAdvice;
using devmem::MemoryLocation;
using devmem::OutOfMemory;

namespace {

bool has_managed_memory() {
  return devmem::current_context()->backend().supports_managed_memory(devmem::current_device());
}

MemoryLocation this_device() {
  return MemoryLocation::on_device(devmem::current_device());
}

/// Writes k into element k (C order) of a 2-d float64 managed array through its host view.
void fill_iota_on_host(const ManagedArray& managed) {
  double k = 0;
  for (int64_t i = 0; i < managed.shape()[0]; ++i) {
    for (int64_t j = 0; j < managed.shape()[1]; ++j) managed.at<double>(i, j) = k++;
  }
}

}  // namespace

TEST_CASE("managed: a backend without managed memory says so", "[managed]") {
  if (has_managed_memory()) {
    // The others allocate (the rest of this file); the manager is there by name too.
    CHECK(devmem::make_memory_manager("managed")->name() == "managed");
    return;
  }
  const std::string backend = devmem::backend_name();
  CHECK_THROWS_MATCHES(devmem::managed_array<double>({4}), InvalidArgument,
                       Message("memory manager 'managed': device 0 of backend '" + backend +
                               "' has no managed memory"));
  CHECK_THROWS_MATCHES(devmem::make_memory_manager("managed"), InvalidArgument,
                       MessageContains("has no managed memory"));
  // A device array is not managed memory: the backend's own refusal names it.
  const devmem::DeviceArray d = devmem::device_array<double>({4});
  CHECK_THROWS_MATCHES(devmem::prefetch(d, MemoryLocation::host()), InvalidArgument,
                       MessageContains("the " + backend + " backend does not support managed"));
}

TEST_CASE("managed: host writes reach the device and device writes reach the host", "[managed]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  const auto before = devmem::current_context()->device_statistics();
  {
    const ManagedArray managed = devmem::managed_array<double>({4, 3});
    CHECK(managed.shape() == Shape{4, 3});
    CHECK(managed.nbytes() == 96);
    fill_iota_on_host(managed);
    // Device side: a D2D copy and a D2H copy read what the host wrote.
    const devmem::DeviceArray copy = devmem::device_array<double>({4, 3});
    copy.copy_to_device(managed);
    CHECK(copy.to_vector<double>() == iota_vec<double>(12));
    CHECK(managed.to_vector<double>() == iota_vec<double>(12));
    // Device writes (an H2D copy into the managed array), then the host reads in place.
    managed.copy_to_device(iota_host<double>({4, 3}, Order::C, 100.0));
    CHECK(managed.at<double>(0, 0) == 100.0);
    CHECK(managed.at<double>(3, 2) == 111.0);
    // The host view is the same memory: no copy, same layout.
    const devmem::HostArray host = managed.host();
    CHECK(host.data() == managed.data());
    CHECK(host.strides() == managed.strides());
    CHECK(host.to_vector<double>() == iota_vec<double>(12, 100.0));
    // Views of a managed array are device arrays of the same memory.
    const devmem::DeviceArray column = managed.transpose().slice(0, 1, 2);
    CHECK(column.to_vector<double>() == std::vector<double>{101, 104, 107, 110});
    // The managed array and its device copy, 96 bytes each.
    CHECK(devmem::current_context()->device_statistics().current_bytes ==
          before.current_bytes + 2 * 96);
  }
  // The memory went back through the deferred queue like any array's.
  devmem::current_context()->flush_deallocations();
  CHECK(devmem::current_context()->device_statistics().current_bytes == before.current_bytes);
}

TEST_CASE("managed: prefetch to the device and back keeps the contents", "[managed]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  SECTION("on the default stream: complete when the call returns") {
    const ManagedArray managed = devmem::managed_array<double>({8, 8});
    fill_iota_on_host(managed);
    managed.prefetch(this_device());
    const devmem::DeviceArray copy = devmem::device_array<double>({8, 8});
    copy.copy_to_device(managed);
    managed.prefetch(MemoryLocation::host());
    CHECK(managed.at<double>(7, 7) == 63.0);
    CHECK(copy.to_vector<double>() == iota_vec<double>(64));
  }
  SECTION("on another stream: in the stream's order") {
    const devmem::Stream s = devmem::stream();
    ManagedArrayOptions options;
    options.stream = s;
    const ManagedArray managed = devmem::managed_array<double>({16, 4}, options);
    CHECK(managed.stream().native_handle() == s.native_handle());
    fill_iota_on_host(managed);
    managed.prefetch(this_device());  // the array's stream
    const devmem::DeviceArray copy = devmem::device_array<double>({16, 4}, Order::C, s);
    copy.copy_to_device(managed, s);
    managed.prefetch(MemoryLocation::host(), s);
    s.synchronize();
    CHECK(copy.to_vector<double>(s) == iota_vec<double>(64));
    CHECK(managed.at<double>(15, 3) == 63.0);
  }
  SECTION("a view prefetches only its own bytes, any layout") {
    const ManagedArray managed = devmem::managed_array<double>({8, 8});
    fill_iota_on_host(managed);
    const devmem::DeviceArray rows = managed.slice(0, 2, 6).transpose();
    devmem::prefetch(rows, this_device());
    devmem::prefetch(rows, MemoryLocation::host());
    CHECK(managed.at<double>(2, 0) == 16.0);
    CHECK(rows.copy_to_host().to_vector<double>().front() == 16.0);
  }
}

TEST_CASE("managed: advice is accepted for every kind and location", "[managed]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  const ManagedArray managed = devmem::managed_array<float>({1024});
  managed.advise(MemoryAdvice::ReadMostly);
  managed.advise(MemoryAdvice::PreferredLocation, this_device());
  managed.advise(MemoryAdvice::AccessedBy, MemoryLocation::host());
  managed.advise(MemoryAdvice::AccessedBy, this_device());
  managed.advise(MemoryAdvice::UnsetAccessedBy, MemoryLocation::host());
  managed.advise(MemoryAdvice::UnsetPreferredLocation, this_device());
  managed.advise(MemoryAdvice::PreferredLocation, MemoryLocation::host());
  managed.advise(MemoryAdvice::UnsetReadMostly);
  // Advice never changes the contents.
  managed.at<float>(1023) = 2.5F;
  managed.prefetch(this_device());
  CHECK(managed.item<float>(1023) == 2.5F);
}

TEST_CASE("managed: memory attached to the host is usable after a prefetch", "[managed]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  ManagedArrayOptions options;
  options.attach_global = false;
  const ManagedArray managed = devmem::managed_array<std::int32_t>({5}, options);
  for (int i = 0; i < 5; ++i) managed.at<std::int32_t>(i) = i * i;
  managed.prefetch(this_device());
  CHECK(managed.to_vector<std::int32_t>() == std::vector<std::int32_t>{0, 1, 4, 9, 16});
}

TEST_CASE("managed: the managed memory manager serves device arrays", "[managed][managers]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  const auto context = devmem::current_context();
  const std::shared_ptr<devmem::MemoryManager> original = context->memory_manager();
  context->set_memory_manager(devmem::make_memory_manager("statistics:managed"));
  try {
    const devmem::DeviceArray d = devmem::to_device(iota_host<double>({6}));
    devmem::prefetch(d, MemoryLocation::host());
    devmem::advise(d, MemoryAdvice::ReadMostly);
    devmem::prefetch(d, this_device());
    CHECK(d.to_vector<double>() == iota_vec<double>(6));
    const auto* stats =
        dynamic_cast<const devmem::StatisticsAdaptor*>(context->memory_manager().get());
    REQUIRE(stats != nullptr);
    CHECK(stats->statistics().current_count == 1);
  } catch (...) {
    context->set_memory_manager(original);
    throw;
  }
  context->set_memory_manager(original);
}

TEST_CASE("managed: more than the free device memory is refused unless allowed",
          "[managed][errors]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  const auto context = devmem::current_context();
  // An allocation that fails is retried once after the work in flight and the queued frees of
  // earlier tests are released (Numba's rule), which raises the free memory: on an H100 that
  // made a size of "free + 1 MiB" measured before them fit on the retry. Release them first,
  // and leave a margin for the driver's own bookkeeping.
  context->synchronize();
  context->flush_deallocations();
  const auto before = context->device_statistics();
  const devmem::MemoryInfo info = context->backend().memory_info(context->device());
  // No vendor call is made for the refused size: safe on a real GPU too.
  const int64_t too_many = info.free + 64 * kMiB;
  try {
    static_cast<void>(devmem::managed_array(Shape{too_many}, u1()));
    FAIL("managed_array of more than the free memory was not refused");
  } catch (const OutOfMemory& e) {
    const std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("managed_array: out of device memory allocating " +
                                     std::to_string(too_many) + " bytes"));
    CHECK_THAT(what, Catch::Contains("refusing"));
    CHECK_THAT(what, Catch::Contains("(" + std::to_string(too_many) + " bytes) of managed memory"));
    CHECK_THAT(what, Catch::Contains("hang the GPU"));
    CHECK_THAT(what, Catch::Contains("allow_oversubscription = true"));
    CHECK(e.requested_bytes() == too_many);
  }
  CHECK(context->device_statistics().current_count == before.current_count);
  CHECK(context->device_statistics().current_bytes == before.current_bytes);
}

TEST_CASE("managed: bad input names the values and leaks nothing", "[managed][errors]") {
  if (!has_managed_memory()) return;  // checked by "a backend without managed memory says so"
  const auto context = devmem::current_context();
  const auto before = context->device_statistics();
  CHECK_THROWS_MATCHES(devmem::managed_array(Shape{3, -1}, f8()), InvalidArgument,
                       Message("managed_array: negative dimension -1 in shape (3, -1)"));
  ManagedArrayOptions two_strides;
  two_strides.strides = {8, 8};
  CHECK_THROWS_MATCHES(devmem::managed_array(Shape{4}, f8(), two_strides), InvalidArgument,
                       MessageStartsWith("managed_array: "));
  // Zero elements: an array without memory, on which prefetch and advice do nothing.
  const ManagedArray empty = devmem::managed_array(Shape{0, 5}, f8());
  CHECK(empty.size() == 0);
  CHECK(empty.data() == nullptr);
  empty.prefetch(this_device());
  empty.advise(MemoryAdvice::ReadMostly);
  CHECK(empty.host().size() == 0);

  const ManagedArray managed = devmem::managed_array<double>({4});
  const int count = devmem::device_count();
  const std::string backend = devmem::backend_name();
  const std::string devices = std::to_string(count) + (count == 1 ? " device)" : " devices)");
  CHECK_THROWS_MATCHES(managed.prefetch(MemoryLocation::on_device(count)), InvalidArgument,
                       Message("prefetch: device " + std::to_string(count) +
                               " does not exist (the " + backend + " backend has " + devices));
  CHECK_THROWS_MATCHES(
      managed.prefetch(MemoryLocation::on_device(-3)), InvalidArgument,
      Message("prefetch: device -3 does not exist (the " + backend + " backend has " + devices));
  CHECK_THROWS_MATCHES(
      managed.advise(MemoryAdvice::AccessedBy, MemoryLocation::on_device(count + 1)),
      InvalidArgument, MessageStartsWith("advise: device " + std::to_string(count + 1)));
  CHECK_THROWS_MATCHES(managed.advise(MemoryAdvice::PreferredLocation), InvalidArgument,
                       Message("advise: PreferredLocation needs a location "
                               "(MemoryLocation::on_device(i) or MemoryLocation::host())"));
  // The host view keeps the dtype checks of a host array.
  CHECK_THROWS_MATCHES(managed.at<float>(0), InvalidArgument,
                       Message("at: the array's dtype is float64, not float32"));
  CHECK_THROWS_AS(managed.at<double>(4), InvalidArgument);
  // Memory that is not managed: the vendor (or the simulator) refuses a prefetch.
  const devmem::DeviceArray plain = devmem::device_array<double>({4});
  CHECK_THROWS_AS(devmem::prefetch(plain, this_device()), devmem::BackendError);
  CHECK(context->device_statistics().current_count == before.current_count + 2);
}

// ---- The host backend's records and its configurable device memory -------------------------

TEST_CASE("managed: the host backend records prefetches and advice", "[managed][host-only]") {
  const HostControlsGuard guard;
  const devmem::host::ManagedMemoryState start = devmem::host::managed_memory_state();
  const int64_t device_used = devmem::host::device_memory_used();
  const devmem::Stream s = devmem::stream();
  ManagedArrayOptions options;
  options.stream = s;
  options.attach_global = false;
  const ManagedArray managed = devmem::managed_array<double>({512}, options);
  devmem::host::ManagedRangeState range = devmem::host::managed_range_state(managed.data());
  CHECK(range.base == managed.data());
  CHECK(range.bytes == 4096);
  CHECK(range.attach == devmem::ManagedAttach::Host);
  CHECK(range.prefetches == 0);
  CHECK(devmem::host::managed_memory_state().allocations == start.allocations + 1);
  CHECK(devmem::host::managed_memory_state().bytes == start.bytes + 4096);
  // Managed memory does not take the device's capacity.
  CHECK(devmem::host::device_memory_used() == device_used);

  managed.prefetch(MemoryLocation::on_device(0));
  managed.prefetch(MemoryLocation::host());
  s.synchronize();  // prefetches are recorded when they run on their stream
  range = devmem::host::managed_range_state(managed.data());
  CHECK(range.prefetches == 2);
  CHECK(range.last_prefetch == MemoryLocation::host());
  const devmem::host::ManagedMemoryState after = devmem::host::managed_memory_state();
  CHECK(after.prefetches_to_device == start.prefetches_to_device + 1);
  CHECK(after.prefetches_to_host == start.prefetches_to_host + 1);

  managed.advise(MemoryAdvice::ReadMostly);
  managed.advise(MemoryAdvice::PreferredLocation, MemoryLocation::on_device(0));
  managed.advise(MemoryAdvice::AccessedBy, MemoryLocation::host());
  range = devmem::host::managed_range_state(managed.data());
  CHECK(range.read_mostly);
  CHECK(range.preferred_location == MemoryLocation::on_device(0));
  CHECK(range.accessed_by == std::vector<MemoryLocation>{MemoryLocation::host()});
  managed.advise(MemoryAdvice::UnsetReadMostly);
  managed.advise(MemoryAdvice::UnsetPreferredLocation, MemoryLocation::on_device(0));
  managed.advise(MemoryAdvice::UnsetAccessedBy, MemoryLocation::host());
  range = devmem::host::managed_range_state(managed.data());
  CHECK_FALSE(range.read_mostly);
  CHECK_FALSE(range.preferred_location.has_value());
  CHECK(range.accessed_by.empty());
  CHECK(devmem::host::managed_memory_state().advice == start.advice + 6);
  CHECK_THROWS_MATCHES(devmem::host::managed_range_state(&range), InvalidArgument,
                       MessageContains("is not inside managed memory"));
}

TEST_CASE("managed: oversubscription of the simulated device, refused and allowed",
          "[managed][host-only][errors]") {
  const HostControlsGuard guard;
  devmem::host::set_device_memory_capacity(kMiB);
  const auto context = devmem::current_context();
  const int64_t live = devmem::host::managed_memory_state().allocations;
  const int64_t free_bytes = context->backend().memory_info(0).free;
  CHECK_THROWS_MATCHES(devmem::managed_array(Shape{2 * kMiB}, u1()), OutOfMemory,
                       MessageContains("refusing 2 MiB (2097152 bytes) of managed memory: device 0 "
                                       "has " +
                                       devmem::format_bytes(free_bytes) + " (" +
                                       std::to_string(free_bytes) + " bytes) free of 1 MiB"));
  CHECK(devmem::host::managed_memory_state().allocations == live);
  ManagedArrayOptions allow;
  allow.allow_oversubscription = true;
  const ManagedArray big = devmem::managed_array(Shape{2 * kMiB}, u1(), allow);
  big.host().fill(std::uint8_t{7});
  big.prefetch(MemoryLocation::on_device(0));
  CHECK(big.item<std::uint8_t>(2 * kMiB - 1) == 7);
  CHECK(devmem::host::managed_memory_state().allocations == live + 1);
  // The managed manager refuses too, and says how to allow it.
  context->set_memory_manager(devmem::make_memory_manager("managed"));
  CHECK_THROWS_MATCHES(devmem::device_array(Shape{2 * kMiB}, u1()), OutOfMemory,
                       MessageContains("set allow_oversubscription = true"));
  context->set_memory_manager(devmem::make_memory_manager("direct"));
}

TEST_CASE("managed: injected failures of the simulator are reported", "[managed][host-only]") {
  const HostControlsGuard guard;
  // Twice: the deferred queue flushes and retries once before OutOfMemory reaches the caller.
  devmem::host::fail_nth(devmem::host::Call::AllocateManaged, 1,
                         devmem::host::Status::MemoryAllocation, 2);
  CHECK_THROWS_AS(devmem::managed_array<double>({16}), OutOfMemory);
  const ManagedArray managed = devmem::managed_array<double>({16});
  devmem::host::fail_nth(devmem::host::Call::Advise, 1);
  CHECK_THROWS_MATCHES(managed.advise(MemoryAdvice::ReadMostly), devmem::BackendError,
                       MessageContains("host advise_managed: Injected"));
  devmem::host::fail_nth(devmem::host::Call::Prefetch, 1);
  CHECK_THROWS_MATCHES(managed.prefetch(MemoryLocation::host()), devmem::BackendError,
                       MessageContains("host prefetch_managed: Injected"));
  // The array still works.
  managed.host().fill(1.5);
  CHECK(managed.item<double>(15) == 1.5);
}

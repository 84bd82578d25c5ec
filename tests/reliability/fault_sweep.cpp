// Fault-injection sweep over the host backend.
//
// Each scenario is a short, representative use of the API that checks its own results. It is run
// once cleanly while the host backend counts its calls per kind; then, for every kind and every
// call index 1..count of that clean run, it is run again with exactly that call failing
// (devmem::host::fail_nth). Every faulty run must end in one of two ways:
//  - a devmem::Error whose message names the failed call ("injected failure of call N of Kind",
//    as the host backend words injected errors) and, for BackendError, the failing function; or
//  - success with correct data, when devmem absorbed the failure in a place that cannot throw
//    (a destructor, a deallocation flush devmem started itself). Then the failure must have been
//    reported: in Context::take_deallocation_errors() or on stderr. Silence is a bug.
// After every run: no deferred deallocation is left pending once flushed, the device statistics
// and the simulated device memory are back at their baseline (except for a block whose free was
// the failed call: devmem drops such a block on purpose, see memory_manager.hpp, and the message
// must give its size), and the next clean run of the scenario succeeds. Under the host-asan preset
// LeakSanitizer then checks at exit that no host memory leaked either.
//
// Allocations are also swept with Status::MemoryAllocation (an out-of-memory report that lasts):
// those must end in OutOfMemory after devmem's flush-and-retry.
//
// The program prints the number of fault points swept and exits non-zero on the first scenario
// whose sweep found a problem (every problem of that scenario is printed).

#include "../common/stderr_capture.hpp"

#include <devmem/devmem.hpp>
#include <devmem/host_controls.hpp>
#include <devmem/kernel.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using devmem::host::Call;
using devmem::host::Status;

constexpr auto kCallKinds = static_cast<std::size_t>(Call::Count_);

// ---- Scenario helpers ---------------------------------------------------------------------------

/// A scenario's own check failed: the data or state it produced is wrong. Not a devmem::Error, so
/// the sweep never mistakes it for a clean report of the injected failure.
class ScenarioCheckFailed : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

void expect(bool condition, const char* what) {
  if (!condition) throw ScenarioCheckFailed(what);
}

std::vector<double> iota_values(std::size_t n, double start = 0.0) {
  std::vector<double> values(n);
  std::iota(values.begin(), values.end(), start);
  return values;
}

/// Host memory of its own 64 KiB-aligned pages, zero-filled: scopes that pin or map memory
/// register whole pages, so two arrays must not share one.
devmem::HostArray page_aligned_doubles(const devmem::Shape& shape) {
  constexpr std::size_t kAlign = 64 * 1024;
  std::size_t count = 1;
  for (const std::int64_t d : shape) count *= static_cast<std::size_t>(d);
  const std::size_t bytes = (count * sizeof(double) + kAlign - 1) / kAlign * kAlign;
  void* const memory = std::aligned_alloc(kAlign, bytes);
  if (memory == nullptr) throw std::bad_alloc();
  std::memset(memory, 0, bytes);
  const std::shared_ptr<void> owner(memory, [](void* p) { std::free(p); });
  return devmem::HostArray::view(memory, shape, devmem::dtype_of<double>(), {}, owner);
}

// ---- Scenarios ----------------------------------------------------------------------------------
// Each runs to completion and checks its data, or throws. Arrays, streams and scopes are locals,
// so a failure anywhere unwinds through their destructors as it would in a user's program.

/// to_device + copy_to_host on the default stream and on a stream, through a strided view.
void scenario_to_device_and_back() {
  const std::vector<double> values = iota_values(24);
  const devmem::DeviceArray on_default = devmem::to_device(values).reshape({4, 6});
  const devmem::HostArray transposed = on_default.transpose().copy_to_host();
  expect(transposed.at<double>(5, 3) == values[3 * 6 + 5], "transposed copy_to_host");

  const devmem::Stream stream = devmem::stream();
  const devmem::DeviceArray on_stream = devmem::to_device(values, stream);
  devmem::HostArray back(devmem::Shape{12}, devmem::dtype_of<double>());
  on_stream.slice(0, 1, std::nullopt, 2).copy_to_host(back, stream);
  stream.synchronize();
  for (std::int64_t i = 0; i < 12; ++i) {
    expect(back.at<double>(i) == values[static_cast<std::size_t>(2 * i + 1)],
           "strided copy_to_host on a stream");
  }
}

/// A pinned() scope around existing host memory, transfers through it on a stream, then an
/// explicit close (which reports unregistration failures by throwing).
void scenario_pinned_scope() {
  const devmem::HostArray source = page_aligned_doubles({4, 8});
  const devmem::HostArray result = page_aligned_doubles({4, 8});
  const std::vector<double> values = iota_values(32, 1.0);
  source.copy_from(devmem::HostArray::view(std::span<const double>(values), {4, 8}));

  devmem::PinnedScope pins = devmem::pinned(source, result);
  const devmem::Stream stream = devmem::stream();
  const devmem::DeviceArray device = devmem::to_device(source, stream);
  device.copy_to_host(result, stream);
  stream.synchronize();
  pins.close();
  expect(result.to_vector<double>() == values, "pinned round trip");
}

/// A mapped() scope: the device view of host memory is written on the device side and read on
/// the host side; plus pinned_array and mapped_array allocations used for a transfer.
void scenario_mapped_scope_and_arrays() {
  const devmem::HostArray host = page_aligned_doubles({16});
  {
    devmem::MappedScope scope = devmem::mapped({host});
    const std::vector<double> values = iota_values(16, 5.0);
    scope[0].copy_to_device(std::span<const double>(values));
    scope.close();
    expect(host.to_vector<double>() == values, "mapped scope write-through");
  }

  const devmem::HostArray pinned = devmem::pinned_array<double>({3, 5});
  const devmem::MappedArray mapped = devmem::mapped_array<double>({3, 5});
  const std::vector<double> values = iota_values(15, -7.0);
  pinned.copy_from(devmem::HostArray::view(std::span<const double>(values), {3, 5}));
  mapped.device().copy_to_device(pinned);
  expect(mapped.to_vector<double>() == values, "pinned_array to mapped_array");
}

/// The caching pool under memory pressure: a small device, the pool holding freed blocks, then
/// allocations that only fit once the pool has given its cache back (and the queue was flushed).
void scenario_pool_under_pressure() {
  const auto context = devmem::current_context();
  const auto previous_manager = context->memory_manager();
  const std::int64_t previous_capacity = devmem::host::device_memory_capacity();
  // Restores the manager and the capacity however the scenario ends.
  struct Restore {
    std::shared_ptr<devmem::Context> context;
    std::shared_ptr<devmem::MemoryManager> manager;
    std::int64_t capacity;
    ~Restore() {
      try {
        context->flush_deallocations();
      } catch (...) {  // reported by the sweep's own flush afterwards
      }
      context->set_memory_manager(manager);
      devmem::host::set_device_memory_capacity(capacity);
    }
  } restore{context, previous_manager, previous_capacity};

  auto pool = std::make_shared<devmem::PoolMemoryManager>(*context);
  context->set_memory_manager(pool);
  devmem::host::set_device_memory_capacity(devmem::host::device_memory_used() + 64 * 1024);

  std::vector<devmem::DeviceArray> small;
  for (int i = 0; i < 6; ++i) {
    small.push_back(devmem::to_device(iota_values(1024, i * 1000.0)));  // 8 KiB each
  }
  for (int i = 0; i < 6; ++i) {
    expect(small[static_cast<std::size_t>(i)].item<double>(1023) == i * 1000.0 + 1023,
           "pool block contents");
  }
  small.clear();  // cached by the pool (queued first, flushed by the next allocation's retry)
  const devmem::DeviceArray large = devmem::to_device(iota_values(6 * 1024, 0.5));  // 48 KiB
  expect(large.item<double>(6 * 1024 - 1) == 6 * 1024 - 0.5, "large block after the pressure");
}

/// SmartArray: host -> device once, a device-side change, then the host side brought back.
void scenario_smart_array() {
  const std::vector<double> values = iota_values(20, 3.0);
  devmem::SmartArray smart(devmem::HostArray::from(values).reshape({4, 5}));
  const devmem::DeviceArray& device = smart.get_device();
  device.slice(0, 1, 3).fill(-2.0);
  smart.mark_changed(devmem::Where::Device);
  const devmem::HostArray& host = smart.get_host();
  for (std::int64_t r = 0; r < 4; ++r) {
    for (std::int64_t c = 0; c < 5; ++c) {
      const double expected =
          (r == 1 || r == 2) ? -2.0 : values[static_cast<std::size_t>(r * 5 + c)];
      expect(host.at<double>(r, c) == expected, "SmartArray host side after a device change");
    }
  }
}

/// Two streams ordered by an event, a D2D copy between them, a memset and a timed interval.
void scenario_streams_and_events() {
  const std::vector<double> values = iota_values(64, 2.0);
  const devmem::Stream producer = devmem::stream();
  const devmem::Stream consumer = devmem::stream();
  const devmem::Event start = producer.record();
  const devmem::DeviceArray source = devmem::to_device(values, producer);
  const devmem::Event ready = producer.record();
  consumer.wait(ready);
  const devmem::DeviceArray copy = devmem::device_array_like(source, consumer);
  copy.copy_to_device(source, consumer);
  copy.slice(0, 0, 8).memset(0, consumer);
  consumer.synchronize();
  producer.synchronize();
  expect(devmem::elapsed_ms(start, ready) >= 0.0F, "elapsed time between two events");
  const std::vector<double> back = copy.to_vector<double>();
  for (std::size_t i = 0; i < back.size(); ++i) {
    expect(back[i] == (i < 8 ? 0.0 : values[i]), "D2D copy after an event, then a memset");
  }
}

/// Frees held back by defer_cleanup, then flushed past the queue's count limit, while views and
/// device-side copies (a reshape that cannot be a view) keep their memory alive.
void scenario_deferred_frees() {
  const devmem::DeviceArray keep = devmem::to_device(iota_values(12)).reshape({3, 4});
  {
    const devmem::DeferCleanup scope = devmem::defer_cleanup();
    for (int i = 0; i < 12; ++i) (void)devmem::to_device(iota_values(16, i));
    expect(devmem::current_context()->pending_deallocations() >= 12, "frees held back");
  }
  const devmem::DeviceArray flat = keep.transpose().ravel();  // a copy on the device
  (void)devmem::device_array<double>({4});  // the queue is over its limit: this flushes it
  const std::vector<double> values = flat.to_vector<double>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    expect(values[i] == static_cast<double>((i % 3) * 4 + i / 3), "ravel of a transpose");
  }
}

struct Scenario {
  const char* name;
  void (*run)();
};

DEVMEM_KERNEL void scale_in_shared_memory(devmem::ArrayView<double, 1> values, double factor) {
  DEVMEM_SHARED_ARRAY(staging, double, 32);
  const unsigned t = devmem::thread_idx().x;
  const std::int64_t i = devmem::global_id();
  staging[t] = i < values.shape(0) ? values[i] : 0.0;
  devmem::syncthreads();
  if (i < values.shape(0)) values[i] = staging[t] * factor;
}

/// A kernel over an uploaded array on a stream (the launch itself is an injectable call), a second
/// launch on the default stream, then the download.
void scenario_kernel_launch() {
  const std::vector<double> values = iota_values(100, 1.0);
  const devmem::Stream s = devmem::stream();
  const devmem::DeviceArray d = devmem::to_device(values, s);
  devmem::launch({4, 32, 0, s}, scale_in_shared_memory, d, 2.0);
  s.synchronize();
  devmem::launch({4, 32}, scale_in_shared_memory, d, 0.5);
  // The download on `s` runs after the default-stream kernel (the legacy default stream orders
  // every blocking stream), but only the default stream's synchronize reports its failure.
  devmem::default_stream().synchronize();
  const std::vector<double> back = d.to_vector<double>(s);
  for (std::size_t i = 0; i < back.size(); ++i) {
    expect(back[i] == values[i], "two kernels scaling by 2 and by 0.5");
  }
}

// One entry per scenario.
constexpr std::array kScenarios{
    Scenario{"to_device + copy_to_host", scenario_to_device_and_back},
    Scenario{"pinned scope", scenario_pinned_scope},
    Scenario{"mapped scope, pinned_array, mapped_array", scenario_mapped_scope_and_arrays},
    Scenario{"pool allocation under pressure", scenario_pool_under_pressure},
    Scenario{"SmartArray transfers", scenario_smart_array},
    Scenario{"streams and events", scenario_streams_and_events},
    Scenario{"deferred frees and device-side copies", scenario_deferred_frees},
    Scenario{"kernel launch", scenario_kernel_launch},
};

// ---- The sweep ----------------------------------------------------------------------------------

// devmem reports failures it cannot throw (destructors, implicit flushes) on stderr, and the sweep
// needs to see them.
using test_support::StderrCapture;

/// Device memory and statistics that every run must return to.
struct Baseline {
  std::int64_t device_memory_used = 0;
  std::int64_t device_bytes_in_use = 0;
  std::int64_t host_bytes_in_use = 0;
};

/// Finishes all work, frees everything queued and returns the reports of failed frees (those of
/// implicit flushes and the one of this flush, if it failed).
std::vector<std::string> settle(devmem::Context& context) {
  std::vector<std::string> reports;
  try {
    context.synchronize();
  } catch (const devmem::Error& e) {  // a stream error nobody synchronised for; reported below
    reports.emplace_back(e.what());
  }
  try {
    context.flush_deallocations();
  } catch (const devmem::Error& e) {
    reports.emplace_back(e.what());
  }
  for (std::string& report : context.take_deallocation_errors())
    reports.push_back(std::move(report));
  // Every run starts with an empty event pool: Stream::record() and stream-ordered allocations
  // create events only when the pool has none, so the calls counted in the clean run are the ones
  // a faulty run makes.
  devmem::release_cached_buffers();
  return reports;
}

Baseline measure(devmem::Context& context) {
  return Baseline{devmem::host::device_memory_used(), context.device_statistics().current_bytes,
                  context.host_statistics().current_bytes};
}

/// "(4096 bytes) failed" in a failed-free report: the size of the block devmem dropped.
std::int64_t dropped_bytes(const std::string& report) {
  const std::size_t failed = report.find(" bytes) failed");
  if (failed == std::string::npos) return 0;
  const std::size_t open = report.rfind('(', failed);
  if (open == std::string::npos) return 0;
  return std::strtoll(report.c_str() + open + 1, nullptr, 10);
}

struct SweepCounts {
  std::int64_t fault_points = 0;
  std::int64_t thrown = 0;
  std::int64_t absorbed_and_reported = 0;
};

class Sweeper {
 public:
  explicit Sweeper(std::shared_ptr<devmem::Context> context) : context_(std::move(context)) {}

  /// Sweeps one scenario; returns the number of problems found.
  int sweep(const Scenario& scenario, SweepCounts& counts) {
    problems_ = 0;
    const std::array<std::int64_t, kCallKinds> calls = clean_run_counts(scenario);
    if (problems_ != 0) return problems_;
    std::int64_t points = 0;
    for (std::size_t k = 0; k < kCallKinds; ++k) {
      const auto kind = static_cast<Call>(k);
      for (std::int64_t nth = 1; nth <= calls[k]; ++nth) {
        faulty_run(scenario, kind, nth, Status::Injected, 1, counts);
        ++points;
        if (kind == Call::Allocate || kind == Call::HostAllocate) {
          // From the nth call on, every allocation reports out of memory, so devmem's flush and
          // single retry cannot succeed either.
          faulty_run(scenario, kind, nth, Status::MemoryAllocation, 1 << 20, counts);
          ++points;
        }
      }
    }
    counts.fault_points += points;
    std::printf("fault_sweep: %-45s %4lld fault points, %s\n", scenario.name,
                static_cast<long long>(points), problems_ == 0 ? "ok" : "PROBLEMS");
    return problems_;
  }

 private:
  /// The scenario, then freeing what it released: deferred frees are calls that can fail too.
  void run_and_free(const Scenario& scenario) {
    scenario.run();
    context_->synchronize();
    context_->flush_deallocations();
  }

  std::array<std::int64_t, kCallKinds> clean_run_counts(const Scenario& scenario) {
    std::array<std::int64_t, kCallKinds> calls{};
    (void)settle(*context_);
    const Baseline before = measure(*context_);
    devmem::host::reset_call_counts();
    try {
      run_and_free(scenario);
    } catch (const std::exception& e) {
      problem(scenario, "clean run", std::string("failed: ") + e.what());
      return calls;
    }
    for (std::size_t k = 0; k < kCallKinds; ++k) {
      calls[k] = devmem::host::call_count(static_cast<Call>(k));
    }
    const std::vector<std::string> reports = settle(*context_);
    for (const std::string& report : reports) problem(scenario, "clean run", "reported: " + report);
    check_baseline(scenario, "clean run", before, 0);
    return calls;
  }

  void faulty_run(const Scenario& scenario, Call kind, std::int64_t nth, Status status,
                  std::int64_t count, SweepCounts& counts) {
    const std::string point = std::string(devmem::host::to_string(kind)) + " #" +
                              std::to_string(nth) + " (" +
                              std::string(devmem::host::to_string(status)) + ")";
    // A lasting out-of-memory report fails devmem's retry too, so the final error may name a
    // later call of the same kind; any other fault fails exactly call `nth`.
    const std::string marker =
        status == Status::MemoryAllocation
            ? " of " + std::string(devmem::host::to_string(kind)) + " (fail_nth)"
            : "injected failure of call " + std::to_string(nth) + " of " +
                  std::string(devmem::host::to_string(kind)) + " ";
    (void)settle(*context_);
    const Baseline before = measure(*context_);

    std::optional<std::string> thrown;
    std::string wrong_exception;
    std::vector<std::string> reports;
    std::string stderr_text;
    {
      StderrCapture capture;
      devmem::host::fail_nth(kind, nth, status, count);
      try {
        run_and_free(scenario);
      } catch (const devmem::OutOfMemory& e) {
        thrown = e.what();
        if (status != Status::MemoryAllocation) wrong_exception = "OutOfMemory for a non-OOM fault";
      } catch (const devmem::BackendError& e) {
        thrown = e.what();
        if (status == Status::MemoryAllocation) {
          wrong_exception = "BackendError instead of OutOfMemory";
        } else if (e.code() != static_cast<int>(status)) {
          wrong_exception = "BackendError with code " + std::to_string(e.code());
        }
      } catch (const devmem::Error& e) {
        thrown = e.what();
        wrong_exception = "a devmem::Error that is neither BackendError nor OutOfMemory";
      } catch (const std::exception& e) {
        thrown = e.what();
        wrong_exception = "not a devmem::Error";
      }
      devmem::host::clear_failures();
      reports = settle(*context_);
      stderr_text = capture.finish();
    }

    const auto names_fault = [&](const std::string& text) {
      return text.find(marker) != std::string::npos;
    };
    if (thrown) {
      if (!wrong_exception.empty()) {
        problem(scenario, point, wrong_exception + ": " + *thrown);
      } else if (!names_fault(*thrown)) {
        problem(scenario, point, "the exception does not name the failed call: " + *thrown);
      }
      ++counts.thrown;
    } else {
      // The failure was absorbed: it must have been reported somewhere, unless it was an
      // out-of-memory report that devmem's flush-and-retry legitimately got past.
      bool reported = names_fault(stderr_text);
      for (const std::string& report : reports) reported = reported || names_fault(report);
      if (!reported) {
        problem(scenario, point, "the failure was neither thrown nor reported");
      }
      ++counts.absorbed_and_reported;
    }

    // A failed free drops its block (memory_manager.hpp): the simulated device keeps it, and the
    // report says how large it was. Exactly one call failed, so at most one block was dropped;
    // the same report may reach several places (an implicit flush's goes to stderr and to
    // take_deallocation_errors). Only device blocks count toward device_memory_used.
    std::int64_t dropped_device_bytes = 0;
    if (kind == Call::Deallocate) {
      std::vector<std::string> texts = reports;
      if (thrown) texts.push_back(*thrown);
      texts.push_back(stderr_text);
      for (const std::string& text : texts) {
        dropped_device_bytes = std::max(dropped_device_bytes, dropped_bytes(text));
      }
    }
    for (const std::string& report : reports) {
      if (!names_fault(report)) problem(scenario, point, "unrelated failure reported: " + report);
    }
    if (context_->pending_deallocations() != 0) {
      problem(scenario, point, "deallocations still pending after a flush");
    }
    check_baseline(scenario, point, before, dropped_device_bytes);

    // The next clean run must succeed (and leave nothing behind either).
    const Baseline after_fault = measure(*context_);
    try {
      scenario.run();
    } catch (const std::exception& e) {
      problem(scenario, point, std::string("the clean run after it failed: ") + e.what());
    }
    for (const std::string& report : settle(*context_)) {
      problem(scenario, point, "the clean run after it reported: " + report);
    }
    check_baseline(scenario, point + ", clean run after it", after_fault, 0);
  }

  void check_baseline(const Scenario& scenario, const std::string& point, const Baseline& before,
                      std::int64_t dropped_device_bytes) {
    const Baseline now = measure(*context_);
    if (now.device_memory_used != before.device_memory_used + dropped_device_bytes) {
      problem(scenario, point,
              "device memory in use " + std::to_string(now.device_memory_used) + ", expected " +
                  std::to_string(before.device_memory_used + dropped_device_bytes));
    }
    if (now.device_bytes_in_use != before.device_bytes_in_use) {
      problem(scenario, point,
              "device statistics: " + std::to_string(now.device_bytes_in_use) +
                  " bytes in use, expected " + std::to_string(before.device_bytes_in_use));
    }
    if (now.host_bytes_in_use != before.host_bytes_in_use) {
      problem(scenario, point,
              "host statistics: " + std::to_string(now.host_bytes_in_use) +
                  " bytes in use, expected " + std::to_string(before.host_bytes_in_use));
    }
  }

  void problem(const Scenario& scenario, const std::string& point, const std::string& what) {
    ++problems_;
    std::printf("fault_sweep: PROBLEM in '%s' at %s: %s\n", scenario.name, point.c_str(),
                what.c_str());
  }

  std::shared_ptr<devmem::Context> context_;
  int problems_ = 0;
};

}  // namespace

int main() {
  try {
    devmem::select_backend("host");
    Sweeper sweeper(devmem::current_context());
    SweepCounts counts;
    int problems = 0;
    for (const Scenario& scenario : kScenarios) problems += sweeper.sweep(scenario, counts);
    std::printf(
        "fault_sweep: %lld fault points swept over %zu scenarios: %lld ended in an exception "
        "naming the failed call, %lld were absorbed and reported; %d problem(s)\n",
        static_cast<long long>(counts.fault_points), kScenarios.size(),
        static_cast<long long>(counts.thrown), static_cast<long long>(counts.absorbed_and_reported),
        problems);
    return problems == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
  } catch (const std::exception& e) {
    std::printf("fault_sweep: error outside the sweep: %s\n", e.what());
    return EXIT_FAILURE;
  }
}

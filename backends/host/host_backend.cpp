// The host backend's implementation of the Backend interface: the simulated device (HostBackend;
// host_backend.hpp says what it simulates and why). This file holds its construction and errors,
// the lookups of its streams and events, how an operation is submitted to a stream, the devices,
// the streams, the events and the launches. The parts that stand apart have files of their own:
// device and page-locked host memory (host_memory.cpp), copies and memsets (host_copy.cpp),
// streams' workers (host_stream.cpp), the legacy default stream's queued work
// (host_default_stream.cpp), events' records (host_event.cpp), parallel copies
// (host_parallel_copy.cpp), managed memory (host_managed.cpp), IPC (host_ipc.cpp), kernels
// (host_kernel*.cpp) and the controls (host_controls.cpp).
#include "backends/host/host_backend.hpp"

#include "core/backend_factories.hpp"

#include <devmem/byte_size.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <new>
#include <system_error>
#include <thread>

#include <sys/mman.h>

namespace devmem {

std::unique_ptr<Backend> make_host_backend() {
  return std::make_unique<host::HostBackend>();
}

namespace host {
namespace {

std::atomic<HostBackend*> g_live_instance{nullptr};

constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

std::int64_t clamp_to_int64(std::size_t value) noexcept {
  return value > static_cast<std::size_t>(kInt64Max) ? kInt64Max : static_cast<std::int64_t>(value);
}

}  // namespace

// ---- Construction, errors and lookups -----------------------------------------------------------

HostBackend::HostBackend()
    : device_count_(detail::configured_device_count()),
      devices_(static_cast<std::size_t>(device_count_)),
      default_streams_(std::make_unique<DefaultStream[]>(static_cast<std::size_t>(device_count_))) {
  HostBackend* expected = nullptr;
  g_live_instance.compare_exchange_strong(expected, this, std::memory_order_acq_rel);
}

HostBackend::~HostBackend() {
  HostBackend* expected = this;
  g_live_instance.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);

  // First: queued default-stream work may wait for markers on the other streams, whose workers
  // still run until they are shut down below.
  stop_default_streams();
  std::map<NativeStream, std::shared_ptr<HostStream>> streams;
  {
    const std::lock_guard lock(streams_mutex_);
    streams.swap(streams_);
  }
  for (auto& [handle, stream] : streams) stream->shutdown();

  const std::lock_guard lock(memory_mutex_);
  // A later backend at this address must not trust this one's allocations.
  g_allocations_freed.fetch_add(1, std::memory_order_acq_rel);
  for (const auto& [address, exported] : exports_)
    unshare(reinterpret_cast<void*>(address), exported);
  for (const auto& [address, imported] : imports_) {
    static_cast<void>(::munmap(reinterpret_cast<void*>(address), imported.mapped));
  }
  for (DeviceMemory& memory : devices_) {
    for (const auto& [address, bytes] : memory.allocations) {
      ::operator delete(reinterpret_cast<void*>(address), std::align_val_t{kDeviceAlignment});
    }
  }
  for (const auto& [bytes, ptr] : cached_blocks_) {
    ::operator delete(ptr, std::align_val_t{kDeviceAlignment});
  }
  for (const auto& [address, range] : host_allocations_) {
    ::operator delete(reinterpret_cast<void*>(address), std::align_val_t{kPageSize});
  }
  for (const auto& [address, range] : managed_) {
    ::operator delete(reinterpret_cast<void*>(address), std::align_val_t{kManagedAlignment});
  }
}

HostBackend* HostBackend::live_instance() noexcept {
  return g_live_instance.load(std::memory_order_acquire);
}

BackendError HostBackend::make_error(const char* function, Status status,
                                     std::string_view details) {
  const auto code = static_cast<int>(status);
  const std::string_view code_name = to_string(status);
  return BackendError("host", function, code, std::string(code_name),
                      fmt::format("host {}: {} ({}): {}", function, code_name, code, details));
}

std::exception_ptr HostBackend::injected_error(const char* function, Call kind,
                                               const detail::Injection& injection, int device,
                                               std::size_t bytes) {
  const std::string request =
      fmt::format("injected failure of call {} of {} (fail_nth)", injection.nth, to_string(kind));
  if (injection.status == Status::MemoryAllocation &&
      (kind == Call::Allocate || kind == Call::HostAllocate || kind == Call::AllocateManaged)) {
    return std::make_exception_ptr(
        OutOfMemory(fmt::format("host {}: out of memory allocating {} ({} bytes) on device {} ({})",
                                function, format_bytes(bytes), bytes, device, request),
                    clamp_to_int64(bytes)));
  }
  return std::make_exception_ptr(make_error(function, injection.status, request));
}

void HostBackend::throw_injected(const char* function, Call kind,
                                 const detail::Injection& injection, int device,
                                 std::size_t bytes) {
  std::rethrow_exception(injected_error(function, kind, injection, device, bytes));
}

void HostBackend::check_device(const char* function, int device) const {
  if (device_count_ == 0) {
    throw NoDevice(fmt::format("host {}: no device: DEVMEM_HOST_DEVICE_COUNT is 0", function));
  }
  if (device < 0 || device >= device_count_) {
    fail(function, Status::InvalidDevice, "device {} does not exist (device count {})", device,
         device_count_);
  }
}

std::shared_ptr<HostStream> HostBackend::find_stream(const char* function, int device,
                                                     NativeStream stream) {
  const std::lock_guard lock(streams_mutex_);
  const auto it = streams_.find(stream);
  if (it == streams_.end()) {
    fail(function, Status::InvalidResourceHandle, "{} is not a stream of the host backend",
         fmt::ptr(stream));
  }
  if (it->second->device() != device) {
    fail(function, Status::InvalidResourceHandle, "stream {} belongs to device {}, not device {}",
         fmt::ptr(stream), it->second->device(), device);
  }
  return it->second;
}

std::shared_ptr<HostEvent> HostBackend::find_event(const char* function, int device,
                                                   NativeEvent event) {
  const std::lock_guard lock(events_mutex_);
  const auto it = events_.find(event);
  if (it == events_.end()) {
    fail(function, Status::InvalidResourceHandle, "{} is not an event of the host backend",
         fmt::ptr(event));
  }
  if (device >= 0 && it->second->device() != device) {
    fail(function, Status::InvalidResourceHandle, "event {} belongs to device {}, not device {}",
         fmt::ptr(event), it->second->device(), device);
  }
  return it->second;
}

std::vector<std::shared_ptr<HostStream>> HostBackend::streams_of(int device) {
  std::vector<std::shared_ptr<HostStream>> result;
  const std::lock_guard lock(streams_mutex_);
  for (const auto& [handle, stream] : streams_) {
    if (device < 0 || stream->device() == device) result.push_back(stream);
  }
  return result;
}

void HostBackend::wait_for_queued_work(int device) {
  // Errors stay stored on their streams: they belong to that stream's next synchronize/query.
  wait_for_default_streams(device);
  for (const auto& stream : streams_of(device)) stream->wait_idle();
}

void HostBackend::submit(const char* function, Call kind, int device, NativeStream stream,
                         const detail::Injection& injection, HostStream::Operation op,
                         OnDefault on_default) {
  // Like a real asynchronous failure, an injected one of a queued operation happens when the
  // operation would run: the operation is dropped and its error takes its place in the queue, to
  // be reported by the stream's next synchronize_stream / query_stream.
  const auto injected = [&] {
    return [error = injected_error(function, kind, injection, device)] {
      std::rethrow_exception(error);
    };
  };
  if (stream == nullptr) {
    if (on_default == OnDefault::Queue ||
        (on_default == OnDefault::QueueWhenBusy && default_busy(device))) {
      enqueue_default(function, device,
                      injection ? HostStream::Operation(injected()) : std::move(op));
      return;
    }
    if (injection) throw_injected(function, kind, injection, device);
    drain(device);
    op();
    return;
  }
  const std::shared_ptr<HostStream> target = find_stream(function, device, stream);
  enqueue_on(*target, injection ? HostStream::Operation(injected()) : std::move(op));
}

// ---- Devices ------------------------------------------------------------------------------------

std::string HostBackend::no_device_reason() {
  if (device_count_ > 0) return {};
  return "DEVMEM_HOST_DEVICE_COUNT is 0: the host backend simulates no device";
}

DeviceProperties HostBackend::properties(int device) {
  check_device("properties", device);
  DeviceProperties props;
  props.name = "devmem host simulator";
  props.architecture = "host";
  props.total_memory = detail::effective_capacity(device);
  props.warp_size = 32;
  props.max_threads_per_block = 1024;
  // An H100's limits: 48 KiB per block, 227 KiB once the kernel opts in (devmem::launch does).
  props.max_shared_memory_per_block = std::int64_t{48} * 1024;
  props.max_shared_memory_per_block_optin = std::int64_t{227} * 1024;
  props.multiprocessor_count = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  props.can_map_host_memory = true;
  props.unified_addressing = true;
  return props;
}

MemoryInfo HostBackend::memory_info(int device) {
  check_device("memory_info", device);
  const std::int64_t capacity = detail::effective_capacity(device);
  const std::lock_guard lock(memory_mutex_);
  const std::int64_t used = devices_[static_cast<std::size_t>(device)].used;
  return MemoryInfo{std::max<std::int64_t>(0, capacity - used), capacity};
}

std::int64_t HostBackend::device_memory_used(int device) {
  check_device("device_memory_used", device);
  const std::lock_guard lock(memory_mutex_);
  return devices_[static_cast<std::size_t>(device)].used;
}

AsyncPoolState HostBackend::async_pool_state(int device) {
  check_device("async_pool_state", device);
  const std::lock_guard lock(memory_mutex_);
  return devices_[static_cast<std::size_t>(device)].async_pool;
}

std::int64_t HostBackend::live_event_count(int device) {
  check_device("live_event_count", device);
  const std::lock_guard lock(events_mutex_);
  return std::count_if(events_.begin(), events_.end(),
                       [device](const auto& entry) { return entry.second->device() == device; });
}

// ---- Streams ------------------------------------------------------------------------------------

NativeStream HostBackend::create_stream(int device) {
  const detail::Injection injection = detail::begin_call(Call::CreateStream, device);
  if (injection) throw_injected("create_stream", Call::CreateStream, injection, device);
  check_device("create_stream", device);
  std::shared_ptr<HostStream> stream;
  try {
    stream = std::make_shared<HostStream>(device, &stream_work_);
  } catch (const std::system_error& error) {
    fail("create_stream", Status::MemoryAllocation, "cannot start the stream's worker thread: {}",
         error.what());
  }
  NativeStream handle = stream.get();
  const std::lock_guard lock(streams_mutex_);
  streams_.emplace(handle, std::move(stream));
  return handle;
}

void HostBackend::destroy_stream(int device, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::DestroyStream, device);
  if (injection) throw_injected("destroy_stream", Call::DestroyStream, injection, device);
  check_device("destroy_stream", device);
  if (stream == nullptr) {
    fail("destroy_stream", Status::InvalidResourceHandle, "the default stream cannot be destroyed");
  }
  std::shared_ptr<HostStream> target = find_stream("destroy_stream", device, stream);
  {
    const std::lock_guard lock(streams_mutex_);
    // Another thread may have destroyed it since find_stream; only one of them erases it.
    if (streams_.erase(stream) == 0) {
      fail("destroy_stream", Status::InvalidResourceHandle,
           "{} is not a stream of the host backend", fmt::ptr(stream));
    }
  }
  target->shutdown();  // runs the queued work, joins the worker
  // Report an asynchronous failure that nobody has seen yet (a GPU would throw it from the next
  // synchronize, which never came): the same error (function, code), its message saying so. The
  // stream is destroyed either way.
  if (std::exception_ptr error = target->take_error()) {
    try {
      std::rethrow_exception(error);
    } catch (const BackendError& e) {
      throw BackendError(e.backend(), e.function(), e.code(), e.code_name(),
                         fmt::format("{} (never synchronized: the stream was destroyed before a "
                                     "synchronize reported this failure of its work)",
                                     e.what()),
                         e.persistence());
    }
  }
}

void HostBackend::synchronize_stream(int device, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::SynchronizeStream, device);
  if (injection) throw_injected("synchronize_stream", Call::SynchronizeStream, injection, device);
  check_device("synchronize_stream", device);
  if (stream == nullptr) {
    // The legacy default stream waits for the device's blocking streams, and reports the failure
    // of its own queued work (a kernel launched on it) once.
    drain(device);
    rethrow_default_failure(device);
    return;
  }
  const std::shared_ptr<HostStream> target = find_stream("synchronize_stream", device, stream);
  target->wait_idle();
  if (std::exception_ptr error = target->take_error()) std::rethrow_exception(error);
}

bool HostBackend::query_stream(int device, NativeStream stream) {
  check_device("query_stream", device);
  if (stream == nullptr) {
    rethrow_default_failure(device);
    if (default_busy(device)) return false;
    const auto streams = streams_of(device);
    return std::all_of(streams.begin(), streams.end(), [](const auto& s) { return s->idle(); });
  }
  const std::shared_ptr<HostStream> target = find_stream("query_stream", device, stream);
  if (std::exception_ptr error = target->take_error()) std::rethrow_exception(error);
  return target->idle();
}

// ---- Events -------------------------------------------------------------------------------------

NativeEvent HostBackend::create_event(int device) {
  const detail::Injection injection = detail::begin_call(Call::CreateEvent, device);
  if (injection) throw_injected("create_event", Call::CreateEvent, injection, device);
  return create_completion_event(device);
}

// Not a counted call: how many completion events devmem creates depends on how soon earlier work
// completes (they are reused once it has), so counting them would make fault_nth's numbering of
// the user's own events vary from run to run. The failure of the call that uses them
// (record_event) is counted and injectable.
NativeEvent HostBackend::create_completion_event(int device) {
  check_device("create_event", device);
  auto event = std::make_shared<HostEvent>(device);
  NativeEvent handle = event.get();
  const std::lock_guard lock(events_mutex_);
  events_.emplace(handle, std::move(event));
  return handle;
}

void HostBackend::destroy_event(int device, NativeEvent event) {
  check_device("destroy_event", device);
  // A pending record is owned by its marker in the stream, so destroying the event while it is
  // pending is safe (CUDA allows it too).
  static_cast<void>(find_event("destroy_event", device, event));
  const std::lock_guard lock(events_mutex_);
  if (events_.erase(event) == 0) {
    fail("destroy_event", Status::InvalidResourceHandle, "{} is not an event of the host backend",
         fmt::ptr(event));
  }
}

void HostBackend::record_event(int device, NativeEvent event, NativeStream stream) {
  const detail::Injection injection = detail::begin_call(Call::RecordEvent, device);
  if (injection) throw_injected("record_event", Call::RecordEvent, injection, device);
  check_device("record_event", device);
  const std::shared_ptr<HostEvent> target = find_event("record_event", device, event);
  auto record = std::make_shared<EventRecord>();
  if (stream == nullptr) {
    if (default_busy(device)) {  // after the queued launches, without waiting for them
      target->set_latest(record);
      enqueue_default("record_event", device, [record = std::move(record)] { record->complete(); });
      return;
    }
    drain(device);
    record->complete();
    target->set_latest(std::move(record));
    return;
  }
  const std::shared_ptr<HostStream> queue = find_stream("record_event", device, stream);
  target->set_latest(record);
  enqueue_on(*queue, [record = std::move(record)] { record->complete(); });
}

void HostBackend::synchronize_event(int device, NativeEvent event) {
  check_device("synchronize_event", device);
  if (const auto record = find_event("synchronize_event", device, event)->latest()) record->wait();
}

bool HostBackend::query_event(int device, NativeEvent event) {
  check_device("query_event", device);
  const auto record = find_event("query_event", device, event)->latest();
  return record == nullptr || record->is_complete();
}

float HostBackend::elapsed_ms(int device, NativeEvent start, NativeEvent end) {
  check_device("elapsed_ms", device);
  const auto completed_record = [&](NativeEvent event) {
    auto record = find_event("elapsed_ms", device, event)->latest();
    if (record == nullptr) {
      fail("elapsed_ms", Status::InvalidValue, "event {} has never been recorded", fmt::ptr(event));
    }
    if (!record->is_complete()) {
      fail("elapsed_ms", Status::NotReady, "event {} has not completed yet", fmt::ptr(event));
    }
    return record;
  };
  const auto first = completed_record(start);
  const auto second = completed_record(end);
  return std::chrono::duration<float, std::milli>(second->completion_time() -
                                                  first->completion_time())
      .count();
}

void HostBackend::stream_wait_event(int device, NativeStream stream, NativeEvent event) {
  check_device("stream_wait_event", device);
  // The event may belong to another device (cross-device dependencies are allowed).
  // The record that is latest now is what the stream waits for, even if the event is recorded
  // again before the wait runs.
  const auto record = find_event("stream_wait_event", -1, event)->latest();
  if (stream == nullptr) {
    if (record == nullptr || record->is_complete()) return;
    if (default_busy(device)) {  // the default stream's later work waits, the host does not
      enqueue_default("stream_wait_event", device, [record] { record->wait(); });
      return;
    }
    record->wait();
    return;
  }
  const std::shared_ptr<HostStream> queue = find_stream("stream_wait_event", device, stream);
  if (record == nullptr || record->is_complete()) return;
  enqueue_on(*queue, [record] { record->wait(); });
}

void HostBackend::launch_host_function(int device, NativeStream stream, std::function<void()> fn) {
  check_device("launch_host_function", device);
  if (!fn) fail("launch_host_function", Status::InvalidValue, "empty function");
  submit("launch_host_function", Call::Count_, device, stream, detail::Injection{}, std::move(fn));
}

void HostBackend::launch_kernel(int device, NativeStream stream, HostStream::Operation run_grid) {
  const detail::Injection injection = detail::begin_call(Call::Launch, device);
  check_device("launch", device);
  submit("launch", Call::Launch, device, stream, injection, std::move(run_grid), OnDefault::Queue);
}

}  // namespace host
}  // namespace devmem

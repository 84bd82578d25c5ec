// Helpers shared by the host backend tests (test_host_backend.cpp, test_host_backend_streams.cpp,
// test_host_backend_faults.cpp): the backend under test, error checks, and RAII guards for the
// controls, device memory, streams, events and a gate that holds a stream's worker. A header of
// its own so that the three test files do not each carry a copy.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/config.hpp>
#include <devmem/error.hpp>
#include <devmem/host_controls.hpp>
#include <devmem/layout.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace host_backend_test {

using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;
using devmem::Backend;
using devmem::BackendError;
using devmem::CopyKind;
using devmem::HostAllocFlags;
using devmem::HostRegisterFlags;
using devmem::NativeEvent;
using devmem::NativeStream;
using devmem::host::Call;
using devmem::host::Status;
namespace host = devmem::host;
using namespace std::chrono_literals;

inline Backend& backend() {
  devmem::select_backend("host");
  return devmem::active_backend();
}

inline std::byte* bytes_of(void* ptr) {
  return static_cast<std::byte*>(ptr);
}

/// "0x7f12..." as {fmt} and glibc print a pointer, to find addresses in messages.
inline std::string hex(const void* ptr) {
  if (ptr == nullptr) return "0x0";  // glibc prints "(nil)"
  char text[32];
  std::snprintf(text, sizeof text, "%p", ptr);
  return text;
}

/// Runs `fn`, which must throw `E`, and returns the exception for inspection.
template <class E, class Fn>
E capture(Fn&& fn) {
  try {
    std::forward<Fn>(fn)();
  } catch (const E& error) {
    return error;
  }
  FAIL("the call did not throw the expected exception type");
  throw std::logic_error("unreachable");
}

inline void check_backend_error(const BackendError& error, const char* function, Status status) {
  CHECK(error.backend() == "host");
  CHECK(error.function() == function);
  CHECK(error.code() == static_cast<int>(status));
  CHECK(error.code_name() == host::to_string(status));
  const std::string prefix = std::string("host ") + function + ": " +
                             std::string(host::to_string(status)) + " (" +
                             std::to_string(static_cast<int>(status)) + "): ";
  CHECK_THAT(error.what(), StartsWith(prefix));
}

/// Leaves the host controls as it found them: no pending failures, the same capacity.
class ControlsGuard {
 public:
  ControlsGuard() : capacity_(host::device_memory_capacity()) {
    host::clear_failures();
    host::reset_call_counts();
  }
  ~ControlsGuard() {
    host::clear_failures();
    host::set_device_memory_capacity(capacity_);
  }
  ControlsGuard(const ControlsGuard&) = delete;
  ControlsGuard& operator=(const ControlsGuard&) = delete;

 private:
  std::int64_t capacity_;
};

/// Device memory freed at scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& b, std::size_t bytes, int device = 0)
      : backend_(b), device_(device), ptr_(b.allocate(device, bytes)) {}
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  [[nodiscard]] std::byte* get() const { return bytes_of(ptr_); }
  void release() {
    if (ptr_ == nullptr) return;
    try {
      backend_.deallocate(device_, std::exchange(ptr_, nullptr));
    } catch (...) {  // reported by the test that caused it
    }
  }

 private:
  Backend& backend_;
  int device_;
  void* ptr_;
};

/// A stream destroyed at scope exit (errors ignored: the test checks them itself).
class StreamHandle {
 public:
  explicit StreamHandle(Backend& b, int device = 0)
      : backend_(b), device_(device), stream_(b.create_stream(device)) {}
  ~StreamHandle() {
    if (stream_ == nullptr) return;
    try {
      backend_.destroy_stream(device_, stream_);
    } catch (...) {
    }
  }
  StreamHandle(const StreamHandle&) = delete;
  StreamHandle& operator=(const StreamHandle&) = delete;
  [[nodiscard]] NativeStream get() const { return stream_; }
  NativeStream release() { return std::exchange(stream_, nullptr); }

 private:
  Backend& backend_;
  int device_;
  NativeStream stream_;
};

class EventHandle {
 public:
  explicit EventHandle(Backend& b) : backend_(b), event_(b.create_event(0)) {}
  ~EventHandle() {
    if (event_ == nullptr) return;
    try {
      backend_.destroy_event(0, event_);
    } catch (...) {
    }
  }
  EventHandle(const EventHandle&) = delete;
  EventHandle& operator=(const EventHandle&) = delete;
  [[nodiscard]] NativeEvent get() const { return event_; }
  NativeEvent release() { return std::exchange(event_, nullptr); }

 private:
  Backend& backend_;
  NativeEvent event_;
};

/// Holds a stream's worker until open(): waiter() is a host function that blocks on the gate.
/// Declare gates after the streams they block so that unwinding opens them before the streams
/// are destroyed (destroying a stream waits for its work).
class Gate {
 public:
  Gate() = default;
  ~Gate() { open(); }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  [[nodiscard]] std::function<void()> waiter() const {
    return [state = state_] {
      std::unique_lock lock(state->mutex);
      state->opened.wait(lock, [&] { return state->is_open; });
    };
  }
  void open() {
    {
      const std::lock_guard lock(state_->mutex);
      state_->is_open = true;
    }
    state_->opened.notify_all();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable opened;
    bool is_open = false;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace host_backend_test

// Helpers shared by the conformance tests. Everything here uses only the public API, so the suite
// stays backend-neutral; the host-backend controls are touched only by HostControlsGuard, which
// tests tagged [host-only] use.
#pragma once

#include "../common/stderr_capture.hpp"

#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>
#include <devmem/host_controls.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace conformance {

using devmem::DType;
using devmem::Order;
using devmem::Shape;
using devmem::Slice;
using devmem::Strides;
using std::int64_t;

inline constexpr int64_t kKiB = int64_t{1} << 10;
inline constexpr int64_t kMiB = int64_t{1} << 20;

/// Matches an exception whose what() contains `needle` (Catch2 v2's Contains only matches strings).
class MessageContainsMatcher : public Catch::MatcherBase<std::exception> {
 public:
  explicit MessageContainsMatcher(std::string needle) : needle_(std::move(needle)) {}
  bool match(const std::exception& e) const override {
    return std::string(e.what()).find(needle_) != std::string::npos;
  }
  std::string describe() const override { return "message contains \"" + needle_ + "\""; }

 private:
  std::string needle_;
};
inline MessageContainsMatcher MessageContains(std::string needle) {
  return MessageContainsMatcher(std::move(needle));
}

/// Matches an exception whose what() starts with `prefix`.
class MessageStartsWithMatcher : public Catch::MatcherBase<std::exception> {
 public:
  explicit MessageStartsWithMatcher(std::string prefix) : prefix_(std::move(prefix)) {}
  bool match(const std::exception& e) const override {
    return std::string(e.what()).rfind(prefix_, 0) == 0;
  }
  std::string describe() const override { return "message starts with \"" + prefix_ + "\""; }

 private:
  std::string prefix_;
};
inline MessageStartsWithMatcher MessageStartsWith(std::string prefix) {
  return MessageStartsWithMatcher(std::move(prefix));
}

/// True when the suite runs against the host backend (the simulated device).
/// Deferred-deallocation queue limits: flush past `count` items or `ratio` of device memory.
inline devmem::DeallocationConfig limits(int64_t count, double ratio) {
  devmem::DeallocationConfig c;
  c.max_pending_count = count;
  c.max_pending_ratio = ratio;
  return c;
}

inline bool on_host_backend() {
  return devmem::backend_name() == "host";
}

inline DType f8() {
  return devmem::dtype_of<double>();
}
inline DType f4() {
  return devmem::dtype_of<float>();
}
inline DType i8() {
  return devmem::dtype_of<std::int64_t>();
}
inline DType i4() {
  return devmem::dtype_of<std::int32_t>();
}
inline DType u1() {
  return devmem::dtype_of<std::uint8_t>();
}

/// Restores the host backend's memory capacity and cancels pending fault injections when the
/// scope ends (also when a REQUIRE fails). Only for [host-only] tests.
class HostControlsGuard {
 public:
  HostControlsGuard() : capacity_(devmem::host::device_memory_capacity()) {
    devmem::host::clear_failures();
    // Finish earlier tests' asynchronous work and free what it released (deallocations are
    // deferred), so that the memory in use does not change under the test's feet.
    devmem::current_context()->synchronize();
    devmem::current_context()->flush_deallocations();
  }
  HostControlsGuard(const HostControlsGuard&) = delete;
  HostControlsGuard& operator=(const HostControlsGuard&) = delete;
  ~HostControlsGuard() {
    devmem::host::clear_failures();
    try {
      devmem::host::set_device_memory_capacity(capacity_);
    } catch (...) {  // a destructor must not throw; the capacity was valid when read
    }
  }

 private:
  int64_t capacity_;
};

/// Number of elements of a shape (1 for a 0-d shape).
inline int64_t count_of(const Shape& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

/// start, start + 1, ..., start + n - 1.
template <class T = double>
std::vector<T> iota_vec(int64_t n, T start = T{0}) {
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return v;
}

/// A new pageable host array of `shape` in `order` whose element at C-order position k is k.
template <class T = double>
devmem::HostArray iota_host(const Shape& shape, Order order = Order::C, T start = T{0}) {
  devmem::HostArray h(shape, devmem::dtype_of<T>(), order);
  std::vector<T> values = iota_vec<T>(count_of(shape), start);
  h.copy_from(devmem::HostArray::view(std::span<T>(values), shape));
  return h;
}

/// A new device array of `shape` in `order` whose element at C-order position k is k.
template <class T = double>
devmem::DeviceArray iota_device(const Shape& shape, Order order = Order::C,
                                const devmem::Stream& stream = {}, T start = T{0}) {
  devmem::DeviceArray d = devmem::device_array<T>(shape, order, stream);
  std::vector<T> values = iota_vec<T>(count_of(shape), start);
  d.copy_to_device(devmem::HostArray::view(std::span<T>(values), shape), stream);
  if (stream.is_specified()) stream.synchronize();
  return d;
}

/// A pageable host array in memory of its own pages (64 KiB aligned and rounded), zero-filled.
/// Registration works on whole pages on GPU backends, so arrays that are pinned, mapped or
/// registered separately in one test must not share a page.
inline devmem::HostArray page_aligned_host(const Shape& shape, const DType& dtype,
                                           Order order = Order::C) {
  constexpr std::size_t kAlign = 64 * 1024;
  const auto bytes =
      static_cast<std::size_t>(std::max<int64_t>(count_of(shape) * dtype.itemsize(), 1));
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* const p = std::aligned_alloc(kAlign, rounded);
  REQUIRE(p != nullptr);
  std::memset(p, 0, rounded);
  const std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });  // NOLINT(*-no-malloc)
  return devmem::HostArray::view(
      p, shape, dtype, devmem::layout::dense_strides(shape, dtype.itemsize(), order), owner);
}

/// page_aligned_host holding 0, 1, 2, ... in C order.
inline devmem::HostArray page_aligned_iota(const Shape& shape, Order order = Order::C) {
  devmem::HostArray h = page_aligned_host(shape, f8(), order);
  h.copy_from(iota_host(shape));
  return h;
}

/// Calls fn(index) for every index of `shape` in C order.
template <class Fn>
void for_each_index(const Shape& shape, Fn&& fn) {
  std::vector<int64_t> idx(shape.size(), 0);
  if (count_of(shape) == 0) return;
  for (;;) {
    fn(std::span<const int64_t>(idx));
    int k = static_cast<int>(shape.size()) - 1;
    for (; k >= 0; --k) {
      const auto kk = static_cast<std::size_t>(k);
      if (++idx[kk] < shape[kk]) break;
      idx[kk] = 0;
    }
    if (k < 0) return;
  }
}

/// The values a view with `shape`, byte `strides` and byte `offset` (of element 0 from the buffer
/// start) sees in a buffer whose element i holds i (itemsize `itemsize`), in C order. Computed
/// independently of devmem's layout code, from the strides the test itself expects.
inline std::vector<double> gather_iota(const Shape& shape, const Strides& strides, int64_t offset,
                                       int64_t itemsize = 8) {
  std::vector<double> out;
  for_each_index(shape, [&](std::span<const int64_t> idx) {
    int64_t byte = offset;
    for (std::size_t k = 0; k < idx.size(); ++k) byte += idx[k] * strides[k];
    out.push_back(static_cast<double>(byte / itemsize));
  });
  return out;
}

/// Elements of a host array in C order.
template <class T = double>
std::vector<T> host_values(const devmem::HostArray& h) {
  return h.to_vector<T>();
}

/// Elements of a device array in C order (copied through the default stream of the array).
template <class T = double>
std::vector<T> device_values(const devmem::DeviceArray& d) {
  return d.to_vector<T>();
}

}  // namespace conformance

// ---- Deallocation queue and memory managers -----------------------------------------------------

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>

namespace conformance {

/// Saves the current context's memory manager and deallocation config and empties the queue (so a
/// test starts from nothing pending); at scope end flushes, drops the reported free failures and
/// restores both. Declare it before a HostControlsGuard, so that injected failures are cleared
/// before the final flush.
class MemoryStateGuard {
 public:
  MemoryStateGuard()
      : ctx_(devmem::current_context()),
        manager_(ctx_->memory_manager()),
        config_(ctx_->deallocation_config()) {
    ctx_->synchronize();
    ctx_->flush_deallocations();
    (void)ctx_->take_deallocation_errors();
  }
  MemoryStateGuard(const MemoryStateGuard&) = delete;
  MemoryStateGuard& operator=(const MemoryStateGuard&) = delete;
  ~MemoryStateGuard() {
    try {
      ctx_->synchronize();
      ctx_->flush_deallocations();
    } catch (...) {  // a destructor must not throw; the test has failed already
    }
    try {
      (void)ctx_->take_deallocation_errors();
      ctx_->set_memory_manager(manager_);
      ctx_->set_deallocation_config(config_);
    } catch (...) {
    }
  }
  [[nodiscard]] const std::shared_ptr<devmem::Context>& context() const noexcept { return ctx_; }
  /// The manager that was current when the guard was made.
  [[nodiscard]] const std::shared_ptr<devmem::MemoryManager>& saved_manager() const noexcept {
    return manager_;
  }

 private:
  std::shared_ptr<devmem::Context> ctx_;
  std::shared_ptr<devmem::MemoryManager> manager_;
  devmem::DeallocationConfig config_;
};

/// A direct manager that records every call: the pointers it handed out and took back, in order,
/// and the streams allocate() and deallocate() were given (as StreamUse: a Stream itself would keep
/// the stream alive). `fail_allocations` makes the next that many allocate() calls throw
/// OutOfMemory without calling the backend; `fail_deallocation_at` makes the nth deallocate() call
/// from now (1-based) free the memory and then throw a BackendError.
class RecordingManager : public devmem::DirectMemoryManager {
 public:
  struct Block {
    void* ptr;
    std::size_t bytes;
    friend bool operator==(const Block&, const Block&) = default;
  };
  /// What a manager can see of a stream: its native handle (nullptr for the default stream),
  /// whether it is the default stream, and whether it belongs to the manager's context.
  struct StreamUse {
    devmem::NativeStream handle;
    bool is_default;
    bool same_context;
    friend bool operator==(const StreamUse&, const StreamUse&) = default;
    friend std::ostream& operator<<(std::ostream& os, const StreamUse& u) {
      return os << "{handle " << u.handle << (u.is_default ? ", default" : "")
                << (u.same_context ? "" : ", another context") << "}";
    }
  };
  explicit RecordingManager(devmem::Context& context, std::string name = "recording")
      : DirectMemoryManager(context), name_(std::move(name)) {}
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }

  [[nodiscard]] void* allocate(std::size_t bytes, const devmem::Stream& stream) override {
    {
      const std::lock_guard lock(mutex_);
      ++allocate_calls_;
      if (fail_allocations_ > 0) {
        --fail_allocations_;
        throw devmem::OutOfMemory(
            "recording manager: injected out of memory (" + std::to_string(bytes) + " bytes)",
            static_cast<std::int64_t>(bytes));
      }
    }
    void* const p = DirectMemoryManager::allocate(bytes, stream);
    const std::lock_guard lock(mutex_);
    allocations_.push_back({p, bytes});
    allocation_streams_.push_back(use_of(stream));
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes, const devmem::Stream& stream) override {
    bool fail = false;
    {
      const std::lock_guard lock(mutex_);
      if (fail_deallocation_at_ > 0) fail = --fail_deallocation_at_ == 0;
    }
    DirectMemoryManager::deallocate(ptr, bytes, stream);
    const std::lock_guard lock(mutex_);
    deallocations_.push_back({ptr, bytes});
    deallocation_streams_.push_back(use_of(stream));
    if (fail) {
      throw devmem::BackendError("recording", "deallocate", 999, "Injected",
                                 "recording manager: injected deallocation failure");
    }
  }
  [[nodiscard]] void* host_allocate(std::size_t bytes, devmem::HostAllocFlags flags) override {
    void* const p = DirectMemoryManager::host_allocate(bytes, flags);
    const std::lock_guard lock(mutex_);
    host_allocations_.push_back({p, bytes});
    host_flags_.push_back(flags);
    return p;
  }
  void host_deallocate(void* ptr, std::size_t bytes, devmem::HostAllocFlags flags) override {
    DirectMemoryManager::host_deallocate(ptr, bytes, flags);
    const std::lock_guard lock(mutex_);
    host_deallocations_.push_back({ptr, bytes});
    host_deallocation_flags_.push_back(flags);
  }

  void fail_next_allocations(int n) {
    const std::lock_guard lock(mutex_);
    fail_allocations_ = n;
  }
  void fail_deallocation_at(int nth) {
    const std::lock_guard lock(mutex_);
    fail_deallocation_at_ = nth;
  }
  [[nodiscard]] int allocate_calls() const {
    const std::lock_guard lock(mutex_);
    return allocate_calls_;
  }
  [[nodiscard]] std::vector<Block> allocations() const {
    const std::lock_guard lock(mutex_);
    return allocations_;
  }
  [[nodiscard]] std::vector<Block> deallocations() const {
    const std::lock_guard lock(mutex_);
    return deallocations_;
  }
  [[nodiscard]] std::vector<Block> host_allocations() const {
    const std::lock_guard lock(mutex_);
    return host_allocations_;
  }
  [[nodiscard]] std::vector<devmem::HostAllocFlags> host_flags() const {
    const std::lock_guard lock(mutex_);
    return host_flags_;
  }
  [[nodiscard]] std::vector<Block> host_deallocations() const {
    const std::lock_guard lock(mutex_);
    return host_deallocations_;
  }
  [[nodiscard]] std::vector<devmem::HostAllocFlags> host_deallocation_flags() const {
    const std::lock_guard lock(mutex_);
    return host_deallocation_flags_;
  }
  /// The stream of each allocate() call that succeeded, in order (matches allocations()).
  [[nodiscard]] std::vector<StreamUse> allocation_streams() const {
    const std::lock_guard lock(mutex_);
    return allocation_streams_;
  }
  /// The stream of each deallocate() call, in order (matches deallocations()).
  [[nodiscard]] std::vector<StreamUse> deallocation_streams() const {
    const std::lock_guard lock(mutex_);
    return deallocation_streams_;
  }
  /// Pointers given back by deallocate(), in order.
  [[nodiscard]] std::vector<void*> freed() const {
    std::vector<void*> out;
    for (const Block& b : deallocations()) out.push_back(b.ptr);
    return out;
  }

 private:
  std::string name_;
  mutable std::mutex mutex_;
  int allocate_calls_ = 0;
  int fail_allocations_ = 0;
  int fail_deallocation_at_ = 0;
  [[nodiscard]] StreamUse use_of(const devmem::Stream& stream) const {
    return {stream.native_handle(), stream.is_default(), stream.context().get() == &context()};
  }

  std::vector<Block> allocations_;
  std::vector<Block> deallocations_;
  std::vector<StreamUse> allocation_streams_;
  std::vector<StreamUse> deallocation_streams_;
  std::vector<Block> host_allocations_;
  std::vector<devmem::HostAllocFlags> host_flags_;
  std::vector<Block> host_deallocations_;
  std::vector<devmem::HostAllocFlags> host_deallocation_flags_;
};

/// Makes a RecordingManager the current context's manager and returns it.
inline std::shared_ptr<RecordingManager> use_recording_manager() {
  auto ctx = devmem::current_context();
  auto manager = std::make_shared<RecordingManager>(*ctx);
  ctx->set_memory_manager(manager);
  return manager;
}

/// Makes a new PoolMemoryManager the current context's manager and returns it.
inline std::shared_ptr<devmem::PoolMemoryManager> use_pool_manager(
    devmem::PoolMemoryManager::Options options = {}) {
  auto ctx = devmem::current_context();
  auto manager = std::make_shared<devmem::PoolMemoryManager>(*ctx, options);
  ctx->set_memory_manager(manager);
  return manager;
}

/// Blocks a stream: work enqueued on it after the gate waits until open() or the destructor (or,
/// so that a broken library cannot hang the suite, a safety timeout, which timed_out() reports).
/// Declare it after the stream, so that it opens before the stream is destroyed.
class StreamGate {
 public:
  explicit StreamGate(const devmem::Stream& stream,
                      std::chrono::seconds safety = std::chrono::seconds(20))
      : state_(std::make_shared<State>()) {
    state_->opened = state_->promise.get_future().share();
    std::shared_ptr<State> state = state_;
    devmem::active_backend().launch_host_function(
        stream.context()->device(), stream.native_handle(), [state, safety] {
          state->reached.store(true);
          if (state->opened.wait_for(safety) == std::future_status::timeout) {
            state->timed_out.store(true);
          }
        });
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate() { open(); }
  void open() {
    if (open_) return;
    open_ = true;
    state_->promise.set_value();
  }
  [[nodiscard]] bool timed_out() const noexcept { return state_->timed_out.load(); }

 private:
  struct State {
    std::promise<void> promise;
    std::shared_future<void> opened;
    std::atomic<bool> reached{false};
    std::atomic<bool> timed_out{false};
  };
  std::shared_ptr<State> state_;
  bool open_ = false;
};

using test_support::StderrCapture;

/// How a pointer appears in devmem's messages ("0x7f..." as fmt prints a void*).
inline std::string pointer_text(const void* p) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%p", p);
  return buffer;
}

}  // namespace conformance

// ---- Running one test case in a child process (environment variables read at startup) ----------

#include <sys/wait.h>

#include <fstream>
#include <sstream>

namespace conformance {

/// Runs this test executable again on the single test case `test_name` with the environment
/// assignments `env` added (e.g. "DEVMEM_MEMORY_MANAGER=pool"), so that settings read when the
/// first context is created can be tested. Returns the child's exit status; its output goes to
/// `output`.
inline int run_self_with_env(const std::string& env, const std::string& test_name,
                             std::string& output) {
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(n > 0);
  exe[n] = '\0';
  char path[] = "/tmp/devmem-conformance-child-XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  ::close(fd);
  const std::string command = "env " + env + " '" + std::string(exe) + "' '" + test_name + "' > '" +
                              std::string(path) + "' 2>&1";
  const int status = std::system(command.c_str());  // NOLINT(cert-env33-c)
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  output = text.str();
  ::unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace conformance

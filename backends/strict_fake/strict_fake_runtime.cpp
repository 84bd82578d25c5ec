// The strict fake runtime's calls (strict_fake_api.hpp says what it enforces). One runtime per
// process, never destroyed (like a vendor runtime, it outlives static objects that release into
// it). One mutex guards its state; copies, memsets, kernels and host functions run without it, on
// whichever thread drives the queues at a synchronisation point (or at enqueue when not deferred).
// Over 800 lines on purpose: it is one vendor runtime (devices, streams, events, memory kinds,
// capture, the deferred queues and their order), and its rules share that one state and mutex.
#include "backends/strict_fake/strict_fake_api.hpp"
#include "backends/strict_fake/strict_fake_controls.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace devmem::strict_fake {

struct Capture {
  bool invalidated = false;
  bool ended = false;
  std::size_t nodes = 0;
  StreamState* origin = nullptr;
};

struct EventRecord {
  bool completed = false;
  double time_ms = 0.0;
};

struct Op {
  std::function<void()> run;
  bool under_lock = false;     // trivial bookkeeping (event records, pool returns): run locked
  bool host_function = false;  // runs on the runtime's host-function thread, like CUDA's
  std::vector<std::pair<std::shared_ptr<StreamState>, std::uint64_t>> stream_deps;
  std::vector<std::shared_ptr<const EventRecord>> event_deps;
};

struct StreamState {
  int device = 0;
  bool legacy = false;
  std::deque<Op> queue;
  std::uint64_t enqueued = 0;
  std::uint64_t completed = 0;
  bool busy = false;
  std::shared_ptr<Capture> capture;
};

struct EventState {
  int device = 0;
  bool timing = true;
  // The record that is current (null: never recorded). Each record has its own completion, as in
  // CUDA: a wait or synchronize waits for the record current when it was called, even when the
  // event is recorded again later on another stream and that record completes first (devmem's
  // event pool re-records recycled events while their earlier records may still be pending).
  std::shared_ptr<EventRecord> latest;
  std::shared_ptr<Capture> captured;
};

namespace {

using S = StrictFakeApi::S;

struct Block {
  std::size_t bytes = 0;
  int device = 0;
  // mallocAsync: set when the allocating stream reaches the allocation (null: cudaMalloc, valid at
  // once). Work of another stream that runs before then faults (see enqueue_transfer).
  std::shared_ptr<std::atomic<bool>> reached;
};

thread_local int t_current = 0;
std::atomic<bool> g_missing_kernel_image[kDevices] = {};  // set_missing_kernel_image
std::atomic<std::size_t> g_strided_copy_launches{0};
std::atomic<const char*> g_strided_copy_architectures{""};  // set_strided_copy_architectures
thread_local int t_last_error = kOk;

// The handle of the legacy default stream: resolved to the current device's legacy stream.
StreamState g_legacy_handle;

std::uint64_t env_u64(const char* name, bool* found) {
  const char* const text = std::getenv(name);
  *found = text != nullptr && *text != '\0';
  return *found ? std::strtoull(text, nullptr, 10) : 0;
}

struct Runtime {
  std::mutex mu;
  std::condition_variable cv;
  std::map<StreamState*, std::shared_ptr<StreamState>> streams;  // live, created streams
  std::vector<std::shared_ptr<StreamState>> draining;            // destroyed with work left
  std::shared_ptr<StreamState> legacy[kDevices];
  std::map<EventState*, std::shared_ptr<EventState>> events;
  std::vector<std::shared_ptr<Capture>> captures;  // not yet ended
  std::mt19937_64 rng;
  std::uint64_t seed = 0;
  bool deferred = true;
  std::atomic<int> sticky{kOk};
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  // Device memory: one memfd mapped twice. `device_base` (PROT_NONE) is what pointers handed out
  // point into; `alias_base` (read-write) is where the fake itself reads and writes it.
  char* device_base = nullptr;
  char* alias_base = nullptr;
  std::size_t arena_bytes = 0;
  std::map<std::size_t, std::size_t> free_ranges[kDevices];  // offset -> bytes
  std::size_t used[kDevices] = {};
  std::map<const char*, Block> blocks;  // live device allocations by start

  std::map<const char*, std::size_t> pinned;  // hostAlloc: start -> bytes (mmap'd)
  // What counters() reports: bytes live now and at the last reset_counters(), and the counts.
  std::size_t device_live = 0;
  std::size_t device_level = 0;
  std::size_t pinned_live = 0;
  std::size_t pinned_level = 0;
  Counters counters;
  std::map<const char*, std::size_t> registered;         // hostRegister: start -> bytes
  std::deque<std::pair<char*, std::size_t>> quarantine;  // freed pinned memory, poisoned
  std::size_t quarantine_bytes = 0;
  std::set<std::pair<int, int>> peers_enabled;
  // Host functions run on a thread of the runtime (as CUDA runs them), never on the thread that
  // synchronizes: a host function that blocks blocks its stream, not the caller.
  std::deque<std::pair<std::shared_ptr<StreamState>, Op>> host_functions;
  std::condition_variable host_function_cv;

  Runtime() {
    bool found = false;
    seed = env_u64("DEVMEM_STRICT_FAKE_SEED", &found);
    if (!found) seed = std::random_device{}();
    rng.seed(seed);
    bool deferred_set = false;
    deferred = env_u64("DEVMEM_STRICT_FAKE_DEFERRED", &deferred_set) != 0 || !deferred_set;
    // DEVMEM_STRICT_FAKE_QUIET=1: no line, for programs that must print nothing (the process-exit
    // tests).
    bool quiet_set = false;
    if (env_u64("DEVMEM_STRICT_FAKE_QUIET", &quiet_set) == 0 || !quiet_set) {
      std::fprintf(
          stderr,
          "devmem strict-fake: %s execution, seed %llu (replay: DEVMEM_STRICT_FAKE_SEED=%llu)"
          "\n",
          deferred ? "deferred" : "immediate", static_cast<unsigned long long>(seed),
          static_cast<unsigned long long>(seed));
    }
    arena_bytes = kDeviceBytes * kDevices;
    const int fd = memfd_create("devmem-strict-fake", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(arena_bytes)) != 0) {
      std::perror("devmem strict-fake: memfd");
      std::abort();
    }
    void* const device = mmap(nullptr, arena_bytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    void* const alias =
        mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (device == MAP_FAILED || alias == MAP_FAILED) {
      std::perror("devmem strict-fake: mmap");
      std::abort();
    }
    close(fd);
    device_base = static_cast<char*>(device);
    alias_base = static_cast<char*>(alias);
    for (int d = 0; d < kDevices; ++d) {
      free_ranges[d].emplace(static_cast<std::size_t>(d) * kDeviceBytes, kDeviceBytes);
      legacy[d] = std::make_shared<StreamState>();
      legacy[d]->device = d;
      legacy[d]->legacy = true;
    }
    std::thread([this] { run_host_functions(); }).detach();  // the runtime is never destroyed
  }

  [[noreturn]] void run_host_functions() {
    std::unique_lock lock(mu);
    for (;;) {
      host_function_cv.wait(lock, [this] { return !host_functions.empty(); });
      auto [s, op] = std::move(host_functions.front());
      host_functions.pop_front();
      lock.unlock();
      op.run();
      op = Op{};
      lock.lock();
      finish(s);
    }
  }
  void finish(const std::shared_ptr<StreamState>& s) {
    s->busy = false;
    ++s->completed;
    std::erase_if(draining, [](const std::shared_ptr<StreamState>& d) {
      return d->queue.empty() && !d->busy;
    });
    cv.notify_all();
  }

  bool in_arena(const void* p) const {
    const auto* c = static_cast<const char*>(p);
    return c >= device_base && c < device_base + arena_bytes;
  }
  /// Where the fake itself touches `p`: the alias of device memory, else `p` (host memory).
  char* host_view(const void* p) const {
    auto* c = const_cast<char*>(static_cast<const char*>(p));
    return in_arena(p) ? alias_base + (c - device_base) : c;
  }
  /// The live device allocation containing [p, p + bytes), or nullptr.
  const std::pair<const char* const, Block>* block_of(const void* p, std::size_t bytes) const {
    const auto* c = static_cast<const char*>(p);
    auto it = blocks.upper_bound(c);
    if (it == blocks.begin()) return nullptr;
    --it;
    if (c + bytes > it->first + it->second.bytes) return nullptr;
    return &*it;
  }
  static bool contains(const std::map<const char*, std::size_t>& ranges, const void* p) {
    const auto* c = static_cast<const char*>(p);
    auto it = ranges.upper_bound(c);
    return it != ranges.begin() && (--it, c < it->first + it->second);
  }
  bool pageable(const void* p) const {
    return !in_arena(p) && !contains(pinned, p) && !contains(registered, p);
  }

  // ---- Allocator: first fit, so a freed block is handed out again (and shows its poison) ----
  static constexpr std::size_t kAlign = 512;
  char* allocate(int device, std::size_t bytes) {
    const std::size_t size = (bytes + kAlign - 1) / kAlign * kAlign;
    auto& ranges = free_ranges[device];
    for (auto it = ranges.begin(); it != ranges.end(); ++it) {
      if (it->second < size) continue;
      const std::size_t offset = it->first;
      const std::size_t rest = it->second - size;
      ranges.erase(it);
      if (rest != 0) ranges.emplace(offset + size, rest);
      used[device] += size;
      device_live += size;
      if (device_live > device_level) {
        counters.device_peak = std::max(counters.device_peak, device_live - device_level);
      }
      char* const ptr = device_base + offset;
      blocks[ptr] = Block{bytes, device, nullptr};
      return ptr;
    }
    return nullptr;
  }
  /// Poisons and returns a block that is no longer in `blocks`.
  void give_back(const char* ptr, Block block) {
    const std::size_t size = (block.bytes + kAlign - 1) / kAlign * kAlign;
    std::memset(host_view(ptr), kPoison, block.bytes);
    used[block.device] -= size;
    device_live -= size;
    auto& ranges = free_ranges[block.device];
    auto offset = static_cast<std::size_t>(ptr - device_base);
    std::size_t length = size;
    auto next = ranges.lower_bound(offset);
    if (next != ranges.end() && next->first == offset + length) {
      length += next->second;
      next = ranges.erase(next);
    }
    if (next != ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        length += prev->second;
        ranges.erase(prev);
      }
    }
    ranges.emplace(offset, length);
  }

  // ---- Streams ----
  std::shared_ptr<StreamState> resolve(StreamState* s) {
    if (s == &g_legacy_handle) return legacy[t_current];
    const auto it = streams.find(s);
    return it == streams.end() ? nullptr : it->second;
  }
  std::shared_ptr<EventState> resolve(EventState* e) {
    const auto it = events.find(e);
    return it == events.end() ? nullptr : it->second;
  }
  template <class Fn>
  void for_each_stream(Fn&& fn) {
    for (auto& l : legacy) fn(l);
    for (auto& [handle, s] : streams) fn(s);
    for (auto& s : draining) fn(s);
  }
  [[nodiscard]] bool deps_met(const Op& op) const {
    for (const auto& [s, n] : op.stream_deps) {
      if (s->completed < n) return false;
    }
    for (const auto& record : op.event_deps) {
      if (!record->completed) return false;
    }
    return true;
  }

  /// Runs queued work until `done()` holds (or nothing can run): a random runnable stream's
  /// first operation at a time when deferred, else the first runnable. `block`: wait for work
  /// running elsewhere (a synchronisation); else return when only that is left (a query).
  template <class Pred>
  void run_until(std::unique_lock<std::mutex>& lock, Pred done, bool block = true) {
    std::vector<std::shared_ptr<StreamState>> runnable;
    while (!done()) {
      runnable.clear();
      bool busy = false;
      for_each_stream([&](const std::shared_ptr<StreamState>& s) {
        busy = busy || s->busy;
        if (!s->busy && !s->queue.empty() && deps_met(s->queue.front())) runnable.push_back(s);
      });
      if (runnable.empty()) {
        if (!busy || !block) return;  // nothing can ever run, or the caller does not wait
        cv.wait(lock);
        continue;
      }
      const std::size_t pick = deferred ? static_cast<std::size_t>(rng() % runnable.size()) : 0;
      const std::shared_ptr<StreamState> s = runnable[pick];
      Op op = std::move(s->queue.front());
      s->queue.pop_front();
      s->busy = true;
      if (op.host_function) {
        host_functions.emplace_back(s, std::move(op));
        host_function_cv.notify_one();
        continue;
      }
      if (op.under_lock) {
        op.run();
      } else {
        lock.unlock();
        op.run();
        op = Op{};  // the function's captures are released outside the lock too
        lock.lock();
      }
      finish(s);
    }
  }
  void run_all(std::unique_lock<std::mutex>& lock, bool block = true) {
    run_until(
        lock,
        [this] {
          bool idle = true;
          for_each_stream([&](const std::shared_ptr<StreamState>& s) {
            idle = idle && s->queue.empty() && !s->busy;
          });
          return idle;
        },
        block);
  }
  /// Everything enqueued so far on the blocking streams of `device` (what legacy-stream work
  /// waits for), as dependencies.
  void device_marker(int device, Op& op, const StreamState* except) {
    for_each_stream([&](const std::shared_ptr<StreamState>& s) {
      if (s.get() != except && s->device == device && s->completed < s->enqueued) {
        op.stream_deps.emplace_back(s, s->enqueued);
      }
    });
  }

  // ---- Capture ----
  void invalidate(const std::shared_ptr<Capture>& c) {
    if (c) c->invalidated = true;
  }
  /// Global-mode captures forbid potentially unsafe calls (allocation, freeing, registration)
  /// from every thread: the call fails and the captures are invalidated.
  bool unsafe_during_capture() {
    bool any = false;
    for (auto& c : captures) {
      c->invalidated = true;
      any = true;
    }
    return any;
  }
  /// Ends capture `c`: its streams and events leave it.
  void end(const std::shared_ptr<Capture>& c) {
    c->ended = true;
    for_each_stream([&](const std::shared_ptr<StreamState>& x) {
      if (x->capture == c) x->capture.reset();
    });
    for (auto& [handle, e] : events) {
      if (e->captured == c) e->captured.reset();
    }
    std::erase(captures, c);
  }
  /// The active capture of a stream of `device` (legacy-stream work would join it implicitly).
  std::shared_ptr<Capture> capture_on_device(int device) {
    std::shared_ptr<Capture> found;
    for (auto& [handle, s] : streams) {
      if (s->device == device && s->capture && !s->capture->ended) found = s->capture;
    }
    return found;
  }
};

Runtime& rt() {
  static auto* const runtime = new Runtime;  // never destroyed, see the file comment
  return *runtime;
}

// Guarded by Runtime::mu: the last strided-copy temporary returned to the backend's cache.
ReturnedScratch g_returned_scratch;

S fail(Error code, const char* function) {
  t_last_error = code;
  return {code, function};
}

/// Every call starts here: the sticky error, once injected, is every call's answer.
bool sticky(const char* function, S* out) {
  const int code = rt().sticky.load(std::memory_order_acquire);
  if (code == kOk) return false;
  *out = fail(static_cast<Error>(code), function);
  return true;
}

/// What a call that ran queued work returns: the sticky error if that work faulted.
S after_work(const char* function, S status) {
  S sticky_status{};
  return sticky(function, &sticky_status) ? sticky_status : status;
}

#define STRICT_FAKE_PROLOGUE(name)         \
  static constexpr const char* kFn = name; \
  if (S sticky_status{}; sticky(kFn, &sticky_status)) return sticky_status

/// Admits an operation on `s` (capture and legacy-stream rules); `captured` says it went into a
/// graph instead of the queue.
S admit(Runtime& r, const std::shared_ptr<StreamState>& s, const char* function, bool* captured) {
  *captured = false;
  if (s->capture) {
    if (s->capture->invalidated) return fail(kStreamCaptureInvalidated, function);
    ++s->capture->nodes;
    *captured = true;
    return {kOk, function};
  }
  if (s->legacy) {
    if (auto c = r.capture_on_device(s->device)) {
      c->invalidated = true;
      return fail(kStreamCaptureImplicit, function);
    }
  }
  return {kOk, function};
}

/// Enqueues `op` on `s` with the legacy stream's implicit ordering; not deferred: runs it now.
/// Returns the operation's sequence number on its stream.
std::uint64_t enqueue(Runtime& r, std::unique_lock<std::mutex>& lock,
                      const std::shared_ptr<StreamState>& s, Op op) {
  if (s->legacy) {
    r.device_marker(s->device, op, s.get());
  } else {
    const auto& l = r.legacy[s->device];
    if (l->completed < l->enqueued) op.stream_deps.emplace_back(l, l->enqueued);
  }
  s->queue.push_back(std::move(op));
  const std::uint64_t seq = ++s->enqueued;
  if (!r.deferred) r.run_all(lock, /*block=*/false);
  return seq;
}

/// A copy-like operation on `stream`: pageable sources are read at enqueue (like the vendor's
/// staging), pageable destinations make the call wait for the copy (like cudaMemcpyAsync into
/// pageable memory). `body` gets the host views of dst and src.
S enqueue_transfer(const char* function, void* dst, const void* src, std::size_t src_span,
                   StreamState* stream, std::function<void(char*, const char*)> body) {
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, function);
  bool captured = false;
  if (S a = admit(r, s, function, &captured); a.code != kOk || captured) return a;
  char* const dst_view = r.host_view(dst);
  const char* src_view = r.host_view(src);
  std::shared_ptr<std::vector<char>> snapshot;
  if (r.pageable(src) && src_span != 0) {
    snapshot = std::make_shared<std::vector<char>>(src_view, src_view + src_span);
    src_view = snapshot->data();
  }
  const bool wait = r.pageable(dst);
  // Stream-ordered allocations (mallocAsync) this work touches that their stream has not reached:
  // if the work runs first, it is not ordered after the allocation, and faults (a GPU would
  // silently use bytes the pool may still owe to another stream's pending work).
  std::vector<std::shared_ptr<std::atomic<bool>>> unreached;
  for (const void* p : {static_cast<const void*>(dst), src}) {
    const auto* block = r.in_arena(p) ? r.block_of(p, 1) : nullptr;
    if (block != nullptr && block->second.reached && !block->second.reached->load()) {
      unreached.push_back(block->second.reached);
    }
  }
  Op op;
  op.run = [body = std::move(body), dst_view, src_view, snapshot, unreached] {
    for (const auto& reached : unreached) {
      if (!reached->load()) {
        rt().sticky.store(kIllegalAddress, std::memory_order_release);
        return;
      }
    }
    body(dst_view, src_view);
  };
  const std::uint64_t seq = enqueue(r, lock, s, std::move(op));
  if (wait) r.run_until(lock, [&] { return s->completed >= seq; });
  return {kOk, function};
}

/// [p, p + span) is usable by the device: live device memory, or host memory.
bool valid_side(const Runtime& r, const void* p, std::size_t span) {
  return !r.in_arena(p) || span == 0 || r.block_of(p, span) != nullptr;
}

}  // namespace

// ---- Devices ----

S StrictFakeApi::getDeviceCount(int* count) {
  STRICT_FAKE_PROLOGUE("strictFakeGetDeviceCount");
  static_cast<void>(rt());
  *count = kDevices;
  return {kOk, kFn};
}
S StrictFakeApi::getDevice(int* device) {
  STRICT_FAKE_PROLOGUE("strictFakeGetDevice");
  *device = t_current;
  return {kOk, kFn};
}
S StrictFakeApi::setDevice(int device) {
  STRICT_FAKE_PROLOGUE("strictFakeSetDevice");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  t_current = device;
  return {kOk, kFn};
}
S StrictFakeApi::getDeviceProperties(DeviceProp* prop, int device) {
  STRICT_FAKE_PROLOGUE("strictFakeGetDeviceProperties");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  *prop = DeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "devmem strict fake GPU %d", device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = 49152;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = 4;
  prop->canMapHostMemory = 1;
  prop->major = 9;
  prop->minor = 0;
  return {kOk, kFn};
}
S StrictFakeApi::memGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  STRICT_FAKE_PROLOGUE("strictFakeMemGetInfo");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *total_bytes = kDeviceBytes;
  *free_bytes = kDeviceBytes - r.used[t_current];
  return {kOk, kFn};
}

// ---- Memory ----

S StrictFakeApi::malloc(void** ptr, std::size_t bytes) {
  STRICT_FAKE_PROLOGUE("strictFakeMalloc");
  *ptr = nullptr;
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (bytes == 0) return {kOk, kFn};
  *ptr = r.allocate(t_current, bytes);
  return *ptr != nullptr ? S{kOk, kFn} : fail(kOutOfMemory, kFn);
}
S StrictFakeApi::free(void* ptr) {
  STRICT_FAKE_PROLOGUE("strictFakeFree");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (ptr == nullptr) return {kOk, kFn};
  const auto it = r.blocks.find(static_cast<const char*>(ptr));
  if (it == r.blocks.end()) return fail(kInvalidValue, kFn);
  const Block block = it->second;
  r.blocks.erase(it);
  ++r.counters.frees;
  r.run_all(lock);  // like cudaFree: the device's work has completed first
  r.give_back(static_cast<const char*>(ptr), block);
  return {kOk, kFn};
}
S StrictFakeApi::mallocAsync(void** ptr, std::size_t bytes, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMallocAsync");
  *ptr = nullptr;
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  if (bytes == 0) return {kOk, kFn};
  *ptr = r.allocate(s->device, bytes);
  if (*ptr == nullptr) return fail(kOutOfMemory, kFn);
  if (!captured) {
    // Valid in the stream's order only, as CUDA's stream-ordered allocator promises: until the
    // stream reaches it, the pool may still be handing the bytes over from another stream's free.
    auto reached = std::make_shared<std::atomic<bool>>(false);
    r.blocks[static_cast<const char*>(*ptr)].reached = reached;
    Op op;
    op.run = [reached] { reached->store(true); };
    op.under_lock = true;
    enqueue(r, lock, s, std::move(op));
  }
  return {kOk, kFn};
}
S StrictFakeApi::freeAsync(void* ptr, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeFreeAsync");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  const auto it = r.blocks.find(static_cast<const char*>(ptr));
  if (it == r.blocks.end()) return fail(kInvalidValue, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  const Block block = it->second;
  const char* const start = it->first;
  r.blocks.erase(it);
  Op op;
  // The block goes back to the pool, poisoned, when the stream reaches the free (under the
  // lock: the allocator is the runtime's state). Captured: when the graph would run, which the
  // fake never does, so the block stays out of the pool.
  op.run = [&r, start, block] { r.give_back(start, block); };
  op.under_lock = true;
  if (!captured) enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
S StrictFakeApi::memoryPoolsSupported(int device, bool* supported) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceGetAttribute");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  *supported = true;
  return {kOk, kFn};
}
// The fake's pool hands freed blocks back at once (its first-fit allocator): the settings are
// checked, not kept.
S StrictFakeApi::setPoolReleaseThreshold(int device, std::uint64_t /*bytes*/) {
  STRICT_FAKE_PROLOGUE("strictFakeMemPoolSetAttribute");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::trimPoolTo(int device, std::size_t /*bytes*/) {
  STRICT_FAKE_PROLOGUE("strictFakeMemPoolTrimTo");
  if (device < 0 || device >= kDevices) return fail(kInvalidDevice, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::hostAlloc(void** ptr, std::size_t bytes, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeHostAlloc");
  *ptr = nullptr;
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (bytes == 0) return {kOk, kFn};
  void* const p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return fail(kOutOfMemory, kFn);
  *ptr = p;
  r.pinned.emplace(static_cast<const char*>(p), bytes);
  r.pinned_live += bytes;
  if (r.pinned_live > r.pinned_level) {
    r.counters.pinned_peak = std::max(r.counters.pinned_peak, r.pinned_live - r.pinned_level);
  }
  return {kOk, kFn};
}
S StrictFakeApi::hostFree(void* ptr) {
  STRICT_FAKE_PROLOGUE("strictFakeFreeHost");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (ptr == nullptr) return {kOk, kFn};
  const auto it = r.pinned.find(static_cast<const char*>(ptr));
  if (it == r.pinned.end()) return fail(kInvalidValue, kFn);
  const std::size_t bytes = it->second;
  r.pinned.erase(it);
  r.pinned_live -= bytes;
  ++r.counters.frees;
  r.run_all(lock);  // like cudaFreeHost: the device's work has completed first
  // Poisoned and kept mapped for a while, so a late reader (host or DMA) reads 0xDB.
  std::memset(ptr, kPoison, bytes);
  r.quarantine.emplace_back(static_cast<char*>(ptr), bytes);
  r.quarantine_bytes += bytes;
  while (r.quarantine_bytes > (std::size_t{64} << 20) && r.quarantine.size() > 1) {
    const auto [old, old_bytes] = r.quarantine.front();
    r.quarantine.pop_front();
    r.quarantine_bytes -= old_bytes;
    munmap(old, old_bytes);
  }
  return {kOk, kFn};
}
S StrictFakeApi::hostRegister(void* ptr, std::size_t bytes, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeHostRegister");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (ptr == nullptr || bytes == 0 || r.in_arena(ptr)) return fail(kInvalidValue, kFn);
  const auto* c = static_cast<const char*>(ptr);
  auto it = r.registered.lower_bound(c);
  const bool overlaps_next = it != r.registered.end() && it->first < c + bytes;
  const bool overlaps_prev = it != r.registered.begin() && (--it, it->first + it->second > c);
  if (overlaps_next || overlaps_prev) return fail(kHostMemoryAlreadyRegistered, kFn);
  r.registered.emplace(c, bytes);
  return {kOk, kFn};
}
S StrictFakeApi::hostUnregister(void* ptr) {
  STRICT_FAKE_PROLOGUE("strictFakeHostUnregister");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.unsafe_during_capture()) return fail(kStreamCaptureUnsupported, kFn);
  if (r.registered.erase(static_cast<const char*>(ptr)) == 0) {
    return fail(kHostMemoryNotRegistered, kFn);
  }
  return {kOk, kFn};
}
S StrictFakeApi::hostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeHostGetDevicePointer");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *device_ptr = nullptr;
  if (!Runtime::contains(r.pinned, host_ptr) && !Runtime::contains(r.registered, host_ptr)) {
    return fail(kInvalidValue, kFn);
  }
  *device_ptr = host_ptr;  // unified addressing: mapped memory has one address
  return {kOk, kFn};
}
S StrictFakeApi::isPageable(const void* ptr, bool* pageable) {
  STRICT_FAKE_PROLOGUE("strictFakePointerGetAttributes");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *pageable = r.pageable(ptr);
  return {kOk, kFn};
}
S StrictFakeApi::pointerDevice(const void* ptr, int* device) {
  STRICT_FAKE_PROLOGUE("strictFakePointerGetAttributes");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  const auto* block = r.in_arena(ptr) ? r.block_of(ptr, 1) : nullptr;
  *device = block != nullptr ? block->second.device : -1;
  return {kOk, kFn};
}

// ---- Streams and events ----

StrictFakeApi::Stream StrictFakeApi::defaultStream() noexcept {
  return &g_legacy_handle;
}
S StrictFakeApi::streamCreate(Stream* stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamCreate");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  auto s = std::make_shared<StreamState>();
  s->device = t_current;
  *stream = s.get();
  r.streams.emplace(s.get(), std::move(s));
  return {kOk, kFn};
}
S StrictFakeApi::streamDestroy(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamDestroy");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  const auto it = r.streams.find(stream);
  if (it == r.streams.end()) return fail(kInvalidResourceHandle, kFn);
  // A capture the stream began ends with it (invalidated), so that it does not forbid
  // allocations for the rest of the process.
  if (const std::shared_ptr<Capture> c = it->second->capture; c && c->origin == stream) {
    c->invalidated = true;
    r.end(c);
  }
  it->second->capture.reset();
  // Like CUDA: queued work still runs; the stream's resources go when it has.
  if (!it->second->queue.empty() || it->second->busy) r.draining.push_back(it->second);
  r.streams.erase(it);
  return {kOk, kFn};
}
S StrictFakeApi::streamSynchronize(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamSynchronize");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  ++r.counters.stream_synchronizes;
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (s->capture) {
    r.invalidate(s->capture);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  if (s->legacy) {
    if (auto c = r.capture_on_device(s->device)) {
      c->invalidated = true;
      return fail(kStreamCaptureImplicit, kFn);
    }
    // The legacy stream waits for the device's blocking streams: all their work so far.
    Op marker;
    r.device_marker(s->device, marker, nullptr);
    r.run_until(lock, [&] { return r.deps_met(marker); });
    return after_work(kFn, {kOk, kFn});
  }
  const std::uint64_t target = s->enqueued;
  r.run_until(lock, [&] { return s->completed >= target; });
  return after_work(kFn, {kOk, kFn});
}
S StrictFakeApi::streamQuery(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamQuery");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (s->capture) {
    r.invalidate(s->capture);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  const std::uint64_t target = s->enqueued;
  // A query is a chance for the device to make progress: sometimes all of it, sometimes none.
  if (r.rng() % 2 == 0) {
    r.run_until(
        lock, [&] { return s->completed >= target; }, /*block=*/false);
  }
  return after_work(kFn, s->completed >= target ? S{kOk, kFn} : S{kNotReady, kFn});
}
S StrictFakeApi::streamWaitEvent(Stream stream, Event event, unsigned) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamWaitEvent");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  const auto e = r.resolve(event);
  if (!s || !e) return fail(kInvalidResourceHandle, kFn);
  if (e->captured && !e->captured->ended) {
    if (s->capture == e->captured) {
      ++s->capture->nodes;
      return {kOk, kFn};
    }
    if (!s->capture && !s->legacy) {  // the stream joins the capture (a fork)
      s->capture = e->captured;
      ++s->capture->nodes;
      return {kOk, kFn};
    }
    r.invalidate(e->captured);
    r.invalidate(s->capture);
    return fail(kStreamCaptureIsolation, kFn);
  }
  if (s->capture) {
    // An event recorded outside the capture: a dependency across the capture's boundary.
    r.invalidate(s->capture);
    return fail(kStreamCaptureIsolation, kFn);
  }
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  Op op;
  op.run = [] {};
  op.under_lock = true;
  if (e->latest && !e->latest->completed) op.event_deps.push_back(e->latest);
  enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
S StrictFakeApi::streamIsCapturing(Stream stream, bool* capturing) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamIsCapturing");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *capturing = false;
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  // The legacy stream while a blocking stream of its device captures: CUDA answers 906 and
  // leaves that capture valid (the query enqueues nothing).
  if (s->legacy && r.capture_on_device(s->device)) return fail(kStreamCaptureImplicit, kFn);
  *capturing = static_cast<bool>(s->capture);
  return {kOk, kFn};
}
S StrictFakeApi::streamBeginCapture(Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamBeginCapture");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (s->legacy) return fail(kStreamCaptureUnsupported, kFn);
  if (s->capture) return fail(kIllegalState, kFn);
  auto c = std::make_shared<Capture>();
  c->origin = s.get();
  s->capture = c;
  r.captures.push_back(std::move(c));
  return {kOk, kFn};
}
S StrictFakeApi::streamEndCapture(Stream stream, std::size_t* nodes) {
  STRICT_FAKE_PROLOGUE("strictFakeStreamEndCapture");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *nodes = 0;
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  if (!s->capture || s->capture->origin != s.get()) return fail(kIllegalState, kFn);
  const std::shared_ptr<Capture> c = s->capture;
  r.end(c);
  *nodes = c->nodes;
  return c->invalidated ? fail(kStreamCaptureInvalidated, kFn) : S{kOk, kFn};
}
S StrictFakeApi::eventCreate(Event* event) {
  return eventCreateWithFlags(event, 0);
}
S StrictFakeApi::eventCreateWithFlags(Event* event, unsigned flags) {
  STRICT_FAKE_PROLOGUE("strictFakeEventCreate");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  auto e = std::make_shared<EventState>();
  e->device = t_current;
  e->timing = (flags & kEventDisableTiming) == 0;
  *event = e.get();
  r.events.emplace(e.get(), std::move(e));
  return {kOk, kFn};
}
S StrictFakeApi::eventDestroy(Event event) {
  STRICT_FAKE_PROLOGUE("strictFakeEventDestroy");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  // Queued records and waits keep the state alive; the handle is invalid from now on.
  if (r.events.erase(event) == 0) return fail(kInvalidResourceHandle, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::eventRecord(Event event, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeEventRecord");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  const auto e = r.resolve(event);
  if (!s || !e) return fail(kInvalidResourceHandle, kFn);
  // CUDA: an event and the stream it is recorded on must belong to the same device.
  if (e->device != s->device) return fail(kInvalidResourceHandle, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk) return a;
  if (captured) {
    e->captured = s->capture;
    return {kOk, kFn};
  }
  e->captured.reset();
  auto record = std::make_shared<EventRecord>();
  e->latest = record;
  Op op;
  op.under_lock = true;
  op.run = [&r, record] {
    record->completed = true;
    record->time_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.start)
            .count();
  };
  enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}
S StrictFakeApi::eventSynchronize(Event event) {
  STRICT_FAKE_PROLOGUE("strictFakeEventSynchronize");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  ++r.counters.event_synchronizes;
  const auto e = r.resolve(event);
  if (!e) return fail(kInvalidResourceHandle, kFn);
  if (e->captured) {
    r.invalidate(e->captured);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  const std::shared_ptr<const EventRecord> target = e->latest;
  r.run_until(lock, [&] { return !target || target->completed; });
  return after_work(kFn, {kOk, kFn});
}
S StrictFakeApi::eventQuery(Event event) {
  STRICT_FAKE_PROLOGUE("strictFakeEventQuery");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto e = r.resolve(event);
  if (!e) return fail(kInvalidResourceHandle, kFn);
  if (e->captured) {
    r.invalidate(e->captured);
    return fail(kStreamCaptureUnsupported, kFn);
  }
  const std::shared_ptr<const EventRecord> target = e->latest;
  const auto done = [&] { return !target || target->completed; };
  if (r.rng() % 2 == 0) r.run_until(lock, done, /*block=*/false);
  return after_work(kFn, done() ? S{kOk, kFn} : S{kNotReady, kFn});
}
S StrictFakeApi::eventElapsedTime(float* ms, Event start, Event end) {
  STRICT_FAKE_PROLOGUE("strictFakeEventElapsedTime");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  *ms = 0.0f;
  const auto a = r.resolve(start);
  const auto b = r.resolve(end);
  if (!a || !b) return fail(kInvalidResourceHandle, kFn);
  // CUDA: both timing events of one device, both recorded; NotReady until both have completed.
  if (a->device != b->device || !a->timing || !b->timing) {
    return fail(kInvalidResourceHandle, kFn);
  }
  if (!a->latest || !b->latest) return fail(kInvalidResourceHandle, kFn);
  if (!a->latest->completed || !b->latest->completed) return fail(kNotReady, kFn);
  *ms = static_cast<float>(b->latest->time_ms - a->latest->time_ms);
  return {kOk, kFn};
}
S StrictFakeApi::launch_host_function(Stream stream, void (*fn)(void*), void* user) {
  STRICT_FAKE_PROLOGUE("strictFakeLaunchHostFunc");
  Runtime& r = rt();
  std::unique_lock lock(r.mu);
  const auto s = r.resolve(stream);
  if (!s) return fail(kInvalidResourceHandle, kFn);
  bool captured = false;
  if (S a = admit(r, s, kFn, &captured); a.code != kOk || captured) return a;
  Op op;
  op.run = [fn, user] { fn(user); };
  op.host_function = true;
  enqueue(r, lock, s, std::move(op));
  return {kOk, kFn};
}

// ---- Several devices ----

S StrictFakeApi::deviceCanAccessPeer(int* can_access, int device, int peer) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceCanAccessPeer");
  if (device < 0 || device >= kDevices || peer < 0 || peer >= kDevices) {
    return fail(kInvalidDevice, kFn);
  }
  *can_access = device != peer ? 1 : 0;
  return {kOk, kFn};
}
S StrictFakeApi::deviceEnablePeerAccess(int peer) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceEnablePeerAccess");
  if (peer < 0 || peer >= kDevices) return fail(kInvalidDevice, kFn);
  if (peer == t_current) return fail(kInvalidDevice, kFn);
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (!r.peers_enabled.insert({t_current, peer}).second) return fail(kPeerAlreadyEnabled, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::deviceDisablePeerAccess(int peer) {
  STRICT_FAKE_PROLOGUE("strictFakeDeviceDisablePeerAccess");
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  if (r.peers_enabled.erase({t_current, peer}) == 0) return fail(kPeerNotEnabled, kFn);
  return {kOk, kFn};
}
S StrictFakeApi::memcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                 std::size_t bytes, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpyPeerAsync");
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    const auto* d = r.block_of(dst, bytes);
    const auto* s = r.block_of(src, bytes);
    // Both sides must be device memory of the devices named.
    if (!r.in_arena(dst) || !r.in_arena(src) || d == nullptr || s == nullptr ||
        d->second.device != dst_device || s->second.device != src_device) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, src, bytes, stream,
                          [bytes](char* out, const char* in) { std::memmove(out, in, bytes); });
}

// ---- Copies ----

S StrictFakeApi::memcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind,
                             Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpyAsync");
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, bytes) || !valid_side(r, src, bytes)) return fail(kInvalidValue, kFn);
  }
  return enqueue_transfer(kFn, dst, src, bytes, stream,
                          [bytes](char* out, const char* in) { std::memmove(out, in, bytes); });
}
S StrictFakeApi::memcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src,
                               std::size_t src_pitch, std::size_t width, std::size_t height,
                               MemcpyKind, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpy2DAsync");
  if (dst_pitch < width || src_pitch < width) return fail(kInvalidPitch, kFn);
  if (width == 0 || height == 0) return {kOk, kFn};
  const std::size_t dst_span = dst_pitch * (height - 1) + width;
  const std::size_t src_span = src_pitch * (height - 1) + width;
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, dst_span) || !valid_side(r, src, src_span)) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, src, src_span, stream, [=](char* out, const char* in) {
    for (std::size_t row = 0; row < height; ++row) {
      std::memmove(out + row * dst_pitch, in + row * src_pitch, width);
    }
  });
}
S StrictFakeApi::memcpy3DAsync(void* dst, std::size_t dst_pitch, std::size_t dst_height,
                               const void* src, std::size_t src_pitch, std::size_t src_height,
                               std::size_t width, std::size_t height, std::size_t depth, MemcpyKind,
                               Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemcpy3DAsync");
  if (dst_pitch < width || src_pitch < width || dst_height < height || src_height < height) {
    return fail(kInvalidValue, kFn);
  }
  if (width == 0 || height == 0 || depth == 0) return {kOk, kFn};
  const std::size_t dst_span = dst_pitch * (dst_height * (depth - 1) + height - 1) + width;
  const std::size_t src_span = src_pitch * (src_height * (depth - 1) + height - 1) + width;
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, dst_span) || !valid_side(r, src, src_span)) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, src, src_span, stream, [=](char* out, const char* in) {
    for (std::size_t z = 0; z < depth; ++z) {
      for (std::size_t row = 0; row < height; ++row) {
        std::memmove(out + (z * dst_height + row) * dst_pitch,
                     in + (z * src_height + row) * src_pitch, width);
      }
    }
  });
}
S StrictFakeApi::memsetAsync(void* dst, int value, std::size_t bytes, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeMemsetAsync");
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    if (!valid_side(r, dst, bytes) || (r.pageable(dst) && bytes != 0)) {
      return fail(kInvalidValue, kFn);
    }
  }
  return enqueue_transfer(kFn, dst, dst, 0, stream, [value, bytes](char* out, const char*) {
    std::memset(out, value, bytes);
  });
}
void StrictFakeApi::scratchReturned(void* ptr, std::size_t bytes, bool host) noexcept {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  std::memset(host ? static_cast<char*>(ptr) : r.host_view(ptr), kPoison, bytes);
  g_returned_scratch = ReturnedScratch{ptr, bytes, host, g_returned_scratch.returns + 1};
}
std::string_view StrictFakeApi::stridedCopyArchitectures() noexcept {
  return g_strided_copy_architectures.load();
}

S StrictFakeApi::launchCopyStrided(const gpu_runtime::StridedCopyArgs& args, Stream stream) {
  STRICT_FAKE_PROLOGUE("strictFakeLaunchKernel");
  g_strided_copy_launches.fetch_add(1);
  if (t_current >= 0 && t_current < kDevices && g_missing_kernel_image[t_current].load()) {
    return fail(kNoKernelImageForDevice, kFn);
  }
  const auto unit = static_cast<std::uintptr_t>(args.unit);
  bool aligned = args.rank >= 1 && args.rank <= gpu_runtime::kStridedCopyMaxRank && unit != 0 &&
                 (reinterpret_cast<std::uintptr_t>(args.dst) % unit) == 0 &&
                 (reinterpret_cast<std::uintptr_t>(args.src) % unit) == 0;
  std::int64_t count = 1;
  for (int k = 0; aligned && k < args.rank; ++k) {
    aligned = args.src_strides[k] % args.unit == 0 && args.dst_strides[k] % args.unit == 0;
    count *= args.shape[k];
  }
  if (!aligned || count != args.count) return fail(kInvalidValue, kFn);
  bool faults = false;
  {
    Runtime& r = rt();
    const std::lock_guard lock(r.mu);
    const auto s = r.resolve(stream);
    if (!s) return fail(kInvalidResourceHandle, kFn);
    // CUDA: a kernel launch fails on a stream that does not belong to the current device.
    if (s->device != t_current) return fail(kInvalidResourceHandle, kFn);
    // Kernels read and write device memory (or mapped host memory), never pageable memory:
    // such a kernel faults when it runs, and the illegal address is sticky, as on a GPU.
    faults = r.pageable(args.dst) || r.pageable(args.src);
  }
  return enqueue_transfer(
      kFn, args.dst, args.src, 0, stream, [args, faults](char* dst, const char* src) {
        if (faults) {
          rt().sticky.store(kIllegalAddress, std::memory_order_release);
          return;
        }
        gpu_runtime::for_each_unit_offset(args, [&](std::int64_t so, std::int64_t d) {
          std::memcpy(dst + d, src + so, static_cast<std::size_t>(args.unit));
        });
      });
}

// ---- Errors ----

StrictFakeApi::Error StrictFakeApi::getLastError() noexcept {
  const int sticky_code = rt().sticky.load(std::memory_order_acquire);
  if (sticky_code != kOk) return static_cast<Error>(sticky_code);  // cannot be cleared
  const auto error = static_cast<Error>(t_last_error);
  t_last_error = kOk;
  return error;
}
const char* StrictFakeApi::errorName(Error code) noexcept {
  switch (code) {
    case kOk:
      return "strictFakeSuccess";
    case kInvalidValue:
      return "strictFakeErrorInvalidValue";
    case kOutOfMemory:
      return "strictFakeErrorMemoryAllocation";
    case kUnloading:
      return "strictFakeErrorRuntimeUnloading";
    case kInvalidPitch:
      return "strictFakeErrorInvalidPitchValue";
    case kNoDevice:
      return "strictFakeErrorNoDevice";
    case kInvalidDevice:
      return "strictFakeErrorInvalidDevice";
    case kNoKernelImageForDevice:
      return "strictFakeErrorNoKernelImageForDevice";
    case kPeerUnsupported:
      return "strictFakeErrorPeerAccessUnsupported";
    case kInvalidResourceHandle:
      return "strictFakeErrorInvalidResourceHandle";
    case kIllegalState:
      return "strictFakeErrorIllegalState";
    case kNotReady:
      return "strictFakeErrorNotReady";
    case kIllegalAddress:
      return "strictFakeErrorIllegalAddress";
    case kPeerAlreadyEnabled:
      return "strictFakeErrorPeerAccessAlreadyEnabled";
    case kPeerNotEnabled:
      return "strictFakeErrorPeerAccessNotEnabled";
    case kHostMemoryAlreadyRegistered:
      return "strictFakeErrorHostMemoryAlreadyRegistered";
    case kHostMemoryNotRegistered:
      return "strictFakeErrorHostMemoryNotRegistered";
    case kStreamCaptureUnsupported:
      return "strictFakeErrorStreamCaptureUnsupported";
    case kStreamCaptureInvalidated:
      return "strictFakeErrorStreamCaptureInvalidated";
    case kStreamCaptureIsolation:
      return "strictFakeErrorStreamCaptureIsolation";
    case kStreamCaptureImplicit:
      return "strictFakeErrorStreamCaptureImplicit";
  }
  return nullptr;
}
const char* StrictFakeApi::errorString(Error code) noexcept {
  switch (code) {
    case kInvalidValue:
      return "invalid argument";
    case kOutOfMemory:
      return "out of memory";
    case kInvalidDevice:
      return "invalid device ordinal";
    case kNoKernelImageForDevice:
      return "no kernel image is available for execution on the device";
    case kInvalidResourceHandle:
      return "invalid resource handle";
    case kIllegalAddress:
      return "an illegal memory access was encountered";
    case kStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case kStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case kStreamCaptureIsolation:
      return "dependency created on uncaptured work in another stream";
    case kStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    default:
      return "";
  }
}

// ---- Test controls (strict_fake_controls.hpp) ----

bool deferred_execution() {
  return rt().deferred;
}
std::uint64_t seed() {
  return rt().seed;
}
void inject_sticky_error() {
  rt().sticky.store(kIllegalAddress, std::memory_order_release);
}
bool is_device_address(const void* ptr) {
  return rt().in_arena(ptr);
}
int begin_capture(NativeStream stream) {
  return StrictFakeApi::streamBeginCapture(static_cast<StreamState*>(stream)).code;
}
int end_capture(NativeStream stream, std::size_t* nodes) {
  return StrictFakeApi::streamEndCapture(static_cast<StreamState*>(stream), nodes).code;
}
namespace {
StreamState* native_stream(NativeStream stream) {
  return stream == nullptr ? StrictFakeApi::defaultStream() : static_cast<StreamState*>(stream);
}
}  // namespace
int raw_event_record(NativeEvent event, NativeStream stream) {
  return StrictFakeApi::eventRecord(static_cast<EventState*>(event), native_stream(stream)).code;
}
int raw_stream_wait_event(NativeStream stream, NativeEvent event) {
  return StrictFakeApi::streamWaitEvent(native_stream(stream), static_cast<EventState*>(event), 0)
      .code;
}
int raw_malloc(void** ptr, std::size_t bytes) {
  return StrictFakeApi::malloc(ptr, bytes).code;
}
int raw_stream_synchronize(NativeStream stream) {
  return StrictFakeApi::streamSynchronize(native_stream(stream)).code;
}
int raw_set_device(int device) {
  return StrictFakeApi::setDevice(device).code;
}
int raw_get_device() {
  int device = -1;
  return StrictFakeApi::getDevice(&device).code == kOk ? device : -1;
}
int raw_get_last_error() {
  return StrictFakeApi::getLastError();
}
void set_missing_kernel_image(int device, bool missing) {
  if (device >= 0 && device < kDevices) g_missing_kernel_image[device].store(missing);
}
std::size_t strided_copy_launches() {
  return g_strided_copy_launches.load();
}
void set_strided_copy_architectures(const char* list) {
  g_strided_copy_architectures.store(list == nullptr ? "" : list);
}
void reset_counters() {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  r.counters = Counters{};
  r.device_level = r.device_live;
  r.pinned_level = r.pinned_live;
}
Counters counters() {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  return r.counters;
}
ReturnedScratch last_returned_scratch() {
  Runtime& r = rt();
  const std::lock_guard lock(r.mu);
  return g_returned_scratch;
}
int raw_launch_copy(void* dst, const void* src, std::size_t bytes, NativeStream stream) {
  gpu_runtime::StridedCopyArgs args{};
  args.dst = dst;
  args.src = src;
  args.unit = 1;
  args.rank = 1;
  args.count = static_cast<std::int64_t>(bytes);
  args.shape[0] = args.count;
  args.src_strides[0] = 1;
  args.dst_strides[0] = 1;
  return StrictFakeApi::launchCopyStrided(args, native_stream(stream)).code;
}

}  // namespace devmem::strict_fake

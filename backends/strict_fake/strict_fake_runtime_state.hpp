// The strict fake runtime's state and the rules every call applies (strict_fake_api.hpp says
// what the fake enforces): streams, events, captures and their queues, the device-memory arena
// and its allocator, the host-function thread, and the steps each call goes through (the sticky
// error, admission under capture, enqueueing with the legacy stream's ordering). One runtime per
// process, never destroyed (like a vendor runtime, it outlives static objects that release into
// it). One mutex guards it; copies, memsets, kernels and host functions run without it, on
// whichever thread drives the queues at a synchronisation point (or at enqueue when not
// deferred). A header of its own because the calls are split by what they do
// (strict_fake_runtime.cpp, strict_fake_memory.cpp, strict_fake_streams.cpp) and all of them work
// on this one state.
#pragma once

#include "backends/strict_fake/strict_fake_api.hpp"
#include "backends/strict_fake/strict_fake_controls.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
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

using S = StrictFakeApi::S;

struct Block {
  std::size_t bytes = 0;
  int device = 0;
  // mallocAsync: set when the allocating stream reaches the allocation (null: cudaMalloc, valid at
  // once). Work of another stream that runs before then faults (see enqueue_transfer).
  std::shared_ptr<std::atomic<bool>> reached;
};

// The device current on this thread (setDevice), and the error getLastError reports and clears.
// constinit: read without a TLS wrapper function in every file of the runtime.
extern thread_local constinit int t_current;
extern thread_local constinit int t_last_error;
// The handle of the legacy default stream: resolved to the current device's legacy stream.
extern StreamState g_legacy_handle;

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

  /// Reads the DEVMEM_STRICT_FAKE_* settings, maps the device arena and starts the host-function
  /// thread (strict_fake_runtime.cpp).
  Runtime();

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
  void give_back(const char* ptr, const Block& block) {
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

/// The runtime, created at the first call and never destroyed (see the file comment).
Runtime& rt();

inline S fail(Error code, const char* function) {
  t_last_error = code;
  return {code, function};
}

/// Every call starts here: the sticky error, once injected, is every call's answer.
inline bool sticky(const char* function, S* out) {
  const int code = rt().sticky.load(std::memory_order_acquire);
  if (code == kOk) return false;
  *out = fail(static_cast<Error>(code), function);
  return true;
}

/// What a call that ran queued work returns: the sticky error if that work faulted.
inline S after_work(const char* function, S status) {
  S sticky_status{};
  return sticky(function, &sticky_status) ? sticky_status : status;
}

#define STRICT_FAKE_PROLOGUE(name)         \
  static constexpr const char* kFn = name; \
  if (S sticky_status{}; sticky(kFn, &sticky_status)) return sticky_status

/// Admits an operation on `s` (capture and legacy-stream rules); `captured` says it went into a
/// graph instead of the queue.
inline S admit(Runtime& r, const std::shared_ptr<StreamState>& s, const char* function,
               bool* captured) {
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
inline std::uint64_t enqueue(Runtime& r, std::unique_lock<std::mutex>& lock,
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

}  // namespace devmem::strict_fake

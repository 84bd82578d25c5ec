// The temporaries of the bounded strided-copy path (strided_copies.hpp), apart from it because
// they are a mechanism of their own: bounded buffers that are never freed per copy and are
// retired by events instead of by waiting for the stream (review 2, N7). Not installed.
//
// A set holds two slots, as the staging pipeline (staging_pipeline.hpp) holds two buffers: while
// the DMA engine or the kernel works on one slot's chunk, the host packs or places the other's.
// A slot is a device buffer and a page-locked buffer, each at most the chunk size (allocated when
// first needed, grown in powers of two up to the chunk), and an event recorded after the last
// enqueued work that uses them. Sets are kept per device (events and device memory belong to a
// device) and reused; a set is used by one copy at a time, and goes back to the pool as soon as its
// copy has enqueued its work, still in flight. The next copy that takes it:
// - for a buffer the host will touch, waits for the slot's event (eventSynchronize);
// - for device work only, asks the event: done, or else its stream waits for the event on the
//   device (streamWaitEvent): the host never waits.
// So no copy frees memory (cudaFree / hipFree synchronize the device) or synchronizes a stream to
// retire its temporaries; memory is freed only by release_idle_buffers, a change of chunk size, a
// slot that must grow, and a failed copy (its set is freed, which waits for its events).
#pragma once

#include "backends/gpu_runtime/runtime_errors.hpp"
#include "backends/gpu_runtime/vendor_api.hpp"

#include <devmem/backend.hpp>
#include <devmem/byte_size.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace devmem::gpu_runtime {

template <VendorApi Api>
class BoundedTemporaries : private VendorCalls<Api> {
  using Calls = VendorCalls<Api>;
  using Calls::check;
  using Calls::clear_last_error;
  using Calls::describe;
  using Calls::native;
  using typename Calls::ApiStatus;
  using typename Calls::VendorEvent;

 public:
  /// The smallest buffer allocated: smaller copies share it rather than growing it step by step.
  static constexpr std::size_t kMinBuffer = std::size_t{64} << 10;
  /// Idle sets kept per device (one per copy that ran concurrently with others); more are freed.
  static constexpr std::size_t kMaxIdleSets = 4;

  /// One of a set's two slots. Owns its buffers and event.
  struct Slot {
    std::byte* device = nullptr;
    std::size_t device_bytes = 0;
    std::byte* host = nullptr;
    std::size_t host_bytes = 0;
    VendorEvent done{};
    bool in_flight = false;  // `done` recorded after work whose end was not yet seen
    bool dirty = false;      // holds bytes of a finished use, not yet retired

    Slot() = default;
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    Slot(Slot&&) = delete;
    Slot& operator=(Slot&&) = delete;
    ~Slot() {
      if (ProcessExit::begun()) return;  // the runtime may be gone: see ProcessExit
      // Never free memory that enqueued work may still use; errors are ignored (nothing can be
      // done about them in a destructor).
      if (in_flight) static_cast<void>(Api::eventSynchronize(done));
      if (done != VendorEvent{}) static_cast<void>(Api::eventDestroy(done));
      if (device != nullptr) static_cast<void>(Api::free(device));
      if (host != nullptr) static_cast<void>(Api::hostFree(host));
      clear_last_error();
    }
  };

  struct Set {
    std::size_t chunk = 0;
    std::array<Slot, 2> slots;
  };

  /// A set for one copy: on success it goes back to the pool with its work still in flight;
  /// after a failure it is freed (which waits for its events), and work enqueued since the last
  /// recorded event is waited for with the stream first (its errors ignored: the copy's own error
  /// is the one reported).
  class Lease {
   public:
    Lease(BoundedTemporaries& owner, int device, NativeStream stream, std::size_t chunk)
        : owner_(owner), device_(device), stream_(stream), set_(owner.take(device, chunk)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease(Lease&&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (succeeded_) {
        owner_.give_back(device_, std::move(set_));
        return;
      }
      if (unrecorded_ && !ProcessExit::begun()) {
        static_cast<void>(Api::streamSynchronize(native(stream_)));
        clear_last_error();
      }
    }

    [[nodiscard]] Slot& slot(std::size_t i) noexcept { return set_->slots[i % 2]; }

    /// Gives the first `slots` slots buffers of at least these sizes (0: none needed); false when
    /// memory for them cannot be had. Called before any work is enqueued.
    [[nodiscard]] bool reserve(std::size_t slots, std::size_t device_bytes,
                               std::size_t host_bytes) {
      for (std::size_t i = 0; i < std::min<std::size_t>(slots, 2); ++i) {
        Slot& s = slot(i);
        if (!grow(s, s.device, s.device_bytes, device_bytes, /*host=*/false) ||
            !grow(s, s.host, s.host_bytes, host_bytes, /*host=*/true)) {
          return false;
        }
        if (s.done == VendorEvent{}) {
          // No timing (cheaper records), and a waiting host thread sleeps instead of spinning.
          check(Api::eventCreateWithFlags(&s.done,
                                          Api::kEventDisableTiming | Api::kEventBlockingSync),
                "creating a strided-copy event on device {}", device_);
        }
      }
      return true;
    }

    /// Before the host writes or reads `s`'s page-locked buffer: its earlier work is done.
    void acquire_for_host(Slot& s) {
      wait(s);
      retire(s);
    }

    /// Before device work only uses `s`: ordered after its earlier work, without the host waiting
    /// for it (done already, or the stream waits for its event on the device). Even on the stream
    /// of its last use: that stream may have been destroyed since and its handle reused.
    void acquire_for_device(Slot& s) {
      if (s.in_flight && Calls::ready(Api::eventQuery(s.done),
                                      "asking whether a strided copy's temporary is free")) {
        s.in_flight = false;
      }
      if (!s.in_flight) {
        retire(s);
        return;
      }
      check(Api::streamWaitEvent(native(stream_), s.done, 0),
            "ordering {} after an earlier strided copy's use of its temporary", describe(stream_));
    }

    /// Work that uses `s` has been enqueued (until record() marks its end).
    void enqueued() noexcept { unrecorded_ = true; }

    /// Records `s`'s event after the work just enqueued, the last that uses it for now.
    void record(Slot& s) {
      // From here the work may use the buffers: if recording fails, freeing them must still wait
      // for it, which the (unrecorded) event cannot do; the stream can (the destructor).
      s.in_flight = false;
      s.dirty = true;
      check(Api::eventRecord(s.done, native(stream_)), "recording a strided-copy event on {}",
            describe(stream_));
      s.in_flight = true;
      unrecorded_ = false;
    }

    /// Waits until `s`'s work is done (the host then reads its page-locked buffer).
    static void wait(Slot& s) {
      if (!s.in_flight) return;
      check(Api::eventSynchronize(s.done), "waiting for a strided copy's temporary");
      s.in_flight = false;
    }

    /// The copy is over: the set goes back to the pool, its last work maybe still in flight.
    void succeeded() noexcept { succeeded_ = true; }

    /// A copy that is complete when it returns: waits for both slots, then retires them.
    void finish() {
      for (Slot& s : set_->slots) {
        wait(s);
        retire(s);
      }
    }

   private:
    /// A finished use's bytes are dead. A test runtime may poison them (the strict fake fills
    /// them with 0xDB), so that a later use that reads a buffer before writing it is caught, and
    /// so is an event recorded before the last use of its slot.
    static void retire(Slot& s) noexcept {
      if (!s.dirty) return;
      s.dirty = false;
      if constexpr (requires { Api::scratchReturned(s.device, s.device_bytes, false); }) {
        if (s.device != nullptr) Api::scratchReturned(s.device, s.device_bytes, false);
        if (s.host != nullptr) Api::scratchReturned(s.host, s.host_bytes, true);
      }
    }

    /// Makes `buffer` hold at least `bytes` (nothing when 0): a power of two from kMinBuffer up to
    /// the set's chunk size. A smaller buffer is freed first, once its work is done.
    bool grow(Slot& s, std::byte*& buffer, std::size_t& size, std::size_t bytes, bool host) {
      if (bytes == 0 || (buffer != nullptr && size >= bytes)) return true;
      const std::size_t want = std::min(set_->chunk, std::bit_ceil(std::max(bytes, kMinBuffer)));
      if (buffer != nullptr) {
        wait(s);
        retire(s);
        static_cast<void>(host ? Api::hostFree(buffer) : Api::free(buffer));
        clear_last_error();
        buffer = nullptr;
        size = 0;
      }
      void* ptr = nullptr;
      // Portable: page-locked for every device's context, whichever is current.
      const ApiStatus status =
          host ? Api::hostAlloc(&ptr, want, Api::kHostAllocPortable) : Api::malloc(&ptr, want);
      if (status.code == Api::kErrorMemoryAllocation) {
        clear_last_error();
        return false;
      }
      check(status, "allocating a {} ({} bytes) {} temporary of a strided copy on device {}",
            bytes_text(want), want, host ? "page-locked" : "device", device_);
      buffer = static_cast<std::byte*>(ptr);
      size = want;
      return true;
    }

    BoundedTemporaries& owner_;
    int device_;
    NativeStream stream_;
    std::unique_ptr<Set> set_;
    bool unrecorded_ = false;
    bool succeeded_ = false;
  };

  /// Frees the idle sets (waiting for their events first).
  void release() noexcept {
    std::map<int, std::vector<std::unique_ptr<Set>>> idle;
    {
      const std::lock_guard lock(mutex_);
      idle.swap(idle_);
    }
    // Freed here, outside the lock, by their destructors.
  }

 private:
  /// An idle set of `device` made for `chunk`, or a new, empty one (its buffers are allocated when
  /// a copy reserves them). Sets made for another chunk size are freed.
  std::unique_ptr<Set> take(int device, std::size_t chunk) {
    std::vector<std::unique_ptr<Set>> stale;  // freed outside the lock
    {
      const std::lock_guard lock(mutex_);
      auto& idle = idle_[device];
      while (!idle.empty()) {
        std::unique_ptr<Set> set = std::move(idle.back());
        idle.pop_back();
        if (set->chunk == chunk) return set;
        stale.push_back(std::move(set));
      }
    }
    auto set = std::make_unique<Set>();
    set->chunk = chunk;
    return set;
  }

  void give_back(int device, std::unique_ptr<Set> set) noexcept {
    try {
      const std::lock_guard lock(mutex_);
      auto& idle = idle_[device];
      if (idle.size() < kMaxIdleSets) idle.push_back(std::move(set));
    } catch (...) {
      // Out of memory growing the pool: the set is freed instead (its destructor).
    }
  }

  std::mutex mutex_;                                       // guards idle_
  std::map<int, std::vector<std::unique_ptr<Set>>> idle_;  // per device
};

}  // namespace devmem::gpu_runtime

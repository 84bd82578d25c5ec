// Simulated events of the host backend. Not installed; only backends/host includes it.
//
// Every record_event creates a fresh EventRecord and makes it the event's latest one; the marker
// enqueued on the stream completes that record. stream_wait_event captures the record that is
// latest at the time of the call, so re-recording the event afterwards does not change what the
// waiting stream waits for (CUDA's semantics).
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace devmem::host {

/// One recording of an event: pending until its marker runs, then complete with a timestamp.
class EventRecord {
 public:
  using Clock = std::chrono::steady_clock;

  /// Marks the record complete at the current time and wakes every waiter.
  void complete();
  void wait();
  [[nodiscard]] bool is_complete();
  /// When the record completed (only meaningful once is_complete()).
  [[nodiscard]] Clock::time_point completion_time();

 private:
  std::mutex mutex_;
  std::condition_variable completed_;
  bool complete_ = false;
  Clock::time_point time_{};
};

class HostEvent {
 public:
  explicit HostEvent(int device) : device_(device) {}

  [[nodiscard]] int device() const noexcept { return device_; }
  /// The latest record; null when the event was never recorded (it then counts as complete).
  [[nodiscard]] std::shared_ptr<EventRecord> latest();
  void set_latest(std::shared_ptr<EventRecord> record);

 private:
  const int device_;
  std::mutex mutex_;
  std::shared_ptr<EventRecord> latest_;
};

}  // namespace devmem::host

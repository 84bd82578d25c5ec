#include "backends/host/host_event.hpp"

#include <utility>

namespace devmem::host {

void EventRecord::complete() {
  {
    const std::lock_guard lock(mutex_);
    time_ = Clock::now();
    complete_ = true;
  }
  completed_.notify_all();
}

void EventRecord::wait() {
  std::unique_lock lock(mutex_);
  completed_.wait(lock, [this] { return complete_; });
}

bool EventRecord::is_complete() {
  const std::lock_guard lock(mutex_);
  return complete_;
}

EventRecord::Clock::time_point EventRecord::completion_time() {
  const std::lock_guard lock(mutex_);
  return time_;
}

std::shared_ptr<EventRecord> HostEvent::latest() {
  const std::lock_guard lock(mutex_);
  return latest_;
}

void HostEvent::set_latest(std::shared_ptr<EventRecord> record) {
  const std::lock_guard lock(mutex_);
  latest_ = std::move(record);
}

}  // namespace devmem::host

// The per-context pool of devmem's internal vendor events (EventPool, a context's `events`): see
// core/event_pool.hpp for why and for why reusing an event is safe.
#include "core/event_pool.hpp"

#include "core/report_error.hpp"

#include <devmem/context.hpp>

#include <fmt/format.h>

#include <exception>

namespace devmem::detail {

NativeEvent EventPool::acquire() {
  {
    const std::lock_guard lock(mutex_);
    if (idle_count_ > 0) return idle_[--idle_count_];
  }
  return owner_.backend().create_event(owner_.device());
}

void EventPool::recycle(NativeEvent event) noexcept {
  const Backend& backend = owner_.backend();
  // After exit began or a device loss nothing may use the event again; the backend's destroy is
  // then a no-op (as for every release).
  if (!backend.exiting() && !backend.device_lost()) {
    const std::lock_guard lock(mutex_);
    if (!closed_ && idle_count_ < kCapacity) {
      idle_[idle_count_++] = event;
      return;
    }
  }
  destroy(event);
}

void EventPool::release_all() noexcept {
  std::array<NativeEvent, kCapacity> taken{};
  std::size_t count = 0;
  {
    const std::lock_guard lock(mutex_);
    taken = idle_;
    count = idle_count_;
    idle_count_ = 0;
  }
  for (std::size_t i = 0; i < count; ++i) destroy(taken[i]);
}

void EventPool::close() noexcept {
  {
    const std::lock_guard lock(mutex_);
    closed_ = true;
  }
  release_all();
}

std::size_t EventPool::idle() const {
  const std::lock_guard lock(mutex_);
  return idle_count_;
}

void EventPool::destroy(NativeEvent event) noexcept {
  // As ~EventState does for an event of its own: a failure has no one to be reported to but
  // stderr.
  try {
    owner_.backend().destroy_event(owner_.device(), event);
  } catch (const std::exception& e) {
    report_error(fmt::format("destroying event {}: {}", event, e.what()));
  }
}

}  // namespace devmem::detail

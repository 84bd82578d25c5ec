// The counter behind Context::device_statistics() / host_statistics() and StatisticsAdaptor: one
// implementation, so that both report current, peak and total the same way. Not installed.
#pragma once

#include <devmem/memory_manager.hpp>

#include <atomic>
#include <cstdint>

namespace devmem::detail {

/// Bytes and numbers of allocations: current, peak and total. Lock-free and thread-safe; a
/// snapshot taken while others update it may mix fields from slightly different moments.
class MemoryCounter {
 public:
  /// An allocation of `bytes` was handed out.
  void add(std::int64_t bytes) noexcept {
    const std::int64_t now_bytes = current_bytes_.fetch_add(bytes) + bytes;
    const std::int64_t now_count = current_count_.fetch_add(1) + 1;
    total_bytes_.fetch_add(bytes);
    total_count_.fetch_add(1);
    raise(peak_bytes_, now_bytes);
    raise(peak_count_, now_count);
  }
  /// An allocation of `bytes` came back.
  void remove(std::int64_t bytes) noexcept {
    current_bytes_.fetch_sub(bytes);
    current_count_.fetch_sub(1);
  }
  [[nodiscard]] MemoryStatistics snapshot() const noexcept {
    return MemoryStatistics{current_bytes_.load(), peak_bytes_.load(), total_bytes_.load(),
                            current_count_.load(), peak_count_.load(), total_count_.load()};
  }

 private:
  static void raise(std::atomic<std::int64_t>& peak, std::int64_t value) noexcept {
    for (std::int64_t seen = peak.load();
         value > seen && !peak.compare_exchange_weak(seen, value);) {
    }
  }
  std::atomic<std::int64_t> current_bytes_{0}, peak_bytes_{0}, total_bytes_{0};
  std::atomic<std::int64_t> current_count_{0}, peak_count_{0}, total_count_{0};
};

}  // namespace devmem::detail

// A block's shared memory in the host backend's kernel simulator (BlockRunner,
// host_block_runner.hpp): static shared arrays placed in the order threads first ask for them
// (with CUDA's 48 KiB limit on their total and the rule that untagged arrays of one shape are one
// array), the dynamic shared memory and the red zones around it. Apart from the scheduler because
// it is a job of its own that only reports failures through it.
#include "backends/host/host_block_runner.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <string>

namespace devmem::detail::sim {

void* BlockRunner::shared_storage(const void* key, std::size_t element_size,
                                  std::span<const std::size_t> shape, std::size_t alignment,
                                  const SourceSite& site, bool untagged) {
  const SourceSite* const untagged_site = untagged ? &site : nullptr;
  std::size_t count = 1;
  for (const std::size_t n : shape) count *= n;
  const std::size_t bytes = element_size * count;
  for (const auto& a : shared_arrays_) {
    if (a.key != key) continue;
    // Untagged arrays are keyed by type and shape only, as on a GPU, where two call sites
    // would silently share one __shared__ variable: only one call site may use the key.
    if (untagged_site != nullptr && a.untagged && !same_site(a.site, *untagged_site)) {
      fail_in_thread(
          Status::LaunchFailure,
          fmt::format("shared_array: two untagged shared arrays of shape {} with {}-byte "
                      "elements ({} bytes) in one kernel, at {} and at {} (thread {} of block "
                      "{}): on a GPU they are one array, silently sharing its memory; give each "
                      "a tag: DEVMEM_SHARED_ARRAY(name, T, N...) or shared_array<T, N...>([] {{}})",
                      describe_shape(shape), element_size, bytes, describe(a.site),
                      describe(*untagged_site), describe(threads_[current_].coords.thread_idx),
                      describe(block_index_)));
    }
    return static_base() + a.offset;
  }
  check_static_shared_total(bytes, shape, element_size, site);
  const std::size_t offset = (shared_end_ + alignment - 1) / alignment * alignment;
  if (offset + bytes > grid_.shared_limit) {
    fail_in_thread(Status::LaunchOutOfResources,
                   fmt::format("block {} needs more shared memory than device {} has: {} bytes "
                               "of shared arrays after {} bytes of dynamic shared memory ({} "
                               "bytes at most per block)",
                               describe(block_index_), grid_.device,
                               offset + bytes - grid_.dynamic_shared_bytes,
                               grid_.dynamic_shared_bytes, grid_.shared_limit));
  }
  shared_arrays_.push_back(
      SharedArrayPlace{key, offset, bytes, untagged, site, describe_shape(shape), element_size});
  shared_end_ = offset + bytes;
  std::memset(static_base() + offset, kUninitialisedShared, bytes);
  return static_base() + offset;
}

void* BlockRunner::dynamic_shared(std::size_t alignment, std::size_t view_bytes) {
  if (view_bytes > grid_.dynamic_shared_bytes) {
    fail_in_thread(
        Status::LaunchFailure,
        fmt::format("dynamic_shared_array: the shape needs {} bytes, more than the {} "
                    "bytes of dynamic shared memory the launch gives (LaunchConfig's "
                    "shared_bytes), in thread {} of block {}",
                    view_bytes, grid_.dynamic_shared_bytes,
                    describe(threads_[current_].coords.thread_idx), describe(block_index_)));
  }
  if (alignment > kSharedAlignment) {
    fail_in_thread(Status::LaunchFailure,
                   fmt::format("dynamic_shared: alignment {} is larger than the {} bytes the "
                               "simulator guarantees",
                               alignment, kSharedAlignment));
  }
  if (!red_zones_filled_) {
    std::memset(shared_base_, kRedZoneByte, kRedZone);
    std::memset(dynamic_base() + grid_.dynamic_shared_bytes, kRedZoneByte, kRedZone);
    red_zones_filled_ = true;
  }
  return dynamic_base();
}

void BlockRunner::check_static_shared_total(std::size_t bytes, std::span<const std::size_t> shape,
                                            std::size_t element_size, const SourceSite& site) {
  std::size_t total = bytes;
  for (const auto& a : shared_arrays_) total += a.bytes;
  if (total <= kStaticSharedLimit) return;
  std::string arrays;
  for (const auto& a : shared_arrays_) {
    arrays += fmt::format("{} bytes (shape {} of {}-byte elements) at {}, ", a.bytes, a.shape,
                          a.element_size, describe(a.site));
  }
  arrays += fmt::format("{} bytes (shape {} of {}-byte elements) at {}", bytes,
                        describe_shape(shape), element_size, describe(site));
  fail_in_thread(Status::LaunchOutOfResources,
                 fmt::format("block {}: the kernel's static shared arrays need {} bytes, more "
                             "than the 48 KiB ({} bytes) CUDA allows a kernel's static shared "
                             "memory (nvcc refuses to build it): {}; use dynamic shared memory "
                             "for some of them",
                             describe(block_index_), total, kStaticSharedLimit, arrays));
}

void BlockRunner::check_red_zones(bool at_barrier) {
  if (!red_zones_filled_ || !host::bounds_checking()) return;
  const std::string where = [&] {
    for (const SimThread& t : threads_) {
      if (at_barrier && t.state != State::Done) {
        return fmt::format("at {} ({})", t.barrier_name, describe(t.site));
      }
    }
    return std::string("when the block finished");
  }();
  if (auto failure = dynamic_shared_overrun(shared_base_, grid_.dynamic_shared_bytes,
                                            describe(block_index_), where)) {
    record_failure(Status::LaunchFailure, std::move(*failure));
  }
}

}  // namespace devmem::detail::sim

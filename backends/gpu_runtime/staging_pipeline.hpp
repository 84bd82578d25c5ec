// The pinned staging pipeline of the GPU backends' shared implementation (runtime_backend.hpp's
// copy): large copies between device memory and pageable host memory go through page-locked
// buffers of devmem's own instead of the runtime's pageable path. Apart from the backend because
// it is a mechanism of its own, with its own state (the idle pipelines, per device) and its own
// rules for reusing buffers that DMAs may still be using. Not installed.
//
// The runtimes copy pageable memory through a small internal staging buffer, synchronously and
// piece by piece, at a fraction of the bus speed. Instead, a staged copy moves `chunk` bytes at
// a time through two page-locked buffers: while the DMA engine copies one buffer, the host fills
// (H2D) or drains (D2H) the other; an event recorded after each chunk's DMA says when its buffer
// is free again. The semantics are those of the runtime's pageable copies:
// - H2D: work enqueued before on the stream completes first (the source may be its output);
//   the call returns once the whole source has been read into staging buffers, the last DMAs
//   may still be running (ordered on `stream` like any copy).
// - D2H: the copy is complete when the call returns.
// Pipelines are pooled per device (events belong to a device) and reused; a pipeline is used by
// one copy at a time. A pipeline whose copy failed is freed, not reused: after an error the
// state of its DMAs is unknown, and freeing waits for them.
#pragma once

#include "backends/gpu_runtime/runtime_errors.hpp"
#include "backends/gpu_runtime/vendor_api.hpp"

#include <devmem/backend.hpp>
#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace devmem::gpu_runtime {

/// When and how pageable copies are staged.
struct StagingOptions {
  /// Copies between device memory and pageable host memory of at least this many bytes are
  /// staged; smaller ones go straight to the runtime (its own path is fine for them).
  std::size_t threshold = std::size_t{16} << 20;
  /// Bytes per staging buffer (two per pipeline, so one is filled while the other is copied).
  std::size_t chunk = std::size_t{8} << 20;
};

/// The staged copies of one backend; it keeps the idle pipelines of each device.
template <VendorApi Api>
class StagingPipelines : private VendorCalls<Api> {
  using Calls = VendorCalls<Api>;
  using Calls::check;
  using Calls::clear_last_error;
  using Calls::copy_1d;
  using Calls::describe;
  using Calls::native;
  using typename Calls::ApiStatus;
  using typename Calls::VendorEvent;

 public:
  /// Replaces the options; pipelines made for the old chunk size are freed.
  void set_options(StagingOptions options) {
    if (options.chunk == 0) {
      throw InvalidArgument(
          fmt::format("{} set_staging_options: the chunk size must be > 0", Api::kBackend));
    }
    const std::lock_guard lock(mutex_);
    options_ = options;
    idle_.clear();
  }

  [[nodiscard]] StagingOptions options() {
    const std::lock_guard lock(mutex_);
    return options_;
  }

  /// Frees the idle pipelines.
  void release_idle() noexcept {
    std::map<int, std::vector<std::unique_ptr<Pipeline>>> idle;
    {
      const std::lock_guard lock(mutex_);
      idle.swap(idle_);
    }
    // Freed here, outside the lock, by their destructors.
  }

  /// True for a copy worth staging: large, between device memory and pageable host memory.
  bool should_stage(void* dst, const void* src, std::size_t bytes, CopyKind kind) {
    if (kind != CopyKind::HostToDevice && kind != CopyKind::DeviceToHost) return false;
    if (bytes < options().threshold) return false;
    const void* const host_side = kind == CopyKind::HostToDevice ? src : dst;
    bool pageable = false;
    check(Api::isPageable(host_side, &pageable), "looking up host memory at {}",
          fmt::ptr(host_side));
    return pageable;
  }

  /// The staged copy (see the file's comment); `device` is current.
  void copy_staged(int device, void* dst, const void* src, std::size_t bytes, CopyKind kind,
                   NativeStream stream) {
    std::unique_ptr<Pipeline> pipeline = take_pipeline(device);
    if (pipeline == nullptr) {
      copy_1d(dst, src, bytes, kind, stream);  // no page-locked memory to stage through
      return;
    }
    Lease lease(*this, device, std::move(pipeline));
    if (kind == CopyKind::HostToDevice) {
      to_device(*lease, static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), bytes,
                stream);
    } else {
      to_host(*lease, static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), bytes, kind,
              stream);
    }
    lease.succeeded();
  }

 private:
  /// A page-locked buffer and the event recorded after the last DMA that uses it. Owns both.
  struct Buffer {
    void* host = nullptr;
    VendorEvent done{};
    bool in_flight = false;  // `done` recorded after a DMA using `host` that may still run

    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&&) = delete;
    Buffer& operator=(Buffer&&) = delete;
    ~Buffer() {
      if (ProcessExit::begun()) return;  // the runtime may be gone: see ProcessExit
      // Never free memory a DMA may still use; errors are ignored (nothing can be done about them
      // in a destructor).
      if (in_flight) static_cast<void>(Api::eventSynchronize(done));
      if (done != VendorEvent{}) static_cast<void>(Api::eventDestroy(done));
      if (host != nullptr) static_cast<void>(Api::hostFree(host));
      clear_last_error();
    }
  };

  struct Pipeline {
    std::size_t chunk = 0;
    std::array<Buffer, 2> buffers;

    /// The bytes of chunk `i` of a copy of `bytes`.
    [[nodiscard]] std::size_t part(std::size_t bytes, std::size_t i) const {
      return std::min(chunk, bytes - i * chunk);
    }
  };

  /// Returns the pipeline to the idle pool when the copy succeeded; frees it otherwise.
  class Lease {
   public:
    Lease(StagingPipelines& owner, int device, std::unique_ptr<Pipeline> pipeline)
        : owner_(owner), device_(device), pipeline_(std::move(pipeline)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease(Lease&&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (succeeded_) owner_.return_pipeline(device_, std::move(pipeline_));
    }
    void succeeded() noexcept { succeeded_ = true; }
    [[nodiscard]] Pipeline& operator*() const noexcept { return *pipeline_; }

   private:
    StagingPipelines& owner_;
    int device_;
    std::unique_ptr<Pipeline> pipeline_;
    bool succeeded_ = false;
  };

  /// An idle pipeline of `device`, or a new one; nullptr when page-locked memory for one cannot be
  /// had (out of memory), in which case the copy goes to the runtime unstaged.
  std::unique_ptr<Pipeline> take_pipeline(int device) {
    std::size_t chunk = 0;
    {
      const std::lock_guard lock(mutex_);
      auto& idle = idle_[device];
      if (!idle.empty()) {
        std::unique_ptr<Pipeline> pipeline = std::move(idle.back());
        idle.pop_back();
        return pipeline;
      }
      chunk = options_.chunk;
    }
    auto pipeline = std::make_unique<Pipeline>();
    pipeline->chunk = chunk;
    for (Buffer& buffer : pipeline->buffers) {
      // Portable: the buffer is page-locked for every device's context, whichever is current.
      const ApiStatus status = Api::hostAlloc(&buffer.host, chunk, Api::kHostAllocPortable);
      if (status.code == Api::kErrorMemoryAllocation) {
        clear_last_error();
        buffer.host = nullptr;
        return nullptr;
      }
      check(status, "allocating a {} page-locked staging buffer for device {}", bytes_text(chunk),
            device);
      // No timing (cheaper records), and a waiting host thread sleeps instead of spinning on a
      // core for up to a whole chunk's DMA.
      check(Api::eventCreateWithFlags(&buffer.done,
                                      Api::kEventDisableTiming | Api::kEventBlockingSync),
            "creating a staging event on device {}", device);
    }
    return pipeline;
  }

  void return_pipeline(int device, std::unique_ptr<Pipeline> pipeline) noexcept {
    try {
      const std::lock_guard lock(mutex_);
      // A pipeline made before set_options changed the chunk size is not kept.
      if (pipeline->chunk == options_.chunk) idle_[device].push_back(std::move(pipeline));
    } catch (...) {
      // Out of memory growing the pool: the pipeline is freed instead (its destructor).
    }
  }

  /// Waits until no DMA uses `buffer`.
  static void wait_idle(Buffer& buffer) {
    if (!buffer.in_flight) return;
    check(Api::eventSynchronize(buffer.done), "waiting for a staging buffer");
    buffer.in_flight = false;
  }

  /// Enqueues a DMA between `buffer` and device memory, then the event that marks its end.
  static void enqueue_chunk(Buffer& buffer, void* dst, const void* src, std::size_t bytes,
                            CopyKind kind, NativeStream stream) {
    copy_1d(dst, src, bytes, kind, stream);
    // From here a DMA may use the buffer: if recording fails, freeing the pipeline must still
    // wait for it, which synchronizing the (unrecorded) event cannot do; the stream can.
    buffer.in_flight = true;
    const ApiStatus status = Api::eventRecord(buffer.done, native(stream));
    if (status.code != Api::kSuccess) {
      static_cast<void>(Api::streamSynchronize(native(stream)));
      buffer.in_flight = false;
      check(status, "recording a staging event on {}", describe(stream));
    }
  }

  /// H2D: each chunk is copied into a free buffer by the host, then DMAed from it.
  static void to_device(Pipeline& p, std::byte* out, const std::byte* in, std::size_t bytes,
                        NativeStream stream) {
    const std::size_t chunks = (bytes + p.chunk - 1) / p.chunk;
    // Like the runtime's pageable copy: earlier work on the stream may still write the source.
    check(Api::streamSynchronize(native(stream)), "synchronizing {} before a staged copy",
          describe(stream));
    for (std::size_t i = 0; i < chunks; ++i) {
      Buffer& buffer = p.buffers[i % 2];
      wait_idle(buffer);
      std::memcpy(buffer.host, in + i * p.chunk, p.part(bytes, i));
      enqueue_chunk(buffer, out + i * p.chunk, buffer.host, p.part(bytes, i),
                    CopyKind::HostToDevice, stream);
    }
  }

  /// D2H: two chunks in flight; each drained chunk's buffer takes the chunk two ahead.
  static void to_host(Pipeline& p, std::byte* out, const std::byte* in, std::size_t bytes,
                      CopyKind kind, NativeStream stream) {
    const std::size_t chunks = (bytes + p.chunk - 1) / p.chunk;
    for (Buffer& buffer : p.buffers) wait_idle(buffer);
    for (std::size_t i = 0; i < std::min<std::size_t>(2, chunks); ++i) {
      enqueue_chunk(p.buffers[i], p.buffers[i].host, in + i * p.chunk, p.part(bytes, i), kind,
                    stream);
    }
    for (std::size_t i = 0; i < chunks; ++i) {
      Buffer& buffer = p.buffers[i % 2];
      wait_idle(buffer);
      std::memcpy(out + i * p.chunk, buffer.host, p.part(bytes, i));
      if (i + 2 < chunks) {
        enqueue_chunk(buffer, buffer.host, in + (i + 2) * p.chunk, p.part(bytes, i + 2), kind,
                      stream);
      }
    }
  }

  std::mutex mutex_;  // guards options_ and idle_
  StagingOptions options_;
  std::map<int, std::vector<std::unique_ptr<Pipeline>>> idle_;  // per device
};

}  // namespace devmem::gpu_runtime

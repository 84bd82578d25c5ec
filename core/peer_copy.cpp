// Copies between device arrays of two devices of one backend (docs/scaling-out.md#several-devices):
// directly with Backend::copy_peer where the destination device can access the source device,
// otherwise staged through page-locked host memory in chunks. Strided sides go through a dense
// temporary on their own device, so that only dense bytes cross between devices.
#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/copy_engine.hpp"
#include "core/report_error.hpp"
#include "core/stream_state.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace devmem::detail {

namespace {

/// Bytes per staging buffer of a copy between devices without peer access. Two buffers, so that
/// the source device fills one while the destination device reads the other.
constexpr std::int64_t kStagingChunk = std::int64_t{4} << 20;

/// cudaErrorPeerAccessNotEnabled / hipErrorPeerAccessNotEnabled (and the host backend's number).
constexpr int kPeerAccessNotEnabled = 705;

/// A completion event of one device, destroyed with its owner (the work it was recorded after may
/// still be pending: the vendors and the host backend allow that).
class ScopedEvent {
 public:
  ScopedEvent(Backend& backend, int device)
      : backend_(backend), device_(device), handle_(backend.create_completion_event(device)) {}
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;
  ScopedEvent(ScopedEvent&&) = delete;
  ScopedEvent& operator=(ScopedEvent&&) = delete;
  ~ScopedEvent() {
    try {
      backend_.destroy_event(device_, handle_);
    } catch (const std::exception& e) {
      report_error(fmt::format("destroying a peer-copy event of device {}: {}", device_, e.what()));
    }
  }
  /// Records the event at the end of `stream` (of the event's device).
  void record(NativeStream stream) { backend_.record_event(device_, handle_, stream); }
  /// Work enqueued on `stream` of `device` after this call waits for the last record.
  void make_wait(int device, NativeStream stream) {
    backend_.stream_wait_event(device, stream, handle_);
  }
  /// The host waits until the work before the last record has completed.
  void synchronize() const { backend_.synchronize_event(device_, handle_); }

 private:
  Backend& backend_;
  int device_;
  NativeEvent handle_;
};

/// Work enqueued on `later` from now on waits for the work enqueued on `earlier` so far.
void order_after(Backend& backend, const StreamState& later, const StreamState& earlier) {
  ScopedEvent event(backend, earlier.context->device());
  event.record(earlier.handle);
  event.make_wait(later.context->device(), later.handle);
}

void check_compatible(const char* operation, const DeviceArray& dst, const DeviceArray& src) {
  if (!(src.dtype() == dst.dtype())) {
    throw InvalidArgument(fmt::format("{}: dtype mismatch: source is {}, destination is {}",
                                      operation, src.dtype().name(), dst.dtype().name()));
  }
  if (!layout::same_squeezed_shape(src.layout().shape, dst.layout().shape)) {
    throw InvalidArgument(fmt::format("{}: shape mismatch: source {}, destination {}", operation,
                                      layout::format_tuple(src.layout().shape),
                                      layout::format_tuple(dst.layout().shape)));
  }
  const Layout& d = dst.layout();
  for (std::size_t k = 0; k < d.shape.size(); ++k) {
    if (d.strides[k] == 0 && d.shape[k] > 1) {
      throw InvalidArgument(fmt::format(
          "{}: the destination has a zero stride on axis {} of length {} (a broadcast array "
          "cannot be written element by element)",
          operation, k, d.shape[k]));
    }
  }
}

/// `array` itself when it is C-contiguous, else a new C-contiguous array of its device holding its
/// elements (copied on `stream` when `fill`).
DeviceArray dense_on_own_device(const char* operation, const DeviceArray& array,
                                StreamState& stream, bool fill) {
  if (array.layout().is_c_contiguous()) return array;
  Context& context = *stream.context;
  DeviceArray dense = make_device_array(
      context,
      layout::make_layout(array.layout().shape, array.layout().itemsize, {}, Order::C, operation),
      array.dtype(), StreamState::wrap(ContextState::of(context).default_stream), operation);
  if (fill) copy_elements(operation, context, stream, endpoint(dense), endpoint(array));
  return dense;
}

/// Rethrows a backend failure of the staged pipeline with where it happened; other errors as is.
[[noreturn]] void rethrow_with_chunk(const char* operation, std::int64_t chunk, std::int64_t chunks,
                                     std::int64_t bytes, int src_device, int dst_device) {
  try {
    throw;
  } catch (const BackendError& e) {
    throw BackendError(
        e.backend(), e.function(), e.code(), e.code_name(),
        fmt::format("{}: staged copy of {} bytes from device {} to device {} failed "
                    "at chunk {} of {}: {}",
                    operation, bytes, src_device, dst_device, chunk + 1, chunks, e.what()));
  }
}

/// Two page-locked buffers of kStagingChunk bytes and their events, kept per (backend, source
/// device, destination device) between staged copies (review 2, N15: two 4 MiB buffers allocated
/// per copy cost a cudaHostAlloc each, and with `direct` a cudaFreeHost, a device-wide
/// synchronisation, later). A copy that takes the pipeline waits on the GPU (the `drained`
/// events) for the previous copy's reads of a buffer before refilling it; the host never waits.
struct StagingPipeline {
  StagingPipeline(Context& src_ctx, int dst_device, const char* operation) {
    for (auto& buffer : buffers) {
      // Portable: page-locked for both devices, so that both copies are asynchronous DMA.
      buffer = ContextState::of(src_ctx).allocate_host(kStagingChunk, HostAllocFlags::Portable,
                                                       operation);
    }
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      filled.emplace_back(src_ctx.backend(), src_ctx.device());
      drained.emplace_back(src_ctx.backend(), dst_device);
    }
  }
  /// The host waits until the destination device has read both buffers (their last DMA).
  void wait_until_drained() const {
    for (std::size_t b = 0; b < buffers.size(); ++b) {
      if (drained_recorded[b]) drained[b].synchronize();
    }
  }

  std::array<std::shared_ptr<HostMemory>, 2> buffers;
  // A deque: the events are neither copyable nor movable, and are built in place.
  std::deque<ScopedEvent> filled;   // per buffer, on the source device
  std::deque<ScopedEvent> drained;  // per buffer, on the destination device
  std::array<bool, 2> drained_recorded{};
};

using PairKey = std::tuple<const Backend*, int, int>;  // backend, source, destination device

/// The idle pipelines of every device pair, and the pairs whose peer access devmem enabled.
/// Immortal (never destroyed at exit, when copies of static arrays may still run).
struct PeerState {
  std::mutex mutex;
  std::map<PairKey, std::vector<std::unique_ptr<StagingPipeline>>> idle;
  std::set<std::tuple<const Backend*, int, int>> peer_enabled;  // backend, device, peer
};
PeerState& peer_state() {
  static auto* const state = new PeerState;
  return *state;
}

/// At most this many idle pipelines are kept per pair (two threads copying at once).
constexpr std::size_t kIdlePipelinesPerPair = 2;

std::unique_ptr<StagingPipeline> take_pipeline(Context& src_ctx, int dst_device,
                                               const char* operation) {
  {
    PeerState& state = peer_state();
    const std::lock_guard lock(state.mutex);
    auto& idle = state.idle[PairKey{&src_ctx.backend(), src_ctx.device(), dst_device}];
    if (!idle.empty()) {
      auto pipeline = std::move(idle.back());
      idle.pop_back();
      return pipeline;
    }
  }
  return std::make_unique<StagingPipeline>(src_ctx, dst_device, operation);
}

void return_pipeline(const Context& src_ctx, int dst_device,
                     std::unique_ptr<StagingPipeline> pipeline) {
  {
    PeerState& state = peer_state();
    const std::lock_guard lock(state.mutex);
    auto& idle = state.idle[PairKey{&src_ctx.backend(), src_ctx.device(), dst_device}];
    if (idle.size() < kIdlePipelinesPerPair) {
      idle.push_back(std::move(pipeline));
      return;
    }
  }
  pipeline->wait_until_drained();  // one too many: its buffers go back once read
}

/// Enables `device`'s access to `peer` once; later copies reuse it.
void enable_peer_access_once(Backend& backend, int device, int peer) {
  PeerState& state = peer_state();
  const auto key = std::make_tuple(static_cast<const Backend*>(&backend), device, peer);
  {
    const std::lock_guard lock(state.mutex);
    if (state.peer_enabled.contains(key)) return;
  }
  backend.enable_peer_access(device, peer);
  const std::lock_guard lock(state.mutex);
  state.peer_enabled.insert(key);
}

/// Copies `bytes` from `src` (memory of src_stream's device) to `dst` (memory of dst_stream's
/// device) through the pair's staging pipeline: chunk k goes device-to-host on the source stream,
/// then host-to-device on the destination stream once it is in the buffer; a buffer is refilled
/// only after the destination stream has read it (also across copies).
void copy_staged(const char* operation, StreamState& dst_stream, std::byte* dst,
                 StreamState& src_stream, const std::byte* src, std::int64_t bytes) {
  Context& src_ctx = *src_stream.context;
  Context& dst_ctx = *dst_stream.context;
  Backend& backend = src_ctx.backend();
  const int src_device = src_ctx.device();
  const int dst_device = dst_ctx.device();
  const std::int64_t chunks = (bytes + kStagingChunk - 1) / kStagingChunk;
  std::unique_ptr<StagingPipeline> pipeline = take_pipeline(src_ctx, dst_device, operation);

  std::int64_t chunk = 0;
  try {
    for (; chunk < chunks; ++chunk) {
      const auto b = static_cast<std::size_t>(chunk % 2);
      const std::int64_t offset = chunk * kStagingChunk;
      const auto n = static_cast<std::size_t>(std::min(kStagingChunk, bytes - offset));
      std::byte* const staging = pipeline->buffers[b]->ptr;
      if (pipeline->drained_recorded[b]) {
        pipeline->drained[b].make_wait(src_device, src_stream.handle);
      }
      backend.copy(src_device, staging, src + offset, n, CopyKind::DeviceToHost, src_stream.handle);
      pipeline->filled[b].record(src_stream.handle);
      pipeline->filled[b].make_wait(dst_device, dst_stream.handle);
      backend.copy(dst_device, dst + offset, staging, n, CopyKind::HostToDevice, dst_stream.handle);
      pipeline->drained[b].record(dst_stream.handle);
      pipeline->drained_recorded[b] = true;
    }
  } catch (...) {
    // Chunks already enqueued may still use the buffers: they go only once both streams' work so
    // far has completed, never back to a pool while a copy may write into them. The pipeline is
    // not reused (its events' state is unknown).
    try {
      const std::vector<std::shared_ptr<const void>> buffers(pipeline->buffers.begin(),
                                                             pipeline->buffers.end());
      ContextState::of(src_ctx).in_flight.retire_after(src_stream, buffers);
      ContextState::of(dst_ctx).in_flight.retire_after(dst_stream, buffers);
    } catch (const std::exception& e) {
      report_error(
          fmt::format("{}: keeping the staging buffers of a failed copy: {}", operation, e.what()));
    }
    rethrow_with_chunk(operation, chunk, chunks, bytes, src_device, dst_device);
  }
  return_pipeline(src_ctx, dst_device, std::move(pipeline));
}

}  // namespace

void copy_between_devices(const char* operation, StreamState& dst_stream, const DeviceArray& dst,
                          const DeviceArray& src) {
  check_compatible(operation, dst, src);
  if (src.size() == 0) return;
  Context& dst_ctx = *dst_stream.context;
  const std::shared_ptr<Context> src_holder = ArrayAccess::memory(src)->context;
  Context& src_ctx = *src_holder;
  Backend& backend = dst_ctx.backend();
  // The source is read on its own stream (the array's, else its device's default stream), so that
  // the work already enqueued there that writes it comes first.
  StreamState& src_stream = resolve_stream(src.stream(), Stream{}, src_ctx, operation);

  const Layout& sl = src.layout();
  const Layout& dl = dst.layout();
  const bool bytes_match =
      sl.shape == dl.shape && ((sl.is_c_contiguous() && dl.is_c_contiguous()) ||
                               (sl.is_f_contiguous() && dl.is_f_contiguous()));
  const DeviceArray src_dense =
      bytes_match ? src : dense_on_own_device(operation, src, src_stream, true);
  const DeviceArray dst_dense =
      bytes_match ? dst : dense_on_own_device(operation, dst, dst_stream, false);
  const std::int64_t bytes = src.size() * sl.itemsize;
  auto* const to = static_cast<std::byte*>(dst_dense.data());
  const auto* const from = static_cast<const std::byte*>(src_dense.data());

  order_after_allocation(src_stream, *ArrayAccess::memory(src_dense));
  order_after_allocation(dst_stream, *ArrayAccess::memory(dst_dense));
  std::vector<std::shared_ptr<const void>> keep{ArrayAccess::memory(src_dense),
                                                ArrayAccess::memory(dst_dense)};
  // Mapped host memory is no device's allocation: a peer copy (direct device-to-device access)
  // does not apply to it, and the staged path copies it like device memory.
  const bool mapped = ArrayAccess::memory(src_dense)->host_alias != nullptr ||
                      ArrayAccess::memory(dst_dense)->host_alias != nullptr;
  if (!mapped && backend.can_access_peer(dst_ctx.device(), src_ctx.device())) {
    enable_peer_access_once(backend, dst_ctx.device(), src_ctx.device());
    order_after(backend, dst_stream, src_stream);
    try {
      backend.copy_peer(dst_ctx.device(), to, src_ctx.device(), from,
                        static_cast<std::size_t>(bytes), dst_stream.handle);
    } catch (const BackendError& e) {
      // Peer access withdrawn behind devmem's back (the application's disable call): enable it
      // again, once.
      if (e.code() != kPeerAccessNotEnabled) throw;
      forget_peer_access(backend, dst_ctx.device(), src_ctx.device());
      enable_peer_access_once(backend, dst_ctx.device(), src_ctx.device());
      backend.copy_peer(dst_ctx.device(), to, src_ctx.device(), from,
                        static_cast<std::size_t>(bytes), dst_stream.handle);
    }
    // Later work on the source's stream (which may overwrite the source) waits for the read.
    order_after(backend, src_stream, dst_stream);
  } else {
    copy_staged(operation, dst_stream, to, src_stream, from, bytes);
  }
  finish_enqueued(dst_stream, std::move(keep));
  if (!bytes_match && !dst.layout().is_c_contiguous()) {
    copy_elements(operation, dst_ctx, dst_stream, endpoint(dst), endpoint(dst_dense));
  }
}

void release_idle_peer_staging() noexcept {
  std::vector<std::unique_ptr<StagingPipeline>> released;
  {
    PeerState& state = peer_state();
    const std::lock_guard lock(state.mutex);
    for (auto& [pair, idle] : state.idle) {
      for (auto& pipeline : idle) released.push_back(std::move(pipeline));
    }
    state.idle.clear();
  }
  for (const auto& pipeline : released) {
    try {
      pipeline->wait_until_drained();
    } catch (const std::exception& e) {
      report_error(
          fmt::format("releasing the staging buffers of copies between devices: {}", e.what()));
    }
  }
}

void forget_peer_access(const Backend& backend, int device, int peer) noexcept {
  PeerState& state = peer_state();
  const std::lock_guard lock(state.mutex);
  state.peer_enabled.erase(std::make_tuple(&backend, device, peer));
}

}  // namespace devmem::detail

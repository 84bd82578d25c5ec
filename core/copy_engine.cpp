// The one strided-copy path behind every transfer (H2D, D2H, D2D, H2H), and the new arrays and
// fills that transfers and shape changes are built from (core/copy_engine.hpp).
#include "core/copy_engine.hpp"

#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/host_registration.hpp"
#include "core/stream_state.hpp"
#include "core/trace.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>

namespace devmem::detail {

CopyEndpoint endpoint(const DeviceArray& array) {
  const auto& mem = detail::ArrayAccess::memory(array);
  std::byte* base = mem ? mem->ptr : nullptr;
  std::byte* element0 = base == nullptr ? nullptr : base + array.layout().offset;
  const bool aliases_host = mem && mem->host_alias != nullptr;
  std::byte* identity0 = aliases_host ? mem->host_alias + array.layout().offset : element0;
  CopyEndpoint result{element0,       identity0, aliases_host, &array.layout(),
                      &array.dtype(), true,      false,        mem};
  result.device_memory = mem.get();
  return result;
}

CopyEndpoint endpoint(const HostArray& array) {
  const auto& mem = detail::ArrayAccess::memory(array);
  std::byte* base = mem ? mem->ptr : nullptr;
  std::byte* element0 = base == nullptr ? nullptr : base + array.layout().offset;
  CopyEndpoint result{
      element0, element0, true, &array.layout(), &array.dtype(), false, mem && mem->readonly, mem};
  result.pageable = !mem || mem->kind == HostMemoryKind::Pageable;
  return result;
}

namespace {

CopyKind kind_of(bool src_on_device, bool dst_on_device) {
  if (src_on_device) return dst_on_device ? CopyKind::DeviceToDevice : CopyKind::DeviceToHost;
  return dst_on_device ? CopyKind::HostToDevice : CopyKind::HostToHost;
}

bool ranges_overlap(const CopyEndpoint& a, const CopyEndpoint& b) {
  if (a.identity_on_host != b.identity_on_host) return false;
  const Extent ea = a.layout->byte_extent();
  const Extent eb = b.layout->byte_extent();
  // Extents are relative to each buffer's base, and identity0 = base + offset.
  const std::byte* a_base = a.identity0 - a.layout->offset;
  const std::byte* b_base = b.identity0 - b.layout->offset;
  return a_base + ea.begin < b_base + eb.end && b_base + eb.begin < a_base + ea.end;
}

/// The host bytes an endpoint's elements lie in (host arrays and mapped device views).
HostSpan host_span(const CopyEndpoint& side) {
  const Extent extent = side.layout->byte_extent();
  const std::byte* base = side.identity0 - side.layout->offset;
  return HostSpan{base + extent.begin, base + extent.end};
}

/// Keeps both sides' memory alive until the enqueued copy has completed, and says which host bytes
/// it uses (a pinned or mapped scope waits for them before unregistering).
void finish_copy(StreamState& stream, const CopyEndpoint& src, const CopyEndpoint& dst) {
  std::vector<std::shared_ptr<const void>> keep;
  keep.reserve(2);
  if (src.keep_alive) keep.push_back(src.keep_alive);
  if (dst.keep_alive) keep.push_back(dst.keep_alive);
  if (!stream.is_default && src.on_device && !dst.on_device && dst.pageable &&
      !host_range_registered(host_span(dst))) {
    // The data is ready when a copy into pageable memory returns, on every backend and whatever
    // the stream: what CUDA's and HIP's documented pageable-memory behaviour gives (and what
    // Numba's copy_to_host users rely on), made a guarantee rather than a driver detail (newer
    // CUDA documentation only says such a copy "might be synchronous").
    Context& ctx = *stream.context;
    ctx.backend().synchronize_stream(ctx.device(), stream.handle);
    detail::ContextState::of(ctx).in_flight.collect_retired();
    return;
  }
  std::vector<HostSpan> spans;
  if (!stream.is_default) {
    for (const CopyEndpoint* side : {&src, &dst}) {
      if (side->identity_on_host && side->identity0 != nullptr) spans.push_back(host_span(*side));
    }
  }
  finish_enqueued(stream, std::move(keep), std::move(spans));
}

std::string_view memory_kind(const CopyEndpoint& side) {
  if (side.on_device) return "device";
  return side.pageable ? "pageable" : "page-locked";
}

/// The trace's "copy" event: host time of the call (enqueue, and the wait where the copy is
/// synchronous), bytes, direction, memory kinds.
void trace_copy(trace::Clock::time_point start, const char* operation, const StreamState& stream,
                const CopyEndpoint& src, const CopyEndpoint& dst, bool strided) {
  const std::int64_t bytes = src.layout->nbytes();
  const double seconds = std::chrono::duration<double>(trace::Clock::now() - start).count();
  const std::string_view direction =
      src.on_device ? (dst.on_device ? "d2d" : "d2h") : (dst.on_device ? "h2d" : "h2h");
  trace::complete(
      "copy", operation, start,
      {{"direction", direction},
       {"bytes", bytes},
       {"source", memory_kind(src)},
       {"destination", memory_kind(dst)},
       {"strided", std::int64_t{strided ? 1 : 0}},
       {"stream", static_cast<const void*>(stream.handle)},
       {"GB/s over the call", seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0}});
}

/// A copy to or from pageable host memory cannot be captured into a graph: the vendor stages it
/// through its own buffers and devmem waits for it (finish_copy, the bounded path). Refused before
/// any vendor call, so the capture stays valid (review 2, N2).
void refuse_pageable_during_capture(const char* operation, Context& context,
                                    const StreamState& stream, const CopyEndpoint& src,
                                    const CopyEndpoint& dst) {
  if (stream.is_default) return;  // the legacy default stream is never captured
  for (const CopyEndpoint* side : {&src, &dst}) {
    if (side->on_device || !side->pageable || host_range_registered(host_span(*side))) continue;
    if (!context.backend().is_capturing(context.device(), stream.handle)) return;
    throw InvalidArgument(fmt::format(
        "{}: cannot copy {} pageable host memory during stream capture (a graph can only copy "
        "between device memory and page-locked host memory); use a pinned array "
        "(pinned_array) or a PinnedScope over the host buffer",
        operation, side == &src ? "from" : "into"));
  }
}

}  // namespace

void copy_elements(const char* operation, Context& context, StreamState& stream,
                   const CopyEndpoint& dst, const CopyEndpoint& src) {
  if (!(*src.dtype == *dst.dtype)) {
    throw InvalidArgument(fmt::format("{}: dtype mismatch: source is {}, destination is {}",
                                      operation, src.dtype->name(), dst.dtype->name()));
  }
  if (!layout::same_squeezed_shape(src.layout->shape, dst.layout->shape)) {
    throw InvalidArgument(fmt::format("{}: shape mismatch: source {}, destination {}", operation,
                                      layout::format_tuple(src.layout->shape),
                                      layout::format_tuple(dst.layout->shape)));
  }
  if (dst.readonly) {
    throw InvalidArgument(fmt::format("{}: the destination host array is read-only", operation));
  }
  if (src.layout->size() == 0) return;
  for (std::size_t k = 0; k < dst.layout->shape.size(); ++k) {
    if (dst.layout->strides[k] == 0 && dst.layout->shape[k] > 1) {
      throw InvalidArgument(fmt::format(
          "{}: the destination has a zero stride on axis {} of length {} (a broadcast array "
          "cannot be written element by element)",
          operation, k, dst.layout->shape[k]));
    }
  }

  refuse_pageable_during_capture(operation, context, stream, src, dst);
  if (src.device_memory != nullptr) order_after_allocation(stream, *src.device_memory);
  if (dst.device_memory != nullptr) order_after_allocation(stream, *dst.device_memory);
  const bool overlap = ranges_overlap(src, dst);
  // Two arrays of the same shape, both C- or both F-contiguous, are one contiguous range each with
  // element k at the same offset: one plain copy, without squeezing, planning or a plan to carry.
  // The common case, and the one where the per-call cost is most of the cost (small copies).
  const bool same_dense_order = (src.layout->is_c_contiguous() && dst.layout->is_c_contiguous()) ||
                                (src.layout->is_f_contiguous() && dst.layout->is_f_contiguous());
  const auto start = trace::start_time();
  if (!overlap && same_dense_order && src.layout->shape == dst.layout->shape) {
    context.backend().copy(context.device(), dst.element0, src.element0,
                           static_cast<std::size_t>(src.layout->nbytes()),
                           kind_of(src.on_device, dst.on_device), stream.handle);
    finish_copy(stream, src, dst);
    if (trace::active()) trace_copy(start, operation, stream, src, dst, false);
    return;
  }

  const Layout s = layout::squeeze(*src.layout);
  const Layout d = layout::squeeze(*dst.layout);

  if (overlap) {
    // The same bytes are read and written: copy the source aside first so that every element is
    // read before any is overwritten.
    const Layout dense = layout::make_layout(s.shape, s.itemsize, layout::strides_like(s));
    // The staging array must outlive `tmp`, which points into it.
    std::optional<DeviceArray> device_staging;
    std::optional<HostArray> host_staging;
    const CopyEndpoint tmp =
        src.on_device
            ? endpoint(device_staging.emplace(make_device_array(
                  context, dense, *src.dtype,
                  StreamState::wrap(detail::ContextState::of(context).default_stream), operation)))
            : endpoint(host_staging.emplace(make_host_array(dense, *src.dtype)));
    CopyEndpoint src_squeezed = src;
    src_squeezed.layout = &s;
    copy_elements(operation, context, stream, tmp, src_squeezed);
    CopyEndpoint dst_squeezed = dst;
    dst_squeezed.layout = &d;
    copy_elements(operation, context, stream, dst_squeezed, tmp);
    return;
  }

  const layout::CopyPlan plan = layout::plan_copy(d.shape, s.strides, d.strides, d.itemsize);
  context.backend().copy_strided(context.device(), dst.element0, src.element0, plan,
                                 kind_of(src.on_device, dst.on_device), stream.handle);
  finish_copy(stream, src, dst);
  if (trace::active()) trace_copy(start, operation, stream, src, dst, true);
}

void read_element_bytes(const char* operation, Context& context, StreamState& stream,
                        const std::shared_ptr<DeviceMemory>& memory, std::int64_t offset,
                        const DType& dtype, std::span<std::byte> destination) {
  // The two sides as copy_elements sees them (0-d layouts: no vectors to allocate), for the same
  // capture refusal and trace event; the copy itself is one backend call of itemsize bytes.
  const auto itemsize = static_cast<std::int64_t>(destination.size());
  const Layout src_layout{{}, {}, offset, itemsize};
  const Layout dst_layout{{}, {}, 0, itemsize};
  std::byte* const element = memory->ptr + offset;
  CopyEndpoint src{element,
                   memory->host_alias != nullptr ? memory->host_alias + offset : element,
                   memory->host_alias != nullptr,
                   &src_layout,
                   &dtype,
                   true,
                   false,
                   nullptr};
  src.device_memory = memory.get();
  CopyEndpoint dst{
      destination.data(), destination.data(), true, &dst_layout, &dtype, false, false, nullptr};
  dst.pageable = true;
  refuse_pageable_during_capture(operation, context, stream, src, dst);
  order_after_allocation(stream, *memory);
  const auto start = trace::start_time();
  context.backend().copy(context.device(), destination.data(), element, destination.size(),
                         CopyKind::DeviceToHost, stream.handle);
  // The bytes are returned to the caller: the copy must be complete (the array, which the caller
  // holds, keeps the memory alive until then).
  context.backend().synchronize_stream(context.device(), stream.handle);
  detail::ContextState::of(context).in_flight.collect_retired();
  if (trace::active()) trace_copy(start, operation, stream, src, dst, false);
}

Order resolve_copy_order(const Layout& source, Order order, const char* operation) {
  switch (order) {
    case Order::C:
    case Order::F:
      return order;
    case Order::A:
      return source.is_f_contiguous() && !source.is_c_contiguous() ? Order::F : Order::C;
    case Order::K:
      break;
  }
  throw InvalidArgument(fmt::format("{}: order must be 'C', 'F' or 'A', got '{}'", operation,
                                    static_cast<char>(order)));
}

void fill_pattern(std::byte* dst, std::int64_t count, const void* value,
                  std::int64_t itemsize) noexcept {
  if (count <= 0) return;
  const auto total = static_cast<std::size_t>(count * itemsize);
  auto filled = static_cast<std::size_t>(itemsize);
  std::memcpy(dst, value, filled);
  while (filled < total) {
    const std::size_t n = std::min(filled, total - filled);
    std::memcpy(dst + filled, dst, n);
    filled += n;
  }
}

HostArray make_host_array(Layout layout, DType dtype) {
  auto memory = std::make_shared<HostMemory>();
  memory->bytes = layout.byte_extent().end;
  memory->kind = HostMemoryKind::Pageable;
  if (memory->bytes > 0) {
    // calloc: zeroed pages come lazily from the kernel, so large arrays cost nothing until used.
    memory->ptr = static_cast<std::byte*>(std::calloc(static_cast<std::size_t>(memory->bytes), 1));
    if (memory->ptr == nullptr) {
      throw OutOfMemory(
          fmt::format("HostArray: out of host memory allocating {} bytes", memory->bytes),
          memory->bytes);
    }
    memory->owned = true;
  }
  return detail::ArrayAccess::make(std::move(memory), std::move(layout), std::move(dtype));
}

Layout broadcast_core(const Layout& layout) {
  Layout core = layout;
  for (std::size_t k = 0; k < core.shape.size(); ++k) {
    if (core.strides[k] == 0 && core.shape[k] > 1) core.shape[k] = 1;
  }
  return core;
}

DeviceArray make_device_array_like(Context& context, const Layout& like, DType dtype, Stream stream,
                                   const char* operation) {
  return make_device_array(context,
                           layout::make_layout(like.shape, like.itemsize,
                                               layout::strides_like(like), Order::C, operation),
                           std::move(dtype), std::move(stream), operation);
}

DeviceArray make_device_array(Context& context, Layout layout, DType dtype, Stream stream,
                              const char* operation) {
  // The manager is told the array's stream; InvalidArgument for another context's stream.
  (void)resolve_stream(stream, Stream{}, context, operation);
  const auto& requested = StreamState::of(stream);
  auto memory = detail::ContextState::of(context).allocate_device(
      layout.byte_extent().end,
      requested ? requested : detail::ContextState::of(context).default_stream, operation);
  return detail::ArrayAccess::make(std::move(memory), std::move(layout), std::move(dtype),
                                   std::move(stream));
}

}  // namespace devmem::detail

// HostArray and MappedArray.
#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/copy_engine.hpp"
#include "core/internal.hpp"
#include "core/reshape.hpp"
#include "core/stream_state.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>

namespace devmem {

const char* to_string(HostMemoryKind kind) noexcept {
  switch (kind) {
    case HostMemoryKind::Pageable:
      return "pageable";
    case HostMemoryKind::Pinned:
      return "pinned";
    case HostMemoryKind::Mapped:
      return "mapped";
  }
  return "unknown";
}

namespace detail {

std::int64_t checked_element_offset(const Layout& layout, std::span<const std::int64_t> indices,
                                    const char* operation) {
  if (static_cast<int>(indices.size()) != layout.ndim()) {
    throw InvalidArgument(fmt::format("{}: {} indices given for an array of dimension {}",
                                      operation, indices.size(), layout.ndim()));
  }
  std::int64_t offset = layout.offset;
  for (std::size_t k = 0; k < indices.size(); ++k) {
    const std::int64_t n = layout.shape[k];
    std::int64_t i = indices[k];
    if (i < -n || i >= n) {
      throw InvalidArgument(fmt::format("{}: index {} is out of bounds for axis {} with size {}",
                                        operation, i, k, n));
    }
    if (i < 0) i += n;
    offset += i * layout.strides[k];
  }
  return offset;
}

void check_dtype(const DType& expected, const DType& actual, const char* operation) {
  if (!(expected == actual)) {
    throw InvalidArgument(fmt::format("{}: the array's dtype is {}, not {}", operation,
                                      actual.name(), expected.name()));
  }
}

void check_view(const DType& expected, std::size_t rank, const DType& dtype, const Layout& layout,
                const void* data) {
  const int ndim = layout.ndim();
  if (!(expected == dtype)) {
    throw InvalidArgument(fmt::format("DeviceArray::view<{}, {}>: the array's dtype is {}, not {}",
                                      expected.name(), rank, dtype.name(), expected.name()));
  }
  if (static_cast<std::size_t>(ndim) != rank) {
    throw InvalidArgument(
        fmt::format("DeviceArray::view<{}, {}>: the array has {} dimension{}, not {}",
                    expected.name(), rank, ndim, ndim == 1 ? "" : "s", rank));
  }
  // No element of an empty array is ever accessed, so its layout cannot fault.
  if (layout.size() == 0) return;
  const std::string operation = fmt::format("DeviceArray::view<{}, {}>", expected.name(), rank);
  check_pointer_alignment(operation.c_str(), "data pointer", data, expected);
  check_stride_alignment(operation.c_str(), layout, expected);
}

void check_pointer_alignment(const char* operation, const char* what, const void* pointer,
                             const DType& dtype) {
  if (reinterpret_cast<std::uintptr_t>(pointer) % static_cast<std::uintptr_t>(dtype.alignment()) !=
      0) {
    throw InvalidArgument(fmt::format("{}: {} {} is not aligned to {} bytes for dtype {}",
                                      operation, what, fmt::ptr(pointer), dtype.alignment(),
                                      dtype.name()));
  }
}

void check_stride_alignment(const char* operation, const Layout& layout, const DType& dtype) {
  for (std::size_t k = 0; k < layout.shape.size(); ++k) {
    // A stride is only ever applied to an axis with a second element.
    if (layout.shape[k] > 1 && layout.strides[k] % dtype.alignment() != 0) {
      throw InvalidArgument(fmt::format(
          "{}: byte stride {} of axis {} is not a multiple of the alignment {} of dtype {}",
          operation, layout.strides[k], k, dtype.alignment(), dtype.name()));
    }
  }
}

}  // namespace detail

HostArray::HostArray() : HostArray(Shape{0}) {}

namespace {

HostArray dense_host_array(std::span<const std::int64_t> shape, DType dtype, Order order) {
  Layout layout = layout::make_layout(shape, dtype.itemsize(), {}, order, "HostArray");
  return detail::make_host_array(std::move(layout), std::move(dtype));
}

}  // namespace

HostArray::HostArray(Shape shape, DType dtype, Order order)
    : HostArray(dense_host_array(shape, std::move(dtype), order)) {}

HostArray::HostArray(std::shared_ptr<detail::HostMemory> memory, Layout layout, DType dtype)
    : ArrayBase(std::move(layout), std::move(dtype)), memory_(std::move(memory)) {}

namespace {
HostArray make_view(const void* data, Shape shape, DType dtype, Strides strides,
                    std::shared_ptr<const void> owner, bool readonly) {
  Layout l = layout::make_layout(shape, dtype.itemsize(), strides, Order::C, "HostArray::view");
  if (data == nullptr && l.size() != 0) {
    throw InvalidArgument(
        fmt::format("HostArray::view: null data for shape {}", layout::format_tuple(l.shape)));
  }
  auto memory = std::make_shared<detail::HostMemory>();
  // `data` is element (0, ..., 0); the extent may start before it when strides are negative.
  memory->ptr = const_cast<std::byte*>(static_cast<const std::byte*>(data)) - l.offset;
  memory->bytes = l.byte_extent().end;
  memory->readonly = readonly;
  memory->keep_alive = std::move(owner);
  return detail::ArrayAccess::make(std::move(memory), std::move(l), std::move(dtype));
}
}  // namespace

HostArray HostArray::view(void* data, Shape shape, DType dtype, Strides strides,
                          std::shared_ptr<const void> owner) {
  return make_view(data, std::move(shape), std::move(dtype), std::move(strides), std::move(owner),
                   false);
}

HostArray HostArray::view(const void* data, Shape shape, DType dtype, Strides strides,
                          std::shared_ptr<const void> owner) {
  return make_view(data, std::move(shape), std::move(dtype), std::move(strides), std::move(owner),
                   true);
}

HostArray HostArray::view_with_order(const void* data, std::size_t count,
                                     std::span<const std::int64_t> shape, DType dtype, Order order,
                                     bool readonly) {
  const auto n = static_cast<std::int64_t>(count);
  Shape resolved = layout::resolve_reshape(n, shape);
  if (order != Order::C && order != Order::F) {
    throw InvalidArgument(fmt::format("HostArray::view: order must be 'C' or 'F', got '{}'",
                                      static_cast<char>(order)));
  }
  Strides strides = layout::dense_strides(resolved, dtype.itemsize(), order);
  return make_view(data, std::move(resolved), std::move(dtype), std::move(strides), {}, readonly);
}

HostMemoryKind HostArray::kind() const noexcept {
  return memory_ ? memory_->kind : HostMemoryKind::Pageable;
}
bool HostArray::is_readonly() const noexcept {
  return memory_ && memory_->readonly;
}
std::byte* HostArray::base() const noexcept {
  return memory_ ? memory_->ptr : nullptr;
}
void* HostArray::data() const noexcept {
  return base() == nullptr ? nullptr : base() + layout_.offset;
}

void HostArray::copy_from(const HostArray& source) const {
  const auto dst = detail::endpoint(*this);
  const auto src = detail::endpoint(source);
  if (!(dtype_ == source.dtype_)) {
    throw InvalidArgument(fmt::format("copy_from: dtype mismatch: source is {}, destination is {}",
                                      source.dtype_.name(), dtype_.name()));
  }
  if (!layout::same_squeezed_shape(source.shape(), shape())) {
    throw InvalidArgument(fmt::format("copy_from: shape mismatch: source {}, destination {}",
                                      layout::format_tuple(source.shape()),
                                      layout::format_tuple(shape())));
  }
  if (is_readonly()) throw InvalidArgument("copy_from: the destination host array is read-only");
  if (size() == 0) return;
  const Layout s = layout::squeeze(source.layout_);
  const Layout d = layout::squeeze(layout_);
  // Host-to-host copies need no device; overlapping ranges are staged through a dense copy.
  const std::byte* s_lo = src.element0 - s.offset + s.byte_extent().begin;
  const std::byte* s_hi = src.element0 - s.offset + s.byte_extent().end;
  const std::byte* d_lo = dst.element0 - d.offset + d.byte_extent().begin;
  const std::byte* d_hi = dst.element0 - d.offset + d.byte_extent().end;
  if (s_lo < d_hi && d_lo < s_hi) {
    HostArray staging = source.copy(Order::K);
    copy_from(staging);
    return;
  }
  layout::copy_host_strided(layout::plan_copy(d.shape, s.strides, d.strides, d.itemsize),
                            dst.element0, src.element0);
}

void HostArray::fill_bytes(const void* value) const {
  if (is_readonly()) throw InvalidArgument("fill: the host array is read-only");
  if (size() == 0) return;
  // A broadcast array has fewer distinct elements than its size: fill each once.
  const Layout target = detail::broadcast_core(layout_);
  if (target.is_contiguous()) {
    detail::fill_pattern(static_cast<std::byte*>(data()), target.size(), value, target.itemsize);
    return;
  }
  // Broadcast one element over the strided array: a source with every stride 0. Only the
  // elements are written, never the gaps between them.
  const Strides zero(target.shape.size(), 0);
  layout::copy_host_strided(layout::plan_copy(target.shape, zero, target.strides, target.itemsize),
                            data(), value);
}

HostArray HostArray::copy(Order order) const {
  Strides strides = order == Order::K
                        ? layout::strides_like(layout_)
                        : layout::dense_strides(layout_.shape, layout_.itemsize,
                                                detail::resolve_copy_order(layout_, order, "copy"));
  HostArray out = detail::make_host_array(
      layout::make_layout(layout_.shape, layout_.itemsize, strides, Order::C, "copy"), dtype_);
  out.copy_from(*this);
  return out;
}

HostArray HostArray::reshape(Shape new_shape, Order order) const {
  return detail::reshaped(*this, detail::plan_reshape(layout_, new_shape, order));
}

HostArray HostArray::ravel(Order order) const {
  return detail::reshaped(*this, detail::plan_ravel(layout_, order));
}

DeviceArray HostArray::device_view(const Stream& stream) const {
  if (!memory_ || memory_->kind != HostMemoryKind::Mapped) {
    throw InvalidArgument(
        fmt::format("device_view: a {} host array is not mapped into the device address space (use "
                    "mapped_array() or a mapped() scope)",
                    to_string(kind())));
  }
  auto device_memory = std::make_shared<detail::DeviceMemory>();
  device_memory->context = memory_->context;
  device_memory->ptr = memory_->device_ptr;
  device_memory->bytes = memory_->bytes;
  device_memory->keep_alive = memory_;
  device_memory->host_alias = memory_->ptr;
  detail::track_device_memory(device_memory);
  if (stream.is_specified()) {
    (void)detail::resolve_stream(stream, Stream{}, *memory_->context, "device_view");
  }
  return detail::ArrayAccess::make(std::move(device_memory), layout_, dtype_, stream);
}

DeviceArray HostArray::device_view() const {
  return device_view(Stream{});
}

MappedArray::MappedArray(HostArray host, Stream stream)
    : HostArray(std::move(host)), stream_(std::move(stream)) {}

DeviceArray MappedArray::device() const {
  return device_view(stream_);
}

}  // namespace devmem

// DeviceArray: transfers, shape changes that may copy, element access and fills.
#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/copy_engine.hpp"
#include "core/reshape.hpp"
#include "core/stream_state.hpp"

#include <devmem/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

namespace devmem {

namespace {

// Context of a device array that has no memory (size 0, default-constructed): its stream's, else
// the current one.
std::shared_ptr<Context> context_of(const DeviceArray& a) {
  return detail::ArrayAccess::memory(a) ? detail::ArrayAccess::memory(a)->context
                                        : a.stream().context();
}

}  // namespace

DeviceArray::DeviceArray()
    : ArrayBase(layout::make_layout(Shape{0}, 8, {}, Order::C, "DeviceArray"), DType{}) {}

DeviceArray::DeviceArray(std::shared_ptr<detail::DeviceMemory> memory, Layout layout, DType dtype,
                         Stream stream)
    : ArrayBase(std::move(layout), std::move(dtype)),
      memory_(std::move(memory)),
      stream_(std::move(stream)) {}

void* DeviceArray::data() const noexcept {
  if (!memory_ || memory_->ptr == nullptr) return nullptr;
  return memory_->ptr + layout_.offset;
}

std::shared_ptr<Context> DeviceArray::context() const {
  return memory_ ? memory_->context : stream_.context();
}

Context* DeviceArray::memory_context() const noexcept {
  return memory_ ? memory_->context.get() : nullptr;
}

DeviceArray DeviceArray::bind(const Stream& stream) const {
  if (memory_ && stream.is_specified()) {
    (void)detail::resolve_stream(stream, Stream{}, *memory_->context, "bind");
  }
  return DeviceArray(memory_, layout_, dtype_, stream);
}

Stream DeviceArray::resolve(const Stream& stream) const {
  return stream.is_specified() ? stream : stream_;
}

HostArray DeviceArray::copy_to_host(const Stream& stream) const {
  HostArray out = detail::make_host_array(
      layout::make_layout(layout_.shape, layout_.itemsize, layout::strides_like(layout_), Order::C,
                          "copy_to_host"),
      dtype_);
  copy_to_host(out, stream);
  return out;
}

void DeviceArray::record_use(const Stream& stream) const {
  const std::shared_ptr<detail::StreamState>& state = detail::StreamState::of(stream);
  if (!state) {
    throw InvalidArgument(
        "DeviceArray::record_use: the stream is unspecified (pass the stream that the untracked "
        "work runs on)");
  }
  if (!memory_) return;  // no elements, no memory to keep
  std::vector<detail::HostSpan> spans;
  if (memory_->host_alias != nullptr) {  // a mapped view: the work uses these host bytes
    spans.push_back({memory_->host_alias, memory_->host_alias + memory_->bytes});
  }
  detail::ContextState::of(*state->context)
      .in_flight.retire_after(*state, {memory_}, std::move(spans));
}

void DeviceArray::copy_to_host(const HostArray& destination, const Stream& stream) const {
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(stream, stream_, ctx, "copy_to_host");
  detail::copy_elements("copy_to_host", ctx, s, detail::endpoint(destination),
                        detail::endpoint(*this));
}

void DeviceArray::copy_to_device(const HostArray& source, const Stream& stream) const {
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(stream, stream_, ctx, "copy_to_device");
  detail::copy_elements("copy_to_device", ctx, s, detail::endpoint(*this),
                        detail::endpoint(source));
}

void DeviceArray::copy_to_device(const DeviceArray& source, const Stream& stream) const {
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(stream, stream_, ctx, "copy_to_device");
  if (source.memory_ && memory_ && source.memory_->context.get() != &ctx) {
    // Arrays of two devices: a peer copy (docs/scaling-out.md#several-devices).
    detail::copy_between_devices("copy_to_device", s, *this, source);
    return;
  }
  detail::copy_elements("copy_to_device", ctx, s, detail::endpoint(*this),
                        detail::endpoint(source));
}

DeviceArray DeviceArray::reshape(Shape new_shape, Order order, const Stream& stream) const {
  // A view keeps this array's stream; a copy is made on (and gets) the stream asked for.
  return detail::reshaped(*this, detail::plan_reshape(layout_, new_shape, order), stream_,
                          resolve(stream), "reshape");
}

DeviceArray DeviceArray::ravel(Order order, const Stream& stream) const {
  const Stream use = resolve(stream);
  return detail::reshaped(*this, detail::plan_ravel(layout_, order), use, use, "ravel");
}

std::vector<DeviceArray> DeviceArray::split(std::int64_t section, const Stream& stream) const {
  const Stream use = resolve(stream);
  std::vector<DeviceArray> parts;
  for (Layout& l : layout::split(layout_, section)) {
    parts.push_back(DeviceArray(memory_, std::move(l), dtype_, use));
  }
  return parts;
}

DeviceArray DeviceArray::copy(Order order, const Stream& stream) const {
  const Stream use = resolve(stream);
  Strides strides = order == Order::K
                        ? layout::strides_like(layout_)
                        : layout::dense_strides(layout_.shape, layout_.itemsize,
                                                detail::resolve_copy_order(layout_, order, "copy"));
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(use, Stream{}, ctx, "copy");
  DeviceArray out = detail::make_device_array(
      ctx, layout::make_layout(layout_.shape, layout_.itemsize, strides, Order::C, "copy"), dtype_,
      use, "copy");
  detail::copy_elements("copy", ctx, s, detail::endpoint(out), detail::endpoint(*this));
  return out;
}

void DeviceArray::read_element(std::span<const std::int64_t> index, void* value) const {
  item_bytes(index, std::span<std::byte>(static_cast<std::byte*>(value),
                                         static_cast<std::size_t>(layout_.itemsize)));
}

void DeviceArray::item_bytes(std::span<const std::int64_t> index, std::span<std::byte> destination,
                             const Stream& stream) const {
  const std::int64_t offset = checked_offset(index, "item");
  if (std::cmp_not_equal(destination.size(), layout_.itemsize)) {
    throw InvalidArgument(
        fmt::format("item: the destination has {} bytes, an element of dtype {} has {}",
                    destination.size(), dtype_.name(), layout_.itemsize));
  }
  // A zero-byte dtype (V0) has nothing to read, and may have no memory at all.
  if (destination.empty()) return;
  if (!memory_) throw InvalidArgument("item: the array has no memory");
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(stream, stream_, ctx, "item");
  detail::read_element_bytes("item", ctx, s, memory_, offset, dtype_, destination);
}

void DeviceArray::write_element(std::span<const std::int64_t> index, const void* value) const {
  const std::int64_t offset = checked_offset(index, "set_item");
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(Stream{}, stream_, ctx, "set_item");
  const DeviceArray element(memory_, Layout{{}, {}, offset, layout_.itemsize}, dtype_, stream_);
  // The caller's value may change as soon as we return; an owned copy is kept until the
  // (possibly asynchronous) transfer has read it.
  HostArray staged = detail::make_host_array(Layout{{}, {}, 0, layout_.itemsize}, dtype_);
  std::memcpy(staged.data(), value, static_cast<std::size_t>(layout_.itemsize));
  detail::copy_elements("set_item", ctx, s, detail::endpoint(element), detail::endpoint(staged));
}

void DeviceArray::fill_bytes(const void* value, const Stream& stream) const {
  if (size() == 0) return;
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(stream, stream_, ctx, "fill");
  // A broadcast array has fewer distinct elements than its size: fill each once.
  const DeviceArray target(memory_, detail::broadcast_core(layout_), dtype_, stream_);
  const Layout& tl = target.layout_;
  const auto* bytes = static_cast<const unsigned char*>(value);
  const auto itemsize = static_cast<std::size_t>(tl.itemsize);
  const bool uniform =
      std::all_of(bytes, bytes + itemsize, [&](unsigned char b) { return b == bytes[0]; });
  if (uniform && tl.is_contiguous()) {
    detail::order_after_allocation(s, *memory_);
    ctx.backend().memset(ctx.device(), target.data(), bytes[0],
                         static_cast<std::size_t>(tl.nbytes()), s.handle);
    detail::finish_enqueued(s, {memory_});
    return;
  }
  // A dense host copy of the pattern in the array's own axis order, then one strided copy: large
  // rows instead of one tiny copy per element, and the gaps of a strided array stay untouched.
  HostArray pattern = detail::make_host_array(
      layout::make_layout(tl.shape, tl.itemsize, layout::strides_like(tl), Order::C, "fill"),
      dtype_);
  detail::fill_pattern(static_cast<std::byte*>(pattern.data()), tl.size(), value, tl.itemsize);
  detail::copy_elements("fill", ctx, s, detail::endpoint(target), detail::endpoint(pattern));
}

void DeviceArray::memset(int byte_value, const Stream& stream) const {
  if (byte_value < 0 || byte_value > 255) {
    throw InvalidArgument(fmt::format("memset: byte value must be in 0..255, got {}", byte_value));
  }
  std::vector<unsigned char> element(static_cast<std::size_t>(layout_.itemsize),
                                     static_cast<unsigned char>(byte_value));
  fill_bytes(element.data(), stream);
}

void DeviceArray::assign(const HostArray& value, const Stream& stream) const {
  if (!(value.dtype() == dtype_)) {
    throw InvalidArgument(fmt::format("assign: dtype mismatch: value is {}, array is {}",
                                      value.dtype().name(), dtype_.name()));
  }
  if (value.ndim() > ndim()) {
    throw InvalidArgument(
        fmt::format("assign: cannot assign a {}-d value to a {}-d array", value.ndim(), ndim()));
  }
  if (size() == 0) return;
  const HostArray broadcast = detail::ArrayAccess::make(
      detail::ArrayAccess::memory(value),
      layout::broadcast_to(value.layout(), layout_.shape, "assign"), dtype_);
  const auto ctx_holder = context_of(*this);
  Context& ctx = *ctx_holder;
  detail::StreamState& s = detail::resolve_stream(stream, stream_, ctx, "assign");
  detail::copy_elements("assign", ctx, s, detail::endpoint(*this), detail::endpoint(broadcast));
}

}  // namespace devmem

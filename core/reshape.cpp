// reshape and ravel of DeviceArray and HostArray (core/reshape.hpp): the plan from the layouts,
// then the view or the copy.
#include "core/reshape.hpp"

#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/copy_engine.hpp"
#include "core/stream_state.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

namespace devmem::detail {

namespace {

ReshapeCopy plan_reshape_copy(const Layout& source, const Shape& new_shape, Order order,
                              const char* operation) {
  const Order o = resolve_copy_order(source, order, operation);
  ReshapeCopy out;
  out.target = layout::make_layout(new_shape, source.itemsize, {}, o, operation);
  // A dense array in order `o` can always be viewed with any shape of the same size in order `o`.
  auto as_source = layout::reshape_view(out.target, source.shape, o);
  if (!as_source) {
    throw Error(fmt::format("{}: internal error: dense layout {} could not be viewed as {}",
                            operation, layout::format_tuple(new_shape),
                            layout::format_tuple(source.shape)));
  }
  out.target_as_source = std::move(*as_source);
  return out;
}

ReshapeCopy plan_ravel_copy(const Layout& source, Order order) {
  ReshapeCopy out;
  out.target = layout::make_layout(Shape{source.size()}, source.itemsize, {}, Order::C, "ravel");
  out.target_as_source = layout::make_layout(
      source.shape, source.itemsize, layout::ravel_strides(source, order), Order::C, "ravel");
  return out;
}

}  // namespace

ReshapePlan plan_reshape(const Layout& source, std::span<const std::int64_t> new_shape,
                         Order order) {
  const Shape resolved = layout::resolve_reshape(source.size(), new_shape);
  if (order == Order::K) throw InvalidArgument("reshape: order must be 'C', 'F' or 'A', got 'K'");
  ReshapePlan plan;
  plan.view = layout::reshape_view(source, resolved, order);
  // NumPy copies here; a view would reorder the elements.
  if (!plan.view) plan.copy = plan_reshape_copy(source, resolved, order, "reshape");
  return plan;
}

ReshapePlan plan_ravel(const Layout& source, Order order) {
  ReshapePlan plan;
  plan.view = layout::ravel_view(source, order);
  // NumPy's ravel is always contiguous: a strided 1-d view (what reshape({size}) may give) would
  // not be, so the elements are copied into a new dense array in the order ravel reads them.
  if (!plan.view) plan.copy = plan_ravel_copy(source, order);
  return plan;
}

DeviceArray reshaped(const DeviceArray& source, const ReshapePlan& plan, const Stream& view_stream,
                     const Stream& use, const char* operation) {
  const std::shared_ptr<DeviceMemory>& memory = ArrayAccess::memory(source);
  if (plan.view) return ArrayAccess::make(memory, *plan.view, source.dtype(), view_stream);
  const auto ctx_holder = source.context();
  Context& ctx = *ctx_holder;
  StreamState& s = resolve_stream(use, Stream{}, ctx, operation);
  DeviceArray out = make_device_array(ctx, plan.copy.target, source.dtype(), use, operation);
  const DeviceArray target_view =
      ArrayAccess::make(ArrayAccess::memory(out), plan.copy.target_as_source, source.dtype(), use);
  copy_elements(operation, ctx, s, endpoint(target_view), endpoint(source));
  return out;
}

HostArray reshaped(const HostArray& source, const ReshapePlan& plan) {
  const std::shared_ptr<HostMemory>& memory = ArrayAccess::memory(source);
  if (plan.view) return ArrayAccess::make(memory, *plan.view, source.dtype());
  HostArray out = make_host_array(plan.copy.target, source.dtype());
  ArrayAccess::make(ArrayAccess::memory(out), plan.copy.target_as_source, source.dtype())
      .copy_from(source);
  return out;
}

}  // namespace devmem::detail

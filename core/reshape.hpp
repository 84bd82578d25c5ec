// reshape and ravel of DeviceArray and HostArray, written once: NumPy's choice between a view and
// a copy (a view never reorders elements: docs/numba.md#reshape-never-reorders), the layouts of
// the copy, and carrying the copy out for either kind of array. The arrays' reshape and ravel only
// say which stream the result gets. Not installed; only core/ includes it.
#pragma once

#include <devmem/device_array.hpp>
#include <devmem/host_array.hpp>
#include <devmem/layout.hpp>
#include <devmem/stream.hpp>

#include <cstdint>
#include <optional>
#include <span>

namespace devmem::detail {

/// The layouts of a reshape/ravel that has to copy: `target` is the new array (dense in `order`),
/// `target_as_source` is the same memory viewed with the source's shape, so that copying the
/// source into it puts the elements in `order`.
struct ReshapeCopy {
  Layout target;
  Layout target_as_source;
};

/// What reshape or ravel gives for an array with a layout: a view with `view` when NumPy gives
/// one, otherwise a new array made by `copy`.
struct ReshapePlan {
  std::optional<Layout> view;
  ReshapeCopy copy;  // meaningful only without a view
};

/// NumPy reshape of `source` to `new_shape` (one dimension may be -1) in `order`. Errors, in this
/// order: those of layout::resolve_reshape, InvalidArgument for order K, then for another order
/// than C, F or A.
ReshapePlan plan_reshape(const Layout& source, std::span<const std::int64_t> new_shape,
                         Order order);
/// NumPy ravel of `source` in `order` (C, F, A or K): a view exactly when the elements already lie
/// contiguously in that order, otherwise a copy into a dense 1-d array in the order NumPy's ravel
/// reads them (layout::ravel_strides). InvalidArgument for another order.
ReshapePlan plan_ravel(const Layout& source, Order order);

/// The array that reshape or ravel (`operation`, named in errors) returns for `source` by `plan`:
/// the view with stream `view_stream`, or a new array allocated on `use` (and with that stream)
/// into which `source`'s elements are copied on `use`.
DeviceArray reshaped(const DeviceArray& source, const ReshapePlan& plan, const Stream& view_stream,
                     const Stream& use, const char* operation);
/// The same for a host array: the copy is a new pageable array, filled before it is returned.
HostArray reshaped(const HostArray& source, const ReshapePlan& plan);

}  // namespace devmem::detail

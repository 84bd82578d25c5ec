// Checks shared by a few core sources that have no other header in common: the memory managers'
// (an adaptor's upstream, allocation during graph capture) and the arrays' (stride alignment). What
// is left of the header that once declared all of core's internals; those now have headers named
// for them (array_memory, stream_state, context_state, copy_engine, host_registration, reshape,
// report_error). Not installed; only core/ includes it.
#pragma once

#include <devmem/dtype.hpp>
#include <devmem/layout.hpp>
#include <devmem/memory_manager.hpp>
#include <devmem/stream.hpp>

#include <cstddef>
#include <memory>
#include <string_view>

namespace devmem {

class Context;

namespace detail {

/// `upstream` for a manager of `context` made by `who` (an adaptor, the pool): a new
/// DirectMemoryManager when null; InvalidArgument naming `who` when it belongs to another context
/// or has another interface version (memory_adaptors.cpp).
std::shared_ptr<MemoryManager> checked_upstream(Context& context,
                                                std::shared_ptr<MemoryManager> upstream,
                                                std::string_view who);

/// InvalidArgument when `stream` (for the default stream: any blocking stream of the device) is
/// being captured into a graph: `manager` cannot allocate `bytes` then (memory_manager.cpp).
void refuse_during_capture(Context& context, std::string_view manager, std::size_t bytes,
                           const Stream& stream);

/// Throws InvalidArgument ("<operation>: byte stride S of axis K is not a multiple of the
/// alignment A of dtype D") when an axis longer than 1 has a stride that would put its second
/// element off the dtype's alignment: a typed access there faults on a GPU (host_array.cpp).
void check_stride_alignment(const char* operation, const Layout& layout, const DType& dtype);

}  // namespace detail
}  // namespace devmem

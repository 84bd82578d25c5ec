// Free functions of memory.hpp: allocation, to_device, pinned and mapped memory, scopes.
#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/copy_engine.hpp"
#include "core/host_registration.hpp"
#include "core/report_error.hpp"
#include "core/stream_state.hpp"

#include <devmem/error.hpp>
#include <devmem/memory.hpp>

#include <fmt/format.h>

#include <exception>
#include <map>
#include <mutex>
#include <optional>

namespace devmem {

namespace {

std::shared_ptr<Context> context_of(const Stream& stream) {
  return stream.is_specified() ? stream.context() : current_context();
}

}  // namespace

DeviceArray device_array(Shape shape, DType dtype, Strides strides, Order order,
                         const Stream& stream) {
  Layout l = layout::make_layout(shape, dtype.itemsize(), strides, order, "device_array");
  (void)layout::checked_nbytes(l.shape, l.itemsize, "device_array");
  auto ctx = context_of(stream);
  return detail::make_device_array(*ctx, std::move(l), std::move(dtype), stream, "device_array");
}

DeviceArray device_array_like(const DeviceArray& like, const Stream& stream) {
  auto ctx = stream.is_specified() ? stream.context() : like.context();
  if (!ctx) ctx = current_context();
  return detail::make_device_array_like(*ctx, like.layout(), like.dtype(), stream,
                                        "device_array_like");
}

DeviceArray device_array_like(const HostArray& like, const Stream& stream) {
  auto ctx = context_of(stream);
  return detail::make_device_array_like(*ctx, like.layout(), like.dtype(), stream,
                                        "device_array_like");
}

DeviceArray to_device(const HostArray& source, const Stream& stream, bool copy,
                      const DeviceArray* to) {
  if (to != nullptr) {
    if (!(to->dtype() == source.dtype())) {
      throw InvalidArgument(fmt::format("to_device: dtype mismatch: source is {}, `to` is {}",
                                        source.dtype().name(), to->dtype().name()));
    }
    if (!layout::same_squeezed_shape(source.shape(), to->shape())) {
      throw InvalidArgument(fmt::format("to_device: shape mismatch: source {}, `to` {}",
                                        layout::format_tuple(source.shape()),
                                        layout::format_tuple(to->shape())));
    }
    if (copy) to->copy_to_device(source, stream);
    return *to;
  }
  auto ctx = context_of(stream);
  DeviceArray out =
      detail::make_device_array_like(*ctx, source.layout(), source.dtype(), stream, "to_device");
  if (copy) out.copy_to_device(source, stream);
  return out;
}

HostArray pinned_array(Shape shape, DType dtype, Strides strides, Order order) {
  Layout l = layout::make_layout(shape, dtype.itemsize(), strides, order, "pinned_array");
  auto memory = detail::ContextState::of(*current_context())
                    .allocate_host(l.byte_extent().end, HostAllocFlags::None, "pinned_array");
  return detail::ArrayAccess::make(std::move(memory), std::move(l), std::move(dtype));
}

MappedArray mapped_array(Shape shape, DType dtype, Strides strides, Order order,
                         const Stream& stream, bool portable, bool wc) {
  Layout l = layout::make_layout(shape, dtype.itemsize(), strides, order, "mapped_array");
  auto ctx = context_of(stream);
  HostAllocFlags flags = HostAllocFlags::Mapped;
  if (portable) flags = flags | HostAllocFlags::Portable;
  if (wc) flags = flags | HostAllocFlags::WriteCombined;
  auto memory =
      detail::ContextState::of(*ctx).allocate_host(l.byte_extent().end, flags, "mapped_array");
  return MappedArray(detail::ArrayAccess::make(std::move(memory), std::move(l), std::move(dtype)),
                     stream);
}

// ---- Scopes ----

namespace {

class RegisteredRanges {
 public:
  void add(const void* begin, std::size_t bytes) {
    const auto* first = static_cast<const std::byte*>(begin);
    const std::lock_guard lock(mutex_);
    ranges_[first] = first + bytes;
  }
  void remove(const void* begin) noexcept {
    const std::lock_guard lock(mutex_);
    ranges_.erase(static_cast<const std::byte*>(begin));
  }
  [[nodiscard]] bool contains(const detail::HostSpan& span) const {
    const std::lock_guard lock(mutex_);
    auto it = ranges_.upper_bound(span.begin);
    if (it == ranges_.begin()) return false;
    --it;
    return span.begin >= it->first && span.end <= it->second;
  }

 private:
  mutable std::mutex mutex_;
  std::map<const std::byte*, const std::byte*> ranges_;  // begin -> end
};

RegisteredRanges& registered_ranges() {
  // Never destroyed, like owners() and mappings(): a scope kept in a global or static object is
  // destroyed after main() returns, and a function-local static made at the first registration
  // would be destroyed before any such object constructed earlier (review 2, N1).
  static auto* const ranges = new RegisteredRanges;
  return *ranges;
}

}  // namespace

namespace detail {
void note_host_registered(const void* begin, std::size_t bytes) {
  registered_ranges().add(begin, bytes);
}
void note_host_unregistered(const void* begin) noexcept {
  registered_ranges().remove(begin);
}
bool host_range_registered(const HostSpan& span) {
  return registered_ranges().contains(span);
}
}  // namespace detail

namespace {

struct Range {
  void* begin;
  std::size_t bytes;
};

Range range_of(const HostArray& a) {
  const Extent e = a.layout().byte_extent();
  auto* base = static_cast<std::byte*>(a.data()) - a.layout().offset;
  return Range{base + e.begin, static_cast<std::size_t>(e.bytes())};
}

// Waits for the copies and kernels devmem enqueued that still use the arrays' host bytes, or (by
// identity) `objects`: memory unregistered under a running DMA or kernel faults the device (CUDA:
// a sticky illegal-address error; ROCm: the VM-fault handler aborts the process).
struct HostUses {
  std::vector<detail::HostSpan> spans;
  std::vector<const void*> objects;
};

HostUses host_uses(const std::vector<HostArray>& arrays, std::vector<const void*> objects) {
  HostUses uses{{}, std::move(objects)};
  for (const HostArray& a : arrays) {
    if (detail::ArrayAccess::memory(a)) {
      uses.objects.push_back(detail::ArrayAccess::memory(a).get());
    }
    const Range r = range_of(a);
    if (r.bytes == 0) continue;
    const auto* begin = static_cast<const std::byte*>(r.begin);
    uses.spans.push_back({begin, begin + r.bytes});
  }
  return uses;
}

void wait_for_uses(Context& ctx, const std::vector<HostArray>& arrays,
                   std::vector<const void*> objects = {}) {
  const HostUses uses = host_uses(arrays, std::move(objects));
  detail::ContextState::of(ctx).in_flight.wait_for_host_uses(uses.spans, uses.objects);
}

// Work captured into a graph that uses the arrays' memory (or `objects`) and may still run: the
// graph memory taken from its stream (or still held for the context) has not been released.
std::shared_ptr<detail::GraphHostUse> graph_use(Context& ctx, const std::vector<HostArray>& arrays,
                                                std::vector<const void*> objects = {}) {
  const HostUses uses = host_uses(arrays, std::move(objects));
  return detail::ContextState::of(ctx).in_flight.graph_use_of(uses.spans, uses.objects);
}

// A scope cannot end while a graph may still read or write its memory: unregistering it then
// would fault the device at the graph's next launch (review 2, N2).
void refuse_end_under_graph(Context& ctx, const std::vector<HostArray>& arrays,
                            std::vector<const void*> objects, const char* operation) {
  if (!graph_use(ctx, arrays, std::move(objects))) return;
  throw InvalidArgument(fmt::format(
      "{} scope: cannot end while work captured into a graph uses its memory (the graph may run "
      "again); after the capture take the memory with Stream::take_graph_memory(), destroy the "
      "graph and its executables, release the GraphMemory, then end the scope",
      operation));
}

void check_registrable(const HostArray& a, std::size_t i, const char* operation) {
  if (a.kind() != HostMemoryKind::Pageable) {
    throw InvalidArgument(
        fmt::format("{}: array {} is already page-locked ({} memory from {}_array)", operation, i,
                    to_string(a.kind()), to_string(a.kind())));
  }
}

// Registers each array's extent; on failure unregisters what this call registered and rethrows.
std::vector<void*> register_all(Context& ctx, const std::vector<HostArray>& arrays,
                                HostRegisterFlags flags, const char* operation) {
  for (std::size_t i = 0; i < arrays.size(); ++i) check_registrable(arrays[i], i, operation);
  std::vector<void*> done;
  try {
    for (const HostArray& a : arrays) {
      const Range r = range_of(a);
      if (r.bytes == 0) {
        done.push_back(nullptr);
        continue;
      }
      // The device only reads a read-only array: say so, where the runtime can use it.
      ctx.backend().host_register(ctx.device(), r.begin, r.bytes,
                                  a.is_readonly() ? flags | HostRegisterFlags::ReadOnly : flags);
      done.push_back(r.begin);
      detail::note_host_registered(r.begin, r.bytes);
    }
  } catch (...) {
    for (void* p : done) {
      if (p == nullptr) continue;
      detail::note_host_unregistered(p);
      try {
        ctx.backend().host_unregister(ctx.device(), p);
      } catch (const std::exception& e) {
        detail::report_error(
            fmt::format("{}: undoing registration of {}: {}", operation, p, e.what()));
      }
    }
    throw;
  }
  return done;
}

// Unregisters every range; returns the first failure. The ranges whose unregistration failed are
// left in `ranges` (the others are removed), so that the caller can try them again: a vendor
// failure can be transient, and giving up on the range would leave the memory page-locked after
// its owner freed it (a later registration of a new array at that address would then fail).
std::exception_ptr unregister_all(Context& ctx, std::vector<void*>& ranges) {
  std::exception_ptr first;
  std::vector<void*> failed;
  for (void* p : ranges) {
    if (p == nullptr) continue;
    try {
      ctx.backend().host_unregister(ctx.device(), p);
      detail::note_host_unregistered(p);
    } catch (...) {
      if (!first) first = std::current_exception();
      failed.push_back(p);
    }
  }
  ranges = std::move(failed);
  return first;
}

}  // namespace

PinnedScope::PinnedScope(std::vector<HostArray> arrays, HostRegisterFlags flags,
                         const char* operation)
    : arrays_(std::move(arrays)), context_(current_context()), operation_(operation) {
  registered_ = register_all(*context_, arrays_, flags, operation_);
}

PinnedScope::PinnedScope(PinnedScope&& other) noexcept
    : arrays_(std::move(other.arrays_)),
      registered_(std::move(other.registered_)),
      context_(std::move(other.context_)),
      operation_(other.operation_) {
  other.registered_.clear();
}

void PinnedScope::close() {
  if (registered_.empty()) return;
  refuse_end_under_graph(*context_, arrays_, {}, operation_);
  wait_for_uses(*context_, arrays_);
  // Ranges that fail stay in registered_: the destructor tries them once more.
  if (auto error = unregister_all(*context_, registered_)) std::rethrow_exception(error);
}

PinnedScope::~PinnedScope() {
  if (registered_.empty()) return;
  try {
    // Under a graph that may run again the scope ends when its graph memory is released instead
    // (the memory stays page-locked until then).
    if (!context_->backend().exiting()) {
      if (const auto use = graph_use(*context_, arrays_)) {
        auto rest = std::make_shared<PinnedScope>(std::move(*this));
        use->defer_until_released([rest]() mutable { rest.reset(); });  // ends it, or defers again
        return;
      }
    }
  } catch (const std::exception& e) {
    detail::report_error(fmt::format("{} scope exit: {}; unregistering now", operation_, e.what()));
  }
  try {
    // After a sticky error nothing can be waited for, and the program has been told once.
    if (!context_->backend().device_lost()) wait_for_uses(*context_, arrays_);
  } catch (const std::exception& e) {
    detail::report_error(fmt::format(
        "{} scope exit: waiting for work that uses the memory failed ({}); unregistering anyway",
        operation_, e.what()));
  }
  // Immediate once that work is done, never deferred: the same memory may be pinned again right
  // after (numba#3508).
  if (auto error = unregister_all(*context_, registered_)) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      detail::report_error(fmt::format("{} scope exit: {}", operation_, e.what()));
    }
  }
}

PinnedScope pinned(std::vector<HostArray> arrays) {
  return PinnedScope(std::move(arrays), HostRegisterFlags::None, "pinned");
}

PinnedScope registered(std::vector<HostArray> arrays) {
  return PinnedScope(std::move(arrays), HostRegisterFlags::Mapped, "registered");
}

namespace {
HostRegisterFlags map_flags(const MapOptions& options) {
  return options.portable ? HostRegisterFlags::Mapped | HostRegisterFlags::Portable
                          : HostRegisterFlags::Mapped;
}
}  // namespace

MappedScope::MappedScope(std::vector<HostArray> arrays, const MapOptions& options)
    : pins_(std::move(arrays), map_flags(options), "mapped") {
  auto ctx = current_context();
  if (options.stream.is_specified()) {
    (void)detail::resolve_stream(options.stream, Stream{}, *ctx, "mapped");
  }
  for (const HostArray& a : pins_.arrays()) {
    auto memory = std::make_shared<detail::DeviceMemory>();
    memory->context = ctx;
    memory->bytes = detail::ArrayAccess::memory(a) ? detail::ArrayAccess::memory(a)->bytes : 0;
    memory->keep_alive = detail::ArrayAccess::memory(a);
    if (detail::ArrayAccess::memory(a) && detail::ArrayAccess::memory(a)->ptr != nullptr &&
        a.size() != 0) {
      // The backend maps the registered range; the device address of the buffer base follows
      // from that of the first registered byte.
      const Range r = range_of(a);
      auto* device_begin =
          static_cast<std::byte*>(ctx->backend().mapped_device_pointer(ctx->device(), r.begin));
      memory->ptr =
          device_begin - (static_cast<std::byte*>(r.begin) - detail::ArrayAccess::memory(a)->ptr);
      memory->host_alias = detail::ArrayAccess::memory(a)->ptr;
      detail::track_device_memory(memory);
    }
    views_.push_back(
        detail::ArrayAccess::make(std::move(memory), a.layout(), a.dtype(), options.stream));
  }
}

void MappedScope::wait_for_views() const {
  if (views_.empty()) return;
  // Kernels hold the views' device memory objects (not host spans): look for those too. Every
  // view has a memory object (made by the constructor), which holds the scope's context.
  wait_for_uses(*detail::ArrayAccess::memory(views_.front())->context, pins_.arrays(),
                view_memory());
}

std::vector<const void*> MappedScope::view_memory() const {
  std::vector<const void*> objects;
  for (const DeviceArray& view : views_) {
    if (detail::ArrayAccess::memory(view)) {
      objects.push_back(detail::ArrayAccess::memory(view).get());
    }
  }
  return objects;
}

void MappedScope::close() {
  if (!views_.empty()) {
    refuse_end_under_graph(*detail::ArrayAccess::memory(views_.front())->context, pins_.arrays(),
                           view_memory(), "mapped");
  }
  wait_for_views();
  pins_.close();
}

MappedScope::~MappedScope() {
  try {
    // Under a graph that may run again (a captured kernel on a view, a captured copy), the scope
    // ends when its graph memory is released instead (see PinnedScope).
    if (!views_.empty()) {
      Context& ctx = *detail::ArrayAccess::memory(views_.front())->context;
      if (!ctx.backend().exiting()) {
        if (const auto use = graph_use(ctx, pins_.arrays(), view_memory())) {
          auto rest = std::make_shared<MappedScope>(std::move(*this));
          use->defer_until_released(
              [rest]() mutable { rest.reset(); });  // ends it, or defers again
          return;
        }
      }
    }
  } catch (const std::exception& e) {
    detail::report_error(fmt::format("mapped scope exit: {}; unmapping now", e.what()));
  }
  try {
    // After a sticky error nothing can be waited for, and the program has been told once.
    const bool lost = !views_.empty() &&
                      detail::ArrayAccess::memory(views_.front())->context->backend().device_lost();
    if (!lost) wait_for_views();
  } catch (const std::exception& e) {
    detail::report_error(fmt::format(
        "mapped scope exit: waiting for work that uses the memory failed ({}); unmapping anyway",
        e.what()));
  }
}

MappedScope mapped(std::vector<HostArray> arrays, const MapOptions& options) {
  return MappedScope(std::move(arrays), options);
}

void register_host(std::span<const HostArray> arrays) {
  auto ctx = current_context();
  (void)register_all(*ctx, std::vector<HostArray>(arrays.begin(), arrays.end()),
                     HostRegisterFlags::Mapped, "register_host");
}

void deregister_host(std::span<const HostArray> arrays) {
  auto ctx = current_context();
  wait_for_uses(*ctx, std::vector<HostArray>(arrays.begin(), arrays.end()));
  std::vector<void*> ranges;
  for (const HostArray& a : arrays) {
    const Range r = range_of(a);
    ranges.push_back(r.bytes == 0 ? nullptr : r.begin);
  }
  if (auto error = unregister_all(*ctx, ranges)) std::rethrow_exception(error);
}

}  // namespace devmem

// Managed (unified) memory (docs/managed-memory.md): the "managed" memory manager, managed_array
// and ManagedArray, and prefetch / advise of managed device arrays. The vendor calls are the
// backends' (Backend::allocate_managed, prefetch_managed, advise_managed); what is written once
// here is the oversubscription rule, the checks of sizes and locations, and the array's stream
// handling.
#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/internal.hpp"
#include "core/stream_state.hpp"

#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>
#include <devmem/managed.hpp>
#include <devmem/memory_manager.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

namespace devmem {

namespace {

std::int64_t clamp_to_int64(std::size_t value) noexcept {
  constexpr auto kMax = static_cast<std::size_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(std::min(value, kMax));
}

}  // namespace

// ---- managed ----

ManagedMemoryManager::ManagedMemoryManager(Context& context)
    : ManagedMemoryManager(context, Options{}) {}

ManagedMemoryManager::ManagedMemoryManager(Context& context, Options options)
    : DirectMemoryManager(context), options_(options) {
  if (!context.backend().supports_managed_memory(context.device())) {
    throw InvalidArgument(
        fmt::format("memory manager 'managed': device {} of backend '{}' has no managed memory",
                    context.device(), context.backend_name()));
  }
}

ManagedMemoryManager::~ManagedMemoryManager() = default;

void* ManagedMemoryManager::allocate(std::size_t bytes, const Stream& stream) {
  detail::refuse_during_capture(context(), name(), bytes, stream);
  if (!options_.allow_oversubscription) {
    const MemoryInfo info = context().backend().memory_info(context().device());
    if (clamp_to_int64(bytes) > info.free) {
      throw OutOfMemory(
          fmt::format("memory manager 'managed': refusing {} ({} bytes) of managed memory: device "
                      "{} has {} ({} bytes) free of {}. Managed memory beyond the free device "
                      "memory is oversubscribed: the driver pages it in and out on every access, "
                      "which can stall or hang the GPU for every process using it, not only this "
                      "one; set allow_oversubscription = true to allocate it anyway",
                      format_bytes(static_cast<std::uint64_t>(bytes)), bytes, context().device(),
                      format_bytes(static_cast<std::uint64_t>(info.free)), info.free,
                      format_bytes(static_cast<std::uint64_t>(info.total))),
          clamp_to_int64(bytes));
    }
  }
  return context().backend().allocate_managed(context().device(), bytes, options_.attach);
}

void ManagedMemoryManager::deallocate(void* ptr, std::size_t /*bytes*/, const Stream& /*stream*/) {
  context().backend().deallocate_managed(context().device(), ptr);
}

// ---- managed_array ----

ManagedArray managed_array(Shape shape, DType dtype, const ManagedArrayOptions& options) {
  Layout l =
      layout::make_layout(shape, dtype.itemsize(), options.strides, options.order, "managed_array");
  static_cast<void>(layout::checked_nbytes(l.shape, l.itemsize, "managed_array"));
  const std::shared_ptr<Context> ctx =
      options.stream.is_specified() ? options.stream.context() : current_context();
  Context& context = *ctx;
  static_cast<void>(detail::resolve_stream(options.stream, Stream{}, context, "managed_array"));
  ManagedMemoryManager::Options manager_options;
  manager_options.attach = options.attach_global ? ManagedAttach::Global : ManagedAttach::Host;
  manager_options.allow_oversubscription = options.allow_oversubscription;
  // A manager of its own (not the context's): the memory goes back to it through the deferred
  // queue like any array's, and the context's manager stays whatever the application chose.
  auto manager = std::make_shared<ManagedMemoryManager>(context, manager_options);
  detail::ContextState& state = detail::ContextState::of(context);
  const auto& requested = detail::StreamState::of(options.stream);
  std::shared_ptr<detail::DeviceMemory> memory =
      state.allocate_device(l.byte_extent().end, requested ? requested : state.default_stream,
                            "managed_array", std::move(manager));
  // The host addresses the same bytes: copies see both sides as one memory, the views made of it
  // may be indexed by host code, and the work that uses it names these host bytes.
  memory->host_alias = memory->ptr;
  return detail::ArrayAccess::make_managed(
      detail::ArrayAccess::make(std::move(memory), std::move(l), std::move(dtype), options.stream));
}

HostArray ManagedArray::host() const {
  return HostArray::view(data(), shape(), dtype(), strides(), owner());
}

void ManagedArray::prefetch(MemoryLocation location, const Stream& stream) const {
  devmem::prefetch(*this, location, stream);
}

void ManagedArray::advise(MemoryAdvice advice, std::optional<MemoryLocation> location) const {
  devmem::advise(*this, advice, location);
}

// ---- prefetch and advise ----

namespace {

/// InvalidArgument naming `operation` unless `location` is the host or a device of `context`'s
/// backend.
void check_location(const char* operation, const MemoryLocation& location, Context& context) {
  if (location.is_host()) return;
  const int count = context.backend().device_count();
  if (location.device < 0 || location.device >= count) {
    throw InvalidArgument(fmt::format(
        "{}: device {} does not exist (the {} backend has {} "
        "device{})",
        operation, location.device, context.backend_name(), count, count == 1 ? "" : "s"));
  }
}

/// The first byte the elements of `array` span and their number.
std::pair<const void*, std::size_t> byte_range(const DeviceArray& array) {
  const Layout& l = array.layout();
  const Extent extent = l.byte_extent();
  const auto* const base = static_cast<const std::byte*>(array.data()) - l.offset;
  return {base + extent.begin, static_cast<std::size_t>(extent.bytes())};
}

}  // namespace

void prefetch(const DeviceArray& array, MemoryLocation location, const Stream& stream) {
  const auto& memory = detail::ArrayAccess::memory(array);
  std::shared_ptr<Context> ctx = memory ? memory->context : array.stream().context();
  if (!ctx) ctx = current_context();
  Context& context = *ctx;
  check_location("prefetch", location, context);
  detail::StreamState& s = detail::resolve_stream(stream, array.stream(), context, "prefetch");
  const auto [first, bytes] = byte_range(array);
  if (!memory || bytes == 0) return;  // no elements: nothing to migrate
  detail::order_after_allocation(s, *memory);
  context.backend().prefetch_managed(context.device(), first, bytes, location, s.handle);
  detail::finish_enqueued(s, {memory});
}

void advise(const DeviceArray& array, MemoryAdvice advice, std::optional<MemoryLocation> location) {
  const bool needs_location =
      advice != MemoryAdvice::ReadMostly && advice != MemoryAdvice::UnsetReadMostly;
  if (needs_location && !location) {
    throw InvalidArgument(fmt::format(
        "advise: {} needs a location (MemoryLocation::on_device(i) or MemoryLocation::host())",
        to_string(advice)));
  }
  const auto& memory = detail::ArrayAccess::memory(array);
  std::shared_ptr<Context> ctx = memory ? memory->context : array.stream().context();
  if (!ctx) ctx = current_context();
  Context& context = *ctx;
  const MemoryLocation where = location.value_or(MemoryLocation::on_device(context.device()));
  if (needs_location) check_location("advise", where, context);
  const auto [first, bytes] = byte_range(array);
  if (!memory || bytes == 0) return;
  context.backend().advise_managed(context.device(), first, bytes, advice, where);
}

}  // namespace devmem

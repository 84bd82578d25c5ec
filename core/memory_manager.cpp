// The built-in memory managers (direct, pool), the name registry behind DEVMEM_MEMORY_MANAGER,
// and the defer_cleanup scope.
#include "core/context_state.hpp"
#include "core/internal.hpp"
#include "core/report_error.hpp"
#include "core/trace.hpp"

#include <devmem/byte_size.hpp>
#include <devmem/error.hpp>
#include <devmem/memory_adaptors.hpp>
#include <devmem/memory_manager.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <charconv>
#include <iostream>
#include <limits>
#include <map>
#include <unordered_map>
#include <utility>

namespace devmem {

MemoryManager::~MemoryManager() = default;

// ---- direct ----

DirectMemoryManager::~DirectMemoryManager() = default;

namespace detail {

/// Stream capture forbids allocating device memory (cudaMalloc is a capture-unsafe call, and
/// cudaMallocAsync on the legacy stream joins the capture implicitly): refused before the vendor
/// call, so the capture stays valid (review 2, N2). Only the managers' calls into the vendor ask
/// (one query, on a path that costs microseconds anyway); a pool hit needs no vendor call and
/// stays capture-safe.
void refuse_during_capture(Context& context, std::string_view manager, std::size_t bytes,
                           const Stream& stream) {
  // For the default stream: whether a stream of the device is capturing (the allocation would
  // join that capture implicitly; is_capturing's answer for a null handle).
  const NativeStream native = stream.is_default() ? nullptr : stream.native_handle();
  if (!context.backend().is_capturing(context.device(), native)) return;
  throw InvalidArgument(fmt::format(
      "memory manager '{}': cannot allocate {} on a stream during stream capture (the vendor "
      "forbids allocating while a graph is captured); allocate the arrays before beginning the "
      "capture",
      manager, format_bytes(static_cast<std::uint64_t>(bytes))));
}

}  // namespace detail

using detail::refuse_during_capture;

void* DirectMemoryManager::allocate(std::size_t bytes, const Stream& stream) {
  refuse_during_capture(context(), name(), bytes, stream);
  return context().backend().allocate(context().device(), bytes);
}
void DirectMemoryManager::deallocate(void* ptr, std::size_t /*bytes*/, const Stream& /*stream*/) {
  context().backend().deallocate(context().device(), ptr);
}
void* DirectMemoryManager::host_allocate(std::size_t bytes, HostAllocFlags flags) {
  return context().backend().host_allocate(context().device(), bytes, flags);
}
void DirectMemoryManager::host_deallocate(void* ptr, std::size_t /*bytes*/,
                                          HostAllocFlags /*flags*/) {
  context().backend().host_deallocate(context().device(), ptr);
}
MemoryInfo DirectMemoryManager::memory_info() const {
  return context().backend().memory_info(context().device());
}

// ---- async ----

AsyncMemoryManager::AsyncMemoryManager(Context& context) : AsyncMemoryManager(context, Options{}) {}

AsyncMemoryManager::AsyncMemoryManager(Context& context, Options options)
    : DirectMemoryManager(context), options_(options) {
  if (!context.backend().supports_async_allocation(context.device())) {
    throw InvalidArgument(fmt::format(
        "memory manager 'async': device {} of backend '{}' has no stream-ordered allocator "
        "(cudaMallocAsync needs CUDA 11.2+, hipMallocAsync ROCm 5.3+, and a device with memory "
        "pools)",
        context.device(), context.backend_name()));
  }
  context.backend().set_async_release_threshold(context.device(), options_.release_threshold);
}
AsyncMemoryManager::~AsyncMemoryManager() = default;

void AsyncMemoryManager::trim() {
  context().backend().trim_async_pool(context().device(), 0);
}

// On the array's own stream: the legacy default stream would order the allocation after every
// blocking stream's work (and every stream's later work after it). Other streams' uses wait for
// the allocation by an event (allocates_in_stream_order, ContextState::allocate_device).
void* AsyncMemoryManager::allocate(std::size_t bytes, const Stream& stream) {
  refuse_during_capture(context(), name(), bytes, stream);
  return context().backend().allocate_async(context().device(), bytes, stream.native_handle());
}
// No devmem work uses the memory any more (the deferred queue waited for it), so the free need not
// wait for anything: on the allocation's stream, where the pool reuses it without a cross-stream
// dependency.
void AsyncMemoryManager::deallocate(void* ptr, std::size_t /*bytes*/, const Stream& stream) {
  context().backend().deallocate_async(context().device(), ptr, stream.native_handle());
}

// ---- pool ----

namespace {

/// The last free block of `bins[key]`, taken out of the bin; nullptr when there is none. The
/// device and the pinned host bins share it (and everything below but what each counts).
template <class Bins, class Key>
void* pop_block(Bins& bins, const Key& key) {
  const auto it = bins.find(key);
  if (it == bins.end() || it->second.empty()) return nullptr;
  void* block = it->second.back();
  it->second.pop_back();
  return block;
}

/// `allocate()` from upstream; when upstream is out of memory, the pool's cached blocks of other
/// sizes may be what stands in the way: released (trim), then one more try.
template <class Allocate>
void* allocate_or_trim_and_retry(PoolMemoryManager& pool, Allocate allocate) {
  try {
    return allocate();
  } catch (const OutOfMemory&) {
    pool.trim();
    return allocate();
  }
}

}  // namespace

struct PoolMemoryManager::State {
  Options options;
  std::shared_ptr<MemoryManager> upstream;
  mutable std::mutex mutex;
  // Free blocks by size class. Blocks get here only once no work uses them (the context queues
  // memory after the streams that used it are done), so any stream may take them at once.
  std::unordered_map<std::size_t, std::vector<void*>> device_blocks;
  std::map<std::pair<unsigned, std::size_t>, std::vector<void*>> host_blocks;  // (flags, class)
  PoolStatistics stats;

  /// Whether a returned block of `cls_bytes` stays cached (with the mutex held): the limit covers
  /// device and pinned host blocks together, whichever comes back.
  [[nodiscard]] bool may_cache(std::int64_t cls_bytes) const noexcept {
    return options.max_cached_bytes == 0 ||
           stats.cached_bytes + stats.cached_host_bytes + cls_bytes <= options.max_cached_bytes;
  }
};

PoolMemoryManager::PoolMemoryManager(Context& context) : PoolMemoryManager(context, Options{}) {}

PoolMemoryManager::PoolMemoryManager(Context& context, Options options)
    : PoolMemoryManager(context, options, nullptr) {}

PoolMemoryManager::PoolMemoryManager(Context& context, Options options,
                                     std::shared_ptr<MemoryManager> upstream)
    : MemoryManager(context), state_(std::make_unique<State>()) {
  if (options.max_cached_bytes < 0) {
    throw InvalidArgument(
        fmt::format("PoolMemoryManager: max_cached_bytes must not be negative, got {}",
                    options.max_cached_bytes));
  }
  state_->options = options;
  state_->upstream = detail::checked_upstream(context, std::move(upstream), "PoolMemoryManager");
}

const std::shared_ptr<MemoryManager>& PoolMemoryManager::upstream() const noexcept {
  return state_->upstream;
}

PoolMemoryManager::~PoolMemoryManager() {
  try {
    trim();
  } catch (const std::exception& e) {
    detail::report_error(fmt::format("pool memory manager: releasing the cache: {}", e.what()));
  }
}

std::size_t PoolMemoryManager::size_class(std::size_t bytes) noexcept {
  constexpr std::size_t kMinimum = 256;
  if (bytes <= kMinimum) return kMinimum;
  // Four classes per power of two: p, 1.25p, 1.5p, 1.75p.
  const std::size_t power = std::bit_floor(bytes);
  const std::size_t step = power / 4;
  return (bytes + step - 1) / step * step;
}

void* PoolMemoryManager::allocate(std::size_t bytes, const Stream& stream) {
  const std::size_t cls = size_class(bytes);
  {
    std::lock_guard lock(state_->mutex);
    if (void* block = pop_block(state_->device_blocks, cls)) {
      ++state_->stats.hits;
      state_->stats.cached_bytes -= static_cast<std::int64_t>(cls);
      --state_->stats.cached_blocks;
      if (detail::trace::active()) {
        detail::trace::instant("pool", "hit",
                               {{"bytes", static_cast<std::int64_t>(bytes)},
                                {"block", static_cast<std::int64_t>(cls)}});
        detail::trace::counter("pool cached", {{"bytes", state_->stats.cached_bytes}});
      }
      return block;
    }
    ++state_->stats.misses;
  }
  detail::trace::instant(
      "pool", "miss",
      {{"bytes", static_cast<std::int64_t>(bytes)}, {"block", static_cast<std::int64_t>(cls)}});
  MemoryManager& upstream = *state_->upstream;
  void* block = allocate_or_trim_and_retry(*this, [&] { return upstream.allocate(cls, stream); });
  std::lock_guard lock(state_->mutex);
  state_->stats.backend_bytes += static_cast<std::int64_t>(cls);
  return block;
}

void PoolMemoryManager::deallocate(void* ptr, std::size_t bytes, const Stream& stream) {
  const std::size_t cls = size_class(bytes);
  const auto cls_bytes = static_cast<std::int64_t>(cls);
  {
    std::lock_guard lock(state_->mutex);
    if (state_->may_cache(cls_bytes)) {
      state_->device_blocks[cls].push_back(ptr);
      state_->stats.cached_bytes += cls_bytes;
      ++state_->stats.cached_blocks;
      detail::trace::counter("pool cached", {{"bytes", state_->stats.cached_bytes}});
      return;
    }
    state_->stats.backend_bytes -= cls_bytes;
  }
  state_->upstream->deallocate(ptr, cls, stream);
}

void* PoolMemoryManager::host_allocate(std::size_t bytes, HostAllocFlags flags) {
  const std::size_t cls = size_class(bytes);
  const auto key = std::make_pair(static_cast<unsigned>(flags), cls);
  {
    std::lock_guard lock(state_->mutex);
    if (void* block = pop_block(state_->host_blocks, key)) {
      ++state_->stats.hits;
      state_->stats.cached_host_bytes -= static_cast<std::int64_t>(cls);
      return block;
    }
    ++state_->stats.misses;
  }
  MemoryManager& upstream = *state_->upstream;
  return allocate_or_trim_and_retry(*this, [&] { return upstream.host_allocate(cls, flags); });
}

void PoolMemoryManager::host_deallocate(void* ptr, std::size_t bytes, HostAllocFlags flags) {
  const std::size_t cls = size_class(bytes);
  const auto cls_bytes = static_cast<std::int64_t>(cls);
  {
    std::lock_guard lock(state_->mutex);
    if (state_->may_cache(cls_bytes)) {
      state_->host_blocks[std::make_pair(static_cast<unsigned>(flags), cls)].push_back(ptr);
      state_->stats.cached_host_bytes += cls_bytes;
      return;
    }
  }
  state_->upstream->host_deallocate(ptr, cls, flags);
}

MemoryInfo PoolMemoryManager::memory_info() const {
  MemoryInfo info = state_->upstream->memory_info();
  // Cached blocks are free for this context's arrays.
  std::lock_guard lock(state_->mutex);
  info.free += state_->stats.cached_bytes;
  return info;
}

void PoolMemoryManager::trim() {
  std::unordered_map<std::size_t, std::vector<void*>> device_blocks;
  std::map<std::pair<unsigned, std::size_t>, std::vector<void*>> host_blocks;
  {
    std::lock_guard lock(state_->mutex);
    device_blocks.swap(state_->device_blocks);
    host_blocks.swap(state_->host_blocks);
    state_->stats.backend_bytes -= state_->stats.cached_bytes;
    state_->stats.cached_bytes = 0;
    state_->stats.cached_blocks = 0;
    state_->stats.cached_host_bytes = 0;
    ++state_->stats.trims;
  }
  // Every block is attempted; the first failure is rethrown after, naming the block and its size:
  // a block whose free failed is dropped (its state is unknown, freeing it twice would be worse,
  // as for the context's queue), and whoever accounts for device memory needs to know which.
  std::exception_ptr first;
  const auto remember = [&first](const char* what, void* p, std::size_t bytes) {
    if (first) return;
    try {
      throw;
    } catch (const BackendError& e) {
      first = std::make_exception_ptr(BackendError(
          e.backend(), e.function(), e.code(), e.code_name(),
          fmt::format("pool memory manager: freeing cached {} of {} ({} bytes) failed; the block "
                      "is dropped: {}",
                      what, p, bytes, e.what())));
    } catch (...) {
      first = std::current_exception();
    }
  };
  // The blocks' streams are not kept (no work uses a cached block); upstream gets the default
  // stream, as the context's queue does for memory whose stream has gone.
  MemoryManager& upstream = *state_->upstream;
  const Stream stream = context().default_stream();
  for (auto& [cls, blocks] : device_blocks) {
    for (void* p : blocks) {
      try {
        upstream.deallocate(p, cls, stream);
      } catch (...) {
        remember("device memory", p, cls);
      }
    }
  }
  for (auto& [key, blocks] : host_blocks) {
    for (void* p : blocks) {
      try {
        upstream.host_deallocate(p, key.second, static_cast<HostAllocFlags>(key.first));
      } catch (...) {
        remember("page-locked host memory", p, key.second);
      }
    }
  }
  if (first) std::rethrow_exception(first);
  // An upstream that caches (another pool) gives back what it holds too, so that trim() frees
  // device memory whatever the chain.
  upstream.trim();
}

bool PoolMemoryManager::allocates_in_stream_order() const noexcept {
  return state_->upstream->allocates_in_stream_order();
}

std::int64_t PoolMemoryManager::cached_bytes() const noexcept {
  std::int64_t own = 0;
  {
    std::lock_guard lock(state_->mutex);
    own = state_->stats.cached_bytes;
  }
  return own + state_->upstream->cached_bytes();
}

PoolStatistics PoolMemoryManager::statistics() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

// ---- registry ----

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, MemoryManagerFactory, std::less<>> factories;
};

Registry& registry() {
  static auto* r = [] {
    auto* reg = new Registry;
    reg->factories.emplace("direct", [](Context& ctx) -> std::shared_ptr<MemoryManager> {
      return std::make_shared<DirectMemoryManager>(ctx);
    });
    reg->factories.emplace("pool", [](Context& ctx) -> std::shared_ptr<MemoryManager> {
      return std::make_shared<PoolMemoryManager>(ctx);
    });
    reg->factories.emplace("async", [](Context& ctx) -> std::shared_ptr<MemoryManager> {
      return std::make_shared<AsyncMemoryManager>(ctx);
    });
    reg->factories.emplace("managed", [](Context& ctx) -> std::shared_ptr<MemoryManager> {
      return std::make_shared<ManagedMemoryManager>(ctx);
    });
    return reg;
  }();
  return *r;
}

}  // namespace

void register_memory_manager(std::string name, MemoryManagerFactory factory) {
  if (name.empty()) throw InvalidArgument("register_memory_manager: the name is empty");
  if (name.find_first_of(":=") != std::string::npos) {
    throw InvalidArgument(fmt::format(
        "register_memory_manager: the name '{}' contains ':' or '=', which compose managers",
        name));
  }
  if (!factory) {
    throw InvalidArgument(
        fmt::format("register_memory_manager: the factory for '{}' is empty", name));
  }
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.factories.insert_or_assign(std::move(name), std::move(factory));
}

namespace {

/// The factory registered under `name`, or an empty one.
MemoryManagerFactory find_factory(std::string_view name) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? MemoryManagerFactory{} : it->second;
}

/// InvalidArgument for an unknown `name`, listing the known ones. `in`: the whole composition
/// when `name` is a part of one.
[[noreturn]] void throw_unknown(std::string_view name, std::string_view in) {
  Registry& r = registry();
  std::vector<std::string> known;
  {
    std::lock_guard lock(r.mutex);
    known.reserve(r.factories.size());
    for (const auto& [key, value] : r.factories) known.push_back(key);
  }
  if (in.empty()) {
    throw InvalidArgument(
        fmt::format("make_memory_manager: unknown memory manager '{}' (known: {})", name,
                    fmt::join(known, ", ")));
  }
  throw InvalidArgument(
      fmt::format("make_memory_manager: unknown memory manager '{}' in '{}' (known: {}; adaptors: "
                  "statistics, logging, limit=SIZE, pool)",
                  name, in, fmt::join(known, ", ")));
}

/// The byte size of a `limit=SIZE` part of a composition (parse_byte_size, and more than 0).
std::int64_t parse_limit(std::string_view text, std::string_view part, std::string_view in) {
  std::int64_t bytes = 0;
  try {
    bytes = parse_byte_size(text);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(
        fmt::format("make_memory_manager: bad limit in '{}' of '{}': {}", part, in, e.what()));
  }
  if (bytes == 0) {
    throw InvalidArgument(fmt::format(
        "make_memory_manager: bad limit in '{}' of '{}': the limit must be more than 0 bytes", part,
        in));
  }
  return bytes;
}

/// The manager of one part of a composition over `upstream` (null: the direct manager), or null
/// when `part` is not an adaptor or the pool.
std::shared_ptr<MemoryManager> make_adaptor(std::string_view part, std::string_view in,
                                            Context& context,
                                            std::shared_ptr<MemoryManager> upstream) {
  if (part == "statistics") {
    return std::make_shared<StatisticsAdaptor>(context, std::move(upstream));
  }
  if (part == "logging") {
    return std::make_shared<LoggingAdaptor>(context, std::move(upstream), std::clog);
  }
  if (part == "pool") {
    return std::make_shared<PoolMemoryManager>(context, PoolMemoryManager::Options{},
                                               std::move(upstream));
  }
  constexpr std::string_view kLimit = "limit=";
  if (part.starts_with(kLimit)) {
    LimitAdaptor::Limits limits;
    limits.device_bytes = parse_limit(part.substr(kLimit.size()), part, in);
    return std::make_shared<LimitAdaptor>(context, std::move(upstream), limits);
  }
  return nullptr;
}

/// A composition "OUTER:...:INNER": every part but the last an adaptor (or "pool") over the part
/// after it; the last a registered name or an adaptor over the direct manager.
std::shared_ptr<MemoryManager> make_composition(std::string_view name, Context& context) {
  std::vector<std::string_view> parts;
  for (std::size_t begin = 0;;) {
    const std::size_t colon = name.find(':', begin);
    parts.push_back(name.substr(begin, colon == std::string_view::npos ? colon : colon - begin));
    if (colon == std::string_view::npos) break;
    begin = colon + 1;
  }
  for (const std::string_view part : parts) {
    if (part.empty()) {
      throw InvalidArgument(fmt::format(
          "make_memory_manager: an empty part in '{}' (parts are separated by one ':')", name));
    }
  }
  // Registered names are plain managers, not adaptors: they can only come last.
  const std::string_view last = parts.back();
  std::shared_ptr<MemoryManager> manager;
  if (const MemoryManagerFactory factory = find_factory(last)) {
    manager = factory(context);
    if (!manager) {
      throw InvalidArgument(fmt::format(
          "make_memory_manager: the factory of '{}' in '{}' returned null", last, name));
    }
  } else {
    manager = make_adaptor(last, name, context, nullptr);
    if (!manager) throw_unknown(last, parts.size() == 1 ? std::string_view{} : name);
  }
  for (auto it = std::next(parts.rbegin()); it != parts.rend(); ++it) {
    auto outer = make_adaptor(*it, name, context, manager);
    if (!outer) {
      throw InvalidArgument(fmt::format(
          "make_memory_manager: '{}' in '{}' is not an adaptor (statistics, logging, limit=SIZE, "
          "pool): only the last part may name a plain manager",
          *it, name));
    }
    manager = std::move(outer);
  }
  return manager;
}

}  // namespace

std::shared_ptr<MemoryManager> make_memory_manager(std::string_view name, Context& context) {
  const MemoryManagerFactory factory = find_factory(name);
  if (!factory) {
    if (name.empty()) throw_unknown(name, {});
    return make_composition(name, context);
  }
  auto manager = factory(context);
  if (!manager) {
    throw InvalidArgument(
        fmt::format("make_memory_manager: the factory of '{}' returned null", name));
  }
  return manager;
}

std::shared_ptr<MemoryManager> make_memory_manager(std::string_view name) {
  return make_memory_manager(name, *current_context());
}

void set_memory_manager(std::shared_ptr<MemoryManager> manager) {
  current_context()->set_memory_manager(std::move(manager));
}

// ---- defer_cleanup ----

DeferCleanup::DeferCleanup(std::shared_ptr<Context> context) : context_(std::move(context)) {
  detail::ContextState::of(*context_).deallocations.defer();
}

DeferCleanup::DeferCleanup(DeferCleanup&& other) noexcept : context_(std::move(other.context_)) {}

DeferCleanup::~DeferCleanup() {
  if (!context_) return;
  // Leaving the scope does not flush (Numba): the next release over a limit, an out-of-memory
  // retry or flush_deallocations() does.
  detail::ContextState::of(*context_).deallocations.end_defer();
}

DeferCleanup defer_cleanup() {
  return current_context()->defer_cleanup();
}

}  // namespace devmem

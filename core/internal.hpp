// Internal state behind the public handles (Context, Stream, Event, HostArray, DeviceArray).
// Not installed; only core/ includes it.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/context.hpp>
#include <devmem/device_array.hpp>
#include <devmem/host_array.hpp>
#include <devmem/stream.hpp>

#include <devmem/memory_manager.hpp>

#include "core/deallocation_queue.hpp"
#include "core/event_pool.hpp"
#include "core/keep_alive.hpp"
#include "core/memory_counter.hpp"

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devmem::detail {

/// Writes an error that cannot be thrown (destructors, background release) to stderr.
void report_error(std::string_view what) noexcept;

/// `upstream` for a manager of `context` made by `who` (an adaptor, the pool): a new
/// DirectMemoryManager when null; InvalidArgument naming `who` when it belongs to another context
/// or has another interface version.
std::shared_ptr<MemoryManager> checked_upstream(Context& context,
                                                std::shared_ptr<MemoryManager> upstream,
                                                std::string_view who);

/// InvalidArgument when `stream` (for the default stream: any blocking stream of the device) is
/// being captured into a graph: `manager` cannot allocate `bytes` then (memory_manager.cpp).
void refuse_during_capture(Context& context, std::string_view manager, std::size_t bytes,
                           const Stream& stream);

/// Throws InvalidArgument ("<operation>: byte stride S of axis K is not a multiple of the
/// alignment A of dtype D") when an axis longer than 1 has a stride that would put its second
/// element off the dtype's alignment: a typed access there faults on a GPU.
void check_stride_alignment(const char* operation, const Layout& layout, const DType& dtype);

struct StreamState;
struct EventState;

/// Device-addressable memory: a device allocation owned by devmem, or memory owned by someone
/// else (mapped host memory, foreign memory) kept alive by `keep_alive`.
struct DeviceMemory {
  std::shared_ptr<Context> context;
  std::byte* ptr = nullptr;  // base of the memory; elements live at ptr + layout offsets
  std::int64_t bytes = 0;
  bool owned = false;
  std::shared_ptr<MemoryManager> manager;  // the manager that allocated `ptr` (owned memory)
  // The stream `ptr` was allocated on, handed to MemoryManager::deallocate. Weak: memory must not
  // keep a stream (and its vendor queue) alive after the last stream handle goes.
  std::weak_ptr<StreamState> stream;
  std::shared_ptr<const void> keep_alive;
  // For device views of mapped host memory: the host address of `ptr`. Lets the copy engine see
  // that a host array and a device view are the same bytes.
  std::byte* host_alias = nullptr;
  bool tracked = false;  // listed for device_memory_owner (track_device_memory)
  // Owned memory: a number no other allocation of the process has had (set by
  // track_device_memory), which views carry so that launch can tell a freed array's view from a
  // live one at the same address. 0 for memory devmem did not allocate.
  std::uint64_t generation = 0;
  // Memory of a stream-ordered manager (MemoryManager::allocates_in_stream_order) allocated on a
  // stream other than the default: valid in that stream's order only, until `allocated` completes.
  struct StreamOrder {
    std::shared_ptr<EventState> allocated;  // recorded on `stream` right after the allocation
    NativeStream stream = nullptr;
    std::atomic<bool> complete{false};  // `allocated` seen complete: no stream needs to wait
  };
  std::unique_ptr<StreamOrder> stream_order;

  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory();
};

/// Frees the page-locked staging buffers kept for copies between devices without peer access
/// (peer_copy.cpp), after the host waited for their last reads: at exit and before an allocation
/// is retried for lack of memory. Thread-safe.
void release_idle_peer_staging() noexcept;
/// Forgets that devmem enabled `device`'s access to `peer` (Context::disable_peer_access).
void forget_peer_access(const Backend& backend, int device, int peer) noexcept;

/// Makes work enqueued next on `use` wait until `memory`'s stream-ordered allocation is done, when
/// `use` is not the stream it was allocated on (review 2, N3). Nothing for other memory, and
/// nothing once the allocation is known complete (one event query until then).
void order_after_allocation(const StreamState& use, const DeviceMemory& memory);

/// Lists `memory` (once its ptr and bytes are set) so that device_memory_owner finds it by any
/// address inside it; ~DeviceMemory takes it off the list. Thread-safe.
void track_device_memory(const std::shared_ptr<DeviceMemory>& memory);
void untrack_device_memory(const DeviceMemory& memory) noexcept;
/// The device memory (owned or viewed by devmem) that `address` lies in, while something still
/// holds it; null otherwise.
[[nodiscard]] std::shared_ptr<const void> device_memory_owner(const void* address);
/// Whether the owned allocation of `generation` (DeviceMemory::generation) is still alive.
[[nodiscard]] bool allocation_alive(std::uint64_t generation);

/// Host memory: pageable, pinned or mapped, owned by devmem or viewed.
struct HostMemory {
  std::byte* ptr = nullptr;
  std::int64_t bytes = 0;
  HostMemoryKind kind = HostMemoryKind::Pageable;
  bool owned = false;
  bool readonly = false;
  std::shared_ptr<Context> context;        // frees pinned / mapped allocations
  std::shared_ptr<MemoryManager> manager;  // the manager that allocated `ptr` (owned memory)
  HostAllocFlags alloc_flags = HostAllocFlags::None;
  std::byte* device_ptr = nullptr;  // device address of `ptr` for mapped memory
  std::shared_ptr<const void> keep_alive;

  HostMemory() = default;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  ~HostMemory();
};

struct StreamState {
  std::shared_ptr<Context> context;
  NativeStream handle = nullptr;
  bool is_default = false;
  // False for Stream::external: the native stream belongs to someone else and is never destroyed.
  bool owned = true;

  StreamState(std::shared_ptr<Context> ctx, NativeStream h, bool def, bool own = true)
      : context(std::move(ctx)), handle(h), is_default(def), owned(own) {}
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;
  ~StreamState();

  static const std::shared_ptr<StreamState>& of(const Stream& s) noexcept { return s.state_; }
  static Stream wrap(std::shared_ptr<StreamState> state) noexcept {
    return Stream(std::move(state));
  }
};

struct EventState {
  std::shared_ptr<Context> context;
  NativeEvent handle = nullptr;
  // Taken from the context's EventPool (ContextState::pooled_event): the destructor gives it back
  // there instead of destroying it. Never set for user events (Event::Event()).
  bool pooled = false;

  EventState(std::shared_ptr<Context> ctx, NativeEvent h, bool from_pool = false)
      : context(std::move(ctx)), handle(h), pooled(from_pool) {}
  EventState(const EventState&) = delete;
  EventState& operator=(const EventState&) = delete;
  ~EventState();

  static const std::shared_ptr<EventState>& of(const Event& e) noexcept { return e.state_; }
  static Event wrap(std::shared_ptr<EventState> state) noexcept { return Event(std::move(state)); }
};

/// Everything devmem keeps for one context, in parts with their own headers: the deallocation
/// queue (with the manager), the statistics, the streams, and the keep-alives of asynchronous
/// work. Each part guards itself; no part's lock is held while another's is taken.
struct ContextState {
  /// The state of `context` (core/ and the backends' kernel layers use it; users cannot).
  [[nodiscard]] static ContextState& of(const Context& context) noexcept { return *context.state_; }
  Context& self;
  std::weak_ptr<Context> weak_self;
  std::shared_ptr<StreamState> default_stream;

  explicit ContextState(Context& owner)
      : self(owner), deallocations(owner), events(owner), in_flight(owner) {}

  /// Creates the context of `device` on `backend`.
  static std::shared_ptr<Context> create(Backend& backend, int device);

  [[nodiscard]] std::shared_ptr<Context> shared() const { return weak_self.lock(); }
  [[nodiscard]] Backend& backend() const noexcept { return self.backend(); }
  [[nodiscard]] int device() const noexcept { return self.device(); }

  // ---- The one path by which memory is obtained and returned (memory_manager.hpp). ----
  // Defined in context.cpp: it goes through the deallocation queue, the statistics and the
  // keep-alives.
  /// Device memory of `bytes` (none for 0 bytes) through the context's manager, allocated on
  /// `stream` (a stream of this context, not null); on OutOfMemory flushes the deferred queue and
  /// retries once. OutOfMemory names `operation`. `manager`, when given, allocates instead of the
  /// context's (managed_array's managed manager); the memory goes back to it.
  std::shared_ptr<DeviceMemory> allocate_device(std::int64_t bytes,
                                                const std::shared_ptr<StreamState>& stream,
                                                const char* operation,
                                                std::shared_ptr<MemoryManager> manager = nullptr);
  /// Page-locked host memory (zero-filled unless write-combined), same retry rule.
  std::shared_ptr<HostMemory> allocate_host(std::int64_t bytes, HostAllocFlags flags,
                                            const char* operation);
  /// Memory whose last user is gone: counted out of the statistics and queued (flushed when a
  /// limit is exceeded). Never throws. `stream`: the stream device memory was allocated on
  /// (unused for host memory).
  void release(const std::shared_ptr<MemoryManager>& manager, void* ptr, std::int64_t bytes,
               bool host, HostAllocFlags flags, const std::weak_ptr<StreamState>& stream) noexcept;

  /// The manager, the queue of memory to free and its limits (deallocation_queue.cpp).
  DeallocationQueue deallocations;
  /// Memory handed to arrays: added at allocation, removed when the last array goes (release()),
  /// not when the queue frees it.
  MemoryCounter device_counters;
  MemoryCounter host_counters;

  /// The device's properties, read from the backend once (vendor queries can take milliseconds).
  const DeviceProperties& properties();

  /// Vendor events recycled for devmem's own records (event_pool.hpp).
  EventPool events;
  /// An event of this context from `events` (the backend's errors if a new one cannot be made),
  /// not yet recorded for its new user: the caller records it at once. Its state gives it back to
  /// the pool when the last holder goes. Defined in stream.cpp.
  std::shared_ptr<EventState> pooled_event();

  // ---- Streams (defined in context.cpp). ----
  void track_stream(const std::shared_ptr<StreamState>& stream);
  std::vector<std::shared_ptr<StreamState>> live_streams();

  ContextState(const ContextState&) = delete;
  ContextState& operator=(const ContextState&) = delete;
  ~ContextState() = default;

 private:
  std::mutex streams_mutex_;
  std::vector<std::weak_ptr<StreamState>> streams_;
  std::once_flag properties_once_;
  DeviceProperties properties_;

 public:
  /// The keep-alives of asynchronous work (keep_alive.cpp). Declared last, so destroyed first:
  /// its completion events are destroyed while the rest of the context is still there.
  InFlightWork in_flight;
};

/// The stream state to use: `requested` if specified, else `fallback` if specified, else the
/// default stream of `context`. Throws InvalidArgument when the chosen stream belongs to another
/// context, or is the default stream while a stream of the device is being captured
/// (refuse_default_stream_during_capture), naming `operation`.
StreamState& resolve_stream(const Stream& requested, const Stream& fallback, Context& context,
                            const char* operation);

/// InvalidArgument naming `operation`, before any vendor call, when a stream of `context`'s device
/// is being captured: work on the legacy default stream would join that capture implicitly and
/// invalidate it (review 2, N2).
void refuse_default_stream_during_capture(const char* operation, Context& context);

/// Completes an operation enqueued on `stream`: on the default stream waits for it (the API
/// promises completion); on another stream keeps `keep_alive` until the work is done.
void finish_enqueued(StreamState& stream, std::vector<std::shared_ptr<const void>> keep_alive,
                     std::vector<HostSpan> host_spans = {});

/// One side of a copy: the address of element (0, ..., 0), its layout and whether it is in device
/// memory.
/// The host ranges devmem has registered (pinned and mapped scopes, register_host), process-wide:
/// page-locked memory that HostArray::kind() still calls pageable, because the array was made
/// before it was registered. Thread-safe.
void note_host_registered(const void* begin, std::size_t bytes);
void note_host_unregistered(const void* begin) noexcept;
/// True when `span` lies inside one range devmem has registered.
[[nodiscard]] bool host_range_registered(const HostSpan& span);

struct CopyEndpoint {
  std::byte* element0 = nullptr;
  // Where the bytes really are, for overlap checks: the host address for host memory and mapped
  // device views, the device address otherwise.
  std::byte* identity0 = nullptr;
  bool identity_on_host = false;
  const Layout* layout = nullptr;
  const DType* dtype = nullptr;
  bool on_device = false;
  bool readonly = false;
  std::shared_ptr<const void> keep_alive;
  // The device side's memory (null for host arrays), for order_after_allocation.
  const DeviceMemory* device_memory = nullptr;
  // Host memory that is not page-locked (as far as devmem knows): a copy into it from the device
  // must be complete when the call returns (see finish_copy).
  bool pageable = false;
};
CopyEndpoint endpoint(const DeviceArray& array);
CopyEndpoint endpoint(const HostArray& array);

/// Copies the elements of `src` into `dst` on `stream` of `context` whatever their strides, after
/// checking dtype and (squeezed) shape. Overlapping source and destination are staged through a
/// temporary. Only destination elements are written.
void copy_elements(const char* operation, Context& context, StreamState& stream,
                   const CopyEndpoint& dst, const CopyEndpoint& src);

/// Copies the elements of `src`, a device array of another device than `dst`'s, into `dst` on
/// `dst_stream` (of dst's device), whatever their strides (docs/scaling-out.md#several-devices):
/// with Backend::copy_peer where dst's device can access src's, else staged through page-locked
/// host memory. The source is read after the work enqueued so far on its own stream, and later
/// work there waits for the read. Defined in peer_copy.cpp.
void copy_between_devices(const char* operation, StreamState& dst_stream, const DeviceArray& dst,
                          const DeviceArray& src);

/// The layouts of a reshape/ravel that has to copy: `target` is the new array (dense in `order`),
/// `target_as_source` is the same memory viewed with the source's shape, so that copying the
/// source into it puts the elements in `order`.
struct ReshapeCopy {
  Layout target;
  Layout target_as_source;
};
ReshapeCopy plan_reshape_copy(const Layout& source, const Shape& new_shape, Order order,
                              const char* operation);
/// The layouts of a ravel that has to copy: a dense 1-d target holding the elements in the order
/// NumPy's ravel(`order`) reads them (layout::ravel_strides), for any order C, F, A or K.
ReshapeCopy plan_ravel_copy(const Layout& source, Order order);
/// C or F for a copy made under NumPy's `order` rules (A: F when F- and not C-contiguous).
Order resolve_copy_order(const Layout& source, Order order, const char* operation);

/// Writes `count` copies of the `itemsize`-byte `value` to dense memory at `dst`, doubling the
/// filled prefix with each memcpy (log2(count) calls instead of one per element).
void fill_pattern(std::byte* dst, std::int64_t count, const void* value,
                  std::int64_t itemsize) noexcept;

/// `layout` without its broadcast axes: every axis with stride 0 shrinks to length 1, so each
/// distinct element appears once (Numba's array_core). Used to write into broadcast arrays.
Layout broadcast_core(const Layout& layout);

/// A new pageable host array with `layout` (offset must make the extent start at 0).
HostArray make_host_array(Layout layout, DType dtype);
/// A new device array with `layout` on `context`.
DeviceArray make_device_array(Context& context, Layout layout, DType dtype, Stream stream,
                              const char* operation);
/// A new device array shaped like `like` (NumPy empty_like order K strides).
DeviceArray make_device_array_like(Context& context, const Layout& like, DType dtype, Stream stream,
                                   const char* operation);

}  // namespace devmem::detail

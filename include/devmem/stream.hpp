// Streams (device command queues) and events (markers in them).
//
// A default-constructed Stream is "unspecified": free functions then use the default stream and
// array methods use the array's own stream. default_stream() returns the default stream
// explicitly. Work on the default stream completes before the call returns; work on any other
// stream is asynchronous with respect to the host until synchronize() or an event says it is done.
//
// Thread safety: Stream and Event are handles to shared state; copies may be used from several
// threads at once. Work enqueued from several threads onto one stream runs in enqueue order.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/export.hpp>

#include <memory>
#include <vector>

namespace devmem {

class Context;
class Event;
class AutoSynchronize;
class GraphMemory;

namespace detail {
struct StreamState;
struct EventState;
}  // namespace detail

/// A queue of device work (Numba's Stream; cudaStream_t / hipStream_t). A shared handle: copies
/// name the same queue, which is destroyed (after its queued work finishes) with the last copy.
/// Unlike Numba there is no stream 0 object: an unspecified Stream means "the default".
class DEVMEM_API Stream {
 public:
  /// Unspecified: resolves to the default stream, or to an array's own stream in array methods.
  Stream() noexcept = default;

  /// True unless default-constructed.
  [[nodiscard]] bool is_specified() const noexcept { return state_ != nullptr; }
  /// True for the default stream and for an unspecified stream (which resolves to it).
  [[nodiscard]] bool is_default() const noexcept;
  /// The context the stream belongs to; the current context for an unspecified stream.
  [[nodiscard]] std::shared_ptr<Context> context() const;

  /// Wraps a stream devmem did not create: a cudaStream_t / hipStream_t of PyTorch, CuPy, NCCL or
  /// the application (for the host backend, a queue of its own Backend::create_stream), on
  /// `device` of the active backend. The result works everywhere a Stream does: copies and
  /// launches enqueue on it, record()/wait() order it against devmem's streams, and
  /// DeviceArray::record_use(stream) keeps memory from reuse until the foreign work queued on it
  /// so far has completed (review 2, N4: a consumer of array_interface() or to_dlpack() on a
  /// stream of its own). devmem never destroys the native stream and never synchronizes it
  /// unasked: its owner keeps it alive while this Stream (or a copy, or an array whose stream it
  /// is) exists, and the native stream must belong to `device` (the vendor calls that use it fail
  /// otherwise). Makes no vendor call. Throws InvalidArgument for a null handle (the default
  /// stream is default_stream()) and NoDevice for a device that does not exist.
  /// Thread-safe.
  [[nodiscard]] static Stream external(NativeStream native, int device);
  /// True for a Stream made by external(): devmem does not own the native stream.
  [[nodiscard]] bool is_external() const noexcept;

  /// Blocks until all work enqueued so far has completed. Errors of asynchronous work on the
  /// stream are reported here (BackendError). Then lets go of the memory that devmem held for
  /// that work (arrays dropped while a copy or kernel on this stream still used them), which
  /// otherwise waits for a completion event shared by up to 16 operations of the stream
  /// (docs/memory-managers.md).
  void synchronize() const;
  /// True when all work enqueued so far has completed.
  [[nodiscard]] bool query() const;
  /// RAII scope that synchronizes the stream when it ends, also when it ends by an exception
  /// (then a synchronization error is reported on stderr instead of thrown).
  [[nodiscard]] AutoSynchronize auto_synchronize() const;
  /// Records a new event at the current end of the stream. Its vendor event may be one that an
  /// earlier record() returned and whose last handle is gone (each context keeps up to 64 for
  /// reuse, since creating one costs microseconds on a GPU): it is recorded afresh here, so it
  /// behaves as a new one (query, synchronize, elapsed_ms).
  [[nodiscard]] Event record() const;
  /// Work enqueued on this stream after this call waits until `event` has completed.
  void wait(const Event& event) const;
  /// cudaStream_t / hipStream_t / the host backend's queue; nullptr for the default stream.
  [[nodiscard]] NativeStream native_handle() const noexcept;
  /// The memory that work captured into a graph from this stream uses (the arrays of its copies
  /// and launches, and their mapped host memory). devmem cannot see a graph's end, so from each
  /// capture on it holds that memory for the context; this hands what is held so far to the
  /// caller, who keeps the GraphMemory as long as the graph or an executable made from it may
  /// run, and drops it after destroying them. Call it after cudaStreamEndCapture; without it the
  /// memory stays held until the process ends (docs/streams-and-events.md#graphs). Makes no
  /// vendor call. Thread-safe.
  [[nodiscard]] GraphMemory take_graph_memory() const;

  /// Same queue (an unspecified stream equals the default stream of the current context).
  friend bool operator==(const Stream& a, const Stream& b) noexcept;

 private:
  friend struct detail::StreamState;
  explicit Stream(std::shared_ptr<detail::StreamState> state) noexcept : state_(std::move(state)) {}
  std::shared_ptr<detail::StreamState> state_;
};

DEVMEM_API bool operator==(const Stream& a, const Stream& b) noexcept;

/// A marker in a stream, for waiting and timing.
class DEVMEM_API Event {
 public:
  /// An event of the current context that has not been recorded (it counts as complete).
  Event();
  /// Records the event at the current end of `stream` (again).
  void record(const Stream& stream = {});
  /// Blocks until the work before the event has completed.
  void synchronize() const;
  /// Work enqueued on `stream` (unspecified: the current device's default stream) after this
  /// call waits until the event has completed; the caller does not wait (Numba's
  /// event.wait(stream); the same as stream.wait(*this)). An event never recorded counts as
  /// complete. Throws InvalidArgument when the event and the stream belong to different devices
  /// (naming both), BackendError for a vendor failure. Thread-safe.
  void wait(const Stream& stream = {}) const;
  /// True when all work before the event has completed (or it was never recorded).
  [[nodiscard]] bool query() const;
  /// cudaEvent_t / hipEvent_t / the host backend's event.
  [[nodiscard]] NativeEvent native_handle() const noexcept;
  /// Milliseconds between two completed events. BackendError when either is not complete.
  [[nodiscard]] static float elapsed_ms(const Event& start, const Event& end);

 private:
  friend struct detail::EventState;
  explicit Event(std::shared_ptr<detail::EventState> state) noexcept : state_(std::move(state)) {}
  std::shared_ptr<detail::EventState> state_;
};

/// Milliseconds between two completed events (same as Event::elapsed_ms).
[[nodiscard]] DEVMEM_API float elapsed_ms(const Event& start, const Event& end);

/// Synchronizes a stream at scope exit. Move-only. Numba's `with stream.auto_synchronize():`.
class [[nodiscard]] DEVMEM_API AutoSynchronize {
 public:
  /// Made by Stream::auto_synchronize().
  explicit AutoSynchronize(Stream stream) noexcept;
  /// The moved-from scope synchronizes nothing.
  AutoSynchronize(AutoSynchronize&& other) noexcept;
  AutoSynchronize& operator=(AutoSynchronize&&) = delete;
  AutoSynchronize(const AutoSynchronize&) = delete;
  AutoSynchronize& operator=(const AutoSynchronize&) = delete;
  /// Synchronizes. Throws the synchronization error unless the scope is being left by an
  /// exception, in which case the error is written to stderr (never lost, never a second throw).
  ~AutoSynchronize() noexcept(false);
  /// Synchronizes now (throwing on error); the destructor then does nothing.
  void close();
  /// The stream synchronized at scope exit.
  [[nodiscard]] const Stream& stream() const noexcept { return stream_; }

 private:
  Stream stream_;
  int uncaught_at_entry_;
  bool active_ = true;
};

/// What work captured into a graph uses (Stream::take_graph_memory): holds it until destroyed or
/// release()d. Move-only; owns shared references, so dropping it frees memory only when nothing
/// else (an array, a pending copy) still holds it, through the context's usual deferred release.
class [[nodiscard]] DEVMEM_API GraphMemory {
 public:
  GraphMemory() noexcept;
  GraphMemory(GraphMemory&&) noexcept;
  GraphMemory& operator=(GraphMemory&&) noexcept;
  GraphMemory(const GraphMemory&) = delete;
  GraphMemory& operator=(const GraphMemory&) = delete;
  ~GraphMemory();
  /// Objects (allocations, mapped memory, registrations) held.
  [[nodiscard]] std::size_t size() const noexcept { return objects_.size(); }
  /// Stops holding them now (the graph and its executables must be gone).
  void release() noexcept;

 private:
  friend class Stream;
  explicit GraphMemory(std::vector<std::shared_ptr<const void>> objects) noexcept;
  std::vector<std::shared_ptr<const void>> objects_;
};

/// A new stream on the current context.
[[nodiscard]] DEVMEM_API Stream stream();
/// The default stream of the current context.
[[nodiscard]] DEVMEM_API Stream default_stream();

}  // namespace devmem

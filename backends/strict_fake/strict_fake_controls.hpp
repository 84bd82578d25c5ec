// Test controls of the strict fake runtime (docs/strict-fake.md): exported from libdevmem only in
// builds with DEVMEM_WITH_STRICT_FAKE, for tests/strict_fake. Not installed. Every function that
// returns an int returns the fake's error code (CUDA's numbers, strict_fake_api.hpp), 0 on success.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/export.hpp>

#include <cstddef>
#include <cstdint>

namespace devmem::strict_fake {

/// Whether queued work runs only at synchronisation points, in a seeded random order across
/// streams (the default; DEVMEM_STRICT_FAKE_DEFERRED=0 runs work as it is enqueued).
DEVMEM_API bool deferred_execution();
/// The seed of the order (printed at start; DEVMEM_STRICT_FAKE_SEED sets it).
DEVMEM_API std::uint64_t seed();
/// Makes every later call fail with the illegal-address error, like a kernel's faulting access.
DEVMEM_API void inject_sticky_error();
/// Whether `ptr` lies in the fake's device memory (the inaccessible mapping).
DEVMEM_API bool is_device_address(const void* ptr);
/// cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) on a stream of the runtime.
DEVMEM_API int begin_capture(NativeStream stream);
/// cudaStreamEndCapture; `nodes` is the number of operations the graph would hold.
DEVMEM_API int end_capture(NativeStream stream, std::size_t* nodes);
/// The runtime's calls themselves, below the backend (no device selection by devmem):
/// cudaEventRecord, cudaStreamWaitEvent, cudaMalloc, cudaStreamSynchronize, cudaSetDevice,
/// cudaGetDevice, cudaGetLastError, and one launch of the strided-copy kernel that copies `bytes`
/// contiguous bytes.
DEVMEM_API int raw_event_record(NativeEvent event, NativeStream stream);
DEVMEM_API int raw_stream_wait_event(NativeStream stream, NativeEvent event);
DEVMEM_API int raw_malloc(void** ptr, std::size_t bytes);
DEVMEM_API int raw_stream_synchronize(NativeStream stream);
DEVMEM_API int raw_set_device(int device);
/// cudaGetDevice: the calling thread's current device in the runtime (-1 on failure).
DEVMEM_API int raw_get_device();
DEVMEM_API int raw_get_last_error();
DEVMEM_API int raw_launch_copy(void* dst, const void* src, std::size_t bytes, NativeStream stream);

/// Makes every later launch of libdevmem's strided-copy kernel on `device` fail with 209
/// (cudaErrorNoKernelImageForDevice), as on a GPU the library has no code for (an A100 for a
/// library built for sm_90 only, an MI300 for gfx90a); false restores.
DEVMEM_API void set_missing_kernel_image(int device, bool missing);
/// Launches of the strided-copy kernel asked for so far, the refused ones included.
DEVMEM_API std::size_t strided_copy_launches();
/// The architectures the strided-copy kernel reports it was built for (the table's
/// stridedCopyArchitectures, comma-separated, as hipcc's build records them), "" (not recorded)
/// by default. `list` must outlive its use: pass a string literal.
DEVMEM_API void set_strided_copy_architectures(const char* list);

/// The last temporary of a strided copy that the backend put back in its cache (poisoned then),
/// and how many have gone back so far.
struct ReturnedScratch {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  bool host = false;
  std::size_t returns = 0;
};
DEVMEM_API ReturnedScratch last_returned_scratch();

/// What the runtime was asked since the last reset_counters(), for tests that bound a path's
/// temporaries and waits (review 2, N7): the most device memory (cudaMalloc and stream-ordered
/// allocations, rounded to the allocator's 512 bytes) and page-locked memory (cudaHostAlloc) live
/// at once beyond what was live at the reset, and the calls that free memory (cudaFree,
/// cudaFreeHost: they synchronize the device) or make the host wait for a stream or an event.
struct Counters {
  std::size_t device_peak = 0;
  std::size_t pinned_peak = 0;
  std::size_t frees = 0;
  std::size_t stream_synchronizes = 0;
  std::size_t event_synchronizes = 0;
};
DEVMEM_API void reset_counters();
DEVMEM_API Counters counters();

/// Sets the strict fake backend's copy chunk (StagingOptions::chunk of RuntimeBackend: the pinned
/// staging of pageable copies and the bounded strided copies' temporaries) and returns the
/// previous one, so that a test moves many chunks with little memory. InvalidArgument when the
/// active backend is not the strict fake, or for 0.
DEVMEM_API std::size_t set_copy_chunk(std::size_t chunk);

}  // namespace devmem::strict_fake

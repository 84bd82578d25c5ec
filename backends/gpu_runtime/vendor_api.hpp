// What a table of vendor calls must provide for gpu_runtime::RuntimeBackend (runtime_backend.hpp),
// as a C++20 concept, VendorApi, so that a table missing a call or getting a signature wrong is
// refused where it is defined (each table static_asserts it: backends/cuda/cuda_api.hpp,
// backends/roc/hip_api.hpp, backends/strict_fake/strict_fake_api.hpp, and the fake of
// backends/gpu_runtime/tests/gpu_runtime_fake.hpp), instead of deep inside the backend's
// instantiation.
//
// A table (an `Api` traits struct) only names the vendor's types, constants and calls: the CUDA
// runtime, HIP, which mirrors it, and the test runtimes that imitate them. Every call returns
// Status{vendor code, vendor function name}: pairing each call with its name keeps the name next
// to the call, so an error always names the vendor function that really failed. Kept apart from
// the backend so that a table needs nothing but this header (and strided_copy_args.hpp).
#pragma once

#include "backends/gpu_runtime/strided_copy_args.hpp"

#include <devmem/backend.hpp>

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

namespace devmem::gpu_runtime {

/// What a table's call returns: the vendor status, and the vendor function that produced it.
template <class Code>
struct Status {
  Code code;
  const char* function;
};

namespace vendor_api_detail {

/// `T` (a constant's declared type) is `U`, cv-qualifiers aside.
template <class T, class U>
concept ConstantOf = std::same_as<std::remove_cvref_t<T>, U>;

/// `T` is the table's status enum, or its copy-kind enum (cv-qualifiers aside).
template <class T, class Api>
concept ErrorConstant = ConstantOf<T, typename Api::Error>;
template <class T, class Api>
concept KindConstant = ConstantOf<T, typename Api::MemcpyKind>;

/// `T` (a call's type, as a compound requirement gives it) is the table's Status.
template <class T, class Api>
concept ReturnsStatus = std::same_as<T, Status<typename Api::Error>>;

/// The host function a launchHostFunc<Fn> requirement is checked with.
inline void host_function_probe(void* /*user*/) noexcept {}

}  // namespace vendor_api_detail

/// The types: the status enum, opaque stream and event handles (the runtime's own pointers, which
/// devmem carries as NativeStream / NativeEvent), the device properties and the copy direction.
template <class Api>
concept VendorTypes =
    std::is_enum_v<typename Api::Error> && std::is_pointer_v<typename Api::Stream> &&
    std::is_pointer_v<typename Api::Event> && std::is_enum_v<typename Api::MemcpyKind> &&
    std::default_initializable<typename Api::DeviceProp> &&
    requires(const typename Api::DeviceProp& prop) {
      // The fields that Backend::properties reports.
      prop.name;
      prop.totalGlobalMem;
      prop.sharedMemPerBlock;
      prop.warpSize;
      prop.maxThreadsPerBlock;
      prop.maxThreadsDim[0];
      prop.maxGridSize[0];
      prop.multiProcessorCount;
      prop.canMapHostMemory;
    };

/// The constants, each of its type.
template <class Api>
concept VendorConstants =
    // The backend's name in messages: "cuda", "roc".
    vendor_api_detail::ConstantOf<decltype(Api::kBackend), std::string_view> &&
    // Success; NotReady (a query's "not yet", not an error); the out-of-memory code.
    vendor_api_detail::ErrorConstant<decltype(Api::kSuccess), Api> &&
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorNotReady), Api> &&
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorMemoryAllocation), Api> &&
    // A pitch the device's 2-D/3-D copy refuses (the rows are then copied one by one).
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorInvalidPitchValue), Api> &&
    // What every call returns once the runtime has been torn down at process exit.
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorRuntimeUnloading), Api> &&
    // Enabling peer access twice, disabling it when not enabled (success for devmem).
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorPeerAccessAlreadyEnabled), Api> &&
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorPeerAccessNotEnabled), Api> &&
    // streamIsCapturing's answer for the legacy stream while a blocking stream of its device
    // captures (work on the legacy stream would join that capture implicitly).
    vendor_api_detail::ErrorConstant<decltype(Api::kErrorStreamCaptureImplicit), Api> &&
    // The explicit copy kinds devmem passes (never a per-call pointer lookup), and Default.
    vendor_api_detail::KindConstant<decltype(Api::kHostToHost), Api> &&
    vendor_api_detail::KindConstant<decltype(Api::kHostToDevice), Api> &&
    vendor_api_detail::KindConstant<decltype(Api::kDeviceToHost), Api> &&
    vendor_api_detail::KindConstant<decltype(Api::kDeviceToDevice), Api> &&
    vendor_api_detail::KindConstant<decltype(Api::kMemcpyDefault), Api> &&
    // hostAlloc flags; Coherent / NonCoherent are 0 where the vendor has no such choice.
    vendor_api_detail::ConstantOf<decltype(Api::kHostAllocMapped), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kHostAllocPortable), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kHostAllocWriteCombined), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kHostAllocCoherent), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kHostAllocNonCoherent), unsigned> &&
    // hostRegister flags; ReadOnly is 0 where the runtime has no read-only registration.
    vendor_api_detail::ConstantOf<decltype(Api::kHostRegisterMapped), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kHostRegisterPortable), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kHostRegisterReadOnly), unsigned> &&
    // eventCreateWithFlags flags.
    vendor_api_detail::ConstantOf<decltype(Api::kEventDisableTiming), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kEventBlockingSync), unsigned> &&
    // The largest pitch, row width or row count a 2-D/3-D copy call accepts.
    vendor_api_detail::ConstantOf<decltype(Api::kMaxPitch), std::size_t> &&
    // Whether the IPC group (VendorIpcCalls) is there: a constant expression (`if constexpr`).
    vendor_api_detail::ConstantOf<decltype(Api::kHasIpc), bool> &&
    // Whether the managed-memory group (VendorManagedCalls) is there, likewise.
    vendor_api_detail::ConstantOf<decltype(Api::kHasManaged), bool>;

/// Devices: count, current device (read from the runtime's own per-thread state), properties,
/// memory, and what the properties say in devmem's terms.
template <class Api>
concept VendorDeviceCalls =
    // Each call, tried with arguments of the types it takes:
    requires(int* out, int device, typename Api::DeviceProp* prop,
             const typename Api::DeviceProp& props, std::size_t* bytes, bool* answer) {
      { Api::getDeviceCount(out) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::getDevice(out) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::setDevice(device) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::getDeviceProperties(prop, device) } -> vendor_api_detail::ReturnsStatus<Api>;
      // memGetInfo(free, total) of the current device.
      { Api::memGetInfo(bytes, bytes) } -> vendor_api_detail::ReturnsStatus<Api>;
      // "sm_90", "gfx90a".
      { Api::architecture(props) } -> std::convertible_to<std::string>;
      { Api::unifiedAddressing(props) } -> std::same_as<bool>;
      // The per-block shared memory after a kernel's opt-in.
      { Api::sharedMemPerBlockOptin(props) } -> std::convertible_to<std::size_t>;
      // Whether the device has stream-ordered memory pools (mallocAsync / freeAsync).
      { Api::memoryPoolsSupported(device, answer) } -> vendor_api_detail::ReturnsStatus<Api>;
      // The release threshold of the device's default pool (freed bytes kept across
      // synchronizations), and trimming that pool down to `bytes`.
      {
        Api::setPoolReleaseThreshold(device, std::uint64_t{})
        } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::trimPoolTo(device, std::size_t{}) } -> vendor_api_detail::ReturnsStatus<Api>;
    };

/// Device memory, page-locked and registered host memory, and what a pointer is.
template <class Api>
concept VendorMemoryCalls =
    // Each call, tried with arguments of the types it takes:
    requires(void** out, void* ptr, const void* cptr, std::size_t bytes, unsigned flags,
             typename Api::Stream stream, bool* answer, int* device) {
      { Api::malloc(out, bytes) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::free(ptr) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::mallocAsync(out, bytes, stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::freeAsync(ptr, stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::hostAlloc(out, bytes, flags) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::hostFree(ptr) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::hostRegister(ptr, bytes, flags) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::hostUnregister(ptr) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::hostGetDevicePointer(out, ptr, flags) } -> vendor_api_detail::ReturnsStatus<Api>;
      // Whether host memory is ordinary pageable memory, neither page-locked nor device/managed.
      { Api::isPageable(cptr, answer) } -> vendor_api_detail::ReturnsStatus<Api>;
      // The device of device or managed memory, else -1.
      { Api::pointerDevice(cptr, device) } -> vendor_api_detail::ReturnsStatus<Api>;
    };

/// Streams and events; defaultStream is the handle of the legacy (blocking) default stream.
template <class Api>
concept VendorStreamCalls =
    // Each call, tried with arguments of the types it takes:
    requires(typename Api::Stream stream, typename Api::Stream* new_stream,
             typename Api::Event event, typename Api::Event* new_event, unsigned flags,
             bool* capturing, float* ms, void* user) {
      { Api::defaultStream() } -> std::same_as<typename Api::Stream>;
      { Api::streamCreate(new_stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::streamDestroy(stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::streamSynchronize(stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::streamQuery(stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::streamWaitEvent(stream, event, flags) } -> vendor_api_detail::ReturnsStatus<Api>;
      // Whether work enqueued on the stream now goes into a graph.
      { Api::streamIsCapturing(stream, capturing) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventCreate(new_event) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventCreateWithFlags(new_event, flags) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventDestroy(event) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventRecord(event, stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventSynchronize(event) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventQuery(event) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::eventElapsedTime(ms, event, event) } -> vendor_api_detail::ReturnsStatus<Api>;
      // launchHostFunc<Fn>(stream, user) enqueues Fn(user), run once the work before it is done.
      {
        Api::template launchHostFunc<&vendor_api_detail::host_function_probe>(stream, user)
        } -> vendor_api_detail::ReturnsStatus<Api>;
    };

/// Copies, memset, the strided-copy kernel, and peer access (for the current device).
template <class Api>
concept VendorCopyCalls =
    // Each call, tried with arguments of the types it takes:
    requires(void* dst, const void* src, std::size_t n, typename Api::MemcpyKind kind,
             typename Api::Stream stream, const StridedCopyArgs& args, int device,
             int* can_access) {
      { Api::memcpyAsync(dst, src, n, kind, stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      // memcpy2DAsync(dst, dst pitch, src, src pitch, width, height, kind, stream).
      {
        Api::memcpy2DAsync(dst, n, src, n, n, n, kind, stream)
        } -> vendor_api_detail::ReturnsStatus<Api>;
      // memcpy3DAsync(dst, dst pitch, dst rows per slice, src, src pitch, src rows per slice,
      // width, height, depth, kind, stream), linear memory on both sides.
      {
        Api::memcpy3DAsync(dst, n, n, src, n, n, n, n, n, kind, stream)
        } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::memsetAsync(dst, device, n, stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      // One launch of libdevmem's strided-copy kernel (strided_copy_kernel.hpp, compiled for the
      // vendor from strided_copy_launch.cpp).
      { Api::launchCopyStrided(args, stream) } -> vendor_api_detail::ReturnsStatus<Api>;
      // Whether a launch's status says the library has no code for the device (the strided copy
      // then falls back to the vendor's copies on that device).
      { Api::missingKernelImage(typename Api::Error{}) } -> std::convertible_to<bool>;
      // The architectures libdevmem's kernel was compiled for ("gfx90a,gfx1030"), or empty when
      // the build does not record them: the strided copy never launches it on another device.
      { Api::stridedCopyArchitectures() } -> std::convertible_to<std::string_view>;
      // deviceCanAccessPeer(answer, device, peer); enabling and disabling the current device's
      // access to a peer.
      {
        Api::deviceCanAccessPeer(can_access, device, device)
        } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::deviceEnablePeerAccess(device) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::deviceDisablePeerAccess(device) } -> vendor_api_detail::ReturnsStatus<Api>;
      // memcpyPeerAsync(dst, dst device, src, src device, bytes, stream).
      {
        Api::memcpyPeerAsync(dst, device, src, device, n, stream)
        } -> vendor_api_detail::ReturnsStatus<Api>;
    };

/// The runtime's error state and the words for a code.
template <class Api>
concept VendorErrorCalls =
    // Each call, tried with arguments of the types it takes:
    requires(typename Api::Error code) {
      // Clears (and returns) the runtime's last-error state.
      { Api::getLastError() } -> std::same_as<typename Api::Error>;
      { Api::errorName(code) } -> std::convertible_to<const char*>;
      { Api::errorString(code) } -> std::convertible_to<const char*>;
      // Whether the code leaves the process's context unusable (then latched: DeviceLost).
      { Api::isSticky(code) } -> std::same_as<bool>;
    };

/// Inter-process sharing, required only where Api::kHasIpc: the vendor's 64-byte handle type,
/// export, open (with lazy peer access) and close, and the allocation a pointer lies in.
template <class Api>
concept VendorIpcCalls =
    // A handle devmem carries as bytes (VendorIpcHandle).
    (sizeof(typename Api::IpcMemHandle) == kVendorIpcHandleBytes) &&
    std::is_trivially_copyable_v<typename Api::IpcMemHandle> &&
    // Each call, tried with arguments of the types it takes:
    requires(typename Api::IpcMemHandle handle, typename Api::IpcMemHandle* out, void* ptr,
             void** base, std::size_t* bytes, const void* cptr) {
      { Api::ipcGetMemHandle(out, ptr) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::ipcOpenMemHandle(base, handle) } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::ipcCloseMemHandle(ptr) } -> vendor_api_detail::ReturnsStatus<Api>;
      // memGetAddressRange(base, bytes, ptr): the device allocation that ptr lies in.
      { Api::memGetAddressRange(base, bytes, cptr) } -> vendor_api_detail::ReturnsStatus<Api>;
    };

/// Managed (unified) memory, required only where Api::kHasManaged: mallocManaged's attach flags,
/// the location number of the host (cudaCpuDeviceId), and the three calls. Locations are device
/// indices or kCpuDeviceId; the table turns them into what its runtime takes (CUDA 13's
/// cudaMemLocation), and the advice into the vendor's enum.
template <class Api>
concept VendorManagedCalls =
    vendor_api_detail::ConstantOf<decltype(Api::kMemAttachGlobal), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kMemAttachHost), unsigned> &&
    vendor_api_detail::ConstantOf<decltype(Api::kCpuDeviceId), int> &&
    // Each call, tried with arguments of the types it takes:
    requires(void** out, const void* cptr, std::size_t bytes, unsigned flags, int location,
             MemoryAdvice advice, typename Api::Stream stream) {
      { Api::mallocManaged(out, bytes, flags) } -> vendor_api_detail::ReturnsStatus<Api>;
      {
        Api::memPrefetchAsync(cptr, bytes, location, stream)
        } -> vendor_api_detail::ReturnsStatus<Api>;
      { Api::memAdvise(cptr, bytes, advice, location) } -> vendor_api_detail::ReturnsStatus<Api>;
    };

/// A table of vendor calls that RuntimeBackend can be instantiated with. Optional, and not part
/// of the concept: scratchReturned(ptr, bytes, host), a test runtime's hook that is told when a
/// strided copy's temporary goes back to the backend's cache (the strict fake poisons it).
template <class Api>
concept VendorApi = VendorTypes<Api> && VendorConstants<Api> && VendorDeviceCalls<Api> &&
                    VendorMemoryCalls<Api> && VendorStreamCalls<Api> && VendorCopyCalls<Api> &&
                    VendorErrorCalls<Api> && (!Api::kHasIpc || VendorIpcCalls<Api>) &&
                    (!Api::kHasManaged || VendorManagedCalls<Api>);

}  // namespace devmem::gpu_runtime

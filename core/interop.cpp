// CUDA Array Interface v3 (producer and consumer) and DLPack (to_dlpack / from_dlpack). The rules
// are documented in include/devmem/interop.hpp.
#include <devmem/interop.hpp>

#include "core/array_access.hpp"
#include "core/array_memory.hpp"
#include "core/context_state.hpp"
#include "core/format.hpp"
#include "core/internal.hpp"
#include "core/stream_state.hpp"

#include <devmem/context.hpp>
#include <devmem/error.hpp>
#include <devmem/memory.hpp>

#include <dlpack/dlpack.h>
#include <fmt/format.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace devmem {

namespace {

// DLPack >= 0.8 has kDLBool (6); Debian's 0.6 does not. Accepted on import either way.
constexpr std::uint8_t kDLBoolCode = 6;

std::string pointer_text(const void* p) {
  return fmt::format("{}", fmt::ptr(p));
}

bool has_negative_dimension(const Shape& shape, std::int64_t& bad) {
  for (const std::int64_t d : shape) {
    if (d < 0) {
      bad = d;
      return true;
    }
  }
  return false;
}

bool is_aligned(const void* p, std::int64_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(alignment) == 0;
}

// The bytes a foreign layout describes around `element0` must lie inside the address space: with
// element 0 near address 0 and negative strides, or near the top with a large extent, they would
// wrap around (found by fuzz/fuzz_array_interface). Checked with integers: such a pointer cannot
// even be formed in C++.
void check_address_range(const char* operation, std::uintptr_t element0, const Layout& layout) {
  const Extent extent = layout.byte_extent();
  if (extent.bytes() == 0) return;
  const auto before = static_cast<std::uintptr_t>(layout.offset - extent.begin);
  const auto span = static_cast<std::uintptr_t>(extent.bytes());
  if (element0 < before || element0 - before > std::numeric_limits<std::uintptr_t>::max() - span) {
    detail::throw_invalid(operation,
                          "the elements at data pointer {:#x} with strides {} span {} bytes that "
                          "wrap around the address space",
                          element0, layout::format_tuple(layout.strides), extent.bytes());
  }
  // A first byte at address 0 would make the view's base the null pointer, which every array
  // reads as "no memory" (found by fuzz/fuzz_dlpack: data() returned null for 48 elements).
  if (element0 == before) {
    detail::throw_invalid(operation,
                          "the elements at data pointer {:#x} with strides {} start at address 0",
                          element0, layout::format_tuple(layout.strides));
  }
}

// A DeviceArray over memory devmem does not own: `element0` is the address of element
// (0, ..., 0); the memory's base is placed so that the layout's extent starts at it. The caller
// has checked the address range (check_address_range).
DeviceArray view_foreign(const std::shared_ptr<Context>& context, std::byte* element0,
                         Layout layout, DType dtype, std::shared_ptr<const void> keep_alive,
                         Stream stream) {
  auto memory = std::make_shared<detail::DeviceMemory>();
  memory->context = context;
  memory->ptr = element0 == nullptr
                    ? nullptr
                    : reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(element0) -
                                                   static_cast<std::uintptr_t>(layout.offset));
  memory->bytes = layout.byte_extent().bytes();
  memory->owned = false;
  memory->keep_alive = std::move(keep_alive);
  detail::track_device_memory(memory);
  return detail::ArrayAccess::make(std::move(memory), std::move(layout), std::move(dtype),
                                   std::move(stream));
}

// ---- CUDA Array Interface ---------------------------------------------------------------------

std::intptr_t exported_stream(const Stream& stream) {
  if (stream.is_default()) return ArrayInterface::kLegacyDefaultStream;
  const auto handle = reinterpret_cast<std::intptr_t>(stream.native_handle());
  // A created stream never has one of the reserved values; never export 0 in any case.
  return handle == 0 ? ArrayInterface::kLegacyDefaultStream : handle;
}

// ---- DLPack -----------------------------------------------------------------------------------

const char* device_type_name(int type) noexcept {
  switch (type) {
    case kDLCPU:
      return "kDLCPU";
    case kDLCUDA:
      return "kDLCUDA";
    case kDLCUDAHost:
      return "kDLCUDAHost";
    case kDLOpenCL:
      return "kDLOpenCL";
    case kDLVulkan:
      return "kDLVulkan";
    case kDLMetal:
      return "kDLMetal";
    case kDLVPI:
      return "kDLVPI";
    case kDLROCM:
      return "kDLROCM";
    case kDLROCMHost:
      return "kDLROCMHost";
    case kDLExtDev:
      return "kDLExtDev";
    case kDLCUDAManaged:
      return "kDLCUDAManaged";
    default:
      return "unknown";
  }
}

const char* dtype_code_name(int code) noexcept {
  switch (code) {
    case kDLInt:
      return "kDLInt";
    case kDLUInt:
      return "kDLUInt";
    case kDLFloat:
      return "kDLFloat";
    case kDLOpaqueHandle:
      return "kDLOpaqueHandle";
    case kDLBfloat:
      return "kDLBfloat";
    case kDLComplex:
      return "kDLComplex";
    case kDLBoolCode:
      return "kDLBool";
    default:
      return "unknown";
  }
}

// Device types from_dlpack accepts on a backend, the first being the one to_dlpack produces.
// The test-only strict fake (docs/strict-fake.md) models CUDA, whose device memory the host cannot
// read: its memory is CUDA's kind, never kDLCPU.
std::vector<DLDeviceType> device_types_of(std::string_view backend) {
  if (backend == "cuda" || backend == "strict-fake") return {kDLCUDA, kDLCUDAManaged};
  if (backend == "roc") return {kDLROCM};
  return {kDLCPU};
}

DLDataType to_dl_dtype(const DType& dtype) {
  const std::int64_t size = dtype.itemsize();
  const auto make = [size](std::uint8_t code) {
    return DLDataType{code, static_cast<std::uint8_t>(size * 8), 1};
  };
  switch (dtype.kind()) {
    case 'b':
#if DLPACK_VERSION >= 80
      return make(kDLBool);
#else
      return make(kDLUInt);  // DLPack 0.6 has no bool type
#endif
    case 'i':
      return make(kDLInt);
    case 'u':
      return make(kDLUInt);
    case 'f':
      if (size <= 8) return make(kDLFloat);
      break;
    case 'c':
      if (size <= 16) return make(kDLComplex);
      break;
    case 'V':
      detail::throw_invalid("to_dlpack", "record dtype {} has no DLPack equivalent", dtype.name());
    default:
      break;
  }
  detail::throw_invalid("to_dlpack", "dtype {} has no DLPack equivalent", dtype.name());
}

std::optional<DType> from_dl_dtype(const DLDataType& t) {
  if (t.bits == 0 || t.bits % 8 != 0) return std::nullopt;
  const int bytes = t.bits / 8;
  const bool integer_size = bytes == 1 || bytes == 2 || bytes == 4 || bytes == 8;
  switch (t.code) {
    case kDLInt:
      if (integer_size) return DType('i', bytes);
      break;
    case kDLUInt:
      if (integer_size) return DType('u', bytes);
      break;
    case kDLFloat:
      if (bytes == 2 || bytes == 4 || bytes == 8) return DType('f', bytes);
      break;
    case kDLComplex:
      if (bytes == 8 || bytes == 16) return DType('c', bytes);
      break;
    case kDLBoolCode:
      if (bytes == 1) return DType('b', 1);
      break;
    default:
      break;
  }
  return std::nullopt;
}

// What a DLManagedTensor made by devmem points to: the tensor, its shape and strides, and the
// array it views (kept alive until the deleter runs).
struct DLPackExport {
  DLManagedTensor tensor{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  std::shared_ptr<const void> keep_alive;
};

void delete_export(DLManagedTensor* self) noexcept {
  if (self == nullptr) return;
  delete static_cast<DLPackExport*>(self->manager_ctx);  // NOLINT(cppcoreguidelines-owning-memory)
}

// DLPack strides count elements: byte strides divided by the itemsize, which must divide them.
std::vector<std::int64_t> element_strides(const Layout& layout) {
  std::vector<std::int64_t> out;
  out.reserve(layout.strides.size());
  for (std::size_t k = 0; k < layout.strides.size(); ++k) {
    const std::int64_t s = layout.strides[k];
    if (s % layout.itemsize != 0) {
      detail::throw_invalid("to_dlpack",
                            "byte stride {} of axis {} is not a multiple of the itemsize {} "
                            "(DLPack strides count elements)",
                            s, k, layout.itemsize);
    }
    out.push_back(s / layout.itemsize);
  }
  return out;
}

// Validates what DLPack can express, then runs `before_export` (e.g. a synchronisation) and
// makes the tensor.
template <class BeforeExport>
DLManagedTensor* make_export(const Layout& layout, const DType& dtype, void* element0,
                             DLDevice device, std::shared_ptr<const void> keep_alive,
                             BeforeExport&& before_export) {
  const DLDataType dl_dtype = to_dl_dtype(dtype);
  auto out = std::make_unique<DLPackExport>();
  out->strides = element_strides(layout);
  out->shape = layout.shape;
  before_export();
  out->keep_alive = std::move(keep_alive);
  DLTensor& t = out->tensor.dl_tensor;
  t.data = layout.size() == 0 ? nullptr : element0;
  t.device = device;
  t.ndim = layout.ndim();
  t.dtype = dl_dtype;
  t.shape = out->shape.empty() ? nullptr : out->shape.data();
  t.strides = out->strides.empty() ? nullptr : out->strides.data();
  t.byte_offset = 0;
  out->tensor.manager_ctx = out.get();
  out->tensor.deleter = &delete_export;
  return &out.release()->tensor;
}

}  // namespace

// ---- CUDA Array Interface ---------------------------------------------------------------------

ArrayInterface array_interface(const DeviceArray& array) {
  ArrayInterface iface;
  iface.shape = array.shape();
  // Omitted only when exactly the dense C strides: never claim density for other layouts.
  if (array.strides() != layout::dense_strides(array.shape(), array.itemsize(), Order::C)) {
    iface.strides = array.strides();
  }
  iface.typestr = array.dtype().typestr();
  iface.data.pointer = array.size() == 0 ? nullptr : array.data();
  iface.data.readonly = false;
  iface.version = 3;
  iface.stream = exported_stream(array.stream());
  return iface;
}

ArrayInterface DeviceArray::array_interface() const {
  return devmem::array_interface(*this);
}

namespace {

// The checks of an interface's fields that need no backend, in the order they are reported; the
// element type it describes.
DType validated_interface_dtype(const ArrayInterface& iface, const char* op) {
  if (iface.version != 3 && iface.version != 2) {
    detail::throw_invalid(
        op, "unsupported interface version {} (expected 3, or 2 without a stream)", iface.version);
  }
  if (iface.version == 2 && iface.stream) {
    detail::throw_invalid(op,
                          "a version 2 interface cannot have a stream (streams came with "
                          "version 3)");
  }
  if (iface.mask) detail::throw_invalid(op, "masked arrays are not supported");
  if (iface.data.readonly) {
    detail::throw_invalid(op, "read-only data is not supported (device arrays are writable)");
  }
  DType dtype;
  try {
    dtype = DType::from_typestr(iface.typestr);
  } catch (const InvalidArgument& e) {
    detail::throw_invalid(op, "unsupported typestr '{}' ({})", iface.typestr, e.what());
  }
  if (!iface.strides.empty() && iface.strides.size() != iface.shape.size()) {
    detail::throw_invalid(op, "{} strides given for {} dimensions (shape {})", iface.strides.size(),
                          iface.shape.size(), layout::format_tuple(iface.shape));
  }
  if (std::int64_t bad = 0; has_negative_dimension(iface.shape, bad)) {
    detail::throw_invalid(op, "negative dimension {} in shape {}", bad,
                          layout::format_tuple(iface.shape));
  }
  if (iface.stream && *iface.stream == 0) {
    detail::throw_invalid(op,
                          "stream 0 is not allowed (1 = legacy default stream, 2 = per-thread "
                          "default stream, other values are stream handles)");
  }
  return dtype;
}

// The stream an interface's `stream` value names on `context`: the default stream for the two
// default-stream values, one of devmem's own streams for its handle, else the default stream
// (a foreign handle). With `sync`, waits for that stream, or for the foreign one, first.
Stream interface_stream(const std::shared_ptr<Context>& context, std::intptr_t value, bool sync) {
  Stream stream;
  const bool is_default =
      value == ArrayInterface::kLegacyDefaultStream ||
      (value == ArrayInterface::kPerThreadDefaultStream && context->backend_name() == "host");
  const NativeStream native = is_default ? nullptr : reinterpret_cast<NativeStream>(value);
  if (!is_default) {
    for (const auto& state : detail::ContextState::of(*context).live_streams()) {
      if (state->handle == native) {
        stream = detail::StreamState::wrap(state);
        break;
      }
    }
  }
  if (sync) {
    if (is_default || stream.is_specified()) {
      (is_default ? context->default_stream() : stream).synchronize();
    } else {
      context->backend().synchronize_stream(context->device(), native);
    }
  }
  return stream;
}

}  // namespace

DeviceArray as_device_array(const ArrayInterface& iface, std::shared_ptr<const void> owner,
                            bool sync) {
  constexpr const char* op = "as_device_array";
  DType dtype = validated_interface_dtype(iface, op);
  Layout layout = layout::make_layout(iface.shape, dtype.itemsize(), iface.strides, Order::C, op);
  const std::int64_t size = layout.size();
  auto* const element0 = static_cast<std::byte*>(iface.data.pointer);
  if (element0 == nullptr && size > 0) {
    detail::throw_invalid(op, "null data pointer for an array of {} elements", size);
  }
  if (size > 0 && !is_aligned(element0, dtype.alignment())) {
    detail::throw_invalid(op, "data pointer {} is not aligned to {} bytes for dtype {}",
                          pointer_text(element0), dtype.alignment(), dtype.name());
  }
  // Byte strides are the producer's choice: an aligned element 0 says nothing about the others.
  if (size > 0) detail::check_stride_alignment(op, layout, dtype);
  if (size > 0) check_address_range(op, reinterpret_cast<std::uintptr_t>(element0), layout);

  std::shared_ptr<Context> context = current_context();
  // The memory belongs to the device the runtime says it is on, whichever device is current: a
  // view bound to another device's context would run its copies and kernels there.
  if (size > 0) {
    const int owning_device = context->backend().pointer_device(element0);
    if (owning_device >= 0 && owning_device != context->device()) {
      context = context_for_device(owning_device);
    }
  }
  // The default stream unless `stream` is one of devmem's own.
  Stream stream = iface.stream ? interface_stream(context, *iface.stream, sync) : Stream{};
  return view_foreign(context, element0, std::move(layout), std::move(dtype), std::move(owner),
                      std::move(stream));
}

// ---- DLPack -----------------------------------------------------------------------------------

DLManagedTensor* to_dlpack(const DeviceArray& array) {
  const std::shared_ptr<Context> context = array.context();
  const DLDevice device{device_types_of(context->backend_name()).front(), context->device()};
  return make_export(array.layout(), array.dtype(), array.data(), device,
                     std::make_shared<const DeviceArray>(array), [&array] {
                       // DLPack 0.6 carries no stream: the consumer may use the memory as soon
                       // as it has the tensor.
                       if (!array.stream().is_default()) array.stream().synchronize();
                     });
}

DLManagedTensor* DeviceArray::to_dlpack() const {
  return devmem::to_dlpack(*this);
}

DLManagedTensor* to_dlpack(const HostArray& array) {
  if (array.is_readonly()) {
    detail::throw_invalid("to_dlpack",
                          "the host array is read-only (a DLPack 0.6 tensor cannot be marked "
                          "read-only)");
  }
  DLDeviceType type = kDLCPU;
  const auto& memory = detail::ArrayAccess::memory(array);
  if (array.kind() != HostMemoryKind::Pageable && memory && memory->context) {
    const std::string_view backend = memory->context->backend_name();
    if (backend == "cuda" || backend == "strict-fake") type = kDLCUDAHost;
    // devmem's ROCm page-locked memory is non-coherent (a DMA staging buffer; review 1, finding
    // 27): a consumer's kernel must not read it as device-accessible host memory, so only mapped
    // (coherent) memory is kDLROCMHost; pinned memory is exported as the host memory it is.
    if (backend == "roc" && array.kind() == HostMemoryKind::Mapped) type = kDLROCMHost;
  }
  return make_export(array.layout(), array.dtype(), array.data(), DLDevice{type, 0},
                     std::make_shared<const HostArray>(array), [] {});
}

namespace {

// Throws unless `device` is one of the active backend's devices.
void check_dlpack_device(const DLDevice& device, const char* op) {
  Backend& backend = active_backend();
  const std::vector<DLDeviceType> accepted = device_types_of(backend.name());
  bool device_ok = false;
  for (const DLDeviceType type : accepted) device_ok = device_ok || device.device_type == type;
  if (!device_ok) {
    std::string expected;
    for (const DLDeviceType type : accepted) {
      expected += (expected.empty() ? "" : " or ") + std::string(device_type_name(type));
    }
    detail::throw_invalid(op, "device type {} ({}) is not usable on the {} backend (expected {})",
                          device_type_name(device.device_type),
                          static_cast<int>(device.device_type), backend.name(), expected);
  }
  const int count = device_count();
  if (device.device_id < 0 || device.device_id >= count) {
    detail::throw_invalid(op, "device_id {} does not exist (the {} backend has {} device(s))",
                          device.device_id, backend.name(), count);
  }
}

// A tensor's strides in bytes (DLPack counts elements); empty, C-contiguous, when it has none.
// `t.ndim` is checked and `t.shape` valid.
Strides dlpack_byte_strides(const DLTensor& t, std::int64_t itemsize, const char* op) {
  const auto ndim = static_cast<std::size_t>(t.ndim);
  Strides strides;
  if (t.strides != nullptr && ndim > 0) {
    strides.resize(ndim);
    for (std::size_t k = 0; k < ndim; ++k) {
      if (__builtin_mul_overflow(t.strides[k], itemsize, &strides[k])) {
        detail::throw_invalid(op, "stride {} of axis {} overflows int64 in bytes (itemsize {})",
                              t.strides[k], k, itemsize);
      }
    }
  }
  return strides;
}

// The address of a tensor's element 0, data + byte_offset; null when data is.
std::byte* dlpack_element0(const DLTensor& t, const char* op) {
  if (t.data == nullptr) return nullptr;
  if (t.byte_offset > static_cast<std::uint64_t>(INT64_MAX)) {
    detail::throw_invalid(op, "byte_offset {} overflows int64", t.byte_offset);
  }
  // Integer arithmetic: data + byte_offset past the end of the address space is no pointer.
  const auto data_address = reinterpret_cast<std::uintptr_t>(t.data);
  const auto offset = static_cast<std::uintptr_t>(t.byte_offset);
  if (data_address > std::numeric_limits<std::uintptr_t>::max() - offset) {
    detail::throw_invalid(op, "data {} + byte_offset {} wraps around the address space",
                          pointer_text(t.data), t.byte_offset);
  }
  return reinterpret_cast<std::byte*>(data_address + offset);
}

// The host backend's device is the CPU, so a kDLCPU tensor (a NumPy array, say) is memory its
// device can use; but its copies only touch memory it knows (allocations and registered host
// memory). Unknown memory is registered as mapped host memory while views of it live, then
// unregistered before the producer's deleter runs. Tensors over memory that an earlier tensor's
// registration covers share that registration (views of one NumPy array, say). Memory the backend
// already knows otherwise (its own allocations, pinned or registered host memory) is left as it is.
struct CpuRegistration {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  std::byte* device_begin = nullptr;  // the device address of byte `begin`
  std::optional<MappedScope> scope;
  ~CpuRegistration();
};

// Recursive: a registration may die while its thread holds the lock (a weak_ptr locked and dropped
// in covering_registration, the one made by a failed attempt).
std::recursive_mutex cpu_registrations_mutex;
// Live registrations by first byte; entries expire with their last tensor.
std::map<std::uintptr_t, std::weak_ptr<CpuRegistration>> cpu_registrations;

CpuRegistration::~CpuRegistration() {
  // Unregistered under the lock, so that a new tensor over the same bytes never finds them still
  // registered by a registration on its way out.
  const std::lock_guard lock(cpu_registrations_mutex);
  scope.reset();
  const auto it = cpu_registrations.find(begin);
  if (it != cpu_registrations.end() && it->second.expired()) cpu_registrations.erase(it);
}

// The live registration covering [begin, end), or null. Called with the mutex held.
std::shared_ptr<CpuRegistration> covering_registration(std::uintptr_t begin, std::uintptr_t end) {
  auto it = cpu_registrations.upper_bound(begin);
  if (it == cpu_registrations.begin()) return nullptr;
  --it;
  std::shared_ptr<CpuRegistration> found = it->second.lock();
  return found && found->end >= end ? found : nullptr;
}

std::shared_ptr<const void> register_cpu_tensor(std::byte* element0, const Layout& layout,
                                                std::shared_ptr<const void> tensor,
                                                std::byte*& device_element0) {
  Backend& backend = active_backend();
  device_element0 = element0;
  if (backend.name() != "host" || backend.pointer_device(element0) >= 0) return tensor;
  const Extent extent = layout.byte_extent();
  std::byte* const begin = element0 - (layout.offset - extent.begin);
  const auto first = reinterpret_cast<std::uintptr_t>(begin);
  const auto last = first + static_cast<std::uintptr_t>(extent.bytes());
  struct Registered {
    std::shared_ptr<const void> tensor;  // declared first: released after the registration
    std::shared_ptr<CpuRegistration> registration;
  };
  auto registered = std::make_shared<Registered>();
  registered->tensor = std::move(tensor);
  const std::lock_guard lock(cpu_registrations_mutex);
  registered->registration = covering_registration(first, last);
  if (!registered->registration) {
    auto registration = std::make_shared<CpuRegistration>();
    registration->begin = first;
    registration->end = last;
    try {
      MappedScope& scope = registration->scope.emplace(mapped({HostArray::view(
          static_cast<void*>(begin), Shape{extent.bytes()}, dtype_of<std::uint8_t>())}));
      registration->device_begin = static_cast<std::byte*>(scope[0].data());
    } catch (const BackendError& error) {
      if (error.code_name() != "HostMemoryAlreadyRegistered") throw;
      return std::move(registered->tensor);
    }
    cpu_registrations[first] = registration;
    registered->registration = std::move(registration);
  }
  const CpuRegistration& r = *registered->registration;
  device_element0 = r.device_begin + (reinterpret_cast<std::uintptr_t>(element0) - r.begin);
  return registered;
}

}  // namespace

DeviceArray from_dlpack(DLManagedTensor* tensor) {
  constexpr const char* op = "from_dlpack";
  if (tensor == nullptr) detail::throw_invalid(op, "null tensor");
  // Owns the tensor from here on: the deleter runs once, when the last view dies or, if
  // validation throws, during unwinding. (If this allocation fails, shared_ptr calls it too.)
  std::shared_ptr<DLManagedTensor> owner(tensor, [](DLManagedTensor* t) noexcept {
    if (t->deleter != nullptr) t->deleter(t);
  });
  const DLTensor& t = tensor->dl_tensor;
  check_dlpack_device(t.device, op);
  if (t.dtype.lanes != 1) {
    detail::throw_invalid(op, "vector dtypes are not supported (lanes {})", t.dtype.lanes);
  }
  const std::optional<DType> dtype = from_dl_dtype(t.dtype);
  if (!dtype) {
    detail::throw_invalid(op, "unsupported dtype (code {} ({}), bits {})",
                          static_cast<int>(t.dtype.code), dtype_code_name(t.dtype.code),
                          static_cast<int>(t.dtype.bits));
  }
  if (t.ndim < 0) detail::throw_invalid(op, "negative ndim {}", t.ndim);
  if (t.ndim > 0 && t.shape == nullptr) detail::throw_invalid(op, "null shape for ndim {}", t.ndim);
  const auto ndim = static_cast<std::size_t>(t.ndim);
  const Shape shape(t.shape, t.shape + ndim);
  if (std::int64_t bad = 0; has_negative_dimension(shape, bad)) {
    detail::throw_invalid(op, "negative dimension {} in shape {}", bad,
                          layout::format_tuple(shape));
  }
  const std::int64_t itemsize = dtype->itemsize();
  Layout layout =
      layout::make_layout(shape, itemsize, dlpack_byte_strides(t, itemsize, op), Order::C, op);
  const std::int64_t size = layout.size();
  if (t.data == nullptr && size > 0) {
    detail::throw_invalid(op, "null data pointer for a tensor of {} elements", size);
  }
  std::byte* const element0 = dlpack_element0(t, op);
  if (size > 0 && !is_aligned(element0, dtype->alignment())) {
    detail::throw_invalid(op,
                          "data pointer {} (data + byte_offset) is not aligned to {} bytes for "
                          "dtype {}",
                          pointer_text(element0), dtype->alignment(), dtype->name());
  }
  // No stride check: DLPack strides count elements, so every byte stride is a multiple of the
  // itemsize, which DType keeps a multiple of the alignment. Element 0 decides alone.
  if (size > 0) check_address_range(op, reinterpret_cast<std::uintptr_t>(element0), layout);
  std::shared_ptr<const void> keep_alive = std::move(owner);
  std::byte* view_element0 = element0;
  if (size > 0 && t.device.device_type == kDLCPU) {
    keep_alive = register_cpu_tensor(element0, layout, std::move(keep_alive), view_element0);
  }
  return view_foreign(context_for_device(t.device.device_id), view_element0, std::move(layout),
                      *dtype, std::move(keep_alive), Stream{});
}

}  // namespace devmem

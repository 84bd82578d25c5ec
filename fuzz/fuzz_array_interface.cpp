// Fuzz target: importing arbitrary CUDA Array Interface contents (as_device_array) on the host
// backend.
//
// Invariants: the import either throws InvalidArgument ("as_device_array: ...") or, for a stream
// to synchronise, BackendError; or it returns a view with exactly the interface's shape, byte
// strides (dense C strides when none are given), dtype and data pointer, whose own interface
// describes the same memory. When the described elements lie inside the one live device
// allocation, copying the view to the host gives the bytes a reference gather reads; when they
// do not, the host backend refuses the copy (BackendError) instead of touching the memory.
#include "fuzz/fuzz_input.hpp"

#include <devmem/devmem.hpp>
#include <devmem/interop.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using devmem_fuzz::FuzzInput;

constexpr const char* kTarget = "fuzz_array_interface";
constexpr std::int64_t kBufferBytes = 4096;

void require(bool condition, const std::string& what) {
  if (!condition) devmem_fuzz::invariant_failed(kTarget, what);
}

/// The one device allocation imported views may point into, filled with a known pattern.
struct Arena {
  devmem::DeviceArray device;
  std::vector<unsigned char> pattern;
  Arena() {
    devmem::select_backend("host");
    pattern.resize(kBufferBytes);
    for (std::size_t i = 0; i < pattern.size(); ++i) {
      pattern[i] = static_cast<unsigned char>(i * 7 + 3);
    }
    device = devmem::to_device(pattern);
  }
  [[nodiscard]] std::byte* base() const { return static_cast<std::byte*>(device.data()); }
};

Arena& arena() {
  static Arena* instance = new Arena;  // alive until exit: the fuzzer never returns normally
  return *instance;
}

const std::array<const char*, 12> kTypestrs{"<f8", "<f4",  "|b1", "|u1", "<i2", "<c16",
                                            "|V3", "|V24", ">f8", "<f3", "",    "=i8"};

devmem::ArrayInterface take_interface(FuzzInput& in, bool& derived_pointer) {
  devmem::ArrayInterface iface;
  iface.shape.resize(static_cast<std::size_t>(in.take_small(0, 4)));
  for (std::int64_t& d : iface.shape) d = in.take_int(-1, 6);
  if (in.take_bool()) {
    iface.strides.resize(static_cast<std::size_t>(in.take_small(0, 4)));
    if (in.take_bool()) iface.strides.resize(iface.shape.size());
    for (std::int64_t& s : iface.strides) s = in.take_int(-64, 64);
  }
  iface.typestr = in.take_bool() ? kTypestrs[static_cast<std::size_t>(in.take_small(0, 11))]
                                 : in.take_string(6);
  derived_pointer = false;
  switch (in.take_small(0, 3)) {
    case 0:
      iface.data.pointer = nullptr;
      break;
    case 1:
      iface.data.pointer = reinterpret_cast<void*>(in.take<std::uintptr_t>());
      break;
    default:
      derived_pointer = true;
      // Anywhere from 64 bytes before the arena to 64 bytes past it (integer arithmetic: a
      // pointer outside the arena must not be formed by pointer arithmetic).
      iface.data.pointer = reinterpret_cast<void*>(
          reinterpret_cast<std::uintptr_t>(arena().base()) - 64 +
          in.take<std::uint16_t>() % static_cast<std::uintptr_t>(kBufferBytes + 129));
      break;
  }
  iface.data.readonly = in.take_small(0, 7) == 0;
  iface.version = static_cast<int>(in.take_small(1, 4));
  if (in.take_small(0, 15) == 0) {
    iface.mask = std::make_shared<const devmem::ArrayInterface>();
  }
  switch (in.take_small(0, 5)) {
    case 0:
      iface.stream = 0;
      break;
    case 1:
      iface.stream = devmem::ArrayInterface::kLegacyDefaultStream;
      break;
    case 2:
      iface.stream = devmem::ArrayInterface::kPerThreadDefaultStream;
      break;
    case 3:
      iface.stream = in.take<std::intptr_t>();
      break;
    default:
      break;  // absent
  }
  return iface;
}

void check_view(const devmem::ArrayInterface& iface, const devmem::DeviceArray& view,
                bool derived_pointer) {
  require(view.shape() == iface.shape, "shape");
  const devmem::DType dtype = devmem::DType::from_typestr(iface.typestr);
  require(view.dtype().kind() == dtype.kind() && view.itemsize() == dtype.itemsize(), "dtype");
  const devmem::Strides expected_strides =
      iface.strides.empty()
          ? devmem::layout::dense_strides(iface.shape, dtype.itemsize(), devmem::Order::C)
          : iface.strides;
  require(view.strides() == expected_strides, "strides");
  if (view.size() == 0) return;
  require(view.data() == iface.data.pointer, "data pointer");
  const devmem::ArrayInterface again = view.array_interface();
  require(again.shape == iface.shape && again.data.pointer == iface.data.pointer,
          "the view's own interface describes the same memory");

  if (!derived_pointer || view.size() > 4096) return;
  // Where do the elements lie, relative to the arena?
  const devmem::Layout& l = view.layout();
  const devmem::Extent e = l.byte_extent();
  const auto element0 = reinterpret_cast<std::intptr_t>(iface.data.pointer);
  const auto arena_begin = reinterpret_cast<std::intptr_t>(arena().base());
  // Huge strides put the ends beyond int64: then they are certainly outside.
  std::int64_t first = 0;
  std::int64_t last = 0;
  const bool representable =
      !__builtin_add_overflow(element0 - arena_begin, e.begin - l.offset, &first) &&
      !__builtin_add_overflow(element0 - arena_begin, e.end - l.offset, &last);
  const bool inside = representable && first >= 0 && last <= kBufferBytes;
  try {
    const devmem::HostArray host = view.copy_to_host();
    require(inside, "a copy from outside the device allocation succeeded");
    // Reference gather: each element comes from its byte offset in the pattern.
    std::vector<std::int64_t> idx(l.shape.size(), 0);
    const auto* out = static_cast<const unsigned char*>(host.data());
    for (std::int64_t k = 0; k < view.size(); ++k) {
      std::int64_t byte = element0 - arena_begin;
      for (std::size_t d = 0; d < idx.size(); ++d) byte += idx[d] * l.strides[d];
      // The host copy is dense in the view's axis order, not necessarily C order.
      const std::int64_t host_byte = host.layout().offset_of(idx) - host.layout().offset;
      require(std::memcmp(out + host_byte, arena().pattern.data() + byte,
                          static_cast<std::size_t>(l.itemsize)) == 0,
              "copied element differs from the reference gather");
      for (std::size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < l.shape[d]) break;
        idx[d] = 0;
      }
    }
  } catch (const devmem::BackendError&) {
    require(!inside, "a copy from inside the device allocation failed");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  (void)arena();
  bool derived_pointer = false;
  const devmem::ArrayInterface iface = take_interface(in, derived_pointer);
  const bool sync = in.take_bool();
  devmem::DeviceArray view;
  try {
    view = devmem::as_device_array(iface, {}, sync);
  } catch (const devmem::InvalidArgument& e) {
    require(std::string(e.what()).starts_with("as_device_array: "), "message prefix");
    return 0;
  } catch (const devmem::BackendError&) {
    require(sync && iface.stream.has_value(), "BackendError without a stream to synchronise");
    return 0;
  }
  check_view(iface, view, derived_pointer);
  return 0;
}

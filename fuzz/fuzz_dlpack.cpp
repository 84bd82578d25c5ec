// Fuzz target: importing arbitrary DLPack tensors (from_dlpack) on the host backend.
//
// Invariants: the import either throws InvalidArgument ("from_dlpack: ...") or returns a view
// with the tensor's shape, its element strides converted to bytes (dense C strides when null) and
// data + byte_offset as element 0; and in every case the tensor's deleter runs exactly once: at
// once on a rejection, when the last view goes away otherwise.
#include "fuzz/fuzz_input.hpp"

#include <devmem/devmem.hpp>
#include <devmem/interop.hpp>

#include <dlpack/dlpack.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using devmem_fuzz::FuzzInput;

constexpr const char* kTarget = "fuzz_dlpack";
constexpr std::int64_t kBufferBytes = 4096;

void require(bool condition, const std::string& what) {
  if (!condition) devmem_fuzz::invariant_failed(kTarget, what);
}

struct Arena {
  devmem::DeviceArray device;
  Arena() {
    devmem::select_backend("host");
    device = devmem::device_array<std::uint8_t>(devmem::Shape{kBufferBytes});
  }
};

Arena& arena() {
  static Arena* instance = new Arena;  // alive until exit: the fuzzer never returns normally
  return *instance;
}

/// A tensor of "another library" owning its shape and strides storage.
struct ForeignTensor {
  DLManagedTensor managed{};
  std::array<std::int64_t, 8> shape{};
  std::array<std::int64_t, 8> strides{};
  int deleter_calls = 0;
};

const std::array<DLDeviceType, 6> kDeviceTypes{kDLCPU,  kDLCUDA,   kDLCUDAHost,
                                               kDLROCM, kDLVulkan, kDLCUDAManaged};
const std::array<DLDataType, 10> kDtypes{
    DLDataType{kDLFloat, 64, 1}, DLDataType{kDLFloat, 32, 1},    DLDataType{kDLInt, 8, 1},
    DLDataType{kDLUInt, 16, 1},  DLDataType{kDLComplex, 128, 1}, DLDataType{kDLBfloat, 16, 1},
    DLDataType{kDLFloat, 12, 1}, DLDataType{kDLInt, 32, 4},      DLDataType{kDLOpaqueHandle, 64, 1},
    DLDataType{kDLUInt, 1, 1}};

void fill_tensor(FuzzInput& in, ForeignTensor& holder) {
  DLTensor& t = holder.managed.dl_tensor;
  t.device.device_type =
      in.take_bool() ? kDeviceTypes[static_cast<std::size_t>(in.take_small(0, 5))]
                     : static_cast<DLDeviceType>(in.take_small(0, 15));  // in the enum's range
  t.device.device_id = static_cast<std::int32_t>(in.take_int(-1, 2));
  if (in.take_bool()) {
    t.dtype = kDtypes[static_cast<std::size_t>(in.take_small(0, 9))];
  } else {
    t.dtype =
        DLDataType{in.take<std::uint8_t>(), in.take<std::uint8_t>(), in.take<std::uint16_t>()};
  }
  // ndim never exceeds the storage unless the shape is null (then devmem must not read it).
  const bool null_shape = in.take_small(0, 15) == 0;
  t.ndim = null_shape ? static_cast<std::int32_t>(in.take_int(-2, 8))
                      : static_cast<std::int32_t>(in.take_small(-1, 4));
  for (std::int64_t& d : holder.shape) d = in.take_int(-1, 6);
  t.shape = null_shape ? nullptr : holder.shape.data();
  if (in.take_bool()) {
    for (std::int64_t& s : holder.strides) s = in.take_int(-8, 8);
    t.strides = holder.strides.data();
  } else {
    t.strides = nullptr;
  }
  switch (in.take_small(0, 3)) {
    case 0:
      t.data = nullptr;
      break;
    case 1:
      t.data = reinterpret_cast<void*>(in.take<std::uintptr_t>());
      break;
    default:
      t.data = static_cast<std::byte*>(arena().device.data()) + in.take_small(0, 64);
      break;
  }
  t.byte_offset =
      in.take_bool() ? static_cast<std::uint64_t>(in.take_small(0, 64)) : in.take<std::uint64_t>();
  holder.managed.manager_ctx = &holder;
  holder.managed.deleter = [](DLManagedTensor* self) {
    ++static_cast<ForeignTensor*>(self->manager_ctx)->deleter_calls;
  };
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzInput in(data, size);
  (void)arena();
  ForeignTensor holder;
  fill_tensor(in, holder);
  const DLTensor t = holder.managed.dl_tensor;  // devmem may not change it, but compare a copy
  try {
    devmem::DeviceArray view = devmem::from_dlpack(&holder.managed);
    require(holder.deleter_calls == 0, "deleter ran while a view is alive");
    require(view.ndim() == t.ndim, "ndim");
    for (std::size_t k = 0; k < static_cast<std::size_t>(t.ndim); ++k) {
      require(view.shape()[k] == t.shape[k], "shape");
      if (t.strides != nullptr) {
        require(view.strides()[k] == t.strides[k] * view.itemsize(), "byte strides");
      }
    }
    if (t.strides == nullptr) {
      require(view.strides() ==
                  devmem::layout::dense_strides(view.shape(), view.itemsize(), devmem::Order::C),
              "null strides mean C-contiguous");
    }
    if (view.size() > 0) {
      require(reinterpret_cast<std::uintptr_t>(view.data()) ==
                  reinterpret_cast<std::uintptr_t>(t.data) + t.byte_offset,
              "element 0 is data + byte_offset");
    }
    const devmem::DeviceArray copy_of_view = view.transpose();
    view = devmem::DeviceArray();
    require(holder.deleter_calls == 0, "deleter ran while a second view is alive");
    (void)copy_of_view;
  } catch (const devmem::InvalidArgument& e) {
    require(std::string(e.what()).starts_with("from_dlpack: "), "message prefix");
  }
  require(holder.deleter_calls == 1,
          "the deleter ran " + std::to_string(holder.deleter_calls) + " times instead of once");
  return 0;
}

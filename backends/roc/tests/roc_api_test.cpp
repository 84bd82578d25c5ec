// roc_api_test: how the ROC call table (backends/roc/hip_api.hpp) reads the HIP runtime's answers
// that differ between ROCm versions, checked against both answers whatever HIP it is compiled
// against (Debian's HIP 5.2 in the `roc` preset, HIP-CPU in `roc-hipcpu`). No device needed.
#include <catch2/catch.hpp>

#include "backends/roc/hip_api.hpp"

#include <vector>

namespace {

using devmem::roc::HipApi;

/// hipPointerAttribute_t of ROCm 5 (memoryType; unknown memory fails with hipErrorInvalidValue).
struct Rocm5Attributes {
  int memoryType = 0;
  int device = 0;
};
/// hipPointerAttribute_t of ROCm >= 6 (type; unknown memory succeeds as type 0, Unregistered).
struct Rocm6Attributes {
  int type = 0;
  int device = 0;
};

}  // namespace

TEST_CASE("roc: ROCm 5 reports pageable memory as hipErrorInvalidValue", "[roc][pointer]") {
  bool pageable = false;
  CHECK(HipApi::pageableAnswer(hipErrorInvalidValue, Rocm5Attributes{}, &pageable));
  CHECK(pageable);
  // A memory type is page-locked, device or managed memory, even type 0 (Host in ROCm 5).
  CHECK(HipApi::pageableAnswer(hipSuccess, Rocm5Attributes{0, 0}, &pageable));
  CHECK_FALSE(pageable);
  CHECK(HipApi::pageableAnswer(hipSuccess, Rocm5Attributes{1, 0}, &pageable));
  CHECK_FALSE(pageable);
}

TEST_CASE("roc: ROCm 6 reports pageable memory as success with type Unregistered",
          "[roc][pointer]") {
  bool pageable = false;
  CHECK(HipApi::pageableAnswer(hipSuccess, Rocm6Attributes{0, -1}, &pageable));
  CHECK(pageable);  // before the fix this read "not pageable" and large copies were not staged
  for (const int type : {1, 2, 3, 10, 11}) {  // Host, Device, Managed, Array, Unified
    CHECK(HipApi::pageableAnswer(hipSuccess, Rocm6Attributes{type, 0}, &pageable));
    CHECK_FALSE(pageable);
  }
  // ROCm 6 still answers hipErrorInvalidValue for a null pointer: "pageable" is harmless there
  // (the copy itself fails), and matches ROCm 5.
  CHECK(HipApi::pageableAnswer(hipErrorInvalidValue, Rocm6Attributes{}, &pageable));
  CHECK(pageable);
}

TEST_CASE("roc: other failures of hipPointerGetAttributes are failures", "[roc][pointer]") {
  bool pageable = true;
  CHECK_FALSE(HipApi::pageableAnswer(hipErrorNoDevice, Rocm6Attributes{}, &pageable));
  CHECK_FALSE(pageable);
  CHECK_FALSE(HipApi::pageableAnswer(hipErrorDeinitialized, Rocm5Attributes{}, &pageable));
}

TEST_CASE("roc: isPageable on this HIP", "[roc][pointer]") {
  int count = 0;
  if (hipGetDeviceCount(&count) != hipSuccess || count == 0) {
    static_cast<void>(hipGetLastError());
    SUCCEED("no device: the runtime cannot be asked");
    return;
  }
  std::vector<char> pageable_memory(4096);
  bool pageable = false;
  const auto status = HipApi::isPageable(pageable_memory.data(), &pageable);
  CHECK(status.code == hipSuccess);
  CHECK(pageable);
  CHECK(hipGetLastError() == hipSuccess);  // the answer is not left behind as an error
  void* locked = nullptr;
  REQUIRE(hipHostMalloc(&locked, 4096, 0) == hipSuccess);
  CHECK(HipApi::isPageable(locked, &pageable).code == hipSuccess);
  CHECK_FALSE(pageable);
  CHECK(hipHostFree(locked) == hipSuccess);
}

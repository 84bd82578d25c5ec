// Helpers shared by the interop tests (test_interop_cai.cpp, test_interop_dlpack.cpp): a byte
// pointer, the check that a view describes exactly an array's memory, and the layouts every round
// trip is tested with. A header of its own so that the two test files do not each carry a copy.
#pragma once

#include "support.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace conformance {

inline std::byte* byte_ptr(void* p) {
  return static_cast<std::byte*>(p);
}

// Checks that `view` describes exactly the memory of `original`.
inline void check_same_array(const devmem::DeviceArray& view, const devmem::DeviceArray& original) {
  CHECK(view.shape() == original.shape());
  CHECK(view.strides() == original.strides());
  CHECK(view.dtype() == original.dtype());
  // An array without elements has no data pointer in either protocol (the interface says 0).
  CHECK(view.data() == (original.size() == 0 ? nullptr : original.data()));
  CHECK(view.alloc_size() == original.alloc_size());
}

// The layouts every round trip is tested with: a name and a view of a 4x6 iota array `base`.
inline std::vector<std::pair<std::string, devmem::DeviceArray>> layouts_of(
    const devmem::DeviceArray& base) {
  return {
      {"C-contiguous", base},
      {"F-contiguous", base.T()},
      {"sliced rows", base.slice(0, 1, 3)},
      {"sliced columns with a step", base.slice(1, 1, std::nullopt, 2)},
      {"transposed slice", base.slice({Slice{std::nullopt, std::nullopt, 2}, Slice{1, 5}}).T()},
      {"negative strides",
       base.slice(0, std::nullopt, std::nullopt, -1).slice(1, std::nullopt, std::nullopt, -2)},
      {"row", base[2]},
      {"0-d element", base[1][3]},
      {"empty slice", base.slice(0, 2, 2)},
      {"size-1 axis", base.slice(0, 3, 4)},
  };
}

}  // namespace conformance

// Kernels and constants that the kernel tests share (test_kernels.cpp, test_kernels_launch.cpp and
// test_kernels_simulator.cpp): the constant-memory lookup table, fill_iota and blocks_for. Their
// own header so that no file carries a copy. Everything is in an unnamed namespace, as it was in
// each test file: every translation unit that includes this header gets its own kernels and its
// own table.
#pragma once

#include "support.hpp"

#include <devmem/kernel.hpp>

#include <cstdint>

namespace {

constexpr int kLutSize = 16;

// Maybe unused: test_kernels_launch.cpp reads it only in its GPU-only tests.
[[maybe_unused]] DEVMEM_CONSTANT_ARRAY(conformance_lut, float, kLutSize);

DEVMEM_KERNEL void fill_iota(devmem::ArrayView<int, 1> out, int start) {
  const std::int64_t i = devmem::global_id();
  if (i < out.shape(0)) out[i] = start + static_cast<int>(i);
}

/// Blocks of `block` threads that cover `n` elements (inline: not every includer uses it).
inline unsigned blocks_for(std::int64_t n, unsigned block) {
  return static_cast<unsigned>((n + block - 1) / block);
}

}  // namespace

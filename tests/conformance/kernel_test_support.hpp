// Kernels and constants that the kernel tests share (test_kernels.cpp and
// test_kernels_simulator.cpp): the constant-memory lookup table and fill_iota. Their own header so
// that neither file carries a copy. Everything is in an unnamed namespace, as it was in each test
// file: every translation unit that includes this header gets its own kernels and its own table.
#pragma once

#include "support.hpp"

#include <devmem/kernel.hpp>

#include <cstdint>

namespace {

constexpr int kLutSize = 16;

DEVMEM_CONSTANT_ARRAY(conformance_lut, float, kLutSize);

DEVMEM_KERNEL void fill_iota(devmem::ArrayView<int, 1> out, int start) {
  const std::int64_t i = devmem::global_id();
  if (i < out.shape(0)) out[i] = start + static_cast<int>(i);
}

}  // namespace

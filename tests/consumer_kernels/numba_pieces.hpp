// The consumer's wrapper of numba_pieces.cu, callable from code the ordinary C++ compiler builds.
#pragma once

#include <devmem/devmem.hpp>

#include <cstdint>

/// Draws numbers in `blocks` blocks of 64 threads, one generator per thread seeded from `seed`,
/// and returns their sum (devmem::reduce).
double draw_and_sum(std::int64_t blocks, std::uint64_t seed);

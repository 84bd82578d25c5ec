// Copy plans (layout::plan_copy): a strided copy between two layouts of one shape cut into 2-d
// blocks of rows that memcpy, cudaMemcpy2D or a strided-copy kernel can each move in one call, and
// the host executor of such a plan. A file of its own beside layout.cpp, whose layout math it uses
// through the public layout.hpp.
#include <devmem/layout.hpp>

#include "core/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace devmem::layout {

int64_t CopyPlan::block_count() const noexcept {
  if (empty()) return 0;
  int64_t n = 1;
  for (const int64_t d : outer_shape) n *= d;
  return n;
}

namespace {

using std::int64_t;
using std::size_t;

struct CopyAxis {
  int64_t n;
  int64_t src;
  int64_t dst;
};

// a * b, or false when that overflows int64.
[[nodiscard]] bool mul(int64_t a, int64_t b, int64_t& out) noexcept {
  return !__builtin_mul_overflow(a, b, &out);
}

}  // namespace

CopyPlan plan_copy(std::span<const int64_t> shape, std::span<const int64_t> src_strides,
                   std::span<const int64_t> dst_strides, int64_t itemsize) {
  if (src_strides.size() != shape.size() || dst_strides.size() != shape.size()) {
    detail::throw_invalid("copy",
                          "shape {} has {} dimensions but {} source and {} destination strides "
                          "were given",
                          format_tuple(shape), shape.size(), src_strides.size(),
                          dst_strides.size());
  }
  if (itemsize <= 0) detail::throw_invalid("copy", "itemsize must be positive, got {}", itemsize);
  CopyPlan plan;
  if (element_count(shape, "copy") == 0) return plan;

  // Size-1 axes address nothing; axes where both sides run backwards are flipped so that rows are
  // copied forwards, moving element 0 of each side to the other end of that axis.
  std::vector<CopyAxis> axes;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 1) continue;
    if (dst_strides[k] == 0) {
      detail::throw_invalid("copy",
                            "destination has a zero stride on axis {} of length {} (one element "
                            "would be written {} times)",
                            k, shape[k], shape[k]);
    }
    CopyAxis a{shape[k], src_strides[k], dst_strides[k]};
    if (a.src < 0 && a.dst < 0) {
      plan.src_offset += a.src * (a.n - 1);
      plan.dst_offset += a.dst * (a.n - 1);
      a.src = -a.src;
      a.dst = -a.dst;
    }
    axes.push_back(a);
  }
  // Outermost first, so that the innermost axis is the one that varies fastest in the destination.
  std::stable_sort(axes.begin(), axes.end(), [](const CopyAxis& a, const CopyAxis& b) {
    return std::abs(a.dst) > std::abs(b.dst);
  });
  // Merge an axis into the one outside it when it continues it on both sides.
  std::vector<CopyAxis> merged;
  for (const CopyAxis& a : axes) {
    if (!merged.empty()) {
      CopyAxis& outer = merged.back();
      // Checked: a.src * a.n can pass int64 although the layout's extent, a.src * (a.n - 1),
      // does not (found by fuzz/fuzz_layout); such an axis continues nothing.
      std::int64_t src_run = 0;
      std::int64_t dst_run = 0;
      if (mul(a.src, a.n, src_run) && mul(a.dst, a.n, dst_run) && outer.src == src_run &&
          outer.dst == dst_run) {
        outer = CopyAxis{outer.n * a.n, a.src, a.dst};
        continue;
      }
    }
    merged.push_back(a);
  }

  // Rows: the contiguous innermost axis, else single elements. Height: the next axis out when
  // both of its strides are valid pitches (rows of a block must not overlap or run backwards).
  plan.width = itemsize;
  plan.height = 1;
  if (!merged.empty() && merged.back().src == itemsize && merged.back().dst == itemsize) {
    plan.width = merged.back().n * itemsize;
    merged.pop_back();
  }
  if (!merged.empty() && merged.back().src >= plan.width && merged.back().dst >= plan.width) {
    plan.height = merged.back().n;
    plan.src_pitch = merged.back().src;
    plan.dst_pitch = merged.back().dst;
    merged.pop_back();
  } else {
    plan.src_pitch = plan.width;
    plan.dst_pitch = plan.width;
  }
  for (const CopyAxis& a : merged) {
    plan.outer_shape.push_back(a.n);
    plan.outer_src_strides.push_back(a.src);
    plan.outer_dst_strides.push_back(a.dst);
  }
  return plan;
}

namespace {

/// Every row of every block as a memcpy of exactly Width bytes, which the compiler turns into a
/// load and a store: rows of one element (a reversed or transposed innermost axis) copied by a
/// memcpy of a run-time size cost a call each, about ten times a plain loop over the same layout
/// (`devmem bench`'s strided rows on the host backend).
/// Rows of one element each (height 1) take the innermost outer axis as their rows, so that the
/// tight loop runs over it rather than for_each_block's index arithmetic (host memory: a row pitch
/// may be negative or smaller than a row here, unlike a GPU's 2-D copy).
template <size_t Width>
void copy_fixed_width_rows(const CopyPlan& plan, std::byte* d0, const std::byte* s0) {
  if (plan.height == 1 && !plan.outer_shape.empty()) {
    CopyPlan rows = plan;
    rows.height = rows.outer_shape.back();
    rows.src_pitch = rows.outer_src_strides.back();
    rows.dst_pitch = rows.outer_dst_strides.back();
    rows.outer_shape.pop_back();
    rows.outer_src_strides.pop_back();
    rows.outer_dst_strides.pop_back();
    return copy_fixed_width_rows<Width>(rows, d0, s0);
  }
  plan.for_each_block([&](int64_t s, int64_t d) {
    const std::byte* from = s0 + s;
    std::byte* to = d0 + d;
    for (int64_t r = 0; r < plan.height; ++r, from += plan.src_pitch, to += plan.dst_pitch) {
      std::memcpy(to, from, Width);
    }
  });
}

}  // namespace

void copy_host_strided(const CopyPlan& plan, void* dst, const void* src) noexcept {
  auto* const d0 = static_cast<std::byte*>(dst);
  const auto* const s0 = static_cast<const std::byte*>(src);
  const auto width = static_cast<size_t>(plan.width);
  // Rows that follow each other without gaps on both sides are one memcpy.
  const bool packed =
      plan.height == 1 || (plan.src_pitch == plan.width && plan.dst_pitch == plan.width);
  if (plan.height == 1 || !packed) {
    switch (width) {
      case 1:
        return copy_fixed_width_rows<1>(plan, d0, s0);
      case 2:
        return copy_fixed_width_rows<2>(plan, d0, s0);
      case 4:
        return copy_fixed_width_rows<4>(plan, d0, s0);
      case 8:
        return copy_fixed_width_rows<8>(plan, d0, s0);
      case 16:
        return copy_fixed_width_rows<16>(plan, d0, s0);
      default:
        break;
    }
  }
  plan.for_each_block([&](int64_t s, int64_t d) {
    if (packed) {
      std::memcpy(d0 + d, s0 + s, width * static_cast<size_t>(plan.height));
      return;
    }
    for (int64_t r = 0; r < plan.height; ++r) {
      std::memcpy(d0 + d + r * plan.dst_pitch, s0 + s + r * plan.src_pitch, width);
    }
  });
}

}  // namespace devmem::layout

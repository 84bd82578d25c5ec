// The geometry of a strided copy's plan as the bounded path (strided_copies.hpp) sees it: its
// axes, the bytes each side spans, and its cut into chunks whose temporaries fit a bounded buffer
// (review 2, N7). No vendor calls: apart from the copies so that it can be tested on its own. Not
// installed.
#pragma once

#include <devmem/layout.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

namespace devmem::gpu_runtime {

/// One axis of a plan: `n` steps of `src` and `dst` bytes.
struct PlanAxis {
  std::int64_t n = 1;
  std::int64_t src = 0;
  std::int64_t dst = 0;
};

/// The plan's axes, outermost first: the outer axes, the rows of a block, then the bytes of a
/// row (always last, with strides 1).
inline std::vector<PlanAxis> plan_axes(const layout::CopyPlan& plan) {
  std::vector<PlanAxis> axes;
  axes.reserve(plan.outer_shape.size() + 2);
  for (std::size_t k = 0; k < plan.outer_shape.size(); ++k) {
    axes.push_back(
        PlanAxis{plan.outer_shape[k], plan.outer_src_strides[k], plan.outer_dst_strides[k]});
  }
  axes.push_back(PlanAxis{plan.height, plan.src_pitch, plan.dst_pitch});
  axes.push_back(PlanAxis{plan.width, 1, 1});
  return axes;
}

/// The bytes one side of `plan` spans, relative to its element (0, ..., 0).
inline Extent side_extent(const layout::CopyPlan& plan, bool dst_side) {
  Extent extent{dst_side ? plan.dst_offset : plan.src_offset, 0};
  extent.end = extent.begin + 1;
  for (const PlanAxis& axis : plan_axes(plan)) {
    const std::int64_t span = (axis.n - 1) * (dst_side ? axis.dst : axis.src);
    (span < 0 ? extent.begin : extent.end) += span;
  }
  return extent;
}

/// A plan cut into chunks, each a plan of its own (a box of the plan's axes, with offsets
/// relative to the whole plan's element (0, ..., 0) on each side), in one side's axis order, each
/// measuring at most `limit` bytes:
/// - Order::Destination (the plan's own order, outermost destination stride first): a chunk
///   measures its payload, the bytes it moves. A packed temporary of a chunk holds its payload;
///   where the destination has no gaps, a chunk's destination extent is its payload, contiguous.
/// - Order::Source (outermost source stride first): a chunk measures its source extent, so that
///   the extent can be moved "as it is" through a temporary of `limit` bytes; where the source
///   has no gaps, each chunk's source extent is one contiguous piece of the source.
/// The cut is along the outermost axis that must be cut, in units of whole inner boxes (blocks,
/// then rows): the axes outside it are stepped one index at a time, the axes inside it are
/// whole. A block larger than `limit` is cut into runs of whole rows, and a row (element) larger
/// than `limit` into runs of its bytes, so no temporary is ever larger than `limit` whatever the
/// element size: the answer to "an element or a block larger than a chunk" is smaller pieces, not
/// a larger buffer. Chunks other than each run's last one measure more than `limit` minus one
/// inner box, so a copy of P bytes has about P / limit chunks, at most about 4 P / limit.
class PlanChunks {
 public:
  enum class Order { Destination, Source };

  PlanChunks(const layout::CopyPlan& plan, Order order, std::int64_t limit)
      : source_order_(order == Order::Source),
        base_src_(plan.src_offset),
        base_dst_(plan.dst_offset) {
    std::vector<PlanAxis> all = plan_axes(plan);
    const PlanAxis bytes = all.back();
    all.pop_back();
    for (const PlanAxis& axis : all) {
      if (axis.n > 1) axes_.push_back(axis);  // a single step addresses nothing
    }
    if (source_order_) {
      std::stable_sort(axes_.begin(), axes_.end(), [](const PlanAxis& a, const PlanAxis& b) {
        return std::abs(a.src) > std::abs(b.src);
      });
    }
    axes_.push_back(bytes);  // always innermost: the kernel and the host copy rows of bytes
    limit = std::max<std::int64_t>(limit, 1);
    // inner[k]: what the axes inside axis k measure, all of them whole.
    const std::size_t rank = axes_.size();
    std::vector<std::int64_t> inner(rank, 1);
    for (std::size_t k = rank - 1; k > 0; --k) inner[k - 1] = grow(inner[k], axes_[k], axes_[k].n);
    // The outermost axis whose inner box fits: the cut is along it (the bytes axis at worst,
    // whose inner box is a single byte).
    split_ = 0;
    while (inner[split_] > limit) ++split_;
    const PlanAxis& cut = axes_[split_];
    const std::int64_t stride = std::abs(source_order_ ? cut.src : cut.dst);
    if (!source_order_) {
      step_ = std::min(cut.n, limit / inner[split_]);
    } else {
      step_ = stride == 0 ? cut.n : std::min(cut.n, (limit - inner[split_]) / stride + 1);
    }
    largest_ = grow(inner[split_], cut, step_);
    count_ = (cut.n + step_ - 1) / step_;
    for (std::size_t k = 0; k < split_; ++k) count_ *= axes_[k].n;
    index_.assign(split_, 0);
  }

  /// The number of chunks.
  [[nodiscard]] std::int64_t count() const noexcept { return count_; }
  /// What the largest chunk measures (the first one is as large as any): at most `limit`.
  [[nodiscard]] std::int64_t largest() const noexcept { return largest_; }

  /// The whole plan as one plan in this order (its axes reordered, nothing cut).
  [[nodiscard]] layout::CopyPlan whole() const { return to_plan(axes_, base_src_, base_dst_); }

  /// The next chunk, or nothing after the last.
  std::optional<layout::CopyPlan> next() {
    if (done_) return std::nullopt;
    std::int64_t src = base_src_;
    std::int64_t dst = base_dst_;
    for (std::size_t k = 0; k < split_; ++k) {
      src += index_[k] * axes_[k].src;
      dst += index_[k] * axes_[k].dst;
    }
    const PlanAxis& cut = axes_[split_];
    src += position_ * cut.src;
    dst += position_ * cut.dst;
    std::vector<PlanAxis> box;
    box.reserve(axes_.size() - split_);
    box.push_back(PlanAxis{std::min(step_, cut.n - position_), cut.src, cut.dst});
    box.insert(box.end(), axes_.begin() + static_cast<std::ptrdiff_t>(split_) + 1, axes_.end());
    advance();
    return to_plan(box, src, dst);
  }

 private:
  /// What a box measures once axis `axis`, `n` steps of it, is added outside `inner`.
  [[nodiscard]] std::int64_t grow(std::int64_t inner, const PlanAxis& axis, std::int64_t n) const {
    if (!source_order_) return inner * n;
    return inner + (n - 1) * std::abs(axis.src);
  }

  void advance() {
    position_ += step_;
    if (position_ < axes_[split_].n) return;
    position_ = 0;
    for (std::size_t k = split_; k-- > 0;) {
      if (++index_[k] < axes_[k].n) return;
      index_[k] = 0;
    }
    done_ = true;
  }

  /// A plan of `axes` (outermost first, the bytes of a row last): the one before the last is its
  /// rows, the others its outer axes. A source-ordered plan may have rows whose source pitch is
  /// below the width or negative: the host copy and the kernel take any strides.
  static layout::CopyPlan to_plan(const std::vector<PlanAxis>& axes, std::int64_t src,
                                  std::int64_t dst) {
    layout::CopyPlan plan;
    plan.src_offset = src;
    plan.dst_offset = dst;
    plan.width = axes.back().n;
    plan.height = 1;
    plan.src_pitch = plan.width;
    plan.dst_pitch = plan.width;
    std::size_t outer = axes.size() - 1;
    if (axes.size() >= 2) {
      const PlanAxis& rows = axes[axes.size() - 2];
      plan.height = rows.n;
      plan.src_pitch = rows.src;
      plan.dst_pitch = rows.dst;
      outer = axes.size() - 2;
    }
    for (std::size_t k = 0; k < outer; ++k) {
      plan.outer_shape.push_back(axes[k].n);
      plan.outer_src_strides.push_back(axes[k].src);
      plan.outer_dst_strides.push_back(axes[k].dst);
    }
    return plan;
  }

  bool source_order_;
  std::int64_t base_src_;
  std::int64_t base_dst_;
  std::vector<PlanAxis> axes_;  // outermost first in the chunks' order; the row's bytes last
  std::size_t split_ = 0;       // the axis the chunks cut
  std::int64_t step_ = 1;       // its steps per chunk
  std::int64_t largest_ = 0;
  std::int64_t count_ = 0;
  std::vector<std::int64_t> index_;  // the axes outside the cut: the next chunk's indices
  std::int64_t position_ = 0;        // the next chunk's first step along the cut
  bool done_ = false;
};

}  // namespace devmem::gpu_runtime

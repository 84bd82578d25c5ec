// devmem::mpi's barrier, reduce, gather, gatherv, scatter, scatterv, scan and exscan: the
// descriptor agreement of mpi/collective_agreement.hpp, then the per-rank blocks move with
// run_blocks (chunked, staged or device-direct), the v-forms with run_whole (one chunk).
#include "collective_agreement.hpp"

#include <devmem/layout.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace devmem::mpi {

using namespace detail;

namespace {

// The block's row bytes (the whole block for a 0-d block).
std::int64_t row_bytes_of(std::span<const std::int64_t> block, std::int64_t itemsize) {
  return row_elements(block) * itemsize;
}

std::string expected_text(const DType& dtype, std::span<const std::int64_t> shape) {
  return fmt::format("{} {}", dtype.name(), layout::format_tuple(shape));
}

// A descriptor of `block` for `array`'s transport, with the root and reduction.
Descriptor describe_for(const DeviceArray& array, const DType& dtype,
                        std::span<const std::int64_t> block, int root, std::int32_t reduction,
                        Path* path) {
  Descriptor mine{.wire = describe_block(dtype, block), .root = root, .reduction = reduction};
  const Transport transport = transport_for(array);
  *path = blocking_path(array, transport);
  mine.wire.chunk_rows = preferred_block_rows(block, dtype.itemsize(), transport);
  mine.blocking = *path == Path::DirectBlocking ? 1 : 0;
  return mine;
}

// Checks `output` against the shape and dtype expected of it (receiving side).
void check_output(Descriptor& mine, const char* what, const DeviceArray& output, const DType& dtype,
                  std::span<const std::int64_t> expected, const char* why) {
  if (output.dtype() != dtype || !std::ranges::equal(output.shape(), expected)) {
    fail(mine, fmt::format("the {} is {}, expected {}{}", what, shape_text(output),
                           expected_text(dtype, expected), why));
  } else if (const auto problem = destination_problem(output)) {
    fail(mine, *problem);
  }
}

void check_root(Descriptor& mine, int root, int size) {
  if (root < 0 || root >= size) {
    fail(mine, fmt::format("root {} is not in the communicator (size {})", root, size));
  }
}

// The element-wise reductions reduce, scan and exscan.
enum class Prefix { None, Inclusive, Exclusive };

void reduction(const char* name, const DeviceArray& input, const DeviceArray& output, ReduceOp op,
               int root, Prefix prefix, MPI_Comm comm) {
  const auto [rank, size] = rank_and_size(name, comm);
  const bool rooted = prefix == Prefix::None;
  const bool writes = rooted ? rank == root : !(prefix == Prefix::Exclusive && rank == 0);
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, input.dtype(), input.shape(), rooted ? root : -1,
                                 static_cast<std::int32_t>(op), &path);
  if (rooted) check_root(mine, root, size);
  if (const auto problem = reduce_problem(input.dtype(), op)) fail(mine, *problem);
  if (writes || (prefix == Prefix::Exclusive && rank == 0 && output.size() > 0)) {
    check_output(mine, "output", output, input.dtype(), input.shape(), " (the input's)");
  }
  const Agreement agreement = agree(name, comm, mine, rooted ? root : 0);
  const MPI_Datatype type = reduce_type(input.dtype(), op).value_or(MPI_DATATYPE_NULL);
  const MPI_Op mpi_reduction = mpi_op(op);
  const std::int64_t per_row = row_elements(input.shape());
  const Side send{.array = input, .active = true};
  const Side recv{.array = rooted || writes ? output : input,
                  .active = writes,
                  .discard = prefix == Prefix::Exclusive && rank == 0};
  run_blocks(name, path, agreement, input.shape(), send, recv,
             [&](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
               const int count = checked_int(rows * per_row, "a chunk's element count");
               switch (prefix) {
                 case Prefix::None:
                   return request == nullptr
                              ? MPI_Reduce(in, out, count, type, mpi_reduction, root, comm)
                              : MPI_Ireduce(in, out, count, type, mpi_reduction, root, comm,
                                            request);
                 case Prefix::Inclusive:
                   return request == nullptr
                              ? MPI_Scan(in, out, count, type, mpi_reduction, comm)
                              : MPI_Iscan(in, out, count, type, mpi_reduction, comm, request);
                 case Prefix::Exclusive:
                   return request == nullptr
                              ? MPI_Exscan(in, out, count, type, mpi_reduction, comm)
                              : MPI_Iexscan(in, out, count, type, mpi_reduction, comm, request);
               }
               return MPI_ERR_OTHER;
             });
}

std::int64_t sum_of(std::span<const std::int64_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
}

// Byte counts and displacements of `counts` rows of `row_bytes` each, as MPI's ints.
std::pair<std::vector<int>, std::vector<int>> byte_layout(std::span<const std::int64_t> counts,
                                                          std::int64_t row_bytes) {
  std::vector<int> bytes;
  std::vector<int> displacements;
  std::int64_t offset = 0;
  for (const std::int64_t c : counts) {
    bytes.push_back(checked_int(c * row_bytes, "a rank's byte count"));
    displacements.push_back(checked_int(offset, "a rank's byte displacement"));
    offset += c * row_bytes;
  }
  return {bytes, displacements};
}

// The v-form's trailing shape: `array`'s shape without its first axis (empty for a 0-d array).
Shape trailing(const DeviceArray& array) {
  if (array.ndim() == 0) return {};
  return {array.shape().begin() + 1, array.shape().end()};
}

}  // namespace

void barrier(MPI_Comm comm) {
  // The descriptor exchange is an all-to-all exchange: once it completes on a rank, every rank
  // has called barrier (and it checks that every rank did).
  Descriptor mine;
  static_cast<void>(agree("mpi::barrier", comm, mine, 0));
}

void reduce(const DeviceArray& input, const DeviceArray& output, ReduceOp op, int root,
            MPI_Comm comm) {
  reduction("mpi::reduce", input, output, op, root, Prefix::None, comm);
}

void scan(const DeviceArray& input, const DeviceArray& output, ReduceOp op, MPI_Comm comm) {
  reduction("mpi::scan", input, output, op, -1, Prefix::Inclusive, comm);
}

void exscan(const DeviceArray& input, const DeviceArray& output, ReduceOp op, MPI_Comm comm) {
  reduction("mpi::exscan", input, output, op, -1, Prefix::Exclusive, comm);
}

void gather(const DeviceArray& input, const DeviceArray& output, int root, MPI_Comm comm) {
  const char* name = "mpi::gather";
  const auto [rank, size] = rank_and_size(name, comm);
  const bool is_root = rank == root;
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, input.dtype(), input.shape(), root, -1, &path);
  check_root(mine, root, size);
  Shape expected = input.shape();
  expected.insert(expected.begin(), size);
  if (is_root)
    check_output(mine, "output", output, input.dtype(), expected, " (ranks, *input.shape)");
  const Agreement agreement = agree(name, comm, mine, root);
  const std::int64_t row_bytes = row_bytes_of(input.shape(), input.itemsize());
  run_blocks(name, path, agreement, input.shape(), Side{.array = input, .active = true},
             Side{.array = is_root ? output : input, .leading = true, .active = is_root},
             [&](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
               const int bytes = checked_int(rows * row_bytes, "a chunk's byte count");
               return request == nullptr
                          ? MPI_Gather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, root, comm)
                          : MPI_Igather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, root, comm,
                                        request);
             });
}

void scatter(const DeviceArray& input, const DeviceArray& output, int root, MPI_Comm comm) {
  const char* name = "mpi::scatter";
  const auto [rank, size] = rank_and_size(name, comm);
  const bool is_root = rank == root;
  Path path = Path::Staged;
  Descriptor mine = describe_for(output, output.dtype(), output.shape(), root, -1, &path);
  check_root(mine, root, size);
  Shape expected = output.shape();
  expected.insert(expected.begin(), size);
  if (is_root && (input.dtype() != output.dtype() || input.shape() != expected)) {
    fail(mine, fmt::format("the input is {}, expected {} (ranks, *output.shape)", shape_text(input),
                           expected_text(output.dtype(), expected)));
  }
  if (const auto problem = destination_problem(output)) fail(mine, *problem);
  const Agreement agreement = agree(name, comm, mine, root);
  const std::int64_t row_bytes = row_bytes_of(output.shape(), output.itemsize());
  run_blocks(name, path, agreement, output.shape(),
             Side{.array = is_root ? input : output, .leading = true, .active = is_root},
             Side{.array = output, .active = true},
             [&](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
               const int bytes = checked_int(rows * row_bytes, "a chunk's byte count");
               return request == nullptr
                          ? MPI_Scatter(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, root, comm)
                          : MPI_Iscatter(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, root, comm,
                                         request);
             });
}

namespace {

// A v-form's own array (gatherv's input, scatterv's output) has counts[rank] rows.
void check_local_rows(Descriptor& mine, const DeviceArray& array, const char* role,
                      const char* operation, std::span<const std::int64_t> counts, int rank) {
  if (array.ndim() == 0) {
    fail(mine, fmt::format("the {} is 0-d ({} counts rows of the first axis)", role,
                           std::string_view(operation).substr(5)));  // without "mpi::"
  } else if (mine.wire.status == kOk &&
             array.shape()[0] != counts[static_cast<std::size_t>(rank)]) {
    fail(mine, fmt::format("the {} has {} rows, counts[{}] is {}", role, array.shape()[0], rank,
                           counts[static_cast<std::size_t>(rank)]));
  }
}

}  // namespace

void gatherv(const DeviceArray& input, const DeviceArray& output,
             std::span<const std::int64_t> counts, int root, MPI_Comm comm) {
  const char* name = "mpi::gatherv";
  const auto [rank, size] = rank_and_size(name, comm);
  const bool is_root = rank == root;
  const Shape rest = trailing(input);
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, input.dtype(), rest, root, -1, &path);
  mine.counts = hash_counts(counts);
  check_root(mine, root, size);
  check_counts(mine, "counts", counts, size);
  check_local_rows(mine, input, "input", name, counts, rank);
  if (is_root && mine.wire.status == kOk) {
    Shape expected = rest;
    expected.insert(expected.begin(), sum_of(counts));
    check_output(mine, "output", output, input.dtype(), expected, " (sum(counts), *trailing)");
  }
  const Agreement agreement = agree(name, comm, mine, root);
  const std::int64_t row_bytes = row_bytes_of(input.shape(), input.itemsize());
  const auto layout = byte_layout(counts, row_bytes);
  const std::vector<int>& bytes = layout.first;
  const std::vector<int>& displacements = layout.second;
  const int mine_bytes = bytes[static_cast<std::size_t>(rank)];
  run_whole(name, path, agreement, Side{.array = input, .active = true},
            Side{.array = is_root ? output : input, .active = is_root},
            [&](const void* in, void* out, MPI_Request* request) {
              return request == nullptr
                         ? MPI_Gatherv(in, mine_bytes, MPI_BYTE, out, bytes.data(),
                                       displacements.data(), MPI_BYTE, root, comm)
                         : MPI_Igatherv(in, mine_bytes, MPI_BYTE, out, bytes.data(),
                                        displacements.data(), MPI_BYTE, root, comm, request);
            });
}

void scatterv(const DeviceArray& input, const DeviceArray& output,
              std::span<const std::int64_t> counts, int root, MPI_Comm comm) {
  const char* name = "mpi::scatterv";
  const auto [rank, size] = rank_and_size(name, comm);
  const bool is_root = rank == root;
  const Shape rest = trailing(output);
  Path path = Path::Staged;
  Descriptor mine = describe_for(output, output.dtype(), rest, root, -1, &path);
  mine.counts = hash_counts(counts);
  check_root(mine, root, size);
  check_counts(mine, "counts", counts, size);
  check_local_rows(mine, output, "output", name, counts, rank);
  if (const auto problem = destination_problem(output)) fail(mine, *problem);
  if (is_root && mine.wire.status == kOk) {
    Shape expected = rest;
    expected.insert(expected.begin(), sum_of(counts));
    if (input.dtype() != output.dtype() || input.shape() != expected) {
      fail(mine, fmt::format("the input is {}, expected {} (sum(counts), *trailing)",
                             shape_text(input), expected_text(output.dtype(), expected)));
    }
  }
  const Agreement agreement = agree(name, comm, mine, root);
  const std::int64_t row_bytes = row_bytes_of(output.shape(), output.itemsize());
  const auto layout = byte_layout(counts, row_bytes);
  const std::vector<int>& bytes = layout.first;
  const std::vector<int>& displacements = layout.second;
  const int mine_bytes = bytes[static_cast<std::size_t>(rank)];
  run_whole(
      name, path, agreement, Side{.array = is_root ? input : output, .active = is_root},
      Side{.array = output, .active = true}, [&](const void* in, void* out, MPI_Request* request) {
        return request == nullptr ? MPI_Scatterv(in, bytes.data(), displacements.data(), MPI_BYTE,
                                                 out, mine_bytes, MPI_BYTE, root, comm)
                                  : MPI_Iscatterv(in, bytes.data(), displacements.data(), MPI_BYTE,
                                                  out, mine_bytes, MPI_BYTE, root, comm, request);
      });
}

}  // namespace devmem::mpi

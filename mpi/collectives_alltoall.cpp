// devmem::mpi's alltoall, alltoallv, reduce_scatter (block and counts forms) and allreduce_loc,
// to_string(ReduceOp) and datatype_for: the descriptor agreement of mpi/collective_agreement.hpp,
// then run_blocks (chunked) or run_whole (the v-forms, one chunk); allreduce_loc packs
// (value, index) pairs in host memory.
#include "collective_agreement.hpp"

#include <devmem/layout.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace devmem::mpi {

using namespace detail;

namespace {

// `array`'s shape without its first axis (empty for a 0-d array).
Shape without_first(const DeviceArray& array) {
  if (array.ndim() == 0) return {};
  return {array.shape().begin() + 1, array.shape().end()};
}

Descriptor describe_for(const DeviceArray& array, std::span<const std::int64_t> block,
                        std::int32_t reduction, Path* path) {
  Descriptor mine{.wire = describe_block(array.dtype(), block), .reduction = reduction};
  const Transport transport = transport_for(array);
  *path = blocking_path(array, transport);
  mine.wire.chunk_rows = preferred_block_rows(block, array.itemsize(), transport);
  mine.blocking = *path == Path::DirectBlocking ? 1 : 0;
  return mine;
}

// (ranks, *block) arrays: the input's block, checked against the output.
void check_ranks_leading(Descriptor& mine, const DeviceArray& input, int size) {
  if (input.ndim() == 0 || input.shape()[0] != size) {
    fail(mine,
         fmt::format("the input is {}, expected (ranks = {}, *block)", shape_text(input), size));
  }
}

template <class Value>
struct Pair {
  Value value;
  int index;
};

template <class Value>
void reduce_pairs(const HostArray& values, const HostArray& indices, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm) {
  const auto n = static_cast<std::size_t>(values.size());
  std::vector<Pair<Value>> pairs(n);
  const auto* v = values.data_as<Value>();
  const auto* i = indices.data_as<std::int32_t>();
  for (std::size_t e = 0; e < n; ++e) pairs[e] = {v[e], i[e]};
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(
      MPI_Iallreduce(MPI_IN_PLACE, pairs.data(), checked_int(values.size(), "an element count"),
                     type, op, comm, &request),
      "MPI_Iallreduce (allreduce_loc)");
  wait_request(request, "MPI_Iallreduce (allreduce_loc)");
  auto* vo = values.data_as<Value>();
  auto* io = indices.data_as<std::int32_t>();
  for (std::size_t e = 0; e < n; ++e) {
    vo[e] = pairs[e].value;
    io[e] = pairs[e].index;
  }
}

}  // namespace

const char* to_string(ReduceOp op) noexcept {
  return op_name(op);
}

Datatype datatype_for(const DeviceArray& view) {
  return byte_elements_type(view);
}

void alltoall(const DeviceArray& input, const DeviceArray& output, MPI_Comm comm) {
  const char* name = "mpi::alltoall";
  const auto [rank, size] = rank_and_size(name, comm);
  static_cast<void>(rank);
  const Shape block = without_first(input);
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, block, -1, &path);
  check_ranks_leading(mine, input, size);
  if (output.dtype() != input.dtype() || output.shape() != input.shape()) {
    fail(mine, fmt::format("the output is {}, expected {} (the input's)", shape_text(output),
                           shape_text(input)));
  } else if (const auto problem = destination_problem(output)) {
    fail(mine, *problem);
  }
  const Agreement agreement = agree(name, comm, mine, 0);
  const std::int64_t row_bytes = row_elements(block) * input.itemsize();
  run_blocks(name, path, agreement, block, Side{.array = input, .leading = true, .active = true},
             Side{.array = output, .leading = true, .active = true},
             [&](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
               const int bytes = checked_int(rows * row_bytes, "a chunk's byte count");
               return request == nullptr
                          ? MPI_Alltoall(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm)
                          : MPI_Ialltoall(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm, request);
             });
}

void reduce_scatter(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                    MPI_Comm comm) {
  const char* name = "mpi::reduce_scatter";
  const auto [rank, size] = rank_and_size(name, comm);
  static_cast<void>(rank);
  const Shape block = without_first(input);
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, block, static_cast<std::int32_t>(op), &path);
  check_ranks_leading(mine, input, size);
  if (const auto problem = reduce_problem(input.dtype(), op)) fail(mine, *problem);
  if (output.dtype() != input.dtype() || output.shape() != block) {
    fail(mine, fmt::format("the output is {}, expected {} {} (input.shape[1:])", shape_text(output),
                           input.dtype().name(), layout::format_tuple(block)));
  } else if (const auto problem = destination_problem(output)) {
    fail(mine, *problem);
  }
  const Agreement agreement = agree(name, comm, mine, 0);
  const MPI_Datatype type = reduce_type(input.dtype(), op).value_or(MPI_DATATYPE_NULL);
  const MPI_Op mpi_reduction = mpi_op(op);
  const std::int64_t per_row = row_elements(block);
  run_blocks(name, path, agreement, block, Side{.array = input, .leading = true, .active = true},
             Side{.array = output, .active = true},
             [&](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
               const int count = checked_int(rows * per_row, "a chunk's element count");
               return request == nullptr
                          ? MPI_Reduce_scatter_block(in, out, count, type, mpi_reduction, comm)
                          : MPI_Ireduce_scatter_block(in, out, count, type, mpi_reduction, comm,
                                                      request);
             });
}

void reduce_scatter(const DeviceArray& input, std::span<const std::int64_t> counts,
                    const DeviceArray& output, ReduceOp op, MPI_Comm comm) {
  const char* name = "mpi::reduce_scatter";
  const auto [rank, size] = rank_and_size(name, comm);
  const Shape rest = without_first(input);
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, rest, static_cast<std::int32_t>(op), &path);
  mine.counts = hash_counts(counts);  // agree() refuses counts that differ between ranks
  if (const auto problem = reduce_problem(input.dtype(), op)) fail(mine, *problem);
  if (check_counts(mine, "counts", counts, size)) {
    const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
    Shape expected = rest;
    expected.insert(expected.begin(), counts[static_cast<std::size_t>(rank)]);
    if (input.ndim() == 0 || input.shape()[0] != total) {
      fail(mine, fmt::format("the input is {}, expected {} rows (sum of counts)", shape_text(input),
                             total));
    } else if (output.dtype() != input.dtype() || output.shape() != expected) {
      fail(mine, fmt::format("the output is {}, expected {} {} (counts[{}] rows of the input's)",
                             shape_text(output), input.dtype().name(),
                             layout::format_tuple(expected), rank));
    } else if (const auto problem = destination_problem(output)) {
      fail(mine, *problem);
    }
  }
  const Agreement agreement = agree(name, comm, mine, 0);
  const MPI_Datatype type = reduce_type(input.dtype(), op).value_or(MPI_DATATYPE_NULL);
  const MPI_Op mpi_reduction = mpi_op(op);
  const std::int64_t per_row = input.ndim() == 0 ? 1 : row_elements(input.shape());
  std::vector<int> elements;
  elements.reserve(counts.size());
  for (const std::int64_t c : counts)
    elements.push_back(checked_int(c * per_row, "a rank's count"));
  run_whole(name, path, agreement, Side{.array = input, .active = true},
            Side{.array = output, .active = true},
            [&](const void* in, void* out, MPI_Request* request) {
              return request == nullptr
                         ? MPI_Reduce_scatter(in, out, elements.data(), type, mpi_reduction, comm)
                         : MPI_Ireduce_scatter(in, out, elements.data(), type, mpi_reduction, comm,
                                               request);
            });
}

void alltoallv(const DeviceArray& input, std::span<const std::int64_t> send_counts,
               const DeviceArray& output, std::span<const std::int64_t> recv_counts,
               MPI_Comm comm) {
  const char* name = "mpi::alltoallv";
  const int size = rank_and_size(name, comm).second;
  const Shape rest = without_first(input);
  Path path = Path::Staged;
  Descriptor mine = describe_for(input, rest, -1, &path);
  auto check_rows = [&](const char* what, std::span<const std::int64_t> counts,
                        const DeviceArray& array, const char* role) {
    if (!check_counts(mine, what, counts, size)) return;
    const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
    if (array.ndim() == 0 || array.shape()[0] != total) {
      fail(mine, fmt::format("the {} is {}, expected {} rows (sum of {})", role, shape_text(array),
                             total, what));
    }
  };
  check_rows("send_counts", send_counts, input, "input");
  check_rows("recv_counts", recv_counts, output, "output");
  if (output.dtype() != input.dtype() || without_first(output) != rest) {
    fail(mine,
         fmt::format("the output is {}, the input {}: the dtype and trailing shape must match",
                     shape_text(output), shape_text(input)));
  } else if (const auto problem = destination_problem(output)) {
    fail(mine, *problem);
  }
  const Agreement agreement = agree(name, comm, mine, 0);
  // Every rank's send counts to this rank, against this rank's recv_counts.
  std::vector<std::int64_t> incoming(static_cast<std::size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoall(send_counts.data(), 1, MPI_INT64_T, incoming.data(), 1, MPI_INT64_T, comm,
                          &request),
            "MPI_Ialltoall (alltoallv counts)");
  wait_request(request, "MPI_Ialltoall (alltoallv counts)");
  std::optional<std::string> problem;
  for (std::size_t s = 0; s < incoming.size() && !problem; ++s) {
    if (incoming[s] != recv_counts[s]) {
      problem = fmt::format("recv_counts[{}] is {}, but rank {} sends {} rows here", s,
                            recv_counts[s], s, incoming[s]);
    }
  }
  agree_on_problems(name, comm, problem);
  const std::int64_t row_bytes = row_elements(input.shape()) * input.itemsize();
  auto layout_of = [&](std::span<const std::int64_t> counts) {
    std::pair<std::vector<int>, std::vector<int>> result;
    std::int64_t offset = 0;
    for (const std::int64_t c : counts) {
      result.first.push_back(checked_int(c * row_bytes, "a rank's byte count"));
      result.second.push_back(checked_int(offset, "a rank's byte displacement"));
      offset += c * row_bytes;
    }
    return result;
  };
  const auto send_layout = layout_of(send_counts);
  const auto recv_layout = layout_of(recv_counts);
  const std::vector<int>& send_bytes = send_layout.first;
  const std::vector<int>& send_displacements = send_layout.second;
  const std::vector<int>& recv_bytes = recv_layout.first;
  const std::vector<int>& recv_displacements = recv_layout.second;
  run_whole(
      name, path, agreement, Side{.array = input, .active = true},
      Side{.array = output, .active = true}, [&](const void* in, void* out, MPI_Request* req) {
        return req == nullptr
                   ? MPI_Alltoallv(in, send_bytes.data(), send_displacements.data(), MPI_BYTE, out,
                                   recv_bytes.data(), recv_displacements.data(), MPI_BYTE, comm)
                   : MPI_Ialltoallv(in, send_bytes.data(), send_displacements.data(), MPI_BYTE, out,
                                    recv_bytes.data(), recv_displacements.data(), MPI_BYTE, comm,
                                    req);
      });
}

void allreduce_loc(const DeviceArray& values, const DeviceArray& indices, ReduceOp op,
                   MPI_Comm comm) {
  const char* name = "mpi::allreduce_loc";
  Descriptor mine{.wire = describe(values), .reduction = static_cast<std::int32_t>(op)};
  const DType& dtype = values.dtype();
  const char kind = dtype.kind();
  const bool int32 = kind == 'i' && dtype.itemsize() == 4;
  const bool int64 =
      kind == 'i' && dtype.itemsize() == 8 && sizeof(long) == 8;  // NOLINT(google-runtime-int)
  const bool float32 = kind == 'f' && dtype.itemsize() == 4;
  const bool float64 = kind == 'f' && dtype.itemsize() == 8;
  if (op != ReduceOp::MinLoc && op != ReduceOp::MaxLoc) {
    fail(mine, fmt::format("allreduce_loc takes minloc or maxloc, not {}", op_name(op)));
  } else if (!int32 && !int64 && !float32 && !float64) {
    fail(mine, fmt::format("MPI cannot reduce dtype {} with {} (it takes int32, int64, float32 "
                           "and float64 values)",
                           dtype.name(), op_name(op)));
  } else if (indices.dtype() != DType('i', 4) || indices.shape() != values.shape()) {
    fail(mine, fmt::format("the indices are {}, expected int32 {} (the values' shape)",
                           shape_text(indices), layout::format_tuple(values.shape())));
  } else if (const auto problem = destination_problem(values)) {
    fail(mine, *problem);
  } else if (const auto index_problem = destination_problem(indices)) {
    fail(mine, *index_problem);
  }
  static_cast<void>(agree(name, comm, mine, 0));
  if (values.size() == 0) return;
  const HostArray v = values.copy(Order::C, values.stream()).copy_to_host(values.stream());
  const HostArray i = indices.copy(Order::C, indices.stream()).copy_to_host(indices.stream());
  const MPI_Op mpi_reduction = mpi_op(op);
  if (int32) reduce_pairs<std::int32_t>(v, i, MPI_2INT, mpi_reduction, comm);
  if (int64)
    reduce_pairs<long>(v, i, MPI_LONG_INT, mpi_reduction, comm);  // NOLINT(google-runtime-int)
  if (float32) reduce_pairs<float>(v, i, MPI_FLOAT_INT, mpi_reduction, comm);
  if (float64) reduce_pairs<double>(v, i, MPI_DOUBLE_INT, mpi_reduction, comm);
  values.copy_to_device(v, values.stream());
  indices.copy_to_device(i, indices.stream());
  values.stream().synchronize();
  indices.stream().synchronize();
}

}  // namespace devmem::mpi

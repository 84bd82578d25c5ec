// devmem::mpi's collectives bcast, allreduce and allgather (the others: collectives_*.cpp). Every
// rank first exchanges its descriptor (mpi/protocol.hpp), so that a mismatch or a local problem on
// any rank throws the same error on all of them instead of hanging; then the payload moves in
// chunks of one agreed plan, either straight from device memory (device_direct) or through two
// page-locked staging slots so that the copies of one chunk overlap MPI's collective on the
// previous one (staged).
#include "collective_agreement.hpp"

#include <devmem/layout.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace devmem::mpi {

// The protocol's and the progress engine's internals.
using namespace detail;

namespace {

std::int64_t row_bytes(const DeviceArray& array, const Plan& plan) {
  return array.nbytes() / std::max<std::int64_t>(plan.rows, 1);
}

std::int64_t rows_in(const DeviceArray& array, const Plan& plan, std::int64_t k) {
  if (array.ndim() == 0) return 1;
  const auto [begin, end] = chunk_rows(plan, k);
  return end - begin;
}

// bcast's device-direct path. MPI sees dense device bytes: a strided array is packed on the device
// first (root) and unpacked after (the others), rather than described by element-sized hvectors,
// which a device-aware MPI copies one piece at a time.
void bcast_direct(const DeviceArray& array, const Agreement& agreement, int root, MPI_Comm comm) {
  const Plan& plan = agreement.plan;
  const bool is_root = agreement.rank == root;
  const bool dense = array.is_c_contiguous();
  const DeviceArray work =
      dense ? array : device_array(array.shape(), array.dtype(), {}, Order::C, array.stream());
  if (!dense && is_root) work.copy_to_device(array, array.stream());
  array.stream().synchronize();
  for (std::int64_t k = 0; k < plan.chunks; ++k) {
    const DeviceArray chunk = chunk_view(work, plan, k);
    const Datatype type = bytes_type(chunk.nbytes());
    run_direct(agreement.blocking ? Path::DirectBlocking : Path::DirectNonblocking, "MPI_Bcast",
               [&](MPI_Request* request) {
                 return request == nullptr
                            ? MPI_Bcast(chunk.data(), 1, type.get(), root, comm)
                            : MPI_Ibcast(chunk.data(), 1, type.get(), root, comm, request);
               });
  }
  if (!dense && !is_root) {
    array.copy_to_device(work, array.stream());
    array.stream().synchronize();
  }
}

// allgather's device-direct path.
void allgather_direct(const DeviceArray& input, const DeviceArray& output,
                      const Agreement& agreement, MPI_Comm comm) {
  const Plan& plan = agreement.plan;
  // Each rank's block lands at the output's first-axis stride: a dense C output receives in
  // place, any other goes through a dense device array.
  const bool dense = output.is_c_contiguous();
  const DeviceArray work =
      dense ? output : device_array(output.shape(), output.dtype(), {}, Order::C, output.stream());
  // A strided input is packed into dense device memory first (see bcast).
  const DeviceArray packed = input.is_c_contiguous() ? input : input.copy(Order::C, input.stream());
  input.stream().synchronize();
  output.stream().synchronize();
  for (std::int64_t k = 0; k < plan.chunks; ++k) {
    const DeviceArray in_chunk = chunk_view(packed, plan, k);
    const DeviceArray out_chunk = chunk_view(work, plan, k, 1);
    const Datatype send_type = bytes_type(in_chunk.nbytes());
    const Datatype recv_type = resized_type(bytes_type(out_chunk[0].nbytes()), work.strides()[0]);
    run_direct(agreement.blocking ? Path::DirectBlocking : Path::DirectNonblocking, "MPI_Allgather",
               [&](MPI_Request* request) {
                 return request == nullptr
                            ? MPI_Allgather(in_chunk.data(), 1, send_type.get(), out_chunk.data(),
                                            1, recv_type.get(), comm)
                            : MPI_Iallgather(in_chunk.data(), 1, send_type.get(), out_chunk.data(),
                                             1, recv_type.get(), comm, request);
               });
  }
  if (!dense) output.copy_to_device(work, output.stream());
  output.stream().synchronize();
}

}  // namespace

void bcast(const DeviceArray& array, int root, MPI_Comm comm) {
  const char* op = "mpi::bcast";
  const auto [rank, size] = rank_and_size(op, comm);
  Descriptor mine{.wire = describe(array), .root = root};
  const Transport transport = transport_for(array);
  const Path path = blocking_path(array, transport);
  mine.wire.chunk_rows = preferred_rows(array, transport);
  mine.blocking = path == Path::DirectBlocking ? 1 : 0;
  if (root < 0 || root >= size) {
    fail(mine, fmt::format("root {} is not in the communicator (size {})", root, size));
  } else if (rank != root) {
    if (const auto problem = destination_problem(array)) fail(mine, *problem);
  }
  const Agreement agreement = agree(op, comm, mine, root);
  const Plan& plan = agreement.plan;
  const bool is_root = agreement.rank == root;
  if (transport == Transport::DeviceDirect) {
    bcast_direct(array, agreement, root, comm);
    return;
  }
  if (plan.chunks == 0) return;
  const Stream stream = copy_stream(array);
  const std::array<HostArray, 2> slots{staging_slot(array, plan),
                                       plan.chunks > 1 ? staging_slot(array, plan) : HostArray()};
  auto host_chunk = [&](std::int64_t k) {
    return slot_view(slots.at(static_cast<std::size_t>(k % 2)), array, plan, k);
  };
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) {
        if (is_root) chunk_view(array, plan, k).copy_to_host(host_chunk(k), stream);
      },
      [&](std::int64_t k) {
        const Datatype type = bytes_type(rows_in(array, plan, k) * row_bytes(array, plan));
        void* slot = slots.at(static_cast<std::size_t>(k % 2)).data();
        MPI_Request request = MPI_REQUEST_NULL;
        if (agreement.blocking) {
          check_mpi(MPI_Bcast(slot, 1, type.get(), root, comm), "MPI_Bcast");
        } else {
          check_mpi(MPI_Ibcast(slot, 1, type.get(), root, comm, &request), "MPI_Ibcast");
        }
        return request;
      },
      [&](std::int64_t k) {
        if (!is_root) chunk_view(array, plan, k).copy_to_device(host_chunk(k), stream);
      });
}

void allreduce(const DeviceArray& input, const DeviceArray& output, ReduceOp reduction,
               MPI_Comm comm) {
  const char* op = "mpi::allreduce";
  Descriptor mine{.wire = describe(output), .reduction = static_cast<std::int32_t>(reduction)};
  const Transport transport = transport_for(output);
  const Path path = blocking_path(output, transport);
  mine.wire.chunk_rows = preferred_rows(output, transport);
  mine.blocking = path == Path::DirectBlocking ? 1 : 0;
  const std::optional<MPI_Datatype> element = reduce_type(output.dtype(), reduction);
  if (const auto problem = allreduce_problem(input, output, reduction)) fail(mine, *problem);
  const Agreement agreement = agree(op, comm, mine, 0);
  const Plan& plan = agreement.plan;
  const bool in_place = input.data() == output.data() && input.layout() == output.layout() &&
                        input.owner() == output.owner();
  if (!in_place) {
    if (input.stream() != output.stream()) input.stream().synchronize();
    output.copy_to_device(input, output.stream());
  }
  if (plan.chunks == 0) return;
  const MPI_Op mpi_reduction = mpi_op(reduction);
  if (transport == Transport::DeviceDirect) {
    // MPI's reductions take predefined types only: a strided output is packed on the device.
    const bool dense = output.is_c_contiguous();
    const DeviceArray work = dense ? output : output.copy(Order::C, output.stream());
    work.stream().synchronize();
    const std::int64_t row_elements = output.size() / std::max<std::int64_t>(plan.rows, 1);
    for (std::int64_t k = 0; k < plan.chunks; ++k) {
      const auto [begin, end] = chunk_rows(plan, k);
      auto* data = static_cast<std::byte*>(work.data()) + begin * row_bytes(output, plan);
      const int count =
          checked_int(rows_in(output, plan, k) * row_elements, "a chunk's element count");
      const MPI_Datatype type = element.value_or(MPI_DATATYPE_NULL);
      run_direct(agreement.blocking ? Path::DirectBlocking : Path::DirectNonblocking,
                 "MPI_Allreduce", [&](MPI_Request* request) {
                   return request == nullptr
                              ? MPI_Allreduce(MPI_IN_PLACE, data, count, type, mpi_reduction, comm)
                              : MPI_Iallreduce(MPI_IN_PLACE, data, count, type, mpi_reduction, comm,
                                               request);
                 });
    }
    if (!dense) output.copy_to_device(work, output.stream());
    output.stream().synchronize();
    return;
  }
  const Stream stream = copy_stream(output);
  const std::array<HostArray, 2> slots{staging_slot(output, plan),
                                       plan.chunks > 1 ? staging_slot(output, plan) : HostArray()};
  auto host_chunk = [&](std::int64_t k) {
    return slot_view(slots.at(static_cast<std::size_t>(k % 2)), output, plan, k);
  };
  const std::int64_t row_elements = output.size() / std::max<std::int64_t>(plan.rows, 1);
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) { chunk_view(output, plan, k).copy_to_host(host_chunk(k), stream); },
      [&](std::int64_t k) {
        const int count =
            checked_int(rows_in(output, plan, k) * row_elements, "a chunk's element count");
        void* slot = slots.at(static_cast<std::size_t>(k % 2)).data();
        const MPI_Datatype type = element.value_or(MPI_DATATYPE_NULL);
        MPI_Request request = MPI_REQUEST_NULL;
        if (agreement.blocking) {
          check_mpi(MPI_Allreduce(MPI_IN_PLACE, slot, count, type, mpi_reduction, comm),
                    "MPI_Allreduce");
        } else {
          check_mpi(MPI_Iallreduce(MPI_IN_PLACE, slot, count, type, mpi_reduction, comm, &request),
                    "MPI_Iallreduce");
        }
        return request;
      },
      [&](std::int64_t k) { chunk_view(output, plan, k).copy_to_device(host_chunk(k), stream); });
}

void allreduce(const DeviceArray& array, ReduceOp op, MPI_Comm comm) {
  allreduce(array, array, op, comm);
}

void allgather(const DeviceArray& input, const DeviceArray& output, MPI_Comm comm) {
  const char* op = "mpi::allgather";
  const auto [rank, size] = rank_and_size(op, comm);
  static_cast<void>(rank);
  Descriptor mine{.wire = describe(input)};
  const Transport transport = transport_for(input);
  const Path path = blocking_path(input, transport);
  mine.wire.chunk_rows = preferred_rows(input, transport);
  mine.blocking = path == Path::DirectBlocking ? 1 : 0;
  if (const auto problem = allgather_problem(input, output, size)) fail(mine, *problem);
  const Agreement agreement = agree(op, comm, mine, 0);
  const Plan& plan = agreement.plan;
  if (plan.chunks == 0) return;
  const std::int64_t ranks = agreement.size;
  if (transport == Transport::DeviceDirect) {
    allgather_direct(input, output, agreement, comm);
    return;
  }
  const Stream stream = copy_stream(input);
  // The copies into the output go on the input's stream: work already enqueued on the output's
  // own stream comes first.
  if (output.stream() != stream) output.stream().synchronize();
  const std::array<HostArray, 2> in_slots{
      staging_slot(input, plan), plan.chunks > 1 ? staging_slot(input, plan) : HostArray()};
  const std::array<HostArray, 2> out_slots{
      staging_slot(input, plan, ranks),
      plan.chunks > 1 ? staging_slot(input, plan, ranks) : HostArray()};
  auto in_host = [&](std::int64_t k) {
    return slot_view(in_slots.at(static_cast<std::size_t>(k % 2)), input, plan, k);
  };
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) { chunk_view(input, plan, k).copy_to_host(in_host(k), stream); },
      [&](std::int64_t k) {
        const auto s = static_cast<std::size_t>(k % 2);
        const std::int64_t bytes = rows_in(input, plan, k) * row_bytes(input, plan);
        const Datatype type = bytes_type(bytes);
        // Rank r's chunk goes to the start of its full-chunk block, so the block stride is the
        // full chunk's bytes: a resized type covering the slot's first-axis stride.
        const Datatype recv_type = resized_type(type, out_slots.at(s).strides()[0]);
        MPI_Request request = MPI_REQUEST_NULL;
        if (agreement.blocking) {
          check_mpi(MPI_Allgather(in_slots.at(s).data(), 1, type.get(), out_slots.at(s).data(), 1,
                                  recv_type.get(), comm),
                    "MPI_Allgather");
        } else {
          check_mpi(MPI_Iallgather(in_slots.at(s).data(), 1, type.get(), out_slots.at(s).data(), 1,
                                   recv_type.get(), comm, &request),
                    "MPI_Iallgather");
        }
        return request;
      },
      [&](std::int64_t k) {
        const HostArray& slot = out_slots.at(static_cast<std::size_t>(k % 2));
        const HostArray host = input.ndim() == 0 ? slot : slot.slice(1, 0, rows_in(input, plan, k));
        chunk_view(output, plan, k, 1).copy_to_device(host, stream);
      });
}

}  // namespace devmem::mpi

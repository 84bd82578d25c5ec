// devmem::mpi's collectives: bcast, allreduce and allgather. Every rank first exchanges its
// descriptor (mpi/protocol.hpp), so that a mismatch or a local problem on any rank throws the same
// error on all of them instead of hanging; then the payload moves in chunks of one agreed plan,
// either straight from device memory (device_direct) or through two page-locked staging slots so
// that the copies of one chunk overlap MPI's collective on the previous one (staged).
#include "progress.hpp"
#include "protocol.hpp"

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

struct Agreement {
  int rank = 0;
  int size = 0;
  Plan plan;
};

// Exchanges every rank's descriptor; throws the same InvalidArgument on every rank when one rank
// reported a local problem or the arrays differ. `plan_rank` picks whose chunk plan all follow.
Agreement agree(const char* operation, MPI_Comm comm, const DeviceArray& array, Wire mine,
                int plan_rank_or_root) {
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument(fmt::format("{}: the communicator is MPI_COMM_NULL", operation));
  }
  const std::string_view called(operation);
  std::copy_n(called.begin(), std::min(called.size(), mine.collective.size() - 1),
              mine.collective.begin());
  Agreement agreement;
  check_mpi(MPI_Comm_rank(comm, &agreement.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &agreement.size), "MPI_Comm_size");
  std::vector<Wire> all(static_cast<std::size_t>(agreement.size));
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm,
                           &request),
            "MPI_Iallgather (devmem::mpi descriptors)");
  wait_request(request, "MPI_Iallgather (devmem::mpi descriptors)");
  for (int r = 0; r < agreement.size; ++r) {
    const Wire& w = all[static_cast<std::size_t>(r)];
    if (w.status != kOk) {
      throw InvalidArgument(fmt::format("{}: rank {}: {}", operation, r, message_of(w)));
    }
  }
  const Wire& first = all.front();
  for (int r = 1; r < agreement.size; ++r) {
    const Wire& w = all[static_cast<std::size_t>(r)];
    if (w.collective != first.collective) {
      throw InvalidArgument(fmt::format(
          "{}: rank {} called {}, rank 0 called {}: every rank of the communicator must call the "
          "same collective, in the same order",
          operation, r, w.collective.data(), first.collective.data()));
    }
    if (!same_array(w, first)) {
      throw InvalidArgument(fmt::format("{}: shape/dtype mismatch: rank {} has {}, rank 0 has {}",
                                        operation, r, format_wire(w), format_wire(first)));
    }
    if (w.extra != first.extra) {
      throw InvalidArgument(
          fmt::format("{}: rank {} passed {} {}, rank 0 passed {}", operation, r,
                      std::string_view(operation) == "mpi::bcast" ? "root" : "reduction", w.extra,
                      first.extra));
    }
  }
  const int plan_rank = std::clamp(plan_rank_or_root, 0, agreement.size - 1);
  agreement.plan = make_plan(array, all[static_cast<std::size_t>(plan_rank)].chunk_rows);
  return agreement;
}

// Runs chunk k's device-to-host copy (pre), MPI call (mpi: starts a non-blocking collective on
// slot k % 2 and returns its request) and host-to-device copy (post) for k = 0, 1, ...; the copy
// of chunk k + 1 is enqueued while MPI moves chunk k. Slot k % 2 is reused by chunk k + 2: its
// ready event is recorded after the copy out of it (post(k)), in stream order.
template <class Pre, class Mpi, class Post>
void pipeline(std::int64_t chunks, const Stream& stream, Pre pre, Mpi mpi, Post post) {
  if (chunks == 0) return;
  std::array<std::optional<Event>, 2> ready;
  pre(0);
  ready[0] = stream.record();
  for (std::int64_t k = 0; k < chunks; ++k) {
    const auto s = static_cast<std::size_t>(k % 2);
    if (auto& r = ready.at(s); r.has_value()) r->synchronize();
    MPI_Request request = mpi(k);
    if (k + 1 < chunks) {
      pre(k + 1);
      ready.at(1 - s) = stream.record();
    }
    wait_request(request, "devmem::mpi collective");
    post(k);
  }
  stream.synchronize();
}

int reduce_extra(ReduceOp op) {
  return static_cast<int>(op) + 1;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
  }
  return MPI_SUM;
}

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::min:
      return "min";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

// The MPI type of a dtype for reductions; nullopt for those MPI cannot reduce with `op`.
std::optional<MPI_Datatype> reduce_type(const DType& dtype, ReduceOp op) {
  switch (dtype.kind()) {
    case 'i':
      switch (dtype.itemsize()) {
        case 1:
          return MPI_INT8_T;
        case 2:
          return MPI_INT16_T;
        case 4:
          return MPI_INT32_T;
        case 8:
          return MPI_INT64_T;
        default:
          return std::nullopt;
      }
    case 'u':
      switch (dtype.itemsize()) {
        case 1:
          return MPI_UINT8_T;
        case 2:
          return MPI_UINT16_T;
        case 4:
          return MPI_UINT32_T;
        case 8:
          return MPI_UINT64_T;
        default:
          return std::nullopt;
      }
    case 'f':
      if (dtype.itemsize() == 4) return MPI_FLOAT;
      if (dtype.itemsize() == 8) return MPI_DOUBLE;
      return std::nullopt;
    case 'c':
      if (op != ReduceOp::sum) return std::nullopt;
      if (dtype.itemsize() == 8) return MPI_C_FLOAT_COMPLEX;
      if (dtype.itemsize() == 16) return MPI_C_DOUBLE_COMPLEX;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::int64_t row_bytes(const DeviceArray& array, const Plan& plan) {
  return array.nbytes() / std::max<std::int64_t>(plan.rows, 1);
}

std::int64_t rows_in(const DeviceArray& array, const Plan& plan, std::int64_t k) {
  if (array.ndim() == 0) return 1;
  const auto [begin, end] = chunk_rows(plan, k);
  return end - begin;
}

}  // namespace

void bcast(const DeviceArray& array, int root, MPI_Comm comm) {
  const char* op = "mpi::bcast";
  Wire mine = describe(array);
  mine.extra = root;
  int size = 0;
  if (comm != MPI_COMM_NULL) check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const Transport transport = transport_for(array);
  mine.chunk_rows = preferred_rows(array, transport);
  int rank = 0;
  if (comm != MPI_COMM_NULL) check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  if (mine.status == kOk && (root < 0 || root >= size)) {
    mine.status = kLocalError;
    set_message(mine, fmt::format("root {} is not in the communicator (size {})", root, size));
  } else if (mine.status == kOk && rank != root) {
    if (const auto problem = destination_problem(array)) {
      mine.status = kLocalError;
      set_message(mine, *problem);
    }
  }
  const Agreement agreement = agree(op, comm, array, mine, root);
  const Plan& plan = agreement.plan;
  const bool is_root = agreement.rank == root;
  if (transport == Transport::device_direct) {
    array.stream().synchronize();
    for (std::int64_t k = 0; k < plan.chunks; ++k) {
      const DeviceArray chunk = chunk_view(array, plan, k);
      const Datatype type = byte_elements_type(chunk);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Ibcast(chunk.data(), 1, type.get(), root, comm, &request), "MPI_Ibcast");
      wait_request(request, "MPI_Ibcast");
    }
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
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(MPI_Ibcast(slots.at(static_cast<std::size_t>(k % 2)).data(), 1, type.get(), root,
                             comm, &request),
                  "MPI_Ibcast");
        return request;
      },
      [&](std::int64_t k) {
        if (!is_root) chunk_view(array, plan, k).copy_to_device(host_chunk(k), stream);
      });
}

void allreduce(const DeviceArray& input, const DeviceArray& output, ReduceOp reduction,
               MPI_Comm comm) {
  const char* op = "mpi::allreduce";
  Wire mine = describe(output);
  mine.extra = reduce_extra(reduction);
  const Transport transport = transport_for(output);
  mine.chunk_rows = preferred_rows(output, transport);
  const std::optional<MPI_Datatype> element = reduce_type(output.dtype(), reduction);
  if (mine.status == kOk) {
    if (input.dtype() != output.dtype() || input.shape() != output.shape()) {
      mine.status = kLocalError;
      set_message(mine, fmt::format("the input ({} {}) and the output ({} {}) differ",
                                    input.dtype().name(), layout::format_tuple(input.shape()),
                                    output.dtype().name(), layout::format_tuple(output.shape())));
    } else if (!element) {
      mine.status = kLocalError;
      set_message(mine, fmt::format("MPI cannot reduce dtype {} with {}", output.dtype().name(),
                                    op_name(reduction)));
    } else if (const auto problem = destination_problem(output)) {
      mine.status = kLocalError;
      set_message(mine, *problem);
    }
  }
  const Agreement agreement = agree(op, comm, output, mine, 0);
  const Plan& plan = agreement.plan;
  const bool in_place = input.data() == output.data() && input.layout() == output.layout() &&
                        input.owner() == output.owner();
  if (!in_place) {
    if (input.stream() != output.stream()) input.stream().synchronize();
    output.copy_to_device(input, output.stream());
  }
  if (plan.chunks == 0) return;
  const MPI_Op mpi_reduction = mpi_op(reduction);
  if (transport == Transport::device_direct) {
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
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, count, element.value_or(MPI_DATATYPE_NULL),
                               mpi_reduction, comm, &request),
                "MPI_Iallreduce");
      wait_request(request, "MPI_Iallreduce");
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
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(
            MPI_Iallreduce(MPI_IN_PLACE, slots.at(static_cast<std::size_t>(k % 2)).data(), count,
                           element.value_or(MPI_DATATYPE_NULL), mpi_reduction, comm, &request),
            "MPI_Iallreduce");
        return request;
      },
      [&](std::int64_t k) { chunk_view(output, plan, k).copy_to_device(host_chunk(k), stream); });
}

void allreduce(const DeviceArray& array, ReduceOp op, MPI_Comm comm) {
  allreduce(array, array, op, comm);
}

void allgather(const DeviceArray& input, const DeviceArray& output, MPI_Comm comm) {
  const char* op = "mpi::allgather";
  Wire mine = describe(input);
  const Transport transport = transport_for(input);
  mine.chunk_rows = preferred_rows(input, transport);
  int size = 0;
  if (comm != MPI_COMM_NULL) check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (mine.status == kOk) {
    Shape expected = input.shape();
    expected.insert(expected.begin(), size);
    if (output.dtype() != input.dtype() || output.shape() != expected) {
      mine.status = kLocalError;
      set_message(mine, fmt::format("the output is {} {}, expected {} {} (ranks, *input.shape)",
                                    output.dtype().name(), layout::format_tuple(output.shape()),
                                    input.dtype().name(), layout::format_tuple(expected)));
    } else if (const auto problem = destination_problem(output)) {
      mine.status = kLocalError;
      set_message(mine, *problem);
    }
  }
  const Agreement agreement = agree(op, comm, input, mine, 0);
  const Plan& plan = agreement.plan;
  if (plan.chunks == 0) return;
  const std::int64_t ranks = agreement.size;
  if (transport == Transport::device_direct) {
    // Each rank's block lands at the output's first-axis stride: a dense C output receives in
    // place, any other goes through a dense device array.
    const bool dense = output.is_c_contiguous();
    const DeviceArray work =
        dense ? output
              : device_array(output.shape(), output.dtype(), {}, Order::C, output.stream());
    input.stream().synchronize();
    output.stream().synchronize();
    for (std::int64_t k = 0; k < plan.chunks; ++k) {
      const DeviceArray in_chunk = chunk_view(input, plan, k);
      const DeviceArray out_chunk = chunk_view(work, plan, k, 1);
      const Datatype send_type = byte_elements_type(in_chunk);
      const Datatype recv_type = resized_type(byte_elements_type(out_chunk[0]), work.strides()[0]);
      MPI_Request request = MPI_REQUEST_NULL;
      check_mpi(MPI_Iallgather(in_chunk.data(), 1, send_type.get(), out_chunk.data(), 1,
                               recv_type.get(), comm, &request),
                "MPI_Iallgather");
      wait_request(request, "MPI_Iallgather");
    }
    if (!dense) output.copy_to_device(work, output.stream());
    output.stream().synchronize();
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
        check_mpi(MPI_Iallgather(in_slots.at(s).data(), 1, type.get(), out_slots.at(s).data(), 1,
                                 recv_type.get(), comm, &request),
                  "MPI_Iallgather");
        return request;
      },
      [&](std::int64_t k) {
        const HostArray& slot = out_slots.at(static_cast<std::size_t>(k % 2));
        const HostArray host = input.ndim() == 0 ? slot : slot.slice(1, 0, rows_in(input, plan, k));
        chunk_view(output, plan, k, 1).copy_to_device(host, stream);
      });
}

}  // namespace devmem::mpi

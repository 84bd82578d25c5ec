// devmem::mpi's collectives' shared pieces (declared in mpi/collective_agreement.hpp): the
// descriptor exchange and its checks, the reductions' MPI types, the choice of path, and the
// chunked block mover most collectives use.
#include "collective_agreement.hpp"

#include <devmem/backend.hpp>
#include <devmem/context.hpp>
#include <devmem/layout.hpp>
#include <devmem/memory.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace devmem::mpi::detail {

namespace {

std::string collective_of(const Descriptor& d) {
  const auto& c = d.wire.collective;
  return {c.data(), strnlen(c.data(), c.size())};
}

std::string reduction_name(std::int32_t reduction) {
  if (reduction < 0) return "none";
  return op_name(static_cast<ReduceOp>(reduction));
}

}  // namespace

std::pair<int, int> rank_and_size(const char* operation, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument(fmt::format("{}: the communicator is MPI_COMM_NULL", operation));
  }
  int rank = 0;
  int size = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  return {rank, size};
}

Wire describe_block(const DType& dtype, std::span<const std::int64_t> shape) {
  Wire wire;
  const std::string typestr = dtype.typestr();
  std::memcpy(wire.typestr.data(), typestr.data(),
              std::min(typestr.size(), wire.typestr.size() - 1));
  wire.ndim = static_cast<std::int32_t>(shape.size());
  if (shape.size() > static_cast<std::size_t>(kMaxWireDims)) {
    wire.status = kLocalError;
    set_message(wire, fmt::format("an array of {} dimensions (at most {} are sent)", shape.size(),
                                  kMaxWireDims));
    return wire;
  }
  std::copy(shape.begin(), shape.end(), wire.shape.begin());
  return wire;
}

void fail(Descriptor& mine, std::string_view message) {
  if (mine.wire.status != kOk) return;
  mine.wire.status = kLocalError;
  set_message(mine.wire, message);
}

std::int64_t preferred_block_rows(std::span<const std::int64_t> shape, std::int64_t itemsize,
                                  Transport transport) {
  const std::int64_t rows = shape.empty() ? 1 : std::max<std::int64_t>(shape[0], 1);
  if (transport == Transport::DeviceDirect) return rows;
  std::int64_t row_bytes = itemsize;
  for (std::size_t d = 1; d < shape.size(); ++d) row_bytes *= shape[d];
  if (row_bytes <= 0) return rows;
  return std::clamp<std::int64_t>(staging_chunk_bytes() / row_bytes, 1, rows);
}

std::uint64_t hash_counts(std::span<const std::int64_t> counts) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const std::int64_t c : counts) {
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<std::uint64_t>(c) >> (8 * b)) & 0xffU;
      h *= 1099511628211ULL;
    }
  }
  return h ^ counts.size();
}

MPI_Request start_agreement(const char* operation, MPI_Comm comm, Descriptor& mine,
                            std::vector<Descriptor>& all) {
  const auto [rank, size] = rank_and_size(operation, comm);
  static_cast<void>(rank);
  const std::string_view called(operation);
  mine.wire.collective.fill('\0');
  std::copy_n(called.begin(), std::min(called.size(), mine.wire.collective.size() - 1),
              mine.wire.collective.begin());
  all.assign(static_cast<std::size_t>(size), Descriptor{});
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(&mine, sizeof(Descriptor), MPI_BYTE, all.data(), sizeof(Descriptor),
                           MPI_BYTE, comm, &request),
            "MPI_Iallgather (devmem::mpi descriptors)");
  return request;
}

Agreement check_agreement(const char* operation, std::span<const Descriptor> all, int rank,
                          int plan_rank) {
  Agreement agreement;
  agreement.rank = rank;
  agreement.size = static_cast<int>(all.size());
  const Descriptor& first = all.front();
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (collective_of(all[r]) != collective_of(first)) {
      throw InvalidArgument(fmt::format(
          "{}: rank {} called {}, rank 0 called {}: every rank of the communicator must call the "
          "same collective, in the same order",
          operation, r, collective_of(all[r]), collective_of(first)));
    }
  }
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].wire.status != kOk) {
      throw InvalidArgument(fmt::format("{}: rank {}: {}", operation, r, message_of(all[r].wire)));
    }
  }
  for (std::size_t r = 1; r < all.size(); ++r) {
    const Descriptor& d = all[r];
    if (!same_array(d.wire, first.wire)) {
      throw InvalidArgument(fmt::format("{}: shape/dtype mismatch: rank {} has {}, rank 0 has {}",
                                        operation, r, format_wire(d.wire),
                                        format_wire(first.wire)));
    }
    if (d.root != first.root) {
      throw InvalidArgument(fmt::format("{}: rank {} passed root {}, rank 0 passed root {}",
                                        operation, r, d.root, first.root));
    }
    if (d.reduction != first.reduction) {
      throw InvalidArgument(fmt::format("{}: rank {} passed reduction {}, rank 0 passed {}",
                                        operation, r, reduction_name(d.reduction),
                                        reduction_name(first.reduction)));
    }
    if (d.counts != first.counts) {
      throw InvalidArgument(fmt::format(
          "{}: rank {} passed other counts than rank 0 (the counts must be equal on every rank)",
          operation, r));
    }
  }
  for (const Descriptor& d : all) agreement.blocking = agreement.blocking || d.blocking != 0;
  const Wire& w = all[static_cast<std::size_t>(std::clamp(plan_rank, 0, agreement.size - 1))].wire;
  const int ndim = std::clamp(w.ndim, 0, kMaxWireDims);
  std::int64_t elements = 1;
  for (int d = 0; d < ndim; ++d) elements *= w.shape.at(static_cast<std::size_t>(d));
  Plan& plan = agreement.plan;
  plan.rows = ndim == 0 ? 1 : w.shape[0];
  plan.rows_per_chunk =
      std::clamp<std::int64_t>(w.chunk_rows, 1, std::max<std::int64_t>(plan.rows, 1));
  plan.chunks = elements == 0 ? 0 : (plan.rows + plan.rows_per_chunk - 1) / plan.rows_per_chunk;
  return agreement;
}

namespace {

std::mutex g_order_mutex;
std::map<MPI_Comm, std::deque<const void*>> g_order;

}  // namespace

void enqueue_collective(MPI_Comm comm, const void* op) {
  const std::lock_guard lock(g_order_mutex);
  g_order[comm].push_back(op);
}

bool collective_turn(MPI_Comm comm, const void* op) {
  const std::lock_guard lock(g_order_mutex);
  const auto it = g_order.find(comm);
  return it != g_order.end() && !it->second.empty() && it->second.front() == op;
}

void dequeue_collective(MPI_Comm comm, const void* op) noexcept {
  const std::lock_guard lock(g_order_mutex);
  const auto it = g_order.find(comm);
  if (it == g_order.end()) return;
  std::erase(it->second, op);
  if (it->second.empty()) g_order.erase(it);
}

void drain_collectives(MPI_Comm comm) {
  while (true) {
    {
      const std::lock_guard lock(g_order_mutex);
      if (!g_order.contains(comm)) return;
    }
    progress_all();
    std::this_thread::yield();
  }
}

Agreement agree(const char* operation, MPI_Comm comm, Descriptor mine, int plan_rank) {
  drain_collectives(comm);
  std::vector<Descriptor> all;
  MPI_Request request = start_agreement(operation, comm, mine, all);
  wait_request(request, "MPI_Iallgather (devmem::mpi descriptors)");
  int rank = 0;
  check_mpi(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  return check_agreement(operation, all, rank, plan_rank);
}

void agree_on_problems(const char* operation, MPI_Comm comm,
                       const std::optional<std::string>& problem) {
  const auto [rank, size] = rank_and_size(operation, comm);
  static_cast<void>(rank);
  Wire mine;
  if (problem) {
    mine.status = kLocalError;
    set_message(mine, *problem);
  }
  std::vector<Wire> all(static_cast<std::size_t>(size));
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm,
                           &request),
            "MPI_Iallgather (devmem::mpi checks)");
  wait_request(request, "MPI_Iallgather (devmem::mpi checks)");
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].status != kOk) {
      throw InvalidArgument(fmt::format("{}: rank {}: {}", operation, r, message_of(all[r])));
    }
  }
}

// ---- reductions ---------------------------------------------------------------------------------

const char* op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::LogicalAnd:
      return "logical_and";
    case ReduceOp::LogicalOr:
      return "logical_or";
    case ReduceOp::LogicalXor:
      return "logical_xor";
    case ReduceOp::BitwiseAnd:
      return "bitwise_and";
    case ReduceOp::BitwiseOr:
      return "bitwise_or";
    case ReduceOp::BitwiseXor:
      return "bitwise_xor";
    case ReduceOp::MinLoc:
      return "minloc";
    case ReduceOp::MaxLoc:
      return "maxloc";
  }
  return "?";
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return MPI_SUM;
    case ReduceOp::Min:
      return MPI_MIN;
    case ReduceOp::Max:
      return MPI_MAX;
    case ReduceOp::Prod:
      return MPI_PROD;
    case ReduceOp::LogicalAnd:
      return MPI_LAND;
    case ReduceOp::LogicalOr:
      return MPI_LOR;
    case ReduceOp::LogicalXor:
      return MPI_LXOR;
    case ReduceOp::BitwiseAnd:
      return MPI_BAND;
    case ReduceOp::BitwiseOr:
      return MPI_BOR;
    case ReduceOp::BitwiseXor:
      return MPI_BXOR;
    case ReduceOp::MinLoc:
      return MPI_MINLOC;
    case ReduceOp::MaxLoc:
      return MPI_MAXLOC;
  }
  return MPI_SUM;
}

namespace {

std::optional<MPI_Datatype> integer_type(const DType& dtype) {
  const bool is_signed = dtype.kind() == 'i';
  switch (dtype.itemsize()) {
    case 1:
      return is_signed ? MPI_INT8_T : MPI_UINT8_T;
    case 2:
      return is_signed ? MPI_INT16_T : MPI_UINT16_T;
    case 4:
      return is_signed ? MPI_INT32_T : MPI_UINT32_T;
    case 8:
      return is_signed ? MPI_INT64_T : MPI_UINT64_T;
    default:
      return std::nullopt;
  }
}

}  // namespace

namespace {

// float32/float64 (and complex64/complex128 when `complex`).
std::optional<MPI_Datatype> float_type(const DType& dtype, bool complex) {
  if (dtype.kind() == 'f') {
    if (dtype.itemsize() == 4) return MPI_FLOAT;
    if (dtype.itemsize() == 8) return MPI_DOUBLE;
  }
  if (complex && dtype.kind() == 'c') {
    if (dtype.itemsize() == 8) return MPI_C_FLOAT_COMPLEX;
    if (dtype.itemsize() == 16) return MPI_C_DOUBLE_COMPLEX;
  }
  return std::nullopt;
}

}  // namespace

std::optional<MPI_Datatype> reduce_type(const DType& dtype, ReduceOp op) {
  if (dtype.kind() == 'i' || dtype.kind() == 'u') {
    return op == ReduceOp::MinLoc || op == ReduceOp::MaxLoc ? std::nullopt : integer_type(dtype);
  }
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
      return float_type(dtype, true);
    case ReduceOp::Min:
    case ReduceOp::Max:
      return float_type(dtype, false);
    case ReduceOp::LogicalAnd:
    case ReduceOp::LogicalOr:
    case ReduceOp::LogicalXor:
      if (dtype.kind() == 'b' && dtype.itemsize() == 1) return MPI_C_BOOL;
      return std::nullopt;
    default:  // bitwise: integers only; minloc, maxloc: allreduce_loc's
      return std::nullopt;
  }
}

std::optional<std::string> reduce_problem(const DType& dtype, ReduceOp op) {
  if (op == ReduceOp::MinLoc || op == ReduceOp::MaxLoc) {
    return fmt::format("{} pairs values with indices: use allreduce_loc (dtype {})", op_name(op),
                       dtype.name());
  }
  if (reduce_type(dtype, op)) return std::nullopt;
  const char* allowed = "integers, float32/float64 and complex64/complex128";
  switch (op) {
    case ReduceOp::Min:
    case ReduceOp::Max:
      allowed = "integers and float32/float64";
      break;
    case ReduceOp::LogicalAnd:
    case ReduceOp::LogicalOr:
    case ReduceOp::LogicalXor:
      allowed = "integers and bool";
      break;
    case ReduceOp::BitwiseAnd:
    case ReduceOp::BitwiseOr:
    case ReduceOp::BitwiseXor:
      allowed = "integers";
      break;
    default:
      break;
  }
  return fmt::format("MPI cannot reduce dtype {} with {} (it takes {})", dtype.name(), op_name(op),
                     allowed);
}

std::optional<std::string> allreduce_problem(const DeviceArray& input, const DeviceArray& output,
                                             ReduceOp op) {
  if (input.dtype() != output.dtype() || input.shape() != output.shape()) {
    return fmt::format("the input ({} {}) and the output ({} {}) differ", input.dtype().name(),
                       layout::format_tuple(input.shape()), output.dtype().name(),
                       layout::format_tuple(output.shape()));
  }
  if (auto problem = reduce_problem(output.dtype(), op)) return problem;
  return destination_problem(output);
}

std::optional<std::string> allgather_problem(const DeviceArray& input, const DeviceArray& output,
                                             int size) {
  Shape expected = input.shape();
  expected.insert(expected.begin(), size);
  if (output.dtype() != input.dtype() || output.shape() != expected) {
    return fmt::format("the output is {} {}, expected {} {} (ranks, *input.shape)",
                       output.dtype().name(), layout::format_tuple(output.shape()),
                       input.dtype().name(), layout::format_tuple(expected));
  }
  return destination_problem(output);
}

// ---- transports ---------------------------------------------------------------------------------

namespace {

std::string backend_of(const DeviceArray& array) {
  const std::shared_ptr<Context> context = array.context();
  return context ? std::string(context->backend_name()) : backend_name();
}

// DEVMEM_MPI_DIRECT_COLLECTIVES: "blocking", "nonblocking" or unset.
std::string direct_override() {
  const char* env = std::getenv("DEVMEM_MPI_DIRECT_COLLECTIVES");  // NOLINT(concurrency-mt-unsafe)
  return env == nullptr ? std::string() : std::string(env);
}

}  // namespace

Path blocking_path(const DeviceArray& array, Transport transport) {
  if (transport == Transport::Staged) return Path::Staged;
  const std::string forced = direct_override();
  if (forced == "blocking") return Path::DirectBlocking;
  if (forced == "nonblocking") return Path::DirectNonblocking;
  return backend_of(array) == "host" ? Path::DirectNonblocking : Path::DirectBlocking;
}

Path nonblocking_path(const DeviceArray& array, Transport transport) {
  if (transport == Transport::Staged) return Path::Staged;
  return backend_of(array) == "host" ? Path::DirectNonblocking : Path::Staged;
}

HostArray dense_view(const HostArray& slot, Shape shape) {
  return HostArray::view(slot.data(), std::move(shape), slot.dtype(), {}, slot.owner());
}

DeviceArray dense_copy(const DeviceArray& array) {
  return array.is_c_contiguous() ? array : array.copy(Order::C, array.stream());
}

DeviceArray dense_target(const DeviceArray& array) {
  return array.is_c_contiguous()
             ? array
             : device_array(array.shape(), array.dtype(), {}, Order::C, array.stream());
}

std::int64_t rows_in_chunk(const Plan& plan, std::int64_t k, int block_ndim) {
  if (block_ndim == 0) return 1;
  const auto [begin, end] = chunk_rows(plan, k);
  return end - begin;
}

Shape chunk_shape(std::span<const std::int64_t> block, std::int64_t rows, std::int64_t leading) {
  Shape shape(block.begin(), block.end());
  if (!shape.empty()) shape[0] = rows;
  if (leading > 0) shape.insert(shape.begin(), leading);
  return shape;
}

namespace {

// run_blocks' device-direct path: dense device chunks (strided ones packed), MPI on them.
void run_blocks_direct(const char* name, const Agreement& agreement,
                       std::span<const std::int64_t> block, const Side& send, const Side& recv,
                       const Stream& stream, const BlockCall& call) {
  const Plan& plan = agreement.plan;
  const int block_ndim = static_cast<int>(block.size());
  const int send_axis = send.leading ? 1 : 0;
  const int recv_axis = recv.leading ? 1 : 0;
  const Path direct = agreement.blocking ? Path::DirectBlocking : Path::DirectNonblocking;
  for (std::int64_t k = 0; k < plan.chunks; ++k) {
    const std::int64_t rows = rows_in_chunk(plan, k, block_ndim);
    DeviceArray in;
    if (send.active) in = dense_copy(chunk_view(send.array, plan, k, send_axis));
    DeviceArray target;
    DeviceArray out;
    if (recv.active) {
      target = chunk_view(recv.array, plan, k, recv_axis);
      out = dense_target(target);
    } else if (recv.discard) {
      out = device_array(chunk_shape(block, rows, recv.leading ? agreement.size : 0),
                         recv.array.dtype(), {}, Order::C, stream);
    }
    if (in.data() != nullptr && in.data() == out.data()) {
      in = in.copy(Order::C, stream);  // reduce on root in place
    }
    stream.synchronize();
    run_direct(direct, name, [&](MPI_Request* request) {
      return call(send.active ? in.data() : nullptr,
                  recv.active || recv.discard ? out.data() : nullptr, rows, request);
    });
    if (recv.active && out.data() != target.data()) target.copy_to_device(out, stream);
  }
  stream.synchronize();
}

// Two page-locked slots for `side` (one when there is one chunk; none when inactive).
std::array<HostArray, 2> slots_for(const Side& side, bool used, const Agreement& agreement) {
  std::array<HostArray, 2> slots;
  if (!used) return slots;
  const Plan& plan = agreement.plan;
  for (std::size_t s = 0; s < (plan.chunks > 1 ? 2U : 1U); ++s) {
    slots.at(s) = side.leading ? staging_slot(side.array[0], plan, agreement.size)
                               : staging_slot(side.array, plan);
  }
  return slots;
}

}  // namespace

void run_blocks(const char* name, Path path, const Agreement& agreement,
                std::span<const std::int64_t> block, const Side& send, const Side& recv,
                const BlockCall& call) {
  const Plan& plan = agreement.plan;
  if (plan.chunks == 0) return;
  const Stream stream = send.active ? send.array.stream() : recv.array.stream();
  if (send.active && recv.active && recv.array.stream() != stream)
    recv.array.stream().synchronize();
  if (path != Path::Staged) {
    run_blocks_direct(name, agreement, block, send, recv, stream, call);
    return;
  }
  const int block_ndim = static_cast<int>(block.size());
  const bool receives = recv.active || recv.discard;
  const std::array<HostArray, 2> send_slots = slots_for(send, send.active, agreement);
  const std::array<HostArray, 2> recv_slots = slots_for(recv, receives, agreement);
  auto slot_of = [&](const std::array<HostArray, 2>& which, const Side& side, std::int64_t k) {
    return dense_view(
        which.at(static_cast<std::size_t>(k % 2)),
        chunk_shape(block, rows_in_chunk(plan, k, block_ndim), side.leading ? agreement.size : 0));
  };
  pipeline(
      plan.chunks, stream,
      [&](std::int64_t k) {
        if (!send.active) return;
        chunk_view(send.array, plan, k, send.leading ? 1 : 0)
            .copy_to_host(slot_of(send_slots, send, k), stream);
      },
      [&](std::int64_t k) {
        const auto s = static_cast<std::size_t>(k % 2);
        MPI_Request request = MPI_REQUEST_NULL;
        check_mpi(call(send_slots.at(s).data(), recv_slots.at(s).data(),
                       rows_in_chunk(plan, k, block_ndim), agreement.blocking ? nullptr : &request),
                  name);
        return request;
      },
      [&](std::int64_t k) {
        if (!recv.active) return;
        chunk_view(recv.array, plan, k, recv.leading ? 1 : 0)
            .copy_to_device(slot_of(recv_slots, recv, k), stream);
      });
}

namespace {

void run_whole_direct(const char* name, const Agreement& agreement, const Side& send,
                      const Side& recv, const Stream& stream, const WholeCall& call) {
  DeviceArray in;
  if (send.active) in = dense_copy(send.array);
  DeviceArray out;
  if (recv.active) out = dense_target(recv.array);
  if (in.data() != nullptr && in.data() == out.data()) in = in.copy(Order::C, stream);
  stream.synchronize();
  run_direct(agreement.blocking ? Path::DirectBlocking : Path::DirectNonblocking, name,
             [&](MPI_Request* request) { return call(in.data(), out.data(), request); });
  if (recv.active && out.data() != recv.array.data()) recv.array.copy_to_device(out, stream);
  stream.synchronize();
}

// A page-locked C-contiguous copy's place for all of `array` (empty when unused).
HostArray whole_slot(const DeviceArray& array, bool used) {
  if (!used) return {};
  const Plan plan = make_plan(array, array.ndim() == 0 ? 1 : array.shape()[0]);
  return dense_view(staging_slot(array, plan), array.shape());
}

}  // namespace

void run_whole(const char* name, Path path, const Agreement& agreement, const Side& send,
               const Side& recv, const WholeCall& call) {
  const Stream stream = send.active ? send.array.stream() : recv.array.stream();
  if (send.active && recv.active && recv.array.stream() != stream)
    recv.array.stream().synchronize();
  if (path != Path::Staged) {
    run_whole_direct(name, agreement, send, recv, stream, call);
    return;
  }
  const HostArray in = whole_slot(send.array, send.active);
  const HostArray out = whole_slot(recv.array, recv.active);
  if (send.active) send.array.copy_to_host(in, stream);
  stream.synchronize();
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(call(in.data(), out.data(), agreement.blocking ? nullptr : &request), name);
  wait_request(request, name);
  if (recv.active) recv.array.copy_to_device(out, stream);
  stream.synchronize();
}

bool check_counts(Descriptor& mine, const char* what, std::span<const std::int64_t> counts,
                  int size) {
  if (counts.size() != static_cast<std::size_t>(size)) {
    fail(mine,
         fmt::format("{} has {} entries, expected one per rank ({})", what, counts.size(), size));
    return false;
  }
  bool valid = true;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      fail(mine, fmt::format("{}[{}] is {} (negative)", what, r, counts[r]));
      valid = false;
    }
  }
  return valid;
}

std::int64_t row_elements(std::span<const std::int64_t> block) {
  std::int64_t n = 1;
  for (std::size_t d = 1; d < block.size(); ++d) n *= block[d];
  return n;
}

std::string shape_text(const DeviceArray& array) {
  return fmt::format("{} {}", array.dtype().name(), layout::format_tuple(array.shape()));
}

}  // namespace devmem::mpi::detail

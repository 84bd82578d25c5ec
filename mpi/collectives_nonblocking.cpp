// devmem::mpi's non-blocking collectives ibarrier, ibcast, iallreduce and iallgather: operations
// of the progress engine (mpi/progress.hpp) whose advance() never blocks. The descriptor exchange
// is the operation's first step (a mismatch fails the operation: wait() throws it on every rank);
// then, chunk by chunk of the agreed plan, the copy into a page-locked slot (or a dense device
// array), the MPI_I* collective, and the copy back, each step polled (events, MPI_Test).
#include "collective_agreement.hpp"

#include <devmem/layout.hpp>
#include <devmem/memory.hpp>
#include <devmem/mpi.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace devmem::mpi {

using namespace detail;

namespace {

class BlocksOperation final : public Operation {
 public:
  // `block`: the per-rank block (`send`'s and `recv`'s shapes as for run_blocks); `call` makes the
  // non-blocking MPI call of one chunk. A barrier passes inactive sides: it ends with the
  // agreement.
  BlocksOperation(const char* name, MPI_Comm comm, Descriptor mine, int plan_rank, Path path,
                  Shape block, Side send, Side recv, BlockCall call)
      : name_(name),
        comm_(comm),
        mine_(mine),
        plan_rank_(plan_rank),
        path_(path),
        block_(std::move(block)),
        send_(std::move(send)),
        recv_(std::move(recv)),
        call_(std::move(call)) {
    check_mpi(MPI_Comm_rank(comm, &rank_), "MPI_Comm_rank");
    enqueue_collective(comm_, this);
    if (collective_turn(comm_, this)) {
      request_ = start_agreement(name_, comm_, mine_, all_);
      state_ = State::Agreeing;
    }
    stream_ = send_.active ? send_.array.stream() : recv_.array.stream();
    // Work enqueued on the output's own stream comes before the copies into it.
    if (send_.active && recv_.active && recv_.array.stream() != stream_) {
      stream_.wait(recv_.array.stream().record());
    }
  }
  ~BlocksOperation() override { dequeue_collective(comm_, this); }
  BlocksOperation(const BlocksOperation&) = delete;
  BlocksOperation& operator=(const BlocksOperation&) = delete;
  BlocksOperation(BlocksOperation&&) = delete;
  BlocksOperation& operator=(BlocksOperation&&) = delete;

  bool advance() override {
    while (true) {
      const Step step = this->step();
      if (step != Step::Next) return step == Step::Done;
    }
  }

  // A collective request must not be cancelled or freed (MPI): a pending one keeps the buffers.
  bool abandon() noexcept override {
    dequeue_collective(comm_, this);
    try {
      if (event_.has_value()) event_->synchronize();
    } catch (...) {
      // The copy's own error is the operation's; the buffers must only outlive the copy.
    }
    return request_ != MPI_REQUEST_NULL;
  }

 private:
  enum class State { Queued, Agreeing, CopyIn, WaitIn, Transfer, WaitOut };
  enum class Step { Blocked, Next, Done };

  // One state's work: blocked (waiting for MPI, a copy or its turn), next, or done.
  Step step() {
    switch (state_) {
      case State::Queued:
        // Earlier non-blocking collectives on the communicator post their calls first.
        if (!collective_turn(comm_, this)) return Step::Blocked;
        request_ = start_agreement(name_, comm_, mine_, all_);
        state_ = State::Agreeing;
        return Step::Next;
      case State::Agreeing:
        return agreed();
      case State::CopyIn:
        copy_in();
        event_ = stream_.record();
        state_ = State::WaitIn;
        return Step::Next;
      case State::WaitIn:
        return copied_in();
      case State::Transfer:
        if (!test_request(request_, name_)) return Step::Blocked;
        copy_out();
        event_ = stream_.record();
        state_ = State::WaitOut;
        return Step::Next;
      case State::WaitOut:
        if (event_.has_value() && !event_->query()) return Step::Blocked;
        if (++chunk_ == agreement_.plan.chunks) return Step::Done;
        state_ = State::CopyIn;
        return Step::Next;
    }
    return Step::Done;
  }

  Step agreed() {
    if (!test_request(request_, "MPI_Iallgather (devmem::mpi descriptors)")) return Step::Blocked;
    agreement_ = check_agreement(name_, all_, rank_, plan_rank_);
    if ((!send_.active && !recv_.active && !recv_.discard) || agreement_.plan.chunks == 0) {
      dequeue_collective(comm_, this);  // a barrier, or nothing to move
      return Step::Done;
    }
    make_slots();
    state_ = State::CopyIn;
    return Step::Next;
  }

  Step copied_in() {
    if (event_.has_value() && !event_->query()) return Step::Blocked;
    check_mpi(call_(send_.active ? in_.data() : nullptr,
                    recv_.active || recv_.discard ? out_.data() : nullptr, rows(), &request_),
              name_);
    if (chunk_ + 1 == agreement_.plan.chunks) dequeue_collective(comm_, this);  // the last call
    state_ = State::Transfer;
    return Step::Next;
  }

  [[nodiscard]] std::int64_t rows() const {
    return rows_in_chunk(agreement_.plan, chunk_, static_cast<int>(block_.size()));
  }
  [[nodiscard]] std::int64_t leading(const Side& side) const {
    return side.leading ? agreement_.size : 0;
  }

  void make_slots() {
    if (path_ != Path::Staged) return;
    const Plan& plan = agreement_.plan;
    if (send_.active) {
      send_slot_ = send_.leading ? staging_slot(send_.array[0], plan, agreement_.size)
                                 : staging_slot(send_.array, plan);
    }
    if (recv_.active || recv_.discard) {
      recv_slot_ = recv_.leading ? staging_slot(recv_.array[0], plan, agreement_.size)
                                 : staging_slot(recv_.array, plan);
    }
  }

  void copy_in() {
    const Plan& plan = agreement_.plan;
    const Shape shape_in = chunk_shape(block_, rows(), leading(send_));
    const Shape shape_out = chunk_shape(block_, rows(), leading(recv_));
    if (path_ == Path::Staged) {
      if (send_.active) {
        in_host_ = dense_view(send_slot_, shape_in);
        chunk_view(send_.array, plan, chunk_, send_.leading ? 1 : 0)
            .copy_to_host(in_host_, stream_);
      }
      if (recv_.active || recv_.discard) out_host_ = dense_view(recv_slot_, shape_out);
      in_ = Buffer{in_host_.data()};
      out_ = Buffer{out_host_.data()};
      return;
    }
    DeviceArray in;
    if (send_.active) in = dense_copy(chunk_view(send_.array, plan, chunk_, send_.leading ? 1 : 0));
    if (recv_.active) {
      target_ = chunk_view(recv_.array, plan, chunk_, recv_.leading ? 1 : 0);
      out_device_ = dense_target(target_);
      if (in.data() != nullptr && in.data() == out_device_.data()) in = in.copy(Order::C, stream_);
    }
    in_device_ = in;
    in_ = Buffer{in_device_.data()};
    out_ = Buffer{out_device_.data()};
  }

  void copy_out() {
    if (!recv_.active) return;
    if (path_ == Path::Staged) {
      chunk_view(recv_.array, agreement_.plan, chunk_, recv_.leading ? 1 : 0)
          .copy_to_device(out_host_, stream_);
    } else if (out_device_.data() != target_.data()) {
      target_.copy_to_device(out_device_, stream_);
    }
  }

  struct Buffer {
    void* pointer = nullptr;
    [[nodiscard]] void* data() const { return pointer; }
  };

  const char* name_;
  MPI_Comm comm_;
  Descriptor mine_;
  std::vector<Descriptor> all_;
  int rank_ = 0;
  int plan_rank_;
  Path path_;
  Shape block_;
  Side send_;
  Side recv_;
  BlockCall call_;
  Stream stream_;
  Agreement agreement_;
  State state_ = State::Queued;
  MPI_Request request_ = MPI_REQUEST_NULL;
  std::optional<Event> event_;
  std::int64_t chunk_ = 0;
  HostArray send_slot_;
  HostArray recv_slot_;
  HostArray in_host_;
  HostArray out_host_;
  DeviceArray in_device_;
  DeviceArray out_device_;
  DeviceArray target_;
  Buffer in_;
  Buffer out_;
};

Descriptor describe_nonblocking(const DeviceArray& array, std::span<const std::int64_t> block,
                                Path* path) {
  Descriptor mine{.wire = describe_block(array.dtype(), block)};
  const Transport transport = transport_for(array);
  *path = nonblocking_path(array, transport);
  mine.wire.chunk_rows = preferred_block_rows(
      block, array.itemsize(), *path == Path::Staged ? Transport::Staged : Transport::DeviceDirect);
  return mine;
}

Request launch(const char* name, MPI_Comm comm, const Descriptor& mine, int plan_rank, Path path,
               Shape block, Side send, Side recv, BlockCall call) {
  auto op = std::make_shared<BlocksOperation>(name, comm, mine, plan_rank, path, std::move(block),
                                              std::move(send), std::move(recv), std::move(call));
  start(op);
  return Operation::make_request(std::move(op));
}

}  // namespace

Request ibarrier(MPI_Comm comm) {
  const char* name = "mpi::ibarrier";
  static_cast<void>(rank_and_size(name, comm));
  return launch(name, comm, Descriptor{}, 0, Path::Staged, {}, Side{}, Side{},
                [](const void*, void*, std::int64_t, MPI_Request*) { return MPI_SUCCESS; });
}

Request ibcast(const DeviceArray& array, int root, MPI_Comm comm) {
  const char* name = "mpi::ibcast";
  const auto [rank, size] = rank_and_size(name, comm);
  Path path = Path::Staged;
  Descriptor mine = describe_nonblocking(array, array.shape(), &path);
  mine.root = root;
  if (root < 0 || root >= size) {
    fail(mine, fmt::format("root {} is not in the communicator (size {})", root, size));
  } else if (rank != root) {
    if (const auto problem = destination_problem(array)) fail(mine, *problem);
  }
  const bool is_root = rank == root;
  const std::int64_t row_bytes = array.ndim() == 0
                                     ? array.itemsize()
                                     : array.nbytes() / std::max<std::int64_t>(array.shape()[0], 1);
  return launch(name, comm, mine, root, path, array.shape(),
                Side{.array = array, .active = is_root}, Side{.array = array, .active = !is_root},
                [=](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
                  void* buffer = is_root ? const_cast<void*>(in) : out;  // NOLINT: MPI's API
                  return MPI_Ibcast(buffer, checked_int(rows * row_bytes, "a chunk's byte count"),
                                    MPI_BYTE, root, comm, request);
                });
}

Request iallreduce(const DeviceArray& input, const DeviceArray& output, ReduceOp op,
                   MPI_Comm comm) {
  const char* name = "mpi::iallreduce";
  static_cast<void>(rank_and_size(name, comm));
  Path path = Path::Staged;
  Descriptor mine = describe_nonblocking(output, output.shape(), &path);
  mine.reduction = static_cast<std::int32_t>(op);
  if (const auto problem = allreduce_problem(input, output, op)) fail(mine, *problem);
  const MPI_Datatype type = reduce_type(output.dtype(), op).value_or(MPI_DATATYPE_NULL);
  const MPI_Op mpi_reduction = mpi_op(op);
  std::int64_t per_row = 1;
  for (int d = 1; d < output.ndim(); ++d) per_row *= output.shape()[static_cast<std::size_t>(d)];
  return launch(name, comm, mine, 0, path, output.shape(), Side{.array = input, .active = true},
                Side{.array = output, .active = true},
                [=](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
                  return MPI_Iallreduce(in, out,
                                        checked_int(rows * per_row, "a chunk's element count"),
                                        type, mpi_reduction, comm, request);
                });
}

Request iallgather(const DeviceArray& input, const DeviceArray& output, MPI_Comm comm) {
  const char* name = "mpi::iallgather";
  const auto [rank, size] = rank_and_size(name, comm);
  static_cast<void>(rank);
  Path path = Path::Staged;
  Descriptor mine = describe_nonblocking(input, input.shape(), &path);
  if (const auto problem = allgather_problem(input, output, size)) fail(mine, *problem);
  const std::int64_t row_bytes = input.ndim() == 0
                                     ? input.itemsize()
                                     : input.nbytes() / std::max<std::int64_t>(input.shape()[0], 1);
  return launch(name, comm, mine, 0, path, input.shape(), Side{.array = input, .active = true},
                Side{.array = output, .leading = true, .active = true},
                [=](const void* in, void* out, std::int64_t rows, MPI_Request* request) {
                  const int bytes = checked_int(rows * row_bytes, "a chunk's byte count");
                  return MPI_Iallgather(in, bytes, MPI_BYTE, out, bytes, MPI_BYTE, comm, request);
                });
}

}  // namespace devmem::mpi

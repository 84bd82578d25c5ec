// devmem::mpi under mpirun -np 2 and -np 4 (host backend). Every rank runs every test case in the
// same order: each case is collective. Each transport is tested: staged (the host backend's
// default) and device_direct (the host backend's device memory is host memory).
#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include "mpi_test_support.hpp"

#include <unistd.h>

#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace dm = devmem::mpi;
using mpi_test::rank;
using mpi_test::Settings;
using mpi_test::size;

namespace {

// Staged with chunks smaller than one row (several chunks, both slots reused), staged in one
// chunk, and device_direct.
const std::vector<std::pair<dm::Transport, std::int64_t>> kModes{
    {dm::Transport::Staged, 16},
    {dm::Transport::Staged, std::int64_t{1} << 20},
    {dm::Transport::DeviceDirect, std::int64_t{1} << 20}};

std::string mode_name(const std::pair<dm::Transport, std::int64_t>& mode) {
  return std::string(dm::to_string(mode.first)) + " chunk " + std::to_string(mode.second);
}

// A 2-d array whose element (i, j) is value(rank, i, j).
double value(int r, std::int64_t i, std::int64_t j) {
  return 1000.0 * r + 10.0 * static_cast<double>(i) + static_cast<double>(j);
}

devmem::DeviceArray filled(int r, std::int64_t rows, std::int64_t cols,
                           const devmem::Stream& stream = {}) {
  std::vector<double> host(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j)
      host[static_cast<std::size_t>(i * cols + j)] = value(r, i, j);
  }
  return devmem::to_device(devmem::HostArray::view(host).reshape({rows, cols}), stream);
}

}  // namespace

TEST_CASE("mpi: transport settings", "[mpi]") {
  const devmem::DeviceArray a = devmem::device_array<double>({4});
  CHECK(dm::transport() == dm::Transport::Automatic);
  CHECK_FALSE(dm::device_aware("host"));
  CHECK(dm::transport_for(a) == dm::Transport::Staged);  // the host backend stages by default
  dm::set_transport(dm::Transport::DeviceDirect);
  CHECK(dm::transport_for(a) == dm::Transport::DeviceDirect);
  dm::set_transport(dm::Transport::Automatic);
  CHECK(dm::parse_transport("staged") == dm::Transport::Staged);
  CHECK_THROWS_WITH(dm::parse_transport("fast"), Catch::Contains("unknown transport 'fast'") &&
                                                     Catch::Contains("device_direct"));
  CHECK_THROWS_AS(dm::set_staging_chunk_bytes(0), devmem::InvalidArgument);
}

TEST_CASE("mpi: halo exchange of the strided edge columns of a 2-d array", "[mpi]") {
  const int me = rank();
  const int n = size();
  const int left = (me + n - 1) % n;
  const int right = (me + 1) % n;
  constexpr std::int64_t rows = 7;
  constexpr std::int64_t cols = 6;
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode.first, mode.second);
      const devmem::DeviceArray grid = filled(me, rows, cols);
      // Columns 1 and cols-2 are the edges of this rank's interior; 0 and cols-1 are ghosts.
      const devmem::DeviceArray first = grid.index(1, 1);
      const devmem::DeviceArray last = grid.index(1, cols - 2);
      REQUIRE(first.strides() == devmem::Strides{cols * 8});
      std::vector<dm::Request> requests;
      requests.push_back(dm::irecv(grid.index(1, 0), left, 1));
      requests.push_back(dm::irecv(grid.index(1, cols - 1), right, 2));
      requests.push_back(dm::isend(last, right, 1));
      requests.push_back(dm::isend(first, left, 2));
      dm::wait_all(requests);
      for (const dm::Request& r : requests) CHECK(r.done());
      const devmem::HostArray h = grid.copy_to_host();
      for (std::int64_t i = 0; i < rows; ++i) {
        CHECK(h.at<double>(i, 0) == value(left, i, cols - 2));
        CHECK(h.at<double>(i, cols - 1) == value(right, i, 1));
        for (std::int64_t j = 1; j < cols - 1; ++j) CHECK(h.at<double>(i, j) == value(me, i, j));
      }
    }
  }
}

TEST_CASE("mpi: blocking send and recv of a strided view into another layout", "[mpi]") {
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;  // the last rank of an odd count has no partner
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode.first, mode.second);
      // Sender: every other row of a (8, 5) array, reversed columns. Receiver: a transpose.
      const devmem::DeviceArray source = filled(me, 8, 5).slice(0, 0, {}, 2).slice(1, {}, {}, -1);
      const devmem::DeviceArray destination = devmem::device_array<double>({5, 4}).T();
      REQUIRE(source.shape() == destination.shape());
      if (me % 2 == 0) {
        dm::send(source, peer, 3);
        dm::recv(destination, peer, 4);
      } else {
        dm::recv(destination, peer, 3);
        dm::send(source, peer, 4);
      }
      const devmem::HostArray h = destination.copy_to_host();
      for (std::int64_t i = 0; i < 4; ++i) {
        for (std::int64_t j = 0; j < 5; ++j) CHECK(h.at<double>(i, j) == value(peer, 2 * i, 4 - j));
      }
    }
  }
}

TEST_CASE("mpi: isend and irecv of arrays on two streams", "[mpi]") {
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;  // the last rank of an odd count has no partner
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode.first, mode.second);
      const devmem::Stream s1 = devmem::stream();
      const devmem::Stream s2 = devmem::stream();
      const devmem::DeviceArray a =
          devmem::device_array<std::int32_t>({64, 3}, devmem::Order::C, s1);
      const devmem::DeviceArray b = devmem::device_array<float>({33}, devmem::Order::C, s2);
      // Work enqueued on the arrays' streams before the sends is sent (the transfers follow it).
      a.fill(std::int32_t{100 + me}, s1);
      b.fill(0.5f + static_cast<float>(me), s2);
      const devmem::DeviceArray ra =
          devmem::device_array<std::int32_t>({64, 3}, devmem::Order::C, s1);
      const devmem::DeviceArray rb =
          devmem::device_array<float>({66}, devmem::Order::C, s2).slice(0, 0, {}, 2);
      dm::Request recv_a = dm::irecv(ra, peer, 5);
      dm::Request recv_b = dm::irecv(rb, peer, 6);
      dm::Request send_b = dm::isend(b, peer, 6);
      dm::Request send_a = dm::isend(a, peer, 5);
      while (!recv_b.test()) {
      }
      CHECK(recv_b.done());
      recv_a.wait();
      send_a.wait();
      send_b.wait();
      for (const auto v : ra.to_vector<std::int32_t>()) CHECK(v == 100 + peer);
      for (const auto v : rb.to_vector<float>()) CHECK(v == 0.5f + static_cast<float>(peer));
    }
  }
}

TEST_CASE("mpi: a destroyed request completes its operation", "[mpi]") {
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;  // the last rank of an odd count has no partner
  const devmem::DeviceArray out = devmem::to_device(std::vector<std::int64_t>{me, me * 2, me * 3});
  const devmem::DeviceArray in = devmem::device_array<std::int64_t>({3});
  {
    // The array handles given to the operations go away first: the operations keep the memory.
    const dm::Request r = dm::irecv(devmem::DeviceArray(in), peer, 7);
    const dm::Request s = dm::isend(devmem::DeviceArray(out), peer, 7);
  }
  CHECK(in.to_vector<std::int64_t>() == std::vector<std::int64_t>{peer, peer * 2, peer * 3});
}

namespace {

// What `body` writes to this process's stderr (file descriptor 2).
std::string stderr_of(const std::function<void()>& body) {
  std::fflush(stderr);
  char path[] = "/tmp/devmem_mpi_stderr_XXXXXX";
  const int file = mkstemp(path);
  REQUIRE(file >= 0);
  const int saved = dup(2);
  dup2(file, 2);
  try {
    body();
  } catch (...) {
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(file);
    unlink(path);
    throw;
  }
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  return text;
}

}  // namespace

TEST_CASE("mpi: a dropped request's error goes to stderr", "[mpi][errors]") {
  // A Request destroyed without wait() used to drop its error silently (a mismatch left the
  // destination untouched and nothing was reported).
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;
  const bool sender = me % 2 == 0;
  // Above eager_limit_bytes: the handshake, so both ranks learn of the mismatch.
  const devmem::DeviceArray d = devmem::device_array<double>({1000});
  const devmem::DeviceArray f = devmem::device_array<float>({1000});
  const std::string said = stderr_of(
      [&] { const dm::Request r = sender ? dm::isend(d, peer, 21) : dm::irecv(f, peer, 21); });
  CHECK_THAT(said, Catch::Contains("destroyed without wait() failed") &&
                       Catch::Contains("float64 (1000,)") && Catch::Contains("float32 (1000,)"));
  // Nothing is left in flight: a matching exchange on the same tag works afterwards.
  if (sender) {
    dm::send(d, peer, 21);
  } else {
    dm::recv(devmem::device_array<double>({1000}), peer, 21);
  }
}

TEST_CASE("mpi: a request pending while an exception propagates is cancelled, not waited for",
          "[mpi][errors]") {
  // The reproducer's shape: the even rank posts a receive (tag 42) that its peer answers only
  // after receiving the even rank's tag-41 message, then fails before sending it. Waiting in
  // ~Request during the unwinding hung both ranks (and the handler that would call MPI_Abort never
  // ran); without the fix this case hangs until CTest's timeout. Here the handler goes on with
  // the exchange instead, so the job ends cleanly.
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;
  const devmem::DeviceArray first = devmem::to_device(std::vector<double>(8, 1.0));
  const devmem::DeviceArray second = devmem::to_device(std::vector<double>(8, 2.0));
  if (me % 2 == 0) {
    bool caught = false;
    const std::string said = stderr_of([&] {
      try {
        const dm::Request r = dm::irecv(devmem::device_array<double>({8}), peer, 42);
        throw std::runtime_error("failed before its tag-41 send");
      } catch (const std::runtime_error&) {
        caught = true;
      }
    });
    CHECK(caught);
    CHECK_THAT(said, Catch::Contains("exception propagated") && Catch::Contains("cancelled"));
    // The cancelled receive takes nothing: a new one gets the peer's tag-42 message.
    dm::send(first, peer, 41);
    const devmem::DeviceArray got = devmem::device_array<double>({8});
    dm::recv(got, peer, 42);
    CHECK(got.to_vector<double>() == std::vector<double>(8, 2.0));
  } else {
    const devmem::DeviceArray got = devmem::device_array<double>({8});
    dm::recv(got, peer, 41);
    CHECK(got.to_vector<double>() == std::vector<double>(8, 1.0));
    dm::send(second, peer, 42);
  }
}

TEST_CASE("mpi: allreduce of a strided view", "[mpi]") {
  const int me = rank();
  const int n = size();
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode.first, mode.second);
      const devmem::DeviceArray grid = filled(me, 8, 6);
      const devmem::DeviceArray view = grid.slice(0, 0, {}, 2).slice(1, 1, {}, 2);  // (4, 3)
      dm::allreduce(view, dm::ReduceOp::Sum);
      const devmem::HostArray h = grid.copy_to_host();
      double rank_sum = 0;
      for (int r = 0; r < n; ++r) rank_sum += 1000.0 * r;
      for (std::int64_t i = 0; i < 8; ++i) {
        for (std::int64_t j = 0; j < 6; ++j) {
          const bool in_view = i % 2 == 0 && j % 2 == 1;
          const double expected =
              in_view ? rank_sum + n * (10.0 * static_cast<double>(i) + static_cast<double>(j))
                      : value(me, i, j);
          CHECK(h.at<double>(i, j) == expected);
        }
      }
      // Into another array (a transposed layout), min and max.
      const devmem::DeviceArray source = filled(me, 3, 4);
      const devmem::DeviceArray low = devmem::device_array<double>({4, 3}).T();
      const devmem::DeviceArray high = devmem::device_array<double>({3, 4});
      dm::allreduce(source, low, dm::ReduceOp::Min);
      dm::allreduce(source, high, dm::ReduceOp::Max);
      const devmem::HostArray l = low.copy_to_host();
      const devmem::HostArray m = high.copy_to_host();
      for (std::int64_t i = 0; i < 3; ++i) {
        for (std::int64_t j = 0; j < 4; ++j) {
          CHECK(l.at<double>(i, j) == value(0, i, j));
          CHECK(m.at<double>(i, j) == value(n - 1, i, j));
        }
      }
    }
  }
}

TEST_CASE("mpi: bcast and allgather of strided views", "[mpi]") {
  const int me = rank();
  const int n = size();
  const int root = n - 1;
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode.first, mode.second);
      const devmem::DeviceArray grid = filled(me, 6, 5);
      const devmem::DeviceArray column = grid.index(1, 2);  // stride 40
      dm::bcast(column, root);
      const devmem::HostArray h = grid.copy_to_host();
      for (std::int64_t i = 0; i < 6; ++i) {
        for (std::int64_t j = 0; j < 5; ++j) {
          CHECK(h.at<double>(i, j) == (j == 2 ? value(root, i, j) : value(me, i, j)));
        }
      }
      // allgather of a reversed strided row into a transposed (strided) output.
      const devmem::DeviceArray row = filled(me, 2, 7).index(1, 0).slice(0, {}, {}, -1);  // (2,)
      const devmem::DeviceArray gathered = devmem::device_array<double>({2, n}).T();      // (n, 2)
      dm::allgather(row, gathered);
      const devmem::HostArray g = gathered.copy_to_host();
      for (int r = 0; r < n; ++r) {
        CHECK(g.at<double>(r, 0) == value(r, 1, 0));
        CHECK(g.at<double>(r, 1) == value(r, 0, 0));
      }
      // A 0-d array.
      const devmem::DeviceArray scalar = filled(me, 1, 1).index(0, 0).index(0, 0);
      const devmem::DeviceArray all = devmem::device_array<double>({n});
      dm::allgather(scalar, all);
      const std::vector<double> values = all.to_vector<double>();
      for (int r = 0; r < n; ++r) CHECK(values[static_cast<std::size_t>(r)] == value(r, 0, 0));
    }
  }
}

TEST_CASE("mpi: a shape or dtype mismatch is an error on both ranks", "[mpi][errors]") {
  // Messages of at most eager_limit_bytes are checked by the receiver only: test_mpi_p2p.cpp.
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;  // the last rank of an odd count has no partner
  const bool sender = me % 2 == 0;
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode.first, mode.second);
      // Above eager_limit_bytes (the handshake). Shape: (40, 50) sent, (40, 60) expected.
      const devmem::DeviceArray small = devmem::device_array<double>({40, 50});
      const devmem::DeviceArray wide = devmem::device_array<double>({40, 60});
      if (sender) {
        CHECK_THROWS_WITH(dm::send(small, peer, 8),
                          Catch::Contains("mismatch") &&
                              Catch::Contains("sends float64 (40, 50)") &&
                              Catch::Contains("expects float64 (40, 60)"));
      } else {
        CHECK_THROWS_WITH(dm::recv(wide, peer, 8), Catch::Contains("mismatch") &&
                                                       Catch::Contains("sends float64 (40, 50)") &&
                                                       Catch::Contains("expects float64 (40, 60)"));
      }
      // Dtype: float64 sent, float32 expected; non-blocking, the error comes from wait().
      const devmem::DeviceArray d = devmem::device_array<double>({1000});
      const devmem::DeviceArray f = devmem::device_array<float>({1000});
      dm::Request r = sender ? dm::isend(d, peer, 9) : dm::irecv(f, peer, 9);
      CHECK_THROWS_AS(r.wait(), devmem::InvalidArgument);
      CHECK(r.done());
      dm::Request again = sender ? dm::isend(d, peer, 9) : dm::irecv(f, peer, 9);
      CHECK_THROWS_WITH(again.wait(),
                        Catch::Contains("float64 (1000,)") && Catch::Contains("float32 (1000,)"));
      // Nothing is left in flight: a matching exchange on the same tag works afterwards.
      const devmem::DeviceArray ok = devmem::to_device(std::vector<float>(10, 2.5f));
      if (sender) {
        dm::send(ok, peer, 9);
      } else {
        const devmem::DeviceArray got = devmem::device_array<float>({10});
        dm::recv(got, peer, 9);
        CHECK(got.to_vector<float>() == std::vector<float>(10, 2.5f));
      }
    }
  }
}

TEST_CASE("mpi: ranks calling different collectives get an error on every rank", "[mpi][errors]") {
  // Reproducer collective_kind.cpp: bcast(root 1) against allreduce(sum) passed the descriptor
  // check (the root and the reduction share a field), then returned wrong data on one rank and
  // hung the other; bcast against allgather returned on both.
  const int me = rank();
  const bool even = me % 2 == 0;
  const devmem::DeviceArray a = devmem::to_device(std::vector<double>(4, 1.0 + me));
  const devmem::DeviceArray gathered = devmem::device_array<double>({size(), 4});
  const std::vector<double> before = a.to_vector<double>();
  if (size() > 1) {
    const auto call = [&] {
      if (even) {
        dm::bcast(a, 1);
      } else {
        dm::allreduce(a, dm::ReduceOp::Sum);
      }
    };
    CHECK_THROWS_WITH(call(), Catch::Contains("called mpi::") &&
                                  Catch::Contains("must call the same collective"));
    const auto call_gather = [&] {
      if (even) {
        dm::bcast(a, 0);
      } else {
        dm::allgather(a, gathered);
      }
    };
    CHECK_THROWS_AS(call_gather(), devmem::InvalidArgument);
    CHECK(a.to_vector<double>() == before);  // nothing was moved
  }
  // The communicator is usable afterwards: the same collective on every rank works.
  dm::allreduce(a, dm::ReduceOp::Max);
  CHECK(a.to_vector<double>() == std::vector<double>(4, static_cast<double>(size())));
}

TEST_CASE("mpi: a broadcast destination is refused on both ranks", "[mpi][errors]") {
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;  // the last rank of an odd count has no partner
  // Above eager_limit_bytes, so that the handshake tells the sender.
  const devmem::DeviceArray source = devmem::device_array<double>({40, 30});
  // A (40, 30) view whose rows all alias one row (an imported broadcast): receiving into it would
  // write elements twice.
  const devmem::DeviceArray base = devmem::device_array<double>({30});
  devmem::ArrayInterface iface = base.array_interface();
  iface.shape = {40, 30};
  iface.strides = devmem::Strides{0, 8};
  const devmem::DeviceArray zero_stride = devmem::as_device_array(iface, base.owner());
  if (me % 2 == 0) {
    CHECK_THROWS_WITH(dm::send(source, peer, 10), Catch::Contains("the receiver cannot receive") &&
                                                      Catch::Contains("stride 0"));
  } else {
    CHECK_THROWS_WITH(dm::recv(zero_stride, peer, 10), Catch::Contains("stride 0"));
  }
}

TEST_CASE("mpi: collectives check shapes and dtypes on every rank", "[mpi][errors]") {
  const int me = rank();
  const int n = size();
  // Rank 1 has another shape: every rank throws, naming rank 1's and rank 0's arrays.
  const devmem::DeviceArray a = devmem::device_array<double>({me == 1 ? 5 : 4});
  CHECK_THROWS_WITH(dm::allreduce(a, dm::ReduceOp::Sum),
                    Catch::Contains("rank 1 has float64 (5,), rank 0 has float64 (4,)"));
  // Rank 0 has another dtype.
  const devmem::DeviceArray b =
      me == 0 ? devmem::device_array<float>({4}) : devmem::device_array<double>({4});
  CHECK_THROWS_WITH(dm::bcast(b, 0), Catch::Contains("float64 (4,), rank 0 has float32 (4,)"));
  // A reduction MPI cannot do (complex min) is refused on every rank.
  const devmem::DeviceArray c = devmem::device_array<std::complex<double>>({2});
  CHECK_THROWS_WITH(dm::allreduce(c, dm::ReduceOp::Min),
                    Catch::Contains("rank 0: MPI cannot reduce dtype complex128 with min"));
  // A wrong allgather output on the last rank only.
  const devmem::DeviceArray in = devmem::device_array<double>({2});
  const devmem::DeviceArray out = devmem::device_array<double>({me == n - 1 ? n + 1 : n, 2});
  CHECK_THROWS_WITH(dm::allgather(in, out),
                    Catch::Contains("rank " + std::to_string(n - 1) + ": the output is float64"));
  // A root outside the communicator.
  CHECK_THROWS_WITH(dm::bcast(in, n), Catch::Contains("root " + std::to_string(n) + " is not in"));
  // Afterwards the collectives work.
  const devmem::DeviceArray ones = devmem::to_device(std::vector<double>{1.0, 2.0});
  dm::allreduce(ones, dm::ReduceOp::Sum);
  CHECK(ones.to_vector<double>() == std::vector<double>{1.0 * n, 2.0 * n});
}

TEST_CASE("mpi: a message that is not devmem's is refused by the receiver", "[mpi][errors]") {
  // A plain MPI message on the tag devmem::mpi::recv expects: every receive of a message start
  // takes any devmem message (header, shape, eager payload), so a small foreign message arrives
  // whole and is named, instead of truncating (which MPI's default handler turns into an abort).
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (me % 2 == 0) {
    std::vector<char> bytes(600, 'x');
    MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_CHAR, peer, 12, comm);
  } else {
    const devmem::DeviceArray a = devmem::to_device(std::vector<double>{4.0, 5.0});
    CHECK_THROWS_WITH(
        dm::recv(a, peer, 12, comm),
        Catch::Contains("mpi::recv from rank " + std::to_string(peer) + " (tag 12)") &&
            Catch::Contains("600 bytes that is not a devmem::mpi message"));
    CHECK(a.to_vector<double>() == std::vector<double>{4.0, 5.0});  // untouched
  }
  MPI_Comm_free(&comm);
}

TEST_CASE("mpi: bad arguments are refused before anything is sent", "[mpi][errors]") {
  const devmem::DeviceArray a = devmem::device_array<double>({2});
  CHECK_THROWS_WITH(dm::isend(a, size(), 0), Catch::Contains("rank " + std::to_string(size()) +
                                                             " is not in the communicator"));
  if (!dm::initialized()) {
    CHECK_THROWS_WITH(dm::irecv(a, 0, MPI_ANY_TAG),
                      Catch::Contains("MPI_ANY_TAG needs devmem::mpi::initialize()"));
    CHECK_THROWS_WITH(dm::send(a, 0, dm::max_tag() + 1),
                      Catch::Contains("tag " + std::to_string(dm::max_tag() + 1) + " is outside"));
  }
  CHECK_THROWS_WITH(dm::send(a, 0, -3), Catch::Contains("tag -3 is outside"));
  CHECK_THROWS_WITH(dm::send(a, 0, MPI_ANY_TAG), Catch::Contains("is outside"));
  CHECK_THROWS_AS(dm::recv(a, 0, 1, MPI_COMM_NULL), devmem::InvalidArgument);
}

int main(int argc, char** argv) {
  return mpi_test::run_catch(argc, argv, "devmem_mpi_tests");
}

// devmem::mpi's collectives beyond bcast/allreduce/allgather, the reductions, the non-blocking
// collectives and datatype_for, under mpirun -np 2, 3 and 4 (host backend). Every rank runs every
// case in the same order (each is collective) and checks its own results against closed forms or
// plain MPI on host buffers. Modes: staged in 16-byte chunks (several chunks, both slots), staged
// in one chunk, device_direct with MPI_I* (the host backend's choice) and device_direct with
// MPI's blocking collectives (the GPU backends' choice, forced by DEVMEM_MPI_DIRECT_COLLECTIVES).
#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include "mpi_test_support.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

namespace dm = devmem::mpi;
using mpi_test::rank;
using mpi_test::size;

namespace {

struct Mode {
  dm::Transport transport;
  std::int64_t chunk_bytes;
  const char* direct;  // DEVMEM_MPI_DIRECT_COLLECTIVES
};

const std::vector<Mode> kModes{{dm::Transport::Staged, 16, ""},
                               {dm::Transport::Staged, std::int64_t{1} << 20, ""},
                               {dm::Transport::DeviceDirect, std::int64_t{1} << 20, "nonblocking"},
                               {dm::Transport::DeviceDirect, std::int64_t{1} << 20, "blocking"}};

std::string mode_name(const Mode& mode) {
  return std::string(dm::to_string(mode.transport)) + " chunk " + std::to_string(mode.chunk_bytes) +
         " " + mode.direct;
}

// Sets a mode for a section; restores the defaults afterwards.
struct Settings {
  explicit Settings(const Mode& mode) {
    dm::set_transport(mode.transport);
    dm::set_staging_chunk_bytes(mode.chunk_bytes);
    setenv("DEVMEM_MPI_DIRECT_COLLECTIVES", mode.direct, 1);  // NOLINT(concurrency-mt-unsafe)
  }
  Settings(const Settings&) = delete;
  Settings& operator=(const Settings&) = delete;
  ~Settings() {
    dm::set_transport(dm::Transport::Automatic);
    dm::set_staging_chunk_bytes(std::int64_t{1} << 20);
    unsetenv("DEVMEM_MPI_DIRECT_COLLECTIVES");  // NOLINT(concurrency-mt-unsafe)
  }
};

double value(int r, std::int64_t i, std::int64_t j) {
  return 1000.0 * r + 10.0 * static_cast<double>(i) + static_cast<double>(j);
}

// A (rows, cols) float64 array with element (i, j) = value(r, i, j).
devmem::DeviceArray filled(int r, std::int64_t rows, std::int64_t cols) {
  std::vector<double> host(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j)
      host[static_cast<std::size_t>(i * cols + j)] = value(r, i, j);
  }
  return devmem::to_device(devmem::HostArray::view(host).reshape({rows, cols}));
}

// A strided (rows, cols) view with element (i, j) = value(r, i, j): every other row of a wider
// array, columns reversed.
devmem::DeviceArray strided(int r, std::int64_t rows, std::int64_t cols) {
  std::vector<double> host(static_cast<std::size_t>(2 * rows * (cols + 1)), -1.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < cols; ++j)
      host[static_cast<std::size_t>(2 * i * (cols + 1) + (cols - 1 - j))] = value(r, i, j);
  }
  const devmem::DeviceArray base =
      devmem::to_device(devmem::HostArray::view(host).reshape({2 * rows, cols + 1}));
  return base.slice(0, 0, {}, 2).slice(1, cols - 1, {}, -1).slice(1, 0, cols);
}

// A strided (rows, cols) float64 destination (a transpose).
devmem::DeviceArray transposed(std::int64_t rows, std::int64_t cols) {
  return devmem::device_array<double>({cols, rows}).T();
}

}  // namespace

TEST_CASE("collectives: reduce, scan and exscan of strided views", "[mpi]") {
  const int me = rank();
  const int n = size();
  const int root = n - 1;
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode);
      const devmem::DeviceArray in = strided(me, 5, 3);
      REQUIRE(in.to_vector<double>()[1] == value(me, 0, 1));
      const devmem::DeviceArray out = me == root ? transposed(5, 3) : devmem::DeviceArray{};
      dm::reduce(in, out, dm::ReduceOp::Sum, root);
      double ranks = 0;
      for (int r = 0; r < n; ++r) ranks += 1000.0 * r;
      if (me == root) {
        const devmem::HostArray h = out.copy_to_host();
        for (std::int64_t i = 0; i < 5; ++i) {
          for (std::int64_t j = 0; j < 3; ++j) {
            CHECK(h.at<double>(i, j) ==
                  ranks + n * (10.0 * static_cast<double>(i) + static_cast<double>(j)));
          }
        }
      }
      // In place on root, max.
      const devmem::DeviceArray own = filled(me, 4, 2);
      dm::reduce(own, me == 0 ? own : devmem::DeviceArray{}, dm::ReduceOp::Max, 0);
      if (me == 0) CHECK(own.to_vector<double>() == filled(n - 1, 4, 2).to_vector<double>());
      // scan and exscan (sum) into transposed outputs.
      const devmem::DeviceArray inclusive = transposed(5, 3);
      const devmem::DeviceArray exclusive = transposed(5, 3);
      exclusive.fill(-7.0);
      dm::scan(in, inclusive, dm::ReduceOp::Sum);
      dm::exscan(in, exclusive, dm::ReduceOp::Sum);
      const devmem::HostArray hi = inclusive.copy_to_host();
      const devmem::HostArray he = exclusive.copy_to_host();
      for (std::int64_t i = 0; i < 5; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) {
          double below = 0;
          for (int r = 0; r < me; ++r) below += value(r, i, j);
          CHECK(hi.at<double>(i, j) == below + value(me, i, j));
          CHECK(he.at<double>(i, j) == (me == 0 ? -7.0 : below));  // rank 0: unchanged
        }
      }
    }
  }
}

TEST_CASE("collectives: gather and scatter of strided views", "[mpi]") {
  const int me = rank();
  const int n = size();
  const int root = n / 2;
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode);
      const devmem::DeviceArray in = strided(me, 3, 4);
      // Root's output (n, 3, 4) with its axes permuted: strided.
      const devmem::DeviceArray out =
          me == root ? devmem::device_array<double>({4, 3, n}).transpose({2, 1, 0})
                     : devmem::DeviceArray{};
      dm::gather(in, out, root);
      if (me == root) {
        const devmem::HostArray h = out.copy_to_host();
        for (int r = 0; r < n; ++r) {
          for (std::int64_t i = 0; i < 3; ++i) {
            for (std::int64_t j = 0; j < 4; ++j) CHECK(h.at<double>(r, i, j) == value(r, i, j));
          }
        }
      }
      // scatter: root's (n, 2, 3) strided input; rank r receives block r into a transpose.
      const devmem::DeviceArray source =
          me == root ? strided(root, 2 * n, 3).reshape({n, 2, 3}) : devmem::DeviceArray{};
      const devmem::DeviceArray mine = transposed(2, 3);
      dm::scatter(source, mine, root);
      const devmem::HostArray h = mine.copy_to_host();
      for (std::int64_t i = 0; i < 2; ++i) {
        for (std::int64_t j = 0; j < 3; ++j)
          CHECK(h.at<double>(i, j) == value(root, 2 * me + i, j));
      }
    }
  }
}

TEST_CASE("collectives: gatherv and scatterv with rows per rank", "[mpi]") {
  const int me = rank();
  const int n = size();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) counts[static_cast<std::size_t>(r)] = r % 3;  // 0 rows included
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode);
      const std::int64_t rows = counts[static_cast<std::size_t>(me)];
      const devmem::DeviceArray in = strided(me, rows, 3);
      const devmem::DeviceArray out = me == 0 ? transposed(total, 3) : devmem::DeviceArray{};
      dm::gatherv(in, out, counts, 0);
      if (me == 0) {
        const devmem::HostArray h = out.copy_to_host();
        std::int64_t row = 0;
        for (int r = 0; r < n; ++r) {
          for (std::int64_t i = 0; i < counts[static_cast<std::size_t>(r)]; ++i, ++row) {
            for (std::int64_t j = 0; j < 3; ++j) CHECK(h.at<double>(row, j) == value(r, i, j));
          }
        }
      }
      const devmem::DeviceArray source = me == 0 ? strided(0, total, 3) : devmem::DeviceArray{};
      const devmem::DeviceArray part = transposed(rows, 3);
      dm::scatterv(source, part, counts, 0);
      std::int64_t first = 0;
      for (int r = 0; r < me; ++r) first += counts[static_cast<std::size_t>(r)];
      const devmem::HostArray h = part.copy_to_host();
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) CHECK(h.at<double>(i, j) == value(0, first + i, j));
      }
    }
  }
}

TEST_CASE("collectives: alltoall, alltoallv and reduce_scatter (block and counts)", "[mpi]") {
  const int me = rank();
  const int n = size();
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode);
      // input[s] = rows 2s, 2s+1 of strided(me, 2n, 3): block (2, 3) to rank s.
      const devmem::DeviceArray in = strided(me, 2 * n, 3).reshape({n, 2, 3});
      const devmem::DeviceArray out = devmem::device_array<double>({3, 2, n}).transpose({2, 1, 0});
      dm::alltoall(in, out);
      const devmem::HostArray h = out.copy_to_host();
      for (int s = 0; s < n; ++s) {
        for (std::int64_t i = 0; i < 2; ++i) {
          for (std::int64_t j = 0; j < 3; ++j)
            CHECK(h.at<double>(s, i, j) == value(s, 2 * me + i, j));
        }
      }
      // alltoallv: rank r sends (r + s) % 2 + 1 rows to rank s.
      std::vector<std::int64_t> send(static_cast<std::size_t>(n));
      std::vector<std::int64_t> recv(static_cast<std::size_t>(n));
      for (int s = 0; s < n; ++s) {
        send[static_cast<std::size_t>(s)] = (me + s) % 2 + 1;
        recv[static_cast<std::size_t>(s)] = (s + me) % 2 + 1;
      }
      const std::int64_t out_rows = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
      const devmem::DeviceArray vin = strided(me, std::accumulate(send.begin(), send.end(), 0L), 2);
      const devmem::DeviceArray vout = transposed(out_rows, 2);
      dm::alltoallv(vin, send, vout, recv);
      const devmem::HostArray hv = vout.copy_to_host();
      std::int64_t row = 0;
      for (int s = 0; s < n; ++s) {
        std::int64_t first = 0;  // where rank s's rows for me start in its input
        for (int t = 0; t < me; ++t) first += (s + t) % 2 + 1;
        for (std::int64_t i = 0; i < recv[static_cast<std::size_t>(s)]; ++i, ++row) {
          for (std::int64_t j = 0; j < 2; ++j)
            CHECK(hv.at<double>(row, j) == value(s, first + i, j));
        }
      }
      // reduce_scatter (sum): rank r gets the sum over ranks of their input[r].
      const devmem::DeviceArray block = transposed(2, 3);
      dm::reduce_scatter(in, block, dm::ReduceOp::Sum);
      const devmem::HostArray hb = block.copy_to_host();
      for (std::int64_t i = 0; i < 2; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) {
          double expected = 0;
          for (int r = 0; r < n; ++r) expected += value(r, 2 * me + i, j);
          CHECK(hb.at<double>(i, j) == expected);
        }
      }
      // reduce_scatter with counts (MPI_Reduce_scatter): counts[r] = r % 2 + 1 rows to rank r
      // (rank r's rows start at the sum of the counts before it), strided into a transposed view.
      std::vector<std::int64_t> counts(static_cast<std::size_t>(n));
      for (int r = 0; r < n; ++r) counts[static_cast<std::size_t>(r)] = r % 2 + 1;
      const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
      const std::int64_t mine = counts[static_cast<std::size_t>(me)];
      std::int64_t first = 0;
      for (int r = 0; r < me; ++r) first += counts[static_cast<std::size_t>(r)];
      const devmem::DeviceArray rows = transposed(mine, 3);
      dm::reduce_scatter(strided(me, total, 3), counts, rows, dm::ReduceOp::Sum);
      const devmem::HostArray hr = rows.copy_to_host();
      for (std::int64_t i = 0; i < mine; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) {
          double expected = 0;
          for (int r = 0; r < n; ++r) expected += value(r, first + i, j);
          CHECK(hr.at<double>(i, j) == expected);
        }
      }
    }
  }
}

TEST_CASE("collectives: the reductions against plain MPI", "[mpi]") {
  const int me = rank();
  const std::vector<std::int32_t> ints{me + 1, 3 * me + 2, 0x0f0f ^ (me << 3), -me, 7};
  struct Case {
    dm::ReduceOp op;
    MPI_Op mpi;
  };
  const std::vector<Case> cases{
      {dm::ReduceOp::Sum, MPI_SUM},         {dm::ReduceOp::Prod, MPI_PROD},
      {dm::ReduceOp::Min, MPI_MIN},         {dm::ReduceOp::Max, MPI_MAX},
      {dm::ReduceOp::LogicalAnd, MPI_LAND}, {dm::ReduceOp::LogicalOr, MPI_LOR},
      {dm::ReduceOp::LogicalXor, MPI_LXOR}, {dm::ReduceOp::BitwiseAnd, MPI_BAND},
      {dm::ReduceOp::BitwiseOr, MPI_BOR},   {dm::ReduceOp::BitwiseXor, MPI_BXOR}};
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode);
      for (const Case& c : cases) {
        INFO(dm::to_string(c.op));
        std::vector<std::int32_t> expected(ints.size());
        MPI_Allreduce(ints.data(), expected.data(), static_cast<int>(ints.size()), MPI_INT32_T,
                      c.mpi, MPI_COMM_WORLD);
        const devmem::DeviceArray a = devmem::to_device(ints);
        dm::allreduce(a, c.op);
        CHECK(a.to_vector<std::int32_t>() == expected);
      }
      // Logical reductions of bool.
      std::vector<std::uint8_t> flags{1, static_cast<std::uint8_t>(me % 2), 0};
      const devmem::DeviceArray b =
          devmem::to_device(devmem::HostArray::view(flags)).view(devmem::DType('b', 1));
      dm::allreduce(b, dm::ReduceOp::LogicalOr);
      const std::vector<std::uint8_t> got = b.view(devmem::DType('u', 1)).to_vector<std::uint8_t>();
      CHECK(got == std::vector<std::uint8_t>{1, static_cast<std::uint8_t>(size() > 1 ? 1 : 0), 0});
    }
  }
}

TEST_CASE("collectives: allreduce_loc", "[mpi]") {
  const int me = rank();
  const int n = size();
  // Element e: rank r holds (r - e)^2, minimal at rank e % n; maximal at the rank farthest away.
  std::vector<double> values;
  for (int e = 0; e < 6; ++e) values.push_back(static_cast<double>((me - e % n) * (me - e % n)));
  const devmem::DeviceArray v = devmem::to_device(values);
  const devmem::DeviceArray idx = devmem::to_device(std::vector<std::int32_t>(6, me));
  dm::allreduce_loc(v, idx, dm::ReduceOp::MinLoc);
  CHECK(v.to_vector<double>() == std::vector<double>(6, 0.0));
  const std::vector<std::int32_t> where = idx.to_vector<std::int32_t>();
  for (int e = 0; e < 6; ++e) CHECK(where[static_cast<std::size_t>(e)] == e % n);
  // maxloc of a strided int64 view; ties take the smallest index.
  const devmem::DeviceArray wide = devmem::to_device(std::vector<std::int64_t>{me, 5, me, 5});
  const devmem::DeviceArray ranks = devmem::to_device(std::vector<std::int32_t>{me, me});
  dm::allreduce_loc(wide.slice(0, 0, {}, 2), ranks, dm::ReduceOp::MaxLoc);
  CHECK(wide.to_vector<std::int64_t>() == std::vector<std::int64_t>{n - 1, 5, n - 1, 5});
  CHECK(ranks.to_vector<std::int32_t>() == std::vector<std::int32_t>{n - 1, n - 1});
}

TEST_CASE("collectives: non-blocking forms", "[mpi]") {
  const int me = rank();
  const int n = size();
  for (const auto& mode : kModes) {
    SECTION(mode_name(mode)) {
      const Settings settings(mode);
      const devmem::DeviceArray column = filled(me, 6, 5).index(1, 2);  // stride 40
      const devmem::DeviceArray summed = strided(me, 4, 3);
      const devmem::DeviceArray total = transposed(4, 3);
      const devmem::DeviceArray row = strided(me, 2, 3).index(0, 1);  // (3,), strided
      const devmem::DeviceArray gathered = transposed(n, 3);
      std::vector<dm::Request> requests;
      requests.push_back(dm::ibarrier());
      requests.push_back(dm::ibcast(column, n - 1));
      requests.push_back(dm::iallreduce(summed, total, dm::ReduceOp::Sum));
      const devmem::DeviceArray peak = strided(me, 4, 3);
      requests.push_back(dm::iallreduce(peak, peak, dm::ReduceOp::Max));  // in place
      requests.push_back(dm::iallgather(row, gathered));
      while (!requests[1].test()) {
      }
      dm::wait_all(requests);
      for (std::int64_t i = 0; i < 6; ++i) {
        CHECK(column.to_vector<double>()[static_cast<std::size_t>(i)] == value(n - 1, i, 2));
      }
      const devmem::HostArray t = total.copy_to_host();
      const devmem::HostArray m = peak.copy_to_host();
      for (std::int64_t i = 0; i < 4; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) {
          double expected = 0;
          for (int r = 0; r < n; ++r) expected += value(r, i, j);
          CHECK(t.at<double>(i, j) == expected);
          CHECK(m.at<double>(i, j) == value(n - 1, i, j));
        }
      }
      const devmem::HostArray g = gathered.copy_to_host();
      for (int r = 0; r < n; ++r) {
        for (std::int64_t j = 0; j < 3; ++j) CHECK(g.at<double>(r, j) == value(r, 1, j));
      }
    }
  }
}

TEST_CASE("collectives: mismatches and bad arguments throw on every rank", "[mpi][errors]") {
  const int me = rank();
  const int n = size();
  const devmem::DeviceArray a = devmem::device_array<double>({4});
  const devmem::DeviceArray gathered = devmem::device_array<double>({n, 4});
  // Different collectives.
  const auto mixed = [&] {
    if (me == 0) {
      dm::gather(a, gathered, 0);
    } else {
      dm::scatter(gathered, a, 0);
    }
  };
  CHECK_THROWS_WITH(mixed(), Catch::Contains("rank 1 called mpi::scatter, rank 0 called "
                                             "mpi::gather") &&
                                 Catch::Contains("same collective"));
  // Different shapes.
  const devmem::DeviceArray b = devmem::device_array<double>({me == 1 ? 3 : 4});
  CHECK_THROWS_WITH(dm::reduce(b, me == 0 ? b : devmem::DeviceArray{}, dm::ReduceOp::Sum, 0),
                    Catch::Contains("rank 1 has float64 (3,), rank 0 has float64 (4,)"));
  // A bad root, a root that differs.
  CHECK_THROWS_WITH(dm::gather(a, gathered, n),
                    Catch::Contains("root " + std::to_string(n) + " is not in the communicator"));
  CHECK_THROWS_WITH(dm::reduce(a, a, dm::ReduceOp::Sum, me == 1 ? 1 : 0),
                    Catch::Contains("rank 1 passed root 1, rank 0 passed root 0"));
  // A wrong output shape on root only.
  CHECK_THROWS_WITH(dm::gather(a, me == 0 ? a : devmem::DeviceArray{}, 0),
                    Catch::Contains("rank 0: the output is float64 (4,), expected float64 (" +
                                    std::to_string(n) + ", 4)"));
  // Bad counts: wrong length, negative, inconsistent with the input, different between ranks.
  const std::vector<std::int64_t> short_counts(static_cast<std::size_t>(n - 1), 1);
  const devmem::DeviceArray one_row = devmem::device_array<double>({1, 2});
  CHECK_THROWS_WITH(dm::gatherv(one_row, devmem::DeviceArray{}, short_counts, 0),
                    Catch::Contains("counts has " + std::to_string(n - 1) + " entries"));
  std::vector<std::int64_t> counts(static_cast<std::size_t>(n), 1);
  counts[0] = me == 0 ? 2 : 1;
  CHECK_THROWS_AS(dm::gatherv(one_row, devmem::device_array<double>({n, 2}), counts, 0),
                  devmem::InvalidArgument);
  std::vector<std::int64_t> negative(static_cast<std::size_t>(n), 1);
  negative[static_cast<std::size_t>(n - 1)] = -1;
  CHECK_THROWS_WITH(dm::scatterv(devmem::DeviceArray{}, one_row, negative, 0),
                    Catch::Contains("counts[" + std::to_string(n - 1) + "] is -1"));
  // reduce_scatter's counts: different between ranks, negative, an output of the wrong rows.
  std::vector<std::int64_t> uneven(static_cast<std::size_t>(n), 1);
  uneven[0] = me == 0 ? 2 : 1;
  const devmem::DeviceArray scattered = devmem::device_array<double>({me == 0 ? 2 : 1, 2});
  CHECK_THROWS_AS(dm::reduce_scatter(devmem::device_array<double>({n + (me == 0 ? 1 : 0), 2}),
                                     uneven, scattered, dm::ReduceOp::Sum),
                  devmem::InvalidArgument);
  CHECK_THROWS_WITH(dm::reduce_scatter(devmem::device_array<double>({n - 2, 2}), negative, one_row,
                                       dm::ReduceOp::Sum),
                    Catch::Contains("counts[" + std::to_string(n - 1) + "] is -1"));
  std::vector<std::int64_t> twos(static_cast<std::size_t>(n), 2);
  CHECK_THROWS_WITH(dm::reduce_scatter(devmem::device_array<double>({2 * n, 2}), twos, one_row,
                                       dm::ReduceOp::Sum),
                    Catch::Contains("the output is float64 (1, 2), expected float64 (2, 2)"));
  // alltoallv counts that do not match the senders'.
  std::vector<std::int64_t> send(static_cast<std::size_t>(n), 1);
  std::vector<std::int64_t> recv(static_cast<std::size_t>(n), 1);
  if (me == 0) {
    recv[1] = 2;
    recv[0] = 0;
  }
  CHECK_THROWS_WITH(dm::alltoallv(devmem::device_array<double>({n, 2}), send,
                                  devmem::device_array<double>({n, 2}), recv),
                    Catch::Contains("rank 0: recv_counts[0] is 0, but rank 0 sends 1 rows here"));
  // Unsupported dtype / reduction pairs.
  const devmem::DeviceArray f = devmem::device_array<float>({3});
  CHECK_THROWS_WITH(dm::allreduce(f, dm::ReduceOp::BitwiseAnd),
                    Catch::Contains("MPI cannot reduce dtype float32 with bitwise_and"));
  CHECK_THROWS_WITH(dm::scan(f, f, dm::ReduceOp::LogicalOr),
                    Catch::Contains("MPI cannot reduce dtype float32 with logical_or"));
  CHECK_THROWS_WITH(dm::allreduce(f, dm::ReduceOp::MinLoc), Catch::Contains("use allreduce_loc"));
  const devmem::DeviceArray i32 = devmem::device_array<std::int32_t>({3});
  CHECK_THROWS_WITH(
      dm::allreduce_loc(devmem::device_array<std::int16_t>({3}), i32, dm::ReduceOp::MinLoc),
      Catch::Contains("MPI cannot reduce dtype int16 with minloc"));
  CHECK_THROWS_WITH(
      dm::allreduce_loc(f, devmem::device_array<std::int64_t>({3}), dm::ReduceOp::MaxLoc),
      Catch::Contains("the indices are int64 (3,), expected int32 (3,)"));
  // Non-blocking: the mismatch comes from wait(), on every rank.
  dm::Request r = dm::iallreduce(b, b, dm::ReduceOp::Sum);
  CHECK_THROWS_WITH(r.wait(), Catch::Contains("rank 1 has float64 (3,), rank 0 has float64 (4,)"));
  // A blocking and a non-blocking form do not match either.
  const auto blocking_and_not = [&] {
    if (me == 0) {
      dm::Request q = dm::ibcast(a, 0);
      q.wait();
    } else {
      dm::bcast(a, 0);
    }
  };
  CHECK_THROWS_WITH(blocking_and_not(), Catch::Contains("same collective"));
  // The communicator works afterwards.
  const devmem::DeviceArray ones = devmem::to_device(std::vector<double>{1.0, 2.0});
  dm::allreduce(ones, dm::ReduceOp::Sum);
  CHECK(ones.to_vector<double>() == std::vector<double>{1.0 * n, 2.0 * n});
  dm::barrier();
}

TEST_CASE("datatype_for: MPI_Send and MPI_Recv of strided views", "[mpi]") {
  const int me = rank();
  const int peer = me ^ 1;
  if (peer >= size()) return;
  // The host backend's device memory is host memory: MPI reads and writes it directly.
  const devmem::DeviceArray source = strided(me, 4, 3);  // (4, 3), reversed columns
  const devmem::DeviceArray destination = devmem::device_array<double>({3, 4}).T();  // (4, 3)
  destination.fill(0.0);
  const dm::Datatype send_type = dm::datatype_for(source);
  const dm::Datatype recv_type = dm::datatype_for(destination);
  if (me % 2 == 0) {
    MPI_Send(source.data(), 1, send_type.get(), peer, 77, MPI_COMM_WORLD);
    MPI_Recv(destination.data(), 1, recv_type.get(), peer, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(destination.data(), 1, recv_type.get(), peer, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(source.data(), 1, send_type.get(), peer, 78, MPI_COMM_WORLD);
  }
  const devmem::HostArray h = destination.copy_to_host();
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 3; ++j) CHECK(h.at<double>(i, j) == value(peer, i, j));
  }
  int type_size = 0;
  MPI_Type_size(send_type.get(), &type_size);
  CHECK(type_size == 4 * 3 * 8);
  dm::Datatype moved = dm::datatype_for(source);
  const dm::Datatype taken(std::move(moved));
  CHECK(moved.get() == MPI_DATATYPE_NULL);  // NOLINT(bugprone-use-after-move): checked on purpose
  CHECK(taken.get() != MPI_DATATYPE_NULL);
}

int main(int argc, char** argv) {
  return mpi_test::run_catch(argc, argv, "devmem_mpi_collectives_tests");
}

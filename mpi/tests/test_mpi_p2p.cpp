// devmem::mpi point-to-point, round 2, under mpirun -np 2 and -np 4 (host backend), with and
// without devmem::mpi::initialize() (DEVMEM_MPI_TESTS_INITIALIZE=1): the eager protocol, Status,
// MPI_PROC_NULL and MPI_ANY_SOURCE / MPI_ANY_TAG, sendrecv, probe, host arrays as buffers,
// persistent requests, wait_any and friends, the eager fast path (every kind of array on either
// side, hundreds in flight, threads, default-stream ordering). Ranks pair up as (0, 1), (2, 3),
// ...; every case is collective (every rank runs every case in the same order).
#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include "mpi_test_support.hpp"

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace dm = devmem::mpi;
using mpi_test::rank;
using mpi_test::Settings;
using mpi_test::size;

namespace {

// The partner of this rank, or -1 for the last rank of an odd count.
int partner() {
  const int peer = rank() ^ 1;
  return peer < size() ? peer : -1;
}

std::vector<double> iota(std::int64_t n, double start) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST_CASE("mpi p2p: a small message is eager: a mismatch is the receiver's error only",
          "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  const devmem::DeviceArray sent = devmem::to_device(iota(20, 1.0)).reshape({4, 5});
  const devmem::DeviceArray wide = devmem::to_device(iota(24, -1.0)).reshape({4, 6});
  if (sender) {
    dm::send(sent, peer, 31);  // returns: the eager message needs no answer
  } else {
    CHECK_THROWS_WITH(dm::recv(wide, peer, 31), Catch::Contains("sends float64 (4, 5)") &&
                                                    Catch::Contains("expects float64 (4, 6)") &&
                                                    Catch::Contains("the sender was not told"));
    CHECK(wide.to_vector<double>() == iota(24, -1.0));  // untouched
  }
  // At the limit exactly the message is eager; one element more takes the handshake, and then
  // both ranks learn of a mismatch.
  const std::int64_t n = dm::eager_limit_bytes / 8;
  const devmem::DeviceArray at_limit = devmem::to_device(iota(n, 3.0));
  const devmem::DeviceArray above = devmem::to_device(iota(n + 1, 5.0));
  const devmem::DeviceArray got_at = devmem::device_array<double>({n});
  const devmem::DeviceArray got_above = devmem::device_array<double>({n + 1});
  const devmem::DeviceArray wrong = devmem::device_array<float>({n + 1});
  if (sender) {
    dm::send(at_limit, peer, 32);
    dm::send(above, peer, 33);
    CHECK_THROWS_WITH(dm::send(above, peer, 34), Catch::Contains("the receiver expects float32"));
  } else {
    dm::recv(got_at, peer, 32);
    dm::recv(got_above, peer, 33);
    CHECK(got_at.to_vector<double>() == iota(n, 3.0));
    CHECK(got_above.to_vector<double>() == iota(n + 1, 5.0));
    CHECK_THROWS_WITH(dm::recv(wrong, peer, 34), Catch::Contains("mismatch"));
  }
}

TEST_CASE("mpi p2p: a pending small irecv refuses a handshake while its rank waits for another",
          "[mpi][p2p][eager]") {
  // The sender's blocking send waits for the refusal before it sends what the receiver blocks on:
  // the small receive must be advanced by the other receive's wait, not only by its own.
  const int peer = partner();
  if (peer < 0) return;
  const std::int64_t n = dm::eager_limit_bytes / 8 + 1;
  if (rank() % 2 == 0) {
    CHECK_THROWS_WITH(dm::send(devmem::to_device(iota(n, 1.0)), peer, 37),
                      Catch::Contains("the receiver expects float64"));
    dm::send(devmem::to_device(iota(2, 7.0)), peer, 38);
  } else {
    const devmem::DeviceArray small = devmem::device_array<double>({3});
    dm::Request r = dm::irecv(small, peer, 37);
    const devmem::DeviceArray other = devmem::device_array<double>({2});
    dm::recv(other, peer, 38);
    CHECK(other.to_vector<double>() == iota(2, 7.0));
    CHECK_THROWS_WITH(r.wait(), Catch::Contains("shape/dtype mismatch"));
  }
}

TEST_CASE("mpi p2p: a Status names the source, the tag and the count", "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  for (const std::int64_t n : {std::int64_t{3}, std::int64_t{2000}}) {  // eager and handshake
    const devmem::DeviceArray a = devmem::to_device(iota(n, 7.0));
    const devmem::DeviceArray b = devmem::device_array<double>({n});
    const int tag = 40 + rank() / 2;
    if (sender) {
      dm::send(a, peer, tag);
      dm::Request r = dm::isend(a, peer, tag);
      const dm::Status s = r.wait();
      CHECK(s.source == peer);
      CHECK(s.tag == tag);
      CHECK(s.elements == n);
      CHECK(r.status().bytes == n * 8);
    } else {
      const int expected_tag = 40 + peer / 2;
      const dm::Status s = dm::recv(b, MPI_ANY_SOURCE, expected_tag);
      CHECK(s.source == peer);
      CHECK(s.tag == expected_tag);
      CHECK(s.elements == n);
      CHECK(s.bytes == n * 8);
      CHECK(b.to_vector<double>() == iota(n, 7.0));
      // MPI_ANY_TAG: after initialize() only (devmem's own traffic then has its own
      // communicator).
      if (dm::initialized()) {
        dm::Request r = dm::irecv(b, peer, MPI_ANY_TAG);
        r.wait();
        CHECK(r.status().tag == expected_tag);
        CHECK(r.status().source == peer);
      } else {
        dm::recv(b, peer, expected_tag);
      }
    }
  }
}

TEST_CASE("mpi p2p: MPI_PROC_NULL completes at once and moves nothing", "[mpi][p2p]") {
  const devmem::DeviceArray a = devmem::to_device(iota(5, 1.0));
  dm::send(a, MPI_PROC_NULL, 3);
  const dm::Status s = dm::recv(a, MPI_PROC_NULL, 3);
  CHECK(s.source == MPI_PROC_NULL);
  CHECK(s.tag == MPI_ANY_TAG);
  CHECK(s.elements == 0);
  dm::Request r = dm::irecv(a, MPI_PROC_NULL, 3);
  CHECK(r.done());
  CHECK(dm::isend(a, MPI_PROC_NULL, 3).done());
  CHECK(a.to_vector<double>() == iota(5, 1.0));
  CHECK(dm::iprobe(MPI_PROC_NULL, 3)->source == MPI_PROC_NULL);

  // A non-periodic halo exchange along a line of all ranks: the ends talk to MPI_PROC_NULL.
  // Each rank holds a (4, 6) block: columns 0 and 5 are ghosts, 1..4 its own (value 10 * rank +
  // column); columns are strided views.
  MPI_Comm line = MPI_COMM_NULL;
  const std::array<int, 1> dims{size()};
  const std::array<int, 1> periods{0};
  MPI_Cart_create(MPI_COMM_WORLD, 1, dims.data(), periods.data(), 0, &line);
  int me = 0;
  MPI_Comm_rank(line, &me);
  int left = MPI_PROC_NULL;
  int right = MPI_PROC_NULL;
  MPI_Cart_shift(line, 0, 1, &left, &right);
  std::vector<double> values(24, -1.0);
  for (int row = 0; row < 4; ++row) {
    for (int col = 1; col <= 4; ++col)
      values[static_cast<std::size_t>(row * 6 + col)] = 10.0 * me + col;
  }
  const devmem::DeviceArray block = devmem::to_device(values).reshape({4, 6});
  auto column = [&](int c) { return block.slice({devmem::Slice{}, devmem::Slice{c, c + 1}}); };
  dm::sendrecv(column(4), right, 5, column(0), left, 5, line);
  dm::sendrecv(column(1), left, 6, column(5), right, 6, line);
  const std::vector<double> got = block.to_vector<double>();
  for (int row = 0; row < 4; ++row) {
    const double left_ghost = got[static_cast<std::size_t>(row * 6)];
    const double right_ghost = got[static_cast<std::size_t>(row * 6 + 5)];
    CHECK(left_ghost == (left == MPI_PROC_NULL ? -1.0 : 10.0 * left + 4));
    CHECK(right_ghost == (right == MPI_PROC_NULL ? -1.0 : 10.0 * right + 1));
  }
  MPI_Comm_free(&line);
}

TEST_CASE("mpi p2p: sendrecv swaps arrays and refuses overlapping ones", "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const devmem::DeviceArray mine = devmem::to_device(iota(3000, 100.0 * rank()));
  const devmem::DeviceArray theirs = devmem::device_array<double>({3000});
  const dm::Status s = dm::sendrecv(mine, peer, 8, theirs, peer, 8);
  CHECK(s.source == peer);
  CHECK(theirs.to_vector<double>() == iota(3000, 100.0 * peer));
  CHECK_THROWS_WITH(dm::sendrecv(mine, peer, 8, mine.slice(0, 10, 20), peer, 8),
                    Catch::Contains("overlap"));
}

TEST_CASE("mpi p2p: probe describes the next message before it is received", "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  if (!sender) CHECK(!dm::iprobe(peer, 77).has_value());  // nothing was sent yet
  MPI_Barrier(MPI_COMM_WORLD);
  // Shapes the receiver cannot know: eager, and above the eager limit.
  const std::vector<devmem::Shape> shapes{{2, 3}, {30, 40}};
  if (sender) {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const std::int64_t n = shapes[i][0] * shapes[i][1];
      dm::send(devmem::to_device(iota(n, static_cast<double>(i))).reshape(shapes[i]), peer, 77);
    }
    dm::send(devmem::to_device(std::vector<std::int32_t>{1, 2, 3}), peer, 78);
  } else {
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const dm::MessageInfo info = dm::probe(MPI_ANY_SOURCE, 77);
      CHECK(info.source == peer);
      CHECK(info.tag == 77);
      CHECK(info.dtype == devmem::dtype_of<double>());
      CHECK(info.shape == shapes[i]);
      // Probing again sees the same message; receiving takes it.
      CHECK(dm::probe(peer, 77).shape == shapes[i]);
      const devmem::DeviceArray got = devmem::device_array(info.shape, info.dtype);
      dm::recv(got, info.source, info.tag);
      const std::int64_t n = shapes[i][0] * shapes[i][1];
      CHECK(got.to_vector<double>() == iota(n, static_cast<double>(i)));
    }
    std::optional<dm::MessageInfo> info;
    while (!(info = dm::iprobe(peer, 78))) {
    }
    CHECK(info->dtype == devmem::dtype_of<std::int32_t>());
    CHECK(info->shape == devmem::Shape{3});
    const devmem::DeviceArray got = devmem::device_array<std::int32_t>({3});
    dm::recv(got, peer, 78);
    CHECK(got.to_vector<std::int32_t>() == std::vector<std::int32_t>{1, 2, 3});
  }
}

TEST_CASE("mpi p2p: host arrays are buffers too, matching device arrays", "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  for (const std::int64_t rows : {std::int64_t{2}, std::int64_t{300}}) {  // eager, handshake
    const std::int64_t n = rows * 4;
    // Pageable and pinned host arrays, contiguous and strided (every other column of (rows, 8)).
    devmem::HostArray pageable(devmem::Shape{rows, 8}, devmem::dtype_of<double>());
    const devmem::HostArray pinned = devmem::pinned_array<double>({rows, 4});
    const devmem::HostArray strided = pageable.slice(1, 0, 8, 2);
    if (sender) {
      pinned.copy_from(devmem::HostArray::from<double>(iota(n, 1.0)).reshape({rows, 4}));
      strided.copy_from(devmem::HostArray::from<double>(iota(n, 2.0)).reshape({rows, 4}));
      dm::send(pinned, peer, 50);   // host -> device
      dm::send(strided, peer, 51);  // host -> host
      dm::Request r = dm::isend(devmem::to_device(iota(n, 3.0)).reshape({rows, 4}), peer, 52);
      r.wait();  // device -> host
    } else {
      const devmem::DeviceArray d = devmem::device_array<double>({rows, 4});
      dm::recv(d, peer, 50);
      CHECK(d.to_vector<double>() == iota(n, 1.0));
      const dm::Status s = dm::recv(pinned, peer, 51);
      CHECK(s.elements == n);
      CHECK(pinned.to_vector<double>() == iota(n, 2.0));
      dm::Request r = dm::irecv(strided, peer, 52);
      r.wait();
      CHECK(strided.to_vector<double>() == iota(n, 3.0));
      // The columns between the received ones are untouched.
      CHECK(pageable.slice(1, 1, 8, 2).to_vector<double>() ==
            std::vector<double>(static_cast<std::size_t>(n), 0.0));
    }
  }
}

TEST_CASE("mpi p2p: persistent requests pay the check once and move the data every round",
          "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  const std::vector<std::pair<dm::Transport, std::int64_t>> modes{
      {dm::Transport::Staged, 64}, {dm::Transport::DeviceDirect, std::int64_t{1} << 20}};
  for (const auto& [transport, chunk] : modes) {
    const Settings settings(transport, chunk);
    for (const std::int64_t n : {std::int64_t{6}, std::int64_t{1500}}) {
      const devmem::DeviceArray full = devmem::device_array<double>({n, 2});
      full.fill(0.0);
      const devmem::DeviceArray column = full.slice(1, 0, 1);  // strided
      dm::PersistentRequest request =
          sender ? dm::send_init(column, peer, 60) : dm::recv_init(column, peer, 60);
      for (int round = 0; round < 4; ++round) {
        if (sender)
          column.copy_to_device(devmem::HostArray::from<double>(iota(n, round)).reshape({n, 1}));
        request.start();
        CHECK(request.active());
        CHECK_THROWS_WITH(request.start(), Catch::Contains("previous round is active"));
        const dm::Status s = request.wait();
        CHECK(!request.active());
        CHECK(s.source == peer);
        if (!sender) CHECK(column.to_vector<double>() == iota(n, round));
      }
      // The other column is never written.
      CHECK(full.slice(1, 1, 2).to_vector<double>() ==
            std::vector<double>(static_cast<std::size_t>(n), 0.0));
    }
  }
  // A mismatch in the first round fails both ranks' requests, which then refuse to start.
  const devmem::DeviceArray a = devmem::device_array<double>({4});
  const devmem::DeviceArray b = devmem::device_array<float>({4});
  dm::PersistentRequest bad = sender ? dm::send_init(a, peer, 61) : dm::recv_init(b, peer, 61);
  bad.start();
  CHECK_THROWS_WITH(bad.wait(), Catch::Contains("mismatch"));
  CHECK_THROWS_WITH(bad.start(), Catch::Contains("the first round failed"));
  // Persistent on one side, plain on the other: an error (on both ranks: the persistent side's
  // first message always takes the handshake).
  if (sender) {
    dm::PersistentRequest p = dm::send_init(a, peer, 62);
    p.start();
    CHECK_THROWS_WITH(p.wait(), Catch::Contains("plain recv"));
  } else {
    CHECK_THROWS_WITH(dm::recv(a, peer, 62), Catch::Contains("persistent request (send_init)"));
  }
  CHECK_THROWS_WITH(dm::recv_init(a, MPI_ANY_SOURCE, 1), Catch::Contains("fixed source and tag"));
  CHECK_THROWS_AS(dm::PersistentRequest().start(), devmem::InvalidArgument);
  // MPI_PROC_NULL: rounds that do nothing.
  dm::PersistentRequest none = dm::send_init(a, MPI_PROC_NULL, 63);
  none.start();
  CHECK(none.wait().source == MPI_PROC_NULL);
}

TEST_CASE("mpi p2p: small persistent rounds take the eager path on either side",
          "[mpi][p2p][eager]") {
  // Later rounds of at most eager_limit_bytes on the default stream take mpi/eager.cpp's round
  // operations (receives C-contiguous only), the others the general ones; the message is the same,
  // so every pairing must carry each round's elements, as packed when start() was called.
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  const devmem::Stream s = devmem::stream();
  constexpr std::int64_t n = 6;
  struct Pair {
    int tag;
    bool send_on_stream;  // the sender's array on another stream: the general sender
    bool recv_strided;    // the receiver's array strided: the general receiver
    bool recv_on_stream;  // the receiver's array on another stream: the general receiver
  };
  const std::array<Pair, 4> pairs{Pair{100, false, false, false}, Pair{101, true, false, false},
                                  Pair{102, false, true, false}, Pair{103, false, false, true}};
  for (const Pair& pair : pairs) {
    const devmem::DeviceArray full = devmem::device_array<double>({n, 2});
    full.fill(0.0);
    devmem::DeviceArray array = devmem::device_array<double>({n, 1});
    if (sender && pair.send_on_stream) array = array.bind(s);
    if (!sender && pair.recv_strided) array = full.slice(1, 0, 1);
    if (!sender && pair.recv_on_stream) array = array.bind(s);
    dm::PersistentRequest request =
        sender ? dm::send_init(array, peer, pair.tag) : dm::recv_init(array, peer, pair.tag);
    for (int round = 0; round < 5; ++round) {
      if (sender) {
        array.copy_to_device(devmem::HostArray::from<double>(iota(n, round)).reshape({n, 1}));
        if (pair.send_on_stream) s.synchronize();
      }
      request.start();
      // Overwritten after start(): the round carries what was there when it started.
      if (sender) array.fill(-7.0);
      const dm::Status status = request.wait();
      CHECK(status.source == peer);
      CHECK(status.tag == pair.tag);
      CHECK(status.bytes == n * 8);
      if (!sender) CHECK(array.to_vector<double>() == iota(n, round));
    }
    if (!sender && pair.recv_strided) {
      CHECK(full.slice(1, 1, 2).to_vector<double>() ==
            std::vector<double>(static_cast<std::size_t>(n), 0.0));
    }
  }
  // A halo loop: both ranks send and receive every round, polled with test(), 200 rounds; and an
  // empty pair.
  const devmem::DeviceArray out = devmem::device_array<float>({3});
  const devmem::DeviceArray in = devmem::device_array<float>({3});
  const devmem::DeviceArray empty = devmem::device_array<float>({0});
  std::array<dm::PersistentRequest, 4> halo{
      dm::recv_init(in, peer, 104), dm::send_init(out, peer, 104), dm::recv_init(empty, peer, 105),
      dm::send_init(empty, peer, 105)};
  int wrong = 0;
  for (int round = 0; round < 200; ++round) {
    const auto value = static_cast<float>(rank() * 1000 + round);
    out.fill(value);
    dm::start_all(halo);
    for (auto& r : halo) {
      while (!r.test()) {
      }
    }
    wrong += in.to_vector<float>() == std::vector<float>(3, static_cast<float>(peer * 1000 + round))
                 ? 0
                 : 1;
  }
  CHECK(wrong == 0);
  CHECK(halo[2].wait().bytes == 0);
}

TEST_CASE("mpi p2p: wait_any, test_any, wait_some and test_some", "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  std::vector<devmem::DeviceArray> arrays;
  for (int i = 0; i < 3; ++i) arrays.push_back(devmem::device_array<double>({2}));
  std::vector<dm::Request> requests;
  if (!sender) {
    for (int i = 0; i < 3; ++i)
      requests.push_back(dm::irecv(arrays[static_cast<std::size_t>(i)], peer, 90 + i));
    CHECK(!dm::test_any(requests).has_value());  // nothing was sent yet
    CHECK(dm::test_some(requests).empty());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (sender) {
    for (const int i : {2, 0, 1}) dm::send(devmem::to_device(iota(2, i)), peer, 90 + i);
  } else {
    std::vector<bool> seen(3, false);
    const std::optional<std::size_t> first = dm::wait_any(requests);
    REQUIRE(first.has_value());
    seen[*first] = true;
    CHECK(requests[*first].status().tag == 90 + static_cast<int>(*first));
    std::size_t done = 1;
    while (done < 3) {
      for (const std::size_t i : dm::wait_some(requests)) {
        CHECK(!seen[i]);
        seen[i] = true;
        ++done;
      }
    }
    CHECK(!dm::wait_any(requests).has_value());  // none pending
    for (int i = 0; i < 3; ++i)
      CHECK(arrays[static_cast<std::size_t>(i)].to_vector<double>() == iota(2, i));
  }
}

TEST_CASE("mpi p2p: the tag range", "[mpi][p2p]") {
  const int peer = partner();
  if (peer < 0) return;
  const devmem::DeviceArray a = devmem::to_device(iota(3, 1.0));
  const devmem::DeviceArray big = devmem::to_device(iota(1000, 1.0));
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  REQUIRE(flag != 0);
  // After initialize() every tag is the application's; without it the lower half.
  CHECK(dm::max_tag() == (dm::initialized() ? *ub : *ub / 2));
  const int top = dm::max_tag();
  if (rank() % 2 == 0) {
    dm::send(a, peer, top);
    dm::send(big, peer, top);
  } else {
    const devmem::DeviceArray got = devmem::device_array<double>({3});
    const devmem::DeviceArray got_big = devmem::device_array<double>({1000});
    CHECK(dm::recv(got, peer, top).tag == top);
    CHECK(dm::recv(got_big, peer, top).tag == top);
    CHECK(got.to_vector<double>() == iota(3, 1.0));
    CHECK(got_big.to_vector<double>() == iota(1000, 1.0));
  }
}

TEST_CASE("mpi p2p: an MPI error on a communicator that returns errors is an MpiError",
          "[mpi][p2p][errors]") {
  const int peer = partner();
  if (peer < 0) return;
  // A raw MPI message larger than any devmem message start (kEagerCapacity bytes), sent to a
  // devmem receive with the same tag: MPI reports MPI_ERR_TRUNCATE, which MPI_ERRORS_RETURN hands
  // back instead of aborting. 8000 bytes: Open MPI 4.1's single-copy (CMA) path writes a truncated
  // message whole, past the receive count (AddressSanitizer caught it with 64 KiB), so the test
  // stays within the 8 KiB that the host backend's page-rounded message-start buffers have.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  constexpr int kTag = 7;
  if (rank() % 2 == 0) {
    const std::vector<char> raw(8000, 'x');
    CHECK(MPI_Send(raw.data(), static_cast<int>(raw.size()), MPI_BYTE, peer, kTag, comm) ==
          MPI_SUCCESS);
  } else {
    const devmem::DeviceArray a = devmem::device_array<double>({4});
    try {
      static_cast<void>(dm::recv(a, peer, kTag, comm));
      FAIL("mpi::recv of a truncated message did not throw");
    } catch (const dm::MpiError& error) {
      int error_class = 0;
      MPI_Error_class(error.code(), &error_class);
      CHECK(error_class == MPI_ERR_TRUNCATE);
      CHECK_THAT(error.what(), Catch::Contains("MPI_Irecv") && Catch::Contains("devmem::mpi"));
    }
  }
  MPI_Barrier(comm);
  MPI_Comm_free(&comm);
}

TEST_CASE("mpi p2p: stream-ordered send, recv and allreduce", "[mpi][p2p][enqueue]") {
  const int peer = partner();
  const bool sender = rank() % 2 == 0;
  const devmem::Stream stream = devmem::stream();
  if (peer >= 0) {
    const std::int64_t n = 3000;  // above the eager limit; a small one below
    for (const std::int64_t size : {n, std::int64_t{5}}) {
      const devmem::DeviceArray array =
          devmem::to_device(std::vector<double>(static_cast<std::size_t>(size), -1.0));
      const devmem::DeviceArray after = devmem::device_array<double>({size});
      if (sender) {
        MPI_Barrier(MPI_COMM_WORLD);
        // Work enqueued before the send (a copy of new values) is what gets sent.
        array.copy_to_device(devmem::HostArray::from<double>(iota(size, 11.0)), stream);
        dm::send_enqueue(array, peer, 70, stream);
        stream.synchronize();
      } else {
        dm::recv_enqueue(array, peer, 70, stream);
        after.copy_to_device(array, stream);  // ordered after the receive
        // The call returned before the message exists: the sender sends after this barrier.
        CHECK(!stream.query());
        MPI_Barrier(MPI_COMM_WORLD);
        stream.synchronize();
        CHECK(after.to_vector<double>() == iota(size, 11.0));
      }
      dm::check_enqueued();
    }
    // A stream-ordered receive matches a plain send, and a failed one leaves the array as it was.
    const devmem::DeviceArray kept = devmem::to_device(iota(4, 1.0));
    if (sender) {
      dm::send(devmem::to_device(iota(5, 0.0)), peer, 71);  // eager: the sender is not told
    } else {
      dm::recv_enqueue(kept, peer, 71, stream);
      stream.synchronize();
      CHECK_THROWS_WITH(dm::check_enqueued(), Catch::Contains("shape/dtype mismatch"));
      CHECK(kept.to_vector<double>() == iota(4, 1.0));
      dm::check_enqueued();  // reported once
    }
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // the two barriers of the odd rank out
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // allreduce on a stream: every rank contributes rank + 1.
  const devmem::DeviceArray input = devmem::device_array<double>({7});
  const devmem::DeviceArray output = devmem::device_array<double>({7});
  const devmem::DeviceArray copied = devmem::device_array<double>({7});
  input.copy_to_device(std::vector<double>(7, rank() + 1.0), stream);
  dm::allreduce_enqueue(input, output, dm::ReduceOp::Sum, stream);
  copied.copy_to_device(output, stream);
  stream.synchronize();
  const int n = size();
  CHECK(copied.to_vector<double>() == std::vector<double>(7, n * (n + 1) / 2.0));
  CHECK_THROWS_WITH(
      dm::allreduce_enqueue(input, devmem::device_array<float>({7}), dm::ReduceOp::Sum, stream),
      Catch::Contains("the input (float64 (7,)) and the output (float32 (7,)) differ"));
}

// ---- the eager fast path (mpi/eager.hpp)
// ---------------------------------------------------------

TEST_CASE("mpi p2p: small messages between every kind of array take either path on either side",
          "[mpi][p2p][eager]") {
  // Plain sends and receives of small arrays whose copies finish within the call (host arrays,
  // device arrays on the default stream) take the eager fast path, contiguous receives only; the
  // others the general operations. Every pairing must carry the same elements.
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  const devmem::DeviceArray base = devmem::to_device(iota(12, 0.0)).reshape({3, 4});
  const devmem::DeviceArray strided = base.T();  // (4, 3), not contiguous: packed on the sender
  std::vector<double> expected;                  // the transpose in C order
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) expected.push_back(j * 4.0 + i);
  }
  const devmem::Stream s = devmem::stream();
  if (sender) {
    for (int tag = 70; tag < 75; ++tag) dm::send(strided, peer, tag);
    dm::send(strided.bind(s), peer, 75);               // not the default stream: the general sender
    dm::send(base.index(0, 1).index(0, 2), peer, 76);  // 0-d
    dm::send(devmem::device_array<double>({0, 3}), peer, 77);  // empty
    dm::send(devmem::to_device(iota(4, 1.0)).reshape({1, 1, 1, 1, 1, 1, 1, 2, 2}), peer, 78);
    std::vector<double> host(24);
    std::iota(host.begin(), host.end(), 0.0);
    const devmem::HostArray host_strided =  // every other column of a (4, 6) host array
        devmem::HostArray::view(std::span<double>(host), {4, 6}).slice(1, 0, {}, 2);
    dm::send(host_strided, peer, 79);
  } else {
    const devmem::DeviceArray contiguous = devmem::device_array<double>({4, 3});
    dm::recv(contiguous, peer, 70);
    CHECK(contiguous.to_vector<double>() == expected);
    const devmem::DeviceArray transposed = devmem::device_array<double>({3, 4}).T();
    dm::recv(transposed, peer, 71);  // strided: the general receiver
    CHECK(transposed.to_vector<double>() == expected);
    std::vector<double> host(12, -1.0);
    dm::recv(devmem::HostArray::view(std::span<double>(host), {4, 3}), peer, 72);
    CHECK(host == expected);
    std::vector<double> wide(24, -1.0);
    dm::recv(devmem::HostArray::view(std::span<double>(wide), {4, 6}).slice(1, 1, {}, 2), peer, 73);
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 3; ++j) {
        CHECK(wide[static_cast<std::size_t>(i * 6 + 2 * j)] == -1.0);
        CHECK(wide[static_cast<std::size_t>(i * 6 + 2 * j + 1)] ==
              expected[static_cast<std::size_t>(i * 3 + j)]);
      }
    }
    const devmem::DeviceArray on_stream = devmem::device_array<double>({4, 3}, devmem::Order::C, s);
    dm::recv(on_stream, peer, 74);  // not the default stream: the general receiver
    CHECK(on_stream.to_vector<double>() == expected);
    dm::recv(contiguous, peer, 75);
    CHECK(contiguous.to_vector<double>() == expected);
    const devmem::DeviceArray scalar = devmem::device_array<double>(devmem::Shape{});
    CHECK(dm::recv(scalar, peer, 76).elements == 1);
    CHECK(scalar.to_vector<double>() == std::vector<double>{6.0});
    CHECK(dm::recv(devmem::device_array<double>({0, 3}), peer, 77).bytes == 0);
    const devmem::DeviceArray nine_axes =  // more axes than the fast receive keeps: general
        devmem::device_array<double>({1, 1, 1, 1, 1, 1, 1, 2, 2});
    dm::recv(nine_axes, peer, 78);
    CHECK(nine_axes.to_vector<double>() == iota(4, 1.0));
    dm::recv(contiguous, peer, 79);
    CHECK(contiguous.to_vector<double>() ==
          std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22});
  }
}

TEST_CASE("mpi p2p: hundreds of small messages in flight both ways, twice", "[mpi][p2p][eager]") {
  // More than a thread keeps of eager buffers (128) and than the shared pool holds (256): the
  // pools run dry, grow and give back; the second round reuses what the first returned. The
  // requests are waited for in reverse order (the progress list loses operations from anywhere).
  const int peer = partner();
  if (peer < 0) return;
  constexpr int kMessages = 300;
  const auto elements = [](int i) { return std::int64_t{1} + (i * 37) % 512; };  // 8 B to 4 KiB
  for (int round = 0; round < 2; ++round) {
    std::vector<devmem::DeviceArray> out;
    std::vector<devmem::DeviceArray> in;
    std::vector<dm::Request> requests;
    for (int i = 0; i < kMessages; ++i) {
      out.push_back(devmem::to_device(iota(elements(i), rank() * 1e6 + round * 1e4 + i)));
      in.push_back(devmem::device_array<double>({elements(i)}));
    }
    for (int i = 0; i < kMessages; ++i) {
      requests.push_back(dm::irecv(in[static_cast<std::size_t>(i)], peer, 81));
      requests.push_back(dm::isend(out[static_cast<std::size_t>(i)], peer, 81));
    }
    for (auto r = requests.rbegin(); r != requests.rend(); ++r) r->wait();
    int wrong = 0;
    for (int i = 0; i < kMessages; ++i) {
      const auto got = in[static_cast<std::size_t>(i)].to_vector<double>();
      wrong += got == iota(elements(i), peer * 1e6 + round * 1e4 + i) ? 0 : 1;
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("mpi p2p: small messages started on other threads and completed on this one",
          "[mpi][p2p][eager]") {
  // Operations and eager buffers come from per-thread pools: here they are made on threads that
  // end before the requests are waited for, so they go back to this thread's pools (and the
  // ended threads' pools are closed).
  const int peer = partner();
  if (peer < 0) return;
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  REQUIRE(provided == MPI_THREAD_MULTIPLE);  // run_catch asks for it
  constexpr int kThreads = 4;
  constexpr int kPerThread = 40;
  const bool sender = rank() % 2 == 0;
  std::vector<std::vector<devmem::DeviceArray>> arrays(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPerThread; ++i) {
      arrays[static_cast<std::size_t>(t)].push_back(
          sender ? devmem::to_device(iota(3, t * 100.0 + i)) : devmem::device_array<double>({3}));
    }
  }
  std::vector<std::vector<dm::Request>> requests(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const auto& a : arrays[static_cast<std::size_t>(t)]) {
        requests[static_cast<std::size_t>(t)].push_back(sender ? dm::isend(a, peer, 90 + t)
                                                               : dm::irecv(a, peer, 90 + t));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (auto& r : requests) dm::wait_all(r);
  if (!sender) {
    int wrong = 0;
    for (int t = 0; t < kThreads; ++t) {
      for (int i = 0; i < kPerThread; ++i) {
        const auto& a = arrays[static_cast<std::size_t>(t)][static_cast<std::size_t>(i)];
        wrong += a.to_vector<double>() == iota(3, t * 100.0 + i) ? 0 : 1;
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("mpi p2p: a small message on the default stream follows the device's other streams",
          "[mpi][p2p][eager]") {
  // The legacy default stream waits for the device's other streams: the eager copies (pack on the
  // sender, unpack on the receiver) must come after work still queued on another stream, however
  // the host backend decides that no stream is busy.
  const int peer = partner();
  if (peer < 0) return;
  const bool sender = rank() % 2 == 0;
  const devmem::Stream s = devmem::stream();
  const devmem::DeviceArray x = devmem::to_device(std::vector<double>(16, 1.0));  // default stream
  const auto hold = [&s] {  // the stream's later work waits 50 ms
    devmem::active_backend().launch_host_function(s.context()->device(), s.native_handle(), [] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    });
  };
  hold();
  if (sender) {
    x.fill(2.0, s);  // queued behind the pause
    dm::send(x, peer, 95);
  } else {
    x.fill(-1.0, s);  // queued behind the pause: overwritten by the message that follows
    dm::recv(x, peer, 95);
    CHECK(x.to_vector<double>() == std::vector<double>(16, 2.0));
  }
}

int main(int argc, char** argv) {
  return mpi_test::run_catch(argc, argv, "devmem_mpi_p2p_tests");
}

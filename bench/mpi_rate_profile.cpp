// A fixed amount of small-message traffic for instruction counts (valgrind's callgrind on one
// rank; bench/results/mpi-host-*.md): rank 0 sends windows of 64 non-blocking messages of one
// float64 each, rank 1 receives them and closes each window with an empty raw MPI message, as
// devmem_mpi_bench's message-rate part does, but a set number of times, without timing (under
// valgrind timings mean nothing), and with the sender's wait after the window is closed. Usage:
// mpirun -np 2 devmem_mpi_rate_profile [--raw]
// [--windows N] [--bytes B] [--blocking] [--persistent] [--arrived]. --raw uses MPI_Isend/MPI_Irecv
// on host buffers; --blocking makes N round trips of one message with send/recv (MPI_Send/MPI_Recv
// with
// --raw) instead of windows; --persistent sends each window as a round of 64 persistent pairs
// (send_init/recv_init, made and through their handshake round before the windows). Exit 1 on
// wrong data. --arrived: the sender follows each window with a raw empty message that the receiver
// takes before it waits, so the receiver's wait finds every message arrived (its count then holds
// no polls for messages still on their way, whose number depends on the load).
#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr int kTag = 12;
constexpr int kWindow = 64;

int run(int rank, bool raw, bool blocking, bool persistent, bool arrived, int windows,
        std::int64_t bytes) {
  namespace mpi = devmem::mpi;
  const int peer = 1 - rank;
  const std::int64_t n = bytes / 8 > 0 ? bytes / 8 : 1;
  const int count = static_cast<int>(n);
  std::vector<std::vector<double>> host(kWindow, std::vector<double>(static_cast<std::size_t>(n)));
  std::vector<devmem::DeviceArray> arrays;
  for (int i = 0; i < kWindow; ++i) {
    arrays.push_back(devmem::to_device(std::vector<double>(static_cast<std::size_t>(n), i)));
  }
  if (rank == 1) {
    for (auto& a : arrays) a.fill(-1.0);
  }
  auto close_window = [&] {
    if (rank == 0) {
      MPI_Recv(nullptr, 0, MPI_BYTE, peer, kTag + 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Send(nullptr, 0, MPI_BYTE, peer, kTag + 2, MPI_COMM_WORLD);
    }
  };
  auto window_sent = [&] {
    if (!arrived) return;
    if (rank == 0) {
      MPI_Send(nullptr, 0, MPI_BYTE, peer, kTag + 3, MPI_COMM_WORLD);
    } else {
      MPI_Recv(nullptr, 0, MPI_BYTE, peer, kTag + 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
  };
  std::vector<MPI_Request> raw_requests(kWindow);
  std::vector<mpi::Request> requests;
  requests.reserve(kWindow);
  std::vector<mpi::PersistentRequest> rounds;
  if (persistent) {
    for (const auto& a : arrays) {
      rounds.push_back(rank == 0 ? mpi::send_init(a, peer, kTag) : mpi::recv_init(a, peer, kTag));
    }
    // The first round is each pair's handshake, which the sender must keep advancing: not inside a
    // window, whose sender blocks in a raw MPI_Recv before it waits.
    mpi::start_all(rounds);
    for (auto& r : rounds) r.wait();
  }
  for (int w = 0; w < windows; ++w) {
    if (blocking && raw) {
      double* data = host[0].data();
      if (rank == 0) {
        MPI_Send(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
        MPI_Recv(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
      }
      continue;
    }
    if (blocking) {
      const auto& a = arrays[0];
      if (rank == 0) {
        mpi::send(a, peer, kTag);
        static_cast<void>(mpi::recv(a, peer, kTag));
      } else {
        static_cast<void>(mpi::recv(a, peer, kTag));
        mpi::send(a, peer, kTag);
      }
      continue;
    }
    if (persistent) {
      mpi::start_all(rounds);
      window_sent();
      if (rank == 0) close_window();
      for (auto& r : rounds) r.wait();
      if (rank == 1) close_window();
      continue;
    }
    if (raw) {
      for (int i = 0; i < kWindow; ++i) {
        auto* data = host[static_cast<std::size_t>(i)].data();
        auto* request = &raw_requests[static_cast<std::size_t>(i)];
        if (rank == 0) {
          MPI_Isend(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, request);
        } else {
          MPI_Irecv(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, request);
        }
      }
      // The sender waits once the receiver has closed the window: its count then holds what
      // completing a send costs, not polls for a receiver slowed down by valgrind.
      window_sent();
      if (rank == 0) close_window();
      MPI_Waitall(kWindow, raw_requests.data(), MPI_STATUSES_IGNORE);
      if (rank == 1) close_window();
    } else {
      requests.clear();
      for (int i = 0; i < kWindow; ++i) {
        const auto& a = arrays[static_cast<std::size_t>(i)];
        requests.push_back(rank == 0 ? mpi::isend(a, peer, kTag) : mpi::irecv(a, peer, kTag));
      }
      window_sent();
      if (rank == 0) close_window();
      mpi::wait_all(requests);
      if (rank == 1) close_window();
    }
  }
  int failures = 0;
  if (!raw && !blocking) {
    for (int i = 0; i < kWindow; ++i) {
      for (const double v : arrays[static_cast<std::size_t>(i)].to_vector<double>()) {
        failures += v != i ? 1 : 0;
      }
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  bool raw = false;
  bool blocking = false;
  bool persistent = false;
  bool arrived = false;
  int windows = 300;
  std::int64_t bytes = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--raw") == 0) {
      raw = true;
    } else if (std::strcmp(argv[i], "--blocking") == 0) {
      blocking = true;
    } else if (std::strcmp(argv[i], "--persistent") == 0) {
      persistent = true;
    } else if (std::strcmp(argv[i], "--arrived") == 0) {
      arrived = true;
    } else if (std::strcmp(argv[i], "--windows") == 0 && i + 1 < argc) {
      windows = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--bytes") == 0 && i + 1 < argc) {
      bytes = std::atoll(argv[++i]);
    } else {
      if (rank == 0) std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      MPI_Finalize();
      return 1;
    }
  }
  if (size != 2) {
    if (rank == 0) std::fprintf(stderr, "devmem_mpi_rate_profile needs 2 ranks\n");
    MPI_Finalize();
    return 1;
  }
  int failures = 0;
  try {
    devmem::mpi::initialize();
    failures = run(rank, raw, blocking, persistent, arrived, windows, bytes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    failures = 1;
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && total != 0) std::fprintf(stderr, "devmem_mpi_rate_profile: %d wrong\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}

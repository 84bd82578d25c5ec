// devmem_mpi_bench's small-message part (declared in mpi_latency.hpp, which says what it measures).
#include "mpi_latency.hpp"

#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace devmem_bench {

namespace {

constexpr int kTag = 12;
constexpr int kWindow = 64;  // messages in flight per message-rate window

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Seconds per call of `body` over `reps` calls (the slower rank's time), after a barrier.
double timed(int reps, const std::function<void()>& body) {
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) body();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double slowest = seconds;
  MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest / reps;
}

// Medians over `rounds` of each variant's time per call; the variants run one after the other in
// every round, after one warm-up call each.
std::vector<double> interleaved(int rounds, int reps,
                                const std::vector<std::function<void()>>& variants) {
  std::vector<std::vector<double>> times(variants.size());
  for (const auto& v : variants) v();
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < variants.size(); ++i) times[i].push_back(timed(reps, variants[i]));
  }
  std::vector<double> medians;
  medians.reserve(times.size());
  for (auto& t : times) medians.push_back(median(std::move(t)));
  return medians;
}

std::string format_bytes(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= 1024) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

}  // namespace

int run_small_messages(int rank, bool quick) {
  namespace mpi = devmem::mpi;
  const int peer = 1 - rank;
  const int rounds = quick ? 3 : 15;
  const std::vector<std::int64_t> sizes =
      quick ? std::vector<std::int64_t>{8, 4096}
            : std::vector<std::int64_t>{8, 64, 512, 4096, 16384, 65536};
  int failures = 0;
  if (rank == 0) {
    std::printf(
        "\n### Round-trip latency (median of %d interleaved rounds; transport: %s)\n\n"
        "| size | raw MPI (us) | devmem send/recv (us) | devmem persistent (us) | devmem / raw | "
        "persistent / raw |\n|---:|---:|---:|---:|---:|---:|\n",
        rounds, mpi::to_string(mpi::transport()));
  }
  for (const std::int64_t bytes : sizes) {
    const std::int64_t n = std::max<std::int64_t>(bytes / 8, 1);
    std::vector<double> host(static_cast<std::size_t>(n), 1.0);
    const devmem::DeviceArray array =
        devmem::to_device(std::vector<double>(static_cast<std::size_t>(n), rank == 0 ? 1.0 : 2.0));
    const int reps = quick ? 20 : (bytes <= 4096 ? 2000 : 500);
    const int count = static_cast<int>(n);
    auto raw = [&] {
      if (rank == 0) {
        MPI_Send(host.data(), count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
        MPI_Recv(host.data(), count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(host.data(), count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(host.data(), count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
      }
    };
    auto devmem_pingpong = [&] {
      if (rank == 0) {
        mpi::send(array, peer, kTag);
        mpi::recv(array, peer, kTag);
      } else {
        mpi::recv(array, peer, kTag);
        mpi::send(array, peer, kTag);
      }
    };
    mpi::PersistentRequest to_peer = mpi::send_init(array, peer, kTag + 1);
    mpi::PersistentRequest from_peer = mpi::recv_init(array, peer, kTag + 1);
    auto persistent = [&] {
      if (rank == 0) {
        to_peer.start();
        to_peer.wait();
        from_peer.start();
        from_peer.wait();
      } else {
        from_peer.start();
        from_peer.wait();
        to_peer.start();
        to_peer.wait();
      }
    };
    const std::vector<double> t = interleaved(rounds, reps, {raw, devmem_pingpong, persistent});
    // Rank 0's values went there and back: both ranks hold 1.0.
    for (const double v : array.to_vector<double>()) failures += v != 1.0 ? 1 : 0;
    if (rank == 0) {
      std::printf("| %s | %.2f | %.2f | %.2f | %.2fx | %.2fx |\n", format_bytes(bytes).c_str(),
                  t[0] * 1e6, t[1] * 1e6, t[2] * 1e6, t[1] / t[0], t[2] / t[0]);
    }
  }

  // Message rate: rank 0 sends a window of kWindow messages, rank 1 receives them, then answers
  // with one empty raw message that closes the window.
  if (rank == 0) {
    std::printf(
        "\n### Message rate (windows of %d non-blocking messages, median of %d interleaved "
        "rounds)\n\n| size | raw MPI (msg/s) | devmem isend/irecv (msg/s) | raw / devmem |\n"
        "|---:|---:|---:|---:|\n",
        kWindow, rounds);
  }
  for (const std::int64_t bytes :
       quick ? std::vector<std::int64_t>{8} : std::vector<std::int64_t>{8, 512, 4096}) {
    const std::int64_t n = std::max<std::int64_t>(bytes / 8, 1);
    std::vector<std::vector<double>> host(kWindow,
                                          std::vector<double>(static_cast<std::size_t>(n)));
    std::vector<devmem::DeviceArray> arrays;
    for (int i = 0; i < kWindow; ++i) {
      arrays.push_back(devmem::to_device(std::vector<double>(static_cast<std::size_t>(n), i)));
    }
    const int count = static_cast<int>(n);
    auto close_window = [&] {
      if (rank == 0) {
        MPI_Recv(nullptr, 0, MPI_BYTE, peer, kTag + 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      } else {
        MPI_Send(nullptr, 0, MPI_BYTE, peer, kTag + 2, MPI_COMM_WORLD);
      }
    };
    auto raw = [&] {
      std::vector<MPI_Request> requests(kWindow);
      for (std::size_t i = 0; i < requests.size(); ++i) {
        auto* data = host[i].data();
        if (rank == 0) {
          MPI_Isend(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, &requests[i]);
        } else {
          MPI_Irecv(data, count, MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD, &requests[i]);
        }
      }
      MPI_Waitall(kWindow, requests.data(), MPI_STATUSES_IGNORE);
      close_window();
    };
    auto with_devmem = [&] {
      std::vector<mpi::Request> requests;
      requests.reserve(kWindow);
      for (int i = 0; i < kWindow; ++i) {
        const auto& a = arrays[static_cast<std::size_t>(i)];
        requests.push_back(rank == 0 ? mpi::isend(a, peer, kTag) : mpi::irecv(a, peer, kTag));
      }
      mpi::wait_all(requests);
      close_window();
    };
    const int reps = quick ? 5 : 200;
    const std::vector<double> t = interleaved(rounds, reps, {raw, with_devmem});
    for (int i = 0; i < kWindow; ++i) {
      for (const double v : arrays[static_cast<std::size_t>(i)].to_vector<double>()) {
        failures += v != i ? 1 : 0;
      }
    }
    if (rank == 0) {
      std::printf("| %s | %.0f | %.0f | %.2fx |\n", format_bytes(bytes).c_str(), kWindow / t[0],
                  kWindow / t[1], t[1] / t[0]);
    }
  }
  return failures;
}

}  // namespace devmem_bench

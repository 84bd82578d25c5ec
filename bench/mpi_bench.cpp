// MPI ping-pong bandwidth between ranks 0 and 1, in one run: raw MPI on host buffers of the same
// size, devmem arrays through devmem::mpi (staged, pipelined in chunks; staged in one chunk;
// device_direct), and an unpipelined copy-then-send written by hand (whole array to pinned memory,
// MPI_Send, MPI_Recv, whole array back). Reports bandwidth (2 x bytes per round trip) and the
// ratios; then round-trip latency from 8 bytes and the message rate (mpi_latency.hpp). Usage:
// mpirun -np 2 devmem_mpi_bench [--quick] [--chunk BYTES] [--part bandwidth|small|all]
// [--sizes BYTES,...] [--median]. --median reports the median round trip (rank 0's clock) instead
// of the mean, with the variants interleaved in rounds: on a shared machine a rank descheduled for
// milliseconds moves the mean, not the median. Exit 1 on a wrong result or error.
#include "mpi_latency.hpp"

#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr int kTag = 11;

bool g_median = false;
constexpr int kMedianRounds = 8;

// One way of moving the array: `setup` chooses devmem::mpi's settings, `exchange` does one round
// trip.
struct Variant {
  std::function<void()> setup;
  std::function<void()> exchange;
};

// --median: the median round trip of each variant on rank 0's clock, the variants interleaved in
// kMedianRounds rounds of reps / kMedianRounds round trips each (one warm-up per round), so that
// a change of load moves them all alike.
std::vector<double> median_round_trips(int reps, const std::vector<Variant>& variants) {
  const int per_round = std::max(reps / kMedianRounds, 1);
  std::vector<std::vector<double>> times(variants.size());
  for (int round = 0; round < kMedianRounds; ++round) {
    for (std::size_t v = 0; v < variants.size(); ++v) {
      variants[v].setup();
      variants[v].exchange();
      MPI_Barrier(MPI_COMM_WORLD);
      for (int i = 0; i < per_round; ++i) {
        const auto start = std::chrono::steady_clock::now();
        variants[v].exchange();
        times[v].push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& t : times) {
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  MPI_Bcast(medians.data(), static_cast<int>(medians.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return medians;
}

// Seconds per round trip of `exchange` (rank 0 sends first, rank 1 answers), after one warm-up:
// the mean of the slower rank.
double round_trip(int reps, const std::function<void()>& exchange) {
  exchange();
  MPI_Barrier(MPI_COMM_WORLD);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) exchange();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double slowest = seconds;
  MPI_Allreduce(&seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest / reps;
}

std::string format_size(std::int64_t bytes) {
  if (bytes >= (std::int64_t{1} << 20)) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

int run(int argc, char** argv, int rank) {
  bool quick = false;
  std::string part = "all";
  std::int64_t chunk = std::int64_t{256} << 10;
  std::vector<std::int64_t> chosen_sizes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--part") == 0 && i + 1 < argc) {
      part = argv[++i];
      if (part != "bandwidth" && part != "small" && part != "all") {
        if (rank == 0) std::fprintf(stderr, "devmem_mpi_bench: --part bandwidth|small|all\n");
        return 1;
      }
    } else if (std::strcmp(argv[i], "--chunk") == 0 && i + 1 < argc) {
      chunk = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--median") == 0) {
      g_median = true;
    } else if (std::strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      for (const char* p = argv[++i]; *p != '\0';) {
        char* end = nullptr;
        const long long value = std::strtoll(p, &end, 10);
        if (end == p || value < 8 || (*end != ',' && *end != '\0')) {
          if (rank == 0) {
            std::fprintf(stderr,
                         "devmem_mpi_bench: --sizes: '%s' is not a list of byte counts >= 8 "
                         "(BYTES,...)\n",
                         argv[i]);
          }
          return 1;
        }
        chosen_sizes.push_back(value / 8 * 8);
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      if (rank == 0)
        std::fprintf(
            stderr,
            "usage: devmem_mpi_bench [--quick] [--chunk BYTES] [--part bandwidth|small|all] "
            "[--sizes BYTES,...] [--median]\n");
      return 1;
    }
  }
  const int peer = 1 - rank;
  const bool bandwidth = part != "small";
  const std::vector<std::int64_t> sizes =
      !bandwidth              ? std::vector<std::int64_t>{}
      : !chosen_sizes.empty() ? chosen_sizes
      : quick                 ? std::vector<std::int64_t>{64 << 10, 1 << 20}
              : std::vector<std::int64_t>{64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};
  if (rank == 0 && bandwidth) {
    std::printf(
        "# devmem MPI ping-pong (ranks 0 and 1)\n\nbackend: %s, staging chunk %s, device-aware "
        "MPI for this backend: %s, %s round trip\n\n",
        devmem::backend_name().c_str(), format_size(chunk).c_str(),
        devmem::mpi::device_aware(devmem::backend_name()) ? "yes" : "no",
        g_median ? "median" : "mean");
    std::printf(
        "| size | raw MPI (GB/s) | devmem staged, pipelined (GB/s) | staged, one chunk "
        "(GB/s) | copy-then-send by hand (GB/s) | device_direct (GB/s) | devmem / raw | "
        "pipelined / copy-then-send | device_direct / raw |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  int failures = 0;
  for (const std::int64_t bytes : sizes) {
    const int reps = static_cast<int>(
        std::clamp<std::int64_t>((quick ? 8 : 256) * (1 << 20) / bytes, 3, quick ? 10 : 400));
    const std::int64_t n = bytes / 8;
    std::vector<double> host(static_cast<std::size_t>(n), 1.0 + rank);
    const devmem::DeviceArray array = devmem::to_device(host);
    const devmem::HostArray pinned = devmem::pinned_array<double>({n});

    auto raw = [&] {
      if (rank == 0) {
        MPI_Send(host.data(), static_cast<int>(n), MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
        MPI_Recv(host.data(), static_cast<int>(n), MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
      } else {
        MPI_Recv(host.data(), static_cast<int>(n), MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        MPI_Send(host.data(), static_cast<int>(n), MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
      }
    };
    auto devmem_pingpong = [&] {
      if (rank == 0) {
        devmem::mpi::send(array, peer, kTag);
        devmem::mpi::recv(array, peer, kTag);
      } else {
        devmem::mpi::recv(array, peer, kTag);
        devmem::mpi::send(array, peer, kTag);
      }
    };
    auto by_hand = [&] {
      auto send = [&] {
        array.copy_to_host(pinned);
        MPI_Send(pinned.data(), static_cast<int>(n), MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD);
      };
      auto recv = [&] {
        MPI_Recv(pinned.data(), static_cast<int>(n), MPI_DOUBLE, peer, kTag, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
        array.copy_to_device(pinned);
      };
      if (rank == 0) {
        send();
        recv();
      } else {
        recv();
        send();
      }
    };
    auto settings = [&](devmem::mpi::Transport transport, std::int64_t chunk_bytes) {
      return [transport, chunk_bytes] {
        devmem::mpi::set_transport(transport);
        devmem::mpi::set_staging_chunk_bytes(chunk_bytes);
      };
    };
    const std::vector<Variant> variants{
        {[] {}, raw},
        {settings(devmem::mpi::Transport::Staged, chunk), devmem_pingpong},
        {settings(devmem::mpi::Transport::Staged, bytes), devmem_pingpong},
        {[] {}, by_hand},
        {settings(devmem::mpi::Transport::DeviceDirect, chunk), devmem_pingpong}};
    std::vector<double> seconds(variants.size());
    if (g_median) {
      seconds = median_round_trips(reps, variants);
    } else {
      for (std::size_t v = 0; v < variants.size(); ++v) {
        variants[v].setup();
        seconds[v] = round_trip(reps, variants[v].exchange);
      }
    }
    const double t_raw = seconds[0];
    const double t_pipelined = seconds[1];
    const double t_one_chunk = seconds[2];
    const double t_by_hand = seconds[3];
    const double t_direct = seconds[4];
    devmem::mpi::set_transport(devmem::mpi::Transport::Automatic);

    // Each round trip copies rank 0's array to rank 1 and back: both hold rank 0's values.
    for (const double v : array.to_vector<double>()) {
      if (v != 1.0) {  // rank 0's values, sent there and back
        ++failures;
        break;
      }
    }
    auto gbps = [&](double t) { return 2.0 * static_cast<double>(bytes) / t / 1e9; };
    if (rank == 0) {
      std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2fx | %.2fx | %.2fx |\n",
                  format_size(bytes).c_str(), gbps(t_raw), gbps(t_pipelined), gbps(t_one_chunk),
                  gbps(t_by_hand), gbps(t_direct), t_raw / t_pipelined, t_by_hand / t_pipelined,
                  t_raw / t_direct);
    }
  }
  if (part != "bandwidth") failures += devmem_bench::run_small_messages(rank, quick);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf(
        "\ndevmem / raw: raw round-trip time / devmem staged pipelined time (1.00x = as fast "
        "as raw MPI on host buffers); pipelined / copy-then-send: the unpipelined time / the "
        "pipelined time (> 1: the pipeline helps). %s\n",
        total == 0 ? "Data checked: correct." : "DATA CHECK FAILED.");
  }
  return total == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int status = 1;
  if (ranks != 2) {
    if (rank == 0)
      std::fprintf(stderr, "devmem_mpi_bench: run with mpirun -np 2 (got %d ranks)\n", ranks);
  } else {
    try {
      devmem::mpi::initialize();
      status = run(argc, argv, rank);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "devmem_mpi_bench (rank %d): %s\n", rank, e.what());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Finalize();
  return status;
}

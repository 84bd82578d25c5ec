// Two ranks whose transports differ (run as an MPMD job, one DEVMEM_MPI_TRANSPORT per rank, e.g.
// `mpirun -np 1 -x DEVMEM_MPI_TRANSPORT=staged prog : -np 1 -x DEVMEM_MPI_TRANSPORT=device_direct
// prog`): every message shape both ways, so the receiver must follow the sender's chunk plan
// whatever its own transport (reproducer mixed_transport.cpp: a staged sender's three chunks
// into a device_direct receiver left 2/3 of the data wrong and hung the sender). Exit status 0
// when every rank received exactly what was sent; each failure is printed.
#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

namespace {

namespace dm = devmem::mpi;

int g_failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "transport_pairs (rank %d, %s): FAILED: %s\n", rank,
               dm::to_string(dm::transport()), what.c_str());
}

std::vector<double> iota(std::int64_t n, double start) {
  std::vector<double> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Rank `from` sends `make(from)`'s values to the other rank, which receives into `target`.
void exchange(int me, int from, const std::string& what, const devmem::DeviceArray& source,
              const devmem::DeviceArray& target, const std::vector<double>& expected, int tag) {
  if (me == from) {
    dm::send(source, 1 - me, tag);
  } else {
    dm::recv(target, 1 - me, tag);
    expect(target.to_vector<double>() == expected, what + " received wrong data");
  }
}

void run(int me) {
  const std::int64_t rows = 3 << 10;  // (3072, 128) float64: 3 MiB, three 1 MiB staging chunks
  for (const std::int64_t chunk : {std::int64_t{1} << 20, std::int64_t{4096}}) {
    dm::set_staging_chunk_bytes(chunk);
    const std::string at = " (chunk " + std::to_string(chunk) + ")";
    for (int from = 0; from < 2; ++from) {
      const std::string dir = from == 0 ? "0->1" : "1->0";
      // Contiguous, several chunks.
      const devmem::DeviceArray a = devmem::to_device(iota(rows * 128, from)).reshape({rows, 128});
      const devmem::DeviceArray b = devmem::device_array<double>({rows, 128});
      exchange(me, from, "contiguous " + dir + at, a, b, iota(rows * 128, from), 1);
      // Strided on both sides: every other column, received into a transposed view.
      const devmem::DeviceArray wide = devmem::to_device(iota(rows * 16, 7)).reshape({rows, 16});
      const devmem::DeviceArray cols = wide.slice(1, 0, 16, 2);
      const devmem::DeviceArray into = devmem::device_array<double>({8, rows}).transpose();
      const std::vector<double> expected = cols.to_vector<double>();
      exchange(me, from, "strided " + dir + at, cols, into, expected, 2);
      // Eager-sized.
      const devmem::DeviceArray small = devmem::to_device(iota(10, 3));
      const devmem::DeviceArray small_in = devmem::device_array<double>({10});
      exchange(me, from, "eager " + dir + at, small, small_in, iota(10, 3), 3);
      // Persistent rounds, large and small.
      for (const std::int64_t n : {std::int64_t{4}, rows * 64}) {
        const devmem::DeviceArray p = devmem::device_array<double>({n});
        dm::PersistentRequest r =
            me == from ? dm::send_init(p, 1 - me, 4) : dm::recv_init(p, 1 - me, 4);
        for (int round = 0; round < 3; ++round) {
          if (me == from) p.copy_to_device(iota(n, round));
          r.start();
          r.wait();
          if (me != from) {
            expect(p.to_vector<double>() == iota(n, round), "persistent " + std::to_string(n) +
                                                                " " + dir + at + " round " +
                                                                std::to_string(round));
          }
        }
      }
      // A host array on one side, a device array on the other.
      const devmem::HostArray host = devmem::pinned_array<double>({rows, 8});
      const devmem::DeviceArray dev = devmem::device_array<double>({rows, 8});
      if (me == from) {
        host.copy_from(devmem::HostArray::from<double>(iota(rows * 8, 9)).reshape({rows, 8}));
        dm::send(host, 1 - me, 5);
      } else {
        dm::recv(dev, 1 - me, 5);
        expect(dev.to_vector<double>() == iota(rows * 8, 9), "host to device " + dir + at);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0;
  int ranks = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks != 2) {
    if (me == 0) std::fprintf(stderr, "transport_pairs: run with 2 ranks\n");
    MPI_Finalize();
    return 2;
  }
  try {
    run(me);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transport_pairs (rank %d): %s\n", me, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int failures = 0;
  MPI_Allreduce(&g_failures, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (me == 0) std::printf("transport_pairs: %d failure(s)\n", failures);
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}

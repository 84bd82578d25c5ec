// 2-d heat equation (explicit Jacobi steps) on a periodic grid split by columns over MPI ranks, one
// device per rank (rank % device_count()). Each step runs the stencil kernel, then exchanges the
// edge columns (strided views) with the neighbours through devmem::mpi. At the end the ranks check
// that heat is conserved (allreduce) and rank 0 compares the gathered field (allgather) with a
// serial computation of the same steps. Usage: mpirun -np 4 mpi_halo [rows] [columns per rank]
// [steps]. Exit codes: 0 correct, 1 wrong result or error.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>
#include <devmem/mpi.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr double kAlpha = 0.2;  // stable for the 5-point explicit scheme (alpha <= 0.25)
constexpr unsigned kBlock = 8;

// next(i, j) = u + alpha * (sum of the four neighbours - 4 u), for the interior columns 1..n of a
// local block whose columns 0 and n + 1 hold the neighbours' edge columns; rows wrap around.
DEVMEM_KERNEL void heat_step(devmem::ArrayView<const double, 2> u,
                             devmem::ArrayView<double, 2> next, double alpha) {
  const std::int64_t rows = u.shape(0);
  const std::int64_t i = devmem::global_id(1);
  const std::int64_t j = devmem::global_id(0) + 1;
  if (i >= rows || j >= u.shape(1) - 1) return;
  const double centre = u(i, j);
  const double around =
      u((i + rows - 1) % rows, j) + u((i + 1) % rows, j) + u(i, j - 1) + u(i, j + 1);
  next(i, j) = centre + alpha * (around - 4.0 * centre);
}

double initial(std::int64_t i, std::int64_t global_j, std::int64_t rows, std::int64_t columns) {
  // A hot square off centre on a cool, slightly uneven background.
  const bool hot = i > rows / 4 && i < rows / 2 && global_j > columns / 3 && global_j < columns / 2;
  return (hot ? 100.0 : 1.0) + 0.01 * static_cast<double>((i * 7 + global_j * 3) % 11);
}

// The same steps on one host array of rows x columns, periodic in both directions.
std::vector<double> serial(std::int64_t rows, std::int64_t columns, int steps) {
  std::vector<double> u(static_cast<std::size_t>(rows * columns));
  std::vector<double> next(u.size());
  auto at = [&](const std::vector<double>& a, std::int64_t i, std::int64_t j) {
    return a[static_cast<std::size_t>(((i + rows) % rows) * columns + (j + columns) % columns)];
  };
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < columns; ++j) {
      u[static_cast<std::size_t>(i * columns + j)] = initial(i, j, rows, columns);
    }
  }
  for (int s = 0; s < steps; ++s) {
    for (std::int64_t i = 0; i < rows; ++i) {
      for (std::int64_t j = 0; j < columns; ++j) {
        const double centre = at(u, i, j);
        // The kernel's order of additions, so that both give the same bits.
        const double around = at(u, i - 1, j) + at(u, i + 1, j) + at(u, i, j - 1) + at(u, i, j + 1);
        next[static_cast<std::size_t>(i * columns + j)] = centre + kAlpha * (around - 4.0 * centre);
      }
    }
    std::swap(u, next);
  }
  return u;
}

// Ghost column 0 <- the left neighbour's last interior column; ghost column n + 1 <- the right
// neighbour's first. The columns are strided views (stride: one row).
void exchange(const devmem::DeviceArray& u, int left, int right) {
  const std::int64_t n = u.shape()[1] - 2;
  std::vector<devmem::mpi::Request> requests;
  requests.push_back(devmem::mpi::irecv(u.index(1, 0), left, 0));
  requests.push_back(devmem::mpi::irecv(u.index(1, n + 1), right, 1));
  requests.push_back(devmem::mpi::isend(u.index(1, n), right, 0));
  requests.push_back(devmem::mpi::isend(u.index(1, 1), left, 1));
  devmem::mpi::wait_all(requests);
}

int run(int argc, char** argv, int rank, int ranks) {
  const std::int64_t rows = argc > 1 ? std::atoll(argv[1]) : 48;
  const std::int64_t local = argc > 2 ? std::atoll(argv[2]) : 16;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 40;
  if (rows < 3 || local < 1 || steps < 0) {
    if (rank == 0) std::fprintf(stderr, "mpi_halo: rows >= 3, columns per rank >= 1, steps >= 0\n");
    return 1;
  }
  const std::int64_t columns = local * ranks;
  devmem::select_device(rank % devmem::device_count());
  const devmem::Stream stream = devmem::stream();

  // The local block with its two ghost columns.
  std::vector<double> start(static_cast<std::size_t>(rows * (local + 2)), 0.0);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < local; ++j) {
      start[static_cast<std::size_t>(i * (local + 2) + j + 1)] =
          initial(i, rank * local + j, rows, columns);
    }
  }
  devmem::DeviceArray u =
      devmem::to_device(devmem::HostArray::view(start).reshape({rows, local + 2}), stream);
  devmem::DeviceArray next =
      devmem::device_array<double>({rows, local + 2}, devmem::Order::C, stream);
  const int left = (rank + ranks - 1) % ranks;
  const int right = (rank + 1) % ranks;
  const devmem::Dim3 grid((local + kBlock - 1) / kBlock, (rows + kBlock - 1) / kBlock);
  exchange(u, left, right);
  for (int s = 0; s < steps; ++s) {
    devmem::launch({grid, devmem::Dim3(kBlock, kBlock), stream}, heat_step,
                   u.view<const double, 2>(), next.view<double, 2>(), kAlpha);
    std::swap(u, next);
    exchange(u, left, right);  // ordered after the kernel: both use the stream
  }

  // Heat is conserved: the sums over all ranks before and after agree.
  const devmem::DeviceArray interior = u.slice(1, 1, local + 1);
  double sums[2] = {0.0, 0.0};
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < local; ++j)
      sums[0] += start[static_cast<std::size_t>(i * (local + 2) + j + 1)];
  }
  for (const double v : interior.copy_to_host(stream).to_vector<double>()) sums[1] += v;
  const devmem::DeviceArray totals =
      devmem::to_device(std::vector<double>{sums[0], sums[1]}, stream);
  devmem::mpi::allreduce(totals, devmem::mpi::ReduceOp::Sum);
  const std::vector<double> total = totals.to_vector<double>();
  const double drift = std::abs(total[1] - total[0]) / total[0];

  // Every rank's interior (a strided view) gathered and compared with the serial computation.
  const devmem::DeviceArray gathered = devmem::device_array<double>({ranks, rows, local});
  devmem::mpi::allgather(interior, gathered);
  int failures = 0;
  if (rank == 0) {
    const std::vector<double> expected = serial(rows, columns, steps);
    const devmem::HostArray got = gathered.copy_to_host();
    double worst = 0.0;
    for (int r = 0; r < ranks; ++r) {
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < local; ++j) {
          const double e = expected[static_cast<std::size_t>(i * columns + r * local + j)];
          worst = std::max(worst, std::abs(got.at<double>(r, i, j) - e));
        }
      }
    }
    failures = (worst > 1e-9 || drift > 1e-12) ? 1 : 0;
    std::printf(
        "mpi_halo: %d ranks, %lld x %lld grid, %d steps on %s (%s transport): heat %.6f -> "
        "%.6f (relative drift %.1e), max difference from the serial run %.1e: %s\n",
        ranks, static_cast<long long>(rows), static_cast<long long>(columns), steps,
        devmem::backend_name().c_str(), devmem::mpi::to_string(devmem::mpi::transport_for(u)),
        total[0], total[1], drift, worst, failures == 0 ? "correct" : "WRONG");
  }
  MPI_Bcast(&failures, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int status = 1;
  try {
    status = run(argc, argv, rank, ranks);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_halo (rank %d): %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}

// Links devmem::mpi from a package and runs on one rank: a bcast and an allreduce over
// MPI_COMM_SELF, checked. Exit 0 when the values are right.
#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include <cstdio>
#include <vector>

int consumer_rank_in_self();  // mpi_h_first.cpp

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 1;
  try {
    const devmem::DeviceArray a = devmem::to_device(std::vector<int>{1, 2, 3});
    devmem::mpi::bcast(a, 0, MPI_COMM_SELF);
    devmem::mpi::allreduce(a, devmem::mpi::ReduceOp::Max, MPI_COMM_SELF);
    status =
        a.to_vector<int>() == std::vector<int>{1, 2, 3} && consumer_rank_in_self() == 0 ? 0 : 1;
    std::printf("consumer_mpi: %s\n", status == 0 ? "ok" : "wrong values");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_mpi: %s\n", e.what());
  }
  MPI_Finalize();
  return status;
}

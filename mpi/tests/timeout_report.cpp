// DEVMEM_MPI_TIMEOUT: rank 0 waits for a message rank 1 never sends. With the timeout set, rank 0
// prints its pending operations (peer, tag, array, state) and calls MPI_Abort; CTest checks the
// report. Without it this program would hang: run only with DEVMEM_MPI_TIMEOUT set.
#include <devmem/devmem.hpp>
#include <devmem/mpi.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (me == 0) {
    const devmem::DeviceArray pending = devmem::device_array<float>({3, 4});
    const devmem::mpi::Request r = devmem::mpi::irecv(pending, 1, 6);  // also listed
    const devmem::DeviceArray a = devmem::device_array<double>({2, 5});
    devmem::mpi::recv(a, 1, 5);
    std::puts("timeout_report: the receive returned (it must not)");
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 1 waits here until rank 0's MPI_Abort ends the job
  MPI_Finalize();
  return 0;
}

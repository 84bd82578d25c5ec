// An MPI program's own translation unit, as every MPI code has one: it includes <mpi.h> itself,
// before (here: without) <devmem/mpi.hpp>, and calls MPI. With Debian's Open MPI this failed to
// link (mpi.h pulls in the C++ bindings unless OMPI_SKIP_MPICXX is defined, and MPI::MPI_C does
// not link their library): the devmem::mpi target now defines it for its consumers.
#include <mpi.h>

int consumer_rank_in_self() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_SELF, &rank);
  return rank;
}

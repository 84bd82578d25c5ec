// What devmem::mpi's Catch2 programs share: the rank and size of MPI_COMM_WORLD, a scope that
// restores the transport settings, and main()'s body (MPI initialised, devmem::mpi::initialize()
// when DEVMEM_MPI_TESTS_INITIALIZE=1, Catch2 run on every rank, one verdict for all ranks).
// Include after <catch2/catch.hpp> (the programs link devmem_catch_runtime and define main).
#pragma once

#include "tests/common/catch_runtime.hpp"

#include <devmem/mpi.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace mpi_test {

inline int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Sets the transport and chunk size for a section; restores the defaults after it.
struct Settings {
  Settings(devmem::mpi::Transport transport, std::int64_t chunk_bytes) {
    devmem::mpi::set_transport(transport);
    devmem::mpi::set_staging_chunk_bytes(chunk_bytes);
  }
  Settings(const Settings&) = delete;
  Settings& operator=(const Settings&) = delete;
  Settings(Settings&&) = delete;
  Settings& operator=(Settings&&) = delete;
  ~Settings() {
    devmem::mpi::set_transport(devmem::mpi::Transport::Automatic);
    devmem::mpi::set_staging_chunk_bytes(std::int64_t{1} << 20);
  }
};

// main()'s body: MPI_THREAD_MULTIPLE (stream-ordered calls make MPI calls on devmem::mpi's
// progress thread); the suite runs with devmem's traffic on the application's communicators and,
// with DEVMEM_MPI_TESTS_INITIALIZE=1, on its private communicator. A failure on any rank fails all.
inline int run_catch(int argc, char** argv, const char* program) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (const char* private_comm = std::getenv("DEVMEM_MPI_TESTS_INITIALIZE");
      private_comm != nullptr && std::string(private_comm) == "1") {
    devmem::mpi::initialize();
  }
  if (size() < 2) {
    std::fprintf(stderr, "%s: run with at least 2 ranks (mpirun -np 2)\n", program);
    MPI_Finalize();
    return 2;
  }
  const int result = devmem_tests::run_catch_session(argc, argv);
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}

}  // namespace mpi_test

// The main of the test programs that need nothing of their own before Catch2 runs (the
// conformance suite and the devmem::mpi programs have their own).
#include "catch_runtime.hpp"

int main(int argc, char* argv[]) {
  return devmem_tests::run_catch_session(argc, argv);
}

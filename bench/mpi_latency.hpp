// devmem_mpi_bench's small-message part: round-trip latency from 8 bytes and message rate, each
// against raw MPI on host buffers of the same size in the same run. Rounds interleave the variants
// (raw, devmem, devmem persistent) so that the machine's load drifts over all of them alike; the
// tables give the median of the rounds and the ratio of the medians.
#pragma once

namespace devmem_bench {

// Runs the latency and message-rate tables (ranks 0 and 1 of MPI_COMM_WORLD; rank 0 prints).
// Returns the number of data-check failures on this rank.
int run_small_messages(int rank, bool quick);

}  // namespace devmem_bench

// nvcc compiles the simulator's kernel tests from the same source as every other backend (the
// file is empty there: its tests are for the host simulator only).
#include "test_kernels_simulator.cpp"

// nvcc compiles the random-number conformance tests from the same source as every other backend.
#include "test_kernel_random.cpp"

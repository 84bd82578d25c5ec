// nvcc compiles the kernel atomics conformance tests from the same source as every other backend.
#include "test_kernel_atomics.cpp"

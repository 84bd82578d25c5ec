// nvcc compiles the reduction conformance tests from the same source as every other backend.
#include "test_kernel_reduce.cpp"

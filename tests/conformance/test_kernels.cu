// nvcc compiles the kernel conformance tests from the same source as every other backend.
#include "test_kernels.cpp"

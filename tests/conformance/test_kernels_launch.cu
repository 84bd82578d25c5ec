// nvcc compiles the kernel launch conformance tests from the same source as every other backend.
#include "test_kernels_launch.cpp"

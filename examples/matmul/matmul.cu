// nvcc builds the matmul example from the same source (matmul.cpp).
#include "matmul.cpp"

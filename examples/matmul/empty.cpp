// The ROC matmul example is matmul.cpp compiled by hipcc (see examples/CMakeLists.txt); this
// translation unit only gives the executable a C++ source of its own.

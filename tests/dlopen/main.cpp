// libdevmem loaded with dlopen by a program that is already running, as `import devmem` loads it
// into Python. libdevmem's thread-local storage is static (backends/host/host_kernel.cpp's
// initial-exec runner pointer), and such a module gets only glibc's small static-TLS surplus: once
// 8 KiB of thread-local data made every import fail with "cannot allocate memory in static TLS
// block", which only the GPU bundle's NumPy 2 import in CI noticed. Exits 0 when the library loads,
// 1 with dlerror()'s text when it does not.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s LIBDEVMEM\n", argv[0]);
    return 2;
  }
  void* const library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "dlopen of %s failed: %s\n", argv[1], dlerror());
    return 1;
  }
  dlclose(library);
  return 0;
}

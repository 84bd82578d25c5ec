// Kernels still queued on the default stream when the process exits (issue 34): a default-stream
// launch is asynchronous in the host simulator, as on a GPU, so main() returns here while its
// kernels wait their turn. The exit must neither hang nor crash: devmem finishes the queued work
// before the objects the kernels use go (a static mapped() scope over the host memory one kernel
// writes, a static array another writes), and writes the failure of a third, which no synchronize
// reported, to stderr in one sentence naming the kernel and its error (CTest checks the line). The
// program's exit status stays its own. A handler registered before devmem's own (so run after
// them) checks that the kernel's writes reached the mapped memory.
#include <devmem/devmem.hpp>
#include <devmem/kernel.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <thread>
#include <vector>

namespace {

// Host memory first, so that it outlives the scope that maps it.
std::vector<int> g_host(1024, 0);
// Constructed (empty) before main(): destroyed after every exit handler registered in main().
std::optional<devmem::MappedScope> g_mapped;
devmem::DeviceArray g_array;

/// One thread: takes a while, then fills `out`, so that it is still queued when main() returns.
DEVMEM_KERNEL void slow_fill(devmem::ArrayView<int, 1> out, int value) {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  for (std::int64_t i = 0; i < out.shape(0); ++i) out[i] = value;
}

DEVMEM_KERNEL void write_past_end(devmem::ArrayView<int, 1> x) {
  x[x.shape(0) + devmem::global_id()] = 1;
}

void check_mapped_memory_written() {
  const bool written = std::all_of(g_host.begin(), g_host.end(), [](int v) { return v == 7; });
  std::printf("default_stream_at_exit: the mapped memory %s\n",
              written ? "holds the kernel's writes" : "misses the kernel's writes");
  std::fflush(stdout);
  if (!written) _exit(1);  // NOLINT(concurrency-mt-unsafe): the verdict, from an exit handler
}

}  // namespace

int main() {
  try {
    // Registered before devmem's handlers (made at its first use below): runs after them.
    if (std::atexit(&check_mapped_memory_written) != 0) return 2;
    g_mapped.emplace(devmem::mapped({devmem::HostArray::view(g_host)}));
    g_array = devmem::device_array<int>({1024});
    devmem::launch<slow_fill>({1, 1}, g_mapped->device_arrays()[0], 7);
    devmem::launch<slow_fill>({1, 1}, g_array, 8);
    devmem::launch<write_past_end>({1, 1}, devmem::device_array<int>({4}));
    // No synchronize: the kernels are still queued when exit begins.
    std::puts("default_stream_at_exit: main returns");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "default_stream_at_exit: unexpected exception: %s\n", e.what());
    return 1;
  }
}

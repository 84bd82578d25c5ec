// What a stream's last operations hold when the process exits without synchronizing that stream:
// up to 16 operations of a stream share one completion event, recorded late (core/keep_alive.hpp),
// so their arrays are held until the stream is synchronized. devmem's exit handler must wait for
// that work and free what it held (the GPU proof's leak check found it held at exit once). On the
// host backend, whose device memory can be counted: exits 0 when no device memory is allocated
// after devmem's exit handler has run, 1 (with the bytes on stderr) otherwise.
#include <devmem/devmem.hpp>
#include <devmem/host_controls.hpp>

#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace {

// Constructed before main(): destroyed after every exit handler registered in main().
devmem::Stream g_stream;

void check_nothing_held() {
  const std::int64_t used = devmem::host::device_memory_used();
  if (used != 0) {
    std::fprintf(stderr,
                 "held_at_exit: %lld bytes of device memory still allocated after devmem's "
                 "exit handler\n",
                 static_cast<long long>(used));
    _exit(1);  // NOLINT(concurrency-mt-unsafe): the verdict, from an exit handler
  }
}

}  // namespace

int main() {
  try {
    // Registered before devmem's own handler (made at its first use below): runs after it.
    if (std::atexit(&check_nothing_held) != 0) return 2;
    g_stream = devmem::stream();
    const devmem::DeviceArray target =
        devmem::device_array<float>({1024}, devmem::Order::C, g_stream);
    {
      const devmem::DeviceArray source = devmem::to_device(std::vector<float>(1024, 1.0f));
      for (int i = 0; i < 3; ++i) target.copy_to_device(source, g_stream);
    }
    // No synchronize: `source` (and, once main returns, `target`) are held by the stream's open
    // batch of operations when exit begins.
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "held_at_exit: %s\n", e.what());
    return 2;
  }
}

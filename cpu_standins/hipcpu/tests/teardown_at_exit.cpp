// Device memory, streams and events still held by static objects when the process exits are
// released after the vendor runtime has been torn down (HIP-CPU's compatibility layer reports
// hipErrorDeinitialized from then on, as ROCm does; CUDA reports cudaErrorCudartUnloading). That
// must be silent: CTest fails this program if it writes anything to stderr or exits non-zero.
#include <devmem/devmem.hpp>

#include <cstdio>
#include <optional>
#include <vector>

namespace {

struct Held {
  std::optional<devmem::Stream> stream;
  std::optional<devmem::Event> event;
  std::optional<devmem::DeviceArray> array;
  std::optional<devmem::DeviceArray> on_stream;
  std::optional<devmem::HostArray> pinned;
};
Held held;  // constructed before main, so destroyed after the runtime's teardown

}  // namespace

int main() {
  std::vector<float> values(256, 1.5f);
  held.stream = devmem::stream();
  held.array = devmem::to_device(values);
  held.on_stream = devmem::to_device(values, *held.stream);
  held.pinned = devmem::pinned_array<float>({256});
  held.event = held.stream->record();
  held.stream->synchronize();
  // Some memory is queued for deferred freeing when the process exits, too.
  for (int i = 0; i < 3; ++i) static_cast<void>(devmem::to_device(values));
  std::printf("teardown_at_exit: %lld elements on device, exiting with them held\n",
              static_cast<long long>(held.array->size()));
  return 0;
}

// Objects with static storage duration that hold devmem resources when the process exits: scopes
// made in main() and kept in globals (std::optional), a scope made during static initialisation, a
// stream with work still queued, and a pooled array. They are destroyed after main() returns, in
// the reverse order of their construction, while devmem's own registries and the vendor runtime may
// already be gone. A Stream::record() event held in a global goes back to its context's event pool
// after devmem's exit handler has emptied and closed it (other records leave idle events there).
// The program must exit 0 and print nothing (review 2, N1 and N5). Exit code 77 when the backend
// has no device.
#include <devmem/devmem.hpp>

#include <cstdio>
#include <exception>
#include <optional>
#include <vector>

namespace {

// Host memory first, so that it outlives the scopes that register it.
std::vector<float> g_pinned_memory(4096, 1.0f);
std::vector<float> g_mapped_memory(4096, 2.0f);
std::vector<float> g_static_init_memory(1024, 3.0f);
std::vector<float> g_download(1 << 16, 0.0f);

bool device_present() {
  try {
    return devmem::device_count() > 0;
  } catch (const std::exception&) {
    return false;
  }
}
const bool g_has_device = device_present();
#if DEVMEM_EXIT_STATIC_INIT_SCOPE
// The second build of this program also registers memory during static initialisation, before
// main(): devmem's registries are then made before the scopes below instead of after them.
std::optional<devmem::PinnedScope> g_static_init_scope =
    g_has_device ? std::optional<devmem::PinnedScope>(
                       devmem::pinned(devmem::HostArray::view(g_static_init_memory)))
                 : std::nullopt;
#endif

// Filled in main(): constructed (empty) before devmem's registries were first used, so destroyed
// after them unless those registries are immortal.
std::optional<devmem::PinnedScope> g_pinned;
std::optional<devmem::MappedScope> g_mapped;
devmem::Stream g_stream;
devmem::DeviceArray g_pooled;
devmem::DeviceArray g_uploaded;
std::optional<devmem::Event> g_recorded;

}  // namespace

int main() {
  if (!g_has_device) {
    std::printf("static_objects: skipped: the backend has no device\n");
    return 77;
  }
  try {
    g_pinned.emplace(devmem::pinned(devmem::HostArray::view(g_pinned_memory)));
    g_mapped.emplace(devmem::mapped({devmem::HostArray::view(g_mapped_memory)}));
    g_stream = devmem::stream();
    g_pooled = devmem::device_array<float>({1 << 16}, devmem::Order::C, g_stream);
    g_pooled.fill(4.0f, g_stream);
    // Work left queued at exit: a download into pageable memory and an upload from pinned memory.
    g_pooled.copy_to_host(devmem::HostArray::view(g_download), g_stream);
    g_uploaded = devmem::to_device(devmem::HostArray::view(g_pinned_memory), g_stream);
    // A pooled block: freed into the pool, which keeps it until the process ends.
    (void)devmem::device_array<float>({1 << 10}, devmem::Order::C, g_stream);
    // Recycled events idle in the context's pool at exit, and one still held by a global.
    for (int i = 0; i < 8; ++i) (void)g_stream.record();
    g_recorded.emplace(g_stream.record());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "static_objects: %s\n", e.what());
    return 1;
  }
  return 0;  // nothing synchronized: the destructors after main() meet the queued work
}

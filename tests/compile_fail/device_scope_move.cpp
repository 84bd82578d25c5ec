// Must not compile: a DeviceScope belongs to the block and thread that made it, so it cannot be
// moved out of them (its end restores that thread's previous device).
#include <devmem/devmem.hpp>

#include <utility>

void use() {
  devmem::DeviceScope scope(1);
  devmem::DeviceScope moved = std::move(scope);
  static_cast<void>(moved);
}

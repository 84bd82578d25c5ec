// Uses each name of the core API that 0.1.0 deprecated (docs/migration.md): compiled with
// -Werror=deprecated-declarations it must fail, each use naming its replacement. The same uses
// compile and behave as the new names in tests/unit/test_deprecated_names.cpp.
#include <devmem/devmem.hpp>

#include <cstdint>

std::int64_t use(const devmem::Layout& layout, const devmem::ArrayView<float, 2>& view) {
  return layout.extent().bytes() + view.stride(0);
}

// The strict fake backend (test-only: DEVMEM_WITH_STRICT_FAKE, preset `strict-fake`,
// docs/strict-fake.md): gpu_runtime::RuntimeBackend, the code of the CUDA and ROC backends,
// instantiated with the strict fake runtime's call table (strict_fake_api.hpp), so that the GPU
// conformance suite runs that code against a runtime as strict as a GPU where HIP-CPU is not.
#include "backends/gpu_runtime/runtime_backend.hpp"
#include "backends/strict_fake/strict_fake_api.hpp"
#include "backends/strict_fake/strict_fake_controls.hpp"

#include "core/backend_factories.hpp"

#include <cstddef>
#include <memory>

namespace devmem {
namespace strict_fake {
namespace {

class StrictFakeBackend final : public gpu_runtime::RuntimeBackend<StrictFakeApi> {};

}  // namespace

std::size_t set_copy_chunk(std::size_t chunk) {
  auto* const fake = dynamic_cast<StrictFakeBackend*>(&active_backend());
  if (fake == nullptr) {
    throw InvalidArgument("strict_fake::set_copy_chunk: the active backend is not the strict fake");
  }
  gpu_runtime::StagingOptions options = fake->staging_options();
  const std::size_t previous = options.chunk;
  options.chunk = chunk;
  fake->set_staging_options(options);  // refuses 0
  return previous;
}
}  // namespace strict_fake

std::unique_ptr<Backend> make_strict_fake_backend() {
  return std::make_unique<strict_fake::StrictFakeBackend>();
}

}  // namespace devmem

// Factories of the compiled backends, one per backend folder (backends/<name>/). Only the registry
// in core/backend.cpp calls them; it creates the active backend exactly once. Not installed.
#pragma once

#include <devmem/backend.hpp>
#include <devmem/config.hpp>

#include <memory>

namespace devmem {

/// The host simulator (backends/host). Always compiled.
std::unique_ptr<Backend> make_host_backend();
#if DEVMEM_HAS_CUDA
/// The CUDA runtime backend (backends/cuda).
std::unique_ptr<Backend> make_cuda_backend();
#endif
#if DEVMEM_HAS_ROC
/// The HIP/HSA backend (backends/roc).
std::unique_ptr<Backend> make_roc_backend();
#endif
#if DEVMEM_HAS_STRICT_FAKE
/// The test-only strict fake GPU runtime (backends/strict_fake).
std::unique_ptr<Backend> make_strict_fake_backend();
#endif

}  // namespace devmem

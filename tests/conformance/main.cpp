// Runs the conformance suite against the backend this executable was built for. Without a device
// it says why and exits with the skip code, so CTest shows "Not Run" instead of "Passed".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char* argv[]) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& config = session.configData();
  const bool listing =
      config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters;
  try {
    devmem::select_backend(DEVMEM_CONFORMANCE_BACKEND);
    if (!listing && devmem::device_count() == 0) {
      std::printf("conformance_%s: skipped: backend '%s' has no device: %s\n",
                  DEVMEM_CONFORMANCE_BACKEND, DEVMEM_CONFORMANCE_BACKEND,
                  devmem::active_backend().no_device_reason().c_str());
      return DEVMEM_SKIP_RETURN_CODE;
    }
  } catch (const std::exception& e) {
    std::printf("conformance_%s: skipped: %s\n", DEVMEM_CONFORMANCE_BACKEND, e.what());
    return DEVMEM_SKIP_RETURN_CODE;
  }
  return session.run();
}

// Runs the conformance suite against the backend this executable was built for. Without a device
// it says why and exits with the skip code, so CTest shows "Not Run" instead of "Passed".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <devmem/devmem.hpp>

#include <cstdio>
#include <cstring>
#include <exception>

namespace conformance {
// The second process of the IPC tests (test_ipc.cpp).
int ipc_child_main(int argc, char** argv);
}  // namespace conformance

int main(int argc, char* argv[]) {
  if (argc >= 2 && std::strcmp(argv[1], "--devmem-ipc-child") == 0) {
    try {
      devmem::select_backend(DEVMEM_CONFORMANCE_BACKEND);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ipc child: %s\n", e.what());
      return 2;
    }
    return conformance::ipc_child_main(argc - 2, argv + 2);
  }
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

// Runs the conformance suite against the backend this executable was built for. Without a device
// it says why and exits with the skip code, so CTest shows "Not Run" instead of "Passed". The same
// when DEVMEM_CONFORMANCE_MIN_DEVICES asks for more devices than the backend has: the CTest
// entries of the multi-device group set it to 2, so that on one device they are reported skipped
// rather than passing without having run.
#include "../common/catch_runtime.hpp"

#include <devmem/devmem.hpp>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string_view>

namespace {

/// DEVMEM_CONFORMANCE_MIN_DEVICES (0 when unset); -1 when it is not a non-negative integer.
int min_devices() {
  const char* const text = std::getenv("DEVMEM_CONFORMANCE_MIN_DEVICES");
  if (text == nullptr || *text == '\0') return 0;
  const std::string_view view(text);
  int value = -1;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  return error == std::errc{} && end == view.data() + view.size() && value >= 0 ? value : -1;
}

}  // namespace

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
  return devmem_tests::run_catch_session(argc, argv, [](bool listing) -> std::optional<int> {
    try {
      devmem::select_backend(DEVMEM_CONFORMANCE_BACKEND);
      if (!listing && devmem::device_count() == 0) {
        std::printf("conformance_%s: skipped: backend '%s' has no device: %s\n",
                    DEVMEM_CONFORMANCE_BACKEND, DEVMEM_CONFORMANCE_BACKEND,
                    devmem::active_backend().no_device_reason().c_str());
        return DEVMEM_SKIP_RETURN_CODE;
      }
      const int wanted = min_devices();
      if (wanted < 0) {
        std::printf(
            "conformance_%s: DEVMEM_CONFORMANCE_MIN_DEVICES must be a non-negative integer\n",
            DEVMEM_CONFORMANCE_BACKEND);
        return 2;
      }
      if (!listing && devmem::device_count() < wanted) {
        std::printf("conformance_%s: skipped: these tests need %d devices, backend '%s' has %d\n",
                    DEVMEM_CONFORMANCE_BACKEND, wanted, DEVMEM_CONFORMANCE_BACKEND,
                    devmem::device_count());
        return DEVMEM_SKIP_RETURN_CODE;
      }
    } catch (const std::exception& e) {
      std::printf("conformance_%s: skipped: %s\n", DEVMEM_CONFORMANCE_BACKEND, e.what());
      return DEVMEM_SKIP_RETURN_CODE;
    }
    return std::nullopt;
  });
}

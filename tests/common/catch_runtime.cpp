// Catch2 v2's implementation, compiled once per build tree (tests/common/catch_runtime.cmake)
// instead of once in every test program, and the session entry of catch_runtime.hpp.
#define CATCH_CONFIG_RUNNER
#include "catch_runtime.hpp"

#include <catch2/catch.hpp>

namespace devmem_tests {

int run_catch_session(int argc, char* argv[], const BeforeTests& before_tests) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (before_tests) {
    const Catch::ConfigData& config = session.configData();
    const bool listing =
        config.listTests || config.listTestNamesOnly || config.listTags || config.listReporters;
    if (const std::optional<int> stop = before_tests(listing)) return *stop;
  }
  return session.run();
}

}  // namespace devmem_tests

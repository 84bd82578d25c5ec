// The entry into Catch2's session for test programs whose main needs more than Catch2's own
// (tests/common/catch_runtime.cmake: the implementation is compiled once per build tree, where
// Catch::Session is declared; the programs' files see only this).
#pragma once

#include <functional>
#include <optional>

namespace devmem_tests {

/// Called after the command line is parsed, before any test runs, with whether Catch2 was only
/// asked to list (tests, tags, reporters): an exit code stops the program with it.
using BeforeTests = std::function<std::optional<int>(bool listing)>;

/// Parses argc/argv as Catch2 does (returning its code for a bad command line), calls
/// `before_tests` if given, then runs the selected tests and returns Catch2's exit code.
int run_catch_session(int argc, char* argv[], const BeforeTests& before_tests = {});

}  // namespace devmem_tests

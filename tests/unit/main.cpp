// Catch2 v2 entry point for the unit tests (layout math and dtypes; no backend involved).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

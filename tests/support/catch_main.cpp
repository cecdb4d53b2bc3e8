// The Catch2 main of the CPU test binaries, compiled once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

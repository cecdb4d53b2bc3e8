// What ember's programs share: the exit codes (2 for bad input or usage, 1 for anything else)
// the command-line parse, and the one place that turns exceptions into "error: ..." on stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace ember::apps {

// A mistake in how the program was called: names the option or file and what to do.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Runs `body`, printing "error: <message>" and returning 2 for usage errors and bad input
// (ember's ValueError, DeviceError, IoError, FormatError, ShapeError, DTypeError), 1 otherwise.
int run_program(const std::function<int()>& body);

// Parses the command line (--help prints the options and returns 0; a bad option prints
// "error: ..." and returns 2), then run_program(body).
int run_cli(CLI::App& app, int argc, char** argv, const std::function<int()>& body);

}  // namespace ember::apps

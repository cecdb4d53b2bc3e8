// What ember's programs share: the exit codes (2 for bad input or usage, 1 for anything else)
// the command-line parse, and the one place that turns exceptions into "error: ..." on stderr.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor/device.h"

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

// Checks for numeric options, as `->check(apps::positive)`. CLI11's own (PositiveNumber, ...)
// print their bounds as 309-digit numbers; these say "--epochs: 0 is not a positive number".
// Both take finite numbers only.
extern const CLI::Validator positive;      // > 0
extern const CLI::Validator non_negative;  // >= 0

// The device a --device option names: "auto" is Device::best() (and `reason` says why), else
// cpu, cuda or cuda:N, checked usable. UsageError naming the option and its alternatives
// (`option` auto or cpu) otherwise.
Device choose_device(const std::string& option, const std::string& value, std::string& reason);

// A data-parallel program's start (mpirun launches it once per rank): dist::init (a UsageError
// naming `option` when it fails), then stdout silenced on every rank but 0, which alone prints;
// the others keep stderr for their errors. Then the collectives' deadline and the exit notices
// (Note [lost ranks]).
void start_distributed(const std::string& option, double collective_timeout);

// choose_device for one rank of a data-parallel run: "auto" or "cuda" give each rank a GPU of its
// own (its local rank modulo the GPUs), or the CPU where there is none; `reason` names the rank.
Device choose_rank_device(const std::string& option, const std::string& value, std::string& reason);

// "32" or "512,256": positive sizes separated by commas (UsageError naming the option and showing
// `example` otherwise), and back.
std::vector<std::int64_t> parse_sizes(const std::string& option, const std::string& text, const char* example);
std::string join_sizes(const std::vector<std::int64_t>& sizes);

// Whether a person may be watching stdout: a terminal, and not one rank of an MPI launch (each
// rank's output is a pseudo-terminal whatever the launcher's own output is, so a rank cannot tell).
bool interactive_output(bool distributed);
// "\r  [=====     ] done/total", for interactive output; the last step (done == total) clears it.
void progress_bar(std::size_t done, std::size_t total);

}  // namespace ember::apps

// Exception-to-exit-code mapping for the programs.
#include "apps/common/program.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/error.h"
#include "core/cuda/runtime.h"
#include "distributed/dist.h"
#include "distributed/watchdog.h"

namespace ember::apps {
namespace {

// A validator of numbers: "" when `text` is a finite number that `ok` accepts, else the reason,
// which CLI11 prefixes with the option's name. The empty description keeps --help as it was.
CLI::Validator number_check(const char* name, bool (*ok)(double), const char* refusal) {
  return CLI::Validator(
      [ok, refusal](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0') return text + " is not a number";
        if (!std::isfinite(v)) return text + " is not a finite number";
        return ok(v) ? std::string() : text + refusal;
      },
      "", name);
}

// require_usable for a program's user: the library's message suggests Device::best(), which only
// a caller of the API can take; a person running a program needs the option's other values.
void require_usable_option(const std::string& option, const std::string& value, const Device& device) {
  if (device.is_cpu()) return;
  std::string why;
  if (!cuda::is_available())
    why = cuda::unavailable_reason();
  else if (device.index >= cuda::device_count())
    why = detail::concat("only ", cuda::device_count(),
                         " CUDA device(s) found (cuda:0 to cuda:", cuda::device_count() - 1, ")");
  else
    return;
  throw UsageError(detail::concat(option, " ", value, ": cannot use ", device, ": ", why, "; use ", option, " auto or ",
                                  option, " cpu"));
}

}  // namespace

const CLI::Validator positive = number_check(
    "POSITIVE", [](double v) { return v > 0; }, " is not a positive number");
const CLI::Validator non_negative = number_check(
    "NONNEGATIVE", [](double v) { return v >= 0; }, " is negative (expected 0 or more)");

int run_program(const std::function<int()>& body) {
  auto report = [](const std::exception& e, int code) {
    std::fflush(stdout);
    if (dist::is_initialized() && dist::world_size() > 1) {
      // The other ranks would wait in their next collective: end them all, now.
      std::fprintf(stderr, "error (rank %d of %d): %s\n", dist::rank(), dist::world_size(), e.what());
      std::fflush(stderr);
      dist::abort_all(code);
    }
    std::fprintf(stderr, "error: %s\n", e.what());
    return code;
  };
  try {
    return body();
  } catch (const UsageError& e) {
    return report(e, 2);
  } catch (const ValueError& e) {
    return report(e, 2);
  } catch (const DeviceError& e) {
    return report(e, 2);
  } catch (const IoError& e) {
    return report(e, 2);
  } catch (const FormatError& e) {
    return report(e, 2);
  } catch (const ShapeError& e) {
    return report(e, 2);
  } catch (const DTypeError& e) {
    return report(e, 2);
  } catch (const std::exception& e) {
    return report(e, 1);
  }
}

int run_cli(CLI::App& app, int argc, char** argv, const std::function<int()>& body) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\nRun with --help for the options.\n", e.what());
    return 2;
  }
  return run_program(body);
}

Device choose_device(const std::string& option, const std::string& value, std::string& reason) {
  if (value == "auto") {
    reason = Device::best_reason();
    return Device::best();
  }
  Device device = Device::cpu();
  try {
    device = Device::parse(value);
  } catch (const Error& e) {
    throw UsageError(option + " " + value + ": " + e.what());
  }
  require_usable_option(option, value, device);
  reason = device.str() + " (" + option + " " + value + ")";
  return device;
}

void start_distributed(const std::string& option, double collective_timeout) {
  try {
    dist::init();
  } catch (const dist::DistError& e) {
    throw UsageError(option + ": " + e.what());
  }
  if (!dist::is_main() && !std::freopen("/dev/null", "w", stdout))
    throw IoError(option + ": cannot silence the output of rank " + std::to_string(dist::rank()));
  dist::set_collective_timeout(collective_timeout);
  dist::start_exit_notices();
}

Device choose_rank_device(const std::string& option, const std::string& value, std::string& reason) {
  if (value != "auto" && value != "cuda") return choose_device(option, value, reason);
  const Device device =
      value == "cuda" ? Device::cuda(dist::local_rank() % std::max(1, cuda::device_count())) : dist::default_device();
  require_usable_option(option, value, device);
  if (device.is_cuda()) cuda::set_device(device);  // once, for the rank's life (Note [a rank's device])
  reason = detail::concat(device.str(), " (rank ", dist::rank(), " of ", dist::world_size(), ", local rank ",
                          dist::local_rank(), ")");
  return device;
}

std::vector<std::int64_t> parse_sizes(const std::string& option, const std::string& text, const char* example) {
  std::vector<std::int64_t> sizes;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > (1 << 20))
      throw UsageError(option + " " + text + ": expected positive sizes separated by commas, e.g. " + example);
    sizes.push_back(v);
  }
  return sizes;
}

std::string join_sizes(const std::vector<std::int64_t>& sizes) {
  std::string s;
  for (std::size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
  return s;
}

bool interactive_output(bool distributed) {
  const bool under_launcher =
      distributed || std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") || std::getenv("PMIX_RANK");
  return ::isatty(STDOUT_FILENO) && !under_launcher;
}

void progress_bar(std::size_t done, std::size_t total) {
  const int width = 30;
  const int filled = total ? static_cast<int>(width * done / total) : width;
  if (done == total)
    std::printf("\r%60s\r", "");
  else
    std::printf("\r  [%.*s%.*s] %zu/%zu", filled, "==============================", width - filled,
                "                              ", done, total);
  std::fflush(stdout);
}

}  // namespace ember::apps

// Exception-to-exit-code mapping for the programs.
#include "apps/common/program.h"

#include <cstdio>

#include "core/base/error.h"
#include "distributed/dist.h"

namespace ember::apps {

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

}  // namespace ember::apps

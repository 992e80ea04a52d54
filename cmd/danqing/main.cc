// danqing: the workload's CLI and HTTP service. Thin main: subcommands are
// registered from their own files (commands.h).
//
//   danqing serve [--port 8080] ...   the HTTP service (see docs/service.md)
#include <CLI/CLI.hpp>

#include "cmd/danqing/commands.h"
#include "common/log.h"

int main(int argc, char** argv) {
  CLI::App app{"danqing: a photo in, a poem in calligraphy over an ink-wash painting out"};
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off [env DANQING_LOG_LEVEL]");
  app.parse_complete_callback([&] {
    if (auto st = danqing::log::Configure(log_level); !st.ok()) {
      throw CLI::ValidationError("--log-level", st.message());
    }
  });
  danqing::cli::RegisterServeCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}

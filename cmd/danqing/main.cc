// danqing: the workload CLI (render, serve). Thin main:
// the subcommands register themselves from their own files (commands.h).
//
// Exit codes: 0 success; 1 failure; 2 usage error.
#include <CLI/CLI.hpp>

#include "commands.h"
#include "common/log.h"

int main(int argc, char** argv) {
  CLI::App app{"danqing: poetic calligraphy over ink-wash paintings"};
  app.set_version_flag("--version", "danqing " DANQING_VERSION);
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off [env DANQING_LOG_LEVEL]");
  app.parse_complete_callback([&] {
    auto st = danqing::log::Configure(log_level);
    if (!st.ok()) throw CLI::ValidationError("--log-level", st.message());
  });
  RegisterRenderCommand(app);
  RegisterServeCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A command's own failure keeps its code; a bad command line is 2, as for
    // the agent (CLI11 would use 105 and others for a value out of range).
    const int rc = app.exit(e);
    if (rc == 0 || dynamic_cast<const CLI::RuntimeError*>(&e) != nullptr) return rc;
    return 2;
  }
  return 0;
}

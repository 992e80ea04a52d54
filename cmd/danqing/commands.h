// The danqing CLI's subcommands; each registers its flags and callback.
#pragma once

#include <CLI/CLI.hpp>

namespace danqing::cli {

void RegisterServeCommand(CLI::App& app);

}  // namespace danqing::cli

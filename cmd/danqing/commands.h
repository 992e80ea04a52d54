// Subcommands of the `danqing` CLI. Each lives in its own file and registers
// itself on the app passed in from main.cc; a subcommand that fails throws
// CLI::RuntimeError(exit_code) from its callback after printing why.
#pragma once

#include <CLI/CLI.hpp>

// `danqing render`: one inscription to a PNG/JPEG file (render_command.cc).
void RegisterRenderCommand(CLI::App& app);

// `danqing serve`: the HTTP service and upload page (serve_command.cc).
void RegisterServeCommand(CLI::App& app);

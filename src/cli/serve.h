#pragma once
// `tensorfold serve [MODEL]`: the OpenAI-compatible HTTP server (docs/api.md).
#include <CLI/CLI.hpp>

namespace tf::cli {

// Registers the "serve" subcommand; its callback runs the server until SIGINT/SIGTERM.
void add_serve_command(CLI::App& app);

}  // namespace tf::cli

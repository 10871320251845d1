#pragma once
// Each `tensorfold` command registers itself on the CLI11 app: one file per command.
#include <CLI/CLI.hpp>

namespace tf::cli {

void add_generate_command(CLI::App& app);
void add_models_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_pull_command(CLI::App& app);
void add_bench_command(CLI::App& app);

// A model argument: empty = the embedded demo model; a local dir or org/name[@rev] in the HF cache.
std::string resolve_model_arg(const std::string& arg);

// --cuda-graphs on|off and --pad-drafts auto|on|off (EngineOptions::cuda_graphs, pad_drafts), the same for
// serve, generate and bench.
void add_graph_options(CLI::App& c, std::string& cuda_graphs, std::string& pad_drafts);

}  // namespace tf::cli

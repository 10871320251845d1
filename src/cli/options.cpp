// Options that several commands share (commands.h).
#include "cli/commands.h"

namespace tf::cli {

void add_graph_options(CLI::App& c, std::string& cuda_graphs, std::string& pad_drafts) {
  c.add_option("--cuda-graphs", cuda_graphs,
               "on | off: replay decode and verify forwards from captured CUDA graphs (same output, fewer "
               "launches)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  c.add_option("--pad-drafts", pad_drafts,
               "auto | on | off: pad proposals to 1, 2, 4, 8.. tokens so verify rounds replay as CUDA graphs "
               "(same output; auto = when graphs replay and a decode round takes < 1 ms; docs/drafting.md)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
}

}  // namespace tf::cli

// `tensorfold pull MODEL...`: download checkpoints into the Hugging Face cache, refusing unsupported
// ones before any weight moves.
#include "checkpoint/pull.h"

#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "models/model.h"

namespace tf::cli {

void add_pull_command(CLI::App& app) {
  auto ids = std::make_shared<std::vector<std::string>>();
  auto revision = std::make_shared<std::string>();
  auto force = std::make_shared<bool>(false);
  auto* c =
      app.add_subcommand("pull", "Download checkpoints (org/name[@revision]) into the Hugging Face cache");
  c->add_option("models", *ids, "Model ids")->required();
  c->add_option("--revision", *revision, "Branch, tag or commit (default: main)");
  c->add_flag("--force", *force, "Download even when the family is not supported");
  c->callback([ids, revision, force] {
    for (const auto& id : *ids) {
      PullOptions o;
      o.revision = *revision;
      if (!*force)
        o.check = [](const PullPlan& plan) {
          try {
            parse_spec(plan.config);
          } catch (const Error& e) {
            throw Error(plan.repo + " is not supported, nothing downloaded: " + e.what() +
                        " (--force downloads anyway)");
          }
        };
      PullResult r = pull_model(id, o);
      std::cout << id << " -> " << r.snapshot_dir << "\n";
    }
  });
}

}  // namespace tf::cli

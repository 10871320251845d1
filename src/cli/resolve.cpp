#include <filesystem>

#include "checkpoint/locate.h"
#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"

namespace tf::cli {

std::string resolve_model_arg(const std::string& arg) {
  if (arg.empty()) {
    std::string demo = default_model_dir();
    if (demo.empty())
      throw Error("no MODEL given and the embedded demo model is not installed (models/demo)");
    return demo;
  }
  if (arg == "demo" && !std::filesystem::exists(arg)) return resolve_model_arg("");
  return resolve_model(arg);
}

}  // namespace tf::cli

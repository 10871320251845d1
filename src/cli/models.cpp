// `tensorfold models`: the supported families, the embedded demo model and the checkpoints in the
// Hugging Face cache.
#include <iomanip>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/locate.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "models/model.h"

namespace tf::cli {

namespace {

void run_models() {
  std::cout << "Families (config.json model_type):\n";
  for (const auto& f : families())
    std::cout << "  " << std::left << std::setw(12) << f.model_type << f.description << "\n";
  std::cout << "Weight formats: safetensors F32 / BF16 / F16 (quantized formats: not yet)\n\n";
  std::string demo = default_model_dir();
  std::cout << "Embedded default model:\n  "
            << (demo.empty() ? std::string("(not installed)") : "demo  " + demo) << "\n\n";
  auto cached = list_cached_models();
  std::cout << "In the Hugging Face cache (" << hf_hub_cache_dir() << "):\n";
  if (cached.empty()) std::cout << "  (none; `tensorfold pull org/name` downloads one)\n";
  for (const auto& m : cached) {
    std::string status;
    try {
      auto s = inspect_checkpoint(m.path);
      parse_spec(s.config);
      status = s.config.value("model_type", "") + ", supported";
    } catch (const std::exception& e) {
      status = std::string("not loadable: ") + e.what();
    }
    std::cout << "  " << std::left << std::setw(40) << m.id << std::setw(10) << (m.size_bytes >> 20)
              << "MiB  " << status << "\n";
  }
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto* c = app.add_subcommand("models", "List supported families, the demo model and cached checkpoints");
  c->callback([] { run_models(); });
}

}  // namespace tf::cli

// `tensorfold info MODEL`: reads config and weight headers only (for a remote id: a few small requests,
// nothing downloaded) and says whether the checkpoint is supported, and if not, precisely why.
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "checkpoint/checkpoint.h"
#include "checkpoint/locate.h"
#include "checkpoint/pull.h"
#include "cli/commands.h"
#include "core/error.h"
#include "models/model.h"
#include "models/weight_stats.h"

namespace tf::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  std::ostringstream o;
  o << std::fixed << std::setprecision(u ? 2 : 0) << b << " " << units[u];
  return o.str();
}

CheckpointSummary summarize(const std::string& arg) {
  if (arg.empty() || std::filesystem::is_directory(arg)) return inspect_checkpoint(resolve_model_arg(arg));
  if (auto id = parse_model_id(arg)) {
    if (auto snap = find_cached_snapshot(hf_hub_cache_dir(), *id)) return inspect_checkpoint(*snap);
    return inspect_remote(arg);
  }
  throw Error("'" + arg + "' is neither a directory nor an org/name model id");
}

void run_info(const std::string& arg) {
  CheckpointSummary s = summarize(arg);
  const WeightStats w = weight_stats(s);
  const int64_t params = w.parameters, mtp = w.mtp_parameters;
  const std::string dtype = w.format;
  std::cout << "checkpoint   " << s.source << "\n";
  std::cout << "model_type   " << s.config.value("model_type", std::string("?")) << "\n";
  std::cout << "parameters   " << params << (mtp ? " (+" + std::to_string(mtp) + " in the MTP head)" : "")
            << "\n";
  std::cout << "dtype        " << dtype << (w.mixed_dtypes ? " (mixed)" : "") << "\n";
  std::cout << "weights      " << human_bytes(double(s.total_bytes)) << " in " << s.weight_files.size()
            << " file(s)\n";
  try {
    ModelSpec spec = parse_spec(s.config);
    std::cout << "layers       " << spec.layers << "\n";
    std::cout << "hidden       " << spec.hidden << " (intermediate " << spec.intermediate << ")\n";
    std::cout << "heads        " << spec.heads << " query / " << spec.kv_heads << " key-value, head dim "
              << spec.head_dim << "\n";
    std::cout << "vocabulary   " << spec.vocab << (spec.tie_embeddings ? " (tied embeddings)" : "") << "\n";
    std::cout << "context      " << spec.native_context << " native"
              << (spec.rope.scaling_type.empty() ? "" : ", rope scaling " + spec.rope.scaling_type) << "\n";
    std::cout << "kv cache     " << human_bytes(double(spec.kv_bytes_per_token(2)) * 1000)
              << " per 1k tokens (bf16, GPU), " << human_bytes(double(spec.kv_bytes_per_token(4)) * 1000)
              << " (f32, CPU)\n";
    if (spec.mtp_layers) std::cout << "mtp head     " << spec.mtp_layers << " layer(s)\n";
    std::cout << "supported    yes\n";
  } catch (const Error& e) {
    std::cout << "supported    no: " << e.what() << "\n";
    throw Error("unsupported checkpoint: " + std::string(e.what()));
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto arg = std::make_shared<std::string>();
  auto* c = app.add_subcommand("info", "Describe a checkpoint from its config and headers (no weights read)");
  c->add_option("model", *arg, "Checkpoint directory or org/name[@revision] (default: the demo model)");
  c->callback([arg] { run_info(*arg); });
}

}  // namespace tf::cli

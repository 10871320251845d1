#include "models/moe.h"

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "models/weights.h"

namespace tf {

MoeWeights load_moe(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec, const std::string& p) {
  const int64_t H = spec.hidden, I = spec.moe_intermediate;
  MoeWeights w;
  w.top_k = spec.experts_per_tok;
  w.norm_topk_prob = spec.norm_topk_prob;
  w.router = load_linear(ckpt, be, p + "gate", spec.num_experts, H, false);
  const std::string sw = p + "switch_mlp.";
  const bool stacked = ckpt.has(sw + "gate_proj.weight");
  if (!stacked && !ckpt.has(p + "experts.0.gate_proj.weight"))
    throw Error(ckpt.dir() + ": no expert weights for " + p + " (expected " + p +
                "experts.N.gate_proj.weight or mlx-lm's " + sw + "gate_proj.weight)");
  for (int e = 0; e < spec.num_experts; ++e) {
    if (stacked) {
      std::vector<LinearWeight> gu = {read_expert_linear(ckpt, sw + "gate_proj", e, spec.num_experts, I, H),
                                      read_expert_linear(ckpt, sw + "up_proj", e, spec.num_experts, I, H)};
      w.gate_up.push_back(be.upload_linear(fuse_linears(std::move(gu))));
      w.down.push_back(
          be.upload_linear(read_expert_linear(ckpt, sw + "down_proj", e, spec.num_experts, H, I)));
    } else {
      const std::string ep = p + "experts." + std::to_string(e) + ".";
      w.gate_up.push_back(load_fused_linear(ckpt, be, {ep + "gate_proj", ep + "up_proj"}, {I, I}, H));
      w.down.push_back(load_linear(ckpt, be, ep + "down_proj", H, I, false));
    }
  }
  return w;
}

}  // namespace tf

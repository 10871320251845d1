// Qwen3-MoE (Qwen3MoeForCausalLM, e.g. Qwen3-30B-A3B): the qwen3 attention with sparse SwiGLU MLPs — a
// softmax router choosing num_experts_per_tok of num_experts experts per token (weights renormalised when
// norm_topk_prob), in every decoder_sparse_step-th layer except mlp_only_layers, which keep a dense MLP.
#include <algorithm>

#include "core/error.h"
#include "models/dense_decoder.h"

namespace tf {

Family qwen3_moe_family() {
  Family f;
  f.model_type = "qwen3_moe";
  f.description = "Qwen3 mixture of experts (softmax top-k router, SwiGLU experts)";
  f.parse = [](const nlohmann::json& c) {
    using namespace config_util;
    ModelSpec s = parse_dense_spec(c);
    s.qk_norm = true;
    if (get_bool(c, "use_sliding_window", false))
      throw Error("qwen3_moe: use_sliding_window=true is not supported yet");
    s.num_experts =
        get_int(c, "num_experts", get_int(c, "num_local_experts", 0));  // transformers 5 writes the latter
    s.experts_per_tok = get_int(c, "num_experts_per_tok");
    s.moe_intermediate = get_int(c, "moe_intermediate_size");
    s.norm_topk_prob = get_bool(c, "norm_topk_prob", false);
    TF_CHECK(s.num_experts > 0 && s.experts_per_tok > 0 && s.experts_per_tok <= s.num_experts,
             "config.json: num_experts_per_tok must be between 1 and num_experts");
    const int step = get_int(c, "decoder_sparse_step", 1);
    TF_CHECK(step > 0, "config.json: decoder_sparse_step must be positive");
    std::vector<int> dense_only;
    if (c.contains("mlp_only_layers") && c["mlp_only_layers"].is_array())
      for (const auto& v : c["mlp_only_layers"]) dense_only.push_back(v.get<int>());
    s.sparse_layers.assign(size_t(s.layers), false);
    for (int l = 0; l < s.layers; ++l)
      s.sparse_layers[l] =
          std::find(dense_only.begin(), dense_only.end(), l) == dense_only.end() && (l + 1) % step == 0;
    return s;
  };
  f.load = [](const Checkpoint& ckpt, Backend& be, const ModelSpec& s, int context) {
    return load_dense_decoder(ckpt, be, s, context);
  };
  return f;
}

}  // namespace tf

#pragma once
// Sparse mixture-of-experts MLP (Qwen3-MoE style): softmax router, top-k experts per token (ties to the
// lower expert id), optional renormalisation of the k weights, SwiGLU experts. Built from the row-invariant
// ops: each expert runs `linear` on the rows of the tokens that chose it, and outputs are combined in
// increasing expert id, so a token's result depends only on the token itself.
#include <string>
#include <vector>

#include "models/model.h"

namespace tf {

struct MoeWeights {
  LinearWeight router;                     // [experts, hidden]
  std::vector<LinearWeight> gate_up, down;  // per expert: [2I, H] (gate rows first), [H, I]
};

// Reads `prefix` + "gate.weight" and "experts.{e}.{gate,up,down}_proj" (Hugging Face per-expert layout).
MoeWeights load_moe(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec, const std::string& prefix);

// Per expert, the rows of the tokens that chose it and their combine weights.
struct MoeRouting {
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<float>> weights;
};
// Routing from router logits [rows, experts] (host f32), as transformers' Qwen3MoeTopKRouter does it.
MoeRouting route_tokens(const float* logits, int rows, int experts, int top_k, bool norm_topk_prob);

// out[R, H] = the MoE MLP of h[R, H].
void moe_forward(Backend& be, const ModelSpec& spec, MoeWeights& w, const Tensor& h, Tensor& out);

}  // namespace tf

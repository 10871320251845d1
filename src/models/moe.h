#pragma once
// Sparse mixture-of-experts MLP (Qwen3-MoE style): softmax router, top-k experts per token (ties to the
// lower expert id), optional renormalisation of the k weights, SwiGLU experts. The arithmetic is
// Backend::moe's (ops/backend.h): a token's result depends only on the token itself.
#include <string>

#include "models/model.h"

namespace tf {

// Reads `prefix` + "gate" (the router) and the experts in either layout:
//   Hugging Face per-expert   experts.{e}.{gate,up,down}_proj.weight (dense, MLX-quantized or FP8)
//   mlx-lm stacked            switch_mlp.{gate,up,down}_proj.weight [experts, out, in'] (+ .scales/.biases
//                             [experts, out, groups] when quantized)
MoeWeights load_moe(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec, const std::string& prefix);

}  // namespace tf

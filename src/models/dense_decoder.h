#pragma once
// The Llama-style dense decoder that qwen3 and llama share: pre-norm attention with GQA and RoPE, SwiGLU
// MLP, optional q/k norm and attention bias. Families differ in config parsing and small flags only.
#include "models/model.h"

namespace tf {

struct DenseWeightNames {
  std::string prefix = "model.";  // "model.layers.0...." etc.
};

std::unique_ptr<Model> load_dense_decoder(const Checkpoint& ckpt, Backend& backend, const ModelSpec& spec,
                                          int context, const DenseWeightNames& names = {});
// Reads the fields every Llama-style config shares (hidden_size, heads, rope, ...).
ModelSpec parse_dense_spec(const nlohmann::json& config);

}  // namespace tf

#pragma once
// Reading a linear layer's weight from a checkpoint in whatever format it ships: dense (F32/BF16/F16)
// today; quantized formats (MLX affine, FP8 block-scaled) plug in here, so families stay format-agnostic.
#include <string>

#include "ops/backend.h"

namespace tf {

class Checkpoint;

// `base` is the layer's name without the ".weight" suffix (e.g. "model.layers.0.self_attn.q_proj").
// Checks shapes against out_features x in_features and uploads to the backend.
LinearWeight load_linear(const Checkpoint& ckpt, Backend& be, const std::string& base, int64_t out_features,
                         int64_t in_features, bool bias);

}  // namespace tf

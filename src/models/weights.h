#pragma once
// Reading a linear layer's weight from a checkpoint in whatever format it ships, so families stay
// format-agnostic. The format is detected from the tensors present next to `<base>.weight` and checked
// against config.json's quantization block:
//   <base>.scales + .biases          MLX affine (bits and group size follow from the shapes)
//   <base>.weight_scale_inv          FP8 e4m3, block-scaled (DeepSeek/Qwen FP8) or per-tensor
//   <base>.weight_scale (F8 weight)  compressed-tensors FP8, per-tensor / per-channel / block
//   otherwise                        dense F32/BF16/F16
// FP8 scales of every kind are normalised to F32 [out, ceil(in/group_size)] (see ops/cpu/quant.h).
#include <string>
#include <vector>

#include "ops/backend.h"

namespace tf {

class Checkpoint;

// The weight as stored, on the host, not uploaded. `base` is the layer's name without ".weight"
// (e.g. "model.layers.0.self_attn.q_proj"). Checks every shape against out_features x in_features.
LinearWeight read_linear(const Checkpoint& ckpt, const std::string& base, int64_t out_features,
                         int64_t in_features, bool bias);
// read_linear + upload to the backend.
LinearWeight load_linear(const Checkpoint& ckpt, Backend& be, const std::string& base, int64_t out_features,
                         int64_t in_features, bool bias);
// Several linears reading the same input fused along the output dimension, in the order given (gate rows
// first, then up). Same-format parts are concatenated as stored (packed weight, scales and biases row by
// row); parts of different formats or bit widths are dequantized to F32 first.
LinearWeight load_fused_linear(const Checkpoint& ckpt, Backend& be, const std::vector<std::string>& bases,
                               const std::vector<int64_t>& out_features, int64_t in_features);
// The parts fused along the output dimension on the host (what load_fused_linear uploads). Biases, when
// the parts have them, are concatenated too (as f32 when their dtypes differ: the same values).
LinearWeight fuse_linears(std::vector<LinearWeight> parts);
// Whether the parts share one storage layout (format, dtypes, bits, group size), so that fuse_linears
// concatenates them as stored and the fused linear's outputs are bitwise the separate linears'.
bool same_layout(const std::vector<LinearWeight>& parts);
// Expert `expert` of mlx-lm's stacked expert tensors (`<base>.weight` [experts, out, in] dense, or
// MLX-packed with `.scales`/`.biases` [experts, out, groups]): the LinearWeight read_linear gives for the
// same expert stored alone (a view of the checkpoint's tensors, not a copy).
LinearWeight read_expert_linear(const Checkpoint& ckpt, const std::string& base, int expert, int64_t experts,
                                int64_t out, int64_t in);
// An embedding table [vocab, hidden] uploaded with Backend::upload: dense as stored; MLX-quantized tables
// are dequantized on the host into the scales' dtype (exactly mx.dequantize's values).
Tensor load_embedding(const Checkpoint& ckpt, Backend& be, const std::string& base, int64_t vocab,
                      int64_t hidden);

}  // namespace tf

#pragma once
// The quantization a checkpoint declares in config.json, validated before anything is downloaded:
//   MLX affine ("quantization" / "quantization_config" as mlx-lm writes it): bits, group_size, and
//     per-layer entries keyed by module path — {"bits":6,"group_size":64} or false (left unquantized);
//   FP8 block ("quantization_config": {"quant_method":"fp8","weight_block_size":[128,128]});
//   compressed-tensors FP8 (float 8-bit weights, strategy tensor / channel / block).
// Anything else (AWQ, GPTQ, bitsandbytes, MXFP4/NVFP4, other bit widths) is refused with the reason.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace tf {

struct LayerQuant {
  bool quantized = false;
  int bits = 0, group_size = 0;
};

struct QuantConfig {
  enum class Method { None, MlxAffine, Fp8 };
  Method method = Method::None;
  int bits = 0, group_size = 0;                 // MLX affine defaults
  std::map<std::string, LayerQuant> overrides;  // MLX per-layer entries, by module path
  int block_out = 0, block_in = 0;              // FP8 block sizes (0 = not block-scaled)
  std::string fp8_strategy;                     // "block", "tensor", "channel" (FP8 only)

  // The MLX quantization of one module (path without ".weight"): its override if any, else the default.
  LayerQuant layer(const std::string& module) const;
  // One line for `tensorfold info`: "mlx affine 4-bit, group 64 (mixed: 3 layers at 6-bit)".
  std::string describe() const;
};

// Throws tf::Error naming the unsupported variant. Returns Method::None for unquantized configs.
QuantConfig parse_quant_config(const nlohmann::json& config);

}  // namespace tf

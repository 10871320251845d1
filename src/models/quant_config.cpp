#include "models/quant_config.h"

#include <set>

#include "core/error.h"

namespace tf {

namespace {

const std::set<int> kMlxBits = {2, 3, 4, 5, 6, 8};
const std::set<int> kMlxGroups = {32, 64, 128};

int int_field(const nlohmann::json& q, const char* key, const std::string& where) {
  if (!q.contains(key) || !q[key].is_number_integer())
    throw Error("config.json: " + where + " needs an integer '" + key + "'");
  return q[key].get<int>();
}

LayerQuant mlx_layer(const nlohmann::json& q, const std::string& where) {
  LayerQuant l;
  l.quantized = true;
  l.bits = int_field(q, "bits", where);
  l.group_size = int_field(q, "group_size", where);
  if (!kMlxBits.count(l.bits))
    throw Error("config.json: " + where + " uses " + std::to_string(l.bits) +
                "-bit MLX quantization; supported bit widths are 2, 3, 4, 5, 6 and 8");
  if (!kMlxGroups.count(l.group_size))
    throw Error("config.json: " + where + " uses MLX group size " + std::to_string(l.group_size) +
                "; supported group sizes are 32, 64 and 128");
  return l;
}

QuantConfig parse_mlx(const nlohmann::json& q) {
  if (q.contains("mode") && q["mode"] != "affine")
    throw Error("config.json: MLX quantization mode '" + q["mode"].dump() +
                "' is not supported (only affine; mxfp4/nvfp4/mxfp8 are not yet)");
  QuantConfig c;
  c.method = QuantConfig::Method::MlxAffine;
  LayerQuant d = mlx_layer(q, "the quantization block");
  c.bits = d.bits;
  c.group_size = d.group_size;
  for (const auto& [key, v] : q.items()) {
    if (v.is_boolean()) {
      c.overrides[key] = v.get<bool>() ? d : LayerQuant{};
    } else if (v.is_object()) {
      c.overrides[key] = mlx_layer(v, "quantization entry '" + key + "'");
    }
  }
  return c;
}

QuantConfig parse_fp8_block(const nlohmann::json& q) {
  if (q.contains("fmt") && q["fmt"] != "e4m3")
    throw Error("config.json: FP8 format " + q["fmt"].dump() + " is not supported (only e4m3)");
  QuantConfig c;
  c.method = QuantConfig::Method::Fp8;
  c.fp8_strategy = "tensor";
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    const auto& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int>() <= 0 || b[1].get<int>() <= 0)
      throw Error("config.json: quantization_config.weight_block_size must be [out, in] positive integers");
    c.fp8_strategy = "block";
    c.block_out = b[0].get<int>();
    c.block_in = b[1].get<int>();
  }
  return c;
}

// compressed-tensors: every config group must quantize weights to 8-bit floats.
QuantConfig parse_compressed_tensors(const nlohmann::json& q) {
  QuantConfig c;
  c.method = QuantConfig::Method::Fp8;
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    throw Error("config.json: compressed-tensors quantization_config has no config_groups");
  for (const auto& [name, g] : q["config_groups"].items()) {
    const std::string where = "compressed-tensors group '" + name + "'";
    if (!g.contains("weights") || !g["weights"].is_object())
      throw Error("config.json: " + where + " has no weights scheme");
    const auto& w = g["weights"];
    const std::string type = w.value("type", std::string("int"));
    const int nbits = w.value("num_bits", 0);
    if (type != "float" || nbits != 8)
      throw Error("config.json: " + where + " quantizes weights to " + std::to_string(nbits) + "-bit " +
                  type + "; only 8-bit float (FP8) compressed-tensors checkpoints are supported");
    const std::string strategy = w.value("strategy", std::string("tensor"));
    if (strategy != "tensor" && strategy != "channel" && strategy != "block")
      throw Error("config.json: " + where + " uses FP8 strategy '" + strategy +
                  "'; supported: tensor, channel, block");
    if (!c.fp8_strategy.empty() && c.fp8_strategy != strategy)
      throw Error("config.json: compressed-tensors groups mix FP8 strategies, which is not supported");
    c.fp8_strategy = strategy;
    if (strategy == "block") {
      const auto& b = w.value("block_structure", nlohmann::json());
      if (!b.is_array() || b.size() != 2)
        throw Error("config.json: " + where + " needs block_structure [out, in]");
      c.block_out = b[0].get<int>();
      c.block_in = b[1].get<int>();
    }
  }
  return c;
}

}  // namespace

QuantConfig parse_quant_config(const nlohmann::json& config) {
  if (!config.is_object()) return {};
  if (config.contains("quantization") && config["quantization"].is_object())
    return parse_mlx(config["quantization"]);
  if (!config.contains("quantization_config") || !config["quantization_config"].is_object()) return {};
  const auto& q = config["quantization_config"];
  const std::string method = q.value("quant_method", std::string());
  if (method.empty() && q.contains("bits") && q.contains("group_size")) return parse_mlx(q);  // mlx-lm copy
  if (method == "fp8") return parse_fp8_block(q);
  if (method == "compressed-tensors") return parse_compressed_tensors(q);
  if (method.empty()) throw Error("config.json: quantization_config has no quant_method");
  throw Error("config.json: quantization method '" + method +
              "' is not supported (supported: MLX affine 2/3/4/5/6/8-bit, FP8 e4m3 block/tensor/channel)");
}

LayerQuant QuantConfig::layer(const std::string& module) const {
  if (method != Method::MlxAffine) return {};
  auto it = overrides.find(module);
  if (it != overrides.end()) return it->second;
  return LayerQuant{true, bits, group_size};
}

std::string QuantConfig::describe() const {
  if (method == Method::None) return "";
  if (method == Method::Fp8) {
    std::string s = "fp8 e4m3, ";
    if (fp8_strategy == "block")
      return s + std::to_string(block_out) + "x" + std::to_string(block_in) + " block scales";
    return s + "per-" + fp8_strategy + " scales";
  }
  std::string s = "mlx affine " + std::to_string(bits) + "-bit, group " + std::to_string(group_size);
  std::map<std::string, int> other;  // "6-bit" / "unquantized" -> count of layers
  for (const auto& [k, l] : overrides) {
    if (!l.quantized)
      ++other["unquantized"];
    else if (l.bits != bits || l.group_size != group_size)
      ++other[std::to_string(l.bits) + "-bit" +
              (l.group_size != group_size ? " g" + std::to_string(l.group_size) : "")];
  }
  if (other.empty()) return s;
  s += " (mixed:";
  bool first = true;
  for (const auto& [what, n] : other) {
    s += std::string(first ? " " : ", ") + std::to_string(n) + (n == 1 ? " layer " : " layers ") +
         (what == "unquantized" ? what : "at " + what);
    first = false;
  }
  return s + ")";
}

}  // namespace tf

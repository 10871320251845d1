// The family registry (by config.json's model_type) and config helpers families share.
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "models/model.h"
#include "models/quant_config.h"

namespace tf {

Family qwen3_family();
Family llama_family();
Family qwen3_moe_family();

const std::vector<Family>& families() {
  static const std::vector<Family> all = {qwen3_family(), llama_family(), qwen3_moe_family()};
  return all;
}

const Family& find_family(const nlohmann::json& config) {
  TF_CHECK(config.is_object() && config.contains("model_type") && config["model_type"].is_string(),
           "config.json has no model_type");
  const std::string t = config["model_type"];
  std::string names;
  for (const auto& f : families()) {
    if (f.model_type == t) return f;
    names += (names.empty() ? "" : ", ") + f.model_type;
  }
  throw Error("model_type '" + t + "' is not supported (supported: " + names + ")");
}

// The quantization block is validated here too, so `pull` and `info` refuse unsupported variants (AWQ,
// GPTQ, 7-bit, NVFP4, ...) from config.json alone, before any weight is downloaded.
ModelSpec parse_spec(const nlohmann::json& config) {
  ModelSpec spec = find_family(config).parse(config);
  parse_quant_config(config);
  return spec;
}

std::unique_ptr<Model> load_model(const Checkpoint& ckpt, Backend& backend, int context) {
  const Family& f = find_family(ckpt.config());
  parse_quant_config(ckpt.config());
  return f.load(ckpt, backend, f.parse(ckpt.config()), context);
}

namespace config_util {

int get_int(const nlohmann::json& c, const char* key, std::optional<int> fallback) {
  if (!c.contains(key) || c[key].is_null()) {
    if (fallback) return *fallback;
    throw Error(std::string("config.json: missing required field '") + key + "'");
  }
  if (!c[key].is_number_integer())
    throw Error(std::string("config.json: field '") + key + "' must be an integer");
  return c[key].get<int>();
}

float get_float(const nlohmann::json& c, const char* key, float fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_number()) throw Error(std::string("config.json: field '") + key + "' must be a number");
  return c[key].get<float>();
}

bool get_bool(const nlohmann::json& c, const char* key, bool fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_boolean())
    throw Error(std::string("config.json: field '") + key + "' must be true or false");
  return c[key].get<bool>();
}

std::vector<int32_t> get_ids(const nlohmann::json& c, const char* key) {
  std::vector<int32_t> ids;
  if (!c.contains(key) || c[key].is_null()) return ids;
  const auto& v = c[key];
  if (v.is_number_integer())
    ids.push_back(v.get<int32_t>());
  else if (v.is_array())
    for (const auto& e : v)
      if (e.is_number_integer()) ids.push_back(e.get<int32_t>());
  return ids;
}

RopeConfig rope_config(const nlohmann::json& c, int head_dim) {
  RopeConfig r;
  r.head_dim = head_dim;
  r.max_position = get_int(c, "max_position_embeddings", 2048);
  // transformers 4.x writes rope_theta + rope_scaling; 5.x writes rope_parameters (theta inside).
  nlohmann::json s = nlohmann::json::object();
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object()) s = c["rope_parameters"];
  if (c.contains("rope_scaling") && c["rope_scaling"].is_object())
    for (auto& [k, v] : c["rope_scaling"].items()) s[k] = v;
  r.theta = get_float(s, "rope_theta", get_float(c, "rope_theta", 10000.f));
  r.partial_rotary_factor = get_float(s, "partial_rotary_factor", get_float(c, "partial_rotary_factor", 1.f));
  std::string type = s.value("rope_type", s.value("type", std::string()));
  if (type == "default") type.clear();
  r.scaling_type = type;
  r.factor = get_float(s, "factor", 1.f);
  r.low_freq_factor = get_float(s, "low_freq_factor", 1.f);
  r.high_freq_factor = get_float(s, "high_freq_factor", 4.f);
  r.original_max_position = get_int(c, "original_max_position_embeddings",
                                    get_int(s, "original_max_position_embeddings", r.max_position));
  r.beta_fast = get_float(s, "beta_fast", 32.f);
  r.beta_slow = get_float(s, "beta_slow", 1.f);
  r.mscale = get_float(s, "mscale", 0.f);
  r.mscale_all_dim = get_float(s, "mscale_all_dim", 0.f);
  r.attention_factor = get_float(s, "attention_factor", 0.f);
  r.truncate = get_bool(s, "truncate", true);
  return r;
}

}  // namespace config_util
}  // namespace tf

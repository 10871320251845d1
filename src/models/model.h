#pragma once
// A model family turns a checkpoint into a forward pass written with the ops of ops/backend.h.
// One file per family (qwen3.cpp, llama.cpp, ...), registered by config.json's model_type.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ops/backend.h"

namespace tf {

class Checkpoint;
struct CheckpointSummary;

// Everything the engine needs to know about a model, from config.json alone.
struct ModelSpec {
  std::string family;  // model_type
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0, vocab = 0;
  int native_context = 0;  // max_position_embeddings
  float norm_eps = 1e-6f;
  float norm_offset = 0.f;  // 1 for (1 + w) norms
  float embed_scale = 1.f;
  bool qk_norm = false, attention_bias = false, mlp_bias = false, tie_embeddings = false;
  RopeConfig rope;
  int sliding_window = 0;
  std::vector<int32_t> eos_ids;  // from config.json (generation_config adds more in the engine)
  std::optional<int32_t> bos_id;
  int mtp_layers = 0;  // MTP head layers shipped in the checkpoint (mtp.*)
  // Mixture of experts (qwen3_moe): layers whose MLP is sparse, and its shape.
  int num_experts = 0, experts_per_tok = 0, moe_intermediate = 0;
  bool norm_topk_prob = false;
  std::vector<bool> sparse_layers;
  bool is_sparse(int layer) const { return layer < int(sparse_layers.size()) && sparse_layers[layer]; }

  int64_t kv_bytes_per_token(size_t elem_bytes) const {
    return int64_t(layers) * 2 * kv_heads * head_dim * int64_t(elem_bytes);
  }
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelSpec& spec() const = 0;
  // What a forward hands back for its logit rows (any combination).
  struct Outputs {
    std::vector<float>* logits = nullptr;                // host f32 [logit_rows.size(), vocab] (host_rows)
    const std::vector<RowSampling>* sampling = nullptr;  // one per logit row: sampled on the device ...
    std::vector<int32_t>* tokens = nullptr;              // ... into this (Backend::sample_rows)
    Tensor* hidden = nullptr;  // every row's final hidden state (after the last norm, what the lm_head
                               // reads), host [rows, hidden] in the backend's activation dtype
    // A decode or verify round (no prompt rows) that may replay a captured CUDA graph of the same shape
    // (Backend::run_graph; --cuda-graphs). The same bits either way; models without graphs ignore it.
    bool graph = false;
    // Set (when given) to whether this forward captured a CUDA graph: milliseconds of capture and
    // instantiation on top of the forward, so its time says nothing about later forwards of the shape.
    bool* graph_captured = nullptr;
    // When given, only these of the logit rows (indices into logit_rows, ascending) go to `logits`, which
    // is then [host_rows->size(), vocab]: a round where one stream samples on the host (logprobs,
    // penalties, structured outputs) copies its rows, not every stream's.
    const std::vector<int32_t>* host_rows = nullptr;
  };
  // Runs the batch's rows: writes each row's K/V into `kv` (one KvLayer per layer) and produces `out`
  // for the rows listed in `logit_rows`.
  virtual void forward(const BatchMeta& meta, std::vector<KvLayer>& kv,
                       const std::vector<int32_t>& logit_rows, const Outputs& out) = 0;
  // The host logits of the rows listed (and optionally every row's hidden state).
  void forward(const BatchMeta& meta, std::vector<KvLayer>& kv, const std::vector<int32_t>& logit_rows,
               std::vector<float>& logits, Tensor* hidden = nullptr) {
    forward(meta, kv, logit_rows, Outputs{&logits, nullptr, nullptr, hidden});
  }

  // Multi-token-prediction head, for checkpoints that ship one (mtp.*). Row r at position p reads token
  // p+1 (meta.tokens) and `hidden_in` row r (the model's hidden state at p, or the head's own output when
  // chaining) and predicts token p+2. Its single layer keeps its own KV (`kv`). `hidden_out` (optional)
  // receives the head's output states for chaining.
  virtual bool has_mtp() const { return false; }
  virtual void forward_mtp(const BatchMeta& meta, KvLayer& kv, const Tensor& hidden_in,
                           const std::vector<int32_t>& logit_rows, std::vector<float>& logits,
                           Tensor* hidden_out);
};

struct Family {
  std::string model_type;
  std::string description;
  // Parses and validates config.json; throws tf::Error with the precise reason when unsupported.
  std::function<ModelSpec(const nlohmann::json& config)> parse;
  std::function<std::unique_ptr<Model>(const Checkpoint&, Backend&, const ModelSpec&, int context)> load;
};

const std::vector<Family>& families();
// Throws "model_type 'x' is not supported (supported: ...)".
const Family& find_family(const nlohmann::json& config);
ModelSpec parse_spec(const nlohmann::json& config);
std::unique_ptr<Model> load_model(const Checkpoint& ckpt, Backend& backend, int context);

// Shared config helpers for families.
namespace config_util {
int get_int(const nlohmann::json& c, const char* key, std::optional<int> fallback = std::nullopt);
float get_float(const nlohmann::json& c, const char* key, float fallback);
bool get_bool(const nlohmann::json& c, const char* key, bool fallback);
std::vector<int32_t> get_ids(const nlohmann::json& c, const char* key);  // int or list of ints
RopeConfig rope_config(const nlohmann::json& c, int head_dim);
}  // namespace config_util

}  // namespace tf

#pragma once
// Helpers of the GPU tests that load a model: a random-weight Qwen3 or Qwen3-MoE checkpoint in Hugging Face
// layout (config.json + model.safetensors) in a temporary directory -- uniform weights from a counter hash
// (fast at real layer shapes), linears (routers and experts too) scaled for unit-variance outputs, norms
// around 1 -- a zeroed KV pool, and a tensor's device bytes.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/backend.h"

namespace tf::test {

struct Qwen3Shape {
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 128, inter = 0, vocab = 0;
  double rope_theta = 1e6;
  // Qwen3-MoE (experts > 0): every layer's MLP sparse -- a router of `experts` choosing `top_k`, SwiGLU
  // experts of `moe_inter` (`inter` is then only config.json's intermediate_size, which no layer uses).
  int experts = 0, top_k = 0, moe_inter = 0;
  bool norm_topk_prob = true;
  bool tie_embeddings = true;  // bf16 checkpoints: false writes an lm_head (MLX 4-bit ones always do)
};

inline uint64_t counter_hash(int64_t i, uint64_t seed) {
  uint64_t x = (uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xD1B54A32D192ED03ull;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
  return x;
}

// Uniform bf16 values in [mean - a, mean + a].
inline Tensor random_bf16(std::vector<int64_t> shape, uint64_t seed, float mean, float a) {
  Tensor t = Tensor::empty(std::move(shape), DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float u = float(counter_hash(i, seed) >> 40) / float(1 << 24);  // [0, 1)
    p[i] = f32_to_bf16(mean + a * (2.f * u - 1.f));
  }
  return t;
}

// An MLX affine `bits`-bit (4 or 8) weight [n, k] as mlx-lm writes it (`weight` U32 [n, k bits / 32], value
// j of a word at bits `bits` j; bf16 `scales` and `biases` [n, k / group]), like a uniform weight in about
// [-a, a]: random codes, a group's scale in [0.5, 1] x a / m and its bias about -m x scale (m = (2^bits - 1)
// / 2). `stack` > 0: mlx-lm's stacked experts (switch_mlp), [stack, n, ...] each.
inline void add_random_mlx(NamedTensors& t, const std::string& base, int64_t n, int64_t k, int group,
                           uint64_t seed, float a, int bits = 4, int64_t stack = 0) {
  auto shape = [&](int64_t last) {
    return stack > 0 ? std::vector<int64_t>{stack, n, last} : std::vector<int64_t>{n, last};
  };
  Tensor w = Tensor::empty(shape(k * bits / 32), DType::U32);
  uint32_t* p = w.data<uint32_t>();
  for (int64_t i = 0; i < w.numel(); ++i) p[i] = uint32_t(counter_hash(i, seed) >> 16);
  const float mid = float((1 << bits) - 1) / 2.f, s = 0.75f * a / mid;
  t.emplace_back(base + ".weight", std::move(w));
  t.emplace_back(base + ".scales", random_bf16(shape(k / group), seed + 1, s, s / 3));
  t.emplace_back(base + ".biases", random_bf16(shape(k / group), seed + 2, -mid * s, s));
}

// MLX 4-bit linears (write_random_qwen3): the group size, and other groups of some linears (config.json's
// per-layer overrides, keyed by the module, e.g. "model.layers.0.mlp.down_proj").
struct Mlx4Layout {
  int group = 64;
  std::vector<std::pair<std::string, int>> overrides;
};

// Writes the checkpoint (q/k norms, no bias) to <temp>/<name>_<pid>; returns the directory. bf16 linears and
// tied embeddings (or an lm_head: !s.tie_embeddings), or (mlx4) MLX 4-bit linears and an MLX 4-bit lm_head
// (the embeddings bf16), as mlx-lm's conversions of untied models. With s.experts > 0 a qwen3_moe
// checkpoint as transformers writes Qwen3MoeForCausalLM: every layer sparse (decoder_sparse_step 1, no
// mlp_only_layers), the router mlp.gate.weight [experts, hidden] and each expert's
// mlp.experts.<e>.{gate,up,down}_proj.weight; or (mlx4) as mlx-lm converts it: the router at 8 bits (groups
// of 64, config.json's per-module entry) and the experts stacked, mlp.switch_mlp.{gate,up,down}_proj
// [experts, ...] at 4 bits.
inline std::string write_random_qwen3(const std::string& name, const Qwen3Shape& s,
                                      const Mlx4Layout* mlx4 = nullptr) {
  namespace fs = std::filesystem;
  const bool moe = s.experts > 0, tied = !mlx4 && s.tie_embeddings;
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ostringstream config;
  config
      << (moe ? R"({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": )"
              : R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": )")
      << s.hidden << R"(, "num_hidden_layers": )" << s.layers << R"(, "num_attention_heads": )" << s.heads
      << R"(, "num_key_value_heads": )" << s.kv_heads << R"(, "head_dim": )" << s.head_dim
      << R"(, "intermediate_size": )" << s.inter << R"(, "vocab_size": )" << s.vocab
      << R"(, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": )" << s.rope_theta
      << R"(, "tie_word_embeddings": )" << (tied ? "true" : "false")
      << R"(, "attention_bias": false, "hidden_act": "silu", "eos_token_id": 2, "use_sliding_window": false)";
  if (moe)
    config << R"(, "num_experts": )" << s.experts << R"(, "num_experts_per_tok": )" << s.top_k
           << R"(, "moe_intermediate_size": )" << s.moe_inter << R"(, "norm_topk_prob": )"
           << (s.norm_topk_prob ? "true" : "false") << R"(, "decoder_sparse_step": 1, "mlp_only_layers": [])";
  auto group_of = [&](const std::string& module) {
    for (const auto& [m, g] : mlx4->overrides)
      if (m == module) return g;
    return mlx4->group;
  };
  if (mlx4) {
    config << R"(, "quantization": {"group_size": )" << mlx4->group << R"(, "bits": 4)";
    for (const auto& [m, g] : mlx4->overrides)
      config << R"(, ")" << m << R"(": {"group_size": )" << g << R"(, "bits": 4})";
    for (int l = 0; moe && l < s.layers; ++l)  // mlx-lm's predicate: the router at 8 bits
      config << R"(, "model.layers.)" << l << R"(.mlp.gate": {"group_size": 64, "bits": 8})";
    config << "}";
  }
  config << "}";
  std::ofstream(dir / "config.json") << config.str();
  NamedTensors t;
  const int64_t H = s.hidden, D = s.head_dim, Q = int64_t(s.heads) * D, KV = int64_t(s.kv_heads) * D,
                I = s.inter;
  uint64_t seed = 1;
  auto linear = [&](const std::string& module, int64_t n, int64_t k) {
    const float a = std::sqrt(3.f / float(k));
    if (mlx4)
      add_random_mlx(t, module, n, k, group_of(module), seed, a), seed += 3;
    else
      t.emplace_back(module + ".weight", random_bf16({n, k}, seed++, 0.f, a));
  };
  auto norm = [&](int64_t n) { return random_bf16({n}, seed++, 1.f, 0.2f); };
  // A MoE checkpoint (GBs of experts) goes out a layer a shard as transformers shards them, with
  // model.safetensors.index.json: one layer's tensors in memory at a time.
  std::string weight_map;
  auto flush_shard = [&](int l) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", l + 1, s.layers);
    for (const auto& [n, w] : t)
      weight_map += (weight_map.empty() ? "\"" : ", \"") + n + "\": \"" + file + "\"";
    write_safetensors((dir / file).string(), t);
    t.clear();
  };
  t.emplace_back("model.embed_tokens.weight", random_bf16({s.vocab, H}, seed++, 0.f, 1.f));
  if (!tied) linear("lm_head", s.vocab, H);
  t.emplace_back("model.norm.weight", norm(H));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.emplace_back(p + "input_layernorm.weight", norm(H));
    t.emplace_back(p + "post_attention_layernorm.weight", norm(H));
    linear(p + "self_attn.q_proj", Q, H);
    linear(p + "self_attn.k_proj", KV, H);
    linear(p + "self_attn.v_proj", KV, H);
    linear(p + "self_attn.o_proj", H, Q);
    t.emplace_back(p + "self_attn.q_norm.weight", norm(D));
    t.emplace_back(p + "self_attn.k_norm.weight", norm(D));
    if (moe && mlx4) {  // the router (8-bit) and the stacked experts
      add_random_mlx(t, p + "mlp.gate", s.experts, H, 64, seed, std::sqrt(3.f / float(H)), 8), seed += 3;
      const int64_t E = s.experts, MI = s.moe_inter;
      for (const char* proj : {"gate_proj", "up_proj"})
        add_random_mlx(t, p + "mlp.switch_mlp." + proj, MI, H, group_of(p + "mlp.switch_mlp." + proj), seed,
                       std::sqrt(3.f / float(H)), 4, E),
            seed += 3;
      add_random_mlx(t, p + "mlp.switch_mlp.down_proj", H, MI, group_of(p + "mlp.switch_mlp.down_proj"), seed,
                     std::sqrt(3.f / float(MI)), 4, E),
          seed += 3;
      flush_shard(l);
      continue;
    }
    if (moe) {
      linear(p + "mlp.gate", s.experts, H);  // the router: unit-variance logits, a softmax far from one-hot
      for (int e = 0; e < s.experts; ++e) {
        const std::string ep = p + "mlp.experts." + std::to_string(e) + ".";
        linear(ep + "gate_proj", s.moe_inter, H);
        linear(ep + "up_proj", s.moe_inter, H);
        linear(ep + "down_proj", H, s.moe_inter);
      }
      flush_shard(l);
      continue;
    }
    linear(p + "mlp.gate_proj", I, H);
    linear(p + "mlp.up_proj", I, H);
    linear(p + "mlp.down_proj", H, I);
  }
  if (moe)
    std::ofstream(dir / "model.safetensors.index.json")
        << R"({"metadata": {}, "weight_map": {)" << weight_map << "}}";
  else
    write_safetensors((dir / "model.safetensors").string(), t);
  return dir.string();
}

// `layers` KV layers of `blocks` blocks of `block` positions, zeroed.
inline std::vector<KvLayer> zeroed_pool(Backend& be, int layers, int64_t blocks, int block, int kv_heads,
                                        int head_dim) {
  std::vector<KvLayer> pool;
  for (int l = 0; l < layers; ++l) {
    KvLayer kv;
    kv.k = be.alloc({blocks, block, kv_heads, head_dim}, be.act_dtype());
    kv.v = be.alloc({blocks, block, kv_heads, head_dim}, be.act_dtype());
    be.zero(kv.k);
    be.zero(kv.v);
    pool.push_back(std::move(kv));
  }
  return pool;
}

inline std::vector<uint8_t> device_bytes(Backend& be, const Tensor& t) {
  std::vector<uint8_t> b(t.nbytes());
  be.read_raw(t, 0, b.size(), b.data());
  return b;
}

}  // namespace tf::test

#pragma once
// Helpers of the GPU tests that load a model: a random-weight Qwen3 checkpoint in Hugging Face layout
// (config.json + model.safetensors) in a temporary directory -- uniform weights from a counter hash (fast at
// real layer shapes), linears scaled for unit-variance outputs, norms around 1 -- a zeroed KV pool, and a
// tensor's device bytes.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/safetensors_writer.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/backend.h"

namespace tf::test {

struct Qwen3Shape {
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 128, inter = 0, vocab = 0;
  double rope_theta = 1e6;
};

// Uniform bf16 values in [mean - a, mean + a].
inline Tensor random_bf16(std::vector<int64_t> shape, uint64_t seed, float mean, float a) {
  Tensor t = Tensor::empty(std::move(shape), DType::BF16);
  uint16_t* p = t.data<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t x = (uint64_t(i) + 1) * 0x9E3779B97F4A7C15ull ^ seed * 0xD1B54A32D192ED03ull;
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29;
    const float u = float(x >> 40) / float(1 << 24);  // [0, 1)
    p[i] = f32_to_bf16(mean + a * (2.f * u - 1.f));
  }
  return t;
}

// Writes the checkpoint (tied embeddings, q/k norms, no bias) to <temp>/<name>_<pid>; returns the directory.
inline std::string write_random_qwen3(const std::string& name, const Qwen3Shape& s) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": )" << s.hidden
      << R"(, "num_hidden_layers": )" << s.layers << R"(, "num_attention_heads": )" << s.heads
      << R"(, "num_key_value_heads": )" << s.kv_heads << R"(, "head_dim": )" << s.head_dim
      << R"(, "intermediate_size": )" << s.inter << R"(, "vocab_size": )" << s.vocab
      << R"(, "max_position_embeddings": 8192, "rms_norm_eps": 1e-06, "rope_theta": )" << s.rope_theta
      << R"(, "tie_word_embeddings": true, "attention_bias": false, "hidden_act": "silu", "eos_token_id": 2,
      "use_sliding_window": false})";
  NamedTensors t;
  const int64_t H = s.hidden, D = s.head_dim, Q = int64_t(s.heads) * D, KV = int64_t(s.kv_heads) * D,
                I = s.inter;
  uint64_t seed = 1;
  auto lin = [&](int64_t n, int64_t k) {
    return random_bf16({n, k}, seed++, 0.f, std::sqrt(3.f / float(k)));
  };
  auto norm = [&](int64_t n) { return random_bf16({n}, seed++, 1.f, 0.2f); };
  t.emplace_back("model.embed_tokens.weight", random_bf16({s.vocab, H}, seed++, 0.f, 1.f));
  t.emplace_back("model.norm.weight", norm(H));
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.emplace_back(p + "input_layernorm.weight", norm(H));
    t.emplace_back(p + "post_attention_layernorm.weight", norm(H));
    t.emplace_back(p + "self_attn.q_proj.weight", lin(Q, H));
    t.emplace_back(p + "self_attn.k_proj.weight", lin(KV, H));
    t.emplace_back(p + "self_attn.v_proj.weight", lin(KV, H));
    t.emplace_back(p + "self_attn.o_proj.weight", lin(H, Q));
    t.emplace_back(p + "self_attn.q_norm.weight", norm(D));
    t.emplace_back(p + "self_attn.k_norm.weight", norm(D));
    t.emplace_back(p + "mlp.gate_proj.weight", lin(I, H));
    t.emplace_back(p + "mlp.up_proj.weight", lin(I, H));
    t.emplace_back(p + "mlp.down_proj.weight", lin(H, I));
  }
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

#include "models/dense_decoder.h"

#include <cmath>
#include <cstring>

#include "checkpoint/checkpoint.h"
#include "core/error.h"

namespace tf {

namespace {

// Reads a tensor and checks its shape against what the config implies.
Tensor fetch(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape) {
  Tensor t = ckpt.get(name);
  if (t.shape() != shape)
    throw Error(ckpt.dir() + ": tensor '" + name + "' has shape " + shape_str(t.shape()) + ", config implies " +
                shape_str(shape));
  return t;
}

// Host concatenation along dim 0 (same dtype), used to fuse gate and up into one weight.
Tensor concat_rows(const Tensor& a, const Tensor& b) {
  TF_CHECK(a.dtype() == b.dtype() && a.dim(1) == b.dim(1), "concat_rows: incompatible " + a.describe() +
                                                                  " and " + b.describe());
  Tensor out = Tensor::empty({a.dim(0) + b.dim(0), a.dim(1)}, a.dtype());
  std::memcpy(out.raw(), a.raw(), a.nbytes());
  std::memcpy(static_cast<char*>(out.raw()) + a.nbytes(), b.raw(), b.nbytes());
  return out;
}

struct Layer {
  Tensor input_norm, post_norm, q_norm, k_norm;
  LinearWeight q, k, v, o, gate_up, down;
};

class DenseDecoder final : public Model {
 public:
  DenseDecoder(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec, int context,
               const DenseWeightNames& names)
      : be_(be), spec_(spec) {
    const int64_t H = spec.hidden, D = spec.head_dim, I = spec.intermediate, V = spec.vocab;
    const int64_t Q = int64_t(spec.heads) * D, KV = int64_t(spec.kv_heads) * D;
    const std::string& p = names.prefix;
    embed_ = be.upload(fetch(ckpt, p + "embed_tokens.weight", {V, H}));
    final_norm_ = be.upload(fetch(ckpt, p + "norm.weight", {H}));
    auto linear = [&](const std::string& base, int64_t out, int64_t in, bool bias) {
      LinearWeight w;
      w.weight = fetch(ckpt, base + ".weight", {out, in});
      if (bias) w.bias = fetch(ckpt, base + ".bias", {out});
      w.in_features = in;
      w.out_features = out;
      return be.upload_linear(w);
    };
    for (int l = 0; l < spec.layers; ++l) {
      const std::string lp = p + "layers." + std::to_string(l) + ".";
      Layer L;
      L.input_norm = be.upload(fetch(ckpt, lp + "input_layernorm.weight", {H}));
      L.post_norm = be.upload(fetch(ckpt, lp + "post_attention_layernorm.weight", {H}));
      L.q = linear(lp + "self_attn.q_proj", Q, H, spec.attention_bias);
      L.k = linear(lp + "self_attn.k_proj", KV, H, spec.attention_bias);
      L.v = linear(lp + "self_attn.v_proj", KV, H, spec.attention_bias);
      L.o = linear(lp + "self_attn.o_proj", H, Q, spec.attention_bias);
      if (spec.qk_norm) {
        L.q_norm = be.upload(fetch(ckpt, lp + "self_attn.q_norm.weight", {D}));
        L.k_norm = be.upload(fetch(ckpt, lp + "self_attn.k_norm.weight", {D}));
      }
      TF_CHECK(!spec.mlp_bias, "mlp_bias is not supported yet");
      LinearWeight gu;
      gu.weight = concat_rows(fetch(ckpt, lp + "mlp.gate_proj.weight", {I, H}),
                              fetch(ckpt, lp + "mlp.up_proj.weight", {I, H}));
      gu.in_features = H;
      gu.out_features = 2 * I;
      L.gate_up = be.upload_linear(gu);
      L.down = linear(lp + "mlp.down_proj", H, I, false);
      layers_.push_back(std::move(L));
    }
    LinearWeight head;
    head.weight = spec.tie_embeddings ? ckpt.get(p + "embed_tokens.weight") : fetch(ckpt, "lm_head.weight", {V, H});
    head.in_features = H;
    head.out_features = V;
    lm_head_ = be.upload_linear(head);
    rope_ = make_rope(spec.rope, context);
    attn_.num_heads = spec.heads;
    attn_.num_kv_heads = spec.kv_heads;
    attn_.head_dim = spec.head_dim;
    attn_.scale = 1.f / std::sqrt(float(spec.head_dim));
    attn_.sliding_window = spec.sliding_window;
  }

  const ModelSpec& spec() const override { return spec_; }

  void forward(const BatchMeta& meta, std::vector<KvLayer>& kv, const std::vector<int32_t>& logit_rows,
               std::vector<float>& logits) override {
    const int64_t R = meta.rows(), H = spec_.hidden, D = spec_.head_dim;
    const int64_t Hq = spec_.heads, Hk = spec_.kv_heads, I = spec_.intermediate;
    const DType dt = be_.act_dtype();
    logits.clear();
    if (R == 0) return;
    be_.begin_forward(meta);
    Tensor residual = be_.alloc({R, H}, dt), h = be_.alloc({R, H}, dt), mlp_out = be_.alloc({R, H}, dt);
    Tensor q = be_.alloc({R, Hq, D}, dt), k = be_.alloc({R, Hk, D}, dt), v = be_.alloc({R, Hk, D}, dt);
    Tensor attn = be_.alloc({R, Hq * D}, dt), gate_up = be_.alloc({R, 2 * I}, dt), act = be_.alloc({R, I}, dt);
    be_.embedding(embed_, spec_.embed_scale, residual);
    const float eps = spec_.norm_eps, off = spec_.norm_offset;
    for (int l = 0; l < spec_.layers; ++l) {
      Layer& L = layers_[l];
      if (l == 0) be_.rms_norm(residual, L.input_norm, eps, off, h);
      else be_.add_rms_norm(residual, mlp_out, L.input_norm, eps, off, h);
      be_.linear(h, L.q, q);
      be_.linear(h, L.k, k);
      be_.linear(h, L.v, v);
      if (spec_.qk_norm) {
        be_.rms_norm(q, L.q_norm, eps, off, q);
        be_.rms_norm(k, L.k_norm, eps, off, k);
      }
      be_.rope(q, k, rope_);
      be_.kv_write(kv[l], k, v);
      be_.attention(q, kv[l], attn_, attn);
      be_.linear(attn, L.o, mlp_out);
      be_.add_rms_norm(residual, mlp_out, L.post_norm, eps, off, h);
      be_.linear(h, L.gate_up, gate_up);
      be_.silu_mul(gate_up, act);
      be_.linear(act, L.down, mlp_out);
    }
    be_.add(residual, mlp_out);
    be_.rms_norm(residual, final_norm_, eps, off, h);
    const int64_t n = int64_t(logit_rows.size());
    logits.resize(size_t(n * spec_.vocab));
    if (n == 0) return;
    Tensor picked = be_.alloc({n, H}, dt), out = be_.alloc({n, int64_t(spec_.vocab)}, DType::F32);
    be_.gather_rows(h, logit_rows, picked);
    be_.linear(picked, lm_head_, out);
    Tensor host = Tensor::borrow(logits.data(), {n, int64_t(spec_.vocab)}, DType::F32, Device::CPU);
    be_.to_host(out, host);
  }

 private:
  Backend& be_;
  ModelSpec spec_;
  Tensor embed_, final_norm_;
  std::vector<Layer> layers_;
  LinearWeight lm_head_;
  RopeParams rope_;
  AttentionParams attn_;
};

}  // namespace

std::unique_ptr<Model> load_dense_decoder(const Checkpoint& ckpt, Backend& backend, const ModelSpec& spec,
                                          int context, const DenseWeightNames& names) {
  return std::make_unique<DenseDecoder>(ckpt, backend, spec, context, names);
}

ModelSpec parse_dense_spec(const nlohmann::json& c) {
  using namespace config_util;
  ModelSpec s;
  s.family = c.value("model_type", "");
  s.hidden = get_int(c, "hidden_size");
  s.layers = get_int(c, "num_hidden_layers");
  s.heads = get_int(c, "num_attention_heads");
  s.kv_heads = get_int(c, "num_key_value_heads", s.heads);
  TF_CHECK(s.hidden > 0 && s.layers > 0 && s.heads > 0 && s.kv_heads > 0 && s.heads % s.kv_heads == 0,
           "config.json: inconsistent sizes (hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads)");
  s.head_dim = c.contains("head_dim") && !c["head_dim"].is_null() ? get_int(c, "head_dim") : s.hidden / s.heads;
  s.intermediate = get_int(c, "intermediate_size");
  s.vocab = get_int(c, "vocab_size");
  s.native_context = get_int(c, "max_position_embeddings", 2048);
  s.norm_eps = get_float(c, "rms_norm_eps", 1e-6f);
  s.tie_embeddings = get_bool(c, "tie_word_embeddings", false);
  s.attention_bias = get_bool(c, "attention_bias", false);
  s.mlp_bias = get_bool(c, "mlp_bias", false);
  std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu") throw Error("config.json: hidden_act '" + act + "' is not supported (only silu)");
  s.rope = rope_config(c, s.head_dim);
  s.eos_ids = get_ids(c, "eos_token_id");
  auto bos = get_ids(c, "bos_token_id");
  if (!bos.empty()) s.bos_id = bos[0];
  s.mtp_layers = get_int(c, "mtp_num_hidden_layers", get_int(c, "num_nextn_predict_layers", 0));
  return s;
}

}  // namespace tf

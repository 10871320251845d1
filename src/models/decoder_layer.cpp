#include "models/decoder_layer.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "models/weights.h"

namespace tf {

Tensor fetch_tensor(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape) {
  Tensor t = ckpt.get(name);
  if (t.shape() != shape)
    throw Error(ckpt.dir() + ": tensor '" + name + "' has shape " + shape_str(t.shape()) +
                ", config implies " + shape_str(shape));
  return t;
}

DecoderLayer load_decoder_layer(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec,
                                const std::string& lp, bool sparse) {
  const int64_t H = spec.hidden, D = spec.head_dim, I = spec.intermediate;
  const int64_t Q = int64_t(spec.heads) * D, KV = int64_t(spec.kv_heads) * D;
  auto linear = [&](const std::string& base, int64_t out, int64_t in, bool bias) {
    return load_linear(ckpt, be, base, out, in, bias);
  };
  DecoderLayer L;
  L.input_norm = be.upload(fetch_tensor(ckpt, lp + "input_layernorm.weight", {H}));
  L.post_norm = be.upload(fetch_tensor(ckpt, lp + "post_attention_layernorm.weight", {H}));
  {
    std::vector<LinearWeight> qkv = {read_linear(ckpt, lp + "self_attn.q_proj", Q, H, spec.attention_bias),
                                     read_linear(ckpt, lp + "self_attn.k_proj", KV, H, spec.attention_bias),
                                     read_linear(ckpt, lp + "self_attn.v_proj", KV, H, spec.attention_bias)};
    // One linear instead of three (decode reads the same bytes in one launch); each output feature is
    // computed on its own, so the bits are the separate linears'. Mixed layouts stay separate: fusing them
    // would dequantize, which changes the arithmetic.
    if (same_layout(qkv)) {
      L.qkv = be.upload_linear(fuse_linears(std::move(qkv)));
    } else {
      L.q = be.upload_linear(qkv[0]);
      L.k = be.upload_linear(qkv[1]);
      L.v = be.upload_linear(qkv[2]);
    }
  }
  L.o = linear(lp + "self_attn.o_proj", H, Q, spec.attention_bias);
  if (spec.qk_norm) {
    L.q_norm = be.upload(fetch_tensor(ckpt, lp + "self_attn.q_norm.weight", {D}));
    L.k_norm = be.upload(fetch_tensor(ckpt, lp + "self_attn.k_norm.weight", {D}));
  }
  TF_CHECK(!spec.mlp_bias, "mlp_bias is not supported yet");
  if (sparse) {
    L.moe = std::make_unique<MoeWeights>(load_moe(ckpt, be, spec, lp + "mlp."));
    return L;
  }
  L.gate_up =
      load_fused_linear(ckpt, be, {lp + "mlp.gate_proj", lp + "mlp.up_proj"}, {I, I}, H);  // gate rows first
  L.down = linear(lp + "mlp.down_proj", H, I, false);
  return L;
}

LayerWorkspace::LayerWorkspace(Backend& be, const ModelSpec& s, int64_t R) {
  const DType dt = be.act_dtype();
  const int64_t H = s.hidden, D = s.head_dim, I = s.intermediate;
  residual = be.alloc({R, H}, dt);
  residual_alt = be.alloc({R, H}, dt);
  h = be.alloc({R, H}, dt);
  mlp_out = be.alloc({R, H}, dt);
  const int64_t hq = s.heads, hk = s.kv_heads;
  q = be.alloc({R, hq, D}, dt);
  qkv = be.alloc({R, (hq + 2 * hk) * D}, dt);
  const Tensor flat = qkv.view({-1});
  k = flat.slice_rows(0, R * hk * D).view({R, hk, D});
  v = flat.slice_rows(R * hk * D, 2 * R * hk * D).view({R, hk, D});
  attn = be.alloc({R, int64_t(s.heads) * D}, dt);
  gate_up = be.alloc({R, 2 * I}, dt);
  act = be.alloc({R, I}, dt);
}

LayerWorkspace::LayerWorkspace(const LayerWorkspace& big, const ModelSpec& s, int64_t R) {
  TF_CHECK(big.residual.dim(0) >= R, "LayerWorkspace: the workspace has fewer rows than the batch");
  residual = big.residual.slice_rows(0, R);
  residual_alt = big.residual_alt.slice_rows(0, R);
  h = big.h.slice_rows(0, R);
  mlp_out = big.mlp_out.slice_rows(0, R);
  q = big.q.slice_rows(0, R);
  qkv = big.qkv.slice_rows(0, R);
  attn = big.attn.slice_rows(0, R);
  gate_up = big.gate_up.slice_rows(0, R);
  act = big.act.slice_rows(0, R);
  const int64_t hk = s.kv_heads, D = s.head_dim;
  const Tensor flat = qkv.view({-1});
  k = flat.slice_rows(0, R * hk * D).view({R, hk, D});
  v = flat.slice_rows(R * hk * D, 2 * R * hk * D).view({R, hk, D});
}

AttentionParams attention_params(const ModelSpec& spec) {
  AttentionParams a;
  a.num_heads = spec.heads;
  a.num_kv_heads = spec.kv_heads;
  a.head_dim = spec.head_dim;
  a.scale = 1.f / std::sqrt(float(spec.head_dim));
  a.sliding_window = spec.sliding_window;
  return a;
}

void decoder_layer_forward(Backend& be, const ModelSpec& spec, DecoderLayer& L, const RopeParams& rope,
                           const AttentionParams& attn, KvLayer& kv, LayerWorkspace& ws, bool pending) {
  const float eps = spec.norm_eps, off = spec.norm_offset;
  // residual += mlp_out; h = norm(residual); y = linear(h): a backend may do it in one kernel writing the
  // new residual to residual_alt, which then becomes the stream.
  auto add_norm_linear = [&](const Tensor& norm, const LinearWeight& w, Tensor& y) {
    if (be.add_rms_norm_linear(ws.residual, ws.mlp_out, norm, eps, off, ws.h, w, y, ws.residual_alt))
      std::swap(ws.residual, ws.residual_alt);
  };
  const bool fused_qkv = L.qkv.out_features > 0;
  if (pending && fused_qkv)
    add_norm_linear(L.input_norm, L.qkv, ws.qkv);
  else if (pending)
    be.add_rms_norm(ws.residual, ws.mlp_out, L.input_norm, eps, off, ws.h);
  else
    be.rms_norm(ws.residual, L.input_norm, eps, off, ws.h);
  const Tensor* qn = spec.qk_norm ? &L.q_norm : nullptr;
  const Tensor* kn = spec.qk_norm ? &L.k_norm : nullptr;
  if (fused_qkv) {
    if (!pending) be.linear(ws.h, L.qkv, ws.qkv);
    be.attention_inputs_qkv(ws.qkv, ws.q, qn, kn, eps, off, rope, kv);
  } else {
    be.linear(ws.h, L.q, ws.q);
    be.linear(ws.h, L.k, ws.k);
    be.linear(ws.h, L.v, ws.v);
    be.attention_inputs(ws.q, ws.k, ws.v, qn, kn, eps, off, rope, kv);
  }
  be.attention(ws.q, kv, attn, ws.attn);
  if (L.moe) {  // the o projection, the norm and the MoE: a backend may run them as one kernel
    if (be.linear_add_rms_norm_moe(ws.attn, L.o, ws.mlp_out, ws.residual, L.post_norm, eps, off, ws.h, *L.moe,
                                   ws.mlp_out, ws.residual_alt))
      std::swap(ws.residual, ws.residual_alt);
    return;
  }
  be.linear(ws.attn, L.o, ws.mlp_out);
  add_norm_linear(L.post_norm, L.gate_up, ws.gate_up);
  be.silu_mul_linear(ws.gate_up, L.down, ws.act, ws.mlp_out);
}

}  // namespace tf

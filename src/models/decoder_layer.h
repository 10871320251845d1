#pragma once
// One pre-norm decoder layer (attention with GQA, RoPE and optional q/k norm; SwiGLU MLP), shared by the
// dense decoder and MTP heads, which use the same layer layout.
#include <memory>
#include <string>

#include "models/model.h"
#include "models/moe.h"

namespace tf {

struct DecoderLayer {
  Tensor input_norm, post_norm, q_norm, k_norm;
  // qkv: q, k and v fused along the output dimension (q rows, then k, then v; one linear a layer) when the
  // three share one storage layout; then q, k and v are empty. Otherwise qkv is empty.
  LinearWeight qkv, q, k, v, o, gate_up, down;  // gate_up/down: the dense MLP
  std::unique_ptr<MoeWeights> moe;              // set when the layer's MLP is sparse
};

// Reads `prefix` + input_layernorm / self_attn.{q,k,v,o}_proj (+ q_norm, k_norm) /
// post_attention_layernorm / mlp.{gate,up,down}_proj, checking every shape against `spec`.
// `sparse`: the MLP is a mixture of experts (prefix + "mlp.gate", "mlp.experts.N.*").
DecoderLayer load_decoder_layer(const Checkpoint& ckpt, Backend& be, const ModelSpec& spec,
                                const std::string& prefix, bool sparse = false);
Tensor fetch_tensor(const Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape);

// k and v share qkv's memory (a layer uses either the fused projection or the three). residual_alt: where
// Backend::add_rms_norm_linear may write the new residual; decoder_layer_forward swaps the two so that
// `residual` always holds the stream.
struct LayerWorkspace {
  Tensor residual, residual_alt, h, mlp_out, q, k, v, qkv, attn, gate_up, act;
  LayerWorkspace(Backend& be, const ModelSpec& spec, int64_t rows);
  // Views of the first `rows` rows of `big` (a workspace for at least that many rows): the same addresses on
  // every call, which a replayed CUDA graph needs.
  LayerWorkspace(const LayerWorkspace& big, const ModelSpec& spec, int64_t rows);
};

// Runs one layer over the batch's rows. On entry ws.residual holds the stream; when `pending` is true,
// ws.mlp_out holds the previous layer's MLP output, not yet added (the add is fused into this layer's
// first norm). On exit ws.mlp_out holds this layer's MLP output, not yet added to ws.residual.
void decoder_layer_forward(Backend& be, const ModelSpec& spec, DecoderLayer& L, const RopeParams& rope,
                           const AttentionParams& attn, KvLayer& kv, LayerWorkspace& ws, bool pending);

AttentionParams attention_params(const ModelSpec& spec);

}  // namespace tf

#pragma once
// The model the shape benchmark runs: a dense decoder of a ModelShape with random weights (linears bf16 or
// quantized in the device layout, quant_weights.h; norms and embeddings bf16) and a random KV pool made on
// the GPU, its activation buffers, and its forward composed from the backend ops
// (the engine's schedule, fusions included) or with cuBLAS linears (the baseline). Internal to
// tf_shape_bench (shape_bench.cpp).
#include <cublas_v2.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ops/backend.h"
#include "shape_bench.h"
#include "weight_format.h"

namespace tf::bench {

struct ShapeLayer {
  LinearWeight qkv, q, k, v, o, gate_up, down;  // q, k, v: row views of qkv (the fused projection, as
                                                // src/models/weights.cpp fuse_linears makes it)
  Tensor ln1, ln2, q_norm, k_norm;
  KvLayer kv;
};

struct ShapeModel {
  ModelShape sh;
  std::vector<ShapeLayer> layers;
  Tensor embed, final_norm;
  LinearWeight lm_head;
  WeightFormat format;        // of every linear (a quantized model's lm_head too, even when tied)
  int64_t linear_bytes = 0;   // device bytes of every linear weight a decode step reads (scales included)
  int64_t linear_params = 0;  // their weights' element count (the FLOPs of a row: 2x)
  int64_t kv_blocks = 0;
};

// An [n, k] linear of m's format (quant_weights.h); adds its bytes and parameters to m.
LinearWeight rand_linear(Backend& be, int64_t n, int64_t k, uint64_t seed, ShapeModel* m);
// Every layer's weights and a KV pool of at least `kv_tokens` positions (blocks of kBenchBlock).
ShapeModel make_model(Backend& be, const ModelShape& sh, int64_t kv_tokens,
                      WeightFormat format = WeightFormat::Bf16);

// Activation buffers for up to `rows` rows, logits for up to `out_rows`.
struct Acts {
  Tensor res, x, q, k, v, attn, o, gu, act, mlp, last, logits, qkv, res2;
};
Acts make_acts(Backend& be, const ModelShape& sh, int rows, int out_rows);

using LinearFn = std::function<void(const Tensor&, const LinearWeight&, Tensor&)>;
LinearFn backend_linear(Backend& be);
// y = x W^T by cublasGemmEx (bf16 in and out, f32 accumulation) on the handle's stream.
LinearFn cublas_linear(cublasHandle_t h);
void check_cublas(cublasStatus_t st, const char* what);

// The decoder's fusions (docs/cuda-notes.md v9): one q/k/v linear + attention_inputs_qkv, silu_mul
// inside the down projection, add_rms_norm inside the qkv and gate_up projections. Off: three linears,
// add_rms_norm + linear, silu_mul + linear. Same bits either way.
void set_fusions(bool on);
// Attention inputs through Backend::attention_inputs (one fused kernel on CUDA) or the four separate ops.
void set_fused_inputs(bool on);
// Timing ablations (wrong results): forwards leave out the attention, the fused q/k-norm + RoPE + KV write,
// or the residual-add norms before qkv and gate_up (the linears read their input as is); 0 = none.
// kEmptyStep: not a skip, one empty dependent kernel (cuda::empty_step) after each layer's attention.
enum SkipOps { kSkipAttention = 1, kSkipAttentionInputs = 2, kSkipNorms = 4, kEmptyStep = 8, kSkipSilu = 16 };
void set_skip_ops(int mask);
// v9's fusions that are off by default in the backend (norm and silu inside the linears, loop-only
// attention at short context), forced on for a comparison column, or back to the defaults.
void force_v9_fusions(bool on);

// One forward over the rows of begin_forward(); logits for the last `out_rows` rows. `ours`: the linears
// are the backend's (so the MLP may use silu_mul_linear); false for the cuBLAS baseline.
void forward(Backend& be, ShapeModel& m, Acts& A, int rows, int out_rows, const RopeParams& rope,
             const LinearFn& lin, bool ours = true);

RopeParams qwen_rope(int head_dim);

// TF_STEP_STAMPS=1 (shape_bench.cpp): one step of a prepared one-kernel decode step with the probe's
// timestamps, and layer 10's timeline printed (the dense and the MoE benches).
void print_step_stamps(Backend& be, const std::shared_ptr<void>& step, cudaStream_t s, int ctx,
                       Tensor& logits);

}  // namespace tf::bench

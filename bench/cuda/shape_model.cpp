#include "shape_model.h"

#include <cmath>
#include <string>
#include <utility>

#include "bench_common.h"
#include "core/error.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/kernels.h"
#include "quant_weights.h"

namespace tf::bench {

namespace {

bool g_fused_inputs = true;
bool g_fusions = true;
int g_skip = 0;  // set_skip_ops

Tensor rand_norm(Backend& be, int64_t n, uint64_t seed) {
  Tensor t = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, t, seed, 0.8f, 1.2f);
  return t;
}

ShapeLayer make_layer(Backend& be, const ModelShape& sh, int64_t kv_blocks, uint64_t& seed, ShapeModel* m) {
  const int64_t qd = int64_t(sh.heads) * sh.head_dim, kd = int64_t(sh.kv_heads) * sh.head_dim;
  ShapeLayer L;
  L.qkv = rand_linear(be, qd + 2 * kd, sh.hidden, seed++, m);
  auto part = [&](int64_t first, int64_t n) {  // quantized: scales (and biases) are per output row too
    LinearWeight w = L.qkv;
    w.out_features = n;
    for (Tensor LinearWeight::*t : {&LinearWeight::weight, &LinearWeight::scales, &LinearWeight::biases})
      if ((L.qkv.*t).defined()) w.*t = (L.qkv.*t).slice_rows(first, first + n);
    return w;
  };
  L.q = part(0, qd), L.k = part(qd, kd), L.v = part(qd + kd, kd);
  L.o = rand_linear(be, sh.hidden, qd, seed++, m);
  L.gate_up = rand_linear(be, 2 * int64_t(sh.inter), sh.hidden, seed++, m);
  L.down = rand_linear(be, sh.hidden, sh.inter, seed++, m);
  L.ln1 = rand_norm(be, sh.hidden, seed++);
  L.ln2 = rand_norm(be, sh.hidden, seed++);
  L.q_norm = rand_norm(be, sh.head_dim, seed++);
  L.k_norm = rand_norm(be, sh.head_dim, seed++);
  L.kv.k = be.alloc({kv_blocks, kBenchBlock, sh.kv_heads, sh.head_dim}, DType::BF16);
  L.kv.v = be.alloc({kv_blocks, kBenchBlock, sh.kv_heads, sh.head_dim}, DType::BF16);
  cuda::fill_uniform(be, L.kv.k, seed++, -2, 2);
  cuda::fill_uniform(be, L.kv.v, seed++, -1, 1);
  return L;
}

}  // namespace

void check_cublas(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) throw Error("cuBLAS error " + std::to_string(int(st)) + " in " + what);
}

LinearWeight rand_linear(Backend& be, int64_t n, int64_t k, uint64_t seed, ShapeModel* m) {
  LinearWeight w = rand_linear_weight(be, m->format, n, k, seed);
  m->linear_bytes += linear_weight_bytes(w);
  m->linear_params += n * k;
  return w;
}

ShapeModel make_model(Backend& be, const ModelShape& sh, int64_t kv_tokens, WeightFormat format) {
  ShapeModel m{sh, {}, {}, {}, {}, format, 0, 0, 0};
  uint64_t seed = 100;
  m.kv_blocks = kv_tokens / kBenchBlock + 64;
  for (int l = 0; l < sh.layers; ++l) m.layers.push_back(make_layer(be, sh, m.kv_blocks, seed, &m));
  m.embed = be.alloc({sh.vocab, sh.hidden}, DType::BF16);
  cuda::fill_uniform(be, m.embed, seed++, -1, 1);
  m.final_norm = rand_norm(be, sh.hidden, seed++);
  if (sh.tied && format == WeightFormat::Bf16) {
    m.lm_head.weight = m.embed, m.lm_head.in_features = sh.hidden, m.lm_head.out_features = sh.vocab;
    m.linear_bytes += int64_t(sh.vocab) * sh.hidden * 2;
    m.linear_params += int64_t(sh.vocab) * sh.hidden;
  } else {  // a quantized tied lm_head keeps the quantized weight (the embedding table is dequantized)
    m.lm_head = rand_linear(be, sh.vocab, sh.hidden, seed++, &m);
  }
  be.synchronize();
  return m;
}

Acts make_acts(Backend& be, const ModelShape& sh, int rows, int out_rows) {
  const int64_t qd = int64_t(sh.heads) * sh.head_dim, kd = int64_t(sh.kv_heads) * sh.head_dim;
  auto a = [&](int64_t r, int64_t c) { return be.alloc({r, c}, DType::BF16); };
  return Acts{a(rows, sh.hidden),
              a(rows, sh.hidden),
              a(rows, qd),
              a(rows, kd),
              a(rows, kd),
              a(rows, qd),
              a(rows, sh.hidden),
              a(rows, 2 * int64_t(sh.inter)),
              a(rows, sh.inter),
              a(rows, sh.hidden),
              a(out_rows, sh.hidden),
              a(out_rows, sh.vocab),
              a(rows, qd + 2 * kd),
              a(rows, sh.hidden)};
}

LinearFn backend_linear(Backend& be) {
  return [&be](const Tensor& x, const LinearWeight& w, Tensor& y) { be.linear(x, w, y); };
}

LinearFn cublas_linear(cublasHandle_t h) {
  return [h](const Tensor& x, const LinearWeight& w, Tensor& y) {
    const float one = 1, zero = 0;
    const int n = int(w.weight.dim(0)), k = int(w.weight.dim(1)), mm = int(x.numel() / k);
    check_cublas(
        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w.weight.raw(), CUDA_R_16BF, k, x.raw(),
                     CUDA_R_16BF, k, &zero, y.raw(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  };
}

void set_fusions(bool on) {
  g_fusions = on;
}

void set_skip_ops(int mask) {
  g_skip = mask;
}

void set_fused_inputs(bool on) {
  g_fused_inputs = on;
}

void force_v9_fusions(bool on) {
  cuda::set_fused_norm_linear(on);
  cuda::set_fused_silu_linear(on);
  cuda::set_attention_loop_max_chunks(on ? -1 : 0);
}

void forward(Backend& be, ShapeModel& m, Acts& A, int rows, int out_rows, const RopeParams& rope,
             const LinearFn& lin, bool ours) {
  const ModelShape& sh = m.sh;
  auto v2 = [](const Tensor& t, int64_t r, int64_t c) { return t.slice_rows(0, r).view({r, c}); };
  const int64_t qd = int64_t(sh.heads) * sh.head_dim, kd = int64_t(sh.kv_heads) * sh.head_dim;
  Tensor res = v2(A.res, rows, sh.hidden), x = v2(A.x, rows, sh.hidden), q = v2(A.q, rows, qd),
         k = v2(A.k, rows, kd), v = v2(A.v, rows, kd), attn = v2(A.attn, rows, qd),
         o = v2(A.o, rows, sh.hidden), gu = v2(A.gu, rows, 2 * int64_t(sh.inter)),
         act = v2(A.act, rows, sh.inter), mlp = v2(A.mlp, rows, sh.hidden),
         qkv = v2(A.qkv, rows, qd + 2 * kd), res2 = v2(A.res2, rows, sh.hidden);
  Tensor* cur = &res;  // the residual stream: add_rms_norm_linear writes the new one to the other buffer
  Tensor* alt = &res2;
  auto norm_linear = [&](const Tensor& in, const Tensor& norm, const LinearWeight& w, Tensor& y) {
    if (g_skip & kSkipNorms) {
      lin(in, w, y);
    } else if (!(g_fusions && ours)) {
      be.add_rms_norm(*cur, in, norm, 1e-6f, 0.f, x);
      lin(x, w, y);
    } else if (be.add_rms_norm_linear(*cur, in, norm, 1e-6f, 0.f, x, w, y, *alt)) {
      std::swap(cur, alt);
    }
  };
  Tensor qh = q.view({rows * int64_t(sh.heads), sh.head_dim}),
         kh = k.view({rows * int64_t(sh.kv_heads), sh.head_dim});
  AttentionParams ap{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
  be.embedding(m.embed, 1.f, res);
  for (int l = 0; l < sh.layers; ++l) {
    ShapeLayer& L = m.layers[l];
    const bool fused_qkv = g_fusions && g_fused_inputs;
    if (l == 0) {
      be.rms_norm(*cur, L.ln1, 1e-6f, 0.f, x);
      if (fused_qkv) lin(x, L.qkv, qkv);
    } else if (fused_qkv) {
      norm_linear(mlp, L.ln1, L.qkv, qkv);
    } else {
      be.add_rms_norm(*cur, mlp, L.ln1, 1e-6f, 0.f, x);
    }
    if (fused_qkv && (g_skip & kSkipAttentionInputs)) {
    } else if (fused_qkv) {
      be.attention_inputs_qkv(qkv, q, &L.q_norm, &L.k_norm, 1e-6f, 0.f, rope, L.kv);
    } else if (g_fused_inputs) {
      lin(x, L.q, q);
      lin(x, L.k, k);
      lin(x, L.v, v);
      be.attention_inputs(q, k, v, &L.q_norm, &L.k_norm, 1e-6f, 0.f, rope, L.kv);
    } else {
      lin(x, L.q, q);
      lin(x, L.k, k);
      lin(x, L.v, v);
      be.rms_norm(qh, L.q_norm, 1e-6f, 0.f, qh);
      be.rms_norm(kh, L.k_norm, 1e-6f, 0.f, kh);
      be.rope(q, k, rope);
      be.kv_write(L.kv, k, v);
    }
    if (!(g_skip & kSkipAttention)) be.attention(q, L.kv, ap, attn);
    if (g_skip & kEmptyStep) cuda::empty_step(1, cuda::stream_of(be));
    lin(attn, L.o, o);
    norm_linear(o, L.ln2, L.gate_up, gu);
    if (g_skip & kSkipSilu) {  // (timing: the down on act as it is, no silu_mul)
      lin(act, L.down, mlp);
    } else if (g_fusions && ours) {
      be.silu_mul_linear(gu, L.down, act, mlp);
    } else {
      be.silu_mul(gu, act);
      lin(act, L.down, mlp);
    }
  }
  be.add_rms_norm(*cur, mlp, m.final_norm, 1e-6f, 0.f, x);
  Tensor last = v2(A.last, out_rows, sh.hidden), logits = v2(A.logits, out_rows, sh.vocab);
  if (out_rows == rows) {
    lin(x, m.lm_head, logits);
  } else {
    std::vector<int32_t> idx;
    for (int i = rows - out_rows; i < rows; ++i) idx.push_back(i);
    be.gather_rows(x, idx, last);
    lin(last, m.lm_head, logits);
  }
}

RopeParams qwen_rope(int head_dim) {
  RopeParams p;
  p.head_dim = p.rotary_dim = head_dim;
  for (int i = 0; i < head_dim / 2; ++i) p.inv_freq.push_back(std::pow(1e6f, -2.f * i / head_dim));
  return p;
}

}  // namespace tf::bench

// tf_bench_cuda: the CUDA backend at real model shapes with random weights generated on the GPU.
// Measures the two ceilings in the same run (device copy bandwidth, cuBLAS bf16 GEMM rate), then a
// decode step composed from the backend ops at batch 1/8/32 and 512/8k context (tokens/s and fraction
// of the bandwidth roofline: weights + KV bytes a step must read), the same forward with cuBLAS GEMMs as
// the baseline, per-shape linear timings, and prefill tokens/s against the GEMM rate.
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ops/backend.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"
#include "bench_common.h"

namespace tf {
namespace {

#define CUBLAS_CHECK(x)                                                                                    \
  do {                                                                                                     \
    cublasStatus_t st_ = (x);                                                                              \
    if (st_ != CUBLAS_STATUS_SUCCESS) throw Error("cuBLAS error " + std::to_string(int(st_)) + " in " #x); \
  } while (0)

struct Shape {
  const char* name;
  int layers, hidden, inter, heads, kv_heads, head_dim, vocab;
  bool tied;
};
constexpr Shape kQwen3_8B{"Qwen3-8B", 36, 4096, 12288, 32, 8, 128, 151936, false};
constexpr Shape kQwen3_06B{"Qwen3-0.6B", 28, 1024, 3072, 16, 8, 128, 151936, true};
constexpr int kBlock = bench::kBenchBlock;

using bench::decode_meta;
using bench::prefill_meta;
using bench::verify_meta;
using bench::time_graph_ms;
using bench::time_ms;

struct Ceilings {
  double copy_gbs = 0, gemm_tflops = 0;
};

Ceilings measure_ceilings(Backend& be, cublasHandle_t h) {
  cudaStream_t s = cuda::stream_of(be);
  Ceilings c;
  const int64_t n = int64_t(1) << 30;  // 2 GiB of bf16 each side
  Tensor a = be.alloc({n}, DType::BF16), b = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, a, 1, -1, 1);
  double ms = time_ms(
      s, [&] { TF_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), n * 2, cudaMemcpyDeviceToDevice, s)); }, 3,
      11);
  c.copy_gbs = 2.0 * n * 2 / (ms * 1e-3) / 1e9;
  const int m = 8192;
  Tensor x = be.alloc({m, m}, DType::BF16), w = be.alloc({m, m}, DType::BF16),
         y = be.alloc({m, m}, DType::BF16);
  cuda::fill_uniform(be, x, 2, -1, 1);
  cuda::fill_uniform(be, w, 3, -1, 1);
  const float one = 1, zero = 0;
  ms = time_ms(
      s,
      [&] {
        CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, &one, w.raw(), CUDA_R_16BF, m,
                                  x.raw(), CUDA_R_16BF, m, &zero, y.raw(), CUDA_R_16BF, m, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
      },
      3, 11);
  c.gemm_tflops = 2.0 * m * m * m / (ms * 1e-3) / 1e12;
  return c;
}

struct Layer {
  LinearWeight qkv, q, k, v, o, gate_up, down;  // q, k, v: row views of qkv (the fused projection)
  Tensor ln1, ln2, q_norm, k_norm;
  KvLayer kv;
};

struct Model {
  Shape sh;
  std::vector<Layer> layers;
  Tensor embed, final_norm;
  LinearWeight lm_head;
  int64_t linear_bytes = 0;  // bytes of every linear weight a decode step reads
  int64_t kv_blocks = 0;
};

LinearWeight rand_linear(Backend& be, int64_t n, int64_t k, uint64_t seed, Model* m) {
  LinearWeight w;
  w.weight = be.alloc({n, k}, DType::BF16);
  w.in_features = k, w.out_features = n;
  const float a = std::sqrt(3.f / float(k));  // unit-variance outputs for unit-variance inputs
  cuda::fill_uniform(be, w.weight, seed, -a, a);
  m->linear_bytes += n * k * 2;
  return w;
}

Tensor rand_norm(Backend& be, int64_t n, uint64_t seed) {
  Tensor t = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, t, seed, 0.8f, 1.2f);
  return t;
}

Model make_model(Backend& be, const Shape& sh, int64_t kv_tokens) {
  Model m{sh, {}, {}, {}, {}, 0, 0};
  uint64_t seed = 100;
  const int64_t qd = int64_t(sh.heads) * sh.head_dim, kd = int64_t(sh.kv_heads) * sh.head_dim;
  m.kv_blocks = kv_tokens / kBlock + 64;
  for (int l = 0; l < sh.layers; ++l) {
    Layer L;
    L.qkv = rand_linear(be, qd + 2 * kd, sh.hidden, seed++, &m);
    auto part = [&](int64_t first, int64_t n) {
      LinearWeight w = L.qkv;
      w.weight = L.qkv.weight.slice_rows(first, first + n), w.out_features = n;
      return w;
    };
    L.q = part(0, qd), L.k = part(qd, kd), L.v = part(qd + kd, kd);
    L.o = rand_linear(be, sh.hidden, qd, seed++, &m);
    L.gate_up = rand_linear(be, 2 * int64_t(sh.inter), sh.hidden, seed++, &m);
    L.down = rand_linear(be, sh.hidden, sh.inter, seed++, &m);
    L.ln1 = rand_norm(be, sh.hidden, seed++);
    L.ln2 = rand_norm(be, sh.hidden, seed++);
    L.q_norm = rand_norm(be, sh.head_dim, seed++);
    L.k_norm = rand_norm(be, sh.head_dim, seed++);
    L.kv.k = be.alloc({m.kv_blocks, kBlock, sh.kv_heads, sh.head_dim}, DType::BF16);
    L.kv.v = be.alloc({m.kv_blocks, kBlock, sh.kv_heads, sh.head_dim}, DType::BF16);
    cuda::fill_uniform(be, L.kv.k, seed++, -2, 2);
    cuda::fill_uniform(be, L.kv.v, seed++, -1, 1);
    m.layers.push_back(std::move(L));
  }
  m.embed = be.alloc({sh.vocab, sh.hidden}, DType::BF16);
  cuda::fill_uniform(be, m.embed, seed++, -1, 1);
  m.final_norm = rand_norm(be, sh.hidden, seed++);
  if (sh.tied) {
    m.lm_head.weight = m.embed, m.lm_head.in_features = sh.hidden, m.lm_head.out_features = sh.vocab;
    m.linear_bytes += int64_t(sh.vocab) * sh.hidden * 2;
  } else {
    m.lm_head = rand_linear(be, sh.vocab, sh.hidden, seed++, &m);
  }
  be.synchronize();
  return m;
}

using LinearFn = std::function<void(const Tensor&, const LinearWeight&, Tensor&)>;

// Activation buffers for up to `rows` rows.
struct Acts {
  Tensor res, x, q, k, v, attn, o, gu, act, mlp, last, logits, qkv, res2;
};
Acts make_acts(Backend& be, const Shape& sh, int rows, int out_rows) {
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

// Attention inputs through Backend::attention_inputs (the engine's path: one fused kernel on CUDA) or
// the four separate ops.
bool g_fused_inputs = true;
// The decoder's fusions (docs/cuda-notes.md v9): one q/k/v linear + attention_inputs_qkv, silu_mul inside
// the down projection (silu_mul_linear, ours only), add_rms_norm inside the qkv and gate_up projections
// (add_rms_norm_linear, ours only), short-context attention without the split/combine. Off: three
// linears, add_rms_norm + linear, silu_mul + linear, the split schedule at every context. Same bits.
bool g_fusions = true;

void set_fusions(bool on) {
  g_fusions = on;
}
// v9's fusions that are off by default in the backend (norm and silu inside the linears, loop-only
// attention at short context), forced on for a comparison column, then back to the defaults.
void force_v9_fusions(bool on) {
  cuda::set_fused_norm_linear(on);
  cuda::set_fused_silu_linear(on);
  cuda::set_attention_loop_max_chunks(on ? -1 : 0);
}

// One forward over the rows of begin_forward(); logits for the last `out_rows` rows. `ours`: the linears
// are the backend's (so the MLP may use silu_mul_linear); false for the cuBLAS baseline.
void forward(Backend& be, Model& m, Acts& A, int rows, int out_rows, const RopeParams& rope,
             const LinearFn& lin, bool ours = true) {
  const Shape& sh = m.sh;
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
    if (!(g_fusions && ours)) {
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
    Layer& L = m.layers[l];
    const bool fused_qkv = g_fusions && g_fused_inputs;
    if (l == 0) {
      be.rms_norm(*cur, L.ln1, 1e-6f, 0.f, x);
      if (fused_qkv) lin(x, L.qkv, qkv);
    } else if (fused_qkv) {
      norm_linear(mlp, L.ln1, L.qkv, qkv);
    } else {
      be.add_rms_norm(*cur, mlp, L.ln1, 1e-6f, 0.f, x);
    }
    if (fused_qkv) {
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
    be.attention(q, L.kv, ap, attn);
    lin(attn, L.o, o);
    norm_linear(o, L.ln2, L.gate_up, gu);
    if (g_fusions && ours) {
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

RopeParams qwen_rope(int d) {
  RopeParams p;
  p.head_dim = p.rotary_dim = d;
  for (int i = 0; i < d / 2; ++i) p.inv_freq.push_back(std::pow(1e6f, -2.f * i / d));
  return p;
}

struct Row {
  std::string what;
  double ours_ms, cublas_ms, floor_ms;  // floor: roofline time
  double tokens;
};

// Per-shape linear timings (the decode building block). M <= 16: the decode kernel's two loop variants;
// M = 17..512: the mid-M kernel (linear_mid.cu, 32- and 64-feature CTA tiles; the TFLOP/s and GB/s
// columns are the faster one's), tiled and (M <= 64) decode kernels forced in turn (same bits, tested),
// M > 512: the tiled kernel; the wgmma kernel (linear_wgmma.cu, its tile by the grid size) on sm_90;
// cuBLAS alongside. Auto = what linear_bf16 picks (docs/cuda-notes.md).
void linear_table(Backend& be, cublasHandle_t h, const Shape& sh, Layer& L, LinearWeight& lm_head) {
  cudaStream_t s = cuda::stream_of(be);
  const float one = 1, zero = 0;
  auto ours = [&](const Tensor& x, const LinearWeight& w, Tensor& y) { be.linear(x, w, y); };
  auto cublas = [&](const Tensor& x, const LinearWeight& w, Tensor& y) {
    const int n = int(w.weight.dim(0)), k = int(w.weight.dim(1)), mm = int(x.numel() / k);
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w.weight.raw(), CUDA_R_16BF, k,
                              x.raw(), CUDA_R_16BF, k, &zero, y.raw(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  };
  struct W {
    const char* n;
    LinearWeight* w;
  } ws[] = {{"q", &L.q}, {"o", &L.o}, {"gate_up", &L.gate_up}, {"down", &L.down}, {"lm_head", &lm_head}};
  std::printf("-- linears, %s --\n", sh.name);
  for (int rows : {1, 8, 32, 64, 96, 128, 256, 512, 4096}) {
    for (auto& w : ws) {
      const int64_t n = w.w->weight.dim(0), k = w.w->weight.dim(1);
      if (rows > 256 && n > 100000) continue;  // lm_head runs for one row per prompt
      Tensor x = be.alloc({rows, k}, DType::BF16), y = be.alloc({rows, n}, DType::BF16);
      cuda::fill_uniform(be, x, 7, -1, 1);
      auto gbs = [&](double t) { return n * k * 2 / (t * 1e-3) / 1e9; };
      auto tflops = [&](double t) { return 2.0 * rows * n * k / (t * 1e-3) / 1e12; };
      const int reps = rows > 256 ? 5 : 15;
      auto timed = [&](auto&& fn) { return time_ms(s, fn, 2, reps); };
      if (rows > 16) {
        auto forced = [&](cuda::LinearKernel kern) {
          cuda::set_linear_kernel(kern);
          const double t = timed([&] { ours(x, *w.w, y); });
          cuda::set_linear_kernel(cuda::LinearKernel::Auto);
          return t;
        };
        double tm32 = 0, tm64 = 0;  // linear_mid with 32 / 64 features a CTA
        if (rows <= 512) {
          cuda::set_linear_mid_features(32);
          tm32 = forced(cuda::LinearKernel::Mid);
          cuda::set_linear_mid_features(64);
          tm64 = forced(cuda::LinearKernel::Mid);
          cuda::set_linear_mid_features(0);
        }
        const double tm = tm32 > 0 ? std::min(tm32, tm64) : 0;
        const double tt = forced(cuda::LinearKernel::Tiled);
        const double td = rows <= 64 ? forced(cuda::LinearKernel::Decode) : 0;
        const double tw = cuda::linear_wgmma_supported() ? forced(cuda::LinearKernel::Wgmma) : 0;
        const double tc = timed([&] { cublas(x, *w.w, y); });
        double best = tm > 0 ? std::min(tm, tt) : tt;
        if (tw > 0) best = std::min(best, tw);
        std::printf(
            "linear %-8s M=%-4d N=%-6ld K=%-6ld mid F32 %7.1f F64 %7.1f us %4.0f TFLOP/s %5.0f GB/s | tiled "
            "%7.1f us %4.0f TFLOP/s | wgmma %7.1f us %4.0f TFLOP/s %5.0f GB/s (%s) | decode %7.1f us | cuBLAS "
            "%7.1f us %4.0f TFLOP/s %5.0f GB/s | best/cuBLAS time %.2f\n",
            w.n, rows, long(n), long(k), tm32 * 1e3, tm64 * 1e3, tm > 0 ? tflops(tm) : 0, tm > 0 ? gbs(tm) : 0,
            tt * 1e3, tflops(tt), tw * 1e3, tw > 0 ? tflops(tw) : 0, tw > 0 ? gbs(tw) : 0,
            cuda::wgmma_tile_name(cuda::linear_wgmma_auto_tile(rows, int(n))), td * 1e3, tc * 1e3, tflops(tc),
            gbs(tc), best / tc);
        if (rows <= 512) {  // every linear_mid.cu tile forced (docs/cuda-notes.md v11)
          std::printf("  mid tiles %-8s M=%-4d auto %-7s |", w.n, rows,
                      cuda::linear_mid_tile_name(cuda::linear_mid_auto_tile(rows, int(n))));
          for (cuda::MidTile tile : cuda::kMidTiles) {
            cuda::set_linear_mid_tile(tile);
            std::printf(" %s %.1f", cuda::linear_mid_tile_name(tile), forced(cuda::LinearKernel::Mid) * 1e3);
            cuda::set_linear_mid_tile(cuda::MidTile::Auto);
          }
          std::printf(" us\n");
        }
        continue;
      }
      cuda::set_linear_variant(cuda::LoopVariant::Plain);
      const double t0 = timed([&] { ours(x, *w.w, y); });
      cuda::set_linear_variant(cuda::LoopVariant::Prefetch);
      const double t1 = timed([&] { ours(x, *w.w, y); });
      cuda::set_linear_variant(cuda::LoopVariant::Auto);
      const double t2 = timed([&] { cublas(x, *w.w, y); });
      std::printf(
          "linear %-8s M=%-4d N=%-6ld K=%-6ld plain %7.1f us %5.0f GB/s | prefetch %7.1f us %5.0f GB/s | "
          "cuBLAS %7.1f us %5.0f GB/s\n",
          w.n, rows, long(n), long(k), t0 * 1e3, gbs(t0), t1 * 1e3, gbs(t1), t2 * 1e3, gbs(t2));
    }
  }
}

// Only the linear table (--linears): one layer's weights and the lm_head, no KV pool.
void linears_only(Backend& be, cublasHandle_t h, const Shape& sh) {
  Model m{sh, {}, {}, {}, {}, 0, 0};
  Layer L;
  const int64_t qd = int64_t(sh.heads) * sh.head_dim;
  L.q = rand_linear(be, qd, sh.hidden, 1, &m);
  L.o = rand_linear(be, sh.hidden, qd, 2, &m);
  L.gate_up = rand_linear(be, 2 * int64_t(sh.inter), sh.hidden, 3, &m);
  L.down = rand_linear(be, sh.hidden, sh.inter, 4, &m);
  LinearWeight lm_head = rand_linear(be, sh.vocab, sh.hidden, 5, &m);
  linear_table(be, h, sh, L, lm_head);
}

void run_shape(Backend& be, cublasHandle_t h, const Shape& sh, const Ceilings& c, bool quick,
               std::vector<Row>* out) {
  cudaStream_t s = cuda::stream_of(be);
  const int max_ctx = quick ? 512 : 8192;
  Model m = make_model(be, sh, int64_t(32) * (max_ctx + kBlock));
  const float one = 1, zero = 0;
  LinearFn ours = [&](const Tensor& x, const LinearWeight& w, Tensor& y) { be.linear(x, w, y); };
  LinearFn cublas = [&](const Tensor& x, const LinearWeight& w, Tensor& y) {
    const int n = int(w.weight.dim(0)), k = int(w.weight.dim(1)), mm = int(x.numel() / k);
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, mm, k, &one, w.weight.raw(), CUDA_R_16BF, k,
                              x.raw(), CUDA_R_16BF, k, &zero, y.raw(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  };
  const RopeParams rope = qwen_rope(sh.head_dim);
  const double kv_bytes_per_token = 2.0 * sh.layers * sh.kv_heads * sh.head_dim * 2;
  std::printf("\n== %s: %.2f GB of linear weights, KV %.0f KB/token ==\n", sh.name, m.linear_bytes / 1e9,
              kv_bytes_per_token / 1e3);

  linear_table(be, h, sh, m.layers[0], m.lm_head);

  // Decode steps.
  Acts acts = make_acts(be, sh, quick ? 512 : 4096, 32);
  // The small ops of one decode layer, each timed alone (launch + run), to see where a step goes.
  for (int batch : {1, 32}) {
    BatchMeta meta = decode_meta(batch, 512);
    be.begin_forward(meta);
    Layer& L = m.layers[0];
    const int64_t qd = int64_t(sh.heads) * sh.head_dim, kd = int64_t(sh.kv_heads) * sh.head_dim;
    auto v2 = [](const Tensor& t, int64_t r, int64_t c) { return t.slice_rows(0, r).view({r, c}); };
    Tensor res = v2(acts.res, batch, sh.hidden), x = v2(acts.x, batch, sh.hidden), q = v2(acts.q, batch, qd),
           k = v2(acts.k, batch, kd), v = v2(acts.v, batch, kd), attn = v2(acts.attn, batch, qd),
           gu = v2(acts.gu, batch, 2 * int64_t(sh.inter)), act = v2(acts.act, batch, sh.inter),
           qkv = v2(acts.qkv, batch, qd + 2 * kd), mlp = v2(acts.mlp, batch, sh.hidden),
           res2 = v2(acts.res2, batch, sh.hidden);
    for (Tensor* t : {&res, &x, &q, &k, &v, &gu, &qkv, &mlp}) cuda::fill_uniform(be, *t, 5, -1, 1);
    Tensor qh = q.view({batch * int64_t(sh.heads), sh.head_dim});
    AttentionParams ap{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
    struct Op {
      const char* n;
      std::function<void()> f;
    } ops[] = {
        {"add_rms_norm", [&] { be.add_rms_norm(res, x, L.ln1, 1e-6f, 0.f, x); }},
        {"q_norm", [&] { be.rms_norm(qh, L.q_norm, 1e-6f, 0.f, qh); }},
        {"rope", [&] { be.rope(q, k, rope); }},
        {"kv_write", [&] { be.kv_write(L.kv, k, v); }},
        {"attention ctx512", [&] { be.attention(q, L.kv, ap, attn); }},
        {"silu_mul", [&] { be.silu_mul(gu, act); }},
        {"linear k", [&] { be.linear(x, L.k, k); }},
        // v9's fusions against what they replace (each pair: same bits).
        {"linear q+k+v", [&] { be.linear(x, L.q, q), be.linear(x, L.k, k), be.linear(x, L.v, v); }},
        {"linear qkv", [&] { be.linear(x, L.qkv, qkv); }},
        {"attention_inputs_qkv", [&] { be.attention_inputs_qkv(qkv, q, &L.q_norm, &L.k_norm, 1e-6f, 0.f, rope, L.kv); }},
        {"silu_mul+down", [&] { be.silu_mul(gu, act), be.linear(act, L.down, mlp); }},
        {"silu_mul_linear", [&] { be.silu_mul_linear(gu, L.down, act, mlp); }},
        {"add_rms_norm+gate_up", [&] { be.add_rms_norm(res, mlp, L.ln2, 1e-6f, 0.f, x), be.linear(x, L.gate_up, gu); }},
        {"add_rms_norm_linear gate_up",
         [&] { be.add_rms_norm_linear(res, mlp, L.ln2, 1e-6f, 0.f, x, L.gate_up, gu, res2); }},
    };
    std::printf("ops b=%d:", batch);
    force_v9_fusions(true);  // the fused ops as such (each next to what it replaces)
    be.begin_forward(meta);  // tiles are planned once a forward
    for (auto& op : ops) std::printf(" %s %.1f us |", op.n, time_ms(s, op.f, 3, 21) * 1e3);
    force_v9_fusions(false);  // the split schedule + combine (the default)
    be.begin_forward(meta);
    std::printf(" attention ctx512 split %.1f us |",
                time_ms(s, [&] { be.attention(q, L.kv, ap, attn); }, 3, 21) * 1e3);
    std::printf("\n");
  }
  for (int ctx : {512, 8192}) {
    if (ctx > max_ctx) continue;
    for (int batch : {1, 8, 32}) {
      BatchMeta meta = decode_meta(batch, ctx);
      be.begin_forward(meta);
      bool g1 = false, g2 = false;
      const double t_eager = time_ms(s, [&] { forward(be, m, acts, batch, batch, rope, ours); });
      cuda::set_linear_variant(cuda::LoopVariant::Plain);
      bool g0 = false;
      const double t_plain = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      cuda::set_linear_variant(cuda::LoopVariant::Auto);
      cuda::set_linear_pdl(false);
      const double t_nopdl = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      cuda::set_linear_pdl(true);
      g_fused_inputs = false;
      const double t_sep = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      g_fused_inputs = true;
      set_fusions(false);
      const double t_unfused = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      set_fusions(true);
      force_v9_fusions(true);
      be.begin_forward(meta);
      const double t_allfused = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      force_v9_fusions(false);
      cuda::set_fused_silu_linear(true);  // each fusion alone: with dependent launch a kernel boundary costs more
      const double t_silu = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      cuda::set_fused_silu_linear(false);
      cuda::set_fused_norm_linear(true);
      const double t_norm = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g0);
      cuda::set_fused_norm_linear(false);
      be.begin_forward(meta);
      const double t1 = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g1);
      const double t2 = time_graph_ms(
          s, [&] { forward(be, m, acts, batch, batch, rope, cublas, false); }, &g2);
      const double bytes = double(m.linear_bytes) + kv_bytes_per_token * batch * ctx;
      const double floor_ms = bytes / (c.copy_gbs * 1e9) * 1e3;
      char what[96];
      std::snprintf(what, sizeof what, "decode b=%d ctx=%d%s", batch, ctx,
                    g1 && g2 ? " (graph)" : " (eager)");
      out->push_back({std::string(sh.name) + " " + what, t1, t2, floor_ms, double(batch)});
      std::printf(
          "%s: ours %.3f ms (eager %.3f, all-plain linear %.3f, no dependent launch %.3f, separate "
          "norm/rope/kv-write %.3f, no qkv fusion %.3f, + norm/silu/short-attention fusions %.3f, + silu fusion "
          "%.3f, + norm fusion %.3f) cuBLAS %.3f ms "
          "floor %.3f ms\n",
          what, t1, t_eager, t_plain, t_nopdl, t_sep, t_unfused, t_allfused, t_silu, t_norm, t2, floor_ms);
    }
  }
  // Attention alone at the largest decode batch (KV-bound).
  {
    const int ctx = max_ctx, batch = 32;
    BatchMeta meta = decode_meta(batch, ctx);
    be.begin_forward(meta);
    Tensor q = be.alloc({batch, sh.heads, sh.head_dim}, DType::BF16),
           o = be.alloc({batch, sh.heads, sh.head_dim}, DType::BF16);
    cuda::fill_uniform(be, q, 9, -1, 1);
    AttentionParams ap{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
    cuda::set_attention_mma(false);
    cuda::set_attention_variant(cuda::LoopVariant::Plain);
    const double t0 = time_ms(
        s, [&] { be.attention(q, m.layers[0].kv, ap, o); }, 3, 11);
    cuda::set_attention_variant(cuda::LoopVariant::Prefetch);
    const double t = time_ms(
        s, [&] { be.attention(q, m.layers[0].kv, ap, o); }, 3, 11);
    cuda::set_attention_variant(cuda::LoopVariant::Auto);
    const double bytes = 2.0 * batch * ctx * sh.kv_heads * sh.head_dim * 2;
    std::printf(
        "attention one layer b=%d ctx=%d: CUDA-core prefetch %.1f us, %.0f GB/s of KV | plain %.1f us, %.0f "
        "GB/s\n",
        batch, ctx, t * 1e3, bytes / (t * 1e-3) / 1e9, t0 * 1e3, bytes / (t0 * 1e-3) / 1e9);
    cuda::set_attention_mma(true);
    const double tm = time_ms(
        s, [&] { be.attention(q, m.layers[0].kv, ap, o); }, 3, 11);
    std::printf("attention one layer b=%d ctx=%d: tensor-core %.1f us, %.0f GB/s of KV\n", batch, ctx,
                tm * 1e3, bytes / (tm * 1e-3) / 1e9);
  }
  // Prefill of one prompt in one forward; logits for the last token only.
  for (int n : {512, 4096}) {
    if (quick && n > 512) continue;
    BatchMeta meta = prefill_meta(n);
    be.begin_forward(meta);
    const double t1 = time_ms(
        s, [&] { forward(be, m, acts, n, 1, rope, ours); }, 1, 3);
    const double t2 = time_ms(
        s, [&] { forward(be, m, acts, n, 1, rope, cublas, false); }, 1, 3);
    const double lin_flops =
        2.0 * n * (m.linear_bytes / 2 - double(sh.vocab) * sh.hidden) + 2.0 * sh.vocab * sh.hidden;
    const double attn_flops = 2.0 * double(n) * n * sh.heads * sh.head_dim * sh.layers;  // causal QK and PV
    const double floor_ms = (lin_flops + attn_flops) / (c.gemm_tflops * 1e12) * 1e3;
    char what[64];
    std::snprintf(what, sizeof what, "prefill %d", n);
    out->push_back({std::string(sh.name) + " " + what, t1, t2, floor_ms, double(n)});
    std::printf("%s: ours %.2f ms cuBLAS-linear %.2f ms floor %.2f ms\n", what, t1, t2, floor_ms);
    {  // where the time goes: one layer's attention over the whole prompt
      Tensor q = be.alloc({n, sh.heads, sh.head_dim}, DType::BF16),
             o = be.alloc({n, sh.heads, sh.head_dim}, DType::BF16);
      cuda::fill_uniform(be, q, 9, -1, 1);
      AttentionParams ap{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
      const double ta = time_ms(
          s, [&] { be.attention(q, m.layers[0].kv, ap, o); }, 1, 3);
      cuda::set_attention_mma(false);
      const double t1 = time_ms(
          s, [&] { be.attention(q, m.layers[0].kv, ap, o); }, 1, 3);
      cuda::set_attention_mma(true);
      const double fl = 2.0 * double(n) * n * sh.heads * sh.head_dim;
      std::printf(
          "  prefill %d attention one layer %.2f ms (%.1f TFLOP/s; CUDA-core kernel %.2f ms), x%d layers = "
          "%.1f ms\n",
          n, ta, fl / (ta * 1e-3) / 1e12, t1, sh.layers, ta * sh.layers);
    }
  }
}

// Verify cost: a forward of b*(k+1) rows (k drafts per sequence) over a 1-row-per-sequence step, k=1..8.
void verify_sweep(Backend& be, const Shape& sh, int ctx) {
  cudaStream_t s = cuda::stream_of(be);
  Model m = make_model(be, sh, int64_t(8) * (ctx + kBlock));
  Acts acts = make_acts(be, sh, 8 * 9, 8 * 9);
  LinearFn ours = [&](const Tensor& x, const LinearWeight& w, Tensor& y) { be.linear(x, w, y); };
  const RopeParams rope = qwen_rope(sh.head_dim);
  std::printf("\n== verify cost, %s, ctx %d (graph replays; logits for every row) ==\n| batch | k=0 ms |",
              sh.name, ctx);
  for (int k = 1; k <= 8; ++k) std::printf(" k=%d |", k);
  std::printf("\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (int batch : {1, 8}) {
    double base = 0;
    std::printf("| %d |", batch);
    for (int k = 0; k <= 8; ++k) {
      BatchMeta meta = verify_meta(batch, k, ctx);
      be.begin_forward(meta);
      const int rows = batch * (k + 1);
      bool g = false;
      const double t = time_graph_ms(
          s, [&] { forward(be, m, acts, rows, rows, rope, ours); }, &g);
      if (k == 0) {
        base = t;
        std::printf(" %.3f |", t);
      } else {
        std::printf(" %.2fx |", t / base);
      }
    }
    std::printf("\n");
  }
}

// A target for `ncu --profile-from-start off`: the kernels of one eager decode forward (b=1, ctx 512),
// each timed alone by the profiler, to split a graphed step's time into kernel time and the gaps.
void profile_forward(Backend& be, const Shape& sh) {
  Model m = make_model(be, sh, int64_t(4) * (512 + kBlock));
  LinearFn ours = [&](const Tensor& x, const LinearWeight& w, Tensor& y) { be.linear(x, w, y); };
  Acts acts = make_acts(be, sh, 16, 16);
  const RopeParams rope = qwen_rope(sh.head_dim);
  BatchMeta meta = decode_meta(1, 512);
  be.begin_forward(meta);
  for (int i = 0; i < 3; ++i) forward(be, m, acts, 1, 1, rope, ours);
  be.synchronize();
  cudaStream_t s = cuda::stream_of(be);
  const double eager = time_ms(s, [&] { forward(be, m, acts, 1, 1, rope, ours); });
  const double graph = time_graph_ms(s, [&] { forward(be, m, acts, 1, 1, rope, ours); }, nullptr);
  std::printf("forward b=1 ctx 512: eager %.3f ms, graph %.3f ms\n", eager, graph);
  TF_CUDA_CHECK(cudaProfilerStart());
  forward(be, m, acts, 1, 1, rope, ours);
  be.synchronize();
  TF_CUDA_CHECK(cudaProfilerStop());
  std::printf("profiled one forward of %s b=1 ctx 512\n", sh.name);
}

int run(int argc, char** argv) {
  bool quick = false, small_only = false, verify_only = false, linears = false, profile = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--profile-forward")) profile = true;
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    if (!std::strcmp(argv[i], "--small")) small_only = true;
    if (!std::strcmp(argv[i], "--verify")) verify_only = true;
    if (!std::strcmp(argv[i], "--linears")) linears = true;
  }
  std::string why;
  auto be = make_cuda_backend(0, &why);
  if (!be) {
    std::fprintf(stderr, "tf_bench_cuda: %s\n", why.c_str());
    return 2;
  }
  cublasHandle_t h;
  CUBLAS_CHECK(cublasCreate(&h));
  CUBLAS_CHECK(cublasSetStream(h, cuda::stream_of(*be)));
  std::printf("device: %s\n", be->name().c_str());
  const Ceilings c = measure_ceilings(*be, h);
  std::printf("ceilings: device copy %.0f GB/s (read+write), cuBLAS bf16 GEMM 8192^3 %.0f TFLOP/s\n",
              c.copy_gbs, c.gemm_tflops);
  if (linears) {  // --linears: the per-shape linear table alone
    if (!small_only) linears_only(*be, h, kQwen3_8B);
    linears_only(*be, h, kQwen3_06B);
    cublasDestroy(h);
    return 0;
  }
  if (profile) {  // one eager 8B b=1 ctx 512 forward between cudaProfilerStart/Stop (ncu --profile-from-start off)
    profile_forward(*be, kQwen3_8B);
    cublasDestroy(h);
    return 0;
  }
  if (verify_only) {
    verify_sweep(*be, kQwen3_8B, 512);
    verify_sweep(*be, kQwen3_8B, 8192);
    cublasDestroy(h);
    return 0;
  }
  std::vector<Row> rows;
  if (!small_only) run_shape(*be, h, kQwen3_8B, c, quick, &rows);
  run_shape(*be, h, kQwen3_06B, c, quick, &rows);
  std::printf(
      "\n| run | ours tok/s | of roofline | cuBLAS-linear tok/s | of roofline | ours/cuBLAS "
      "|\n|---|---|---|---|---|---|\n");
  for (auto& r : rows)
    std::printf("| %s | %.0f | %.1f%% | %.0f | %.1f%% | %.2f |\n", r.what.c_str(),
                r.tokens / (r.ours_ms * 1e-3), 100 * r.floor_ms / r.ours_ms, r.tokens / (r.cublas_ms * 1e-3),
                100 * r.floor_ms / r.cublas_ms, r.cublas_ms / r.ours_ms);
  std::printf(
      "(roofline: decode = (linear weights + KV bytes) / measured copy bandwidth %.0f GB/s; prefill = "
      "FLOPs / measured GEMM rate %.0f TFLOP/s)\n",
      c.copy_gbs, c.gemm_tflops);
  cublasDestroy(h);
  return 0;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf_bench_cuda: %s\n", e.what());
    return 1;
  }
}

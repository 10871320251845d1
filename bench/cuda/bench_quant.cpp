// tf_bench_quant: a random-weight Qwen3-8B in bf16, MLX affine 4-bit/g64, MLX 8-bit/g64 and FP8 e4m3
// with 128x128 block scales, weights made on the GPU. Times, each replayed from a CUDA graph, at M = 1 and
// 16 tokens: (1) the linears of one decode step alone (36 layers x q, k, v, o, gate_up, down, plus
// lm_head), (2) the whole decode forward (M sequences at context 512: norms, rope, KV write, attention).
// Prints tokens/s, the ratio to bf16, and GB/s against the device-to-device copy bandwidth measured in
// the same run, counted on each format's own bytes (packed weights + scales + biases, + KV for (2)).
// (2) is an older unfused flow (separate q/k/v linears, q/k norm, rope, KV write, silu_mul): 4+ kernels a
// layer more than the product runs. The product's forward at each format is `tensorfold bench --shape
// qwen3-8b --format bf16,mlx4,mlx8,fp8` (shape_bench.h); issue 11's forward numbers come from there.
// --linears-m 16,32,64: the linears alone at those M, bf16 and MLX 4-bit (run_linears_m).
// --profile-m 16: each 4-bit call kind once at M rows, q4_ks off then on, for ncu (run_profile_m).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant_linear.h"
#include "quant_weights.h"

namespace tf {
namespace {

constexpr int kLayers = 36, kHidden = 4096, kInter = 12288, kKv = 1024, kVocab = 151936;
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16, kCtx = 512, kMaxBatch = 16;

// This bench's default: median of 11 after 3 warm-ups.
double time_ms(cudaStream_t s, const std::function<void()>& fn) {
  return bench::time_ms(s, fn, 3, 11);
}
using bench::copy_bandwidth_gbs;
using bench::time_graph_ms;

using Fmt = bench::WeightFormat;
const char* fmt_name(Fmt f) {
  return bench::weight_format_info(f).name;
}

// A random [n, k] weight of format f (quant_weights.h), its device bytes added to *bytes.
LinearWeight make_weight(Backend& be, Fmt f, int64_t n, int64_t k, uint64_t seed, int64_t* bytes) {
  LinearWeight w = bench::rand_linear_weight(be, f, n, k, seed);
  *bytes += bench::linear_weight_bytes(w);
  return w;
}

struct Layer {
  LinearWeight q, k, v, o, gate_up, down;
  Tensor ln1, ln2, q_norm, k_norm;
  KvLayer kv;
};

struct Weights {
  std::vector<Layer> layers;
  LinearWeight lm_head;
  Tensor embed, final_norm;
  int64_t bytes = 0;  // linear weights' bytes (what a decode step reads besides KV)
};

Tensor rand_norm(Backend& be, int64_t n, uint64_t seed) {
  Tensor t = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, t, seed, 0.8f, 1.2f);
  return t;
}

Weights make_weights(Backend& be, Fmt f) {
  Weights w;
  uint64_t seed = 1000;
  for (int l = 0; l < kLayers; ++l) {
    Layer L;
    L.q = make_weight(be, f, kHidden, kHidden, seed += 10, &w.bytes);
    L.k = make_weight(be, f, kKv, kHidden, seed += 10, &w.bytes);
    L.v = make_weight(be, f, kKv, kHidden, seed += 10, &w.bytes);
    L.o = make_weight(be, f, kHidden, kHidden, seed += 10, &w.bytes);
    L.gate_up = make_weight(be, f, 2 * kInter, kHidden, seed += 10, &w.bytes);
    L.down = make_weight(be, f, kHidden, kInter, seed += 10, &w.bytes);
    L.ln1 = rand_norm(be, kHidden, ++seed);
    L.ln2 = rand_norm(be, kHidden, ++seed);
    L.q_norm = rand_norm(be, kHeadDim, ++seed);
    L.k_norm = rand_norm(be, kHeadDim, ++seed);
    const int64_t blocks = int64_t(kMaxBatch) * (kCtx / kBlock + 1);
    L.kv.k = be.alloc({blocks, kBlock, kKvHeads, kHeadDim}, DType::BF16);
    L.kv.v = be.alloc({blocks, kBlock, kKvHeads, kHeadDim}, DType::BF16);
    cuda::fill_uniform(be, L.kv.k, ++seed, -2, 2);
    cuda::fill_uniform(be, L.kv.v, ++seed, -1, 1);
    w.layers.push_back(std::move(L));
  }
  w.lm_head = make_weight(be, f, kVocab, kHidden, seed += 10, &w.bytes);
  w.embed = be.alloc({kVocab, kHidden}, DType::BF16);
  cuda::fill_uniform(be, w.embed, ++seed, -1, 1);
  w.final_norm = rand_norm(be, kHidden, ++seed);
  be.synchronize();
  return w;
}

struct Buffers {
  Tensor xh, xi, yq, ykv, yh, ygu, logits;
};

Buffers make_buffers(Backend& be, int m) {
  Buffers b;
  b.xh = be.alloc({m, kHidden}, DType::BF16);
  b.xi = be.alloc({m, kInter}, DType::BF16);
  cuda::fill_uniform(be, b.xh, 7, -1, 1);
  cuda::fill_uniform(be, b.xi, 8, -1, 1);
  b.yq = be.alloc({m, kHidden}, DType::BF16);
  b.ykv = be.alloc({m, kKv}, DType::BF16);
  b.yh = be.alloc({m, kHidden}, DType::BF16);
  b.ygu = be.alloc({m, 2 * kInter}, DType::BF16);
  b.logits = be.alloc({m, kVocab}, DType::F32);
  return b;
}

// Every linear of one decode step (inputs are fixed buffers: the weights' reads are what is timed).
void step(Backend& be, const Weights& w, Buffers& b) {
  for (const Layer& L : w.layers) {
    be.linear(b.xh, L.q, b.yq);
    be.linear(b.xh, L.k, b.ykv);
    be.linear(b.xh, L.v, b.ykv);
    be.linear(b.yq, L.o, b.yh);
    be.linear(b.xh, L.gate_up, b.ygu);
    be.linear(b.xi, L.down, b.yh);
  }
  be.linear(b.xh, w.lm_head, b.logits);
}

struct Acts {
  Tensor res, x, q, k, v, attn, o, gu, act, mlp, logits;
};

Acts make_acts(Backend& be, int m) {
  auto a = [&](int64_t c) { return be.alloc({m, c}, DType::BF16); };
  const int64_t qd = int64_t(kHeads) * kHeadDim, kd = int64_t(kKvHeads) * kHeadDim;
  return Acts{a(kHidden),
              a(kHidden),
              a(qd),
              a(kd),
              a(kd),
              a(qd),
              a(kHidden),
              a(2 * int64_t(kInter)),
              a(kInter),
              a(kHidden),
              be.alloc({m, kVocab}, DType::F32)};
}

// The dense Qwen3 decoder's decode step over the rows of begin_forward() (as bench_cuda's forward).
void forward(Backend& be, Weights& w, Acts& A, const RopeParams& rope) {
  const int64_t rows = A.x.dim(0);
  Tensor qh = A.q.view({rows * kHeads, kHeadDim}), kh = A.k.view({rows * kKvHeads, kHeadDim});
  const AttentionParams ap{kHeads, kKvHeads, kHeadDim, 1.f / std::sqrt(float(kHeadDim)), 0, 0.f};
  be.embedding(w.embed, 1.f, A.res);
  for (int l = 0; l < kLayers; ++l) {
    Layer& L = w.layers[size_t(l)];
    if (l == 0)
      be.rms_norm(A.res, L.ln1, 1e-6f, 0.f, A.x);
    else
      be.add_rms_norm(A.res, A.mlp, L.ln1, 1e-6f, 0.f, A.x);
    be.linear(A.x, L.q, A.q);
    be.linear(A.x, L.k, A.k);
    be.linear(A.x, L.v, A.v);
    be.rms_norm(qh, L.q_norm, 1e-6f, 0.f, qh);
    be.rms_norm(kh, L.k_norm, 1e-6f, 0.f, kh);
    be.rope(A.q, A.k, rope);
    be.kv_write(L.kv, A.k, A.v);
    be.attention(A.q, L.kv, ap, A.attn);
    be.linear(A.attn, L.o, A.o);
    be.add_rms_norm(A.res, A.o, L.ln2, 1e-6f, 0.f, A.x);
    be.linear(A.x, L.gate_up, A.gu);
    be.silu_mul(A.gu, A.act);
    be.linear(A.act, L.down, A.mlp);
  }
  be.add_rms_norm(A.res, A.mlp, w.final_norm, 1e-6f, 0.f, A.x);
  be.linear(A.x, w.lm_head, A.logits);
}

RopeParams qwen_rope() {
  RopeParams p;
  p.head_dim = p.rotary_dim = kHeadDim;
  for (int i = 0; i < kHeadDim / 2; ++i) p.inv_freq.push_back(std::pow(1e6f, -2.f * i / kHeadDim));
  return p;
}

struct Result {
  Fmt f;
  int m, ahead;  // ahead: K chunks loaded per step (set_quant_loads_per_step; 0 = auto)
  double ms, gb;
  bool full;  // the whole decode forward (else the linears alone)
};

// MLX 4-bit at M rows: each kind of linear (36 calls, lm_head one) and the whole step under each of `n`
// settings (set(0) .. set(n - 1); the caller restores its switches after), in one process.
void modes_table(Backend& be, const Weights& w, Buffers& b, int m, const char* what, int n,
                 const std::function<void(int)>& set) {
  cudaStream_t s = cuda::stream_of(be);
  auto each = [&](LinearWeight Layer::*lw, const Tensor& x, Tensor& y) {
    return [&, lw] {
      for (const Layer& L : w.layers) be.linear(x, L.*lw, y);
    };
  };
  const std::pair<const char*, std::function<void()>> ops[] = {
      {"q 4096x4096", each(&Layer::q, b.xh, b.yq)},
      {"k 1024x4096", each(&Layer::k, b.xh, b.ykv)},
      {"gate_up 24576x4096", each(&Layer::gate_up, b.xh, b.ygu)},
      {"down 4096x12288", each(&Layer::down, b.xi, b.yh)},
      {"lm_head", [&] { be.linear(b.xh, w.lm_head, b.logits); }},
      {"step", [&] { step(be, w, b); }}};
  std::printf("  M=%d mlx4, %s (ms):", m, what);
  for (const auto& [name, fn] : ops) {
    std::printf(" %s", name);
    for (int i = 0; i < n; ++i) {
      set(i);
      std::printf(" %.4f", time_graph_ms(s, fn));
    }
    std::printf(" |");
  }
  std::printf("\n");
  std::fflush(stdout);
}

// 9-16 rows: q4_pair_kernel off, where its tiles fill the grid, and always (set_q4_pair 0 / 1 / 2).
void pair_modes(Backend& be, const Weights& w, Buffers& b, int m) {
  const int mode0 = cuda::q4_pair_mode();
  modes_table(be, w, b, m, "q4_pair off / where the tiles fill the grid / always", 3, cuda::set_q4_pair);
  cuda::set_q4_pair(mode0);
}

// 1-16 rows: q4_wg_kernel off and always in each of its configurations (set_q4_wg 0 / 2, set_q4_wg_config
// 0-1; quant_wg.cu).
void wg_modes(Backend& be, const Weights& w, Buffers& b, int m) {
  const int mode0 = cuda::q4_wg_mode(), cfg0 = cuda::q4_wg_config();
  modes_table(be, w, b, m, "q4_wg off / always in configurations 0 1", 3, [](int i) {
    cuda::set_q4_wg(i == 0 ? 0 : 2);
    if (i > 0) cuda::set_q4_wg_config(i - 1);
  });
  cuda::set_q4_wg(mode0);
  cuda::set_q4_wg_config(cfg0);
}

// 17-64 rows: q4_wg's cluster instance off and in modes 1 and 2 (set_q4_wgc: 33-64 rows in 32-row pieces of
// the wide weights or of every weight).
void wgc_modes(Backend& be, const Weights& w, Buffers& b, int m) {
  const int mode0 = cuda::q4_wgc_mode();
  modes_table(be, w, b, m, "q4_wg clusters off / mode 1 / mode 2", 3, cuda::set_q4_wgc);
  cuda::set_q4_wgc(mode0);
}

// 1-16 rows: q4_ks_kernel off and always in each of its configurations (set_q4_ks 0 / 2, set_q4_ks_config
// 0-4: the ticket fold; then 5-6, the fold in a cluster, on a line of its own; quant_ks.cu).
void ks_modes(Backend& be, const Weights& w, Buffers& b, int m) {
  const int mode0 = cuda::q4_ks_mode(), cfg0 = cuda::q4_ks_config();
  modes_table(be, w, b, m, "q4_ks off / always in configurations 0 1 2 3 4", 6, [](int i) {
    cuda::set_q4_ks(i == 0 ? 0 : 2);
    if (i > 0) cuda::set_q4_ks_config(i - 1);
  });
  if (bench::ks_cluster_benched())
    modes_table(be, w, b, m, "q4_ks always in configurations 5 6 (the fold in a cluster)", 2, [](int i) {
      cuda::set_q4_ks(2);
      cuda::set_q4_ks_config(5 + i);
    });
  cuda::set_q4_ks(mode0);
  cuda::set_q4_ks_config(cfg0);
}

// --linears-m M,M,..: only the linears of one decode step (graph) at these M, bf16 and MLX 4-bit/g64 in
// the same run (the quantized kernels' mid-M rows: mixed decode + prompt rounds).
int run_linears_m(Backend& be, const std::vector<int>& ms) {
  cudaStream_t s = cuda::stream_of(be);
  std::printf("| M | bf16 ms | mlx4 ms | mlx4 vs bf16 | mlx4 GB/s |\n|---|---|---|---|---|\n");
  Weights wb = make_weights(be, Fmt::Bf16), w4 = make_weights(be, Fmt::Mlx4);
  for (int m : ms) {
    Buffers b = make_buffers(be, m);
    const double tb = time_graph_ms(s, [&] { step(be, wb, b); }),
                 t4 = time_graph_ms(s, [&] { step(be, w4, b); });
    std::printf("| %d | %.3f | %.3f | %.2fx | %.0f |\n", m, tb, t4, tb / t4,
                double(w4.bytes) / (t4 * 1e-3) / 1e9);
    if (m > 16 && m <= 64) wgc_modes(be, w4, b, m);
    if (std::getenv("TF_BENCH_QUANT_ONLY_WGC")) continue;  // (the cluster instances' table only)
    const int wgc0 = cuda::q4_wgc_mode();
    cuda::set_q4_wgc(0);  // (the tables below: the kernels before the cluster instances)
    if (m >= 9 && m <= 16) pair_modes(be, w4, b, m);
    if (m <= 16) wg_modes(be, w4, b, m);
    if (m <= 16) ks_modes(be, w4, b, m);
    if (m > 32 && m <= 64) {  // 33-64 rows: in pieces (set_q4_split32 1: not split, 3, 4)
      const int s0 = cuda::q4_split32_mode();
      modes_table(be, w4, b, m, "in pieces off / widths > 8192 by 16 rows / and K > 4096 by 32", 3,
                  [](int i) { cuda::set_q4_split32(i == 0 ? 1 : 2 + i); });
      cuda::set_q4_split32(s0);
    }
    if (m > 16 && m <= 32) {  // q4_ks's 32-token instance off / every width / K > 4096 only
      const int m0 = cuda::q4_ks32_mode();
      modes_table(be, w4, b, m, "q4_ks at 17-32 rows off / on / K > 4096 only", 3, cuda::set_q4_ks32);
      cuda::set_q4_ks32(m0);
      const int s0 = cuda::q4_split32_mode();
      modes_table(be, w4, b, m, "as 16 + the rest rows off / widths > 8192 / every width", 3,
                  cuda::set_q4_split32);
      cuda::set_q4_split32(s0);
    }
    cuda::set_q4_wgc(wgc0);
  }
  return 0;
}

// --profile-m M: each call kind of the MLX 4-bit linears once, eagerly, at M rows with q4_ks off and then on
// (TF_Q4_KS_CFG picks its configuration): a short launch sequence for ncu (e.g. its L2 and DRAM bytes a
// kernel: docs/cuda-notes.md "Session 42").
int run_profile_m(Backend& be, int m) {
  Weights w4 = make_weights(be, Fmt::Mlx4);
  Buffers b = make_buffers(be, m);
  const Layer& L = w4.layers[0];
  const int mode0 = cuda::q4_ks_mode();
  for (int mode : {0, 2}) {  // (2: every row count, so M < 9 profiles it too)
    cuda::set_q4_ks(mode);
    be.linear(b.xh, L.q, b.yq);
    be.linear(b.xh, L.k, b.ykv);
    be.linear(b.xh, L.gate_up, b.ygu);
    be.linear(b.xi, L.down, b.yh);
    be.synchronize();
  }
  cuda::set_q4_ks(mode0);
  std::printf("profiled M=%d: q, k, gate_up, down with q4_ks off, then on\n", m);
  return 0;
}

int run(int argc, char** argv) {
  std::string why;
  auto be = make_cuda_backend(0, &why);
  if (!be) {
    std::fprintf(stderr, "tf_bench_quant: %s\n", why.c_str());
    return 1;
  }
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--linears-m") {
      std::vector<int> ms;
      std::istringstream list(argv[i + 1]);
      for (std::string m; std::getline(list, m, ',');) ms.push_back(std::stoi(m));
      return run_linears_m(*be, ms);
    }
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--profile-m") return run_profile_m(*be, std::stoi(argv[i + 1]));
  cudaStream_t s = cuda::stream_of(*be);
  const double copy = copy_bandwidth_gbs(*be);
  std::printf("%s\ncopy bandwidth (device to device, read + write): %.0f GB/s\n\n", be->name().c_str(), copy);
  std::vector<Result> res;
  const RopeParams rope = qwen_rope();
  for (Fmt f : {Fmt::Bf16, Fmt::Mlx4, Fmt::Mlx8, Fmt::Fp8}) {
    Weights w = make_weights(*be, f);
    for (int m : {1, 16}) {
      Buffers b = make_buffers(*be, m);
      for (int ahead : {0, 4, 8, 16}) {
        if (f == Fmt::Bf16 && ahead != 0) continue;
        cuda::set_quant_loads_per_step(ahead);
        const double ms = time_graph_ms(s, [&] { step(*be, w, b); });
        res.push_back({f, m, ahead, ms, double(w.bytes) / 1e9, false});
      }
      cuda::set_quant_loads_per_step(0);
      // The whole forward: M sequences at context 512; KV bytes read count towards the roofline.
      Acts acts = make_acts(*be, m);
      be->begin_forward(bench::decode_meta(m, kCtx));
      const double ms = time_graph_ms(s, [&] { forward(*be, w, acts, rope); });
      const double kv_gb = 2.0 * kLayers * kKvHeads * kHeadDim * 2 * kCtx * m / 1e9;
      res.push_back({f, m, 0, ms, double(w.bytes) / 1e9 + kv_gb, true});
    }
    // Per-shape times at M = 1 (eager, 20 calls a timing) for tuning.
    Buffers b = make_buffers(*be, 1);
    const Layer& L = w.layers[0];
    auto each = [&](const char* name, const LinearWeight& lw, const Tensor& x, Tensor& y) {
      const double ms = time_ms(s, [&] {
        for (int i = 0; i < 20; ++i) be->linear(x, lw, y);
      });
      const int64_t bytes = bench::linear_weight_bytes(lw);
      std::printf("  %-14s %-8s M=1: %8.2f us  %6.0f GB/s\n", fmt_name(f), name, ms * 1e3 / 20,
                  bytes / (ms / 20 * 1e-3) / 1e9);
    };
    each("q", L.q, b.xh, b.yq);
    each("k", L.k, b.xh, b.ykv);
    each("gate_up", L.gate_up, b.xh, b.ygu);
    each("down", L.down, b.xi, b.yh);
    each("lm_head", w.lm_head, b.xh, b.logits);
    be->synchronize();
  }
  auto bf16_ms = [&](int m, bool full) {
    for (auto& r : res)
      if (r.f == Fmt::Bf16 && r.m == m && r.full == full) return r.ms;
    return 0.0;
  };
  for (bool full : {false, true}) {
    std::printf(
        full ? "\n## whole decode forward, context 512, unfused flow (not the product's: see tensorfold "
               "bench --shape qwen3-8b --format) (roofline bytes: weights + KV)\n"
             : "\n## linears of one decode step (roofline bytes: weights)\n");
    std::printf(
        "| format | M | chunks ahead | step ms | tokens/s | vs bf16 | GB read | GB/s | of copy roofline |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (auto& r : res) {
      if (r.full != full) continue;
      const double gbs = r.gb / (r.ms * 1e-3);
      std::printf("| %s | %d | %s | %.3f | %.1f | %.2fx | %.2f | %.0f | %.1f%% |\n", fmt_name(r.f), r.m,
                  r.f == Fmt::Bf16 ? "-"
                  : r.ahead == 0   ? "auto"
                                   : std::to_string(r.ahead).c_str(),
                  r.ms, r.m / (r.ms * 1e-3), bf16_ms(r.m, full) / r.ms, r.gb, gbs, 100 * gbs / copy);
    }
  }
  std::printf("\n");
  for (auto& r : res) {  // issue 11's targets, default schedule
    if (r.f != Fmt::Mlx4 || r.ahead != 0) continue;
    const char* what = r.full ? "forward" : "linears";
    const double ratio = bf16_ms(r.m, r.full) / r.ms, frac = r.gb / (r.ms * 1e-3) / copy;
    if (r.m == 1)
      std::printf("target 4-bit/g64 M=1 (%s): >= 3x bf16 (%.2fx) %s, >= 75%% of roofline (%.1f%%) %s\n", what,
                  ratio, ratio >= 3 ? "met" : "MISSED", 100 * frac, frac >= 0.75 ? "met" : "MISSED");
    else
      std::printf("target 4-bit/g64 M=16 (%s): >= 2x bf16 (%.2fx) %s\n", what, ratio,
                  ratio >= 2 ? "met" : "MISSED");
  }
  return 0;
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  try {
    return tf::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf_bench_quant: %s\n", e.what());
    return 1;
  }
}

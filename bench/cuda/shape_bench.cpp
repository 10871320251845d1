// The shape benchmark (shape_bench.h). Measures the two ceilings in the same run (device copy bandwidth,
// cuBLAS bf16 GEMM rate), then per shape: per-shape linear timings, the small ops of a decode layer, a
// decode step at batch 1/8/32 and 512/8k context (tokens/s and fraction of the bandwidth roofline: weights
// + KV bytes a step must read), the same forward with cuBLAS GEMMs as the baseline, and prefill of one
// 512/4k/32k-token prompt in one forward against the GEMM rate. Quantized formats (format_rows): the same
// forward with each format's random linears next to bf16's, decode steps and prefills timed alike.
#include "shape_bench.h"

#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/error.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/decode_step.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"
#include "ops/cuda/quant_linear.h"
#include "shape_model.h"

namespace tf::bench {
namespace {

constexpr int kBlock = kBenchBlock;
constexpr int kPrefills[] = {512, 4096, 32768};  // prompt lengths of the prefill rows (--quick: the first)
constexpr int kLongPrefill = 4096;  // above: one timed forward after one warm-up (each takes seconds)

// A cuBLAS handle on the backend's stream, destroyed on every exit path.
class Cublas {
 public:
  explicit Cublas(Backend& be) {
    check_cublas(cublasCreate(&h_), "cublasCreate");
    check_cublas(cublasSetStream(h_, cuda::stream_of(be)), "cublasSetStream");
  }
  ~Cublas() { cublasDestroy(h_); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

struct Ceilings {
  double copy_gbs = 0, gemm_tflops = 0;
};

// The comma-separated integers of environment variable `env` ("512,2048"; unset: none).
std::vector<int> env_ints(const char* env) {
  std::vector<int> v;
  if (const char* e = std::getenv(env)) {
    std::stringstream ss(e);
    for (std::string item; std::getline(ss, item, ',');)
      if (!item.empty()) v.push_back(std::atoi(item.c_str()));
  }
  return v;
}

Ceilings measure_ceilings(Backend& be, cublasHandle_t h) {
  cudaStream_t s = cuda::stream_of(be);
  Ceilings c;
  c.copy_gbs = copy_bandwidth_gbs(be, 3, 11);
  const int m = 8192;
  Tensor x = be.alloc({m, m}, DType::BF16), y = be.alloc({m, m}, DType::BF16);
  LinearWeight w;
  w.weight = be.alloc({m, m}, DType::BF16), w.in_features = w.out_features = m;
  cuda::fill_uniform(be, x, 2, -1, 1);
  cuda::fill_uniform(be, w.weight, 3, -1, 1);
  const LinearFn gemm = cublas_linear(h);
  const double ms = time_ms(
      s, [&] { gemm(x, w, y); }, 3, 11);
  c.gemm_tflops = 2.0 * m * m * m / (ms * 1e-3) / 1e12;
  return c;
}

struct Row {
  std::string what;
  double ours_ms, cublas_ms, floor_ms;  // floor: roofline time
  double tokens;
};

// Everything one shape's tables share.
struct ShapeRun {
  Backend& be;
  cudaStream_t s;
  const Ceilings& c;
  ShapeModel& m;
  Acts& acts;
  LinearFn ours, cublas;
  RopeParams rope;
  std::vector<Row>* out;
  std::shared_ptr<void> step;  // the one-kernel decode step (decode_step_row), prepared on first use
  bool step_tried = false;
};

// One linear at M > 16 rows: the mid-M kernel (32- and 64-feature CTA tiles; the TFLOP/s and GB/s columns
// are the faster one's), tiled and (M <= 64) decode kernels forced in turn (same bits, tested), the wgmma
// kernel (its tile by the grid size) on sm_90, cuBLAS alongside; then every linear_mid.cu tile forced.
void linear_wide(Backend& be, const LinearFn& cublas, const char* name, const LinearWeight& w, int rows,
                 const Tensor& x, Tensor& y) {
  cudaStream_t s = cuda::stream_of(be);
  const int64_t n = w.weight.dim(0), k = w.weight.dim(1);
  auto gbs = [&](double t) { return n * k * 2 / (t * 1e-3) / 1e9; };
  auto tflops = [&](double t) { return 2.0 * rows * n * k / (t * 1e-3) / 1e12; };
  auto timed = [&](auto&& fn) { return time_ms(s, fn, 2, rows > 256 ? 5 : 15); };
  auto forced = [&](cuda::LinearKernel kern) {
    cuda::set_linear_kernel(kern);
    const double t = timed([&] { be.linear(x, w, y); });
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
  const double tc = timed([&] { cublas(x, w, y); });
  double best = tm > 0 ? std::min(tm, tt) : tt;
  if (tw > 0) best = std::min(best, tw);
  std::printf(
      "linear %-8s M=%-4d N=%-6ld K=%-6ld mid F32 %7.1f F64 %7.1f us %4.0f TFLOP/s %5.0f GB/s | tiled "
      "%7.1f us %4.0f TFLOP/s | wgmma %7.1f us %4.0f TFLOP/s %5.0f GB/s (%s) | decode %7.1f us | cuBLAS "
      "%7.1f us %4.0f TFLOP/s %5.0f GB/s | best/cuBLAS time %.2f\n",
      name, rows, long(n), long(k), tm32 * 1e3, tm64 * 1e3, tm > 0 ? tflops(tm) : 0, tm > 0 ? gbs(tm) : 0,
      tt * 1e3, tflops(tt), tw * 1e3, tw > 0 ? tflops(tw) : 0, tw > 0 ? gbs(tw) : 0,
      cuda::wgmma_tile_name(cuda::linear_wgmma_auto_tile(rows, int(n))), td * 1e3, tc * 1e3, tflops(tc),
      gbs(tc), best / tc);
  if (rows > 512) return;
  std::printf("  mid tiles %-8s M=%-4d auto %-7s |", name, rows,
              cuda::linear_mid_tile_name(cuda::linear_mid_auto_tile(rows, int(n))));
  for (cuda::MidTile tile : cuda::kMidTiles) {
    cuda::set_linear_mid_tile(tile);
    std::printf(" %s %.1f", cuda::linear_mid_tile_name(tile), forced(cuda::LinearKernel::Mid) * 1e3);
    cuda::set_linear_mid_tile(cuda::MidTile::Auto);
  }
  std::printf(" us\n");
  std::fflush(stdout);
}

// One linear at M <= 16 rows: the decode kernel's two loop variants and cuBLAS.
void linear_narrow(Backend& be, const LinearFn& cublas, const char* name, const LinearWeight& w, int rows,
                   const Tensor& x, Tensor& y) {
  cudaStream_t s = cuda::stream_of(be);
  const int64_t n = w.weight.dim(0), k = w.weight.dim(1);
  auto gbs = [&](double t) { return n * k * 2 / (t * 1e-3) / 1e9; };
  auto timed = [&](auto&& fn) { return time_ms(s, fn, 2, 15); };
  cuda::set_linear_variant(cuda::LoopVariant::Plain);
  const double t0 = timed([&] { be.linear(x, w, y); });
  cuda::set_linear_variant(cuda::LoopVariant::Prefetch);
  const double t1 = timed([&] { be.linear(x, w, y); });
  cuda::set_linear_variant(cuda::LoopVariant::Auto);
  const double t2 = timed([&] { cublas(x, w, y); });
  std::printf(
      "linear %-8s M=%-4d N=%-6ld K=%-6ld plain %7.1f us %5.0f GB/s | prefetch %7.1f us %5.0f GB/s | "
      "cuBLAS %7.1f us %5.0f GB/s\n",
      name, rows, long(n), long(k), t0 * 1e3, gbs(t0), t1 * 1e3, gbs(t1), t2 * 1e3, gbs(t2));
  std::fflush(stdout);
}

// Per-shape linear timings (the decode building block): M <= 16 linear_narrow, M > 16 linear_wide.
// Auto = what linear_bf16 picks (docs/cuda-notes.md).
void linear_table(Backend& be, cublasHandle_t h, const ModelShape& sh, ShapeLayer& L, LinearWeight& lm_head,
                  int max_rows = 4096) {
  const LinearFn cublas = cublas_linear(h);
  struct W {
    const char* n;
    LinearWeight* w;
  } ws[] = {{"q", &L.q}, {"o", &L.o}, {"gate_up", &L.gate_up}, {"down", &L.down}, {"lm_head", &lm_head}};
  std::printf("-- linears, %s --\n", sh.name);
  for (int rows : {1, 8, 32, 64, 96, 128, 256, 512, 4096}) {
    if (rows > max_rows) break;
    for (auto& w : ws) {
      const int64_t n = w.w->weight.dim(0), k = w.w->weight.dim(1);
      if (rows > 256 && n > 100000) continue;  // lm_head runs for one row per prompt
      Tensor x = be.alloc({rows, k}, DType::BF16), y = be.alloc({rows, n}, DType::BF16);
      cuda::fill_uniform(be, x, 7, -1, 1);
      if (rows > 16)
        linear_wide(be, cublas, w.n, *w.w, rows, x, y);
      else
        linear_narrow(be, cublas, w.n, *w.w, rows, x, y);
    }
  }
}

// Only the linear table (--linears): one layer's weights and the lm_head, no KV pool.
void linears_only(Backend& be, cublasHandle_t h, const ModelShape& sh) {
  ShapeModel m{sh, {}, {}, {}, {}, WeightFormat::Bf16, 0, 0, 0};
  ShapeLayer L;
  const int64_t qd = int64_t(sh.heads) * sh.head_dim;
  L.q = rand_linear(be, qd, sh.hidden, 1, &m);
  L.o = rand_linear(be, sh.hidden, qd, 2, &m);
  L.gate_up = rand_linear(be, 2 * int64_t(sh.inter), sh.hidden, 3, &m);
  L.down = rand_linear(be, sh.hidden, sh.inter, 4, &m);
  LinearWeight lm_head = rand_linear(be, sh.vocab, sh.hidden, 5, &m);
  linear_table(be, h, sh, L, lm_head);
}

// The small ops of one decode layer, each timed alone (launch + run), to see where a step goes; v9's
// fusions next to what they replace (each pair: same bits).
void decode_op_table(ShapeRun& r, int batch) {
  Backend& be = r.be;
  const ModelShape& sh = r.m.sh;
  const RopeParams& rope = r.rope;
  BatchMeta meta = decode_meta(batch, 512);
  be.begin_forward(meta);
  ShapeLayer& L = r.m.layers[0];
  const int64_t qd = int64_t(sh.heads) * sh.head_dim, kd = int64_t(sh.kv_heads) * sh.head_dim;
  auto v2 = [](const Tensor& t, int64_t rows, int64_t c) { return t.slice_rows(0, rows).view({rows, c}); };
  Acts& A = r.acts;
  Tensor res = v2(A.res, batch, sh.hidden), x = v2(A.x, batch, sh.hidden), q = v2(A.q, batch, qd),
         k = v2(A.k, batch, kd), v = v2(A.v, batch, kd), attn = v2(A.attn, batch, qd),
         gu = v2(A.gu, batch, 2 * int64_t(sh.inter)), act = v2(A.act, batch, sh.inter),
         qkv = v2(A.qkv, batch, qd + 2 * kd), mlp = v2(A.mlp, batch, sh.hidden),
         res2 = v2(A.res2, batch, sh.hidden);
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
      {"linear q+k+v", [&] { be.linear(x, L.q, q), be.linear(x, L.k, k), be.linear(x, L.v, v); }},
      {"linear qkv", [&] { be.linear(x, L.qkv, qkv); }},
      {"attention_inputs_qkv",
       [&] { be.attention_inputs_qkv(qkv, q, &L.q_norm, &L.k_norm, 1e-6f, 0.f, rope, L.kv); }},
      {"silu_mul+down", [&] { be.silu_mul(gu, act), be.linear(act, L.down, mlp); }},
      {"silu_mul_linear", [&] { be.silu_mul_linear(gu, L.down, act, mlp); }},
      {"add_rms_norm+gate_up",
       [&] { be.add_rms_norm(res, mlp, L.ln2, 1e-6f, 0.f, x), be.linear(x, L.gate_up, gu); }},
      {"add_rms_norm_linear gate_up",
       [&] { be.add_rms_norm_linear(res, mlp, L.ln2, 1e-6f, 0.f, x, L.gate_up, gu, res2); }},
  };
  std::printf("ops b=%d:", batch);
  force_v9_fusions(true);  // the fused ops as such (each next to what it replaces)
  be.begin_forward(meta);  // tiles are planned once a forward
  for (auto& op : ops) std::printf(" %s %.1f us |", op.n, time_ms(r.s, op.f, 3, 21) * 1e3);
  force_v9_fusions(false);  // the split schedule + combine (the default)
  be.begin_forward(meta);
  const double t_split = time_ms(
      r.s, [&] { be.attention(q, L.kv, ap, attn); }, 3, 21);
  std::printf(" attention ctx512 split %.1f us |\n", t_split * 1e3);
  std::fflush(stdout);
}

// What a decode step of `batch` sequences at context ctx must read: the linears' device bytes (each
// format's own: packed weights + scales) and the KV (bf16) of every layer.
double decode_bytes(const ShapeModel& m, int batch, int ctx) {
  const double kv_bytes_per_token = 2.0 * m.sh.layers * m.sh.kv_heads * m.sh.head_dim * 2;
  return double(m.linear_bytes) + kv_bytes_per_token * batch * ctx;
}

// The floor of a prefill of one n-token prompt (logits for the last token only): the FLOPs of the linears
// and of causal attention at the measured GEMM rate.
double prefill_floor_ms(const ShapeModel& m, int n, const Ceilings& c) {
  const ModelShape& sh = m.sh;
  const double lm_head = double(sh.vocab) * sh.hidden;
  const double lin_flops = 2.0 * n * (double(m.linear_params) - lm_head) + 2.0 * lm_head;
  const double attn_flops = 2.0 * double(n) * n * sh.heads * sh.head_dim * sh.layers;  // causal QK and PV
  return (lin_flops + attn_flops) / (c.gemm_tflops * 1e12) * 1e3;
}

// The step's ops one by one against the engine's on the step's own inputs (its x dumps and output words):
// where a step whose logits differ from the chain's parts from it. Prints the mismatching checks.
void check_step_ops(ShapeRun& r, const BatchMeta& meta) {
  Backend& be = r.be;
  auto* st = static_cast<cuda::DecodeStep*>(r.step.get());
  const ModelShape& sh = r.m.sh;
  const int64_t H = sh.hidden, D = sh.head_dim, QKV = (sh.heads + 2 * int64_t(sh.kv_heads)) * D, I = sh.inter;
  const AttentionParams ap{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
  st->set_debug(true, r.s);
  Tensor logits = be.alloc({1, int64_t(sh.vocab)}, DType::F32);
  be.begin_forward(meta);
  be.decode_step(r.step.get(), logits);
  be.synchronize();
  auto up = [&](std::vector<uint16_t> v) {
    return be.upload(Tensor::borrow(v.data(), {1, int64_t(v.size())}, DType::BF16, Device::CPU));
  };
  auto bits = [&](const Tensor& t) {
    std::vector<uint16_t> v(size_t(t.numel()));
    be.read_raw(t, 0, v.size() * 2, v.data());
    return v;
  };
  auto act = [&](int64_t n) { return be.alloc({1, n}, DType::BF16); };
  int bad = 0, checks = 0;
  std::string which;
  auto check = [&](const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, const std::string& what) {
    ++checks;
    if (a == b) return;
    int n = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
    ++bad;
    if (bad <= 12) which += " | " + what + " (" + std::to_string(n) + " of " + std::to_string(b.size()) + ")";
  };
  Tensor emb = act(H), h = act(H);
  be.embedding(r.m.embed, 1.f, emb);
  be.rms_norm(emb, r.m.layers[0].ln1, 1e-6f, 0.f, h);
  check(bits(h), st->debug_x(0), "layer 0 qkv x");
  const int layers = int(r.m.layers.size());
  for (int l = 0; l < layers; ++l) {
    const int q = 4 * l, o = q + 1, gu = q + 2, d = q + 3;
    ShapeLayer& L = r.m.layers[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    Tensor yq = act(QKV), yo = act(H), g = act(2 * I), a = act(I), yd = act(H), hx = act(H);
    be.linear(up(st->debug_x(q)), L.qkv, yq);
    check(bits(yq), st->debug_y(q), at + "qkv y");
    Tensor qh = be.alloc({1, int64_t(sh.heads), D}, DType::BF16), att = act(int64_t(sh.heads) * D);
    be.attention_inputs_qkv(up(st->debug_y(q)), qh, &L.q_norm, &L.k_norm, 1e-6f, 0.f, r.rope, L.kv);
    be.attention(qh, L.kv, ap, att);
    check(bits(att), st->debug_x(o), at + "attention (o x)");
    be.linear(up(st->debug_x(o)), L.o, yo);
    check(bits(yo), st->debug_y(o), at + "o y");
    Tensor res = up(st->debug_res(q));
    be.add_rms_norm(res, up(st->debug_y(o)), L.ln2, 1e-6f, 0.f, hx);
    check(bits(hx), st->debug_x(gu), at + "gate_up x (add + norm)");
    check(bits(res), st->debug_res(gu), at + "residual after attention");
    be.linear(up(st->debug_x(gu)), L.gate_up, g);
    be.silu_mul(g, a);
    check(bits(a), st->debug_y(gu), at + "gate_up y (silu)");
    be.linear(up(st->debug_x(d)), L.down, yd);
    check(bits(yd), st->debug_y(d), at + "down y");
    Tensor res2 = up(st->debug_res(gu));
    const Tensor& nw = l + 1 < layers ? r.m.layers[l + 1].ln1 : r.m.final_norm;
    be.add_rms_norm(res2, up(st->debug_y(d)), nw, 1e-6f, 0.f, hx);
    check(bits(hx), st->debug_x(q + 4), at + (l + 1 < layers ? "next qkv x" : "lm_head x"));
  }
  std::printf("decode step ops ctx %d: %d of %d checks differ%s\n", meta.positions[0] + 1, bad, checks,
              which.c_str());
  st->set_debug(false, r.s);
}

}  // namespace

// TF_STEP_STAMPS=1: one step with timestamps; per event of layer 10's attention, the median and the latest
// CTA in us after the qkv op's last tile (decode_step_kernel.cuh's slots). With TF_STEP_TILE_LOG=1 also warp
// 0's log of its o and gate_up tiles.
void print_step_stamps(Backend& be, const std::shared_ptr<void>& step, cudaStream_t s, int ctx,
                       Tensor& logits) {
  auto* st = static_cast<cuda::DecodeStep*>(step.get());
  st->set_probe(true, true, s);
  be.decode_step(step.get(), logits);
  be.synchronize();
  const std::vector<unsigned long long> v = st->stamps();
  st->set_probe(false, false, s);
  using DS = cuda::DecodeStep;
  const int G = st->grid(), L = 10;
  auto at = [&](int cta, int slot) { return v[(size_t(L) * G + cta) * DS::kStampSlots + slot]; };
  unsigned long long t0 = 0;
  for (int b = 0; b < G; ++b) t0 = std::max(t0, at(b, DS::kStampQkvDone));
  auto stat = [&](int slot, const char* name) {
    std::vector<double> x;
    for (int b = 0; b < G; ++b)
      if (at(b, slot)) x.push_back((double(at(b, slot)) - double(t0)) * 1e-3);
    if (x.empty()) return std::string();
    std::sort(x.begin(), x.end());
    char buf[96];
    std::snprintf(buf, sizeof buf, " %s %.1f/%.1f(%zu)", name, x[x.size() / 2], x.back(), x.size());
    return std::string(buf);
  };
  std::string line =
      "stamps ctx=" + std::to_string(ctx) + " layer 10 (us after qkv's last tile, median/last(n)):";
  line += stat(DS::kStampQkvDone, "qkv-done-by-cta");
  static const char* ev[6] = {"start", "poll", "kv", "scores", "pv", "part"};
  char name[32];  // (snprintf: GCC 12's -Wrestrict misfires on string + to_string here)
  static_assert(DS::kStampUnitEvents == 6, "ev");
  for (int ui = 0; ui < DS::kStampUnits; ++ui) {
    std::string u;
    for (int e = 0; e < DS::kStampUnitEvents; ++e) u += stat(ui * DS::kStampUnitEvents + e, ev[e]);
    std::snprintf(name, sizeof name, "\n  unit %d:", ui);
    if (!u.empty()) line += name + u;
  }
  std::string m;
  for (int rd = 0; rd < DS::kStampRounds; ++rd) {
    std::snprintf(name, sizeof name, "r%d-in", rd);
    m += stat(DS::kStampRoundIn + 2 * rd, name);
    std::snprintf(name, sizeof name, "r%d-folded", rd);
    m += stat(DS::kStampRoundIn + 2 * rd + 1, name);
  }
  line += "\n  merge:" + m + stat(DS::kStampAout, "aout");
  line += "\n  o:" + stat(DS::kStampXMade, "x-made") + stat(DS::kStampOLast, "last-tile");
  line += "\n  last tiles:" + stat(DS::kStampOLast, "o") + stat(DS::kStampRouterLast, "router") +
          stat(DS::kStampRouteIn, "route-in") + stat(DS::kStampPolled, "polled") +
          stat(DS::kStampPicked, "picked") + stat(DS::kStampRouted, "routed") +
          stat(DS::kStampGuLast, "gate_up") + stat(DS::kStampDownLast, "down");
  {  // the layer's period: the latest CTA's last qkv tile of layer L + 1 after layer L's
    unsigned long long t1 = 0;
    for (int b = 0; b < G; ++b)
      t1 = std::max(t1, v[(size_t(L + 1) * G + b) * DS::kStampSlots + DS::kStampQkvDone]);
    char buf[96];
    std::snprintf(buf, sizeof buf, "\n  layer %d -> %d qkv done: %.1f us", L, L + 1,
                  (double(t1) - double(t0)) * 1e-3);
    line += buf;
  }
  {  // where the consumers (warp 1) and the producer wait, share of their layer's cycles, median over CTAs
    auto share = [&](int slot, int total) {
      std::vector<double> x;
      for (int b = 0; b < G; ++b)
        if (at(b, total)) x.push_back(double(at(b, slot)) / double(at(b, total)));
      if (x.empty()) return 0.0;
      std::sort(x.begin(), x.end());
      return 100 * x[x.size() / 2];
    };
    char buf[256];
    std::snprintf(
        buf, sizeof buf,
        "\n  layer %d waits (median CTA, %% of its layer): consumers ring %.1f%%, x %.1f%%, slice-sum "
        "barrier %.1f%%, proxy fences %.1f%% (layer %.1f kcycles); producer free slots %.1f%%",
        L, share(DS::kStampWaitFull, DS::kStampLayerCycles), share(DS::kStampWaitX, DS::kStampLayerCycles),
        share(DS::kStampWaitBar, DS::kStampLayerCycles), share(DS::kStampFence, DS::kStampLayerCycles),
        at(0, DS::kStampLayerCycles) * 1e-3, share(DS::kStampWaitEmpty, DS::kStampProdCycles));
    line += buf;
  }
  {  // warp 0's first tiles of o and gate_up: median over the CTAs of each event, and gate_up's cycles
    static const char* const kOp[2] = {"o", "gate_up"};
    static const char* const kEv[DS::kStampTileEvents] = {"begin", "stage", "math", "bar", "stored"};
    for (int o = 0; o < 2; ++o)
      for (int ti = 0; ti < DS::kStampLogTiles; ++ti) {
        std::string u;
        for (int e = 0; e < DS::kStampTileEvents; ++e)
          u += stat(DS::kStampTileLog + (o * DS::kStampLogTiles + ti) * DS::kStampTileEvents + e, kEv[e]);
        if (!u.empty())
          line += "\n  " + std::string(kOp[o]) + " tile " + std::to_string(ti) + " (warp 0):" + u;
      }
    static const char* const kCyc[5] = {"start", "stages", "math", "barrier", "sum+store"};
    std::string g = "\n  gate_up warp 0 cycles a tile (median CTA):";
    for (int i = 0; i < 5; ++i) {
      std::vector<double> x;
      for (int b = 0; b < G; ++b)
        if (at(b, DS::kStampGuCycles + 5))
          x.push_back(double(at(b, DS::kStampGuCycles + i)) / double(at(b, DS::kStampGuCycles + 5)));
      if (x.empty()) continue;
      std::sort(x.begin(), x.end());
      char buf[64];
      std::snprintf(buf, sizeof buf, " %s %.0f", kCyc[i], x[x.size() / 2]);
      g += buf;
    }
    line += g;
  }
  line += "\n  merge round 1:" + stat(DS::kStampRound1Issued, "bulk-issued") +
          stat(DS::kStampRound1Landed, "bulk-landed") + stat(DS::kStampRound1Checked, "checked");
  {
    std::string n;
    for (int b = 0; b < G; ++b)
      if (at(b, DS::kStampAout)) {
        std::snprintf(name, sizeof name, " %llu", at(b, DS::kStampRound1Retries));
        n += name;
      }
    line += "\n  merge round 1 retries by merging CTA:" + n;
  }
  std::printf("%s\n", line.c_str());
}

namespace {

// The one-kernel decode step (ops/cuda/decode_step.h) at b=1 against the op chain at the same context: both
// times (graphs), the floor, and whether the step's logits equal the chain's bit for bit (both write the
// row's K/V with the same bits, so running one after the other changes nothing). Returns the step's time, or
// -1 where the engine would not take it (not bf16 or MLX 4-bit, another shape, past its context limit,
// other bits).
double decode_step_row(ShapeRun& r, int ctx) {
  Backend& be = r.be;
  const ModelShape& sh = r.m.sh;
  if (r.m.format != WeightFormat::Bf16 && r.m.format != WeightFormat::Mlx4) return -1;
  if (!r.step_tried) {
    r.step_tried = true;
    DecodeStepModel dm;
    dm.embed = &r.m.embed;
    for (const ShapeLayer& L : r.m.layers)
      dm.layers.push_back({&L.ln1, &L.ln2, &L.q_norm, &L.k_norm, &L.qkv, &L.o, &L.gate_up, &L.down});
    dm.final_norm = &r.m.final_norm;
    dm.lm_head = &r.m.lm_head;
    dm.rope = r.rope;
    dm.attn =
        AttentionParams{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
    dm.norm_eps = 1e-6f;
    std::string why;
    r.step = be.prepare_decode_step(dm, &why);
    if (!r.step) std::printf("  %s: %s\n", sh.name, why.c_str());
  }
  if (!r.step) return -1;
  const BatchMeta meta = decode_meta(1, ctx);
  std::vector<KvLayer> kv;
  for (const ShapeLayer& L : r.m.layers) kv.push_back(L.kv);
  be.begin_forward(meta);
  if (!be.bind_decode_step(r.step.get(), kv)) {
    std::printf("decode step b=1 ctx=%d: the one-kernel step does not take it (context limit)\n", ctx);
    return -1;
  }
  Tensor logits = be.alloc({1, int64_t(sh.vocab)}, DType::F32);
  Tensor chain = be.alloc({1, int64_t(sh.vocab)}, DType::F32);  // the bench's own logits are bf16
  forward(be, r.m, r.acts, 1, 1, r.rope, r.ours);
  be.linear(r.acts.x.slice_rows(0, 1).view({1, int64_t(sh.hidden)}), r.m.lm_head, chain);  // its final norm
  be.decode_step(r.step.get(), logits);
  std::vector<uint8_t> a(size_t(sh.vocab) * 4), b(a.size());
  be.read_raw(chain, 0, a.size(), a.data());
  be.read_raw(logits, 0, b.size(), b.data());
  if (a != b) check_step_ops(r, meta);
  bool g1 = false, g2 = false;
  const double t_chain = time_graph_ms(
      r.s, [&] { forward(be, r.m, r.acts, 1, 1, r.rope, r.ours); }, &g1);
  const double t_step = time_graph_ms(
      r.s, [&] { be.decode_step(r.step.get(), logits); }, &g2);
  const double floor_ms = decode_bytes(r.m, 1, ctx) / (r.c.copy_gbs * 1e9) * 1e3;
  std::printf(
      "decode step b=1 ctx=%d%s: one kernel %.3f ms (%.1f%% of the floor) | the chain %.3f ms (%.1f%%) | "
      "floor %.3f ms | logits bits %s\n",
      ctx, g1 && g2 ? " (graph)" : " (eager)", t_step, 100 * floor_ms / t_step, t_chain,
      100 * floor_ms / t_chain, floor_ms, a == b ? "equal" : "DIFFER");
  auto* st = static_cast<cuda::DecodeStep*>(r.step.get());
  if (std::getenv("TF_STEP_STAMPS")) {
    print_step_stamps(r.be, r.step, r.s, ctx, logits);
    for (int cap : env_ints("TF_STEP_STAMPS_INFLIGHT")) {  // and with that many stages in flight
      st->set_inflight(cap);
      std::printf("  (stages in flight at most %d)\n", cap);
      print_step_stamps(r.be, r.step, r.s, ctx, logits);
      st->set_inflight(-1);
    }
  }
  // A/Bs of a step setting: `set(v)` for each value twice, printing the step's time and whether its logits
  // still equal the chain's.
  auto step_ab = [&](const char* what, const std::vector<int>& values, auto set) {
    std::printf("  %s (ms, logits bits vs the chain):", what);
    for (int rep = 0; rep < 2; ++rep)
      for (int v : values) {
        set(v);
        be.decode_step(r.step.get(), logits);
        std::vector<uint8_t> c(a.size());
        be.read_raw(logits, 0, c.size(), c.data());
        std::printf(" %d %.3f%s |", v,
                    time_graph_ms(
                        r.s, [&] { be.decode_step(r.step.get(), logits); }, &g2),
                    c == a ? "" : " DIFFER");
      }
    std::printf("\n");
  };
  if (std::getenv("TF_STEP_EARLY_AB")) {  // the merging CTAs' early chunks shifted by -2..2
    step_ab("step early-chunk bias", {-2, -1, 0, 1, 2}, [&](int v) { st->set_early_bias(v); });
    st->set_early_bias(0);
  }
  if (std::vector<int> list = env_ints("TF_STEP_INFLIGHT"); !list.empty()) {  // "0,2,4": stages in flight
    list.insert(list.begin(), -1);
    step_ab("step stages in flight at most (-1: the default, 0: every free slot)", list,
            [&](int v) { st->set_inflight(v); });
    st->set_inflight(-1);
  }
  // "6,7" or "602,703": the 4-bit ring's slots in use (n * 100 + m: n slots, m stages in flight at most).
  if (std::vector<int> list = env_ints("TF_STEP_RING"); !list.empty()) {
    list.insert(list.begin(), 0);
    std::printf("  (the ring: %d slots fit)\n", st->ring_slots());
    step_ab("step ring slots (0: all that fit; n * 100 + m: n slots, m stages in flight)", list, [&](int v) {
      st->set_ring(v >= 100 ? v / 100 : v);
      st->set_inflight(v >= 100 ? v % 100 : -1);
    });
    st->set_ring(0);
    st->set_inflight(-1);
  }
  // "0,2,4": each CTA's first n gate_up tiles of a layer prefetched into L2 during the attention (set_l2pf).
  if (std::vector<int> list = env_ints("TF_STEP_L2PF"); !list.empty()) {
    step_ab("step with the gate_up's first n tiles a CTA prefetched into L2 during the attention", list,
            [&](int v) { st->set_l2pf(v); });
    st->set_l2pf(-1);
  }
  // "0,3,4": the in-flight cap for the gate_up's tiles past the prefetched ones (set_inflight_gu; 0 the
  // step's own cap, -1 the default: decode_step_host.cuh's inflight_gu_of).
  if (std::vector<int> list = env_ints("TF_STEP_INFLIGHT_GU_AB"); !list.empty()) {
    list.insert(list.begin(), -1);
    step_ab(
        "step with the gate_up's other tiles capped at n stages in flight (0: the step's cap; -1 default)",
        list, [&](int v) { st->set_inflight_gu(v); });
    st->set_inflight_gu(-1);
  }
  if (std::getenv("TF_STEP_ABLATE")) {  // the probe instance: plain, no tile arithmetic, no dequantisation
    std::printf("  step ablations (probe instance):");
    for (int what : {0, 1, 2, 3}) {
      st->set_probe(true, false, r.s);
      st->set_ablate(what);
      static const char* const kName[] = {"none", "no-tile-math", "no-dequant", "no-consumer-fence"};
      std::printf(" %s %.3f ms |", kName[what],
                  time_graph_ms(
                      r.s, [&] { be.decode_step(r.step.get(), logits); }, &g2));
    }
    // The ring's depth: the probe with 2/3 and 1/3 of its slots, with and without tile arithmetic.
    const int n = st->ring_slots();
    for (int slots : {n, n * 2 / 3, n / 3})
      for (int what : {0, 1}) {
        st->set_ring(slots);
        st->set_ablate(what);
        std::printf(" ring %d %s %.3f ms |", slots, what ? "no-tile-math" : "none",
                    time_graph_ms(
                        r.s, [&] { be.decode_step(r.step.get(), logits); }, &g2));
      }
    st->set_ring(0);
    st->set_ablate(0);
    st->set_probe(false, false, r.s);
    std::printf("\n");
  }
  std::fflush(stdout);
  return a == b ? t_step : -1;
}

// One decode step at (batch, ctx): graph replays of ours with each fusion and launch option toggled, the
// cuBLAS baseline, and the bandwidth floor; adds the summary row.
// What each kind of small op costs a forward (ablations: wrong results, timing only): "  WHAT without:" and
// the time without the attention, without q/k-norm + rope + KV, without the norms, without the silu_mul
// (the down on the activation buffer as it is; where silu_mul_linear runs two ops, one launch fewer), and
// without the first three.
void print_without(const char* what, const std::function<double()>& timed) {
  std::printf("  %s without:", what);
  for (int mask : {int(kSkipAttention), int(kSkipAttentionInputs), int(kSkipNorms), int(kSkipSilu),
                   kSkipAttention | kSkipAttentionInputs | kSkipNorms}) {
    set_skip_ops(mask);
    std::printf(" %s%s%s%s %.3f ms |", mask & kSkipAttention ? "attention " : "",
                mask & kSkipAttentionInputs ? "q/k-norm+rope+kv " : "", mask & kSkipNorms ? "norms " : "",
                mask & kSkipSilu ? "silu_mul " : "", timed());
  }
  set_skip_ops(0);
}

void decode_row(ShapeRun& r, int batch, int ctx) {
  Backend& be = r.be;
  const ModelShape& sh = r.m.sh;
  BatchMeta meta = decode_meta(batch, ctx);
  be.begin_forward(meta);
  auto graphed = [&](const LinearFn& lin, bool ours, bool* captured) {
    return time_graph_ms(
        r.s, [&] { forward(be, r.m, r.acts, batch, batch, r.rope, lin, ours); }, captured);
  };
  bool g0 = false, g1 = false, g2 = false;
  const double t_eager = time_ms(r.s, [&] { forward(be, r.m, r.acts, batch, batch, r.rope, r.ours); });
  cuda::set_linear_variant(cuda::LoopVariant::Plain);
  const double t_plain = graphed(r.ours, true, &g0);
  cuda::set_linear_variant(cuda::LoopVariant::Auto);
  cuda::set_linear_pdl(false);
  const double t_nopdl = graphed(r.ours, true, &g0);
  cuda::set_linear_pdl(true);
  set_fused_inputs(false);
  const double t_sep = graphed(r.ours, true, &g0);
  set_fused_inputs(true);
  set_fusions(false);
  const double t_unfused = graphed(r.ours, true, &g0);
  set_fusions(true);
  force_v9_fusions(true);
  be.begin_forward(meta);
  const double t_allfused = graphed(r.ours, true, &g0);
  force_v9_fusions(false);
  cuda::set_fused_silu_linear(true);  // each fusion alone: with dependent launch a kernel boundary costs more
  const double t_silu = graphed(r.ours, true, &g0);
  cuda::set_fused_silu_linear(false);
  cuda::set_fused_norm_linear(true);
  const double t_norm = graphed(r.ours, true, &g0);
  cuda::set_fused_norm_linear(false);
  be.begin_forward(meta);
  const double t1 = graphed(r.ours, true, &g1);
  const double t2 = graphed(r.cublas, false, &g2);
  const double floor_ms = decode_bytes(r.m, batch, ctx) / (r.c.copy_gbs * 1e9) * 1e3;
  char what[96];
  std::snprintf(what, sizeof what, "decode b=%d ctx=%d%s", batch, ctx, g1 && g2 ? " (graph)" : " (eager)");
  // One-row rounds run the one-kernel step where the engine takes it: the summary row is what it runs.
  const double t_step = batch == 1 ? decode_step_row(r, ctx) : -1;
  be.begin_forward(meta);
  r.out->push_back({std::string(sh.name) + " " + what + (t_step > 0 ? " one-kernel step" : ""),
                    t_step > 0 ? t_step : t1, t2, floor_ms, double(batch)});
  std::printf(
      "%s: ours %.3f ms (eager %.3f, all-plain linear %.3f, no dependent launch %.3f, separate "
      "norm/rope/kv-write %.3f, no qkv fusion %.3f, + norm/silu/short-attention fusions %.3f, + silu fusion "
      "%.3f, + norm fusion %.3f) cuBLAS %.3f ms "
      "floor %.3f ms\n",
      what, t1, t_eager, t_plain, t_nopdl, t_sep, t_unfused, t_allfused, t_silu, t_norm, t2, floor_ms);
  std::fflush(stdout);              // piped output: a run cut short by a timeout keeps what it measured
  if (ctx >= 8192 || batch != 8) {  // chunks a split attention block walks (speed only; 0: the default rule)
    std::printf("  %s split chunks a block:", what);
    for (int cpb : {1, 2, 4, 8, 16}) {
      cuda::set_attention_split_chunks(cpb);
      std::printf(" %d %.3f ms |", cpb, graphed(r.ours, true, &g0));
    }
    cuda::set_attention_split_chunks(0);
    cuda::set_attention_fused_combine(false);
    std::printf(" combine kernel %.3f ms |", graphed(r.ours, true, &g0));
    cuda::set_attention_fused_combine(true);
    const int fmax0 = cuda::attention_fused_combine_max();  // the fused combine past its default 64 pairs
    cuda::set_attention_fused_combine_max(cuda::kFusedCombineCap);
    std::printf(" fused combine up to %d pairs %.3f ms |", cuda::kFusedCombineCap,
                graphed(r.ours, true, &g0));
    cuda::set_attention_fused_combine_max(fmax0);
    cuda::set_attention_wide_combine(false);
    std::printf(" 4 chunks a merge step %.3f ms |", graphed(r.ours, true, &g0));
    cuda::set_attention_wide_combine(true);
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Loop);  // one block a (sequence, KV head)
    be.begin_forward(meta);                                       // the tiles are planned outside the capture
    std::printf(" loop schedule %.3f ms\n", graphed(r.ours, true, &g0));
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
    be.begin_forward(meta);
    std::fflush(stdout);
  }
  if (batch == 1) {
    print_without(what, [&] { return graphed(r.ours, true, &g0); });
    set_skip_ops(kEmptyStep);
    std::printf(" (with one empty dependent kernel a layer: %.3f ms)", graphed(r.ours, true, &g0));
    set_skip_ops(0);
    std::printf("\n");
    std::fflush(stdout);
  }
}

// Times one layer's attention (begin_forward done) for `rows` query rows of random q, in the run's q and
// attention-output buffers (sized for the longest prompt): each call measures the kernel the set_attention_*
// switches choose at that moment.
std::function<double()> attention_timer(ShapeRun& r, int rows, int warm, int reps) {
  const ModelShape& sh = r.m.sh;
  Tensor q = r.acts.q.slice_rows(0, rows).view({rows, sh.heads, sh.head_dim}),
         o = r.acts.attn.slice_rows(0, rows).view({rows, sh.heads, sh.head_dim});
  cuda::fill_uniform(r.be, q, 9, -1, 1);
  const AttentionParams ap{sh.heads, sh.kv_heads, sh.head_dim, 1.f / std::sqrt(float(sh.head_dim)), 0, 0.f};
  return [&r, q, o, ap, warm, reps]() mutable {
    return time_ms(
        r.s, [&] { r.be.attention(q, r.m.layers[0].kv, ap, o); }, warm, reps);
  };
}

// Attention alone at the largest decode batch (KV-bound): the CUDA-core kernel's two loop variants and
// the tensor-core kernel.
void decode_attention(ShapeRun& r, int batch, int ctx) {
  const ModelShape& sh = r.m.sh;
  BatchMeta meta = decode_meta(batch, ctx);
  r.be.begin_forward(meta);
  auto timed = attention_timer(r, batch, 3, 11);
  cuda::set_attention_mma(false);
  cuda::set_attention_variant(cuda::LoopVariant::Plain);
  const double t0 = timed();
  cuda::set_attention_variant(cuda::LoopVariant::Prefetch);
  const double t = timed();
  cuda::set_attention_variant(cuda::LoopVariant::Auto);
  const double bytes = 2.0 * batch * ctx * sh.kv_heads * sh.head_dim * 2;
  std::printf(
      "attention one layer b=%d ctx=%d: CUDA-core prefetch %.1f us, %.0f GB/s of KV | plain %.1f us, %.0f "
      "GB/s\n",
      batch, ctx, t * 1e3, bytes / (t * 1e-3) / 1e9, t0 * 1e3, bytes / (t0 * 1e-3) / 1e9);
  cuda::set_attention_mma(true);
  const double tm = timed();
  std::printf("attention one layer b=%d ctx=%d: tensor-core %.1f us, %.0f GB/s of KV\n", batch, ctx, tm * 1e3,
              bytes / (tm * 1e-3) / 1e9);
}

// Where a prefill's time goes: one layer's attention over the whole prompt (begin_forward done). The
// CUDA-core kernel is timed up to kLongPrefill tokens only: its split partials take rows x heads x chunks
// x (head_dim + 2) floats (~140 GB for Qwen3-8B at 32k).
void prefill_attention(ShapeRun& r, int n) {
  const ModelShape& sh = r.m.sh;
  const bool long_prompt = n > kLongPrefill;
  auto timed = attention_timer(r, n, 1, long_prompt ? 1 : 3);
  const double ta = timed();
  cuda::set_attention_wide_tma(false);  // the wide kernel's cp.async staging (same bytes)
  const double t_cp = timed();
  cuda::set_attention_wide_tma(true);
  double t1 = 0;
  if (!long_prompt) {
    cuda::set_attention_mma(false);
    t1 = timed();
    cuda::set_attention_mma(true);
  }
  const double fl = 2.0 * double(n) * n * sh.heads * sh.head_dim;
  char core[64] = "not run";
  if (!long_prompt) std::snprintf(core, sizeof core, "%.2f ms", t1);
  std::printf(
      "  prefill %d attention one layer %.2f ms (%.1f TFLOP/s; cp.async staging %.2f ms; "
      "CUDA-core kernel %s), x%d layers = %.1f ms\n",
      n, ta, fl / (ta * 1e-3) / 1e12, t_cp, core, sh.layers, ta * sh.layers);
  std::fflush(stdout);
}

// Prefill of one n-token prompt in one forward, logits for the last token only; floor: the FLOPs (linears
// and causal attention) at the measured GEMM rate. Adds the summary row.
void prefill_row(ShapeRun& r, int n) {
  Backend& be = r.be;
  const ModelShape& sh = r.m.sh;
  BatchMeta meta = prefill_meta(n);
  be.begin_forward(meta);
  const int reps = n > kLongPrefill ? 1 : 3;
  const double t1 = time_ms(
      r.s, [&] { forward(be, r.m, r.acts, n, 1, r.rope, r.ours); }, 1, reps);
  const double t2 = time_ms(
      r.s, [&] { forward(be, r.m, r.acts, n, 1, r.rope, r.cublas, false); }, 1, reps);
  const double floor_ms = prefill_floor_ms(r.m, n, r.c);
  char what[64];
  std::snprintf(what, sizeof what, "prefill %d", n);
  r.out->push_back({std::string(sh.name) + " " + what, t1, t2, floor_ms, double(n)});
  std::printf("%s: ours %.2f ms cuBLAS-linear %.2f ms floor %.2f ms\n", what, t1, t2, floor_ms);
  prefill_attention(r, n);
}

void run_shape(Backend& be, cublasHandle_t h, const ModelShape& sh, const Ceilings& c, bool quick,
               std::vector<Row>* out, bool prefill_only = false, bool decode_only = false) {
  const int max_ctx = quick || prefill_only ? 512 : 8192;
  const int max_prefill = quick || decode_only ? kPrefills[0]
                          : prefill_only       ? kPrefills[1]
                                               : kPrefills[std::size(kPrefills) - 1];
  // KV for 32 sequences of max_ctx (decode) or one prompt of max_prefill (Qwen3-8B at 8k: ~39 GB).
  const int64_t kv_tokens = std::max<int64_t>(int64_t(32) * (max_ctx + kBlock), max_prefill + kBlock);
  ShapeModel m = make_model(be, sh, kv_tokens);
  const double kv_bytes_per_token = 2.0 * sh.layers * sh.kv_heads * sh.head_dim * 2;
  std::printf("\n== %s: %.2f GB of linear weights, KV %.0f KB/token ==\n", sh.name, m.linear_bytes / 1e9,
              kv_bytes_per_token / 1e3);
  // TF_BENCH_STEP_CTX=512,1024,... (A/Bs of the one-kernel step): only the step's rows at those contexts.
  const std::vector<int> step_ctx = prefill_only ? std::vector<int>{} : env_ints("TF_BENCH_STEP_CTX");
  if (!prefill_only && step_ctx.empty())
    linear_table(be, h, sh, m.layers[0], m.lm_head, decode_only ? 8 : 4096);
  // Activations for the longest prompt (Qwen3-8B at 32k: ~5 GB).
  Acts acts = make_acts(be, sh, max_prefill, 32);
  ShapeRun r{be,
             cuda::stream_of(be),
             c,
             m,
             acts,
             backend_linear(be),
             cublas_linear(h),
             qwen_rope(sh.head_dim),
             out,
             nullptr,
             false};
  if (!step_ctx.empty()) {
    for (int ctx : step_ctx)
      if (ctx > 0 && ctx + kBlock <= kv_tokens) decode_step_row(r, ctx);  // one row: the whole pool
    return;
  }
  if (!prefill_only) {
    for (int batch : {1, 32}) decode_op_table(r, batch);
    for (int ctx : {512, 8192}) {
      if (ctx > max_ctx) continue;
      for (int batch : {1, 8, 32}) decode_row(r, batch, ctx);
    }
    for (int ctx : {1024, 2048, 2200, 2300, 2500})  // the step's context sweep (512 and 8192: decode_row)
      decode_step_row(r, ctx);
    decode_attention(r, 32, max_ctx);
  }
  for (int n : kPrefills) {
    if (n > max_prefill || decode_only) continue;
    prefill_row(r, n);
  }
}

// One row of the format table: a decode step or a prefill of one format's forward.
struct FormatRow {
  std::string shape, run;  // "Qwen3-8B", "decode b=1 ctx=512"
  WeightFormat format;
  double ms, floor_ms, tokens;
  double gb;           // what a decode step reads (linears + KV); 0 for a prefill (its floor counts FLOPs)
  const char* timing;  // "graph", "eager" (a decode step whose capture failed), "" for a prefill
};

// Prompt lengths of the format rows (--quick: the first): 512 and 4096, or TF_BENCH_PREFILL_LENS=a,b,.. (in
// increasing order).
std::vector<int> format_prefills() {
  std::vector<int> v;
  for (int n : env_ints("TF_BENCH_PREFILL_LENS"))
    if (n > 0) v.push_back(n);
  if (v.empty()) v = {512, 4096};
  return v;
}

// The forward at bf16 (the ratios' reference) and at each quantized format, one model at a time, timed
// alike: decode steps from CUDA graphs, prefills eager; the backend's default schedule (the product's
// fusions: fused qkv linear + attention_inputs_qkv, add_rms_norm_linear, silu_mul_linear, where the
// backend fuses them for that format).
void format_rows(Backend& be, const ModelShape& sh, const std::vector<WeightFormat>& quantized,
                 const Ceilings& c, bool quick, std::vector<FormatRow>* out) {
  cudaStream_t s = cuda::stream_of(be);
  const int max_ctx = quick ? 512 : 8192;
  const std::vector<int> prefills = format_prefills();
  const int max_prefill = quick ? prefills.front() : prefills.back();
  Acts acts = make_acts(be, sh, std::max(max_prefill, 32), 32);
  const LinearFn ours = backend_linear(be);
  const RopeParams rope = qwen_rope(sh.head_dim);
  // TF_BENCH_STEP_ONLY=1 (A/Bs of the one-kernel step): decode at b=1 only, no prefill; =2: and no bf16 model
  // either (no "vs bf16" column).
  const char* step_only_env = std::getenv("TF_BENCH_STEP_ONLY");
  const int step_only = step_only_env ? std::atoi(step_only_env) : 0;
  std::vector<WeightFormat> formats;
  if (step_only < 2) formats.push_back(WeightFormat::Bf16);
  formats.insert(formats.end(), quantized.begin(), quantized.end());
  std::printf("\n== %s by weight format: the forward with each format's linears ==\n", sh.name);
  // The one-kernel step of MLX 4-bit linears (DecodeStep::mlx4, on unless TF_DECODE_STEP_MLX4=0): timed
  // either way.
  const bool engine_mlx4_step = cuda::DecodeStep::mlx4();
  cuda::DecodeStep::set_mlx4(true);
  for (WeightFormat f : formats) {
    const char* fname = weight_format_info(f).name;
    ShapeModel m =
        make_model(be, sh, std::max<int64_t>(int64_t(32) * (max_ctx + kBlock), max_prefill + kBlock), f);
    std::printf("%s: %.2f GB of linear weights (scales included)\n", fname, m.linear_bytes / 1e9);
    ShapeRun step_run{be,   s,    c,       m,  acts, ours,
                      ours, rope, nullptr, {}, false};  // decode_step_row's step of this model
    for (int ctx : {512, 8192}) {
      if (ctx > max_ctx) continue;
      for (int batch : {1, 8, 16, 32}) {  // 16: issue 11's "batch 16 still >= 2x bf16"
        if (step_only && batch != 1) continue;
        be.begin_forward(decode_meta(batch, ctx));
        bool g = false;
        auto forward_ms = [&] {  // this batch's forward from a CUDA graph
          return time_graph_ms(
              s, [&] { forward(be, m, acts, batch, batch, rope, ours); }, &g);
        };
        double t = forward_ms();
        // One-row rounds run the one-kernel step where the engine takes it (bf16 and MLX 4-bit, below its
        // context limit): the row is what the engine runs.
        const double t_step = batch == 1 ? decode_step_row(step_run, ctx) : -1;
        // (MLX 4-bit: the step is timed; the engine runs it unless TF_DECODE_STEP_MLX4=0.)
        const bool engine_step = t_step > 0 && (f == WeightFormat::Bf16 || engine_mlx4_step);
        if (t_step > 0) std::printf("  %s decode b=1 ctx=%d: the chain %.3f ms\n", fname, ctx, t);
        if (engine_step) t = t_step;
        const double bytes = decode_bytes(m, batch, ctx);
        char what[64];
        std::snprintf(what, sizeof what, "decode b=%d ctx=%d", batch, ctx);
        out->push_back({sh.name, what, f, t, bytes / (c.copy_gbs * 1e9) * 1e3, double(batch), bytes / 1e9,
                        engine_step ? "one-kernel step"
                        : g         ? "graph"
                                    : "eager"});
        std::printf("  %s %s (%s): %.3f ms, %.0f tok/s, %.2f GB read, %.1f%% of roofline\n", fname, what,
                    out->back().timing, t, batch / (t * 1e-3), bytes / 1e9, 100 * out->back().floor_ms / t);
        if (batch == 16) {  // the fused combine past its default 64 (split tile, KV head) pairs, same call
          const int fmax0 = cuda::attention_fused_combine_max();
          std::printf("  %s %s, attention combine launch / fused (up to %d pairs):", fname, what,
                      cuda::kFusedCombineCap);
          for (int fmax : {fmax0, cuda::kFusedCombineCap}) {
            cuda::set_attention_fused_combine_max(fmax);
            std::printf(" %.3f ms", forward_ms());
          }
          cuda::set_attention_fused_combine_max(fmax0);
          std::printf("\n");
        }
        if (batch > 1) {  // the decode loop kernel (one block a (row, KV head), no combine), same call, twice
          const int dl0 = cuda::attention_decode_loop();
          std::printf("  %s %s, attention decode loop off / always / always with two teams, twice:", fname,
                      what);
          for (int mode : {0, 2, 4, 0, 2, 4}) {
            if (mode == 4 && !decode_teams_benched()) continue;
            std::fflush(stdout);  // (a hang in the two-team kernel keeps the numbers before it)
            cuda::set_attention_decode_loop(mode);
            std::printf(" %.3f ms", forward_ms());
          }
          cuda::set_attention_decode_loop(dl0);
          std::printf("\n");
        }
        // A mode knob's settings 0 .. n - 1, twice interleaved, then the caller's setting back.
        auto modes_twice = [&](const char* label, int (*get)(), void (*set)(int), int n) {
          const int m0 = get();
          std::printf("  %s %s, %s, twice:", fname, what, label);
          for (int rep = 0; rep < 2 * n; ++rep) {
            set(rep % n);
            std::printf(" %.3f ms", forward_ms());
          }
          set(m0);
          std::printf("\n");
          std::fflush(stdout);
        };
        if (f == WeightFormat::Mlx4 && batch > 16 && batch <= 64)  // q4_wg's cluster instances, same call
          modes_twice("q4_wg clusters off / on (set_q4_wgc 0 / 1)", cuda::q4_wgc_mode, cuda::set_q4_wgc, 2);
        if (f == WeightFormat::Mlx4 && batch > 16 && batch <= 32 && !std::getenv("TF_BENCH_ONLY_WGC")) {
          const int wgc0 = cuda::q4_wgc_mode();
          cuda::set_q4_wgc(0);  // (the kernels before the cluster instances)
          modes_twice("q4_ks at 17-32 rows off / on / K > 4096 only", cuda::q4_ks32_mode, cuda::set_q4_ks32,
                      3);
          modes_twice("as 16 + the rest rows off / widths > 8192 / every width", cuda::q4_split32_mode,
                      cuda::set_q4_split32, 3);
          cuda::set_q4_wgc(wgc0);
        }
        if (f == WeightFormat::Mlx4 && batch > 1 &&
            batch <= 8) {  // the 16-row kernels at 2-8 rows, same call
          const int wg0 = cuda::q4_wg_mode(), ks0 = cuda::q4_ks_mode();
          std::printf("  %s %s, q4_wg/q4_ks modes %d/%d 2/%d %d/2 2/2, twice:", fname, what, wg0, ks0, ks0,
                      wg0);
          for (int rep = 0; rep < 2; ++rep)
            for (int i = 0; i < 4; ++i) {
              cuda::set_q4_wg(i % 2 ? 2 : wg0);
              cuda::set_q4_ks(i / 2 ? 2 : ks0);
              std::printf(" %.3f", forward_ms());
            }
          std::printf(" ms\n");
          cuda::set_q4_wg(wg0);
          cuda::set_q4_ks(ks0);
        }
        if (f == WeightFormat::Mlx4 && batch > 8 && batch <= 16) {  // q4_pair_kernel's modes, same call
          const int mode0 = cuda::q4_pair_mode();
          std::printf("  %s %s, q4_pair off / where its tiles fill the grid / always:", fname, what);
          for (int mode : {0, 1, 2}) {
            cuda::set_q4_pair(mode);
            std::printf(" %.3f ms", forward_ms());
          }
          cuda::set_q4_pair(mode0);
          const int wg0 = cuda::q4_wg_mode();  // q4_wg_kernel's modes, same call (quant_wg.cu)
          std::printf("  q4_wg off / where its tiles fill the grid / the lm_head only:");
          for (int mode : {0, 1, 3}) {
            cuda::set_q4_wg(mode);
            std::printf(" %.3f ms", forward_ms());
          }
          cuda::set_q4_wg(wg0);
          const int ks0 = cuda::q4_ks_mode(), kc0 = cuda::q4_ks_config();  // q4_ks_kernel (quant_ks.cu)
          auto ks_ms = [&](int mode, int cfg) {  // the forward with q4_ks in this mode and configuration
            std::fflush(stdout);  // (a hang in a new configuration keeps the numbers before it)
            cuda::set_q4_ks(mode);
            cuda::set_q4_ks_config(cfg);
            std::printf(" %.3f ms", forward_ms());
          };
          std::printf(
              "  q4_ks off / on in configurations 0 1 2 3 4 / the down only, widths <= 8192 only (cfg 1):");
          for (int i = 0; i < 8; ++i)
            ks_ms(i == 0 ? 0 : i < 6 ? 1 : i == 6 ? 3 : 4, i == 0 ? kc0 : i < 6 ? i - 1 : 1);
          std::printf("  q4_ks on the down only in configurations 0 1 2 3 4:");
          for (int cfg : {0, 1, 2, 3, 4}) ks_ms(3, cfg);
          std::printf("  q4_ks on in configurations 5 6 (the fold in a cluster):");
          for (int cfg : {5, 6})
            if (ks_cluster_benched()) ks_ms(1, cfg);
          cuda::set_q4_ks(ks0);
          cuda::set_q4_ks_config(kc0);
          // q4_pair x q4_wg with the q4_ks default, twice interleaved (run 454: q4_wg mode 1 and q4_pair
          // mode 2 each faster on their own lines once q4_ks took the down)
          std::printf("  q4_pair/q4_wg modes 1/3 1/1 2/3 2/1, twice:");
          for (int rep = 0; rep < 2; ++rep)
            for (int pw : {13, 11, 23, 21}) {
              cuda::set_q4_pair(pw / 10);
              cuda::set_q4_wg(pw % 10);
              std::printf(" %.3f", forward_ms());
            }
          std::printf(" ms");
          cuda::set_q4_pair(mode0);
          cuda::set_q4_wg(wg0);
          const std::string label = std::string(fname) + " " + what;
          print_without(label.c_str(), [&] { return forward_ms(); });
          std::printf("\n");
        }
        std::fflush(stdout);
      }
    }
    for (int n : prefills) {
      if (n > max_prefill || step_only) continue;
      be.begin_forward(prefill_meta(n));
      const double t = time_ms(
          s, [&] { forward(be, m, acts, n, 1, rope, ours); }, 1, 3);
      out->push_back(
          {sh.name, "prefill " + std::to_string(n), f, t, prefill_floor_ms(m, n, c), double(n), 0, ""});
      std::printf("  %s prefill %d: %.2f ms, %.0f tok/s, %.1f%% of the GEMM roofline\n", fname, n, t,
                  n / (t * 1e-3), 100 * out->back().floor_ms / t);
      std::fflush(stdout);
    }
  }
  cuda::DecodeStep::set_mlx4(engine_mlx4_step);
}

void print_format_summary(const std::vector<FormatRow>& rows, const Ceilings& c) {
  auto bf16_ms = [&](const FormatRow& r) {
    for (const FormatRow& b : rows)
      if (b.format == WeightFormat::Bf16 && b.shape == r.shape && b.run == r.run) return b.ms;
    return 0.0;
  };
  std::printf(
      "\n| shape | run | format | ms | tok/s | GB read | of roofline | vs bf16 |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (const FormatRow& r : rows) {
    char gb[32] = "-";
    if (r.gb > 0) std::snprintf(gb, sizeof gb, "%.2f", r.gb);
    std::printf("| %s | %s%s%s%s | %s | %.3f | %.0f | %s | %.1f%% | %.2fx |\n", r.shape.c_str(),
                r.run.c_str(), *r.timing ? " (" : "", r.timing, *r.timing ? ")" : "",
                weight_format_info(r.format).name, r.ms, r.tokens / (r.ms * 1e-3), gb,
                100 * r.floor_ms / r.ms, bf16_ms(r) / r.ms);
  }
  std::printf(
      "(roofline: decode = (the format's linear bytes: packed weights + scales/biases, + bf16 KV bytes) / "
      "measured copy bandwidth %.0f GB/s; prefill = FLOPs / measured bf16 GEMM rate %.0f TFLOP/s; vs bf16: "
      "the bf16 forward's time over this one's, same run)\n",
      c.copy_gbs, c.gemm_tflops);
  for (const FormatRow& r : rows)  // issue 11's targets at b=1 (tf_bench_quant checks it too) and b=16
    if (r.format == WeightFormat::Mlx4 && r.run == "decode b=1 ctx=512") {
      const double ratio = bf16_ms(r) / r.ms, frac = r.floor_ms / r.ms;
      std::printf(
          "target %s 4-bit/g64 b=1 ctx 512 (forward): >= 3x bf16 (%.2fx) %s, >= 75%% of roofline "
          "(%.1f%%) %s\n",
          r.shape.c_str(), ratio, ratio >= 3 ? "met" : "MISSED", 100 * frac, frac >= 0.75 ? "met" : "MISSED");
    } else if (r.format == WeightFormat::Mlx4 && r.run == "decode b=16 ctx=512") {
      const double ratio = bf16_ms(r) / r.ms;
      std::printf("target %s 4-bit/g64 b=16 ctx 512 (forward): >= 2x bf16 (%.2fx) %s\n", r.shape.c_str(),
                  ratio, ratio >= 2 ? "met" : "MISSED");
    }
}

// Names a quantized format after a shape's name in a title (nothing for bf16: the titles stay as they were).
std::string format_suffix(WeightFormat f) {
  return f == WeightFormat::Bf16 ? "" : std::string(", ") + weight_format_info(f).name + " linears";
}

// Verify cost: a forward of b*(k+1) rows (k drafts per sequence) over a 1-row-per-sequence step, k=1..8.
void verify_sweep(Backend& be, const ModelShape& sh, int ctx, WeightFormat format) {
  cudaStream_t s = cuda::stream_of(be);
  ShapeModel m = make_model(be, sh, int64_t(8) * (ctx + kBlock), format);
  Acts acts = make_acts(be, sh, 8 * 9, 8 * 9);
  const LinearFn ours = backend_linear(be);
  const RopeParams rope = qwen_rope(sh.head_dim);
  std::printf("\n== verify cost, %s%s, ctx %d (graph replays; logits for every row) ==\n| batch | k=0 ms |",
              sh.name, format_suffix(format).c_str(), ctx);
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

// A target for `ncu --profile-from-start off`: the kernels of one eager decode forward (b=1, ctx 512), or of
// a prefill of `prefill` tokens, each timed alone by the profiler, to split a step's time into kernel time
// and the gaps.
void profile_forward(Backend& be, const ModelShape& sh, WeightFormat format, int prefill = 0) {
  const int rows = prefill > 0 ? prefill : 1;
  ShapeModel m = make_model(be, sh, prefill > 0 ? prefill + kBlock : int64_t(4) * (512 + kBlock), format);
  const LinearFn ours = backend_linear(be);
  Acts acts = prefill > 0 ? make_acts(be, sh, prefill, 32) : make_acts(be, sh, 16, 16);
  const RopeParams rope = qwen_rope(sh.head_dim);
  BatchMeta meta = prefill > 0 ? prefill_meta(prefill) : decode_meta(1, 512);
  be.begin_forward(meta);
  auto step = [&] { forward(be, m, acts, rows, 1, rope, ours); };
  cudaStream_t s = cuda::stream_of(be);
  if (prefill > 0) {
    std::printf("prefill %d: eager %.3f ms\n", prefill, time_ms(s, step));
  } else {
    for (int i = 0; i < 3; ++i) step();
    be.synchronize();
    const double eager = time_ms(s, step);
    const double graph = time_graph_ms(s, step, nullptr);
    std::printf("forward b=1 ctx 512: eager %.3f ms, graph %.3f ms\n", eager, graph);
  }
  TF_CUDA_CHECK(cudaProfilerStart());
  step();
  be.synchronize();
  TF_CUDA_CHECK(cudaProfilerStop());
  if (prefill > 0)
    std::printf("profiled one prefill of %d tokens of %s%s\n", prefill, sh.name,
                format_suffix(format).c_str());
  else
    std::printf("profiled one forward of %s%s b=1 ctx 512\n", sh.name, format_suffix(format).c_str());
}

void print_summary(const std::vector<Row>& rows, const Ceilings& c) {
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
}

std::vector<const ModelShape*> pick_shapes(const std::vector<std::string>& ids) {
  std::vector<const ModelShape*> out;
  if (ids.empty())
    for (const ModelShape& s : kModelShapes) out.push_back(&s);
  for (const std::string& id : ids) {
    auto it = std::find_if(std::begin(kModelShapes), std::end(kModelShapes),
                           [&](const ModelShape& s) { return id == s.id; });
    if (it == std::end(kModelShapes)) {
      std::vector<std::string> known;
      for (const ModelShape& s : kModelShapes) known.push_back(s.id);
      throw InvalidRequest("unknown dense model shape '" + id + "'; known: " + join_choices(known, ", "));
    }
    out.push_back(&*it);
  }
  return out;
}

// The formats by id, in the order given, each once; empty: bf16.
std::vector<WeightFormat> pick_formats(const std::vector<std::string>& ids) {
  std::vector<WeightFormat> out;
  for (const std::string& id : ids) {
    auto it = std::find_if(std::begin(kWeightFormats), std::end(kWeightFormats),
                           [&](const WeightFormatInfo& f) { return id == f.id; });
    if (it == std::end(kWeightFormats)) {
      throw InvalidRequest("unknown weight format '" + id +
                           "'; known: " + join_choices(weight_format_choices(), ", "));
    }
    if (std::find(out.begin(), out.end(), it->format) == out.end()) out.push_back(it->format);
  }
  if (out.empty()) out.push_back(WeightFormat::Bf16);
  return out;
}

}  // namespace

int run_shape_bench(const ShapeBenchOptions& opt) {
  const std::vector<const ModelShape*> shapes = pick_shapes(opt.shapes);
  const std::vector<WeightFormat> formats = pick_formats(opt.formats);
  std::vector<WeightFormat> quantized;
  for (WeightFormat f : formats)
    if (f != WeightFormat::Bf16) quantized.push_back(f);
  const bool bf16 = quantized.size() < formats.size();
  if (opt.mode == ShapeBenchMode::Linears && !quantized.empty())
    throw InvalidRequest("the linear table is bf16 only (tf_bench_quant times the quantized linears)");
  auto be = shape_bench_backend(opt.device, opt.program);
  if (!be) return 2;
  Cublas h(*be);
  std::printf("device: %s\n", be->name().c_str());
  const Ceilings c = measure_ceilings(*be, h.get());
  std::printf("ceilings: device copy %.0f GB/s (read+write), cuBLAS bf16 GEMM 8192^3 %.0f TFLOP/s\n",
              c.copy_gbs, c.gemm_tflops);
  std::fflush(stdout);
  switch (opt.mode) {
    case ShapeBenchMode::Linears:
      for (const ModelShape* sh : shapes) linears_only(*be, h.get(), *sh);
      return 0;
    case ShapeBenchMode::ProfileForward:
      profile_forward(*be, *shapes[0], formats[0], opt.profile_prefill);
      return 0;
    case ShapeBenchMode::Verify:
      for (WeightFormat f : formats) {
        verify_sweep(*be, *shapes[0], 512, f);
        verify_sweep(*be, *shapes[0], 8192, f);
      }
      return 0;
    case ShapeBenchMode::Full:
      break;
  }
  std::vector<Row> rows;
  std::vector<FormatRow> format_table;
  for (const ModelShape* sh : shapes) {
    if (bf16) run_shape(*be, h.get(), *sh, c, opt.quick, &rows, opt.prefill_only, opt.decode_only);
    if (!quantized.empty()) format_rows(*be, *sh, quantized, c, opt.quick, &format_table);
  }
  if (bf16) print_summary(rows, c);
  if (!quantized.empty()) print_format_summary(format_table, c);
  return 0;
}

}  // namespace tf::bench

// The MoE shape benchmark (moe_shape.h: tf_bench_moe and `tensorfold bench --shape qwen3-30b-a3b`): a
// random-weight Qwen3-30B-A3B shape (48 layers, hidden 2048, 128 experts, top-8, expert intermediate 768,
// 32/4 heads of 128, vocab 151936) on the CUDA backend, forward composed from the backend ops as the
// product's decoder layer runs them (q/k/v fused into one projection with the add + norm, q/k norm + rope +
// KV write in one op) with Backend::moe for the sparse MLPs, in bf16 and as an mlx-lm 4-bit conversion (MLX
// affine 4-bit group 64 experts, attention and lm_head, the router 8-bit group 64, bf16 embeddings; random
// codes, finite random scales). Measures the device copy bandwidth in the same run, then per format decode
// at batch 1/8/32 (context 512; tokens/s and the fraction of the roofline on the bytes the step actually
// reads: the active experts' weights (packed bytes plus scales and biases), router, attention weights, KV,
// embedding rows and lm_head); after the batch-1 row the one-kernel decode step (ops/cuda/decode_step.h) made
// from the same model, its logits checked bit for bit against the chain's and timed as the chain's row is
// (or one line saying why it was not made, e.g. MLX 4-bit; TF_MOE_BENCH_STEP=0 skips it); the host-routed
// per-expert path at batch 1 for comparison, and prefill 4k.
#include "moe_shape.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench_common.h"
#include "ops/backend.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/decode_step.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/moe_fused.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/quant_linear.h"
#include "ops/moe.h"
#include "shape_model.h"  // print_step_stamps

namespace tf {
namespace {

constexpr int kLayers = 48, kHidden = 2048, kExperts = 128, kTopK = 8, kInter = 768, kHeads = 32,
              kKvHeads = 4, kHeadDim = 128, kVocab = 151936, kBlock = 16;

using bench::decode_meta;
using bench::prefill_meta;
using bench::time_graph_ms;
using bench::time_ms;

struct Layer {
  LinearWeight qkv, o;  // q, k and v fused, as the product loads them (decoder_layer.cpp fuse_linears)
  MoeWeights moe;
  Tensor ln1, ln2, q_norm, k_norm;
  KvLayer kv;
};

struct Model {
  std::vector<Layer> layers;
  Tensor embed, final_norm;
  LinearWeight lm_head;
  bool mlx = false;  // the mlx-lm 4-bit conversion's formats (make_model)
};

LinearWeight rand_linear(Backend& be, int64_t n, int64_t k, uint64_t seed) {
  LinearWeight w;
  w.weight = be.alloc({n, k}, DType::BF16);
  w.in_features = k, w.out_features = n;
  const float a = std::sqrt(3.f / float(k));
  cuda::fill_uniform(be, w.weight, seed, -a, a);
  return w;
}

// An MLX affine weight [n, k] in the device layout upload_linear gives (quant_linear.h): random packed codes
// and one (scale, bias) pair a group, bf16, scale ~ 0.2/sqrt(k) / 2^bits and bias -2^(bits-1) * scale
// (centred weights of about uniform(-a, a), as rand_linear), so activations stay finite through 48 layers.
LinearWeight rand_mlx(Backend& be, int64_t n, int64_t k, int bits, uint64_t seed) {
  constexpr int kGroup = 64;
  LinearWeight w;
  w.format = LinearWeight::Format::MlxAffine;
  w.bits = bits, w.group_size = kGroup;
  w.in_features = k, w.out_features = n;
  w.weight = be.alloc({n, k * bits / 32}, DType::U32);
  w.scales = be.alloc({n, k / kGroup}, DType::U32);
  cudaStream_t s = cuda::stream_of(be);
  cuda::fill_random_bytes(w.weight.raw(), size_t(w.weight.nbytes()), seed, 0xFF, s);
  std::vector<uint32_t> sb(size_t(w.scales.numel()));
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + 1;
  const float s0 = 2.f * std::sqrt(3.f / float(k)) / float(1 << bits);
  for (auto& v : sb) {
    z ^= z << 13, z ^= z >> 7, z ^= z << 17;  // xorshift64
    const float sc = s0 * (0.75f + 0.5f * float(z >> 40) / float(1 << 24));
    v = uint32_t(f32_to_bf16(sc)) | uint32_t(f32_to_bf16(-sc * float(1 << (bits - 1)))) << 16;
  }
  TF_CUDA_CHECK(cudaMemcpyAsync(w.scales.raw(), sb.data(), sb.size() * 4, cudaMemcpyHostToDevice, s));
  TF_CUDA_CHECK(cudaStreamSynchronize(s));   // sb is freed on return
  if (bits == 4) cuda::prescale_mlx4(w, s);  // as upload_linear stores them
  return w;
}

// Bytes of one linear's weight [n, k] as the model stores it: bf16, or MLX packed codes plus one 4-byte
// (scale, bias) pair per 64 inputs.
double linear_bytes(const Model& m, double n, double k, int mlx_bits = 4) {
  return m.mlx ? n * k * mlx_bits / 8 + n * k / 64 * 4 : n * k * 2;
}

// All weights of the model as stored (experts of every layer, attention, router, lm_head, embeddings).
double weight_bytes(const Model& m) {
  const double expert = linear_bytes(m, 2.0 * kInter, kHidden) + linear_bytes(m, kHidden, kInter);
  const double attn = 2 * linear_bytes(m, double(kHeads) * kHeadDim, kHidden) +
                      2 * linear_bytes(m, double(kKvHeads) * kHeadDim, kHidden);
  return kLayers * (kExperts * expert + attn + linear_bytes(m, kExperts, kHidden, 8)) +
         linear_bytes(m, kVocab, kHidden) + double(kVocab) * kHidden * 2;
}

Tensor rand_norm(Backend& be, int64_t n, uint64_t seed) {
  Tensor t = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, t, seed, 0.8f, 1.2f);
  return t;
}

Model make_model(Backend& be, int64_t kv_blocks, bool mlx) {
  Model m;
  m.mlx = mlx;
  uint64_t seed = 100;
  auto lin = [&](int64_t n, int64_t k, int bits = 4) {
    return mlx ? rand_mlx(be, n, k, bits, seed++) : rand_linear(be, n, k, seed++);
  };
  const int64_t qd = int64_t(kHeads) * kHeadDim, kd = int64_t(kKvHeads) * kHeadDim;
  for (int l = 0; l < kLayers; ++l) {
    Layer L;
    L.qkv = lin(qd + 2 * kd, kHidden);
    L.o = lin(kHidden, qd);
    L.moe.top_k = kTopK, L.moe.norm_topk_prob = true;
    L.moe.router = lin(kExperts, kHidden, 8);  // mlx-lm keeps the router at 8 bits
    for (int e = 0; e < kExperts; ++e) {
      L.moe.gate_up.push_back(lin(2 * kInter, kHidden));
      L.moe.down.push_back(lin(kHidden, kInter));
    }
    L.ln1 = rand_norm(be, kHidden, seed++);
    L.ln2 = rand_norm(be, kHidden, seed++);
    L.q_norm = rand_norm(be, kHeadDim, seed++);
    L.k_norm = rand_norm(be, kHeadDim, seed++);
    L.kv.k = be.alloc({kv_blocks, kBlock, kKvHeads, kHeadDim}, DType::BF16);
    L.kv.v = be.alloc({kv_blocks, kBlock, kKvHeads, kHeadDim}, DType::BF16);
    cuda::fill_uniform(be, L.kv.k, seed++, -2, 2);
    cuda::fill_uniform(be, L.kv.v, seed++, -1, 1);
    m.layers.push_back(std::move(L));
  }
  m.embed = be.alloc({kVocab, kHidden}, DType::BF16);
  cuda::fill_uniform(be, m.embed, seed++, -1, 1);
  m.final_norm = rand_norm(be, kHidden, seed++);
  m.lm_head = lin(kVocab, kHidden);
  be.synchronize();
  return m;
}

// Ablations at batch 1 (timing only; results wrong where something is skipped): see ablate().
bool g_skip_attn = false, g_skip_moe = false;
int g_empty_blocks = 0;  // > 0: one empty dependent kernel of this many blocks after each layer's MoE
unsigned g_twice =
    0;  // the attention half's ops run twice (idempotent): bit 0 qkv, 1 norm+rope+KV, 2 attention, 3 o

// Called with each layer's MoE input (the bench's byte count routes it on the host).
using MoeHook = std::function<void(int layer, const Tensor& x)>;

// The attention and rope parameters and the norms' eps the forward runs (and the one-kernel step is given).
constexpr float kNormEps = 1e-6f;
AttentionParams attention_params() {
  return AttentionParams{kHeads, kKvHeads, kHeadDim, 1.f / std::sqrt(float(kHeadDim)), 0, 0.f};
}
RopeParams rope_params() {
  RopeParams rope;
  rope.head_dim = rope.rotary_dim = kHeadDim;
  for (int i = 0; i < kHeadDim / 2; ++i) rope.inv_freq.push_back(std::pow(1e6f, -2.f * i / kHeadDim));
  return rope;
}

// One forward; returns the logits (F32 [outs, vocab]) of the last row of each sequence (`outs` rows).
// `host_moe`: Backend::moe's default.
Tensor forward(Backend& be, Model& m, int rows, const std::vector<int32_t>& outs, bool host_moe,
               const MoeHook& hook = nullptr) {
  const int64_t qd = int64_t(kHeads) * kHeadDim, kd = int64_t(kKvHeads) * kHeadDim;
  auto a = [&](int64_t r, int64_t c) { return be.alloc({r, c}, DType::BF16); };
  Tensor res = a(rows, kHidden), res2 = a(rows, kHidden), x = a(rows, kHidden), q = a(rows, qd),
         qkv = a(rows, qd + 2 * kd), attn = a(rows, qd), o = a(rows, kHidden), mlp = a(rows, kHidden);
  const AttentionParams ap = attention_params();
  const RopeParams rope = rope_params();
  // The product's attention half (decoder_layer_forward): the add + norm fused into the qkv projection where
  // the backend can (then the new residual is in the other buffer), q/k norm + rope + KV write in one op.
  Tensor* cur = &res;
  Tensor* alt = &res2;
  be.embedding(m.embed, 1.f, res);
  for (int l = 0; l < kLayers; ++l) {
    Layer& L = m.layers[l];
    if (l == 0) {
      be.rms_norm(*cur, L.ln1, kNormEps, 0.f, x);
      be.linear(x, L.qkv, qkv);
    } else if (be.add_rms_norm_linear(*cur, mlp, L.ln1, kNormEps, 0.f, x, L.qkv, qkv, *alt)) {
      std::swap(cur, alt);
    }
    auto twice = [&](int bit, auto&& f) {
      f();
      if (g_twice >> bit & 1) f();
    };
    if (g_twice & 1) be.linear(x, L.qkv, qkv);  // (x holds the norm: the 4-bit qkv does not fuse it)
    // The product's MoE half (decoder_layer_forward): the o projection, norm and MoE in one backend call (the
    // o linear as its own op where the attention is skipped or the o linear runs twice).
    const bool product_moe = !hook && !g_skip_moe && !host_moe;
    const bool o_inside = product_moe && !g_skip_attn && !(g_twice >> 3 & 1);
    if (!g_skip_attn) {
      twice(1, [&] { be.attention_inputs_qkv(qkv, q, &L.q_norm, &L.k_norm, kNormEps, 0.f, rope, L.kv); });
      twice(2, [&] { be.attention(q, L.kv, ap, attn); });
      if (!o_inside) twice(3, [&] { be.linear(attn, L.o, o); });
    }
    if (o_inside) {
      if (be.linear_add_rms_norm_moe(attn, L.o, o, *cur, L.ln2, kNormEps, 0.f, x, L.moe, mlp, *alt))
        std::swap(cur, alt);
    } else if (product_moe) {
      if (be.add_rms_norm_moe(*cur, o, L.ln2, kNormEps, 0.f, x, L.moe, mlp, *alt)) std::swap(cur, alt);
    } else {
      be.add_rms_norm(*cur, o, L.ln2, kNormEps, 0.f, x);
      if (hook) hook(l, x);
      if (g_skip_moe) continue;
      if (host_moe)
        be.Backend::moe(x, L.moe, mlp);
      else
        be.moe(x, L.moe, mlp);
    }
    if (g_empty_blocks > 0) cuda::empty_step(g_empty_blocks, cuda::stream_of(be));
  }
  be.add_rms_norm(*cur, mlp, m.final_norm, kNormEps, 0.f, x);
  Tensor logits = be.alloc({int64_t(outs.size()), kVocab}, DType::F32);
  if (int(outs.size()) == rows) {  // decode: no host staging (graphs)
    be.linear(x, m.lm_head, logits);
    return logits;
  }
  Tensor last = a(int64_t(outs.size()), kHidden);
  be.gather_rows(x, outs, last);
  be.linear(last, m.lm_head, logits);
  return logits;
}

// Bytes a decode step reads: per layer the distinct experts the batch routes to (host routing of the
// real router logits), the router, attention weights and each sequence's KV; plus embedding rows and
// lm_head. Returns {bytes, mean active experts a layer}.
std::pair<double, double> step_bytes(Backend& be, Model& m, const BatchMeta& meta, int ctx) {
  std::vector<int> active(kLayers, 0);
  MoeHook hook = [&](int l, const Tensor& x) {
    Tensor lg = be.alloc({x.dim(0), kExperts}, DType::F32);
    be.linear(x, m.layers[l].moe.router, lg);
    Tensor host = Tensor::empty({x.dim(0), kExperts}, DType::F32);
    be.to_host(lg, host);
    const MoeRoute r = route_topk(host.data<float>(), int(x.dim(0)), kExperts, kTopK, true);
    active[l] = int(std::set<int32_t>(r.experts.begin(), r.experts.end()).size());
  };
  std::vector<int32_t> outs(static_cast<size_t>(meta.rows()));
  for (int i = 0; i < meta.rows(); ++i) outs[i] = i;
  be.begin_forward(meta);
  forward(be, m, meta.rows(), outs, false, hook);
  be.synchronize();
  const double expert = linear_bytes(m, 2.0 * kInter, kHidden) + linear_bytes(m, kHidden, kInter);
  const double attn_w = 2 * linear_bytes(m, double(kHeads) * kHeadDim, kHidden) +
                        2 * linear_bytes(m, double(kKvHeads) * kHeadDim, kHidden);
  const double kv = 2.0 * kKvHeads * kHeadDim * 2 * ctx * meta.rows();
  const double router = linear_bytes(m, kExperts, kHidden, 8);
  double bytes = linear_bytes(m, kVocab, kHidden) + double(meta.rows()) * kHidden * 2, mean = 0;
  for (int l = 0; l < kLayers; ++l) {
    bytes += active[l] * expert + attn_w + kv + router;
    mean += active[l] / double(kLayers);
  }
  return {bytes, mean};
}

// The one-kernel decode step (ops/cuda/decode_step.h, the MoE shape's implementation) at b=1, after the
// chain's b=1 row (TF_MOE_BENCH_STEP=0: skipped). Prepared from the bench's model through the backend
// (DecodeStep::make; where it refuses, one line says why; its MLX 4-bit instance is turned on here), bound to
// the model's pools for `meta` (the b=1 row's), its logits compared bit for bit with one chain forward's from
// the same state (both write the row's K/V with the same bits), then timed from a CUDA graph as the chain's
// rows are. `bytes` and `experts` are the chain row's (the same reads), `chain_ms` its time. The step, with
// its packed copy of the attention weights (~1 GB), is destroyed on return.
void decode_step_row(Backend& be, Model& m, const BatchMeta& meta, int ctx, double copy_gbs, double bytes,
                     double experts, double chain_ms) {
  cudaStream_t s = cuda::stream_of(be);
  DecodeStepModel dm;
  dm.embed = &m.embed;
  for (const Layer& L : m.layers) {
    DecodeStepLayer sl;
    sl.input_norm = &L.ln1, sl.post_norm = &L.ln2, sl.q_norm = &L.q_norm, sl.k_norm = &L.k_norm;
    sl.qkv = &L.qkv, sl.o = &L.o, sl.moe = &L.moe;  // (gate_up and down null: a sparse MLP)
    dm.layers.push_back(sl);
  }
  dm.final_norm = &m.final_norm;
  dm.lm_head = &m.lm_head;
  dm.rope = rope_params();
  dm.attn = attention_params();
  dm.norm_eps = kNormEps, dm.norm_offset = 0.f;
  std::string why;
  // (the MoE step whatever TF_DECODE_STEP_MOE says; its MLX 4-bit instance, off by default, too)
  const bool moe_was = cuda::DecodeStep::moe(), mlx4_was = cuda::DecodeStep::moe_mlx4();
  cuda::DecodeStep::set_moe(true);
  cuda::DecodeStep::set_moe_mlx4(true);
  const std::shared_ptr<void> step = be.prepare_decode_step(dm, &why);
  cuda::DecodeStep::set_moe(moe_was);
  cuda::DecodeStep::set_moe_mlx4(mlx4_was);
  if (!step) {
    const std::string prefix = "one-kernel decode step: ";  // (how the reasons begin)
    if (why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
    std::printf("one-kernel step: %s\n", why.c_str());
    return;
  }
  std::vector<KvLayer> kv;
  for (const Layer& L : m.layers) kv.push_back(L.kv);
  be.begin_forward(meta);
  if (!be.bind_decode_step(step.get(), kv)) {
    std::printf("one-kernel step: made, but it does not take the b=1 ctx %d step (bind)\n", ctx);
    return;
  }
  // Correctness: the chain's forward, then the step, from the same state (f32 [vocab] each).
  const Tensor chain = forward(be, m, 1, {0}, false);
  Tensor logits = be.alloc({1, kVocab}, DType::F32);
  be.decode_step(step.get(), logits);
  std::vector<uint32_t> a(static_cast<size_t>(kVocab)), b(a.size());
  be.read_raw(chain, 0, a.size() * 4, a.data());
  be.read_raw(logits, 0, b.size() * 4, b.data());
  int differ = 0;
  double largest = 0;  // the largest |step - chain| over the differing logits (NaN: not counted)
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      ++differ;
      float x, y;
      std::memcpy(&x, &a[i], 4), std::memcpy(&y, &b[i], 4);
      if (std::isfinite(x) && std::isfinite(y)) largest = std::max(largest, std::fabs(double(y) - double(x)));
    }
  if (differ == 0)
    std::printf("step logits == chain: yes\n");
  else
    std::printf("step logits == chain: NO (%d differ of %d, largest |difference| %g)\n", differ, kVocab,
                largest);
  // Timing: the step alone from a CUDA graph, as the chain's rows.
  bool captured = false;
  const double ms = time_graph_ms(
      s, [&] { be.decode_step(step.get(), logits); }, &captured);
  const double floor_ms = bytes / (copy_gbs * 1e9) * 1e3;
  std::printf(
      "| decode b=1 ctx %d%s, one-kernel step (chain / step %.2fx) | %.3f | %.0f | %.2f | %.3f | %.1f%% | "
      "%.1f |\n",
      ctx, captured ? "" : " (eager)", chain_ms / ms, ms, 1e3 / ms, bytes / 1e9, floor_ms,
      100 * floor_ms / ms, experts);
  // A/Bs in this process (TF_MOE_BENCH_STEP_AB, comma-separated): "a<n>" the timing ablation n
  // (DecodeStep::set_ablate: wrong bits but for a4, a5, a8, a10, a11, a12; decode_step_host.cuh's
  // TF_STEP_MOE_ABLATE), "i<n>" n stages in flight (set_inflight; 0 every free slot), each timed then undone;
  // the step as it was timed last.
  if (const char* ab = std::getenv("TF_MOE_BENCH_STEP_AB"); ab && *ab) {
    auto* st = static_cast<cuda::DecodeStep*>(step.get());
    std::string list = std::string(ab) + ",";
    for (size_t at = 0, end; (end = list.find(',', at)) != std::string::npos; at = end + 1) {
      const std::string tok = list.substr(at, end - at);
      if (tok.size() < 2 || (tok[0] != 'a' && tok[0] != 'i')) continue;
      const int v = std::atoi(tok.c_str() + 1);
      if (tok[0] == 'a')
        st->set_ablate(v);
      else
        st->set_inflight(v);
      const double t = time_graph_ms(
          s, [&] { be.decode_step(step.get(), logits); }, &captured);
      st->set_ablate(0), st->set_inflight(-1);
      std::printf("| one-kernel step, %s %d | %.3f | %.0f | | | %.1f%% | |\n",
                  tok[0] == 'i' ? "stages in flight"
                  : v == 4      ? "variant (same bits): the combine's routing at the down's x,"
                  : v == 5      ? "variant (same bits): one rank a down stage,"
                  : v == 8      ? "variant (same bits): the ring's 8 slots everywhere (none lent),"
                  : v == 10     ? "variant (same bits): the 4-bit producer's stages one at a time,"
                  : v == 11     ? "variant (same bits): the 4-bit producer's stages eight at a time,"
                  : v == 12     ? "variant (same bits): no warm-up of the routing's code,"
                                : "timing ablation (wrong bits)",
                  v, t, 1e3 / t, 100 * floor_ms / t);
    }
    const double t = time_graph_ms(
        s, [&] { be.decode_step(step.get(), logits); }, &captured);
    std::printf("| one-kernel step, again | %.3f | %.0f | | | %.1f%% | |\n", t, 1e3 / t, 100 * floor_ms / t);
  }
  if (std::getenv("TF_STEP_STAMPS"))
    bench::print_step_stamps(be, step, s, ctx, logits);  // (layer 10's timeline)
  std::fflush(stdout);
}

void bench_format(Backend& be, bool mlx, bool quick, double copy_gbs);

// What each part of the b=1 step costs (CUDA graphs; timing only): the step without the attention half
// (q/k norm + rope + KV, attention, o projection) or without the MoE, with one of the MoE's kernels run
// twice (each is idempotent: the second run is one more dependent step of that kind, its weights warm in
// L2), and with an empty dependent kernel after each MoE.
// The ablations both tables share (timing only): without the attention half, without the MoE, then each of
// the first `moe_ops` MoE ops (set_moe_repeat's bits) and each of the attention half's ops (g_twice) run
// twice. `time` times one forward; `fmt` prints a row's name and time.
template <class Time>
void ablate_ops(Time&& time, int moe_ops, const char* fmt) {
  g_skip_attn = true;
  std::printf(fmt, "no attention half", time());
  g_skip_attn = false, g_skip_moe = true;
  std::printf(fmt, "no MoE", time());
  g_skip_moe = false;
  const char* names[] = {"router", "route+group", "gate_up", "silu", "down", "combine", "one-kernel MoE"};
  for (int i = 0; i < moe_ops && i < 7; ++i) {
    cuda::set_moe_repeat(1u << i);
    std::printf(fmt, (std::string(names[i]) + " twice").c_str(), time());
  }
  cuda::set_moe_repeat(0);
  const char* attn_names[] = {"qkv linear", "q/k norm + rope + KV", "attention", "o linear"};
  for (int i = 0; i < 4; ++i) {
    g_twice = 1u << i;
    std::printf(fmt, (std::string(attn_names[i]) + " twice").c_str(), time());
  }
  g_twice = 0;
}

void ablate(Backend& be, Model& m) {
  cudaStream_t s = cuda::stream_of(be);
  const BatchMeta meta = decode_meta(1, 512);
  auto time = [&] {
    bool captured = false;
    be.begin_forward(meta);
    return time_graph_ms(
        s, [&] { forward(be, m, 1, {0}, false); }, &captured);
  };
  std::printf("b=1 ablations (ms/step, timing only): base %.3f", time());
  // (at b=1 the one-kernel MoE replaces kernels 1-5: their rows then time nothing extra)
  ablate_ops(time, 7, ", %s %.3f");
  for (int blocks : {1, 132}) {
    g_empty_blocks = blocks;
    std::printf(", +empty step (%d blocks) %.3f", blocks, time());
  }
  g_empty_blocks = 0;
  // (diagnostic, TF_MOE_REHOME=N; docs/cuda-notes.md "Session 37" Next 2) the step has two states per process
  // ~3% apart: is it where the MoE layers' hand-over words (moe_decode's barrier count and tagged logits)
  // land? Their tables and words made again N times at new addresses (the old ones kept alive, a spacer
  // allocation of a growing size in between), the step timed after each; a spread like the processes' says
  // yes.
  if (const char* r = std::getenv("TF_MOE_REHOME")) {
    std::vector<std::shared_ptr<void>> keep;
    std::vector<void*> spacers;
    for (int i = 0; i < std::atoi(r); ++i) {
      void* p = nullptr;
      TF_CUDA_CHECK(cudaMalloc(&p, size_t(i + 1) * 4096 + 256));
      spacers.push_back(p);
      for (Layer& L : m.layers) keep.push_back(std::move(L.moe.prepared));  // (null after the move)
      std::printf(", rehomed %d %.3f", i + 1, time());
    }
    for (void* p : spacers) TF_CUDA_CHECK(cudaFree(p));
  }
  std::printf("\n");
}

// Where a prefill's time goes (ms, eager; timing only): without the attention half or the MoE, and each op
// twice (the MoE's through set_moe_repeat, the attention half's through g_twice).
void ablate_prefill(Backend& be, Model& m, int prefill) {
  cudaStream_t s = cuda::stream_of(be);
  const BatchMeta meta = prefill_meta(prefill);
  auto time = [&] {
    return time_ms(
        s, [&] { be.begin_forward(meta), forward(be, m, prefill, {prefill - 1}, false); }, 1, 2);
  };
  std::printf("prefill %d ablations (ms, eager, timing only): base %.1f", prefill, time());
  ablate_ops(time, 6, ", %s %.1f");  // (6: the MoE ops of the grouped path)
  std::printf("\n");
}

using bench::Stamps;  // (bench_common.h)

// The phase stamps of the last layer of one eager forward at b=1: the attention's split blocks
// (attention_stamps) after their first wait, with the one-kernel MoE's first entry and wait on the same
// clock; then the one-kernel MoE's (moe_decode_stamps) after its first block's wait.
void print_decode_stamps(Backend& be, Model& m, const BatchMeta& meta, cudaStream_t s) {
  cuda::set_moe_decode_stamps(true);
  cuda::set_attention_stamps(true);
  cuda::set_q4_stamps(true);
  be.begin_forward(meta);
  forward(be, m, 1, {0}, false);
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  Stamps moe{{}, 0, cuda::kMoeDecodeStamps}, attn{{}, 0, cuda::kAttnStamps};
  moe.v = cuda::moe_decode_stamps(&moe.blocks);
  attn.v = cuda::attention_stamps(&attn.blocks);
  // The last layer's 4-bit qkv and o linears (one-row launches with x in shared memory: ..., qkv, o, then the
  // lm_head), when the model's linears are MLX 4-bit.
  Stamps qkv{{}, 0, cuda::kQ4Stamps}, o{{}, 0, cuda::kQ4Stamps};
  // (With the o projection inside the one-kernel MoE there is no o linear: the qkv is the launch before the
  // lm_head.)
  const bool o_inside = cuda::moe_o_fold();
  qkv.v = cuda::q4_stamps(o_inside ? 1 : 2, &qkv.blocks);
  if (!o_inside) o.v = cuda::q4_stamps(1, &o.blocks);
  cuda::set_q4_stamps(false);
  cuda::set_moe_decode_stamps(false);
  cuda::set_attention_stamps(false);
  if (const unsigned long long t0 = attn.first(1); t0 != ~0ull) {  // (1: waited)
    const char* names[cuda::kAttnStamps] = {"entered", "waited",       "K in",   "scores",
                                            "V in",    "partials out", "ticket", "merged"};
    attn.print("attention", names, t0);
    auto us = [&](unsigned long long at) { return (double(at) - double(t0)) * 1e-3; };
    if (moe.first(0) != ~0ull)  // the MoE's stamps 14 (entered) and 0 (waited)
      std::printf(" | MoE entered %.2f, waited %.2f", us(moe.first(14)), us(moe.first(0)));
    std::printf("\n");
    const char* q4_names[cuda::kQ4Stamps] = {"entered", "waited", "x in", "stored"};
    if (qkv.blocks) {
      qkv.print("qkv linear (the last layer's)", q4_names, t0);
      std::printf("\n");
    }
    if (o.blocks) {
      o.print("o linear (the last layer's)", q4_names, t0);
      std::printf("\n");
    }
  }
  const char* names[cuda::kMoeDecodeStamps] = {
      "waited",    "gate_up done", "past barrier", "act+tile in smem", "down MMAs", "stored",
      "item 0 in", "item 0 out",   "item 2 in",    "item 2 out",       "item 4 in", "item 4 out",
      "routed",    "logits out",   "entered",      "logits in",        "route done"};
  moe.print("one-kernel MoE", names, moe.first(0), 17);
  // The MoE's head (stamps 28-32), on the same clock.
  const std::pair<int, const char*> head[] = {{31, "o chains done"},
                                              {28, "o handed over"},
                                              {29, "add+norm done"},
                                              {32, "router tile in"},
                                              {30, "router chain done"}};
  for (const auto& [i, what] : head) moe.print_one(i, what, moe.first(0));
  // The blocks that finished their gate_up last (they hold up the grid barrier): block, entered, waited and
  // gate_up done (us on the same clock). Blocks 0 .. items % grid - 1 have one item more than the rest.
  {
    std::vector<std::pair<unsigned long long, int>> done;
    for (int b = 0; b < moe.blocks; ++b)
      if (moe.at(b, 1)) done.push_back({moe.at(b, 1), b});
    std::sort(done.rbegin(), done.rend());
    auto us = [&](unsigned long long at) { return at ? (double(at) - double(moe.first(0))) * 1e-3 : 0.0; };
    std::printf("\none-kernel MoE gate_up done last (block: entered / waited / done):");
    for (size_t j = 0; j < done.size() && j < 8; ++j) {
      const int b = done[j].second;
      std::printf(" %d: %.2f / %.2f / %.2f |", b, us(moe.at(b, 14)), us(moe.at(b, 0)), us(moe.at(b, 1)));
    }
    std::vector<int> late;  // the blocks that entered after the first wait
    for (int b = 0; b < moe.blocks; ++b)
      if (moe.at(b, 14) > moe.first(0)) late.push_back(b);
    std::printf(" entered after the first wait: %zu blocks, ids", late.size());
    for (size_t j = 0; j < late.size() && j < 24; ++j) std::printf(" %d", late[j]);
  }
  // The SM clock: clock64 cycles over globaltimer ns of thread 0, over the routing (stamps 15 -> 16, cycles
  // 17 -> 18) and over the kernel after its wait (0 -> 5, cycles 19 -> 20); medians over blocks.
  std::vector<double> rc, rn, kc, kn;
  for (int b = 0; b < moe.blocks; ++b) {
    if (moe.at(b, 16) && moe.at(b, 15) && moe.at(b, 18) && moe.at(b, 17))
      rc.push_back(double(moe.at(b, 18) - moe.at(b, 17))),
          rn.push_back(double(moe.at(b, 16) - moe.at(b, 15)));
    if (moe.at(b, 5) && moe.at(b, 0) && moe.at(b, 20) && moe.at(b, 19))
      kc.push_back(double(moe.at(b, 20) - moe.at(b, 19))), kn.push_back(double(moe.at(b, 5) - moe.at(b, 0)));
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Warp 0's down arithmetic (cycles 21 -> 23), its rounds of pairs in the loop over pairs (21 -> 22 -> 23),
  // its first two gate_up items, landed -> computed (24 -> 25, 26 -> 27).
  const auto dd = moe.deltas(21, 23), d1 = moe.deltas(21, 22), d2 = moe.deltas(22, 23);
  const auto i0 = moe.deltas(24, 25), i1 = moe.deltas(26, 27);
  const auto r0 = moe.deltas(33, 34), r1 = moe.deltas(34, 35), r2 = moe.deltas(35, 36);
  if (!r0.empty())
    std::printf(
        "\none-kernel MoE router tile: warp 0's chunk 0 %.0f cycles, chunks 1-3 %.0f, the rest %.0f "
        "(medians over %zu blocks)",
        median(r0), median(r1), median(r2), r0.size());
  if (!dd.empty()) std::printf("\none-kernel MoE down: warp 0's arithmetic %.0f cycles (median)", median(dd));
  if (!d1.empty())
    std::printf(
        "\none-kernel MoE down: warp 0's first round of pairs %.0f cycles, second %.0f (medians over %zu "
        "blocks)",
        median(d1), median(d2), d1.size());
  if (!i0.empty())
    std::printf(
        "\none-kernel MoE gate_up: warp 0's first item %.0f cycles, its second %.0f (medians over %zu "
        "blocks)",
        median(i0), median(i1), i0.size());
  if (!rc.empty() && !kc.empty())
    std::printf(
        "\none-kernel MoE clock: routing %.0f cycles in %.0f ns, the kernel after its wait %.0f cycles in "
        "%.0f ns (%.2f GHz; medians over %zu blocks)",
        median(rc), median(rn), median(kc), median(kn), median(kc) / median(kn), kc.size());
  std::printf("\n");
}

void bench_format(Backend& be, bool mlx, bool quick, double copy_gbs) {
  cudaStream_t s = cuda::stream_of(be);
  const int ctx = 512, prefill = 4096;
  Model m = make_model(be, int64_t(32) * (ctx / kBlock + 1) + prefill / kBlock + 64, mlx);
  const char* fmt = mlx ? "MLX 4-bit g64" : "bf16";
  std::printf("\n%s: %.1f GB of weights\n", fmt, weight_bytes(m) / 1e9);
  std::printf("| case (%s) | ms/step | tokens/s | GB read | roofline ms | of roofline | experts/layer |\n",
              fmt);
  std::printf("|---|---|---|---|---|---|---|\n");
  std::vector<int> batches = quick ? std::vector<int>{1, 8} : std::vector<int>{1, 8, 32};
  double b1 = 0;
  const bool bisect = std::getenv("TF_MOE_BENCH_BISECT") != nullptr;  // (see `without`)
  // Seconds of untimed steps before the first row (TF_MOE_BENCH_WARM_S, default 5; 0: none).
  const char* warm_env = std::getenv("TF_MOE_BENCH_WARM_S");
  const double warm_s = warm_env ? std::atof(warm_env) : 5.0;
  // The one-kernel step after the b=1 row (decode_step_row); TF_MOE_BENCH_STEP=0: not.
  const char* step_env = std::getenv("TF_MOE_BENCH_STEP");
  const bool step_row = !(step_env && step_env[0] == '0');
  for (int batch : batches) {
    const BatchMeta meta = decode_meta(batch, ctx);
    const auto [bytes, experts] = step_bytes(be, m, meta, ctx);
    std::vector<int32_t> outs(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) outs[i] = i;
    bool captured = false;
    auto step = [&] { forward(be, m, batch, outs, false); };
    auto step_ms = [&] { return time_graph_ms(s, step, &captured); };  // this batch's step from a CUDA graph
    be.begin_forward(meta);  // outside the graph: it stages the metadata through pinned memory
    if (batch == batches[0] && warm_s > 0) bench::warm_graph_for(s, step, warm_s);  // the steady state first
    const double ms = step_ms();
    const double floor_ms = bytes / (copy_gbs * 1e9) * 1e3;
    if (batch == 1) b1 = ms;
    std::printf("| decode b=%d ctx %d%s | %.3f | %.0f | %.2f | %.3f | %.1f%% | %.1f |\n", batch, ctx,
                captured ? "" : " (eager)", ms, batch * 1e3 / ms, bytes / 1e9, floor_ms, 100 * floor_ms / ms,
                experts);
    if (batch == 1 && step_row) {  // the one-kernel step (made and destroyed in there); the b=1 meta again
      decode_step_row(be, m, meta, ctx, copy_gbs, bytes, experts, ms);
      be.begin_forward(meta);
    }
    // A same-bits A/B: the step again with `set` off.
    auto without = [&](void (*set)(bool), const char* what) {
      set(false);
      const double t = step_ms();
      set(true);
      std::printf("| decode b=%d ctx %d, %s | %.3f | %.0f | | | | |\n", batch, ctx, what, t, batch * 1e3 / t);
      if (bisect) {  // (TF_MOE_BENCH_BISECT: the default timed again after each row, to find the row whose
                     // state makes the later default faster; runs 483-484)
        const double d = step_ms();
        std::printf("| decode b=%d ctx %d, the default after that row | %.3f | | | | | |\n", batch, ctx, d);
      }
    };
    without(cuda::set_moe_route_group, "routing and grouping as two launches");
    if (batch > cuda::kMoeRoutedMaxRows)  // the silu_mul kernel after the grouped gate_up
      without(cuda::set_moe_grouped_silu, "without silu_mul in the grouped gate_up");
    if (batch == 1 && mlx && std::getenv("TF_MOE_DECODE_STAMPS")) print_decode_stamps(be, m, meta, s);
    if (batch == 1 && mlx) {
      without(cuda::set_moe_decode, "the routed chain (not one kernel)");
      without(cuda::set_moe_decode_router, "the router linear outside the one kernel");
      without(cuda::set_moe_add_norm, "the add + norm before the one-kernel MoE a kernel of its own");
      without(cuda::set_q4_row2, "the qkv linear on the persistent 4-bit grid (two rounds)");
      without(cuda::set_moe_prologue_split, "moe_decode's prologue copies by every warp before the warm-up");
      without(cuda::set_moe_o_fold, "the o linear before the one-kernel MoE, a kernel of its own");
      without(cuda::set_moe_empty_after, "without the empty 1-block kernel after the one-kernel MoE");
      without(cuda::set_moe_router_rows, "the router inside as 16 logits a block (not 8)");
      without([](bool on) { cuda::set_moe_o_count_all(!on); }, "every block arriving on the o fold's count");
      without(cuda::set_moe_router_pad, "the router tile's rows unpadded in shared memory");
      without(cuda::set_moe_o_one_tile, "the o tiles two a block (one a team) on half the blocks");
      // The headline's setting timed again after the rows above. Without the warm-up it was 1.5-2.4% faster
      // here (runs 483-484, H100); run 485 timed it after each row: it drifts down over the process's first
      // seconds whatever the rows are, and starts lower in a second process (runs 485-486: the GPU's state,
      // with the SM and memory clocks fixed), hence warm_graph_for before the first row.
      const double again = step_ms();
      std::printf("| decode b=%d ctx %d, the first row's setting again | %.3f | %.0f | | %.3f | %.1f%% | |\n",
                  batch, ctx, again, batch * 1e3 / again, floor_ms, 100 * floor_ms / again);
    }
    if (batch == 1 && !mlx)  // bf16 experts: the routed chain's gate_up
      without(cuda::set_moe_routed_warm, "the routed gate_up's routing not warmed before its wait");
    if (batch <= cuda::kMoeRoutedMaxRows) {
      cuda::set_moe_decode(false);  // (the routed chain is what is compared)
      cuda::set_moe_routed(false);  // the routing + grouping kernel at decode too (A/B, same bits)
      const double ms3 = step_ms();
      cuda::set_moe_routed(true);
      cuda::set_moe_decode(true);
      std::printf("| decode b=%d ctx %d, without routing inside the gate_up GEMM | %.3f | %.0f | | | | |\n",
                  batch, ctx, ms3, batch * 1e3 / ms3);
    }
  }
  ablate(be, m);
  {
    const BatchMeta meta = decode_meta(1, ctx);
    const double ms = time_ms(
        s, [&] { be.begin_forward(meta), forward(be, m, 1, {0}, true); }, 1, 3);
    std::printf("| decode b=1, host-routed per-expert MoE (eager) | %.3f | %.0f | | | | |\n", ms, 1e3 / ms);
    std::printf("fused vs host-routed at b=1: %.2fx\n", ms / b1);
  }
  if (!quick) {
    const BatchMeta meta = prefill_meta(prefill);
    const double flops = 2.0 * prefill * kLayers *
                         (kTopK * 3.0 * kInter * kHidden + 2.0 * kHeads * kHeadDim * kHidden +
                          2.0 * kKvHeads * kHeadDim * kHidden + double(kExperts) * kHidden);
    // One row: the prefill timed with the settings as they are, `what` naming what differs from the defaults.
    auto row = [&](const std::string& what) {
      const double ms = time_ms(
          s, [&] { be.begin_forward(meta), forward(be, m, prefill, {prefill - 1}, false); }, 1, 3);
      std::printf("| prefill %d (eager)%s | %.1f | %.0f | | | linear FLOPs %.1f TFLOP/s | |\n", prefill,
                  what.c_str(), ms, prefill * 1e3 / ms, flops / (ms * 1e-3) / 1e12);
    };
    row("");
    // The same call with one switch changed, then back: the experts on the grouped mma.sync kernels
    // (TF_MOE_WGMMA=0), the bf16 experts' wgmma CTAs one a tile instead of persistent, the experts' grouping
    // tile forced (the rule's is 128 at 256 pairs an expert), the attention's prefill tiles on the other
    // kernel (attention_wgmma.cu or the wide loop kernel: TF_ATTN_WGMMA).
    const bool wg = cuda::moe_wgmma();
    cuda::set_moe_wgmma(false);
    row(", experts on mma.sync");
    cuda::set_moe_wgmma(wg);
    if (!mlx) {
      cuda::set_moe_wgmma_persistent(false);
      row(", bf16 experts' CTAs one a tile");
      cuda::set_moe_wgmma_persistent(true);
    }
    for (int tile : {64, 128}) {
      cuda::set_moe_wgmma_tile(tile);
      row(", experts' grouping tiles of " + std::to_string(tile));
      cuda::set_moe_wgmma_tile(0);
    }
    const bool aw = cuda::attention_wgmma();
    cuda::set_attention_wgmma(!aw);
    row(aw ? ", attention on the wide loop kernel" : ", attention on wgmma");
    cuda::set_attention_wgmma(aw);
    ablate_prefill(be, m, prefill);
  }
}

}  // namespace

namespace bench {

int run_moe_shape_bench(const MoeShapeOptions& opt) {
  for (const std::string& f : opt.formats)
    if (f != "bf16" && f != "mlx4")
      throw InvalidRequest("the MoE shape (" + std::string(kMoeShapeId) + ") runs bf16 and mlx4, not " + f);
  auto be = shape_bench_backend(opt.device, opt.program);
  if (!be) return 2;
  const bool quick = opt.quick;
  const double copy_gbs = copy_bandwidth_gbs(*be, 3, 11);
  std::printf("%s\ncopy bandwidth %.0f GB/s\n", be->name().c_str(), copy_gbs);
  for (const char* f : {"bf16", "mlx4"})
    if (std::find(opt.formats.begin(), opt.formats.end(), f) != opt.formats.end())
      bench_format(*be, std::strcmp(f, "mlx4") == 0, quick, copy_gbs);
  return 0;
}

// One format's rows: decode at batch 1/8/32 (fused), host-routed decode at batch 1, prefill.

}  // namespace bench
}  // namespace tf

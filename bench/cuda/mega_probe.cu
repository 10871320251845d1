// Probe for issues 6/11/12 (docs/cuda-notes.md "Session 15", "Session 16"): a persistent, warp-specialised
// decode kernel that runs a whole Qwen3-8B decode step at M = 1 with the engine's bits.
//
// The forward at b=1 is ~250 dependent kernels; each waits (griddepcontrol) for the whole previous grid, and
// only its first register ring of weights is in flight before that. Here one kernel runs all 36 layers of
// the Qwen3-8B shape and the lm_head at M = 1, one CTA an SM: a producer warp streams the CTA's weight tiles
// (packed so that a stage is one contiguous bulk copy, or -- TF_MEGA_TMA -- as 2D tensor-map boxes of the
// row-major weights) into a shared-memory ring -- weights are constant, so it runs ahead across every
// dependency, as far as the ring holds -- and 8 consumer warps compute each 16-feature tile with linear.cu's
// exact arithmetic (8 K slices in warp order, 32-wide chunks through mma_chunk, the slice sum in warp
// order). An op's consumers wait for the previous op (a completion counter, or -- mode bit 3, the default --
// by polling the tagged activation words themselves), then make their x in shared memory: add + RMSNorm
// (qkv, gate_up, lm_head: every CTA reduces the whole row itself, with add_rms_norm's arithmetic, so the norm
// is no step of its own), a copy (o: the attention's output words; down: gate_up's tiles store
// silu_mul(gate, up) -- --silu-out 1, the default), or silu_mul (down, --silu-out 0). Three attention warps a
// CTA (--attn 1, the default) make the attention of the row at position ctx - 1 (--ctx, default 512): (KV
// head, chunk) units dealt over the CTAs, q/k norm + rope + the new K/V row with qk_norm_rope_kv's
// arithmetic, each chunk's partial with attention_mma's (attention_chunk.cuh) as tagged words, the unit
// holding pos merging them into o's x words.
//
// Printed: the bits of every step of every layer against the engine's kernels on the same inputs (linears:
// linear_bf16; add + norm: add_rms_norm; attention: qkv_norm_rope_kv + attention_mma; must all be equal), a
// profile of one forward (where a CTA's cycles go, op-boundary and attention timelines), the time of one
// forward against today's linears alone in a graph (linear_bf16, dependent launch; no norms, no silu, no
// attention), against the copy-bandwidth roofline of the weights. Build: `ninja -C build-cuda
// tf_mega_probe_pairs` (not part of `all`); run on the GPU with no arguments (36 layers). Variants
// (compile-time): tf_mega_probe (16 KB stages a warp owns), tf_mega_probe_pairs (32 KB stages a warp pair
// owns: the fastest), tf_mega_probe_q4 (MLX 4-bit g64 weights), tf_mega_probe_tma (row-major weights by TMA).
// bench/cuda/mega_pack_check.py emulates the packings and the consumers' read addresses on the host.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "mega_kernel.cuh"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/quant_linear.h"
#include "quant_weights.h"

namespace {
using namespace tf::cuda;

template <typename T>
T* dalloc(size_t n) {
  T* p = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
  TF_CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int layers = 36, reps = 20, stages_n = 0, mode = 41, silu_out = 1, attn = 1, ctx = 512, kv_first = 0;
  int knob[4] = {0, 0, 1, 0};  // c_knob (mega_kernel.cuh): --csleep, --asleep, --aeager, --cycles
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--layers") layers = std::atoi(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--stages") stages_n = std::atoi(argv[i + 1]);
    if (a == "--mode") mode = std::atoi(argv[i + 1]);
    if (a == "--silu-out") silu_out = std::atoi(argv[i + 1]);
    if (a == "--attn") attn = std::atoi(argv[i + 1]);
    if (a == "--ctx") ctx = std::atoi(argv[i + 1]);
    if (a == "--kv-first") kv_first = std::atoi(argv[i + 1]);
    if (a == "--csleep") knob[0] = std::atoi(argv[i + 1]);
    if (a == "--asleep") knob[1] = std::atoi(argv[i + 1]);
    if (a == "--aeager") knob[2] = std::atoi(argv[i + 1]);
    if (a == "--cycles") knob[3] = std::atoi(argv[i + 1]);
  }
  const int H = 4096, QKV = 6144, I = 12288, V = 151936;
  TF_CUDA_CHECK(cudaMemcpyToSymbol(c_knob, knob, sizeof(knob)));
  cudaStream_t s;
  TF_CUDA_CHECK(cudaStreamCreate(&s));
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  // The attention warps stage K/V/Q in 74 KB of their own: Q4's 36 KB stages then fit 3 in the ring.
  if (stages_n == 0) stages_n = kQ4 && attn ? 3 : kDefaultStages;
  if (attn && !(mode & 8)) {
    std::fprintf(stderr, "--attn 1 needs --mode with bit 3 (the attention polls tagged words)\n");
    return 2;
  }
  if (ctx < 1 || ctx % 16) {
    std::fprintf(stderr, "--ctx must be a positive multiple of 16\n");
    return 2;
  }
  if (stages_n % kOwners || size_t(stages_n) * kStageBytes > 192 * 1024) {
    std::fprintf(stderr, "--stages must be a multiple of %d, at most 192 KB of ring\n", kOwners);
    return 2;
  }
  const std::unique_ptr<tf::Backend> be = tf::bench::shape_bench_backend(0, "tf_mega_probe");
  if (!be) return 2;
  const int pos = ctx - 1, chunks = pos / attn::kC + 1;  // the decode row: position ctx - 1
  const int kPoolBlocks = 2 * ctx / kBlock;              // the K/V pool: twice the sequence's blocks
  std::printf(
      "device: %s, %d SMs; layers %d, ring %d stages of %d bytes; mode %d, silu-out %d, knobs "
      "csleep %d asleep %d aeager %d, kv-first %d, %s\n",
      prop.name, prop.multiProcessorCount, layers, stages_n, kStageBytes, mode, silu_out, knob[0], knob[1],
      knob[2], kv_first,
      attn ? ("attention at position " + std::to_string(pos)).c_str() : "no attention (o <- q part)");

  // Weights and norm weights (random, made on the device), per-layer activations (no reuse: no hazards).
  struct L {
    __nv_bfloat16 *wqkv, *wo, *wgu, *wd, *n1, *n2;
    __nv_bfloat16 *qkv, *o, *gu, *d, *h1, *h2;   // the graph of today's kernels
    uint32_t *tqkv, *to, *tgu, *td, *th1, *th2;  // the probe's (tagged words)
    __nv_bfloat16 *kp, *vp, *qn, *kn;            // attention: K/V pool [slots][kHk][kD], q/k norm weights
    unsigned long long* part;
    uint32_t* aout;
  };
  std::vector<L> ls(layers);
  double bytes = 0;
  uint64_t seed = 1;
  auto rnd = [&](__nv_bfloat16* p, int64_t n, float lo, float hi) {
    fill_uniform(p, tf::DType::BF16, n, seed++, lo, hi, s);
  };
  // Q4: the MLX 4-bit weights of the benches (quant_weights.h: device layout, scales prescaled), one
  // LinearWeight an op in op order (qkv, o, gate_up, down per layer, lm_head); no bf16 weights.
  std::vector<tf::LinearWeight> q4w;
  auto q4_weight = [&](int n, int k) {
    q4w.push_back(tf::bench::rand_linear_weight(*be, tf::bench::WeightFormat::Mlx4, n, k, seed++));
    if (!q4w.back().subnormal_codes) {
      std::fprintf(stderr, "the 4-bit weights were not prescaled (TF_MLX_SUBNORMAL=0?)\n");
      std::exit(2);
    }
    bytes += double(tf::bench::linear_weight_bytes(q4w.back()));
  };
  for (auto& l : ls) {
    if (kQ4) {
      q4_weight(QKV, H), q4_weight(H, H), q4_weight(2 * I, H), q4_weight(H, I);
      l.wqkv = l.wo = l.wgu = l.wd = nullptr;
    } else {
      l.wqkv = dalloc<__nv_bfloat16>(int64_t(QKV) * H), rnd(l.wqkv, int64_t(QKV) * H, -0.03f, 0.03f);
      l.wo = dalloc<__nv_bfloat16>(int64_t(H) * H), rnd(l.wo, int64_t(H) * H, -0.03f, 0.03f);
      l.wgu = dalloc<__nv_bfloat16>(int64_t(2 * I) * H), rnd(l.wgu, int64_t(2 * I) * H, -0.03f, 0.03f);
      l.wd = dalloc<__nv_bfloat16>(int64_t(H) * I), rnd(l.wd, int64_t(H) * I, -0.02f, 0.02f);
      bytes += 2.0 * (double(QKV) * H + double(H) * H + 2.0 * I * H + double(H) * I);
    }
    l.n1 = dalloc<__nv_bfloat16>(H), rnd(l.n1, H, 0.5f, 1.5f);
    l.n2 = dalloc<__nv_bfloat16>(H), rnd(l.n2, H, 0.5f, 1.5f);
    l.qkv = dalloc<__nv_bfloat16>(QKV), l.o = dalloc<__nv_bfloat16>(H), l.gu = dalloc<__nv_bfloat16>(2 * I);
    l.d = dalloc<__nv_bfloat16>(H), l.h1 = dalloc<__nv_bfloat16>(H), l.h2 = dalloc<__nv_bfloat16>(H);
    l.tqkv = dalloc<uint32_t>(QKV), l.to = dalloc<uint32_t>(H), l.tgu = dalloc<uint32_t>(2 * I);
    l.td = dalloc<uint32_t>(H), l.th1 = dalloc<uint32_t>(H), l.th2 = dalloc<uint32_t>(H);
    const int64_t pool = int64_t(kPoolBlocks) * kBlock * kHk * kD;
    l.kp = dalloc<__nv_bfloat16>(pool), rnd(l.kp, pool, -1.f, 1.f);
    l.vp = dalloc<__nv_bfloat16>(pool), rnd(l.vp, pool, -1.f, 1.f);
    l.qn = dalloc<__nv_bfloat16>(kD), rnd(l.qn, kD, 0.5f, 1.5f);
    l.kn = dalloc<__nv_bfloat16>(kD), rnd(l.kn, kD, 0.5f, 1.5f);
    l.part = dalloc<unsigned long long>(size_t(kHq) * chunks * (kD + 2));
    l.aout = dalloc<uint32_t>(kHq * kD);
  }
  // The sequence's block table: its ctx / kBlock blocks scattered over a pool of twice as many (a fixed
  // shuffle), as the engine's paged pool; every layer's pool uses it.
  std::vector<int32_t> table(kPoolBlocks);
  for (int i = 0; i < kPoolBlocks; ++i) table[i] = i;
  for (int i = kPoolBlocks - 1; i > 0; --i) std::swap(table[i], table[(i * 7919 + 13) % (i + 1)]);
  table.resize(ctx / kBlock);
  int32_t* d_table = dalloc<int32_t>(table.size());
  TF_CUDA_CHECK(cudaMemcpy(d_table, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
  const int pos_slot = table[pos / kBlock] * kBlock + pos % kBlock;
  // Rope (Qwen3: theta 1e6, rotary dim = head dim), as the engine's host table (one float per pair).
  float* inv_freq = dalloc<float>(kD / 2);
  {
    std::vector<float> f(kD / 2);
    for (int i = 0; i < kD / 2; ++i) f[i] = float(1.0 / std::pow(1e6, double(2 * i) / kD));
    TF_CUDA_CHECK(cudaMemcpy(inv_freq, f.data(), f.size() * 4, cudaMemcpyHostToDevice));
  }
  __nv_bfloat16* wlm = nullptr;
  if (kQ4) {
    q4_weight(V, H);
    TF_CUDA_CHECK(cudaDeviceSynchronize());  // the weights were made on the backend's stream
  } else {
    wlm = dalloc<__nv_bfloat16>(int64_t(V) * H);
    rnd(wlm, int64_t(V) * H, -0.03f, 0.03f);
    bytes += 2.0 * V * H;
  }
  __nv_bfloat16* nf = dalloc<__nv_bfloat16>(H);
  rnd(nf, H, 0.5f, 1.5f);
  __nv_bfloat16* emb = dalloc<__nv_bfloat16>(H);
  rnd(emb, H, -1.f, 1.f);
  __nv_bfloat16* zeros = dalloc<__nv_bfloat16>(H);
  uint32_t* temb = dalloc<uint32_t>(H);
  {
    std::vector<uint16_t> hb(H);
    TF_CUDA_CHECK(cudaMemcpy(hb.data(), emb, H * 2, cudaMemcpyDeviceToHost));
    std::vector<uint32_t> hw(hb.begin(), hb.end());
    TF_CUDA_CHECK(cudaMemcpy(temb, hw.data(), H * 4, cudaMemcpyHostToDevice));
  }
  float* logits = dalloc<float>(V);

  // The op list: qkv (add+norm), o (q part of qkv), gate_up (add+norm), down (silu_mul) per layer; lm_head.
  std::vector<Op> ops;
  std::vector<int> op_w;  // the op's weight (q4w index, ops in order), -1: the attention op
  int tiles = 0, nw = 0;
  auto add = [&](Op o) {
    o.tiles = o.n / 16;
    o.tile_begin = tiles, tiles += o.tiles;
    op_w.push_back(nw++);
    ops.push_back(o);
  };
  auto with_attn = [&](Op o, const L& l) {
    o.kp = l.kp, o.vp = l.vp, o.qn = l.qn, o.kn = l.kn, o.part = l.part;
    o.qkv = l.tqkv, o.aout = l.aout, o.inv_freq = inv_freq, o.scale = 1.f / std::sqrt(float(kD)), o.pos = pos;
    o.chunks = chunks, o.table = d_table;
    return o;
  };
  for (int li = 0; li < layers; ++li) {
    L& l = ls[li];
    const uint32_t* res = li == 0 ? temb : ls[li - 1].th2;
    const uint32_t* add_in = li == 0 ? nullptr : ls[li - 1].td;  // layer 0: rms_norm of the embedding
    const int first = li == 0;
    {
      Op qkv{l.wqkv, nullptr, QKV, H, kXAddNorm, 0, add_in, res, l.th1, l.n1, l.tqkv, first, first, 0, 0, 0};
      qkv.rot =
          kv_first ? kHq * kD / 16 : 0;  // k and v tiles first: the attention's last inputs come earlier
      add(qkv);
    }
    if (attn) {  // o's x: the attention of the qkv words (the attention warps), merged by every CTA
      add(with_attn(
          {l.wo, nullptr, H, H, kXAttnMerge, 0, l.aout, nullptr, nullptr, nullptr, l.to, 0, 0, 0, 0, 0}, l));
    } else {
      add({l.wo, nullptr, H, H, kXCopy, 0, l.tqkv, nullptr, nullptr, nullptr, l.to, 0, 0, 0, 0, 0});
    }
    add({l.wgu, nullptr, 2 * I, H, kXAddNorm, 0, l.to, l.th1, l.th2, l.n2, l.tgu, 0, 0, silu_out, 0, 0});
    add({l.wd, nullptr, H, I, silu_out ? kXCopy : kXSilu, 0, l.tgu, nullptr, nullptr, nullptr, l.td, 0, 0, 0,
         0, 0});
  }
  uint32_t* hf = dalloc<uint32_t>(H);
  add({wlm, nullptr, V, H, kXAddNorm, 1, ls[layers - 1].td, ls[layers - 1].th2, hf, nf, logits, 0, 0, 0, 0,
       0});
  const int nops = int(ops.size());
  // TMA: the ops' weights as 2D tensor maps (row-major, no copy), in one device array.
  CUtensorMap* maps = kTma ? dalloc<CUtensorMap>(nops) : nullptr;
  if (kTma) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    TF_CUDA_CHECK(
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q));
    using Encode =
        CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                     const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
    std::vector<CUtensorMap> hm(nops);
    for (int oi = 0; oi < nops; ++oi) {
      const cuuint64_t dims[2] = {cuuint64_t(ops[oi].k), cuuint64_t(ops[oi].n)},
                       strides[1] = {cuuint64_t(ops[oi].k) * 2};
      // gate_up with --silu-out: a tile is 8 gate and their 8 up rows, two boxes of 8 rows
      const cuuint32_t box[2] = {cuuint32_t(kBox), ops[oi].silu_out ? 8u : 16u}, elem[2] = {1, 1};
      if (reinterpret_cast<Encode>(fn)(
              &hm[oi], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(ops[oi].w), dims,
              strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
              CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        std::fprintf(stderr, "cuTensorMapEncodeTiled failed (op %d)\n", oi);
        return 2;
      }
      ops[oi].map = maps + oi;
    }
    TF_CUDA_CHECK(cudaMemcpy(maps, hm.data(), nops * sizeof(CUtensorMap), cudaMemcpyHostToDevice));
  }
  for (int oi = 0; oi < nops && !kTma; ++oi) {  // the packed copies
    Op& o = ops[oi];
    const int stages = (o.n / 16) * (o.k / kStageK / kSW);
    __nv_bfloat16* wp = dalloc<__nv_bfloat16>(int64_t(stages) * kStageBytes / 2);
    if (kQ4)
      pack_q4_kernel<<<stages, 256, 0, s>>>(static_cast<const uint8_t*>(q4w[op_w[oi]].weight.raw()),
                                            static_cast<const uint32_t*>(q4w[op_w[oi]].scales.raw()),
                                            reinterpret_cast<uint8_t*>(wp), o.n, o.k,
                                            o.silu_out ? o.n / 2 : 0);
    else
      pack_kernel<<<stages, 256, 0, s>>>(o.w, wp, o.n, o.k, o.silu_out ? o.n / 2 : 0);
    o.wp = wp;
  }
  Op* dops = dalloc<Op>(nops);
  TF_CUDA_CHECK(cudaMemcpy(dops, ops.data(), nops * sizeof(Op), cudaMemcpyHostToDevice));
  unsigned* cnt = dalloc<unsigned>(nops);
  __nv_bfloat16* dbg = dalloc<__nv_bfloat16>(int64_t(nops) * kMaxK);

  const int xregion = attn ? kAttnRegion : 0;
  const size_t smem = size_t(stages_n) * kStageBytes + kMaxK * 2 + xregion + (kRed * kSlices * 16 + 8) * 4 +
                      3 * stages_n * 8 + (2 * stages_n + 2) * 4;
  if (smem > prop.sharedMemPerBlockOptin) {
    std::fprintf(stderr, "%zu bytes of shared memory: more than the %zu a block may have (fewer --stages)\n",
                 smem, size_t(prop.sharedMemPerBlockOptin));
    return 2;
  }
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(mega_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  TF_CUDA_CHECK(
      cudaFuncSetAttribute(mega_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int per_sm = 0;
  TF_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mega_kernel<false>, kThreads, smem));
  const int grid = prop.multiProcessorCount * per_sm;
  std::printf("smem %zu bytes, %d CTA(s) an SM, grid %d, %d ops, %d tiles\n", smem, per_sm, grid, nops,
              tiles);
  if (per_sm < 1) return 2;
  unsigned epoch = 0;
  long long* prof = dalloc<long long>(size_t(grid) * 8);
  const size_t tl_words = size_t(nops) * (4 + kAttnStamps);  // op boundaries [nops][4], attention's
  unsigned long long* tl = dalloc<unsigned long long>(tl_words);
  bool prof_on = false;
  auto run = [&](__nv_bfloat16* d) {
    ++epoch;
    if (prof_on)
      mega_kernel<true><<<grid, kThreads, smem, s>>>(dops, nops, cnt, epoch, nullptr, stages_n, xregion, d,
                                                     mode, prof, tl);
    else
      mega_kernel<false><<<grid, kThreads, smem, s>>>(dops, nops, cnt, epoch, nullptr, stages_n, xregion, d,
                                                      mode, nullptr, nullptr);
  };

  // Bits: every op's output against linear_bf16 on the x the probe used.
  run(dbg);
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  TF_CUDA_CHECK(cudaGetLastError());
  int bad_ops = 0;
  {
    __nv_bfloat16* yref = dalloc<__nv_bfloat16>(2 * I);
    __nv_bfloat16* sref = dalloc<__nv_bfloat16>(I);
    float* lref = dalloc<float>(V);
    std::vector<uint16_t> r(2 * I);
    std::vector<uint32_t> aw(2 * I);
    std::vector<uint32_t> la(V), lr(V);
    int linear_ops = 0;
    for (int oi = 0; oi < nops; ++oi) {
      const Op& o = ops[oi];
      ++linear_ops;
      const bool f32 = o.y_f32;
      // Q4: the bf16 weights the 4-bit kernels multiply by (quant_linear.h: dequantize_bf16, then linear_bf16
      // gives linear_quantized's bits).
      tf::Tensor deq = kQ4 ? tf::cuda::dequantize_bf16(q4w[op_w[oi]], s) : tf::Tensor();
      linear_bf16(dbg + int64_t(oi) * kMaxK, kQ4 ? deq.raw() : o.w, nullptr, tf::DType::BF16,
                  f32 ? (void*)lref : (void*)yref, f32 ? tf::DType::F32 : tf::DType::BF16, 1, o.n, o.k, s);
      TF_CUDA_CHECK(cudaStreamSynchronize(s));
      int diff = 0;
      if (f32) {
        TF_CUDA_CHECK(cudaMemcpy(la.data(), o.y, V * 4, cudaMemcpyDeviceToHost));
        TF_CUDA_CHECK(cudaMemcpy(lr.data(), lref, V * 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < V; ++i) diff += la[i] != lr[i];
      } else {
        int n = o.n;
        if (o.silu_out) {  // the reference: gate_up, then the engine's silu_mul
          silu_mul(yref, sref, 1, o.n / 2, s);
          TF_CUDA_CHECK(cudaStreamSynchronize(s));
          n = o.n / 2;
        }
        TF_CUDA_CHECK(cudaMemcpy(aw.data(), o.y, n * 4, cudaMemcpyDeviceToHost));
        TF_CUDA_CHECK(cudaMemcpy(r.data(), o.silu_out ? sref : yref, n * 2, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; ++i) diff += (aw[i] & 0xffffu) != r[i] || (aw[i] >> 16) != (epoch & 0xffffu);
      }
      if (diff) {
        ++bad_ops;
        if (bad_ops <= 5) std::printf("  op %d (n %d k %d): %d outputs differ\n", oi, o.n, o.k, diff);
      }
    }
    std::printf("bits: %d of %d linear ops equal linear_bf16 on the same x%s\n", linear_ops - bad_ops,
                linear_ops, bad_ops ? "  <-- MISMATCH" : "");
  }

  // The x the probe made against the engine's ops on the same inputs: add + RMSNorm (add_rms_norm), and the
  // attention (qkv_norm_rope_kv + attention_mma on the probe's qkv words: the o op's x, the pool's new row).
  {
    auto words_to_bf16 = [&](const uint32_t* w, int n, __nv_bfloat16* out) {
      std::vector<uint32_t> hw(n);
      std::vector<uint16_t> hb(n);
      TF_CUDA_CHECK(cudaMemcpy(hw.data(), w, n * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < n; ++i) hb[i] = uint16_t(hw[i] & 0xffffu);
      TF_CUDA_CHECK(cudaMemcpy(out, hb.data(), n * 2, cudaMemcpyHostToDevice));
    };
    auto same = [&](const void* a, const void* b, size_t bytes) {
      std::vector<uint8_t> ha(bytes), hb(bytes);
      TF_CUDA_CHECK(cudaMemcpy(ha.data(), a, bytes, cudaMemcpyDeviceToHost));
      TF_CUDA_CHECK(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
      return ha == hb;
    };
    __nv_bfloat16 *rb = dalloc<__nv_bfloat16>(H), *xb = dalloc<__nv_bfloat16>(H),
                  *hb = dalloc<__nv_bfloat16>(H);
    int norms = 0, norms_ok = 0;
    for (int oi = 0; oi < nops; ++oi) {
      const Op& o = ops[oi];
      if (o.xkind != kXAddNorm) continue;
      words_to_bf16(o.res, H, rb);
      if (o.x) {
        words_to_bf16(o.x, H, xb);
        add_rms_norm(rb, tf::DType::BF16, xb, o.nw, tf::DType::BF16, hb, 1, H, 1e-6f, 0.f, s);
      } else {  // layer 0
        rms_norm(rb, o.nw, tf::DType::BF16, hb, 1, H, 1e-6f, 0.f, s);
      }
      TF_CUDA_CHECK(cudaStreamSynchronize(s));
      ++norms, norms_ok += same(hb, dbg + int64_t(oi) * kMaxK, H * 2);
    }
    std::printf("bits: %d of %d add+norm x equal add_rms_norm's (layer 0: rms_norm's)%s\n", norms_ok, norms,
                norms_ok == norms ? "" : "  <-- MISMATCH");
    bad_ops += norms - norms_ok;
    if (attn) {
      const int64_t pool = int64_t(kPoolBlocks) * kBlock * kHk * kD;
      __nv_bfloat16 *qkvb = dalloc<__nv_bfloat16>(QKV), *qref = dalloc<__nv_bfloat16>(H);
      __nv_bfloat16 *aref = dalloc<__nv_bfloat16>(H), *kref = dalloc<__nv_bfloat16>(pool),
                    *vref = dalloc<__nv_bfloat16>(pool);
      int32_t* d_pos = dalloc<int32_t>(1);
      int32_t* d_slot = dalloc<int32_t>(1);
      int32_t* d_zero = dalloc<int32_t>(1);
      int2* d_tile = dalloc<int2>(1);
      const int2 tile{0, 1};
      TF_CUDA_CHECK(cudaMemcpy(d_pos, &pos, 4, cudaMemcpyHostToDevice));
      TF_CUDA_CHECK(cudaMemcpy(d_slot, &pos_slot, 4, cudaMemcpyHostToDevice));
      TF_CUDA_CHECK(cudaMemcpy(d_tile, &tile, sizeof(tile), cudaMemcpyHostToDevice));
      tf::cuda::DeviceMeta meta;
      meta.positions = d_pos, meta.row_seq = d_zero, meta.slots = d_slot, meta.table_offsets = d_zero;
      meta.tables = d_table, meta.rows = 1, meta.block_size = kBlock;
      int att_ok = 0, kv_ok = 0;
      for (int li = 0; li < layers; ++li) {
        const L& l = ls[li];
        words_to_bf16(l.tqkv, QKV, qkvb);
        TF_CUDA_CHECK(cudaMemcpy(kref, l.kp, pool * 2, cudaMemcpyDeviceToDevice));
        TF_CUDA_CHECK(cudaMemcpy(vref, l.vp, pool * 2, cudaMemcpyDeviceToDevice));
        const int64_t row = int64_t(pos_slot) * kHk * kD;  // the new row: the reference writes its own
        TF_CUDA_CHECK(cudaMemset(kref + row, 0, kHk * kD * 2));
        TF_CUDA_CHECK(cudaMemset(vref + row, 0, kHk * kD * 2));
        if (!qkv_norm_rope_kv(qkvb, qref, l.qn, l.kn, tf::DType::BF16, 1e-6f, 0.f, 1, kHq, kHk, kD, kD,
                              inv_freq, 1.f, false, d_pos, kref, vref, d_slot, s)) {
          std::fprintf(stderr, "qkv_norm_rope_kv refused the shape\n");
          return 2;
        }
        tf::cuda::AttentionMmaArgs a;
        a.q = qref, a.k_pool = kref, a.v_pool = vref, a.out = aref, a.meta = meta;
        a.hq = kHq, a.hk = kHk, a.head_dim = kD, a.scale = 1.f / std::sqrt(float(kD)), a.max_chunks = chunks;
        a.loop_tiles = d_tile, a.num_loop_tiles = 1;
        tf::cuda::attention_mma(a, s);
        TF_CUDA_CHECK(cudaStreamSynchronize(s));
        int o_op = 0;  // this layer's o op
        for (int oi = 0, seen = -1; oi < nops; ++oi)
          if (ops[oi].xkind == kXAttnMerge && ++seen == li) o_op = oi;
        att_ok += same(aref, dbg + int64_t(o_op) * kMaxK, H * 2);
        kv_ok += same(kref + row, l.kp + row, kHk * kD * 2) && same(vref + row, l.vp + row, kHk * kD * 2);
      }
      std::printf(
          "bits: %d of %d layers' attention equal qkv_norm_rope_kv + attention_mma's, %d of %d new K/V "
          "rows%s\n",
          att_ok, layers, kv_ok, layers, att_ok == layers && kv_ok == layers ? "" : "  <-- MISMATCH");
      bad_ops += (layers - att_ok) + (layers - kv_ok);
    }
  }

  // Time: the probe (one launch a forward) and the same linears as today's kernels in a graph.
  auto time_fn = [&](const std::function<void()>& fn) { return tf::bench::time_ms(s, fn, 3, reps); };
  const double mega_ms = time_fn([&] { run(nullptr); });
  TF_CUDA_CHECK(cudaGetLastError());
  // The same as a CUDA graph (how the engine would run it): the tag from a device word bumped by a 1-thread
  // kernel node before the step's.
  double graph_ms = 0;
  {
    unsigned* ew = dalloc<unsigned>(1);
    TF_CUDA_CHECK(cudaMemcpy(ew, &epoch, 4, cudaMemcpyHostToDevice));
    graph_ms = tf::bench::time_graph_ms(s, [&] {
      bump_epoch<<<1, 1, 0, s>>>(ew);
      mega_kernel<false><<<grid, kThreads, smem, s>>>(dops, nops, cnt, 0, ew, stages_n, xregion, nullptr,
                                                      mode, nullptr, nullptr);
    });
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
    TF_CUDA_CHECK(cudaGetLastError());
    unsigned last = 0;
    TF_CUDA_CHECK(cudaMemcpy(&last, ew, 4, cudaMemcpyDeviceToHost));
    epoch = last;  // the direct launches go on from the graph's tags
  }
  {  // one profiled forward: where a CTA's cycles go (means over CTAs, microseconds at the SM clock)
    TF_CUDA_CHECK(cudaMemset(prof, 0, size_t(grid) * 8 * 8));
    {
      std::vector<unsigned long long> init(tl_words, 0ull);  // the attention's maxima start at 0
      for (int q = 0; q < nops; ++q)
        init[4 * q] = init[4 * q + 3] = 0, init[4 * q + 1] = init[4 * q + 2] = ~0ull;
      TF_CUDA_CHECK(cudaMemcpy(tl, init.data(), init.size() * 8, cudaMemcpyHostToDevice));
    }
    {
      const unsigned long long z[32] = {};
      TF_CUDA_CHECK(cudaMemcpyToSymbol(g_acyc, z, sizeof(z)));
    }
    prof_on = true;
    run(nullptr);
    prof_on = false;
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<long long> pv(size_t(grid) * 8);
    TF_CUDA_CHECK(cudaMemcpy(pv.data(), prof, pv.size() * 8, cudaMemcpyDeviceToHost));
    double m[8] = {0};
    for (int b = 0; b < grid; ++b)
      for (int q = 0; q < 8; ++q) m[q] += double(pv[size_t(b) * 8 + q]) / grid;
    int khz = 0;
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const double us = 1e3 / khz;  // microseconds a cycle
    const char* names[8] = {"producer waits for slots",
                            "consumer warps wait for data (sum of 8)",
                            "consumer warps compute (sum of 8)",
                            "warp 0: tile sums, stores, releases",
                            "dependency waits",
                            "making x",
                            "tile barrier waits (sum of 8)",
                            "warp 0 total"};
    std::printf("profile (mode %d, one forward, SM clock %d MHz):\n", mode, khz / 1000);
    for (int q = 0; q < 8; ++q) std::printf("  %-42s %9.1f us\n", names[q], m[q] * us);
    // The op boundaries (globaltimer): per kind of the next op, means over the layers' ops.
    std::vector<unsigned long long> tv(tl_words);
    TF_CUDA_CHECK(cudaMemcpy(tv.data(), tl, tv.size() * 8, cudaMemcpyDeviceToHost));
    if (attn && knob[3]) {  // the attention unit's steps in its own SM's cycles (no stamps in the chain)
      unsigned long long a[2][16];
      TF_CUDA_CHECK(cudaMemcpyFromSymbol(a, g_acyc, sizeof(a)));
      const char* st[8] = {"tasks",          "K/V staged",          "scores", "P V",
                           "partial stored", "merge's partials in", "merged", "(polling)"};
      for (int k = 0; k < 2; ++k) {
        std::printf("  attention steps, us a warp (%s, %llu warps):",
                    k ? "units holding pos" : "q-only units", a[k][15]);
        for (int i = 0; i < 8; ++i)
          if (k || (i != 5 && i != 6))
            std::printf(" %s %.2f |", st[i], a[k][15] ? double(a[k][i]) / a[k][15] / khz * 1e3 : 0.0);
        std::printf("\n");
      }
    }
    if (attn && !knob[3]) {  // the attention's steps after qkv's last tile (means; no stamps in cycle mode)
      double st[kAttnStamps] = {0};
      int n = 0;
      for (int q = 1; q < nops; ++q) {
        if (ops[q].xkind != kXAttnMerge) continue;
        for (int e = 0; e < kAttnStamps; ++e)
          st[e] += (double(tv[4 * nops + kAttnStamps * q + e]) - double(tv[4 * (q - 1)])) * 1e-3;
        ++n;
      }
      std::printf(
          "  attention after qkv's last tile, us (means, latest unit): q tiles stored %.2f, k/v tiles %.2f | "
          "words in %.2f (q-only units %.2f) | K/V staged %.2f | partial stored %.2f | merged %.2f\n",
          st[5] / n, st[7] / n, st[0] / n, st[6] / n, st[1] / n, st[2] / n, st[4] / n);
      std::printf(
          "  the units holding pos, us after qkv's last tile: polling from %.2f | words in: warp 0 %.2f, "
          "warp 1 "
          "%.2f, warp 2 (k/v) %.2f | q-only units' partials stored %.2f | merge's other chunks in %.2f\n",
          st[3] / n, st[8] / n, st[9] / n, st[10] / n, st[12] / n, st[11] / n);
      std::printf(
          "  steps, us after qkv's last tile: tasks done | scores | P V -- the units holding pos %.2f | %.2f "
          "| "
          "%.2f; the q-only units %.2f | %.2f | %.2f\n",
          st[13] / n, st[14] / n, st[15] / n, st[18] / n, st[19] / n, st[20] / n);
    }
    const char* kinds[4] = {"copy (o / down)", "add+norm (qkv, gate_up, lm_head)", "silu (down)",
                            "attention merge (o)"};
    std::printf(
        "  op boundaries, us (means): op time | last CTA done - first CTA done | first x ready - "
        "last tile | last x ready - first\n");
    for (int kd = 0; kd < 4; ++kd) {
      double a = 0, bsum = 0, c = 0, d = 0;
      int n = 0;
      for (int q = 1; q < nops; ++q) {
        if (ops[q].xkind != kd) continue;
        a += (double(tv[4 * q]) - double(tv[4 * (q - 1)])) * 1e-3;
        bsum += (double(tv[4 * (q - 1)]) - double(tv[4 * (q - 1) + 1])) * 1e-3;
        c += (double(tv[4 * q + 2]) - double(tv[4 * (q - 1)])) * 1e-3;
        d += (double(tv[4 * q + 3]) - double(tv[4 * q + 2])) * 1e-3;
        ++n;
      }
      if (n)
        std::printf("    %-34s %7.2f | %7.2f | %7.2f | %7.2f  (%d ops)\n", kinds[kd], a / n, bsum / n, c / n,
                    d / n, n);
    }
  }
  auto q4_linear = [&](const void* x, int oi, void* y, bool y_f32) {
    const tf::LinearWeight& w = q4w[oi];
    const tf::Tensor xt =
        tf::Tensor::borrow(const_cast<void*>(x), {1, w.in_features}, tf::DType::BF16, tf::Device::CUDA);
    tf::Tensor yt = tf::Tensor::borrow(y, {1, w.out_features}, y_f32 ? tf::DType::F32 : tf::DType::BF16,
                                       tf::Device::CUDA);
    tf::cuda::linear_quantized(xt, w, yt, s);
  };
  auto chain = [&] {
    const __nv_bfloat16* x = emb;
    int oi = 0;
    for (auto& l : ls) {
      if (kQ4) {  // today's 4-bit decode kernels (linear_quantized), the same chain
        q4_linear(x, oi++, l.qkv, false), q4_linear(l.qkv, oi++, l.o, false);
        q4_linear(l.o, oi++, l.gu, false), q4_linear(l.gu, oi++, l.d, false);
      } else {
        linear_bf16(x, l.wqkv, nullptr, tf::DType::BF16, l.qkv, tf::DType::BF16, 1, QKV, H, s);
        linear_bf16(l.qkv, l.wo, nullptr, tf::DType::BF16, l.o, tf::DType::BF16, 1, H, H, s);
        linear_bf16(l.o, l.wgu, nullptr, tf::DType::BF16, l.gu, tf::DType::BF16, 1, 2 * I, H, s);
        linear_bf16(l.gu, l.wd, nullptr, tf::DType::BF16, l.d, tf::DType::BF16, 1, H, I, s);
      }
      x = l.d;
    }
    if (kQ4)
      q4_linear(x, oi, logits, true);
    else
      linear_bf16(x, wlm, nullptr, tf::DType::BF16, logits, tf::DType::F32, 1, V, H, s);
  };
  const double chain_ms = tf::bench::time_graph_ms(s, chain);
  // Copy bandwidth (read + write) of 2 GiB, as the benches' roofline.
  const double copy_gbs = tf::bench::copy_bandwidth_gbs(*be);  // the benches' roofline denominator
  const double roof_ms = bytes / (copy_gbs * 1e9) * 1e3;
  std::printf("weights %.2f GB; copy %.0f GB/s; roofline %.3f ms\n", bytes / 1e9, copy_gbs, roof_ms);
  std::printf("persistent probe (norms, silu in): %.3f ms = %.1f%% of roofline (%.0f GB/s)\n", mega_ms,
              100.0 * roof_ms / mega_ms, bytes / (mega_ms * 1e-3) / 1e9);
  std::printf("persistent probe in a CUDA graph (+ the epoch bump node): %.3f ms = %.1f%% of roofline\n",
              graph_ms, 100.0 * roof_ms / graph_ms);
  std::printf("today's linears, graph (no norms): %.3f ms = %.1f%% of roofline (%.0f GB/s)\n", chain_ms,
              100.0 * roof_ms / chain_ms, bytes / (chain_ms * 1e-3) / 1e9);
  return bad_ops ? 1 : 0;
}

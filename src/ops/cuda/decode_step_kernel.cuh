#pragma once
// The device side of the one-kernel decode step (decode_step.h; included by decode_step.cu only). Grown in
// the probe bench/cuda/mega_probe.cu (sessions 15-17; removed in session 18 -- its last version, with
// profiling, 4-bit and TMA variants, is in commit d409656) and measured there: docs/cuda-notes.md.
//
// Roles in a CTA (one CTA an SM, kThreads threads):
// - warp kProducer streams the CTA's 16-feature tiles of every op, in op order, stage by stage into a ring
//   of kRing<W> slots (bulk copies of the packed weights, pack_kernel), as far ahead as the ring allows:
//   weights are constants, so it runs ahead across every dependency;
// - warps 0..7 (consumers) make each op's x in shared memory once (add + RMSNorm, a copy) and compute the
//   CTA's tiles with linear.cu's arithmetic (8 K slices, 32-wide chunks through mma_chunk in order, the
//   slice sums in slice order), storing each output as a tagged word. bf16: one team, a slice a warp. MLX
//   4-bit: two teams of 4 warps taking the CTA's tiles in turn, two slices a warp (two MMA chains side by
//   side; session 30: a 4-bit tile's arithmetic was one chain's latency a warp, -6% at 512 positions);
// - warps 9..11 (attention) stage the row's attention: (KV head, chunk) units dealt over the CTAs, each
//   the q/k norm + rope of its group's heads and (the chunk holding the row) the new K/V row; CTAs 0-7 hold
//   the units of the row's chunk and merge their KV head's partials. A unit's K/V rows come by tensor-map
//   boxes (a block's 16 rows of one head) onto an mbarrier, the partials to merge by bulk copies;
// - between a layer's qkv and o ops (idle otherwise: o's x is the attention's output) the consumer warps
//   compute each of the CTA's units (the chunk's partial with attention_mma's chunk arithmetic, split by
//   keys and output dims over the 8 warps) and, in a merging CTA, check and fold the merge's rounds, handed
//   over on named barriers (session 26: 8192 positions -8%, 512 -2.5% against the attention warps alone).
//
// Latency rule (session 17): under the weight stream, every dependent global access costs a round trip of
// ~2 us, so after a poll the chain touches only shared memory, registers and the polled words themselves;
// everything else it needs is fetched into shared memory before the poll.
//
// Split in three: decode_step_words.cuh (constants, ops, barriers, word polls, make_x),
// decode_step_attention.cuh (the attention units and the merge) and this file (the 4-bit consumer, the
// kernel, its prologue and the weight packers).
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/activation.cuh"
#include "ops/cuda/decode_step_attention.cuh"
#include "ops/cuda/decode_step_words.cuh"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/quant_common.cuh"  // MLX 4-bit dequantisation (the 4-bit linears' instructions)
#if TF_STEP_MOE
#include "ops/cuda/linear_wgmma.h"  // tma_load_4d
#include "ops/cuda/moe_route.cuh"   // route_vals: the MoE chain's routing arithmetic
#endif

namespace tf::cuda::TF_STEP_NS {

// Position s of a tile's stages (in the order the producer sends them) -> the packed stage: owner s %
// owners, its part s / owners (parts: the pieces of a slice, k / 8 / sk; sk: kStageK or kQStageK).
__host__ __device__ inline int packed_stage(int s, int k, int owners, int sk) {
  const int parts = k / kSlices / sk;
  return (s % owners) * parts + s / owners;
}

// Shared memory: x, the ring, the attention region, the slice sums, the norm partials, the slots' mbarriers
// and their stage counters.
template <int W>
constexpr size_t kSmemBytes = kMaxK * 2 + size_t(kRingBytes<W>) + kAttnRegion +
                              (kRed<W> * kSlices * 16 + 8) * 4 + 2 * kRing<W> * 8 + kRing<W> * 4 +
                              (TF_STEP_MOE ? kDredRanks * kSlices * 16 * 4 : 0);  // (the down's dred)

// The 4-bit consumer's variants: plain or subnormal codes (quant_common.cuh's kMlxBf16 / kMlxBf16Sub) x
// groups of 32, 64, 128 (gshift 0-2: a chunk's group is its index >> gshift).
__host__ __device__ constexpr int q4_sel(bool subnormal, int gshift) {
  return (subnormal ? 3 : 0) + gshift;
}
// The SM's cycle counter, low 32 bits (the probe's consumer counters: 32-bit deltas, fewer registers live
// across the tile arithmetic than clock64's).
__device__ __forceinline__ uint32_t clk() {
  uint32_t c;
  asm volatile("mov.u32 %0, %%clock;" : "=r"(c));
  return c;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t r;
  asm volatile("ld.shared.u32 %0, [%1];" : "=r"(r) : "r"(addr));
  return r;
}
// A 4-bit consumer warp's two pieces of a stage (its two K slices: pieces h and h + 1 of each row, 16 chunks
// each), chunk by chunk into two accumulators, the two MMA chains interleaved: for each chunk the bf16
// weights dequant<KIND, 4> makes of rows g and g + 8 (the values linear_quantized multiplies), then
// mma_chunk as the bf16 loop: the bits of linear_quantized, which are linear_bf16's on the dequantized
// weight. cb, sb: piece h's codes (+ 16 t) and scale words (ngb: a piece's scale bytes); xb0 / xb1: the two
// slices' x (+ 16 t). Every lane loads x (a broadcast: the lanes of one t read one address), so that every
// MMA column is x: column 0, the one stored, is the same sum as with zeros in columns 1-7 (each output
// element is its own dot product), without two instructions a chunk zeroing the other lanes' operand.
// The pair's arithmetic on any stage layout: code_at(p, r, q) is the shared address of lane t's 16 bytes of
// quad q of piece p's row g + 8 r, scale_at(p, r, group) that of the row's scale word of the piece's group.
template <int KIND, int GS, bool kRaw, typename CodeAt, typename ScaleAt>
__device__ __forceinline__ void q4_pair_at(float (&acc0)[4], float (&acc1)[4], CodeAt code_at,
                                           ScaleAt scale_at, uint32_t xb0, uint32_t xb1) {
#pragma unroll
  for (int q = 0; q < kQStageK / 128; ++q) {
    uint32_t wv[2][2][4];  // [piece][row g, g + 8][chunk]
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const uint4 w = lds128(code_at(p, r, q));
        wv[p][r][0] = w.x, wv[p][r][1] = w.y, wv[p][r][2] = w.z, wv[p][r][3] = w.w;
      }
    uint32_t sc[2][2] = {};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = 4 * q + i;
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        if (i == 0 || (c >> GS) != ((c - 1) >> GS)) {  // a new group: its scale words (rows g, g + 8)
          sc[p][0] = lds32(scale_at(p, 0, c >> GS));
          sc[p][1] = lds32(scale_at(p, 1, c >> GS));
        }
        const uint32_t w0 = wv[p][0][i], w1 = wv[p][1][i], s0 = sc[p][0], s1 = sc[p][1];
        const uint4 a = kRaw ? make_uint4(w0, s0, w0 ^ s0, s0) : dequant<KIND, 4>(Raw{w0, 0, s0, 0});
        const uint4 bb = kRaw ? make_uint4(w1, s1, w1 ^ s1, s1) : dequant<KIND, 4>(Raw{w1, 0, s1, 0});
        const uint4 xv = lds128((p ? xb1 : xb0) + c * 64);
        mma_chunk(p ? acc1 : acc0, a, bb, xv);
      }
    }
  }
}
template <int SW, int KIND, int GS, bool kRaw = false>
__device__ __forceinline__ void q4_pair(float (&acc0)[4], float (&acc1)[4], uint32_t cb, uint32_t sb, int ngb,
                                        uint32_t xb0, uint32_t xb1, int g) {
  constexpr int kQRowBytes = q_row_bytes(SW);
  const uint32_t swz = (g & 1) * 64;
  q4_pair_at<KIND, GS, kRaw>(
      acc0, acc1,
      [&](int p, int r, int q) {
        return cb + p * (kQStageK / 2) + (g + 8 * r) * kQRowBytes + ((q * 64) ^ swz);
      },
      [&](int p, int r, int grp) { return sb + p * ngb + grp * 64 + 32 * r + g * 4; }, xb0, xb1);
}

// Output feature `lane` of a tile (lane < 16) from its K slices' sums r[slice][16], added in slice order (the
// op chain's fold of its K-split partials).
__device__ __forceinline__ float slice_sum(const float* r, int lane) {
  float sum = r[lane];
#pragma unroll
  for (int e = 1; e < kSlices; ++e) sum += r[e * 16 + lane];
  return sum;
}

// f(std::integral_constant<int, KIND>, std::integral_constant<int, GS>) for a 4-bit op's q4_sel.
template <typename F>
__device__ __forceinline__ void by_qsel(int qsel, F&& f) {
  using std::integral_constant;
#ifdef TF_STEP_ONLY_GS  // (experiment: one group size's variants only)
  if (qsel == q4_sel(false, TF_STEP_ONLY_GS))
    return f(integral_constant<int, kMlxBf16>{}, integral_constant<int, TF_STEP_ONLY_GS>{});
  if (qsel != q4_sel(true, TF_STEP_ONLY_GS)) __trap();
  return f(integral_constant<int, kMlxBf16Sub>{}, integral_constant<int, TF_STEP_ONLY_GS>{});
#endif
  switch (qsel) {  // uniform: one op's tiles
    case q4_sel(false, 0):
      return f(integral_constant<int, kMlxBf16>{}, integral_constant<int, 0>{});
    case q4_sel(false, 1):
      return f(integral_constant<int, kMlxBf16>{}, integral_constant<int, 1>{});
    case q4_sel(false, 2):
      return f(integral_constant<int, kMlxBf16>{}, integral_constant<int, 2>{});
    case q4_sel(true, 0):
      return f(integral_constant<int, kMlxBf16Sub>{}, integral_constant<int, 0>{});
    case q4_sel(true, 1):
      return f(integral_constant<int, kMlxBf16Sub>{}, integral_constant<int, 1>{});
    default:
      return f(integral_constant<int, kMlxBf16Sub>{}, integral_constant<int, 2>{});
  }
}
// A 4-bit team warp's wait for its stage jj's slot to be at that stage: a slot's stages go to either team, so
// a warp may reach its stage while the slot still waits for the other team's stage before it, and the parity
// it waits for would be that of two phases back (already complete); the slot's stage counter, written by the
// producer before its copy, tells when the slot is at this stage's phase.
__device__ __forceinline__ void wait_stage_meta(const int* meta, int jj, int warp) {
  const volatile int* m = meta;
  for (long long n = 0; *m != jj; ++n)
    if (n == (1ll << 26)) {
      printf("decode_step HANG block %d warp %d: stage %d's slot holds %d\n", blockIdx.x, warp, jj, *m);
      __trap();
    }
}
#if TF_STEP_MOE
// The MoE ops' device code (Op::moe). The router op's logit words of a layer (64-bit: tag << 32 | f32 bits),
// polled by a whole warp (lane L: experts L + 32 i), then routed with the chain's routing arithmetic
// (moe_route.cuh's route_vals, as route_row_regs<4>: up to 128 experts): lane r < top_k gets rank r's
// expert and weight.
__device__ __forceinline__ unsigned long long ldv64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// The routing arithmetic (route_vals<4>) as one function, not inlined: the producer and consumer warp 0 run
// the same instructions, and poll_route's warm-up call on zeros, made while the logits are not there yet,
// brings them into the instruction cache. Run 563 (H100, 30B-A3B b=1, one process): bf16 2.863-2.865 ms
// against 2.880-2.882 without the warm-up, MLX 4-bit 2.323 / 2.332 against 2.350 / 2.355. Variant 12 (same
// bits): no warm-up call. Where the routing gap goes (runs 564-566, layer 10's stamps; bf16 / 4-bit): the
// router's last tile ~3.3 / ~5.4 us after the o projection's, the producers' poll done ~0.5 us after it,
// their picks (route4) ~1.3 / ~1.5 us later, their picks' tensor maps prefetched ~0.8 / ~1.5 us after that
// (without the prefetch, variant 14 of run 566, the step took as long: it is off the critical path), the
// first gate_up stage landed ~2 us after. Lost: the logits stored 8 times, each CTA polling copy b % 8
// (run 564: no change), and the warm-up repeated every poll round (run 566: +0.07 ms).
struct Pick {
  int e;
  float w;
};
__device__ __noinline__ Pick route4(float v0, float v1, float v2, float v3, int experts, int top_k, int norm,
                                    int lane) {
  float v[4] = {v0, v1, v2, v3};
  Pick p{0, 0.f};
  route_vals<4>(v, experts, top_k, norm != 0, lane, p.e, p.w);
  return p;
}
// st: the probe's stamp row (null: none), where the poll ends.
__device__ void poll_route(const Op& o, uint32_t tag, int lane, int& pick_e, float& pick_w, bool warm,
                           unsigned long long* st = nullptr) {
  unsigned long long w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = lane + 32 * i < o.experts ? ldv64(o.rlog + lane + 32 * i) : (uint64_t(tag) << 32);
  for (long long n = 0;; ++n) {
    bool ready = true;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (uint32_t(w[i] >> 32) != tag) ready = false, w[i] = ldv64(o.rlog + lane + 32 * i);
    if (__all_sync(0xffffffffu, ready)) break;
    if (warm) {  // (once, while waiting anyway)
      const Pick z = route4(0.f, 0.f, 0.f, 0.f, o.experts, o.top_k, o.norm_topk, lane);
      asm volatile("" ::"r"(z.e), "f"(z.w));
      warm = false;
    }
    if (n == (1ll << 26))
      hang_word(reinterpret_cast<const uint32_t*>(o.rlog), uint32_t(w[0] >> 32) << 16, tag);
  }
  if (st && lane == 0) st[SS::kStampPolled] = gtime();
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = lane + 32 * i < o.experts ? __uint_as_float(uint32_t(w[i])) : 0.f;
  const Pick p = route4(v[0], v[1], v[2], v[3], o.experts, o.top_k, o.norm_topk, lane);
  pick_e = p.e, pick_w = p.w;
}
// The producer's routing of a layer (gu: its gate_up op, followed by its down op): lane r < top_k gets rank
// r's expert and (row copies: no tensor maps) its gate_up and down weights, from the experts' tables loaded
// before the poll (constants; a dependent global load after it would be a round trip under the weight
// stream).
__device__ void route_producer(const Op& gu, const Op& dn, uint32_t tag, int lane, const __nv_bfloat16*& xg,
                               const __nv_bfloat16*& xd, int& xe, int ablate, unsigned long long* st) {
  const bool rows = gu.exmap == nullptr;
  const __nv_bfloat16 *tg[4], *td[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int e = lane + 32 * i;
    const bool load = rows && e < gu.experts;
    tg[i] = load ? gu.ex[e] : nullptr, td[i] = load ? dn.ex[e] : nullptr;
  }
  int pe = lane < gu.top_k ? lane : 0;
  float pw = 0.f;
  if (ablate != 3)
    poll_route(gu, tag, lane, pe, pw, ablate != 12, st);  // (ablation 3, timing: experts 0 .. top_k - 1)
  if (st && lane == 0) st[SS::kStampPicked] = gtime();
  xe = pe;
  xg = xd = nullptr;
  if (!rows) {
    if (lane < gu.top_k) {  // the picks' tensor maps, fetched ahead of their first copies
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(gu.exmap + pe)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(dn.exmap + pe)) : "memory");
      if (gu.exsc) {  // (4-bit experts: their scale words' maps too)
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(gu.exsc + pe)) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(dn.exsc + pe)) : "memory");
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // rank `lane`'s expert pe: table entry i = pe >> 5 of lane pe & 31
    const auto a = reinterpret_cast<const __nv_bfloat16*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(tg[i]), pe & 31));
    const auto d = reinterpret_cast<const __nv_bfloat16*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(td[i]), pe & 31));
    if ((pe >> 5) == i) xg = a, xd = d;
  }
}
// The down's ranks a stage: Op::dranks (two where they fit a slot: the ring then holds twice the down's bytes
// across the wait for its x; run 549, H100, 30B-A3B bf16 b=1: 3.166 -> 2.966-2.971 ms in one process);
// variant 5 (same bits): one, as before run 549.
__device__ __forceinline__ int down_ranks(const Op& o, int ablate) {
  return ablate == 5 ? 1 : o.dranks;
}
// An expert op's stage s of tile `tile` by row copies (Op::exmap null: TF_STEP_MOE_TMA=0; tensor maps:
// expert_stage_tm) into the slot at dst (lanes 0-15: a row's bulk copy each, onto the slot's full barrier,
// armed by lane 0 before). gate_up: stage s = owner s's two K slices (512 k-values) of
// the tile's 16 rows (8 gate rows, then their up rows) of rank r's expert, rows kExRowBytes apart. down
// (dr ranks a stage): stage s = (ranks dr (s / kOwners) ..., owner s % kOwners): for each rank, one after
// the other, rows n0 .. n0 + 15 of its expert, the owner's two slices (inter / 4 k-values), rows inter / 2 +
// 64 bytes apart (tensor maps: 8 inter bytes a rank, unpadded).
__device__ __forceinline__ void expert_stage(const Op& o, int tile, int s, int dr, uint32_t dst, uint32_t bar,
                                             int lane, const __nv_bfloat16* xg, const __nv_bfloat16* xd,
                                             int xe) {
  const int I = o.inter;
  const int r = o.moe == kMoeGateUp ? tile / (I / 8) : s / kOwners * dr, r1 = dr == 1 ? r : r + 1;
  if (o.moe == kMoeGateUp) {
    const int r = tile / (I / 8), f = tile % (I / 8);
    const auto base = reinterpret_cast<const __nv_bfloat16*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(xg), r));
    if (lane < 16) {
      const int row = lane < 8 ? 8 * f + lane : I + 8 * f + lane - 8;
      bulk_copy_g2s(dst + lane * kExRowBytes, base + int64_t(row) * kHidden + s * (kSW * kStageK),
                    kSW * kStageK * 2, bar);
    }
  } else {
    const int ow = s % kOwners;
    const auto base = reinterpret_cast<const __nv_bfloat16*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(xd), r));
    const auto base1 = reinterpret_cast<const __nv_bfloat16*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(xd), r1));
    if (lane < 16 * dr)  // lane 16 q + row: rank q's row
      bulk_copy_g2s(dst + lane * (I / 2 + 64),
                    (lane < 16 ? base : base1) + int64_t(tile * 16 + lane % 16) * I + ow * (I / 4), I / 2,
                    bar);
  }
}

// The bf16 experts' tensor-map stages (Op::exmap: make_rows8_tensor_map's 4D view, a box of 8 rows in the
// 128-byte swizzle; two boxes a rank, by lane 0) from what a tile's stages share, read and derived once a
// tile (BfTileSrc, as the 4-bit instance's Q4TileSrc). Run 555 (H100, 30B-A3B bf16 b=1, one process): 2.953
// / 2.954 ms deriving them a stage, 2.927 / 2.921 once a tile; the same bits.
struct BfTileSrc {
  const CUtensorMap* m;  // gate_up: the tile's expert's map; down: the layer's table (Op::exmap)
  int gu, y0, y1;        // gate_up: 4 f, (inter + 8 f) / 2; down: 8 tile, 8 tile + 4 (row pairs)
  int nb, sbytes;        // down: inter / 256 blocks an owner; a rank's bytes
};
__device__ __forceinline__ BfTileSrc bf_tile_src(const Op& o, int tile, int xe) {
  BfTileSrc q;
  const int I = o.inter;
  q.gu = o.moe == kMoeGateUp, q.nb = I / 256, q.sbytes = o.sbytes;
  if (q.gu) {
    const int r = tile / (I / 8), f = tile - r * (I / 8);
    q.m = o.exmap + __shfl_sync(0xffffffffu, xe, r), q.y0 = 4 * f, q.y1 = (I + 8 * f) / 2;
  } else {
    q.m = o.exmap, q.y0 = tile * 8, q.y1 = tile * 8 + 4;
  }
  return q;
}
__device__ __forceinline__ void expert_stage_tm(const BfTileSrc& q, int s, int dr, uint32_t dst, uint32_t bar,
                                                int lane, int xe) {
  if (q.gu) {
    if (lane == 0) {
      tma_load_4d(dst, q.m, 0, q.y0, 0, 8 * s, bar);
      tma_load_4d(dst + 8192, q.m, 0, q.y1, 0, 8 * s, bar);
    }
    return;
  }
  const int r = s / kOwners * dr, r1 = dr == 1 ? r : r + 1, ow = s % kOwners;
  const int e = __shfl_sync(0xffffffffu, xe, r), e1 = __shfl_sync(0xffffffffu, xe, r1);
  if (lane == 0)
    for (int qq = 0; qq < dr; ++qq) {
      const CUtensorMap* m = q.m + (qq ? e1 : e);
      const uint32_t d = dst + qq * q.sbytes;
      tma_load_4d(d, m, 0, q.y0, 0, q.nb * ow, bar);
      tma_load_4d(d + q.nb * 1024, m, 0, q.y1, 0, q.nb * ow, bar);
    }
}
// The MLX 4-bit instance's expert stages (Op::exmap: codes, Op::exsc: scale words; decode_step_words.cuh's Op
// says how a stage lands), four tensor-map boxes by lane 0 onto the slot's barrier: rows 0-7's codes, rows
// 8-15's, then their scale words. gate_up: tile r (inter / 8) + f, owner s: gate rows 8f .., up rows inter +
// 8f .., quads 4s .. 4s + 3, scale words (16 >> gshift) s ..; down: rank s / kOwners, owner ow = s %
// kOwners, rows 16 tile .., the owner's first chunk c0 = ow inter / 128: quads from c0 / 4, words from its
// group's rounded down to a multiple of 4.
// What a tile's stages share is read and derived once a tile (Q4TileSrc), not once a stage: run 551's ncu put
// ~30% of the producer's time in ~130 instructions a stage (the Op's fields loaded again, two integer
// divisions, the expert's shuffle) while a third of the consumers' samples waited for stages not yet
// requested (the meta wait); now ~60. Run 554 (H100, 30B-A3B MLX 4-bit b=1): 3.68 -> 3.05 ms at 3 stages in
// flight, 3.45 -> 2.82 with every free slot (runs 550 / 554, two processes), the chain's bits.
struct Q4TileSrc {
  const CUtensorMap* cm;  // gate_up: the tile's expert's code map; down: the layer's table (Op::exmap)
  const CUtensorMap* sm;  // and its scale words' (Op::exsc)
  int gu;                 // a gate_up tile (else a down tile)
  int y0, y1;             // gate_up: its gate rows' first (8 f), up rows' (inter + 8 f); down: 16 tile, + 8
  int nw;                 // gate_up: scale words a row of a stage (16 >> gshift); down: Op::dwords
  int cq, gsh, cb;  // down: chunks a part (inter / 32 / dsplit), gshift, a box's code bytes (512 dquads)
  int ds;           // down: stages a rank (Op::dsplit)
};
__device__ __forceinline__ Q4TileSrc q4_tile_src(const Op& o, int tile, int xe) {
  Q4TileSrc q;
  const int I = o.inter;
  q.gsh = o.qsel % 3, q.gu = o.moe == kMoeGateUp;
  if (q.gu) {
    const int r = tile / (I / 8), f = tile - r * (I / 8);
    const int e = __shfl_sync(0xffffffffu, xe, r);
    q.cm = o.exmap + e, q.sm = o.exsc + e, q.y0 = 8 * f, q.y1 = I + 8 * f, q.nw = 16 >> q.gsh;
    q.cq = q.cb = q.ds = 0;
  } else {
    q.cm = o.exmap, q.sm = o.exsc, q.y0 = 16 * tile, q.y1 = 16 * tile + 8, q.nw = o.dwords;
    q.cq = I / 32 / o.dsplit, q.cb = 512 * o.dquads, q.ds = o.dsplit;
  }
  return q;
}
// Stage s of the tile (every lane: the down's expert by shuffle; the lanes with `issue` issue their stage's
// boxes).
__device__ __forceinline__ void expert_stage_q4(const Q4TileSrc& q, int s, uint32_t dst, uint32_t bar,
                                                bool issue, int xe) {
  if (q.gu) {
    if (!issue) return;
    tma_load_3d(dst, q.cm, 0, q.y0, 4 * s, bar);
    tma_load_3d(dst + 2048, q.cm, 0, q.y1, 4 * s, bar);
    tma_load_2d(dst + 4096, q.sm, q.nw * s, q.y0, bar);
    tma_load_2d(dst + 4096 + 32 * q.nw, q.sm, q.nw * s, q.y1, bar);
    return;
  }
  const int r = s / q.ds, e = __shfl_sync(0xffffffffu, xe, r);  // (every lane: its own s)
  if (!issue) return;
  const CUtensorMap *cm = q.cm + e, *sm = q.sm + e;
  const int c0 = (s - r * q.ds) * q.cq;  // the part's first chunk
  tma_load_3d(dst, cm, 0, q.y0, c0 >> 2, bar);
  tma_load_3d(dst + q.cb, cm, 0, q.y1, c0 >> 2, bar);
  tma_load_2d(dst + 2 * q.cb, sm, q4_down_word0(c0, q.gsh), q.y0, bar);
  tma_load_2d(dst + 2 * q.cb + 32 * q.nw, sm, q4_down_word0(c0, q.gsh), q.y1, bar);
}
// A 4-bit consumer warp's two pieces of a gate_up expert stage (expert_stage_q4's boxes at st): piece p (K
// slice 2 owner + p) is quads 2p, 2p + 1 of rows g (the gate box) and g + 8 (the up box, 2048 bytes on),
// lane t's 16 bytes of each at quad * 512 + row * 64 + 16 t; its scale words (8 >> GS a piece) from p (8 >>
// GS) in rows [16][16 >> GS] 4096 bytes on. The arithmetic of q4_pair: its bits.
template <int KIND, int GS>
__device__ __forceinline__ void q4_pair_ex(float (&acc0)[4], float (&acc1)[4], uint32_t st, uint32_t xb0,
                                           uint32_t xb1, int g, int t) {
  constexpr int kNw = 16 >> GS, kNg = kNw / 2;  // scale words a row; a piece's
  const uint32_t cb = st + g * 64 + 16 * t, sb = st + 4096 + g * kNw * 4;
  q4_pair_at<KIND, GS, false>(
      acc0, acc1, [&](int p, int r, int q) { return cb + (2 * p + q) * 512 + r * 2048; },
      [&](int p, int r, int grp) { return sb + 32 * kNw * r + (p * kNg + grp) * 4; }, xb0, xb1);
}
// A 4-bit consumer warp's K slices c0 / C, c0 / C + 1 of one rank of a down expert stage (expert_stage_q4's
// boxes at st, from the stage's first chunk cs: nq quads of rows g, then of rows g + 8, then the scale words
// [16][nw]): C = inter / 256 chunks a slice from chunk c0, chunk c's word at ((c >> 2) - (cs >> 2)) 512 + g
// 64 + 16 t + 4 (c & 3), its scale word at its group less q4_down_word0(cs)'s; xb: the rank's x (+ 16 t). The
// chunks of each slice in order from its first: linear_quantized's chains (moe_decode's down, whose slices
// straddle quads too).
template <int KIND, int GS>
__device__ __forceinline__ void q4_down_ex(float (&acc0)[4], float (&acc1)[4], uint32_t st, int nq, int nw,
                                           int C, int cs, int c0, uint32_t xb, int g, int t) {
  const uint32_t cb = st + g * 64 + 16 * t - (cs >> 2) * 512,
                 sb = st + 2 * 512 * nq + g * nw * 4 - q4_down_word0(cs, GS) * 4;
  for (int i = 0; i < C; ++i)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const int c = c0 + p * C + i;
      const uint32_t wa = lds32(cb + (c >> 2) * 512 + (c & 3) * 4);
      const uint32_t wb = lds32(cb + 512 * nq + (c >> 2) * 512 + (c & 3) * 4);
      const uint32_t sa = lds32(sb + (c >> GS) * 4), sb8 = lds32(sb + 32 * nw + (c >> GS) * 4);
      const uint4 a = dequant<KIND, 4>(Raw{wa, 0, sa, 0}), bb = dequant<KIND, 4>(Raw{wb, 0, sb8, 0});
      mma_chunk(p ? acc1 : acc0, a, bb, lds128(xb + c * 64));
    }
}
// A 4-bit consumer warp's two pieces of a bf16 op's stage in the 4-bit instance (pack_bf16_pieces_kernel:
// the router dequantized to bf16, pieces of sk k-values): rows [16][2 pieces][sk], odd rows' 64-byte chunks
// c and c ^ 1 traded in each piece; slice 2 owner + p's chunks of this part in order. linear_bf16's bits.
__device__ __forceinline__ void bf16_pair(float (&acc0)[4], float (&acc1)[4], uint32_t st, int sk,
                                          uint32_t xb0, uint32_t xb1, int g, int t) {
  const int rb = 4 * sk;  // a row's two pieces
  const uint32_t swz = (g & 1) * 64, base = st + g * rb + 16 * t;
  for (int c = 0; c < sk / 32; ++c)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      const uint32_t at = base + p * 2 * sk + ((c * 64) ^ swz);
      mma_chunk(p ? acc1 : acc0, lds128(at), lds128(at + 8 * rb), lds128((p ? xb1 : xb0) + c * 64));
    }
}
#endif

// W: the linears' weight format (WFormat). kProbe: the benches' instance (DecodeStep::set_probe):
// timestamps of the attention's steps; the product's has none of them in its code.
template <int W, bool kProbe>
__global__ void __launch_bounds__(kThreads, 1) decode_step_kernel(Params prm) {
  constexpr int kSlots = kRing<W>;
  constexpr int SW = sw_of(W), kOwn = kCWarps / SW;     // slices a stage, ring slot owners
  constexpr int SK = W == kWBf16 ? kStageK : kQStageK;  // k-values of a slice's piece
  // A slot's bytes: bf16's stage; 4-bit, the model's largest stage (DecodeStep::make).
  const int slot_b = W == kWBf16 ? kSlotBytes<W> : prm.slot_bytes;
  // The launch's epoch (its tag: the low 16 bits), from the device word step_prologue incremented: a launch
  // replayed from a CUDA graph has fixed arguments.
  const unsigned epoch = *prm.epoch_word;
  const uint32_t tag = epoch & 0xffffu;
  const Op* __restrict__ ops = prm.ops;
  const int nops = prm.nops;
  float* const logits = prm.logits;
  extern __shared__ __align__(128) unsigned char smem[];
  __nv_bfloat16* xs = reinterpret_cast<__nv_bfloat16*>(smem);
  unsigned char* ring = smem + kMaxK * 2;  // then the attention region: a 4-bit ring may run on into it
  __nv_bfloat16* attn_smem = reinterpret_cast<__nv_bfloat16*>(ring + kRingBytes<W>);
  float* red = reinterpret_cast<float*>(ring + kRingBytes<W> + kAttnRegion);  // [kRed][8][16]
  float* nred = red + kRed<W> * kSlices * 16;                                 // [8]
  uint64_t* full = reinterpret_cast<uint64_t*>(nred + 8);
  uint64_t* empty = full + kSlots;
  int* meta = reinterpret_cast<int*>(empty + kSlots);  // [kSlots]: the stage (producer's count) in the slot
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#if TF_STEP_MOE
  float* dred = reinterpret_cast<float*>(meta + kSlots);  // [kDredRanks][8][16]: the 4-bit down's slice sums
  if (threadIdx.x == 0 && (saddr(ring) & 1023) != 0) {  // the experts' swizzled boxes need 1 KB-aligned slots
    printf("decode_step: the ring at shared address %u is not 1024-byte aligned\n", saddr(ring));
    __trap();
  }
#endif
  if (threadIdx.x == 0) {
    for (int i = 0; i < kSlots; ++i)
      mbar_init(saddr(full + i), 1), mbar_init(saddr(empty + i), SW / kTeams<W>), meta[i] = -1;
    mbar_init_fence();
  }
  __syncthreads();
  const int G = gridDim.x, b = blockIdx.x;
  unsigned long long* const stamps = kProbe ? prm.stamps : nullptr;
  // The ring's slots in use. bf16: all of them, or in the probe instance fewer (Params::ring; benches: how
  // much the ring's depth is worth), a multiple of kOwn (slot j % n is then owner j % kOwn's). 4-bit: as
  // many stages as fit, or fewer (DecodeStep::set_ring), any count (the teams check the slot's stage
  // counter); and more where the CTA lends the ring the attention's staging region (Ks, Vs, Qs, right after
  // the ring): a CTA with no attention unit and no merge in this launch (b >= kHk past the other chunks'
  // units; ~92 of 132 CTAs at 512 positions), when Params::nslots_lent is set. Run 539 (H100, Qwen3-8B b=1
  // ctx 512): SW 4 1.829-1.840 ms lent (11 slots there) against 1.873-1.886 with 7 everywhere.
#if TF_STEP_MOE
  // The MoE shape's bf16 ring lends too (since run 550: H100, 30B-A3B bf16 b=1, 3.015 / 3.019 -> 2.991 /
  // 2.992 ms in one process): kStagesLent slots (a multiple of kOwn, as the bf16 slots' owners need) where
  // the CTA has no attention work; kStages otherwise. Variant 8 (same bits): kStages everywhere, as before.
  const bool lend = (W != kWBf16 || prm.ablate != 8) && prm.nslots_lent > prm.nslots && b >= kHk &&
                    b - kHk >= UnitList(prm.positions[0], G, b, prm.early_bias).others;
  const int nslots = lend ? prm.nslots_lent : W != kWBf16 ? prm.nslots : kStages;
  const uint32_t magic = lend ? prm.slot_magic_lent : prm.slot_magic;
  auto wrap = [&](int j) { return W == kWBf16 && !lend ? j / kStages : int(__umulhi(uint32_t(j), magic)); };
#else
  const bool lend = W != kWBf16 && prm.nslots_lent > prm.nslots && b >= kHk &&
                    b - kHk >= UnitList(prm.positions[0], G, b, prm.early_bias).others;
  const int nslots = W != kWBf16 ? (lend ? prm.nslots_lent : prm.nslots)
                     : kProbe && prm.ring > 0 && prm.ring < kSlots && prm.ring % kOwn == 0 ? prm.ring
                                                                                           : kSlots;
  // Stage j's trips around the ring, j / nslots (its slot j - wrap * nslots, its phase parity wrap & 1): for
  // the 4-bit ring, whose slot count is a launch parameter, one multiply-high by ceil(2^32 / nslots) (a
  // division's ~20 dependent instructions in the producer's loop cost SW 2's small stages 14%, run 537).
  const uint32_t magic = lend ? prm.slot_magic_lent : prm.slot_magic;
  auto wrap = [&](int j) { return W == kWBf16 ? j / nslots : int(__umulhi(uint32_t(j), magic)); };
#endif

  if (warp > kProducer) {  // attention warps: the (KV head, chunk) units of every layer dealt to this CTA
    Row row;
    row.pos = prm.positions[0];
    row.slot = prm.slots[0];
    row.table = prm.tables + prm.table_offsets[prm.row_seq[0]];
    AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(attn_smem) + kAttnBytes);
    {  // the launch's constants in shared memory (published by the first unit's barrier)
      const int at = threadIdx.x - (kProducer + 1) * 32;
      if (at < kD / 2) {  // elementwise.cu's qk_norm_rope_kv: sincosf(pos * inv_freq), times the factor
        float sn, cs;
        sincosf(float(row.pos) * prm.inv_freq[at], &sn, &cs);
        P->rsin[at] = sn * prm.rope_factor, P->rcos[at] = cs * prm.rope_factor;
      }
      if (at == 0) P->eps = prm.qk_eps;
    }
    // A layer's units (UnitList; the consumer warps compute their scores, P V and partials).
    const UnitList units(row.pos, G, b, prm.early_bias);
    if (threadIdx.x == (kProducer + 1) * 32) {
      for (int i = 0; i < 4; ++i) mbar_init(saddr(&P->bars[i]), 1);
      mbar_init_fence();
    }                            // published by the unit's first barrier
    uint32_t par = 0, mpar = 0;  // the staging mbarriers' phase (one a unit), the merge buffers' (bits 0, 1)
    uint32_t pre[kUnitWords] = {};  // the next unit's q / k / v words (attention_unit)
    for (int op = 0; op < nops; ++op) {
      if (ops[op].xkind != kXAttnMerge) continue;
      unsigned long long* st = stamp_row(stamps, op, G, b);
      int h = 0, c = 0;
      bool have = units.at(0, h, c), staged = false;
      for (int i = 0; have; ++i) {  // one call site: the unit is inlined once
        int nh = 0, nc = 0;
        const bool next = units.at(i + 1, nh, nc);
        attention_unit(ops[op], row, h, c, staged, nh, next ? nc : -1, attn_smem, tag, par, mpar, st, i, pre);
        par ^= 1;
        h = nh, c = nc, have = next, staged = next;
      }
#if !TF_STEP_MOE
      if (prm.l2pf > 0 && warp == kProducer + 1 && op + 1 < nops) {
        // This CTA's first l2pf tiles of the layer's gate_up bulk-prefetched into L2 by lane 0 once the
        // layer's qkv has stored its last word: bytes the producer can ring in only after the attention and
        // o, while the weight stream idles behind the attention's chain (~12 us a layer at 512 positions,
        // run 556's timeline). No one waits for it (its issue may be held while the bytes move); the next
        // layer's units are ~45 us away. Same bits: only where the weights come from changes. Runs 573-574
        // (H100, Qwen3-8B MLX 4-bit b=1 ctx 512): 4 tiles 1.833 -> 1.797 ms; decode_step_host.cuh's l2pf_of.
        if (lane == 0) {
          const uint32_t* last = ops[op].qkv + (ops[op - 1].n - 1);
          long long n = 0;  // (bounded: a prefetch is never worth a hang)
          while ((ldv(last) >> 16) != tag && ++n < (1ll << 22)) __nanosleep(128);
          const Op& u = ops[op + 1];
          const int64_t tb = int64_t(u.k / SK / SW) * u.sbytes;  // a tile's stages, contiguous
          int i = u.tile_begin + first_tile_of(b, u.tile_begin, G);
          for (int m = 0; m < prm.l2pf && i < u.tile_begin + u.tiles; ++m, i += G)
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(u.wp + (i - u.tile_begin) * tb),
                         "r"(uint32_t(tb))
                         : "memory");
        }
        __syncwarp();
      }
#endif
    }
    return;
  }
  if (warp == kProducer) {  // this CTA's tiles, stage by stage, as far ahead as the ring allows
    // Tiles i = b, b + G, ... (round-robin over the CTAs, op after op); the consumers walk the same sequence.
    // Each slot's stage counter is written before its copy (the 4-bit teams' check).
    int j = 0, op = 0;
    long long p_empty = 0, p_t0 = clock64();  // the probe's counters
    int p_layer = 0;
#if TF_STEP_MOE
    int routed = -1;                                   // the gate_up op whose layer's routing the lanes hold
    const __nv_bfloat16 *xg = nullptr, *xd = nullptr;  // lane r < top_k: rank r's gate_up / down weights
    int xe = 0;                                        // and its expert
#endif
    for (int i = b;; i += G) {
      op = op_of_tile(ops, nops, op, i);
      if (op == nops) break;
      if (kProbe && stamps && op / kOpsPerLayer != p_layer) {
        if (lane == 0 && p_layer * kOpsPerLayer + kOpsPerLayer < nops) {
          unsigned long long* row = layer_row(stamps, p_layer, G, b);
          const long long now = clock64();
          row[SS::kStampWaitEmpty] = p_empty, row[SS::kStampProdCycles] = now - p_t0;
          p_t0 = now;
        }
        p_empty = 0, p_layer = op / kOpsPerLayer;
      }
      const int tile = i - ops[op].tile_begin;
      const unsigned char* w = ops[op].wp;
      const int k = ops[op].k, sbytes = ops[op].sbytes;
#if TF_STEP_MOE
      const int mk = ops[op].moe;
      if (mk >= kMoeGateUp) {  // the layer's routing: its experts' weights (the producer waits here)
        const int gu = mk == kMoeGateUp ? op : op - 1;
        if (routed != gu) {  // (st: the probe's timeline, lane 0's stamp row of the layer)
          unsigned long long* st =
              kProbe && stamps && lane == 0 && gu / kOpsPerLayer * kOpsPerLayer + kOpsPerLayer < nops
                  ? stamp_row(stamps, gu, G, b)
                  : nullptr;
          if (st) st[SS::kStampRouteIn] = gtime();
          route_producer(ops[gu], ops[gu + 1], tag, lane, xg, xd, xe, prm.ablate, st), routed = gu;
          if (st) st[SS::kStampRouted] = gtime();
        }
      }
      // The down: dr ranks a stage (down_ranks; the 4-bit instance: one), each 16 rows x inter / 2 bytes.
      const int dr = mk == kMoeDown && W == kWBf16 ? down_ranks(ops[op], prm.ablate) : 1;
      const int sk = W != kWBf16 && ops[op].sk ? ops[op].sk : SK;  // k-values a piece (Op::sk)
      const int stages =
          mk == kMoeDown ? ops[op].top_k / dr * (W == kWBf16 ? kOwners : ops[op].dsplit) : k / sk / SW;
      const int msb = dr * sbytes;  // a stage's bytes (the down's: dr ranks' sbytes)
      // The in-flight cap in bytes: as many of the op's stages as prm.inflight 16 KB stages.
      const int inflight = prm.inflight > 0 ? (prm.inflight * kStageBytes + msb - 1) / msb : 0;
      Q4TileSrc qt{};  // (the 4-bit instance's expert tiles)
      BfTileSrc qb{};  // (bf16 experts by tensor maps)
      const bool tm = W == kWBf16 && mk >= kMoeGateUp && ops[op].exmap;
      if constexpr (W != kWBf16) {
        if (mk >= kMoeGateUp) qt = q4_tile_src(ops[op], tile, xe);
      } else if (tm) {
        qb = bf_tile_src(ops[op], tile, xe);
      }
#else
      const int stages = k / SK / SW;
      // The in-flight cap for this tile: Params::inflight_gu for the gate_up's tiles past the l2pf this CTA
      // prefetched (requested while the gate_up runs: no hop waits on them until the down's x), else
      // Params::inflight (run 577, H100 MLX 4-bit: 4 stages there 1.812 -> 1.792 ms; decode_step_host.cuh's
      // inflight_gu_of). The CTA's tiles of an op are first_tile_of + m G, first_tile_of < G: tile / G is m.
      int inflight = prm.inflight;
      if (inflight > 0 && prm.inflight_gu > 0 && op % kOpsPerLayer == kOpGateUp && tile / G >= prm.l2pf)
        inflight = prm.inflight_gu;
#endif
#if TF_STEP_MOE
      if (W != kWBf16 && inflight == 0 && prm.ablate != 10) {
        // The 4-bit instance's stages `lanes` at a time, lane l stage s + l: each lane waits for its
        // slot, arms its barrier and issues its copies. One lane's wait, arming and copies take ~600 cycles a
        // stage whatever its bytes (runs 558-559, bench/cuda/tma_probe.cu: ~320 cycles from the loop's top
        // past the wait on a slot whose phase is done -- the try_wait and the probe's index divisions --,
        // ~230 issuing one bulk copy, ~50-80 a further box), which capped one producer
        // lane's 4.5 KB stages at ~1.6-1.9 TB/s and the down's 2.5 KB ones at ~0.8; four lanes a warp
        // instruction reached ~3.0 TB/s and ~1.6. Variant 10 (same bits): one stage at a time, as before; 11:
        // 8 lanes.
        const int lanes = prm.ablate == 11 ? 8 : 4, j0 = j;
        for (int s = 0; s < stages; s += lanes) {
          const int ss = s + lane, jj = j0 + ss;
          const bool act = lane < lanes && ss < stages;
          const int wj = wrap(jj), slot = jj - wj * nslots;
          const long long pw = kProbe ? clock64() : 0;
          if (act && jj >= nslots) wait_bar_lane(saddr(empty + slot), (wj & 1) ^ 1, kEmptyStage, jj);
          if (kProbe) p_empty += clock64() - pw;
          if (act) {
            meta[slot] = jj;
            mbar_arrive_expect_tx(saddr(full + slot), uint32_t(msb));
          }
          if (mk >= kMoeGateUp)
            expert_stage_q4(qt, ss, saddr(ring + slot * slot_b), saddr(full + slot), act, xe);
          else if (act)
            bulk_copy_g2s(saddr(ring + slot * slot_b),
                          w + (int64_t(tile) * stages + packed_stage(ss, k, kOwn, sk)) * sbytes,
                          uint32_t(sbytes), saddr(full + slot));
          __syncwarp();
        }
        j = j0 + stages;
        continue;
      }
#endif
      for (int s = 0; s < stages; ++s, ++j) {
        // Stage s of a tile belongs to owner s % kOwners. bf16: the ring's slots are a multiple of kOwners,
        // so slot j % nslots is only ever used by owner j % kOwners, and each warp pair waits on every phase
        // of its own slots in order (bulk copies complete out of order; a parity wait cannot tell phases
        // apart). 4-bit: a slot serves any owner; its readers first wait for the stage counter (meta).
        const int wj = wrap(j), slot = j - wj * nslots;
        const long long pw = kProbe ? clock64() : 0;
        if (j >= nslots) wait_bar(saddr(empty + slot), (wj & 1) ^ 1, kEmptyStage, j);
        if (inflight > 0 && inflight < nslots && j >= inflight) {
          const int jl = j - inflight;
          // At most `inflight` stages requested and not landed: stage j waits for stage j - inflight to land
          // (its slot's full barrier cannot have been re-armed: that is stage j - inflight + nslots > j).
          const int wl = wrap(jl);
          wait_bar(saddr(full + (jl - wl * nslots)), wl & 1, kFullStage, jl);
        }
        if (kProbe) p_empty += clock64() - pw;
#if TF_STEP_MOE
        if (mk >= kMoeGateUp) {
          if (lane == 0) {
            if constexpr (kTeams < W >> 1) meta[slot] = j;  // (read by the 4-bit teams only)
            mbar_arrive_expect_tx(saddr(full + slot), uint32_t(msb));
          }
          __syncwarp();
          if constexpr (W == kWBf16) {
            if (tm)
              expert_stage_tm(qb, s, dr, saddr(ring + slot * slot_b), saddr(full + slot), lane, xe);
            else
              expert_stage(ops[op], tile, s, dr, saddr(ring + slot * slot_b), saddr(full + slot), lane, xg,
                           xd, xe);
          } else
            expert_stage_q4(qt, s, saddr(ring + slot * slot_b), saddr(full + slot), lane == 0, xe);
          __syncwarp();
          continue;
        }
#endif
        if (lane == 0) {
          if constexpr (kTeams < W >> 1) meta[slot] = j;  // (read by the 4-bit teams only)
          mbar_arrive_expect_tx(saddr(full + slot), uint32_t(sbytes));
#if TF_STEP_MOE
          bulk_copy_g2s(saddr(ring + slot * slot_b),
                        w + (int64_t(tile) * stages + packed_stage(s, k, kOwn, sk)) * sbytes,
                        uint32_t(sbytes), saddr(full + slot));
#else
          bulk_copy_g2s(saddr(ring + slot * slot_b),
                        w + (int64_t(tile) * stages + packed_stage(s, k, kOwn, SK)) * sbytes,
                        uint32_t(sbytes), saddr(full + slot));
#endif
        }
        __syncwarp();
      }
    }
    return;
  }

  // Consumers: the tiles the producer chose, in its order (the CTA's tiles b, b + G, ... op after op; every
  // warp walks the whole sequence). A team computes its tiles (tile n of the sequence: team n % kTeams), each
  // warp kSPW consecutive K slices of it (in one stage: the slot's readers are SW / kSPW warps).
  constexpr int kNT = kTeams<W>, kTW = kCWarps / kNT, kSPW = kSlices / kTW;
  const int g = lane / 4, t = lane % 4;
  const int team = warp / kTW, q = warp % kTW, slice0 = kSPW * q;  // this warp's first slice
  const int owner = slice0 / SW, half = slice0 % SW;               // its stages' owner, its first piece
  const int c_pos = prm.positions[0];                              // the row
  const UnitList c_units(c_pos, G, b, prm.early_bias);
  uint32_t c_par = 0;                // the V staging mbarrier's phase (one a unit, as the attention warps')
  int j = 0, x_op = -1, tcount = 0;  // tcount: the team's tiles so far
  uint32_t c_full = 0, c_x = 0, c_bar = 0, c_fence = 0, c_t0 = clk();  // the probe's counters (warp 1)
  int c_layer = 0;
  const bool counting = kProbe && stamps && threadIdx.x == 32;  // warp 1 (warp 0 also stores tiles)
  // The probe's tile log (warp 0, lane 0): the o and gate_up ops' first tiles, and gate_up's cycles.
  const bool logging = kProbe && stamps && prm.tile_log && threadIdx.x == 0;
  int log_ti = 0, log_op = -1;  // the tile's index among warp 0's tiles of its op; that op
  uint32_t g_cyc[6] = {0, 0, 0, 0, 0, 0}, g_t = 0;
  auto tlog = [&](int op, int ev) {
#if TF_STEP_MOE  // (the o op's and the gate_up's logs; the dense kernel's own expression below is kept as it
                 // was: one form for both changed its SASS)
    if (kProbe && logging && (op % kOpsPerLayer == 1 || op % kOpsPerLayer == kOpGateUp) &&
        op / kOpsPerLayer * kOpsPerLayer + kOpsPerLayer < nops && log_ti < SS::kStampLogTiles)
      stamp_row(
          stamps, op, G,
          b)[SS::kStampTileLog +
             ((op % kOpsPerLayer == 1 ? 0 : 1) * SS::kStampLogTiles + log_ti) * SS::kStampTileEvents + ev] =
          gtime();
#else
    if (kProbe && logging && (op % 4 == 1 || op % 4 == 2) && op / 4 * 4 + 4 < nops &&
        log_ti < SS::kStampLogTiles)
      stamp_row(
          stamps, op, G,
          b)[SS::kStampTileLog + ((op % 4 - 1) * SS::kStampLogTiles + log_ti) * SS::kStampTileEvents + ev] =
          gtime();
#endif
  };
  auto gcount = [&](int op, int slot) {  // cycles since the last call into g_cyc[slot] (gate_up only)
    if (!(kProbe && logging)) return;
    const uint32_t now = clk();
    if (op % kOpsPerLayer == kOpGateUp) g_cyc[slot] += now - g_t;
    g_t = now;
  };
  int op = 0;
#if TF_STEP_MOE
  float pick_w = 0.f;  // warp 0, lane r < top_k: rank r's weight in the layer's combine
  int routed = -1;     // warp 0: the gate_up op whose layer's routing pick_w holds
#endif
  for (int i = b, n = 0;; i += G, ++n) {
    op = op_of_tile(ops, nops, op, i);
    const bool mine = n % kNT == team;
    if (kProbe && logging && mine) {
      if (op != log_op) {  // a new op: store the gate_up cycles of the op before it
        if (log_op >= 0 && log_op % kOpsPerLayer == kOpGateUp &&
            log_op / kOpsPerLayer * kOpsPerLayer + kOpsPerLayer < nops) {
          unsigned long long* row = stamp_row(stamps, log_op, G, b);
          for (int e = 0; e < 6; ++e) row[SS::kStampGuCycles + e] = g_cyc[e];
        }
        log_ti = 0, log_op = op;
        for (int e = 0; e < 6; ++e) g_cyc[e] = 0;
      }
      g_t = clk();
      if (op % kOpsPerLayer == kOpGateUp) ++g_cyc[5];
      tlog(op, 0);
    }
    if (counting && op / kOpsPerLayer != c_layer) {
      if (c_layer * kOpsPerLayer + kOpsPerLayer < nops) {
        unsigned long long* row = layer_row(stamps, c_layer, G, b);
        const uint32_t now = clk();
        row[SS::kStampWaitFull] = c_full, row[SS::kStampWaitX] = c_x, row[SS::kStampWaitBar] = c_bar;
        row[SS::kStampFence] = c_fence;
        row[SS::kStampLayerCycles] = now - c_t0;
        c_t0 = now;
      }
      c_full = c_x = c_bar = c_fence = 0, c_layer = op / kOpsPerLayer;
    }
#if TF_STEP_MOE
    // The attention of a layer whose o op holds no tile of this CTA (128 tiles for more CTAs) all the same:
    // the attention warps stage the CTA's units of every layer and wait for the consumers to compute them.
    for (int a = x_op + 1; a < op; ++a)
      if (ops[a].xkind == kXAttnMerge) {  // as the x-making's below (one lambda for both moved the dense
                                          // kernel's registers: its SASS is kept as it was)
        int h = 0, c = 0;
        for (int u = 0; c_units.at(u, h, c); ++u, c_par ^= 1)
          unit_scores_pv(ops[a], c_pos, h, c, attn_smem, prm.scale, c_par);
        if (b < kHk && c_units.C > 1) merge_fold_help(ops[a], b, c_units.C - 1, attn_smem, tag);
        x_op = a;
      }
#endif
    if (op >= nops) break;
    const Op& o = ops[op];
    const int tile = i - o.tile_begin, n0 = tile * 16, k = o.k;
    if (op != x_op) {  // every team: the op's x (and its attention) take all consumer warps
      const uint32_t cx = kProbe ? clk() : 0;
      if (o.xkind == kXAttnMerge) {  // the layer's attention units, then (a merging CTA) the merge
        int h = 0, c = 0;
        for (int u = 0; c_units.at(u, h, c); ++u, c_par ^= 1)
          unit_scores_pv(o, c_pos, h, c, attn_smem, prm.scale, c_par);
        if (b < kHk && c_units.C > 1) merge_fold_help(o, b, c_units.C - 1, attn_smem, tag);
      }
#if TF_STEP_MOE
      // The combine's weights (the chain's routing of the logits), where warp 0 has not routed the layer at
      // its gate_up's x (below; variant 4, or a CTA without a gate_up tile).
      if (o.moe == kMoeDown && warp == 0 && routed != op - 1) {
        int pick_e = 0;
        poll_route(o, tag, lane, pick_e, pick_w, prm.ablate != 12);
        routed = op - 1;
      }
#endif
      make_x(o, xs, nred, tile == 0, tag);
#if TF_STEP_MOE
      // At the gate_up's x, warp 0 routes the layer for the down's combine: the gate_up's first stage lands
      // only after the producer's routing anyway, while at the down's x the routing held every consumer warp
      // (make_x's barrier). Run 546 (H100, 30B-A3B b=1): 3.038 -> 2.952 ms. Variant 4
      // (TF_STEP_MOE_ABLATE=4, set_ablate(4); same bits): the routing at the down's x, as before.
      if (o.moe == kMoeGateUp && warp == 0 && prm.ablate != 4) {
        int pick_e = 0;
        poll_route(o, tag, lane, pick_e, pick_w, prm.ablate != 12);
        routed = op;
      }
#endif
      if (kProbe) c_x += clk() - cx;
      if (kProbe && logging) g_t = clk();  // (x made: not counted)
      x_op = op;
      if (stamps && threadIdx.x == 0 && o.xkind == kXAttnMerge)
        stamp_row(stamps, op, G, b)[SS::kStampXMade] = gtime();
    }
#if TF_STEP_MOE
    if (W != kWBf16 && o.moe == kMoeDown) {
      // The MLX 4-bit instance's down: each warp its ranks' parts (their stages, expert_stage_q4), each
      // part's slice pairs (each slice's chunks in order: the same chains), the slice sums into dred; then
      // one barrier and warp 0 folds the ranks in order from 0 (moe combine's fmas on each rank's slice sums
      // rounded to bf16). Stages of halves (Op::dsplit 2, the default): warp w takes ranks w, w + kCWarps,
      // ..., both halves. Of owners (dsplit 4): team tm ranks tm, tm + kNT, ..., each warp its owner's part.
      const int I = o.inter, C = I / 256, ds = o.dsplit, spp = kSlices / ds / 2;  // slice pairs a stage
      if (i - G >= o.tile_begin) bar_consumers();  // (warp 0 has read the tile before's dred)
      const bool halves = ds == 2;
      const int r0 = halves ? warp : team, rstep = halves ? kCWarps : kNT;  // this warp's ranks
      const int p0 = halves ? 0 : owner, p1 = halves ? ds : owner + 1;      // and parts of a rank
      for (int r = r0; r < o.top_k; r += rstep)
        for (int p = p0; p < p1; ++p) {
          const int jj = j + r * ds + p, wjj = wrap(jj), slot = jj - wjj * nslots;
          wait_stage_meta(meta + slot, jj, warp);
          wait_bar(saddr(full + slot), wjj & 1, kFullStage, jj);
          for (int m = 0; m < spp; ++m) {
            const int sl = 2 * (p * spp + m);  // the pair's first slice
            float a0[4] = {0.f, 0.f, 0.f, 0.f}, a1[4] = {0.f, 0.f, 0.f, 0.f};
            if (prm.ablate != 1)
              by_qsel(o.qsel, [&](auto kd, auto gs) {
                q4_down_ex<decltype(kd)::value, decltype(gs)::value>(
                    a0, a1, saddr(ring + slot * slot_b), o.dquads, o.dwords, C, p * spp * 2 * C, sl * C,
                    saddr(xs) + 16 * t + r * I * 2, g, t);
              });
            float* rr = dred + r * kSlices * 16 + sl * 16;
            if (t == 0) rr[g] = a0[0], rr[g + 8] = a0[2], rr[16 + g] = a1[0], rr[24 + g] = a1[2];
          }
          fence_proxy_async();  // this warp's reads of the slot before the next bulk copy into it
          __syncwarp();
          if (lane == 0) mbar_arrive(saddr(empty + slot));
        }
      bar_consumers();
      float sum = 0.f;
      if (warp == 0)
        for (int r = 0; r < o.top_k; ++r) {
          const float wr = __shfl_sync(0xffffffffu, pick_w, r);
          const float* rr = dred + r * kSlices * 16;
          if (lane < 16) {
            const float y = slice_sum(rr, lane);
            sum = __fmaf_rn(wr, __bfloat162float(__float2bfloat16(y)), sum);
          }
        }
      if (warp == 0 && lane < 16) static_cast<uint32_t*>(o.y)[n0 + lane] = word_of(sum, tag);
      if (stamps && threadIdx.x == 0 && op / kOpsPerLayer * kOpsPerLayer + kOpsPerLayer < nops)
        stamp_row(stamps, op, G, b)[SS::kStampDownLast] = gtime();  // (the probe's timeline)
      j += o.top_k * o.dsplit;
      continue;
    }
    if (o.moe == kMoeDown) {
      // Every rank's 16 rows: per rank, each warp its K slice (inter / 8: chunks through mma_chunk in
      // order, the routed down GEMM's), the slice sums in slice order rounded to bf16 (its y), then warp 0
      // folds them in rank order from 0 (moe combine's fmas) into the output words: a barrier a rank, red
      // double-buffered by rank as by tile, warp 0 folding each rank after it. (Session 62's variants 6, one
      // barrier a tile with every rank's slice sums in dred, and 7, the down's x polled by rank a warp its
      // slice, lost in run 549 and are retired: 3.212 and 3.170 ms against 3.166.)
      const int I = o.inter, sl = I / kSlices, rs = I / 2 + 64;  // a slice's k-values; a stage row's bytes
      const int dr = down_ranks(o, prm.ablate);                  // ranks a stage
      float sum = 0.f;
      for (int r = 0; r < o.top_k; ++r) {
        const int jj = j + r / dr * kOwn + owner, wjj = wrap(jj), slot = jj - wjj * nslots, q = r % dr;
        if (q == 0) wait_bar(saddr(full + slot), wjj & 1, kFullStage, jj);
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        const uint32_t xb = saddr(xs) + 16 * t + (r * I + slice0 * sl) * 2;
        if (o.exmap) {  // two boxes of 8 rows x I / 256 blocks (make_rows8_tensor_map's swizzled lines)
          const uint32_t base = saddr(ring + slot * slot_b) + q * o.sbytes, box = I / 256 * 1024;
          for (int c = 0; c < (prm.ablate == 1 ? 0 : sl / 32); ++c) {
            const uint32_t at = rows8_addr(base, g, half * sl + 32 * c + 8 * t);
            mma_chunk(acc, lds128(at), lds128(at + box), lds128(xb + c * 64));
          }
        } else {
          const uint32_t base = saddr(ring + slot * slot_b) + q * 16 * rs + half * (sl * 2) + 16 * t;
          for (int c = 0; c < (prm.ablate == 1 ? 0 : sl / 32); ++c) {
            const uint4 a = lds128(base + g * rs + c * 64);
            const uint4 bb = lds128(base + (g + 8) * rs + c * 64);
            mma_chunk(acc, a, bb, lds128(xb + c * 64));
          }
        }
        if (q == dr - 1) {      // the stage's last rank
          fence_proxy_async();  // this warp's reads of the slot before the next bulk copy into it
          __syncwarp();
          if (lane == 0) mbar_arrive(saddr(empty + slot));
        }
        float* rr = red + (tcount & 1) * kSlices * 16;
        if (t == 0) rr[slice0 * 16 + g] = acc[0], rr[slice0 * 16 + g + 8] = acc[2];
        bar_consumers();
        if (warp == 0) {
          const float wr = __shfl_sync(0xffffffffu, pick_w, r);
          if (lane < 16) {
            const float y = slice_sum(rr, lane);
            sum = __fmaf_rn(wr, __bfloat162float(__float2bfloat16(y)), sum);
          }
        }
        ++tcount;
      }
      if (warp == 0 && lane < 16) static_cast<uint32_t*>(o.y)[n0 + lane] = word_of(sum, tag);
      if (stamps && threadIdx.x == 0 && op / kOpsPerLayer * kOpsPerLayer + kOpsPerLayer < nops)
        stamp_row(stamps, op, G, b)[SS::kStampDownLast] = gtime();
      j += o.top_k / dr * kOwn;
      continue;
    }
    const bool expert_rows = o.moe == kMoeGateUp;  // rows kExRowBytes apart, not swizzled
#else
    constexpr bool expert_rows = false;
#endif
#if TF_STEP_MOE
    const int sk = W != kWBf16 && o.sk ? o.sk : SK;  // k-values a piece (Op::sk)
#else
    constexpr int sk = SK;
#endif
    const int stages = k / sk / SW, spw = k / kSlices / sk;  // spw: parts of a slice
    if (!mine) {                                             // the other team's tile
      j += stages;
      continue;
    }
    float acc[kSPW][4] = {};
    const uint32_t xbase = saddr(xs) + 16 * t;
    for (int part = 0; part < spw; ++part) {  // this warp's K slices, in order
      const int jj = j + part * kOwn + owner, wjj = wrap(jj), slot = jj - wjj * nslots;
      const uint32_t cw = kProbe ? clk() : 0;
      if (kProbe && logging) gcount(op, 2);  // (the arithmetic of the previous part)
      if constexpr (kNT > 1) {
        // (wait_stage_meta's loop, written out: the call changed the dense kernel's SASS)
        const volatile int* m = meta + slot;
        for (long long n = 0; *m != jj; ++n)
          if (n == (1ll << 26)) {
            printf("decode_step HANG block %d warp %d: stage %d's slot holds %d\n", blockIdx.x, warp, jj, *m);
            __trap();
          }
      }
      wait_bar(saddr(full + slot), wjj & 1, kFullStage, jj);
      if (kProbe) c_full += clk() - cw;
      if (kProbe && logging) {
        gcount(op, 1);
        if (part == 0) tlog(op, 1);
      }
      const uint32_t xb = xbase + (slice0 * spw + part) * sk * 2;  // slice s + 1's: spw * sk * 2 on
      if ((kProbe || TF_STEP_MOE) && prm.ablate == 1) {
        // (timing: the stage waited for and released, nothing computed)
      }
#if TF_STEP_MOE
      else if (expert_rows && o.exmap) {
        const uint32_t base = saddr(ring + slot * slot_b);
        if constexpr (W == kWBf16) {
          // two boxes of 8 rows x 8 blocks of 64 columns (make_rows8_tensor_map, rows8_addr): this warp's
          // slice is columns kStageK * half .. of the stage's 512
#pragma unroll 4
          for (int c = 0; c < kStageK / 32; ++c) {
            const uint32_t at = rows8_addr(base, g, kStageK * half + 32 * c + 8 * t);
            mma_chunk(acc[0], lds128(at), lds128(at + 8192), lds128(xb + c * 64));
          }
        } else {  // MLX 4-bit experts: expert_stage_q4's boxes, this warp's two pieces
          by_qsel(o.qsel, [&](auto kd, auto gs) {
            q4_pair_ex<decltype(kd)::value, decltype(gs)::value>(acc[0], acc[1], base, xb, xb + spw * sk * 2,
                                                                 g, t);
          });
        }
      } else if (W != kWBf16 && o.sk) {  // a bf16 op in the 4-bit instance (the router): two pieces
        if constexpr (W != kWBf16)
          bf16_pair(acc[0], acc[1], saddr(ring + slot * slot_b), sk, xb, xb + spw * sk * 2, g, t);
      }
#endif
      else if constexpr (W == kWBf16) {
        const uint32_t base = saddr(ring + slot * slot_b) + half * (kStageK * 2) + 16 * t;
        // pack_kernel: odd rows hold chunk c at chunk c ^ 1's place (an expert's rows: padded instead)
        const uint32_t swz = expert_rows ? 0 : (g & 1) * 64;
        const int rb = expert_rows ? kExRowBytes : kRowBytes;
#pragma unroll 4
        for (int c = 0; c < kStageK / 32; ++c) {
          const uint4 a = lds128(base + g * rb + ((c * 64) ^ swz));
          const uint4 bb = lds128(base + (g + 8) * rb + ((c * 64) ^ swz));
          const uint4 xv = lds128(xb + c * 64);  // every lane: q4_pair's broadcast
          mma_chunk(acc[0], a, bb, xv);
        }
      } else {  // pack_q4_kernel's stage: this warp's pieces are the half-th and the next of each row
        static_assert(kSPW == 2, "a 4-bit warp's two slices");
        const uint32_t cb = saddr(ring + slot * slot_b) + half * (kQStageK / 2) + 16 * t;
        const int ng = kQStageK >> (5 + o.qsel % 3);  // groups a piece
        const uint32_t sb = saddr(ring + slot * slot_b) + q_code_bytes(SW) + half * ng * 64;
        const uint32_t xb1 = xb + spw * SK * 2;
        if (kProbe && prm.ablate == 2)
          q4_pair<SW, kMlxBf16Sub, 1, true>(acc[0], acc[1], cb, sb, ng * 64, xb, xb1, g);
        else
          by_qsel(o.qsel, [&](auto kd, auto gs) {
            q4_pair<SW, decltype(kd)::value, decltype(gs)::value>(acc[0], acc[1], cb, sb, ng * 64, xb, xb1,
                                                                  g);
          });
      }
      const uint32_t cf = kProbe ? clk() : 0;
      if (!kProbe || prm.ablate != 3)
        fence_proxy_async();  // this warp's reads of the slot before the next bulk copy into it
      __syncwarp();
      if (kProbe) c_fence += clk() - cf;
      if (lane == 0) mbar_arrive(saddr(empty + slot));
    }
    j += stages;
    if (kProbe && logging) gcount(op, 2), tlog(op, 2);
    // The slice sums: the team's first warp adds them in slice order and stores the tile (words with the
    // launch's tag). red is double-buffered a team: a warp writes red[p] for the team's tile i + 2 only after
    // the team's barrier of tile i + 1, which the first warp reaches after reading tile i's.
    float* r = red + (team * 2 + (tcount & 1)) * kSlices * 16;
    if (t == 0)
#pragma unroll
      for (int e = 0; e < kSPW; ++e)
        r[(slice0 + e) * 16 + g] = acc[e][0], r[(slice0 + e) * 16 + g + 8] = acc[e][2];
    const uint32_t cb = kProbe ? clk() : 0;
    if constexpr (kNT == 1)
      bar_consumers();
    else
      nbar_sync(kBarTeam + team, kTW * 32);
    if (kProbe) c_bar += clk() - cb;
    if (kProbe && logging) gcount(op, 3), tlog(op, 3);
    if (q == 0) {
      float sum = 0.f;
      if (lane < 16) sum = slice_sum(r, lane);
      if (o.silu_out) {  // lanes 0-7 gate features n0/2 + l, lanes 8-15 their up values: the bits of
                         // gate_up stored as bf16, then silu_mul (activation.cuh)
        const float gb = __bfloat162float(__float2bfloat16(sum));
        const float ub = __shfl_down_sync(0xffffffffu, gb, 8);
        if (lane < 8)
          static_cast<uint32_t*>(o.y)[n0 / 2 + lane] = word_of(__bfloat162float(silu_mul_bf16(gb, ub)), tag);
#if TF_STEP_MOE
      } else if (o.moe == kMoeRouter) {  // f32 logit words
        if (lane < 16)
          static_cast<unsigned long long*>(o.y)[n0 + lane] = (uint64_t(tag) << 32) | __float_as_uint(sum);
#endif
      } else if (lane < 16) {
        if (o.y_f32)
          logits[n0 + lane] = sum;
        else
          static_cast<uint32_t*>(o.y)[n0 + lane] = word_of(sum, tag);
      }
      if (stamps && lane == 0 && op / kOpsPerLayer * kOpsPerLayer + kOpsPerLayer < nops) {
        // a layer's op: this CTA's last tile (so far)
#if TF_STEP_MOE  // (the down's: its own path)
        constexpr int kSlot[kOpsPerLayer] = {SS::kStampQkvDone, SS::kStampOLast, SS::kStampRouterLast,
                                             SS::kStampGuLast, -1};
        if (kSlot[op % kOpsPerLayer] >= 0) stamp_row(stamps, op, G, b)[kSlot[op % kOpsPerLayer]] = gtime();
#else
        constexpr int kSlot[4] = {SS::kStampQkvDone, SS::kStampOLast, SS::kStampGuLast, SS::kStampDownLast};
        stamp_row(stamps, op, G, b)[kSlot[op % 4]] = gtime();
#endif
      }
      __syncwarp();
      if (kProbe && logging) gcount(op, 4), tlog(op, 4), ++log_ti;
    }
    ++tcount;
  }
}

// The step's first node: the launch's epoch (the device word + 1) and layer 0's residual -- the embedding
// row (bf16, the engine's embedding kernel) -- as words with its tag.
__global__ void step_prologue(unsigned* epoch_word, const __nv_bfloat16* emb, uint32_t* words, int n) {
  const unsigned e = *epoch_word + 1;
  __syncthreads();  // every thread has read the old value
  if (threadIdx.x == 0) *epoch_word = e;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    words[i] = ((e & 0xffffu) << 16) | *reinterpret_cast<const uint16_t*>(emb + i);
}

// Row r of a packed tile t's 16: the weight's row (inter > 0, a gate_up weight of gate rows then up rows:
// gate rows 8t..8t+7 then up rows inter+8t.., so the tile's outputs pair each gate feature with its up).
__device__ __forceinline__ int packed_row(int t, int r, int inter) {
  return inter > 0 ? (r < 8 ? 8 * t + r : inter + 8 * t + r - 8) : t * 16 + r;
}

// W [n, k] row-major -> stages: tile t's stage ps (packed_stage) holds, for its 16 rows, the pieces of kSW
// consecutive slices (kStageK k-values each) side by side, contiguous (one bulk copy); in odd rows the
// 64-byte chunks c and c ^ 1 of each piece trade places (bank-conflict free quarter-warp loads). Rows:
// packed_row (inter > 0: a gate_up weight).
__global__ void pack_kernel(const __nv_bfloat16* w, __nv_bfloat16* wp, int n, int k, int inter) {
  (void)n;
  const int stages = k / kStageK / kSW, parts = k / kSlices / kStageK;
  const int64_t stage = blockIdx.x;  // tile * stages + packed stage index
  const int tile = int(stage / stages), ps = int(stage % stages);
  const int owner = ps / parts, part = ps % parts;
  constexpr int kUnits = kStageK / 8;  // 16-byte units of a piece
  for (int u = threadIdx.x; u < 16 * kSW * kUnits; u += blockDim.x) {
    const int r = u / (kSW * kUnits), sub = u % (kSW * kUnits) / kUnits, cu = u % kUnits;
    const int src_unit = (r & 1) ? (cu ^ 4) : cu;  // chunk c ^ 1 = unit ^ 4
    const int slice = owner * kSW + sub;
    const int src_row = packed_row(tile, r, inter);
    const uint4 v = *reinterpret_cast<const uint4*>(w + int64_t(src_row) * k +
                                                    (slice * parts + part) * kStageK + src_unit * 8);
    *reinterpret_cast<uint4*>(wp + stage * (kStageBytes / 2) + r * (kRowBytes / 2) + sub * kStageK + cu * 8) =
        v;
  }
}

#if TF_STEP_MOE
// The 4-bit instance's router (dequantized to bf16): pieces of this many k-values, so that a stage (16 rows x
// two pieces, 4 KB) fits a slot of the 4-bit stages'.
constexpr int kRouterPieceK = 64;
// W [n, k] bf16 row-major -> stages of pieces of sk k-values (the 4-bit instance's bf16 ops, Op::sk): tile
// t's stage ps = owner * parts + part (packed_stage; parts = k / 8 / sk) holds, for its 16 rows, the pieces
// of K slices 2 owner, 2 owner + 1 (part `part` of each) side by side, [16][2][sk]; in odd rows the 64-byte
// chunks c and c ^ 1 of each piece trade places (bf16_pair's loads, as pack_kernel's).
__global__ void pack_bf16_pieces_kernel(const __nv_bfloat16* w, __nv_bfloat16* wp, int k, int sk) {
  const int stages = k / sk / kSW, parts = k / kSlices / sk;
  const int64_t stage = blockIdx.x;
  const int tile = int(stage / stages), ps = int(stage % stages);
  const int owner = ps / parts, part = ps % parts, units = sk / 8;  // 16-byte units of a piece
  for (int u = threadIdx.x; u < 16 * kSW * units; u += blockDim.x) {
    const int r = u / (kSW * units), sub = u % (kSW * units) / units, cu = u % units;
    const int src_unit = (r & 1) ? (cu ^ 4) : cu;  // chunk c ^ 1 = unit ^ 4
    const uint4 v = *reinterpret_cast<const uint4*>(w + int64_t(tile * 16 + r) * k +
                                                    ((owner * kSW + sub) * parts + part) * sk + src_unit * 8);
    *reinterpret_cast<uint4*>(wp + stage * (16 * kSW * sk) + (r * kSW + sub) * sk + cu * 8) = v;
  }
}
#endif

// MLX 4-bit W (quant_linear.h's device layout: w [n][k / 8] words, a row's quads of 4 chunks lane-major; sc
// [n][k >> (5 + gshift)] scale | bias words) -> stages as pack_kernel's (tile t's stage ps: the 16 rows'
// pieces of kSW consecutive slices), each kQCodeBytes of codes -- row r, piece sub: its 4 quads (64 bytes
// each) at r * kQRowBytes + sub * kQRowBytes / kSW, quads q and q ^ 1 traded in odd rows -- then the
// pieces' scale words [sub][group][16 rows]; a stage is `sbytes` long. Rows: packed_row, as pack_kernel's.
template <int SW>
__global__ void pack_q4_kernel(const uint32_t* w, const uint32_t* sc, unsigned char* wp, int k, int inter,
                               int gshift, int sbytes) {
  constexpr int kQRowBytes = q_row_bytes(SW);
  const int stages = k / kQStageK / SW, parts = k / kSlices / kQStageK;
  const int64_t stage = blockIdx.x;
  const int tile = int(stage / stages), ps = int(stage % stages);
  const int owner = ps / parts, part = ps % parts;
  const int ng = kQStageK >> (5 + gshift), row_groups = k >> (5 + gshift);
  unsigned char* dst = wp + stage * sbytes;
  constexpr int kQuads = kQStageK / 128;
  for (int u = threadIdx.x; u < 16 * SW * kQuads * 4; u += blockDim.x) {  // 16-byte units: a lane's quad
    const int r = u / (SW * kQuads * 4), sub = u / (kQuads * 4) % SW, q = u / 4 % kQuads, lt = u % 4;
    const int slice = owner * SW + sub;
    const int64_t quad = int64_t(slice * parts + part) * kQuads + q;  // the row's quad (128 k-values)
    const uint4 v = *reinterpret_cast<const uint4*>(w + int64_t(packed_row(tile, r, inter)) * (k / 8) +
                                                    quad * 16 + lt * 4);
    *reinterpret_cast<uint4*>(dst + r * kQRowBytes + sub * (kQRowBytes / SW) + ((q ^ (r & 1)) * 64) +
                              lt * 16) = v;
  }
  uint32_t* sdst = reinterpret_cast<uint32_t*>(dst + q_code_bytes(SW));
  for (int u = threadIdx.x; u < SW * ng * 16; u += blockDim.x) {
    const int r = u % 16, gi = u / 16 % ng, sub = u / 16 / ng;
    const int slice = owner * SW + sub;
    const int group = ((slice * parts + part) * kQStageK >> (5 + gshift)) + gi;
    sdst[(sub * ng + gi) * 16 + r] = sc[int64_t(packed_row(tile, r, inter)) * row_groups + group];
  }
}

}  // namespace tf::cuda::TF_STEP_NS

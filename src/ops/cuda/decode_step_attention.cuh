#pragma once
// The one-kernel decode step's attention (decode_step_kernel.cuh has the roles): a unit's staging, q/k
// norm + rope, scores and P V (the consumer warps), the merge of the chunks' partials in rounds, and which
// units a CTA takes.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/decode_step_words.cuh"
#include "ops/cuda/linear_wgmma.h"  // tma_load_3d
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/mma.cuh"

namespace tf::cuda::TF_STEP_NS {

// Position p's slot in the paged K/V pool (attention_mma.cu's Tile::slot_of for blocks of kBlock).
__device__ __forceinline__ int kv_slot(const int32_t* table, int p) {
  return table[p / kBlock] * kBlock + p % kBlock;
}

// RMS norm + NeoX rope of one head held by a warp (element lane + 32 j): elementwise.cu's
// qk_norm_rope_kv_kernel<4> arithmetic (rotary_dim = head_dim), values rounded to bf16 as it does. rsin /
// rcos: sincosf(pos * inv_freq[i]) times the attention factor, made before the unit's poll.
__device__ __forceinline__ void norm_rope_head(float (&v)[4], const __nv_bfloat16* w, const float* rsin,
                                               const float* rcos, float eps, int lane) {
  float ss = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) ss = __fmaf_rn(v[j], v[j], ss);
  const float inv = norm_inv(row_sum<32>(ss, nullptr), kD, eps);
#pragma unroll
  for (int j = 0; j < 4; ++j)
    v[j] = __bfloat162float(
        __float2bfloat16_rn(norm_out(v[j], inv, __fadd_rn(__bfloat162float(w[lane + 32 * j]), 0.f))));
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float sn = rsin[lane + 32 * j], cs = rcos[lane + 32 * j];
    const float a = __fsub_rn(__fmul_rn(v[j], cs), __fmul_rn(v[j + 2], sn));
    const float b = __fadd_rn(__fmul_rn(v[j + 2], cs), __fmul_rn(v[j], sn));
    v[j] = __bfloat162float(__float2bfloat16_rn(a));
    v[j + 2] = __bfloat162float(__float2bfloat16_rn(b));
  }
}

// chunk_scores (attention_chunk.cuh) for decode's 4 real rows by the consumer warps, warp cw the keys of
// n-tile pair cw (16 keys): the same bits. Each score's MMA chain is its own; the row max is exact whatever
// the order (each warp's quad max, then the 8 in shared memory); each P value is elementwise; the row sum is
// added in chunk_scores' order (n-tiles 0..15, then the quad shuffles) by every warp from all warps' P values
// in shared memory (Pf: [16][32 lanes][2] floats in the Qs region, free once every warp's MMAs are done).
// Leaves in s what chunk_pv needs (row g's P, zeros for the padding rows g + 8), and mc / lc of row g. Once
// every warp's MMAs are done (Ks read and fenced), arrives on kBarScored: the attention warps may stage the
// next unit's K rows.
__device__ __forceinline__ void scores_pair(const __nv_bfloat16* Qs, const __nv_bfloat16* Ks, float* Pf,
                                            float* pmax, int cw, int lane, int c0, int pos, float scale,
                                            float (*s)[4], float& mc, float& lc) {
  const int qd = lane % 4, mi = lane / 8, li = lane % 8, g = lane / 4;
  float s2[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
  for (int t = 0; t < kD / 16; ++t) {
    uint32_t a[4], bb[4];
    attn::ldsm_x4(a, Qs + ((mi % 2) * 8 + li) * kRS + t * 16 + (mi / 2) * 8);
    attn::ldsm_x4(bb, Ks + (cw * 16 + (mi / 2) * 8 + li) * kRS + t * 16 + (mi % 2) * 8);
    attn::mma(s2[0], a, bb[0], bb[1]);
    attn::mma(s2[1], a, bb[2], bb[3]);
  }
  const bool pad = g >= kGroup;  // rows 4-7 (and all rows g + 8): padding pairs
  float mx = -INFINITY;
  if (!pad) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int p = c0 + (2 * cw + j) * 8 + qd * 2 + e;
        float v = __fmul_rn(s2[j][e], scale);
        v = (p >= 0 && p <= pos) ? v : -INFINITY;
        s2[j][e] = v;
        mx = fmaxf(mx, v);
      }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  if (qd == 0) pmax[cw * 8 + g] = mx;
  fence_proxy_async();  // this thread's reads of Ks before the next unit's K is copied into it
  bar_consumers();      // every warp's MMAs (Qs and Ks are free) and quad maxima
  nbar_arrive(kBarScored, kHelpThreads);
  mx = pmax[g];
#pragma unroll
  for (int w = 1; w < kCWarps; ++w) mx = fmaxf(mx, pmax[w * 8 + g]);
  mc = mx;
  const float base = mx == -INFINITY ? 0.f : mx;
  if (!pad) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        Pf[((2 * cw + j) * 32 + lane) * 2 + e] =
            __bfloat162float(__float2bfloat16_rn(__expf(__fsub_rn(s2[j][e], base))));
  }
  bar_consumers();  // every warp's P values
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 pv =
        pad ? make_float2(0.f, 0.f) : *reinterpret_cast<const float2*>(Pf + (j * 32 + lane) * 2);
    s[j][0] = pv.x, s[j][1] = pv.y, s[j][2] = 0.f, s[j][3] = 0.f;
    if (!pad) sum = __fadd_rn(__fadd_rn(sum, pv.x), pv.y);
  }
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
  sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
  lc = sum;
}

// What an attention unit's chain needs after its poll, in shared memory (fetched before the poll).
struct AttnParams {
  __nv_bfloat16 qn[kD], kn[kD];      // q / k norm weights
  float rsin[kD / 2], rcos[kD / 2];  // the rope of the row's position
  uint32_t* part;                    // the op's partials
  uint32_t* aout;                    // the op's output words
  __nv_bfloat16 *kdst, *vdst;        // the new row's K / V in the pool (head h)
  float eps;
  float pmax[kCWarps * 8];     // scores_pair's quad maxima
  unsigned long long bars[4];  // mbarriers: K and V staging (a phase a unit), the merge's two buffers
};
constexpr int kAttnParamBytes = (int(sizeof(AttnParams)) + 127) / 128 * 128;
constexpr int kAttnRegion = kAttnBytes + kAttnParamBytes;  // Ks, Vs, Qs, then the params

// The row's position and block table and the attention's constants, read once by each attention warp
// before its first unit (registers: a reference to the kernel's parameters could copy them to the stack).
struct Row {
  int pos, slot;
  const int32_t* table;
};

// Blocks of chunk c whose 16 rows all precede the row's position (one tensor-map box each).
__device__ __forceinline__ int full_blocks(int pos, int c) {
  return min(attn::kC / kBlock, max(0, (pos - c * attn::kC) / kBlock));
}
// Thread at < 8: the pool block of chunk c's block `at` (the block table's entry) where that block is full,
// loaded ahead of stage_kv (a global load's round trip is ~2 us under the weight stream).
__device__ __forceinline__ int block_of(const Row& row, int c, int at) {
  return at < full_blocks(row.pos, c) ? row.table[c * (attn::kC / kBlock) + at] : 0;
}

// Chunk c of KV head h from the pool into shared memory (KV = 0: the K rows into Ks, 1: the V rows into Vs,
// 2: both), on mbarriers kbar / vbar (thread 0 arms them with the chunk's bytes): each full block (16 rows
// before the row's position) by one tensor-map box of 16 padded rows (threads 0-7: `blk` is their block's
// pool block, block_of; 256-byte copies a row, 256 of them a chunk, cost ~2 us of issue, runs 247-248),
// the rows of a partial block before the position by a bulk copy each, rows past it zeroed (P V multiplies
// them by zeros: they must be finite), the row's own left out (its task writes it). The region's earlier
// accesses must be fenced (fence_proxy_async) and past a barrier.
template <int KV>
__device__ __forceinline__ void stage_kv(const Op& o, const Row& row, int h, int c, __nv_bfloat16* Ks,
                                         __nv_bfloat16* Vs, uint32_t kbar, uint32_t vbar, int blk) {
  const int at = threadIdx.x - (kProducer + 1) * 32;
  constexpr int kT = kAWarps * 32;
  const int pos = row.pos, c0 = c * attn::kC, full = full_blocks(pos, c);
  if (at == 0) {
    const uint32_t bytes = uint32_t(full * kBlock) * kRS * 2 +
                           uint32_t(max(0, min(attn::kC - full * kBlock, pos - c0 - full * kBlock))) * kD * 2;
    if (KV != 1) mbar_arrive_expect_tx(kbar, bytes);
    if (KV != 0) mbar_arrive_expect_tx(vbar, bytes);
  }
  if (at < full) {
    if (KV != 1) tma_load_3d(saddr(Ks + at * kBlock * kRS), o.kmap, 0, h, blk * kBlock, kbar);
    if (KV != 0) tma_load_3d(saddr(Vs + at * kBlock * kRS), o.vmap, 0, h, blk * kBlock, vbar);
  }
  for (int r = full * kBlock + at; r < attn::kC; r += kT) {  // the row's chunk only
    const int p = c0 + r;
    if (p < pos) {
      const int64_t off = (int64_t(kv_slot(row.table, p)) * kHk + h) * kD;
      if (KV != 1) bulk_copy_g2s(saddr(Ks + r * kRS), o.kp + off, kD * 2, kbar);
      if (KV != 0) bulk_copy_g2s(saddr(Vs + r * kRS), o.vp + off, kD * 2, vbar);
    } else if (p > pos) {
#pragma unroll
      for (int u = 0; u < kD / 8; ++u) {
        if (KV != 1) reinterpret_cast<uint4*>(Ks + r * kRS)[u] = make_uint4(0, 0, 0, 0);
        if (KV != 0) reinterpret_cast<uint4*>(Vs + r * kRS)[u] = make_uint4(0, 0, 0, 0);
      }
    }
  }
}

// Tasks an attention warp takes in a unit: the group's q heads and the new row's k (norm + rope each), split
// over the attention warps (the new row's v words go with the k task): 2 a warp for groups of 4, 3 for 8.
constexpr int kTasks = (kGroup + 1 + kAWarps - 1) / kAWarps;
constexpr int kUnitWords = 4 * (kTasks + 1);  // a thread's words of a unit: its tasks' and v's
#if !TF_STEP_MOE
// The q/k/v words of KV head h's unit that attention warp aw polls (element lane + 32 j; kv: the unit holds
// the row): task 0 / 1 (q heads 2 aw, 2 aw + 1 of the group; warp 2: the new row's k), then v (warp 2). As
// scalars: an array indexed at run time would live in local memory.
struct UnitWords {
  const uint32_t *s0, *s1, *s2;
  bool l0, l1, l2;  // whether the thread polls task 0's, task 1's, v's words
  __device__ UnitWords(const Op& o, int h, bool kv, int aw, int lane)
      : s0(aw < 2 ? o.qkv + (h * kGroup + 2 * aw) * kD + lane : o.qkv + kHq * kD + h * kD + lane),
        s1(o.qkv + (h * kGroup + 2 * aw + 1) * kD + lane),
        s2(o.qkv + (kHq + kHk) * kD + h * kD + lane),
        l0(aw < 2 || kv),
        l1(aw < 2),
        l2(aw == 2 && kv) {}
  __device__ bool live(int t) const { return t == 0 ? l0 : t == 1 ? l1 : l2; }
  __device__ const uint32_t* src(int q) const { return (q < 4 ? s0 : q < 8 ? s1 : s2) + 32 * (q % 4); }
};
// A warp's task i: q head kTasks aw + i of the group, or (kGroup) the new row's k.
__device__ __forceinline__ int task_of(int aw, int i) {
  return aw < 2 ? 2 * aw + i : kGroup;
}
#else
// Groups of 8 (the MoE shape): warp aw's tasks 0-2 are q heads 3 aw .. 3 aw + 2 of the group, warp 2's
// task 2 the new row's k (in the unit holding the row), then v (warp 2).
struct UnitWords {
  const uint32_t *s0, *s1, *s2, *s3;
  bool l2, l3;  // whether the thread polls task 2's, v's words (tasks 0 and 1: always)
  __device__ UnitWords(const Op& o, int h, bool kv, int aw, int lane)
      : s0(o.qkv + (h * kGroup + 3 * aw) * kD + lane),
        s1(o.qkv + (h * kGroup + 3 * aw + 1) * kD + lane),
        s2(aw < 2 ? o.qkv + (h * kGroup + 3 * aw + 2) * kD + lane : o.qkv + kHq * kD + h * kD + lane),
        s3(o.qkv + (kHq + kHk) * kD + h * kD + lane),
        l2(aw < 2 || kv),
        l3(aw == 2 && kv) {}
  __device__ bool live(int t) const { return t < 2 ? true : t == 2 ? l2 : l3; }
  __device__ const uint32_t* src(int q) const {
    return (q < 4 ? s0 : q < 8 ? s1 : q < 12 ? s2 : s3) + 32 * (q % 4);
  }
};
__device__ __forceinline__ int task_of(int aw, int i) {
  return kTasks * aw + i;
}
#endif
static_assert(kTasks * kAWarps >= kGroup + 1, "the q heads and the k task over the attention warps");

// One attention unit by the CTA's attention warps (their own shared memory: the consumers go on with the
// ring meanwhile): KV head h, chunk c of the row. Tasks: warps 0 and 1 q heads 2 aw and 2 aw + 1 of the
// group (q norm + rope of the qkv words, polled), warp 2 -- in the chunk holding the row -- the new token's
// k (norm + rope) and v, into shared memory and the pool; all stage the chunk's older K/V rows (unless the
// unit before did: `staged`). Then the CTA's consumer warps compute the chunk's partial of the group's 4
// heads (unit_scores_pv); the unit holding the row (the merger, always its CTA's last unit of the layer)
// merges the chunks' partials (combine_pair_u's order) into the o op's x words with them. nc >= 0: the CTA's
// next unit of the layer is (KV head nh, chunk nc), whose K rows are staged once this unit's scores are made
// and its V rows once its P V is, so that their loads overlap this unit's work.
__device__ __forceinline__ void attention_unit(const Op& o, const Row& row, int h, int c, bool staged, int nh,
                                               int nc, __nv_bfloat16* Ks, uint32_t tag, uint32_t par,
                                               uint32_t& mpar, unsigned long long* st, int ui,
                                               uint32_t (&pre)[kUnitWords]) {
  const int at = threadIdx.x - (kProducer + 1) * 32, aw = at / 32, lane = at % 32;
  auto stamp = [&](int slot) {
    if (st && at == 0) st[slot] = gtime();
  };
  const int us = min(ui, SS::kStampUnits - 1) * SS::kStampUnitEvents;
  constexpr int kT = kAWarps * 32;
  const int pos = row.pos;
  const int c0 = c * attn::kC;
  __nv_bfloat16* Vs = Ks + attn::kC * kRS;
  __nv_bfloat16* Qs = Vs + attn::kC * kRS;
  AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(Ks) + kAttnBytes);
  const bool kv_here = pos / attn::kC == c;
  const uint32_t kbar = saddr(&P->bars[0]), vbar = kbar + 8, mbar = kbar + 16;
  fence_proxy_async();  // this thread's accesses to the region before the bulk copies into it
  abar();               // the unit before is done with the region (its MMAs, its merge)
  stamp(us);
  if (!staged) stage_kv<2>(o, row, h, c, Ks, Vs, kbar, vbar, block_of(row, c, at));
  const int nblk = nc >= 0 ? block_of(row, nc, at) : 0;     // the next unit's, used after this unit's scores
  for (int i = at; i < (16 - kGroup) * (kRS / 8); i += kT)  // Q rows kGroup-15: padding pairs, zeros
    *reinterpret_cast<uint4*>(Qs + (kGroup + i / (kRS / 8)) * kRS + (i % (kRS / 8)) * 8) =
        make_uint4(0, 0, 0, 0);
  for (int i = at; i < kD && ui == 0; i += kT)  // the layer's (later units find them there)
    P->qn[i] = o.qn[i], P->kn[i] = o.kn[i];
  if (at == 0) {
    P->part = o.part, P->aout = o.aout;
    const int64_t dst = (int64_t(row.slot) * kHk + h) * kD;
    P->kdst = o.kp + dst, P->vdst = o.vp + dst;
  }
  constexpr int kW = kUnitWords;
  const UnitWords uw(o, h, kv_here, aw, lane);
  auto src = [&](int q) { return uw.src(q); };
  abar();  // the params are in
  uint32_t w[kW];
#pragma unroll
  for (int q = 0; q < kW; ++q) w[q] = !uw.live(q / 4) ? (tag << 16) : staged ? pre[q] : ldv(src(q));
  poll_words(w, src, tag, true);
  stamp(us + 1);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < kTasks; ++i) {
    const int task = task_of(aw, i);
    if (!uw.live(i)) continue;
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = word_f(w[4 * i + j]);
    if (task < kGroup) {  // q head `task` of the group
      norm_rope_head(v, P->qn, P->rsin, P->rcos, P->eps, lane);
#pragma unroll
      for (int j = 0; j < 4; ++j) Qs[task * kRS + lane + 32 * j] = __float2bfloat16_rn(v[j]);
    } else {  // the new token's k (normed, rotated) and v: shared memory and the pool
      norm_rope_head(v, P->kn, P->rsin, P->rcos, P->eps, lane);
      const int r = pos - c0;
      __nv_bfloat16 *kd = P->kdst, *vd = P->vdst;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __nv_bfloat16 kb = __float2bfloat16_rn(v[j]);
        __nv_bfloat16 vb;
        *reinterpret_cast<uint16_t*>(&vb) = uint16_t(w[4 * kTasks + j] & 0xffffu);
        Ks[r * kRS + lane + 32 * j] = kb, Vs[r * kRS + lane + 32 * j] = vb;
        kd[lane + 32 * j] = kb, vd[lane + 32 * j] = vb;
      }
    }
  }
  wait_bar(kbar, par, kKChunk, c);  // (V is waited for by the consumers before P V)
  abar();                           // and the new row's task
  stamp(us + 2);
  uint32_t* part = P->part;
  const int own = pos / attn::kC;  // chunks before the row's
  // The chunk's scores, P V and partial: the CTA's consumer warps (unit_scores_pv), meanwhile the next
  // unit's K rows (once the score MMAs are done) and V rows (once P V is) are staged.
  nbar_arrive(kBarUnitIn, kHelpThreads);
  // The next unit's words (`pre`, its first poll), loaded while the consumers compute this one: 8192 and
  // 16000 -0.4%, 512 the same (run 315; session 25's run 301 lost with them held across the attention warps'
  // own MMAs, since gone to the consumers).
  if (nc >= 0) {
    const UnitWords nw(o, nh, pos / attn::kC == nc, aw, lane);
#pragma unroll
    for (int q = 0; q < kW; ++q)
      if (nw.live(q / 4)) pre[q] = ldv(nw.src(q));
  }
  nbar_sync(kBarScored, kHelpThreads);
  stamp(us + 3);
  if (nc >= 0) stage_kv<0>(o, row, nh, nc, Ks, Vs, kbar, vbar, nblk);
  nbar_sync(kBarUnitOut, kHelpThreads);
  if (nc >= 0) stage_kv<1>(o, row, nh, nc, Ks, Vs, kbar, vbar, nblk);
  stamp(us + 4);
  stamp(us + 5);
  if (!kv_here) return;
  // The merge (combine_pair_u's order: chunks in increasing order from (-inf, 0, 0), then bf16(o / l)). The
  // other chunks' partials come into shared memory kMergeChunks at a time (after the own partial, two rounds'
  // buffers in Ks, Vs and Qs), by one bulk copy a head (its records of the round are contiguous), then
  // checked word by word without a branch a word by these warps and the CTA's consumer warps, which fold the
  // round (two dims of one head a thread) and write the output words (merge_fold_help; folded here, 8 dims a
  // thread, the merge paced ~0.27 us a chunk at 8k, run 305; with the consumers 8192 -3.9%, 16000 -6.5%, run
  // 309). Only a row in its first chunk (no other chunks) is finished here. (The 16-byte cp.async gather and
  // a branch a word took ~10 us a round, runs 249-252.) A round with a word not yet written (units still
  // running) is copied whole again by its bulk copies once its records' last words are seen (until session 26
  // the missing 16-byte units went again by cp.async: the same time, run 313, and a second copy path). A
  // round's bulk copy waits until the last word of each of its records is written (a thread a record; the
  // other words of a record come from the same unit's other warps at about the same time, and the check below
  // still reads every word): a round issued while units still run went the retry way, ~8 us a round (run
  // 296). Each round's last words are loaded while the round before lands and folds.
  auto tail_of = [&](int cb, int nb) {  // the record's last value word (its sum)
    return part + (int64_t(h * kGroup + at / nb) * kMaxChunks + cb + at % nb) * kRecW + kD + 1;
  };
  // Not below kPrewait chunks (one round; the row's units all run at once): the first load's round trip cost
  // 0.7% at 512 positions, the retries it saves 1% at 2048 (runs 297-299: with it from 8 chunks, 2048 4.296
  // -> 4.230 ms, 8192 4.95 -> 4.93, 512 and the 4-bit step unchanged).
  constexpr int kPrewait = 8;
  auto written = [&](uint32_t x) { return x != kUnwritten; };  // a record's last word is written
  // Round r goes to buffer r % 2 on mbarrier bars[2 + r % 2] (mpar: bit b the phase of buffer b's); round
  // r + 1 is copied in while the consumers fold round r (run 326: 8192 -1.1%, MLX 4-bit at 8192 -2%, 512,
  // 2048 and 16000 the same; two buffers of 12 or 8 chunks and one of 24 lost, runs 325-326).
  uint32_t* const mb0 = reinterpret_cast<uint32_t*>(Ks) + kPownWords;
  auto issue = [&](int cb, int nb, int buf) {  // round cb's bulk copies (a head's records each)
    const uint32_t bar = mbar + 8 * buf;
    if (at == 0) mbar_arrive_expect_tx(bar, uint32_t(kGroup * nb * kRecW * 4));
    if (at < kGroup)
      bulk_copy_g2s(saddr(mb0 + buf * kRoundWords + at * nb * kRecW),
                    part + (int64_t(h * kGroup + at) * kMaxChunks + cb) * kRecW, uint32_t(nb * kRecW * 4),
                    bar);
  };
  // This thread's record's last word in the round after the one being copied (0: written, or none).
  auto tail_load = [&](int cb) {
    const int nn = min(kMergeChunks, own - cb);
    return at < kGroup * nn ? ldv(tail_of(cb, nn)) : 0u;
  };
  const int nb0 = min(kMergeChunks, own);
  if (own >= kPrewait && at < kGroup * nb0) spin_on(tail_of(0, nb0), written);
  fence_proxy_async();  // the region's reads and writes before the bulk copies into it
  abar();               // pown is complete (and round 0's last words are written)
  const float* pown = reinterpret_cast<const float*>(Ks);
  uint32_t tw = 0;
  if (own > 0) issue(0, nb0, 0), tw = tail_load(kMergeChunks);
  for (int cb = 0, r = 0; cb < own; cb += kMergeChunks, ++r) {
    const int nb = min(kMergeChunks, own - cb), buf = r & 1;  // chunks cb .. cb + nb - 1 of the 4 heads
    const uint32_t* mb = mb0 + buf * kRoundWords;
    long long n = 0;
    for (;; ++n) {  // the round's copy, again (after its last words are seen) until every word is there
      if (n > 0) {
        if (at < kGroup * nb) spin_on(tail_of(cb, nb), written);
        abar();  // the round's last words are written
        issue(cb, nb, buf);
      }
      wait_bar(mbar + 8 * buf, (mpar >> buf) & 1u, kMergeRound, cb);
      mpar ^= 1u << buf;
      if (cb == kMergeChunks && n == 0) stamp(SS::kStampRound1Landed);
      nbar_arrive(kBarLanded, kHelpThreads);  // the consumers check their share too
      const bool ok = round_units_ok(mb, kGroup * nb * kU, kCWarps * 32 + at);
      fence_proxy_async();  // the check's reads of mb before a copy into it
      if (nbar_and(kBarChecked, kHelpThreads, ok)) break;
      if (n == (1ll << 20)) hang_word(part, 0, tag);
    }
    if (cb == kMergeChunks) {
      stamp(SS::kStampRound1Checked);
      if (st && at == 0) st[SS::kStampRound1Retries] = (unsigned long long)(n);
    }
    stamp(SS::kStampRoundIn + 2 * min(r, SS::kStampRounds - 1));
    // The next round: its last words waited for and its copy issued into the other buffer (free: its round
    // was folded before this one landed) while the consumers fold this round.
    if (const int nn = min(kMergeChunks, own - cb - kMergeChunks); nn > 0) {
      if (at < kGroup * nn && !written(tw)) spin_on(tail_of(cb + kMergeChunks, nn), written);
      abar();
      issue(cb + kMergeChunks, nn, buf ^ 1);
      if (cb == 0) stamp(SS::kStampRound1Issued);
      tw = tail_load(cb + 2 * kMergeChunks);
    }
    nbar_sync(kBarRoundFolded, kHelpThreads);  // folded (the last round: the output words written)
    stamp(SS::kStampRoundIn + 1 + 2 * min(r, SS::kStampRounds - 1));
  }
  if (own > 0) {
    stamp(SS::kStampAout);
  } else {  // the row's chunk alone: item = 8 dims of one of the group's heads, kT items a pass
#if TF_STEP_MOE
    for (int it = at; it < kGroup * (kD / 8); it += kT) {
#else
    if (const int it = at; it < kGroup * (kD / 8)) {
#endif
      const int gi = it / (kD / 8), d0 = (it % (kD / 8)) * 8;
      float m = -INFINITY, l = 0.f, ov[8];
      const attn::MergeFactors f = attn::merge_chunk(m, l, pown[gi * kRec + kD], pown[gi * kRec + kD + 1]);
#pragma unroll
      for (int i = 0; i < 8; ++i) ov[i] = attn::merge_out(0.f, pown[gi * kRec + d0 + i], f);
      uint32_t* dst = P->aout + (h * kGroup + gi) * kD + d0;
#pragma unroll
      for (int i = 0; i < 8; ++i) dst[i] = word_of(attn::finish_out(ov[i], l), tag);
#if !TF_STEP_MOE
      stamp(SS::kStampAout);
#endif
    }
#if TF_STEP_MOE
    stamp(SS::kStampAout);
#endif
  }
}

// One attention unit's scores, P V and partial by the CTA's consumer warps (they are idle then: their
// next op is the o projection, whose x is the attention's output), warp cw the keys of n-tile pair cw and
// P V's output dims 16 cw .. 16 cw + 15, after the attention warps have staged Q and K (kBarUnitIn). The
// partial as a record of 32-bit words (kRecW: o [kD], max, sum, two zeros; f32 bits, rec_word); the unit
// holding the row (the merger) keeps its own in shared memory instead (Ks, free once every warp is past the
// score MMAs), [kGroup][kRec] floats.
__device__ __forceinline__ void unit_scores_pv(const Op& o, int pos, int h, int c, __nv_bfloat16* Ks,
                                               float scale, uint32_t par) {
  const int cw = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  __nv_bfloat16* Vs = Ks + attn::kC * kRS;
  __nv_bfloat16* Qs = Vs + attn::kC * kRS;
  AttnParams* P = reinterpret_cast<AttnParams*>(reinterpret_cast<unsigned char*>(Ks) + kAttnBytes);
  float sc[16][4], mc, lc, oc[2][4];
  nbar_sync(kBarUnitIn, kHelpThreads);
  scores_pair(Qs, Ks, reinterpret_cast<float*>(Qs), P->pmax, cw, lane, c * attn::kC, pos, scale, sc, mc, lc);
  wait_bar(saddr(&P->bars[1]), par, kVChunk, c);
  attn::chunk_pv_pair<kD>(Vs, lane, sc, oc, cw);
  fence_proxy_async();  // this thread's reads of Vs before the next unit's V is copied into it
  if (g < kGroup) {
    if (pos / attn::kC == c) {
      float* pown = reinterpret_cast<float*>(Ks) + g * kRec;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        pown[(2 * cw + j) * 8 + qd * 2] = oc[j][0], pown[(2 * cw + j) * 8 + qd * 2 + 1] = oc[j][1];
      if (cw == 0 && qd == 0) pown[kD] = mc, pown[kD + 1] = lc;
    } else {
      uint32_t* dst = o.part + (int64_t(h * kGroup + g) * kMaxChunks + c) * kRecW;
#pragma unroll
      for (int j = 0; j < 2; ++j)
        *reinterpret_cast<uint2*>(dst + (2 * cw + j) * 8 + qd * 2) =
            make_uint2(rec_word(oc[j][0]), rec_word(oc[j][1]));
      if (cw == 0 && qd == 0)
        *reinterpret_cast<uint4*>(dst + kD) = make_uint4(rec_word(mc), rec_word(lc), 0, 0);
    }
  }
  nbar_arrive(kBarUnitOut, kHelpThreads);
}

// A merge's rounds by a merging CTA's consumer warps (own > 0 chunks before the row's): each round the
// attention warps bring in (attention_unit's merge) checked (their share) and folded in chunk order, then
// the own partial and the output words (the last round). Thread i folds dims d0, d0 + 1 of
// head gi of the group: per dim the same merge_chunk / merge_out sequence as the attention warps' 8-dim
// items, so the same bits. Once a round is folded its records in global memory are written kUnwritten
// again (for the next launch's check), after the fold's arrival: off the attention warps' way.
__device__ __forceinline__ void merge_fold_help(const Op& o, int h, int own, const __nv_bfloat16* attn_smem,
                                                uint32_t tag) {
  const int ct = threadIdx.x;
  constexpr int kDT = kGroup * kD / (kCWarps * 32);  // dims a consumer thread folds: 2, or 4 (groups of 8)
  static_assert(kDT == 2 || kDT == 4, "a consumer thread folds two or four dims");
  using Dims = std::conditional_t<kDT == 2, uint2, uint4>;
  const int gi = ct / (kD / kDT), d0 = (ct % (kD / kDT)) * kDT;
  const float* pown = reinterpret_cast<const float*>(attn_smem);
  const uint32_t* mb0 = reinterpret_cast<const uint32_t*>(attn_smem) + kPownWords;
  float m = -INFINITY, l = 0.f, ov[kDT] = {};
  for (int cb = 0, r = 0; cb < own; cb += kMergeChunks, ++r) {
    const int nb = min(kMergeChunks, own - cb);
    const uint32_t* mb = mb0 + (r & 1) * kRoundWords;  // round r's buffer (attention_unit)
    for (bool ok = false; !ok;) {  // the round, copied again until every word is there (attention_unit)
      nbar_sync(kBarLanded, kHelpThreads);
      ok = round_units_ok(mb, kGroup * nb * kU, ct);
      fence_proxy_async();  // the check's reads of mb before a copy into it
      ok = nbar_and(kBarChecked, kHelpThreads, ok);
    }
    // (not unrolled: unrolled 4 or 8 it cost 8192 +1.2%, 512 +2.7%, run 309)
#pragma unroll 1
    for (int q = 0; q < nb; ++q) {
      const uint32_t* rec = mb + (gi * nb + q) * kRecW;
      const attn::MergeFactors f =
          attn::merge_chunk(m, l, __uint_as_float(rec[kD]), __uint_as_float(rec[kD + 1]));
      const Dims v = *reinterpret_cast<const Dims*>(rec + d0);
      const uint32_t* vw = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
      for (int i = 0; i < kDT; ++i) ov[i] = attn::merge_out(ov[i], __uint_as_float(vw[i]), f);
    }
    if (cb + kMergeChunks >= own) {  // the own partial, then the output words
      const attn::MergeFactors f = attn::merge_chunk(m, l, pown[gi * kRec + kD], pown[gi * kRec + kD + 1]);
      uint32_t* dst = o.aout + (h * kGroup + gi) * kD + d0;
#pragma unroll
      for (int i = 0; i < kDT; ++i)
        dst[i] = word_of(attn::finish_out(attn::merge_out(ov[i], pown[gi * kRec + d0 + i], f), l), tag);
    }
    fence_proxy_async();  // these reads of mb before the next round's bulk copies
    nbar_arrive(kBarRoundFolded, kHelpThreads);
    for (int hh = 0; hh < kGroup; ++hh) {  // the round's records of head hh: nb * kU units, contiguous
      uint4* r = reinterpret_cast<uint4*>(o.part + (int64_t(h * kGroup + hh) * kMaxChunks + cb) * kRecW);
      for (int i = ct; i < nb * kU; i += kCWarps * 32)
        r[i] = make_uint4(kUnwritten, kUnwritten, kUnwritten, kUnwritten);
    }
  }
}

// A layer's attention units of CTA b (the attention warps' and the consumer warps' same list): (KV head,
// chunk) for the row's C chunks. CTA h < kHk merges KV head h: its chunks 0..e-1, then the row's chunk and
// the merge. The other units, chunks e..C-2 of every head, are dealt round-robin over the other CTAs in chunk
// order (the merge takes the chunks in that order too). A CTA's next unit of the layer is staged during its
// current one. e: 1 once the other units average kEarlyUnits a CTA or more, else 0 (with the consumers
// computing the units, run 310: 4096 positions e = 0 -1.2% against 1; 8192 e = 1 -1.1% against 0; 12000 and
// 16000 e = 1 best of 0-3, -1% and -2.7% against the rule before, which grew e with the context); more on
// fewer CTAs (TF_STEP_GRID). Params::early_bias shifts it for A/Bs.
#ifdef TF_STEP_EARLY_UNITS
constexpr int kEarlyUnits = TF_STEP_EARLY_UNITS;
#else
constexpr int kEarlyUnits = 3;
#endif
struct UnitList {
  int C, e, others, Go, b;
  __device__ UnitList(int pos, int G, int b_, int early_bias) : b(b_) {
    C = pos / attn::kC + 1;
    const int e0 = kHk * (C - 1) >= kEarlyUnits * (G - kHk) ? 1 : 0;
    e = min(C - 1, max(0, e0 + early_bias));
    others = kHk * (C - 1 - e), Go = G - kHk;
  }
  __device__ bool at(int i, int& h, int& c) const {  // unit i of the layer, if the CTA has one
    if (b < kHk) {
      h = b, c = i < e ? i : C - 1;
      return i <= e;
    }
    const int u = b - kHk + i * Go;
    h = u % kHk, c = e + u / kHk;
    return u < others;
  }
};

}  // namespace tf::cuda::TF_STEP_NS

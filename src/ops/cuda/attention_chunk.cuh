#pragma once
// The arithmetic of one attention chunk (kAttnChunk positions) for one warp's 16 (row, head) pairs, and the
// merge of chunk partials: shared by attention_mma.cu's kernels and by any kernel that must give a row the
// same attention bits (a row's output depends only on its own query, range and these fixed sequences). See
// attention_mma.cu's header comment for the scheme.
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>

#include "ops/cuda/kernels.h"

namespace tf::cuda::attn {

constexpr int kC = kAttnChunk;  // positions per chunk (128)
static_assert(kC == 128, "the fragment loops assume 128-position chunks");

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* p) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void mma(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// Running (m, l) of a pair merged with one chunk's (mc, lc); returns the factors for the outputs:
// o = o * a + oc * b. Starts from m = -inf, l = 0, o = 0 (the first merge yields the chunk itself).
struct MergeFactors {
  float a, b;
};
__device__ __forceinline__ MergeFactors merge_chunk(float& m, float& l, float mc, float lc) {
  const float mn = fmaxf(m, mc);
  const float a = __expf(__fsub_rn(m, mn)), b = __expf(__fsub_rn(mc, mn));
  l = __fadd_rn(__fmul_rn(l, a), __fmul_rn(lc, b));
  m = mn;
  return {a, b};
}
__device__ __forceinline__ float merge_out(float o, float oc, MergeFactors f) {
  return __fadd_rn(__fmul_rn(o, f.a), __fmul_rn(oc, f.b));
}
__device__ __forceinline__ float finish_out(float o, float l) {
  return __fdiv_rn(o, l);
}

struct Range {
  int lo, pos;  // visible positions [lo, pos]; lo > pos: none (padding pair)
};
// Whether a pair with visible positions `rg` sees any of chunk c (a padding pair sees none).
__device__ __forceinline__ bool sees_chunk(const Range& rg, int c) {
  return rg.lo <= rg.pos && c >= rg.lo / kC && c <= rg.pos / kC;
}
// Row r's visible positions: the whole causal prefix, or the last `window` of it.
__device__ __forceinline__ Range row_range(const DeviceMeta& meta, int r, int window) {
  const int pos = meta.positions[r];
  return {window > 0 ? max(0, pos - window + 1) : 0, pos};
}
// S values of row h (g or g + 8) in the thread's n-tiles [n0, n0 + NJ) of a chunk starting at position c0
// (s[j]: n-tile n0 + j): scaled, soft-capped and masked to the row's range (-inf outside) in place; returns
// their maximum over the quad. A padding row (no positions) keeps its values and gives -inf.
template <int NJ>
__device__ __forceinline__ float mask_row_max(float (*s)[4], int h, int n0, int c0, int qd, const Range& rg,
                                              float scale, float softcap) {
  float mx = -INFINITY;
  if (rg.lo <= rg.pos) {
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int p = c0 + (n0 + j) * 8 + qd * 2 + e;
        float v = __fmul_rn(s[j][2 * h + e], scale);
        if (softcap > 0.f) v = __fmul_rn(softcap, tanhf(__fdiv_rn(v, softcap)));
        v = (p >= rg.lo && p <= rg.pos) ? v : -INFINITY;
        s[j][2 * h + e] = v;
        mx = fmaxf(mx, v);
      }
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  return fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
}
// chunk_scores after its MMAs (S in s, the m16n8 accumulator layout of 16 n-tiles, as a warp of a wgmma
// m64n128 accumulator holds them too): scale, cap, mask, then the softmax statistics; P in s.
__device__ __forceinline__ void chunk_softmax(float (*s)[4], int qd, int c0, const Range* rg, float scale,
                                              float softcap, float* mc, float* lc) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    // A padding pair (no positions: the rows past a short tile, e.g. rows 8-15 of a decode row's 4 heads)
    // skips the element work; its quad still runs the shuffles with neutral values (full-warp masks). Its
    // mc/lc are never read and its P row only feeds output rows that are never stored.
    const bool pad = rg[h].lo > rg[h].pos;
    const float mx = mask_row_max<16>(s, h, 0, c0, qd, rg[h], scale, softcap);
    mc[h] = mx;
    const float base = mx == -INFINITY ? 0.f : mx;  // a pair with no positions here: P = 0, never merged
    float sum = 0.f;
    if (!pad) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = __bfloat162float(__float2bfloat16_rn(__expf(__fsub_rn(s[j][2 * h + e], base))));
          s[j][2 * h + e] = pv;
          sum = __fadd_rn(sum, pv);
        }
      }
    }
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
    lc[h] = sum;
  }
}

// One chunk of one warp's 16 pairs, first half: S = Q K^T, scale, cap, mask, softmax statistics.
// `rg[0]`, `rg[1]`: the ranges of the thread's two pair rows (g and g + 8). Leaves P (bf16 values held
// as floats) in s, and mc, lc per row.
template <int D>
__device__ __forceinline__ void chunk_scores(const __nv_bfloat16* Qs, const __nv_bfloat16* Ks, int warp,
                                             int lane, int c0, const Range* rg, float scale, float softcap,
                                             float (*s)[4], float* mc, float* lc) {
  constexpr int RS = D + 8;
  const int qd = lane % 4, mi = lane / 8, li = lane % 8;
#pragma unroll
  for (int j = 0; j < 16; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int t = 0; t < D / 16; ++t) {
    uint32_t a[4];
    ldsm_x4(a, Qs + (warp * 16 + (mi % 2) * 8 + li) * RS + t * 16 + (mi / 2) * 8);
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      uint32_t b[4];
      ldsm_x4(b, Ks + (jj * 16 + (mi / 2) * 8 + li) * RS + t * 16 + (mi % 2) * 8);
      mma(s[2 * jj], a, b[0], b[1]);
      mma(s[2 * jj + 1], a, b[2], b[3]);
    }
  }
  chunk_softmax(s, qd, c0, rg, scale, softcap, mc, lc);
}

// Second half: O_c = P V. The S accumulator layout of n-tiles 2t, 2t+1 is the A fragment of k-step t.
__device__ __forceinline__ void pv_a(const float (*s)[4], int t, uint32_t (&a)[4]) {
  a[0] = pack_bf16(s[2 * t][0], s[2 * t][1]);
  a[1] = pack_bf16(s[2 * t][2], s[2 * t][3]);
  a[2] = pack_bf16(s[2 * t + 1][0], s[2 * t + 1][1]);
  a[3] = pack_bf16(s[2 * t + 1][2], s[2 * t + 1][3]);
}
// k-step t of output column pair jj (columns 16 jj .. 16 jj + 15) into oc0, oc1.
template <int D>
__device__ __forceinline__ void pv_pair_step(const __nv_bfloat16* Vs, int lane, const uint32_t (&a)[4], int t,
                                             int jj, float* oc0, float* oc1) {
  constexpr int RS = D + 8;
  const int mi = lane / 8, li = lane % 8;
  uint32_t b[4];
  ldsm_x4_trans(b, Vs + (t * 16 + (mi % 2) * 8 + li) * RS + jj * 16 + (mi / 2) * 8);
  mma(oc0, a, b[0], b[1]);
  mma(oc1, a, b[2], b[3]);
}

// Only the output column pairs jj in [J0, J1) (oc[2 jj], oc[2 jj + 1]) when asked: each output element's MMA
// chain is its own, so warps may share a chunk's columns with the same bits.
template <int D, int J0 = 0, int J1 = D / 16>
__device__ __forceinline__ void chunk_pv(const __nv_bfloat16* Vs, int lane, const float (*s)[4],
                                         float (*oc)[4]) {
#pragma unroll
  for (int j = 2 * J0; j < 2 * J1; ++j) oc[j][0] = oc[j][1] = oc[j][2] = oc[j][3] = 0.f;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    uint32_t a[4];
    pv_a(s, t, a);
#pragma unroll
    for (int jj = J0; jj < J1; ++jj) pv_pair_step<D>(Vs, lane, a, t, jj, oc[2 * jj], oc[2 * jj + 1]);
  }
}

// chunk_pv for one output column pair jj chosen at run time (a warp's share when 8 warps split the columns):
// oc[0], oc[1] are chunk_pv's oc[2 jj], oc[2 jj + 1], each element the same MMA chain.
template <int D>
__device__ __forceinline__ void chunk_pv_pair(const __nv_bfloat16* Vs, int lane, const float (*s)[4],
                                              float (*oc)[4], int jj) {
#pragma unroll
  for (int j = 0; j < 2; ++j) oc[j][0] = oc[j][1] = oc[j][2] = oc[j][3] = 0.f;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    uint32_t a[4];
    pv_a(s, t, a);
    pv_pair_step<D>(Vs, lane, a, t, jj, oc[0], oc[1]);
  }
}

// The chunk of one warp's 16 pairs spread over W warps (the split kernel's tiles whose pairs all sit in warp
// 0: decode rows), with every value chunk_scores + chunk_pv give, bit for bit:
//   spread_scores: warp w computes S n-tiles [w 16/W, (w + 1) 16/W) with chunk_scores' MMA chains (same A
//                  rows: warp 0's, same B columns, same k order), scales, caps and masks them, and publishes
//                  its row maxima in red[w][row] (a maximum is exact in any order);
//   spread_probs:  the rows' chunk maxima from red, P = bf16(exp(S - m_c)) of the warp's n-tiles into Ps
//                  (16 rows of kC + 8);
//   spread_sum:    a row's l_c from Ps in chunk_scores' order (per thread j then e, then the quad butterfly);
//   spread_pv:     warp w's output column pairs [w D/16/W, ...) from all of P (the A fragments ldmatrix reads
//                  from Ps are pv_a's packs: P values are bf16 already), each element pv_pair_step's chain.
constexpr int kPsRow = kC + 8;  // Ps row stride (elements)
template <int D, int W>
__device__ __forceinline__ void spread_scores(const __nv_bfloat16* Qs, const __nv_bfloat16* Ks, int warp,
                                              int lane, int c0, const Range* rg, float scale, float softcap,
                                              float (*s)[4], float* red) {
  constexpr int RS = D + 8, NJ = 16 / W;
  static_assert(NJ % 2 == 0, "a warp's n-tiles come in ldmatrix pairs");
  const int qd = lane % 4, g = lane / 4, mi = lane / 8, li = lane % 8;
#pragma unroll
  for (int j = 0; j < NJ; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int t = 0; t < D / 16; ++t) {
    uint32_t a[4];
    ldsm_x4(a, Qs + ((mi % 2) * 8 + li) * RS + t * 16 + (mi / 2) * 8);
#pragma unroll
    for (int jj = 0; jj < NJ / 2; ++jj) {
      uint32_t b[4];
      ldsm_x4(b, Ks + ((warp * NJ / 2 + jj) * 16 + (mi / 2) * 8 + li) * RS + t * 16 + (mi % 2) * 8);
      mma(s[2 * jj], a, b[0], b[1]);
      mma(s[2 * jj + 1], a, b[2], b[3]);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float mx = mask_row_max<NJ>(s, h, warp * NJ, c0, qd, rg[h], scale, softcap);
    if (qd == 0) red[warp * 16 + g + 8 * h] = mx;
  }
}
template <int D, int W>
__device__ __forceinline__ void spread_probs(const float (*s)[4], const float* red, int warp, int lane,
                                             const Range* rg, __nv_bfloat16* Ps, float* mc) {
  constexpr int NJ = 16 / W;
  const int qd = lane % 4, g = lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = g + 8 * h;
    float mx = red[row];
#pragma unroll
    for (int w = 1; w < W; ++w) mx = fmaxf(mx, red[w * 16 + row]);
    mc[h] = mx;
    const float base = mx == -INFINITY ? 0.f : mx;
    const bool pad = rg[h].lo > rg[h].pos;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const float p0 = pad ? 0.f : __expf(__fsub_rn(s[j][2 * h], base));
      const float p1 = pad ? 0.f : __expf(__fsub_rn(s[j][2 * h + 1], base));
      *reinterpret_cast<__nv_bfloat162*>(Ps + row * kPsRow + (warp * NJ + j) * 8 + qd * 2) =
          __floats2bfloat162_rn(p0, p1);
    }
  }
}
__device__ __forceinline__ void spread_sum(const __nv_bfloat16* Ps, int lane, const Range* rg, float* lc) {
  const int qd = lane % 4, g = lane / 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = 0.f;
    if (rg[h].lo <= rg[h].pos) {
      const __nv_bfloat16* row = Ps + (g + 8 * h) * kPsRow + qd * 2;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(row + j * 8));
        sum = __fadd_rn(sum, v.x);
        sum = __fadd_rn(sum, v.y);
      }
    }
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
    lc[h] = sum;
  }
}
template <int D, int W>
__device__ __forceinline__ void spread_pv(const __nv_bfloat16* Ps, const __nv_bfloat16* Vs, int warp,
                                          int lane, float (*oc)[4]) {
  constexpr int JP = D / 16 / W;  // output column pairs a warp
  static_assert(JP >= 1, "every warp has columns");
  const int mi = lane / 8, li = lane % 8;
#pragma unroll
  for (int j = 0; j < 2 * JP; ++j) oc[j][0] = oc[j][1] = oc[j][2] = oc[j][3] = 0.f;
#pragma unroll
  for (int t = 0; t < 8; ++t) {
    uint32_t a[4];
    ldsm_x4(a, Ps + ((mi % 2) * 8 + li) * kPsRow + t * 16 + (mi / 2) * 8);
#pragma unroll
    for (int jj = 0; jj < JP; ++jj)
      pv_pair_step<D>(Vs, lane, a, t, warp * JP + jj, oc[2 * jj], oc[2 * jj + 1]);
  }
}

// This thread's two pairs of warp `warp`: warp-local rows g and g + 8 (row, query head, visible range).
struct Pairs {
  Range rg[2];
  int prow[2], phead[2];
};
__device__ __forceinline__ Pairs pairs_of(const DeviceMeta& meta, int warp, int g, int group, int r_first,
                                          int nrows, int kvh, int window) {
  Pairs p;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = warp * 16 + g + 8 * h, rr = i / group;
    p.prow[h] = r_first + rr, p.phead[h] = kvh * group + i % group;
    p.rg[h] = rr < nrows ? row_range(meta, p.prow[h], window) : Range{1, 0};
  }
  return p;
}

// o = merge of chunk c's partial (oc, mc, lc) into the running (m, l, o) of each pair that sees chunk c:
// NJ 8-column groups of output (all D / 8, or a warp's share of a spread chunk).
template <int D, int NJ = D / 8>
__device__ __forceinline__ void merge_pairs(const Pairs& pr, int c, float* m, float* l, const float* mc,
                                            const float* lc, const float (*oc)[4], float (*o)[4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (!sees_chunk(pr.rg[h], c)) continue;
    const MergeFactors f = merge_chunk(m[h], l[h], mc[h], lc[h]);
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      o[j][2 * h] = merge_out(o[j][2 * h], oc[j][2 * h], f);
      o[j][2 * h + 1] = merge_out(o[j][2 * h + 1], oc[j][2 * h + 1], f);
    }
  }
}

// The loop schedule's output: o / l of each real pair, rounded to bf16; o holds the NJ 8-column groups from
// group j0 on.
template <int D, int NJ = D / 8>
__device__ __forceinline__ void store_pairs(const Pairs& pr, int hq, int qd, const float (*o)[4],
                                            const float* l, __nv_bfloat16* out, int j0 = 0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (pr.rg[h].lo > pr.rg[h].pos) continue;
    __nv_bfloat16* dst = out + (int64_t(pr.prow[h]) * hq + pr.phead[h]) * D;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int d = (j0 + j) * 8 + qd * 2;
      *reinterpret_cast<__nv_bfloat162*>(dst + d) =
          __floats2bfloat162_rn(finish_out(o[j][2 * h], l[h]), finish_out(o[j][2 * h + 1], l[h]));
    }
  }
}

}  // namespace tf::cuda::attn

// Paged attention for any number of query rows per sequence (decode 1, verify k+1, prefill chunk n).
//
// Row invariance: a row's visible positions [lo, pos] are cut at fixed absolute multiples of
// kAttnChunk. One block computes the (row, KV head, chunk) partials with an online softmax over the
// chunk's tiles in increasing order, then a second kernel combines the row's partials in increasing chunk
// order. Nothing depends on the other rows in the call or on how they were batched, so a token's output is
// the same bits whether it is decoded alone, verified among k+1 rows or prefilled in a chunk of any size.
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <climits>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace tf::cuda {
namespace {

template <int DPL>
struct Vec {
  float v[DPL];
};

template <int DPL>
__device__ __forceinline__ Vec<DPL> load_bf16(const __nv_bfloat16* p) {
  Vec<DPL> r;
  if constexpr (DPL == 4) {
    uint2 u = *reinterpret_cast<const uint2*>(p);
    __nv_bfloat162 a = *reinterpret_cast<__nv_bfloat162*>(&u.x), b = *reinterpret_cast<__nv_bfloat162*>(&u.y);
    r.v[0] = __low2float(a), r.v[1] = __high2float(a), r.v[2] = __low2float(b), r.v[3] = __high2float(b);
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) r.v[i] = __bfloat162float(p[i]);
  }
  return r;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void row_range(const DeviceMeta& meta, int r, int window, int* lo, int* pos) {
  *pos = meta.positions[r];
  *lo = window > 0 ? max(0, *pos - window + 1) : 0;
}

// One block per (group of up to `rpb` consecutive rows, KV head, chunk): the chunk's K/V are staged
// through shared memory in tiles of T positions at fixed absolute offsets, read once for every (row,
// query head) pair of the block that shares the KV head (warp w owns pairs w, w+4, ...; pair p is row
// p / group, head p % group). Decode uses rpb = 1 (one row, the GQA group's heads); prefill uses rpb > 1
// so that a tile read from L2 serves several rows. Rows of different sequences inside one group are
// processed one sequence run at a time. A pair's arithmetic does not depend on rpb: it visits its own
// tiles (from its first tile to its last position) in increasing order; lane j scores positions j, j+32,
// ... of the tile, each a sequential dot over D; max and sum use the same warp butterfly every time;
// positions outside its range score -inf and contribute exact zeros (their V is taken as 0, as the
// zero-filled tile rows of a single-row block are).
constexpr int kWarpsPerBlock = 4;
constexpr int kMaxHeadsPerWarp = 4;  // pairs per warp: GQA groups up to 16 at rpb = 1
constexpr int kQFloats = 2048;       // pairs * head_dim

// PF: the next tile's K/V are loaded into registers while the current tile is computed (register
// double buffer). Same arithmetic either way.
template <int DPL, bool PF>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    attention_partial(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kp,
                      const __nv_bfloat16* __restrict__ vp, DeviceMeta meta, int hq, int hk, float scale,
                      int window, float softcap, int max_chunks, int rpb, float* __restrict__ part_acc,
                      float* __restrict__ part_ml) {
  constexpr int D = DPL * 32;
  constexpr int T = D <= 128 ? 64 : 32;  // tile positions
  constexpr int PPL = T / 32;            // positions scored per lane
  constexpr int RS = D + 8;              // smem row stride (+16 bytes: conflict-free 16-byte reads)
  __shared__ __align__(16) __nv_bfloat16 ks[T * RS];
  __shared__ __align__(16) __nv_bfloat16 vs[T * RS];
  __shared__ __align__(16) float qs[kQFloats];
  const int kvh = blockIdx.x % hk, group = hq / hk, c = blockIdx.y;
  const int r_first = blockIdx.x / hk * rpb, r_last = min(r_first + rpb, meta.rows);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int c0 = c * kAttnChunk;
  const int bs = meta.block_size;
  constexpr int LPT = T * D / 8 / (kWarpsPerBlock * 32);  // 16-byte K (and V) loads per thread per tile
  static_assert(LPT * kWarpsPerBlock * 32 * 8 == T * D, "tile must split evenly over the block");

  for (int r0 = r_first; r0 < r_last;) {  // one run of rows of the same sequence at a time
    const int seq = meta.row_seq[r0];
    int r1 = r0 + 1;
    while (r1 < r_last && meta.row_seq[r1] == seq) ++r1;
    const int pairs = (r1 - r0) * group;
    // Per pair: its row's range in this chunk; the union decides which tiles the block stages.
    int pbeg[kMaxHeadsPerWarp], pend[kMaxHeadsPerWarp];
    int ubeg = INT_MAX, uend = -1;
    for (int r = r0; r < r1; ++r) {
      int lo, pos;
      row_range(meta, r, window, &lo, &pos);
      const int b = max(c0, lo), e = min(c0 + kAttnChunk - 1, pos);
      if (b <= e) ubeg = min(ubeg, b), uend = max(uend, e);
    }
    const int nh = (pairs - warp + kWarpsPerBlock - 1) / kWarpsPerBlock;  // pairs of this warp
#pragma unroll
    for (int hh = 0; hh < kMaxHeadsPerWarp; ++hh) {
      pbeg[hh] = 0, pend[hh] = -1;
      if (hh < nh) {
        int lo, pos;
        row_range(meta, r0 + (warp + kWarpsPerBlock * hh) / group, window, &lo, &pos);
        pbeg[hh] = max(c0, lo), pend[hh] = min(c0 + kAttnChunk - 1, pos);
      }
    }
    const int32_t* table = meta.tables + meta.table_offsets[seq];
    __syncthreads();  // the previous run's tiles and queries are consumed
    if (ubeg <= uend) {
      for (int i = tid; i < pairs * D; i += blockDim.x) {
        const int p = i / D, row = r0 + p / group, h = kvh * group + p % group;
        qs[i] = __bfloat162float(q[(int64_t(row) * hq + h) * D + i % D]);
      }
    }

    float m[kMaxHeadsPerWarp], l[kMaxHeadsPerWarp], acc[kMaxHeadsPerWarp][DPL];
#pragma unroll
    for (int hh = 0; hh < kMaxHeadsPerWarp; ++hh) {
      m[hh] = -FLT_MAX, l[hh] = 0.f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[hh][i] = 0.f;
    }
    uint4 kr[LPT], vr[LPT];
    auto fetch = [&](int t0) {
#pragma unroll
      for (int u = 0; u < LPT; ++u) {
        const int i = tid + u * kWarpsPerBlock * 32;
        const int row = i / (D / 8), col = (i % (D / 8)) * 8, p = t0 + row;
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
        if (p >= ubeg && p <= uend) {
          const int64_t o = (int64_t(table[p / bs]) * bs + p % bs) * hk * D + int64_t(kvh) * D + col;
          kr[u] = *reinterpret_cast<const uint4*>(kp + o);
          vr[u] = *reinterpret_cast<const uint4*>(vp + o);
        }
      }
    };
    auto stash = [&]() {
#pragma unroll
      for (int u = 0; u < LPT; ++u) {
        const int i = tid + u * kWarpsPerBlock * 32;
        const int row = i / (D / 8), col = (i % (D / 8)) * 8;
        *reinterpret_cast<uint4*>(ks + row * RS + col) = kr[u];
        *reinterpret_cast<uint4*>(vs + row * RS + col) = vr[u];
      }
    };
    const int first = ubeg <= uend ? c0 + (ubeg - c0) / T * T : INT_MAX;
    if (PF && first <= uend) fetch(first);
    for (int t0 = first; t0 <= uend; t0 += T) {
      __syncthreads();  // the previous tile is consumed (and qs is written, first time)
      if (!PF) fetch(t0);
      stash();
      __syncthreads();
      if (PF && t0 + T <= uend) fetch(t0 + T);  // in flight while this tile is computed
#pragma unroll
      for (int hh = 0; hh < kMaxHeadsPerWarp; ++hh) {
        if (hh >= nh) break;
        const int begin = pbeg[hh], end = pend[hh];
        if (t0 + T <= begin || t0 > end) continue;  // not one of this pair's tiles (uniform per warp)
        const float* qh = qs + (warp + kWarpsPerBlock * hh) * D;
        float s[PPL], mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < PPL; ++j) {
          const int row = lane + 32 * j, p = t0 + row;
          float d = 0.f;
#pragma unroll 4
          for (int e = 0; e < D; e += 8) {
            const uint4 k8 = *reinterpret_cast<const uint4*>(ks + row * RS + e);
            const float4 qa = *reinterpret_cast<const float4*>(qh + e),
                         qb = *reinterpret_cast<const float4*>(qh + e + 4);
            const __nv_bfloat162* kb = reinterpret_cast<const __nv_bfloat162*>(&k8);
            float2 f0 = __bfloat1622float2(kb[0]), f1 = __bfloat1622float2(kb[1]),
                   f2 = __bfloat1622float2(kb[2]), f3 = __bfloat1622float2(kb[3]);
            d += qa.x * f0.x;
            d += qa.y * f0.y;
            d += qa.z * f1.x;
            d += qa.w * f1.y;
            d += qb.x * f2.x;
            d += qb.y * f2.y;
            d += qb.z * f3.x;
            d += qb.w * f3.y;
          }
          float sc = d * scale;
          if (softcap > 0.f) sc = softcap * tanhf(sc / softcap);
          s[j] = (p >= begin && p <= end) ? sc : -INFINITY;
          mx = fmaxf(mx, s[j]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float m_new = fmaxf(m[hh], mx), corr = __expf(m[hh] - m_new);
        float e[PPL], sum = 0.f;
#pragma unroll
        for (int j = 0; j < PPL; ++j) e[j] = __expf(s[j] - m_new), sum += e[j];
        l[hh] = l[hh] * corr + warp_sum(sum);
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[hh][i] *= corr;
#pragma unroll
        for (int j = 0; j < PPL; ++j) {
#pragma unroll 8
          for (int src = 0; src < 32; ++src) {
            const float pj = __shfl_sync(0xffffffffu, e[j], src);
            const int p = t0 + src + 32 * j;
            const bool in = p >= begin && p <= end;  // a single-row block's tile row is zero otherwise
            const Vec<DPL> v = load_bf16<DPL>(vs + (src + 32 * j) * RS + lane * DPL);
#pragma unroll
            for (int i = 0; i < DPL; ++i) acc[hh][i] += pj * (in ? v.v[i] : 0.f);
          }
        }
        m[hh] = m_new;
      }
    }
#pragma unroll
    for (int hh = 0; hh < kMaxHeadsPerWarp; ++hh) {
      if (hh >= nh) break;
      if (pbeg[hh] > pend[hh]) continue;  // no positions of this row in the chunk: never combined
      const int pr = warp + kWarpsPerBlock * hh;
      const int h = kvh * group + pr % group;
      const int64_t slot = (int64_t(r0 + pr / group) * hq + h) * max_chunks + c;
#pragma unroll
      for (int i = 0; i < DPL; ++i) part_acc[slot * D + lane * DPL + i] = acc[hh][i];
      if (lane == 0) part_ml[slot * 2] = m[hh], part_ml[slot * 2 + 1] = l[hh];
    }
    r0 = r1;
  }
}

// One warp per (row, head): merges the row's chunk partials in increasing chunk order.
template <int DPL>
__global__ void attention_combine(DeviceMeta meta, int hq, int window, int max_chunks,
                                  const float* __restrict__ part_acc, const float* __restrict__ part_ml,
                                  __nv_bfloat16* __restrict__ out) {
  constexpr int D = DPL * 32;
  const int idx = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (idx >= meta.rows * hq) return;
  const int r = idx / hq;
  int lo, pos;
  row_range(meta, r, window, &lo, &pos);
  const int c0 = lo / kAttnChunk, c1 = pos / kAttnChunk;
  const float* ml = part_ml + int64_t(idx) * max_chunks * 2;
  const float* pa = part_acc + int64_t(idx) * max_chunks * D;
  float mx = -FLT_MAX;
  for (int c = c0; c <= c1; ++c) mx = fmaxf(mx, ml[2 * c]);
  float l = 0.f, acc[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) acc[i] = 0.f;
  for (int c = c0; c <= c1; ++c) {
    const float w = __expf(ml[2 * c] - mx);
    l += ml[2 * c + 1] * w;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[i] += pa[int64_t(c) * D + lane * DPL + i] * w;
  }
  const float inv = 1.f / l;
#pragma unroll
  for (int i = 0; i < DPL; ++i) out[int64_t(idx) * D + lane * DPL + i] = __float2bfloat16(acc[i] * inv);
}

LoopVariant g_attention_variant = LoopVariant::Auto;
LoopVariant g_attention_rows = LoopVariant::Auto;  // Plain: one row per block at any size (tests, bench)
constexpr int kMultiRowMin = 64;                   // rows from which a block serves several rows

template <int DPL>
void launch(const void* q, const void* k_pool, const void* v_pool, void* out, const DeviceMeta& meta, int hq,
            int hk, float scale, int window, float softcap, int max_chunks, float* part_acc, float* part_ml,
            cudaStream_t s) {
  const int group = hq / hk;
  TF_CHECK(group <= kWarpsPerBlock * kMaxHeadsPerWarp && group * DPL * 32 <= kQFloats,
           "CUDA attention supports up to 16 query heads per KV head (8 at head_dim 256)");
  // Rows per block: 1 for decode-sized calls; for prefill as many rows as the pair slots and the
  // query buffer hold. Timing only: a pair's arithmetic is the same for any rpb.
  int rpb = 1;
  if (meta.rows >= kMultiRowMin && g_attention_rows != LoopVariant::Plain)
    rpb = std::max(1, std::min(kWarpsPerBlock * kMaxHeadsPerWarp, kQFloats / (DPL * 32)) / group);
  dim3 grid((meta.rows + rpb - 1) / rpb * hk, max_chunks);
  auto kernel = g_attention_variant == LoopVariant::Prefetch ? attention_partial<DPL, true>
                                                             : attention_partial<DPL, false>;
  kernel<<<grid, kWarpsPerBlock * 32, 0, s>>>(static_cast<const __nv_bfloat16*>(q),
                                              static_cast<const __nv_bfloat16*>(k_pool),
                                              static_cast<const __nv_bfloat16*>(v_pool), meta, hq, hk, scale,
                                              window, softcap, max_chunks, rpb, part_acc, part_ml);
  TF_CUDA_LAUNCH_CHECK();
  const int warps = meta.rows * hq;
  attention_combine<DPL><<<(warps + 3) / 4, 128, 0, s>>>(meta, hq, window, max_chunks, part_acc, part_ml,
                                                         static_cast<__nv_bfloat16*>(out));
  TF_CUDA_LAUNCH_CHECK();
}

}  // namespace

void set_attention_variant(LoopVariant v) {
  g_attention_variant = v;
}

void set_attention_rows_per_block(LoopVariant v) {
  g_attention_rows = v;
}

void attention(const void* q, const void* k_pool, const void* v_pool, void* out, const DeviceMeta& meta,
               int hq, int hk, int head_dim, float scale, int window, float softcap, int max_chunks,
               float* part_acc, float* part_ml, cudaStream_t s) {
  TF_CHECK(hk > 0 && hq % hk == 0, "attention: query heads must be a multiple of KV heads");
  if (meta.rows == 0) return;
  switch (head_dim) {
    case 32:
      return launch<1>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc,
                       part_ml, s);
    case 64:
      return launch<2>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc,
                       part_ml, s);
    case 128:
      return launch<4>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc,
                       part_ml, s);
    case 256:
      return launch<8>(q, k_pool, v_pool, out, meta, hq, hk, scale, window, softcap, max_chunks, part_acc,
                       part_ml, s);
    default:
      throw Error("CUDA attention supports head_dim 32, 64, 128 and 256, got " + std::to_string(head_dim));
  }
}

}  // namespace tf::cuda

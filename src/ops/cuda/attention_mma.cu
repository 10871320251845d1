// Tensor-core paged attention (head_dim 64 / 128, GQA groups dividing 16), row-invariant like
// attention.cu: a row's visible positions are cut at absolute multiples of kAttnChunk, each chunk's
// partial (max, sum, unnormalised output) is computed with one fixed sequence of MMAs, and the
// partials are merged in increasing chunk order by one merge function (merge_chunk) with explicit
// round-to-nearest operations, so the compiler cannot contract them differently in different kernels.
//
// A block serves one "tile": up to 64 / group consecutive rows of one sequence, for one KV head. Its
// 4 warps each own 16 (row, query head) pairs, the M dimension of m16n8k16 MMAs:
//   S[16 x 128] = Q[16 x D] K[128 x D]^T  (D / 16 chained k-steps per element, fp32)
//   scale, softcap, mask to the pair's own range (-inf elsewhere); chunk max m_c and sum l_c of
//   P = bf16(exp(S - m_c)) (per-thread fixed order, then a fixed quad butterfly);
//   O_c[16 x D] = P V  (8 chained k-steps of 16 positions per element).
// An MMA's output element depends only on its own A row and B column, so a pair's bits do not depend
// on the other pairs in the warp (padding rows, rows of a longer prefill, other heads).
// Two schedules, chosen per tile for speed only (identical bits, tested):
//   split: one block per (tile, KV head, chunk) writes the chunk partial; a combine kernel merges a
//          pair's partials (decode, verify: parallel over the context);
//   loop:  one block per (tile, KV head) walks the chunks in increasing order and merges in registers
//          (prefill: the K/V chunk staged once serves up to 64 pairs). By default two tiles are joined
//          and served by the wide kernel: 8 warps, 128 pairs, K/V double-buffered (1.30x at 4k, run 68).
// Positions outside the tile's union range are staged as zeros; inside it, a position outside a pair's
// own range has P = 0 exactly, so it adds exact zeros either way.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <climits>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cuda/attention_chunk.cuh"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/mbarrier.cuh"
#include "ops/cuda/stamp_buffer.h"

namespace tf::cuda {
namespace {

using namespace attn;  // attention_chunk.cuh: the chunk arithmetic

const bool g_pdl_group = pdl_group_enabled("ATTENTION");  // launch.h

constexpr int kWarps = 4;
constexpr int kPairs = 16 * kWarps;  // (row, head) pairs a block serves

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const uint32_t a = uint32_t(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// One block's tile for one KV head: the sequence's block table, the tile's union range [ulo, uhi] of
// positions, and the staging of K/V chunks and Q into shared memory (positions outside [ulo, uhi] are
// zero-filled). K/V come by bulk copies, a row a thread (bulk_row, bulk_rows: both kernels); stage() and
// stage_part() are the wide kernel's cp.async form (TF_ATTN_WIDE_TMA=0, for A/B). The same bytes land in
// shared memory whichever kernel and form run.
template <int D, int NT>
struct Tile {
  static constexpr int RS = D + 8;
  // stage(), stage_part(): a thread copies the same 16-byte column of every kRowStep-th row of a chunk:
  // unit i = tid + NT * j is row i / (D / 8), column (i % (D / 8)) * 8, so the column and the first row are
  // per-thread constants and the kIters copies of a chunk unroll (their table loads issue together). The
  // loop it replaced (per-unit division, 64-bit products, a sign extension per address) drew a quarter of
  // the wide kernel's stall samples (run 70, ncu source counters); run 82: prefill attention 4k 1.024 ->
  // 0.94 ms, 32k 59.7 -> 53.8 ms. The bulk copies replaced both in run 140-141 (docs/cuda-notes.md).
  static constexpr int kUnitsPerRow = D / 8, kRowStep = NT / kUnitsPerRow, kIters = kC / kRowStep;
  static_assert(NT % kUnitsPerRow == 0 && kIters * kRowStep == kC,
                "a thread's units: one column, every kRowStep-th row");
  const int32_t* table;
  int bs, bs_shift, ulo, uhi;
  int row0, col;       // this thread's first row in a chunk and its column
  int64_t lane_off;    // kvh * D + col: the thread's offset inside a pool slot's K (or V) row
  int64_t slot_elems;  // hk * D: elements a pool slot holds
  int hk, kvh;
  Range first;  // the tile's first row's range

  __device__ Tile(const DeviceMeta& meta, int r_first, int nrows, int window, int hk_, int kvh_)
      : hk(hk_), kvh(kvh_) {
    const int seq = meta.row_seq[r_first];
    table = meta.tables + meta.table_offsets[seq];
    bs = meta.block_size;
    // A power-of-two block size (the engine's 16) takes shifts: the runtime signed division and
    // remainder per 16-byte unit were ~40% of prefill attention's issue slots (ncu, run 37).
    bs_shift = (bs & (bs - 1)) == 0 ? __ffs(bs) - 1 : -1;
    first = row_range(meta, r_first, window);
    ulo = first.lo, uhi = row_range(meta, r_first + nrows - 1, window).pos;
    row0 = int(threadIdx.x) / kUnitsPerRow, col = (int(threadIdx.x) % kUnitsPerRow) * 8;
    lane_off = int64_t(kvh) * D + col, slot_elems = int64_t(hk) * D;
  }
  __device__ __forceinline__ int slot_of(int p) const {  // p >= 0; slots < 2^31
    return bs_shift >= 0 ? table[p >> bs_shift] * bs + (p & (bs - 1)) : table[p / bs] * bs + p % bs;
  }
  __device__ __forceinline__ const __nv_bfloat16* src(const __nv_bfloat16* pool, int p) const {
    return pool + (int64_t(slot_of(p)) * slot_elems + lane_off);
  }
  // slot_of in 64 bits (bulk_row's form).
  __device__ __forceinline__ int64_t slot64(int p) const {
    return bs_shift >= 0 ? int64_t(table[p >> bs_shift]) * bs + (p & (bs - 1))
                         : int64_t(table[p / bs]) * bs + p % bs;
  }
  // K (or V) rows of chunk c, zeros outside [ulo, uhi].
  __device__ __forceinline__ void stage(__nv_bfloat16* dst, const __nv_bfloat16* pool, int c) const {
    const int c0 = c * kC;
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      const int row = row0 + j * kRowStep, p = c0 + row;
      const bool in = p >= ulo && p <= uhi;
      cp_async16(dst + row * RS + col, in ? src(pool, p) : pool, in);
    }
  }
  // Only the rows p in [lo, hi] of chunk c (and, with `zeros`, the zero fill outside [ulo, uhi]).
  __device__ __forceinline__ void stage_part(__nv_bfloat16* dst, const __nv_bfloat16* pool, int c, int lo,
                                             int hi, bool zeros) const {
    const int c0 = c * kC;
#pragma unroll
    for (int j = 0; j < kIters; ++j) {
      const int row = row0 + j * kRowStep, p = c0 + row;
      if (p >= lo && p <= hi)
        cp_async16(dst + row * RS + col, src(pool, p), true);
      else if (zeros && (p < ulo || p > uhi))
        cp_async16(dst + row * RS + col, pool, false);
    }
  }
  // The narrow kernel's staging (TMA): thread i (NT == kC) owns row i of chunk c. A row inside [lo, hi] comes
  // by one bulk copy of its D * 2 bytes, completing on mbarrier `bar`; with `zeros`, a row outside [ulo, uhi]
  // is zeroed by the thread. The same bytes land in shared memory as stage()/stage_part() put there, but a
  // row costs one table load and one copy a thread instead of D / 8 address computations and cp.asyncs:
  // those loops were ~60% of the b=1 decode kernel's issue slots (ncu, run 100) and the kernel cost the 8B
  // b=1 step 0.51 ms of 4.76 (run 139, left out).
  __device__ __forceinline__ int rows_in(int c, int lo, int hi) const {
    const int c0 = c * kC;
    return max(0, min(hi, c0 + kC - 1) - max(lo, c0) + 1);
  }
  // Thread 0 (of the block, or `tid` 0 of a team) arms mbarrier `bar` for chunk c: `bytes` for each of its
  // positions inside [ulo, uhi].
  __device__ __forceinline__ void arm(uint32_t bar, int c, uint32_t bytes, int tid = int(threadIdx.x)) const {
    if (tid == 0) mbar_arrive_expect_tx(bar, uint32_t(rows_in(c, ulo, uhi)) * bytes);
  }
  __device__ __forceinline__ void bulk_rows(__nv_bfloat16* dst, const __nv_bfloat16* pool, int c, int lo,
                                            int hi, bool zeros, uint32_t bar) const {
    static_assert(NT == kC, "a thread a row");
    bulk_row(dst, pool, c, int(threadIdx.x), lo, hi, zeros, bar);
  }
  // Row `row` of chunk c (the wide kernel: threads 0-127 K's rows, 128-255 V's).
  __device__ __forceinline__ void bulk_row(__nv_bfloat16* dst, const __nv_bfloat16* pool, int c, int row,
                                           int lo, int hi, bool zeros, uint32_t bar) const {
    const int p = c * kC + row;
    if (p >= lo && p <= hi) {
      bulk_copy_g2s(uint32_t(__cvta_generic_to_shared(dst + row * RS)),
                    pool + (slot64(p) * hk * D + int64_t(kvh) * D), D * 2, bar);
    } else if (zeros && (p < ulo || p > uhi)) {
      uint4* z = reinterpret_cast<uint4*>(dst + row * RS);
#pragma unroll
      for (int u = 0; u < D / 8; ++u) z[u] = make_uint4(0, 0, 0, 0);
    }
  }
  // The first chunk in two passes: positions before the sequence's first row in this forward hold K/V
  // that earlier forwards wrote, so they (and the zero fill) are copied before pdl_wait, under the kernels
  // that make this step's q and K/V; the rest after it. Only when the tile starts the sequence's rows
  // (decode, verify, a prompt's first tile): a later tile of a long prompt reads rows this forward wrote.
  // Same bytes in shared memory either way. Returns where the second pass starts.
  __device__ __forceinline__ int fresh(const DeviceMeta& meta, int r_first) const {
    const bool seq_start = r_first == 0 || meta.row_seq[r_first - 1] != meta.row_seq[r_first];
    return seq_start ? max(ulo, first.pos) : ulo;  // [ulo, fresh): written by earlier forwards
  }
  // Q of `pairs` (row, head) pairs (zeros: padding).
  __device__ __forceinline__ void stage_q(__nv_bfloat16* Qs, const __nv_bfloat16* q, int pairs, int group,
                                          int r_first, int nrows, int hq) const {
    for (int i = int(threadIdx.x); i < pairs * (D / 8); i += NT) {
      const int pr = i / (D / 8), col = (i % (D / 8)) * 8, rr = pr / group;
      const int64_t off = rr < nrows ? (int64_t(r_first + rr) * hq + kvh * group + pr % group) * D + col : 0;
      cp_async16(Qs + pr * RS + col, q + off, rr < nrows);
    }
  }
};

// The merge of one (row, head) pair's chunk partials, in increasing chunk order, by one warp (D / 32
// values a lane): the combine kernel's work, shared with the split kernel's fused combine (same bits).
// The partials are read through L2 (__ldcg): in the fused combine other blocks wrote them. U chunks' loads
// go out together (one vector load of a lane's values each), then they are merged in order: at 8k context
// (64 chunks) U = 4 made the merge a chain of 16 L2 round trips on the step's critical path; U = 16 unless
// set_attention_wide_combine(false) (A/B only; the merge order and so the bits are the same).
// L lanes a pair (32, or 16: a warp merges two pairs at once, D / 16 values a lane; the elements' merges are
// independent, so the lane split does not change a bit).
template <int D, int U, int L = 32>
__device__ __forceinline__ void combine_pair_u(const DeviceMeta& meta, int hq, int window, int max_chunks,
                                               int r, int h, int lane, const float* part_acc,
                                               const float* part_ml, __nv_bfloat16* out) {
  constexpr int DPL = D / L;
  static_assert(DPL == 2 || DPL % 4 == 0, "a lane's values are one float2 or float4s");
  const Range rg = row_range(meta, r, window);
  const int64_t idx = int64_t(r) * hq + h;
  float m = -INFINITY, l = 0.f, o[DPL];
#pragma unroll
  for (int i = 0; i < DPL; ++i) o[i] = 0.f;
  const int c_end = rg.pos / kC;
  for (int c0 = rg.lo / kC; c0 <= c_end; c0 += U) {
    float2 ml[U];
    float pa[U][DPL];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u > c_end) break;
      const int64_t slot = idx * max_chunks + c0 + u;
      ml[u] = __ldcg(reinterpret_cast<const float2*>(part_ml + slot * 2));
      const float* src = part_acc + slot * D + lane * DPL;
      if constexpr (DPL % 4 == 0) {
#pragma unroll
        for (int k = 0; k < DPL / 4; ++k) {
          const float4 v = __ldcg(reinterpret_cast<const float4*>(src) + k);
          pa[u][4 * k] = v.x, pa[u][4 * k + 1] = v.y, pa[u][4 * k + 2] = v.z, pa[u][4 * k + 3] = v.w;
        }
      } else {
        const float2 v = __ldcg(reinterpret_cast<const float2*>(src));
        pa[u][0] = v.x, pa[u][1] = v.y;
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (c0 + u > c_end) break;
      const MergeFactors f = merge_chunk(m, l, ml[u].x, ml[u].y);
#pragma unroll
      for (int i = 0; i < DPL; ++i) o[i] = merge_out(o[i], pa[u][i], f);
    }
  }
#pragma unroll
  for (int i = 0; i < DPL; ++i) out[idx * D + lane * DPL + i] = __float2bfloat16_rn(finish_out(o[i], l));
}
// `wide`: 16 chunks' loads at a time, else 4.
template <int D>
__device__ __forceinline__ void combine_pair(bool wide, const DeviceMeta& meta, int hq, int window,
                                             int max_chunks, int r, int h, int lane, const float* part_acc,
                                             const float* part_ml, __nv_bfloat16* out) {
  if (wide)
    combine_pair_u<D, 16>(meta, hq, window, max_chunks, r, h, lane, part_acc, part_ml, out);
  else
    combine_pair_u<D, 4>(meta, hq, window, max_chunks, r, h, lane, part_acc, part_ml, out);
}

// Fused combine (split schedule with tickets): every block of a (tile, KV head) takes a ticket after its
// partials are written and fenced; the last one merges the tile's pairs of this KV head (warp w takes
// pairs w, w + 4, ...) and resets the ticket for the next launch. The ticket only elects who merges; the
// merge order is the combine kernel's.
template <int D>
__device__ __forceinline__ void fused_combine(const DeviceMeta& meta, int hq, int hk, int window,
                                              int max_chunks, int2 tile, int kvh, int* ticket,
                                              const float* part_acc, const float* part_ml, __nv_bfloat16* out,
                                              bool wrote, bool wide, bool halves,
                                              unsigned long long* stamps) {
  __shared__ int last;
  if (wrote) __threadfence();  // this thread's partials, before the block's ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1) == int(gridDim.y) - 1;
  __syncthreads();
  if (stamps && threadIdx.x == 0) stamps[6] = gtime();
  if (!last) return;
  __threadfence();  // the other blocks' partials, after their tickets
  if (threadIdx.x == 0) *ticket = 0;
  const int group = hq / hk, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (halves) {  // two pairs a warp at once (a decode row's 8 heads: one round of 4 warps, not two)
    for (int p = 2 * warp + lane / 16; p < tile.y * group; p += 2 * kWarps)
      combine_pair_u<D, 8, 16>(meta, hq, window, max_chunks, tile.x + p / group, kvh * group + p % group,
                               lane % 16, part_acc, part_ml, out);
  } else {
    for (int p = warp; p < tile.y * group; p += kWarps)
      combine_pair<D>(wide, meta, hq, window, max_chunks, tile.x + p / group, kvh * group + p % group, lane,
                      part_acc, part_ml, out);
  }
  if (stamps && threadIdx.x == 0) stamps[7] = gtime();
}

// A split block's chunk-c partial of its pairs into the split partials: output columns [8 j0, 8 (j0 + NJ))
// from oc, and with `ml` the chunk's max and sum.
template <int D, int NJ>
__device__ __forceinline__ void put_partial(const Pairs& pr, int c, int lane, const float (*oc)[4], int j0,
                                            const float* mc, const float* lc, bool ml, float* part_acc,
                                            float* part_ml, int hq, int max_chunks) {
  const int qd = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const Range& rg = pr.rg[h];
    if (!(rg.lo <= rg.pos && c >= rg.lo / kC && c <= rg.pos / kC)) continue;
    const int64_t slot = (int64_t(pr.prow[h]) * hq + pr.phead[h]) * max_chunks + c;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      const int d = (j0 + j) * 8 + qd * 2;
      *reinterpret_cast<float2*>(part_acc + slot * D + d) = make_float2(oc[j][2 * h], oc[j][2 * h + 1]);
    }
    if (ml && qd == 0) part_ml[slot * 2] = mc[h], part_ml[slot * 2 + 1] = lc[h];
  }
}

// `stamps` (benches): thread 0's globaltimer at kAttnStamps points of a split block, block (y, x) at
// stamps[(y * gridDim.x + x) * kAttnStamps].
template <int D>
__global__ void __launch_bounds__(kWarps * 32)
    attention_mma_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kp,
                         const __nv_bfloat16* __restrict__ vp, DeviceMeta meta, int hq, int hk, float scale,
                         int window, float softcap, const int2* __restrict__ tiles, int max_chunks,
                         int split_cpb, float* __restrict__ part_acc, float* __restrict__ part_ml,
                         int* __restrict__ tickets, __nv_bfloat16* __restrict__ out, bool wide_combine,
                         bool spread_ok, bool half_combine, unsigned long long* stamps) {
  constexpr int RS = D + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  __nv_bfloat16* Vs = Ks + kC * RS;
  __nv_bfloat16* Qs = Vs + kC * RS;
  if (stamps) stamps += (int64_t(blockIdx.y) * gridDim.x + blockIdx.x) * kAttnStamps;
  auto stamp = [&](int i) {
    if (stamps && threadIdx.x == 0) stamps[i] = gtime();
  };
  if (stamps && threadIdx.x == 0)  // a stamp this launch does not reach reads 0, not an older launch's
    for (int i = 1; i < kAttnStamps; ++i) stamps[i] = 0;
  stamp(0);
  const int group = hq / hk;
  const int2 tile = tiles[blockIdx.x / hk];
  const int kvh = blockIdx.x % hk, r_first = tile.x, nrows = tile.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;
  // The tile's union range (its rows are consecutive positions of one sequence).
  const Tile<D, kWarps * 32> T(meta, r_first, nrows, window, hk, kvh);
  int cb = T.ulo / kC, ce = T.uhi / kC;
  const bool split = split_cpb > 0;
  if (split) {  // this block's run of chunks; each chunk's partial is written on its own
    cb = max(cb, int(blockIdx.y) * split_cpb), ce = min(ce, int(blockIdx.y) * split_cpb + split_cpb - 1);
  }
  // Metadata and tiles (read above) come by copies that precede every kernel of the forward; q and this
  // step's K/V rows come from the kernels before this one.
  pdl_launch_dependents();
  // spread: a split tile whose pairs all sit in warp 0 has every warp work on its chunks (spread_*), each
  // warp then holding warp 0's pairs.
  const bool spread = spread_ok && split && nrows * group <= 16;
  const Pairs pr = pairs_of(meta, spread ? 0 : warp, g, group, r_first, nrows, kvh, window);
  const bool warp_live = spread || warp * 16 / group < nrows;
  __shared__ float red[kWarps * 16];      // spread: the warps' row maxima
  __nv_bfloat16* Ps = Qs + 16 * (D + 8);  // spread: P, in Q's rows past warp 0's (zeros, never read)
  const int fresh = T.fresh(meta, r_first);
  // K and V chunks arrive by bulk copies (Tile::bulk_rows), each buffer on its mbarrier: one phase a chunk,
  // thread 0's arrive carrying the chunk's bytes.
  __shared__ __align__(8) uint64_t kv_bars[2];
  const uint32_t kbar = uint32_t(__cvta_generic_to_shared(&kv_bars[0])), vbar = kbar + 8;
  const uint32_t row_bytes = D * 2;
  if (threadIdx.x == 0) {
    mbar_init(kbar, 1), mbar_init(vbar, 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (cb <= ce) {
    T.arm(kbar, cb, row_bytes), T.arm(vbar, cb, row_bytes);
    T.bulk_rows(Ks, kp, cb, T.ulo, fresh - 1, true, kbar);
    T.bulk_rows(Vs, vp, cb, T.ulo, fresh - 1, true, vbar);
  }
  pdl_wait();  // every block waits, also one with nothing to do: the grid never completes before its inputs
  stamp(1);
  if (cb > ce) {  // uniform: no positions of the tile here (split blocks)
    if (tickets)
      fused_combine<D>(meta, hq, hk, window, max_chunks, tile, kvh, tickets + blockIdx.x, part_acc, part_ml,
                       out, false, wide_combine, half_combine, stamps);
    return;
  }
  T.stage_q(Qs, q, kPairs, group, r_first, nrows, hq);
  cp_async_commit();
  T.bulk_rows(Ks, kp, cb, fresh, T.uhi, false, kbar);  // the rows this step's kernels wrote
  T.bulk_rows(Vs, vp, cb, fresh, T.uhi, false, vbar);

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;

  // Pipeline: K(c + 1) loads while P V(c) computes, V(c + 1) while S(c + 1) computes.
  for (int c = cb, phase = 0; c <= ce; ++c, phase ^= 1) {
    const int c0 = c * kC;
    cp_async_wait<0>();      // Q (the first chunk)
    mbar_wait(kbar, phase);  // K(c); V(c) may still be in flight
    __syncthreads();
    if (c == cb) stamp(2);
    if (spread) {  // the chunk of warp 0's pairs by all the warps (attention_chunk.cuh: same bits)
      constexpr int NJ = 16 / kWarps, JP = D / 16 / kWarps;
      float s4[NJ][4], mc[2], lc[2], oc[2 * JP][4];
      spread_scores<D, kWarps>(Qs, Ks, warp, lane, c0, pr.rg, scale, softcap, s4, red);
      __syncthreads();  // every warp is done with K(c); the row maxima are out
      if (c == cb) stamp(3);
      if (c < ce) {
        T.arm(kbar, c + 1, row_bytes);
        fence_proxy_async();
        T.bulk_rows(Ks, kp, c + 1, T.ulo, T.uhi, true, kbar);
      }
      spread_probs<D, kWarps>(s4, red, warp, lane, pr.rg, Ps, mc);
      mbar_wait(vbar, phase);  // V(c)
      __syncthreads();         // P is in Ps
      if (c == cb) stamp(4);
      if (warp == 0) spread_sum(Ps, lane, pr.rg, lc);
      spread_pv<D, kWarps>(Ps, Vs, warp, lane, oc);
      put_partial<D, 2 * JP>(pr, c, lane, oc, 2 * JP * warp, mc, lc, warp == 0, part_acc, part_ml, hq,
                             max_chunks);
      __syncthreads();  // every warp is done with V(c) and Ps
      if (c < ce) {
        T.arm(vbar, c + 1, row_bytes);
        fence_proxy_async();
        T.bulk_rows(Vs, vp, c + 1, T.ulo, T.uhi, true, vbar);
      }
      continue;
    }
    float s[16][4], mc[2], lc[2];
    if (warp_live) chunk_scores<D>(Qs, Ks, warp, lane, c0, pr.rg, scale, softcap, s, mc, lc);
    __syncthreads();  // every warp is done with K(c)
    if (c == cb) stamp(3);
    if (c < ce) {
      T.arm(kbar, c + 1, row_bytes);
      fence_proxy_async();  // the warps' reads of K(c) before the copies that overwrite it
      T.bulk_rows(Ks, kp, c + 1, T.ulo, T.uhi, true, kbar);
    }
    mbar_wait(vbar, phase);  // V(c)
    __syncthreads();
    if (c == cb) stamp(4);
    if (warp_live) {
      float oc[D / 8][4];
      chunk_pv<D>(Vs, lane, s, oc);
      if (split)
        put_partial<D, D / 8>(pr, c, lane, oc, 0, mc, lc, true, part_acc, part_ml, hq, max_chunks);
      else
        merge_pairs<D>(pr, c, m, l, mc, lc, oc, o);
    }
    __syncthreads();  // every warp is done with V(c)
    if (c < ce) {
      T.arm(vbar, c + 1, row_bytes);
      fence_proxy_async();
      T.bulk_rows(Vs, vp, c + 1, T.ulo, T.uhi, true, vbar);
    }
  }
  stamp(5);
  if (split) {
    if (tickets)
      fused_combine<D>(meta, hq, hk, window, max_chunks, tile, kvh, tickets + blockIdx.x, part_acc, part_ml,
                       out, warp_live, wide_combine, half_combine, stamps);
    return;
  }
  if (!warp_live) return;
  store_pairs<D>(pr, hq, qd, o, l, out);
}

// Decode loop: the split tiles whose pairs fit one warp (decode rows; verify runs of up to 16 / group rows),
// one block a (tile, KV head) walking all of the tile's chunks with the spread arithmetic (every warp on warp
// 0's pairs, each its share of S's n-tiles and of the output columns) and K/V double-buffered (chunk c + 2
// loads during chunk c + 1), each chunk merged into the warp's output columns in registers in increasing
// chunk order: the combine's merge_chunk / merge_out / finish_out sequence on the very (mc, lc, oc) values a
// split block writes as its partial, so the split schedule's bits with no partials and no combine. For calls
// whose (tile, KV head) blocks about fill the card once (16 decode rows of 8 KV heads on 132 SMs): 148 KB of
// shared memory at D = 128 (one block an SM), 80 KB at 64. Every warp computes l_c itself (spread_sum), so
// each holds the same (m, l).
// TM = 2 (two teams; session 45, the default where the blocks fill the card since session 46): 8 warps as two
// teams of 4, team t taking chunks cb + t, cb + t + 2, ... -- K/V stage t is its own, so its barriers are its
// own (named barrier 1 + t) -- each with the one-team kernel's spread arithmetic (the same 4-warp split of S
// and of the output columns: the same bits), two chunks computed at once. Team 1 hands each chunk's (mc, lc,
// oc) to team 0 through shared memory (thread i of team 1 to thread i of team 0: the same pairs and columns),
// and team 0 merges in chunk order (team 1's chunk c - 1 before its own chunk c). Handoffs: named barrier 3
// (full: team 1 arrives, team 0 waits) and 4 (empty: team 0 arrives when team 1 has a further chunk, team 1
// waits before its second and later handoffs), so the counts match exactly.
template <int D, int TM>
__global__ void __launch_bounds__(TM* kWarps * 32, 1)
    attention_decode_loop_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kp,
                                 const __nv_bfloat16* __restrict__ vp, DeviceMeta meta, int hq, int hk,
                                 float scale, int window, float softcap, const int2* __restrict__ tiles,
                                 __nv_bfloat16* __restrict__ out) {
  static_assert(TM == 1 || TM == 2, "one or two teams");
  constexpr int RS = D + 8, kStage = kC * RS, NJ = 16 / kWarps, JP = D / 16 / kWarps;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Ks = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [2][kC][RS]
  __nv_bfloat16* Vs = Ks + 2 * kStage;                             // [2][kC][RS]
  __nv_bfloat16* Qs = Vs + 2 * kStage;                             // warp 0's 16 pairs [16][RS]
  __nv_bfloat16* Ps0 = Qs + 16 * RS;                               // [TM][16][kPsRow]
  float* Hs = reinterpret_cast<float*>(Ps0 + TM * 16 * kPsRow);    // TM 2: [4 + 8 JP][128]: mc, lc, oc
  __shared__ float red[TM][kWarps * 16];
  __shared__ __align__(8) uint64_t bars[4];  // K of stage 0, 1; V of stage 0, 1
  const int group = hq / hk;
  const int2 tile = tiles[blockIdx.x / hk];
  const int kvh = blockIdx.x % hk, r_first = tile.x, nrows = tile.y;
  const int team = TM == 2 ? int(threadIdx.x) / 128 : 0;
  const int tt = TM == 2 ? int(threadIdx.x) % 128 : int(threadIdx.x);  // the thread in its team
  const int warp = tt / 32, lane = tt % 32, g = lane / 4, qd = lane % 4;
  __nv_bfloat16* const Ps = Ps0 + team * 16 * kPsRow;
  float* const red_t = red[team];
  const Tile<D, kWarps * 32> T(meta, r_first, nrows, window, hk, kvh);
  const int cb = T.ulo / kC, ce = T.uhi / kC;
  pdl_launch_dependents();
  const Pairs pr = pairs_of(meta, 0, g, group, r_first, nrows, kvh, window);
  const int fresh = T.fresh(meta, r_first);
  const uint32_t bar0 = uint32_t(__cvta_generic_to_shared(&bars[0]));
  auto kbar = [&](int st) { return bar0 + 8 * st; };
  auto vbar = [&](int st) { return bar0 + 16 + 8 * st; };
  const uint32_t row_bytes = D * 2;
  auto arm = [&](uint32_t bar, int c) { T.arm(bar, c, row_bytes, tt); };  // by the team's thread 0
  auto team_sync = [&] {
    if constexpr (TM == 1)
      __syncthreads();
    else if (team == 0)  // (constant IDs: ptxas reserves all 16 barriers for a computed one)
      nbar_sync(1, 128);
    else
      nbar_sync(2, 128);
  };
  if (threadIdx.x == 0) {
    for (int i = 0; i < 4; ++i) mbar_init(bar0 + 8 * i, 1);
    mbar_init_fence();
  }
  __syncthreads();
  // The first two chunks (one a team): their rows earlier forwards wrote, before the wait; a row a thread.
  const int c_pre = min(ce, cb + 1);
  for (int c = cb + team; c <= c_pre; c += TM) {
    const int st = c - cb;
    arm(kbar(st), c), arm(vbar(st), c);
    T.bulk_row(Ks + st * kStage, kp, c, tt, T.ulo, fresh - 1, true, kbar(st));
    T.bulk_row(Vs + st * kStage, vp, c, tt, T.ulo, fresh - 1, true, vbar(st));
  }
  pdl_wait();
  if (cb > ce) return;  // uniform: a tile without positions
  if (team == 0) T.stage_q(Qs, q, 16, group, r_first, nrows, hq);
  cp_async_commit();
  for (int c = cb + team; c <= c_pre; c += TM) {  // the rows this step's kernels wrote
    const int st = c - cb;
    T.bulk_row(Ks + st * kStage, kp, c, tt, fresh, T.uhi, false, kbar(st));
    T.bulk_row(Vs + st * kStage, vp, c, tt, fresh, T.uhi, false, vbar(st));
  }
  if constexpr (TM == 2) {  // Q, copied by team 0, before either team's first chunk
    cp_async_wait<0>();
    __syncthreads();
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, o[2 * JP][4];
#pragma unroll
  for (int j = 0; j < 2 * JP; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  // Team 0's merge of team 1's chunk c (TM 2): its handoff, then the empty barrier when team 1 has a further
  // chunk (c + 2), then the merge.
  // The handoff's floats of this thread: mc[h] at field h, lc[h] at 2 + h, oc[j][e] at 4 + 4 j + e.
  auto hand = [&](int field) -> float& { return Hs[field * 128 + tt]; };
  auto merge_handed = [&](int c) {
    nbar_sync(3, 256);
    float hm[2], hl[2], ho[2 * JP][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) hm[h] = hand(h), hl[h] = hand(2 + h);
#pragma unroll
    for (int j = 0; j < 2 * JP; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) ho[j][e] = hand(4 + 4 * j + e);
    if (c + 2 <= ce) nbar_arrive(4, 256);
    merge_pairs<D, 2 * JP>(pr, c, m, l, hm, hl, ho, o);
  };
  for (int c = cb + team, i = 0; c <= ce; c += TM, ++i) {
    const int st = TM == 2 ? team : (c - cb) & 1;
    const uint32_t phase = TM == 2 ? i & 1 : ((c - cb) >> 1) & 1;
    __nv_bfloat16 *Kc = Ks + st * kStage, *Vc = Vs + st * kStage;
    if constexpr (TM == 1) cp_async_wait<0>();  // Q (the first chunk)
    mbar_wait(kbar(st), phase);
    team_sync();
    float s4[NJ][4], mc[2], lc[2], oc[2 * JP][4];
    spread_scores<D, kWarps>(Qs, Kc, warp, lane, c * kC, pr.rg, scale, softcap, s4, red_t);
    fence_proxy_async();  // each thread's reads of K(c) before the bulk copies that overwrite it
                          // (mbarrier.cuh)
    team_sync();          // every warp of the team is done with K(c); the row maxima are out
    if (c + 2 <= ce) {
      arm(kbar(st), c + 2);
      T.bulk_row(Kc, kp, c + 2, tt, T.ulo, T.uhi, true, kbar(st));
    }
    spread_probs<D, kWarps>(s4, red_t, warp, lane, pr.rg, Ps, mc);
    mbar_wait(vbar(st), phase);
    team_sync();  // P is in Ps
    spread_sum(Ps, lane, pr.rg, lc);
    spread_pv<D, kWarps>(Ps, Vc, warp, lane, oc);
    fence_proxy_async();  // each thread's reads of V(c), as for K
    team_sync();          // every warp of the team is done with V(c), Ps and red
    if (c + 2 <= ce) {    // (before the merges: team 0's waits on team 1 do not delay its V)
      arm(vbar(st), c + 2);
      T.bulk_row(Vc, vp, c + 2, tt, T.ulo, T.uhi, true, vbar(st));
    }
    if (team == 0) {
      if (TM == 2 && c > cb) merge_handed(c - 1);          // chunk order: team 1's c - 1 first
      merge_pairs<D, 2 * JP>(pr, c, m, l, mc, lc, oc, o);  // the warp's columns
    } else {                                               // team 1 hands its chunk over
      if (i > 0) nbar_sync(4, 256);                        // team 0 has read the previous one
#pragma unroll
      for (int h = 0; h < 2; ++h) hand(h) = mc[h], hand(2 + h) = lc[h];
#pragma unroll
      for (int j = 0; j < 2 * JP; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) hand(4 + 4 * j + e) = oc[j][e];
      nbar_arrive(3, 256);
    }
  }
  if (team != 0) return;
  if constexpr (TM == 2) {  // team 1's last chunk, where it follows team 0's last
    const int last0 = cb + 2 * ((ce - cb) / 2);
    if (last0 + 1 <= ce) merge_handed(last0 + 1);
  }
  store_pairs<D, 2 * JP>(pr, hq, qd, o, l, out, 2 * JP * warp);  // (put_partial's columns of a spread chunk)
}

// Loop schedule, wide: 8 warps serve up to 128 (row, head) pairs (two planned loop tiles of one sequence,
// joined by widen_loop_tiles), and K/V are double-buffered: chunk c + 1 loads during all of chunk c's
// work, one barrier pair a chunk. Each warp runs the narrow kernel's per-warp code (chunk_scores,
// chunk_pv, merge_chunk) on the same shared-memory bytes, so every pair's bits are the narrow loop's (and
// the split schedule's). Blocks take the tiles last to first: a sequence's later rows walk more chunks,
// and starting the longest blocks first shortens the tail of a causal prefill.
constexpr int kWideWarps = 8;
constexpr int kWidePairs = 16 * kWideWarps;

template <int D>
__global__ void __launch_bounds__(kWideWarps * 32, 1)
    attention_loop_wide_kernel(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kp,
                               const __nv_bfloat16* __restrict__ vp, DeviceMeta meta, int hq, int hk,
                               float scale, int window, float softcap, const int2* __restrict__ tiles,
                               __nv_bfloat16* __restrict__ out, bool tma) {
  constexpr int RS = D + 8, kStage = kC * RS;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* KV = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // K0, V0, K1, V1
  __nv_bfloat16* Qs = KV + 4 * kStage;
  const int group = hq / hk;
  const int2 tile = tiles[int(gridDim.x) / hk - 1 - int(blockIdx.x) / hk];  // longest first
  const int kvh = blockIdx.x % hk, r_first = tile.x, nrows = tile.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qd = lane % 4, g = lane / 4;
  const Tile<D, kWideWarps * 32> T(meta, r_first, nrows, window, hk, kvh);
  const int cb = T.ulo / kC, ce = T.uhi / kC;
  pdl_launch_dependents();
  const Pairs pr = pairs_of(meta, warp, g, group, r_first, nrows, kvh, window);
  const bool warp_live = warp * 16 / group < nrows;
  // As the narrow kernel: K/V that earlier forwards wrote are staged before pdl_wait.
  const int fresh = T.fresh(meta, r_first);
  // tma: by bulk copies (Tile::bulk_row; thread t: row t % 128 of K (t < 128) or V), buffer b's chunk on
  // mbarrier b (one phase a use); else by the cp.async loops. Same bytes.
  __shared__ __align__(8) uint64_t buf_bars[2];
  const uint32_t bar0 = uint32_t(__cvta_generic_to_shared(&buf_bars[0]));
  const int trow = int(threadIdx.x) % kC, tkv = int(threadIdx.x) / kC;  // tkv: 0 K, 1 V
  const __nv_bfloat16* tpool = tkv ? vp : kp;
  const uint32_t chunk_bytes = 2 * D * 2;  // K and V rows of one position
  if (tma) {
    if (threadIdx.x == 0) {
      mbar_init(bar0, 1), mbar_init(bar0 + 8, 1);
      mbar_init_fence();
    }
    T.arm(bar0, cb, chunk_bytes);
    __syncthreads();
    T.bulk_row(KV + tkv * kStage, tpool, cb, trow, T.ulo, fresh - 1, true, bar0);
  } else {
    T.stage_part(KV, kp, cb, T.ulo, fresh - 1, true);
    T.stage_part(KV + kStage, vp, cb, T.ulo, fresh - 1, true);
  }
  pdl_wait();
  T.stage_q(Qs, q, kWidePairs, group, r_first, nrows, hq);
  if (tma) {
    T.bulk_row(KV + tkv * kStage, tpool, cb, trow, fresh, T.uhi, false, bar0);
  } else {
    T.stage_part(KV, kp, cb, fresh, T.uhi, false);
    T.stage_part(KV + kStage, vp, cb, fresh, T.uhi, false);
  }
  cp_async_commit();  // group: Q, K(cb), V(cb) (with tma: Q)
  auto stage_chunk = [&](int c) {
    const int b = (c - cb) & 1;
    __nv_bfloat16* buf = KV + b * 2 * kStage;
    if (tma) {
      T.arm(bar0 + 8 * b, c, chunk_bytes);
      fence_proxy_async();  // the warps' reads of the buffer (two chunks ago) before the copies
      T.bulk_row(buf + tkv * kStage, tpool, c, trow, T.ulo, T.uhi, true, bar0 + 8 * b);
    } else {
      T.stage(buf, kp, c);
      T.stage(buf + kStage, vp, c);
      cp_async_commit();
    }
  };
  if (cb < ce) stage_chunk(cb + 1);

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float o[D / 8][4];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.f;
  for (int c = cb; c <= ce; ++c) {
    if (tma) {
      cp_async_wait<0>();                                         // Q
      mbar_wait(bar0 + 8 * ((c - cb) & 1), ((c - cb) >> 1) & 1);  // chunk c
    } else if (c < ce) {
      cp_async_wait<1>();  // chunk c landed; c + 1 may be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* Ks = KV + ((c - cb) & 1) * 2 * kStage;
    if (warp_live) {
      float s[16][4], mc[2], lc[2], oc[D / 8][4];
      chunk_scores<D>(Qs, Ks, warp, lane, c * kC, pr.rg, scale, softcap, s, mc, lc);
      chunk_pv<D>(Ks + kStage, lane, s, oc);
      merge_pairs<D>(pr, c, m, l, mc, lc, oc, o);
    }
    __syncthreads();  // every warp is done with chunk c's buffer
    if (c + 2 <= ce) stage_chunk(c + 2);
  }
  if (warp_live) store_pairs<D>(pr, hq, qd, o, l, out);
}

// Split schedule: one warp per (row, head) of a split tile merges the row's chunk partials in
// increasing order with the loop schedule's merge. Four chunks' partials are loaded before they are
// merged (the merge order is unchanged), so the loads of a long context overlap.
template <int D>
__global__ void __launch_bounds__(128)
    attention_mma_combine(DeviceMeta meta, int hq, int window, int max_chunks, const int2* __restrict__ tiles,
                          const float* part_acc, const float* part_ml,  // no __restrict__: launch.h ld_act16
                          __nv_bfloat16* __restrict__ out, bool wide) {
  pdl_enter();
  const int2 tile = tiles[blockIdx.x];
  const int lane = threadIdx.x % 32, pair = blockIdx.y * 4 + threadIdx.x / 32;
  if (pair >= tile.y * hq) return;
  combine_pair<D>(wide, meta, hq, window, max_chunks, tile.x + pair / hq, pair % hq, lane, part_acc, part_ml,
                  out);
}

// Speed-only switch (identical bits, tested): the wide loop kernel; TF_ATTN_WIDE=0 turns it off for A/B
// measurements.
bool g_loop_wide = env_switch("TF_ATTN_WIDE", true);  // launch.h
bool g_fused_combine = env_switch("TF_ATTN_FUSED_COMBINE", true);
// set_attention_fused_combine_max; TF_ATTN_FUSED_MAX=0..kFusedCombineCap (measurements), else 64.
int g_fused_combine_max = env_int("TF_ATTN_FUSED_MAX", 0, kFusedCombineCap, 64);
bool g_wide_combine = env_switch("TF_ATTN_WIDE_COMBINE", true);
bool g_wide_tma = env_switch("TF_ATTN_WIDE_TMA", true);
bool g_spread = env_switch("TF_ATTN_SPREAD", true);
bool g_half_combine = env_switch("TF_ATTN_HALF_COMBINE", true);
StampBuffer g_stamps;  // set_attention_stamps
int g_stamp_blocks = 0;
constexpr int kMaxStampBlocks = 1024;

int g_split_cpb = 0;  // 0: from the call's size

// set_attention_decode_loop
int g_decode_loop = env_digit("TF_ATTN_DECODE_LOOP", 4, 3);  // (3: runs 458-460, session 46)
std::atomic<long> g_decode_loop_launches{0}, g_decode_teams_launches{0};

// The stamp buffer for a split launch of `blocks` blocks (null when off or too many).
unsigned long long* stamps_for(int blocks) {
  if (!g_stamps.get() || blocks > kMaxStampBlocks) return nullptr;
  g_stamp_blocks = blocks;
  return g_stamps.get();
}

template <int D>
void launch(const AttentionMmaArgs& a, cudaStream_t s) {
  const size_t smem = size_t(2 * kC + kPairs) * (D + 8) * sizeof(__nv_bfloat16);
  static bool configured = false;  // per D instantiation; the attribute is per-device-function
  if (!configured) {
    TF_CUDA_CHECK(cudaFuncSetAttribute(attention_mma_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem)));
    configured = true;
  }
  auto* q = static_cast<const __nv_bfloat16*>(a.q);
  auto* k = static_cast<const __nv_bfloat16*>(a.k_pool);
  auto* v = static_cast<const __nv_bfloat16*>(a.v_pool);
  auto* out = static_cast<__nv_bfloat16*>(a.out);
  if (a.num_loop_tiles > 0 && a.wide_loop && attention_wgmma_loop(a, s)) {
    // (the wide tiles on warpgroup MMAs: attention_wgmma.cu)
  } else if (a.num_loop_tiles > 0 && a.wide_loop) {
    const size_t wide_smem = size_t(4 * kC + kWidePairs) * (D + 8) * sizeof(__nv_bfloat16);
    static bool wide_configured = false;  // per D instantiation
    if (!wide_configured) {
      TF_CUDA_CHECK(cudaFuncSetAttribute(attention_loop_wide_kernel<D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, int(wide_smem)));
      wide_configured = true;
    }
    launch_pdl_if(g_pdl_group, attention_loop_wide_kernel<D>, dim3(a.num_loop_tiles * a.hk, 1),
                  kWideWarps * 32, wide_smem, s, q, k, v, a.meta, a.hq, a.hk, a.scale, a.window, a.softcap,
                  a.loop_tiles, out, g_wide_tma);
    TF_CUDA_LAUNCH_CHECK();
  } else if (a.num_loop_tiles > 0) {
    launch_pdl_if(g_pdl_group, attention_mma_kernel<D>, dim3(a.num_loop_tiles * a.hk, 1), kWarps * 32, smem,
                  s, q, k, v, a.meta, a.hq, a.hk, a.scale, a.window, a.softcap, a.loop_tiles, a.max_chunks, 0,
                  nullptr, nullptr, nullptr, out, g_wide_combine, false, false, nullptr);
    TF_CUDA_LAUNCH_CHECK();
  }
  if (a.decode_loop) {
    const int tm = a.decode_loop;  // teams
    // K/V double-buffered, Q, Ps a team, and with two teams the handoff (4 + D / 8 floats a thread of 128).
    const size_t loop_smem =
        size_t(4 * kC * (D + 8) + 16 * (D + 8) + tm * 16 * kPsRow) * sizeof(__nv_bfloat16) +
        (tm == 2 ? size_t(4 + D / 8) * 128 * sizeof(float) : 0);
    static bool loop_configured[2] = {false, false};  // per D instantiation, per team count
    auto* kernel = tm == 2 ? attention_decode_loop_kernel<D, 2> : attention_decode_loop_kernel<D, 1>;
    if (!loop_configured[tm - 1]) {
      TF_CUDA_CHECK(
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(loop_smem)));
      loop_configured[tm - 1] = true;
    }
    launch_pdl_if(g_pdl_group, kernel, dim3(a.num_split_tiles * a.hk), tm * kWarps * 32, loop_smem, s, q, k,
                  v, a.meta, a.hq, a.hk, a.scale, a.window, a.softcap, a.split_tiles, out);
    TF_CUDA_LAUNCH_CHECK();
    g_decode_loop_launches.fetch_add(1, std::memory_order_relaxed);
    if (tm == 2) g_decode_teams_launches.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (a.num_split_tiles > 0) {
    // Chunks a block walks (speed only: each chunk's partial is the same): about 256 blocks, up to 16
    // chunks each, so that the next chunk's loads overlap this chunk's MMAs. Run 140 (8B, graphs, 8k
    // context; bulk-copy staging): b=1 1 / 2 chunks 5.30 / 5.20 ms, b=8 4 / 16 chunks 8.53 / 8.20 ms, b=32
    // 8 / 16 chunks 18.21 / 18.01 ms (the rule before: blocks of chunk_blocks / 1024 chunks, 1 to 8).
    const int64_t chunk_blocks = int64_t(a.num_split_tiles) * a.hk * a.max_chunks;
    const int cpb = g_split_cpb > 0 ? g_split_cpb : int(std::clamp<int64_t>(chunk_blocks / 256, 1, 16));
    const int gy = (a.max_chunks + cpb - 1) / cpb;
    launch_pdl_if(g_pdl_group, attention_mma_kernel<D>, dim3(a.num_split_tiles * a.hk, gy), kWarps * 32, smem,
                  s, q, k, v, a.meta, a.hq, a.hk, a.scale, a.window, a.softcap, a.split_tiles, a.max_chunks,
                  cpb, a.part_acc, a.part_ml, a.tickets, out, g_wide_combine, g_spread, g_half_combine,
                  stamps_for(a.num_split_tiles * a.hk * gy));
    TF_CUDA_LAUNCH_CHECK();
    if (a.tickets) return;  // merged by each (tile, KV head)'s last block
    const int pair_blocks = (kPairs / (a.hq / a.hk) * a.hq + 3) / 4;  // rows per tile x heads, 4 a block
    launch_pdl_if(g_pdl_group, attention_mma_combine<D>, dim3(a.num_split_tiles, pair_blocks), 128, 0, s,
                  a.meta, a.hq, a.window, a.max_chunks, a.split_tiles, a.part_acc, a.part_ml, out,
                  g_wide_combine);
    TF_CUDA_LAUNCH_CHECK();
  }
}

TileSchedule g_schedule = TileSchedule::Auto;
bool g_mma = true;
// Optional rule: calls whose longest row has at most this many chunks run every tile as a loop tile (a
// block walks at most this many chunks, no combine launch). Off by default: at ctx 512, b=1 on the H200 the
// 8 loop blocks took 45 us against 20 us for split + combine (run 16). set_attention_loop_max_chunks(-1)
// turns it on with this limit.
constexpr int kLoopMaxChunks = 4;
int g_loop_max_chunks = 0;

}  // namespace

void set_attention_tile_schedule(TileSchedule s) {
  g_schedule = s;
}
TileSchedule attention_tile_schedule() {
  return g_schedule;
}
void set_attention_mma(bool on) {
  g_mma = on;
}
void set_attention_loop_max_chunks(int n) {
  g_loop_max_chunks = n < 0 ? kLoopMaxChunks : n;
}
void set_attention_loop_wide(bool on) {
  g_loop_wide = on;
}
bool attention_loop_wide() {
  return g_loop_wide;
}
void set_attention_fused_combine(bool on) {
  g_fused_combine = on;
}
bool attention_fused_combine() {
  return g_fused_combine;
}
void set_attention_fused_combine_max(int n) {
  TF_CHECK(n >= 0 && n <= kFusedCombineCap,
           "set_attention_fused_combine_max: 0 .. " + std::to_string(kFusedCombineCap) + " pairs");
  g_fused_combine_max = n;
}
int attention_fused_combine_max() {
  return g_fused_combine_max;
}
void set_attention_wide_combine(bool on) {
  g_wide_combine = on;
}
void set_attention_wide_tma(bool on) {
  g_wide_tma = on;
}
void set_attention_spread(bool on) {
  g_spread = on;
}
void set_attention_half_combine(bool on) {
  g_half_combine = on;
}
void set_attention_stamps(bool on) {
  g_stamps.set(on, size_t(kMaxStampBlocks) * kAttnStamps);
  g_stamp_blocks = 0;
}
std::vector<unsigned long long> attention_stamps(int* blocks) {
  *blocks = g_stamp_blocks;
  return g_stamps.read(0, size_t(g_stamp_blocks) * kAttnStamps);
}

void widen_loop_tiles(const std::vector<int32_t>& row_seq, int rows_per_tile, std::vector<int32_t>& tiles) {
  std::vector<int32_t> out;
  for (size_t t = 0; t < tiles.size(); t += 2) {
    int first = tiles[t], n = tiles[t + 1];
    const bool joins = t + 2 < tiles.size() && tiles[t + 2] == first + n &&
                       row_seq[size_t(tiles[t + 2])] == row_seq[size_t(first)] &&
                       n + tiles[t + 3] <= 2 * rows_per_tile;
    if (joins) n += tiles[t + 3], t += 2;
    out.push_back(first), out.push_back(n);
  }
  tiles = std::move(out);
}

int attention_decode_loop_takes(int split_tiles, int hk, bool split_one_warp, int chunks) {
  if (g_decode_loop == 0 || split_tiles < 1 || !split_one_warp) return 0;
  const int blocks = split_tiles * hk, sms = sm_count(), teams = g_decode_loop >= 3 ? 2 : 1;
  const bool always = g_decode_loop == 2 || g_decode_loop == 4;
  if (teams == 2) {
    // Two teams (alone, split / two teams, us a layer). Runs 458-460, 16 rows x 8 KV heads: 512 / 2048
    // positions 20.5 -> 14.7 / 59.1 -> 48.5 (H100), 8192 172.3 -> 159.6 (H200); 32 rows 35.9 -> 28.6 / 113 ->
    // 96.5 / 332 -> 322; 4 rows at 512 7.9 -> 10.2. Run 464 (H200): 12 rows (96 blocks, 73% of the SMs) gain
    // at every context measured (512 18.3 -> 12.1, 2048 45.0 -> 41.4): from 2/3 of the SMs, any context. 8
    // rows (64 blocks, 48%) tie at 4 chunks (512 positions 10.5 / 10.5) and lose from 6 (2048 26.5 -> 40.4);
    // in the product (8 streams) two teams took a round's forward 2.633 / 2.666 -> 2.572 / 2.589 ms at
    // 256-384 positions, 3.407 / 3.343 -> 3.551 / 3.678 at 1536-1664: from 45% of the SMs, up to
    // kDecodeTeamsHalfMaxChunks chunks.
    const bool most = 3 * blocks >= 2 * sms,
               half = 20 * blocks >= 9 * sms && chunks <= kDecodeTeamsHalfMaxChunks;
    return always || most || half ? 2 : 0;
  }
  // One team: where the blocks fill the card about once.
  return always || (4 * blocks >= 3 * sms && blocks <= sms && chunks <= kDecodeLoopMaxChunks) ? 1 : 0;
}
void set_attention_decode_loop(int mode) {
  TF_CHECK(
      mode >= 0 && mode <= 4,
      "set_attention_decode_loop: 0 (off), 1 (where the blocks fill the card once), 2 (always), 3 (two teams "
      "where the blocks fill 2/3 of the card or more, or 45% at up to 4 chunks: the default), 4 (two teams "
      "always)");
  g_decode_loop = mode;
}
int attention_decode_loop() {
  return g_decode_loop;
}
long attention_decode_loop_launches(bool two_teams) {
  return (two_teams ? g_decode_teams_launches : g_decode_loop_launches).load(std::memory_order_relaxed);
}
void set_attention_split_chunks(int n) {
  g_split_cpb = n;
}
bool attention_mma_enabled() {
  return g_mma;
}

bool attention_mma_supported(int head_dim, int hq, int hk) {
  if (hk <= 0 || hq % hk != 0) return false;
  const int group = hq / hk;
  return (head_dim == 64 || head_dim == 128) && group <= 16 && 16 % group == 0;
}

int attention_mma_rows_per_tile(int hq, int hk) {
  return kPairs / (hq / hk);
}

void plan_attention_tiles(const std::vector<int32_t>& row_seq, int rows_per_tile, TileSchedule schedule,
                          std::vector<int32_t>& loop_tiles, std::vector<int32_t>& split_tiles,
                          int min_loop_tiles, int call_chunks) {
  loop_tiles.clear(), split_tiles.clear();
  const int rows = int(row_seq.size());
  std::vector<int32_t> tiles;  // (first row, rows)
  int full = 0;
  for (int r = 0; r < rows;) {
    int e = r + 1;
    while (e < rows && row_seq[e] == row_seq[r] && e - r < rows_per_tile) ++e;
    tiles.push_back(r), tiles.push_back(e - r);
    full += (e - r) * 2 >= rows_per_tile;
    r = e;
  }
  // Speed only: a tile with many rows stages each chunk once for all of them (loop) — worth it when
  // there are enough such tiles to fill the GPU (prefill); short tiles (decode, verify) and calls with
  // few tiles spread their chunks over blocks (split).
  const bool many = full >= min_loop_tiles;
  const bool short_call = call_chunks > 0 && call_chunks <= g_loop_max_chunks;
  for (size_t t = 0; t < tiles.size(); t += 2) {
    const int n = tiles[t + 1];
    const bool loop = schedule == TileSchedule::Loop ||
                      (schedule == TileSchedule::Auto && (short_call || (many && n * 2 >= rows_per_tile)));
    auto& dst = loop ? loop_tiles : split_tiles;
    dst.push_back(tiles[t]), dst.push_back(n);
  }
}

void attention_mma(const AttentionMmaArgs& a, cudaStream_t s) {
  if (a.num_loop_tiles + a.num_split_tiles == 0) return;
  if (a.head_dim == 64) return launch<64>(a, s);
  if (a.head_dim == 128) return launch<128>(a, s);
  throw Error("attention_mma: head_dim " + std::to_string(a.head_dim) + " is not supported");
}

}  // namespace tf::cuda

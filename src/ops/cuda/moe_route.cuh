#pragma once
// The MoE routing and grouping device code (moe_grouped.cu's kernels): one warp routes a row (softmax, top_k
// picks, renormalised weights), one block groups the pairs by expert. Included by moe_grouped.cu only.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "ops/cuda/moe_kernels.h"

namespace tf::cuda {
namespace {

// Tests (set_moe_route_smem_only): every row routed through the shared-memory scratch, whatever the experts.
__constant__ bool g_route_smem_only = false;

// One warp a row: softmax, then top_k rounds of a (probability, lower id) arg-max over the warp. `p`: the
// warp's scratch of `experts` floats in shared memory.
// No __restrict__ on data earlier kernels write (launch.h, ld_act16): the kernels here launch dependently.
__device__ __forceinline__ void route_row_smem(const float* logits, int row, int experts, int top_k,
                                               bool norm, int32_t* out_e, float* out_w, float* p, int lane) {
  const float* l = logits + size_t(row) * experts;
  float mx = -INFINITY;
  for (int e = lane; e < experts; e += 32) mx = fmaxf(mx, l[e]);
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  float sum = 0.f;
  for (int e = lane; e < experts; e += 32) sum += (p[e] = expf(l[e] - mx));
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  for (int e = lane; e < experts; e += 32) p[e] = p[e] / sum;
  __syncwarp();
  // Lane j keeps pick j (top_k <= 32 lanes), and every lane sums the picks in rank order as they come: the
  // same sum as a loop over them afterwards, without local-memory arrays.
  float mine = 0.f, top = 0.f;
  int mine_id = 0;
  for (int j = 0; j < top_k; ++j) {
    float bv = -1.f;
    int bi = experts;
    for (int e = lane; e < experts; e += 32)
      if (p[e] > bv) bv = p[e], bi = e;  // increasing e: the lane's first maximum
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (bi >= experts) bi = 0, bv = 0.f;  // NaN logits: keep the expert index in range
    if (lane == j) mine = bv, mine_id = bi;
    top += bv;
    __syncwarp();
    if (lane == 0) p[bi] = -1.f;  // taken
    __syncwarp();
  }
  if (lane < top_k) {
    out_e[size_t(row) * top_k + lane] = mine_id;
    out_w[size_t(row) * top_k + lane] = norm ? mine / top : mine;
  }
}

// route_row_smem's picks in registers, for up to 32 * V experts: lane L holds experts L, L + 32, ... The
// same max, exponentials, sum (each lane's in increasing e, then the same shuffle tree) and divisions; a
// round's pick is the largest key (p's bits, then ~e: the larger p, ties to the lower id), 0 for a taken
// expert or a NaN p (route_row_smem never picks those either, and falls back to expert 0 with weight 0 when
// only such are left, as a zero best key does here). No shared-memory round trips or warp barriers a round:
// run 158 (ncu, 30B-A3B 4-bit b=1) had the routing ~20% of the routed gate_up kernel's time.
__device__ __forceinline__ uint64_t pick_key(float p, int e) {
  return p >= 0.f ? (uint64_t(__float_as_uint(p) & 0x7FFFFFFFu) << 32) | uint32_t(~e) : 0ull;
}
// The float max of a warp's values by one redux over orderable bits (NaN as -inf, which fmaxf's tree never
// returns over a number either): the same value as a tree of fmaxf, signed zeros aside (ties of -0 and +0
// may give either: the result feeds only v - mx, the same for both).
__device__ __forceinline__ float warp_max(float v) {
  const uint32_t u = __float_as_uint(v != v ? -INFINITY : v);
  const uint32_t k = __reduce_max_sync(0xffffffffu, (u & 0x80000000u) ? ~u : u | 0x80000000u);
  return __uint_as_float((k & 0x80000000u) ? k & 0x7FFFFFFFu : ~k);
}
// The routing of a row whose logits the warp holds (v[i]: expert lane + 32 i's, 0 past `experts`): lane
// j < top_k gets pick j's expert and (renormalised when `norm`) weight. route_row_regs's arithmetic; also
// the one-kernel decode step's (decode_step_moe.cu), whose logits come as polled words.
template <int V>
__device__ __forceinline__ void route_vals(float (&v)[V], int experts, int top_k, bool norm, int lane,
                                           int& pick_e, float& pick_w) {
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (lane + 32 * i < experts) mx = fmaxf(mx, v[i]);
  mx = warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (lane + 32 * i < experts) sum += (v[i] = expf(v[i] - mx));
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  // The keys; then the lane's sorted, largest first (a network of compare-exchanges), so that its best is
  // key[0] and a pick shifts the rest up.
  uint64_t key[V];
#pragma unroll
  for (int i = 0; i < V; ++i) key[i] = lane + 32 * i < experts ? pick_key(v[i] / sum, lane + 32 * i) : 0ull;
#pragma unroll
  for (int a = 0; a < V; ++a)
#pragma unroll
    for (int b = V - 1; b > a; --b)
      if (key[b] > key[b - 1]) {
        const uint64_t t = key[b];
        key[b] = key[b - 1], key[b - 1] = t;
      }
  float mine = 0.f, top = 0.f;
  int mine_id = 0;
  for (int j = 0; j < top_k; ++j) {
    // The warp's largest key by two reduxes: its high word (p's bits), then the largest low word (~e: the
    // lowest id) among the keys with that high word -- the 64-bit maximum, as the shuffle tree found it.
    const uint32_t hi = __reduce_max_sync(0xffffffffu, uint32_t(key[0] >> 32));
    const uint32_t lo = __reduce_max_sync(0xffffffffu, uint32_t(key[0] >> 32) == hi ? uint32_t(key[0]) : 0u);
    const uint64_t best = (uint64_t(hi) << 32) | lo;
    const int bi = best ? int(~lo) : 0;
    const float bv = best ? __uint_as_float(hi) : 0.f;
    if (best && key[0] == best) {  // taken: the lane's next key moves up
#pragma unroll
      for (int i = 0; i + 1 < V; ++i) key[i] = key[i + 1];
      key[V - 1] = 0ull;
    }
    if (lane == j) mine = bv, mine_id = bi;
    top += bv;
  }
  pick_e = mine_id, pick_w = norm ? mine / top : mine;
}
template <int V>
__device__ __forceinline__ void route_row_regs(const float* logits, int row, int experts, int top_k,
                                               bool norm, int32_t* out_e, float* out_w, int lane) {
  const float* l = logits + size_t(row) * experts;
  float v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = lane + 32 * i < experts ? l[lane + 32 * i] : 0.f;
  int e = 0;
  float w = 0.f;
  route_vals<V>(v, experts, top_k, norm, lane, e, w);
  if (lane < top_k) out_e[size_t(row) * top_k + lane] = e, out_w[size_t(row) * top_k + lane] = w;
}

// The routing of one row by one warp: registers for up to 256 experts, else the shared-memory scratch `p`
// (`experts` floats). Both give the same picks and weights (GPU test RouteRowRegistersEqualSharedMemory).
__device__ __forceinline__ void route_row(const float* logits, int row, int experts, int top_k, bool norm,
                                          int32_t* out_e, float* out_w, float* p, int lane) {
  if (!g_route_smem_only && experts <= 128)
    return route_row_regs<4>(logits, row, experts, top_k, norm, out_e, out_w, lane);
  if (!g_route_smem_only && experts <= 256)
    return route_row_regs<8>(logits, row, experts, top_k, norm, out_e, out_w, lane);
  route_row_smem(logits, row, experts, top_k, norm, out_e, out_w, p, lane);
}

// route_row as one function, not inlined: a kernel that warms the routing's code before its wait (a call on
// zeros) and routes after it calls this both times, so both run the same instructions (an inlined second
// call site is a second copy of the code). moe_decode's warm-up since run 381, the routed gate_up's (run
// 526).
static __device__ __noinline__ void route_row_noinline(const float* logits, int row, int experts, int top_k,
                                                       bool norm, int32_t* out_e, float* out_w, float* p,
                                                       int lane) {
  route_row(logits, row, experts, top_k, norm, out_e, out_w, p, lane);
}

// Inclusive sums of v over the block's threads in thread order (blockDim.x a multiple of 32, <= 1024);
// `warp_sums`: 32 ints of shared memory. Integers: any order gives the same sums.
__device__ __forceinline__ int2 block_inclusive_scan(int2 v, int2* warp_sums) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int off = 1; off < 32; off *= 2) {
    const int ax = __shfl_up_sync(0xffffffffu, v.x, off), ay = __shfl_up_sync(0xffffffffu, v.y, off);
    if (lane >= off) v.x += ax, v.y += ay;
  }
  if (lane == 31) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int2 w = lane < warps ? warp_sums[lane] : make_int2(0, 0);
    for (int off = 1; off < 32; off *= 2) {
      const int ax = __shfl_up_sync(0xffffffffu, w.x, off), ay = __shfl_up_sync(0xffffffffu, w.y, off);
      if (lane >= off) w.x += ax, w.y += ay;
    }
    if (lane < warps) warp_sums[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v.x += warp_sums[warp - 1].x, v.y += warp_sums[warp - 1].y;
  return v;
}

// Grouping by one block of blockDim.x >= experts threads: per-expert counts, tiles in expert order, each
// pair's slot. Thread e owns expert e: its first slot and first tile are exclusive prefix sums of the
// counts and tile counts (a block scan), and it writes its own tiles: the same tiles and slots as the one
// thread's loop over the experts this replaces. Runs 148/150 (30B-A3B shape, 4-bit, b=1): the routing +
// grouping kernel run a second time cost 13.2 us a layer with the loop, 6.2 with the scan.
__device__ __forceinline__ void group_pairs(const int32_t* pair_expert, int pairs, int top_k, int experts,
                                            int tile, int4* tiles, int32_t* slot_of_pair, int32_t* slot_row,
                                            int* count, int* first, int* fill, int2* scan) {
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0, fill[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) atomicAdd(&count[pair_expert[p]], 1);
  __syncthreads();
  const int me = threadIdx.x;  // this thread's expert
  const int c = me < experts ? count[me] : 0, nt = (c + tile - 1) / tile;
  const int2 incl = block_inclusive_scan(make_int2(c, nt), scan);
  if (me < experts) {
    const int slot = incl.x - c, t0 = incl.y - nt;
    first[me] = slot;
    for (int b = 0, i = 0; b < c; b += tile, ++i)
      tiles[1 + t0 + i] = make_int4(me, slot + b, min(tile, c - b), 0);
  }
  if (threadIdx.x == blockDim.x - 1) tiles[0] = make_int4(incl.y, 0, 0, 0);
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int e = pair_expert[p];
    const int slot = first[e] + atomicAdd(&fill[e], 1);
    slot_of_pair[p] = slot;
    slot_row[slot] = p / top_k;
  }
}

}  // namespace
}  // namespace tf::cuda

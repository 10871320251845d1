// MLX 4-bit linears at up to 16 token rows on Hopper warpgroup MMAs (q4_wg_kernel): issue 11's batch-16 case;
// and 17-32 rows on clusters of two CTAs (below).
//
// Why. At 9-16 rows the mma.sync kernels (q4_decode_kernel<KIND, 2, D>, q4_pair_kernel) run at ~35-50% of the
// DRAM bandwidth. ncu (run 444, gate_up 24576 x 4096 at M = 16): 4 warps a scheduler (128 registers), an
// instruction issued every 3.1 cycles, half the stalls on L1TEX scoreboards (weights and x in flight too
// few), and tf_mma_probe puts their chunk loop's ceiling at 16 tokens near the stream rate itself (209 cycles
// a chunk at 16 warps an SM: 39 weights a cycle an SM against the ~36 that 4.3 TB/s asks for): the four
// HMMAs and two x loads a chunk cost what the dequantisation costs. Here the MMAs are warpgroup MMAs
// (m64n16k16, one instruction a warpgroup for 64 features x 16 tokens x 16 k), their operand B (x) is read
// by the tensor cores from shared memory, not through the registers of every warp, and the registers that
// frees hold the weights of the next quad for four K slices.
//
// Layout. One CTA an SM; a tile is 64 features (warp w of a warpgroup: features 16w .. 16w + 15, lane (g, t)
// rows g and g + 8, as q4_decode_kernel's warp), and each warpgroup computes SL of its 8 K slices (the
// default, WgCfg<2, 2>: four warpgroups of 2 slices; WgCfg<4, 2>: two of 4), each slice its own chain (SL
// accumulators a thread). x's rows (all k of them: K <= 4096) sit in shared memory in wgmma's no-swizzle
// K-major core-matrix layout, permuted as linear_rs.cu permutes it: step h of 32-chunk c holds, at logical k
// 2t + e and 2t + 8 + e, the values k 32c + 8t + 4h + e and 32c + 8t + 4h + 2 + e -- the k the A fragment's
// lane t holds (mma_chunk's pairing). Rows past m are zeros (their outputs are never stored). Weights: lane
// t's 16-byte quad words of rows g and g + 8 and their scale words (load_quad), AH = 2 quads of each of the
// warpgroup's slices in flight ahead of the quad being computed (into the next tile's quads at a tile's end);
// the first before griddepcontrol.wait.
//
// Bits: q4_decode_kernel's. A slice is a chain of its chunks in order from a zeroed accumulator, each chunk
// the same two k16 steps (dequant<> of the same words and scale words, the fragments mma_chunk passes); one
// wgmma k16 step rounds as one mma.sync m16n8k16 step (bench/cuda/wgmma_probe.cu, linear_rs.cu); the slice
// partials are added in slice order (warpgroups 1.. hand theirs over through shared memory), then the bias
// and the rounding (store_biased). Tested bit for bit against q4_decode_kernel (test_quant_cuda).
//
// ptxas serialises register-A wgmmas whose fragments are written while others are in flight (C7513,
// linear_rs.cu), so each chunk's wgmmas (SL slices x 2 steps) are one group, waited for before the next
// chunk's fragments are made; the other warpgroups' dequantisation fills that wait. (Fragments by chunk
// parity with a wait for the chunk before did not serialise but spilled at 128 and at 255 registers.)
//
// Measured (H200, runs 445-449; the linears of an 8B decode step, same call): M = 16 gate_up (24576 x 4096)
// 0.961 (q4_pair_kernel) -> 0.851 ms, lm_head 0.172 -> 0.133; but q / o (4096 x 4096: 64 tiles for 132 SMs)
// 0.236 -> 0.347, and at M = 1-8 every shape loses to the mma.sync kernels (gate_up M = 1 0.610 -> 0.787).
// Ablations at M = 16 (run 448-449): without the x staging gate_up 0.760 (x costs ~2.5 us a call: every CTA
// reads all 128 KB of x from L2; four 4-byte cp.async a unit cost ~5 us), without the MMAs 0.771, without
// the dequantisation 0.785: what is left (~0.70 ms, ~2.9 TB/s) is the weight stream itself with ~64 KB in
// flight an SM, as the one-row kernel's. But in the op chain most of the gain goes (run 450, same call: the
// M = 16 linears of a step 2.537 ms with mode 1 against 2.544 without): one CTA an SM holding every register
// and 176 KB of shared memory cannot be resident beside its neighbours, so the next kernel's early launch
// (its weights before the wait) and its own no longer overlap the kernel before. The lm_head, the forward's
// last linear, keeps its gain: the 8B forward at b=16, same call (run 451, two processes): off 3.480 / 3.476
// ms, mode 1 (gate_up and lm_head) 3.471 / 3.451, the lm_head only 3.446 / 3.433 (-1.0..-1.2%). Once
// q4_ks_kernel took the down (session 43) and with q4_pair_kernel on every other width, mode 1 wins (run 455,
// same call, two processes, twice each: q4_pair / q4_wg modes 1/3 3.396 / 3.403 / 3.387 / 3.389 ms, 2/1
// 3.212 / 3.209 / 3.201 / 3.197): the default is mode 1 (9-16-row calls whose tiles fill the grid: the
// gate_up and the lm_head); TF_Q4_WG=0 off, 2 every call of 1-16 rows, 3 the lm_head widths only (the default
// before). The next step would split the K slices over a 2-CTA cluster (x halves: 64 KB a CTA, two CTAs an SM
// beside others, the 4096-wide calls on 128 CTAs; linear_rs.cu's layout) and stream the weights through a TMA
// ring.
//
// 17-32 rows (session 51). Past 16 rows the wide calls ran as 16-row pieces, dequantizing every weight twice
// (four times at 64 rows), because 32 rows of x (256 KB at K = 4096) do not fit one CTA. The cluster instance
// (NT = 32, CS = 2: see the kernel) splits a tile's 8 K slices over two CTAs, each holding x's half, one
// slice a warpgroup on m64n32k16 steps. Run 497 (H200, 36 calls at M = 32): gate_up 1.493 (pieces) -> 1.187
// ms, lm_head 0.244 -> 0.195, q 0.367 -> 0.339, k 0.304 -> 0.285; the 8B b=32 forward 4.987 -> 4.343 ms
// (-12.9%); at 64 rows in 32-row pieces the linears 7.102 -> 6.239 ms (the 1024-wide k stays whole: 0.339 ->
// 0.557 in pieces). The same split at 16 rows lost (q / o 0.260 -> 0.269 ms, the b=16 forward +1.2%), as did
// two slices a warpgroup (+1..5%). Session 52 (H100, runs 498-503): four quads ahead instead of two (-2% at
// b=32, wgc_launch); its ablations at 32 rows (36 calls, ms): without the x staging q 0.368 -> 0.263, k 0.286
// -> 0.198, gate_up 1.230 -> 1.149; without the dequantisation gate_up 1.233, q 0.356; without the MMAs
// gate_up 1.133, q 0.335 -- x's staging, more than the arithmetic, is the narrow calls' cost. Clusters of
// four CTAs (x's quarter, the fold a chain rank to rank on mbarriers; bits equal) lost everywhere: the down
// 0.729 -> 1.286 ms, q 0.373 -> 0.664 (run 501; bench/cuda/results/run501-wgc4-chain.patch). In the
// product, 8 streams verifying 3 drafts each (32-row rounds): 6325 -> 7688 tok/s with the clusters (run 503).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"  // wgmma helpers, linear_wgmma_supported
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_linear.h"
#include "ops/cuda/quant_wg.cuh"  // stage_x_perm, wg_fragments
#include "ops/cuda/quant_wg.h"

namespace tf::cuda {
namespace {

constexpr int kTile = 64;    // features a tile
constexpr int kMaxK = 4096;  // x's 16 rows in shared memory: 32 k bytes (a cluster's CTA: NT k / CS bytes)
// A configuration: SL K slices a warpgroup, AH quads of weights in flight ahead of the quad being computed
// (AH + 1 ring slots in registers), NT token rows (16 or 32: m64nNTk16 steps), the 8 K slices over a cluster
// of CS CTAs (1 or 2; 8 / SL / CS warpgroups a CTA).
template <int SL, int AH, int NT = 16, int CS = 1>
struct WgCfg {
  static_assert((NT == 16 || NT == 32) && (CS == 1 || CS == 2) && 8 % (SL * CS) == 0, "configuration");
  static constexpr int kGroups = 8 / SL / CS, kThreads = 128 * kGroups, kSlots = AH + 1;
  static constexpr int kAcc = NT / 2;  // a slice's accumulators a thread
  // A tile's partials in shared memory: warpgroups 1.. 's slices, then (CS = 2, rank 1's) the sum of rank 0's
  // slices, pushed by rank 0.
  static constexpr int kPeerOff = (kGroups - 1) * SL * kAcc * 128;
  static constexpr int kPartFloats = kPeerOff + (CS == 2 ? kAcc * 128 : 0);
  static constexpr size_t smem(int k) {  // x's k / CS values of NT rows, then the partials by tile parity
    return size_t(k / CS) * NT * 2 + 2 * size_t(kPartFloats) * sizeof(float);
  }
};
// TF_Q4_WG=0 off, 1 (the default since run 455: the 8B gate_up and lm_head at 16 rows) at 9-16 rows where the
// tiles fill the grid, 2 at 1-16 rows, 3 as 1 for widths of kLmHeadMinN or more only (the lm_head: the
// forward's last linear, no linear after it to overlap; run 480, H200: the same forward time as 1).
int g_q4_wg = env_digit("TF_Q4_WG", 3, 1);
constexpr int kLmHeadMinN = 65536;
// TF_Q4_WG_CFG (measurements): 0 = SL 4 AH 2, 1 = SL 2 AH 2 (default)
int g_q4_wg_cfg = env_digit("TF_Q4_WG_CFG", 1, 1);
// TF_Q4_WGC: the cluster instance (a tile's K slices over two CTAs, x's half of K each; 32 token rows, K <=
// 4096): 0 off; 1 (the default) every call of 17-32 rows, and 32-row pieces of 33-64-row calls (the caller's
// pieces rule, q4_wg_takes_rows) of widths whose tiles as pairs fill 3/4 of the SMs; 2 as 1 with pieces of
// every width. Run 497 (H200): 16 token rows on clusters lost (the 4096-wide q / o at 16 rows 0.260 ->
// 0.269 ms, b=16 forward +1.2%), as did two slices a warpgroup (two warpgroups a CTA, +1..5%); removed.
int g_q4_wgc = env_digit("TF_Q4_WGC", 2, 1);

// barrier.cluster in two halves (PTX ISA "barrier.cluster"): each thread alternates them; a wait returns once
// every thread of the cluster has arrived as often. Release / acquire order the shared::cluster stores.
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// Persistent over 64-feature tiles (blockIdx.x, + gridDim.x, ...); a warp walks the sequence of (tile, quad)
// of its slices, the load head AH quads ahead of the quad computed (into the next tile's quads at a tile's
// end), ring slot = sequence position % (AH + 1): the body is unrolled over the slots so that they stay in
// registers.
// kAblate (timing only, wrong outputs; TF_Q4_WG_ABLATE): 1 no x staging, 2 no dequantisation (the raw words
// as fragments), 3 no MMAs.
// SP: the quads' scale words known at compile time to come by pairs (load_quad's spair: groups of 64, an even
// group count a row; the launch picks the instance), so that neither load path's predicated-off instructions
// issue. Same words, same bits.
// NT = 32 (17-32 token rows) and CS = 2 (a cluster of two CTAs a tile: rank r takes slices 4r .. 4r + 3 and
// holds x's k values of those slices only, so that 32 rows of K = 4096 fit, and the 4096-wide weights' 64
// tiles fill 128 SMs). Rank 0 adds its four slice partials in slice order (as one CTA does) and pushes that
// sum into rank 1's shared memory (st.shared::cluster); rank 1 adds its own four to it in slice order --
// the same left fold of the eight slices -- and stores. The push of tile i goes to buffer i % 2; cluster
// barrier phase i + 1 (rank 0 arrives after pushing tile i, rank 1 after reading tile i - 1's) orders both:
// rank 1 reads tile i after waiting for it, and rank 0 pushes tile i + 1 after waiting for it.
template <int KIND, int SL, int AH, int kAblate = 0, bool SP = false, int NT = 16, int CS = 1>
__global__ void __launch_bounds__(WgCfg<SL, AH, NT, CS>::kThreads, 1)
    q4_wg_kernel(const __nv_bfloat16* x, QArgs q, const void* __restrict__ bias, int bias_kind,
                 void* __restrict__ y, bool y_f32, int m, int n, int k) {
  using C = WgCfg<SL, AH, NT, CS>;
  constexpr int R = C::kSlots, kA = C::kAcc;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t xs = saddr(smem);
  float* const part = reinterpret_cast<float*>(smem + size_t(k / CS) * NT * 2);
  pdl_launch_dependents();
  // wg through a shuffle from lane 0: the compiler then knows it is warp-uniform and forms the wgmma
  // descriptors and the slices' quad offsets in the uniform datapath (SASS: without it, each descriptor is
  // formed per thread in 64 bits and moved over by R2UR, ~80 instructions a quad of two slices).
  const int tid = int(threadIdx.x), wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = (tid / 32) % 4,
            lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int rank = CS > 1 ? int(cluster_rank()) : 0;
  const int tiles = (n + kTile - 1) / kTile, G = int(gridDim.x) / CS;
  const int QS = k / 1024;         // quads a slice
  const int s0 = rank * (8 / CS);  // the CTA's first slice
  const int sh = q.chunk_shift;    // >= 1
  const bool spair = SP || quad_scale_pairs(q);
  if constexpr (CS > 1) cluster_arrive();  // phase 0: both CTAs run (waited for before the first push)
  // Ring slot s: quad qd of rows g, g + 8 of slices s0 + SL wg + j (j < SL).
  uint4 wa[R][SL], wb[R][SL];
  uint32_t sa[R][SL][2], sb[R][SL][2];
  int l_tile = int(blockIdx.x) / CS, l_qd = 0;  // the load head
  auto load_next = [&](int slot) {
    if (l_tile < tiles) {
      const int r0 = l_tile * kTile + 16 * warp + g;  // rows clamped; masked at the store
      const QuadRows p = quad_rows(q, min(r0, n - 1), min(r0 + 8, n - 1), t);
#pragma unroll
      for (int j = 0; j < SL; ++j)
        load_quad(q, p, (s0 + SL * wg + j) * QS + l_qd, sh, spair, wa[slot][j], wb[slot][j], sa[slot][j],
                  sb[slot][j]);
    }
    if (++l_qd == QS) l_qd = 0, l_tile += G;
  };
#pragma unroll
  for (int a = 0; a < AH; ++a) load_next(a);  // weights are constant
  pdl_wait();                                 // x is not
  if (kAblate != 1) {                         // x's chunks of the CTA's slices into the permuted layout
    stage_x_perm<C::kThreads / 32, false, NT>(xs, x, m, k, rank * (k / 32 / CS), k / 32 / CS, tid);
    fence_proxy_async();  // the generic proxy's stores -> wgmma's reads (async proxy)
    __syncthreads();
  }
  if constexpr (CS > 1)
    if (rank == 1) cluster_wait();  // (phase 0; rank 0 waits for it before its first push)
  // Step J's B: NT * 32 bytes from xs + NT * 32 J; core matrices 128 bytes apart along K, 256 along the
  // tokens.
  const uint64_t desc0 = wgmma_desc(xs, 128, 256);
  float acc[SL * kA];
#pragma unroll
  for (int i = 0; i < SL * kA; ++i) acc[i] = 0.f;
  int tile = int(blockIdx.x) / CS, qd = 0, parity = 0;
  for (;;) {
#pragma unroll
    for (int slot = 0; slot < R; ++slot) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        uint32_t a[SL][2][4];  // slice j, step h: mma_chunk's fragments
#pragma unroll
        for (int j = 0; j < SL; ++j) {
          if (kAblate == 2) {  // (timing: no dequantisation; the raw words as fragments)
            const uint4 ua = wa[slot][j], ub = wb[slot][j];
            a[j][0][0] = ua.x, a[j][0][1] = ub.x, a[j][0][2] = ua.y, a[j][0][3] = ub.y;
            a[j][1][0] = ua.z, a[j][1][1] = ub.z, a[j][1][2] = ua.w, a[j][1][3] = ub.w;
            continue;
          }
          wg_fragments<KIND>(wa[slot][j], wb[slot][j], sa[slot][j], sb[slot][j], e, a[j]);
        }
        if (kAblate == 3) {  // (timing: no MMAs)
#pragma unroll
          for (int j = 0; j < SL; ++j)
#pragma unroll
            for (int i = 0; i < 8; ++i) acc[kA * j + i] += __uint_as_float(a[j][i / 4][i % 4] & 0x3f7fffffu);
        } else {
          wgmma_fence_operands<SL * kA>(acc);
          wgmma_fence();
#pragma unroll
          for (int j = 0; j < SL; ++j) {
            const int c = (SL * wg + j) * (4 * QS) + 4 * qd + e;  // the chunk among the CTA's
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const uint64_t d = wgmma_desc_plus(desc0, uint32_t((2 * c + h) * (NT * 32 >> 4)));
              if constexpr (NT == 16)
                wgmma_rs_m64n16(acc + kA * j, a[j][h], d);
              else
                wgmma_rs_m64n32(acc + kA * j, a[j][h], d);
            }
          }
          wgmma_commit();
        }
        // The next quad's loads after the first use of this slot's words (a use waits on a scoreboard the
        // newest loads may share): into the slot the previous quad left, whose wgmmas are done.
        if (e == 0) load_next((slot + AH) % R);
        if (kAblate != 3) {
          wgmma_fence_operands<SL * kA>(acc);
          wgmma_wait<0>();
          wgmma_fence_operands<SL * kA>(acc);
        }
      }
      if (++qd < QS) continue;
        // The tile's slices are done. ptxas issues a chain's first wgmma without its zeroed accumulator
        // (HGMMA
        // .. RZ, !UPT: D = A B, not A B + 0), where mma.sync adds the +0. The two differ only while every
        // step's products sum to -0 (then -0 here, +0 there), so a +0 added to each slice's result gives
        // mma.sync's bits in every case. Then warpgroups 1.. hand their slices to warpgroup 0, which adds
        // them after its own in slice order. Element i of a slice: feature 16 warp + g + 8 ((i % 4) / 2),
        // token 8 (i / 4) + 2t + i % 2.
#pragma unroll
      for (int i = 0; i < SL * kA; ++i) acc[i] += 0.f;
      float* const pb = part + parity * C::kPartFloats;
      if (wg > 0)
#pragma unroll
        for (int i = 0; i < SL * kA; ++i) pb[((wg - 1) * SL * kA + i) * 128 + tid % 128] = acc[i];
      if constexpr (CS == 1) {
        __syncthreads();  // (a parity's buffer is rewritten two tiles on, past another of these)
      } else if (rank == 0) {
        __syncthreads();
        cluster_wait();  // rank 1 has read the tile two back from this buffer (phase 0: it runs)
      } else {
        cluster_arrive();  // (after reading the tile before)
        cluster_wait();    // rank 0's push of this tile, and this CTA's partials
      }
      if (wg == 0) {
        float4* const peer = reinterpret_cast<float4*>(pb + C::kPeerOff);  // (CS = 2) [i / 4][thread]
        const uint32_t peer_dst = CS > 1 ? peer_addr(saddr(peer), 1) : 0;
#pragma unroll
        for (int i0 = 0; i0 < kA; i0 += 4) {
          float v[4];
#pragma unroll
          for (int ii = 0; ii < 4; ++ii) {
            const int i = i0 + ii;
            float s = 0.f;
            if (CS == 1 || rank == 0) {
              s = acc[i];
            } else {  // rank 1: rank 0's sum first
              const float4 p = peer[(i0 / 4) * 128 + tid];
              s = ii == 0 ? p.x : ii == 1 ? p.y : ii == 2 ? p.z : p.w;
              s += acc[i];
            }
#pragma unroll
            for (int j = 1; j < SL; ++j) s += acc[kA * j + i];
            for (int j = 0; j < (C::kGroups - 1) * SL; ++j) s += pb[(kA * j + i) * 128 + tid];
            v[ii] = s;
          }
          if (CS > 1 && rank == 0) {  // push into rank 1's buffer
            asm volatile("st.shared::cluster.v4.f32 [%0], {%1, %2, %3, %4};" ::"r"(
                             peer_dst + uint32_t(((i0 / 4) * 128 + tid) * 16)),
                         "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
                         : "memory");
          } else {
#pragma unroll
            for (int ii = 0; ii < 4; ++ii) {
              const int i = i0 + ii;
              const int f = tile * kTile + 16 * warp + g + 8 * ((i % 4) / 2),
                        tok = 8 * (i / 4) + 2 * t + i % 2;
              if (tok < m && f < n) store_biased(v[ii], bias, bias_kind, y, y_f32, tok, f, n);
            }
          }
        }
      }
      if constexpr (CS > 1)
        if (rank == 0) cluster_arrive();  // this tile's push
#pragma unroll
      for (int i = 0; i < SL * kA; ++i) acc[i] = 0.f;
      qd = 0, parity ^= 1, tile += G;
      if (tile >= tiles) {
        if constexpr (CS > 1) {  // the last phase: neither CTA leaves while the other may touch its memory
          if (rank == 0) cluster_wait();
          cluster_arrive();
          cluster_wait();
        }
        return;
      }
    }
  }
#else
  __trap();  // built for another architecture: linear_wgmma_supported() keeps callers away
#endif
}

using WgKernel = void (*)(const __nv_bfloat16*, QArgs, const void*, int, void*, bool, int, int, int);
struct WgLaunch {
  WgKernel kernel;
  int threads;
  size_t smem;
};
const int g_q4_wg_ablate = env_digit("TF_Q4_WG_ABLATE", 3, 0);
// (x by stage_x_own, as q4_ks stages it, lost here: runs 506-507, 8B MLX 4-bit forward b=32 +1.7%, b=16
// -0.4%; removed in session 54, docs/cuda-notes.md.)
template <int SL, int AH, int A = 0, bool SP = false>
WgLaunch wg_launch_of(bool subnormal, int k) {
  using C = WgCfg<SL, AH>;
  return {subnormal ? q4_wg_kernel<kMlxBf16Sub, SL, AH, A, SP> : q4_wg_kernel<kMlxBf16, SL, AH, A, SP>,
          C::kThreads, C::smem(k)};
}
// spair: the call's scale words come by pairs (quad_scale_pairs; the default configuration's SP instance).
WgLaunch wg_launch(bool subnormal, int k, int cfg, bool spair) {
  if (cfg == 0) return wg_launch_of<4, 2>(subnormal, k);
  switch (g_q4_wg_ablate) {  // (timing: the default configuration only)
    case 1:
      return wg_launch_of<2, 2, 1>(subnormal, k);
    case 2:
      return wg_launch_of<2, 2, 2>(subnormal, k);
    case 3:
      return wg_launch_of<2, 2, 3>(subnormal, k);
    default:
      return spair ? wg_launch_of<2, 2, 0, true>(subnormal, k) : wg_launch_of<2, 2>(subnormal, k);
  }
}

// The cluster instance: one slice a warpgroup (four warpgroups a CTA), four quads ahead (kWgcAhead), 32
// token rows. Run 498 (H100, same call, 36 calls at M = 32): two / three / four quads ahead, gate_up 1.230 /
// 1.196 / 1.169 ms, lm_head 0.208 / 0.197 / 0.191, the linears 3.596 / 3.547 / 3.472; run 502 (H100, same
// machine, processes alternating): the 8B MLX 4-bit b=32 forward 4.647 / 4.657 ms with two, 4.553 / 4.575
// with four (-2%). Four: 128 registers, no spills.
constexpr int kWgcAhead = 4;
template <bool SP>
WgKernel wgc_kernel(bool subnormal) {
  return subnormal ? q4_wg_kernel<kMlxBf16Sub, 1, kWgcAhead, 0, SP, 32, 2>
                   : q4_wg_kernel<kMlxBf16, 1, kWgcAhead, 0, SP, 32, 2>;
}
WgLaunch wgc_launch(bool subnormal, int k, bool spair) {
  using C = WgCfg<1, kWgcAhead, 32, 2>;
  const WgKernel kernel = spair ? wgc_kernel<true>(subnormal) : wgc_kernel<false>(subnormal);
  return {kernel, C::kThreads, C::smem(k)};
}
constexpr size_t kWgcSmemMax = WgCfg<1, kWgcAhead, 32, 2>::smem(kMaxK);  // (every instance's opt-in)
// How many clusters of two CTAs of the cluster instance the device holds at once, its four kernels (scale
// codes x scale pairs) opted in to kWgcSmemMax of shared memory first (cudaOccupancyMaxActiveClusters: a
// cluster's CTAs share a GPC; the four have the same threads, shared memory and registers, the least count
// kept). Asked once (the backend's priming, outside graph captures); 0 where the device cannot run them (the
// calls then go to the other kernels).
int resident_clusters() {
  static const int clusters = [] {
    int least = -1;
    for (bool subnormal : {false, true})
      for (bool spair : {false, true}) {
        const WgLaunch l = wgc_launch(subnormal, kMaxK, spair);
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(2 * sm_count()), cfg.blockDim = dim3(l.threads),
        cfg.dynamicSmemBytes = kWgcSmemMax;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = 2, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
        cfg.attrs = attr, cfg.numAttrs = 1;
        int c = 0;
        if (cudaFuncSetAttribute(l.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kWgcSmemMax)) !=
                cudaSuccess ||
            cudaOccupancyMaxActiveClusters(&c, l.kernel, &cfg) != cudaSuccess) {
          (void)cudaGetLastError();  // (not sticky)
          return 0;
        }
        least = least < 0 ? c : std::min(least, c);
      }
    return least;
  }();
  return clusters;
}

// Whether the cluster instance takes a call of m rows, n features, K = k (the mode, set_q4_wgc).
// Past 32 rows: whether 32-row pieces of the call should go to them.
bool wgc_takes(int m, int n, int k) {
  const int g = g_q4_wgc;
  if (g == 0 || m < 17 || m > 64 || k % 1024 || k > kMaxK) return false;
  // (Run 497, H200, 64 rows: the 1024-wide k as two 32-row pieces on 32 CTAs 0.557 ms against 0.339 whole.)
  return m <= 32 || g == 2 || int64_t((n + kTile - 1) / kTile) * 2 >= int64_t(sm_count()) * 3 / 4;
}
std::atomic<long> g_wgc_launches{0};

}  // namespace

bool q4_wg_takes_rows(int m, int n, int k) {
  return linear_wgmma_supported() && resident_clusters() > 0 && wgc_takes(m, n, k);
}

bool q4_wg_linear(bool subnormal, const __nv_bfloat16* x, const QArgs& q, const void* bias, int bias_kind,
                  void* y, bool y_f32, int m, int n, int k, cudaStream_t s) {
  if (n < 1 || k % 1024 || k > kMaxK || q.chunk_shift < 1 || q.quad_chunks < k / 32 ||
      !linear_wgmma_supported())
    return false;
  const bool spair = quad_scale_pairs(q);
  const int tiles = (n + kTile - 1) / kTile;
  if (m <= 16 && g_q4_wg != 0 && m >= (g_q4_wg == 2 ? 1 : 9) && (g_q4_wg != 3 || n >= kLmHeadMinN)) {
    const WgLaunch l = wg_launch(subnormal, k, g_q4_wg_cfg, spair);
    // (resident_blocks caches a kernel's first answer and opts in its shared memory then: always the largest)
    const int grid = resident_blocks(reinterpret_cast<const void*>(l.kernel), l.threads,
                                     wg_launch(subnormal, kMaxK, g_q4_wg_cfg, spair).smem);
    if (grid >= 1 && (g_q4_wg == 2 || tiles >= grid)) {
      launch_pdl(l.kernel, dim3(std::min(tiles, grid)), dim3(l.threads), l.smem, s, x, q, bias, bias_kind, y,
                 y_f32, m, n, k);
      return true;
    }
  }
  if (m > 32 || !wgc_takes(m, n, k)) return false;
  // A cluster of two CTAs a tile (K's slices halved), persistent over the tiles.
  const WgLaunch l = wgc_launch(subnormal, k, spair);
  const int clusters = resident_clusters();
  if (clusters < 1) return false;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(2 * std::min(tiles, clusters)), cfg.blockDim = dim3(l.threads);
  cfg.dynamicSmemBytes = l.smem, cfg.stream = s;
  cudaLaunchAttribute attr[2];
  int na = 0;
  attr[na].id = cudaLaunchAttributeClusterDimension;
  attr[na].val.clusterDim.x = 2, attr[na].val.clusterDim.y = 1, attr[na++].val.clusterDim.z = 1;
  if (pdl_enabled()) {
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na++].val.programmaticStreamSerializationAllowed = 1;
  }
  cfg.attrs = attr, cfg.numAttrs = na;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, l.kernel, x, q, bias, bias_kind, y, y_f32, m, n, k));
  ++g_wgc_launches;
  return true;
}

void prime_q4_wg_grids() {
  if (!linear_wgmma_supported()) return;
  for (bool subnormal : {false, true})
    for (int cfg = 0; cfg < 2; ++cfg)
      for (bool spair : {false, true}) {
        const WgLaunch l = wg_launch(subnormal, kMaxK, cfg, spair);  // (the opt-in: the largest k)
        resident_blocks(reinterpret_cast<const void*>(l.kernel), l.threads, l.smem);
      }
  resident_clusters();
}

void set_q4_wg_config(int cfg) {
  TF_CHECK(cfg >= 0 && cfg <= 1,
           "set_q4_wg_config: 0 (4 slices a warpgroup, two warpgroups) or 1 (2 slices, four warpgroups); two "
           "quads ahead each");
  g_q4_wg_cfg = cfg;
}

int q4_wg_config() {
  return g_q4_wg_cfg;
}

void set_q4_wg(int mode) {
  TF_CHECK(
      mode >= 0 && mode <= 3,
      "set_q4_wg: 0 (off), 1 (9-16 rows where the tiles fill the grid), 2 (1-16 rows), 3 (1, the lm_head)");
  g_q4_wg = mode;
}

int q4_wg_mode() {
  return g_q4_wg;
}

void set_q4_wgc(int mode) {
  TF_CHECK(
      mode >= 0 && mode <= 2,
      "set_q4_wgc: 0 (off), 1 (17-32 rows, and 32-row pieces of 33-64 rows of widths whose tiles as pairs "
      "fill 3/4 of the SMs) or 2 (1, with pieces of every width)");
  g_q4_wgc = mode;
}

long q4_wgc_launches() {
  return g_wgc_launches.load();
}

int q4_wgc_mode() {
  return g_q4_wgc;
}

}  // namespace tf::cuda

// MLX 4-bit linears at 9-16 token rows, split by K slice across CTAs (q4_ks_kernel): issue 11's batch-16
// case.
//
// Why (a hypothesis from run 450's numbers, not yet measured). At 16 rows x is 32 bytes a K value, and the
// kernels that walk a tile's whole K in one block read all of x once a tile: q4_decode_kernel's 16-feature
// tiles up to 256 times a 4096-wide call (down, K = 12288: up to 256 x 393 KB = 100 MB from L2 for 28 MB of
// weights, less what L1 keeps between a SM's two blocks; q / o: up to 33 MB for 9.4), q4_pair_kernel's
// 32-feature tiles up to 768 times at the gate_up (ncu, run 444: 38% L1 hits). x bytes per weight byte for a
// tile of F features: 57 / F, 3.6 at F = 16. The M = 16 linears of an 8B step stream at 1.7 TB/s where the
// same weights at M = 1 stream at 2.6 (run 450: down 15.9 against 10.3 us a call, q / o 3.3 against 2.6).
// q4_wg_kernel (quant_wg.cu) keeps all of x in a CTA's shared memory (once a CTA: K <= 4096, one CTA an SM),
// which took the gate_up alone 0.961 -> 0.851 ms but blocks its neighbours' residency and cannot hold the
// down's 384 KB.
//
// Layout. The bits fix 8 K slices (a function of K alone) and their sum in slice order; which CTA computes a
// slice does not matter. So a CTA takes one slice s and holds only that slice of x (K / 8 values of 16 rows:
// 16 KB at K = 4096, 48 KB at 12288, in stage_x_perm's layout), and its NW warpgroups walk 64-feature tiles
// of that slice (warpgroup w of CTA b: tiles (b / 8) NW + w, + (gridDim / 8) NW, ...). A warpgroup's tile is
// q4_wg_kernel's with one slice (SL = 1): warp w features 16w .. 16w + 15, lane (g, t) rows g and g + 8, the
// slice's quads chunk by chunk as wgmma m64n16k16 steps with the dequantized weights as register operand A,
// AH quads of weights in flight ahead in registers (the first before griddepcontrol.wait). PIPE 1: the
// fragments by chunk parity, one chunk's wgmma group in flight while the next chunk is dequantized.
// The slice's partial (+0: the RZ first step, quant_wg.cu) is then folded one of two ways:
// - CL 0 (ticket): it goes to the workspace, [tile][slice][1024] floats, a thread's 8 as two float4s; a
//   ticket a tile elects the warpgroup that takes the tile's eighth ticket, which adds the 8 partials in
//   slice order (its own from registers, the others' through L2), adds the bias, rounds, stores and resets
//   the ticket for the next call. Its cost on the last warpgroup's path: a fence, the atomic's round trip and
//   the partials' (~1.5-2 us predicted).
// - CL 1 (cluster): the grid's 8 slices of a tile group are one cluster (rank = slice); slices 1-7 send their
//   partial by st.async into slice 0's shared memory (7 x 4 KB a warpgroup, counted on its full mbarrier),
//   slice 0 adds them after its own in slice order and stores, then frees the buffer for the next tile (a
//   remote arrive on each sender's empty mbarrier). No global round trips; a closing cluster barrier keeps
//   every CTA resident while its peers may still reach it.
// x traffic: 8 slices x (CTAs a slice) x K / 8 x 32 bytes (a 4096-wide down on 256 CTAs: 12 MB, not 100).
//
// Tried and removed (session 47): the quads ahead in a ring in shared memory (cp.async) instead of
// registers, with twice the bytes in flight, the same depth, or held to 64 registers for twice the warps an
// SM -- slower than the quads ahead in registers on the H100 and the H200 in every form (runs 458, 463;
// docs/cuda-notes.md "Session 45"-"Session 47"): the 16-row linears are not bound by the bytes in flight.
// Two K slices a CTA, each warpgroup computing both of a tile (q4_wg_kernel's SL = 2; session 47's
// configuration 7: 139 instructions a thread for 64 weights against 150) lost on the H200 (run 468: the down
// 0.515 -> 0.792 ms, the forward 2.92 -> 3.16): half the CTAs a tile group, so the down's 64 tiles filled
// half the card; with one warpgroup a CTA instead, each CTA would stage 96 KB of x for 110 KB of weights
// (configuration 0's ratio, which loses to 1 by the same margin).
//
// Bits: q4_decode_kernel's (each slice the same chain of the same chunks, the slice sums in slice order,
// then store_biased); tested bit for bit against it (test_quant_cuda).
//
// Measured (run 453, session 43; docs/cuda-notes.md): the x-traffic hypothesis held only in part. ncu at
// M = 16: q4_decode_kernel's down reads 74 MB from L2 for 29 MB of DRAM (2.6x), q4_ks's 62 MB; but alone the
// split is slower everywhere except the down (0.564 -> 0.521-0.530 ms a step with two or four warpgroups a
// CTA; q / o +25%, gate_up +31%), and the cluster fold loses to the ticket. In the 8B b=16 forward, the down
// only (mode 3, configuration 1) is faster in the same call, three processes: 3.426 / 3.440 / 3.428 ->
// 3.381 / 3.384 / 3.375 ms (-1.3..-1.6%): the default.
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"  // wgmma helpers, linear_wgmma_supported
#include "ops/cuda/mbarrier.cuh"    // saddr, nbar_sync, fence_proxy_async
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_ks.h"
#include "ops/cuda/quant_linear.h"
#include "ops/cuda/quant_wg.cuh"  // stage_x_perm, wg_fragments

namespace tf::cuda {
namespace {

constexpr int kTile = 64;       // features a tile
constexpr int kSlices = 8;      // K slices (the bits' own)
constexpr int kMaxK = 12288;    // a slice of x in shared memory: 4 k bytes (48 KB)
constexpr int kMaxTiles = 384;  // the workspace: widths up to 24576 (the 8B gate_up)
constexpr int kPartMax = 2048;  // floats of a (tile, slice) partial: 64 features x 16 or 32 tokens (NT)
// A configuration: NW warpgroups a CTA (one slice, different tiles), AH quads ahead in registers, PIPE and CL
// (see above).
template <int NW, int AH, int PIPE, int CL>
struct KsCfg {
  static constexpr int kThreads = 128 * NW, kSlots = AH + 1, kMinBlocks = 4 / NW;
};
// Dynamic shared memory (no static shared memory: 48 KB of x at K = 12288 plus any static would need the
// opt-in that resident_blocks gives only above 48 KB): x's slice (K / 8 values x 16 rows x 2 bytes), then
// with CL the fold buffer (a warpgroup's 7 partials from the other slices: 7 x 4 KB) and the mbarriers (full
// and empty, a warpgroup each), then the warpgroups' ticket flags.
// NT: the token rows (16; 32 for 17-32 rows, configuration 1 only: x's slice 32 KB at K = 4096, 96 KB at
// 12288).
constexpr size_t ks_fold_offset(int k, int nt = 16) {
  return size_t(k) * nt / 4;
}
constexpr size_t ks_bars_offset(int k, int nw, int cl, int nt = 16) {  // (CL: 16 token rows only)
  return ks_fold_offset(k, nt) + (cl ? size_t(nw) * (kSlices - 1) * kTile * 16 * sizeof(float) : 0);
}
constexpr size_t ks_smem(int k, int nw, int cl, int nt = 16) {
  return ks_bars_offset(k, nw, cl, nt) + (cl ? size_t(nw) * 16 : 0) + 16;
}
// TF_Q4_KS=0 off, 1 at 9-16 rows, 2 at 1-16 rows, 3 at 9-16 rows for K > 4096 only (the down: the default,
// run 453), 4 at 9-16 rows for widths <= 8192 only (all but the gate_up).
int g_q4_ks = env_digit("TF_Q4_KS", 4, 3);
// TF_Q4_KS32=0 off, 1 at 17-32 rows, every width, 2 at 17-32 rows for K > 4096 only (the down; the default):
// the NT = 32 instance (set_q4_ks32). Run 491 (H100, 8B MLX 4-bit, 36 calls at M = 32, off / on): q 0.382 /
// 0.433 ms, k 0.308 / 0.317, gate_up 2.034 / 2.190, down 0.956 / 0.726; the b=32 forward off / 1 / 2: 5.889
// / 6.261 / 5.765 ms and 5.893 / 6.262 / 5.757.
int g_q4_ks32 = env_digit("TF_Q4_KS32", 2, 2);
// TF_Q4_KS_CFG: 0 = NW 1, 1 = NW 2, 2 = NW 1 PIPE, 3 = NW 2 PIPE, 4 = NW 4 (one CTA an SM), 5 = NW 2 CL, 6 =
// NW 1 CL (AH 4 each).
constexpr int kKsConfigs = 7;
int g_q4_ks_cfg = env_digit("TF_Q4_KS_CFG", kKsConfigs - 1, 1);  // (1: the forward's A/B, run 453)
std::atomic<long> g_q4_ks_launches{0};

// st.async of 16 bytes into a cluster peer's shared memory (dst, a shared::cluster address), completing 16
// bytes of transaction count on the peer's mbarrier bar (its shared::cluster address).
__device__ __forceinline__ void st_async16(uint32_t dst, float4 v, uint32_t bar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
      : "memory");
}
// A relaxed arrival on a peer's mbarrier (its shared::cluster address): the caller fences first (one
// fence.acq_rel.cluster for several arrivals; a release arrival compiles to its own MEMBAR.ALL.GPU each).
__device__ __forceinline__ void mbar_arrive_remote_relaxed(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}
// Waits for the phase of `parity` of this CTA's mbarrier bar, acquiring at cluster scope (what peers wrote or
// sent before their arrivals and transactions).
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}

// SP: the quads' scale words known at compile time to come by pairs (load_quad's spair: groups of 64, an even
// group count a row; the launch picks the instance), so that neither load path's predicated-off instructions
// issue (configuration 1, the default, only). Same words, same bits.
// NT: token rows, 16 (m64n16k16 steps) or 32 (m64n32k16, 17-32 rows; the ticket fold only): each
// element's chain is the same k16 steps in the same order, so the same bits (tested).
// XCP: x's slice staged by stage_x_own (each warp its chunks by cp.async, permuted in place) instead of
// stage_x_perm (loads through registers). Same shared-memory bytes.
template <int KIND, int NW, int AH, int PIPE, int CL, bool SP, int NT = 16, bool XCP = false>
__global__ void __launch_bounds__(KsCfg<NW, AH, PIPE, CL>::kThreads, KsCfg<NW, AH, PIPE, CL>::kMinBlocks)
    q4_ks_kernel(const __nv_bfloat16* x, QArgs q, const void* __restrict__ bias, int bias_kind,
                 void* __restrict__ y, bool y_f32, int m, int n, int k, float* part, int* tickets) {
  using C = KsCfg<NW, AH, PIPE, CL>;
  constexpr int R = C::kSlots;
  static_assert(NT == 16 || (NT == 32 && CL == 0), "32 token rows: the ticket fold only");
  constexpr int kAcc = NT / 2, kPart = 64 * NT, kHalves = NT / 8;  // a thread's floats; a partial's; float4s
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t xs = saddr(smem);
  float* const fold = reinterpret_cast<float*>(smem + ks_fold_offset(k, NT));  // CL: [wg][slice - 1][kPart]
  const uint32_t bars = xs + uint32_t(ks_bars_offset(k, NW, CL, NT));          // CL: full[NW], empty[NW]
  int* const last_of = reinterpret_cast<int*>(smem + ks_smem(k, NW, CL, NT) - 16);
  pdl_launch_dependents();
  const int tid = int(threadIdx.x), wg = tid / 128, wt = tid % 128, warp = wt / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = (n + kTile - 1) / kTile;
  // CL: a cluster is the 8 CTAs of one group of tiles, rank = slice (1-D clusters of 8, grid a multiple).
  const int slice = int(blockIdx.x) % kSlices, step = (int(gridDim.x) / kSlices) * NW;
  const int first = (int(blockIdx.x) / kSlices) * NW + wg;
  const int QS = k / 1024;       // quads a slice
  const int sh = q.chunk_shift;  // >= 1
  const bool spair = SP || quad_scale_pairs(q);
  if constexpr (CL) {  // the mbarriers, visible to the cluster before any peer's st.async or arrive
    if (cluster_rank() != uint32_t(slice)) __trap();  // (1-D clusters of 8: rank = blockIdx.x % 8)
    if (tid == 0) {
      for (int w = 0; w < NW; ++w) mbar_init(bars + 8 * w, 1), mbar_init(bars + 8 * (NW + w), 1);
      mbar_init_fence();
    }
    cluster_sync();
  }
  // Ring slot: quad qd of rows g, g + 8 of the slice: quad slice QS + qd of the row.
  uint4 wa[R], wb[R];
  uint32_t sa[R][2], sb[R][2];
  int l_tile = first, l_qd = 0;  // the load head
  auto load_next = [&](int slot) {
    if (l_tile < tiles) {
      const int r0 = l_tile * kTile + 16 * warp + g;  // rows clamped; masked at the store
      const QuadRows p = quad_rows(q, min(r0, n - 1), min(r0 + 8, n - 1), t);
      load_quad(q, p, slice * QS + l_qd, sh, spair, wa[slot], wb[slot], sa[slot], sb[slot]);
    }
    if (++l_qd == QS) l_qd = 0, l_tile += step;
  };
#pragma unroll
  for (int a = 0; a < AH; ++a) load_next(a);  // weights are constant
  pdl_wait();                                 // x is not, nor the workspace
  if constexpr (XCP)
    stage_x_own<NT>(xs, x, m, k, slice * 4 * QS, tid / 32, C::kThreads / 32, 4 * QS, lane);
  else
    stage_x_perm<C::kThreads / 32, true, NT>(xs, x, m, k, slice * 4 * QS, 4 * QS, tid);  // (NW 4, odd QS)
  fence_proxy_async();  // the generic proxy's stores -> wgmma's reads (async proxy)
  __syncthreads();
  // Step J's B: NT x 32 bytes from xs + NT 32 J; core matrices 128 bytes apart along K, 256 along the tokens.
  const uint64_t desc0 = wgmma_desc(xs, 128, 256);
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
  uint32_t a[2][2][4];  // [chunk parity (PIPE) or 0][step h]: mma_chunk's fragments
  int tile = first, qd = 0, round = 0;
  // The 4 chunks of a quad (slot `slot` of the registers), then refill(), the next quad's loads, after the
  // first use of its words (into the slot the previous quad left).
  auto quad = [&](int slot, auto&& refill) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int par = PIPE ? e & 1 : 0;  // (4 chunks a quad: even, so the parity is static)
      wg_fragments<KIND>(wa[slot], wb[slot], sa[slot], sb[slot], e, a[par]);
      wgmma_fence_operands<kAcc>(acc);
      wgmma_fence();
      const int c = 4 * qd + e;  // the chunk of the slice
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint64_t db = wgmma_desc_plus(desc0, uint32_t((2 * c + h) * (NT * 32 >> 4)));
        if constexpr (NT == 16)
          wgmma_rs_m64n16(acc, a[par][h], db);
        else
          wgmma_rs_m64n32(acc, a[par][h], db);
      }
      wgmma_commit();
      if (e == 0) refill();
      wgmma_fence_operands<kAcc>(acc);
      if (PIPE)
        wgmma_wait<1>();  // the chunk before: its fragments are rewritten by the next chunk
      else
        wgmma_wait<0>();
      wgmma_fence_operands<kAcc>(acc);
    }
  };
  // The tile's slice is done (all QS quads): its partial folded, stored where this warpgroup folds last.
  // Returns whether the warpgroup has a further tile.
  auto finish_tile = [&]() {
    if (PIPE) {
      wgmma_wait<0>();
      wgmma_fence_operands<kAcc>(acc);
    }
    // +0 for the RZ first step, then the fold. Element i of a slice: feature 16 warp + g + 8 ((i % 4) / 2),
    // token 8 (i / 4) + 2t + i % 2.
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] += 0.f;
    const bool next = tile + step < tiles;
    auto store_half = [&](int hf, const float(&s)[4]) {  // the folded sums of elements 4 hf .. 4 hf + 3
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int f = tile * kTile + 16 * warp + g + 8 * (i / 2), tok = 8 * hf + 2 * t + i % 2;
        if (tok < m && f < n) store_biased(s[i], bias, bias_kind, y, y_f32, tok, f, n);
      }
    };
    if constexpr (CL) {
      // Slices 1-7 send their partial into slice 0's fold buffer (st.async, counted on its full barrier);
      // slice 0 adds them after its own in slice order, then frees the buffer (its empty barriers) for
      // the next tile. The warpgroups of a cluster walk the same tiles, so the rounds match.
      const uint32_t full = bars + 8 * wg, empty = bars + 8 * (NW + wg);
      if (slice == 0) {
        if (wt == 0) mbar_arrive_expect_tx(full, (kSlices - 1) * kPart * sizeof(float));
        mbar_wait_cluster(full, uint32_t(round & 1));
        const float4* buf = reinterpret_cast<const float4*>(fold + size_t(wg) * (kSlices - 1) * kPart);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float s[4] = {acc[4 * hf], acc[4 * hf + 1], acc[4 * hf + 2], acc[4 * hf + 3]};
#pragma unroll
          for (int j = 0; j < kSlices - 1; ++j) {
            const float4 v = buf[j * (kPart / 4) + 128 * hf + wt];
            s[0] += v.x, s[1] += v.y, s[2] += v.z, s[3] += v.w;
          }
          store_half(hf, s);
        }
        if (next) {
          nbar_sync(1 + wg, 128);  // every thread has read the buffer
          if (wt == 0) {
            asm volatile("fence.acq_rel.cluster;" ::: "memory");
            for (int r = 1; r < kSlices; ++r) mbar_arrive_remote_relaxed(peer_addr(empty, uint32_t(r)));
          }
        }
      } else {
        if (round > 0) mbar_wait_cluster(empty, uint32_t((round - 1) & 1));
        const uint32_t dst =
            peer_addr(xs + uint32_t(ks_fold_offset(k, NT)) +
                          uint32_t((wg * (kSlices - 1) + slice - 1) * kPart * sizeof(float)) + 16 * wt,
                      0);
        const uint32_t bar = peer_addr(full, 0);
        st_async16(dst, make_float4(acc[0], acc[1], acc[2], acc[3]), bar);
        st_async16(dst + kPart * 2, make_float4(acc[4], acc[5], acc[6], acc[7]), bar);
      }
    } else {
      // The partial to the workspace; a ticket a tile elects the last warpgroup, which adds the 8 partials
      // in slice order (its own from registers, the others' through L2) and resets the ticket.
      float4* const mine = reinterpret_cast<float4*>(part + (size_t(tile) * kSlices + slice) * kPart);
#pragma unroll
      for (int hf = 0; hf < kHalves; ++hf)
        mine[128 * hf + wt] = make_float4(acc[4 * hf], acc[4 * hf + 1], acc[4 * hf + 2], acc[4 * hf + 3]);
      __threadfence();  // this thread's partial, before the warpgroup's ticket
      nbar_sync(1 + wg, 128);
      if (wt == 0) last_of[wg] = atomicAdd(tickets + tile, 1) == kSlices - 1;
      nbar_sync(1 + wg, 128);
      if (last_of[wg]) {
        __threadfence();  // the other slices' partials, after their tickets
        if (wt == 0) tickets[tile] = 0;
#pragma unroll
        for (int hf = 0; hf < kHalves; ++hf) {
          float4 v[kSlices];
#pragma unroll
          for (int j = 0; j < kSlices; ++j)
            v[j] = j == slice
                       ? make_float4(acc[4 * hf], acc[4 * hf + 1], acc[4 * hf + 2], acc[4 * hf + 3])
                       : __ldcg(reinterpret_cast<const float4*>(part + (size_t(tile) * kSlices + j) * kPart) +
                                128 * hf + wt);
          float s[4] = {v[0].x, v[0].y, v[0].z, v[0].w};
#pragma unroll
          for (int j = 1; j < kSlices; ++j) s[0] += v[j].x, s[1] += v[j].y, s[2] += v[j].z, s[3] += v[j].w;
          store_half(hf, s);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    qd = 0, tile += step, ++round;
    return next;
  };
  // (no block-wide barrier below: a warpgroup without tiles skips the loop; with CL every thread still
  // reaches the closing cluster barrier)
  bool more = tile < tiles;
  while (more) {
#pragma unroll
    for (int slot = 0; slot < R; ++slot) {
      quad(slot, [&] { load_next((slot + AH) % R); });
      if (++qd < QS) continue;
      if (!finish_tile()) {
        if constexpr (!CL)
          return;  // (a return, not the break: with the break ptxas serialised PIPE's wgmmas)
        more = false;
        break;
      }
    }
  }
  // CL: no CTA leaves while a peer may still write its fold buffer or arrive on its barriers.
  if constexpr (CL) cluster_sync();
#else
  __trap();  // built for another architecture: linear_wgmma_supported() keeps callers away
#endif
}

using KsKernel = void (*)(const __nv_bfloat16*, QArgs, const void*, int, void*, bool, int, int, int, float*,
                          int*);
struct KsLaunch {
  KsKernel kernel;
  int threads, nw, cl, nt;
};
template <int NW, int AH, int PIPE, int CL, bool SP = false, int NT = 16, bool XCP = false>
KsLaunch ks_launch_of(bool subnormal) {
  return {subnormal ? q4_ks_kernel<kMlxBf16Sub, NW, AH, PIPE, CL, SP, NT, XCP>
                    : q4_ks_kernel<kMlxBf16, NW, AH, PIPE, CL, SP, NT, XCP>,
          KsCfg<NW, AH, PIPE, CL>::kThreads, NW, CL, NT};
}
// TF_Q4_KS_XCP: 1 (default since run 507) x's slice by stage_x_own in configuration 1 and the 32-token
// instance, 0 by stage_x_perm. Read once a process. Runs 506-507 (H100, 8B MLX 4-bit forward, alternating
// processes): b=32 4.536 -> 4.490 ms (-1.0%), b=16 3.215 -> 3.206; the 32-row down -2%.
const bool g_q4_ks_xcp = env_digit("TF_Q4_KS_XCP", 1, 1) == 1;
// Configuration 1 at NT token rows (its SP instance where spair), x by the switch's staging.
template <int NT>
KsLaunch ks_cfg1_launch(bool subnormal, bool spair) {
  if (g_q4_ks_xcp)
    return spair ? ks_launch_of<2, 4, 0, 0, true, NT, true>(subnormal)
                 : ks_launch_of<2, 4, 0, 0, false, NT, true>(subnormal);
  return spair ? ks_launch_of<2, 4, 0, 0, true, NT>(subnormal)
               : ks_launch_of<2, 4, 0, 0, false, NT>(subnormal);
}
// spair: the call's scale words come by pairs (quad_scale_pairs; configuration 1's SP instance). 32 token
// rows (nt): configuration 1 whatever cfg says.
KsLaunch ks_launch(bool subnormal, int cfg, bool spair, int nt = 16) {
  if (nt == 32) return ks_cfg1_launch<32>(subnormal, spair);
  switch (cfg) {
    case 1:
      return ks_cfg1_launch<16>(subnormal, spair);
    case 2:
      return ks_launch_of<1, 4, 1, 0>(subnormal);
    case 3:
      return ks_launch_of<2, 4, 1, 0>(subnormal);
    case 4:
      return ks_launch_of<4, 4, 0, 0>(subnormal);
    case 5:
      return ks_launch_of<2, 4, 0, 1>(subnormal);
    case 6:
      return ks_launch_of<1, 4, 0, 1>(subnormal);
    default:
      return ks_launch_of<1, 4, 0, 0>(subnormal);
  }
}
// resident_blocks caches a kernel's first answer and opts in its shared memory then: always the largest.
// With the cluster fold, at most the clusters of 8 that fit at once (a cluster stays inside one GPC), cached
// per kernel as resident_blocks caches.
int ks_resident(const KsLaunch& l) {
  const int blocks =
      resident_blocks(reinterpret_cast<const void*>(l.kernel), l.threads, ks_smem(kMaxK, l.nw, l.cl, l.nt));
  if (!l.cl) return blocks;
  static std::mutex mu;
  static std::unordered_map<const void*, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(reinterpret_cast<const void*>(l.kernel)); it != cache.end()) return it->second;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(kSlices * 64), cfg.blockDim = dim3(l.threads);
  cfg.dynamicSmemBytes = ks_smem(kMaxK, l.nw, l.cl, l.nt);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kSlices, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr, cfg.numAttrs = 1;
  int clusters = 0;
  TF_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, l.kernel, &cfg));
  return cache[reinterpret_cast<const void*>(l.kernel)] = std::min(blocks, clusters * kSlices);
}

}  // namespace

bool q4_ks_takes(const LinearWeight& w) {
  if (w.format != LinearWeight::Format::MlxAffine || w.bits != 4 || w.group_size < 64) return false;
  if (w.scales.dtype() != DType::U32) return false;  // bf16 scale and bias words (upload_quantized_linear)
  const int64_t k = w.in_features;
  return k % 1024 == 0 && k <= kMaxK && linear_wgmma_supported();
}

Q4KsWorkspace make_q4_ks_workspace() {
  Q4KsWorkspace ws;
  if (!linear_wgmma_supported()) return ws;  // (no kernel to use it)
  TF_CUDA_CHECK(cudaMalloc(&ws.part, size_t(kMaxTiles) * kSlices * kPartMax * sizeof(float)));
  TF_CUDA_CHECK(cudaMalloc(&ws.tickets, size_t(kMaxTiles) * sizeof(int)));
  TF_CUDA_CHECK(cudaMemset(ws.tickets, 0, size_t(kMaxTiles) * sizeof(int)));
  TF_CUDA_CHECK(
      cudaDeviceSynchronize());  // (the memset is not ordered with the backend's non-blocking stream)
  ws.max_tiles = kMaxTiles;
  return ws;
}

void free_q4_ks_workspace(Q4KsWorkspace& ws) {
  if (ws.part) cudaFree(ws.part);
  if (ws.tickets) cudaFree(ws.tickets);
  ws = Q4KsWorkspace{};
}

void reset_q4_ks_workspace(const Q4KsWorkspace& ws, cudaStream_t s) {
  if (ws.tickets) cudaMemsetAsync(ws.tickets, 0, size_t(ws.max_tiles) * sizeof(int), s);
}

bool q4_ks_linear(bool subnormal, const __nv_bfloat16* x, const QArgs& q, const void* bias, int bias_kind,
                  void* y, bool y_f32, int m, int n, int k, const Q4KsWorkspace* ws, cudaStream_t s) {
  const int nt = m > 16 ? 32 : 16;
  if (!ws || !ws->part || n < 1 || m > 32) return false;
  if (nt == 32 && (g_q4_ks32 == 0 || (g_q4_ks32 == 2 && k <= 4096))) return false;
  if (nt == 16) {
    if (g_q4_ks == 0 || m < (g_q4_ks == 2 ? 1 : 9)) return false;
    if ((g_q4_ks == 3 && k <= 4096) || (g_q4_ks == 4 && n > 8192)) return false;
  }
  const int tiles = (n + kTile - 1) / kTile;
  if (tiles > ws->max_tiles || k % 1024 || k > kMaxK || q.chunk_shift < 1 || q.quad_chunks < k / 32 ||
      !linear_wgmma_supported())
    return false;
  const KsLaunch l = ks_launch(subnormal, g_q4_ks_cfg, quad_scale_pairs(q), nt);
  const int per_slice = std::min((tiles + l.nw - 1) / l.nw, ks_resident(l) / kSlices);
  if (per_slice < 1) return false;
  const size_t smem = ks_smem(k, l.nw, l.cl, l.nt);
  if (!l.cl) {
    launch_pdl(l.kernel, dim3(per_slice * kSlices), dim3(l.threads), smem, s, x, q, bias, bias_kind, y, y_f32,
               m, n, k, ws->part, ws->tickets);
  } else {  // clusters of the 8 slices (and the dependent launch, as launch_pdl)
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(per_slice * kSlices), cfg.blockDim = dim3(l.threads), cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    int na = 0;
    if (pdl_enabled()) {
      attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[na++].val.programmaticStreamSerializationAllowed = 1;
    }
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = kSlices, attr[na].val.clusterDim.y = 1, attr[na++].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = na;
    TF_CUDA_CHECK(
        cudaLaunchKernelEx(&cfg, l.kernel, x, q, bias, bias_kind, y, y_f32, m, n, k, ws->part, ws->tickets));
  }
  g_q4_ks_launches.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void prime_q4_ks_grids() {
  if (!linear_wgmma_supported()) return;
  for (bool subnormal : {false, true})
    for (bool spair : {false, true}) {
      for (int cfg = 0; cfg < kKsConfigs; ++cfg) ks_resident(ks_launch(subnormal, cfg, spair));
      ks_resident(ks_launch(subnormal, 1, spair, 32));
    }
}

void set_q4_ks(int mode) {
  TF_CHECK(mode >= 0 && mode <= 4,
           "set_q4_ks: 0 (off), 1 (9-16 rows), 2 (1-16 rows), 3 (1, K > 4096 only), 4 (1, "
           "widths <= 8192 only)");
  g_q4_ks = mode;
}

int q4_ks_mode() {
  return g_q4_ks;
}

void set_q4_ks32(int mode) {
  TF_CHECK(mode >= 0 && mode <= 2, "set_q4_ks32: 0 (off), 1 (17-32 rows) or 2 (17-32 rows, K > 4096 only)");
  g_q4_ks32 = mode;
}

int q4_ks32_mode() {
  return g_q4_ks32;
}

void set_q4_ks_config(int cfg) {
  TF_CHECK(
      cfg >= 0 && cfg < kKsConfigs,
      "set_q4_ks_config: 0 (one warpgroup a CTA), 1 (two), 2 (one, fragments by chunk parity), 3 (two, by "
      "parity), 4 (four), 5 (two, the fold in a cluster) or 6 (one, the fold in a cluster)");
  g_q4_ks_cfg = cfg;
}

int q4_ks_config() {
  return g_q4_ks_cfg;
}

long q4_ks_launches() {
  return g_q4_ks_launches.load(std::memory_order_relaxed);
}

}  // namespace tf::cuda

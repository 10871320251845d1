// Weight-only quantized linears: linear.cu's row-invariant tensor-core kernel with its weight loads
// replaced by packed loads that are dequantized to bf16 in registers.
//
// Layout and arithmetic follow linear.cu exactly: a block owns 16 output features and 8*NT tokens, its
// 8 warps take 8 fixed K slices (a function of K alone), lane (g, t) takes values k0+8t .. k0+8t+7 of
// features n0+g and n0+g+8 for each 32-wide K chunk, and each chunk is two m16n8k16 MMAs into an fp32
// accumulator, slices summed in warp order. The only change is where the 8 bf16 weights of a lane come
// from: the packed bytes of those 8 values (B bytes for B-bit MLX, 8 for FP8, read once each) and their
// group's scale and bias. A 32-wide chunk never straddles a group (group % 32 == 0). So for any M the
// output bits equal linear_bf16() on the dequantized weight (dequantize_bf16), which is what calls of
// kDequantMinM rows or more do (the tiled tensor-core kernel, tested bit-equal to the decode kernel) -- for
// MLX 4-bit up to TF_Q4_PREFILL_MAX_M rows without the copy: linear_wgmma_mlx4 dequantizes in the CTA.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "ops/cpu/quant.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/linear_wgmma.h"  // linear_wgmma_mlx4
#include "ops/cuda/mbarrier.cuh"    // gtime (the stamps instance)
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_ks.h"
#include "ops/cuda/quant_linear.h"
#include "ops/cuda/quant_pair.h"
#include "ops/cuda/quant_wg.h"
#include "ops/cuda/stamp_buffer.h"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;  // K slices: must equal linear.cu's (same arithmetic)
int g_loads_per_step = 0;  // K chunks a warp loads per step for M <= 16; 0: by width (auto)
// TF_Q4_SPLIT32: MLX 4-bit calls of 17-64 rows in pieces, the first piece off the front, the rest by the same
// rules: 0 off; 1 17-32 rows of widths > 8192 (the gate_up, the lm_head) as 16 + the rest; 2 as 1 for every
// width; 3 as 1, and 33-64 rows of widths > 8192 by 16 rows; 4 (the default) as 3, and 33-64 rows of K > 4096
// (the down) by 32 rows, each on q4_ks's 32-token instance (set_q4_split32). Run 492 (H100, 8B, 36 calls at M
// = 32, off / 1 / 2): gate_up 2.045 / 1.750 / 1.752 ms, q 0.383 / 0.384 / 0.528, down 0.753 / 0.752 / 1.148;
// the b=32 forward 5.816 / 5.546 / 5.992 and 5.896 / 5.541 / 5.976 ms. Run 494 (H100, the 8B linears at M =
// 64 / 48, 1 / 3 / 4): 9.104 / 8.613 / 8.004 and 8.394 / 7.094 / 6.674 ms (bf16: 8.164, 8.169).
int g_q4_split32 = env_digit("TF_Q4_SPLIT32", 4, 4);
// MLX 4-bit prefill (kDequantMinM rows on) on linear_wgmma_mlx4 (on) or the bf16 linear on a dequantized copy
// (off); TF_Q4_PREFILL; same bits. Run 507 (H100, 8B MLX 4-bit prefill, the copy -> this): 1024 tokens 47.9
// -> 44.3 ms, 2048 80.9 -> 76.8, 4096 168.7 -> 168.9 (run 506: 512 30.1 -> 26.2).
bool g_q4_prefill = env_switch("TF_Q4_PREFILL", true);
// ... up to this many rows (TF_Q4_PREFILL_MAX_M; 0: no limit): at 4096 the two tie (the bf16 linear takes its
// TmaXW 128-byte-row tiles there and the copy's cost is spread over the rows); past it, unmeasured.
int g_q4_prefill_max_m = [] {
  const char* v = std::getenv("TF_Q4_PREFILL_MAX_M");
  return v ? std::atoi(v) : 4096;
}();
// q4_decode_kernel's x in shared memory: the call's rows up to this many bytes (opted in once; with the 8 KB
// of static shared memory (the double-buffered slice sums) two blocks still fit an SM; the occupancy is
// computed for this size).
constexpr int kXsMaxBytes = 96 << 10;
// TF_X_SMEM=0 (measurements): q4_decode_kernel keeps x in registers, a quad ahead, at one token too.
const bool g_x_smem = env_switch("TF_X_SMEM", true);  // launch.h
// x's rows in shared memory are kXsPad 16-byte units apart beyond their k values: a warp's 8 token rows (a
// chunk's 64 bytes each) then fall in alternate halves of the banks instead of all in the same 16 banks
// (k * 2 bytes is a multiple of 128). Run 116, same run: the linears of a decode step at M = 4 2.58 ->
// 2.27 ms, M = 8 2.49 -> 2.45 ms, M = 1 and 2 unchanged; 8B forward b=8 3.09 -> 3.04 ms.
constexpr int kXsPad = 4;
int64_t xs_bytes(int m, int64_t k) {
  return m * (k / 8 + kXsPad) * 16;
}
// q4_row2_kernel for one-row calls of more tiles than q4_decode_kernel's grid holds (TF_Q4_ROW2=0: off).
bool g_q4_row2 = env_switch("TF_Q4_ROW2", true);
// q4_decode_kernel's 32-row tiles for 33-127 rows too (see linear_quantized; TF_Q4_MID=0 for A/B).
const bool g_q4_mid = env_switch("TF_Q4_MID", true);
// Benches (set_q4_stamps): one-row x-in-shared-memory calls run q4_decode_kernel's stamps instance, which
// writes thread 0's globaltimer at kQ4Stamps points a block into a ring slot named by its QArgs::biases
// (which 4-bit weights with bf16 scales do not use). Run 394 had set the slot by a copy to a __device__
// pointer before each launch: that copy sat between the attention and the o linear and kept the o linear's
// blocks from launching early (PDL), so its stamps put the o linear's entry ~3 us after the attention's
// merge.
constexpr int kQ4StampSlots = 4, kQ4StampBlocks = 1024;
StampBuffer g_q4_stamps;  // kQ4StampSlots x kQ4StampBlocks x kQ4Stamps
int g_q4_stamp_launches = 0, g_q4_stamp_grid[kQ4StampSlots] = {};
constexpr int kDequantMinM = 128;  // from here on: dequantize to bf16 + the tiled bf16 linear
constexpr size_t kDequantMaxBytes = size_t(256) << 20;  // ... unless the transient bf16 copy exceeds this

// linear.cu's linear_kernel (PREFETCH variant) with packed weight loads. The next step's packed bytes
// are loaded before this step's dequantization and MMAs; neither changes the arithmetic.
template <int KIND, int B, int NT, int U>
__global__ void __launch_bounds__(kWarps * 32)
    qlinear_kernel(const __nv_bfloat16* x, QArgs q, const void* __restrict__ bias, int bias_kind,
                   void* __restrict__ y, bool y_f32, int m, int n, int k, int m_tiles) {
  __shared__ float red[kWarps][NT * 8][16];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int m_tile = blockIdx.x % m_tiles, n_tile = blockIdx.x / m_tiles;
  const int n0 = n_tile * 16, m0 = m_tile * NT * 8;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, c_end = (warp + 1) * chunks / kWarps;
  const int na = min(n0 + g, n - 1), nb = min(n0 + g + 8, n - 1);  // clamped; masked at the store

  const __nv_bfloat16* xr[NT];
  bool xok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    int row = m0 + 8 * j + g;
    xok[j] = row < m;
    xr[j] = x + int64_t(xok[j] ? row : 0) * k + 8 * t;
  }
  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

  auto step = [&](const uint4& a, const uint4& b, int c) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 xv = xok[j] ? ld_act16(xr[j] + c * 32) : make_uint4(0, 0, 0, 0);  // launch.h
      mma_chunk(acc[j], a, b, xv);
    }
  };
  const RowPtr pa = row_ptr<KIND, B>(q, na, t), pb = row_ptr<KIND, B>(q, nb, t);
  const int sh = q.chunk_shift;
  Raw ra[U], rb[U];
  auto load = [&](int at) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      ra[u] = load_raw<KIND, B>(pa, at + u, sh);
      rb[u] = load_raw<KIND, B>(pb, at + u, sh);
    }
  };
  int c = c_begin;
  if (c + U <= c_end) load(c);
  pdl_wait();  // weights are constant; x is not
  // NT = 1: the next step's x goes out with its packed weights (linear.cu's kXAhead: step() waited for each
  // chunk's x, one dependent L2 round trip a chunk).
  uint4 xs[U];
  auto load_xs = [&](int at) {
    if constexpr (NT == 1) {
#pragma unroll
      for (int u = 0; u < U; ++u) xs[u] = xok[0] ? ld_act16(xr[0] + (at + u) * 32) : make_uint4(0, 0, 0, 0);
    }
  };
  if (c + U <= c_end) load_xs(c);
  for (; c + U <= c_end; c += U) {
    Raw ca[U], cb[U];
    uint4 cx[U];
#pragma unroll
    for (int u = 0; u < U; ++u) ca[u] = ra[u], cb[u] = rb[u], cx[u] = xs[u];
    if (c + 2 * U <= c_end) load(c + U), load_xs(c + U);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if constexpr (NT == 1) {
        const uint4 a = dequant<KIND, B>(ca[u]), b = dequant<KIND, B>(cb[u]);
        mma_chunk(acc[0], a, b, cx[u]);
      } else {
        step(dequant<KIND, B>(ca[u]), dequant<KIND, B>(cb[u]), c + u);
      }
    }
  }
  for (; c < c_end; ++c)
    step(dequant<KIND, B>(load_raw<KIND, B>(pa, c, sh)), dequant<KIND, B>(load_raw<KIND, B>(pb, c, sh)), c);

    // acc[j]: c0 = (n0+g, token 8j+2t), c1 = (n0+g, 8j+2t+1), c2/c3 the same for n0+g+8.
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    red[warp][8 * j + 2 * t][g] = acc[j][0];
    red[warp][8 * j + 2 * t + 1][g] = acc[j][1];
    red[warp][8 * j + 2 * t][g + 8] = acc[j][2];
    red[warp][8 * j + 2 * t + 1][g + 8] = acc[j][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < NT * 8 * 16; i += kWarps * 32) {
    const int tok = i / 16, f = i % 16;
    const int row = m0 + tok, col = n0 + f;
    if (row >= m || col >= n) continue;
    float s = red[0][tok][f];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += red[w][tok][f];
    store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
  }
}

// Decode kernel for MLX 4-bit with bf16 scales, groups of 64 or more (M <= 16): qlinear_kernel's
// arithmetic for every tile (same slices, same chunk order, same dequant<> and MMAs, same slice sum), but
// a lane loads its 4 words of a quad of chunks with one 16-byte load per row (word_of) and the two
// scale|bias words of the quad with it, D quads ahead (D * 32 bytes of weights a lane in flight).
// Persistent: a block takes tiles blockIdx.x, + gridDim.x, ... and, when its quads per slice are a
// multiple of D, loads the next tile's first D quads while it computes this tile's last D, so the loads
// stay in flight through the slice sum and store. Chunks of a slice outside whole quads (slice ends off
// a multiple of 4, or at and past quad_chunks) are done one at a time, in order.
// XS (NT = 1: up to 8 tokens): the call's x rows are copied into shared memory once a block (xs_bytes: m
// rows of k * 2 bytes plus kXsPad units) and read from there, not held a quad ahead in registers: the kernel
// no longer spills (it had 80 bytes of stack at its 128-register cap) and waits on no x round trips (ncu, run
// 77: long-scoreboard stalls, DRAM 30% busy). The 4-bit 8B forward at b=1: 3.60 -> 2.43 ms (run 78). Same x
// values, same arithmetic.
// ST (benches, XS only): thread 0 of each block writes globaltimer at entry (0), past the wait (1), with x in
// shared memory (2) and past its last store (3) into q.biases[block * kQ4Stamps + i] (a u64 ring slot).
template <int KIND, int NT, int D, bool XS = false, bool ST = false>
__global__ void __launch_bounds__(kWarps * 32, 2)
    q4_decode_kernel(const __nv_bfloat16* x, QArgs q, const void* __restrict__ bias, int bias_kind,
                     void* __restrict__ y, bool y_f32, int m, int n, int k, int m_tiles) {
  static_assert(!XS || NT == 1, "x in shared memory: one token tile");
  static_assert(!ST || XS, "stamps: the x-in-shared-memory instance");
  unsigned long long* st = nullptr;
  if constexpr (ST) {
    auto* slot = static_cast<unsigned long long*>(const_cast<void*>(q.biases));
    st = slot && blockIdx.x < kQ4StampBlocks ? slot + int64_t(blockIdx.x) * kQ4Stamps : nullptr;
    if (st && threadIdx.x == 0)
      for (int i = 0; i < kQ4Stamps; ++i) st[i] = i == 0 ? gtime() : 0;
  }
  auto stamp = [&](int i) {
    if constexpr (ST)
      if (st && threadIdx.x == 0) st[i] = gtime();
  };
  // The slice sums of a tile, double-buffered by tile parity: tile i + 2 writes the buffer tile i read only
  // after tile i + 1's barrier, which every thread reaches after its reads of tile i, so one barrier a tile.
  __shared__ float red2[2][kWarps][NT * 8][16];
  extern __shared__ uint4 x_smem[];  // XS: x's m rows of k values
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = m_tiles * ((n + 15) / 16);
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, c_end = (warp + 1) * chunks / kWarps;
  const int sh = q.chunk_shift;  // >= 1: chunks 4i, 4i+1 share a group, and so do 4i+2, 4i+3
  // Whole quads inside the slice and below quad_chunks; none if there are none.
  int qb = (c_begin + 3) >> 2, qe = min(c_end, q.quad_chunks) >> 2;
  int head_end = 4 * qb, tail_begin = 4 * qe;
  if (qb >= qe) {
    qb = qe = 0;
    head_end = tail_begin = c_end;
  }
  const bool chain = (qe - qb) % D == 0;  // the ring of D quads lines up with the next tile's

  uint4 wa[D], wb[D];
  uint32_t sa[D][2], sb[D][2];
  // The rows' word offsets are formed per tile, the next tile's only when needed.
  using Rows = QuadRows;
  auto rows = [&](int ra, int rb) { return quad_rows(q, ra, rb, t); };
  const bool spair = quad_scale_pairs(q);
  auto load = [&](int i, const Rows& p, int qd) {
    load_quad(q, p, qd, sh, spair, wa[i], wb[i], sa[i], sb[i]);
  };
  auto first_quads = [&](int ra, int rb) {
    const Rows p = rows(ra, rb);
#pragma unroll
    for (int i = 0; i < D; ++i)
      if (qb + i < qe) load(i, p, qb + i);
  };
  auto row_a = [&](int tile) { return min(tile / m_tiles * 16 + g, n - 1); };  // clamped; masked at the store
  auto row_b = [&](int tile) { return min(tile / m_tiles * 16 + g + 8, n - 1); };

  int pa = row_a(blockIdx.x), pb = row_b(blockIdx.x);
  first_quads(pa, pb);
  pdl_wait();  // weights are constant; x is not
  stamp(1);
  // XS: lane g's token row (rows past m read row 0: their MMA column is never stored), in 16-byte units.
  const int x_stride = k / 8 + kXsPad;  // 16-byte units a row
  const int x_row = XS && g < m ? g * x_stride : 0;
  if constexpr (XS) {
    if (m == 1) {
      // One row (decode): by cp.async, the thread's 1-6 copies in flight at once, one round trip; the loop
      // below goes 4 loads then 4 stores, then one at a time: 2 round trips at k = 4096, 3 at 12288, on the
      // linear's critical path after pdl_wait. Run 263, same run: the 8B linears of a decode step at M = 1
      // 1.737 vs 1.786 ms, the 4-bit forward b=1 2.193 vs 2.223. At 2-8 rows cp.async lost (run 261: all at
      // once, M = 8 2.174 vs 2.117; run 262: in batches of 4 or 8 a thread, 2.31-2.39).
      for (int i = threadIdx.x; i < k / 8; i += kWarps * 32)
        cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(x_smem + i)), x + 8 * int64_t(i), true);
      cp_async_commit();
      cp_async_wait<0>();
    } else {
      for (int i = threadIdx.x; i < m * (k / 8); i += kWarps * 32)
        x_smem[i / (k / 8) * x_stride + i % (k / 8)] = ld_act16(x + 8 * int64_t(i));
    }
    __syncthreads();
    stamp(2);
  }

  for (int tile = blockIdx.x, parity = 0; tile < tiles; tile += gridDim.x, parity ^= 1) {
    float(&red)[kWarps][NT * 8][16] = red2[parity];
    const int m_tile = tile % m_tiles, n0 = tile / m_tiles * 16, m0 = m_tile * NT * 8;
    // Token rows past m read row 0's x: lane g's x only feeds MMA column g (token 8j+g), never stored.
    const __nv_bfloat16* xr[NT];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int row = m0 + 8 * j + g;
      xr[j] = x + int64_t(row < m ? row : 0) * k + 8 * t;
    }
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    auto step = [&](const uint4& a, const uint4& b, int c) {  // the chunk's x loads first
      uint4 xv[NT];
#pragma unroll
      for (int j = 0; j < NT; ++j) xv[j] = XS ? x_smem[x_row + 4 * c + t] : ld_act16(xr[j] + c * 32);
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_chunk(acc[j], a, b, xv[j]);
    };
    auto single = [&](int c) {
      step(dequant<KIND, 4>(load_raw<KIND, 4>(row_ptr<KIND, 4>(q, pa, t), c, sh)),
           dequant<KIND, 4>(load_raw<KIND, 4>(row_ptr<KIND, 4>(q, pb, t), c, sh)), c);
    };
    const int next = tile + gridDim.x;
    const int na = next < tiles ? row_a(next) : pa, nb = next < tiles ? row_b(next) : pb;
    const bool chained = chain && next < tiles;
    const Rows here = rows(pa, pb);

    for (int c = c_begin; c < head_end; ++c) single(c);
    // NT = 1: x of a quad's 4 chunks is loaded one quad ahead. step() loaded each chunk's x right before its
    // MMAs, one dependent L2 round trip a chunk, and a 4-bit chunk's weights are too few bytes to hide it.
    uint4 xq[4], xn[4];
    auto load_xq = [&](int quad, uint4* dst) {
#pragma unroll
      for (int e = 0; e < 4; ++e) dst[e] = ld_act16(xr[0] + (4 * quad + e) * 32);
    };
    constexpr bool kXAhead = NT == 1 && !XS;
    constexpr bool kXQuad = NT == 2 && !XS;
    if constexpr (kXAhead)
      if (qb < qe) load_xq(qb, xq);
    auto step_x = [&](const uint4& a, const uint4& b, int c, int e) {
      if constexpr (kXAhead) {
        mma_chunk(acc[0], a, b, xq[e]);
      } else {
        step(a, b, c);
      }
    };
    // Chunk e (0..3) of ring slot i dequantized: rows pa (a) and pb (b).
    auto deq = [&](int i, int e, uint4& a, uint4& b) {
      a = dequant<KIND, 4>(Raw{quad_word(wa[i], e), 0, sa[i][e >> 1], 0});
      b = dequant<KIND, 4>(Raw{quad_word(wb[i], e), 0, sb[i][e >> 1], 0});
    };
    // Slot i, holding quad qd + i, is consumed: it takes the quad D further on, this tile's or the next's.
    const Rows there = chained ? rows(na, nb) : here;
    auto reload = [&](int i, int qd) {
      const int r = qd + i + D;
      if (r < qe)
        load(i, here, r);
      else if (chained)
        load(i, there, r - qe + qb);
    };
    // The MMAs of chunk e of quad qd + i (x: shared memory (XS), a quad ahead in registers (kXAhead), the
    // quad's loaded first (kXQuad), or next to each chunk's MMAs).
    uint4 xv4[4][NT];
    auto mma_e = [&](int qd, int i, int e, const uint4& a, const uint4& b) {
      const int c = 4 * (qd + i) + e;
      if constexpr (kXQuad) {
#pragma unroll
        for (int j = 0; j < NT; ++j) mma_chunk(acc[j], a, b, xv4[e][j]);
      } else {
        step_x(a, b, c, e);
      }
    };
    auto slot_x = [&](int qd, int i) {  // before a slot's first MMA
      if constexpr (kXAhead)
        if (qd + i + 1 < qe) load_xq(qd + i + 1, xn);
      if constexpr (kXQuad) {
        // NT = 2: the quad's x (4 chunks x 2 token rows) is loaded before its first MMA, not chunk by chunk
        // right before each chunk's MMAs (one dependent L2 round trip a chunk). Same values, same MMAs in
        // the same order.
#pragma unroll
        for (int e = 0; e < 4; ++e)
#pragma unroll
          for (int j = 0; j < NT; ++j) xv4[e][j] = ld_act16(xr[j] + (4 * (qd + i) + e) * 32);
      }
    };
    auto slot_done = [&] {
      if constexpr (kXAhead) {
#pragma unroll
        for (int e = 0; e < 4; ++e) xq[e] = xn[e];
      }
    };
    int qd = qb;
    // Whole rings (up to 16 tokens): chunk e + 1 (or the next slot's chunk 0) is dequantized before chunk e's
    // MMAs, so its ALU work fills the MMA chain's latency, and no branch splits the ring (the scheduler sees
    // all of it). The same chunks, dequantized to the same values, into the same MMAs in the same order.
    // Run 173, same run: the 8B linears of a decode step at M = 1 1.884 -> 1.849 ms, M = 8 2.286 -> 2.204;
    // at 32-row tiles (NT = 4) the decode step lost 2.5% (b = 32 5.74 -> 5.89 ms): slot by slot there.
    for (; NT <= 2 && qd + D <= qe; qd += D) {
      uint4 a, b;
      deq(0, 0, a, b);
#pragma unroll
      for (int i = 0; i < D; ++i) {
        slot_x(qd, i);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uint4 an = a, bn = b;
          if (e < 3)
            deq(i, e + 1, an, bn);
          else if (i + 1 < D)
            deq(i + 1, 0, an, bn);
          if (e == 3) reload(i, qd);  // chunk 3 was dequantized at e = 2
          mma_e(qd, i, e, a, b);
          a = an, b = bn;
        }
        slot_done();
      }
    }
    // A last, partial ring (slices whose quads are not a multiple of D), or NT = 4: slot by slot.
    for (; qd < qe; qd += D) {
#pragma unroll
      for (int i = 0; i < D; ++i) {
        if (qd + i >= qe) break;
        slot_x(qd, i);
        uint4 a[4], b[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) deq(i, e, a[e], b[e]);
        reload(i, qd);
#pragma unroll
        for (int e = 0; e < 4; ++e) mma_e(qd, i, e, a[e], b[e]);
        slot_done();
      }
    }
    for (int c = tail_begin; c < c_end; ++c) single(c);

      // acc[j]: c0 = (n0+g, token 8j+2t), c1 = (n0+g, 8j+2t+1), c2/c3 the same for n0+g+8.
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      red[warp][8 * j + 2 * t][g] = acc[j][0];
      red[warp][8 * j + 2 * t + 1][g] = acc[j][1];
      red[warp][8 * j + 2 * t][g + 8] = acc[j][2];
      red[warp][8 * j + 2 * t + 1][g + 8] = acc[j][3];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < NT * 8 * 16; i += kWarps * 32) {
      const int tok = i / 16, f = i % 16;
      const int row = m0 + tok, col = n0 + f;
      if (row >= m || col >= n) continue;
      float s = red[0][tok][f];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) s += red[w][tok][f];
      store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
    }
    if (next >= tiles) break;
    pa = na, pb = nb;
    if (!chained) first_quads(pa, pb);
  }
  stamp(3);
}

// One row, one tile a block, two K slices a warp (q4_row2_kernel): q4_decode_kernel<KIND, 1, D, true>'s
// arithmetic for calls whose tiles need more than one round of its persistent grid (two 8-warp blocks an SM)
// -- the 30B-A3B qkv projection at one row: 320 tiles for 264 blocks, so 56 blocks computed a second tile
// after the first (run 394: the qkv's last stores 2.5 us after the median). Here a block of 4 warps computes
// one tile and warp w the K slices 2w and 2w + 1 (QS whole quads each: K = 128 QS * 8), so 4 blocks an SM
// (16 warps, as before) hold every tile at once. Each slice is the same chain as in q4_decode_kernel (its
// chunks in order from zero, the same words, scale words, dequant<> and mma_chunk), the two chains side by
// side; the slice sums in slice order. All of a warp's weight words are requested before the wait.
// Run 398 (30B-A3B MLX 4-bit b=1, same call): 2.058 / 2.060 ms against 2.085 / 2.073 on the persistent grid
// (-0.6..-1.3%; predicted -3.5%: the second round was not most of the qkv's time).
constexpr int kRow2Warps = 4;
constexpr int kRow2MaxBytes = 2048 * 2;  // x: K <= 2048
template <int KIND, int QS>
__global__ void __launch_bounds__(kRow2Warps * 32, 4)
    q4_row2_kernel(const __nv_bfloat16* x, QArgs q, const void* __restrict__ bias, int bias_kind,
                   void* __restrict__ y, bool y_f32, int n, int k) {
  __shared__ float red[kWarps][16];  // slice s's partials of the tile's 16 features (token 0)
  extern __shared__ uint4 x_smem[];  // the row's k values
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int n0 = blockIdx.x * 16;
  const QuadRows rows = quad_rows(q, min(n0 + g, n - 1), min(n0 + g + 8, n - 1), t);  // masked at the store
  const int sh = q.chunk_shift;                                                       // >= 1
  const bool spair = quad_scale_pairs(q);
  uint4 wa[2][QS], wb[2][QS];
  uint32_t sa[2][QS][2], sb[2][QS][2];
#pragma unroll
  for (int j = 0; j < 2; ++j)
#pragma unroll
    for (int i = 0; i < QS; ++i)
      load_quad(q, rows, QS * (2 * warp + j) + i, sh, spair, wa[j][i], wb[j][i], sa[j][i], sb[j][i]);
  pdl_wait();  // weights are constant; x is not
  for (int i = threadIdx.x; i < k / 8; i += kRow2Warps * 32)
    cp_async16(static_cast<uint32_t>(__cvta_generic_to_shared(x_smem + i)), x + 8 * int64_t(i), true);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  float acc[2][4] = {};
#pragma unroll
  for (int i = 0; i < QS; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int c = 4 * (QS * (2 * warp + j) + i) + e;
        mma_chunk(acc[j], dequant<KIND, 4>(Raw{quad_word(wa[j][i], e), 0, sa[j][i][e >> 1], 0}),
                  dequant<KIND, 4>(Raw{quad_word(wb[j][i], e), 0, sb[j][i][e >> 1], 0}), x_smem[4 * c + t]);
      }
  if (t == 0)
#pragma unroll
    for (int j = 0; j < 2; ++j) red[2 * warp + j][g] = acc[j][0], red[2 * warp + j][g + 8] = acc[j][2];
  __syncthreads();
  if (threadIdx.x < 16 && n0 + int(threadIdx.x) < n) {
    const int f = threadIdx.x;
    float s = red[0][f];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) s += red[w][f];
    store_biased(s, bias, bias_kind, y, y_f32, 0, n0 + f, n);
  }
}

// One thread per 8 values: the same loads and dequantization as the linear kernel.
template <int KIND, int B>
__global__ void dequant_kernel(QArgs q, __nv_bfloat16* __restrict__ out, int n, int k) {
  const int64_t per_row = k / 8, i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * per_row) return;
  const int row = int(i / per_row), k8 = int(i % per_row) * 8;
  *reinterpret_cast<uint4*>(out + int64_t(row) * k + k8) =
      dequant<KIND, B>(load_raw<KIND, B>(row_ptr<KIND, B>(q, row, (k8 % 32) / 8), k8 / 32, q.chunk_shift));
}

__global__ void random_bytes_kernel(uint8_t* p, size_t bytes, uint64_t seed, uint8_t mask) {
  const size_t i = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) * 8;
  if (i >= bytes) return;
  uint64_t z = seed + i * 0x9E3779B97F4A7C15ull;  // splitmix64
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  for (size_t j = 0; j < 8 && i + j < bytes; ++j) p[i + j] = uint8_t(z >> (8 * j)) & mask;
}

// Fills resident_blocks' cache for the 4-bit decode kernels at upload (not during a graph capture).
void prime_q4_grids() {
  auto prime = [](auto kd) {
    constexpr int K = decltype(kd)::value;
    for (const void* k : {reinterpret_cast<const void*>(q4_decode_kernel<K, 1, 1>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 1, 2>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 1, 4>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 2, 1>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 2, 2>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 2, 4>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 4, 1>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 4, 2>),
                          reinterpret_cast<const void*>(q4_decode_kernel<K, 4, 4>)})
      resident_blocks(k, kWarps * 32);
    resident_blocks(reinterpret_cast<const void*>(q4_decode_kernel<K, 1, 4, true>), kWarps * 32, kXsMaxBytes);
    resident_blocks(reinterpret_cast<const void*>(q4_row2_kernel<K, 1>), kRow2Warps * 32, kRow2MaxBytes);
    resident_blocks(reinterpret_cast<const void*>(q4_row2_kernel<K, 2>), kRow2Warps * 32, kRow2MaxBytes);
  };
  prime(std::integral_constant<int, kMlxBf16>{});
  prime(std::integral_constant<int, kMlxBf16Sub>{});
  prime_q4_pair_grids();
  prime_q4_wg_grids();
  prime_q4_ks_grids();
}

int kind_of(const LinearWeight& w) {
  if (w.format == LinearWeight::Format::Fp8Block) return kFp8;
  if (w.subnormal_codes) return kMlxBf16Sub;
  return w.scales.dtype() == DType::U32 ? kMlxBf16 : kMlxF32;
}

QArgs args_of(const LinearWeight& w) {
  TF_CHECK(w.weight.device() == Device::CUDA && w.scales.device() == Device::CUDA,
           "quantized linear: the weight is not on the GPU (use upload_linear)");
  QArgs q;
  q.w = static_cast<const uint8_t*>(w.weight.raw());
  q.scales = w.scales.raw();
  q.biases = w.biases.defined() ? w.biases.raw() : nullptr;
  q.row_bytes = w.format == LinearWeight::Format::Fp8Block ? w.in_features : w.in_features * w.bits / 8;
  q.groups = int(w.scales.dim(1));
  q.chunk_shift = chunk_shift(w);
  q.quad_chunks = int(w.in_features / 128 * 4);
  return q;
}

// Calls f(kind, bits) with both as compile-time constants.
template <typename F>
void dispatch(const LinearWeight& w, F&& f) {
  using std::integral_constant;
  const int kind = kind_of(w);
  auto widths = [&](auto kd) {
    switch (w.bits) {
      case 2:
        return f(kd, integral_constant<int, 2>{});
      case 3:
        return f(kd, integral_constant<int, 3>{});
      case 4:
        return f(kd, integral_constant<int, 4>{});
      case 5:
        return f(kd, integral_constant<int, 5>{});
      case 6:
        return f(kd, integral_constant<int, 6>{});
      case 8:
        return f(kd, integral_constant<int, 8>{});
      default:
        throw Error("quantized linear: no CUDA kernel for " + std::to_string(w.bits) + "-bit MLX");
    }
  };
  if (kind == kFp8) return f(integral_constant<int, kFp8>{}, integral_constant<int, 8>{});
  if (kind == kMlxBf16Sub) {
    TF_CHECK(w.bits == 4, "quantized linear: subnormal codes are 4-bit only");
    return f(integral_constant<int, kMlxBf16Sub>{}, integral_constant<int, 4>{});
  }
  if (kind == kMlxBf16) return widths(integral_constant<int, kMlxBf16>{});
  return widths(integral_constant<int, kMlxF32>{});
}

Tensor to_device(const Tensor& host, cudaStream_t s) {
  TF_CHECK(host.device() == Device::CPU && host.is_contiguous(), "upload: expects a contiguous CPU tensor");
  Tensor t = Tensor::empty(host.shape(), host.dtype(), Device::CUDA);
  TF_CUDA_CHECK(cudaMemcpyAsync(t.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice, s));
  TF_CUDA_CHECK(cudaStreamSynchronize(s));  // the host tensor may be freed after we return
  return t;
}

Tensor to_device_f32(const Tensor& host, cudaStream_t s) {
  if (host.dtype() == DType::F32) return to_device(host, s);
  std::vector<float> f = host.to_f32_vector();
  return to_device(Tensor::borrow(f.data(), host.shape(), DType::F32, Device::CPU), s);
}

// 4-bit rows [N, K/8] in the device layout: word 4c + t (chunk c, lane t) moved to word_of(c, t), and in
// each word value i of 8 moved to nibble nibble_of(i).
Tensor reorder_4bit(const Tensor& packed, int64_t in_features) {
  Tensor out = Tensor::empty(packed.shape(), DType::U32);
  const int64_t words = in_features / 8, chunks = in_features / 32, quad_chunks = in_features / 128 * 4;
  const uint32_t* in = packed.data<uint32_t>();
  uint32_t* o = out.data<uint32_t>();
  for (int64_t r = 0; r < packed.numel() / words; ++r)
    for (int64_t c = 0; c < chunks; ++c)
      for (int t = 0; t < 4; ++t) {
        const uint32_t w = in[r * words + 4 * c + t];
        uint32_t v = 0;
        for (int j = 0; j < 8; ++j) v |= ((w >> (4 * j)) & 15u) << (4 * nibble_of(j));
        o[r * words + word_of(c, t, quad_chunks)] = v;
      }
  return out;
}

// Scale|bias words (host) with each bf16 scale times 2^133, exactly: a normal scale's exponent field + 133
// (<= 254), a subnormal m * 2^-133 (or zero) becomes the integer m (a float's top half: exact below 256),
// same sign; the biases are kept. False, nothing changed, when a scale's exponent field is above 121 (|scale|
// >= 2^-5, inf, NaN: not a finite bf16 times 2^133).
bool prescale_words(uint32_t* w, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (((w[i] >> 7) & 0xFFu) > 121u) return false;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t lo = w[i] & 0xFFFFu;
    uint32_t out = lo + (133u << 7);
    if (!((lo >> 7) & 0xFFu)) {
      const float m = float(lo & 0x7Fu);
      uint32_t bits;
      std::memcpy(&bits, &m, sizeof bits);
      out = (lo & 0x8000u) | (bits >> 16);
    }
    w[i] = (w[i] & 0xFFFF0000u) | out;
  }
  return true;
}

// bf16 scales and biases as one U32 per group: scale in the low half, bias in the high half.
Tensor interleave_bf16(const Tensor& scales, const Tensor& biases) {
  TF_CHECK(scales.is_contiguous() && biases.is_contiguous(), "upload: scales/biases must be contiguous");
  Tensor out = Tensor::empty(scales.shape(), DType::U32);
  const uint16_t *sc = scales.data<uint16_t>(), *bi = biases.data<uint16_t>();
  for (int64_t i = 0; i < scales.numel(); ++i) out.data<uint32_t>()[i] = sc[i] | (uint32_t(bi[i]) << 16);
  return out;
}

}  // namespace

int chunk_shift(const LinearWeight& w) {
  if (w.scales.dim(1) == 1) return 30;
  for (int sh = 0; sh < 16; ++sh)
    if (w.group_size == 32 << sh) return sh;
  return -1;
}

namespace {

// The MLX 4-bit prefill path (linear_wgmma_mlx4) for a call of m rows of x (silu: x is the gate_up [m, 2k]
// and the input its silu_mul) where it takes it: 4-bit, bf16 scale words, within the row limits; false,
// launching nothing, otherwise.
bool mlx4_prefill(const void* x, const LinearWeight& w, Tensor& y, int64_t m, bool silu, cudaStream_t s) {
  if (!g_q4_prefill || m < kDequantMinM || (g_q4_prefill_max_m > 0 && m > g_q4_prefill_max_m) ||
      w.format != LinearWeight::Format::MlxAffine || w.bits != 4 || w.scales.dtype() != DType::U32 ||
      !y.is_contiguous() || y.numel() != m * w.out_features ||
      (y.dtype() != DType::BF16 && y.dtype() != DType::F32))
    return false;
  const int kind = kind_of(w);
  const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
  return (kind == kMlxBf16 || kind == kMlxBf16Sub) &&
         linear_wgmma_mlx4(x, w.weight.raw(), w.scales.raw(), chunk_shift(w), kind == kMlxBf16Sub,
                           has_bias ? w.bias.raw() : nullptr, has_bias ? w.bias.dtype() : DType::F32, y.raw(),
                           y.dtype(), int(m), int(w.out_features), int(w.in_features), s, silu);
}

}  // namespace

// TF_MLX_SUBNORMAL=0 (read once; set_mlx_subnormal_codes): uploads keep the plain scales (A/B, tests).
static bool g_subnormal_codes = env_switch("TF_MLX_SUBNORMAL", true);

bool prescale_mlx4(LinearWeight& w, cudaStream_t s) {
  if (!g_subnormal_codes || w.subnormal_codes || w.format != LinearWeight::Format::MlxAffine || w.bits != 4 ||
      !w.scales.defined() || w.scales.dtype() != DType::U32 || w.scales.device() != Device::CUDA)
    return false;
  // Benches' device-made weights: through the host, the upload's own transform.
  Tensor h = Tensor::empty(w.scales.shape(), DType::U32);
  TF_CUDA_CHECK(cudaMemcpyAsync(h.raw(), w.scales.raw(), h.nbytes(), cudaMemcpyDeviceToHost, s));
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  if (!prescale_words(h.data<uint32_t>(), h.numel())) return false;
  TF_CUDA_CHECK(cudaMemcpyAsync(w.scales.raw(), h.raw(), h.nbytes(), cudaMemcpyHostToDevice, s));
  TF_CUDA_CHECK(cudaStreamSynchronize(s));  // h is freed on return
  w.subnormal_codes = true;
  return true;
}

void set_mlx_subnormal_codes(bool on) {
  g_subnormal_codes = on;
}

bool upload_quantized_linear(const LinearWeight& host, LinearWeight& dev, cudaStream_t s) {
  const bool mlx = host.format == LinearWeight::Format::MlxAffine;
  if (!mlx && host.format != LinearWeight::Format::Fp8Block) return false;
  check_quantized_linear(host);
  if (host.in_features % 32 != 0 || chunk_shift(host) < 0 || host.in_features > (int64_t(1) << 30) ||
      host.out_features > (int64_t(1) << 30))
    return false;
  dev.format = host.format;
  dev.bits = host.bits, dev.group_size = host.group_size;
  dev.in_features = host.in_features, dev.out_features = host.out_features;
  if (mlx && host.bits == 4) {
    dev.weight = to_device(reorder_4bit(host.weight, host.in_features), s);
    if (host.scales.dtype() == DType::BF16) prime_q4_grids();  // outside any graph capture
  } else {
    dev.weight = to_device(host.weight, s);
  }
  if (mlx && host.scales.dtype() == DType::BF16) {
    // 4-bit: the scales stored times 2^133 where they all allow it (prescale_mlx4), on the host before the
    // one copy (no device pass and no sync a weight).
    Tensor words = interleave_bf16(host.scales, host.biases);
    dev.subnormal_codes =
        host.bits == 4 && g_subnormal_codes && prescale_words(words.data<uint32_t>(), words.numel());
    dev.scales = to_device(words, s);
    dev.biases = Tensor();
  } else {
    dev.scales = to_device_f32(host.scales, s);
    dev.biases = mlx ? to_device_f32(host.biases, s) : Tensor();
  }
  return true;
}

Tensor dequantize_bf16(const LinearWeight& w, cudaStream_t s) {
  const QArgs q = args_of(w);
  const int n = int(w.out_features), k = int(w.in_features);
  Tensor out = Tensor::empty({n, k}, DType::BF16, Device::CUDA);
  const int64_t threads = int64_t(n) * (k / 8);
  dispatch(w, [&](auto kd, auto bd) {
    constexpr int KIND = decltype(kd)::value, B = decltype(bd)::value;
    dequant_kernel<KIND, B>
        <<<unsigned((threads + 255) / 256), 256, 0, s>>>(q, static_cast<__nv_bfloat16*>(out.raw()), n, k);
    TF_CUDA_CHECK(cudaGetLastError());
  });
  return out;
}

void linear_quantized(const Tensor& x, const LinearWeight& w, Tensor& y, cudaStream_t s,
                      const Q4KsWorkspace* ks) {
  const int64_t n = w.out_features, k = w.in_features;
  TF_CHECK(x.dim(-1) == k && y.numel() == x.numel() / k * n,
           "linear: x " + x.describe() + " / y " + y.describe() + " do not match the quantized weight [" +
               std::to_string(n) + ", " + std::to_string(k) + "]");
  const int m = int(x.numel() / k);
  const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
  const void* bias = has_bias ? w.bias.raw() : nullptr;
  const int bias_kind = !has_bias ? 0 : w.bias.dtype() == DType::F32 ? 1 : 2;
  const bool y_f32 = y.dtype() == DType::F32;
  if (m == 0) return;
  // 17-64 rows of an MLX 4-bit weight in pieces (set_q4_split32): 16 rows off the front of a wide weight (the
  // 16-row kernels), 32 off the front of the down (q4_ks's 32-token instance) past 32 rows, the rest by the
  // same rules. Row-invariant kernels: the same bits.
  // (Groups of 64 or more with bf16 scales only: the 16-row and 32-token kernels' weights; smaller groups run
  // on qlinear_kernel, which a split would only make read the weight twice.)
  if (m > 16 && m <= 64 && g_q4_split32 && x.is_contiguous() && y.is_contiguous() &&
      w.format == LinearWeight::Format::MlxAffine && w.bits == 4 && w.group_size >= 64 &&
      w.scales.dtype() == DType::U32) {
    const int g = g_q4_split32;
    // (q4_wg's cluster instance takes 17-32 rows in one launch: then no piece up to 32 rows, and pieces of 32
    // past where they say so.)
    const bool wgc = q4_wg_takes_rows(m, int(n), int(k));
    int piece = 0;
    if (m <= 32)
      piece = !wgc && (g == 2 || n > 8192) ? 16 : 0;
    else if (g >= 3)
      piece = wgc ? 32 : n > 8192 ? 16 : g == 4 && k > 4096 ? 32 : 0;
    if (piece) {
      const Tensor x2 = x.view({m, k});
      Tensor y2 = y.view({m, n});
      Tensor y0 = y2.slice_rows(0, piece), y1 = y2.slice_rows(piece, m);
      linear_quantized(x2.slice_rows(0, piece), w, y0, s, ks);
      linear_quantized(x2.slice_rows(piece, m), w, y1, s, ks);
      return;
    }
  }
  // Prefill of an MLX 4-bit weight (bf16 scales, groups of 64 or 128, k % 128 == 0): the wgmma linear with
  // the weight dequantized in the CTA (linear_wgmma_mlx4: the bits of the path below, without its bf16 copy
  // of the weight). Where it does not apply, the path below.
  if (x.is_contiguous() && mlx4_prefill(x.raw(), w, y, m, false, s)) return;
  if (m >= kDequantMinM && size_t(n) * size_t(k) * 2 <= kDequantMaxBytes) {
    // Prefill: the tiled bf16 kernel on the dequantized weight (same bits as the fused kernel). The copy
    // goes back to the block cache at once; later users of that memory are ordered after us on the stream.
    Tensor wd = dequantize_bf16(w, s);
    return linear_bf16(x.raw(), wd.raw(), bias, has_bias ? w.bias.dtype() : DType::F32, y.raw(), y.dtype(), m,
                       int(n), int(k), s);
  }
  const QArgs q = args_of(w);
  const auto* xp = static_cast<const __nv_bfloat16*>(x.raw());
  dispatch(w, [&](auto kd, auto bd) {
    constexpr int KIND = decltype(kd)::value, B = decltype(bd)::value;
    // q4_decode_kernel takes the call (up to 32-row token tiles): MLX 4-bit with bf16 scales, groups of 64
    // or more (quad loads), word offsets below 2^32 (persistent grid).
    constexpr bool kQ4 = (KIND == kMlxBf16 || KIND == kMlxBf16Sub) && B == 4;
    const bool q4 = kQ4 && q.chunk_shift >= 1 && n * q.row_bytes / 4 < (int64_t(1) << 32);
    auto go = [&](auto nt) {
      constexpr int NT = decltype(nt)::value;
      const int m_tiles = (m + NT * 8 - 1) / (NT * 8), n_tiles = int((n + 15) / 16);
      // Token tiles vary fastest so that blocks sharing a weight tile run together (L2 reuse).
      // Decode: 8 chunks ahead for <= 4-bit (their chunks are small: keep >= 1 KB a warp in flight).
      const int ahead = g_loads_per_step ? g_loads_per_step : B <= 4 ? 8 : 4;
      auto kernel = qlinear_kernel<KIND, B, NT, 4>;
      if constexpr (NT <= 2)
        if (ahead >= 8) kernel = qlinear_kernel<KIND, B, NT, 8>;
      int grid = n_tiles * m_tiles;
      size_t smem = 0;      // dynamic shared memory: q4_decode_kernel's x (XS)
      int stamp_slot = -1;  // (benches: set_q4_stamps)
      QArgs qk = q;         // (benches: the stamps instance's ring slot in qk.biases)
      // Up to 16 rows on warpgroup MMAs where a mode takes the call: split by K slice (quant_ks.cu), else
      // whole tiles (quant_wg.cu).
      if constexpr (kQ4 && NT <= 2)
        if (q4 && !g_q4_stamps.get() &&
            (q4_ks_linear(KIND == kMlxBf16Sub, xp, q, bias, bias_kind, y.raw(), y_f32, m, int(n), int(k), ks,
                          s) ||
             q4_wg_linear(KIND == kMlxBf16Sub, xp, q, bias, bias_kind, y.raw(), y_f32, m, int(n), int(k), s)))
          return;
      if constexpr (kQ4 && NT == 4)  // 17-32 rows: split by K slice, else q4_wg's clusters; 32 rows a wgmma
        if (q4 && m <= 32 &&
            (q4_ks_linear(KIND == kMlxBf16Sub, xp, q, bias, bias_kind, y.raw(), y_f32, m, int(n), int(k), ks,
                          s) ||
             q4_wg_linear(KIND == kMlxBf16Sub, xp, q, bias, bias_kind, y.raw(), y_f32, m, int(n), int(k), s)))
          return;
      if constexpr (kQ4 && NT == 2)  // 9-16 rows: two 16-feature groups a warp (quant_pair.cu)
        if (q4 &&
            q4_pair_linear(KIND == kMlxBf16Sub, xp, q, bias, bias_kind, y.raw(), y_f32, m, int(n), int(k), s))
          return;
      if constexpr (kQ4 && NT <= 4)
        if (q4) {
          // Auto: 16 chunks ahead at M <= 8, 8 at M <= 16 (16 spills there: 128 registers, 2 blocks/SM)
          const int quads = g_loads_per_step ? g_loads_per_step / 4 : NT == 1 ? 4 : NT == 2 ? 2 : 1;
          kernel = quads == 1   ? q4_decode_kernel<KIND, NT, 1>
                   : quads == 2 ? q4_decode_kernel<KIND, NT, 2>
                                : q4_decode_kernel<KIND, NT, 4>;
          if constexpr (NT == 1)
            if (quads == 4 && g_x_smem && xs_bytes(m, k) <= kXsMaxBytes) {
              kernel = q4_decode_kernel<KIND, 1, 4, true>;
              smem = size_t(xs_bytes(m, k));
              if (g_q4_stamps.get() && m == 1) {  // (benches: the stamps instance, this launch's ring slot)
                kernel = q4_decode_kernel<KIND, 1, 4, true, true>;
                const int slot = g_q4_stamp_launches++ % kQ4StampSlots;
                qk.biases = g_q4_stamps.get() + size_t(slot) * kQ4StampBlocks * kQ4Stamps;
                stamp_slot = slot;
              }
            }
          grid = std::min(grid, resident_blocks(reinterpret_cast<const void*>(kernel), kWarps * 32,
                                                smem ? kXsMaxBytes : 0));
          if constexpr (NT == 1) {
            // One row whose tiles outnumber that grid: one tile a block, two slices a warp (q4_row2_kernel),
            // where K is 8 slices of 1 or 2 whole quads and every tile fits at once.
            const int qs = int(k / 1024);  // (m = 1: n_tiles is the tile count)
            if (g_q4_row2 && m == 1 && stamp_slot < 0 && smem && n_tiles > grid && k % 1024 == 0 &&
                (qs == 1 || qs == 2)) {
              auto* k2 = qs == 1 ? q4_row2_kernel<KIND, 1> : q4_row2_kernel<KIND, 2>;
              if (n_tiles <=
                  resident_blocks(reinterpret_cast<const void*>(k2), kRow2Warps * 32, kRow2MaxBytes)) {
                launch_pdl(k2, dim3(n_tiles), dim3(kRow2Warps * 32), size_t(k) * 2, s, xp, q, bias, bias_kind,
                           y.raw(), y_f32, int(n), int(k));
                return;
              }
            }
          }
          if (stamp_slot >= 0) g_q4_stamp_grid[stamp_slot] = std::min(grid, kQ4StampBlocks);
        }
      launch_pdl(kernel, dim3(grid), dim3(kWarps * 32), smem, s, xp, qk, bias, bias_kind, y.raw(), y_f32, m,
                 int(n), int(k), m_tiles);
    };
    // q4_decode_kernel's 32-row tiles up to kDequantMinM rows too (each weight tile's token tiles run
    // together, so the second and later read it from L2), not qlinear_kernel's 64-row tiles.
    const bool q4_mid = g_q4_mid && q4;
    if (m <= 8)
      go(std::integral_constant<int, 1>{});
    else if (m <= 16)
      go(std::integral_constant<int, 2>{});
    else if (m <= 32 || q4_mid)
      go(std::integral_constant<int, 4>{});
    else
      go(std::integral_constant<int, 8>{});
  });
}

void set_q4_row2(bool on) {
  g_q4_row2 = on;
}

bool linear_quantized_silu(const Tensor& gu, const LinearWeight& w, Tensor& y, cudaStream_t s) {
  const int64_t k = w.in_features, m = gu.dim(-1) == 2 * k ? gu.numel() / (2 * k) : 0;
  return gu.dtype() == DType::BF16 && gu.is_contiguous() && mlx4_prefill(gu.raw(), w, y, m, true, s);
}

void set_q4_prefill(bool on) {
  g_q4_prefill = on;
}

bool q4_prefill() {
  return g_q4_prefill;
}

void set_q4_split32(int mode) {
  TF_CHECK(
      mode >= 0 && mode <= 4,
      "set_q4_split32: 0 (off), 1 (widths > 8192), 2 (every width), 3 (1, and 33-64 rows in 16-row pieces) "
      "or 4 (3, and K > 4096 at 33-64 rows in 32-row pieces)");
  g_q4_split32 = mode;
}

int q4_split32_mode() {
  return g_q4_split32;
}

void set_q4_stamps(bool on) {
  g_q4_stamps.set(on, size_t(kQ4StampSlots) * kQ4StampBlocks * kQ4Stamps);
  g_q4_stamp_launches = 0;
}

std::vector<unsigned long long> q4_stamps(int back, int* blocks) {
  *blocks = 0;
  if (!g_q4_stamps.get() || back < 0 || back >= kQ4StampSlots || back >= g_q4_stamp_launches) return {};
  const int slot = (g_q4_stamp_launches - 1 - back) % kQ4StampSlots;
  *blocks = g_q4_stamp_grid[slot];
  return g_q4_stamps.read(size_t(slot) * kQ4StampBlocks * kQ4Stamps, size_t(*blocks) * kQ4Stamps);
}

void set_quant_loads_per_step(int chunks) {
  TF_CHECK(chunks == 0 || chunks == 4 || chunks == 8 || chunks == 16,
           "set_quant_loads_per_step: 0 (auto), 4, 8 or 16");
  g_loads_per_step = chunks;
}

void fill_random_bytes(void* p, size_t bytes, uint64_t seed, uint8_t mask, cudaStream_t s) {
  const size_t threads = (bytes + 7) / 8;
  random_bytes_kernel<<<unsigned((threads + 255) / 256), 256, 0, s>>>(static_cast<uint8_t*>(p), bytes, seed,
                                                                      mask);
  TF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tf::cuda

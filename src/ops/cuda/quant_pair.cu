// MLX 4-bit linears at 9-16 token rows with two 16-feature groups a warp (q4_pair_kernel): issue 11's
// batch-16 case. quant_linear.cu's q4_decode_kernel<KIND, 2, D> gives a warp one 16-feature tile and its
// K slice: two MMA chains (token rows 0-7 and 8-15) and the x loads of both rows for every chunk. ncu (runs
// 112, 351): at 16 rows the kernel issues ~0.4 instructions a cycle per scheduler and waits on long
// scoreboards; it executes ~1.4x the one-row kernel's instructions. Here a warp takes 32 features (two
// groups of 16) of its slice: each chunk's x loads feed four chains instead of two, so a warp has twice the
// independent MMAs and half the x loads a weight byte.
//
// Bits: the same as q4_decode_kernel (and so as the bf16 linear on the dequantized weight). A 16-feature
// group's MMAs are those of a 16-feature tile there (the same rows g and g + 8, the same words, scale words,
// dequant<>, mma_chunk, chunks in order from zero per K slice), the slices summed in warp order and stored
// by store_biased. Which warp or block computes a group does not enter the arithmetic.
//
// Measured (H200, runs 404-405, same call, the linears of an 8B decode step at M = 16): gate_up (24576 x
// 4096) 1.151-1.162 -> 0.966-0.968 ms, lm_head 0.192-0.198 -> 0.169-0.171, but q / o (4096 x 4096) 0.236
// -> 0.264-0.266 and down (4096 x 12288) 0.573-0.577 -> 0.753-0.781: at 128 tiles of 32 features a block
// an SM (8 warps) is too few warps, where 256 tiles of 16 gave two. So the default (mode 1) takes only calls
// whose 32-feature tiles fill the persistent grid: the step's linears 2.723-2.744 -> 2.538-2.554 ms (-7%),
// the 8B MLX 4-bit forward at b=16 3.599-3.627 -> 3.454-3.455 ms (-4.5%). x through a cp.async ring of 8
// chunks a warp in shared memory lost (run 405: gate_up 1.19 ms; x then comes from L2 for every tile,
// where L1 kept it across a block's tiles; bench/cuda/results/run405-lost-pair-x-ring.patch).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_linear.h"
#include "ops/cuda/quant_pair.h"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;          // K slices (as quant_linear.cu and linear.cu)
constexpr int kPairFeatures = 32;  // a tile: two 16-feature groups
constexpr int kRedStride = 36;     // slice-sum rows padded: lanes (g, t) store to banks g + 8t
// TF_Q4_PAIR=0 off, 1 where the tiles fill the grid, 2 always, 3 (default) as 1 and also where K and the
// width are both >= 4096: with q4_wg on the gate_up and q4_ks on the down it takes the qkv and o of an 8B
// step (run 455: 3.212 against 3.283 ms with mode 1, same call). Narrower calls (a 30B-A3B's qkv at K = 2048,
// its o at width 2048) were not measured with it and keep q4_decode_kernel.
int g_q4_pair = env_digit("TF_Q4_PAIR", 3, 3);

// Persistent over 32-feature tiles (blockIdx.x, + gridDim.x, ...). A warp holds D quads of both groups'
// rows in flight (lane t's 16 bytes of each of 4 rows, their scale words); when its quads a slice are a
// multiple of D it requests the next tile's first D quads while computing this tile's last D. x (rows
// past m read row 0: their MMA column is never stored) through L1, a chunk's two token rows next to its
// MMAs. SP: the quads' scale words by pairs (load_quad's spair: groups of 64, an even group count a row),
// fixed at compile time so that neither load path's instructions issue where the other is taken (the launch
// picks the instance; same words, same bits).
template <int KIND, int D, bool SP>
__global__ void __launch_bounds__(kWarps * 32, 2)
    q4_pair_kernel(const __nv_bfloat16* x, QArgs q, const void* __restrict__ bias, int bias_kind,
                   void* __restrict__ y, bool y_f32, int m, int n, int k) {
  // The slice sums, double-buffered by tile parity (one barrier a tile, as q4_decode_kernel).
  __shared__ float red2[2][kWarps][16][kRedStride];
  pdl_launch_dependents();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int tiles = (n + kPairFeatures - 1) / kPairFeatures;
  const int chunks = k / 32;
  const int c_begin = warp * chunks / kWarps, c_end = (warp + 1) * chunks / kWarps;
  const int sh = q.chunk_shift;
  int qb = (c_begin + 3) >> 2, qe = min(c_end, q.quad_chunks) >> 2;
  int head_end = 4 * qb, tail_begin = 4 * qe;
  if (qb >= qe) {
    qb = qe = 0;
    head_end = tail_begin = c_end;
  }
  const bool chain = (qe - qb) % D == 0;
  constexpr bool spair = SP;  // (the launch: quad_scale_pairs)

  uint4 wa[D][2], wb[D][2];  // [slot][group]: rows g, g + 8 of the group
  uint32_t sa[D][2][2], sb[D][2][2];
  auto row = [&](int tile, int grp, int half) {  // clamped; masked at the store
    return min(tile * kPairFeatures + 16 * grp + 8 * half + g, n - 1);
  };
  struct Rows2 {
    QuadRows p[2];
  };
  auto rows = [&](int tile) {
    return Rows2{{quad_rows(q, row(tile, 0, 0), row(tile, 0, 1), t),
                  quad_rows(q, row(tile, 1, 0), row(tile, 1, 1), t)}};
  };
  auto load = [&](int i, const Rows2& p, int qd) {
#pragma unroll
    for (int grp = 0; grp < 2; ++grp)
      load_quad(q, p.p[grp], qd, sh, spair, wa[i][grp], wb[i][grp], sa[i][grp], sb[i][grp]);
  };
  auto first_quads = [&](const Rows2& p) {
#pragma unroll
    for (int i = 0; i < D; ++i)
      if (qb + i < qe) load(i, p, qb + i);
  };

  int tile = blockIdx.x;
  Rows2 here = rows(tile);
  first_quads(here);
  pdl_wait();  // weights are constant; x is not
  // Token row 8j + g's x from chunk c on (formed where used: two pointers held across the kernel spilled).
  auto x_at = [&](int j, int c) { return x + int64_t(8 * j + g < m ? 8 * j + g : 0) * k + 8 * t + 32 * c; };
  auto load_x = [&](int c, uint4(&xv)[2]) {
#pragma unroll
    for (int j = 0; j < 2; ++j) xv[j] = ld_act16(x_at(j, c));
  };

  for (int parity = 0; tile < tiles; tile += gridDim.x, parity ^= 1) {
    float(&red)[kWarps][16][kRedStride] = red2[parity];
    float acc[2][2][4];  // [group][token rows 8j..8j+7]
#pragma unroll
    for (int grp = 0; grp < 2; ++grp)
#pragma unroll
      for (int j = 0; j < 2; ++j) acc[grp][j][0] = acc[grp][j][1] = acc[grp][j][2] = acc[grp][j][3] = 0.f;
    auto mmas = [&](const uint4(&a)[2], const uint4(&b)[2], const uint4(&xv)[2]) {
#pragma unroll
      for (int grp = 0; grp < 2; ++grp)
#pragma unroll
        for (int j = 0; j < 2; ++j) mma_chunk(acc[grp][j], a[grp], b[grp], xv[j]);
    };
    auto single = [&](int c) {  // a chunk outside whole quads, by load_raw (word_of)
      uint4 a[2], b[2], xv[2];
#pragma unroll
      for (int grp = 0; grp < 2; ++grp) {
        a[grp] = dequant<KIND, 4>(load_raw<KIND, 4>(row_ptr<KIND, 4>(q, row(tile, grp, 0), t), c, sh));
        b[grp] = dequant<KIND, 4>(load_raw<KIND, 4>(row_ptr<KIND, 4>(q, row(tile, grp, 1), t), c, sh));
      }
      load_x(c, xv);
      mmas(a, b, xv);
    };
    // Chunk e (0..3) of ring slot i dequantized, both groups.
    auto deq = [&](int i, int e, uint4(&a)[2], uint4(&b)[2]) {
#pragma unroll
      for (int grp = 0; grp < 2; ++grp) {
        a[grp] = dequant<KIND, 4>(Raw{quad_word(wa[i][grp], e), 0, sa[i][grp][e >> 1], 0});
        b[grp] = dequant<KIND, 4>(Raw{quad_word(wb[i][grp], e), 0, sb[i][grp][e >> 1], 0});
      }
    };
    const int next = tile + gridDim.x;
    const bool chained = chain && next < tiles;
    // Slot i, holding quad qd + i, is consumed: it takes the quad D further on, this tile's or the next's.
    auto reload = [&](int i, int qd) {
      const int r = qd + i + D;
      if (r < qe)
        load(i, here, r);
      else if (chained)
        load(i, rows(next), r - qe + qb);  // (formed here: kept across the tile, they spilled)
    };

    for (int c = c_begin; c < head_end; ++c) single(c);
    int qd = qb;
    // Whole rings. Unlike q4_decode_kernel, the next chunk is not dequantized (nor its x requested) before
    // this chunk's MMAs: four chains a warp fill the MMA latency, and the look-ahead's registers spill
    // (128 a thread for two blocks an SM). x of a ring's chunks from one pointer a token row, advanced a ring
    // at a time (the chunks' offsets immediates: formed chunk by chunk as 64-bit sums they cost ~10
    // instructions a chunk, SASS).
    const __nv_bfloat16* xq[2] = {x_at(0, 4 * qd), x_at(1, 4 * qd)};
    for (; qd + D <= qe; qd += D, xq[0] += 128 * D, xq[1] += 128 * D) {
#pragma unroll
      for (int i = 0; i < D; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uint4 a[2], b[2], xv[2];
#pragma unroll
          for (int j = 0; j < 2; ++j) xv[j] = ld_act16(xq[j] + (4 * i + e) * 32);
          deq(i, e, a, b);
          if (e == 3) reload(i, qd);  // the slot's last chunk is dequantized
          mmas(a, b, xv);
        }
    }
    // A last, partial ring (slices whose quads are not a multiple of D): slot by slot.
    for (; qd < qe; qd += D) {
#pragma unroll
      for (int i = 0; i < D; ++i) {
        if (qd + i >= qe) break;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          uint4 a[2], b[2], xv[2];
          deq(i, e, a, b);
          if (e == 3) reload(i, qd);
          load_x(4 * (qd + i) + e, xv);
          mmas(a, b, xv);
        }
      }
    }
    for (int c = tail_begin; c < c_end; ++c) single(c);

      // acc[grp][j]: c0 = (feature 16 grp + g, token 8j + 2t), c1 = (.., 8j + 2t + 1), c2/c3 feature + 8.
#pragma unroll
    for (int grp = 0; grp < 2; ++grp)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int f = 16 * grp + g, tok = 8 * j + 2 * t;
        red[warp][tok][f] = acc[grp][j][0];
        red[warp][tok + 1][f] = acc[grp][j][1];
        red[warp][tok][f + 8] = acc[grp][j][2];
        red[warp][tok + 1][f + 8] = acc[grp][j][3];
      }
    __syncthreads();
    for (int i = threadIdx.x; i < 16 * kPairFeatures; i += kWarps * 32) {
      const int tok = i / kPairFeatures, f = i % kPairFeatures;
      const int col = tile * kPairFeatures + f;
      if (tok >= m || col >= n) continue;
      float s = red[0][tok][f];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) s += red[w][tok][f];
      store_biased(s, bias, bias_kind, y, y_f32, tok, col, n);
    }
    if (next >= tiles) break;
    here = rows(next);
    if (!chained) first_quads(here);
  }
}

constexpr int kPairD = 2;  // quads in flight a warp (4 rows each)

using PairKernel = void (*)(const __nv_bfloat16*, QArgs, const void*, int, void*, bool, int, int, int);
PairKernel pair_kernel(bool subnormal, bool spair) {
  if (spair)
    return subnormal ? q4_pair_kernel<kMlxBf16Sub, kPairD, true> : q4_pair_kernel<kMlxBf16, kPairD, true>;
  return subnormal ? q4_pair_kernel<kMlxBf16Sub, kPairD, false> : q4_pair_kernel<kMlxBf16, kPairD, false>;
}

}  // namespace

bool q4_pair_linear(bool subnormal, const __nv_bfloat16* x, const QArgs& q, const void* bias, int bias_kind,
                    void* y, bool y_f32, int m, int n, int k, cudaStream_t s) {
  if (g_q4_pair == 0 || m < 9 || m > 16) return false;
  const PairKernel kernel = pair_kernel(subnormal, quad_scale_pairs(q));
  const int tiles = (n + kPairFeatures - 1) / kPairFeatures;
  const int grid = resident_blocks(reinterpret_cast<const void*>(kernel), kWarps * 32);
  if ((g_q4_pair == 1 || (g_q4_pair == 3 && (k < 4096 || n < 4096))) && tiles < grid) return false;
  launch_pdl(kernel, dim3(std::min(tiles, grid)), dim3(kWarps * 32), 0, s, x, q, bias, bias_kind, y, y_f32, m,
             n, k);
  return true;
}

void prime_q4_pair_grids() {
  for (bool subnormal : {false, true})
    for (bool spair : {false, true})
      resident_blocks(reinterpret_cast<const void*>(pair_kernel(subnormal, spair)), kWarps * 32);
}

void set_q4_pair(int mode) {
  TF_CHECK(mode >= 0 && mode <= 3,
           "set_q4_pair: 0 (off), 1 (where the tiles fill the grid), 2 (always) or 3 (as 1, and K, width >= "
           "4096)");
  g_q4_pair = mode;
}

int q4_pair_mode() {
  return g_q4_pair;
}

}  // namespace tf::cuda

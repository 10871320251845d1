#pragma once
// The grouped MoE GEMMs' tile code (moe_grouped.cu's grouped kernels, moe_decode.cu's one-kernel decode MoE):
// a block's two weight rows of one expert as the MMAs take them (bf16 or MLX 4/8-bit, dequantized by
// quant_common.cuh's code), the warps' K-slice partials into the slice-sum buffer, and the slice sums in warp
// order stored as bf16 (or as silu_mul of a gate/up pair). One definition, so that every path gives a slot
// the same bits.
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/activation.cuh"  // silu_mul_bf16
#include "ops/cuda/moe_kernels.h"   // MoeExperts
#include "ops/cuda/quant_common.cuh"

namespace tf::cuda::moe_tile {

constexpr int kWarps = 8;  // a block's warps: the K slices of a tile, summed in warp order

// A block's two weight rows (features na and nb of its tile's expert), lane t's part of each 32-wide K
// chunk: Frag is what one chunk's load gives, bf16() turns it into the 8 bf16 weights the MMAs take.
struct Bf16Rows {
  using Frag = uint4;
  static constexpr int kBits = 16;
  const __nv_bfloat16 *a, *b;
  __device__ __forceinline__ Bf16Rows(const MoeExperts& w, int e, int na, int nb, int k, int t) {
    const auto* base = static_cast<const __nv_bfloat16*>(w.weights[e]);
    a = base + int64_t(na) * k + 8 * t, b = base + int64_t(nb) * k + 8 * t;
  }
  // Chunks at .. at + count - 1 (count <= U) of both rows, all loads issued before any is used.
  template <int U>
  __device__ __forceinline__ void load(int at, int count, Frag (&fa)[U], Frag (&fb)[U]) const {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < count) fa[u] = load_stream(a + (at + u) * 32), fb[u] = load_stream(b + (at + u) * 32);
  }
  static __device__ __forceinline__ uint4 bf16(const Frag& f) {
    return f;
  }
};

// MLX affine B-bit rows with bf16 scales in quant_linear's device layout: quant_common.cuh's load_raw and
// dequant, the very code linear_quantized runs, so a weight value becomes the same bf16. KIND kMlxBf16Sub:
// 4-bit experts whose scales prescale_mlx4 stored times 2^133.
template <int B, int KIND = kMlxBf16>
struct MlxRows {
  using Frag = Raw;
  static constexpr int kBits = B;
  RowPtr a, b;
  int sh;
  __device__ __forceinline__ MlxRows(const MoeExperts& w, int e, int na, int nb, int, int t) {
    const QArgs q{static_cast<const uint8_t*>(w.weights[e]),
                  w.scales[e],
                  nullptr,
                  w.row_bytes,
                  w.groups,
                  w.chunk_shift,
                  w.quad_chunks};
    a = row_ptr<KIND, B>(q, na, t), b = row_ptr<KIND, B>(q, nb, t), sh = w.chunk_shift;
  }
  // As Bf16Rows::load. 4-bit: a lane's words of a whole quad of chunks (4c .. 4c + 3, below quad_chunks)
  // are 16 contiguous bytes (quant_linear.h's layout): one 16-byte load instead of four; the same words
  // and scales as load_raw's.
  template <int U>
  __device__ __forceinline__ void load(int at, int count, Frag (&fa)[U], Frag (&fb)[U]) const {
#pragma unroll
    for (int u = 0; u < U; u += 4) {
      const int c = at + u;
      if (B == 4 && U % 4 == 0 && u + 4 <= count && (c & 3) == 0 && c + 4 <= a.quad_chunks) {
        quad(a, c, fa + u), quad(b, c, fb + u);
        continue;
      }
#pragma unroll
      for (int i = 0; i < 4 && u + i < U; ++i)
        if (u + i < count)
          fa[u + i] = load_raw<KIND, B>(a, c + i, sh), fb[u + i] = load_raw<KIND, B>(b, c + i, sh);
    }
  }
  __device__ __forceinline__ void quad(const RowPtr& r, int c, Frag* f) const {
    const uint4 v = load_stream(reinterpret_cast<const uint32_t*>(r.w) + word_of(c, r.t, r.quad_chunks));
    // c % 4 == 0: with groups of 64 or more (sh >= 1) chunks c, c + 1 share a group and so do c + 2, c + 3:
    // two scale loads, not four (the same words, so dequant's scale/bias split is shared too).
    const unsigned s0 = __ldg(r.s + (c >> sh)), s2 = __ldg(r.s + ((c + 2) >> sh));
    const unsigned s1 = sh ? s0 : __ldg(r.s + c + 1), s3 = sh ? s2 : __ldg(r.s + c + 3);
    f[0] = Raw{v.x, 0, s0, 0}, f[1] = Raw{v.y, 0, s1, 0}, f[2] = Raw{v.z, 0, s2, 0},
    f[3] = Raw{v.w, 0, s3, 0};
  }
  static __device__ __forceinline__ uint4 bf16(const Frag& f) {
    return dequant<KIND, B>(f);
  }
};

// A warp's K-slice partials of token tile j (acc: features g and g + 8 of tokens 2t and 2t + 1, the MMA
// accumulator layout) into the block's slice-sum buffer.
template <int NT>
__device__ __forceinline__ void put_slice(float (*red)[NT * 8][16], int warp, int j, int g, int t,
                                          const float* acc) {
  red[warp][8 * j + 2 * t][g] = acc[0];
  red[warp][8 * j + 2 * t + 1][g] = acc[1];
  red[warp][8 * j + 2 * t][g + 8] = acc[2];
  red[warp][8 * j + 2 * t + 1][g + 8] = acc[3];
}

// After the barrier: each output of the tile (its tl.z tokens, features n0..n0+15) is the 8 slice partials
// summed in warp order, stored as bf16 at the token's slot.
template <int NT>
__device__ __forceinline__ void store_tile(const float (*red)[NT * 8][16], int4 tl, int n0, int n,
                                           __nv_bfloat16* y) {
  for (int i = threadIdx.x; i < NT * 8 * 16; i += kWarps * 32) {
    const int tok = i / 16, f = i % 16;
    const int col = n0 + f;
    if (tok >= tl.z || col >= n) continue;
    float s = red[0][tok][f];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) s += red[q][tok][f];
    y[int64_t(tl.y + tok) * n + col] = __float2bfloat16(s);
  }
}

// SILU (the routed gate_up, and the grouped one where moe_grouped_fuses_silu): a tile's 16 MMA rows are gate
// features n0 .. n0 + 7 and their up features inter + n0 .. (rows g and g + 8 of lane g), so each output is
// silu_mul of the two bf16 sums the unfused path stores and the silu_mul kernel reads back: silu_mul_bf16
// (activation.cuh) of those values. A feature's arithmetic does not depend on its MMA row (GPU tests
// RoutedDecodeEqualsTheGroupedPath, GroupedGateUpSiluEqualsTheSiluKernel).
__device__ __forceinline__ void store_tile_silu(const float (*red)[8][16], int4 tl, int n0, int inter,
                                                __nv_bfloat16* act) {
  for (int i = threadIdx.x; i < 8 * 8; i += kWarps * 32) {
    const int tok = i / 8, f = i % 8;
    const int col = n0 + f;
    if (tok >= tl.z || col >= inter) continue;
    float sg = red[0][tok][f], su = red[0][tok][f + 8];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) sg += red[q][tok][f], su += red[q][tok][f + 8];
    act[int64_t(tl.y + tok) * inter + col] =
        silu_mul_bf16(__bfloat162float(__float2bfloat16(sg)), __bfloat162float(__float2bfloat16(su)));
  }
}
}  // namespace tf::cuda::moe_tile

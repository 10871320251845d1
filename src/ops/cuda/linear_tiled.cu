// Large-M (prefill) linear: the same per-element arithmetic as linear.cu's decode kernel, with big CTA
// tiles staged through shared memory by a cp.async multistage pipeline.
//
// What must stay fixed for a row's bits to match decode (see linear.cu): the MMA instruction
// (m16n8k16, weights as the A operand, 8 tokens as B), the K permutation inside each 32-wide chunk
// (lane (g, t) feeds W[f][c*32 + 8t .. +8] and x[tok][c*32 + 8t .. +8] as its two MMAs' fragments), the
// 8 fixed K slices (slice s = chunks [s*C/8, (s+1)*C/8), a function of K alone), an in-order MMA chain
// per slice starting from 0, and the slice partials summed in slice order, then the bias. Here one warp
// walks all of K for its 64 features x 32 tokens: the MMA accumulator is the current slice's chain, and
// at each slice end it is folded into a running total (the first slice is assigned, not added, exactly
// like `s = red[0]`; an empty slice adds +0 like an empty warp does). Tiling over M and N never changes
// an element's chain.
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/mma.cuh"

namespace tf::cuda {
namespace {

constexpr int kTileF = 128, kTileT = 128;  // features (A rows) and tokens (B columns) per CTA
constexpr int kStageK = 64;                // two 32-wide chunks per pipeline stage
constexpr int kStages = 4;
constexpr int kThreads = 256;  // 8 warps: 2 along features (64 each) x 4 along tokens (32 each)
constexpr int kSlices = 8;     // must equal linear.cu's kWarps: the K slices are part of the arithmetic
constexpr int kOperandBytes = kTileF * kStageK * 2;  // 16 KB; kTileT == kTileF
constexpr int kSmemBytes = kStages * 2 * kOperandBytes;
static_assert(kTileF == kTileT, "both operands use one stage layout");

// A row of a stage is 128 bytes = 8 units of 16 bytes. Unit u of row r is stored at u ^ swz(r): the
// 8 lanes of each quarter warp read rows {2p, 2p+1} x units {4h .. 4h+3}, which land on 8 different
// units (no bank conflicts for the 16-byte loads).
__device__ __forceinline__ int smem_off(int row, int unit) {
  return row * 128 + ((unit ^ (((row & 1) << 2) | ((row >> 1) & 3))) << 4);
}

// One stage: rows [r0, r0 + 128) of src (row length k, `rows` valid), K columns [k0, k0 + 64). Rows past
// the end and the second chunk past K are zero-filled (and their chunk is never computed).
__device__ __forceinline__ void load_operand(uint32_t dst, const __nv_bfloat16* src, int r0, int rows, int k,
                                             int k0) {
#pragma unroll
  for (int i = 0; i < kTileF * 8 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads, row = idx / 8, unit = idx % 8;
    const bool ok = r0 + row < rows && k0 + unit * 8 < k;
    const __nv_bfloat16* p = ok ? src + int64_t(r0 + row) * k + k0 + unit * 8 : src;
    cp_async16(dst + smem_off(row, unit), p, ok);
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    linear_tiled_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                        const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                        int n, int k, int m_tiles) {
  extern __shared__ __align__(128) unsigned char smem[];
  pdl_launch_dependents();
  pdl_wait();  // x comes from the previous kernel
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int wf = warp % 2, wt = warp / 2;
  const int m0 = (blockIdx.x % m_tiles) * kTileT, n0 = (blockIdx.x / m_tiles) * kTileF;
  const int chunks = k / 32, ktiles = (chunks + 1) / 2;
  auto w_stage = [&](int b) { return sbase + b * 2 * kOperandBytes; };
  auto x_stage = [&](int b) { return sbase + b * 2 * kOperandBytes + kOperandBytes; };
  auto load_stage = [&](int b, int kt) {
    load_operand(w_stage(b), w, n0, n, k, kt * kStageK);
    load_operand(x_stage(b), x, m0, m, k, kt * kStageK);
  };

  float acc[4][4][4], tot[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f, tot[i][j][e] = 0.f;

  // Slice bookkeeping: `si` slices are folded; fold every slice that ends at `done` chunks.
  int si = 0;
  auto fold_ended = [&](int done) {
    while (si < kSlices && (si + 1) * chunks / kSlices == done) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            tot[i][j][e] = si == 0 ? acc[i][j][e] : tot[i][j][e] + acc[i][j][e];
            acc[i][j][e] = 0.f;
          }
      ++si;
    }
  };

  auto compute_chunk = [&](int b, int h) {
    uint4 fa[4], fb[4], xb[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = wf * 64 + i * 16 + g;
      fa[i] = lds128(w_stage(b) + smem_off(row, 4 * h + t));
      fb[i] = lds128(w_stage(b) + smem_off(row + 8, 4 * h + t));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) xb[j] = lds128(x_stage(b) + smem_off(wt * 32 + j * 8 + g, 4 * h + t));
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mma_bf16(acc[i][j], fa[i].x, fb[i].x, fa[i].y, fb[i].y, xb[j].x, xb[j].y);
        mma_bf16(acc[i][j], fa[i].z, fb[i].z, fa[i].w, fb[i].w, xb[j].z, xb[j].w);
      }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < ktiles) load_stage(s, s);
    asm volatile("cp.async.commit_group;");
  }
  fold_ended(0);  // slices that own no chunk (K < 256)
  for (int kt = 0; kt < ktiles; ++kt) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kStages - 2));
    __syncthreads();  // stage kt landed for every thread; stage kt-1 is consumed by every warp
    if (kt + kStages - 1 < ktiles) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    asm volatile("cp.async.commit_group;");
    const int b = kt % kStages;
    compute_chunk(b, 0);
    fold_ended(2 * kt + 1);
    if (2 * kt + 1 < chunks) {
      compute_chunk(b, 1);
      fold_ended(2 * kt + 2);
    }
  }
  asm volatile("cp.async.wait_group 0;");

  // tot[i][j]: e = 0/1 feature f, tokens tok/tok+1; e = 2/3 feature f + 8.
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + wf * 64 + i * 16 + g + (e >= 2 ? 8 : 0);
        const int row = m0 + wt * 32 + j * 8 + 2 * t + (e & 1);
        if (row >= m || col >= n) continue;
        float s = tot[i][j][e];
        store_biased(s, bias, bias_kind, y, y_f32, row, col, n);
      }
}

}  // namespace

void linear_tiled_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32,
                       int m, int n, int k, cudaStream_t s) {
  static const bool configured = [] {
    TF_CUDA_CHECK(
        cudaFuncSetAttribute(linear_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const int m_tiles = (m + kTileT - 1) / kTileT, n_tiles = (n + kTileF - 1) / kTileF;
  // Token tiles vary fastest: the CTAs that share a weight tile run together (L2 reuse of W).
  launch_pdl(linear_tiled_kernel, dim3(m_tiles * n_tiles), dim3(kThreads), kSmemBytes, s,
             static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias, bias_kind, y,
             y_f32, m, n, k, m_tiles);
}

}  // namespace tf::cuda

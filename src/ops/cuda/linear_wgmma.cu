// Prefill linear on wgmma (sm_90a warpgroup MMA), PROTOTYPE for issue #6: the per-element arithmetic of
// linear.cu / linear_tiled.cu (read their headers) on m64n128k16 instead of m16n8k16, valid only if one
// wgmma k16 step rounds exactly like one mma.sync step on the same 16 k-values (bench/cuda/
// wgmma_probe.cu tests that; if it fails this kernel cannot be bit-equal and is to be dropped).
//
// CTA: 128 weight rows (the M = 64 operand A, one 64-row half per warpgroup) x 128 tokens (operand B,
// N = 128, shared by both warpgroups), 2 warpgroups = 256 threads. K is staged 64 wide (two 32-chunks) in
// three shared-memory buffers; every thread loads a stage into registers with 16-byte loads two stages
// ahead and stores it (permuted, below) in the layout wgmma reads while the current stage's wgmmas run.
//
// The in-chunk permutation: mma.sync's step h (0/1) of chunk c gives fragment position (logical k) L the
// physical k c*32 + 8*(L%8/2) + 4h + 2*(L/8) + L%2 (lane (g, t) holds W[f][c*32 + 8t .. +8]; words 0/1
// feed step 0's a0/a2, words 2/3 step 1's). Here a 16-byte load of unit t (physical 8t .. 8t+7) holds 4
// words; word j goes to step h = j/2, K half kh = j%2, at logical L = 8kh + 2t: a 4-byte store into
// the core matrix (8 rows x 8 logical k) of that step. Both operands get the same mapping, so each
// wgmma step sees the 16 k-values of the matching mma.sync step at the same logical positions.
//
// Per element, as in linear_tiled.cu: the accumulator is the current slice's chain (started from +0
// with scale-d = 1, like mma.sync from a zeroed accumulator), folded into `tot` at each slice end
// (assigned for slice 0, added after), then the bias.
#include <cuda_bf16.h>

#include <string>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/linear_wgmma.h"

namespace tf::cuda {
namespace {

constexpr int kTile = 128;                            // weight rows and tokens per CTA
constexpr int kThreads = 256;                         // 2 warpgroups
constexpr int kSlices = 8;                            // linear.cu's kWarps: part of the arithmetic
constexpr int kStepBytes = kTile * 16 * 2;            // one k16 step of one operand: 128 rows x 16 bf16
constexpr int kOperandBytes = 4 * kStepBytes;         // a stage: 2 chunks x 2 steps
constexpr int kBufBytes = 2 * kOperandBytes;          // W then x
constexpr int kBuffers = 3;                           // stage kt computes, kt+1 is stored, kt-1 drains
constexpr int kSmemBytes = kBuffers * kBufBytes;      // 96 KB
constexpr int kLoads = 2 * kTile * 2 * 4 / kThreads;  // 16-byte loads a thread issues per stage (8)

// Byte offset of (row, logical k L) inside one k16 step's block: 8x8 core matrices of 128 bytes, the
// two K halves kKHalfBytes apart (descriptor LBO), 8-row groups kRowGroupBytes apart (SBO). The probe's
// layout check prints which descriptor order addresses this layout right (it expects this one).
constexpr uint32_t kKHalfBytes = 128, kRowGroupBytes = 256;
__device__ __forceinline__ uint32_t core_off(int row, int l) {
  return (row / 8) * kRowGroupBytes + (l / 8) * kKHalfBytes + (row % 8) * 16 + (l % 8) * 2;
}

// Load i of this thread: operand (0 = W, 1 = x), row in the tile, chunk in the stage, 16-byte unit t.
struct LoadSlot {
  int op, row, cc, t;
};
__device__ __forceinline__ LoadSlot slot(int i) {
  const int idx = threadIdx.x + i * kThreads;  // 0 .. 2047
  return {idx >> 10, (idx >> 2) & (kTile - 1), (idx >> 9) & 1, idx & 3};
}

__global__ void __launch_bounds__(kThreads, 1)
    linear_wgmma_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                        const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m,
                        int n, int k, int m_tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int m0 = (blockIdx.x % m_tiles) * kTile, n0 = (blockIdx.x / m_tiles) * kTile;
  const int chunks = k / 32, ktiles = (chunks + 1) / 2;

  uint4 pre[kLoads];
  auto load_stage = [&](int kt) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const LoadSlot s = slot(i);
      const int r0 = s.op == 0 ? n0 : m0, rows = s.op == 0 ? n : m, c = 2 * kt + s.cc;
      const __nv_bfloat16* src = s.op == 0 ? w : x;
      pre[i] = make_uint4(0, 0, 0, 0);
      if (r0 + s.row < rows && c < chunks)
        pre[i] = __ldg(reinterpret_cast<const uint4*>(src + int64_t(r0 + s.row) * k + c * 32 + 8 * s.t));
    }
  };
  auto store_stage = [&](int b) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const LoadSlot s = slot(i);
      const uint32_t base = sbase + b * kBufBytes + s.op * kOperandBytes + core_off(s.row, 2 * s.t);
      const uint32_t words[4] = {pre[i].x, pre[i].y, pre[i].z, pre[i].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {  // step h = j/2 of chunk cc, K half j%2
        const uint32_t addr = base + (2 * s.cc + j / 2) * kStepBytes + (j % 2) * kKHalfBytes;
        asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(words[j]) : "memory");
      }
    }
    fence_proxy_async();  // generic-proxy stores -> wgmma's async-proxy reads
  };

  float acc[64], tot[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) tot[i] = 0.f;

  load_stage(0);
  store_stage(0);
  if (ktiles > 1) load_stage(1);
  __syncthreads();
  // Slices are the outer loop so that the accumulators are only zeroed before a chain and read after
  // it (no branch in the chain's loop touches them, which would make the compiler copy registers that
  // wgmmas in flight still write). An empty slice (K < 256) folds +0 like an idle warp in linear.cu.
  int c = 0;
  for (int si = 0; si < kSlices; ++si) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    for (const int c_end = (si + 1) * chunks / kSlices; c < c_end; ++c) {
      const int kt = c / 2, cc = c % 2;
      const uint32_t buf = sbase + (kt % kBuffers) * kBufBytes;
      const uint32_t wbuf = buf + wg * (64 / 8) * kRowGroupBytes, xbuf = buf + kOperandBytes;
      wgmma_fence_operands<64>(acc);
      wgmma_fence();
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t q = (2 * cc + h) * kStepBytes;
        wgmma_m64n128(acc, wgmma_desc(wbuf + q, kKHalfBytes, kRowGroupBytes),
                      wgmma_desc(xbuf + q, kKHalfBytes, kRowGroupBytes), 1);
      }
      wgmma_fence_operands<64>(acc);
      if (cc == 1 || c + 1 == chunks) {  // stage kt is issued
        wgmma_commit();
        // While its MMAs run: stage kt+1 (in registers since the last stage) goes to its buffer, last
        // read by stage kt-2's MMAs, and stage kt+2's loads are issued.
        if (kt + 1 < ktiles) store_stage((kt + 1) % kBuffers);
        if (kt + 2 < ktiles) load_stage(kt + 2);
        wgmma_wait<1>();  // stage kt-1's MMAs are done: its buffer is the next stage's store target
        __syncthreads();
      }
    }
    wgmma_commit();  // the slice's chain is complete (an empty group if the stage end committed it)
    wgmma_wait<0>();
    wgmma_fence_operands<64>(acc);
#pragma unroll
    for (int i = 0; i < 64; ++i) tot[i] = si == 0 ? acc[i] : tot[i] + acc[i];
  }

  // acc element i: feature row 16*warp + g + 8*(e/2) of this warpgroup's 64, token 8*j + 2t + e%2.
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const int j = i / 4, e = i % 4;
    const int col = n0 + wg * 64 + 16 * warp + g + 8 * (e / 2), row = m0 + 8 * j + 2 * t + e % 2;
    if (row >= m || col >= n) continue;
    float s = tot[i];
    if (bias_kind == 1) s += static_cast<const float*>(bias)[col];
    if (bias_kind == 2) s += __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[col]);
    if (y_f32)
      static_cast<float*>(y)[int64_t(row) * n + col] = s;
    else
      static_cast<__nv_bfloat16*>(y)[int64_t(row) * n + col] = __float2bfloat16(s);
  }
}

}  // namespace

void linear_wgmma_bf16(const void* x, const void* w, const void* bias, DType bias_dtype, void* y,
                       DType y_dtype, int m, int n, int k, cudaStream_t s) {
  TF_CHECK(k % 32 == 0, "CUDA linear needs in_features divisible by 32, got " + std::to_string(k));
  static const bool configured = [] {
    TF_CUDA_CHECK(
        cudaFuncSetAttribute(linear_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  const int bias_kind = !bias ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const int m_tiles = (m + kTile - 1) / kTile, n_tiles = (n + kTile - 1) / kTile;
  // Token tiles vary fastest: the CTAs that share a weight tile run together (L2 reuse of W).
  linear_wgmma_kernel<<<m_tiles * n_tiles, kThreads, kSmemBytes, s>>>(
      static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(w), bias, bias_kind, y,
      y_dtype == DType::F32, m, n, k, m_tiles);
  TF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tf::cuda

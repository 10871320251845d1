// MLX 4-bit weight-only linear. One warp owns one output feature n; its 32 lanes take the row's packed
// words round-robin (lane l: words l, l+32, ...), so a warp reads the row's bytes once, coalesced, for a
// tile of up to kRows activation rows held in registers. Each packed word (8 values) is dequantized in
// registers — scale*q rounded, + bias rounded, in f32, as the CPU twin — and multiplied into every row of
// the tile in increasing k. The 32 lane partials are summed by a fixed xor butterfly. The arithmetic of an
// output element depends only on K and the lane mapping, never on M or on the other rows: row invariant.
// M > kRows loops over row tiles (weights are re-read per tile; a dequantize-to-bf16 + tensor-core path
// for large-M prefill is future work).
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant_linear.h"

namespace tf::cuda {
namespace {

constexpr int kRows = 8;  // activation rows per tile
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float bias_at(const void* bias, int kind, int n) {
  if (kind == 1) return static_cast<const float*>(bias)[n];
  if (kind == 2) return __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[n]);
  return 0.f;
}

template <int ROWS>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    mlx4_kernel(const __nv_bfloat16* __restrict__ x, const uint32_t* __restrict__ packed,
                const float* __restrict__ scales, const float* __restrict__ biases, int group,
                const void* __restrict__ bias, int bias_kind, void* __restrict__ y, bool y_f32, int m, int n,
                int k, int m0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = blockIdx.x * kWarpsPerBlock + warp;
  if (row >= n) return;
  const int words = k / 8, groups = k / group;
  const uint32_t* wr = packed + size_t(row) * words;
  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
  for (int wi = lane; wi < words; wi += 32) {
    const uint32_t q = __ldg(wr + wi);
    const int gi = (wi * 8) / group;
    const float s = __ldg(scales + size_t(row) * groups + gi), b = __ldg(biases + size_t(row) * groups + gi);
    float wv[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) wv[j] = __fadd_rn(__fmul_rn(s, float((q >> (4 * j)) & 15u)), b);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      if (m0 + r >= m) break;
      const uint4 raw = *reinterpret_cast<const uint4*>(x + size_t(m0 + r) * k + size_t(wi) * 8);
      const __nv_bfloat162* xv = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(xv[j]);
        acc[r] = __fmaf_rn(f.x, wv[2 * j], acc[r]);
        acc[r] = __fmaf_rn(f.y, wv[2 * j + 1], acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    float v = acc[r];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    if (lane == 0 && m0 + r < m) {
      v += bias_at(bias, bias_kind, row);
      const size_t o = size_t(m0 + r) * n + row;
      if (y_f32)
        static_cast<float*>(y)[o] = v;
      else
        static_cast<__nv_bfloat16*>(y)[o] = __float2bfloat16_rn(v);
    }
  }
}

}  // namespace

void linear_mlx4(const void* x, const uint32_t* packed, const float* scales, const float* biases, int group,
                 const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                 cudaStream_t s) {
  const int bias_kind = bias == nullptr ? 0 : bias_dtype == DType::F32 ? 1 : 2;
  const dim3 grid((n + kWarpsPerBlock - 1) / kWarpsPerBlock), block(kWarpsPerBlock * 32);
  for (int m0 = 0; m0 < m; m0 += kRows) {
    mlx4_kernel<kRows><<<grid, block, 0, s>>>(static_cast<const __nv_bfloat16*>(x), packed, scales, biases,
                                              group, bias, bias_kind, y, y_dtype == DType::F32, m, n, k, m0);
    TF_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace tf::cuda

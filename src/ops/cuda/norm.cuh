#pragma once
// RMS-norm arithmetic shared by the norm kernels (elementwise.cu) and the linear kernel that normalises its
// own input (linear.cu, linear_add_rms_norm_bf16): the same functions with explicit roundings, so that no
// FMA contraction can differ between the call sites and the fused bits equal the separate ops'.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"

namespace tf::cuda {

constexpr int kNormThreads = 256;  // threads a row for rows longer than 512 (add_rms_norm: every row)

// Element i of p as float, for the dtypes activations and norm weights come in: T known at compile time
// (ldt: no branch, so ptxas can batch the loads) or at run time (ld).
template <DType T>
__device__ __forceinline__ float ldt(const void* p, int64_t i) {
  if constexpr (T == DType::F32) return static_cast<const float*>(p)[i];
  if constexpr (T == DType::F16) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
__device__ __forceinline__ float ld(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::F32:
      return ldt<DType::F32>(p, i);
    case DType::F16:
      return ldt<DType::F16>(p, i);
    default:
      return ldt<DType::BF16>(p, i);
  }
}
__device__ __forceinline__ float bf(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}

// Sum over the TPR threads of a row: warp butterfly, then (TPR = 256) the 8 warp sums in order.
template <int TPR>
__device__ __forceinline__ float row_sum(float v, float* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if constexpr (TPR == 32) {
    return v;
  } else {
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) smem[warp] = v;
    __syncthreads();
    float s = smem[0];
#pragma unroll
    for (int w = 1; w < TPR / 32; ++w) s += smem[w];
    return s;
  }
}

__device__ __forceinline__ float norm_out(float v, float inv, float w_plus_offset) {
  return __fmul_rn(__fmul_rn(v, inv), w_plus_offset);
}
__device__ __forceinline__ float norm_inv(float sum_sq, int cols, float eps) {
  return rsqrtf(__fadd_rn(__fdiv_rn(sum_sq, float(cols)), eps));
}

// The residual's new value is rounded to its dtype first; the norm sees exactly what is stored.
__device__ __forceinline__ float round_to(float v, DType t) {
  return t == DType::F32 ? v : __bfloat162float(__float2bfloat16(v));
}
// add_rms_norm's new residual element: residual + x, rounded to the residual's dtype.
__device__ __forceinline__ float add_residual(const void* res, DType rt, const __nv_bfloat16* x, int64_t i) {
  return round_to(__fadd_rn(ld(res, i, rt), bf(x, i)), rt);
}

}  // namespace tf::cuda

#pragma once
// RMS-norm arithmetic shared by the norm kernels (elementwise.cu) and the linear kernel that normalises its
// own input (linear.cu, linear_add_rms_norm_bf16): the same functions with explicit roundings, so that no
// FMA contraction can differ between the call sites and the fused bits equal the separate ops'.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"
#include "ops/cuda/add_norm.h"
#include "ops/cuda/launch.h"  // ld_act16

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

// One row of add_rms_norm's output (add_rms_norm_kernel<32>'s bits; bf16 residual, cols a multiple of 8, at
// most 8 * blockDim.x and 8192) made inside a consumer kernel after its pdl_wait, into bf16 shared memory y,
// from x [cols] (the value added) and a.res [cols]; with write_res the block also stores the new residual to
// a.res_out. Every thread of the block calls it (block barriers); the first kNormThreads reduce the row as
// add_rms_norm does (element i at thread i % 256 in the order of i, the butterfly, the 8 warp sums in
// order: row_sum<kNormThreads>, the threads past it adding zeros). red: blockDim.x / 32 floats of shared
// memory. One round of loads: a thread takes one 8-element unit (res, x and
// the norm weights together), the new residual values meet in y, each reducing thread sums its elements
// there, and the unit is normalised from registers.
__device__ __forceinline__ void add_norm_row(const AddNormArgs& a, const __nv_bfloat16* x, int cols,
                                             __nv_bfloat16* y, bool write_res, float* red) {
  const int tid = threadIdx.x, e0 = tid * 8;
  const bool mine = e0 < cols;
  float wv[8];
  uint4 vv = make_uint4(0, 0, 0, 0);
  if (mine) {
    const uint4 rv = ld_act16(static_cast<const __nv_bfloat16*>(a.res) + e0), xv = ld_act16(x + e0);
#pragma unroll
    for (int e = 0; e < 8; ++e) wv[e] = __fadd_rn(ld(a.w, e0 + e, a.wt), a.offset);
    const auto* rb = reinterpret_cast<const __nv_bfloat16*>(&rv);
    const auto* xb = reinterpret_cast<const __nv_bfloat16*>(&xv);
    __nv_bfloat16 v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = __float2bfloat16(__fadd_rn(__bfloat162float(rb[e]), __bfloat162float(xb[e])));
    vv = *reinterpret_cast<const uint4*>(v);
    *reinterpret_cast<uint4*>(y + e0) = vv;
    if (write_res) *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(a.res_out) + e0) = vv;
  }
  __syncthreads();
  float ss = 0.f;
  if (tid < kNormThreads)
    for (int i = tid; i < cols; i += kNormThreads) {
      const float v = __bfloat162float(y[i]);
      ss = __fmaf_rn(v, v, ss);
    }
  const float inv = norm_inv(row_sum<kNormThreads>(ss, red), cols, a.eps);
  if (mine) {
    const auto* vb = reinterpret_cast<const __nv_bfloat16*>(&vv);
    __nv_bfloat16 o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = __float2bfloat16(norm_out(__bfloat162float(vb[e]), inv, wv[e]));
    *reinterpret_cast<uint4*>(y + e0) = *reinterpret_cast<const uint4*>(o);
  }
  __syncthreads();
}
}  // namespace tf::cuda

#pragma once
// Device arithmetic shared by kernels that must give identical bits: silu_mul (elementwise.cu) and the
// down projection that applies it to its input in registers (linear.cu, linear_silu_bf16). Explicit
// roundings, so that no FMA contraction can differ between the two call sites.
#include <cuda_bf16.h>

namespace tf::cuda {

// silu(g) * u in fp32: g / (1 + e^-g) * u, each step rounded to nearest.
__device__ __forceinline__ float silu_mul_f32(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.f, __expf(-g))), u);
}

// bf16(silu(g) * u): what silu_mul stores and the fused down projection multiplies by.
__device__ __forceinline__ __nv_bfloat16 silu_mul_bf16(float g, float u) {
  return __float2bfloat16(silu_mul_f32(g, u));
}

// The 8 bf16 silu_mul values of 16-byte units of gate and up values (8 each, elementwise).
__device__ __forceinline__ uint4 silu_mul_unit(uint4 gate, uint4 up) {
  const __nv_bfloat16* gb = reinterpret_cast<const __nv_bfloat16*>(&gate);
  const __nv_bfloat16* ub = reinterpret_cast<const __nv_bfloat16*>(&up);
  uint4 out;
  __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
  for (int e = 0; e < 8; ++e) ob[e] = silu_mul_bf16(__bfloat162float(gb[e]), __bfloat162float(ub[e]));
  return out;
}

}  // namespace tf::cuda

#pragma once
// q4_ks_kernel (quant_ks.cu): MLX 4-bit linears (bf16 scales, groups >= 64) at 9-16 token rows, split by K
// slice across CTAs so that each CTA holds only its slice of x in shared memory. Internal to the CUDA
// backend's quantized linears (quant_linear.cu); the backend owns the workspace (quant_linear.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/quant_common.cuh"
#include "ops/cuda/quant_linear.h"  // Q4KsWorkspace

namespace tf::cuda {

// Runs y = x · Wᵀ + bias when the mode (set_q4_ks) takes the call and ws has room, with q4_decode_kernel's
// bits; false (nothing launched) otherwise.
bool q4_ks_linear(bool subnormal, const __nv_bfloat16* x, const QArgs& q, const void* bias, int bias_kind,
                  void* y, bool y_f32, int m, int n, int k, const Q4KsWorkspace* ws, cudaStream_t s);
// Fills resident_blocks' cache (and the shared-memory opt-in) for the kernels (outside graph captures).
void prime_q4_ks_grids();

}  // namespace tf::cuda

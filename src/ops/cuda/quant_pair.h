#pragma once
// q4_pair_kernel (quant_pair.cu): MLX 4-bit linears (bf16 scales, groups >= 64) at 9-16 token rows with two
// 16-feature groups a warp. Internal to the CUDA backend's quantized linears (quant_linear.cu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/quant_common.cuh"

namespace tf::cuda {

// Runs y = x · Wᵀ + bias for m in 9..16 when the mode (set_q4_pair) takes the call, with
// q4_decode_kernel's bits; false (nothing launched) otherwise. `subnormal`: the weight's scales are stored
// times 2^133 (kMlxBf16Sub), else kMlxBf16.
bool q4_pair_linear(bool subnormal, const __nv_bfloat16* x, const QArgs& q, const void* bias, int bias_kind,
                    void* y, bool y_f32, int m, int n, int k, cudaStream_t s);
// Fills resident_blocks' cache for the kernel (outside graph captures).
void prime_q4_pair_grids();

}  // namespace tf::cuda

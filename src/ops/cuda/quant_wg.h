#pragma once
// q4_wg_kernel (quant_wg.cu): MLX 4-bit linears (bf16 scales, groups >= 64) at up to 16 token rows on
// Hopper warpgroup MMAs, the weights dequantized into wgmma's register operand A and x (all of it) in shared
// memory as operand B. Internal to the CUDA backend's quantized linears (quant_linear.cu).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "ops/cuda/quant_common.cuh"

namespace tf::cuda {

// Runs y = x · Wᵀ + bias when the mode (set_q4_wg) takes the call, with q4_decode_kernel's bits; false
// (nothing launched) otherwise. `subnormal`: the weight's scales are stored times 2^133 (kMlxBf16Sub).
bool q4_wg_linear(bool subnormal, const __nv_bfloat16* x, const QArgs& q, const void* bias, int bias_kind,
                  void* y, bool y_f32, int m, int n, int k, cudaStream_t s);
// Whether the cluster instance (set_q4_wgc) takes a call of m rows (17-32), n features, K = k in one launch,
// or (33-64 rows) want its 32-row pieces: the caller's pieces rule.
bool q4_wg_takes_rows(int m, int n, int k);
// Fills resident_blocks' cache (and the shared-memory opt-in) for the kernels (outside graph captures).
void prime_q4_wg_grids();

}  // namespace tf::cuda

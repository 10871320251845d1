#pragma once
// Weight-only MLX affine 4-bit linear on the GPU (quant_linear.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace tf::cuda {

// y[M,N] (bf16 or f32) = x[M,K] (bf16) · Wᵀ + bias, W dequantized in registers from MLX 4-bit packing:
// packed [N, K/8] uint32, scales and biases f32 [N, K/group]. Value = (scale*q) + bias rounded in f32 after
// the product and after the sum — the CPU reference's values exactly (ops/cpu/quant.h). K % group == 0,
// group % 8 == 0.
void linear_mlx4(const void* x, const uint32_t* packed, const float* scales, const float* biases, int group,
                 const void* bias, DType bias_dtype, void* y, DType y_dtype, int m, int n, int k,
                 cudaStream_t s);

}  // namespace tf::cuda

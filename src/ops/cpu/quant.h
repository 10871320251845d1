#pragma once
// Dequantization of quantized LinearWeights on the host, exactly as the formats' reference tools define
// it. Shared by the CPU backend's weight-only linear, by loaders (quantized embeddings) and by device
// backends that fall back to dense weights for formats without a kernel of their own.
//
// MLX affine: `weight` U32 [out, in*bits/32], values packed little-end-first along the input dimension as
//   one bit stream per row (3/5/6-bit values straddle word boundaries); `scales`, `biases` [out, in/group]
//   in F32/BF16/F16. mx.dequantize evaluates scale*q + bias in the scales' dtype, rounding after the
//   product and after the sum: dequantize() does exactly that (bit for bit, tested; used for embeddings,
//   as mlx's QuantizedEmbedding). mx.quantized_matmul with f32 inputs instead uses the weight unrounded in
//   f32 (measured: within 2e-5 of the f32 dequantization, 0.25 away from the bf16 one): dequantize_row(),
//   which the linears use, rounds in f32 (equal to mx.dequantize of f32-cast scales and biases, tested).
// FP8 (Format::Fp8Block, bits 8): `weight` F8_E4M3 [out, in], `scales` F32 [out, ceil(in/group)] — block,
//   per-channel and per-tensor scales are all normalised to this shape at load. Value = f32(e4m3) * scale
//   with one f32 rounding (the exact product rounded: equals a float64 reference rounded to f32).
#include <cstdint>

#include "ops/backend.h"

namespace tf {

// The i-th `bits`-bit value of an MLX packed row.
inline uint32_t mlx_unpack(const uint32_t* row, int bits, int64_t i) {
  const int64_t bit = i * bits;
  const int64_t word = bit >> 5;
  const int shift = int(bit & 31);
  uint64_t v = row[word] >> shift;
  if (shift + bits > 32) v |= uint64_t(row[word + 1]) << (32 - shift);
  return uint32_t(v) & ((1u << bits) - 1u);
}

// Throws tf::Error when the tensors of a quantized weight do not fit together.
void check_quantized_linear(const LinearWeight& w);
// Row `row` of the dequantized weight as f32, as the linears use it (MLX: arithmetic in f32).
void dequantize_row(const LinearWeight& w, int64_t row, float* out);
// The whole weight, dequantized as the format's tool does (MLX: mx.dequantize, in the scales' dtype), as a
// host tensor [out, in] of dtype F32, BF16 or F16 (asking for the scales' dtype or F32 loses nothing).
Tensor dequantize(const LinearWeight& w, DType dtype);
// The whole weight as the linears use it (dequantize_row for every row), F32 [out, in].
Tensor dequantize_linear(const LinearWeight& w);

}  // namespace tf

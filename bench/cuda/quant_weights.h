#pragma once
// Random linear weights of every bench format (weight_format.h), made on the GPU directly in the device
// layout the CUDA backend's upload_linear produces (quant_linear.h), so no host copy or upload: timing
// needs the bytes and the layout, not meaningful values. Used by tf_bench_quant and the shape benchmark.
#include <cstdint>

#include "ops/backend.h"
#include "weight_format.h"

namespace tf::bench {

// An [n, k] linear of format f: bf16 values uniform with unit-variance outputs for unit-variance inputs;
// quantized formats random packed values (finite) with random scales (and MLX biases).
LinearWeight rand_linear_weight(Backend& be, WeightFormat f, int64_t n, int64_t k, uint64_t seed);
// The device bytes a call of the linear reads: packed weight + scales + biases.
int64_t linear_weight_bytes(const LinearWeight& w);

}  // namespace tf::bench

#pragma once
// CUDA-only extras of the CUDA backend (the backend itself is reached through make_cuda_backend() in
// ops/backend.h). Benches and tests use these to share the backend's stream and to fill tensors on the
// device without a host round trip.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/backend.h"

namespace tf::cuda {

// The one stream every op of `b` runs on. Throws when `b` is not the CUDA backend.
cudaStream_t stream_of(Backend& b);
// Whether add_rms_norm_linear normalises inside the linear at M <= 8, and silu_mul_linear applies silu inside
// the down projection at M <= 16 (off = the two ops; the same bits either way). Both default off: on the
// H200 they were slower than the separate ops (docs/cuda-notes.md, run 16). For benches and tests.
void set_fused_norm_linear(bool on);
void set_fused_silu_linear(bool on);
// Fills a CUDA tensor (F32 or BF16) with uniform values in [lo, hi) from a counter-based hash of `seed`.
void fill_uniform(Backend& b, Tensor& t, uint64_t seed, float lo, float hi);

}  // namespace tf::cuda

#pragma once
// CUDA-only extras of the CUDA backend (the backend itself is reached through make_cuda_backend() in
// ops/backend.h). Benches and tests use these to share the backend's stream and to fill tensors on the
// device without a host round trip.
#include <cuda_runtime.h>

#include <cstddef>
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
// Whether one-row rounds of models with a prepared one-kernel decode step (decode_step.h) take it (default
// on; TF_DECODE_STEP=0 turns it off): the same bits either way. For benches and tests.
void set_decode_step(bool on);
// Models that prepared a one-kernel decode step, and forwards that took one (bind_decode_step said yes),
// since the process started. For tests.
int64_t decode_steps_prepared();
int64_t decode_step_rounds();
// How many captured forwards (Backend::run_graph) the backend keeps, least recently used dropped first
// (default 64). Drops every cached graph. For tests.
void set_graph_capacity(Backend& b, size_t n);
// A key is captured on its `uses`-th run_graph call, the calls before run eagerly (default
// kGraphCaptureAfterUses, ops/graph_cache.h; 1 = capture on first use). Forgets the counts. For tests.
void set_graph_capture_after(Backend& b, int uses);
// Sizes every attention launch for at least `n` chunks of kAttnChunk positions (0 = the call's own count):
// the same bits, as a captured launch sized for a chunk bucket gives. For tests.
void set_attention_min_chunks(int n);
// Makes the backend's q4_ks_kernel workspace (quant_linear.h) now if it has none: for benches whose MLX 4-bit
// weights are made on the device rather than by upload_linear (which makes it). Not during a graph capture.
void reserve_q4_ks_workspace(Backend& b);
// Fills a CUDA tensor (F32 or BF16) with uniform values in [lo, hi) from a counter-based hash of `seed`.
void fill_uniform(Backend& b, Tensor& t, uint64_t seed, float lo, float hi);

}  // namespace tf::cuda

#pragma once
// The CUDA backend's fused Backend::moe (moe_fused.cpp): dense bf16 experts (including formats that
// upload_linear turns into bf16) and MLX affine 4- and 8-bit experts kept packed with bf16 scales (the
// mlx-lm conversions); other packed experts (MLX 2/3/5/6-bit, f16/f32 scales, FP8) take the default
// host-routed path.
#include <cuda_runtime.h>

#include "ops/backend.h"

namespace tf::cuda {

// True when h and the experts fit the fused path: bf16 activations; each projection's experts (gate_up,
// down) all dense bf16, or all MLX 4-bit or all 8-bit with the same group size and bf16 scales, none
// with a bias; hidden and expert intermediate divisible by 32, at most 1024 experts, top_k at most 32.
// Never when the environment sets TF_MOE_FUSED=0 (read once per process) or after set_moe_fused(false).
bool moe_fusable(const Tensor& h, const MoeWeights& w);
// The same for bf16 activations of width `hidden` (Backend::moe_graph_safe).
bool moe_fusable(const MoeWeights& w, int64_t hidden);
// Tests and benches: false sends every later MoE call of the process down the host-routed path (as
// TF_MOE_FUSED=0 does), true lets the fused path back in. Not to be flipped while a forward runs.
void set_moe_fused(bool enabled);
// Benches only (timing; the values are unchanged): bit i of `mask` runs the fused path's kernel i twice
// (0 router linear, 1 routing + grouping, 2 gate_up GEMM, 3 silu_mul, 4 down GEMM, 5 combine, 6 the
// one-kernel decode MoE). Each kernel
// is idempotent, so the second run's cost is what one more dependent step of that kind costs the step.
void set_moe_repeat(unsigned mask);
// Tokens a grouped-GEMM tile holds for `pairs` (rows * top_k) over `experts`: 8 while experts get ~1 row.
int moe_tile_for(int pairs, int experts);
// out = Backend::moe(h) on the device, no host sync (after the first call per weight set).
void moe_fused(Backend& be, cudaStream_t s, const Tensor& h, MoeWeights& w, Tensor& out);
// Backend::add_rms_norm_moe where one kernel takes it (one decode row, moe_decode with the router inside,
// bf16 residual): out = moe(add_rms_norm(res + x)) with the new residual in res_out, h not written; x and
// out may be the same tensor. False, launching nothing, elsewhere. set_moe_add_norm(false)
// (TF_MOE_ADD_NORM=0): always false (A/B).
bool moe_fused_add_norm(Backend& be, cudaStream_t s, const Tensor& res, const Tensor& x, const Tensor& nw,
                        float eps, float offset, MoeWeights& w, Tensor& out, Tensor& res_out);
void set_moe_add_norm(bool on);
// Timing only (on by default; TF_MOE_EMPTY_AFTER=0 off): an empty 1-block dependent kernel after the
// one-kernel MoE of moe_fused_add_norm / moe_fused_o_add_norm. The benches' "+empty step" ablation had
// measured 0-3% faster steps since session 35; as a product switch (run 411) -0.8..-1.9% in the same call,
// -1.4..-2.8% in the product's forward. The mechanism is not known (docs/cuda-notes.md "Session 38").
void set_moe_empty_after(bool on);
// Backend::linear_add_rms_norm_moe where one kernel takes it: moe_fused_add_norm's call with the o projection
// inside too (moe_kernels.h's MoeOProj: x = linear(attn, o) written by the kernel itself, the same bits).
// False, launching nothing, elsewhere (set_moe_o_fold(false) among them).
bool moe_fused_o_add_norm(Backend& be, cudaStream_t s, const Tensor& attn, const LinearWeight& o,
                          const Tensor& res, Tensor& x, const Tensor& nw, float eps, float offset,
                          MoeWeights& w, Tensor& out, Tensor& res_out);

}  // namespace tf::cuda

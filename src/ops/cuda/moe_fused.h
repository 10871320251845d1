#pragma once
// The CUDA backend's fused Backend::moe (moe_fused.cpp): dense bf16 experts (including formats that
// upload_linear turns into bf16); experts kept packed (MLX 4-bit) take the default host-routed path.
#include <cuda_runtime.h>

#include "ops/backend.h"

namespace tf::cuda {

// True when h and the experts fit the fused path: bf16 activations and dense bf16 experts without
// biases, hidden and expert intermediate divisible by 32, at most 1024 experts, top_k at most 32; never
// when the environment sets TF_MOE_FUSED=0 (read once per process).
bool moe_fusable(const Tensor& h, const MoeWeights& w);
// Tokens a grouped-GEMM tile holds for `pairs` (rows * top_k) over `experts`: 8 while experts get ~1 row.
int moe_tile_for(int pairs, int experts);
// out = Backend::moe(h) on the device, no host sync (after the first call per weight set).
void moe_fused(Backend& be, cudaStream_t s, const Tensor& h, MoeWeights& w, Tensor& out);

}  // namespace tf::cuda

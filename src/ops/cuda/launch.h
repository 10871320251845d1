#pragma once
// Launch helpers shared by the CUDA kernels' sources (device-code translation units only).
#include <cuda_runtime.h>

#include <utility>

#include "ops/cuda/cuda_check.h"

namespace tf::cuda {

// Programmatic dependent launch (sm_90): a kernel launched this way may start while the previous
// kernel on the stream is finishing; it must execute `griddepcontrol.wait` before it reads anything the
// previous kernels wrote or writes anything they read. The linear kernels load weights (constant)
// before the wait, so their weight streaming overlaps the previous kernel's tail and the launch gap.
// Timing only: the arithmetic is the same with it on or off.
bool pdl_enabled();

template <typename... KArgs, typename... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr, cfg.numAttrs = pdl_enabled() ? 1 : 0;
  TF_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// Large-M linear (linear_tiled.cu): the decode kernel's per-element arithmetic in 128x128 CTA tiles.
// bias_kind: 0 none, 1 f32, 2 bf16.
void linear_tiled_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32,
                       int m, int n, int k, cudaStream_t s);
// Mid-M linear (linear_mid.cu, 17..512 rows by default): the decode kernel's per-element arithmetic with
// CTA tiles of 32..64 features x 32..128 tokens (MidTile in kernels.h) and a cp.async ring per warp. Same
// arguments.
void linear_mid_bf16(const void* x, const void* w, const void* bias, int bias_kind, void* y, bool y_f32, int m,
                     int n, int k, cudaStream_t s);
// The kernel linear_bf16 runs for m rows (set_linear_kernel, set_linear_mid_max_m in kernels.h).
enum class LinearKernel;
LinearKernel linear_kernel_for(int m);

}  // namespace tf::cuda

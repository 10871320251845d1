// Mixture-of-experts combine: one expert's output rows added, weighted, into the rows of the tokens
// that chose it. Each output element is one multiply-add in fp32 per call; callers order calls by expert
// id, so a token's sum has a fixed order whatever the other tokens chose.
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"

namespace tf::cuda {

namespace {

template <class T>
__device__ float load(const T* p, int64_t i);
template <>
__device__ float load(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ float load(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
__device__ void store(float* p, int64_t i, float v) {
  p[i] = v;
}
__device__ void store(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16(v);
}

template <class T>
__global__ void scatter_add_rows_kernel(T* out, const T* y, const int32_t* rows, const float* weights,
                                        int nrows, int64_t width) {
  const int r = blockIdx.y;
  if (r >= nrows) return;
  const int64_t dst = int64_t(rows[r]) * width, src = int64_t(r) * width;
  const float w = weights[r];
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < width;
       j += int64_t(gridDim.x) * blockDim.x)
    store(out, dst + j, load(out, dst + j) + w * load(y, src + j));
}

}  // namespace

void scatter_add_rows(void* out, const void* y, DType dtype, const int32_t* rows, const float* weights,
                      int nrows, int64_t width, cudaStream_t s) {
  if (nrows == 0 || width == 0) return;
  const dim3 grid(unsigned((width + 255) / 256 < 64 ? (width + 255) / 256 : 64), unsigned(nrows));
  if (dtype == DType::BF16)
    scatter_add_rows_kernel<<<grid, 256, 0, s>>>(
        static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(y), rows, weights, nrows, width);
  else
    scatter_add_rows_kernel<<<grid, 256, 0, s>>>(static_cast<float*>(out), static_cast<const float*>(y), rows,
                                                 weights, nrows, width);
  TF_CUDA_LAUNCH_CHECK();
}

}  // namespace tf::cuda

// Keyed sampling on the GPU (Backend::sample_rows): one block per logit row. Each thread scans ids
// tid, tid + 1024, ... keeping its best (score, id), then a fixed tree merges the threads' bests,
// lower id on exact ties. The score of an id is the same arithmetic as the host reference
// (core/keyed_random.h: float division by T, then double Gumbel noise), so the token does not depend on
// the launch shape, on other rows, or on whether the host or the device sampled it.
#include <cuda_runtime.h>

#include <cfloat>

#include "core/keyed_random.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/sampling.h"

namespace tf::cuda {
namespace {

constexpr int kThreads = 1024;

struct Best {
  double score;
  int32_t id;
};

__device__ inline bool better(const Best& a, const Best& b) {
  return a.score > b.score || (a.score == b.score && a.id < b.id);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* __restrict__ logits, int64_t vocab, const DeviceRowSampling* __restrict__ rows,
                  int32_t* __restrict__ out) {
  const int r = blockIdx.x;
  const float* row = logits + int64_t(r) * vocab;
  const DeviceRowSampling p = rows[r];
  Best best{-DBL_MAX, INT32_MAX};
  bool any = false;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    const double s = p.temperature <= 0.f
                         ? double(row[i])
                         : double(row[i] / p.temperature) + gumbel_noise(p.seed, p.position, int32_t(i));
    if (!any || s > best.score) {  // ids rise along the thread's walk: strict keeps the lowest on ties
      best = {s, int32_t(i)};
      any = true;
    }
  }
  __shared__ Best part[kThreads];
  part[threadIdx.x] = best;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w && better(part[threadIdx.x + w], part[threadIdx.x]))
      part[threadIdx.x] = part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[r] = part[0].id == INT32_MAX ? 0 : part[0].id;
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const DeviceRowSampling* rows, int n, int32_t* out,
                 cudaStream_t s) {
  if (n == 0) return;
  sample_kernel<<<n, kThreads, 0, s>>>(logits, vocab, rows, out);
  TF_CUDA_CHECK(cudaGetLastError());
}

}  // namespace tf::cuda

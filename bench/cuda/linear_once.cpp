// One linear shape through linear_bf16, a few launches, nothing else: a target for `ncu` (the profiler
// needs a program whose N-th launch of a kernel is the case to look at).
//   tf_linear_once M N K [auto|wgmma|mid|tiled|decode] [launches] [raw|tma|tmax (wgmma producer)]
// Prints the median time of the launches after the first (bench::time_ms).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_common.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"

int main(int argc, char** argv) {
  using namespace tf;
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s M N K [auto|wgmma|mid|tiled|decode] [launches] [raw|tma|tmax]\n",
                 argv[0]);
    return 2;
  }
  const int m = std::atoi(argv[1]), n = std::atoi(argv[2]), k = std::atoi(argv[3]);
  const char* which = argc > 4 ? argv[4] : "auto";
  const int launches = argc > 5 ? std::max(2, std::atoi(argv[5])) : 3;
  cuda::LinearKernel kind = cuda::LinearKernel::Auto;
  if (!std::strcmp(which, "wgmma")) kind = cuda::LinearKernel::Wgmma;
  if (!std::strcmp(which, "mid")) kind = cuda::LinearKernel::Mid;
  if (!std::strcmp(which, "tiled")) kind = cuda::LinearKernel::Tiled;
  if (!std::strcmp(which, "decode")) kind = cuda::LinearKernel::Decode;
  cuda::set_linear_kernel(kind);
  const char* producer = argc > 6 ? argv[6] : "auto";
  if (!std::strcmp(producer, "raw")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::Raw);
  if (!std::strcmp(producer, "tma")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::Tma);
  if (!std::strcmp(producer, "tmax")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::TmaX);
  cudaStream_t s;
  TF_CUDA_CHECK(cudaStreamCreate(&s));
  void *x, *w, *y;
  TF_CUDA_CHECK(cudaMalloc(&x, size_t(m) * k * 2));
  TF_CUDA_CHECK(cudaMalloc(&w, size_t(n) * k * 2));
  TF_CUDA_CHECK(cudaMalloc(&y, size_t(m) * n * 2));
  cuda::fill_uniform(x, DType::BF16, int64_t(m) * k, 1, -1.f, 1.f, s);
  cuda::fill_uniform(w, DType::BF16, int64_t(n) * k, 2, -0.05f, 0.05f, s);
  const double med = bench::time_ms(
      s, [&] { cuda::linear_bf16(x, w, nullptr, DType::F32, y, DType::BF16, m, n, k, s); }, 1, launches - 1);
  std::printf("linear M=%d N=%d K=%d (%s, %s): %.1f us, %.0f TFLOP/s\n", m, n, k, which, producer, med * 1e3,
              2.0 * m * n * k / (med * 1e-3) / 1e12);
  return 0;
}

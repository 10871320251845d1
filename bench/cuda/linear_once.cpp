// One linear shape through linear_bf16, a few launches, nothing else: a target for `ncu` (the profiler
// needs a program whose N-th launch of a kernel is the case to look at).
//   tf_linear_once M N K [auto|wgmma|mid|tiled|decode] [launches] [raw|tma|tmax|tmaxw (wgmma producer)]
//                  [wgmma tile, e.g. 128x192c2]
//   tf_linear_once M N K rs [launches] [auto|all|64x32s4|... (linear_rs.cu tile)]
// Prints the median time of the launches after the first (bench::time_ms) and of graph replays of one call
// (bench::time_graph_ms: no host launch cost, e.g. the tensor-map encoding of the TMA paths). `rs all` times
// every streaming tile (and Auto) on the shape and checks each output against Auto's bit for bit;
// TF_LINEAR_RS=1 with `auto` runs linear_bf16's dispatch with the streaming kernel switched on.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench_common.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"

namespace {

// The streaming kernel (linear_rs.cu) forced to one tile, or every tile in turn (`all`), each output
// compared with Auto's (same bits promised; a difference prints DIFFERS).
int run_rs(int m, int n, int k, int launches, const char* tile_arg) {
  using namespace tf;
  cudaStream_t s;
  TF_CUDA_CHECK(cudaStreamCreate(&s));
  void *x, *w, *y, *y0;
  TF_CUDA_CHECK(cudaMalloc(&x, size_t(m) * k * 2));
  TF_CUDA_CHECK(cudaMalloc(&w, size_t(n) * k * 2));
  TF_CUDA_CHECK(cudaMalloc(&y, size_t(m) * n * 2));
  TF_CUDA_CHECK(cudaMalloc(&y0, size_t(m) * n * 2));
  cuda::fill_uniform(x, DType::BF16, int64_t(m) * k, 1, -1.f, 1.f, s);
  cuda::fill_uniform(w, DType::BF16, int64_t(n) * k, 2, -0.05f, 0.05f, s);
  std::vector<cuda::RsTile> tiles;
  const bool all = !std::strcmp(tile_arg, "all");
  if (all || !std::strcmp(tile_arg, "auto")) tiles.push_back(cuda::RsTile::Auto);
  for (cuda::RsTile t : cuda::kRsTiles)
    if (all || !std::strcmp(tile_arg, cuda::rs_tile_name(t))) tiles.push_back(t);
  if (tiles.empty()) {
    std::fprintf(stderr, "unknown rs tile %s\n", tile_arg);
    return 2;
  }
  std::vector<unsigned char> h0(size_t(m) * n * 2), h(h0.size());
  for (size_t i = 0; i < tiles.size(); ++i) {
    cuda::set_linear_rs_tile(tiles[i]);
    void* out = i == 0 ? y0 : y;
    auto call = [&] { cuda::linear_rs_bf16(x, w, nullptr, DType::F32, out, DType::BF16, m, n, k, s); };
    const double med = bench::time_ms(s, call, 1, launches - 1), graph = bench::time_graph_ms(s, call);
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
    const char* verdict = "";
    if (i > 0) {
      TF_CUDA_CHECK(cudaMemcpy(h0.data(), y0, h0.size(), cudaMemcpyDeviceToHost));
      TF_CUDA_CHECK(cudaMemcpy(h.data(), y, h.size(), cudaMemcpyDeviceToHost));
      verdict = std::memcmp(h0.data(), h.data(), h.size()) == 0 ? " same bits" : " DIFFERS";
    }
    const cuda::RsTile shown = tiles[i] == cuda::RsTile::Auto ? cuda::linear_rs_auto_tile(m, n) : tiles[i];
    std::printf(
        "linear M=%d N=%d K=%d (rs %s%s): %.1f us (graph %.1f us, %.0f GB/s of weights), %.0f TFLOP/s%s\n", m,
        n, k, tiles[i] == cuda::RsTile::Auto ? "auto=" : "", cuda::rs_tile_name(shown), med * 1e3,
        graph * 1e3, 2.0 * n * k / (graph * 1e-3) / 1e9, 2.0 * m * n * k / (med * 1e-3) / 1e12, verdict);
  }
  cuda::set_linear_rs_tile(cuda::RsTile::Auto);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tf;
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s M N K [auto|wgmma|mid|tiled|decode] [launches] [raw|tma|tmax|tmaxw] [tile]\n"
                 "       %s M N K rs [launches] [auto|all|<tile>]\n",
                 argv[0], argv[0]);
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
  if (!std::strcmp(which, "rs")) return run_rs(m, n, k, launches, argc > 6 ? argv[6] : "auto");
  const char* producer = argc > 6 ? argv[6] : "auto";
  if (!std::strcmp(producer, "raw")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::Raw);
  if (!std::strcmp(producer, "tma")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::Tma);
  if (!std::strcmp(producer, "tmax")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::TmaX);
  if (!std::strcmp(producer, "tmaxw")) cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::TmaXW);
  // argv[7]: a wgmma tile by name (128x192, 128x192c2, ...); default Auto.
  if (argc > 7)
    for (int t = int(cuda::WgmmaTile::W64T64); t <= int(cuda::WgmmaTile::W128T64S2); ++t)
      if (!std::strcmp(argv[7], cuda::wgmma_tile_name(cuda::WgmmaTile(t))))
        cuda::set_linear_wgmma_tile(cuda::WgmmaTile(t));
  cudaStream_t s;
  TF_CUDA_CHECK(cudaStreamCreate(&s));
  void *x, *w, *y;
  TF_CUDA_CHECK(cudaMalloc(&x, size_t(m) * k * 2));
  TF_CUDA_CHECK(cudaMalloc(&w, size_t(n) * k * 2));
  TF_CUDA_CHECK(cudaMalloc(&y, size_t(m) * n * 2));
  cuda::fill_uniform(x, DType::BF16, int64_t(m) * k, 1, -1.f, 1.f, s);
  cuda::fill_uniform(w, DType::BF16, int64_t(n) * k, 2, -0.05f, 0.05f, s);
  auto call = [&] { cuda::linear_bf16(x, w, nullptr, DType::F32, y, DType::BF16, m, n, k, s); };
  const double med = bench::time_ms(s, call, 1, launches - 1), graph = bench::time_graph_ms(s, call);
  std::printf("linear M=%d N=%d K=%d (%s, %s): %.1f us (graph %.1f us, %.0f GB/s of weights), %.0f TFLOP/s\n",
              m, n, k, which, producer, med * 1e3, graph * 1e3, 2.0 * n * k / (graph * 1e-3) / 1e9,
              2.0 * m * n * k / (med * 1e-3) / 1e12);
  return 0;
}

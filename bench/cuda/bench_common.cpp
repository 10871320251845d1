#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"

namespace tf::bench {

double time_ms(cudaStream_t s, const std::function<void()>& fn, int warm, int reps) {
  for (int i = 0; i < warm; ++i) fn();
  cudaEvent_t a, b;
  TF_CUDA_CHECK(cudaEventCreate(&a));
  TF_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    TF_CUDA_CHECK(cudaEventRecord(a, s));
    fn();
    TF_CUDA_CHECK(cudaEventRecord(b, s));
    TF_CUDA_CHECK(cudaEventSynchronize(b));
    float ms;
    TF_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

namespace {
// fn() run once (workspaces grow outside the capture), then captured into a CUDA graph and instantiated;
// *ge null when the capture fails (the caller runs fn eagerly). Destroyed with the object.
struct CapturedGraph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  CapturedGraph(cudaStream_t s, const std::function<void()>& fn) {
    fn();
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
      try {
        fn();
      } catch (const std::exception&) {
      }
      if (cudaStreamEndCapture(s, &g) != cudaSuccess || !g || cudaGraphInstantiate(&ge, g, 0) != cudaSuccess)
        ge = nullptr;
    }
    cudaGetLastError();
  }
  ~CapturedGraph() {
    if (ge) cudaGraphExecDestroy(ge);
    if (g) cudaGraphDestroy(g);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
};
}  // namespace

double time_graph_ms(cudaStream_t s, const std::function<void()>& fn, bool* captured) {
  const CapturedGraph cg(s, fn);
  if (captured) *captured = cg.ge != nullptr;
  if (!cg.ge) return time_ms(s, fn);
  return time_ms(
      s, [&] { TF_CUDA_CHECK(cudaGraphLaunch(cg.ge, s)); }, 3, 11);
}

void warm_graph_for(cudaStream_t s, const std::function<void()>& fn, double seconds) {
  const CapturedGraph cg(s, fn);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    for (int i = 0; i < 16; ++i) {
      if (cg.ge)
        TF_CUDA_CHECK(cudaGraphLaunch(cg.ge, s));
      else
        fn();
    }
    TF_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

BatchMeta verify_meta(int batch, int k, int ctx) {
  constexpr int kBlock = kBenchBlock;
  BatchMeta m;
  m.block_size = kBlock;
  const int per = ctx / kBlock + 1;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> t(per);
    for (int i = 0; i < per; ++i) t[i] = b * per + i;
    for (int pos = ctx - 1 - k; pos < ctx; ++pos) {
      m.tokens.push_back((b * 7919 + pos) % 151936), m.positions.push_back(pos), m.row_seq.push_back(b);
      m.slots.push_back(t[pos / kBlock] * kBlock + pos % kBlock);
    }
    m.block_tables.push_back(std::move(t));
  }
  return m;
}

BatchMeta decode_meta(int batch, int ctx) {
  return verify_meta(batch, 0, ctx);
}

BatchMeta prefill_meta(int n) {
  constexpr int kBlock = kBenchBlock;
  BatchMeta m;
  m.block_size = kBlock;
  std::vector<int32_t> t(n / kBlock + 1);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(i);
  for (int p = 0; p < n; ++p) {
    m.tokens.push_back((p * 31 + 7) % 151936), m.positions.push_back(p), m.row_seq.push_back(0);
    m.slots.push_back(t[p / kBlock] * kBlock + p % kBlock);
  }
  m.block_tables.push_back(t);
  return m;
}

namespace {
bool not_zero(const char* env) {
  const char* v = std::getenv(env);
  return !(v && v[0] == '0');
}
}  // namespace

bool ks_cluster_benched() {
  return not_zero("TF_BENCH_KS_CLUSTER");
}
bool decode_teams_benched() {
  return not_zero("TF_BENCH_DECODE_TEAMS");
}

double copy_bandwidth_gbs(Backend& be, int warm, int reps) {
  cudaStream_t s = cuda::stream_of(be);
  const int64_t n = int64_t(1) << 30;  // 2 GiB of bf16 each side
  Tensor a = be.alloc({n}, DType::BF16), b = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, a, 1, -1, 1);
  const double ms = time_ms(
      s, [&] { TF_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), n * 2, cudaMemcpyDeviceToDevice, s)); }, warm,
      reps);
  return 2.0 * n * 2 / (ms * 1e-3) / 1e9;
}

std::unique_ptr<Backend> shape_bench_backend(int device, const std::string& program) {
  std::string why;
  auto be = make_cuda_backend(device, &why);
  if (!be)
    std::fprintf(stderr, "%s: the shape benchmark needs the CUDA backend: %s\n", program.c_str(),
                 why.c_str());
  return be;
}

}  // namespace tf::bench

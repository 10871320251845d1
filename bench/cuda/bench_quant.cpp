// tf_bench_quant: the linears of one Qwen3-8B decode step (36 layers x q, k, v, o, gate_up, down, plus
// lm_head) with random weights made on the GPU, in bf16, MLX affine 4-bit/g64, MLX 8-bit/g64 and FP8
// e4m3 with 128x128 block scales, at M = 1 and 16 tokens. Each step is replayed from a CUDA graph. Prints
// tokens/s, the ratio to bf16, and GB/s against the device-to-device copy bandwidth measured in the same
// run, counted on each format's own bytes (packed weights + scales + biases).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/quant_linear.h"

namespace tf {
namespace {

constexpr int kLayers = 36, kHidden = 4096, kInter = 12288, kKv = 1024, kVocab = 151936;

// Median of `reps` timings (ms) of fn(), after `warm` untimed calls.
double time_ms(cudaStream_t s, const std::function<void()>& fn, int warm = 3, int reps = 11) {
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

// fn() captured once into a CUDA graph and timed by replays (eager timing if capture fails).
double time_graph_ms(cudaStream_t s, const std::function<void()>& fn) {
  fn();  // warm: workspaces grow outside the capture
  TF_CUDA_CHECK(cudaStreamSynchronize(s));
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  bool captured = false;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    try {
      fn();
    } catch (const std::exception&) {
    }
    captured =
        cudaStreamEndCapture(s, &g) == cudaSuccess && g && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
  }
  cudaGetLastError();
  if (!captured) {
    std::printf("  (graph capture failed: eager timing)\n");
    return time_ms(s, fn);
  }
  const double ms = time_ms(s, [&] { TF_CUDA_CHECK(cudaGraphLaunch(ge, s)); });
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms;
}

enum class Fmt { Bf16, Mlx4, Mlx8, Fp8 };
const char* fmt_name(Fmt f) {
  switch (f) {
    case Fmt::Bf16:
      return "bf16";
    case Fmt::Mlx4:
      return "mlx 4-bit g64";
    case Fmt::Mlx8:
      return "mlx 8-bit g64";
    default:
      return "fp8 block 128";
  }
}

// A random [n, k] weight of format f, its device bytes added to *bytes.
LinearWeight make_weight(Backend& be, Fmt f, int64_t n, int64_t k, uint64_t seed, int64_t* bytes) {
  cudaStream_t s = cuda::stream_of(be);
  LinearWeight w;
  w.in_features = k, w.out_features = n;
  const float a = std::sqrt(3.f / float(k));
  if (f == Fmt::Bf16) {
    w.weight = be.alloc({n, k}, DType::BF16);
    cuda::fill_uniform(be, w.weight, seed, -a, a);
  } else if (f == Fmt::Fp8) {
    w.format = LinearWeight::Format::Fp8Block;
    w.bits = 8, w.group_size = 128;
    w.weight = be.alloc({n, k}, DType::F8_E4M3);
    cuda::fill_random_bytes(w.weight.raw(), w.weight.nbytes(), seed, 0xBF, s);  // no NaN bytes
    w.scales = be.alloc({n, k / 128}, DType::F32);
    cuda::fill_uniform(be, w.scales, seed + 1, 0.5f * a, a);
  } else {
    const int bits = f == Fmt::Mlx4 ? 4 : 8;
    w.format = LinearWeight::Format::MlxAffine;
    w.bits = bits, w.group_size = 64;
    w.weight = be.alloc({n, k * bits / 32}, DType::U32);
    cuda::fill_random_bytes(w.weight.raw(), w.weight.nbytes(), seed, 0xFF, s);
    // The device layout of bf16 scales and biases (quant_linear.h): one U32 per group, bf16 scale | bf16
    // bias << 16. Random bytes masked with 0x3F are finite bf16 values in [0, 2): fine for timing.
    w.scales = be.alloc({n, k / 64}, DType::U32);
    cuda::fill_random_bytes(w.scales.raw(), w.scales.nbytes(), seed + 1, 0x3F, s);
  }
  for (const Tensor* t : {&w.weight, &w.scales, &w.biases})
    if (t->defined()) *bytes += int64_t(t->nbytes());
  return w;
}

struct Layer {
  LinearWeight q, k, v, o, gate_up, down;
};

struct Weights {
  std::vector<Layer> layers;
  LinearWeight lm_head;
  int64_t bytes = 0;
};

Weights make_weights(Backend& be, Fmt f) {
  Weights w;
  uint64_t seed = 1000;
  for (int l = 0; l < kLayers; ++l) {
    Layer L;
    L.q = make_weight(be, f, kHidden, kHidden, seed += 10, &w.bytes);
    L.k = make_weight(be, f, kKv, kHidden, seed += 10, &w.bytes);
    L.v = make_weight(be, f, kKv, kHidden, seed += 10, &w.bytes);
    L.o = make_weight(be, f, kHidden, kHidden, seed += 10, &w.bytes);
    L.gate_up = make_weight(be, f, 2 * kInter, kHidden, seed += 10, &w.bytes);
    L.down = make_weight(be, f, kHidden, kInter, seed += 10, &w.bytes);
    w.layers.push_back(std::move(L));
  }
  w.lm_head = make_weight(be, f, kVocab, kHidden, seed += 10, &w.bytes);
  return w;
}

struct Buffers {
  Tensor xh, xi, yq, ykv, yh, ygu, logits;
};

Buffers make_buffers(Backend& be, int m) {
  Buffers b;
  b.xh = be.alloc({m, kHidden}, DType::BF16);
  b.xi = be.alloc({m, kInter}, DType::BF16);
  cuda::fill_uniform(be, b.xh, 7, -1, 1);
  cuda::fill_uniform(be, b.xi, 8, -1, 1);
  b.yq = be.alloc({m, kHidden}, DType::BF16);
  b.ykv = be.alloc({m, kKv}, DType::BF16);
  b.yh = be.alloc({m, kHidden}, DType::BF16);
  b.ygu = be.alloc({m, 2 * kInter}, DType::BF16);
  b.logits = be.alloc({m, kVocab}, DType::F32);
  return b;
}

// Every linear of one decode step (inputs are fixed buffers: the weights' reads are what is timed).
void step(Backend& be, const Weights& w, Buffers& b) {
  for (const Layer& L : w.layers) {
    be.linear(b.xh, L.q, b.yq);
    be.linear(b.xh, L.k, b.ykv);
    be.linear(b.xh, L.v, b.ykv);
    be.linear(b.yq, L.o, b.yh);
    be.linear(b.xh, L.gate_up, b.ygu);
    be.linear(b.xi, L.down, b.yh);
  }
  be.linear(b.xh, w.lm_head, b.logits);
}

double copy_bandwidth_gbs(Backend& be) {
  cudaStream_t s = cuda::stream_of(be);
  const int64_t n = int64_t(1) << 30;  // 2 GiB of bf16 each side
  Tensor a = be.alloc({n}, DType::BF16), b = be.alloc({n}, DType::BF16);
  cuda::fill_uniform(be, a, 1, -1, 1);
  const double ms = time_ms(
      s, [&] { TF_CUDA_CHECK(cudaMemcpyAsync(b.raw(), a.raw(), n * 2, cudaMemcpyDeviceToDevice, s)); });
  return 2.0 * n * 2 / (ms * 1e-3) / 1e9;  // read + write
}

struct Result {
  Fmt f;
  int m, ahead;  // ahead: K chunks loaded per step (set_quant_loads_per_step)
  double ms, gb;
};

int run() {
  std::string why;
  auto be = make_cuda_backend(0, &why);
  if (!be) {
    std::fprintf(stderr, "tf_bench_quant: %s\n", why.c_str());
    return 1;
  }
  cudaStream_t s = cuda::stream_of(*be);
  const double copy = copy_bandwidth_gbs(*be);
  std::printf("%s\ncopy bandwidth (device to device, read + write): %.0f GB/s\n\n", be->name().c_str(), copy);
  std::vector<Result> res;
  for (Fmt f : {Fmt::Bf16, Fmt::Mlx4, Fmt::Mlx8, Fmt::Fp8}) {
    Weights w = make_weights(*be, f);
    for (int m : {1, 16}) {
      Buffers b = make_buffers(*be, m);
      for (int ahead : {4, 8}) {
        if (f == Fmt::Bf16 && ahead == 8) continue;
        cuda::set_quant_loads_per_step(ahead);
        const double ms = time_graph_ms(s, [&] { step(*be, w, b); });
        res.push_back({f, m, ahead, ms, double(w.bytes) / 1e9});
      }
      cuda::set_quant_loads_per_step(4);
    }
    // Per-shape times at M = 1 (eager, 20 calls a timing) for tuning.
    Buffers b = make_buffers(*be, 1);
    const Layer& L = w.layers[0];
    auto each = [&](const char* name, const LinearWeight& lw, const Tensor& x, Tensor& y) {
      const double ms = time_ms(s, [&] {
        for (int i = 0; i < 20; ++i) be->linear(x, lw, y);
      });
      int64_t bytes = 0;
      for (const Tensor* t : {&lw.weight, &lw.scales, &lw.biases})
        if (t->defined()) bytes += int64_t(t->nbytes());
      std::printf("  %-14s %-8s M=1: %8.2f us  %6.0f GB/s\n", fmt_name(f), name, ms * 1e3 / 20,
                  bytes / (ms / 20 * 1e-3) / 1e9);
    };
    each("q", L.q, b.xh, b.yq);
    each("k", L.k, b.xh, b.ykv);
    each("gate_up", L.gate_up, b.xh, b.ygu);
    each("down", L.down, b.xi, b.yh);
    each("lm_head", w.lm_head, b.xh, b.logits);
    be->synchronize();
  }
  std::printf(
      "\n| format | M | chunks ahead | step ms | tokens/s | vs bf16 | weight GB | GB/s | of copy roofline "
      "|\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  auto bf16_ms = [&](int m) {
    for (auto& r : res)
      if (r.f == Fmt::Bf16 && r.m == m) return r.ms;
    return 0.0;
  };
  for (auto& r : res) {
    const double gbs = r.gb / (r.ms * 1e-3);
    std::printf("| %s | %d | %s | %.3f | %.1f | %.2fx | %.2f | %.0f | %.1f%% |\n", fmt_name(r.f), r.m,
                r.f == Fmt::Bf16 ? "-" : std::to_string(r.ahead).c_str(), r.ms, r.m / (r.ms * 1e-3),
                bf16_ms(r.m) / r.ms, r.gb, gbs, 100 * gbs / copy);
  }
  for (auto& r : res) {  // the default schedule (4 chunks ahead)
    if (r.f != Fmt::Mlx4 || r.ahead != 4) continue;
    const double ratio = bf16_ms(r.m) / r.ms, frac = r.gb / (r.ms * 1e-3) / copy;
    if (r.m == 1)
      std::printf("target 4-bit/g64 M=1: >= 3x bf16 (%.2fx) %s, >= 75%% of roofline (%.1f%%) %s\n", ratio,
                  ratio >= 3 ? "met" : "MISSED", 100 * frac, frac >= 0.75 ? "met" : "MISSED");
    else
      std::printf("target 4-bit/g64 M=16: >= 2x bf16 (%.2fx) %s\n", ratio, ratio >= 2 ? "met" : "MISSED");
  }
  return 0;
}

}  // namespace
}  // namespace tf

int main() {
  try {
    return tf::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf_bench_quant: %s\n", e.what());
    return 1;
  }
}

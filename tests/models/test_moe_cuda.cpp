// GPU: the fused Backend::moe of the CUDA backend (device routing, grouping, grouped GEMM, combine)
// against the CPU reference, bit-for-bit against the host-routed per-expert path where both round the same,
// and a token's output bits independent of how many other tokens share the call and which experts they
// chose (1..64 tokens), and the same bits when every fresh device allocation is NaN-poisoned. The same for
// MLX affine 4- and 8-bit experts kept packed (the grouped GEMM dequantizes in registers): bit-equal to the
// host-routed per-expert linear_quantized, per token independent of the batch, and on the tiny mlx-lm
// conversion (tests/data/quant/qwen3-moe-mlx-4bit) the model's logits equal the host-routed path's. Label
// "gpu".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>

#include "checkpoint/checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "models/moe.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/kernels.h"  // hold_sms
#include "ops/cuda/moe_fused.h"
#include "ops/cuda/moe_kernels.h"
#include "ops/cuda/quant_linear.h"
#include "run_logits.h"

using namespace tf;

namespace {

constexpr int64_t kH = 256, kI = 128;
constexpr int kE = 32;

struct Moe : ::testing::Test {
  void SetUp() override {
    std::string why;
    gpu = make_cuda_backend(0, &why);
    if (!gpu) GTEST_SKIP() << "no CUDA backend: " << why;
    cpu = make_cpu_backend();
  }
  std::unique_ptr<Backend> gpu, cpu;
};

// bf16-representable random values (scale s) as a BF16 host tensor.
Tensor random_bf16(std::vector<int64_t> shape, float s, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, DType::BF16);
  std::normal_distribution<float> d(0.f, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(d(rng));
  return t;
}

LinearWeight host_linear(int64_t out, int64_t in, float s, std::mt19937& rng) {
  LinearWeight w;
  w.out_features = out, w.in_features = in;
  w.weight = random_bf16({out, in}, s, rng);
  return w;
}

// The same random experts uploaded to `be`.
MoeWeights make_moe(Backend& be, int top_k, bool norm, uint32_t seed, int experts = kE, int64_t h = kH,
                    int64_t inter = kI) {
  std::mt19937 rng(seed);
  MoeWeights w;
  w.top_k = top_k, w.norm_topk_prob = norm;
  w.router = be.upload_linear(host_linear(experts, h, 0.5f, rng));
  for (int e = 0; e < experts; ++e) {
    w.gate_up.push_back(be.upload_linear(host_linear(2 * inter, h, 0.06f, rng)));
    w.down.push_back(be.upload_linear(host_linear(h, inter, 0.09f, rng)));
  }
  return w;
}

// out_dtype: the backend's activation dtype unless given (the fused path also writes f32 outputs).
std::vector<float> run(Backend& be, MoeWeights& w, const Tensor& host_x,
                       std::optional<DType> out_dtype = std::nullopt) {
  Tensor x = be.upload(host_x);
  if (x.dtype() != be.act_dtype()) {  // the CPU backend keeps f32
    std::vector<float> f = host_x.to_f32_vector();
    Tensor h = Tensor::empty(host_x.shape(), DType::F32);
    std::memcpy(h.raw(), f.data(), f.size() * 4);
    x = be.upload(h);
  }
  Tensor out = be.alloc({x.dim(0), x.dim(1)}, out_dtype.value_or(be.act_dtype()));
  be.moe(x, w, out);
  Tensor host = Tensor::empty({x.dim(0), x.dim(1)}, DType::F32);
  be.to_host(out, host);
  return host.to_f32_vector();
}

// The outputs with a path switch off, then on (the switch is left on): A/B of two paths that must agree.
struct OffOn {
  std::vector<float> off, on;
};
OffOn run_off_on(Backend& be, MoeWeights& w, const Tensor& x, void (*set)(bool)) {
  OffOn r;
  set(false);
  r.off = run(be, w, x);
  set(true);
  r.on = run(be, w, x);
  return r;
}

Tensor rows_of(const Tensor& x, const std::vector<int>& rows) {
  const int64_t h = x.dim(1);
  Tensor out = Tensor::empty({int64_t(rows.size()), h}, DType::BF16);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.data<uint16_t>() + i * h, x.data<uint16_t>() + rows[i] * h, h * 2);
  return out;
}

TEST_F(Moe, FusedPathIsTakenAndMatchesTheCpuReference) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  MoeWeights g = make_moe(*gpu, 4, true, 1), c = make_moe(*cpu, 4, true, 1);
  std::mt19937 rng(2);
  const Tensor x = random_bf16({40, kH}, 1.f, rng);
  EXPECT_TRUE(cuda::moe_fusable(gpu->upload(x), g));
  const auto a = run(*gpu, g, x), b = run(*cpu, c, x);
  EXPECT_TRUE(g.prepared) << "the fused path did not run";
  for (int t = 0; t < 40; ++t) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < kH; ++j) {
      num += std::pow(double(a[t * kH + j]) - b[t * kH + j], 2);
      den += std::pow(double(b[t * kH + j]), 2);
    }
    EXPECT_GT(den, 0.0);
    EXPECT_LT(std::sqrt(num / den), 3e-2) << "token " << t;
  }
}

// top_k 1 renormalised: every weight is exactly 1, so the host-routed default (per-expert linear_bf16,
// scatter_add into zeros) and the fused path round identically: equal bits prove the grouped GEMM
// computes linear_bf16's arithmetic and the device routing picks the host's expert.
TEST_F(Moe, GroupedGemmHasLinearBits) {
  MoeWeights g = make_moe(*gpu, 1, true, 3);
  std::mt19937 rng(4);
  for (int n : {1, 9, 64, 300}) {
    const Tensor x = random_bf16({n, kH}, 1.f, rng);
    const auto fused = run(*gpu, g, x);
    Tensor dx = gpu->upload(x), out = gpu->alloc({n, kH}, DType::BF16);
    gpu->Backend::moe(dx, g, out);
    Tensor host = Tensor::empty({n, kH}, DType::F32);
    gpu->to_host(out, host);
    EXPECT_EQ(0, std::memcmp(fused.data(), host.data<float>(), fused.size() * 4)) << n << " tokens";
  }
}

// A token's bits alone and inside calls of 1..64 tokens (other tokens, other routings, other tile sizes).
TEST_F(Moe, TokenBitsIndependentOfTheBatch) {
  for (int top_k : {8, 2}) {
    MoeWeights g = make_moe(*gpu, top_k, top_k == 8, 5);
    std::mt19937 rng(6);
    const Tensor pool = random_bf16({200, kH}, 1.f, rng);
    std::vector<std::vector<float>> alone(200);
    for (int t = 0; t < 200; ++t) alone[t] = run(*gpu, g, rows_of(pool, {t}));
    std::uniform_int_distribution<int> pick(0, 199);
    for (int n = 1; n <= 64; n += (n < 8 ? 1 : 7)) {
      std::vector<int> rows(static_cast<size_t>(n));
      for (auto& r : rows) r = pick(rng);
      const auto out = run(*gpu, g, rows_of(pool, rows));
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(0, std::memcmp(out.data() + i * kH, alone[rows[i]].data(), kH * 4))
            << "top_k " << top_k << ", token " << rows[i] << " at " << i << " of " << n;
    }
    // Many copies of one token on its top_k experts: tiles of 32 and 64 tokens give the same bits.
    for (int copies : {128, 256}) {
      const auto out = run(*gpu, g, rows_of(pool, std::vector<int>(size_t(copies), 17)));
      for (int i = 0; i < copies; i += 37)
        ASSERT_EQ(0, std::memcmp(out.data() + i * kH, alone[17].data(), kH * 4)) << copies << " copies";
    }
  }
}

// Routing and grouping in one kernel (calls of up to kRouteGroupMaxRows rows) or two: the same bits.
TEST_F(Moe, RouteGroupKernelEqualsTwoLaunches) {
  MoeWeights g = make_moe(*gpu, 8, true, 7);
  std::mt19937 rng(8);
  for (int n : {1, 5, 13, cuda::kRouteGroupMaxRows, cuda::kRouteGroupMaxRows + 1}) {
    const OffOn r = run_off_on(*gpu, g, random_bf16({n, kH}, 1.f, rng), cuda::set_moe_route_group);
    EXPECT_EQ(0, std::memcmp(r.on.data(), r.off.data(), r.on.size() * 4)) << n << " tokens";
  }
}

// The routing in registers (up to 256 experts) and through shared memory: the same picks and weights, so the
// same bits, for 32, 128 and 200 experts, top_k 8 and 1, at 1, 3 (routed inside the gate_up GEMM), 9 (the
// routing + grouping kernel) and 70 rows (the routing kernel, then the grouping kernel).
TEST_F(Moe, RouteRowRegistersEqualSharedMemory) {
  for (int experts : {32, 128, 200}) {
    for (int top_k : {8, 1}) {
      MoeWeights g = make_moe(*gpu, top_k, top_k == 8, 21, experts);
      std::mt19937 rng(22);
      for (int n : {1, 3, 9, 70}) {
        // off: registers where they fit; on: shared memory for every row.
        const OffOn r = run_off_on(*gpu, g, random_bf16({n, kH}, 1.f, rng), cuda::set_moe_route_smem_only);
        cuda::set_moe_route_smem_only(false);
        EXPECT_EQ(0, std::memcmp(r.off.data(), r.on.data(), r.off.size() * 4))
            << experts << " experts, top_k " << top_k << ", " << n << " tokens";
      }
    }
  }
}

// TF_CUDA_POISON=1 fills every tensor the backend hands out with 0xFF bytes (NaN): the fused path
// (and the host-routed one) must read only what it wrote, so the bits stay those of a plain backend.
TEST_F(Moe, BitsUnchangedByPoisonedAllocations) {
  std::mt19937 rng(8);
  const Tensor x = random_bf16({300, kH}, 1.f, rng);
  const std::vector<int> sizes = {1, 9, 64, 300};
  std::vector<std::vector<float>> fused[2], routed[2];
  for (int poisoned = 0; poisoned < 2; ++poisoned) {
    gpu.reset();  // one backend at a time: it owns the process's device allocator
    if (poisoned) setenv("TF_CUDA_POISON", "1", 1);
    std::string why;
    gpu = make_cuda_backend(0, &why);
    unsetenv("TF_CUDA_POISON");
    ASSERT_TRUE(gpu) << why;
    MoeWeights g = make_moe(*gpu, 4, true, 9);
    for (int n : sizes) {
      std::vector<int> rows(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) rows[i] = i;
      const Tensor xs = rows_of(x, rows);
      fused[poisoned].push_back(run(*gpu, g, xs));
      Tensor dx = gpu->upload(xs), out = gpu->alloc({n, kH}, DType::BF16);
      gpu->Backend::moe(dx, g, out);
      Tensor host = Tensor::empty({n, kH}, DType::F32);
      gpu->to_host(out, host);
      routed[poisoned].push_back(host.to_f32_vector());
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (float v : fused[1][i]) ASSERT_TRUE(std::isfinite(v)) << sizes[i] << " tokens, fused";
    for (float v : routed[1][i]) ASSERT_TRUE(std::isfinite(v)) << sizes[i] << " tokens, host-routed";
    EXPECT_EQ(0, std::memcmp(fused[1][i].data(), fused[0][i].data(), fused[0][i].size() * 4))
        << sizes[i] << " tokens: the fused path reads unwritten device memory";
    EXPECT_EQ(0, std::memcmp(routed[1][i].data(), routed[0][i].data(), routed[0][i].size() * 4))
        << sizes[i] << " tokens: the host-routed path reads unwritten device memory";
  }
}

// ---- MLX affine experts kept packed ----

// A random MLX affine weight [out, in] of `bits` bits, groups of `group`: random codes, bf16 scales around
// 0.6/sqrt(in)/2^bits and biases about -scale * 2^(bits-1), so the dequantized weights are centred.
LinearWeight host_mlx(int64_t out, int64_t in, int bits, int group, std::mt19937& rng) {
  LinearWeight w;
  w.format = LinearWeight::Format::MlxAffine;
  w.bits = bits, w.group_size = group;
  w.out_features = out, w.in_features = in;
  w.weight = Tensor::empty({out, in * bits / 32}, DType::U32);
  for (int64_t i = 0; i < w.weight.numel(); ++i) w.weight.data<uint32_t>()[i] = uint32_t(rng());
  w.scales = Tensor::empty({out, in / group}, DType::BF16);
  w.biases = Tensor::empty({out, in / group}, DType::BF16);
  std::uniform_real_distribution<float> d(0.5f, 1.5f);
  const float s0 = 1.2f / std::sqrt(float(in)) / float(1 << bits);
  for (int64_t i = 0; i < w.scales.numel(); ++i) {
    const float sc = s0 * d(rng);
    w.scales.data<uint16_t>()[i] = f32_to_bf16(sc);
    w.biases.data<uint16_t>()[i] = f32_to_bf16(-sc * float(1 << (bits - 1)) * d(rng));
  }
  return w;
}

// Qwen3-30B-A3B's hidden and expert intermediate (fewer experts): gate_up's K = 2048 gives each warp
// 8 chunks (whole 4-bit quads, the main prefetch loop), down's K = 768 three (slices off quad
// boundaries: single chunks and the batched tail).
constexpr int64_t kMlxH = 2048, kMlxI = 768;
constexpr int kMlxE = 16;

// Random MLX experts uploaded to the GPU, kept packed by upload_linear; the router bf16 (router_bits 16) or
// MLX 8- or 4-bit (group 64, as mlx-lm's 4-bit conversions keep it at 8 bits).
MoeWeights make_mlx_moe(Backend& be, int top_k, bool norm, uint32_t seed, int bits, int group,
                        int experts = kMlxE, int router_bits = 16, int64_t inter = kMlxI) {
  std::mt19937 rng(seed);
  MoeWeights w;
  w.top_k = top_k, w.norm_topk_prob = norm;
  w.router = be.upload_linear(router_bits == 16 ? host_linear(experts, kMlxH, 0.5f / 3, rng)
                                                : host_mlx(experts, kMlxH, router_bits, 64, rng));
  for (int e = 0; e < experts; ++e) {
    w.gate_up.push_back(be.upload_linear(host_mlx(2 * inter, kMlxH, bits, group, rng)));
    w.down.push_back(be.upload_linear(host_mlx(kMlxH, inter, bits, group, rng)));
  }
  return w;
}

std::vector<float> host_routed(Backend& gpu, MoeWeights& w, const Tensor& x) {
  const int64_t n = x.dim(0), h = x.dim(1);
  Tensor dx = gpu.upload(x), out = gpu.alloc({n, h}, DType::BF16);
  gpu.Backend::moe(dx, w, out);
  Tensor host = Tensor::empty({n, h}, DType::F32);
  gpu.to_host(out, host);
  return host.to_f32_vector();
}

struct MlxCase {
  int bits, group;
};
const MlxCase kMlxCases[] = {{4, 32}, {4, 64}, {4, 128}, {8, 64}};

// top_k 1 renormalised (every combine weight exactly 1): the fused path's grouped MLX GEMM against the
// host-routed path's per-expert linear_quantized, bit for bit, at tiles of 8 (1..40 tokens over 16
// experts), 32 (300) and 64 (600) tokens.
TEST_F(Moe, GroupedMlxGemmHasQuantizedLinearBits) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  for (const MlxCase c : kMlxCases) {
    SCOPED_TRACE(std::to_string(c.bits) + "-bit, group " + std::to_string(c.group));
    MoeWeights g = make_mlx_moe(*gpu, 1, true, 11, c.bits, c.group);
    ASSERT_EQ(g.gate_up[0].format, LinearWeight::Format::MlxAffine) << "upload_linear did not keep it packed";
    std::mt19937 rng(12);
    for (int n : {1, 3, 16, 40, 300, 600}) {
      const Tensor x = random_bf16({n, kMlxH}, 1.f, rng);
      ASSERT_TRUE(cuda::moe_fusable(gpu->upload(x), g));
      const auto fused = run(*gpu, g, x), routed = host_routed(*gpu, g, x);
      EXPECT_TRUE(g.prepared) << "the fused path did not run";
      double norm = 0;
      for (float v : fused) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);
      EXPECT_EQ(0, std::memcmp(fused.data(), routed.data(), fused.size() * 4)) << n << " tokens";
    }
  }
}

// A token's bits alone and in calls of M in {1, 3, 16, 40} tokens (top_k 8: the others route elsewhere
// and change every tile), and 128 copies of one token (tiles of 64).
TEST_F(Moe, MlxTokenBitsIndependentOfTheBatch) {
  for (const MlxCase c : kMlxCases) {
    SCOPED_TRACE(std::to_string(c.bits) + "-bit, group " + std::to_string(c.group));
    MoeWeights g = make_mlx_moe(*gpu, 8, true, 13, c.bits, c.group);
    std::mt19937 rng(14);
    const Tensor pool = random_bf16({64, kMlxH}, 1.f, rng);
    std::vector<std::vector<float>> alone(64);
    for (int t = 0; t < 64; ++t) alone[t] = run(*gpu, g, rows_of(pool, {t}));
    std::uniform_int_distribution<int> pick(0, 63);
    for (int n : {1, 3, 16, 40}) {
      std::vector<int> rows(static_cast<size_t>(n));
      for (auto& r : rows) r = pick(rng);
      const auto out = run(*gpu, g, rows_of(pool, rows));
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(0, std::memcmp(out.data() + i * kMlxH, alone[rows[i]].data(), kMlxH * 4))
            << "token " << rows[i] << " at " << i << " of " << n;
    }
    const auto out = run(*gpu, g, rows_of(pool, std::vector<int>(128, 5)));
    for (int i = 0; i < 128; i += 17)
      ASSERT_EQ(0, std::memcmp(out.data() + i * kMlxH, alone[5].data(), kMlxH * 4)) << "128 copies";
  }
}

// Decode calls (up to kMoeRoutedMaxRows rows) of bf16 or 4-bit experts route inside the gate_up GEMM, with
// every pair its own one-token tile (moe_routed_gemm): the same bits as the routing + grouping kernel and the
// grouped GEMMs, for bf16 and each 4-bit group size, top_k 8 and 2, renormalised or not; one row more takes
// the grouped path.
TEST_F(Moe, RoutedDecodeEqualsTheGroupedPath) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  auto check = [&](MoeWeights& g, int top_k, int64_t h, int64_t inter, int experts, int bits) {
    std::mt19937 rng(16);
    for (int n = 1; n <= cuda::kMoeRoutedMaxRows + 1; ++n) {
      const OffOn r = run_off_on(*gpu, g, random_bf16({n, h}, 1.f, rng), cuda::set_moe_routed);
      const auto &grouped = r.off, &routed = r.on;
      cuda::MoeExperts up, down;
      up.bits = down.bits = bits, up.experts = down.experts = experts;
      EXPECT_EQ(cuda::moe_routed_ok(up, down, n, top_k, int(h), int(inter)), n <= cuda::kMoeRoutedMaxRows)
          << n;
      double norm = 0;
      for (float v : routed) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);
      EXPECT_EQ(0, std::memcmp(routed.data(), grouped.data(), routed.size() * 4)) << n << " tokens";
    }
  };
  for (int top_k : {8, 2}) {
    SCOPED_TRACE("top_k " + std::to_string(top_k));
    {
      SCOPED_TRACE("bf16");
      MoeWeights g = make_moe(*gpu, top_k, top_k == 8, 17);
      check(g, top_k, kH, kI, kE, 16);
    }
    for (const MlxCase c : kMlxCases) {
      if (c.bits != 4) continue;
      SCOPED_TRACE("4-bit, group " + std::to_string(c.group));
      MoeWeights g = make_mlx_moe(*gpu, top_k, top_k == 8, 15, c.bits, c.group);
      check(g, top_k, kMlxH, kMlxI, kMlxE, 4);
    }
  }
}

// One decode row of 4-bit experts runs the whole MoE after the router as one kernel (moe_decode: a grid
// barrier between its gate_up and its down): the same bits as the routed chain (moe_routed_gemm twice, then
// moe_combine), for each group size, plain and subnormal scale codes, top_k 8, 2 and 1, renormalised or
// not, into bf16 and f32 outputs; 20 launches in a row (the barrier words reused) give each row's bits.
TEST_F(Moe, DecodeKernelEqualsTheRoutedChain) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  int taken = 0;
  for (const MlxCase c : kMlxCases) {
    if (c.bits != 4) continue;
    for (bool subnormal : {false, true})
      for (int top_k : {8, 2, 1}) {
        SCOPED_TRACE("group " + std::to_string(c.group) + (subnormal ? ", subnormal" : "") + ", top_k " +
                     std::to_string(top_k));
        cuda::set_mlx_subnormal_codes(subnormal);
        MoeWeights g = make_mlx_moe(*gpu, top_k, top_k != 2, 51, c.bits, c.group);
        cuda::set_mlx_subnormal_codes(true);
        ASSERT_EQ(g.gate_up[0].subnormal_codes, subnormal);
        cuda::MoeExperts up, down;
        up.bits = down.bits = 4, up.experts = down.experts = kMlxE, up.subnormal = down.subnormal = subnormal;
        up.row_bytes = kMlxH / 2, up.groups = int(kMlxH / c.group);
        down.row_bytes = kMlxI / 2, down.groups = int(kMlxI / c.group);
        ASSERT_TRUE(cuda::moe_decode_ok(up, down, 1, top_k, int(kMlxH), int(kMlxI)));
        EXPECT_FALSE(cuda::moe_decode_ok(up, down, 2, top_k, int(kMlxH), int(kMlxI)));
        std::mt19937 rng(52);
        for (int i = 0; i < 4; ++i) {
          const Tensor x = random_bf16({1, kMlxH}, 1.f, rng);
          const OffOn r = run_off_on(*gpu, g, x, cuda::set_moe_decode);
          double norm = 0;
          for (float v : r.on) norm += double(v) * v;
          EXPECT_GT(norm, 0.0);
          EXPECT_EQ(0, std::memcmp(r.on.data(), r.off.data(), r.on.size() * 4))
              << "row " << i << ", bf16 out";
          cuda::set_moe_decode(false);
          const auto off32 = run(*gpu, g, x, DType::F32);
          cuda::set_moe_decode(true);
          const auto on32 = run(*gpu, g, x, DType::F32);
          EXPECT_EQ(0, std::memcmp(on32.data(), off32.data(), on32.size() * 4)) << "row " << i << ", f32 out";
          ++taken;
        }
      }
  }
  EXPECT_GT(taken, 0);
  // Back to back: the barrier words must come back ready for every launch.
  MoeWeights g = make_mlx_moe(*gpu, 8, true, 53, 4, 64);
  std::mt19937 rng(54);
  const Tensor pool = random_bf16({20, kMlxH}, 1.f, rng);
  cuda::set_moe_decode(false);
  std::vector<std::vector<float>> chain;
  for (int i = 0; i < 20; ++i) chain.push_back(run(*gpu, g, rows_of(pool, {i})));
  cuda::set_moe_decode(true);
  for (int i = 0; i < 20; ++i)
    ASSERT_EQ(0, std::memcmp(run(*gpu, g, rows_of(pool, {i})).data(), chain[i].data(), kMlxH * 4)) << i;
}

// Other expert widths through moe_decode's down: its units of 2 and 4 chunks a K slice (inter 512 with top_k
// 8 and 3, inter 1024 with top_k 4: warps idle), and the loop over pairs where a slice is not whole quads
// (inter 640: 20 chunks over 8 slices). The same bits as the routed chain.
TEST_F(Moe, DecodeKernelOtherWidthsEqualTheRoutedChain) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  const struct {
    int64_t inter;
    int top_k;
  } cases[] = {{512, 8}, {512, 3}, {1024, 4}, {640, 8}, {640, 3}};
  for (const auto& c : cases) {
    SCOPED_TRACE("inter " + std::to_string(c.inter) + ", top_k " + std::to_string(c.top_k));
    MoeWeights g = make_mlx_moe(*gpu, c.top_k, true, 57, 4, 64, kMlxE, 16, c.inter);
    cuda::MoeExperts up, down;
    up.bits = down.bits = 4, up.experts = down.experts = kMlxE;
    up.row_bytes = kMlxH / 2, up.groups = int(kMlxH / 64);
    down.row_bytes = c.inter / 2, down.groups = int(c.inter / 64);
    ASSERT_TRUE(cuda::moe_decode_ok(up, down, 1, c.top_k, int(kMlxH), int(c.inter)));
    std::mt19937 rng(58);
    for (int i = 0; i < 3; ++i) {
      const OffOn r = run_off_on(*gpu, g, random_bf16({1, kMlxH}, 1.f, rng), cuda::set_moe_decode);
      double norm = 0;
      for (float v : r.on) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);
      EXPECT_EQ(0, std::memcmp(r.on.data(), r.off.data(), r.on.size() * 4)) << "row " << i;
    }
  }
}

// The router linear inside moe_decode (every block polls the logit tiles that blocks 0 .. experts / 16 - 1
// publish): the same bits as the router linear before it and as the routed chain, for bf16, MLX 8-bit and
// 4-bit routers over 16 and 64 experts (1 and 4 logit tiles) and an 8-bit one over 128, 12 launches back to
// back on one layer's words.
TEST_F(Moe, DecodeKernelRouterInsideEqualsTheRouterLinear) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  // (128 experts: the 30B-A3B's count, 8 logit tiles)
  const std::pair<int, int> cases[] = {{16, 16}, {16, 8}, {16, 4}, {64, 16}, {64, 8}, {64, 4}, {128, 8}};
  for (const auto& [experts, router_bits] : cases) {
    SCOPED_TRACE(std::to_string(experts) + " experts, router bits " + std::to_string(router_bits));
    MoeWeights g = make_mlx_moe(*gpu, 8, true, 61, 4, 64, experts, router_bits);
    ASSERT_EQ(g.router.format,
              router_bits == 16 ? LinearWeight::Format::Dense : LinearWeight::Format::MlxAffine);
    std::mt19937 rng(62);
    const Tensor pool = random_bf16({12, kMlxH}, 1.f, rng);
    std::vector<std::vector<float>> linear, chain;
    cuda::set_moe_decode_router(false);
    for (int i = 0; i < 12; ++i) linear.push_back(run(*gpu, g, rows_of(pool, {i})));
    cuda::set_moe_decode(false);
    for (int i = 0; i < 12; ++i) chain.push_back(run(*gpu, g, rows_of(pool, {i})));
    cuda::set_moe_decode(true);
    cuda::set_moe_decode_router(true);
    for (int i = 0; i < 12; ++i) {
      const auto inside = run(*gpu, g, rows_of(pool, {i}));
      double norm = 0;
      for (float v : inside) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);
      ASSERT_EQ(0, std::memcmp(inside.data(), linear[i].data(), kMlxH * 4)) << "row " << i;
      ASSERT_EQ(0, std::memcmp(inside.data(), chain[i].data(), kMlxH * 4)) << "row " << i;
    }
    const auto f32 = run(*gpu, g, rows_of(pool, {3}), DType::F32);
    cuda::set_moe_decode_router(false);
    EXPECT_EQ(0, std::memcmp(f32.data(), run(*gpu, g, rows_of(pool, {3}), DType::F32).data(), kMlxH * 4));
    cuda::set_moe_decode_router(true);
  }
}

// Backend::add_rms_norm_moe at one decode row: moe_decode making its input from the residual (every block
// its own add + norm, block 0 the new residual) has the bits of add_rms_norm then moe, for the MoE output
// (bf16 and f32, into x's own tensor as the layer does, or another) and the new residual; bf16 and f32 norm
// weights with and without an offset; 12 launches back to back. Where it cannot take the call (two rows) it
// says so and the two ops run.
TEST_F(Moe, DecodeKernelAddNormEqualsTheTwoOps) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  struct Case {
    int experts, router_bits;
    DType wt;
    float offset;
  };
  for (const Case c :
       {Case{16, 8, DType::BF16, 0.f}, Case{64, 4, DType::F32, 0.f}, Case{16, 16, DType::BF16, 1.f}}) {
    SCOPED_TRACE(std::to_string(c.experts) + " experts, router bits " + std::to_string(c.router_bits) +
                 ", offset " + std::to_string(c.offset));
    MoeWeights g = make_mlx_moe(*gpu, 8, true, 71, 4, 64, c.experts, c.router_bits);
    std::mt19937 rng(72);
    const Tensor res_pool = random_bf16({12, kMlxH}, 1.f, rng), x_pool = random_bf16({12, kMlxH}, 1.f, rng);
    Tensor nw = random_bf16({kMlxH}, 0.3f, rng);
    if (c.wt == DType::F32) {
      std::vector<float> f = nw.to_f32_vector();
      nw = Tensor::empty({kMlxH}, DType::F32);
      std::memcpy(nw.raw(), f.data(), f.size() * 4);
    }
    const Tensor dnw = gpu->upload(nw);
    const float eps = 1e-6f;
    auto host = [&](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), DType::F32);
      gpu->to_host(t, h);
      return h.to_f32_vector();
    };
    // {out, new residual} of row i; `fused` whether the one kernel took it.
    auto step = [&](int i, bool in_place, DType out_dtype, bool* fused) {
      Tensor res = gpu->upload(rows_of(res_pool, {i})), x = gpu->upload(rows_of(x_pool, {i}));
      Tensor res_out = gpu->alloc({1, kMlxH}, DType::BF16), h = gpu->alloc({1, kMlxH}, DType::BF16);
      Tensor out = in_place ? x : gpu->alloc({1, kMlxH}, out_dtype);
      *fused = gpu->add_rms_norm_moe(res, x, dnw, eps, c.offset, h, g, out, res_out);
      return std::make_pair(host(out), host(*fused ? res_out : res));
    };
    for (int i = 0; i < 12; ++i) {
      bool fused = false, two = true;
      cuda::set_moe_add_norm(false);
      const auto ref = step(i, false, DType::BF16, &two);
      const auto ref32 = step(i, false, DType::F32, &two);
      cuda::set_moe_add_norm(true);
      ASSERT_FALSE(two);
      double norm = 0;
      for (float v : ref.first) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);
      for (bool in_place : {true, false}) {
        const auto got = step(i, in_place, DType::BF16, &fused);
        ASSERT_TRUE(fused);
        ASSERT_EQ(0, std::memcmp(got.first.data(), ref.first.data(), kMlxH * 4)) << "row " << i << " out";
        ASSERT_EQ(0, std::memcmp(got.second.data(), ref.second.data(), kMlxH * 4))
            << "row " << i << " residual";
      }
      const auto got32 = step(i, false, DType::F32, &fused);
      ASSERT_TRUE(fused);
      ASSERT_EQ(0, std::memcmp(got32.first.data(), ref32.first.data(), kMlxH * 4))
          << "row " << i << " f32 out";
    }
  }
  // Two rows: not the one kernel; the two ops, in place.
  MoeWeights g = make_mlx_moe(*gpu, 8, true, 73, 4, 64, 16, 8);
  std::mt19937 rng(74);
  Tensor res = gpu->upload(random_bf16({2, kMlxH}, 1.f, rng)),
         x = gpu->upload(random_bf16({2, kMlxH}, 1.f, rng));
  Tensor nw = gpu->upload(random_bf16({kMlxH}, 0.3f, rng));
  Tensor h = gpu->alloc({2, kMlxH}, DType::BF16), out = gpu->alloc({2, kMlxH}, DType::BF16),
         res_out = gpu->alloc({2, kMlxH}, DType::BF16);
  EXPECT_FALSE(gpu->add_rms_norm_moe(res, x, nw, 1e-6f, 0.f, h, g, out, res_out));
}

// Backend::linear_add_rms_norm_moe at one decode row with the o projection inside moe_decode (MoeOProj,
// set_moe_o_fold): the o output, the MoE output (into the o output's own tensor as the layer does, or
// another; bf16 and f32) and the new residual have the bits of the linear then add_rms_norm_moe. o widths K =
// 4096 (the 30B-A3B's 32 heads x 128), 2048 and 1024; groups of 64 and 128; subnormal and plain scale codes;
// 128 experts with a 4-bit router and 16 with an 8-bit one; 12 rows, the fold off and on in turn (its arrival
// count must stay consistent). Where the fold cannot take the call (groups of 32; the switch off) it says so
// and the ops run with the same bits.
TEST_F(Moe, DecodeKernelOFoldEqualsTheOps) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  struct Case {
    int64_t k;
    int group;
    bool subnormal;
    int experts, router_bits;
    bool fits;
  };
  const bool fold0 = cuda::moe_o_fold();
  // Some fold launches run while a kernel on another stream holds 16 SMs for 300 us, so that 16 of
  // moe_decode's blocks enter long after the others have handed the o outputs over (its blocks each need a
  // whole SM); with the o blocks alone arriving on the fold's count, such a block must not wait for a later
  // launch's arrivals (run 423's scheme, which took its target from the count before its wait, hung there).
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaSuccess, cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  uint32_t seed = 80;
  for (const Case c : {Case{4096, 64, true, 128, 4, true}, Case{4096, 128, false, 16, 8, true},
                       Case{2048, 64, false, 16, 4, true}, Case{1024, 128, true, 16, 8, true},
                       Case{4096, 32, true, 16, 4, false}}) {
    SCOPED_TRACE("o K " + std::to_string(c.k) + ", group " + std::to_string(c.group) +
                 (c.subnormal ? ", subnormal codes, " : ", plain codes, ") + std::to_string(c.experts) +
                 " experts");
    cuda::set_mlx_subnormal_codes(c.subnormal);
    MoeWeights g = make_mlx_moe(*gpu, 8, true, ++seed, 4, 64, c.experts, c.router_bits);
    std::mt19937 rng(++seed);
    const LinearWeight o = gpu->upload_linear(host_mlx(kMlxH, c.k, 4, c.group, rng));
    ASSERT_EQ(o.format, LinearWeight::Format::MlxAffine) << "not uploaded packed";
    const Tensor res_pool = random_bf16({12, kMlxH}, 1.f, rng), a_pool = random_bf16({12, c.k}, 1.f, rng);
    const Tensor nw = gpu->upload(random_bf16({kMlxH}, 0.3f, rng));
    auto host = [&](const Tensor& t) {
      Tensor h = Tensor::empty(t.shape(), DType::F32);
      gpu->to_host(t, h);
      return h.to_f32_vector();
    };
    struct Out {
      std::vector<float> o, out, res;
    };
    // Row i with the fold on or off: {o output, MoE output, new residual}; `taken` whether the fold ran.
    // (late: 16 SMs held while the fold runs; the count's arrivals by every block or the o blocks alone.)
    auto step = [&](int i, bool fold, bool in_place, DType out_dtype, bool* taken, bool late = false) {
      cuda::set_moe_o_fold(fold);
      cuda::set_moe_o_count_all(i % 2 == 1);
      cuda::set_moe_o_one_tile(i % 3 != 2);  // (o tiles one a block, or two: one a team)
      Tensor res = gpu->upload(rows_of(res_pool, {i})), attn = gpu->upload(rows_of(a_pool, {i}));
      Tensor x = gpu->alloc({1, kMlxH}, DType::BF16), res_out = gpu->alloc({1, kMlxH}, DType::BF16);
      Tensor out = in_place ? x : gpu->alloc({1, kMlxH}, out_dtype);
      if (late) {
        EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(cuda::stream_of(*gpu)));
        cuda::hold_sms(16, 300, side);
      }
      *taken = cuda::moe_fused_o_add_norm(*gpu, cuda::stream_of(*gpu), attn, o, res, x, nw, 1e-6f, 0.f, g,
                                          out, res_out);
      if (!*taken) {
        Tensor h = gpu->alloc({1, kMlxH}, DType::BF16);
        EXPECT_TRUE(gpu->linear_add_rms_norm_moe(attn, o, x, res, nw, 1e-6f, 0.f, h, g, out, res_out));
      }
      Out r{host(x), host(out), host(res_out)};
      if (in_place) r.o.clear();  // (x was overwritten by the MoE output)
      cuda::set_moe_o_fold(fold0);
      cuda::set_moe_o_count_all(false);
      cuda::set_moe_o_one_tile(true);
      return r;
    };
    for (int i = 0; i < 12; ++i) {
      bool taken = false;
      const Out ref = step(i, false, false, DType::BF16, &taken);
      ASSERT_FALSE(taken) << "the fold ran while switched off";
      Tensor lin = gpu->alloc({1, kMlxH}, DType::BF16);
      gpu->linear(gpu->upload(rows_of(a_pool, {i})), o, lin);
      ASSERT_EQ(0, std::memcmp(ref.o.data(), host(lin).data(), kMlxH * 4)) << "row " << i << " o (ops)";
      double norm = 0;
      for (float v : ref.out) norm += double(v) * v;
      EXPECT_GT(norm, 0.0);
      for (bool in_place : {false, true}) {
        const Out got = step(i, true, in_place, DType::BF16, &taken, !in_place && i < 4);
        ASSERT_EQ(taken, c.fits);
        if (!in_place) {
          ASSERT_EQ(0, std::memcmp(got.o.data(), ref.o.data(), kMlxH * 4)) << "row " << i << " o";
        }
        ASSERT_EQ(0, std::memcmp(got.out.data(), ref.out.data(), kMlxH * 4)) << "row " << i << " out";
        ASSERT_EQ(0, std::memcmp(got.res.data(), ref.res.data(), kMlxH * 4)) << "row " << i << " residual";
      }
      if (i % 4 == 0) {
        const Out ref32 = step(i, false, false, DType::F32, &taken);
        const Out got32 = step(i, true, false, DType::F32, &taken);
        ASSERT_EQ(0, std::memcmp(got32.out.data(), ref32.out.data(), kMlxH * 4)) << "row " << i << " f32 out";
      }
    }
  }
  cuda::set_mlx_subnormal_codes(true);
  EXPECT_EQ(cudaSuccess, cudaStreamSynchronize(side));
  cudaStreamDestroy(side);
}

// The persistent 4-bit grouped gate_up (tiles of 8 tokens) applies silu_mul itself: the same bits as the
// silu_mul kernel after it, at 5..40 rows (the routed path stops at 4), for each 4-bit group size.
TEST_F(Moe, GroupedGateUpSiluEqualsTheSiluKernel) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  for (const MlxCase c : kMlxCases) {
    if (c.bits != 4) continue;
    SCOPED_TRACE("group " + std::to_string(c.group));
    MoeWeights g = make_mlx_moe(*gpu, 8, true, 41, c.bits, c.group);
    std::mt19937 rng(42);
    int fused = 0;
    for (int n : {5, 9, 16, 40}) {
      const OffOn r = run_off_on(*gpu, g, random_bf16({n, kMlxH}, 1.f, rng), cuda::set_moe_grouped_silu);
      const auto &apart = r.off, &together = r.on;
      cuda::MoeExperts up;
      up.bits = 4, up.experts = kMlxE;
      const int P = n * 8, tile = cuda::moe_tile_for(P, kMlxE);
      fused += cuda::moe_grouped_fuses_silu(up, cuda::moe_max_tiles(P, kMlxE, tile), tile, P, int(kMlxH));
      EXPECT_EQ(0, std::memcmp(together.data(), apart.data(), apart.size() * 4)) << n << " tokens";
    }
    EXPECT_GT(fused, 0) << "no call took the fused silu_mul";
  }
}

// 4-bit experts whose scales upload_linear stored times 2^133 (prescale_mlx4) give the bits of the plain
// scales on every path: routed decode (1, 3 rows), the persistent grouped kernel with silu_mul (9, 40), and
// the tiles of 32 and 64 tokens (300, 600), for each group size.
TEST_F(Moe, MlxSubnormalCodesEqualPlainScales) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  for (const MlxCase c : kMlxCases) {
    if (c.bits != 4) continue;
    SCOPED_TRACE("group " + std::to_string(c.group));
    cuda::set_mlx_subnormal_codes(false);
    MoeWeights plain = make_mlx_moe(*gpu, 8, true, 43, c.bits, c.group);
    cuda::set_mlx_subnormal_codes(true);
    MoeWeights sub = make_mlx_moe(*gpu, 8, true, 43, c.bits, c.group);
    ASSERT_FALSE(plain.gate_up[0].subnormal_codes);
    ASSERT_TRUE(sub.gate_up[0].subnormal_codes && sub.down[kMlxE - 1].subnormal_codes);
    std::mt19937 rng(44);
    for (int n : {1, 3, 9, 40, 300, 600}) {
      const Tensor x = random_bf16({n, kMlxH}, 1.f, rng);
      const auto a = run(*gpu, plain, x), b = run(*gpu, sub, x);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4)) << n << " tokens";
    }
    EXPECT_TRUE(sub.prepared) << "the fused path did not run";
  }
}

// The wgmma path (moe_grouped_wgmma) against the grouped kernels on x: both GEMMs ran on it, the output is
// not all zeros, and the bits are equal.
void expect_wgmma_bits(Backend& gpu, MoeWeights& g, const Tensor& x) {
  const int64_t n = x.dim(0);
  const uint64_t before = cuda::moe_grouped_wgmma_launches();
  const OffOn r = run_off_on(gpu, g, x, cuda::set_moe_wgmma);
  EXPECT_EQ(cuda::moe_grouped_wgmma_launches(), before + 2) << n << " tokens: the wgmma GEMMs did not run";
  double norm = 0;
  for (float v : r.on) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);
  EXPECT_EQ(0, std::memcmp(r.on.data(), r.off.data(), r.on.size() * 4)) << n << " tokens";
}
// `copies` copies of the one row `pool` on the wgmma path each give the row's bits alone (the grouped path).
void expect_copies_bits(Backend& gpu, MoeWeights& g, const Tensor& pool, int copies) {
  const int64_t h = pool.dim(1);
  cuda::set_moe_wgmma(false);
  const auto alone = run(gpu, g, pool);
  cuda::set_moe_wgmma(true);
  const uint64_t before = cuda::moe_grouped_wgmma_launches();
  const auto out = run(gpu, g, rows_of(pool, std::vector<int>(size_t(copies), 0)));
  EXPECT_EQ(cuda::moe_grouped_wgmma_launches(), before + 2)
      << copies << " copies: the wgmma GEMMs did not run";
  for (int i = 0; i < copies; i += 9)
    ASSERT_EQ(0, std::memcmp(out.data() + i * h, alone.data(), size_t(h) * 4)) << "copy " << i;
}

// Prefill-sized groups of 4-bit experts on the wgmma GEMMs (moe_grouped_wgmma: the weights dequantized in
// the CTA, the down's x the gate_up's silu_mul made as it is permuted) give the bits of the grouped kernels
// (set_moe_wgmma(false)): tiles of 64 slots (97 and 150 tokens over 16 experts, top-8) and 128 (300), groups
// of 64 and 128, subnormal and plain scale codes; a token's bits inside 128 copies of it (every slot of one
// expert's tiles the same row) equal its bits alone.
TEST_F(Moe, GroupedWgmmaEqualsTheGroupedKernels) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  const bool on0 = cuda::moe_wgmma();
  for (int group : {64, 128})
    for (bool subnormal : {true, false}) {
      SCOPED_TRACE("group " + std::to_string(group) + (subnormal ? ", subnormal codes" : ", plain codes"));
      cuda::set_mlx_subnormal_codes(subnormal);
      MoeWeights g = make_mlx_moe(*gpu, 8, true, 51 + group, 4, group);
      ASSERT_EQ(g.gate_up[0].subnormal_codes, subnormal);
      std::mt19937 rng(52);
      for (int n : {97, 150, 300}) expect_wgmma_bits(*gpu, g, random_bf16({n, kMlxH}, 1.f, rng));
      EXPECT_TRUE(g.prepared) << "the fused path did not run";
      expect_copies_bits(*gpu, g, random_bf16({1, kMlxH}, 1.f, rng), 128);
    }
  cuda::set_mlx_subnormal_codes(true);
  cuda::set_moe_wgmma(on0);
}

// bf16 experts on the same pipeline (W's raw rows by the experts' tensor maps, permuted in the CTA): the bits
// of the grouped mma.sync kernels at tiles of 64 and 128 slots, at the small test shape (K of 4 and 8 chunks:
// empty K slices) and at the 30B-A3B expert shape; and 256 copies of one row (256 pairs on each of 8
// experts; the grouping tile follows 2048 pairs over all E experts: 64 at E = 32, 128 at E = 16) each equal
// to that row alone.
TEST_F(Moe, GroupedWgmmaBf16EqualsTheGroupedKernels) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  const bool on0 = cuda::moe_wgmma(), bf0 = cuda::moe_wgmma_bf16();
  cuda::set_moe_wgmma_bf16(true);
  struct Shape {
    int64_t h, inter;
    int experts;
  };
  for (const Shape sh : {Shape{kH, kI, kE}, Shape{kMlxH, kMlxI, kMlxE}}) {
    SCOPED_TRACE("hidden " + std::to_string(sh.h) + ", inter " + std::to_string(sh.inter));
    MoeWeights g = make_moe(*gpu, 8, true, 61, sh.experts, sh.h, sh.inter);
    std::mt19937 rng(62);
    // pairs an active expert >= 8n / E: 56 (tiles of 64) and > 104 (tiles of 128)
    for (int n : {7 * sh.experts, 13 * sh.experts + 5})
      expect_wgmma_bits(*gpu, g, random_bf16({n, sh.h}, 1.f, rng));
    expect_copies_bits(*gpu, g, random_bf16({1, sh.h}, 1.f, rng), 256);
  }
  cuda::set_moe_wgmma_bf16(bf0);
  cuda::set_moe_wgmma(on0);
}

// Widths without a grouped kernel (here 6-bit) are refused by moe_fusable and run the host-routed path.
TEST_F(Moe, OtherMlxWidthsTakeTheHostRoutedPath) {
  MoeWeights g = make_mlx_moe(*gpu, 2, true, 15, 6, 64);
  ASSERT_EQ(g.gate_up[0].format, LinearWeight::Format::MlxAffine);
  std::mt19937 rng(16);
  const Tensor x = random_bf16({5, kMlxH}, 1.f, rng);
  EXPECT_FALSE(cuda::moe_fusable(gpu->upload(x), g));
  const auto out = run(*gpu, g, x);
  EXPECT_FALSE(g.prepared) << "the fused path ran";
  EXPECT_EQ(0, std::memcmp(out.data(), host_routed(*gpu, g, x).data(), out.size() * 4));
  for (float v : out) ASSERT_TRUE(std::isfinite(v));
}

// The tiny checkpoint's directory: the source tree, or the repository root as the working directory
// (device runs).
std::string tiny_mlx_dir() {
  const std::string built_in = std::string(TF_SOURCE_DIR) + "/tests/data/quant/qwen3-moe-mlx-4bit";
  return std::filesystem::exists(built_in) ? built_in : "tests/data/quant/qwen3-moe-mlx-4bit";
}

// A copy of the tiny checkpoint (files linked) whose config routes each token to `top_k` experts.
std::string with_top_k(const std::string& dir, int top_k) {
  namespace fs = std::filesystem;
  const fs::path out =
      fs::temp_directory_path() / ("tf_moe_mlx_top" + std::to_string(top_k) + "_" +
                                   std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
  fs::create_directories(out);
  for (const auto& f : fs::directory_iterator(dir)) {
    const fs::path to = out / f.path().filename();
    if (f.path().filename() == "config.json") continue;
    if (!fs::exists(to)) fs::create_symlink(fs::absolute(f.path()), to);
  }
  std::ifstream in(fs::path(dir) / "config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string cfg = ss.str();
  const std::string key = "\"num_experts_per_tok\": 2";
  const size_t at = cfg.find(key);
  EXPECT_NE(at, std::string::npos) << "config.json has no " << key;
  if (at != std::string::npos)
    cfg.replace(at, key.size(), "\"num_experts_per_tok\": " + std::to_string(top_k));
  std::ofstream(out / "config.json") << cfg;
  return out.string();
}

// Every position's logits of one 24-token prompt in one forward (prefill rows share tiles) on the GPU.
std::vector<float> tiny_logits(Backend& be, const std::string& dir) {
  std::vector<int32_t> toks;
  for (int i = 0; i < 24; ++i) toks.push_back((i * 37 + 11) % 200 + 1);
  return test::run_logits(be, dir, toks, int(toks.size()));
}

// The mlx-lm conversion (4-bit group 32 experts, stacked switch_mlp) takes the fused path, and with top_k
// 1 (combine weights exactly 1) its logits equal the host-routed path's bit for bit; with the shipped
// top_k 2 the two differ only by the combine's rounding (fp32 sum rounded once vs per rank).
TEST_F(Moe, TinyMlxCheckpointFusedEqualsHostRouted) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  const std::string dir = tiny_mlx_dir();
  {
    Checkpoint ckpt = Checkpoint::open(dir);
    auto model = load_model(ckpt, *gpu, 64);
    MoeWeights w = load_moe(ckpt, *gpu, model->spec(), "model.layers.0.mlp.");
    ASSERT_EQ(w.gate_up[0].format, LinearWeight::Format::MlxAffine);
    EXPECT_EQ(w.gate_up[0].bits, 4);
    EXPECT_TRUE(cuda::moe_fusable(gpu->alloc({1, model->spec().hidden}, DType::BF16), w));
  }
  for (int top_k : {1, 2}) {
    SCOPED_TRACE("top_k " + std::to_string(top_k));
    const std::string d = top_k == 2 ? dir : with_top_k(dir, top_k);
    const auto fused = tiny_logits(*gpu, d);
    cuda::set_moe_fused(false);
    const auto routed = tiny_logits(*gpu, d);
    cuda::set_moe_fused(true);
    ASSERT_EQ(fused.size(), routed.size());
    if (top_k == 1) {
      EXPECT_EQ(0, std::memcmp(fused.data(), routed.data(), fused.size() * 4));
    } else {
      double max_err = 0, max_abs = 0;
      for (size_t i = 0; i < fused.size(); ++i) {
        max_err = std::max(max_err, double(std::fabs(fused[i] - routed[i])));
        max_abs = std::max(max_abs, double(std::fabs(routed[i])));
      }
      EXPECT_GT(max_abs, 0.0);
      EXPECT_LT(max_err, 0.05 * max_abs);
    }
  }
}

// MoE models replay CUDA graphs (their fused MoE never syncs on the host): decode rounds (one row) and
// verify rounds (3 rows) of the tiny mlx-lm 4-bit and bf16 checkpoints give bitwise the eager forward's
// logits and sampled tokens, on two pools filled alike, and the graph rounds really replay.
TEST_F(Moe, TinyCheckpointsReplayGraphsWithEagerBits) {
  if (const char* v = std::getenv("TF_MOE_FUSED"); v && std::string(v) == "0")
    GTEST_SKIP() << "TF_MOE_FUSED=0 turns the fused path off";
  const std::string src = std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3-moe";
  const std::string bf16_dir = std::filesystem::exists(src) ? src : "tests/data/tiny/qwen3-moe";
  cuda::set_graph_capture_after(*gpu, 1);
  for (const std::string& dir : {tiny_mlx_dir(), bf16_dir}) {
    SCOPED_TRACE(dir);
    Checkpoint ckpt = Checkpoint::open(dir);
    auto model = load_model(ckpt, *gpu, 256);
    const auto& sp = model->spec();
    ASSERT_TRUE(sp.num_experts > 0);
    MoeWeights probe = load_moe(ckpt, *gpu, sp, "model.layers.0.mlp.");
    ASSERT_TRUE(gpu->moe_graph_safe(probe, sp.hidden));
    KvBlockPool eager(*gpu, sp.layers, sp.kv_heads, sp.head_dim, 16, 8),
        graphed(*gpu, sp.layers, sp.kv_heads, sp.head_dim, 16, 8);
    std::vector<int32_t> te, tg;
    ASSERT_TRUE(eager.reserve(te, 100));
    ASSERT_TRUE(graphed.reserve(tg, 100));
    ASSERT_EQ(te, tg);
    auto meta = [&](int at, const std::vector<int32_t>& toks) {
      BatchMeta m;
      m.block_size = 16;
      m.block_tables = {te};
      for (size_t i = 0; i < toks.size(); ++i) {
        const int p = at + int(i);
        m.tokens.push_back(toks[i]);
        m.positions.push_back(p);
        m.row_seq.push_back(0);
        m.slots.push_back(te[size_t(p / 16)] * 16 + p % 16);
      }
      return m;
    };
    std::vector<int32_t> prompt;
    for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 11) % 200 + 1);
    std::vector<float> unused;
    model->forward(meta(0, prompt), eager.layers(), {}, unused);
    model->forward(meta(0, prompt), graphed.layers(), {}, unused);
    const Backend::GraphStats before = gpu->graph_stats();
    int at = 20;
    int32_t next = 7;
    for (int round = 0; round < 14; ++round) {
      std::vector<int32_t> toks = {next};
      if (round % 4 == 3) toks.insert(toks.end(), {int32_t(round + 3), int32_t(2 * round + 5)});  // verify
      const BatchMeta m = meta(at, toks);
      std::vector<int32_t> rows;
      std::vector<RowSampling> sampling;
      for (int r = 0; r < m.rows(); ++r)
        rows.push_back(r), sampling.push_back({r % 2 ? 0.7f : 0.f, 99, int64_t(m.positions[size_t(r)]) + 1});
      std::vector<float> le, lg;
      std::vector<int32_t> ke, kg;
      model->forward(m, eager.layers(), rows, Model::Outputs{&le, &sampling, &ke, nullptr, false});
      model->forward(m, graphed.layers(), rows, Model::Outputs{&lg, &sampling, &kg, nullptr, true});
      ASSERT_EQ(ke, kg) << "round " << round;
      ASSERT_EQ(le.size(), size_t(m.rows()) * size_t(sp.vocab));
      ASSERT_EQ(0, std::memcmp(le.data(), lg.data(), le.size() * 4)) << "round " << round;
      at += m.rows();
      next = kg.back();
    }
    const Backend::GraphStats after = gpu->graph_stats();
    EXPECT_GT(after.captures, before.captures);
    EXPECT_GT(after.replays, before.replays);
    eager.release(te);
    graphed.release(tg);
  }
}

}  // namespace

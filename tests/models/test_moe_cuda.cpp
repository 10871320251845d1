// GPU: the fused Backend::moe of the CUDA backend (device routing, grouping, grouped GEMM, combine)
// against the CPU reference, bit-for-bit against the host-routed per-expert path where both round the same,
// and a token's output bits independent of how many other tokens share the call and which experts they
// chose (1..64 tokens), and the same bits when every fresh device allocation is NaN-poisoned. Label "gpu".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "ops/backend.h"
#include "ops/cuda/moe_fused.h"

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
MoeWeights make_moe(Backend& be, int top_k, bool norm, uint32_t seed) {
  std::mt19937 rng(seed);
  MoeWeights w;
  w.top_k = top_k, w.norm_topk_prob = norm;
  w.router = be.upload_linear(host_linear(kE, kH, 0.5f, rng));
  for (int e = 0; e < kE; ++e) {
    w.gate_up.push_back(be.upload_linear(host_linear(2 * kI, kH, 0.06f, rng)));
    w.down.push_back(be.upload_linear(host_linear(kH, kI, 0.09f, rng)));
  }
  return w;
}

std::vector<float> run(Backend& be, MoeWeights& w, const Tensor& host_x) {
  Tensor x = be.upload(host_x);
  if (x.dtype() != be.act_dtype()) {  // the CPU backend keeps f32
    std::vector<float> f = host_x.to_f32_vector();
    Tensor h = Tensor::empty(host_x.shape(), DType::F32);
    std::memcpy(h.raw(), f.data(), f.size() * 4);
    x = be.upload(h);
  }
  Tensor out = be.alloc({x.dim(0), kH}, be.act_dtype());
  be.moe(x, w, out);
  Tensor host = Tensor::empty({x.dim(0), kH}, DType::F32);
  be.to_host(out, host);
  return host.to_f32_vector();
}

Tensor rows_of(const Tensor& x, const std::vector<int>& rows) {
  Tensor out = Tensor::empty({int64_t(rows.size()), kH}, DType::BF16);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.data<uint16_t>() + i * kH, x.data<uint16_t>() + rows[i] * kH, kH * 2);
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

}  // namespace

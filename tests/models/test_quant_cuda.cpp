// GPU: the CUDA quantized linears (MLX 2-8-bit, FP8) against the CPU reference twin and bit-for-bit row
// invariance, and the quantized tiny Qwen3 conversions end to end on the GPU against the CPU backend.
// Label "gpu".
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>

#include "checkpoint/checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/cpu/quant.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/linear_wgmma.h"  // linear_wgmma_supported
#include "ops/cuda/quant_linear.h"
#include "run_logits.h"

using namespace tf;

namespace {

struct Gpu : ::testing::Test {
  void SetUp() override {
    std::string why;
    gpu = make_cuda_backend(0, &why);
    if (!gpu) GTEST_SKIP() << "no CUDA backend: " << why;
    cpu = make_cpu_backend();
  }
  std::unique_ptr<Backend> gpu, cpu;
};

// Host tensor of dtype `d` (F32, BF16 or F16) holding `v` rounded to it.
Tensor host_tensor(const std::vector<float>& v, std::vector<int64_t> shape, DType d) {
  Tensor t = Tensor::empty(std::move(shape), d);
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == DType::F32)
      t.data<float>()[i] = v[i];
    else
      t.data<uint16_t>()[i] = d == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
  }
  return t;
}

// A random MLX affine weight [n, k] with scales and biases of dtype `sd` (bf16, f16 or f32).
LinearWeight random_mlx(int64_t n, int64_t k, int bits, int group, DType sd, uint32_t seed) {
  std::mt19937 rng(seed);
  LinearWeight w;
  w.format = LinearWeight::Format::MlxAffine;
  w.bits = bits;
  w.group_size = group;
  w.out_features = n;
  w.in_features = k;
  w.weight = Tensor::empty({n, k * bits / 32}, DType::U32);
  for (int64_t i = 0; i < w.weight.numel(); ++i) w.weight.data<uint32_t>()[i] = rng();
  std::uniform_real_distribution<float> scale(0.001f, 0.02f), bias(-0.1f, 0.1f);
  std::vector<float> s(size_t(n * (k / group))), b(s.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = scale(rng) * 8.f / float(1 << bits), b[i] = bias(rng);
  w.scales = host_tensor(s, {n, k / group}, sd);
  w.biases = host_tensor(b, {n, k / group}, sd);
  return w;
}

// A random FP8 e4m3 weight [n, k] with f32 scales per row and `group` inputs (no NaN bytes).
LinearWeight random_fp8(int64_t n, int64_t k, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  LinearWeight w;
  w.format = LinearWeight::Format::Fp8Block;
  w.bits = 8;
  w.group_size = group;
  w.out_features = n;
  w.in_features = k;
  w.weight = Tensor::empty({n, k}, DType::F8_E4M3);
  for (int64_t i = 0; i < n * k; ++i) {
    uint8_t v = uint8_t(rng());
    if ((v & 0x7F) == 0x7F) v ^= 1;  // 0x7F/0xFF are NaN in e4m3
    w.weight.data<uint8_t>()[i] = v;
  }
  const int64_t groups = (k + group - 1) / group;
  w.scales = Tensor::empty({n, groups}, DType::F32);
  std::uniform_real_distribution<float> scale(1e-4f, 1e-3f);
  for (int64_t i = 0; i < n * groups; ++i) w.scales.data<float>()[i] = scale(rng);
  return w;
}

// Host activations [m, k] with bf16-representable values (as bf16 and as f32).
std::pair<Tensor, Tensor> random_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  Tensor b = Tensor::empty({m, k}, DType::BF16), f = Tensor::empty({m, k}, DType::F32);
  for (int64_t i = 0; i < m * k; ++i) {
    b.data<uint16_t>()[i] = f32_to_bf16(d(rng));
    f.data<float>()[i] = bf16_to_f32(b.data<uint16_t>()[i]);
  }
  return {b, f};
}

// linear(the first `rows` rows of xg, w) on the GPU, as f32 on the host ([rows, n]). `poison`: y filled with
// 0xFF bytes first (NaNs), so that a kernel that stores nothing cannot pass on what a freed block held.
Tensor linear_rows(Backend& gpu, const Tensor& xg, const LinearWeight& w, int64_t rows, int64_t n,
                   bool poison = false) {
  Tensor y = gpu.alloc({rows, n}, DType::F32), h = Tensor::empty({rows, n}, DType::F32);
  if (poison) {
    EXPECT_EQ(cudaMemsetAsync(y.raw(), 0xFF, y.nbytes(), cuda::stream_of(gpu)), cudaSuccess);
  }
  gpu.linear(xg.slice_rows(0, rows), w, y);
  gpu.to_host(y, h);
  return h;
}

// A 4-bit case's name for SCOPED_TRACE.
std::string case_name(int64_t n, int64_t k, int group, bool subnormal, bool bias) {
  return "N " + std::to_string(n) + ", K " + std::to_string(k) + ", group " + std::to_string(group) +
         (subnormal ? ", subnormal codes" : ", plain codes") + (bias ? ", bias" : "");
}

// An uploaded quantized weight as the bf16 linear on its dequantized weight (same bias).
LinearWeight dense_of(Backend& gpu, const LinearWeight& wg) {
  LinearWeight dense;
  dense.weight = cuda::dequantize_bf16(wg, cuda::stream_of(gpu));
  dense.bias = wg.bias;
  dense.in_features = wg.in_features, dense.out_features = wg.out_features;
  return dense;
}

// A kernel's rows (`fast`) bit for bit against q4_decode_kernel's (`one`), the bf16 linear on the dequantized
// weight (`ref`) and the same rows of a 24-row call (`big`), and not all zeros.
void expect_rows_equal(const Tensor& fast, const Tensor& one, const Tensor& ref, const Tensor& big) {
  EXPECT_EQ(std::memcmp(fast.raw(), one.raw(), fast.nbytes()), 0) << "differs from q4_decode_kernel";
  EXPECT_EQ(std::memcmp(fast.raw(), ref.raw(), fast.nbytes()), 0) << "differs from the bf16 linear";
  EXPECT_EQ(std::memcmp(fast.raw(), big.raw(), fast.nbytes()), 0) << "differs from those rows of 24";
  double norm = 0;
  for (int64_t i = 0; i < fast.numel(); ++i) norm += std::fabs(fast.data<float>()[i]);
  EXPECT_GT(norm, 0.0) << "all zeros";
}

}  // namespace

namespace {

struct QuantCase {
  std::string name;
  LinearWeight w;
};

std::vector<QuantCase> quant_cases(int64_t n, int64_t k) {
  std::vector<QuantCase> cases;
  uint32_t seed = 11;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128})
      cases.push_back({"mlx" + std::to_string(bits) + "-g" + std::to_string(group),
                       random_mlx(n, k, bits, group, DType::BF16, ++seed)});
  for (int bits : {3, 4, 8})
    cases.push_back(
        {"mlx" + std::to_string(bits) + "-g64-f16", random_mlx(n, k, bits, 64, DType::F16, ++seed)});
  cases.push_back({"mlx4-g32-f32", random_mlx(n, k, 4, 32, DType::F32, ++seed)});
  cases.push_back({"fp8-block128", random_fp8(n, k, 128, ++seed)});
  cases.push_back({"fp8-channel", random_fp8(n, k, int(k), ++seed)});
  return cases;
}

// Rounds to bf16 and back.
float bf16_round(float v) {
  return bf16_to_f32(f32_to_bf16(v));
}

}  // namespace

// The bf16 weight the kernels multiply by is the CPU twin's weight rounded to bf16 (a last-bit difference
// allowed where the 2-6-bit MLX path rounds scale*q + bias once instead of through f32).
TEST_F(Gpu, QuantDequantizeMatchesCpuTwin) {
  const int64_t N = 67, K = 1152;
  for (auto& c : quant_cases(N, K)) {
    SCOPED_TRACE(c.name);
    LinearWeight wg = gpu->upload_linear(c.w);
    ASSERT_EQ(wg.format, c.w.format) << "not uploaded packed";
    Tensor dev = cuda::dequantize_bf16(wg, cuda::stream_of(*gpu));
    Tensor got = Tensor::empty({N, K}, DType::F32);
    gpu->to_host(dev, got);
    Tensor want = dequantize_linear(c.w);
    int64_t off_by_ulp = 0;
    for (int64_t i = 0; i < N * K; ++i) {
      const float g = got.data<float>()[i], w = want.data<float>()[i];
      if (g == bf16_round(w)) continue;
      ++off_by_ulp;
      ASSERT_LE(std::fabs(g - w), std::ldexp(std::fabs(w), -7)) << "element " << i;
    }
    EXPECT_LE(off_by_ulp, N * K / 1000) << "values not equal to the CPU twin's rounded to bf16";
  }
}

// Every format: the GPU linear within the bf16-rounding bound of the CPU twin; bit-equal to the bf16
// linear on the dequantized weight for every M; a row's bits the same for M = 1, 2, 7, 11, 16, 25, 32, 64,
// 100, 256 (each token tile of the decode kernels: 8, 16 and 32 rows; 11 and 16: the two-team 4-bit kernel).
TEST_F(Gpu, QuantLinearMatchesCpuTwinAndIsRowInvariant) {
  const int64_t N = 301, K = 1152, M = 256, Mc = 37;
  auto [xb, xf] = random_x(M, K, 3);
  Tensor xg = gpu->upload(xb);
  Tensor bias = Tensor::empty({N}, DType::BF16);
  for (int64_t i = 0; i < N; ++i) bias.data<uint16_t>()[i] = f32_to_bf16(0.01f * float(i % 17) - 0.08f);
  for (auto& c : quant_cases(N, K)) {
    SCOPED_TRACE(c.name);
    const bool with_bias = c.w.bits == 4 || c.name == "fp8-block128";
    if (with_bias) c.w.bias = bias;
    const DType yd = c.w.bits == 5 ? DType::BF16 : DType::F32;  // one width checks bf16 outputs
    LinearWeight wg = gpu->upload_linear(c.w), wc = cpu->upload_linear(c.w);
    ASSERT_EQ(wg.format, c.w.format);
    auto run = [&](const LinearWeight& w, int64_t rows) {
      Tensor y = gpu->alloc({rows, N}, yd), h = Tensor::empty({rows, N}, DType::F32);
      Tensor xs = xg.slice_rows(0, rows);
      gpu->linear(xs, w, y);
      gpu->to_host(y, h);
      return h;
    };
    const Tensor full = run(wg, M);

    // Against the CPU twin (f32 weights): |err| <= 2^-8 * sum |x w| covers the bf16 weights.
    Tensor xc = xf.slice_rows(0, Mc), yc = Tensor::empty({Mc, N}, DType::F32);
    cpu->linear(xc, wc, yc);
    Tensor wf = dequantize_linear(c.w);
    for (int64_t r = 0; r < Mc; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double mag = 0;
        for (int64_t k = 0; k < K; ++k)
          mag += std::fabs(double(xf.data<float>()[r * K + k]) * wf.data<float>()[n * K + k]);
        const double tol = std::ldexp(mag, -8) + (yd == DType::BF16 ? std::ldexp(mag, -7) : 1e-6);
        ASSERT_NEAR(full.data<float>()[r * N + n], yc.data<float>()[r * N + n], tol) << r << ", " << n;
      }

    // Bit for bit: the dense bf16 linear on the dequantized weight, and any prefix of rows.
    LinearWeight dense;
    dense.weight = cuda::dequantize_bf16(wg, cuda::stream_of(*gpu));
    dense.bias = wg.bias;
    dense.in_features = K, dense.out_features = N;
    for (int64_t rows : {1, 2, 7, 11, 16, 25, 32, 64, 100, 256}) {
      SCOPED_TRACE(rows);
      const Tensor part = run(wg, rows), ref = run(dense, rows);
      EXPECT_EQ(std::memcmp(part.raw(), full.raw(), part.nbytes()), 0) << "row bits depend on M";
      EXPECT_EQ(std::memcmp(part.raw(), ref.raw(), part.nbytes()), 0) << "differs from the bf16 linear";
    }
    for (int ahead : {4, 8, 16}) {  // the forced load schedules: same arithmetic
      cuda::set_quant_loads_per_step(ahead);
      for (int64_t rows : {1, 16, 32}) {
        const Tensor part = run(wg, rows);
        EXPECT_EQ(std::memcmp(part.raw(), full.raw(), part.nbytes()), 0) << rows << " rows, " << ahead;
      }
    }
    cuda::set_quant_loads_per_step(0);
  }
}

// The 4-bit decode kernel's quad layout (16-byte loads of 4 chunks) where K slices start and end off a
// multiple of 4 chunks and K % 128 != 0 (the last chunks keep the shipped order): the dequantized weight
// equals the CPU twin's, and every load schedule gives the bits of the bf16 linear on it, for any M.
TEST_F(Gpu, Quant4BitQuadLayoutAtOddSlices) {
  const int64_t N = 40, K = 4160;  // 130 chunks: slices 16-17 chunks long, 2 chunks past the last quad
  LinearWeight w = random_mlx(N, K, 4, 64, DType::BF16, 77);
  w.bias = Tensor::empty({N}, DType::BF16);
  for (int64_t i = 0; i < N; ++i) w.bias.data<uint16_t>()[i] = f32_to_bf16(0.01f * float(i % 7) - 0.03f);
  LinearWeight wg = gpu->upload_linear(w);
  ASSERT_EQ(wg.format, w.format) << "not uploaded packed";
  LinearWeight dense;
  dense.weight = cuda::dequantize_bf16(wg, cuda::stream_of(*gpu));
  dense.bias = wg.bias;
  dense.in_features = K, dense.out_features = N;

  Tensor got = Tensor::empty({N, K}, DType::F32), want = dequantize_linear(w);
  gpu->to_host(dense.weight, got);
  for (int64_t i = 0; i < N * K; ++i) {
    const float g = got.data<float>()[i], v = want.data<float>()[i];
    if (g != bf16_round(v)) {
      ASSERT_LE(std::fabs(g - v), std::ldexp(std::fabs(v), -7)) << "element " << i;
    }
  }

  const int64_t M = 48;
  Tensor xg = gpu->upload(random_x(M, K, 5).first);
  auto run = [&](const LinearWeight& lw, int64_t rows) { return linear_rows(*gpu, xg, lw, rows, N); };
  const Tensor full = run(wg, M), ref = run(dense, M);
  ASSERT_EQ(std::memcmp(full.raw(), ref.raw(), full.nbytes()), 0) << "differs from the bf16 linear";
  for (int ahead : {0, 4, 8, 16}) {
    cuda::set_quant_loads_per_step(ahead);
    for (int64_t rows : {1, 3, 11, 16, 29}) {
      const Tensor part = run(wg, rows);
      EXPECT_EQ(std::memcmp(part.raw(), full.raw(), part.nbytes()), 0) << rows << " rows, " << ahead;
    }
  }
  cuda::set_quant_loads_per_step(0);
}

// One-row 4-bit calls whose tiles outnumber the persistent grid (q4_row2_kernel: one tile a block, two K
// slices a warp; the 30B-A3B qkv projection at one row) give the bits of the persistent kernel
// (set_q4_row2(false)), of the bf16 linear on the dequantized weight, and of the same row inside an 8-row
// call: K = 1024 and 2048, groups of 64 and 128, subnormal and plain scale codes, a bias, a partial last
// tile.
TEST_F(Gpu, Quant4BitOneRowTwoSlicesAWarpEqualsPersistent) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  const int64_t N = 16 * int64_t(5 * sms / 2) - 5;  // 2.5 tiles an SM: more than 2 blocks an SM hold
  uint32_t seed = 300;
  for (bool subnormal : {true, false})
    for (int64_t K : {1024, 2048})
      for (int group : {64, 128}) {
        SCOPED_TRACE("K " + std::to_string(K) + ", group " + std::to_string(group) +
                     (subnormal ? ", subnormal codes" : ", plain codes"));
        cuda::set_mlx_subnormal_codes(subnormal);
        LinearWeight w = random_mlx(N, K, 4, group, DType::BF16, ++seed);
        if (group == 64 && K == 2048) {
          w.bias = Tensor::empty({N}, DType::BF16);
          for (int64_t i = 0; i < N; ++i)
            w.bias.data<uint16_t>()[i] = f32_to_bf16(0.02f * float(i % 5) - 0.04f);
        }
        LinearWeight wg = gpu->upload_linear(w);
        ASSERT_EQ(wg.format, w.format) << "not uploaded packed";
        ASSERT_EQ(wg.subnormal_codes, subnormal);
        LinearWeight dense;
        dense.weight = cuda::dequantize_bf16(wg, cuda::stream_of(*gpu));
        dense.bias = wg.bias;
        dense.in_features = K, dense.out_features = N;
        Tensor xg = gpu->upload(random_x(8, K, seed).first);
        const Tensor ref = linear_rows(*gpu, xg, dense, 1, N);
        const Tensor eight = linear_rows(*gpu, xg, wg, 8, N);
        const Tensor two = linear_rows(*gpu, xg, wg, 1, N);
        cuda::set_q4_row2(false);
        const Tensor one = linear_rows(*gpu, xg, wg, 1, N);
        cuda::set_q4_row2(true);
        EXPECT_EQ(std::memcmp(two.raw(), one.raw(), two.nbytes()), 0) << "differs from the persistent kernel";
        EXPECT_EQ(std::memcmp(two.raw(), ref.raw(), two.nbytes()), 0) << "differs from the bf16 linear";
        EXPECT_EQ(std::memcmp(two.raw(), eight.raw(), two.nbytes()), 0) << "differs from row 0 of 8";
        double norm = 0;
        for (int64_t i = 0; i < N; ++i) norm += std::fabs(two.data<float>()[i]);
        EXPECT_GT(norm, 0.0) << "all zeros";
      }
  cuda::set_mlx_subnormal_codes(true);
}

// MLX 4-bit prefill calls (128 rows and more) on the wgmma linear that dequantizes the weight in the CTA
// (linear_wgmma_mlx4) give the bits of the bf16 linear on the dequantized copy (set_q4_prefill(false)) and,
// row for row, of the decode kernels' 16-row calls: every token tile (192, 128, 64), partial weight and token
// tiles, groups of 64 and 128, subnormal and plain scale codes, bf16 and f32 bias and output; and
// silu_mul_linear's 4-bit prefill (the activation made as x is permuted) against silu_mul then the linear on
// the dequantized copy.
TEST_F(Gpu, Quant4BitPrefillWgmmaEqualsDequantizedCopy) {
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "no wgmma on this device";
  struct Case {
    int64_t n, k;
    int group;
    bool subnormal;
    DType bias, y;  // bias U8: none
  };
  const Case cases[] = {{4096, 2048, 64, true, DType::BF16, DType::F32},
                        {1000, 4096, 128, false, DType::F32, DType::BF16},
                        {301, 1152, 64, false, DType::U8, DType::F32},
                        {2048, 768, 128, true, DType::U8, DType::BF16},
                        {12288, 1024, 64, true, DType::U8, DType::F32}};
  const bool prefill0 = cuda::q4_prefill();
  cuda::set_q4_prefill(true);
  uint32_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name(c.n, c.k, c.group, c.subnormal, c.bias != DType::U8));
    cuda::set_mlx_subnormal_codes(c.subnormal);
    LinearWeight w = random_mlx(c.n, c.k, 4, c.group, DType::BF16, ++seed);
    if (c.bias != DType::U8) {
      std::vector<float> b(size_t(c.n));
      for (int64_t i = 0; i < c.n; ++i) b[size_t(i)] = 0.02f * float(i % 9) - 0.07f;
      w.bias = host_tensor(b, {c.n}, c.bias);
    }
    LinearWeight wg = gpu->upload_linear(w);
    ASSERT_EQ(wg.format, w.format) << "not uploaded packed";
    ASSERT_EQ(wg.subnormal_codes, c.subnormal);
    const int64_t M = 517;
    Tensor xg = gpu->upload(random_x(M, c.k, ++seed).first);
    auto run = [&](int64_t rows) {
      Tensor y = gpu->alloc({rows, c.n}, c.y), h = Tensor::empty({rows, c.n}, DType::F32);
      gpu->linear(xg.slice_rows(0, rows), wg, y);
      gpu->to_host(y, h);
      return h;
    };
    for (int64_t rows : {int64_t(128), int64_t(200), M}) {
      SCOPED_TRACE(rows);
      const uint64_t before = cuda::linear_wgmma_mlx4_launches();
      const Tensor got = run(rows);
      EXPECT_EQ(cuda::linear_wgmma_mlx4_launches(), before + 1) << "the in-CTA dequantization did not run";
      cuda::set_q4_prefill(false);
      const Tensor ref = run(rows), head = run(16);
      cuda::set_q4_prefill(true);
      EXPECT_EQ(cuda::linear_wgmma_mlx4_launches(), before + 1);
      EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), got.nbytes()), 0) << "differs from the dequantized copy's";
      EXPECT_EQ(std::memcmp(got.raw(), head.raw(), head.nbytes()), 0)
          << "rows 0-15 differ from a 16-row call";
      for (int bn : {64, 128, 192}) {  // every token tile (the call's own is the grid estimate's)
        cuda::set_linear_wgmma_mlx4_tokens(bn);
        const Tensor tile = run(rows);
        cuda::set_linear_wgmma_mlx4_tokens(0);
        EXPECT_EQ(std::memcmp(got.raw(), tile.raw(), got.nbytes()), 0) << "token tile " << bn;
      }
      double norm = 0;
      for (int64_t i = 0; i < got.numel(); ++i) norm += std::fabs(got.data<float>()[i]);
      EXPECT_GT(norm, 0.0) << "all zeros";
    }
    // The MLP's down as the layer calls it (silu_mul_linear): the activation made as x is permuted.
    const int64_t rows = 200;
    Tensor gu = gpu->upload(random_x(rows, 2 * c.k, ++seed).first);
    auto down = [&] {
      Tensor act = gpu->alloc({rows, c.k}, DType::BF16), y = gpu->alloc({rows, c.n}, c.y);
      Tensor h = Tensor::empty({rows, c.n}, DType::F32);
      gpu->silu_mul_linear(gu, wg, act, y);
      gpu->to_host(y, h);
      return h;
    };
    const uint64_t before = cuda::linear_wgmma_mlx4_launches();
    const Tensor got = down();
    EXPECT_EQ(cuda::linear_wgmma_mlx4_launches(), before + 1)
        << "silu: the in-CTA dequantization did not run";
    cuda::set_q4_prefill(false);
    const Tensor ref = down();
    cuda::set_q4_prefill(true);
    EXPECT_EQ(std::memcmp(got.raw(), ref.raw(), got.nbytes()), 0)
        << "silu: differs from silu_mul + the linear";
  }
  cuda::set_q4_prefill(prefill0);
  cuda::set_mlx_subnormal_codes(true);
}

// MLX 4-bit calls of 9-16 rows with two 16-feature groups a warp (q4_pair_kernel) give the bits of
// q4_decode_kernel (set_q4_pair(0)), of the bf16 linear on the dequantized weight, and of the same rows
// inside a 24-row call: K with whole quads a slice (4096, 12288: chained tiles), with chunks outside quads
// (4160: slices of 16-17 chunks; 1536: of 6), groups of 64 and 128, subnormal and plain scale codes, a bias,
// widths with a partial last group of 16 and a partial last tile, and more tiles than the persistent grid
// holds.
TEST_F(Gpu, Quant4BitSixteenRowsTwoGroupsAWarpEqualOneGroup) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  struct Case {
    int64_t n, k;
    int group;
    bool subnormal, bias;
  };
  const int64_t wide = 32 * int64_t(5 * sms) - 5;  // 2.5 tiles a block at two blocks an SM
  const Case cases[] = {{wide, 4096, 64, true, false},  {4104, 4096, 128, true, true},
                        {40, 4160, 64, false, true},    {72, 1536, 64, true, false},
                        {4096, 12288, 64, true, false}, {24, 4096, 64, false, false},
                        {wide, 4096, 128, false, true}};
  const int mode0 = cuda::q4_pair_mode();
  uint32_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE(case_name(c.n, c.k, c.group, c.subnormal, c.bias));
    cuda::set_mlx_subnormal_codes(c.subnormal);
    LinearWeight w = random_mlx(c.n, c.k, 4, c.group, DType::BF16, ++seed);
    if (c.bias) {
      w.bias = Tensor::empty({c.n}, DType::BF16);
      for (int64_t i = 0; i < c.n; ++i)
        w.bias.data<uint16_t>()[i] = f32_to_bf16(0.02f * float(i % 5) - 0.04f);
    }
    LinearWeight wg = gpu->upload_linear(w);
    ASSERT_EQ(wg.format, w.format) << "not uploaded packed";
    ASSERT_EQ(wg.subnormal_codes, c.subnormal);
    const LinearWeight dense = dense_of(*gpu, wg);
    Tensor xg = gpu->upload(random_x(24, c.k, seed).first);
    cuda::set_q4_pair(2);
    const Tensor big = linear_rows(*gpu, xg, wg, 24, c.n);
    for (int64_t rows : {9, 12, 16}) {
      SCOPED_TRACE(std::to_string(rows) + " rows");
      cuda::set_q4_pair(2);
      const Tensor pair = linear_rows(*gpu, xg, wg, rows, c.n);
      cuda::set_q4_pair(0);
      const Tensor one = linear_rows(*gpu, xg, wg, rows, c.n);
      expect_rows_equal(pair, one, linear_rows(*gpu, xg, dense, rows, c.n), big);
    }
  }
  cuda::set_q4_pair(mode0);
  cuda::set_mlx_subnormal_codes(true);
}

namespace {
// A case of the 16-row 4-bit kernels' tests: an MLX 4-bit [n, k] weight, its groups and scale codes, with or
// without a bias.
struct KsCase {
  int64_t n, k;
  int group;
  bool subnormal, bias;
};
// The case's random weight (seed; the scale codes set as the case says), features 0-15 all negative (scales
// and biases negated: scale q + bias < 0 for q >= 0, so that a zero x row's products there are all -0), the
// bias when asked.
LinearWeight ks_case_weight(const KsCase& c, uint32_t seed) {
  cuda::set_mlx_subnormal_codes(c.subnormal);
  LinearWeight w = random_mlx(c.n, c.k, 4, c.group, DType::BF16, seed);
  for (int64_t i = 0; i < 16 * (c.k / c.group); ++i) {
    w.scales.data<uint16_t>()[i] |= 0x8000u;
    w.biases.data<uint16_t>()[i] |= 0x8000u;
  }
  if (c.bias) {
    w.bias = Tensor::empty({c.n}, DType::F32);
    for (int64_t i = 0; i < c.n; ++i) w.bias.data<float>()[i] = 0.03f * float(i % 7) - 0.09f;
  }
  return w;
}

// The first `rows` rows of xg through wg with the kernels as `off` sets them (the reference: returned, f32),
// then as `on` sets them: f32 and bf16 outputs bit for bit the same, the f32 ones also the bf16 linear on the
// dequantized weight's (`dense`) and the same rows of `big`, and `launches` (the kernel's counter) two more.
Tensor expect_fast_rows(Backend& gpu, const Tensor& xg, const LinearWeight& wg, const LinearWeight& dense,
                        const Tensor& big, int64_t rows, int64_t n, const std::function<void()>& off,
                        const std::function<void()>& on, long (*launches)(), const char* who) {
  off();
  const Tensor one = linear_rows(gpu, xg, wg, rows, n);
  Tensor yb = gpu.alloc({rows, n}, DType::BF16);
  Tensor one16 = Tensor::empty({rows, n}, DType::BF16), fast16 = Tensor::empty({rows, n}, DType::BF16);
  gpu.linear(xg.slice_rows(0, rows), wg, yb);
  gpu.to_host(yb, one16);
  const Tensor ref = linear_rows(gpu, xg, dense, rows, n);
  on();
  const long launched = launches();
  const Tensor fast = linear_rows(gpu, xg, wg, rows, n, true);
  EXPECT_EQ(cudaMemsetAsync(yb.raw(), 0xFF, yb.nbytes(), cuda::stream_of(gpu)), cudaSuccess);  // (poison)
  gpu.linear(xg.slice_rows(0, rows), wg, yb);
  gpu.to_host(yb, fast16);
  EXPECT_EQ(launches(), launched + 2) << who << " did not take the calls";
  expect_rows_equal(fast, one, ref, big);
  EXPECT_EQ(std::memcmp(fast16.raw(), one16.raw(), fast16.nbytes()), 0) << "bf16 differs";
  return one;
}

}  // namespace

// q4_wg_kernel (quant_wg.cu: warpgroup MMAs, x in shared memory, warpgroups over the K slices of a
// 64-feature tile) gives the bits of q4_decode_kernel (q4_wg and q4_pair off), of the bf16 linear on the
// dequantized weight and of the same rows of a 24-row call, at 1-16 rows, K = 1024-4096, groups of 64 and
// 128, both scale codes, widths that are not whole tiles and that leave CTAs several tiles, f32 and bf16
// outputs, with and without a bias. A zero x row against 16 all-negative weight rows (every product of
// their chains -0) checks the chains' signed zeros. Runs where wgmma exists (sm_90a), else skips.
TEST_F(Gpu, Quant4BitWarpgroupKernelEqualsDecodeKernel) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "no wgmma on this device";
  const int64_t wide = 64 * int64_t(2 * sms) + 40;  // two tiles a CTA and a partial third
  const KsCase cases[] = {{wide, 4096, 64, true, false}, {4104, 4096, 128, true, true},
                          {200, 2048, 64, false, true},  {wide, 2048, 128, true, true},
                          {24, 4096, 64, false, false},  {136, 1024, 64, true, false},
                          {wide, 3072, 64, false, true}};
  const int wg0 = cuda::q4_wg_mode(), cfg0 = cuda::q4_wg_config(), pair0 = cuda::q4_pair_mode();
  uint32_t seed = 900;
  for (const KsCase& c : cases) {
    SCOPED_TRACE(case_name(c.n, c.k, c.group, c.subnormal, c.bias));
    const LinearWeight w = ks_case_weight(c, ++seed);
    LinearWeight wg = gpu->upload_linear(w);
    ASSERT_EQ(wg.format, w.format) << "not uploaded packed";
    const LinearWeight dense = dense_of(*gpu, wg);
    Tensor xh = random_x(24, c.k, seed).first;
    for (int64_t i = 0; i < c.k; ++i) xh.data<uint16_t>()[5 * c.k + i] = 0;  // row 5: zeros
    Tensor xg = gpu->upload(xh);
    cuda::set_q4_wg(0);
    const Tensor big = linear_rows(*gpu, xg, wg, 24, c.n);
    for (int64_t rows : {1, 3, 6, 8, 9, 12, 16}) {
      SCOPED_TRACE(std::to_string(rows) + " rows");
      cuda::set_q4_wg(2);
      cuda::set_q4_wg_config(int(rows % 2));  // each configuration at some row counts
      const Tensor fast = linear_rows(*gpu, xg, wg, rows, c.n, true);
      Tensor yb = gpu->alloc({rows, c.n}, DType::BF16), fast16 = Tensor::empty({rows, c.n}, DType::BF16);
      cuda::set_q4_wg_config(int((rows + 1) % 2));
      gpu->linear(xg.slice_rows(0, rows), wg, yb);
      gpu->to_host(yb, fast16);
      cuda::set_q4_wg(0);
      cuda::set_q4_pair(0);
      const Tensor one = linear_rows(*gpu, xg, wg, rows, c.n);
      Tensor one16 = Tensor::empty({rows, c.n}, DType::BF16);
      gpu->linear(xg.slice_rows(0, rows), wg, yb);
      gpu->to_host(yb, one16);
      cuda::set_q4_pair(pair0);
      expect_rows_equal(fast, one, linear_rows(*gpu, xg, dense, rows, c.n), big);
      EXPECT_EQ(std::memcmp(fast16.raw(), one16.raw(), fast16.nbytes()), 0)
          << "bf16 differs from q4_decode_kernel";
    }
  }
  cuda::set_q4_wg(wg0);
  cuda::set_q4_wg_config(cfg0);
  cuda::set_q4_pair(pair0);
  cuda::set_mlx_subnormal_codes(true);
}

// q4_ks_kernel (K slices split across CTAs, each CTA holding its slice of x; the slice partials added in
// slice order by a tile's last warpgroup, or with the fold in a cluster by slice 0's) in configurations
// `cfgs` gives the bits of q4_decode_kernel (q4_ks, q4_wg and q4_pair off), of the bf16 linear on the
// dequantized weight and of the same rows of a 24-row call, at 1-16 rows, K = 1024-12288, groups of 64 and
// 128, both scale codes, widths that are not whole tiles and that leave warpgroups several tiles, f32 and
// bf16 outputs, with and without a bias; each call's tickets or barriers left ready for the next (every case
// runs many calls in a row). Counts its launches, so a fallback cannot pass silently. A zero x row against 16
// all-negative weight rows checks the signed zeros. The narrower modes (3: the down only, 4: widths <= 8192)
// take exactly their calls.
namespace {
void expect_ks_equals_decode(Backend& gpu, const std::vector<int>& cfgs) {
  const KsCase cases[] = {{4096, 12288, 64, true, false}, {200, 4096, 128, true, true},
                          {10280, 2048, 64, false, true}, {24, 1024, 64, false, false},
                          {4104, 3072, 64, true, true},   {24576, 1024, 128, true, false}};
  const int ks0 = cuda::q4_ks_mode(), cfg0 = cuda::q4_ks_config(), wg0 = cuda::q4_wg_mode(),
            pair0 = cuda::q4_pair_mode();
  uint32_t seed = 1900;
  cuda::set_q4_ks(2);  // (before the uploads: the backend makes the workspace at an upload with the mode on)
  for (const KsCase& c : cases) {
    SCOPED_TRACE(case_name(c.n, c.k, c.group, c.subnormal, c.bias));
    const LinearWeight w = ks_case_weight(c, ++seed);
    LinearWeight wg = gpu.upload_linear(w);
    ASSERT_EQ(wg.format, w.format) << "not uploaded packed";
    ASSERT_TRUE(cuda::q4_ks_takes(wg));
    const LinearWeight dense = dense_of(gpu, wg);
    Tensor xh = random_x(24, c.k, seed).first;
    for (int64_t i = 0; i < c.k; ++i) xh.data<uint16_t>()[5 * c.k + i] = 0;  // row 5: zeros
    Tensor xg = gpu.upload(xh);
    cuda::set_q4_ks(0);
    const Tensor big = linear_rows(gpu, xg, wg, 24, c.n);
    for (int64_t rows : {1, 2, 5, 8, 9, 13, 16}) {
      SCOPED_TRACE(std::to_string(rows) + " rows");
      cuda::set_q4_ks(0);
      cuda::set_q4_wg(0);
      cuda::set_q4_pair(0);
      Tensor yb = gpu.alloc({rows, c.n}, DType::BF16);
      const Tensor one = linear_rows(gpu, xg, wg, rows, c.n);
      Tensor one16 = Tensor::empty({rows, c.n}, DType::BF16);
      gpu.linear(xg.slice_rows(0, rows), wg, yb);
      gpu.to_host(yb, one16);
      cuda::set_q4_wg(wg0);
      cuda::set_q4_pair(pair0);
      const Tensor ref = linear_rows(gpu, xg, dense, rows, c.n);
      cuda::set_q4_ks(2);
      for (int cfg : cfgs) {
        SCOPED_TRACE("configuration " + std::to_string(cfg));
        cuda::set_q4_ks_config(cfg);
        const long launched = cuda::q4_ks_launches();
        const Tensor fast = linear_rows(gpu, xg, wg, rows, c.n, true);
        EXPECT_EQ(cuda::q4_ks_launches(), launched + 1) << "q4_ks_kernel did not take the call";
        expect_rows_equal(fast, one, ref, big);
      }
      cuda::set_q4_ks_config(cfgs[size_t(rows) % cfgs.size()]);
      Tensor fast16 = Tensor::empty({rows, c.n}, DType::BF16);
      ASSERT_EQ(cudaMemsetAsync(yb.raw(), 0xFF, yb.nbytes(), cuda::stream_of(gpu)), cudaSuccess);  // (poison)
      gpu.linear(xg.slice_rows(0, rows), wg, yb);
      gpu.to_host(yb, fast16);
      EXPECT_EQ(std::memcmp(fast16.raw(), one16.raw(), fast16.nbytes()), 0)
          << "bf16 differs from q4_decode_kernel";
      for (int mode : {3, 4}) {  // the narrower modes: the down only, widths <= 8192 only
        if (rows < 9) break;
        cuda::set_q4_ks(mode);
        const long before = cuda::q4_ks_launches();
        const Tensor sel = linear_rows(gpu, xg, wg, rows, c.n, true);
        const bool takes = mode == 3 ? c.k > 4096 : c.n <= 8192;
        EXPECT_EQ(cuda::q4_ks_launches(), before + (takes ? 1 : 0)) << "mode " << mode;
        EXPECT_EQ(std::memcmp(sel.raw(), one.raw(), sel.nbytes()), 0) << "mode " << mode;
      }
    }
  }
  cuda::set_q4_ks(ks0);
  cuda::set_q4_ks_config(cfg0);
  cuda::set_mlx_subnormal_codes(true);
}
}  // namespace

// Configurations 0-4: the ticket fold through the workspace. Needs wgmma (sm_90a).
TEST_F(Gpu, Quant4BitKSliceKernelEqualsDecodeKernel) {
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "no wgmma on this device";
  expect_ks_equals_decode(*gpu, {0, 1, 2, 3, 4});
}

// Configurations 5-6: the fold in a cluster of the 8 slices (st.async into slice 0's shared memory).
TEST_F(Gpu, Quant4BitKSliceClusterFoldEqualsDecodeKernel) {
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "no wgmma on this device";
  expect_ks_equals_decode(*gpu, {5, 6});
}

// 17-32 rows: q4_ks_kernel's 32-token instance (m64n32k16 steps, set_q4_ks32) against q4_decode_kernel's
// 32-row tiles (the mode off), the bf16 linear on the dequantized weight and the same rows of a 40-row call,
// bit for bit, f32 and bf16 outputs; it must take every call (launches counted); its K > 4096 mode exactly
// those calls; and the call split in two (16 rows and the rest, set_q4_split32). Needs wgmma (sm_90a).
TEST_F(Gpu, Quant4BitKSlice32RowsEqualsDecodeKernel) {
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "no wgmma on this device";
  const KsCase cases[] = {{4096, 12288, 64, true, false},
                          {200, 4096, 128, true, true},
                          {10280, 2048, 64, false, true},
                          {24, 1024, 64, false, false},
                          {24576, 1024, 128, true, false}};
  const int ks0 = cuda::q4_ks_mode(), ks320 = cuda::q4_ks32_mode(), split0 = cuda::q4_split32_mode(),
            wgc0 = cuda::q4_wgc_mode();
  uint32_t seed = 2900;
  cuda::set_q4_wgc(0);      // (q4_wg's clusters would take the 17-32-row calls of K <= 4096 and the pieces)
  cuda::set_q4_split32(0);  // (the rows in one call unless said)
  cuda::set_q4_ks(3);  // (before the uploads: the backend makes the workspace at an upload with the mode on)
  for (const KsCase& c : cases) {
    SCOPED_TRACE(case_name(c.n, c.k, c.group, c.subnormal, c.bias));
    LinearWeight wg = gpu->upload_linear(ks_case_weight(c, ++seed));
    ASSERT_TRUE(cuda::q4_ks_takes(wg));
    const LinearWeight dense = dense_of(*gpu, wg);
    Tensor xh = random_x(40, c.k, seed).first;
    for (int64_t i = 0; i < c.k; ++i) xh.data<uint16_t>()[19 * c.k + i] = 0;  // row 19: zeros
    Tensor xg = gpu->upload(xh);
    cuda::set_q4_ks32(0);
    const Tensor big = linear_rows(*gpu, xg, wg, 40, c.n);
    for (int64_t rows : {17, 20, 25, 32}) {
      SCOPED_TRACE(std::to_string(rows) + " rows");
      const Tensor one = expect_fast_rows(
          *gpu, xg, wg, dense, big, rows, c.n, [] { cuda::set_q4_ks32(0); }, [] { cuda::set_q4_ks32(1); },
          cuda::q4_ks_launches, "q4_ks_kernel");
      cuda::set_q4_ks32(2);  // the down only (K > 4096)
      const long before = cuda::q4_ks_launches();
      const Tensor sel = linear_rows(*gpu, xg, wg, rows, c.n, true);
      EXPECT_EQ(cuda::q4_ks_launches(), before + (c.k > 4096 ? 1 : 0)) << "mode 2";
      EXPECT_EQ(std::memcmp(sel.raw(), one.raw(), sel.nbytes()), 0) << "mode 2";
      for (int split : {1, 2}) {  // as two calls, 16 rows and the rest (set_q4_split32)
        cuda::set_q4_split32(split);
        const Tensor two = linear_rows(*gpu, xg, wg, rows, c.n, true);
        EXPECT_EQ(std::memcmp(two.raw(), one.raw(), two.nbytes()), 0) << "split mode " << split;
      }
      cuda::set_q4_split32(0);
    }
    for (int split : {3, 4}) {  // 40 rows in pieces (16 off the front of widths > 8192, 32 of K > 4096)
      cuda::set_q4_split32(split);
      const Tensor pieces = linear_rows(*gpu, xg, wg, 40, c.n, true);
      EXPECT_EQ(std::memcmp(pieces.raw(), big.raw(), big.nbytes()), 0) << "40 rows, split mode " << split;
    }
    cuda::set_q4_split32(0);
  }
  cuda::set_q4_split32(split0);
  cuda::set_q4_ks(ks0);
  cuda::set_q4_ks32(ks320);
  cuda::set_q4_wgc(wgc0);
  cuda::set_mlx_subnormal_codes(true);
}

// q4_wg_kernel's cluster instances (a tile's 8 K slices over two CTAs, rank 0's sum pushed into rank 1, which
// adds its own: set_q4_wgc) at 17-32 rows (32 token rows a wgmma) give the bits
// of q4_decode_kernel (every other 4-bit kernel off), of the bf16 linear on the dequantized weight and of the
// same rows of a 40-row call, f32 and bf16 outputs, with and without a bias, K = 1024-4096, groups of 64 and
// 128, both scale codes, widths that leave clusters several tiles and a partial one; they take every call
// (launches counted); and 40 rows in pieces of 32 (the pieces rule with the clusters on, both modes) give the
// 40-row call's bits. Zero x rows (5 and 19) against 16 all-negative weight rows check the chains' signed
// zeros.
// Needs wgmma (sm_90a).
TEST_F(Gpu, Quant4BitWarpgroupClusterEqualsDecodeKernel) {
  int dev = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), cudaSuccess);
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "no wgmma on this device";
  const int64_t wide = 64 * int64_t(3 * sms / 2) + 40;  // clusters of several tiles, the last one partial
  const KsCase cases[] = {{wide, 4096, 64, true, false},
                          {4104, 4096, 128, true, true},
                          {200, 2048, 64, false, true},
                          {24, 1024, 64, false, false},
                          {wide, 3072, 64, false, true}};
  const int wg0 = cuda::q4_wg_mode(), pair0 = cuda::q4_pair_mode(), ks0 = cuda::q4_ks_mode(),
            ks320 = cuda::q4_ks32_mode(), split0 = cuda::q4_split32_mode(), wgc0 = cuda::q4_wgc_mode();
  auto all_off = [] {
    cuda::set_q4_wg(0), cuda::set_q4_pair(0), cuda::set_q4_ks(0), cuda::set_q4_ks32(0);
    cuda::set_q4_split32(0), cuda::set_q4_wgc(0);
  };
  uint32_t seed = 3900;
  for (const KsCase& c : cases) {
    SCOPED_TRACE(case_name(c.n, c.k, c.group, c.subnormal, c.bias));
    all_off();
    LinearWeight wg = gpu->upload_linear(ks_case_weight(c, ++seed));
    ASSERT_EQ(wg.format, LinearWeight::Format::MlxAffine) << "not uploaded packed";
    const LinearWeight dense = dense_of(*gpu, wg);
    Tensor xh = random_x(40, c.k, seed).first;
    for (int64_t r : {5, 19})
      for (int64_t i = 0; i < c.k; ++i) xh.data<uint16_t>()[r * c.k + i] = 0;
    Tensor xg = gpu->upload(xh);
    const Tensor big = linear_rows(*gpu, xg, wg, 40, c.n);
    for (int64_t rows : {17, 20, 25, 32}) {
      SCOPED_TRACE(std::to_string(rows) + " rows");
      expect_fast_rows(
          *gpu, xg, wg, dense, big, rows, c.n, all_off, [] { cuda::set_q4_wgc(1); }, cuda::q4_wgc_launches,
          "the cluster instance");
    }
    for (int mode : {1, 2}) {  // 40 rows: 32 off the front on a cluster instance (mode 1: wide weights)
      all_off();
      cuda::set_q4_wgc(mode), cuda::set_q4_split32(4);
      const long launched = cuda::q4_wgc_launches();
      const Tensor pieces = linear_rows(*gpu, xg, wg, 40, c.n, true);
      if (mode == 2) {
        EXPECT_EQ(cuda::q4_wgc_launches(), launched + 1) << "40 rows: no piece of 32 on a cluster";
      }
      EXPECT_EQ(std::memcmp(pieces.raw(), big.raw(), big.nbytes()), 0) << "40 rows in pieces, mode " << mode;
    }
  }
  cuda::set_q4_wg(wg0), cuda::set_q4_pair(pair0), cuda::set_q4_ks(ks0), cuda::set_q4_ks32(ks320);
  cuda::set_q4_split32(split0), cuda::set_q4_wgc(wgc0);
  cuda::set_mlx_subnormal_codes(true);
}

// MLX 4-bit scales stored times 2^133 (prescale_mlx4, what upload_linear does where every scale allows it)
// give the same dequantized bf16 weight and the same linear bits at every M as the plain scales, for groups
// of 32 (qlinear_kernel), 64 and 128 (q4_decode_kernel) and K with a partial quad; with scales at the edges
// of the range: the largest allowed (exponent field 121, both signs), subnormals and zeros. One scale of
// 2^-5 (exponent field 122) keeps the plain layout.
TEST_F(Gpu, Quant4BitSubnormalCodesEqualPlainScales) {
  const int64_t N = 301, M = 256;
  for (int64_t K : {int64_t(1152), int64_t(4160)})
    for (int group : {32, 64, 128}) {
      if (K % group) continue;
      SCOPED_TRACE("K " + std::to_string(K) + ", group " + std::to_string(group));
      LinearWeight w = random_mlx(N, K, 4, group, DType::BF16, uint32_t(K + group));
      auto* sc = w.scales.data<uint16_t>();
      const uint16_t edges[] = {0x3CFF, 0xBCFF, 0x3C80, 0x0001, 0x807F, 0x0040, 0x0000, 0x8000};
      for (size_t i = 0; i < std::size(edges); ++i) sc[(i * 997) % w.scales.numel()] = edges[i];
      w.bias = Tensor::empty({N}, DType::BF16);
      for (int64_t i = 0; i < N; ++i) w.bias.data<uint16_t>()[i] = f32_to_bf16(0.01f * float(i % 5) - 0.02f);

      cuda::set_mlx_subnormal_codes(false);
      const LinearWeight plain = gpu->upload_linear(w);
      cuda::set_mlx_subnormal_codes(true);
      const LinearWeight sub = gpu->upload_linear(w);
      ASSERT_FALSE(plain.subnormal_codes);
      ASSERT_TRUE(sub.subnormal_codes) << "scales below 2^-5 were not prescaled";

      Tensor dp = Tensor::empty({N, K}, DType::F32), ds = Tensor::empty({N, K}, DType::F32);
      gpu->to_host(cuda::dequantize_bf16(plain, cuda::stream_of(*gpu)), dp);
      gpu->to_host(cuda::dequantize_bf16(sub, cuda::stream_of(*gpu)), ds);
      ASSERT_EQ(0, std::memcmp(dp.raw(), ds.raw(), dp.nbytes())) << "dequantized weights differ";

      Tensor xg = gpu->upload(random_x(M, K, 9).first);
      for (int64_t rows : {1, 2, 7, 16, 25, 64, 100, 256}) {
        const Tensor a = linear_rows(*gpu, xg, plain, rows, N), b = linear_rows(*gpu, xg, sub, rows, N);
        EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << rows << " rows";
      }

      sc[5] = 0x3D00;  // 2^-5: times 2^133 is 2^128, not a finite bf16
      EXPECT_FALSE(gpu->upload_linear(w).subnormal_codes) << "a scale of 2^-5 was prescaled";
    }
}

namespace {

std::vector<float> run_logits(Backend& be, const std::string& dir) {
  return test::run_logits(be, dir, {1, 17, 42, 99, 5, 250, 7, 300, 64, 2, 128, 33}, 12);
}

}  // namespace

TEST_F(Gpu, QuantizedTinyModelsMatchCpu) {
  for (const char* name : {"qwen3-mlx-mixed", "qwen3-mlx-5bit-g32", "qwen3-fp8-block", "qwen3-fp8-channel"}) {
    SCOPED_TRACE(name);
    // The built-in source path, or the repository root as the working directory (device runs).
    const std::string built_in = std::string(TF_SOURCE_DIR) + "/tests/data/quant/" + name;
    const std::string dir =
        std::filesystem::exists(built_in) ? built_in : std::string("tests/data/quant/") + name;
    const auto c = run_logits(*cpu, dir), g = run_logits(*gpu, dir);
    ASSERT_EQ(c.size(), g.size());
    double max_err = 0;
    for (size_t i = 0; i < c.size(); ++i) max_err = std::max(max_err, double(std::fabs(c[i] - g[i])));
    std::cerr << name << ": max |gpu - cpu| logit = " << max_err << "\n";
    EXPECT_LT(max_err, 0.1);  // bf16 activations on the GPU vs f32 on the CPU
  }
}

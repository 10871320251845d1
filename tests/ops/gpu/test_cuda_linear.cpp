// The bf16 linear's exactness promise across its kernels: for every M, every kernel choice (the decode
// kernel, linear_mid.cu, linear_tiled.cu, linear_wgmma.cu on sm_90, and the Auto dispatch) gives each row
// the exact bits of that row computed alone (M = 1) by the decode kernel; and that M = 1 row matches a
// double-precision CPU dot product within the bf16/fp32 error bound. K covers even slices (4096, 12288),
// uneven ones (1120 = 35 chunks) and empty ones (96 = 3 chunks); N covers a partial feature tile (16,
// 1040) and a full grid. Every linear_mid.cu tile (cuda::kMidTiles) runs forced at every M; on sm_90 the
// streaming kernel (linear_rs.cu) runs switched on.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"

namespace tf {
namespace {

constexpr int kMaxM = 512;
constexpr int kMs[] = {1, 8, 17, 31, 32, 33, 64, 65, 96, 128, 200, 256, 300, 512};

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Device buffer freed on scope exit.
struct Dev {
  void* p = nullptr;
  explicit Dev(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

std::vector<uint16_t> random_bf16(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> ud(lo, hi);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = f32_to_bf16(ud(rng));
  return v;
}

void upload(Dev& d, const void* h, size_t bytes) {
  ASSERT_EQ(cudaMemcpy(d.p, h, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}

// One output configuration: output dtype and bias (none, f32 or bf16).
struct Variant {
  DType y_dtype;
  int bias_kind;  // 0 none, 1 f32, 2 bf16
  const char* name;
};
constexpr Variant kVariants[] = {{DType::BF16, 0, "bf16 out, no bias"},
                                 {DType::F32, 1, "f32 out, f32 bias"},
                                 {DType::BF16, 2, "bf16 out, bf16 bias"},
                                 {DType::F32, 0, "f32 out, no bias"}};

class CudaLinear : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
    ASSERT_EQ(cudaStreamCreate(&s_), cudaSuccess);
  }
  void TearDown() override {
    cuda::set_linear_kernel(cuda::LinearKernel::Auto);
    cuda::set_linear_mid_features(0);
    cuda::set_linear_mid_tile(cuda::MidTile::Auto);
    cuda::reset_linear_rs();
    if (s_) cudaStreamDestroy(s_);
  }
  cudaStream_t s_ = nullptr;
};

const char* kernel_name(cuda::LinearKernel k) {
  switch (k) {
    case cuda::LinearKernel::Auto:
      return "auto";
    case cuda::LinearKernel::Decode:
      return "decode";
    case cuda::LinearKernel::Mid:
      return "mid";
    case cuda::LinearKernel::Tiled:
      return "tiled";
    case cuda::LinearKernel::Wgmma:
      return "wgmma";
  }
  return "?";
}

TEST_P(CudaLinear, EveryKernelGivesEachRowItsDecodeBits) {
  const int k = GetParam();
  std::mt19937 rng(1234 + k);
  for (int n : {16, 1024 + 16, 4096}) {
    const auto hx = random_bf16(size_t(kMaxM) * k, -1.f, 1.f, rng);
    const auto hw = random_bf16(size_t(n) * k, -0.5f, 0.5f, rng);
    const auto hb16 = random_bf16(n, -1.f, 1.f, rng);
    std::vector<float> hb32(n);
    for (int i = 0; i < n; ++i) hb32[i] = bf16_to_f32(hb16[i]) * 0.75f;  // not a bf16 twin of hb16
    std::vector<float> fx(2 * size_t(k)), fw(hw.size());  // rows 0, 1 of x and W as floats (CPU check)
    for (size_t i = 0; i < fx.size(); ++i) fx[i] = bf16_to_f32(hx[i]);
    for (size_t i = 0; i < fw.size(); ++i) fw[i] = bf16_to_f32(hw[i]);
    Dev x(hx.size() * 2), w(hw.size() * 2), b16(n * 2), b32(n * 4), y(size_t(kMaxM) * n * 4),
        ref(size_t(kMaxM) * n * 4);
    upload(x, hx.data(), hx.size() * 2);
    upload(w, hw.data(), hw.size() * 2);
    upload(b16, hb16.data(), n * 2);
    upload(b32, hb32.data(), n * 4);
    for (const Variant& v : kVariants) {
      SCOPED_TRACE("K=" + std::to_string(k) + " N=" + std::to_string(n) + " " + v.name);
      const size_t es = v.y_dtype == DType::F32 ? 4 : 2, row_bytes = es * n;
      const void* bias = v.bias_kind == 0 ? nullptr : v.bias_kind == 1 ? b32.p : b16.p;
      const DType bias_dt = v.bias_kind == 1 ? DType::F32 : DType::BF16;
      auto run = [&](const void* xp, void* yp, int m) {
        cuda::linear_bf16(xp, w.p, bias, bias_dt, yp, v.y_dtype, m, n, k, s_);
      };
      // Every row alone through the decode kernel.
      cuda::set_linear_kernel(cuda::LinearKernel::Decode);
      for (int r = 0; r < kMaxM; ++r)
        run(static_cast<const uint16_t*>(x.p) + size_t(r) * k, static_cast<char*>(ref.p) + r * row_bytes, 1);
      std::vector<unsigned char> href(kMaxM * row_bytes), hy(kMaxM * row_bytes);
      ASSERT_EQ(cudaMemcpyAsync(href.data(), ref.p, href.size(), cudaMemcpyDeviceToHost, s_), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);

      // M = 1 against a double-precision dot product (rows 0 and 1).
      for (int r = 0; r < 2; ++r)
        for (int j = 0; j < n; ++j) {
          double dot = 0, mag = 0;
          for (int i = 0; i < k; ++i) {
            const double p = double(fx[size_t(r) * k + i]) * fw[size_t(j) * k + i];
            dot += p, mag += std::fabs(p);
          }
          if (v.bias_kind == 1) dot += hb32[j];
          if (v.bias_kind == 2) dot += bf16_to_f32(hb16[j]);
          float got;
          if (es == 4)
            std::memcpy(&got, &href[r * row_bytes + j * 4], 4);
          else
            got = bf16_to_f32(*reinterpret_cast<const uint16_t*>(&href[r * row_bytes + j * 2]));
          const double tol = (es == 2 ? 8e-3 : 1e-5) * std::fabs(dot) + 1e-4 * mag;
          ASSERT_NEAR(got, dot, tol) << "row " << r << " feature " << j;
        }

      // The mid kernel: its tile by M and N, 32 / 64 features a CTA forced (tokens by M), then every tile
      // of cuda::kMidTiles forced (persistent grids walk several tiles a CTA at the larger N and M).
      // The wgmma kernel (its tile by the grid size; test_cuda_wgmma forces each) only on sm_90, and there
      // the streaming kernel (linear_rs.cu, M = 17..256) switched on under Auto and under the mid kernel.
      struct Choice {
        cuda::LinearKernel kern;
        int features;
        cuda::MidTile tile;
        bool rs;
      };
      std::vector<Choice> kernels = {{cuda::LinearKernel::Decode, 0, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Mid, 0, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Mid, 32, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Mid, 64, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Tiled, 0, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Auto, 0, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Wgmma, 0, cuda::MidTile::Auto, false},
                                     {cuda::LinearKernel::Auto, 0, cuda::MidTile::Auto, true},
                                     {cuda::LinearKernel::Mid, 0, cuda::MidTile::Auto, true}};
      for (cuda::MidTile tile : cuda::kMidTiles) kernels.push_back({cuda::LinearKernel::Mid, 0, tile, false});
      for (auto [kern, features, tile, rs] : kernels) {
        if ((kern == cuda::LinearKernel::Wgmma || rs) && !cuda::linear_wgmma_supported()) continue;
        cuda::set_linear_kernel(kern);
        cuda::set_linear_mid_features(features);
        cuda::set_linear_mid_tile(tile);
        // rs: the streaming kernel for every M in range; otherwise the default policy (it where measured
        // faster)
        if (rs)
          cuda::set_linear_rs(true);
        else
          cuda::reset_linear_rs();
        for (int m : kMs) {
          ASSERT_EQ(cudaMemsetAsync(y.p, 0xFF, m * row_bytes, s_), cudaSuccess);  // unwritten = NaN
          run(x.p, y.p, m);
          ASSERT_EQ(cudaMemcpyAsync(hy.data(), y.p, m * row_bytes, cudaMemcpyDeviceToHost, s_), cudaSuccess);
          ASSERT_EQ(cudaStreamSynchronize(s_), cudaSuccess);
          for (int r = 0; r < m; ++r)
            if (std::memcmp(&hy[r * row_bytes], &href[r * row_bytes], row_bytes) != 0) {
              ADD_FAILURE() << kernel_name(kern) << " kernel (mid features " << features << ", mid tile "
                            << cuda::linear_mid_tile_name(tile) << (rs ? ", streaming on" : "")
                            << "), M=" << m << ": row " << r << " differs from the row computed alone";
              break;
            }
        }
      }
      cuda::reset_linear_rs();
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(K, CudaLinear, ::testing::Values(4096, 12288, 1120, 96));

}  // namespace
}  // namespace tf

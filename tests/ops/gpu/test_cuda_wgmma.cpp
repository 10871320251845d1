// The wgmma prototype (src/ops/cuda/linear_wgmma.cu) against linear_bf16 at M = 1: every row of a
// batched wgmma call must have exactly the bits linear_bf16 gives that row alone (the row-invariance
// contract of docs/cuda-notes.md "Design"). First mismatching element printed with both bit patterns.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"

namespace tf {
namespace {

#define ASSERT_CUDA(x) ASSERT_EQ((x), cudaSuccess) << #x

bool have_hopper() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return false;
  cudaDeviceProp p{};
  return cudaGetDeviceProperties(&p, 0) == cudaSuccess && p.major == 9 && p.minor == 0;
}

std::vector<uint16_t> random_bf16(size_t count, uint32_t seed) {
  std::mt19937 r(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<uint16_t> v(count);
  for (auto& b : v) b = f32_to_bf16(nd(r));
  return v;
}

template <typename T>
struct Dev {
  T* p = nullptr;
  explicit Dev(size_t count) { EXPECT_EQ(cudaMalloc(&p, count * sizeof(T)), cudaSuccess); }
  ~Dev() { cudaFree(p); }
};

struct Shape {
  std::vector<int> ms;  // token counts (prefixes of one x)
  int n, k;
  bool f32_out_and_bias;
};

void check_shape(const Shape& sh) {
  const int max_m = *std::max_element(sh.ms.begin(), sh.ms.end()), n = sh.n, k = sh.k;
  const size_t out_bytes = sh.f32_out_and_bias ? 4 : 2;
  const DType y_dtype = sh.f32_out_and_bias ? DType::F32 : DType::BF16;
  const auto hx = random_bf16(size_t(max_m) * k, 11 + k), hw = random_bf16(size_t(n) * k, 29 + n);
  std::vector<float> hb(n);
  for (int i = 0; i < n; ++i) hb[i] = 0.001f * float(i % 97) - 0.05f;
  Dev<uint16_t> x(hx.size()), w(hw.size());
  Dev<float> bias(n);
  Dev<unsigned char> ref(size_t(max_m) * n * out_bytes), got(size_t(max_m) * n * out_bytes);
  ASSERT_CUDA(cudaMemcpy(x.p, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(w.p, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(bias.p, hb.data(), n * 4, cudaMemcpyHostToDevice));
  const void* b = sh.f32_out_and_bias ? bias.p : nullptr;
  // Reference: each row alone through linear_bf16 (the decode kernel, M = 1).
  for (int r = 0; r < max_m; ++r)
    cuda::linear_bf16(x.p + size_t(r) * k, w.p, b, DType::F32, ref.p + size_t(r) * n * out_bytes, y_dtype, 1,
                      n, k, 0);
  ASSERT_CUDA(cudaDeviceSynchronize());
  std::vector<unsigned char> href(size_t(max_m) * n * out_bytes), hgot(href.size());
  ASSERT_CUDA(cudaMemcpy(href.data(), ref.p, href.size(), cudaMemcpyDeviceToHost));
  for (int m : sh.ms) {
    ASSERT_CUDA(cudaMemset(got.p, 0xFF, size_t(m) * n * out_bytes));  // poison: NaN patterns
    cuda::linear_wgmma_bf16(x.p, w.p, b, DType::F32, got.p, y_dtype, m, n, k, 0);
    ASSERT_CUDA(cudaDeviceSynchronize());
    ASSERT_CUDA(cudaMemcpy(hgot.data(), got.p, size_t(m) * n * out_bytes, cudaMemcpyDeviceToHost));
    int bad_rows = 0;
    std::string first;
    for (int r = 0; r < m; ++r) {
      const unsigned char* a = href.data() + size_t(r) * n * out_bytes;
      const unsigned char* g = hgot.data() + size_t(r) * n * out_bytes;
      if (std::memcmp(a, g, size_t(n) * out_bytes) == 0) continue;
      if (bad_rows++ == 0)
        for (int c = 0; c < n; ++c) {
          uint32_t ra = 0, ga = 0;
          std::memcpy(&ra, a + size_t(c) * out_bytes, out_bytes);
          std::memcpy(&ga, g + size_t(c) * out_bytes, out_bytes);
          if (ra == ga) continue;
          char buf[160];
          std::snprintf(buf, sizeof buf, "first at y[%d][%d]: linear_bf16(M=1) %08x, wgmma %08x", r, c, ra,
                        ga);
          first = buf;
          break;
        }
    }
    EXPECT_EQ(bad_rows, 0) << "M=" << m << " N=" << n << " K=" << k
                           << (sh.f32_out_and_bias ? " f32+bias" : "") << ": " << bad_rows << " rows differ; "
                           << first;
  }
}

class CudaWgmma : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
  }
};

TEST_F(CudaWgmma, RowsEqualDecodeK4096) {
  check_shape({{64, 128, 256, 512, 4096}, 4096, 4096, false});
}
TEST_F(CudaWgmma, RowsEqualDecodeK12288) {
  check_shape({{64, 128, 256, 512, 4096}, 4096, 12288, false});
}
// 35 chunks: uneven slices (4 or 5 chunks), a slice end inside a 64-wide stage, an odd last stage.
TEST_F(CudaWgmma, RowsEqualDecodeK1120) {
  check_shape({{64, 128, 256, 512, 4096}, 4096, 1120, false});
}
TEST_F(CudaWgmma, RowsEqualDecodeGateUpShape) {
  check_shape({{512}, 24576, 4096, false});
}
// Ragged tiles (M, N not multiples of 128), 3 chunks (five empty slices), f32 output with f32 bias.
TEST_F(CudaWgmma, RowsEqualDecodeRaggedF32Bias) {
  check_shape({{77, 300}, 1000, 96, true});
  check_shape({{256}, 4096, 1120, true});
}

}  // namespace
}  // namespace tf

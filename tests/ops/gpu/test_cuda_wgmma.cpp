// The wgmma linears (src/ops/cuda/linear_wgmma.cu, and linear_rs.cu's streaming kernel for M = 17..256),
// every CTA tile shape, against linear_bf16 at M = 1:
// every row of a batched wgmma call must have exactly the bits linear_bf16 gives that row alone (the
// row-invariance contract of docs/cuda-notes.md "Design"). First mismatching element printed with both
// bit patterns.
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

const std::vector<cuda::WgmmaTile> kTiles = {
    cuda::WgmmaTile::W64T64,   cuda::WgmmaTile::W64T128,  cuda::WgmmaTile::W128T64, cuda::WgmmaTile::W128T128,
    cuda::WgmmaTile::W128T192, cuda::WgmmaTile::W128T256, cuda::WgmmaTile::Auto};
// 2-CTA clusters sharing the x tile: separate tests (last), so a fault there leaves the others' verdicts.
const std::vector<cuda::WgmmaTile> kClusterTiles = {cuda::WgmmaTile::W128T128C2, cuda::WgmmaTile::W128T192C2,
                                                    cuda::WgmmaTile::W64T64S2, cuda::WgmmaTile::W64T128S2,
                                                    cuda::WgmmaTile::W128T64S2};
constexpr int kAllMs[] = {64, 65, 96, 128, 200, 256, 512, 4096};

struct Shape {
  std::vector<int> ms;  // token counts (prefixes of one x)
  int n, k;
  bool f32_out;
  int bias_kind;  // 0 none, 1 f32, 2 bf16
};

// Every tile shape (and Auto) at every M of the shape against each row alone through linear_bf16 (M = 1,
// the decode kernel), bit for bit; also linear_bf16 itself at M (Auto dispatch: wgmma from M = 64 here).
// The producers the raw-staging tiles run with (TMA has its own tests, last).
const std::vector<cuda::WgmmaProducer> kCp16 = {cuda::WgmmaProducer::Raw};
const std::vector<cuda::WgmmaProducer> kTma = {cuda::WgmmaProducer::Tma};
const std::vector<cuda::WgmmaProducer> kTmaX = {cuda::WgmmaProducer::TmaX, cuda::WgmmaProducer::TmaXW};

// One shape's inputs and reference: every row of x alone through linear_bf16 (M = 1, the decode kernel).
// check(m, who, run) runs `run` (which writes y = the first m rows' outputs into out()) on poisoned output
// and compares it with the reference bit for bit, printing the first mismatching element.
class RowsVsDecode {
 public:
  explicit RowsVsDecode(const Shape& sh)
      : sh_(sh),
        max_m_(*std::max_element(sh.ms.begin(), sh.ms.end())),
        out_bytes_(sh.f32_out ? 4 : 2),
        x_(size_t(max_m_) * sh.k),
        w_(size_t(sh.n) * sh.k),
        bias16_(sh.n),
        bias_(sh.n),
        ref_(size_t(max_m_) * sh.n * out_bytes_),
        got_(size_t(max_m_) * sh.n * out_bytes_) {
    const int n = sh.n, k = sh.k;
    const auto hx = random_bf16(size_t(max_m_) * k, 11 + k), hw = random_bf16(size_t(n) * k, 29 + n);
    std::vector<float> hb(n);
    for (int i = 0; i < n; ++i) hb[i] = 0.001f * float(i % 97) - 0.05f;
    std::vector<uint16_t> hb16(n);
    for (int i = 0; i < n; ++i) hb16[i] = f32_to_bf16(0.37f * hb[i] + 0.01f);
    EXPECT_EQ(cudaMemcpy(x_.p, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(w_.p, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(bias_.p, hb.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(bias16_.p, hb16.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
    for (int r = 0; r < max_m_; ++r)
      cuda::linear_bf16(x_.p + size_t(r) * k, w_.p, bias(), bias_dtype(), ref_.p + size_t(r) * n * out_bytes_,
                        y_dtype(), 1, n, k, 0);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    href_.resize(size_t(max_m_) * n * out_bytes_);
    hgot_.resize(href_.size());
    EXPECT_EQ(cudaMemcpy(href_.data(), ref_.p, href_.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    what_ = " N=" + std::to_string(n) + " K=" + std::to_string(k) + (sh.f32_out ? " f32" : " bf16") +
            (sh.bias_kind == 0   ? ""
             : sh.bias_kind == 1 ? " +f32 bias"
                                 : " +bf16 bias");
  }
  const void* x() const { return x_.p; }
  const void* w() const { return w_.p; }
  void* out() const { return got_.p; }
  const void* bias() const {
    return sh_.bias_kind == 0 ? nullptr : sh_.bias_kind == 1 ? static_cast<void*>(bias_.p) : bias16_.p;
  }
  DType bias_dtype() const { return sh_.bias_kind == 2 ? DType::BF16 : DType::F32; }
  DType y_dtype() const { return sh_.f32_out ? DType::F32 : DType::BF16; }

  template <typename Run>
  void check(int m, const std::string& who, Run run) {
    const int n = sh_.n;
    ASSERT_CUDA(cudaMemset(got_.p, 0xFF, size_t(m) * n * out_bytes_));  // poison: NaN patterns
    run();
    ASSERT_CUDA(cudaDeviceSynchronize());
    ASSERT_CUDA(cudaMemcpy(hgot_.data(), got_.p, size_t(m) * n * out_bytes_, cudaMemcpyDeviceToHost));
    int bad_rows = 0;
    std::string first;
    for (int r = 0; r < m; ++r) {
      const unsigned char* a = href_.data() + size_t(r) * n * out_bytes_;
      const unsigned char* g = hgot_.data() + size_t(r) * n * out_bytes_;
      if (std::memcmp(a, g, size_t(n) * out_bytes_) == 0) continue;
      if (bad_rows++ == 0)
        for (int c = 0; c < n; ++c) {
          uint32_t ra = 0, ga = 0;
          std::memcpy(&ra, a + size_t(c) * out_bytes_, out_bytes_);
          std::memcpy(&ga, g + size_t(c) * out_bytes_, out_bytes_);
          if (ra == ga) continue;
          char buf[160];
          std::snprintf(buf, sizeof buf, "first at y[%d][%d]: linear_bf16(M=1) %08x, %s %08x", r, c, ra,
                        who.c_str(), ga);
          first = buf;
          break;
        }
    }
    EXPECT_EQ(bad_rows, 0) << who << " M=" << m << what_ << ": " << bad_rows << " rows differ; " << first;
  }

 private:
  Shape sh_;
  int max_m_;
  size_t out_bytes_;
  Dev<uint16_t> x_, w_, bias16_;
  Dev<float> bias_;
  Dev<unsigned char> ref_, got_;
  std::vector<unsigned char> href_, hgot_;
  std::string what_;
};

void check_shape(const Shape& sh, const std::vector<cuda::WgmmaTile>& tiles = kTiles,
                 const std::vector<cuda::WgmmaProducer>& producers = kCp16) {
  RowsVsDecode c(sh);
  const int n = sh.n, k = sh.k;
  for (int m : sh.ms) {
    for (cuda::WgmmaTile tile : tiles) {
      // Tiles that stage raw rows run with each of `producers`; the others have their one path.
      const bool raw = tile != cuda::WgmmaTile::W128T256 && tile != cuda::WgmmaTile::W128T128C2 &&
                       tile != cuda::WgmmaTile::W128T192C2;
      for (cuda::WgmmaProducer producer : producers) {
        if (!raw && producer != producers.front()) continue;
        cuda::set_linear_wgmma_tile(tile);
        cuda::set_linear_wgmma_producer(raw ? producer : cuda::WgmmaProducer::Auto);
        c.check(m,
                std::string("wgmma ") + cuda::wgmma_tile_name(tile) + " " +
                    cuda::wgmma_producer_name(raw ? producer : cuda::WgmmaProducer::Auto),
                [&] {
                  cuda::linear_wgmma_bf16(c.x(), c.w(), c.bias(), c.bias_dtype(), c.out(), c.y_dtype(), m, n,
                                          k, 0);
                });
      }
      cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::Auto);
    }
    cuda::set_linear_wgmma_tile(cuda::WgmmaTile::Auto);
    c.check(m, "linear_bf16", [&] {
      cuda::linear_bf16(c.x(), c.w(), c.bias(), c.bias_dtype(), c.out(), c.y_dtype(), m, n, k, 0);
    });
  }
}

// The streaming kernel (linear_rs.cu): every tile and Auto through linear_rs_bf16, and linear_bf16's Auto
// dispatch with it switched on (M = 17..256 then runs it through linear_mid_bf16 / linear_wgmma_bf16).
void check_rs_shape(const Shape& sh) {
  RowsVsDecode c(sh);
  const int n = sh.n, k = sh.k;
  std::vector<cuda::RsTile> tiles(std::begin(cuda::kRsTiles), std::end(cuda::kRsTiles));
  tiles.push_back(cuda::RsTile::Auto);
  for (int m : sh.ms) {
    for (cuda::RsTile tile : tiles) {
      cuda::set_linear_rs_tile(tile);
      c.check(m, std::string("rs ") + cuda::rs_tile_name(tile), [&] {
        EXPECT_TRUE(
            cuda::linear_rs_bf16(c.x(), c.w(), c.bias(), c.bias_dtype(), c.out(), c.y_dtype(), m, n, k, 0));
      });
    }
    cuda::set_linear_rs_tile(cuda::RsTile::Auto);
    cuda::set_linear_rs(true);
    c.check(m, "linear_bf16 (rs on)", [&] {
      cuda::linear_bf16(c.x(), c.w(), c.bias(), c.bias_dtype(), c.out(), c.y_dtype(), m, n, k, 0);
    });
    cuda::reset_linear_rs();
    c.check(m, "linear_bf16 (rs where the policy takes it)", [&] {
      cuda::linear_bf16(c.x(), c.w(), c.bias(), c.bias_dtype(), c.out(), c.y_dtype(), m, n, k, 0);
    });
  }
}

class CudaWgmma : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_hopper()) GTEST_SKIP() << "needs an sm_90 GPU";
    ASSERT_TRUE(cuda::linear_wgmma_supported()) << "sm_90 device but no sm_90a kernels in this build";
  }
  void TearDown() override {
    cuda::reset_linear_rs();
    cuda::set_linear_rs_tile(cuda::RsTile::Auto);
    cuda::set_linear_wgmma_swizzle(false);
    cuda::set_linear_wgmma_tile(cuda::WgmmaTile::Auto);
    cuda::set_linear_wgmma_producer(cuda::WgmmaProducer::Auto);
    cuda::set_linear_wgmma_rows128(true);
  }
};

std::vector<int> all_ms() {
  return {std::begin(kAllMs), std::end(kAllMs)};
}

TEST_F(CudaWgmma, RowsEqualDecodeK4096) {
  check_shape({all_ms(), 4096, 4096, false, 0});
}
TEST_F(CudaWgmma, RowsEqualDecodeK12288F32Bias) {
  check_shape({all_ms(), 4096, 12288, true, 1});
}
// 35 chunks: uneven slices (4 or 5 chunks); N = 1040: a partial 64/128-row weight tile.
TEST_F(CudaWgmma, RowsEqualDecodeK1120Bf16Bias) {
  check_shape({all_ms(), 1040, 1120, false, 2});
}
TEST_F(CudaWgmma, RowsEqualDecodeK1120F32) {
  check_shape({all_ms(), 4096, 1120, true, 0});
}
// 3 chunks: five empty slices (they add +0 like linear.cu's idle warps).
TEST_F(CudaWgmma, RowsEqualDecodeK96) {
  check_shape({all_ms(), 1040, 96, false, 1});
  check_shape({all_ms(), 4096, 96, true, 2});
}
TEST_F(CudaWgmma, RowsEqualDecodeGateUpShape) {
  check_shape({{200, 512}, 24576, 4096, false, 1});
}
// Ragged tiles (M, N not multiples of 64), tiny N (one partial weight tile).
TEST_F(CudaWgmma, RowsEqualDecodeRagged) {
  check_shape({{64, 77, 300}, 1000, 96, true, 1});
  check_shape({{65, 129}, 40, 4096, false, 2});
}

// The 2-CTA cluster tiles: x shared between two weight tiles (C2), one tile's slices split 4 + 4 (S2).
TEST_F(CudaWgmma, ClusterTilesRowsEqualDecode) {
  check_shape({all_ms(), 4096, 4096, false, 0}, kClusterTiles);
  check_shape({all_ms(), 1040, 1120, true, 2}, kClusterTiles);        // odd weight-tile count: a masked peer
  check_shape({{64, 200, 512}, 4096, 96, false, 1}, kClusterTiles);   // a split with empty slices
  check_shape({{64, 96, 256}, 4096, 12288, true, 1}, kClusterTiles);  // the down projection
  check_shape({{64, 65}, 1000, 32, false, 2}, kClusterTiles);         // one chunk: rank 0 has none
  check_shape({{65, 300}, 40, 4096, true, 0}, kClusterTiles);
}

// The TMA producer (tensor-map loads of the raw rows) on the raw-staging tiles.
const std::vector<cuda::WgmmaTile> kRawTiles = {cuda::WgmmaTile::W64T64, cuda::WgmmaTile::W64T128,
                                                cuda::WgmmaTile::W128T64, cuda::WgmmaTile::W128T128,
                                                cuda::WgmmaTile::W128T192};
TEST_F(CudaWgmma, TmaProducerRowsEqualDecode) {
  cuda::set_linear_wgmma_swizzle(true);  // TMA writes the swizzled stages
  check_shape({all_ms(), 4096, 4096, false, 0}, kRawTiles, kTma);
  check_shape({all_ms(), 4096, 12288, true, 1}, kRawTiles, kTma);
  check_shape({all_ms(), 1040, 1120, false, 2}, kRawTiles, kTma);  // partial weight tiles: zero-filled rows
  check_shape({{64, 77, 300}, 1000, 96, true, 1}, kRawTiles, kTma);
  check_shape({{65, 129}, 40, 4096, false, 2}, kRawTiles, kTma);
}

// x permuted once per call (permute_x_kernel) and loaded by a swizzled tensor map straight into the
// stages; only W takes the raw hop (TmaX). TmaXW: W permuted per call as well, both loaded by tensor map.
TEST_F(CudaWgmma, PermutedXProducerRowsEqualDecode) {
  cuda::set_linear_wgmma_swizzle(true);
  check_shape({all_ms(), 4096, 4096, false, 0}, kRawTiles, kTmaX);
  check_shape({all_ms(), 4096, 12288, true, 1}, kRawTiles, kTmaX);
  check_shape({all_ms(), 1040, 1120, false, 2}, kRawTiles, kTmaX);  // partial tiles: zero-filled rows
  check_shape({{64, 77, 300}, 1000, 96, true, 1}, kRawTiles, kTmaX);
  check_shape({{65, 129}, 40, 4096, false, 2}, kRawTiles, kTmaX);
}

// The TmaXW producer with 64-byte rows on the 128x128 / 128x192 tiles (their default stages two chunks as
// 128-byte rows, which PermutedXProducerRowsEqualDecode covers).
TEST_F(CudaWgmma, PermutedXProducer64ByteRowsEqualDecode) {
  cuda::set_linear_wgmma_rows128(false);
  const std::vector<cuda::WgmmaTile> tiles = {cuda::WgmmaTile::W128T128, cuda::WgmmaTile::W128T192};
  const std::vector<cuda::WgmmaProducer> xw = {cuda::WgmmaProducer::TmaXW};
  check_shape({all_ms(), 4096, 4096, false, 0}, tiles, xw);
  check_shape({all_ms(), 1040, 1120, false, 2}, tiles, xw);
  check_shape({{64, 77, 300}, 1000, 96, true, 1}, tiles, xw);
  cuda::set_linear_wgmma_rows128(true);
}

// The raw tiles with 64-byte swizzled stages (16-byte cp.async; the default layout is the no-swizzle one).
TEST_F(CudaWgmma, SwizzledStagesRowsEqualDecode) {
  cuda::set_linear_wgmma_swizzle(true);
  check_shape({all_ms(), 4096, 4096, false, 0}, kRawTiles);
  check_shape({all_ms(), 4096, 12288, true, 1}, kRawTiles);
  check_shape({all_ms(), 1040, 1120, false, 2}, kRawTiles);
  check_shape({{64, 77, 300}, 1000, 96, true, 1}, kRawTiles);
  check_shape({{65, 129}, 40, 4096, false, 2}, kRawTiles);
}

// The streaming kernel for M = 17..256: token tiles of 32/64/128 (M up to 256: two 128-token tiles), the
// slices split over 1/2/4 CTAs; every M with a partial token tile, K with uneven (1120: 35 chunks), empty
// (96: 3 chunks; a 4-CTA split then has ranks with no chunk) and odd-length slices (the 2-chunk steps end
// with a single one), partial weight tiles (N = 1040, 40), f32 / bf16 outputs and biases.
constexpr int kRsMs[] = {17, 24, 31, 32, 33, 48, 64, 65, 96, 127, 128, 129, 160, 200, 256};
std::vector<int> rs_ms() {
  return {std::begin(kRsMs), std::end(kRsMs)};
}
TEST_F(CudaWgmma, StreamingRowsEqualDecodeK4096) {
  check_rs_shape({rs_ms(), 4096, 4096, false, 0});
}
TEST_F(CudaWgmma, StreamingRowsEqualDecodeDownShape) {
  check_rs_shape({{17, 32, 64, 100, 128, 256}, 4096, 12288, true, 1});
}
TEST_F(CudaWgmma, StreamingRowsEqualDecodeUnevenSlices) {
  check_rs_shape({rs_ms(), 1040, 1120, false, 2});
  check_rs_shape({{17, 33, 96, 129}, 4096, 1120, true, 0});
}
TEST_F(CudaWgmma, StreamingRowsEqualDecodeEmptySlices) {
  check_rs_shape({{17, 32, 65, 200}, 1040, 96, false, 1});
  check_rs_shape({{20, 64, 129}, 4096, 32, true, 2});  // one chunk: only slice 7 has it
}
TEST_F(CudaWgmma, StreamingRowsEqualDecodeWideAndRagged) {
  check_rs_shape({{32, 64, 128, 256}, 24576, 4096, false, 1});  // gate_up: 128-row tiles for Auto
  check_rs_shape({{17, 77, 200}, 40, 4096, true, 2});           // one partial weight tile
}

}  // namespace
}  // namespace tf

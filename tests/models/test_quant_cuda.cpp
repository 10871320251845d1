// GPU: the CUDA MLX 4-bit linear against the CPU reference twin and bit-for-bit row invariance, and the
// quantized tiny Qwen3 conversions end to end on the GPU against the CPU backend. Label "gpu".
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "checkpoint/checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"
#include "ops/backend.h"

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

// A random MLX 4-bit weight [n, k] with bf16 scales and biases.
LinearWeight random_mlx4(int64_t n, int64_t k, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  LinearWeight w;
  w.format = LinearWeight::Format::MlxAffine;
  w.bits = 4;
  w.group_size = group;
  w.out_features = n;
  w.in_features = k;
  w.weight = Tensor::empty({n, k / 8}, DType::U32);
  for (int64_t i = 0; i < w.weight.numel(); ++i) w.weight.data<uint32_t>()[i] = rng();
  std::uniform_real_distribution<float> sd(0.001f, 0.02f), bd(-0.1f, 0.1f);
  w.scales = Tensor::empty({n, k / group}, DType::BF16);
  w.biases = Tensor::empty({n, k / group}, DType::BF16);
  for (int64_t i = 0; i < w.scales.numel(); ++i) {
    w.scales.data<uint16_t>()[i] = f32_to_bf16(sd(rng));
    w.biases.data<uint16_t>()[i] = f32_to_bf16(bd(rng));
  }
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

}  // namespace

TEST_F(Gpu, Mlx4LinearMatchesCpuTwinAndIsRowInvariant) {
  for (int group : {32, 64, 128}) {
    SCOPED_TRACE(group);
    const int64_t N = 301, K = 1024, M = 37;
    LinearWeight host = random_mlx4(N, K, group, 7 + group);
    LinearWeight wg = gpu->upload_linear(host), wc = cpu->upload_linear(host);
    auto [xb, xf] = random_x(M, K, 3);
    Tensor yc = Tensor::empty({M, N}, DType::F32);
    cpu->linear(xf, wc, yc);
    Tensor xg = gpu->upload(xb), yg = gpu->alloc({M, N}, DType::F32);
    gpu->linear(xg, wg, yg);
    Tensor all = Tensor::empty({M, N}, DType::F32);
    gpu->to_host(yg, all);
    double max_err = 0;
    for (int64_t i = 0; i < M * N; ++i)
      max_err = std::max(max_err, double(std::fabs(all.data<float>()[i] - yc.data<float>()[i])));
    EXPECT_LT(max_err, 1e-4) << "GPU vs CPU twin";  // same weights, different (fixed) summation order
    for (int64_t rows : {1, 3, 8, 9}) {             // any prefix of rows gives the same bits per row
      Tensor part = gpu->alloc({rows, N}, DType::F32), host_part = Tensor::empty({rows, N}, DType::F32);
      Tensor xs = xg.slice_rows(0, rows);
      gpu->linear(xs, wg, part);
      gpu->to_host(part, host_part);
      EXPECT_EQ(std::memcmp(host_part.raw(), all.raw(), host_part.nbytes()), 0) << rows << " rows";
    }
  }
}

namespace {

std::vector<float> run_logits(Backend& be, const std::string& dir) {
  const std::vector<int32_t> toks = {1, 17, 42, 99, 5, 250, 7, 300, 64, 2, 128, 33};
  Checkpoint ckpt = Checkpoint::open(dir);
  auto model = load_model(ckpt, be, 64);
  const auto& s = model->spec();
  KvBlockPool pool(be, s.layers, s.kv_heads, s.head_dim, 16, 8);
  std::vector<int32_t> table;
  EXPECT_TRUE(pool.reserve(table, int(toks.size())));
  BatchMeta m;
  m.block_size = 16;
  m.block_tables = {table};
  std::vector<int32_t> rows;
  for (int p = 0; p < int(toks.size()); ++p) {
    m.tokens.push_back(toks[size_t(p)]);
    m.positions.push_back(p);
    m.row_seq.push_back(0);
    m.slots.push_back(table[size_t(p / 16)] * 16 + p % 16);
    rows.push_back(p);
  }
  std::vector<float> logits;
  model->forward(m, pool.layers(), rows, logits);
  pool.release(table);
  return logits;
}

}  // namespace

TEST_F(Gpu, QuantizedTinyModelsMatchCpu) {
  for (const char* name : {"qwen3-mlx-mixed", "qwen3-mlx-5bit-g32", "qwen3-fp8-block", "qwen3-fp8-channel"}) {
    SCOPED_TRACE(name);
    const std::string dir = std::string(TF_SOURCE_DIR) + "/tests/data/quant/" + name;
    const auto c = run_logits(*cpu, dir), g = run_logits(*gpu, dir);
    ASSERT_EQ(c.size(), g.size());
    double max_err = 0;
    for (size_t i = 0; i < c.size(); ++i) max_err = std::max(max_err, double(std::fabs(c[i] - g[i])));
    std::cerr << name << ": max |gpu - cpu| logit = " << max_err << "\n";
    EXPECT_LT(max_err, 0.1);  // bf16 activations on the GPU vs f32 on the CPU
  }
}

// The CUDA backend against the CPU reference backend (fresh random inputs, poisoned outputs, bf16
// error bounds) and row invariance bit for bit: a row computed alone, inside bigger calls with other
// random rows, as one of k+1 verify rows and inside prefill chunks of several sizes gives the same bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>

#include "core/error.h"
#include "ops/backend.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/block_cache.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"  // linear_wgmma_supported

namespace tf {
namespace {

std::mt19937& rng() {
  static std::mt19937 r(std::random_device{}());
  return r;
}

// A random host tensor whose values are exactly representable in bf16, in f32 and bf16 twins.
struct Host {
  Tensor f32, bf16;
};
Host random_host(std::vector<int64_t> shape, float scale = 1.f) {
  Host h{Tensor::empty(shape, DType::F32), Tensor::empty(shape, DType::BF16)};
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < h.f32.numel(); ++i) {
    uint16_t b = f32_to_bf16(nd(rng()));
    h.bf16.data<uint16_t>()[i] = b;
    h.f32.data<float>()[i] = bf16_to_f32(b);
  }
  return h;
}

// A deep copy: the CPU backend's upload() of an f32 tensor shares its buffer, and in-place ops (add,
// add_rms_norm) must not modify the inputs the GPU side is compared with.
Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

class CudaOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    gpu_ = make_cuda_backend(0, &why).release();
    why_ = new std::string(why);
    cpu_ = make_cpu_backend().release();
  }
  void SetUp() override {
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << *why_;
  }
  // A GPU tensor filled with 0xFF bytes (NaN in bf16/f32): any element an op fails to write shows.
  Tensor poisoned(std::vector<int64_t> shape, DType dt = DType::BF16) {
    Tensor t = gpu_->alloc(std::move(shape), dt);
    // On the backend's stream: device memory is recycled in that stream's order (block_cache.h).
    EXPECT_EQ(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), cuda::stream_of(*gpu_)), cudaSuccess);
    return t;
  }
  std::vector<float> get(const Tensor& t) {
    Tensor h = Tensor::empty(t.shape(), DType::F32);
    gpu_->to_host(t, h);
    return h.to_f32_vector();
  }
  std::vector<uint16_t> bits(const Tensor& t) {  // raw bytes as 16-bit words (f32: two words each)
    Tensor h = Tensor::empty(t.shape(), t.dtype());
    gpu_->to_host(t, h);
    std::vector<uint16_t> v(t.nbytes() / 2);
    std::memcpy(v.data(), h.raw(), t.nbytes());
    return v;
  }
  // The GPU attention of q ([rows, hq, d], on the GPU) over `pool` for the rows of `meta`, into a poisoned
  // output: its bits.
  std::vector<uint16_t> attention_bits(const Tensor& q, const KvLayer& pool, const BatchMeta& meta,
                                       const AttentionParams& ap) {
    gpu_->begin_forward(meta);
    Tensor out = poisoned(q.shape());
    gpu_->attention(q, pool, ap, out);
    return bits(out);
  }
  // ‖gpu − cpu‖ / ‖cpu‖, failing on any non-finite GPU value (an unwritten or poisoned element).
  static double rel_err(const std::vector<float>& g, const std::vector<float>& c) {
    EXPECT_EQ(g.size(), c.size());
    double num = 0, den = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (!std::isfinite(g[i])) {
        ADD_FAILURE() << "non-finite GPU output at " << i;
        return 1e9;
      }
      num += double(g[i] - c[i]) * (g[i] - c[i]);
      den += double(c[i]) * c[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
  }
  void attention_vs_cpu(int hq, int hk, int d);
  static Backend* gpu_;
  static Backend* cpu_;
  static std::string* why_;
};
Backend* CudaOps::gpu_ = nullptr;
Backend* CudaOps::cpu_ = nullptr;
std::string* CudaOps::why_ = nullptr;

// The block cache's bookkeeping with a host allocator: reuse by rounded size, trim, the large-block
// bypass and the retry after trimming when the raw allocator fails. Runs without a GPU.
TEST(BlockCache, ReusesTrimsAndRetries) {
  int live = 0;
  bool fail_next = false;
  cuda::BlockCache cache(
      [&](size_t n) -> void* {
        if (fail_next) return fail_next = false, nullptr;
        ++live;
        return std::malloc(n);
      },
      [&](void* p) { --live, std::free(p); }, size_t(64) << 20);
  EXPECT_EQ(cuda::BlockCache::rounded(1), 512u);
  EXPECT_EQ(cuda::BlockCache::rounded(1000), 1024u);
  EXPECT_EQ(cuda::BlockCache::rounded((1 << 20) + 1), size_t(2) << 20);
  void* a = cache.alloc(1000);
  cache.free(a);
  EXPECT_EQ(cache.cached_bytes(), 1024u);
  EXPECT_EQ(cache.alloc(900), a) << "same rounded size must reuse the block";
  void* b = cache.alloc(5000);
  EXPECT_NE(b, a);
  EXPECT_EQ(live, 2);
  void* big = cache.alloc(size_t(100) << 20);  // over max_cached: freed at once
  cache.free(big);
  EXPECT_EQ(live, 2);
  cache.free(a);
  cache.free(b);
  EXPECT_EQ(live, 2);
  fail_next = true;  // first raw attempt fails: the cache trims and retries
  void* c = cache.alloc(1 << 16);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(live, 1) << "trim must have returned the two cached blocks";
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.free(c);
  cache.free(reinterpret_cast<void*>(0x10));  // not ours: ignored
  cache.trim();
  EXPECT_EQ(live, 0);
}

constexpr double kBf16Tol = 1e-2;  // one bf16 rounding of the output is ~3e-3 relative

LinearWeight host_linear(int64_t n, int64_t k, bool bias, Host* w_out, Host* b_out) {
  *w_out = random_host({n, k}, 1.f / std::sqrt(float(k)));
  LinearWeight w;
  w.weight = w_out->bf16;
  w.in_features = k, w.out_features = n;
  if (bias) *b_out = random_host({n}), w.bias = b_out->bf16;
  return w;
}

BatchMeta plain_meta(int rows) {
  BatchMeta m;
  m.block_size = 16;
  for (int r = 0; r < rows; ++r) {
    m.tokens.push_back(r), m.positions.push_back(r), m.row_seq.push_back(0), m.slots.push_back(r);
  }
  m.block_tables = {{0}};
  return m;
}

TEST_F(CudaOps, LinearMatchesCpu) {
  for (int64_t n : {320, 200}) {
    Host w, b;
    LinearWeight hw = host_linear(n, 1024, n == 200, &w, &b);
    LinearWeight gw = gpu_->upload_linear(hw), cw = cpu_->upload_linear(hw);
    for (int m : {1, 5, 16, 33, 64, 256}) {
      Host x = random_host({m, 1024});
      Tensor gx = gpu_->upload(x.bf16), gy = poisoned({m, n});
      Tensor cy = Tensor::empty({m, n}, DType::F32);
      gpu_->linear(gx, gw, gy);
      cpu_->linear(x.f32, cw, cy);
      EXPECT_LT(rel_err(get(gy), cy.to_f32_vector()), kBf16Tol) << "M=" << m << " N=" << n;
      Tensor gyf = poisoned({m, n}, DType::F32);  // f32 output (logits)
      gpu_->linear(gx, gw, gyf);
      EXPECT_LT(rel_err(get(gyf), cy.to_f32_vector()), 2e-3) << "f32 output, M=" << m << " N=" << n;
    }
  }
}

TEST_F(CudaOps, LinearRowInvariantAcrossM) {
  // M >= 65 runs the tiled prefill kernel: its rows must equal the decode kernel's bits. K = 1120 has 35
  // chunks (uneven slices), K = 96 has 3 (five empty slices).
  for (int64_t k : {2048, 1120, 96}) {
    const int64_t n = 1000;
    Host w, b;
    LinearWeight gw = gpu_->upload_linear(host_linear(n, k, true, &w, &b));
    Host x0 = random_host({1, k});
    Tensor y1 = poisoned({1, n});
    gpu_->linear(gpu_->upload(x0.bf16), gw, y1);
    const std::vector<uint16_t> alone = bits(y1);
    for (int m : {2, 5, 9, 16, 17, 64, 65, 100, 256, 300}) {
      for (int at : {0, m / 2, m - 1}) {
        Host x = random_host({m, k});
        std::memcpy(x.bf16.data<uint16_t>() + int64_t(at) * k, x0.bf16.raw(), k * 2);
        Tensor y = poisoned({m, n});
        gpu_->linear(gpu_->upload(x.bf16), gw, y);
        std::vector<uint16_t> all = bits(y);
        std::vector<uint16_t> row(all.begin() + at * n, all.begin() + (at + 1) * n);
        EXPECT_EQ(row, alone) << "row " << at << " of M=" << m << " K=" << k;
      }
    }
  }
  const int64_t n = 1000, k = 2048;
  Host w, b;
  LinearWeight gw = gpu_->upload_linear(host_linear(n, k, true, &w, &b));
  Host x0 = random_host({1, k});
  // f32 logits: the same row's bits alone and inside a batch.
  Tensor lf1 = poisoned({1, n}, DType::F32);
  gpu_->linear(gpu_->upload(x0.bf16), gw, lf1);
  Host x = random_host({40, k});
  std::memcpy(x.bf16.data<uint16_t>() + 7 * k, x0.bf16.raw(), k * 2);
  Tensor lf = poisoned({40, n}, DType::F32);
  gpu_->linear(gpu_->upload(x.bf16), gw, lf);
  const auto all = bits(lf), one = bits(lf1);
  EXPECT_EQ(std::vector<uint16_t>(all.begin() + 7 * 2 * n, all.begin() + 8 * 2 * n), one) << "f32 output";
  Tensor lf3 = poisoned({300, n}, DType::F32);  // and in the tiled kernel
  Host x3 = random_host({300, k});
  std::memcpy(x3.bf16.data<uint16_t>() + 299 * k, x0.bf16.raw(), k * 2);
  gpu_->linear(gpu_->upload(x3.bf16), gw, lf3);
  const auto all3 = bits(lf3);
  EXPECT_EQ(std::vector<uint16_t>(all3.begin() + 299 * 2 * n, all3.begin() + 300 * 2 * n), one)
      << "f32, M=300";
}

// Dependent launches: each linear reads the previous one's output. With programmatic dependent launch
// a kernel starts early and must wait before reading x; a missing wait would read stale data here.
TEST_F(CudaOps, LinearChainSameWithAndWithoutDependentLaunch) {
  const int64_t d = 2048;
  Host w, b;
  LinearWeight gw = gpu_->upload_linear(host_linear(d, d, false, &w, &b));
  for (int m : {1, 300}) {
    Tensor x = gpu_->upload(random_host({m, d}).bf16);
    std::vector<uint16_t> out[2];
    for (int pdl : {0, 1}) {
      cuda::set_linear_pdl(pdl == 1);
      Tensor a = poisoned({m, d}), c = poisoned({m, d});
      gpu_->linear(x, gw, a);
      for (int i = 0; i < 4; ++i) gpu_->linear(i % 2 ? c : a, gw, i % 2 ? a : c);
      out[pdl] = bits(a);
    }
    cuda::set_linear_pdl(true);
    EXPECT_EQ(out[0], out[1]) << "M=" << m;
  }
}

// The weight-prefetching and plain loops of the linear kernel issue the same MMAs in the same order.
TEST_F(CudaOps, LinearVariantsGiveIdenticalBits) {
  Host w, b;
  for (int64_t n : {4096, 1024}) {  // 1024: a small grid, 8 chunks in flight per warp
    LinearWeight gw = gpu_->upload_linear(host_linear(n, 4096, false, &w, &b));
    for (int m : {1, 13, 20, 40}) {
      Tensor x = gpu_->upload(random_host({m, 4096}).bf16), y1 = poisoned({m, n}), y2 = poisoned({m, n});
      cuda::set_linear_variant(cuda::LoopVariant::Plain);
      gpu_->linear(x, gw, y1);
      cuda::set_linear_variant(cuda::LoopVariant::Prefetch);
      gpu_->linear(x, gw, y2);
      cuda::set_linear_variant(cuda::LoopVariant::Auto);
      EXPECT_EQ(bits(y1), bits(y2)) << "M=" << m << " N=" << n;
    }
  }
}

TEST_F(CudaOps, NormsMatchCpu) {
  for (int cols : {4096, 128, 1000, 10000}) {
    const int rows = 7;
    Host x = random_host({rows, cols}, 2.f), w = random_host({cols}), d = random_host({rows, cols});
    for (float offset : {0.f, 1.f}) {
      Tensor gy = poisoned({rows, cols}), cy = Tensor::empty({rows, cols}, DType::F32);
      Tensor gw = gpu_->upload(w.f32), cw = cpu_->upload(w.f32);  // f32 norm weight on the GPU
      gpu_->rms_norm(gpu_->upload(x.bf16), gw, 1e-6f, offset, gy);
      cpu_->rms_norm(x.f32, cw, 1e-6f, offset, cy);
      EXPECT_LT(rel_err(get(gy), cy.to_f32_vector()), kBf16Tol) << "rms_norm cols=" << cols;
      // add_rms_norm with an f32 residual stream and a bf16 norm weight.
      Tensor gres = gpu_->upload(x.f32), cres = copy_of(x.f32);
      Tensor gy2 = poisoned({rows, cols}), cy2 = Tensor::empty({rows, cols}, DType::F32);
      gpu_->add_rms_norm(gres, gpu_->upload(d.bf16), gpu_->upload(w.bf16), 1e-6f, offset, gy2);
      cpu_->add_rms_norm(cres, d.f32, cw, 1e-6f, offset, cy2);
      EXPECT_LT(rel_err(get(gy2), cy2.to_f32_vector()), kBf16Tol) << "add_rms_norm cols=" << cols;
      EXPECT_LT(rel_err(get(gres), cres.to_f32_vector()), 1e-6) << "residual cols=" << cols;
    }
  }
}

TEST_F(CudaOps, AddRmsNormBf16ResidualRowInvariant) {
  const int cols = 4096;
  Host r0 = random_host({1, cols}), x0 = random_host({1, cols}), w = random_host({cols});
  Tensor gw = gpu_->upload(w.bf16);
  Tensor res1 = gpu_->upload(r0.bf16), y1 = poisoned({1, cols});
  gpu_->add_rms_norm(res1, gpu_->upload(x0.bf16), gw, 1e-6f, 0.f, y1);
  for (int m : {5, 64}) {
    Host r = random_host({m, cols}), x = random_host({m, cols});
    std::memcpy(r.bf16.data<uint16_t>() + 3 * cols, r0.bf16.raw(), cols * 2);
    std::memcpy(x.bf16.data<uint16_t>() + 3 * cols, x0.bf16.raw(), cols * 2);
    Tensor res = gpu_->upload(r.bf16), y = poisoned({m, cols});
    gpu_->add_rms_norm(res, gpu_->upload(x.bf16), gw, 1e-6f, 0.f, y);
    auto yb = bits(y), rb = bits(res);
    EXPECT_EQ(std::vector<uint16_t>(yb.begin() + 3 * cols, yb.begin() + 4 * cols), bits(y1));
    EXPECT_EQ(std::vector<uint16_t>(rb.begin() + 3 * cols, rb.begin() + 4 * cols), bits(res1));
  }
}

TEST_F(CudaOps, RopeMatchesCpu) {
  const int rows = 9, hq = 4, hk = 2, d = 128;
  BatchMeta meta = plain_meta(rows);
  for (int r = 0; r < rows; ++r) meta.positions[r] = r * 977;  // large positions too
  for (int variant = 0; variant < 3; ++variant) {
    RopeParams p;
    p.head_dim = d;
    p.rotary_dim = variant == 2 ? 64 : 128;
    p.interleaved = variant == 1;
    p.attention_factor = variant == 2 ? 1.2f : 1.f;
    for (int i = 0; i < p.rotary_dim / 2; ++i) p.inv_freq.push_back(std::pow(1e6f, -2.f * i / p.rotary_dim));
    Host q = random_host({rows, hq, d}), k = random_host({rows, hk, d});
    Tensor gq = gpu_->upload(q.bf16), gk = gpu_->upload(k.bf16);
    Tensor cq = copy_of(q.f32), ck = copy_of(k.f32);
    gpu_->begin_forward(meta);
    cpu_->begin_forward(meta);
    gpu_->rope(gq, gk, p);
    cpu_->rope(cq, ck, p);
    EXPECT_LT(rel_err(get(gq), cq.to_f32_vector()), kBf16Tol) << "variant " << variant;
    EXPECT_LT(rel_err(get(gk), ck.to_f32_vector()), kBf16Tol) << "variant " << variant;
  }
}

// The fused attention-input kernel (q/k norm + rope + K/V write) gives the bits of the separate ops,
// and matches the CPU reference; shapes it does not cover fall back to the separate ops.
TEST_F(CudaOps, AttentionInputsFusedEqualsSeparateOps) {
  struct Case {
    int hq, hk, d, rot;
    bool norm, interleaved;
  };
  for (Case c : {Case{32, 8, 128, 128, true, false}, Case{4, 2, 64, 64, true, false},
                 Case{4, 2, 128, 64, false, false}, Case{8, 2, 256, 256, true, false},
                 Case{4, 2, 128, 128, true, true}, Case{4, 2, 32, 32, true, false}}) {
    SCOPED_TRACE("hq " + std::to_string(c.hq) + " hk " + std::to_string(c.hk) + " d " + std::to_string(c.d) +
                 " rot " + std::to_string(c.rot) + (c.norm ? " norm" : "") +
                 (c.interleaved ? " interleaved" : ""));
    const int rows = 11, nb = 4, bs = 16;
    BatchMeta meta;
    meta.block_size = bs;
    meta.block_tables = {{2, 0, 3}};
    for (int r = 0; r < rows; ++r) {
      const int pos = 3 + r * 3;
      meta.tokens.push_back(0), meta.positions.push_back(pos), meta.row_seq.push_back(0);
      meta.slots.push_back(meta.block_tables[0][pos / bs] * bs + pos % bs);
    }
    meta.slots[4] = -1;  // a padding row writes nothing
    RopeParams p;
    p.head_dim = c.d;
    p.rotary_dim = c.rot;
    p.interleaved = c.interleaved;
    p.attention_factor = c.rot < c.d ? 1.1f : 1.f;
    for (int i = 0; i < c.rot / 2; ++i) p.inv_freq.push_back(std::pow(1e6f, -2.f * i / c.rot));
    Host q = random_host({rows, c.hq, c.d}, 3.f), k = random_host({rows, c.hk, c.d}, 3.f),
         v = random_host({rows, c.hk, c.d});
    Host qn = random_host({c.d}), kn = random_host({c.d});
    auto pool = [&](Backend& be) {
      KvLayer l;
      l.k = be.alloc({nb, bs, c.hk, c.d}, be.act_dtype());
      l.v = be.alloc({nb, bs, c.hk, c.d}, be.act_dtype());
      be.zero(l.k), be.zero(l.v);
      return l;
    };
    gpu_->begin_forward(meta);
    // Fused.
    Tensor fq = gpu_->upload(q.bf16), fk = gpu_->upload(k.bf16), fv = gpu_->upload(v.bf16);
    Tensor gqn = gpu_->upload(qn.bf16), gkn = gpu_->upload(kn.bf16);
    KvLayer fl = pool(*gpu_);
    gpu_->attention_inputs(fq, fk, fv, c.norm ? &gqn : nullptr, c.norm ? &gkn : nullptr, 1e-6f, 0.f, p, fl);
    // Separate ops.
    Tensor sq = gpu_->upload(q.bf16), sk = gpu_->upload(k.bf16), sv = gpu_->upload(v.bf16);
    KvLayer sl = pool(*gpu_);
    if (c.norm) {
      gpu_->rms_norm(sq, gqn, 1e-6f, 0.f, sq);
      gpu_->rms_norm(sk, gkn, 1e-6f, 0.f, sk);
    }
    gpu_->rope(sq, sk, p);
    gpu_->kv_write(sl, sk, sv);
    EXPECT_EQ(bits(fq), bits(sq));
    EXPECT_EQ(bits(fk), bits(sk));
    EXPECT_EQ(bits(fl.k), bits(sl.k));
    EXPECT_EQ(bits(fl.v), bits(sl.v));
    // The CPU reference (the default: the same four ops in f32).
    cpu_->begin_forward(meta);
    Tensor cq = copy_of(q.f32), ck = copy_of(k.f32), cv = copy_of(v.f32);
    KvLayer cl = pool(*cpu_);
    cpu_->attention_inputs(cq, ck, cv, c.norm ? &qn.f32 : nullptr, c.norm ? &kn.f32 : nullptr, 1e-6f, 0.f, p,
                           cl);
    EXPECT_LT(rel_err(get(fq), cq.to_f32_vector()), kBf16Tol);
    EXPECT_LT(rel_err(get(fl.k), cl.k.to_f32_vector()), kBf16Tol);
  }
}

TEST_F(CudaOps, ElementwiseMatchCpu) {
  const int rows = 6, inter = 3000, hidden = 256, vocab = 50;
  // silu_mul
  Host gu = random_host({rows, 2 * inter}, 2.f);
  Tensor go = poisoned({rows, inter}), co = Tensor::empty({rows, inter}, DType::F32);
  gpu_->silu_mul(gpu_->upload(gu.bf16), go);
  cpu_->silu_mul(gu.f32, co);
  EXPECT_LT(rel_err(get(go), co.to_f32_vector()), kBf16Tol);
  {  // inter % 8 != 0: the scalar kernel (3000 above: 16-byte units)
    Host gu2 = random_host({rows, 2 * 3004}, 2.f);
    Tensor go2 = poisoned({rows, 3004}), co2 = Tensor::empty({rows, 3004}, DType::F32);
    gpu_->silu_mul(gpu_->upload(gu2.bf16), go2);
    cpu_->silu_mul(gu2.f32, co2);
    EXPECT_LT(rel_err(get(go2), co2.to_f32_vector()), kBf16Tol);
  }
  // embedding (f32 table) with scale
  BatchMeta meta = plain_meta(rows);
  for (int r = 0; r < rows; ++r) meta.tokens[r] = int(rng()() % vocab);
  Host table = random_host({vocab, hidden});
  Tensor ge = poisoned({rows, hidden}), ce = Tensor::empty({rows, hidden}, DType::F32);
  gpu_->begin_forward(meta);
  cpu_->begin_forward(meta);
  gpu_->embedding(gpu_->upload(table.bf16), 2.5f, ge);
  cpu_->embedding(cpu_->upload(table.f32), 2.5f, ce);
  EXPECT_LT(rel_err(get(ge), ce.to_f32_vector()), kBf16Tol);
  // add, bf16 += bf16 and f32 += bf16
  Host a = random_host({rows, hidden}), b = random_host({rows, hidden});
  Tensor ga = gpu_->upload(a.bf16), gaf = gpu_->upload(a.f32), ca = copy_of(a.f32);
  gpu_->add(ga, gpu_->upload(b.bf16));
  gpu_->add(gaf, gpu_->upload(b.bf16));
  cpu_->add(ca, b.f32);
  EXPECT_LT(rel_err(get(ga), ca.to_f32_vector()), kBf16Tol);
  EXPECT_LT(rel_err(get(gaf), ca.to_f32_vector()), 1e-6);
  // gather_rows, exact
  std::vector<int32_t> pick = {5, 0, 3, 3};
  Tensor gg = poisoned({4, hidden}), cg = Tensor::empty({4, hidden}, DType::F32);
  gpu_->gather_rows(gpu_->upload(a.bf16), pick, gg);
  cpu_->gather_rows(a.f32, pick, cg);
  EXPECT_EQ(get(gg), cg.to_f32_vector());
}

// A paged KV pool on both backends filled with the same random K/V for `len` positions of each
// sequence, blocks scattered in the pool.
struct Pools {
  KvLayer g, c;
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> written;  // slots kv_write filled
  int block_size = 16;
};

// `kv`: the K and V values (rows in sequence order), random when null; `block_size`: 16 as the engine.
Pools make_pools(Backend& gpu, Backend& cpu, const std::vector<int>& lens, int hk, int d,
                 const std::pair<Host, Host>* kv = nullptr, int block_size = 16) {
  Pools p;
  p.block_size = block_size;
  int total_blocks = 0;
  for (int l : lens) total_blocks += (l + p.block_size - 1) / p.block_size;
  const int nb = total_blocks + 3;
  std::vector<int32_t> perm(nb);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng());
  int next = 0;
  BatchMeta m;
  m.block_size = p.block_size;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> t;
    for (int i = 0; i < (lens[s] + p.block_size - 1) / p.block_size; ++i) t.push_back(perm[next++]);
    for (int pos = 0; pos < lens[s]; ++pos) {
      m.tokens.push_back(0), m.positions.push_back(pos), m.row_seq.push_back(int(s));
      m.slots.push_back(t[pos / p.block_size] * p.block_size + pos % p.block_size);
    }
    p.tables.push_back(t);
  }
  m.block_tables = p.tables;
  p.written = m.slots;
  p.g = {gpu.alloc({nb, p.block_size, hk, d}, DType::BF16),
         gpu.alloc({nb, p.block_size, hk, d}, DType::BF16)};
  // Unwritten slots are NaN: reading one shows.
  cudaMemsetAsync(p.g.k.raw(), 0xFF, p.g.k.nbytes(), cuda::stream_of(gpu));
  cudaMemsetAsync(p.g.v.raw(), 0xFF, p.g.v.nbytes(), cuda::stream_of(gpu));
  p.c = {Tensor::zeros({nb, p.block_size, hk, d}, DType::F32),
         Tensor::zeros({nb, p.block_size, hk, d}, DType::F32)};
  Host k = kv ? kv->first : random_host({m.rows(), hk, d}),
       v = kv ? kv->second : random_host({m.rows(), hk, d});
  gpu.begin_forward(m);
  cpu.begin_forward(m);
  gpu.kv_write(p.g, gpu.upload(k.bf16), gpu.upload(v.bf16));
  cpu.kv_write(p.c, k.f32, v.f32);
  gpu.synchronize();
  return p;
}

// Rows (seq, position) of one call, positions increasing within a sequence.
BatchMeta rows_meta(const Pools& p, const std::vector<std::pair<int, int>>& rows) {
  BatchMeta m;
  m.block_size = p.block_size;
  m.block_tables = p.tables;
  for (auto [s, pos] : rows) {
    m.tokens.push_back(0), m.positions.push_back(pos), m.row_seq.push_back(s);
    m.slots.push_back(p.tables[s][pos / p.block_size] * p.block_size + pos % p.block_size);
  }
  return m;
}

TEST_F(CudaOps, KvWriteAndAttentionMatchCpu) {
  struct Heads {
    int hq, hk, d;
  };
  // Tensor-core kernel where supported (head_dim 64/128, groups dividing 16), and the CUDA-core kernel.
  for (bool mma : {true, false}) {
    SCOPED_TRACE(mma ? "tensor-core attention" : "CUDA-core attention");
    cuda::set_attention_mma(mma);
    for (Heads hs : {Heads{8, 2, 128}, Heads{4, 2, 64}, Heads{16, 2, 256}, Heads{6, 6, 128}, Heads{4, 2, 32},
                     Heads{16, 1, 128}})
      attention_vs_cpu(hs.hq, hs.hk, hs.d);
    for (auto sched : {cuda::TileSchedule::Loop, cuda::TileSchedule::Split}) {  // each schedule alone
      cuda::set_attention_tile_schedule(sched);
      attention_vs_cpu(8, 2, 128);
    }
    cuda::set_attention_split_chunks(3);  // split blocks walking 3 chunks each
    attention_vs_cpu(8, 2, 128);
    cuda::set_attention_split_chunks(0);
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
  }
  cuda::set_attention_mma(true);
}

void CudaOps::attention_vs_cpu(int hq, int hk, int d) {
  SCOPED_TRACE("hq " + std::to_string(hq) + " hk " + std::to_string(hk) + " d " + std::to_string(d));
  Pools pools = make_pools(*gpu_, *cpu_, {1100, 45, 300}, hk, d);
  // K/V pools must hold exactly what was written.
  for (auto [g, c] : {std::pair{&pools.g.k, &pools.c.k}, std::pair{&pools.g.v, &pools.c.v}}) {
    const std::vector<float> gv = get(*g), cv = c->to_f32_vector();
    const int64_t row = int64_t(hk) * d;
    for (int32_t slot : pools.written)
      ASSERT_TRUE(std::equal(gv.begin() + slot * row, gv.begin() + (slot + 1) * row, cv.begin() + slot * row))
          << "slot " << slot;
  }
  // 51 rows: one row per block; 70 rows: blocks of several rows, runs of two sequences inside them.
  for (int decode_rows : {1, 20}) {
    std::vector<std::pair<int, int>> rows;
    for (int pos = 1100 - decode_rows; pos < 1100; ++pos) rows.push_back({0, pos});  // decode (or a chunk)
    for (int pos = 0; pos < 45; ++pos) rows.push_back({1, pos});                     // prefill
    for (int pos = 295; pos < 300; ++pos) rows.push_back({2, pos});                  // verify
    const int r = int(rows.size());
    BatchMeta meta = rows_meta(pools, rows);
    for (int variant = 0; variant < 3; ++variant) {
      AttentionParams ap{
          hq, hk, d, 1.f / std::sqrt(float(d)), variant == 1 ? 200 : 0, variant == 2 ? 30.f : 0.f};
      Host q = random_host({r, hq, d}, 2.f);
      Tensor go = poisoned({r, hq, d}), co = Tensor::empty({r, hq, d}, DType::F32);
      gpu_->begin_forward(meta);
      cpu_->begin_forward(meta);
      gpu_->attention(gpu_->upload(q.bf16), pools.g, ap, go);
      cpu_->attention(q.f32, pools.c, ap, co);
      EXPECT_LT(rel_err(get(go), co.to_f32_vector()), kBf16Tol) << "variant " << variant << ", rows " << r;
    }
  }
}

TEST_F(CudaOps, AttentionRowInvariantAcrossDecodeVerifyPrefill) {
  const int hq = 32, hk = 8, d = 128, len = 600, other = 700;
  Pools pools = make_pools(*gpu_, *cpu_, {len, other}, hk, d);
  const int last = len - 1;
  for (int window : {0, 300}) {
    Host q_last = random_host({1, hq, d}, 2.f);
    AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), window, 0.f};
    // Output bits of the row for position `last` of sequence 0 in a call made of `rows`.
    auto run = [&](const std::vector<std::pair<int, int>>& rows) {
      const int r = int(rows.size());
      Host q = random_host({r, hq, d}, 2.f);
      int at = -1;
      for (int i = 0; i < r; ++i)
        if (rows[i] == std::pair<int, int>{0, last}) at = i;
      std::memcpy(q.bf16.data<uint16_t>() + int64_t(at) * hq * d, q_last.bf16.raw(), hq * d * 2);
      const auto b = attention_bits(gpu_->upload(q.bf16), pools.g, rows_meta(pools, rows), ap);
      return std::vector<uint16_t>(b.begin() + int64_t(at) * hq * d, b.begin() + int64_t(at + 1) * hq * d);
    };
    const auto alone = run({{0, last}});
    for (int variant_bits = 0; variant_bits < 6; ++variant_bits) {
      const auto sched = std::array{cuda::TileSchedule::Auto, cuda::TileSchedule::Loop,
                                    cuda::TileSchedule::Split}[variant_bits % 3];
      const bool wide = variant_bits < 3;  // the 8-warp loop kernel (joined tiles), then the 4-warp one
      SCOPED_TRACE("tile schedule " + std::to_string(int(sched)) + (wide ? ", wide loop" : ", narrow loop"));
      cuda::set_attention_tile_schedule(sched);
      cuda::set_attention_loop_wide(wide);
      for (auto variant : {cuda::LoopVariant::Plain, cuda::LoopVariant::Prefetch}) {  // same bits either way
        cuda::set_attention_variant(variant);
        EXPECT_EQ(run({{0, last}}), alone) << "variant " << int(variant) << ", window " << window;
        std::vector<std::pair<int, int>> chunk7;
        for (int p = len - 7; p < len; ++p) chunk7.push_back({0, p});
        EXPECT_EQ(run(chunk7), alone) << "variant " << int(variant) << " in a chunk of 7, window " << window;
      }
      cuda::set_attention_variant(cuda::LoopVariant::Auto);
      std::vector<std::pair<int, int>> verify;
      for (int p = last - 4; p <= last; ++p) verify.push_back({0, p});
      EXPECT_EQ(run(verify), alone) << "as one of k+1 verify rows, window " << window;
      for (int chunk : {1, 7, 64, 512}) {
        std::vector<std::pair<int, int>> rows;
        for (int p = len - chunk; p < len; ++p) rows.push_back({0, p});
        EXPECT_EQ(run(rows), alone) << "inside a prefill chunk of " << chunk << ", window " << window;
      }
      // Inside a batch with another sequence's rows (at a longer context) before it.
      std::vector<std::pair<int, int>> mixed;
      for (int p = other - 17; p < other; ++p) mixed.push_back({1, p});
      mixed.push_back({0, last});
      EXPECT_EQ(run(mixed), alone) << "inside a batch with another sequence, window " << window;
      // A prefill-sized call (several rows per attention block) whose second sequence starts mid-block.
      std::vector<std::pair<int, int>> big;
      for (int p = other - 61; p < other; ++p) big.push_back({1, p});
      for (int p = last - 9; p <= last; ++p) big.push_back({0, p});
      EXPECT_EQ(run(big), alone) << "in a 71-row batch of two sequences, window " << window;
      cuda::set_attention_rows_per_block(cuda::LoopVariant::Plain);
      EXPECT_EQ(run(big), alone) << "one row per block, window " << window;
      cuda::set_attention_rows_per_block(cuda::LoopVariant::Auto);
      for (int cpb : {2, 3, 8}) {  // split blocks walking several chunks (a no-op for loop tiles)
        cuda::set_attention_split_chunks(cpb);
        EXPECT_EQ(run(big), alone) << "split blocks of " << cpb << " chunks, window " << window;
        EXPECT_EQ(run(verify), alone) << "verify, split blocks of " << cpb << " chunks, window " << window;
        EXPECT_EQ(run(mixed), alone) << "mixed, split blocks of " << cpb << " chunks, window " << window;
      }
      cuda::set_attention_split_chunks(0);
      cuda::set_attention_spread(false);  // one warp on each chunk of a one-warp tile (spread: all of them)
      EXPECT_EQ(run({{0, last}}), alone) << "not spread, window " << window;
      EXPECT_EQ(run(verify), alone) << "verify, not spread, window " << window;
      EXPECT_EQ(run(mixed), alone) << "mixed, not spread, window " << window;
      cuda::set_attention_spread(true);
      if (sched ==
          cuda::TileSchedule::Split) {  // one block a (tile, KV head) over all its chunks, no combine
        std::vector<std::pair<int, int>> verify4;  // 4 rows of 4 heads: the most pairs one warp holds
        for (int p = last - 3; p <= last; ++p) verify4.push_back({0, p});
        const int dl0 = cuda::attention_decode_loop();
        for (int mode : {2, 4}) {  // one team, two teams
          SCOPED_TRACE("decode loop mode " + std::to_string(mode));
          cuda::set_attention_decode_loop(mode);
          const long launches = cuda::attention_decode_loop_launches(mode == 4);
          EXPECT_EQ(run({{0, last}}), alone) << "decode loop, window " << window;
          EXPECT_EQ(run(verify4), alone) << "verify of 4 rows, decode loop, window " << window;
          EXPECT_EQ(cuda::attention_decode_loop_launches(mode == 4), launches + 2)
              << "the decode loop kernel did not run";
          EXPECT_EQ(run(verify), alone)
              << "verify of 5 rows (two warps: split), decode loop on, window " << window;
        }
        cuda::set_attention_decode_loop(dl0);
      }
    }
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
    cuda::set_attention_loop_wide(true);
  }
}

// Prefill tiles on warpgroup MMAs (attention_wgmma.cu) against the wide loop kernel, bit for bit: GQA groups
// of 4, 8 and 1, with and without a window and a soft cap; one call of a whole 600-position prompt (its last
// page half past the sequence: NaN slots in the pool) and a 61-row chunk of a second sequence ending at 700.
TEST_F(CudaOps, AttentionWgmmaEqualsTheWideLoop) {
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "needs an sm_90 GPU and the sm_90a kernels";
  const int d = 128;
  const bool on0 = cuda::attention_wgmma(), pp0 = cuda::attention_wgmma_pp();
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Loop);
  for (auto [hq, hk] : {std::pair{32, 8}, std::pair{32, 4}, std::pair{8, 8}}) {
    Pools pools = make_pools(*gpu_, *cpu_, {600, 700}, hk, d);
    std::vector<std::pair<int, int>> rows;
    for (int p = 0; p < 600; ++p) rows.push_back({0, p});
    for (int p = 700 - 61; p < 700; ++p) rows.push_back({1, p});
    const BatchMeta meta = rows_meta(pools, rows);
    const Host q = random_host({int64_t(rows.size()), hq, d}, 2.f);
    const Tensor gq = gpu_->upload(q.bf16);
    for (int window : {0, 300})
      for (float softcap : {0.f, 30.f}) {
        SCOPED_TRACE("hq " + std::to_string(hq) + ", hk " + std::to_string(hk) + ", window " +
                     std::to_string(window) + ", softcap " + std::to_string(softcap));
        const AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), window, softcap};
        cuda::set_attention_wgmma(false);
        const auto wide = attention_bits(gq, pools.g, meta, ap);
        cuda::set_attention_wgmma(true);
        for (bool pp : {false, true}) {  // the warpgroups' MMAs as they come, in turns
          cuda::set_attention_wgmma_pp(pp);
          const uint64_t before = cuda::attention_wgmma_launches();
          const auto wg = attention_bits(gq, pools.g, meta, ap);
          EXPECT_EQ(cuda::attention_wgmma_launches(), before + 1)
              << "the wgmma kernel did not run, pp " << pp;
          ASSERT_EQ(wg.size(), wide.size());
          size_t diff = 0, first = 0;
          for (size_t i = 0; i < wg.size(); ++i)
            if (wg[i] != wide[i] && diff++ == 0) first = i;
          EXPECT_EQ(diff, 0u) << "pp " << pp << ": first at element " << first << " (row "
                              << first / (size_t(hq) * d) << ", head " << first / d % hq << ", dim "
                              << first % d << ")";
        }
      }
  }
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
  cuda::set_attention_wgmma(on0);
  cuda::set_attention_wgmma_pp(pp0);
}

// 16 decode rows of 8 KV heads (128 split (tile, KV head) pairs): the fused combine, which by default stops
// at 64 pairs (set_attention_fused_combine_max), gives the combine launch's bits when its limit is raised,
// and both the loop schedule's, as does the decode loop kernel (one block a (row, KV head), no partials).
// (Speed knobs: runs 453 and 455 time them at b = 16.)
TEST_F(CudaOps, AttentionSixteenRowsFusedCombineEqualsCombineLaunch) {
  const int hq = 32, hk = 8, d = 128, seqs = 16;
  std::vector<int> lens;
  std::vector<std::pair<int, int>> rows;
  for (int i = 0; i < seqs; ++i) lens.push_back(520 + 37 * i), rows.push_back({i, 519 + 37 * i});
  Pools pools = make_pools(*gpu_, *cpu_, lens, hk, d);
  const Host q = random_host({seqs, hq, d}, 2.f);
  const Tensor gq = gpu_->upload(q.bf16);
  const BatchMeta meta = rows_meta(pools, rows);
  const AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), 0, 0.f};
  auto run = [&] { return attention_bits(gq, pools.g, meta, ap); };
  // Whether the latest split launch merged in its blocks: a block's "ticket" stamp (6) is written only by the
  // fused combine (a stamp a launch does not reach reads 0).
  auto fused_ran = [] {
    int blocks = 0;
    const std::vector<unsigned long long> st = cuda::attention_stamps(&blocks);
    for (int b = 0; b < blocks; ++b)
      if (st[size_t(b) * cuda::kAttnStamps + 6]) return true;
    return false;
  };
  const int max0 = cuda::attention_fused_combine_max(), dl0 = cuda::attention_decode_loop();
  cuda::set_attention_decode_loop(0);  // the split schedule (the default rule takes 128 blocks: below)
  cuda::set_attention_fused_combine_max(64);
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Loop);
  const auto loop = run();
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Split);
  cuda::set_attention_stamps(true);
  const auto launch = run();  // 128 pairs > 64: the combine launch
  EXPECT_FALSE(fused_ran()) << "64 pairs at most, yet the fused combine ran";
  cuda::set_attention_fused_combine_max(cuda::kFusedCombineCap);
  const auto fused = run();
  EXPECT_TRUE(fused_ran()) << "the raised limit did not take the fused combine";
  cuda::set_attention_stamps(false);
  cuda::set_attention_fused_combine_max(max0);
  const long launches = cuda::attention_decode_loop_launches();
  cuda::set_attention_decode_loop(2);
  const auto decode_loop = run();
  EXPECT_EQ(cuda::attention_decode_loop_launches(), launches + 1) << "the decode loop kernel did not run";
  cuda::set_attention_decode_loop(1);  // where 128 blocks fill 3/4 of the SMs to all of them (the H200's 132)
  const auto decode_loop1 = run();
  const long teams = cuda::attention_decode_loop_launches(true);
  cuda::set_attention_decode_loop(4);  // two teams a block
  const auto decode_teams = run();
  EXPECT_EQ(cuda::attention_decode_loop_launches(true), teams + 1) << "the two-team kernel did not run";
  cuda::set_attention_decode_loop(3);  // the default rule (attention_decode_loop_takes)
  const long teams3 = cuda::attention_decode_loop_launches(true);
  const auto decode_rule = run();
  EXPECT_EQ(cuda::attention_decode_loop_launches(true) - teams3,
            cuda::attention_decode_loop_takes(seqs, hk, true, 1) == 2 ? 1 : 0)
      << "the launch and the rule disagree";
  cuda::set_attention_decode_loop(dl0);
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
  EXPECT_EQ(launch, loop) << "combine launch";
  EXPECT_EQ(fused, loop) << "fused combine at 128 pairs";
  EXPECT_EQ(decode_loop, loop) << "decode loop kernel";
  EXPECT_EQ(decode_loop1, loop) << "decode loop kernel, mode 1";
  EXPECT_EQ(decode_rule, loop) << "decode loop kernel, mode 3 (the default rule)";
  EXPECT_EQ(decode_teams, loop) << "decode loop kernel, two teams";
}

// The decode loop kernel gives the split schedule's bits for every row of a call: head dims 128 and 64, GQA
// groups 4, 8 and 16, softcap, a window, contexts of 1 to 5 chunks (one chunk: no second stage; two: no chunk
// c + 2), decode rows of four sequences and a verify run of 16 / group rows (one warp of pairs) across a
// chunk boundary; with one team a block and with two (alternate chunks, team 1's handed to team 0: zero to
// two handoffs here, dozens in AttentionLongContextSplitEqualsLoop).
TEST_F(CudaOps, AttentionDecodeLoopEqualsSplit) {
  struct Shape {
    int hq, hk, d;
  };
  for (const Shape sh : {Shape{32, 8, 128}, Shape{16, 2, 64}, Shape{32, 2, 128}}) {
    const int group = sh.hq / sh.hk;
    const std::vector<int> lens = {5, 130, 260, 600, 129};
    Pools pools = make_pools(*gpu_, *cpu_, lens, sh.hk, sh.d);
    std::vector<std::pair<int, int>> rows;
    for (int s = 0; s < 4; ++s) rows.push_back({s, lens[size_t(s)] - 1});
    for (int p = lens[4] - 16 / group; p < lens[4]; ++p) rows.push_back({4, p});
    const Host q = random_host({int64_t(rows.size()), sh.hq, sh.d}, 2.f);
    const Tensor gq = gpu_->upload(q.bf16);
    const BatchMeta meta = rows_meta(pools, rows);
    for (float softcap : {0.f, 30.f}) {
      for (int window : {0, 100}) {
        SCOPED_TRACE("hq " + std::to_string(sh.hq) + ", hk " + std::to_string(sh.hk) + ", d " +
                     std::to_string(sh.d) + ", softcap " + std::to_string(softcap) + ", window " +
                     std::to_string(window));
        const AttentionParams ap{sh.hq, sh.hk, sh.d, 1.f / std::sqrt(float(sh.d)), window, softcap};
        cuda::set_attention_tile_schedule(cuda::TileSchedule::Split);
        const int dl0 = cuda::attention_decode_loop();
        cuda::set_attention_decode_loop(0);  // the split schedule itself, whatever the default rule takes
        const auto split = attention_bits(gq, pools.g, meta, ap);
        for (int mode : {2, 4}) {  // one team, two teams (chunks alternating, handed over in order)
          cuda::set_attention_decode_loop(mode);
          const long launches = cuda::attention_decode_loop_launches(mode == 4);
          const auto loop = attention_bits(gq, pools.g, meta, ap);
          EXPECT_EQ(cuda::attention_decode_loop_launches(mode == 4), launches + 1)
              << "the decode loop kernel did not run, mode " << mode;
          EXPECT_EQ(loop, split) << "mode " << mode;
        }
        cuda::set_attention_decode_loop(dl0);
        cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
      }
    }
  }
}

// Long contexts (33 and 70 chunks): the split schedule's merge of many partials (fused into the last block,
// or the combine kernel; blocks walking 1, 2 or 8 chunks; 4 or 16 chunks a merge step) and the narrow loop
// kernel give the wide loop kernel's bits (K/V staged by bulk copies or cp.async), for decode rows of two
// sequences and a verify run of 4 rows.
TEST_F(CudaOps, AttentionLongContextSplitEqualsLoop) {
  const int hq = 32, hk = 8, d = 128;
  Pools pools = make_pools(*gpu_, *cpu_, {4200, 8900}, hk, d);
  const std::vector<std::pair<int, int>> rows = {{0, 4199}, {1, 8896}, {1, 8897}, {1, 8898}, {1, 8899}};
  const int r = int(rows.size());
  const Host q = random_host({r, hq, d}, 2.f);
  const Tensor gq = gpu_->upload(q.bf16);
  const BatchMeta meta = rows_meta(pools, rows);
  const AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), 0, 0.f};
  auto run = [&] { return attention_bits(gq, pools.g, meta, ap); };
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Loop);
  const auto loop = run();
  cuda::set_attention_wide_tma(false);  // the wide loop kernel's cp.async staging
  EXPECT_EQ(run(), loop) << "wide loop kernel, cp.async staging";
  cuda::set_attention_wide_tma(true);
  cuda::set_attention_loop_wide(false);  // the narrow loop kernel
  EXPECT_EQ(run(), loop) << "narrow loop kernel";
  cuda::set_attention_loop_wide(true);
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Split);
  const int dl0 = cuda::attention_decode_loop();
  cuda::set_attention_decode_loop(0);  // the split schedule's variants, whatever the default rule takes
  for (int fused : {1, 0}) {
    cuda::set_attention_fused_combine(fused == 1);
    for (int cpb : {0, 1, 2, 8}) {
      cuda::set_attention_split_chunks(cpb);
      EXPECT_EQ(run(), loop) << "fused combine " << fused << ", chunks a block " << cpb;
      cuda::set_attention_spread(false);  // one warp on each chunk of the one-warp tiles
      EXPECT_EQ(run(), loop) << "fused combine " << fused << ", chunks a block " << cpb << ", not spread";
      cuda::set_attention_spread(true);
    }
    cuda::set_attention_split_chunks(0);
    for (int mode : {2, 4}) {  // one block a (tile, KV head) over 33 / 70 chunks, no partials; two teams
      cuda::set_attention_decode_loop(mode);
      const long launches = cuda::attention_decode_loop_launches(mode == 4);
      EXPECT_EQ(run(), loop) << "decode loop kernel, mode " << mode;
      EXPECT_EQ(cuda::attention_decode_loop_launches(mode == 4), launches + 1)
          << "the decode loop kernel did not run, mode " << mode;
    }
    cuda::set_attention_decode_loop(0);
    cuda::set_attention_wide_combine(false);  // 4 chunks a merge step
    EXPECT_EQ(run(), loop) << "fused combine " << fused << ", narrow merge";
    cuda::set_attention_wide_combine(true);
  }
  cuda::set_attention_split_chunks(0);
  cuda::set_attention_fused_combine(true);
  cuda::set_attention_decode_loop(dl0);
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
  Tensor co = Tensor::empty({r, hq, d}, DType::F32);
  cpu_->begin_forward(meta);
  cpu_->attention(q.f32, pools.c, ap, co);
  gpu_->begin_forward(meta);
  Tensor go = poisoned({r, hq, d});
  gpu_->attention(gq, pools.g, ap, go);
  EXPECT_LT(rel_err(get(go), co.to_f32_vector()), kBf16Tol);
}

// The pool's block size changes where K/V rows live, never a bit of attention's output: the kernel stages
// the same bytes (block sizes of 4 and more: table entries by lane and shuffles; 16 is the engine's; 256
// spans two chunks a block; 12 and 2 take the per-copy table path), for decode, verify and prefill rows, both
// schedules.
TEST_F(CudaOps, AttentionBitsIndependentOfBlockSize) {
  const int hq = 8, hk = 2, d = 128;
  const std::vector<int> lens = {700, 45};
  int total = 0;
  for (int l : lens) total += l;
  const std::pair<Host, Host> kv{random_host({total, hk, d}), random_host({total, hk, d})};
  std::vector<std::pair<int, int>> rows;
  for (int pos = 640; pos < 700; ++pos) rows.push_back({0, pos});
  for (int pos = 0; pos < 45; ++pos) rows.push_back({1, pos});
  const int r = int(rows.size());
  const Host q = random_host({r, hq, d}, 2.f);
  const AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), 0, 0.f};
  for (auto sched : {cuda::TileSchedule::Loop, cuda::TileSchedule::Split}) {
    cuda::set_attention_tile_schedule(sched);
    std::vector<uint16_t> ref;
    for (int bs : {16, 4, 8, 256, 12, 2}) {
      SCOPED_TRACE("block size " + std::to_string(bs) + ", schedule " + std::to_string(int(sched)));
      Pools pools = make_pools(*gpu_, *cpu_, lens, hk, d, &kv, bs);
      const auto b = attention_bits(gpu_->upload(q.bf16), pools.g, rows_meta(pools, rows), ap);
      if (ref.empty())
        ref = b;
      else
        EXPECT_EQ(b, ref);
    }
  }
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
}

// Decode and short verify rows (split schedule) equal the same rows computed inside a prefill chunk (loop
// tiles: the wide 8-warp kernel and the 4-warp one), for every GQA group size.
TEST_F(CudaOps, AttentionDecodeRowsEqualPrefillRows) {
  const int len = 700;
  for (auto [hq, hk, d] : {std::tuple{8, 8, 128}, std::tuple{16, 8, 128}, std::tuple{32, 8, 128},
                           std::tuple{16, 2, 128}, std::tuple{16, 1, 128}, std::tuple{32, 4, 64}}) {
    SCOPED_TRACE("hq " + std::to_string(hq) + " hk " + std::to_string(hk) + " d " + std::to_string(d));
    Pools pools = make_pools(*gpu_, *cpu_, {len}, hk, d);
    const AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), 0, 0.f};
    const Host q = random_host({64, hq, d}, 2.f);  // the rows' queries: row i is position len - 64 + i
    auto run = [&](int first, int n) {             // rows len-64+first .. +n, each with its own query
      std::vector<std::pair<int, int>> rows;
      for (int i = first; i < first + n; ++i) rows.push_back({0, len - 64 + i});
      Tensor qq = gpu_->upload(
          Tensor::borrow(const_cast<uint16_t*>(q.bf16.data<uint16_t>()) + int64_t(first) * hq * d, {n, hq, d},
                         DType::BF16, Device::CPU));
      return attention_bits(qq, pools.g, rows_meta(pools, rows), ap);
    };
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Loop);
    const auto prefill = run(0, 64);
    cuda::set_attention_loop_wide(false);
    EXPECT_EQ(run(0, 64), prefill) << "the narrow loop kernel";
    cuda::set_attention_loop_wide(true);
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Split);
    const int64_t row = int64_t(hq) * d;
    // Partials merged by the last block or by the combine kernel; tiles whose pairs fit one warp computed by
    // every warp of a block (spread) or by that warp alone.
    for (int mode = 0; mode < 6; ++mode) {  // (modes 4, 5: the fused combine's two pairs a warp)
      const bool fused = mode % 2 == 0 || mode == 5, spread = mode < 2 || mode == 4;
      cuda::set_attention_fused_combine(fused);
      cuda::set_attention_spread(spread);
      cuda::set_attention_half_combine(mode >= 4);
      for (int n : {1, 2, 3, 4, 16}) {
        if (n * (hq / hk) > 16 && n > 2) continue;
        for (int first : {0, 60 - n + 4}) {
          const auto got = run(first, n);
          EXPECT_TRUE(std::equal(got.begin(), got.end(), prefill.begin() + first * row))
              << n << " rows from " << first << (fused ? ", fused combine" : ", combine kernel")
              << (spread ? ", spread" : "") << (mode >= 4 ? ", two pairs a warp" : "");
        }
      }
    }
    cuda::set_attention_fused_combine(true);
    cuda::set_attention_spread(true);
    cuda::set_attention_half_combine(true);
    cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
  }
}

// The CPU reference twin of the tile planner's contract: tiles cover every row once, never mix
// sequences, never exceed the tile size; the schedule only moves tiles between the two lists.
TEST(AttentionTiles, PlanCoversRowsBySequence) {
  std::vector<int32_t> row_seq;
  for (int s = 0; s < 5; ++s)
    for (int i = 0; i < (s * 23) % 41 + 1; ++i) row_seq.push_back(s);
  for (int rpt : {4, 16, 64})
    for (auto sched : {cuda::TileSchedule::Auto, cuda::TileSchedule::Loop, cuda::TileSchedule::Split}) {
      std::vector<int32_t> loop, split;
      cuda::plan_attention_tiles(row_seq, rpt, sched, loop, split);
      std::vector<int> covered(row_seq.size(), 0);
      for (const auto* list : {&loop, &split})
        for (size_t t = 0; t < list->size(); t += 2) {
          const int first = (*list)[t], n = (*list)[t + 1];
          ASSERT_GE(n, 1);
          ASSERT_LE(n, rpt);
          for (int r = first; r < first + n; ++r) {
            ++covered[r];
            EXPECT_EQ(row_seq[r], row_seq[first]);
          }
        }
      for (int c : covered) EXPECT_EQ(c, 1);
      if (sched == cuda::TileSchedule::Auto) {  // too few half-full tiles to fill the card: all split
        std::vector<int32_t> l2, s2;
        cuda::plan_attention_tiles(row_seq, rpt, sched, l2, s2, 1000);
        EXPECT_TRUE(l2.empty());
        EXPECT_EQ(s2.size(), loop.size() + split.size());
      }
      if (sched == cuda::TileSchedule::Loop) {
        EXPECT_TRUE(split.empty());
      }
      // Joined loop tiles (the wide kernel's): the same rows, at most two tiles' worth, one sequence each.
      std::vector<int32_t> wide = loop;
      cuda::widen_loop_tiles(row_seq, rpt, wide);
      EXPECT_LE(wide.size(), loop.size());
      int rows_before = 0, rows_after = 0;
      for (size_t t = 0; t < loop.size(); t += 2) rows_before += loop[t + 1];
      for (size_t t = 0; t < wide.size(); t += 2) {
        const int first = wide[t], n = wide[t + 1];
        rows_after += n;
        ASSERT_LE(n, 2 * rpt);
        for (int r = first; r < first + n; ++r) EXPECT_EQ(row_seq[r], row_seq[first]);
      }
      EXPECT_EQ(rows_after, rows_before);
      if (sched == cuda::TileSchedule::Loop && rpt == 4) {  // long sequences: some tiles joined
        EXPECT_LT(wide.size(), loop.size());
      }
      if (sched == cuda::TileSchedule::Split) {
        EXPECT_TRUE(loop.empty());
      }
    }
}

// Keyed sampling on the device gives the host reference's token for every row, whatever the number of
// rows in the call (each row alone, then all together).
TEST_F(CudaOps, SampleRowsMatchesHostReference) {
  const int vocab = 151936, n = 24;
  std::vector<float> host(size_t(n) * vocab);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  for (auto& x : host) x = std::round(nd(rng) * 64.f) / 64.f;  // coarse: ties happen
  std::vector<RowSampling> rows;
  for (int r = 0; r < n; ++r)
    rows.push_back({r % 4 == 0 ? 0.f : 0.25f * float(r % 4 + 1), uint64_t(99 + r), int64_t(1000 * r)});
  std::vector<int32_t> expect;
  sample_rows_reference(host.data(), vocab, rows, expect);
  Tensor dev = gpu_->upload(Tensor::borrow(host.data(), {n, vocab}, DType::F32, Device::CPU));
  std::vector<int32_t> got;
  gpu_->sample_rows(dev, rows, got);
  EXPECT_EQ(got, expect);
  for (int r = 0; r < n; r += 5) {
    std::vector<int32_t> one;
    Tensor row =
        gpu_->upload(Tensor::borrow(host.data() + size_t(r) * vocab, {1, vocab}, DType::F32, Device::CPU));
    gpu_->sample_rows(row, {rows[r]}, one);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0], expect[r]) << "row " << r;
  }
}

// The same for vocabularies that are not a multiple of the kernel's span of ids (one span, a partial last
// span) and rows with NaN and infinite logits (the reference never picks a NaN score and keeps id 0 when
// id 0's score is NaN), in calls of changing row counts (each row's ticket is reset by its last block).
TEST_F(CudaOps, SampleRowsMatchesHostReferenceAtEdges) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const int vocab : {5, 1000, 2048, 2049, 151936}) {
    for (const int n : {1, 7, 3, 40}) {
      std::vector<float> host(size_t(n) * vocab);
      for (auto& x : host) x = std::round(nd(rng) * 8.f) / 8.f;
      std::vector<RowSampling> rows;
      for (int r = 0; r < n; ++r) {
        float* row = host.data() + size_t(r) * vocab;
        switch (r % 6) {
          case 1:
            row[0] = nan;
            break;  // id 0 NaN: the reference answers 0
          case 2:   // NaNs elsewhere, one of them past the best finite id
            for (int i = 1; i < vocab; i += 3) row[i] = nan;
            break;
          case 3:
            row[vocab - 1] = inf, row[vocab / 2] = inf;
            break;  // ties at +inf: the lower id
          case 4:   // every id -inf but one NaN: id 0
            for (int i = 0; i < vocab; ++i) row[i] = -inf;
            row[vocab - 1] = nan;
            break;
          default:
            break;
        }
        rows.push_back({r % 2 ? 0.8f : 0.f, uint64_t(5 + r), int64_t(31 * r + vocab)});
      }
      std::vector<int32_t> expect, got;
      sample_rows_reference(host.data(), vocab, rows, expect);
      Tensor dev = gpu_->upload(Tensor::borrow(host.data(), {n, vocab}, DType::F32, Device::CPU));
      gpu_->sample_rows(dev, rows, got);
      EXPECT_EQ(got, expect) << "vocab " << vocab << ", " << n << " rows";
    }
  }
}

TEST_F(CudaOps, RawBytesRoundTrip) {
  Tensor t = poisoned({4, 1000}, DType::BF16);
  std::vector<uint8_t> in(8000), out(3000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = uint8_t(rng()());
  gpu_->write_raw(t, 0, in.data(), in.size());
  gpu_->read_raw(t, 2500, out.size(), out.data());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), in.begin() + 2500));
  EXPECT_THROW(gpu_->read_raw(t, 7000, 2000, out.data()), Error);
}

// to_host_queued: the copies land at the next wait (synchronize, sample_rows, to_host), in order, also
// when the pinned buffer has to grow while copies are queued.
TEST_F(CudaOps, QueuedReadBackLandsAtTheNextWait) {
  std::vector<uint8_t> a(6000), b(300000);
  for (auto& v : a) v = uint8_t(rng()());
  for (auto& v : b) v = uint8_t(rng()());
  Tensor ta = poisoned({3, 1000}, DType::BF16), tb = poisoned({150, 1000}, DType::BF16);
  gpu_->write_raw(ta, 0, a.data(), a.size());
  gpu_->write_raw(tb, 0, b.data(), b.size());
  Tensor ha = Tensor::empty({3, 1000}, DType::BF16), hb = Tensor::empty({150, 1000}, DType::BF16);
  auto bytes = [](const Tensor& t) { return static_cast<const uint8_t*>(t.raw()); };
  gpu_->to_host_queued(ta, ha);
  gpu_->to_host_queued(tb, hb);  // larger than the first buffer: the queue grows
  gpu_->synchronize();
  EXPECT_TRUE(std::equal(a.begin(), a.end(), bytes(ha)));
  EXPECT_TRUE(std::equal(b.begin(), b.end(), bytes(hb)));
  // Queued, then delivered by sample_rows' wait.
  Tensor hc = Tensor::empty({3, 1000}, DType::BF16);
  gpu_->to_host_queued(ta, hc);
  Tensor logits = gpu_->upload(random_host({2, 64}).f32);
  std::vector<int32_t> tokens;
  gpu_->sample_rows(logits, {{0.f, 1, 0}, {0.f, 2, 1}}, tokens);
  EXPECT_TRUE(std::equal(a.begin(), a.end(), bytes(hc)));
}

TEST_F(CudaOps, RejectsWhatItCannotRun) {
  LinearWeight q;
  q.format = LinearWeight::Format::MlxAffine;
  EXPECT_THROW(gpu_->upload_linear(q), Error);
  Host w, b;
  LinearWeight odd = gpu_->upload_linear(host_linear(16, 40, false, &w, &b));  // K not a multiple of 32
  Tensor x = gpu_->upload(random_host({1, 40}).bf16), y = poisoned({1, 16});
  EXPECT_THROW(gpu_->linear(x, odd, y), Error);
}

}  // namespace
}  // namespace tf

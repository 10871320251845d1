// The decoder's fusions (docs/cuda-notes.md v9) give exactly the bits of the separate ops they replace:
//   - one q/k/v linear over the concatenated weight (fuse_linears, as the model loader builds it) +
//     attention_inputs_qkv == three linears + attention_inputs (q, K/V pool bytes, attention output);
//   - silu_mul_linear (silu_mul inside the down projection's loads, M <= 16) == silu_mul + linear;
//   - add_rms_norm_linear (the norm made inside the next projection, M <= 8) == add_rms_norm + linear;
//   - the short-call attention rule (all loop tiles, no combine) == the split schedule.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "models/weights.h"
#include "ops/backend.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/kernels.h"
#include "ops/cuda/linear_wgmma.h"

namespace tf {
namespace {

std::mt19937& rng() {
  static std::mt19937 r(12345);
  return r;
}

// A host bf16 tensor of normal values.
Tensor random_bf16(std::vector<int64_t> shape, float scale) {
  Tensor t = Tensor::empty(std::move(shape), DType::BF16);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(nd(rng()));
  return t;
}

LinearWeight host_linear(int64_t n, int64_t k, bool bias) {
  LinearWeight w;
  w.weight = random_bf16({n, k}, 1.f / std::sqrt(float(k)));
  w.in_features = k, w.out_features = n;
  if (bias) w.bias = random_bf16({n}, 0.5f);
  return w;
}

class CudaFusion : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    gpu_ = make_cuda_backend(0, &why).release();
    why_ = new std::string(why);
  }
  void SetUp() override {
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << *why_;
  }
  // A GPU tensor of NaN bytes: an element an op fails to write shows.
  Tensor poisoned(std::vector<int64_t> shape, DType dt = DType::BF16) {
    Tensor t = gpu_->alloc(std::move(shape), dt);
    EXPECT_EQ(cudaMemsetAsync(t.raw(), 0xFF, t.nbytes(), cuda::stream_of(*gpu_)), cudaSuccess);
    return t;
  }
  std::vector<uint8_t> bytes(const Tensor& t, int64_t begin = 0, int64_t n = -1) {
    if (n < 0) n = int64_t(t.nbytes()) - begin;
    std::vector<uint8_t> v(size_t(n), 0);
    gpu_->read_raw(t, size_t(begin), size_t(n), v.data());
    return v;
  }
  static Backend* gpu_;
  static std::string* why_;
};
Backend* CudaFusion::gpu_ = nullptr;
std::string* CudaFusion::why_ = nullptr;

// M rows of one sequence ending at position `last`, in a pool of shuffled blocks.
BatchMeta seq_meta(int m, int last, int block_size, const std::vector<int32_t>& table) {
  BatchMeta meta;
  meta.block_size = block_size;
  meta.block_tables = {table};
  for (int pos = last - m + 1; pos <= last; ++pos) {
    meta.tokens.push_back(0), meta.positions.push_back(pos), meta.row_seq.push_back(0);
    meta.slots.push_back(table[pos / block_size] * block_size + pos % block_size);
  }
  return meta;
}

TEST_F(CudaFusion, FusedQkvEqualsSeparateLinearsAndAttentionInputs) {
  struct Case {
    int hq, hk, d;
    bool bias, norm;
  };
  const int hidden = 512, bs = 16, ctx = 200;
  for (Case c : {Case{8, 2, 128, false, true}, Case{4, 2, 64, true, false}, Case{4, 1, 128, true, true}}) {
    const LinearWeight hq_w = host_linear(int64_t(c.hq) * c.d, hidden, c.bias),
                       hk_w = host_linear(int64_t(c.hk) * c.d, hidden, c.bias),
                       hv_w = host_linear(int64_t(c.hk) * c.d, hidden, c.bias);
    ASSERT_TRUE(same_layout({hq_w, hk_w, hv_w}));
    const LinearWeight wq = gpu_->upload_linear(hq_w), wk = gpu_->upload_linear(hk_w),
                       wv = gpu_->upload_linear(hv_w),
                       wqkv = gpu_->upload_linear(fuse_linears({hq_w, hk_w, hv_w}));
    const Tensor qn = gpu_->upload(random_bf16({c.d}, 0.3f)), kn = gpu_->upload(random_bf16({c.d}, 0.3f));
    RopeParams rope;
    rope.head_dim = rope.rotary_dim = c.d;
    for (int i = 0; i < c.d / 2; ++i) rope.inv_freq.push_back(std::pow(1e6f, -2.f * i / c.d));
    AttentionParams ap{c.hq, c.hk, c.d, 1.f / std::sqrt(float(c.d)), 0, 0.f};
    const int nb = ctx / bs + 8;
    std::vector<int32_t> table;
    for (int i = 0; i < nb; ++i) table.push_back(nb - 1 - i);  // logical block i in physical block nb-1-i
    for (int m : {1, 5, 16, 17, 64, 100}) {
      SCOPED_TRACE("hq " + std::to_string(c.hq) + " hk " + std::to_string(c.hk) + " d " +
                   std::to_string(c.d) + (c.bias ? " bias" : "") + (c.norm ? " qk-norm" : "") + ", M " +
                   std::to_string(m));
      const BatchMeta meta = seq_meta(m, ctx - 1, bs, table);
      gpu_->begin_forward(meta);
      const Tensor h = gpu_->upload(random_bf16({m, hidden}, 1.f));
      // Three pools holding the same earlier K/V; each path writes this call's rows into its own.
      auto pool = [&] {
        KvLayer l{gpu_->alloc({nb, bs, c.hk, c.d}, DType::BF16),
                  gpu_->alloc({nb, bs, c.hk, c.d}, DType::BF16)};
        cuda::fill_uniform(*gpu_, l.k, 7, -2, 2);
        cuda::fill_uniform(*gpu_, l.v, 8, -1, 1);
        return l;
      };
      const Tensor* pqn = c.norm ? &qn : nullptr;
      const Tensor* pkn = c.norm ? &kn : nullptr;
      // Separate: three linears, attention_inputs, attention.
      Tensor q = poisoned({m, c.hq, c.d}), k = poisoned({m, c.hk, c.d}), v = poisoned({m, c.hk, c.d});
      gpu_->linear(h, wq, q);
      gpu_->linear(h, wk, k);
      gpu_->linear(h, wv, v);
      const auto q_lin = bytes(q), k_lin = bytes(k), v_lin = bytes(v);
      KvLayer sep = pool();
      gpu_->attention_inputs(q, k, v, pqn, pkn, 1e-6f, 0.f, rope, sep);
      Tensor out_sep = poisoned({m, c.hq, c.d});
      gpu_->attention(q, sep, ap, out_sep);
      // Fused: one linear, attention_inputs_qkv reading the parts in place.
      const int64_t width = int64_t(c.hq + 2 * c.hk) * c.d;
      Tensor qkv = poisoned({m, width});
      gpu_->linear(h, wqkv, qkv);
      const auto qkv_lin = bytes(qkv);
      for (int r = 0; r < m; ++r) {  // each row's parts are the separate linears' rows, bit for bit
        const int64_t qb = int64_t(c.hq) * c.d * 2, kb = int64_t(c.hk) * c.d * 2;
        const uint8_t* row = qkv_lin.data() + r * width * 2;
        ASSERT_EQ(std::memcmp(row, q_lin.data() + r * qb, qb), 0) << "q part of row " << r;
        ASSERT_EQ(std::memcmp(row + qb, k_lin.data() + r * kb, kb), 0) << "k part of row " << r;
        ASSERT_EQ(std::memcmp(row + qb + kb, v_lin.data() + r * kb, kb), 0) << "v part of row " << r;
      }
      KvLayer fused = pool();
      Tensor fq = poisoned({m, c.hq, c.d});
      gpu_->attention_inputs_qkv(qkv, fq, pqn, pkn, 1e-6f, 0.f, rope, fused);
      Tensor out_fused = poisoned({m, c.hq, c.d});
      gpu_->attention(fq, fused, ap, out_fused);
      EXPECT_EQ(bytes(qkv), qkv_lin) << "attention_inputs_qkv must not modify qkv";
      EXPECT_EQ(bytes(fq), bytes(q));
      EXPECT_EQ(bytes(fused.k), bytes(sep.k));
      EXPECT_EQ(bytes(fused.v), bytes(sep.v));
      EXPECT_EQ(bytes(out_fused), bytes(out_sep));
      // The Backend default (copies the parts out, then attention_inputs) agrees too.
      KvLayer dflt = pool();
      Tensor dq = poisoned({m, c.hq, c.d});
      gpu_->Backend::attention_inputs_qkv(qkv, dq, pqn, pkn, 1e-6f, 0.f, rope, dflt);
      EXPECT_EQ(bytes(dq), bytes(q));
      EXPECT_EQ(bytes(dflt.k), bytes(sep.k));
      EXPECT_EQ(bytes(dflt.v), bytes(sep.v));
    }
  }
}

TEST_F(CudaFusion, SiluMulLinearEqualsSiluMulThenLinear) {
  cuda::set_fused_silu_linear(true);  // off by default (slower on the H200); the bits must still match
  struct Case {
    int n, inter;
    bool bias;
    DType y;
  };
  // n 64: a grid small enough for the 8-chunk loop (few blocks); 4096: the usual decode shape's rows.
  for (Case c : {Case{320, 1024, false, DType::BF16}, Case{64, 512, true, DType::BF16},
                 Case{200, 768, true, DType::F32}, Case{4096, 256, false, DType::BF16}}) {
    const LinearWeight w = gpu_->upload_linear(host_linear(c.n, c.inter, c.bias));
    for (auto variant : {cuda::LoopVariant::Auto, cuda::LoopVariant::Plain}) {
      cuda::set_linear_variant(variant);
      for (int m : {1, 2, 3, 5, 7, 8, 9, 12, 15, 16, 17, 40}) {
        SCOPED_TRACE("n " + std::to_string(c.n) + " inter " + std::to_string(c.inter) +
                     (c.bias ? " bias" : "") + (c.y == DType::F32 ? " f32 out" : "") + " variant " +
                     std::to_string(int(variant)) + ", M " + std::to_string(m));
        const Tensor gu = gpu_->upload(random_bf16({m, 2 * int64_t(c.inter)}, 2.f));
        Tensor act = poisoned({m, c.inter}), y_sep = poisoned({m, c.n}, c.y);
        gpu_->silu_mul(gu, act);
        gpu_->linear(act, w, y_sep);
        Tensor act2 = poisoned({m, c.inter}), y_fused = poisoned({m, c.n}, c.y);
        gpu_->silu_mul_linear(gu, w, act2, y_fused);
        EXPECT_EQ(bytes(y_fused), bytes(y_sep));
        if (m <= 16) {  // the fused kernel itself (the backend may choose either path)
          Tensor y_k = poisoned({m, c.n}, c.y);
          const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
          ASSERT_TRUE(cuda::linear_silu_bf16(gu.raw(), w.weight.raw(), has_bias ? w.bias.raw() : nullptr,
                                             has_bias ? w.bias.dtype() : DType::F32, y_k.raw(), c.y, m, c.n,
                                             c.inter, cuda::stream_of(*gpu_)));
          EXPECT_EQ(bytes(y_k), bytes(y_sep));
        }
      }
    }
    cuda::set_linear_variant(cuda::LoopVariant::Auto);
  }
  cuda::set_fused_silu_linear(false);  // the default
}

// M > 16 where the wgmma kernel permutes x once per call (sm_90, M >= 512): the permute kernel computes the
// activation (linear_wgmma_silu_bf16); the bits must equal silu_mul then linear. 4096 rows: the TmaXW
// producer (W permuted too); 35 chunks (K 1120): uneven slices; N 1040: a partial weight tile.
TEST_F(CudaFusion, SiluMulInsideWgmmaPermuteEqualsTwoOps) {
  if (!cuda::linear_wgmma_supported()) GTEST_SKIP() << "needs an sm_90 GPU and the sm_90a kernels";
  struct Case {
    int n, inter, m;
    bool bias;
    DType y;
  };
  for (Case c : {Case{4096, 1120, 512, false, DType::BF16}, Case{4096, 1120, 600, true, DType::F32},
                 Case{1040, 4096, 4096, true, DType::BF16}, Case{256, 12288, 520, false, DType::BF16},
                 Case{4096, 4096, 17, false, DType::BF16}}) {
    SCOPED_TRACE("n " + std::to_string(c.n) + " inter " + std::to_string(c.inter) + " M " +
                 std::to_string(c.m));
    const LinearWeight w = gpu_->upload_linear(host_linear(c.n, c.inter, c.bias));
    const Tensor gu = gpu_->upload(random_bf16({c.m, 2 * int64_t(c.inter)}, 2.f));
    Tensor act = poisoned({c.m, c.inter}), y_sep = poisoned({c.m, c.n}, c.y);
    gpu_->silu_mul(gu, act);
    gpu_->linear(act, w, y_sep);
    Tensor act2 = poisoned({c.m, c.inter}), y_fused = poisoned({c.m, c.n}, c.y);
    gpu_->silu_mul_linear(gu, w, act2, y_fused);
    EXPECT_EQ(bytes(y_fused), bytes(y_sep));
    Tensor y_k = poisoned({c.m, c.n}, c.y);
    const bool has_bias = w.bias.defined() && w.bias.numel() > 0;
    const bool took = cuda::linear_silu_bf16(gu.raw(), w.weight.raw(), has_bias ? w.bias.raw() : nullptr,
                                             has_bias ? w.bias.dtype() : DType::F32, y_k.raw(), c.y, c.m, c.n,
                                             c.inter, cuda::stream_of(*gpu_));
    if (c.m < 512) {  // M = 17: the two ops (no permute there)
      EXPECT_FALSE(took);
    }
    if (c.m == 4096) {  // Auto's 128x192 tile with the TmaXW producer
      EXPECT_TRUE(took);
    }
    if (took) {
      EXPECT_EQ(bytes(y_k), bytes(y_sep));
    }
  }
}

Tensor random_f32(std::vector<int64_t> shape, float scale) {
  Tensor t = Tensor::empty(std::move(shape), DType::F32);
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng());
  return t;
}

TEST_F(CudaFusion, AddRmsNormLinearEqualsAddRmsNormThenLinear) {
  cuda::set_fused_norm_linear(true);  // off by default (slower on the H200); the bits must still match
  struct Case {
    int k, n;
    DType res, norm_w, y;
    float offset;
    bool bias;
  };
  // k 4096: the 8B hidden; 800: rows shorter than 32 elements a thread (zeros in the reduction); 8192: the
  // longest row add_rms_norm reduces this way.
  for (Case c : {Case{4096, 320, DType::BF16, DType::BF16, DType::BF16, 0.f, false},
                 Case{800, 64, DType::F32, DType::BF16, DType::BF16, 1.f, true},
                 Case{8192, 96, DType::BF16, DType::F32, DType::F32, 0.f, true},
                 Case{4096, 1040, DType::F32, DType::F32, DType::BF16, 0.f, false}}) {
    const LinearWeight w = gpu_->upload_linear(host_linear(c.n, c.k, c.bias));
    const Tensor nw =
        gpu_->upload(c.norm_w == DType::F32 ? random_f32({c.k}, 0.3f) : random_bf16({c.k}, 0.3f));
    for (auto variant : {cuda::LoopVariant::Auto, cuda::LoopVariant::Plain}) {
      cuda::set_linear_variant(variant);
      for (int m : {1, 2, 3, 5, 8, 9, 13, 16, 17, 40}) {
        SCOPED_TRACE("k " + std::to_string(c.k) + " n " + std::to_string(c.n) + " residual " +
                     dtype_name(c.res) + " norm " + dtype_name(c.norm_w) + " out " + dtype_name(c.y) +
                     " offset " + std::to_string(c.offset) + (c.bias ? " bias" : "") + " variant " +
                     std::to_string(int(variant)) + ", M " + std::to_string(m));
        const Tensor res_host = c.res == DType::F32 ? random_f32({m, c.k}, 2.f) : random_bf16({m, c.k}, 2.f);
        const Tensor x = gpu_->upload(random_bf16({m, c.k}, 1.f));
        // Separate: add_rms_norm in place, then linear.
        Tensor res_a = gpu_->upload(res_host), h = poisoned({m, c.k}), y_sep = poisoned({m, c.n}, c.y);
        gpu_->add_rms_norm(res_a, x, nw, 1e-6f, c.offset, h);
        gpu_->linear(h, w, y_sep);
        // Fused.
        Tensor res_b = gpu_->upload(res_host), res_out = poisoned({m, c.k}, c.res), h2 = poisoned({m, c.k}),
               y_fused = poisoned({m, c.n}, c.y);
        const auto before = bytes(res_b);
        const bool out_of_place =
            gpu_->add_rms_norm_linear(res_b, x, nw, 1e-6f, c.offset, h2, w, y_fused, res_out);
        EXPECT_EQ(out_of_place, m <= 8) << "the fused kernel takes M <= 8";
        EXPECT_EQ(bytes(y_fused), bytes(y_sep));
        if (out_of_place) {
          EXPECT_EQ(bytes(res_out), bytes(res_a));
          EXPECT_EQ(bytes(res_b), before) << "the old residual must stay as it was";
        } else {
          EXPECT_EQ(bytes(res_b), bytes(res_a));
          EXPECT_EQ(bytes(h2), bytes(h));
        }
      }
    }
    cuda::set_linear_variant(cuda::LoopVariant::Auto);
  }
  cuda::set_fused_norm_linear(false);  // the default
}

// add_rms_norm's vector kernel (one round of 16-byte loads, the default where it applies) gives the scalar
// kernel's bits: new residual and output, bf16 and f32 residuals and norm weights, y in place of x as the
// decoder calls it, rows of a multiple of 8 up to 8192 (1000: the vector kernel, zeros past the row in the
// reduction; 1004 falls back to the scalar kernel).
TEST_F(CudaFusion, VectorAddRmsNormEqualsScalar) {
  for (int cols : {4096, 8192, 1000, 1024, 1004}) {
    for (DType rt : {DType::BF16, DType::F32}) {
      for (DType wt : {DType::BF16, DType::F32}) {
        for (int rows : {1, 3, 16}) {
          SCOPED_TRACE("cols " + std::to_string(cols) + " residual " + dtype_name(rt) + " weight " +
                       dtype_name(wt) + " rows " + std::to_string(rows));
          const Tensor res_host =
              rt == DType::F32 ? random_f32({rows, cols}, 2.f) : random_bf16({rows, cols}, 2.f);
          const Tensor x_host = random_bf16({rows, cols}, 1.f);
          const Tensor nw =
              gpu_->upload(wt == DType::F32 ? random_f32({cols}, 0.3f) : random_bf16({cols}, 0.3f));
          std::vector<uint8_t> res_out[2], y_out[2];
          for (int vec = 0; vec < 2; ++vec) {
            cuda::set_vector_norm(vec == 1);
            Tensor res = gpu_->upload(res_host), x = gpu_->upload(x_host);
            gpu_->add_rms_norm(res, x, nw, 1e-6f, cols == 1000 ? 1.f : 0.f,
                               x);  // y = x, in place (Gemma offset once)
            res_out[vec] = bytes(res), y_out[vec] = bytes(x);
          }
          EXPECT_EQ(res_out[1], res_out[0]);
          EXPECT_EQ(y_out[1], y_out[0]);
        }
      }
    }
  }
  cuda::set_vector_norm(true);
}

// Short calls (every row within kLoopMaxChunks chunks) run all tiles as loop tiles; the bits are the
// split schedule's, for decode, verify and a batch of sequences.
TEST_F(CudaFusion, ShortContextLoopScheduleEqualsSplit) {
  cuda::set_attention_loop_max_chunks(-1);  // the rule on (off by default); each call checks both
  const int hq = 32, hk = 8, d = 128, bs = 16;
  AttentionParams ap{hq, hk, d, 1.f / std::sqrt(float(d)), 0, 0.f};
  const int per_seq = 512 / bs, seqs = 3, nb = per_seq * seqs + 2;
  KvLayer pool{gpu_->alloc({nb, bs, hk, d}, DType::BF16), gpu_->alloc({nb, bs, hk, d}, DType::BF16)};
  cuda::fill_uniform(*gpu_, pool.k, 11, -2, 2);
  cuda::fill_uniform(*gpu_, pool.v, 12, -1, 1);
  std::vector<std::vector<int32_t>> tables(seqs);
  for (int s = 0; s < seqs; ++s)
    for (int i = 0; i < per_seq; ++i) tables[s].push_back(nb - 1 - (s * per_seq + i));
  struct Call {
    const char* what;
    std::vector<std::pair<int, int>> rows;  // (sequence, position)
  };
  std::vector<Call> calls = {{"decode ctx 512", {{0, 511}}},
                             {"decode ctx 100", {{1, 99}}},
                             {"verify ctx 300", {{0, 295}, {0, 296}, {0, 297}, {0, 298}, {0, 299}}},
                             {"batch of 3", {{0, 400}, {1, 17}, {2, 511}}}};
  for (const Call& call : calls) {
    SCOPED_TRACE(call.what);
    BatchMeta meta;
    meta.block_size = bs, meta.block_tables = tables;
    for (auto [s, pos] : call.rows)
      meta.tokens.push_back(0), meta.positions.push_back(pos), meta.row_seq.push_back(s),
          meta.slots.push_back(-1);
    const int r = int(call.rows.size());
    const Tensor q = gpu_->upload(random_bf16({r, hq, d}, 2.f));
    auto run = [&](cuda::TileSchedule sched) {
      cuda::set_attention_tile_schedule(sched);
      gpu_->begin_forward(meta);
      Tensor out = poisoned({r, hq, d});
      gpu_->attention(q, pool, ap, out);
      cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
      return bytes(out);
    };
    const auto split = run(cuda::TileSchedule::Split);
    EXPECT_EQ(run(cuda::TileSchedule::Auto), split);
    EXPECT_EQ(run(cuda::TileSchedule::Loop), split);
    cuda::set_attention_loop_max_chunks(0);  // the rule off: Auto splits these calls
    EXPECT_EQ(run(cuda::TileSchedule::Auto), split);
    cuda::set_attention_loop_max_chunks(-1);
  }
  cuda::set_attention_loop_max_chunks(0);  // back to the default (off)
}

TEST(AttentionTilesShortCall, AllLoopTilesWithinTheChunkLimit) {
  cuda::set_attention_loop_max_chunks(-1);  // the rule on (off by default)
  const std::vector<int32_t> row_seq = {0, 1, 1, 1, 2};
  std::vector<int32_t> loop, split;
  // Too few half-full tiles to fill the card (min 1000): long calls split, short calls loop.
  cuda::plan_attention_tiles(row_seq, 16, cuda::TileSchedule::Auto, loop, split, 1000, 64);
  EXPECT_TRUE(loop.empty());
  EXPECT_EQ(split.size(), 6u);
  cuda::plan_attention_tiles(row_seq, 16, cuda::TileSchedule::Auto, loop, split, 1000, 4);
  EXPECT_TRUE(split.empty());
  EXPECT_EQ(loop.size(), 6u);
  cuda::plan_attention_tiles(row_seq, 16, cuda::TileSchedule::Split, loop, split, 1000, 4);
  EXPECT_TRUE(loop.empty()) << "a forced schedule wins";
  cuda::set_attention_loop_max_chunks(0);
  cuda::plan_attention_tiles(row_seq, 16, cuda::TileSchedule::Auto, loop, split, 1000, 1);
  EXPECT_TRUE(loop.empty()) << "limit 0: the rule is off";
  cuda::set_attention_loop_max_chunks(0);  // back to the default (off)
}

}  // namespace
}  // namespace tf

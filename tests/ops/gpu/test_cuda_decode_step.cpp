// The one-kernel decode step (ops/cuda/decode_step.h) against the op chain, bit for bit, on a random
// checkpoint of the Qwen3-8B layer shape (2 layers, a small vocabulary): two pools run the same stream --
// prefill, then decode rounds (one row: the step where it is on), verify rounds of several rows and rounds
// that want hidden states (both: the chain) -- one with the step on, one with it off; every round's logits
// and sampled tokens and, at the end, every byte of both pools must be equal. Positions cross the
// attention's 128-position chunks, the merge's rounds of 16 chunks and the step's context limit
// (DecodeStep::kMaxPositions, where it hands over to the chain), with graphs and eagerly, and on 40 CTAs
// (TF_STEP_GRID), where CTAs take several attention units a layer earlier, as on parts with fewer SMs.
// The same with MLX 4-bit linears (an mlx-lm conversion's layout; groups of 32, 64 and 128, subnormal and
// plain scale codes, stages of 2, 4 and 8 K slices): the step's 4-bit stages give the 4-bit chain's bits.
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>

#include "checkpoint/checkpoint.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/decode_step.h"
#include "ops/cuda/quant_linear.h"  // set_mlx_subnormal_codes
#include "random_qwen3.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

constexpr int kHidden = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kInter = 12288, kLayers = 2;
constexpr int kVocab = 1024, kContext = cuda::DecodeStep::kMaxPositions + 64, kBlock = 16;
constexpr int kBlocks = kContext / kBlock;

using test::device_bytes;

std::vector<KvLayer> make_pool(Backend& be) {
  return test::zeroed_pool(be, kLayers, kBlocks, kBlock, kKvHeads, kHeadDim);
}

// The sequence's block table: every block of the pool in a fixed shuffled order (a paged pool).
std::vector<int32_t> shuffled_table() {
  std::vector<int32_t> t(kBlocks);
  std::iota(t.begin(), t.end(), 0);
  std::mt19937 rng(99);
  std::shuffle(t.begin(), t.end(), rng);
  return t;
}

BatchMeta make_meta(int start, const std::vector<int32_t>& tokens, const std::vector<int32_t>& table) {
  BatchMeta m;
  m.block_size = kBlock;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int pos = start + int(i);
    m.tokens.push_back(tokens[i]);
    m.positions.push_back(pos);
    m.row_seq.push_back(0);
    m.slots.push_back(table[pos / kBlock] * kBlock + pos % kBlock);
  }
  m.block_tables.push_back(table);
  return m;
}

class CudaDecodeStep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    gpu_ = make_cuda_backend(0, &why).release();
    why_ = new std::string(why);
    if (gpu_) cuda::set_graph_capture_after(*gpu_, 1);
    // The Qwen3-8B layer shape, 2 layers and a small vocabulary.
    if (gpu_)
      dir_ = new std::string(test::write_random_qwen3(
          "tf_decode_step", {kHidden, kLayers, kHeads, kKvHeads, kHeadDim, kInter, kVocab}));
  }
  static void TearDownTestSuite() {
    cuda::set_decode_step(true);
    if (dir_) fs::remove_all(*dir_);
    if (dir4_) fs::remove_all(*dir4_);
  }
  // The same shape with MLX 4-bit linears and lm_head (as mlx-lm converts an untied model), groups of 64 but
  // layer 0's down projection (32) and layer 1 (128): every 4-bit variant of the step's consumers.
  static const std::string& mlx4_dir() {
    if (!dir4_) {
      test::Mlx4Layout layout{64, {{"model.layers.0.mlp.down_proj", 32}}};
      for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
        layout.overrides.push_back({std::string("model.layers.1.") + m, 128});
      dir4_ = new std::string(test::write_random_qwen3(
          "tf_decode_step_mlx4", {kHidden, kLayers, kHeads, kKvHeads, kHeadDim, kInter, kVocab}, &layout));
    }
    return *dir4_;
  }
  void SetUp() override {
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << *why_;
  }
  // How many one-kernel steps loading the checkpoint at dir prepared (the model is unloaded again).
  static int64_t steps_prepared_loading(const std::string& dir) {
    Checkpoint ckpt = Checkpoint::open(dir);
    const int64_t before = cuda::decode_steps_prepared();
    auto model = load_model(ckpt, *gpu_, kContext);
    return cuda::decode_steps_prepared() - before;
  }

  // Prefills `start` tokens (rows of 512) into both pools, then runs `rounds` rounds from there on both: the
  // step on for pool A, off for pool B. Round i: a verify round of 3 rows when i % 7 == 5, a round that
  // wants hidden states when i % 7 == 3, else a decode round; graphs on all but every fourth round. Returns
  // the rounds in which pool A's forward took the step.
  int64_t run(int start, int rounds, const std::string* dir = nullptr) {
    Checkpoint ckpt = Checkpoint::open(dir ? *dir : *dir_);
    auto model = load_model(ckpt, *gpu_, kContext);
    std::vector<KvLayer> pool_a = make_pool(*gpu_), pool_b = make_pool(*gpu_);
    const std::vector<int32_t> table = shuffled_table();
    std::mt19937 rng(start);
    std::uniform_int_distribution<int32_t> tok(3, kVocab - 1);
    std::vector<int32_t> history;
    for (int p = 0; p < start; ++p) history.push_back(tok(rng));
    for (int at = 0; at < start - 1;) {  // the last prompt token is the first decode row
      const int n = std::min(512, start - 1 - at);
      const BatchMeta m = make_meta(at, {history.begin() + at, history.begin() + at + n}, table);
      std::vector<float> logits;
      model->forward(m, pool_a, {}, logits);
      model->forward(m, pool_b, {}, logits);
      at += n;
    }
    int len = start - 1;
    const int64_t steps_before = cuda::decode_step_rounds();
    for (int i = 0; i < rounds; ++i) {
      std::vector<int32_t> rows = {history[size_t(len)]};
      if (i % 7 == 5)
        for (int d = 0; d < 2; ++d) rows.push_back(tok(rng));
      const BatchMeta m = make_meta(len, rows, table);
      const int R = m.rows();
      std::vector<int32_t> logit_rows(static_cast<size_t>(R));
      std::iota(logit_rows.begin(), logit_rows.end(), 0);
      std::vector<RowSampling> sampling;
      for (int r = 0; r < R; ++r) sampling.push_back({i % 2 ? 0.7f : 0.f, 5, int64_t(m.positions[r]) + 1});
      const bool graph = i % 4 != 3, hidden = i % 7 == 3;
      std::vector<float> logits_a, logits_b;
      std::vector<int32_t> tokens_a, tokens_b;
      Tensor hidden_a, hidden_b;
      cuda::set_decode_step(true);
      model->forward(m, pool_a, logit_rows,
                     Model::Outputs{&logits_a, &sampling, &tokens_a, hidden ? &hidden_a : nullptr, graph});
      cuda::set_decode_step(false);
      model->forward(m, pool_b, logit_rows,
                     Model::Outputs{&logits_b, &sampling, &tokens_b, hidden ? &hidden_b : nullptr, graph});
      cuda::set_decode_step(true);
      const std::string where = "round " + std::to_string(i) + " at position " + std::to_string(len);
      EXPECT_EQ(tokens_a, tokens_b) << where;
      EXPECT_EQ(logits_a.size(), size_t(R) * kVocab) << where;
      EXPECT_EQ(logits_a.size(), logits_b.size()) << where;
      if (logits_a.size() != logits_b.size()) return -1;
      if (std::memcmp(logits_a.data(), logits_b.data(), logits_a.size() * 4) != 0) {
        // Where they part: the logits' differences and each layer's new K/V row.
        int n_diff = 0;
        float max_diff = 0.f;
        for (size_t j = 0; j < logits_a.size(); ++j)
          if (logits_a[j] != logits_b[j])
            ++n_diff, max_diff = std::max(max_diff, std::fabs(logits_a[j] - logits_b[j]));
        std::string rows_kv;
        const size_t row = size_t(m.slots[0]) * kKvHeads * kHeadDim * 2,
                     bytes = size_t(kKvHeads) * kHeadDim * 2;
        for (int l = 0; l < kLayers; ++l)
          for (int kvi = 0; kvi < 2; ++kvi) {
            std::vector<uint8_t> ra(bytes), rb(bytes);
            gpu_->read_raw(kvi ? pool_a[l].v : pool_a[l].k, row, bytes, ra.data());
            gpu_->read_raw(kvi ? pool_b[l].v : pool_b[l].k, row, bytes, rb.data());
            rows_kv +=
                " layer " + std::to_string(l) + (kvi ? " v " : " k ") + (ra == rb ? "equal" : "DIFFER");
          }
        ADD_FAILURE() << where << ": " << n_diff << " of " << logits_a.size() << " logits differ, by up to "
                      << max_diff << "; new K/V rows:" << rows_kv;
      }
      float mx = 0.f;
      for (float v : logits_a) mx = std::max(mx, std::fabs(v));
      EXPECT_TRUE(std::isfinite(mx) && mx > 0.f) << where;  // real values, not zeros
      if (hidden) {
        EXPECT_EQ(std::memcmp(hidden_a.raw(), hidden_b.raw(), hidden_a.nbytes()), 0) << where;
      }
      // Accept every row: the next round starts after them, with the token sampled on the last row.
      history.resize(size_t(len) + 1);
      history.insert(history.end(), rows.begin() + 1, rows.end());
      len += R;
      history.push_back(tokens_a.back());
      if (::testing::Test::HasFailure() && i >= 4) return -1;  // a few rounds, graphed and eager
    }
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_TRUE(device_bytes(*gpu_, pool_a[l].k) == device_bytes(*gpu_, pool_b[l].k)) << "layer " << l;
      EXPECT_TRUE(device_bytes(*gpu_, pool_a[l].v) == device_bytes(*gpu_, pool_b[l].v)) << "layer " << l;
    }
    return cuda::decode_step_rounds() - steps_before;
  }

  static Backend* gpu_;
  static std::string* why_;
  static std::string* dir_;
  static std::string* dir4_;
};
Backend* CudaDecodeStep::gpu_ = nullptr;
std::string* CudaDecodeStep::why_ = nullptr;
std::string* CudaDecodeStep::dir_ = nullptr;
std::string* CudaDecodeStep::dir4_ = nullptr;

TEST_F(CudaDecodeStep, PreparedForTheShape) {
  EXPECT_EQ(steps_prepared_loading(*dir_), 1)
      << "the model did not prepare a step (TENSORFOLD_LOG=debug says why)";
}

TEST_F(CudaDecodeStep, FirstChunksAndBoundaries) {
  // Positions 1..40 (one chunk), then 120..160 across 127 / 128 / 129.
  const int64_t steps = run(2, 40);
  EXPECT_GT(steps, 20);
  EXPECT_GT(run(120, 40), 20);
  for (const char* n : {"0", "1"}) {  // every free slot / one stage in flight (TF_STEP_INFLIGHT_STAGES)
    ASSERT_EQ(setenv("TF_STEP_INFLIGHT_STAGES", n, 1), 0);
    EXPECT_GT(run(120, 16), 8) << n << " stages in flight";
  }
  unsetenv("TF_STEP_INFLIGHT_STAGES");
}

TEST_F(CudaDecodeStep, FewerCtasTakeSeveralAttentionUnitsALayer) {
  // 40 CTAs (TF_STEP_GRID, read when the model prepares its step), as a part with fewer SMs: 32 CTAs take
  // the 8 KV heads' other chunks. Position ~1000: 8 chunks, 56 other units (under 3 a CTA: no early chunk),
  // so 24 CTAs run two a layer, the second staged during the first. ~1990: 16 chunks, 120 other units: each
  // merging CTA first takes an early chunk of its head (e = 1), the other CTAs three or four units.
  ASSERT_EQ(setenv("TF_STEP_GRID", "40", 1), 0);
  const int64_t a = run(990, 24), b = run(1985, 24);
  unsetenv("TF_STEP_GRID");
  EXPECT_GT(a, 12);
  EXPECT_GT(b, 12);
}

TEST_F(CudaDecodeStep, MergesSeveralRoundsAtLongContexts) {
  // Past ~2k positions the other chunks' units outnumber the other CTAs: CTAs take two or more units a
  // layer (the next staged during the current), and the merge folds the other chunks' partials in rounds of
  // 16: across 2048, ~2176 (one round of 16 chunks, then a second of one), ~4100 (two rounds) and ~6000
  // (three), where from 6016 (48 chunks: the other units average 3 a CTA on 132) the merging CTAs take an
  // early chunk first. The rounds alternate between two buffers (round r + 1 copied in while round r is
  // folded): ~8320 crosses from four rounds (each buffer twice) to five (the fifth of one chunk).
  EXPECT_GT(run(2036, 24), 12);
  EXPECT_GT(run(2160, 24), 12);
  EXPECT_GT(run(4085, 24), 12);
  EXPECT_GT(run(6000, 24), 12);
  EXPECT_GT(run(8310, 24), 12);
}

TEST_F(CudaDecodeStep, TurnedOffPreparesNoStep) {
  // TF_DECODE_STEP=0 (set_decode_step(false)) before the model loads: no step prepared (no packed copy of
  // the weights), the chain runs every round.
  cuda::set_decode_step(false);
  EXPECT_EQ(steps_prepared_loading(*dir_), 0);
  cuda::set_decode_step(true);
}

TEST_F(CudaDecodeStep, HandsOverToTheChainAtItsContextLimit) {
  // Positions from DecodeStep::kMaxPositions run the chain; the stream's bits do not change.
  const int64_t steps = run(cuda::DecodeStep::kMaxPositions - 30, 40);
  EXPECT_GT(steps, 10);
  EXPECT_LT(steps, 30);
}

TEST_F(CudaDecodeStep, Mlx4LinearsGiveTheChainsBits) {
  // The step streams the 4-bit codes and scale words and dequantises them as linear_quantized does; its
  // bits are the 4-bit chain's. Scales stored times 2^133 (subnormal codes: what upload_linear does where
  // every scale allows it), then plain.
  const std::string& dir = mlx4_dir();
  const bool was = cuda::DecodeStep::mlx4();
  cuda::DecodeStep::set_mlx4(true);  // the default unless TF_DECODE_STEP_MLX4=0
  ASSERT_EQ(steps_prepared_loading(dir), 1)
      << "the 4-bit model did not prepare a step (TENSORFOLD_LOG=debug says why)";
  EXPECT_GT(run(2, 40, &dir), 20);
  EXPECT_GT(run(120, 24, &dir), 12);
  cuda::set_mlx_subnormal_codes(false);
  const int64_t plain = run(700, 24, &dir);
  cuda::set_mlx_subnormal_codes(true);
  EXPECT_GT(plain, 12);
  for (const char* sw : {"2", "4", "8"}) {  // every stage shape (TF_STEP_Q4_SW; the default is 4)
    ASSERT_EQ(setenv("TF_STEP_Q4_SW", sw, 1), 0);
    EXPECT_GT(run(1000, 16, &dir), 8) << "stages of " << sw << " slices";
  }
  unsetenv("TF_STEP_Q4_SW");
  // The producer with every free slot requested and with one stage in flight (the card's default is one of
  // them or between): only when copies are issued changes, not the bits.
  for (const char* n : {"0", "1"}) {
    ASSERT_EQ(setenv("TF_STEP_INFLIGHT_STAGES", n, 1), 0);
    EXPECT_GT(run(1000, 16, &dir), 8) << n << " stages in flight";
  }
  unsetenv("TF_STEP_INFLIGHT_STAGES");
  // Ring depths that are not a multiple of the slots' owners (2 at SW 4, 4 at SW 2): a slot then serves
  // stages of several owners in turn (TF_STEP_RING_SLOTS; the default is every slot that fits).
  for (const char* sw_ring : {"4:5", "4:3", "2:7", "2:10"}) {
    const std::string v(sw_ring);
    ASSERT_EQ(setenv("TF_STEP_Q4_SW", v.substr(0, 1).c_str(), 1), 0);
    ASSERT_EQ(setenv("TF_STEP_RING_SLOTS", v.substr(2).c_str(), 1), 0);
    EXPECT_GT(run(1000, 16, &dir), 8) << "SW:slots " << v;
  }
  unsetenv("TF_STEP_Q4_SW");
  unsetenv("TF_STEP_RING_SLOTS");
  cuda::DecodeStep::set_mlx4(was);
}

TEST_F(CudaDecodeStep, Mlx4StepCanBeTurnedOff) {
  // On by default; turned off (TF_DECODE_STEP_MLX4=0) the 4-bit model prepares no step and runs the chain.
  const bool was = cuda::DecodeStep::mlx4();
  cuda::DecodeStep::set_mlx4(false);
  EXPECT_EQ(steps_prepared_loading(mlx4_dir()), 0);
  cuda::DecodeStep::set_mlx4(was);
}

}  // namespace
}  // namespace tf

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

#include <filesystem>
#include <string>

#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/decode_step.h"
#include "ops/cuda/quant_linear.h"  // set_mlx_subnormal_codes
#include "random_qwen3.h"
#include "step_ab.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

constexpr int kHidden = 4096, kHeads = 32, kKvHeads = 8, kHeadDim = 128, kInter = 12288, kLayers = 2;
constexpr int kVocab = 1024, kContext = cuda::DecodeStep::kMaxPositions + 64, kBlock = 16;
// What the A/B (step_ab.h) needs of the shape: both checkpoints' (bf16 and MLX 4-bit).
constexpr test::StepAbShape kShape{kLayers, kKvHeads, kHeadDim, kVocab, kContext, kBlock};

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
  // How many one-kernel steps loading the checkpoint at dir prepared (the model is unloaded again); `why`:
  // the model's log lines about the step.
  static int64_t steps_prepared_loading(const std::string& dir, std::string* why = nullptr) {
    return test::steps_prepared_loading(*gpu_, dir, kContext, why);
  }

  // The A/B (step_ab.h): prefills `start` tokens into two pools, then runs `rounds` rounds from there on
  // both, the step on for pool A, off for pool B (decode, verify and hidden-state rounds, graphed and eager);
  // every round's logits, tokens and hidden states and the pools' bytes must be equal. Returns the rounds in
  // which pool A's forward took the step.
  int64_t run(int start, int rounds, const std::string* dir = nullptr) {
    return test::run_step_ab(*gpu_, kShape, dir ? *dir : *dir_, start, rounds);
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
  std::string why;
  EXPECT_EQ(steps_prepared_loading(*dir_, &why), 1) << "the model did not prepare a step: " << why;
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
  std::string why;
  ASSERT_EQ(steps_prepared_loading(dir, &why), 1) << "the 4-bit model did not prepare a step: " << why;
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
  // Each CTA's first gate_up tiles prefetched into L2 during the attention (TF_STEP_L2PF_TILES, read at
  // make; the H100's default is 4, the H200's none): where the weights come from changes, not the bits; 0 and
  // 4 tiles, 4 also on 40 CTAs (many tiles a CTA, the CTAs without attention units polling the layer's qkv).
  ASSERT_EQ(setenv("TF_STEP_L2PF_TILES", "0", 1), 0);
  EXPECT_GT(run(1000, 16, &dir), 8) << "no L2 prefetch";
  ASSERT_EQ(setenv("TF_STEP_L2PF_TILES", "4", 1), 0);
  EXPECT_GT(run(1000, 16, &dir), 8) << "L2 prefetch of 4 tiles";
  ASSERT_EQ(setenv("TF_STEP_GRID", "40", 1), 0);
  EXPECT_GT(run(300, 16, &dir), 8) << "L2 prefetch of 4 tiles, 40 CTAs";
  unsetenv("TF_STEP_GRID");
  unsetenv("TF_STEP_L2PF_TILES");
  // The gate_up's other tiles with 3 stages in flight (TF_STEP_INFLIGHT_GU; the others keep the card's cap).
  ASSERT_EQ(setenv("TF_STEP_INFLIGHT_GU", "3", 1), 0);
  EXPECT_GT(run(1000, 16, &dir), 8) << "the gate_up's other tiles at 3 stages in flight";
  unsetenv("TF_STEP_INFLIGHT_GU");
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

// The one-kernel decode step of the Qwen3-30B-A3B shape (ops/cuda/decode_step.h, decode_step_moe.cu: every
// layer's MLP sparse, a softmax router choosing 8 of 128 SwiGLU experts) against the op chain, bit for bit,
// on a random checkpoint of that layer shape (2 layers, a small vocabulary, an untied lm_head): two pools run
// the same stream -- prefill, then decode rounds (one row: the step where it is on), verify rounds of several
// rows and rounds that want hidden states (both: the chain) -- one with the step on, one with it off; every
// round's logits and sampled tokens and, at the end, every byte of both pools must be equal (step_ab.h, as
// test_cuda_decode_step.cpp). Positions cross the attention's 128-position chunks and the merge's rounds of
// 8 chunks (4 KV heads), with graphs and eagerly, with the producer's stages in flight capped and not, and
// on 40 CTAs (TF_STEP_GRID), where CTAs take several attention units a layer and the merging CTAs an early
// chunk, as on parts with fewer SMs, and with the experts' stages by row copies (TF_STEP_MOE_TMA=0; tensor
// maps otherwise), and four same-bits variants (TF_STEP_MOE_ABLATE=4, 5, 8, 12). The suite turns
// the MoE step on (DecodeStep::moe: on by default, off with TF_DECODE_STEP_MOE=0 in the environment). A
// one-layer checkpoint without the top-k renormalisation (norm_topk_prob false) and with tied embeddings; and
// the step turned off (TF_DECODE_STEP_MOE=0). And an MLX 4-bit checkpoint as mlx-lm converts the model (the
// 4-bit instance, off by default: DecodeStep::set_moe_mlx4).
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv

#include <filesystem>
#include <string>

#include "ops/backend.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/decode_step.h"
#include "random_qwen3.h"
#include "step_ab.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

// Qwen3-30B-A3B's layer shape (its config's intermediate_size 6144 too, which no sparse layer uses).
constexpr int kHidden = 2048, kHeads = 32, kKvHeads = 4, kHeadDim = 128, kInter = 6144, kLayers = 2;
constexpr int kExperts = 128, kTopK = 8, kMoeInter = 768;
// Positions up to ~3500 (three merge rounds); the pool's blocks of 16 positions.
constexpr int kVocab = 1024, kContext = 4096, kBlock = 16;
constexpr test::StepAbShape kShape{kLayers, kKvHeads, kHeadDim, kVocab, kContext, kBlock};
constexpr test::StepAbShape kShape1{1, kKvHeads, kHeadDim, kVocab, kContext, kBlock};  // the one-layer one

test::Qwen3Shape moe_shape(int layers, bool norm_topk_prob, bool tie_embeddings) {
  test::Qwen3Shape s;
  s.hidden = kHidden, s.layers = layers, s.heads = kHeads, s.kv_heads = kKvHeads, s.head_dim = kHeadDim;
  s.inter = kInter, s.vocab = kVocab;
  s.experts = kExperts, s.top_k = kTopK, s.moe_inter = kMoeInter;
  s.norm_topk_prob = norm_topk_prob;
  s.tie_embeddings = tie_embeddings;
  return s;
}

class CudaMoeStep : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    gpu_ = make_cuda_backend(0, &why).release();
    why_ = new std::string(why);
    if (gpu_) cuda::set_graph_capture_after(*gpu_, 1);
    moe_was_ = cuda::DecodeStep::moe();
    cuda::DecodeStep::set_moe(true);  // (whatever TF_DECODE_STEP_MOE says)
    // The 30B-A3B layer shape, 2 layers (1.2 GB of experts each), norm_topk_prob true, an lm_head.
    if (gpu_)
      dir_ = new std::string(test::write_random_qwen3("tf_moe_step", moe_shape(kLayers, true, false)));
  }
  static void TearDownTestSuite() {
    cuda::set_decode_step(true);
    cuda::DecodeStep::set_moe(moe_was_);
    if (dir_) fs::remove_all(*dir_);
    if (dir1_) fs::remove_all(*dir1_);
    if (dir4_) fs::remove_all(*dir4_);
  }
  // One layer, norm_topk_prob false (the top-k weights are the softmax's own), tied embeddings.
  static const std::string& one_layer_dir() {
    if (!dir1_)
      dir1_ = new std::string(test::write_random_qwen3("tf_moe_step_1l", moe_shape(1, false, true)));
    return *dir1_;
  }
  // MLX 4-bit as mlx-lm converts the model (write_random_qwen3: the router at 8 bits, the experts stacked),
  // groups of 64 but layer 1's experts: gate_up in groups of 128, the down in groups of 32.
  static const std::string& mlx4_dir() {
    if (!dir4_) {
      const test::Mlx4Layout layout{64,
                                    {{"model.layers.1.mlp.switch_mlp.gate_proj", 128},
                                     {"model.layers.1.mlp.switch_mlp.up_proj", 128},
                                     {"model.layers.1.mlp.switch_mlp.down_proj", 32}}};
      dir4_ = new std::string(
          test::write_random_qwen3("tf_moe_step_mlx4", moe_shape(kLayers, true, false), &layout));
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
  // The A/B (step_ab.h) on the 2-layer checkpoint (or the one-layer one): prefills `start` tokens, then
  // `rounds` rounds, the step on for one pool and off for the other; every round's logits, tokens and hidden
  // states and the pools' bytes equal. Returns the rounds in which the step's pool took the step.
  int64_t run(int start, int rounds) { return test::run_step_ab(*gpu_, kShape, *dir_, start, rounds); }
  int64_t run_one_layer(int start, int rounds) {
    return test::run_step_ab(*gpu_, kShape1, one_layer_dir(), start, rounds);
  }

  static Backend* gpu_;
  static bool moe_was_;
  static std::string* why_;
  static std::string* dir_;
  static std::string* dir1_;
  static std::string* dir4_;
};
Backend* CudaMoeStep::gpu_ = nullptr;
bool CudaMoeStep::moe_was_ = false;
std::string* CudaMoeStep::why_ = nullptr;
std::string* CudaMoeStep::dir_ = nullptr;
std::string* CudaMoeStep::dir1_ = nullptr;
std::string* CudaMoeStep::dir4_ = nullptr;

TEST_F(CudaMoeStep, PreparedForTheShape) {
  std::string why;
  EXPECT_EQ(steps_prepared_loading(*dir_, &why), 1) << "the MoE model did not prepare a step: " << why;
}

TEST_F(CudaMoeStep, FirstChunksAndBoundaries) {
  // Positions 1..50 (one chunk), then across 127 / 128 / 129 and 255 / 256 (a second, a third chunk: merges
  // of one and two other chunks).
  EXPECT_GT(run(2, 40), 20);
  EXPECT_GT(run(120, 24), 12);
  EXPECT_GT(run(250, 24), 12);
  for (const char* n : {"0", "1"}) {  // every free slot / one stage in flight (TF_STEP_INFLIGHT_STAGES)
    ASSERT_EQ(setenv("TF_STEP_INFLIGHT_STAGES", n, 1), 0);
    EXPECT_GT(run(120, 16), 8) << n << " stages in flight";
  }
  unsetenv("TF_STEP_INFLIGHT_STAGES");
}

TEST_F(CudaMoeStep, ExpertStagesByRowCopies) {
  // TF_STEP_MOE_TMA=0 (read when the model prepares its step): the experts' stages by 16 row copies into
  // padded rows instead of two tensor-map boxes in the 128-byte swizzle; the same bits.
  ASSERT_EQ(setenv("TF_STEP_MOE_TMA", "0", 1), 0);
  const int64_t n = run(120, 16);
  unsetenv("TF_STEP_MOE_TMA");
  EXPECT_GT(n, 8);
}

TEST_F(CudaMoeStep, SameBitsVariants) {
  // TF_STEP_MOE_ABLATE=4, 5, 8, 12 (read at each launch; variants with the same bits): 4, consumer warp 0
  // routes each layer for the combine at the down's x, not right after the gate_up's (the default since run
  // 546); 5, one rank a down stage, not two (the default since run 549); 8, the ring's 8 slots everywhere
  // (the default since run 550: CTAs without attention work lend it their attention staging region, 12
  // slots); 12, no warm-up call of the routing before its logits are there.
  for (const char* v : {"4", "5", "8", "12"}) {
    ASSERT_EQ(setenv("TF_STEP_MOE_ABLATE", v, 1), 0);
    EXPECT_GT(run(120, 16), 8) << "variant " << v;
  }
  unsetenv("TF_STEP_MOE_ABLATE");
}

TEST_F(CudaMoeStep, MergesSeveralRoundsAtLongContexts) {
  // The merge folds the other chunks' partials in rounds of 8 (the MoE shape's kMergeChunks: two rounds'
  // records of 8 heads fill the staging region): from position 1152 (9 chunks before the row's) a second
  // round of one chunk; from 3200 (25) a fourth, the rounds alternating between two buffers.
  EXPECT_GT(run(1140, 16), 8);
  EXPECT_GT(run(3185, 24), 12);
}

TEST_F(CudaMoeStep, FewerCtasTakeSeveralAttentionUnitsALayer) {
  // 40 CTAs (TF_STEP_GRID, read when the model prepares its step), as a part with fewer SMs: 36 CTAs take
  // the 4 KV heads' other chunks. From 1280 (10 chunks before the row's: 40 other units) some CTAs run two
  // a layer, the second staged during the first; from 3456 (27: 4 x 27 >= 3 x 36) each merging CTA first
  // takes an early chunk of its head, the other CTAs about three units, and the merge takes four rounds.
  ASSERT_EQ(setenv("TF_STEP_GRID", "40", 1), 0);
  const int64_t a = run(1270, 24), b = run(3440, 24);
  unsetenv("TF_STEP_GRID");
  EXPECT_GT(a, 12);
  EXPECT_GT(b, 12);
}

TEST_F(CudaMoeStep, WithoutTopkRenormalisation) {
  // norm_topk_prob false: the experts' outputs weighted by the softmax's probabilities as they are. One
  // layer, tied embeddings (the lm_head is the embedding).
  std::string why;
  ASSERT_EQ(steps_prepared_loading(one_layer_dir(), &why), 1)
      << "the one-layer MoE model did not prepare a step: " << why;
  EXPECT_GT(run_one_layer(2, 24), 12);
  EXPECT_GT(run_one_layer(250, 16), 8);
}

TEST_F(CudaMoeStep, Mlx4GivesTheChainsBits) {
  // The MLX 4-bit instance (DecodeStep::set_moe_mlx4; off by default until measured): the attention linears,
  // the lm_head and the experts MLX 4-bit (groups of 32, 64, 128: each expert projection's own), the 8-bit
  // router dequantized to bf16 at make. Its rounds against the chain's, bitwise, as the bf16 cases: the first
  // chunks, a merge, and 40 CTAs.
  const bool was = cuda::DecodeStep::moe_mlx4();
  cuda::DecodeStep::set_moe_mlx4(true);
  std::string why;
  EXPECT_EQ(steps_prepared_loading(mlx4_dir(), &why), 1)
      << "the MLX 4-bit MoE model did not prepare a step: " << why;
  EXPECT_GT(test::run_step_ab(*gpu_, kShape, mlx4_dir(), 2, 40), 20);
  EXPECT_GT(test::run_step_ab(*gpu_, kShape, mlx4_dir(), 120, 24), 12);
  EXPECT_GT(test::run_step_ab(*gpu_, kShape, mlx4_dir(), 1140, 16), 8);
  ASSERT_EQ(setenv("TF_STEP_GRID", "40", 1), 0);
  const int64_t few = test::run_step_ab(*gpu_, kShape, mlx4_dir(), 1270, 16);
  unsetenv("TF_STEP_GRID");
  EXPECT_GT(few, 8);
  // Its producer's same-bits variants (TF_STEP_MOE_ABLATE): 10, one stage at a time (the default issues four
  // at a time, a lane each); 11, eight at a time; 12, no warm-up call of the routing.
  for (const char* v : {"10", "11", "12"}) {
    ASSERT_EQ(setenv("TF_STEP_MOE_ABLATE", v, 1), 0);
    EXPECT_GT(test::run_step_ab(*gpu_, kShape, mlx4_dir(), 120, 16), 8) << "variant " << v;
  }
  unsetenv("TF_STEP_MOE_ABLATE");
  // The down's stages by owners (TF_STEP_MOE_Q4_DOWN_STAGES=4, read at make; the default: halves of a rank).
  ASSERT_EQ(setenv("TF_STEP_MOE_Q4_DOWN_STAGES", "4", 1), 0);
  const int64_t owners = test::run_step_ab(*gpu_, kShape, mlx4_dir(), 120, 16);
  unsetenv("TF_STEP_MOE_Q4_DOWN_STAGES");
  EXPECT_GT(owners, 8);
  cuda::DecodeStep::set_moe_mlx4(false);  // off: no step, and why says how to turn it on
  EXPECT_EQ(steps_prepared_loading(mlx4_dir(), &why), 0);
  EXPECT_NE(why.find("TF_DECODE_STEP_MOE_MLX4"), std::string::npos) << why;
  cuda::DecodeStep::set_moe_mlx4(was);
}

TEST_F(CudaMoeStep, TurnedOffPreparesNoStep) {
  // TF_DECODE_STEP_MOE=0 (DecodeStep::set_moe(false)) before the model loads: no step prepared for a model
  // with sparse layers, and why says so; its rounds all run the chain (the same stream, no step taken).
  // TF_DECODE_STEP=0 (set_decode_step(false)): none either.
  const bool was = cuda::DecodeStep::moe();
  cuda::DecodeStep::set_moe(false);
  std::string why;
  EXPECT_EQ(steps_prepared_loading(one_layer_dir(), &why), 0);
  EXPECT_NE(why.find("TF_DECODE_STEP_MOE"), std::string::npos) << why;
  EXPECT_EQ(run_one_layer(2, 8), 0);
  cuda::DecodeStep::set_moe(was);
  cuda::set_decode_step(false);
  EXPECT_EQ(steps_prepared_loading(one_layer_dir()), 0);
  cuda::set_decode_step(true);
}

}  // namespace
}  // namespace tf

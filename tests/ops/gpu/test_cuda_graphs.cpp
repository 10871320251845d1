// CUDA graphs for decode and verify forwards (Backend::run_graph, docs/cuda-notes.md session 4): a forward
// replayed from a captured graph gives the bits of the eager forward -- sampled tokens, host logits, hidden
// states and every byte of the KV pool -- for decode and verify rounds (k = 1..4 drafts, mixed in a round)
// of 1, 3 and 8 sequences whose lengths cross 128-position attention chunks (so the chunk bucket a graph is
// sized for changes). Graphs are really replayed, and their number stays within the cache's capacity.
// Attention sized for a chunk bucket gives the bits of attention sized for the exact chunk count.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "checkpoint/checkpoint.h"
#include "engine/engine.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/cuda/attention_mma.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/graph_cache.h"
#include "random_qwen3.h"

namespace tf {
namespace {

namespace fs = std::filesystem;

constexpr int kHidden = 256, kHeads = 8, kKvHeads = 2, kHeadDim = 128, kInter = 384, kLayers = 2;
constexpr int kVocab = 512, kContext = 1024, kBlock = 16, kBlocksPerSeq = kContext / kBlock;

using test::device_bytes;

// One KV pool (a layer's K and V for kBlocksPerSeq blocks a sequence), zeroed.
std::vector<KvLayer> make_pool(Backend& be, int seqs) {
  return test::zeroed_pool(be, kLayers, int64_t(seqs) * kBlocksPerSeq, kBlock, kKvHeads, kHeadDim);
}

// A batch with, for sequence s, rows at positions lens[s] .. lens[s] + widths[s] - 1 (tokens[s] hold them).
BatchMeta make_meta(const std::vector<int>& lens, const std::vector<std::vector<int32_t>>& tokens) {
  BatchMeta m;
  m.block_size = kBlock;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> table(kBlocksPerSeq);
    for (int b = 0; b < kBlocksPerSeq; ++b) table[b] = int32_t(s * kBlocksPerSeq + b);
    for (size_t i = 0; i < tokens[s].size(); ++i) {
      const int pos = lens[s] + int(i);
      m.tokens.push_back(tokens[s][i]);
      m.positions.push_back(pos);
      m.row_seq.push_back(int32_t(s));
      m.slots.push_back(table[pos / kBlock] * kBlock + pos % kBlock);
    }
    m.block_tables.push_back(std::move(table));
  }
  return m;
}

class CudaGraphs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    gpu_ = make_cuda_backend(0, &why).release();
    why_ = new std::string(why);
    if (gpu_) cuda::set_graph_capture_after(*gpu_, 1);  // capture on first use (CaptureAfterUses tests more)
    // A Qwen3 shape with head_dim 128 and GQA group 4 (the tensor-core attention).
    if (gpu_)
      dir_ = new std::string(test::write_random_qwen3(
          "tf_graphs", {kHidden, kLayers, kHeads, kKvHeads, kHeadDim, kInter, kVocab, 1e4}));
  }
  static void TearDownTestSuite() {
    if (dir_) fs::remove_all(*dir_);
  }
  void SetUp() override {
    if (!gpu_) GTEST_SKIP() << "no CUDA backend: " << *why_;
  }

  // Prefills `seqs` sequences of the given lengths eagerly into two pools, then runs `steps` decode and
  // verify rounds on both: eagerly on pool A, through graphs on pool B, comparing every output bit.
  // drafts(step, s): the drafts sequence s verifies in the step (0: a decode row).
  void run_rounds(const std::vector<int>& start_lens, int steps,
                  std::function<int(int, int)> drafts = nullptr) {
    if (!drafts) drafts = [](int step, int s) { return step < 3 ? 0 : (step * 7 + s * 3) % 5; };
    Checkpoint ckpt = Checkpoint::open(*dir_);
    auto model = load_model(ckpt, *gpu_, kContext);
    const int S = int(start_lens.size());
    std::vector<KvLayer> eager_pool = make_pool(*gpu_, S), graph_pool = make_pool(*gpu_, S);
    std::mt19937 rng(1234 + S);
    std::uniform_int_distribution<int32_t> tok(3, kVocab - 1);
    // Prefill: the same eager forward on both pools, in chunks of 64 rows of each sequence.
    std::vector<std::vector<int32_t>> history(S);
    for (int s = 0; s < S; ++s)
      for (int p = 0; p < start_lens[s]; ++p) history[s].push_back(tok(rng));
    std::vector<int> lens(S, 0);
    for (;;) {
      std::vector<std::vector<int32_t>> chunk(S);
      const std::vector<int> at = lens;
      bool any = false;
      for (int s = 0; s < S; ++s) {
        const int n = std::min(64, start_lens[s] - 1 - lens[s]);  // the last token is the first decode row
        if (n <= 0) continue;
        chunk[s].assign(history[s].begin() + lens[s], history[s].begin() + lens[s] + n);
        lens[s] += n, any = true;
      }
      if (!any) break;
      const BatchMeta m = make_meta(at, chunk);  // a finished sequence keeps its table, with no rows
      std::vector<float> logits;
      model->forward(m, eager_pool, {}, logits);
      model->forward(m, graph_pool, {}, logits);
    }
    const Backend::GraphStats before = gpu_->graph_stats();
    for (int step = 0; step < steps; ++step) {
      // Row widths: decode (1) and verify (k + 1 for k = 1..4), varying by sequence and step.
      std::vector<std::vector<int32_t>> rows(S);
      for (int s = 0; s < S; ++s) {
        const int k = drafts(step, s);
        rows[s].push_back(history[s][lens[s]]);
        for (int i = 0; i < k; ++i) rows[s].push_back(tok(rng));
      }
      BatchMeta m = make_meta(lens, rows);
      std::vector<int32_t> logit_rows(m.rows());
      for (int r = 0; r < m.rows(); ++r) logit_rows[r] = r;
      std::vector<RowSampling> sampling;
      for (int r = 0; r < m.rows(); ++r)
        sampling.push_back({r % 2 ? 0.8f : 0.f, uint64_t(77 + m.row_seq[r]), int64_t(m.positions[r]) + 1});
      const bool want_hidden = step % 3 == 1, want_logits = step % 2 == 0;
      std::vector<float> logits_e, logits_g;
      std::vector<int32_t> tokens_e, tokens_g;
      Tensor hidden_e, hidden_g;
      model->forward(m, eager_pool, logit_rows,
                     Model::Outputs{want_logits ? &logits_e : nullptr, &sampling, &tokens_e,
                                    want_hidden ? &hidden_e : nullptr, false});
      model->forward(m, graph_pool, logit_rows,
                     Model::Outputs{want_logits ? &logits_g : nullptr, &sampling, &tokens_g,
                                    want_hidden ? &hidden_g : nullptr, true});
      ASSERT_EQ(tokens_e, tokens_g) << "step " << step;
      ASSERT_EQ(int(tokens_g.size()), m.rows());
      if (want_logits) {
        ASSERT_EQ(logits_e.size(), size_t(m.rows()) * kVocab);
        ASSERT_EQ(logits_e.size(), logits_g.size());
        EXPECT_EQ(std::memcmp(logits_e.data(), logits_g.data(), logits_e.size() * 4), 0) << "step " << step;
        for (float v : logits_g) ASSERT_TRUE(std::isfinite(v));
      }
      if (want_hidden) {
        ASSERT_EQ(hidden_e.nbytes(), hidden_g.nbytes());
        EXPECT_EQ(std::memcmp(hidden_e.raw(), hidden_g.raw(), hidden_e.nbytes()), 0) << "step " << step;
      }
      // Accept every row: the next round starts after them, with the token sampled on the last row.
      for (int s = 0; s < S; ++s) {
        history[s].resize(size_t(lens[s]) + 1);
        history[s].insert(history[s].end(), rows[s].begin() + 1, rows[s].end());
        lens[s] += int(rows[s].size());
      }
      int r = 0;
      for (int s = 0; s < S; ++s) {
        r += int(rows[s].size());
        history[s].push_back(tokens_g[size_t(r - 1)]);
      }
    }
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_EQ(device_bytes(*gpu_, eager_pool[l].k), device_bytes(*gpu_, graph_pool[l].k)) << "layer " << l;
      EXPECT_EQ(device_bytes(*gpu_, eager_pool[l].v), device_bytes(*gpu_, graph_pool[l].v)) << "layer " << l;
    }
    const Backend::GraphStats after = gpu_->graph_stats();
    EXPECT_GT(after.captures, before.captures);
    EXPECT_LE(after.cached, after.capacity);
    EXPECT_EQ(after.captures - before.captures + after.replays - before.replays + after.eager - before.eager,
              steps);  // every round went through run_graph
    last_replays_ = after.replays - before.replays;
  }

  static Backend* gpu_;
  static std::string* why_;
  static std::string* dir_;
  int64_t last_replays_ = 0;
};
Backend* CudaGraphs::gpu_ = nullptr;
std::string* CudaGraphs::why_ = nullptr;
std::string* CudaGraphs::dir_ = nullptr;

TEST_F(CudaGraphs, OneSequenceDecodeAndVerifyAcrossChunks) {
  run_rounds({118}, 40);  // 118 .. ~190: crosses position 128 (chunk bucket 1 -> 2)
  EXPECT_GT(last_replays_, 0);
}

TEST_F(CudaGraphs, ThreeSequences) {
  run_rounds({120, 250, 500}, 30);  // crosses 128, 256 (bucket 2 -> 4) and 512 (bucket 4 -> 8)
  EXPECT_GT(last_replays_, 0);
}

TEST_F(CudaGraphs, EightSequences) {
  std::vector<int> lens;
  for (int s = 0; s < 8; ++s) lens.push_back(100 + 57 * s);
  run_rounds(lens, 30);
  EXPECT_GT(last_replays_, 0);
}

TEST_F(CudaGraphs, DecodeStepsReplayOneGraph) {
  // Three decode rounds of the same shape inside one chunk bucket: one capture, then replays.
  const Backend::GraphStats before = gpu_->graph_stats();
  run_rounds({40, 60}, 3);
  const Backend::GraphStats after = gpu_->graph_stats();
  EXPECT_EQ(after.captures - before.captures, 1);
  EXPECT_EQ(after.replays - before.replays, 2);
}

TEST_F(CudaGraphs, VerifyRoundsOfOtherWidthsShareAGraph) {
  // Three decode rounds, then five verify rounds of 6 rows in two sequences split 2+4, 4+2, 3+3, 1+5,
  // 5+1: the attention tiles are refreshed per round, so one graph serves them all.
  const Backend::GraphStats before = gpu_->graph_stats();
  const int widths[] = {1, 3, 3, 1, 2, 2, 0, 4, 4, 0};
  run_rounds({20, 30}, 8, [&](int step, int s) { return step < 3 ? 0 : widths[2 * (step - 3) + s]; });
  const Backend::GraphStats after = gpu_->graph_stats();
  EXPECT_EQ(after.captures - before.captures, 2);  // decode (2 rows), verify (6 rows)
  EXPECT_EQ(after.replays - before.replays, 6);
}

TEST_F(CudaGraphs, CaptureOnceTheShapeRecurs) {
  // With the default threshold a key's first kGraphCaptureAfterUses - 1 calls run eagerly (the same bits,
  // checked by run_rounds), the next captures, the rest replay.
  cuda::set_graph_capture_after(*gpu_, kGraphCaptureAfterUses);
  const Backend::GraphStats before = gpu_->graph_stats();
  run_rounds({40, 60}, kGraphCaptureAfterUses + 2, [](int, int) { return 0; });  // decodes of one shape
  const Backend::GraphStats after = gpu_->graph_stats();
  cuda::set_graph_capture_after(*gpu_, 1);
  EXPECT_EQ(after.eager - before.eager, kGraphCaptureAfterUses - 1);
  EXPECT_EQ(after.captures - before.captures, 1);
  EXPECT_EQ(after.replays - before.replays, 2);
}

TEST_F(CudaGraphs, BoundedCacheStaysExact) {
  cuda::set_graph_capacity(*gpu_, 3);  // rounds of many shapes evict one another
  run_rounds({120, 250, 380}, 20);
  EXPECT_LE(gpu_->graph_stats().cached, 3u);
  EXPECT_EQ(gpu_->graph_stats().capacity, 3u);
  cuda::set_graph_capacity(*gpu_, 64);
}

TEST_F(CudaGraphs, ModelUnloadDropsGraphs) {
  run_rounds({20}, 4);
  EXPECT_EQ(gpu_->graph_stats().cached, 0u);  // run_rounds' model is gone
}

// Attention sized for more chunks than its longest row needs (a captured launch sized for the chunk
// bucket) gives the same bits, for every tile schedule and for the fallback kernel.
TEST_F(CudaGraphs, AttentionBitsDoNotDependOnTheChunkBucket) {
  Backend& be = *gpu_;
  const int blocks = 4 * kBlocksPerSeq;
  KvLayer kv;
  kv.k = be.alloc({blocks, kBlock, kKvHeads, kHeadDim}, DType::BF16);
  kv.v = be.alloc({blocks, kBlock, kKvHeads, kHeadDim}, DType::BF16);
  cuda::fill_uniform(be, kv.k, 1, -1.f, 1.f);
  cuda::fill_uniform(be, kv.v, 2, -1.f, 1.f);
  // Verify-like rows: sequence 0 one row at 130, sequence 1 five rows at 300.., sequence 2 two rows at 5.
  std::vector<std::vector<int32_t>> toks = {{1}, {1, 2, 3, 4, 5}, {1, 2}, {1, 2, 3}};
  BatchMeta m = make_meta({130, 300, 5, 700}, toks);
  const int R = m.rows();
  AttentionParams p;
  p.num_heads = kHeads, p.num_kv_heads = kKvHeads, p.head_dim = kHeadDim;
  p.scale = 1.f / std::sqrt(float(kHeadDim));
  Tensor q = be.alloc({R, kHeads, kHeadDim}, DType::BF16);
  cuda::fill_uniform(be, q, 3, -2.f, 2.f);
  auto run = [&](int min_chunks) {
    cuda::set_attention_min_chunks(min_chunks);
    be.begin_forward(m);
    Tensor out = be.alloc({R, kHeads, kHeadDim}, DType::BF16);
    be.attention(q, kv, p, out);
    cuda::set_attention_min_chunks(0);
    return device_bytes(be, out);
  };
  for (bool mma : {true, false}) {
    cuda::set_attention_mma(mma);
    for (auto sched : {cuda::TileSchedule::Auto, cuda::TileSchedule::Split, cuda::TileSchedule::Loop}) {
      cuda::set_attention_tile_schedule(sched);
      const std::vector<uint8_t> exact = run(0);
      for (int bucket : {8, 16, 40, 96})
        EXPECT_EQ(run(bucket), exact) << "mma " << mma << " bucket " << bucket;
    }
  }
  cuda::set_attention_mma(true);
  cuda::set_attention_tile_schedule(cuda::TileSchedule::Auto);
}

// The engine with --cuda-graphs on gives every stream the tokens it gives with graphs off: the demo model
// (head_dim 64) with its MTP head or its draft model drafting, and context copies, 4 streams sharing rounds,
// greedy and sampled, so graphed rounds are decodes and verifies of mixed widths. Each engine has its own
// backend.
TEST(CudaGraphsEngine, SameTokensWithGraphsOnAndOff) {
  std::string why;
  if (!make_cuda_backend(0, &why)) GTEST_SKIP() << "no CUDA backend: " << why;
  const std::string built_in = std::string(TF_SOURCE_DIR) + "/models/demo";
  const std::string demo = fs::exists(built_in) ? built_in : "models/demo";
  if (!fs::exists(demo + "/model.safetensors")) GTEST_SKIP() << "no demo model at " << demo;
  auto run = [&](bool graphs, const std::string& drafter) {
    EngineOptions o;
    o.model_path = demo;
    o.backend = "cuda";
    o.parallel = 4;
    o.context = 1024;
    o.drafter = drafter;
    o.cuda_graphs = graphs;
    auto e = create_engine(o);
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (int i = 0; i < 6; ++i) {
      GenerationRequest r;
      for (int t = 0; t < 20 + 30 * i; ++t)
        r.prompt.push_back(int32_t(100 + (t * 7 + i * 13) % 50));  // repetitive
      r.sampling.temperature = i % 2 ? 0.8f : 0.f;
      r.sampling.seed = 500 + i;
      r.max_tokens = 150 + 20 * i;  // crosses 128-position chunks
      r.ignore_eos = true;
      hs.push_back(e->submit(r));
    }
    std::vector<std::vector<int32_t>> out;
    for (auto& h : hs) {
      std::vector<int32_t> toks;
      StreamEvent ev;
      while (h->next(ev, std::chrono::seconds(120))) {
        if (ev.kind != StreamEvent::Kind::Tokens) {
          EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
          break;
        }
        for (auto& t : ev.tokens) toks.push_back(t.token);
      }
      out.push_back(std::move(toks));
    }
    e->shutdown();
    return out;
  };
  // auto: the MTP head; demo/draft: a draft model sharing the backend (its own rope and graphs-free
  // forwards).
  for (const std::string& drafter : {std::string("auto"), demo + "/draft", std::string("none")}) {
    const auto off = run(false, drafter), on = run(true, drafter);
    ASSERT_EQ(off.size(), on.size());
    for (size_t i = 0; i < off.size(); ++i) {
      EXPECT_EQ(int(off[i].size()), 150 + 20 * int(i)) << drafter << " stream " << i;
      EXPECT_EQ(off[i], on[i]) << drafter << " stream " << i;
    }
  }
}

}  // namespace
}  // namespace tf

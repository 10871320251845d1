// The dense decoder's graphed forward (forward_graph: fixed buffers, views of the first rows, host reads
// after Backend::run_graph) on the CPU, through a backend that claims graph support and runs the recorded
// ops every time: the same bits as the eager forward, no host read inside the recorded part, and the keys
// it passes -- equal for rounds of the same shape (whatever the draft widths), different otherwise. The
// capture and replay themselves are tested on the GPU (tests/ops/gpu/test_cuda_graphs.cpp).
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "checkpoint/checkpoint.h"
#include "models/model.h"
#include "ops/backend.h"
#include "ops/graph_cache.h"

namespace tf {
namespace {

constexpr int kBlock = 16, kBlocksPerSeq = 16;

// The CPU backend with graph support claimed. run_graph notes the key and runs `record`; host reads inside
// `record` fail the test. With `replay`, it behaves like a CUDA graph: the call of a key that captures
// (the capture_after-th, as the CUDA backend's GraphUseCounter decides; the ones before run `record`
// eagerly) records the ops as closures holding their arguments (tensor handles: the same storage; row
// lists: copied, like a graph's staged values) and later calls of the key run those closures instead of
// `record`, while the batch metadata comes from the latest begin_forward (as a graph reads the refreshed
// metadata buffer). run_graph returns whether it captured, as the CUDA backend does.
class GraphingCpu final : public Backend {
 public:
  explicit GraphingCpu(bool replay = false, int capture_after = 1)
      : cpu_(make_cpu_backend()), replay_(replay), uses_(capture_after) {}
  std::map<std::vector<int64_t>, int> keys;  // run_graph calls per key
  int calls = 0, replays = 0, captures = 0, eager = 0;

  bool graphs_supported() const override { return true; }
  bool run_graph(const std::vector<int64_t>& key, const AttentionParams& attn,
                 std::shared_ptr<const void> keep, const std::function<void()>& record) override {
    EXPECT_TRUE(keep != nullptr);
    EXPECT_GT(attn.num_heads, 0);
    ++keys[key], ++calls;
    bool capturing = false;
    if (replay_) {
      if (auto it = graphs_.find(key); it != graphs_.end()) {
        ++replays;
        for (auto& f : it->second) f();
        return false;
      }
      capturing = uses_.use(key);
      if (capturing) rec_ = &graphs_[key];
    }
    recording_ = true;
    record();
    recording_ = false;
    rec_ = nullptr;
    ++(capturing ? captures : eager);
    return capturing;
  }

  std::string name() const override { return "cpu+graphs"; }
  Device device() const override { return cpu_->device(); }
  DType act_dtype() const override { return cpu_->act_dtype(); }
  Tensor alloc(std::vector<int64_t> shape, DType dtype) override {
    return cpu_->alloc(std::move(shape), dtype);
  }
  Tensor upload(const Tensor& host) override {
    no_host("upload");
    return cpu_->upload(host);
  }
  LinearWeight upload_linear(const LinearWeight& host) override { return cpu_->upload_linear(host); }
  void to_host(const Tensor& src, Tensor& dst) override {
    no_host("to_host");
    cpu_->to_host(src, dst);
  }
  void begin_forward(const BatchMeta& meta) override {
    no_host("begin_forward");
    cpu_->begin_forward(meta);
  }
  void embedding(const Tensor& table, float scale, Tensor& out) override {
    op([=, this]() mutable { cpu_->embedding(table, scale, out); });
  }
  void linear(const Tensor& x, const LinearWeight& w, Tensor& y) override {
    op([=, this]() mutable { cpu_->linear(x, w, y); });
  }
  void rms_norm(const Tensor& x, const Tensor& w, float eps, float offset, Tensor& y) override {
    op([=, this]() mutable { cpu_->rms_norm(x, w, eps, offset, y); });
  }
  void add_rms_norm(Tensor& res, const Tensor& x, const Tensor& w, float eps, float offset,
                    Tensor& y) override {
    op([=, this]() mutable { cpu_->add_rms_norm(res, x, w, eps, offset, y); });
  }
  void rope(Tensor& q, Tensor& k, const RopeParams& p) override {
    op([=, this]() mutable { cpu_->rope(q, k, p); });
  }
  void silu_mul(const Tensor& gu, Tensor& out) override {
    op([=, this]() mutable { cpu_->silu_mul(gu, out); });
  }
  void kv_write(KvLayer& layer, const Tensor& k, const Tensor& v) override {
    op([=, this]() mutable { cpu_->kv_write(layer, k, v); });
  }
  void attention(const Tensor& q, const KvLayer& layer, const AttentionParams& p, Tensor& out) override {
    op([=, this]() mutable { cpu_->attention(q, layer, p, out); });
  }
  void add(Tensor& a, const Tensor& b) override {
    op([=, this]() mutable { cpu_->add(a, b); });
  }
  void gather_rows(const Tensor& x, const std::vector<int32_t>& rows, Tensor& out) override {
    op([=, this]() mutable { cpu_->gather_rows(x, rows, out); });
  }
  void zero(Tensor& t) override {
    op([=, this]() mutable { cpu_->zero(t); });
  }
  void scatter_add_rows(Tensor& out, const Tensor& y, const std::vector<int32_t>& rows,
                        const std::vector<float>& weights) override {
    op([=, this]() mutable { cpu_->scatter_add_rows(out, y, rows, weights); });
  }
  void sample_rows(const Tensor& logits, const std::vector<RowSampling>& rows,
                   std::vector<int32_t>& tokens) override {
    no_host("sample_rows");
    cpu_->sample_rows(logits, rows, tokens);
  }

 private:
  template <typename F>
  void op(F f) {
    if (rec_) rec_->push_back(f);
    f();
  }
  void no_host(const char* op) const { EXPECT_FALSE(recording_) << op << " inside a recorded forward"; }
  std::unique_ptr<Backend> cpu_;
  bool replay_ = false, recording_ = false;
  GraphUseCounter uses_;
  std::map<std::vector<int64_t>, std::vector<std::function<void()>>> graphs_;
  std::vector<std::function<void()>>* rec_ = nullptr;
};

struct Round {
  std::vector<int32_t> tokens;
  std::vector<float> logits, hidden;
  bool captured = false;  // Model::Outputs::graph_captured
};

// Prefills two sequences (eagerly), then runs rounds of the given per-sequence widths with `graph` set,
// returning every round's sampled tokens, logits and hidden states.
std::vector<Round> run(Backend& be, bool graph, const std::vector<std::vector<int>>& widths) {
  Checkpoint ckpt = Checkpoint::open(std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3");
  auto model = load_model(ckpt, be, kBlock * kBlocksPerSeq);
  const auto& s = model->spec();
  std::vector<KvLayer> kv;
  for (int l = 0; l < s.layers; ++l) {
    KvLayer layer;
    layer.k = be.alloc({2 * kBlocksPerSeq, kBlock, s.kv_heads, s.head_dim}, be.act_dtype());
    layer.v = be.alloc({2 * kBlocksPerSeq, kBlock, s.kv_heads, s.head_dim}, be.act_dtype());
    be.zero(layer.k);
    be.zero(layer.v);
    kv.push_back(layer);
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> tok(3, s.vocab - 1);
  std::vector<int> lens = {9, 21};
  auto meta_for = [&](const std::vector<int>& counts) {
    BatchMeta m;
    m.block_size = kBlock;
    for (int q = 0; q < 2; ++q) {
      std::vector<int32_t> table;
      for (int b = 0; b < kBlocksPerSeq; ++b) table.push_back(q * kBlocksPerSeq + b);
      for (int i = 0; i < counts[q]; ++i) {
        const int pos = lens[q] + i;
        m.tokens.push_back(tok(rng)), m.positions.push_back(pos), m.row_seq.push_back(q);
        m.slots.push_back(table[pos / kBlock] * kBlock + pos % kBlock);
      }
      m.block_tables.push_back(table);
    }
    return m;
  };
  {
    std::vector<int> prompt = lens;
    lens = {0, 0};
    std::vector<float> unused;
    model->forward(meta_for(prompt), kv, {}, unused);  // eager: a model's first forward always is
    lens = prompt;
  }
  std::vector<Round> out;
  for (size_t i = 0; i < widths.size(); ++i) {
    BatchMeta m = meta_for(widths[i]);
    std::vector<int32_t> rows(m.rows());
    std::vector<RowSampling> sampling;
    for (int r = 0; r < m.rows(); ++r) {
      rows[r] = r;
      sampling.push_back({r % 2 ? 0.9f : 0.f, 42, int64_t(m.positions[r]) + 1});
    }
    Round rd;
    Tensor hidden;
    rd.captured = !graph;  // the model must overwrite it either way
    model->forward(m, kv, rows,
                   Model::Outputs{&rd.logits, &sampling, &rd.tokens, &hidden, graph, &rd.captured});
    rd.hidden = hidden.to_f32_vector();
    out.push_back(std::move(rd));
    for (int q = 0; q < 2; ++q) lens[q] += widths[i][q];
  }
  return out;
}

TEST(GraphForward, SameBitsAsEagerAndKeysFollowTheShape) {
  // Decode (1 + 1 rows), verify 2+4, 4+2 and 3+3 (6 rows each), decode again, verify 1+2 (3 rows).
  const std::vector<std::vector<int>> widths = {{1, 1}, {2, 4}, {4, 2}, {3, 3}, {1, 1}, {1, 2}};
  auto cpu = make_cpu_backend();
  GraphingCpu graphing;
  const std::vector<Round> eager = run(*cpu, false, widths), graphed = run(graphing, true, widths);
  ASSERT_EQ(eager.size(), graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(eager[i].tokens, graphed[i].tokens) << "round " << i;
    ASSERT_EQ(eager[i].logits.size(), graphed[i].logits.size());
    EXPECT_EQ(std::memcmp(eager[i].logits.data(), graphed[i].logits.data(), eager[i].logits.size() * 4), 0);
    ASSERT_EQ(eager[i].hidden.size(), graphed[i].hidden.size());
    EXPECT_EQ(std::memcmp(eager[i].hidden.data(), graphed[i].hidden.data(), eager[i].hidden.size() * 4), 0);
  }
  EXPECT_EQ(graphing.calls, int(widths.size()));  // every round went through run_graph
  // Three shapes: 2 rows (twice), 6 rows whatever the split (three times), 3 rows.
  ASSERT_EQ(graphing.keys.size(), 3u);
  std::multiset<int> counts;
  for (auto& [k, n] : graphing.keys) counts.insert(n);
  EXPECT_EQ(counts, (std::multiset<int>{1, 2, 3}));
}

// Replayed rounds (the recorded ops run again on the next round's metadata, with the row lists and tensors
// of the recording) give the eager bits: nothing a round changes is frozen into a recording beyond what
// the key fixes.
TEST(GraphForward, ReplayedRoundsGiveTheEagerBits) {
  const std::vector<std::vector<int>> widths = {{1, 1}, {2, 4}, {4, 2}, {3, 3},
                                                {1, 1}, {1, 2}, {5, 1}, {1, 1}};
  auto cpu = make_cpu_backend();
  GraphingCpu replaying(true);
  const std::vector<Round> eager = run(*cpu, false, widths), replayed = run(replaying, true, widths);
  EXPECT_EQ(replaying.replays, 5);  // 2 rows: 2 of 3; 6 rows: 3 of 4; 3 rows: none
  ASSERT_EQ(eager.size(), replayed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(replayed[i].captured, i == 0 || i == 1 || i == 5) << "round " << i;  // each shape's first
    EXPECT_EQ(eager[i].tokens, replayed[i].tokens) << "round " << i;
    ASSERT_EQ(eager[i].logits.size(), replayed[i].logits.size());
    EXPECT_EQ(std::memcmp(eager[i].logits.data(), replayed[i].logits.data(), eager[i].logits.size() * 4), 0)
        << "round " << i;
    ASSERT_EQ(eager[i].hidden.size(), replayed[i].hidden.size());
    EXPECT_EQ(std::memcmp(eager[i].hidden.data(), replayed[i].hidden.data(), eager[i].hidden.size() * 4), 0)
        << "round " << i;
  }
}

// With the CUDA backend's default threshold, a shape's first calls run `record` eagerly, the
// kGraphCaptureAfterUses-th captures and later ones replay: the same bits throughout, and the forward
// reports exactly the rounds that captured (Outputs::graph_captured: the engine's timing models skip them).
TEST(GraphForward, CaptureOnceTheShapeRecursAndReportIt) {
  static_assert(kGraphCaptureAfterUses == 3, "the round schedule below counts on it");
  // 2-row decodes (rounds 0, 4, 6, 8: captured at 6), 6-row verifies (1, 2, 3, 7: captured at 3), a 3-row
  // verify once (5: eager, never captured).
  const std::vector<std::vector<int>> widths = {{1, 1}, {2, 4}, {4, 2}, {3, 3}, {1, 1},
                                                {1, 2}, {1, 1}, {5, 1}, {1, 1}};
  auto cpu = make_cpu_backend();
  GraphingCpu graphing(true, kGraphCaptureAfterUses);
  const std::vector<Round> eager = run(*cpu, false, widths), graphed = run(graphing, true, widths);
  EXPECT_EQ(graphing.captures, 2);
  EXPECT_EQ(graphing.replays, 2);  // rounds 7 and 8
  EXPECT_EQ(graphing.eager, 5);
  ASSERT_EQ(eager.size(), graphed.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_FALSE(eager[i].captured) << "round " << i;
    EXPECT_EQ(graphed[i].captured, i == 3 || i == 6) << "round " << i;
    EXPECT_EQ(eager[i].tokens, graphed[i].tokens) << "round " << i;
    ASSERT_EQ(eager[i].logits.size(), graphed[i].logits.size());
    EXPECT_EQ(std::memcmp(eager[i].logits.data(), graphed[i].logits.data(), eager[i].logits.size() * 4), 0)
        << "round " << i;
    ASSERT_EQ(eager[i].hidden.size(), graphed[i].hidden.size());
    EXPECT_EQ(std::memcmp(eager[i].hidden.data(), graphed[i].hidden.data(), eager[i].hidden.size() * 4), 0)
        << "round " << i;
  }
}

TEST(GraphForward, EagerWhenNotAsked) {
  GraphingCpu graphing;
  run(graphing, false, {{1, 1}, {2, 3}});
  EXPECT_EQ(graphing.calls, 0);
}

}  // namespace
}  // namespace tf

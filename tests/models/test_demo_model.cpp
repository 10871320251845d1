// The shipped demo model (models/demo): logits vs transformers' Qwen3ForCausalLM, exact greedy
// continuations, its MTP head and draft model vs the training script's reference implementation, and the
// drafters' quality above the floors recorded when it was trained (tests/data/demo/draft_metrics.json).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"

using namespace tf;
using nlohmann::json;

namespace {

const std::string kDemo = std::string(TF_SOURCE_DIR) + "/models/demo";

json load(const std::string& rel) {
  std::ifstream f(std::string(TF_SOURCE_DIR) + "/" + rel);
  EXPECT_TRUE(f.good()) << rel;
  return json::parse(f);
}

struct Loaded {
  explicit Loaded(const std::string& dir)
      : ckpt(Checkpoint::open(dir)), be(make_cpu_backend()), model(load_model(ckpt, *be, 2048)) {
    const auto& s = model->spec();
    pool = std::make_unique<KvBlockPool>(*be, s.layers, s.kv_heads, s.head_dim, 16, 160);
    mtp_pool = std::make_unique<KvBlockPool>(*be, 1, s.kv_heads, s.head_dim, 16, 160);
  }
  BatchMeta meta(const std::vector<int32_t>& ids, const std::vector<int32_t>& table) {
    BatchMeta m;
    m.block_size = 16;
    m.block_tables = {table};
    for (int p = 0; p < int(ids.size()); ++p) {
      m.tokens.push_back(ids[p]);
      m.positions.push_back(p);
      m.row_seq.push_back(0);
      m.slots.push_back(table[p / 16] * 16 + p % 16);
    }
    return m;
  }
  // Teacher-forced logits of every position (and the final hidden states).
  std::vector<float> logits(const std::vector<int32_t>& ids, Tensor* hidden = nullptr) {
    std::vector<int32_t> table, rows;
    EXPECT_TRUE(pool->reserve(table, int(ids.size())));
    for (int i = 0; i < int(ids.size()); ++i) rows.push_back(i);
    std::vector<float> out;
    BatchMeta m = meta(ids, table);
    model->forward(m, pool->layers(), rows, out, hidden);
    pool->release(table);
    return out;
  }
  // MTP logits for positions 0..n-2 (row p predicts token p+2 from token p+1 and h[p]).
  std::vector<float> mtp_logits(const std::vector<int32_t>& ids) {
    Tensor hidden;
    logits(ids, &hidden);
    const int n = int(ids.size()) - 1;
    std::vector<int32_t> table, rows, next(ids.begin() + 1, ids.end());
    EXPECT_TRUE(mtp_pool->reserve(table, n));
    for (int i = 0; i < n; ++i) rows.push_back(i);
    BatchMeta m = meta(next, table);
    Tensor hin = hidden.slice_rows(0, n);
    std::vector<float> out;
    model->forward_mtp(m, mtp_pool->layers()[0], hin, rows, out, nullptr);
    mtp_pool->release(table);
    return out;
  }
  Checkpoint ckpt;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvBlockPool> pool, mtp_pool;
};

int argmax(const float* v, int n) {
  int b = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[b]) b = i;
  return b;
}

void expect_close(const float* got, const json& want, const std::string& what) {
  double err = 0;
  for (size_t j = 0; j < want.size(); ++j)
    err = std::max(err, std::fabs(double(got[j]) - want[j].get<double>()));
  EXPECT_LT(err, 2e-4) << what;
}

TEST(DemoModel, LoadsWithItsMtpHead) {
  Loaded d(kDemo);
  EXPECT_EQ(d.model->spec().family, "qwen3");
  EXPECT_TRUE(d.model->has_mtp());
  EXPECT_TRUE(d.model->spec().tie_embeddings);
}

TEST(DemoModel, LogitsAndGreedyMatchTransformers) {
  Loaded d(kDemo);
  const int V = d.model->spec().vocab;
  json g = load("tests/data/demo/goldens.json");
  for (const auto& c : g["cases"]) {
    std::vector<int32_t> ids = c["input_ids"];
    auto all = d.logits(ids);
    for (size_t i = 0; i < c["logits_positions"].size(); ++i) {
      const int p = c["logits_positions"][i];
      expect_close(all.data() + size_t(p) * V, c["logits"][i],
                   c["name"].get<std::string>() + " @" + std::to_string(p));
    }
    // Greedy by full recomputation each step (the engine's incremental path is tested elsewhere).
    std::vector<int32_t> seq = c["greedy_prompt_ids"], got;
    const std::vector<int32_t> want = c["greedy_tokens"];
    while (got.size() < want.size()) {
      auto l = d.logits(seq);
      int next = argmax(l.data() + (seq.size() - 1) * size_t(V), V);
      got.push_back(next);
      seq.push_back(next);
    }
    EXPECT_EQ(got, want) << c["name"];
  }
}

TEST(DemoModel, MtpHeadAndDraftModelMatchTheReference) {
  Loaded d(kDemo), draft(kDemo + "/draft");
  const int V = d.model->spec().vocab;
  json g = load("tests/data/demo/goldens.json");
  for (const auto& c : g["cases"]) {
    std::vector<int32_t> ids = c["input_ids"];
    auto mtp = d.mtp_logits(ids);
    for (size_t i = 0; i < c["mtp"]["positions"].size(); ++i) {
      const int p = c["mtp"]["positions"][i];
      expect_close(mtp.data() + size_t(p) * V, c["mtp"]["logits"][i], "mtp " + c["name"].get<std::string>());
      EXPECT_EQ(argmax(mtp.data() + size_t(p) * V, V), c["mtp"]["argmax"][i].get<int>());
    }
    if (!c.contains("draft") || c["draft"].is_null()) continue;
    auto dl = draft.logits(ids);
    for (size_t i = 0; i < c["draft"]["logits_positions"].size(); ++i) {
      const int p = c["draft"]["logits_positions"][i];
      expect_close(dl.data() + size_t(p) * V, c["draft"]["logits"][i],
                   "draft " + c["name"].get<std::string>());
    }
  }
}

TEST(DemoModel, DrafterQualityAboveRecordedFloors) {
  Loaded d(kDemo), draft(kDemo + "/draft");
  const int V = d.model->spec().vocab;
  json m = load("tests/data/demo/draft_metrics.json");
  const auto& sample = m["shipped_sample"]["token_ids"];
  int64_t mtp_hit = 0, mtp_agree = 0, mtp_n = 0, draft_agree = 0, draft_n = 0;
  for (size_t s = 0; s < 4 && s < sample.size(); ++s) {
    std::vector<int32_t> ids = sample[s];
    const int L = int(ids.size());
    auto main_l = d.logits(ids);
    auto mtp_l = d.mtp_logits(ids);
    auto draft_l = draft.logits(ids);
    for (int t = 0; t + 2 < L; ++t) {
      const int pick = argmax(mtp_l.data() + size_t(t) * V, V);
      mtp_hit += pick == ids[t + 2];
      mtp_agree += pick == argmax(main_l.data() + size_t(t + 1) * V, V);
      ++mtp_n;
    }
    for (int t = 0; t < L; ++t) {
      draft_agree += argmax(draft_l.data() + size_t(t) * V, V) == argmax(main_l.data() + size_t(t) * V, V);
      ++draft_n;
    }
  }
  const auto& floors = m["suggested_floors"];
  EXPECT_GE(double(mtp_hit) / mtp_n, floors["mtp_top1_accuracy"].get<double>());
  EXPECT_GE(double(mtp_agree) / mtp_n, floors["mtp_agreement_with_main"].get<double>());
  EXPECT_GE(double(draft_agree) / draft_n, floors["draft_top1_agreement"].get<double>());
  std::cout << "mtp top-1 " << double(mtp_hit) / mtp_n << ", mtp agreement " << double(mtp_agree) / mtp_n
            << ", draft agreement " << double(draft_agree) / draft_n << "\n";
}

}  // namespace

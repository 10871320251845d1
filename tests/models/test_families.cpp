// Families vs transformers: tiny random-weight checkpoints (tools/make_tiny_models.py) whose logits and
// greedy continuations were computed by transformers in float32. The engine's CPU reference backend must
// match the logits within fp32 tolerance and the greedy tokens exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "engine/kv_cache.h"
#include "models/model.h"

using namespace tf;
using nlohmann::json;

namespace {

std::string tiny(const std::string& name) {
  return std::string(TF_SOURCE_DIR) + "/tests/data/tiny/" + name;
}

json load_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

// Runs `ids` through the model as one sequence, in chunks of `chunk` rows per forward; returns the logits
// of the requested positions.
struct Runner {
  explicit Runner(const std::string& dir, int context = 256)
      : ckpt(Checkpoint::open(dir)), be(make_cpu_backend()), model(load_model(ckpt, *be, context)) {
    const auto& s = model->spec();
    pool = std::make_unique<KvBlockPool>(*be, s.layers, s.kv_heads, s.head_dim, 16, 64);
  }
  std::vector<std::vector<float>> run(const std::vector<int32_t>& ids, const std::vector<int>& want,
                                      int chunk) {
    std::vector<int32_t> table;
    EXPECT_TRUE(pool->reserve(table, int(ids.size())));
    std::vector<std::vector<float>> out(want.size());
    for (int start = 0; start < int(ids.size()); start += chunk) {
      const int end = std::min<int>(int(ids.size()), start + chunk);
      BatchMeta m;
      m.block_size = 16;
      m.block_tables = {table};
      std::vector<int32_t> rows;
      for (int p = start; p < end; ++p) {
        m.tokens.push_back(ids[p]);
        m.positions.push_back(p);
        m.row_seq.push_back(0);
        m.slots.push_back(table[p / 16] * 16 + p % 16);
        rows.push_back(p - start);
      }
      std::vector<float> logits;
      model->forward(m, pool->layers(), rows, logits);
      const int V = model->spec().vocab;
      for (size_t w = 0; w < want.size(); ++w)
        if (want[w] >= start && want[w] < end)
          out[w].assign(logits.begin() + size_t(want[w] - start) * V,
                        logits.begin() + size_t(want[w] - start + 1) * V);
    }
    pool->release(table);
    return out;
  }
  Checkpoint ckpt;
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvBlockPool> pool;
};

int argmax(const std::vector<float>& v) {
  int b = 0;
  for (int i = 1; i < int(v.size()); ++i)
    if (v[i] > v[b]) b = i;
  return b;
}

class FamilyGoldens : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyGoldens, LogitsMatchTransformers) {
  Runner r(tiny(GetParam()));
  json g = load_json(tiny(GetParam() + ".goldens.json"));
  for (const auto& c : g["cases"]) {
    std::vector<int32_t> ids = c["input_ids"];
    std::vector<int> pos = c["logits_positions"];
    auto got = r.run(ids, pos, 1 << 20);
    for (size_t i = 0; i < pos.size(); ++i) {
      std::vector<float> ref = c["logits"][i];
      ASSERT_EQ(got[i].size(), ref.size());
      double err = 0, norm = 0;
      for (size_t j = 0; j < ref.size(); ++j) {
        err = std::max(err, double(std::fabs(got[i][j] - ref[j])));
        norm = std::max(norm, double(std::fabs(ref[j])));
      }
      EXPECT_LT(err, 1e-4 * std::max(1.0, norm)) << GetParam() << "/" << c["name"] << " position " << pos[i];
    }
  }
}

TEST_P(FamilyGoldens, GreedyTokensMatchTransformersExactly) {
  Runner r(tiny(GetParam()));
  json g = load_json(tiny(GetParam() + ".goldens.json"));
  for (const auto& c : g["cases"]) {
    std::vector<int32_t> ids = c["greedy_prompt_ids"];
    std::vector<int32_t> want = c["greedy_tokens"];
    // Serial decode over the cache: prefill once, then one row per step.
    std::vector<int32_t> table;
    ASSERT_TRUE(r.pool->reserve(table, int(ids.size() + want.size())));
    std::vector<int32_t> got;
    std::vector<int32_t> seq = ids;
    int computed = 0;
    while (got.size() < want.size()) {
      BatchMeta m;
      m.block_size = 16;
      m.block_tables = {table};
      for (int p = computed; p < int(seq.size()); ++p) {
        m.tokens.push_back(seq[p]);
        m.positions.push_back(p);
        m.row_seq.push_back(0);
        m.slots.push_back(table[p / 16] * 16 + p % 16);
      }
      std::vector<float> logits;
      r.model->forward(m, r.pool->layers(), {m.rows() - 1}, logits);
      computed = int(seq.size());
      int next = argmax(logits);
      got.push_back(next);
      seq.push_back(next);
    }
    r.pool->release(table);
    EXPECT_EQ(got, want) << GetParam() << "/" << c["name"];
  }
}

// Row invariance on the reference backend: prefill chunk sizes change nothing, bit for bit.
TEST_P(FamilyGoldens, PrefillChunkingIsBitwiseInvariant) {
  Runner r(tiny(GetParam()));
  json g = load_json(tiny(GetParam() + ".goldens.json"));
  std::vector<int32_t> ids = g["cases"][0]["input_ids"];
  std::vector<int> all;
  for (int i = 0; i < int(ids.size()); ++i) all.push_back(i);
  auto whole = r.run(ids, all, 1 << 20);
  for (int chunk : {1, 3, 7}) {
    auto parts = r.run(ids, all, chunk);
    for (size_t i = 0; i < all.size(); ++i)
      ASSERT_EQ(0, std::memcmp(whole[i].data(), parts[i].data(), whole[i].size() * 4))
          << "chunk " << chunk << " row " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, FamilyGoldens, ::testing::Values("qwen3", "llama", "qwen3-yarn", "qwen3-moe"));

// MoE: a token's logits do not depend on which other tokens share the call (and so which experts run
// with how many rows), bit for bit.
TEST(Families, MoeRowsAreIndependentOfTheBatch) {
  Runner r(tiny("qwen3-moe"));
  EXPECT_TRUE(r.model->spec().is_sparse(0));
  EXPECT_FALSE(r.model->spec().is_sparse(1));
  std::vector<int32_t> a = {5, 17, 200, 33, 2, 91, 40, 41}, b = {300, 7, 7, 7, 150, 8};
  auto alone = r.run(a, {7}, 1 << 20);
  // The same sequence, decoded with another sequence in every forward.
  std::vector<int32_t> ta, tb;
  ASSERT_TRUE(r.pool->reserve(ta, 16));
  ASSERT_TRUE(r.pool->reserve(tb, 16));
  BatchMeta m;
  m.block_size = 16;
  m.block_tables = {tb, ta};
  for (int p = 0; p < int(b.size()); ++p) {
    m.tokens.push_back(b[p]), m.positions.push_back(p), m.row_seq.push_back(0),
        m.slots.push_back(tb[0] * 16 + p);
  }
  for (int p = 0; p < int(a.size()); ++p) {
    m.tokens.push_back(a[p]), m.positions.push_back(p), m.row_seq.push_back(1),
        m.slots.push_back(ta[0] * 16 + p);
  }
  std::vector<float> logits;
  r.model->forward(m, r.pool->layers(), {m.rows() - 1}, logits);
  ASSERT_EQ(logits.size(), alone[0].size());
  EXPECT_EQ(0, std::memcmp(logits.data(), alone[0].data(), logits.size() * 4));
  r.pool->release(ta);
  r.pool->release(tb);
}

// A checkpoint that ships an MTP head (mtp.*): the head loads, the main model ignores it.
TEST(Families, MtpTensorsDoNotChangeTheModel) {
  Runner with(tiny("qwen3-mtp")), without(tiny("qwen3"));
  EXPECT_TRUE(with.model->has_mtp());
  EXPECT_FALSE(without.model->has_mtp());
  std::vector<int32_t> ids = {5, 17, 200, 33, 2, 91};
  auto a = with.run(ids, {0, 5}, 4), b = without.run(ids, {0, 5}, 4);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4));
}

TEST(Families, UnsupportedModelTypeIsRefusedWithTheReason) {
  json c = {{"model_type", "mamba"}};
  try {
    parse_spec(c);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("model_type 'mamba' is not supported"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen3"), std::string::npos) << e.what();
  }
}

TEST(Families, MissingFieldNamesIt) {
  json c = {{"model_type", "llama"}, {"hidden_size", 64}};
  try {
    parse_spec(c);
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden_layers"), std::string::npos) << e.what();
  }
}

}  // namespace

// Prompt cache: hits, spill read-backs and snapshots after a restart give bitwise the same reply as no
// cache at all; corrupt or truncated cache files are detected, deleted and recomputed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/engine.h"
#include "text/tokenizer.h"

using namespace tf;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

std::string tiny(const std::string& name) { return std::string(TF_SOURCE_DIR) + "/tests/data/tiny/" + name; }

struct Out {
  std::vector<int32_t> tokens;
  std::string text;
  Usage usage;
};

Out run(Engine& e, const std::vector<int32_t>& prompt, float temperature = 0.8f, int max_tokens = 24) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = temperature;
  r.sampling.seed = 99;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  Out o;
  auto h = e.submit(r);
  StreamEvent ev;
  while (h->next(ev, 60s)) {
    if (ev.kind == StreamEvent::Kind::Tokens) {
      for (auto& t : ev.tokens) o.tokens.push_back(t.token);
      o.text += ev.text;
    } else {
      EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
      o.usage = ev.usage;
      break;
    }
  }
  return o;
}

std::unique_ptr<Engine> make(double cache_gib, double spill_gib = 0, std::string snapshot_dir = "", int parallel = 2) {
  EngineOptions o;
  o.model_path = tiny("qwen3");
  o.backend = "cpu";
  o.parallel = parallel;
  o.drafts = false;
  o.prompt_cache_gib = cache_gib;
  o.spill_gib = spill_gib;
  o.snapshot_dir = std::move(snapshot_dir);
  return create_engine(o);
}

std::vector<int32_t> text_tokens(Engine& e, int n, int salt) {
  std::string s;
  const char* words[] = {"Well, ", "Prince, ", "so ", "Genoa ", "and ", "Lucca ", "are ", "now ", "just ", "family "};
  for (int i = 0; s.size() < size_t(n) * 3; ++i) s += words[(i * 7 + salt) % 10];
  auto t = e.tokenizer().encode(s, false);
  t.resize(size_t(n));
  return t;
}

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("tf-test-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

TEST(PromptCache, MultiTurnReusesThePrefixAndMatchesNoCache) {
  auto cached = make(0.01), plain = make(0);
  auto p1 = text_tokens(*cached, 70, 1);
  Out a1 = run(*cached, p1), b1 = run(*plain, p1);
  EXPECT_EQ(a1.tokens, b1.tokens);
  EXPECT_EQ(a1.usage.cached_tokens, 0);
  // Turn 2 resends turn 1 and its reply, plus a new message; turn 3 likewise.
  auto p2 = p1;
  p2.insert(p2.end(), a1.tokens.begin(), a1.tokens.end());
  auto extra = text_tokens(*cached, 20, 5);
  p2.insert(p2.end(), extra.begin(), extra.end());
  Out a2 = run(*cached, p2), b2 = run(*plain, p2);
  EXPECT_EQ(a2.tokens, b2.tokens);
  EXPECT_EQ(a2.text, b2.text);
  EXPECT_GE(a2.usage.cached_tokens, 80);  // the whole blocks of turn 1 + reply
  EXPECT_EQ(b2.usage.cached_tokens, 0);
  auto p3 = p2;
  p3.insert(p3.end(), a2.tokens.begin(), a2.tokens.end());
  Out a3 = run(*cached, p3), b3 = run(*plain, p3);
  EXPECT_EQ(a3.tokens, b3.tokens);
  EXPECT_GT(a3.usage.cached_tokens, a2.usage.cached_tokens);
  // Same prompt again: everything but the last block is a hit.
  Out a4 = run(*cached, p3);
  EXPECT_EQ(a4.tokens, a3.tokens);
  EXPECT_EQ(cached->stats().kv_blocks_used, 0);
  EXPECT_GT(cached->stats().kv_blocks_cached, 0);
}

TEST(PromptCache, EvictionUnderATinyBudgetKeepsServing) {
  auto cached = make(4e-5), plain = make(0);  // ~2 blocks retained
  for (int round = 0; round < 2; ++round)
    for (int salt = 0; salt < 4; ++salt) {
      auto p = text_tokens(*cached, 40 + salt * 9, salt);
      Out a = run(*cached, p), b = run(*plain, p);
      EXPECT_EQ(a.tokens, b.tokens) << salt;
    }
  EXPECT_LE(cached->stats().kv_blocks_cached, 3);
}

TEST(PromptCache, SpilledPrefixIsReadBackAndMatches) {
  auto cached = make(4e-5, 0.01), plain = make(0);
  auto first = text_tokens(*cached, 50, 3);
  Out a = run(*cached, first);
  for (int salt = 4; salt < 8; ++salt) run(*cached, text_tokens(*cached, 50, salt));  // evicts (and spills) `first`
  Out again = run(*cached, first), b = run(*plain, first);
  EXPECT_EQ(again.tokens, b.tokens);
  EXPECT_EQ(again.tokens, a.tokens);
  EXPECT_EQ(again.usage.cached_tokens, 48);
  EXPECT_GT(cached->stats().prompt_cache_disk_hits, 0);
}

TEST(PromptCache, SnapshotSurvivesRestartAndCorruptFilesAreRecomputed) {
  const fs::path dir = temp_dir("snap");
  std::vector<int32_t> prompt;
  Out first;
  {
    auto e = make(0.01, 0, dir.string());
    prompt = text_tokens(*e, 60, 2);
    first = run(*e, prompt);
    e->shutdown();
  }
  std::vector<fs::path> files;
  for (auto& f : fs::directory_iterator(dir)) files.push_back(f.path());
  ASSERT_GE(files.size(), 3u);
  {
    auto e = make(0.01, 0, dir.string());
    Out again = run(*e, prompt);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.usage.cached_tokens, 48);
    EXPECT_GT(e->stats().prompt_cache_disk_hits, 0);
    e->shutdown();
  }
  // Corrupt one byte of every file and truncate one: all are rejected, deleted, and the reply is the same.
  std::sort(files.begin(), files.end());
  for (auto& f : fs::directory_iterator(dir)) {
    std::fstream s(f.path(), std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(100);
    s.put(char(0x5a));
  }
  fs::resize_file(*fs::directory_iterator(dir), 64);
  {
    auto e = make(0.01, 0, dir.string());
    Out again = run(*e, prompt);
    EXPECT_EQ(again.tokens, first.tokens);
    EXPECT_EQ(again.usage.cached_tokens, 0);
    e->shutdown();
  }
  fs::remove_all(dir);
}

TEST(PromptCache, SnapshotsOfAnotherModelAreIgnored) {
  const fs::path dir = temp_dir("foreign");
  {
    EngineOptions o;
    o.model_path = tiny("qwen3-yarn");  // same tokenizer, other weights
    o.backend = "cpu";
    o.drafts = false;
    o.prompt_cache_gib = 0.01;
    o.snapshot_dir = dir.string();
    auto e = create_engine(o);
    run(*e, text_tokens(*e, 60, 2));
    e->shutdown();
  }
  auto e = make(0.01, 0, dir.string());
  Out o = run(*e, text_tokens(*e, 60, 2));
  EXPECT_EQ(o.usage.cached_tokens, 0);
  e->shutdown();
  fs::remove_all(dir);
}

}  // namespace

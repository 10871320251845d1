// The engine end to end on the tiny checkpoints: greedy equals transformers, and exactness properties:
// a stream's tokens do not depend on other streams, on prefill chunking, or on when it was admitted.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "cpu_forwarding_backend.h"
#include "engine/draft_policy.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

using namespace tf;
using namespace std::chrono_literals;

namespace {

std::string tiny(const std::string& name) {
  return std::string(TF_SOURCE_DIR) + "/tests/data/tiny/" + name;
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason finish = FinishReason::None;
  Usage usage;
};

Result collect(RequestHandle& h) {
  Result r;
  StreamEvent ev;
  while (h.next(ev, 60s)) {
    if (ev.kind == StreamEvent::Kind::Tokens) {
      for (auto& t : ev.tokens) r.tokens.push_back(t.token);
      r.text += ev.text;
    } else {
      EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
      r.finish = ev.finish;
      r.usage = ev.usage;
      return r;
    }
  }
  ADD_FAILURE() << "stream timed out";
  return r;
}

std::unique_ptr<Engine> engine(const std::string& model, int parallel = 4, int chunk = 512) {
  EngineOptions o;
  o.model_path = tiny(model);
  o.backend = "cpu";
  o.parallel = parallel;
  o.prefill_chunk = chunk;
  return create_engine(o);
}

GenerationRequest request(const std::vector<int32_t>& prompt, float temperature, int max_tokens,
                          std::optional<uint64_t> seed = std::nullopt) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// A prompt of one sentence repeated until it has at least `min_tokens` tokens.
std::vector<int32_t> repeated_prompt(const Tokenizer& tok, size_t min_tokens) {
  std::vector<int32_t> prompt;
  const std::vector<int32_t> piece = tok.encode(" Anna Pavlovna said that the family estates were", false);
  while (prompt.size() < min_tokens) prompt.insert(prompt.end(), piece.begin(), piece.end());
  return prompt;
}

TEST(Engine, GreedyMatchesTransformers) {
  for (std::string m : {"qwen3", "llama"}) {
    auto e = engine(m);
    std::ifstream f(tiny(m + ".goldens.json"));
    auto g = nlohmann::json::parse(f);
    for (const auto& c : g["cases"]) {
      std::vector<int32_t> want = c["greedy_tokens"];
      auto h = e->submit(request(c["greedy_prompt_ids"], 0.f, int(want.size())));
      Result r = collect(*h);
      EXPECT_EQ(r.tokens, want) << m << "/" << c["name"];
      EXPECT_EQ(r.finish, FinishReason::Length);
      EXPECT_EQ(r.usage.completion_tokens, int(want.size()));
      EXPECT_EQ(r.text, e->tokenizer().decode(want, true));
    }
  }
}

// Many streams with different prompts, temperatures, seeds and lengths, sharing rounds and admitted at
// different times, each equal bit for bit to its solo run; prefill chunking changes nothing either.
TEST(Engine, SharedRoundsAndChunkingAreBitwiseInvariant) {
  auto solo = engine("qwen3", 1);
  auto shared = engine("qwen3", 4, 5);  // 8 streams, 4 at a time, 5-token prefill chunks
  const auto& tok = solo->tokenizer();
  std::vector<GenerationRequest> reqs;
  const char* texts[] = {"Well, Prince",       "so Genoa and Lucca",  "def main(argv):", "The",
                         "Anna Pavlovna said", "for i in range(10):", "He spoke",        "family estates"};
  for (int i = 0; i < 8; ++i) {
    auto r = request(tok.encode(texts[i], false), i % 3 == 0 ? 0.f : 0.7f + 0.25f * float(i % 3), 6 + 5 * i);
    if (i % 2) r.sampling.seed = 1000 + i;
    r.sampling.top_p = i % 4 == 1 ? 0.9f : 1.f;
    reqs.push_back(r);
  }
  std::vector<Result> alone;
  for (auto& r : reqs) alone.push_back(collect(*solo->submit(r)));
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (size_t i = 0; i < reqs.size(); ++i) {
    hs.push_back(shared->submit(reqs[i]));
    if (i == 3) std::this_thread::sleep_for(20ms);  // staggered arrival
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result r = collect(*hs[i]);
    EXPECT_EQ(r.tokens, alone[i].tokens) << "stream " << i;
    EXPECT_EQ(r.text, alone[i].text) << "stream " << i;
  }
  EXPECT_EQ(shared->stats().kv_blocks_used, 0);
}

// --decode-share: while a reply decodes, a long prompt is prefilled in pieces (at most --prefill-chunk rows,
// fewer when the measured round cost says so: tests/engine/test_round_cost.cpp), each round also carrying
// the decoding stream, and no stream's tokens change.
TEST(Engine, DecodeShareSplitsPrefillWithoutChangingTokens) {
  auto make = [](double share) {
    EngineOptions o;
    o.model_path = tiny("qwen3");
    o.backend = "cpu";
    o.parallel = 2;
    o.prefill_chunk = 64;
    o.decode_share = share;
    o.drafts = false;
    return create_engine(o);
  };
  auto solo = engine("qwen3", 1);
  const auto& tok = solo->tokenizer();
  const GenerationRequest running = request(tok.encode("Well, Prince, so Genoa and Lucca", false), 0.f, 300);
  const GenerationRequest joining = request(repeated_prompt(tok, 200), 0.8f, 8, 5);
  const Result want_running = collect(*solo->submit(running)), want_joining = collect(*solo->submit(joining));
  for (double share : {0.0, 0.5, 0.95}) {
    auto e = make(share);
    auto h1 = e->submit(running);
    std::vector<int32_t> tokens1, tokens2;
    StreamEvent ev;
    ASSERT_TRUE(h1->next(ev, 60s));  // the first stream is decoding when the long prompt arrives
    for (auto& t : ev.tokens) tokens1.push_back(t.token);
    auto h2 = e->submit(joining);
    // One Tokens event per round for the decoding stream (no drafts), pushed before the joining stream's
    // event of the same round. Polling the joining stream first, then one event of the first stream,
    // counts at least the rounds the joining stream's prompt took (more if this thread was slow to
    // submit it: so only a lower bound is checked).
    bool done1 = false, done2 = false;
    int rounds1 = 0, rounds_before_first = -1;
    while (!done1 || !done2) {
      if (!done2 && (h2->next(ev, done1 ? 60s : 0ms))) {
        if (ev.kind != StreamEvent::Kind::Tokens) {
          done2 = true;
        } else {
          if (tokens2.empty() && !ev.tokens.empty()) rounds_before_first = rounds1;
          for (auto& t : ev.tokens) tokens2.push_back(t.token);
        }
      } else if (!done1 && h1->next(ev, 1ms)) {
        if (ev.kind != StreamEvent::Kind::Tokens)
          done1 = true;
        else
          ++rounds1;
        for (auto& t : ev.tokens) tokens1.push_back(t.token);
      }
    }
    EXPECT_EQ(tokens1, want_running.tokens) << "decode_share " << share;
    EXPECT_EQ(tokens2, want_joining.tokens) << "decode_share " << share;
    // At most 64 prompt rows a round: the ~200-token prompt is split over 4 or more rounds.
    EXPECT_GE(rounds_before_first, 3) << "decode_share " << share;
  }
}

TEST(Engine, SeededSamplingIsReproducible) {
  auto e = engine("llama", 2);
  auto p = e->tokenizer().encode("Well, Prince", false);
  Result a = collect(*e->submit(request(p, 1.0f, 24, 7)));
  Result b = collect(*e->submit(request(p, 1.0f, 24, 7)));
  Result c = collect(*e->submit(request(p, 1.0f, 24, 8)));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_NE(a.tokens, c.tokens);
  // Without a seed, the seed derives from the prompt: still reproducible.
  Result d = collect(*e->submit(request(p, 1.0f, 24)));
  Result f = collect(*e->submit(request(p, 1.0f, 24)));
  EXPECT_EQ(d.tokens, f.tokens);
}

TEST(Engine, StopStringSplitAcrossTokensEndsTheReply) {
  auto e = engine("qwen3");
  auto p = e->tokenizer().encode("Well, Prince, so Genoa", false);
  Result full = collect(*e->submit(request(p, 0.f, 40)));
  ASSERT_GT(full.tokens.size(), 10u);
  // A stop string that straddles the boundary between tokens 4 and 5 of the reply.
  std::string before = e->tokenizer().decode({full.tokens.begin(), full.tokens.begin() + 4}, true);
  std::string upto6 = e->tokenizer().decode({full.tokens.begin(), full.tokens.begin() + 6}, true);
  ASSERT_GT(upto6.size(), before.size() + 1);
  std::string stop = upto6.substr(before.size() - 1, 3);
  size_t first = full.text.find(stop);
  ASSERT_NE(first, std::string::npos);
  auto r = request(p, 0.f, 40);
  r.stop = {stop};
  Result s = collect(*e->submit(r));
  EXPECT_EQ(s.finish, FinishReason::Stop);
  EXPECT_EQ(s.text, full.text.substr(0, first));
  EXPECT_LT(s.tokens.size(), full.tokens.size());
}

TEST(Engine, StopTokenIdsAndEos) {
  auto e = engine("qwen3");
  auto p = e->tokenizer().encode("Well, Prince", false);
  Result full = collect(*e->submit(request(p, 0.f, 20)));
  auto r = request(p, 0.f, 20);
  r.stop_token_ids = {full.tokens[3]};
  Result s = collect(*e->submit(r));
  EXPECT_EQ(s.finish, FinishReason::Stop);
  EXPECT_EQ(s.tokens.size(), size_t(std::find(full.tokens.begin(), full.tokens.end(), full.tokens[3]) -
                                    full.tokens.begin() + 1));
}

TEST(Engine, CancelFreesTheStreamsBlocks) {
  auto e = engine("qwen3", 2);
  auto h = e->submit(request(e->tokenizer().encode("Well", false), 0.8f, 400));
  StreamEvent ev;
  ASSERT_TRUE(h->next(ev, 30s));
  h->cancel();
  FinishReason last = FinishReason::None;
  while (h->next(ev, 30s))
    if (ev.kind == StreamEvent::Kind::Finished) {
      last = ev.finish;
      break;
    }
  EXPECT_EQ(last, FinishReason::Cancelled);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
  EXPECT_EQ(e->stats().requests_cancelled, 1);
}

TEST(Engine, OverlongRequestIsRefusedWithNumbers) {
  auto e = engine("qwen3");  // context 512
  auto r = request(std::vector<int32_t>(500, 5), 0.f, 100);
  try {
    e->submit(r);
    FAIL();
  } catch (const InvalidRequest& ex) {
    EXPECT_EQ(ex.code(), "context_length_exceeded");
    EXPECT_NE(std::string(ex.what()).find("512"), std::string::npos) << ex.what();
    EXPECT_NE(std::string(ex.what()).find("600"), std::string::npos) << ex.what();
  }
  EXPECT_THROW(e->submit(request({}, 0.f, 5)), InvalidRequest);
  EXPECT_THROW(e->submit(request({100000}, 0.f, 5)), InvalidRequest);
}

}  // namespace

namespace {

// A KV pool too small for every stream's growth: streams wait or are preempted and recomputed, and each
// still equals its solo run; nothing is lost.
TEST(Engine, PreemptionUnderMemoryPressureKeepsStreamsExact) {
  EngineOptions o;
  o.model_path = tiny("qwen3");
  o.backend = "cpu";
  o.parallel = 4;
  o.context = 160;
  o.growth_reserve = 16;
  o.prompt_cache_gib = 0;
  o.drafts = false;
  // 10 blocks of 16 tokens = one full context: four growing streams cannot all fit.
  o.kv_budget_bytes = 10 * 16 * 2 * 2 * 2 * 32 * 4;
  auto tight = create_engine(o);
  auto solo = engine("qwen3", 1);
  const auto& tok = solo->tokenizer();
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i)
    reqs.push_back(
        request(tok.encode(i % 2 ? "Well, Prince" : "def main(argv):", false), 0.9f, 50 + 10 * i, 40 + i));
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (auto& r : reqs) hs.push_back(tight->submit(r));
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result r = collect(*hs[i]);
    Result want = collect(*solo->submit(reqs[i]));
    EXPECT_EQ(r.tokens, want.tokens) << i;
    EXPECT_EQ(r.finish, FinishReason::Length);
  }
  EXPECT_GT(tight->stats().preemptions, 0);
  EXPECT_EQ(tight->stats().kv_blocks_used, 0);
}

// The CPU backend refusing forwards of more than `max_rows` rows as a GPU out of memory would.
class RowLimitedBackend final : public CpuForwardingBackend {
 public:
  RowLimitedBackend(int max_rows, std::shared_ptr<std::atomic<int>> refused)
      : max_rows_(max_rows), refused_(std::move(refused)) {}
  std::string name() const override { return "cpu, at most " + std::to_string(max_rows_) + " rows"; }
  void begin_forward(const BatchMeta& meta) override {
    if (meta.rows() > max_rows_) {
      ++*refused_;
      throw DeviceOutOfMemory("CUDA error: out of memory (test: a forward of " + std::to_string(meta.rows()) +
                              " rows)");
    }
    CpuForwardingBackend::begin_forward(meta);
  }

 private:
  int max_rows_;
  std::shared_ptr<std::atomic<int>> refused_;
};

std::unique_ptr<Engine> row_limited_engine(int max_rows, std::shared_ptr<std::atomic<int>> refused) {
  EngineOptions o;
  o.model_path = tiny("qwen3");
  o.parallel = 2;
  o.prefill_chunk = 128;
  o.drafts = false;
  o.backend_factory = [=] { return std::make_unique<RowLimitedBackend>(max_rows, refused); };
  return create_engine(o);
}

// A round whose forward runs out of device memory runs again with half its prompt rows (101 -> 51 -> 26
// rows here), and no stream changes: a decoding stream and a long prompt joining it give a plain engine's
// tokens.
TEST(Engine, OutOfMemoryRoundRunsAgainWithFewerPromptRows) {
  auto refused = std::make_shared<std::atomic<int>>(0);
  auto e = row_limited_engine(40, refused);
  auto plain = engine("qwen3", 1);
  const auto& tok = plain->tokenizer();
  const GenerationRequest running = request(tok.encode("Well, Prince, so Genoa and Lucca", false), 0.f, 40);
  std::vector<int32_t> long_prompt = repeated_prompt(tok, 100);
  long_prompt.resize(100);
  const GenerationRequest joining = request(long_prompt, 0.8f, 6, 5);
  const Result want1 = collect(*plain->submit(running)), want2 = collect(*plain->submit(joining));
  auto h1 = e->submit(running);
  StreamEvent ev;
  ASSERT_TRUE(h1->next(ev, 60s));  // the first stream decodes when the long prompt arrives
  ASSERT_EQ(ev.kind, StreamEvent::Kind::Tokens);
  std::vector<int32_t> tokens1;
  for (auto& t : ev.tokens) tokens1.push_back(t.token);
  const Result r2 = collect(*e->submit(joining));
  const Result rest = collect(*h1);
  tokens1.insert(tokens1.end(), rest.tokens.begin(), rest.tokens.end());
  EXPECT_EQ(tokens1, want1.tokens);
  EXPECT_EQ(r2.tokens, want2.tokens);
  EXPECT_GE(refused->load(), 1);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

// A round that cannot shrink below 16 prompt rows fails its streams with the error: the 20-token prompt is
// tried at 20 rows, then at 16, then given up.
TEST(Engine, OutOfMemoryAtTheSmallestRoundFailsTheStream) {
  auto refused = std::make_shared<std::atomic<int>>(0);
  auto e = row_limited_engine(4, refused);
  auto h = e->submit(request(e->tokenizer().encode("Well, Prince, so Genoa and Lucca", false), 0.f, 5));
  StreamEvent ev;
  ASSERT_TRUE(h->next(ev, 60s));
  EXPECT_EQ(ev.kind, StreamEvent::Kind::Error);
  EXPECT_NE(ev.error.find("out of memory"), std::string::npos) << ev.error;
  EXPECT_EQ(refused->load(), 2);
  EXPECT_EQ(e->stats().kv_blocks_used, 0);
}

// n requests submitted back to back to an engine of `parallel` slots and `max_queue` waiting places, then
// cancelled: how many were refused as Overloaded.
int refused_of_a_burst(int parallel, int max_queue, int n) {
  EngineOptions o;
  o.model_path = tiny("qwen3");
  o.backend = "cpu";
  o.parallel = parallel;
  o.max_queue = max_queue;
  auto e = create_engine(o);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  int refused = 0;
  for (int i = 0; i < n; ++i) {
    try {
      hs.push_back(e->submit(request({5, 6, 7}, 0.5f, 300)));
    } catch (const Overloaded&) {
      ++refused;
    }
  }
  for (auto& h : hs) h->cancel();
  return refused;
}

TEST(Engine, FullQueueIsRefusedAsOverloaded) {
  EXPECT_GE(refused_of_a_burst(1, 2, 6), 3);
}

TEST(Engine, ABurstFillsTheFreeSlotsBeforeTheQueue) {
  // Submitted back to back, before the worker admits any: the first `parallel` requests take the free
  // stream slots (not queue places), max_queue more wait, the rest are refused -- whatever the timing.
  EXPECT_EQ(refused_of_a_burst(2, 1, 5), 2);
  EXPECT_EQ(refused_of_a_burst(1, 1, 5), 3);
}

}  // namespace

// The replay drafter (the ceiling of drafting): replayed output equals the serial output and every draft is
// accepted. The benchmark modes built on it run in test_bench_modes.cpp (the demo model: main build only).
#include <gtest/gtest.h>

#include "engine/drafters/replay.h"
#include "engine/engine.h"

using namespace tf;
using namespace std::chrono_literals;

namespace {

struct Out {
  std::vector<int32_t> tokens;
  Usage usage;
};

std::vector<Out> run_all(Engine& e, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (const auto& r : reqs) hs.push_back(e.submit(r));
  std::vector<Out> outs(hs.size());
  for (size_t i = 0; i < hs.size(); ++i) {
    StreamEvent ev;
    while (hs[i]->next(ev, 60s)) {
      if (ev.kind == StreamEvent::Kind::Tokens) {
        for (auto& t : ev.tokens) outs[i].tokens.push_back(t.token);
      } else {
        EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
        outs[i].usage = ev.usage;
        break;
      }
    }
  }
  return outs;
}

TEST(ReplayDrafter, LookupFollowsTheRecordingOnly) {
  auto rec = std::make_shared<ReplayDrafter::Recording>();
  (*rec)[{7, {1, 2, 3}}] = {10, 11, 12, 13};
  ReplayDrafter d(rec);
  EXPECT_EQ(d.lookup(7, {1, 2, 3}, {1, 2, 3}, 2), (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(d.lookup(7, {1, 2, 3}, {1, 2, 3, 10, 11}, 8), (std::vector<int32_t>{12, 13}));
  EXPECT_TRUE(d.lookup(7, {1, 2, 3}, {1, 2, 3, 10, 11, 12, 13}, 8).empty());  // the recording is used up
  EXPECT_TRUE(d.lookup(7, {1, 2, 3}, {1, 2, 3, 10, 99}, 8).empty());          // the stream left it
  EXPECT_TRUE(d.lookup(8, {1, 2, 3}, {1, 2, 3}, 8).empty());                  // another seed
  d.set_max_k(1);
  EXPECT_EQ(d.lookup(7, {1, 2, 3}, {1, 2, 3}, 8), (std::vector<int32_t>{10}));
}

// Streams sharing a prompt at a temperature (own seeds) and one greedy stream: replayed output equals the
// serial output, every draft is accepted, and it takes far fewer forwards.
TEST(ReplayDrafter, EveryDraftIsAcceptedAndOutputIsUnchanged) {
  auto rec = std::make_shared<ReplayDrafter::Recording>();
  EngineOptions o;
  o.model_path = std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3";
  o.backend = "cpu";
  o.parallel = 3;
  o.prompt_cache_gib = 0;
  o.ngram_drafts = false;
  o.adaptive_draft = false;
  o.max_draft = 4;
  o.drafter_factory = [rec] { return std::make_unique<ReplayDrafter>(rec); };
  auto e = create_engine(o);
  std::vector<GenerationRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[size_t(i)].prompt = {5, 17, 29, 41, 53, 65, 77};
    reqs[size_t(i)].sampling.temperature = i == 2 ? 0.f : 1.1f;
    reqs[size_t(i)].sampling.seed = 40 + uint64_t(i);
    reqs[size_t(i)].max_tokens = 41;
    reqs[size_t(i)].ignore_eos = true;
    reqs[size_t(i)].draft = false;
  }
  const auto serial = run_all(*e, reqs);
  EXPECT_NE(serial[0].tokens, serial[1].tokens);  // the seeds matter, so the recording must key on them
  for (int i = 0; i < 3; ++i) (*rec)[{40 + uint64_t(i), reqs[size_t(i)].prompt}] = serial[size_t(i)].tokens;
  for (auto& r : reqs) r.draft = true;
  const int64_t f0 = e->stats().forward_passes;
  const auto replayed = run_all(*e, reqs);
  const int64_t forwards = e->stats().forward_passes - f0;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(replayed[i].tokens, serial[i].tokens) << i;
    EXPECT_EQ(replayed[i].usage.accepted_tokens, replayed[i].usage.drafted_tokens) << i;
    // 41 tokens: 1 from the prefill, then 8 verify steps of 4 drafts + 1.
    EXPECT_EQ(replayed[i].usage.drafted_tokens, 32) << i;
  }
  // 10 when the three streams share every round. A stream the engine thread starts a few rounds after
  // the others (the submitting thread descheduled on a loaded CI machine: 17 seen) runs its 10 rounds
  // later, so at most 3 x 10; serially one stream alone takes 41.
  EXPECT_LE(forwards, 30);
  e->shutdown();
}

}  // namespace

// Exact drafting: with any drafter, any temperature and any seed, the drafted stream equals the
// `draft: false` stream token for token (logprobs too), and stop strings / max_tokens land on the same
// token. Drafts are forced (adaptive length off) so that verification really runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/draft_policy.h"
#include "engine/drafters/draft_token.h"
#include "engine/drafters/ngram.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "stream_output.h"
#include "text/tokenizer.h"

using namespace tf;
using namespace std::chrono_literals;

namespace {

std::string tiny(const std::string& name) {
  return std::string(TF_SOURCE_DIR) + "/tests/data/tiny/" + name;
}

using Out = StreamOutput;

Out run(Engine& e, GenerationRequest r) {
  auto h = e.submit(std::move(r));
  return collect(*h);
}

std::unique_ptr<Engine> make(const std::string& model, const std::string& drafter, bool ngram, int k = 4) {
  EngineOptions o;
  o.model_path = tiny(model);
  o.backend = "cpu";
  o.parallel = 3;
  o.drafter = drafter;
  o.ngram_drafts = ngram;
  o.max_draft = k;
  o.adaptive_draft = false;
  return create_engine(o);
}

// An extra verify row slows every stream of the round: its cost is counted against one stream's share.
TEST(CostModel, RowCostGrowsWithTheStreamsSharingTheRound) {
  CostModel m(0.5);
  for (int i = 0; i < 40; ++i) m.observe(1 + i % 9, 1.0 + 0.1 * (1 + i % 9));  // 1 s + 0.1 s a row
  EXPECT_NEAR(m.row_cost(), 0.1 / 1.1, 1e-6);
  EXPECT_NEAR(m.row_cost_in_round(1), m.row_cost(), 1e-6);
  EXPECT_NEAR(m.row_cost_in_round(8), 0.8 / 1.8, 1e-6);
  EXPECT_LE(m.row_cost_in_round(100), 1.0);
  // With few rows sharing a round drafting pays at an acceptance where a full round makes it lose.
  DraftStats s;
  s.acceptance = 0.6;
  EXPECT_GT(choose_draft_length(s, m.row_cost_in_round(1), 8), 0);
  DraftStats t;
  t.acceptance = 0.6;
  EXPECT_EQ(choose_draft_length(t, m.row_cost_in_round(32), 8), 0);
  // A model drafter's forward, 0.05 s a proposed token: one stream's share of an 8-row round pays it 8
  // times over (every stream waits for it).
  m.observe_draft(10, 0.5);
  const double one = m.draft_cost_in_round(1), eight = m.draft_cost_in_round(8);
  EXPECT_NEAR(one, m.draft_cost(), 1e-9);
  EXPECT_NEAR(eight, 0.05 * 8 / 1.8, 1e-6);
  EXPECT_GT(eight, one);
}

TEST(NgramDrafter, ProposesWhatFollowedTheMostRecentLongestMatch) {
  NgramDrafter d({2, 4});
  int match = 0;
  // ... 1 2 3 [7 8] ... 1 2 3 [9] ... 2 3 -> the most recent "1 2 3"? suffix is "2 3": longest n first.
  std::vector<int32_t> t = {5, 1, 2, 3, 7, 8, 6, 1, 2, 3, 9, 4, 1, 2, 3};
  auto p = d.lookup(t, 3, &match);
  EXPECT_EQ(match, 3);  // "1 2 3" (n=4 "4 1 2 3" has no earlier occurrence)
  EXPECT_EQ(p, (std::vector<int32_t>{9, 4, 1}));
  EXPECT_TRUE(d.lookup({1, 2, 3, 4}, 3).empty());
  EXPECT_EQ(d.lookup({1, 2, 1, 2}, 5), (std::vector<int32_t>{1, 2}));
}

class ExactDrafting : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(ExactDrafting, DraftedEqualsSerial) {
  const auto& [drafter, ngram] = GetParam();
  auto e = make("llama", drafter, ngram);
  const auto& tok = e->tokenizer();
  const char* prompts[] = {
      "Well, Prince, so Genoa and Lucca are now just family estates. Well, Prince, so Genoa",
      "def main(argv):\n    for i in range(10):\n        print(i)\n    for i in range(10):\n",
      "the the the the the the the", "Anna Pavlovna"};
  int64_t drafted = 0, accepted = 0;
  for (const char* text : prompts) {
    for (float temperature : {0.f, 0.7f, 1.2f}) {
      GenerationRequest r = text_request(tok, text, temperature, 1234, 40);
      r.logprobs = 0;
      GenerationRequest serial = r;
      serial.draft = false;
      Out a = run(*e, serial), b = run(*e, r);
      EXPECT_EQ(a.tokens, b.tokens) << text << " T=" << temperature;
      ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
      EXPECT_EQ(0, std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * 4));
      EXPECT_EQ(a.text, b.text);
      EXPECT_EQ(a.usage.drafted_tokens, 0);
      drafted += b.usage.drafted_tokens;
      accepted += b.usage.accepted_tokens;
    }
  }
  EXPECT_GT(drafted, 0) << "no drafts were verified: the test proves nothing";
  if (ngram) {
    EXPECT_GT(accepted, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, ExactDrafting,
                         ::testing::Values(std::make_tuple(std::string("none"), true),
                                           std::make_tuple(tiny("qwen3"), false),
                                           std::make_tuple(tiny("qwen3"), true)));

TEST(ExactDrafting, MtpHeadDraftsAreVerifiedExactly) {
  auto e = make("qwen3-mtp", "mtp", false, 3);
  EXPECT_EQ(e->info().drafter, "mtp");
  const auto& tok = e->tokenizer();
  int64_t drafted = 0;
  for (const char* text : {"Well, Prince, so Genoa", "def main(argv):", "the the the"}) {
    for (float temperature : {0.f, 0.9f}) {
      GenerationRequest r = text_request(tok, text, temperature, 5, 30);
      GenerationRequest serial = r;
      serial.draft = false;
      Out a = run(*e, serial), b = run(*e, r);
      EXPECT_EQ(a.tokens, b.tokens) << text << " T=" << temperature;
      drafted += b.usage.drafted_tokens;
    }
  }
  EXPECT_GT(drafted, 0);
}

// The draft guard switching the MTP head off and on every few rounds (gaps in the hidden states it
// reads, catch-ups after them) changes speed only: concurrent drafted streams equal their serial runs.
TEST(ExactDrafting, GuardSwitchingTheMtpHeadStaysExact) {
  EngineOptions o;
  o.model_path = tiny("qwen3-mtp");
  o.backend = "cpu";
  o.parallel = 3;
  o.drafter = "mtp";
  o.ngram_drafts = false;
  o.mtp_drafts = 3;
  o.adaptive_draft = true;
  o.draft_guard_options.min_rounds = 1;
  o.draft_guard_options.probe_rounds = 2;
  o.draft_guard_options.backoff = o.draft_guard_options.max_backoff = 3;
  o.draft_guard_options.probe_every = o.draft_guard_options.max_probe_every = 3;
  // On after every drafted probe that drafts, off after a drafted round, whatever the wall clock says: the
  // guard compares drafted against serial rates times (par -/+ margin), and these rounds take ~0.1 ms, so
  // with margin -1 one slow round on a busy machine could keep the guard from ever switching (a CI run in
  // session 37 failed so, while CUDA code compiled on the same two cores; not reproduced since).
  o.draft_guard_options.margin = -100;
  auto e = create_engine(o);
  const auto& tok = e->tokenizer();
  for (float temperature : {0.f, 0.9f}) {
    std::vector<GenerationRequest> reqs;
    for (const char* text : {"Well, Prince, so Genoa", "def main(argv):", "the the the"}) {
      reqs.push_back(text_request(tok, text, temperature, 11, 48));
    }
    std::vector<Out> serial;
    for (auto r : reqs) {
      r.draft = false;
      serial.push_back(run(*e, r));
    }
    // Drafted: the three at once, so that rounds hold several streams.
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const auto& r : reqs) hs.push_back(e->submit(r));
    for (size_t i = 0; i < hs.size(); ++i) {
      std::vector<int32_t> tokens;
      StreamEvent ev;
      while (hs[i]->next(ev, 60s) && ev.kind == StreamEvent::Kind::Tokens)
        for (auto& t : ev.tokens) tokens.push_back(t.token);
      EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
      EXPECT_EQ(tokens, serial[i].tokens) << i << " T=" << temperature;
    }
  }
  EXPECT_GT(e->stats().drafted_tokens, 0) << "the head never drafted: the test proves nothing";
  EXPECT_GT(e->stats().draft_guard_switches, 0) << "the guard never switched: the test proves little";
}

// Drafters' cheap draft sampling is the target's keyed sampling (but with odds below V * e^-16).
TEST(DraftToken, AgreesWithTheTargetsKeyedSampling) {
  const int V = 8192;
  uint64_t state = 12345;
  auto normal = [&] {  // Box-Muller on a deterministic xorshift
    auto u = [&] {
      state ^= state << 13, state ^= state >> 7, state ^= state << 17;
      return (double(state >> 11) + 0.5) / double(1ull << 53);
    };
    return std::sqrt(-2 * std::log(u())) * std::cos(6.283185307179586 * u());
  };
  std::vector<float> row(V);
  PenaltyState none;
  for (float scale : {1.f, 3.f, 8.f}) {  // flat to peaked rows
    for (int r = 0; r < 40; ++r) {
      for (auto& x : row) x = float(scale * normal());
      SamplingParams p;
      p.temperature = 0;
      EXPECT_EQ(draft_token(row.data(), V, p, 7, r), sample_token(row.data(), V, p, 7, r, none).token);
      p.temperature = 0.7f;
      EXPECT_EQ(draft_token(row.data(), V, p, 7, r), sample_token(row.data(), V, p, 7, r, none).token);
      p.top_p = 0.9f;
      EXPECT_EQ(draft_token(row.data(), V, p, 7, r), sample_token(row.data(), V, p, 7, r, none).token);
    }
  }
}

// A request on a prompt of one repeated word (context copies propose from it), run to max_tokens.
GenerationRequest repeated_word(const Tokenizer& tok, float temperature, int max_tokens) {
  GenerationRequest r;
  r.prompt = tok.encode("the the the the the the the the", false);
  r.sampling.temperature = temperature;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// The repeated-word request at `temperature` with `seed`, drafted and serial (draft: false), and the serial
// stream's free reply.
struct FreeStreams {
  GenerationRequest drafted, serial;
  Out free;
};
FreeStreams free_streams(Engine& e, float temperature, uint64_t seed, int max_tokens) {
  FreeStreams f;
  f.drafted = repeated_word(e.tokenizer(), temperature, max_tokens);
  f.drafted.sampling.seed = seed;
  f.serial = f.drafted;
  f.serial.draft = false;
  f.free = run(e, f.serial);
  return f;
}

TEST(ExactDrafting, StopsAndLimitsLandOnTheSameToken) {
  auto e = make("qwen3", "none", true, 6);
  const auto& tok = e->tokenizer();
  GenerationRequest r = repeated_word(tok, 0, 30);
  GenerationRequest serial = r;
  serial.draft = false;
  Out full = run(*e, serial);
  ASSERT_GE(full.text.size(), 12u);
  for (int limit : {1, 2, 5, 13}) {
    r.max_tokens = serial.max_tokens = limit;
    Out a = run(*e, serial), b = run(*e, r);
    EXPECT_EQ(a.tokens, b.tokens) << limit;
    EXPECT_EQ(int(b.tokens.size()), limit);
    EXPECT_EQ(b.finish, FinishReason::Length);
  }
  r.max_tokens = serial.max_tokens = 30;
  r.stop = serial.stop = {full.text.substr(7, 3)};
  Out a = run(*e, serial), b = run(*e, r);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(b.finish, FinishReason::Stop);
}

// min_tokens (vLLM's): below it the stop ids are banned -- the same token as a logit_bias of -100 on them,
// the other ids keeping their keyed draws -- and stop strings do not end the stream; drafted streams give
// the serial stream's tokens, greedy and sampled.
TEST(ExactDrafting, MinTokensBansStopsAndStaysExact) {
  auto e = make("qwen3", "none", true, 6);
  const auto& tok = e->tokenizer();
  int drafted = 0;
  for (float temperature : {0.f, 0.9f}) {
    auto [r, serial, full] = free_streams(*e, temperature, 11, 30);
    ASSERT_EQ(full.tokens.size(), 30u);
    const int32_t stop_id = full.tokens[1];
    // Without min_tokens the stop id ends the stream at once.
    r.stop_token_ids = serial.stop_token_ids = {stop_id};
    EXPECT_LE(run(*e, serial).tokens.size(), 2u);
    // With it: at least min_tokens tokens, none of them the stop id, drafted == serial.
    const int min_tokens = 8;
    r.min_tokens = serial.min_tokens = min_tokens;
    const Out a = run(*e, serial), b = run(*e, r);
    EXPECT_EQ(a.tokens, b.tokens) << temperature;
    EXPECT_EQ(a.text, b.text);
    drafted += b.usage.drafted_tokens;
    ASSERT_GT(a.tokens.size(), size_t(min_tokens));
    for (int i = 0; i < min_tokens; ++i) EXPECT_NE(a.tokens[size_t(i)], stop_id) << i;
    const auto at = std::find(a.tokens.begin() + min_tokens, a.tokens.end(), stop_id);
    EXPECT_EQ(a.finish, at == a.tokens.end() ? FinishReason::Length : FinishReason::Stop);
    if (at != a.tokens.end()) {
      EXPECT_EQ(at + 1, a.tokens.end());
    }
    // The banned rows sample what a -100 logit bias on the stop id samples.
    GenerationRequest biased = serial;
    biased.min_tokens = 0;
    biased.stop_token_ids.clear();
    biased.sampling.logit_bias = {{stop_id, -100.f}};
    biased.max_tokens = min_tokens;
    const Out ref = run(*e, biased);
    EXPECT_EQ(ref.tokens, std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + min_tokens));
  }
  // A stop string that the reply completes early counts only from the min_tokens-th token on.
  auto [r, serial, full] = free_streams(*e, 0.f, 0, 30);
  const std::string stop = tok.decode({full.tokens[0]}, true);
  ASSERT_FALSE(stop.empty());
  r.stop = serial.stop = {stop};
  EXPECT_LE(run(*e, serial).tokens.size(), 1u);
  r.min_tokens = serial.min_tokens = 5;
  const Out a = run(*e, serial), b = run(*e, r);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.text, b.text);
  drafted += b.usage.drafted_tokens;
  EXPECT_GT(drafted, 0) << "the drafts must really be verified";
  EXPECT_GE(a.tokens.size(), 5u);
  EXPECT_EQ(std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 5),
            std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 5));
}

// allowed_token_ids (vLLM's): every token from the list, the same tokens as a -100 logit bias on every other
// id, drafted == serial.
TEST(ExactDrafting, AllowedTokenIdsAreAMaskAndStayExact) {
  auto e = make("qwen3", "none", true, 6);
  const auto& tok = e->tokenizer();
  const int V = tok.vocab_size();
  int drafted = 0;
  for (float temperature : {0.f, 0.9f}) {
    auto [r, serial, full] = free_streams(*e, temperature, 5, 24);
    ASSERT_EQ(full.tokens.size(), 24u);
    // The reply's first token, two others of it and two ids it never wrote: the mask changes the reply.
    std::vector<int32_t> only = {full.tokens[0], full.tokens[5], full.tokens[11], 7, V - 1};
    r.allowed_token_ids = serial.allowed_token_ids = only;
    const Out a = run(*e, serial), b = run(*e, r);
    EXPECT_EQ(a.tokens, b.tokens) << temperature;
    EXPECT_NE(a.tokens, full.tokens) << "the mask should change the reply";
    drafted += b.usage.drafted_tokens;
    for (int32_t t : a.tokens) EXPECT_NE(std::find(only.begin(), only.end(), t), only.end()) << t;
    GenerationRequest biased = serial;
    biased.allowed_token_ids.clear();
    for (int32_t id = 0; id < V; ++id)
      if (std::find(only.begin(), only.end(), id) == only.end())
        biased.sampling.logit_bias.push_back({id, -100.f});
    EXPECT_EQ(run(*e, biased).tokens, a.tokens) << temperature;
  }
  EXPECT_GT(drafted, 0) << "the drafts must really be verified";
}

// bad_words (vLLM's, as token sequences): a one-token word never comes (the same tokens as a -100 logit bias
// on it), a two-token word's second token is masked right after its first; drafted == serial throughout.
TEST(ExactDrafting, BadWordsAreMaskedAndStayExact) {
  auto e = make("qwen3", "none", true, 6);
  int drafted = 0;
  for (float temperature : {0.f, 0.9f}) {
    auto [r, serial, full] = free_streams(*e, temperature, 9, 24);
    ASSERT_EQ(full.tokens.size(), 24u);
    // One token.
    const int32_t one = full.tokens[2];
    r.bad_words_ids = serial.bad_words_ids = {{one}};
    Out a = run(*e, serial), b = run(*e, r);
    EXPECT_EQ(a.tokens, b.tokens) << temperature;
    drafted += b.usage.drafted_tokens;
    EXPECT_EQ(std::count(a.tokens.begin(), a.tokens.end(), one), 0);
    GenerationRequest biased = serial;
    biased.bad_words_ids.clear();
    biased.sampling.logit_bias = {{one, -100.f}};
    EXPECT_EQ(run(*e, biased).tokens, a.tokens) << temperature;
    // Two tokens: the reply is the free one up to the pair's first place, where its second token is masked.
    const int32_t x = full.tokens[3], y = full.tokens[4];
    size_t at = 1;
    while (!(full.tokens[at - 1] == x && full.tokens[at] == y)) ++at;
    r.bad_words_ids = serial.bad_words_ids = {{x, y}};
    a = run(*e, serial), b = run(*e, r);
    EXPECT_EQ(a.tokens, b.tokens) << temperature;
    drafted += b.usage.drafted_tokens;
    ASSERT_EQ(a.tokens.size(), 24u);
    EXPECT_EQ(std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + long(at)),
              std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + long(at)));
    for (size_t i = 1; i < a.tokens.size(); ++i) EXPECT_FALSE(a.tokens[i - 1] == x && a.tokens[i] == y) << i;
  }
  EXPECT_GT(drafted, 0) << "the drafts must really be verified";
}

// Below min_tokens the model's EOS is banned even where a logit bias all but forces it; then it ends the
// stream (the token after the min_tokens-th).
TEST(ExactDrafting, MinTokensHoldsOffEos) {
  auto e = make("qwen3", "none", true, 6);
  const auto& tok = e->tokenizer();
  const auto eos = tok.eos_id();
  ASSERT_TRUE(eos.has_value());
  GenerationRequest r = repeated_word(tok, 0, 20);
  r.ignore_eos = false;
  r.sampling.logit_bias = {{*eos, 100.f}};
  GenerationRequest serial = r;
  serial.draft = false;
  EXPECT_EQ(run(*e, serial).tokens, std::vector<int32_t>{*eos});
  r.min_tokens = serial.min_tokens = 6;
  const Out a = run(*e, serial), b = run(*e, r);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.tokens.size(), 7u);
  for (int i = 0; i < 6; ++i) EXPECT_NE(a.tokens[size_t(i)], *eos);
  EXPECT_EQ(a.tokens.back(), *eos);
  EXPECT_EQ(a.finish, FinishReason::Stop);
  // ignore_eos: EOS is neither banned nor a stop.
  serial.ignore_eos = true;
  serial.max_tokens = 3;
  EXPECT_EQ(run(*e, serial).tokens, std::vector<int32_t>(3, *eos));
}

}  // namespace

// Draft padding (EngineOptions::pad_drafts): proposals padded to one bucketed length per round so that
// verify rounds recur as CUDA graph keys. Fillers are verified like any draft, so the output must equal
// the `draft: false` output token for token with every drafter and temperature; the verify rounds' rows
// per stream must take only bucketed values (1 + 0, 1, 2, 4, 8, or what the stream's room allows), which
// without padding they do not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <vector>

#include "core/error.h"
#include "cpu_forwarding_backend.h"
#include "engine/draft_policy.h"
#include "engine/drafters/drafter.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "ops/backend.h"
#include "stream_output.h"
#include "text/tokenizer.h"

using namespace tf;
using namespace std::chrono_literals;

namespace {

TEST(DraftPadding, BucketsArePowersOfTwoCappedAtMaxDraft) {
  EXPECT_EQ(padded_draft_length(0, 8), 0);  // nobody proposed: the round does not pad
  EXPECT_EQ(padded_draft_length(1, 8), 1);
  EXPECT_EQ(padded_draft_length(2, 8), 2);
  EXPECT_EQ(padded_draft_length(3, 8), 4);
  EXPECT_EQ(padded_draft_length(5, 8), 8);
  EXPECT_EQ(padded_draft_length(8, 8), 8);
  EXPECT_EQ(padded_draft_length(5, 6), 6);  // capped at max_draft
  EXPECT_EQ(padded_draft_length(9, 16), 16);
}

TEST(DraftPadding, FillersRepeatTheLastProposedToken) {
  std::vector<int32_t> d = {7, 9};
  pad_proposal(d, 4, 3);
  EXPECT_EQ(d, (std::vector<int32_t>{7, 9, 9, 9}));
  std::vector<int32_t> none;
  pad_proposal(none, 2, 3);  // no proposal: the stream's last token
  EXPECT_EQ(none, (std::vector<int32_t>{3, 3}));
  std::vector<int32_t> longer = {1, 2, 3};
  pad_proposal(longer, 2, 5);  // never shortens
  EXPECT_EQ(longer, (std::vector<int32_t>{1, 2, 3}));
}

TEST(DraftPadding, AcceptanceLearnsFromProposedTokensOnly) {
  DraftStats padded, unpadded;
  record_proposal(padded, 2, 4);  // 2 proposed + 2 fillers, all 4 accepted
  unpadded.record(2, 2);
  EXPECT_EQ(padded.drafted, 2);
  EXPECT_EQ(padded.accepted, 2);
  EXPECT_DOUBLE_EQ(padded.acceptance, unpadded.acceptance);
  record_proposal(padded, 3, 1);  // a miss inside the proposal: fillers play no part
  unpadded.record(3, 1);
  EXPECT_DOUBLE_EQ(padded.acceptance, unpadded.acceptance);
  DraftStats fillers;
  record_proposal(fillers, 0, 0);  // fillers alone (a stream that proposed nothing): not a sample
  record_proposal(fillers, 0, 2);
  EXPECT_EQ(fillers.drafted, 0);
  EXPECT_DOUBLE_EQ(fillers.acceptance, DraftStats{}.acceptance);
}

TEST(DraftPadding, AutoPadsOnlyLaunchBoundReplayedRounds) {
  EXPECT_EQ(parse_pad_drafts("auto"), PadDrafts::Auto);
  EXPECT_EQ(parse_pad_drafts("on"), PadDrafts::On);
  EXPECT_EQ(parse_pad_drafts("off"), PadDrafts::Off);
  EXPECT_THROW(parse_pad_drafts("yes"), Error);
  EXPECT_TRUE(pad_drafts_now(PadDrafts::On, false, 0.005));
  EXPECT_FALSE(pad_drafts_now(PadDrafts::Off, true, 0.0002));
  EXPECT_TRUE(pad_drafts_now(PadDrafts::Auto, true, 0.0002));    // the demo model on an H200
  EXPECT_FALSE(pad_drafts_now(PadDrafts::Auto, true, 0.005));    // an 8B-shape round
  EXPECT_FALSE(pad_drafts_now(PadDrafts::Auto, false, 0.0002));  // eager forwards: nothing to replay
  EXPECT_FALSE(pad_drafts_now(PadDrafts::Auto, true, 0));        // not measured yet
}

std::string demo(const std::string& sub = "") {
  return std::string(TF_SOURCE_DIR) + "/models/demo" + sub;
}

using Out = StreamOutput;

// Drafted streams run together (so that streams without a proposal of their own get fillers) and must
// equal their serial runs. Drafts are forced (adaptive length off) so that verification really runs.
class PaddedDrafting : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(PaddedDrafting, DraftedEqualsSerial) {
  const auto& [drafter, ngram] = GetParam();
  EngineOptions o;
  o.model_path = demo();
  o.backend = "cpu";
  o.parallel = 3;
  o.drafter = drafter;
  o.ngram_drafts = ngram;
  o.max_draft = 6;  // buckets 1, 2, 4, 6
  o.adaptive_draft = false;
  o.pad_drafts = "on";
  o.prompt_cache_gib = 0;
  auto e = create_engine(o);
  const auto& tok = e->tokenizer();
  const char* prompts[] = {
      "def parse_config(path, defaults=None):\n    config = dict(defaults or {})\n    return config\n",
      "Once upon a time, in a small village by the sea, there lived",
      "the cat sat on the mat. the cat sat on the mat. the cat"};
  int64_t drafted = 0;
  // Under the sanitizers one sampled temperature: the same code paths in a third of the time.
#ifdef TF_SANITIZED
  const std::vector<float> temperatures = {0.7f};
#else
  const std::vector<float> temperatures = {0.f, 0.7f, 1.2f};
#endif
  for (float temperature : temperatures) {
    std::vector<GenerationRequest> reqs;
    for (const char* text : prompts) {
      GenerationRequest r = text_request(tok, text, temperature, 4321, 24);
      r.logprobs = 0;
      reqs.push_back(r);
    }
    std::vector<Out> serial;
    for (auto r : reqs) {
      r.draft = false;
      serial.push_back(collect(*e->submit(r)));
    }
    std::vector<std::shared_ptr<RequestHandle>> hs;
    for (const auto& r : reqs) hs.push_back(e->submit(r));
    for (size_t i = 0; i < hs.size(); ++i) {
      const Out b = collect(*hs[i]);
      EXPECT_EQ(b.tokens, serial[i].tokens) << prompts[i] << " T=" << temperature;
      ASSERT_EQ(b.logprobs.size(), serial[i].logprobs.size());
      EXPECT_EQ(0, std::memcmp(b.logprobs.data(), serial[i].logprobs.data(), b.logprobs.size() * 4));
      EXPECT_EQ(serial[i].usage.drafted_tokens, 0);
      EXPECT_LE(b.usage.accepted_tokens, b.usage.drafted_tokens);
      drafted += b.usage.drafted_tokens;
    }
  }
  EXPECT_GT(drafted, 0) << "no drafts were verified: the test proves nothing";
}

INSTANTIATE_TEST_SUITE_P(Drafters, PaddedDrafting,
                         ::testing::Values(std::make_tuple(std::string("none"), true),  // context copies
                                           std::make_tuple(std::string("mtp"), false),  // the demo's MTP head
                                           std::make_tuple(demo("/draft"), true)));     // its draft model

// The CPU backend, optionally claiming CUDA graph support (so that the engine asks for graphed forwards and
// auto may pad; run_graph runs the forward eagerly), recording every forward's rows per stream.
class RecordingGraphs final : public CpuForwardingBackend {
 public:
  explicit RecordingGraphs(bool graphs) : graphs_(graphs) {}

  // Rows per stream of every forward, in stream order, and each stream's last row position.
  std::vector<std::vector<int>> rounds, last_positions;

  bool graphs_supported() const override { return graphs_; }
  bool run_graph(const std::vector<int64_t>&, const AttentionParams&, std::shared_ptr<const void>,
                 const std::function<void()>& record) override {
    record();
    return false;
  }
  void begin_forward(const BatchMeta& meta) override {
    std::vector<int> rows, last;
    for (size_t i = 0; i < meta.row_seq.size(); ++i) {
      const size_t s = size_t(meta.row_seq[i]);
      if (s >= rows.size()) rows.resize(s + 1, 0), last.resize(s + 1, 0);
      ++rows[s];
      last[s] = int(meta.positions[i]);
    }
    rounds.push_back(rows);
    last_positions.push_back(last);
    cpu_->begin_forward(meta);
  }

  std::string name() const override { return "cpu+recorded graphs"; }

 private:
  bool graphs_;
};

constexpr int kPrompt = 12, kMaxTokens = 40, kMaxDraft = 8;

// Proposals of 1..7 tokens (the length follows the stream's length, so that every stream drafts the same
// way whichever streams share its rounds): its last token repeated, which the tiny model's greedy loops
// often accept.
class VaryingLengths final : public Drafter {
 public:
  const char* name() const override { return "varying lengths"; }
  void propose(std::vector<DraftSlot>& slots) override {
    for (auto& s : slots)
      s.tokens.assign(size_t(std::min(1 + int(s.seq->tokens.size() % 7), s.max_k)), s.seq->tokens.back());
  }
};

struct Shapes {
  std::set<int> widths;               // draft rows per stream seen in decode/verify rounds (0: no drafts)
  std::set<int> room_limited;         // those of streams whose room (max_tokens) was shorter than max_draft
  std::set<std::vector<int>> tuples;  // distinct rows-per-stream tuples of those rounds
  int64_t drafted = 0, accepted = 0;
  std::vector<std::vector<int32_t>> tokens;
};

// Three streams drafting 1..7 tokens, decoded together.
Shapes run_shapes(const std::string& pad, bool graphs) {
  RecordingGraphs* rec = nullptr;
  EngineOptions o;
  o.model_path = std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3";
  o.backend_factory = [&rec, graphs] {
    auto b = std::make_unique<RecordingGraphs>(graphs);
    rec = b.get();
    return b;
  };
  o.parallel = 3;
  o.drafter_factory = [] { return std::make_unique<VaryingLengths>(); };
  o.ngram_drafts = false;
  o.max_draft = kMaxDraft;
  o.adaptive_draft = false;
  o.prompt_cache_gib = 0;
  o.pad_drafts = pad;
  auto e = create_engine(o);
  std::vector<std::shared_ptr<RequestHandle>> hs;
  for (int s = 0; s < 3; ++s) {
    GenerationRequest r;
    for (int i = 0; i < kPrompt; ++i) r.prompt.push_back(5 + 11 * s + (i % (3 + s)));  // periods 3, 4, 5
    r.sampling.temperature = 0;
    r.max_tokens = kMaxTokens;
    r.ignore_eos = true;
    hs.push_back(e->submit(r));
  }
  Shapes out;
  for (auto& h : hs) {
    const Out o = collect(*h);
    EXPECT_EQ(int(o.tokens.size()), kMaxTokens);
    EXPECT_LE(o.usage.accepted_tokens, o.usage.drafted_tokens);
    out.drafted += o.usage.drafted_tokens;
    out.accepted += o.usage.accepted_tokens;
    out.tokens.push_back(o.tokens);
  }
  e->shutdown();
  for (size_t r = 0; r < rec->rounds.size(); ++r) {
    const auto& round = rec->rounds[r];
    // Rounds with a prompt chunk (kPrompt rows > 1 + kMaxDraft) are not decode/verify rounds.
    if (std::any_of(round.begin(), round.end(), [](int rows) { return rows > 1 + kMaxDraft; })) continue;
    out.tuples.insert(round);
    for (size_t s = 0; s < round.size(); ++s) {
      // A stream at position p verifies at most kPrompt + kMaxTokens - 2 - p drafts (its reply's end):
      // its last row then sits at kPrompt + kMaxTokens - 2.
      const bool at_room = rec->last_positions[r][s] == kPrompt + kMaxTokens - 2 && round[s] - 1 < kMaxDraft;
      (at_room ? out.room_limited : out.widths).insert(round[s] - 1);
    }
  }
  return out;
}

bool bucketed(int k) {
  return k == 0 || k == 1 || k == 2 || k == 4 || k == 8;
}

TEST(DraftPadding, VerifyRowsPerStreamTakeOnlyBucketedValues) {
  const Shapes off = run_shapes("off", true), on = run_shapes("on", true), plain = run_shapes("auto", false);
  ASSERT_GT(off.drafted, 0) << "no drafts: the test proves nothing";
  ASSERT_GT(on.drafted, 0);
  // Without padding, proposals of 1..7 tokens make widths outside the buckets: the check below
  // discriminates.
  EXPECT_TRUE(std::any_of(off.widths.begin(), off.widths.end(), [](int k) { return !bucketed(k); }));
  // With padding every width is a bucket, except where a stream's room (the end of its reply) is shorter:
  // it then verifies exactly its room (counted apart).
  for (int k : on.widths) EXPECT_TRUE(bucketed(k)) << k;
  // (How much rarer padded shapes are depends on which streams share rounds: reported, not asserted.)
  std::cout << "distinct rows-per-stream tuples: off " << off.tuples.size() << ", on " << on.tuples.size()
            << "\nwidths off:";
  for (int k : off.widths) std::cout << " " << k;
  std::cout << "\nwidths on:";
  for (int k : on.widths) std::cout << " " << k;
  std::cout << "\n";

  // auto without graph replay (the plain CPU backend) does not pad: the same shapes as off.
  EXPECT_EQ(plain.widths, off.widths);
  // Padding changes shapes only, never tokens (the streams' seeds fix them).
  EXPECT_EQ(on.tokens, off.tokens);
  EXPECT_EQ(plain.tokens, off.tokens);
}

}  // namespace

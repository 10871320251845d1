#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "ops/backend.h"

using namespace tf;

namespace {

SamplingParams temp(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

TEST(Sampler, GreedyTakesLowestIdOnTies) {
  std::vector<float> l = {0.f, 3.f, 1.f, 3.f};
  PenaltyState pen;
  EXPECT_EQ(sample_token(l.data(), 4, temp(0), 1, 0, pen).token, 1);
}

TEST(Sampler, KeyedSamplingIsAPureFunctionOfSeedAndPosition) {
  std::vector<float> l(50);
  for (int i = 0; i < 50; ++i) l[i] = std::sin(float(i)) * 2;
  PenaltyState pen;
  for (int pos = 0; pos < 20; ++pos) {
    int a = sample_token(l.data(), 50, temp(1), 42, pos, pen).token;
    int b = sample_token(l.data(), 50, temp(1), 42, pos, pen).token;
    EXPECT_EQ(a, b);
  }
  // Different positions and seeds give different draws (not all equal).
  std::map<int, int> seen;
  for (int pos = 0; pos < 200; ++pos) seen[sample_token(l.data(), 50, temp(1), 42, pos, pen).token]++;
  EXPECT_GT(seen.size(), 5u);
}

TEST(Sampler, GumbelMaxFollowsTheSoftmax) {
  // Over many (seed, position) keys the empirical frequencies approach softmax(logits / T).
  std::vector<float> l = {1.0f, 0.0f, -1.0f, 2.0f};
  const float T = 0.7f;
  double z = 0;
  for (float x : l) z += std::exp(x / T);
  std::vector<int> count(4, 0);
  PenaltyState pen;
  const int N = 40000;
  for (int i = 0; i < N; ++i) count[sample_token(l.data(), 4, temp(T), 7, i, pen).token]++;
  for (int i = 0; i < 4; ++i) {
    const double p = std::exp(l[i] / T) / z;
    EXPECT_NEAR(double(count[i]) / N, p, 4 * std::sqrt(p * (1 - p) / N) + 1e-3) << "token " << i;
  }
}

// The backends' sampling op (what the engine uses for unrestricted requests) must give exactly the
// token sample_token gives, greedy and tempered, including ties and -inf entries.
TEST(Sampler, RowSamplingReferenceEqualsSampleToken) {
  const int vocab = 3001;
  std::vector<float> rows;
  std::vector<RowSampling> params;
  std::vector<int32_t> expect;
  PenaltyState pen;
  uint32_t state = 12345;
  for (int r = 0; r < 60; ++r) {
    std::vector<float> l(vocab);
    for (auto& x : l) {
      state = state * 1664525u + 1013904223u;
      x = float(int(state >> 20) % 4000) / 500.f - 4.f;  // coarse grid: ties are common
    }
    if (r % 7 == 3) l[5] = -INFINITY;
    const float T = r % 3 == 0 ? 0.f : (r % 3 == 1 ? 0.7f : 1.3f);
    params.push_back({T, uint64_t(1000 + r), int64_t(r * 17)});
    expect.push_back(sample_token(l.data(), vocab, temp(T), 1000 + r, r * 17, pen).token);
    rows.insert(rows.end(), l.begin(), l.end());
  }
  std::vector<int32_t> got;
  sample_rows_reference(rows.data(), vocab, params, got);
  EXPECT_EQ(got, expect);
  auto cpu = make_cpu_backend();
  Tensor t = Tensor::borrow(rows.data(), {int64_t(params.size()), vocab}, DType::F32, Device::CPU);
  std::vector<int32_t> via_backend;
  cpu->sample_rows(t, params, via_backend);
  EXPECT_EQ(via_backend, expect);
}

TEST(Sampler, DeviceSampleableOnlyWithoutPenaltiesTruncationOrLogprobs) {
  SamplingParams p = temp(0.8f);
  EXPECT_TRUE(device_sampleable(p, 100, -1));
  EXPECT_FALSE(device_sampleable(p, 100, 0)) << "logprobs need the host row";
  p.top_k = 100;
  EXPECT_TRUE(device_sampleable(p, 100, -1)) << "top_k >= vocab masks nothing";
  p.top_k = 10;
  EXPECT_FALSE(device_sampleable(p, 100, -1));
  p = temp(0.8f);
  p.top_p = 0.9f;
  EXPECT_FALSE(device_sampleable(p, 100, -1));
  p = temp(0.8f);
  p.repetition_penalty = 1.1f;
  EXPECT_FALSE(device_sampleable(p, 100, -1));
}

TEST(Sampler, TruncationMasks) {
  std::vector<float> l = {5.f, 4.9f, 1.f, 0.f, -3.f};
  PenaltyState pen;
  SamplingParams p = temp(1);
  p.top_k = 1;
  for (int pos = 0; pos < 50; ++pos) EXPECT_EQ(sample_token(l.data(), 5, p, 3, pos, pen).token, 0);
  p = temp(1);
  p.top_k = 2;
  for (int pos = 0; pos < 200; ++pos) EXPECT_LE(sample_token(l.data(), 5, p, 3, pos, pen).token, 1);
  p = temp(1);
  p.top_p = 0.5f;  // token 0 alone has ~51% of the mass
  for (int pos = 0; pos < 200; ++pos) EXPECT_EQ(sample_token(l.data(), 5, p, 3, pos, pen).token, 0);
  p = temp(1);
  p.min_p = 0.5f;  // e^-0.1 > 0.5 keeps token 1; e^-4 drops token 2
  std::set<int> got;
  for (int pos = 0; pos < 300; ++pos) got.insert(sample_token(l.data(), 5, p, 3, pos, pen).token);
  EXPECT_EQ(got, (std::set<int>{0, 1}));
}

TEST(Sampler, PenaltiesFollowOpenAIAndHF) {
  std::vector<float> l = {2.f, 1.9f, -1.f};
  PenaltyState pen;
  pen.add_generated(0);
  SamplingParams p = temp(0);
  p.presence_penalty = 0.2f;  // 2 - 0.2 = 1.8 < 1.9
  EXPECT_EQ(sample_token(l.data(), 3, p, 0, 0, pen).token, 1);
  p = temp(0);
  p.repetition_penalty = 1.1f;  // 2 / 1.1 = 1.82 < 1.9
  EXPECT_EQ(sample_token(l.data(), 3, p, 0, 0, pen).token, 1);
  p = temp(0);
  EXPECT_EQ(sample_token(l.data(), 3, p, 0, 0, pen).token, 0);
}

TEST(Sampler, LogprobsAreLogSoftmaxOfTheRawRow) {
  std::vector<float> l = {1.f, 2.f, 3.f};
  PenaltyState pen;
  auto r = sample_token(l.data(), 3, temp(0), 0, 0, pen, 2);
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, 3 - lse, 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 2);
  EXPECT_EQ(r.top[1].token, 1);
  EXPECT_NEAR(r.top[1].logprob, 2 - lse, 1e-6);
}

TEST(Sampler, DerivedSeedDependsOnThePrompt) {
  EXPECT_EQ(derive_seed({1, 2, 3}), derive_seed({1, 2, 3}));
  EXPECT_NE(derive_seed({1, 2, 3}), derive_seed({1, 2, 4}));
  EXPECT_NE(derive_seed({1, 2}), derive_seed({1, 2, 0}));
}

TEST(StopMatcher, MatchesAcrossPiecesAndHoldsBackPrefixes) {
  StopMatcher m({"</end>", "STOP"});
  std::string matched, out;
  out += m.push("Hello </", &matched);
  EXPECT_EQ(out, "Hello ");  // "</" could start a stop string
  out += m.push("e", &matched);
  EXPECT_EQ(out, "Hello ");
  out += m.push("nd> tail", &matched);
  EXPECT_EQ(out, "Hello ");
  EXPECT_EQ(matched, "</end>");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more", &matched), "");
}

TEST(StopMatcher, ReleasesTextThatCannotStopAnyMore) {
  StopMatcher m({"abc"});
  std::string matched;
  EXPECT_EQ(m.push("xxab", &matched), "xx");
  EXPECT_EQ(m.push("d", &matched), "abd");
  EXPECT_EQ(m.push("a", &matched), "");
  EXPECT_EQ(m.flush(), "a");
  EXPECT_TRUE(matched.empty());
}

TEST(StopMatcher, UnarmedPushesMatchNothingButHoldBackBeginnings) {
  StopMatcher m({"abc"});
  std::string matched;
  EXPECT_EQ(m.push("xabcxa", &matched, false), "xabcx");  // a whole stop string before min_tokens: text
  EXPECT_TRUE(matched.empty());
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("b", &matched, false), "");  // "ab" could still start one
  EXPECT_EQ(m.push("c tail", &matched), "");    // armed: completed
  EXPECT_EQ(matched, "abc");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, EarliestMatchWins) {
  StopMatcher m({"world", "lo w"});
  std::string matched;
  EXPECT_EQ(m.push("hello world", &matched), "hel");
  EXPECT_EQ(matched, "lo w");
}

}  // namespace

namespace {

std::vector<float> wave(int n) {
  std::vector<float> l(size_t(n), 0.f);
  for (int i = 0; i < n; ++i) l[size_t(i)] = std::sin(float(i) * 1.7f) * 2;
  return l;
}

TEST(Sampler, LogitBiasShiftsTheRawLogitsBeforeEverythingElse) {
  std::vector<float> l = wave(40);
  PenaltyState pen;
  SamplingParams p = temp(0);
  const int32_t plain = sample_token(l.data(), 40, p, 1, 0, pen).token;
  p.logit_bias = {{7, 100.f}};
  EXPECT_EQ(sample_token(l.data(), 40, p, 1, 0, pen).token, 7);
  p.logit_bias = {{plain, -100.f}};
  const int32_t banned = sample_token(l.data(), 40, p, 1, 0, pen).token;
  EXPECT_NE(banned, plain);
  // The same as editing the row by hand, at every temperature and with truncation.
  for (float t : {0.f, 0.7f, 1.3f}) {
    for (float top_p : {1.f, 0.8f}) {
      SamplingParams q = temp(t);
      q.top_p = top_p;
      q.logit_bias = {{3, 2.5f}, {11, -1.f}, {20, 4.f}};
      std::vector<float> edited = l;
      edited[3] += 2.5f, edited[11] -= 1.f, edited[20] += 4.f;
      SamplingParams q_plain = q;
      q_plain.logit_bias.clear();
      q_plain.presence_penalty = 1e-30f;  // the same (host) path without a bias
      for (int pos = 0; pos < 30; ++pos)
        EXPECT_EQ(sample_token(l.data(), 40, q, 9, pos, pen).token,
                  sample_token(edited.data(), 40, q_plain, 9, pos, pen).token)
            << t << " " << top_p << " " << pos;
    }
  }
  EXPECT_FALSE(device_sampleable(p, 40, -1));
}

TEST(Sampler, MaskRestrictsTheChoiceAndKeepsRawLogprobs) {
  std::vector<float> l = wave(64);
  PenaltyState pen;
  std::vector<uint8_t> mask(64, 0);
  for (int i : {5, 9, 33, 60}) mask[size_t(i)] = 1;
  std::set<int32_t> seen;
  for (float t : {0.f, 1.f})
    for (int pos = 0; pos < 200; ++pos) {
      SamplingParams p = temp(t);
      p.top_k = t > 0 ? 3 : 0;
      SampleResult r = sample_token(l.data(), 64, p, 5, pos, pen, 0, mask.data());
      EXPECT_TRUE(mask[size_t(r.token)]) << r.token;
      seen.insert(r.token);
      // The reported logprob is the raw row's, as without a mask.
      double z = 0;
      for (float x : l) z += std::exp(double(x));
      EXPECT_NEAR(r.logprob, double(l[size_t(r.token)]) - std::log(z), 1e-4);
    }
  EXPECT_GE(seen.size(), 2u);
  // Greedy under a mask: the best allowed id.
  int32_t best = 5;
  for (int i : {9, 33, 60})
    if (l[size_t(i)] > l[size_t(best)]) best = i;
  EXPECT_EQ(sample_token(l.data(), 64, temp(0), 5, 0, pen, -1, mask.data()).token, best);
  std::vector<uint8_t> none(64, 0);
  EXPECT_THROW(sample_token(l.data(), 64, temp(0), 5, 0, pen, -1, none.data()), Error);
}

}  // namespace

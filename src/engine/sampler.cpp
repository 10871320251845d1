#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/keyed_random.h"
#include "ops/backend.h"

namespace tf {

namespace {

// Candidates sorted by value descending, ties by lower id (the order every mask uses).
std::vector<int32_t> sorted_ids(const std::vector<float>& v, const std::vector<int32_t>& ids) {
  std::vector<int32_t> order = ids;
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  return order;
}

// The `want` most likely ids of the raw row with their log-probabilities.
void fill_top(const float* logits, int vocab, int want, double lse, SampleResult& res) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const size_t n = std::min<size_t>(size_t(want), size_t(vocab));
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (size_t i = 0; i < n; ++i) res.top.push_back({ids[i], float(double(logits[ids[i]]) - lse)});
}

double log_sum_exp(const float* logits, int vocab) {
  const float raw_max = *std::max_element(logits, logits + vocab);
  double raw_sum = 0;
  for (int i = 0; i < vocab; ++i) raw_sum += std::exp(double(logits[i] - raw_max));
  return double(raw_max) + std::log(raw_sum);
}

}  // namespace

SampleResult score_token(const float* logits, int vocab, int32_t token, int want_top) {
  SampleResult res;
  res.token = token;
  const double lse = log_sum_exp(logits, vocab);
  res.logprob = float(double(logits[token]) - lse);
  if (want_top > 0) fill_top(logits, vocab, want_top, lse, res);
  return res;
}

void PenaltyState::add_prompt(const std::vector<int32_t>& prompt) {
  for (int32_t t : prompt) ++seen[t];
}
void PenaltyState::add_generated(int32_t token) {
  ++generated[token];
  ++seen[token];
}

uint64_t derive_seed(const std::vector<int32_t>& prompt) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ prompt.size();
  for (int32_t t : prompt) h = mix64(h ^ (uint64_t(uint32_t(t)) + 0x632be59bd9b4e019ULL));
  return h;
}

bool device_sampleable(const SamplingParams& p, int vocab, int want_top) {
  const bool penalised =
      p.repetition_penalty != 1.f || p.presence_penalty != 0.f || p.frequency_penalty != 0.f;
  const bool truncate = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.f || p.min_p > 0.f;
  return want_top < 0 && !penalised && !truncate && p.logit_bias.empty();
}

SampleResult sample_token(const float* logits, int vocab, const SamplingParams& p, uint64_t seed,
                          int64_t position, const PenaltyState& pen, int want_top, const uint8_t* mask) {
  SampleResult res;
  // Log-softmax of the raw row, only when logprobs are reported (double accumulation: reporting only).
  const double raw_lse = want_top >= 0 ? log_sum_exp(logits, vocab) : 0;
  const bool penalised =
      p.repetition_penalty != 1.f || p.presence_penalty != 0.f || p.frequency_penalty != 0.f;
  const bool truncate = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.f || p.min_p > 0.f;
  const bool plain = !penalised && p.logit_bias.empty() && !mask;
  if (plain && (p.temperature <= 0.f || !truncate)) {
    // Greedy, or tempered over every id: the backends' sampling op's reference, so host and device agree
    // by construction. No copy of the row.
    std::vector<int32_t> token;
    sample_rows_reference(logits, vocab, {{p.temperature > 0.f ? p.temperature : 0.f, seed, position}},
                          token);
    res.token = token[0];
    if (want_top >= 0) res.logprob = float(double(logits[res.token]) - raw_lse);
    if (want_top > 0) fill_top(logits, vocab, want_top, raw_lse, res);
    return res;
  }

  std::vector<float> v(logits, logits + vocab);
  if (p.repetition_penalty != 1.f)
    for (const auto& [t, n] : pen.seen)
      if (t >= 0 && t < vocab) v[t] = v[t] > 0 ? v[t] / p.repetition_penalty : v[t] * p.repetition_penalty;
  if (p.presence_penalty != 0.f || p.frequency_penalty != 0.f)
    for (const auto& [t, n] : pen.generated)
      if (t >= 0 && t < vocab) v[t] -= p.presence_penalty + p.frequency_penalty * float(n);
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab) v[t] += b;
  if (p.temperature <=
      0.f) {  // the best id the structured-output mask allows (all when none), lowest on ties
    int32_t best = -1;
    for (int i = 0; i < vocab; ++i)
      if ((!mask || mask[i]) && (best < 0 || v[i] > v[best])) best = i;
    TF_CHECK(best >= 0, "sample_token: the structured-output mask allows no token");
    res.token = best;
  } else {
    // The candidates: every id, or those the mask allows (ascending ids).
    std::vector<int32_t> allowed;
    allowed.reserve(size_t(vocab));
    for (int i = 0; i < vocab; ++i)
      if (!mask || mask[i]) allowed.push_back(i);
    TF_CHECK(!allowed.empty(), "sample_token: the structured-output mask allows no token");
    for (auto& x : v) x /= p.temperature;
    if (truncate) {
      std::vector<int32_t> order = sorted_ids(v, allowed);
      size_t keep = order.size();
      if (p.top_k > 0) keep = std::min<size_t>(keep, size_t(p.top_k));
      const float mx = v[order[0]];
      double z = 0;
      for (size_t i = 0; i < keep; ++i) z += std::exp(double(v[order[i]] - mx));
      if (p.min_p > 0.f) {  // keep p_i >= min_p * p_max, i.e. v_i >= mx + log(min_p)
        const double cut = double(mx) + std::log(double(p.min_p));
        size_t n = 0;
        while (n < keep && double(v[order[n]]) >= cut) ++n;
        keep = std::max<size_t>(n, 1);
        z = 0;
        for (size_t i = 0; i < keep; ++i) z += std::exp(double(v[order[i]] - mx));
      }
      if (p.top_p < 1.f) {  // smallest prefix whose mass reaches top_p
        double cum = 0;
        size_t n = 0;
        while (n < keep) {
          cum += std::exp(double(v[order[n]] - mx)) / z;
          ++n;
          if (cum >= double(p.top_p)) break;
        }
        keep = std::max<size_t>(n, 1);
      }
      allowed.assign(order.begin(), order.begin() + keep);
      std::sort(allowed.begin(), allowed.end());
    }
    double best = -std::numeric_limits<double>::infinity();
    int32_t pick = allowed[0];
    for (int32_t id : allowed) {
      const double score = double(v[id]) + gumbel_noise(seed, position, id);
      if (score > best) {  // strict: lowest id wins exact ties
        best = score;
        pick = id;
      }
    }
    res.token = pick;
  }
  if (want_top >= 0) res.logprob = float(double(logits[res.token]) - raw_lse);
  if (want_top > 0) fill_top(logits, vocab, want_top, raw_lse, res);
  return res;
}

}  // namespace tf

#pragma once
// Exact, keyed sampling: a token is a pure function of (logits row, seed, absolute position, request
// parameters, the stream's own history for penalties). No global RNG, nothing depends on batch order,
// so a drafted token can be verified by plain equality with what serial decoding would have sampled.
//   token = argmax over allowed ids of (logit / T + Gumbel(hash(seed, position, id)))
// which samples exactly softmax(logit / T) restricted to the allowed set (top-k, top-p, min-p masks
// computed from the row alone, ties broken by lower id). T = 0 is greedy: argmax, lowest id on ties.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "core/keyed_random.h"  // keyed_uniform, gumbel_noise
#include "engine/api.h"

namespace tf {

// Token counts the penalties look at.
struct PenaltyState {
  std::unordered_map<int32_t, int> generated;  // presence / frequency (OpenAI): generated tokens only
  std::unordered_map<int32_t, int> seen;       // repetition (HF): prompt + generated
  void add_prompt(const std::vector<int32_t>& prompt);
  void add_generated(int32_t token);
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.f;            // log softmax of the raw logits (before penalties and temperature); only
                                  // computed when logprobs are requested (want_top >= 0)
  std::vector<TokenLogprob> top;  // the `want_top` most likely ids under the same distribution
};

// `logits` is not modified. `allowed` (structured outputs: vocab entries, nonzero = may come next; null =
// every id) restricts the choice like a truncation mask; it must allow at least one id. Logprobs stay
// those of the raw row.
SampleResult sample_token(const float* logits, int vocab, const SamplingParams& params, uint64_t seed,
                          int64_t position, const PenaltyState& penalties, int want_top = -1,
                          const uint8_t* allowed = nullptr);

// The raw row's log-probability of `token` and its `want_top` most likely ids (prompt logprobs: the same
// numbers sample_token reports for a sampled token, from the same row).
SampleResult score_token(const float* logits, int vocab, int32_t token, int want_top);

// Seed for requests without one: a hash of the prompt tokens.
uint64_t derive_seed(const std::vector<int32_t>& prompt);
// True when sample_token(params, want_top) needs nothing beyond the logits row, seed and position
// (no penalties, logit bias, truncation or logprobs): then Backend::sample_rows gives the same token on the
// device.
bool device_sampleable(const SamplingParams& params, int vocab, int want_top);

}  // namespace tf

#include "engine/drafters/draft_token.h"

#include <cmath>
#include <vector>

#include "engine/sampler.h"

namespace tf {

int32_t draft_token(const float* row, int V, const SamplingParams& p, uint64_t seed, int64_t position) {
  const bool truncate = (p.top_k > 0 && p.top_k < V) || p.top_p < 1.f || p.min_p > 0.f;
  if (truncate) {
    PenaltyState none;
    return sample_token(row, V, p, seed, position, none).token;
  }
  float mx = row[0];
  for (int i = 1; i < V; ++i) mx = row[i] > mx ? row[i] : mx;
  int32_t best = 0;
  while (best + 1 < V && !(row[best] == mx)) ++best;  // the first maximum (any id for NaN rows)
  if (p.temperature <= 0.f) return best;
  const float t = p.temperature;
  // The argmax's score bounds the winner's from below; a token whose logit / T lies more than 16 below it
  // would need a Gumbel noise above 16 to win (odds below e^-16 each): only the others get keyed noise.
  const double floor = double(row[best] / t) + gumbel_noise(seed, position, best) - 16.0;
  const float cut = float(floor * t) - 1e-3f * std::fabs(float(floor * t)) - 1e-3f;  // a superset, in logits
  std::vector<int32_t> ids;
  ids.reserve(256);
  for (int i = 0; i < V; ++i)
    if (row[i] >= cut) ids.push_back(i);
  if (ids.empty()) return best;  // NaN rows: any token will do as a draft
  int32_t win = ids[0];
  double top = double(row[win] / t) + gumbel_noise(seed, position, win);
  for (size_t j = 1; j < ids.size(); ++j) {
    const double s = double(row[ids[j]] / t) + gumbel_noise(seed, position, ids[j]);
    if (s > top) {  // ids ascend: ties go to the lowest id, as in the reference
      top = s;
      win = ids[j];
    }
  }
  return win;
}

}  // namespace tf

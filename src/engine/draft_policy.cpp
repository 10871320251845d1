#include "engine/draft_policy.h"

#include <algorithm>
#include <cmath>

namespace tf {

void CostModel::observe(int rows, double seconds) {
  const double decay = 0.98;
  n_ = n_ * decay + 1;
  sx_ = sx_ * decay + rows;
  sy_ = sy_ * decay + seconds;
  sxx_ = sxx_ * decay + double(rows) * rows;
  sxy_ = sxy_ * decay + double(rows) * seconds;
}

void CostModel::observe_draft(int tokens, double seconds) {
  if (tokens <= 0) return;
  draft_s_ = draft_s_ * 0.95 + seconds;
  draft_n_ = draft_n_ * 0.95 + tokens;
}

// Least-squares line through the observed (rows, seconds) of recent forwards; false until it is usable.
bool CostModel::fit(double& slope, double& intercept) const {
  const double var = sxx_ * n_ - sx_ * sx_;
  if (n_ < 8 || var <= 1e-9 * n_ * n_) return false;
  slope = (sxy_ * n_ - sx_ * sy_) / var;
  intercept = (sy_ - slope * sx_) / n_;
  return true;
}

double CostModel::step_time() const {
  double slope, intercept;
  if (!fit(slope, intercept)) return n_ > 0 ? sy_ / sx_ : 0;  // time per row as a fallback
  return std::max(1e-9, intercept + slope);
}

double CostModel::draft_cost() const {
  if (draft_n_ <= 0) return 0;
  const double step = step_time();
  return step > 0 ? std::clamp(draft_s_ / draft_n_ / step, 0.0, 10.0) : 0;
}

double CostModel::row_cost() const {
  double slope, intercept;
  if (!fit(slope, intercept)) return prior_;
  if (slope <= 0) return 0.01;
  if (intercept + slope <= 0) return prior_;
  return std::clamp(slope / (intercept + slope), 0.01, 1.0);
}

double CostModel::draft_cost_in_round(int rows) const {
  if (draft_n_ <= 0) return 0;
  if (rows <= 1) return draft_cost();
  double slope, intercept, round = 0;
  if (fit(slope, intercept)) round = intercept + slope * rows;
  if (round <= 0) round = step_time();  // few observations: the round is about one step
  return round > 0 ? std::clamp(draft_s_ / draft_n_ * rows / round, 0.0, 10.0) : 0;
}

double CostModel::row_cost_in_round(int rows) const {
  double slope, intercept;
  if (rows <= 1 || !fit(slope, intercept)) return std::clamp(row_cost() * std::max(1, rows), 0.01, 1.0);
  if (slope <= 0) return 0.01;
  const double round = intercept + slope * rows;
  if (round <= 0) return row_cost();
  return std::clamp(slope * rows / round, 0.01, 1.0);
}

void DraftStats::record(int k, int accepted_now) {
  if (k <= 0) return;
  drafted += k;
  accepted += accepted_now;
  // Per-token acceptance estimate: a run of `accepted_now` then a miss (or all k accepted).
  const double observed = double(accepted_now) / double(k);
  acceptance = 0.7 * acceptance + 0.3 * observed;
}

int choose_draft_length(DraftStats& s, double c, int max_k, double d) {
  c += d;
  if (max_k <= 0) return 0;
  const double a = std::clamp(s.acceptance, 0.0, 0.99);
  int best_k = 0;
  double best = 1.0;  // serial: one token per unit cost
  double expected = 1.0, ak = 1.0;
  for (int k = 1; k <= max_k; ++k) {
    ak *= a;
    expected += ak;  // 1 + a + ... + a^k
    const double rate = expected / (1.0 + c * k);
    if (rate > best * 1.02) {
      best = rate;
      best_k = k;
    }
  }
  if (best_k == 0) {
    // Probe with one draft every 16 serial steps so a stream whose text turns repetitive is noticed.
    if (++s.serial_steps >= 16) {
      s.serial_steps = 0;
      return 1;
    }
    return 0;
  }
  s.serial_steps = 0;
  return best_k;
}

int prefill_row_budget(int prefill_chunk, int decode_rows, double decode_share) {
  const int chunk = std::max(1, prefill_chunk);
  if (decode_share <= 0 || decode_rows <= 0) return chunk;
  const double f = std::min(decode_share, 0.95);
  return std::min(chunk, std::max(16, int(double(decode_rows) * (1 - f) / f)));
}

}  // namespace tf

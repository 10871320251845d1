#include "engine/round_cost.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace tf {

int RoundCostTable::bucket(int rows) {
  if (rows <= 1) return 0;
  return std::min(kBuckets - 1, int(std::bit_width(unsigned(rows - 1))));  // 2 -> 1, 3-4 -> 2, 5-8 -> 3
}

void RoundCostTable::observe(int rows, double seconds) {
  if (rows <= 0 || !(seconds > 0)) return;
  constexpr double kDecay = 0.95;  // recent rounds count most: the cost moves with context length
  const int b = bucket(rows);
  const double w = weight_[b] * kDecay;
  weight_[b] = w + 1;
  rows_[b] = (rows_[b] * w + rows) / weight_[b];
  secs_[b] = (secs_[b] * w + seconds) / weight_[b];
  ++measured_;
}

double RoundCostTable::predict(int rows) const {
  // The measured buckets in increasing rows, seconds made non-decreasing (a bigger forward never costs
  // less; noise in one bucket must not make a bigger round look cheaper).
  // (A fixed array: the scheduler calls this a dozen times a round.)
  std::array<std::pair<double, double>, kBuckets> pts;
  int n = 0;
  for (int b = 0; b < kBuckets; ++b) {
    if (weight_[b] <= 0) continue;
    const double s = n == 0 ? secs_[b] : std::max(secs_[b], pts[n - 1].second);
    pts[n++] = {rows_[b], s};
  }
  if (n == 0) return 0;
  const double r = std::max(rows, 1);
  if (r <= pts[0].first) return pts[0].second;
  for (int i = 1; i < n; ++i) {
    const auto [r1, s1] = pts[i];
    if (r <= r1) {
      const auto [r0, s0] = pts[i - 1];
      return s0 + (s1 - s0) * (r - r0) / std::max(r1 - r0, 1e-9);
    }
  }
  // Past the largest measured round: proportional to rows (over-estimates a cost with a fixed part).
  return pts[n - 1].second * r / pts[n - 1].first;
}

int auto_prefill_chunk(size_t device_memory, double row_bytes) {
  if (device_memory == 0) return 512;
  const double fit = 0.07 * double(device_memory) / std::max(row_bytes, 1.0);
  int chunk = 512;
  while (chunk < 16384 && 2.0 * chunk <= fit) chunk *= 2;
  return chunk;
}

int prefill_rows_for_share(const RoundCostTable& t, int decode_rows, double decode_share, int chunk,
                           int min_rows) {
  chunk = std::max(1, chunk);
  if (decode_share <= 0 || decode_rows <= 0 || t.empty()) return chunk;
  const double f = std::min(decode_share, 0.95);
  const double limit = t.predict(decode_rows) / f;
  int lo = std::min(min_rows, chunk), hi = chunk;  // predict() is non-decreasing in rows: bisect
  if (t.predict(decode_rows + hi) <= limit) return hi;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.predict(decode_rows + mid) <= limit)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace tf

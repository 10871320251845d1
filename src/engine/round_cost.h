#pragma once
// How long a forward of n rows takes, measured, and how many prompt rows a round may carry beside its
// decode rows. A forward's time is not linear in its rows: the GPU reads the weights once per round, so
// it is nearly flat up to tens of rows and grows with the tensor-core work after that. The table keeps a
// running mean per row bucket (1, 2, 3-4, 5-8, ..., 257-512, ...) and predicts between measured buckets
// along the chord, which over-estimates a convex cost curve: the scheduler errs towards short rounds, and
// every round it runs is measured, so the estimate tightens where it is used.
#include <array>
#include <cstddef>

namespace tf {

class RoundCostTable {
 public:
  static constexpr int kBuckets = 16;  // up to 2^15 rows
  void observe(int rows, double seconds);
  // Predicted seconds of a forward of `rows` rows; 0 when nothing has been measured yet.
  double predict(int rows) const;
  bool empty() const { return measured_ == 0; }

 private:
  static int bucket(int rows);
  std::array<double, kBuckets> rows_{};  // mean rows of the bucket's rounds
  std::array<double, kBuckets> secs_{};  // mean seconds
  std::array<double, kBuckets> weight_{};
  int measured_ = 0;
};

// --prefill-chunk auto. On a GPU (device_memory > 0) a round reads the weights once whatever its rows, so
// a backlog of prompts that arrived together is best prefilled in as few rounds as possible: each such
// round gives every running stream one long gap (run 108: 32 clients' p99 inter-token latency 5.6x one
// client's at 512 rows, 1.8x at 8,192 and at 16,384). The chunk is the largest power of two from 512 to
// 16,384 whose rows (row_bytes each: activations and attention scratch at the full context) take at most
// 7% of the device's memory: 16,384 for the 8B shape at 2,048 tokens of context on an H200 (runs 109-110),
// 1,024 at 32k. On the CPU, where a round's time grows with its rows, 512.
int auto_prefill_chunk(size_t device_memory, double row_bytes);

// --decode-share F: while streams decode, the prompt rows a round adds must keep the decode rows' share
// of the round's time at F or more: predict(decode_rows + P) <= predict(decode_rows) / F. The largest such
// P, at least `min_rows` (prompts always make progress) and at most `chunk`. F <= 0, no decode rows or an
// empty table give the whole chunk.
int prefill_rows_for_share(const RoundCostTable& t, int decode_rows, double decode_share, int chunk,
                           int min_rows = 16);

}  // namespace tf

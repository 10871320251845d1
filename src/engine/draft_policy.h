#pragma once
// How many tokens to draft for a stream: the k that maximises expected tokens per unit of forward time,
// from the stream's measured acceptance and the measured cost of an extra verify row. With acceptance a
// per drafted token, k drafts yield (1 - a^(k+1)) / (1 - a) tokens for a forward costing 1 + c·k, where
// c = (time of one more row + time to draft it) / (time of a 1-row step). When no k > 0 pays, the stream
// decodes serially and probes now and then, so drafting never makes it slower than serial by more than noise.
#include <cstdint>

namespace tf {

// Online least squares of round time vs rows, with exponential forgetting.
class CostModel {
 public:
  explicit CostModel(double prior_row_cost) : prior_(prior_row_cost) {}
  void observe(int rows, double seconds);
  // Time a model drafter spent proposing `tokens` tokens (zero for context copies).
  void observe_draft(int tokens, double seconds);
  double row_cost() const;  // c above
  // c for a round of `rows` decode rows: an extra verify row slows every stream of the round, so its
  // cost relative to one stream's share of the round is rows * slope / (intercept + slope * rows)
  // (= row_cost() for one row). Drafting pays iff the expected extra tokens beat that.
  double row_cost_in_round(int rows) const;
  double draft_cost() const;  // a drafted token's own cost, in units of a 1-row step
  // The same for a round of `rows` decode rows: the drafter's forward delays every stream of the round,
  // so a proposed token costs (its seconds) * rows / (the round's time) of one stream's share.
  double draft_cost_in_round(int rows) const;

 private:
  double step_time() const;  // fitted time of a 1-row forward
  bool fit(double& slope, double& intercept) const;
  double prior_;
  double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
  double draft_s_ = 0, draft_n_ = 0;
};

struct DraftStats {
  double acceptance = 0.5;  // EMA of accepted / drafted
  int serial_steps = 0;     // steps since the last probe while drafting does not pay
  int64_t drafted = 0, accepted = 0;
  void record(int k, int accepted_now);
};

// The draft length for a stream, at most `max_k`: each drafted token costs `row_cost` (one more verify
// row) plus `draft_cost` (producing it).
int choose_draft_length(DraftStats& s, double row_cost, int max_k, double draft_cost = 0);

// --decode-share F: the prompt rows a round may carry beside `decode_rows` decode/verify rows, so that
// the decode rows stay at least F of the round (never below 16 prompt rows, never above prefill_chunk).
int prefill_row_budget(int prefill_chunk, int decode_rows, double decode_share);

}  // namespace tf

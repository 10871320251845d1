#pragma once
// How many tokens to draft for a stream: the k that maximises expected tokens per unit of forward time,
// from the stream's measured acceptance and the measured cost of an extra verify row. With acceptance a
// per drafted token, k drafts yield (1 - a^(k+1)) / (1 - a) tokens for a forward costing 1 + c·k, where
// c = (time of one more row + time to draft it) / (time of a 1-row step). When no k > 0 pays, the stream
// decodes serially and probes now and then, so drafting never makes it slower than serial by more than noise.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

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

// The engine-wide check that drafting (context copies, an MTP head, a draft model) pays in wall-clock
// terms. The per-stream policy above models the forward's cost, but not the host work around it (the
// drafter's own forwards and sampling, hidden-state copies, verification and bookkeeping), which dominates
// when the forward is fast. So the guard measures what the user sees: tokens emitted per second of
// whole-round wall time, per decoding stream, separately for rounds where drafting was enabled (the guard
// allowed it and some stream could draft, whether or not a stream proposed: an enabled round pays the
// MTP head's hidden states and the drafter's host work either way) and rounds where it was not, keyed by
// the number of decoding streams (a round's time depends on it), with exponential forgetting. (Judging
// "some stream proposed" against "everything else" put enabled rounds without a proposal on the serial
// side, polluting it with drafting's costs: on the H200, 1 stream at T = 0.7 ran 0.93x on free text and
// the guard never saw it, docs/drafting.md.) When enabled rounds deliver fewer tokens/s than serial ones
// by more than `margin`, drafting (every source) is switched off for that stream count for a backoff
// period that doubles while it keeps losing; short drafted probe windows then check whether it pays again
// (as do serial probes, rarer and rarer, while it is on). The backoff also grows with the measured loss
// (probe_budget), and a probe that loses badly ends early (probe_abort).
// Evidence is counted in stream-rounds: a round of n streams averages n streams' acceptance, so a round
// of fewer than `reference_streams` streams weighs n / reference_streams of a round in the forgetting, in
// the age that makes a serial probe due, and in min_rounds (one stream's acceptance comes in phases:
// judged on 6 rounds it switched drafting off in a bad phase although drafting won 1.1-2.1x over a run,
// tests/engine/test_guard_sim); a deep loss (deep_loss) is judged after min_rounds rounds at any stream
// count. min_rounds counts enabled rounds where some stream proposed (rounds without a proposal tell
// drafting's cost, not what its drafts deliver). New streams cap the drafted side's weight at min_rounds
// stream-rounds, so that a new workload is soon judged on its own rounds.
// A loss beyond `sure_noise` standard errors of the enabled rounds' rate is *sure*: the next probe waits
// max_backoff rounds and new streams do not hasten it (each probe pays the new streams' catch-up and
// spreads their progress; one a run cost 8 streams at T = 0.7 5-15% of the demo bench). After a loss within
// noise, new streams (a changed workload, e.g. greedy requests arriving) bring the next probe to at most
// one base backoff after the off period began. The backoff counts only rounds where some stream could
// draft (`draft: false` requests neither pay for nor wait out a verdict), and so does a drafted probe
// (its enabled rounds). A stream count seen for the first time takes the verdict of the nearest stream count
// within two: off when that one is off (streams finishing one by one would otherwise pay a first window at
// every count), and when on, its drafted/serial ratio spaces the first serial probe (at T = 0 a 16-round
// serial probe in the tail cost 8 streams 10-30% of drafting's gain). At more than one stream, drafting
// must beat serial by `spread` to break even (uneven acceptance spreads the streams' progress).
struct DraftGuardOptions {
  double decay = 0.95;    // forgetting per measured round of the same stream count (reference_streams)
  double margin = 0.04;   // relative difference taken as noise (hysteresis both ways)
  int min_rounds = 6;     // enabled rounds with proposals before a verdict (of reference_streams streams)
  int probe_rounds = 16;  // rounds in a probe window (6 was too few: lucky context-copy runs, run 22)
  int backoff = 64;       // rounds off after drafting first loses; doubles while it keeps losing
  int max_backoff = 1024;
  int probe_every = 64;  // while drafting: rounds between serial probes; doubles while drafting wins
  int max_probe_every = 1024;
  // What a drafted probe may cost: when drafting loses, the next probe waits at least until its expected
  // loss (probe_rounds x (serial rate / drafted rate - 1) round-equivalents) is this fraction of the rounds
  // in between (up to max_backoff). At 0.9x a 16-round probe costs 1.8 rounds: 356 rounds apart, not 64.
  double probe_budget = 0.005;
  // A drafted probe ends early, still off, once it has min_rounds enabled rounds and they deliver less
  // than serial by this much (far beyond noise: such a probe could only have turned drafting on by luck).
  double probe_abort = 0.1;
  int reference_streams = 8;  // rounds of fewer streams count as streams / reference_streams of a round
  double sure_noise = 2;      // a loss beyond this many standard errors is sure (0: never)
  // A loss deeper than this (and sure) is judged after min_rounds enabled rounds whatever the stream count
  // (a slow drafter at 1 stream would otherwise pay 24 rounds at, say, 0.7x before its verdict).
  double deep_loss = 0.3;
  // The drafted/serial ratio of per-stream rates that counts as even at 8 streams (scaled by 1 - 1/n): the
  // streams' progress spreads (uneven acceptance) and a batch waits for its slowest stream. Unguarded, the
  // simulated bench at 8 streams landed 5-13% below its full rounds' mean rate (docs/drafting.md).
  double spread = 0.07;
  // Two sources draft (context copies and a model drafter): a loss first steps down to context copies
  // alone (DraftSources::Copies) and only a loss of those turns drafting off (see DraftGuard).
  bool model_drafter = false;
};

// What may draft in a round: nothing, context copies alone (the model drafter is skipped: no hidden
// states, no head forward), or every source.
enum class DraftSources { None, Copies, All };

// Per-source verdicts (model_drafter): with two sources a bucket has three states, All -> Copies -> None.
// A loss of the combination (by the rules above, enabled rounds against serial ones) steps down to context
// copies alone, judged afresh against the same serial rounds by the same rules; their loss turns drafting
// off, and drafted probes from off test copies alone. While copies alone draft, a model probe (probe_rounds
// rounds of every source) comes after a backoff (doubling while it loses, sure losses wait max_backoff, a
// loss within noise is re-probed one base backoff after new streams arrive): the combination comes back
// when its rounds beat copies alone by `margin` (and serial by par + margin). Context copies cost nothing
// to propose and their idle rounds cost nothing (no hidden-state read-back, no head forward), so on text
// where the head loses but copies win (H200 run 80, 1 stream T = 0.7 repetitive: copies alone 1.12x, the
// combination turned off by one verdict 1.00x) the copies' gain is kept. After a sure loss of the
// combination, a loss of copies alone is taken as sure too (no re-probe for new streams before max_backoff).
class DraftGuard {
 public:
  explicit DraftGuard(DraftGuardOptions o = {}) : o_(o) {}
  // What may draft in a round that decodes `streams` streams (may start a probe).
  DraftSources sources(int streams);
  // Whether streams may draft at all: sources(streams) != None.
  bool allow(int streams) { return sources(streams) != DraftSources::None; }
  // Whether sources() will allow any drafting for the next round of `streams` streams (if this one is
  // measured).
  bool allows_next(int streams) const;
  // Whether sources() may answer All for the next round of `streams` streams (the model drafter's inputs,
  // hidden states, are asked for a round ahead).
  bool allows_model_next(int streams) const;
  // A state change, for the log: drafting turned on/off for rounds of `streams` decoding streams; `model`:
  // the model drafter drafts with context copies (false with model_drafter: copies alone, or nothing).
  struct Change {
    bool on;
    int streams;
    double drafted_rate, serial_rate;  // tokens/s per stream, whole-round wall time
    bool model = true;
  };
  // A round of `streams` decoding streams (and nothing else) emitted `tokens` in `seconds` of wall time;
  // `enabled` = allow() said yes for it (streams may draft; whether any proposed does not matter);
  // `could_draft` = some stream's request allowed drafting. The round is on the drafted side when both
  // hold; otherwise serial (rounds where no stream could draft measure the serial rate but do not count
  // toward a backoff or a probe). `proposed` = some stream proposed drafts: the drafted side's verdicts
  // wait for min_rounds such rounds.
  std::optional<Change> observe(int streams, int tokens, double seconds, bool enabled,
                                bool could_draft = true, bool proposed = true);
  // New streams began decoding: after a loss within noise, probe again soon.
  void workload_changed();
  int buckets_off() const;          // stream counts for which drafting is off now
  int buckets_copies_only() const;  // stream counts for which context copies alone draft now
  int64_t switches() const { return switches_; }
  int64_t probe_rounds() const { return probe_rounds_; }
  static int bucket_of(int streams);  // 1..8 exactly, then two buckets per doubling

 private:
  struct Side {
    double tokens = 0, seconds = 0, weight = 0;
    double sum = 0, sum_sq = 0;  // weighted sums of per-round rates and their squares (noise)
    int64_t last = -1;           // round of the latest sample
    double rate() const { return seconds > 0 ? tokens / seconds : 0; }
    double noise() const;  // standard error of the per-round rates' mean, relative to it (1: unknown)
  };
  struct Bucket {
    Side on, off;
    bool drafting = true;
    int64_t rounds = 0;        // measured rounds of this stream count
    int64_t clock = 0;         // measured rounds where some stream could draft (backoffs count these)
    int64_t next_probe = 0;    // while off: clock at which the next drafted probe starts
    int64_t off_since = 0;     // while off: clock at which the current off period began
    int probe_left = 0;        // rounds left in the current probe window (of the other state)
    int on_fresh = 0;          // enabled samples with proposals since drafting was last (re)judged
    bool skip_enabled = true;  // the next enabled round is not measured (new streams: the head catches up)
    bool sure = false;         // while off: the loss was beyond noise (new streams do not hasten a probe)
    int backoff = 0, probe_every = 0;
    double hint = 1;  // drafted/serial ratio of the nearest stream count, until this one has a serial rate
    // Per-source verdicts (model_drafter): `model` = drafting includes the model drafter (All), else
    // context copies alone; while off, what a drafted probe tests. A model probe (from Copies) measures
    // its rounds in `full`.
    bool model = true;
    bool model_probe = false;  // the current probe window is a model probe
    Side full;                 // the model probe's rounds (every source)
    int full_fresh = 0;        // its rounds with proposals
    int64_t model_next = 0;    // while Copies: clock at which the next model probe starts
    int64_t model_since = 0;   // while Copies: clock at which the model drafter was stepped down
    int model_backoff = 0;
    bool model_sure = false;  // the combination's loss was beyond noise
  };
  Bucket& bucket(int streams);
  static double ratio(const Bucket& b);
  double scale(int streams) const;
  double par(int streams) const;
  bool deep_loss(const Bucket& b, int streams)
      const;  // drafting loses by more than deep_loss, surely  // a round's weight in stream-rounds (<= 1)
  void back_off(Bucket& b, int streams);
  std::optional<Change> end_probe(Bucket& b, int streams);
  std::optional<Change> turn(Bucket& b, bool on, int streams);
  std::optional<Change> step_down(Bucket& b, int streams);
  std::optional<Change> end_model_probe(Bucket& b, int streams);
  int wait_after_loss(double on, double off, double p, int backoff, bool& sure, double noise) const;
  DraftGuardOptions o_;
  std::map<int, Bucket> buckets_;
  int64_t switches_ = 0, probe_rounds_ = 0;
};

// Draft padding (EngineOptions::pad_drafts): verify rounds replayable from CUDA graphs. A verify round's
// graph key follows its rows per stream (1 + k_i), which vary per stream and per round, so verify shapes
// rarely recur and run eagerly (~1.5x a replayed round on a launch-bound model). Padding every drafting
// stream's proposal to one bucketed length per round makes the shape recur. Fillers are verified like any
// draft (one equal to the serially sampled token is that token), so the output is unchanged; they only
// cost rows, nearly free while a round is launch-bound.
enum class PadDrafts { Auto, On, Off };
// "auto" | "on" | "off"; throws tf::Error otherwise.
PadDrafts parse_pad_drafts(const std::string& s);
// auto pads while a decode round's measured forward takes less than this: launch-bound (the 7M demo model
// replays a round of 8 streams in ~0.2 ms on an H200; an 8B-shape round takes ~5 ms, where a 4-draft
// verify costs 1.42x a decode round at batch 8 and padding would cost real time).
constexpr double kPadDraftsMaxRoundSeconds = 1e-3;
// Whether this round pads: On always, Off never, Auto when the engine replays CUDA graphs and the measured
// forward of a decode round (0 = not measured yet: no) is below kPadDraftsMaxRoundSeconds.
bool pad_drafts_now(PadDrafts mode, bool graphs_replayed, double decode_round_seconds);
// The round's proposal length: the smallest of 1, 2, 4, 8, ... >= `longest`, at most `max_draft`
// (0 when nothing was proposed: the round does not pad).
int padded_draft_length(int longest, int max_draft);
// Pads `drafts` to `k` tokens with its last token, or with `last` (the stream's last token) when empty.
void pad_proposal(std::vector<int32_t>& drafts, int k, int32_t last);
// Records a verified proposal whose first `proposed` tokens were proposed (the rest fillers) and whose
// first `accepted` tokens were accepted: the stats learn the drafter's acceptance from its own tokens only
// (fillers would drag the estimate down); a proposal of fillers alone records nothing.
void record_proposal(DraftStats& s, int proposed, int accepted);

}  // namespace tf

#include "engine/draft_policy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

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

int DraftGuard::bucket_of(int streams) {
  if (streams <= 8) return std::max(1, streams);
  int k = 3;  // 2^k <= streams < 2^(k+1)
  while ((streams >> (k + 1)) > 0) ++k;
  const bool upper = streams >= (1 << k) + (1 << (k - 1));
  return 9 + 2 * (k - 3) + (upper ? 1 : 0);
}

double DraftGuard::Side::noise() const {
  if (weight < 2) return 1;
  const double mean = sum / weight, var = std::max(0.0, sum_sq / weight - mean * mean);
  return mean > 0 ? std::sqrt(var / weight) / mean : 1;
}

double DraftGuard::ratio(const Bucket& b) {
  if (b.on.weight > 0 && b.off.rate() > 0) return b.on.rate() / b.off.rate();
  return b.hint;
}

// Streams accept unevenly, so drafting spreads their progress, and whoever waits for all of them (a batch,
// the bench, a client's parallel requests) waits for the slowest: at n > 1 streams drafting breaks even
// only when the mean rate beats serial by `spread` (at 8 streams; scaled by 1 - 1/n, 0 at one stream).
double DraftGuard::par(int streams) const {
  if (streams <= 1) return 1;
  return 1 + o_.spread * (1 - 1.0 / streams) / (1 - 1.0 / 8);
}

bool DraftGuard::deep_loss(const Bucket& b, int streams) const {
  const double on = b.on.rate(), off = b.off.rate(), p = par(streams);
  return off > 0 && on < off * (p - o_.deep_loss) && p - on / off > o_.sure_noise * b.on.noise();
}

double DraftGuard::scale(int streams) const {
  return o_.reference_streams > 0 ? std::min(1.0, double(streams) / o_.reference_streams) : 1.0;
}

DraftGuard::Bucket& DraftGuard::bucket(int streams) {
  const int key = bucket_of(streams);
  auto [it, fresh] = buckets_.try_emplace(key);
  if (fresh) {
    Bucket& b = it->second;
    b.backoff = o_.backoff;
    b.model_backoff = o_.backoff;
    b.probe_every = o_.probe_every;
    // A round of a stream or two more or fewer costs about the same: the nearest known count's verdict
    // holds here first. Off: a drafted probe after one base backoff (or sooner, after a workload change).
    // (Two buckets away only among the exact counts 1..8: beyond, a bucket spans up to half a doubling.)
    for (int k : {key + 1, key - 1, key + 2, key - 2}) {
      if ((k == key + 2 || k == key - 2) && std::max(k, key) > 8) continue;
      auto n = buckets_.find(k);
      if (n == buckets_.end()) continue;
      // Copies alone there: here too, with a model probe after one base backoff.
      b.model = n->second.model;
      if (!b.model) b.model_next = o_.backoff;
      if (n->second.drafting) {
        b.hint = ratio(n->second);
      } else {
        b.drafting = false;
        b.next_probe = o_.backoff;
      }
      break;
    }
  }
  return it->second;
}

// Drafting lost: off until the next drafted probe. After a sure loss (beyond noise) that is max_backoff
// rounds; otherwise at least one backoff (doubling while it keeps losing) and at least long enough that the
// probe's expected loss stays within probe_budget of the rounds between.
void DraftGuard::back_off(Bucket& b, int streams) {
  int wait = wait_after_loss(b.on.rate(), b.off.rate(), par(streams), b.backoff, b.sure, b.on.noise());
  // Copies alone losing after a sure loss of the combination: sure too (their window is a few rounds,
  // often within noise, and a probe costs new streams more than its rounds: re-probed at every workload
  // change, 8 streams at T = 0.7 with an eager head lost up to 10% of a run, tests/engine/test_guard_sim).
  if (!b.model && b.model_sure && !b.sure) {
    b.sure = true;
    wait = std::max(wait, o_.max_backoff);
  }
  b.off_since = b.clock;
  b.next_probe = b.clock + wait;
  b.backoff = std::min(2 * b.backoff, o_.max_backoff);
}

// Rounds until the next probe of a state whose rounds (rate `on`, relative noise `noise`) lost to the
// reference's (`off`, break-even at `p` x): the backoff, max_backoff after a sure loss, and at least long
// enough that the probe's expected loss stays within probe_budget of the rounds between.
int DraftGuard::wait_after_loss(double on, double off, double p, int backoff, bool& sure,
                                double noise) const {
  sure = o_.sure_noise > 0 && on > 0 && on < off * (p - o_.margin) && p - on / off > o_.sure_noise * noise;
  int wait = sure ? std::max(o_.max_backoff, backoff) : backoff;
  if (on > 0 && off > on && o_.probe_budget > 0) {
    const double loss = o_.probe_rounds * (off / on - 1) / o_.probe_budget;
    wait = int(std::clamp(loss, double(wait), double(std::max(o_.max_backoff, wait))));
  }
  return wait;
}

DraftSources DraftGuard::sources(int streams) {
  Bucket& b = bucket(streams);
  const DraftSources level = b.model ? DraftSources::All : DraftSources::Copies;
  if (b.probe_left > 0) {  // probing the other state
    if (b.model_probe) return DraftSources::All;
    return b.drafting ? DraftSources::None : level;
  }
  if (!b.drafting) {
    if (b.clock < b.next_probe) return DraftSources::None;
    b.probe_left = o_.probe_rounds;  // a drafted probe, measured afresh
    b.on = {};
    b.on_fresh = 0;
    return level;
  }
  // Copies alone: a model probe (every source, measured apart) once its backoff is over.
  if (!b.model && b.clock >= b.model_next) {
    b.probe_left = o_.probe_rounds;
    b.model_probe = true;
    b.full = {};
    b.full_fresh = 0;
    return DraftSources::All;
  }
  // Drafting: a serial probe when the serial rate is unknown or old. The more drafting wins, the rarer
  // (a serial round then costs the most and a reversal is the least likely). Without a serial rate of its
  // own, the nearest stream count's ratio (hint) says how much drafting wins. The age is counted in
  // stream-rounds, as the forgetting is: a serial rate of one stream is forgotten 8x slower, and a probe
  // every ~100 rounds cost 1 stream on repetitive text 4-8% of its gain (tests/engine/test_guard_sim); a
  // first probe after 6 rounds of the last stream of a batch cost 8 streams at T = 0 10-20% of theirs.
  const double r = ratio(b);
  const double every = double(b.probe_every) * std::clamp(r * r, 1.0, 16.0);
  const double age = double(b.off.last < 0 ? b.rounds : b.rounds - b.off.last) * scale(streams);
  const bool due =
      b.off.last < 0 ? age >= std::max(double(o_.min_rounds), b.hint > 1 ? every : 0) : age >= every;
  if (!due) return level;
  b.probe_left = o_.probe_rounds;
  b.off = {};
  return DraftSources::None;
}

bool DraftGuard::allows_next(int streams) const {
  auto it = buckets_.find(bucket_of(streams));
  if (it == buckets_.end()) return true;
  const Bucket& b = it->second;
  if (b.drafting)  // a serial probe reads none but its last
    return b.model_probe || b.probe_left == 0 || b.probe_left == 1;
  return b.probe_left > 0 || b.clock + 1 >= b.next_probe;
}

bool DraftGuard::allows_model_next(int streams) const {
  auto it = buckets_.find(bucket_of(streams));
  if (it == buckets_.end()) return true;
  const Bucket& b = it->second;
  if (b.model) return allows_next(streams);
  if (!b.drafting) return false;  // a drafted probe from off tests copies alone
  if (b.probe_left > 0) return b.model_probe;
  return b.clock + 1 >= b.model_next;
}

std::optional<DraftGuard::Change> DraftGuard::observe(int streams, int tokens, double seconds, bool enabled,
                                                      bool could_draft, bool proposed) {
  if (streams <= 0 || seconds <= 0) return std::nullopt;
  Bucket& b = bucket(streams);
  // A round where some stream could draft but the guard did not allow it is serial (off); one the guard
  // allowed is on, whether or not a stream proposed: an enabled round pays drafting's costs (the hidden
  // states for the MTP head, the drafter's host work, the head's catch-up when it next drafts) either way.
  enabled = enabled && could_draft;
  // New streams' first enabled round also pays the MTP head's catch-up over their prompts: a cost of the
  // streams, not of drafting, which would otherwise weigh on the first verdict (at T = 0 too).
  if (enabled && b.skip_enabled) {
    b.skip_enabled = false;
    return std::nullopt;
  }
  // Forgetting and evidence in stream-rounds (see DraftGuardOptions::reference_streams).
  const double w = scale(streams), decay = std::pow(o_.decay, w);
  const int min_rounds = int(std::ceil(o_.min_rounds / w));
  for (Side* s : {&b.on, &b.off, &b.full}) {
    s->tokens *= decay;
    s->seconds *= decay;
    s->weight *= decay;
    s->sum *= decay;
    s->sum_sq *= decay;
  }
  const bool model_probe = b.model_probe && b.probe_left > 0;
  Side& s = !enabled ? b.off : model_probe ? b.full : b.on;
  const double per_stream = double(tokens) / streams, r = per_stream / seconds;
  s.tokens += per_stream;
  s.seconds += seconds;
  s.weight += 1;
  s.sum += r;
  s.sum_sq += r * r;
  s.last = b.rounds++;
  if (could_draft) ++b.clock;
  // Verdicts wait for enough rounds that verified proposals: the rate is the enabled rounds', but a
  // verdict on rounds where the drafter mostly proposed nothing would rest on a handful of proposals (1
  // stream's first 24 enabled rounds held 9 in tests/engine/test_guard_sim, most of them paying verify
  // shapes not captured yet, and turned drafting off for a run that it won 1.7x).
  if (enabled && proposed) ++(model_probe ? b.full_fresh : b.on_fresh);
  if (b.probe_left > 0) {
    // A drafted probe counts enabled rounds only: a round where no stream could draft (`draft: false`
    // requests) tells nothing about drafting and costs nothing.
    if ((!b.drafting || model_probe) && !enabled) return std::nullopt;
    ++probe_rounds_;
    --b.probe_left;
    if (model_probe) {
      // Losing far beyond noise against copies alone: ends now.
      const double copies = b.on.rate(), full = b.full.rate();
      if (b.probe_left > 0 && copies > 0 &&
          ((b.full_fresh >= min_rounds && full < copies * (1 - o_.probe_abort)) ||
           (b.full_fresh >= o_.min_rounds && full < copies * (1 - o_.deep_loss))))
        b.probe_left = 0;
      return b.probe_left == 0 ? end_model_probe(b, streams) : std::nullopt;
    }
    // A drafted probe losing far beyond noise ends now (it cannot turn drafting on but by luck).
    if (!b.drafting && b.probe_left > 0 &&
        ((b.on_fresh >= min_rounds && b.on.rate() < b.off.rate() * (par(streams) - o_.probe_abort)) ||
         (b.on_fresh >= o_.min_rounds && deep_loss(b, streams))))
      b.probe_left = 0;
    return b.probe_left == 0 ? end_probe(b, streams) : std::nullopt;
  }
  // Drafting, with a recent serial rate to compare against: judged every enabled round once there are
  // enough of them that one slow round (noise) cannot decide. A loss beyond probe_abort is judged after
  // half as many rounds, a deep one (deep_loss) after min_rounds rounds of any stream count.
  if (b.drafting && enabled && b.off.weight > 0.5 &&
      b.on.rate() < b.off.rate() * (par(streams) - o_.margin)) {
    const bool clear = b.on.rate() < b.off.rate() * (par(streams) - o_.probe_abort);
    const int need = clear ? std::max(1, min_rounds / 2) : min_rounds;
    if (b.on_fresh >= need || (b.on_fresh >= o_.min_rounds && deep_loss(b, streams)))
      return turn(b, false, streams);
  }
  return std::nullopt;
}

std::optional<DraftGuard::Change> DraftGuard::end_probe(Bucket& b, int streams) {
  if (b.drafting) {  // a serial probe
    if (b.on.weight > 0 && b.off.weight > 0 && b.on.rate() < b.off.rate() * (par(streams) - o_.margin))
      return turn(b, false, streams);
    b.probe_every = std::min(2 * b.probe_every, o_.max_probe_every);  // drafting holds: check less often
    b.backoff = o_.backoff;
    return std::nullopt;
  }
  // A drafted probe: on only when its enabled rounds clearly win (proposals or not: they all paid).
  if (b.on_fresh > 0 && b.on.rate() > b.off.rate() * (par(streams) + o_.margin))
    return turn(b, true, streams);
  back_off(b, streams);
  return std::nullopt;
}

// A model probe ended: every source comes back when its rounds beat copies alone by `margin` (and serial
// by par + margin); otherwise copies alone go on and the next model probe waits (as back_off, with copies
// alone as the reference).
std::optional<DraftGuard::Change> DraftGuard::end_model_probe(Bucket& b, int streams) {
  b.model_probe = false;
  const double full = b.full.rate(), copies = b.on.rate(), off = b.off.rate();
  if (b.full_fresh > 0 && full > copies * (1 + o_.margin) && full > off * (par(streams) + o_.margin)) {
    b.model = true;
    b.on = b.full;
    b.on_fresh = b.full_fresh;
    b.full = {};
    b.probe_every = o_.probe_every;
    b.model_sure = false;
    b.model_backoff = o_.backoff;
    ++switches_;
    return Change{true, streams, full, off, true};
  }
  b.model_since = b.clock;
  b.model_next = b.clock + wait_after_loss(full, copies, 1, b.model_backoff, b.model_sure, b.full.noise());
  b.model_backoff = std::min(2 * b.model_backoff, o_.max_backoff);
  b.full = {};
  return std::nullopt;
}

// The combination lost: context copies alone go on, judged afresh against the same serial rounds; a model
// probe comes after a backoff (as back_off's for drafting).
std::optional<DraftGuard::Change> DraftGuard::step_down(Bucket& b, int streams) {
  const double on = b.on.rate(), off = b.off.rate();
  b.model = false;
  b.model_since = b.clock;
  b.model_next =
      b.clock + wait_after_loss(on, off, par(streams), b.model_backoff, b.model_sure, b.on.noise());
  b.model_backoff = std::min(2 * b.model_backoff, o_.max_backoff);
  b.on = {};
  b.on_fresh = 0;
  b.probe_left = 0;
  b.probe_every = o_.probe_every;
  ++switches_;
  return Change{true, streams, on, off, false};
}

std::optional<DraftGuard::Change> DraftGuard::turn(Bucket& b, bool on, int streams) {
  if (!on && b.model && o_.model_drafter) return step_down(b, streams);
  b.drafting = on;
  b.on_fresh = 0;
  b.probe_left = 0;
  ++switches_;
  if (on) {
    b.probe_every = o_.probe_every;
    b.sure = false;
    if (!b.model) b.model_next = std::max(b.model_next, b.clock + o_.backoff);
  } else {
    back_off(b, streams);
  }
  return Change{on, streams, b.on.rate(), b.off.rate(), on && b.model};
}

void DraftGuard::workload_changed() {
  for (auto& [key, b] : buckets_) {
    // A drafted rate mostly forgotten (a serial stretch) is judged on drafted rounds of the new workload
    // only: it would otherwise be set by the first new round. A recent one stays (busy servers have new
    // streams every few rounds: drafting must still be judged).
    if (b.on.weight < o_.min_rounds) b.on_fresh = 0;
    b.skip_enabled = true;
    // The drafted rate is the old workload's: it keeps at most min_rounds stream-rounds of weight, so that
    // the new one's rounds soon dominate it (one stream's free text after a repetitive request otherwise
    // drafted at a loss for ~150 rounds while the repetitive rate was forgotten).
    const double cap = o_.min_rounds / scale(std::min(key, 8));  // buckets above 8: at least 8 streams
    if (b.drafting && b.on.weight > cap) {
      const double f = cap / b.on.weight;
      b.on.tokens *= f, b.on.seconds *= f, b.on.weight *= f, b.on.sum *= f, b.on.sum_sq *= f;
    }
    // Copies alone after a loss of the combination within noise: the model probe comes no later than one
    // base backoff after the step down (as drafting's, below).
    if (b.drafting && !b.model && !b.model_probe && !b.model_sure) {
      b.model_next = std::max(b.clock + 1, std::min(b.model_next, b.model_since + o_.backoff));
      b.model_backoff = o_.backoff;
    }
    // A sure loss stands: new streams are mostly more of the same, and a probe costs them more than its
    // rounds (their catch-up, their progress spread). Any change is still found within max_backoff.
    if (b.drafting || b.probe_left > 0 || b.sure) continue;
    // The current off period ends no later than one base backoff after it began (and not before the next
    // round but one: the drafter's inputs are asked for a round ahead).
    b.next_probe = std::max(b.clock + 1, std::min(b.next_probe, b.off_since + o_.backoff));
    b.backoff = o_.backoff;
  }
}

int DraftGuard::buckets_off() const {
  int n = 0;
  for (const auto& [key, b] : buckets_) n += b.drafting ? 0 : 1;
  return n;
}

int DraftGuard::buckets_copies_only() const {
  int n = 0;
  for (const auto& [key, b] : buckets_) n += b.drafting && !b.model ? 1 : 0;
  return n;
}

PadDrafts parse_pad_drafts(const std::string& s) {
  if (s == "auto") return PadDrafts::Auto;
  if (s == "on") return PadDrafts::On;
  if (s == "off") return PadDrafts::Off;
  throw Error("--pad-drafts must be auto, on or off (got '" + s + "')");
}

bool pad_drafts_now(PadDrafts mode, bool graphs_replayed, double decode_round_seconds) {
  if (mode != PadDrafts::Auto) return mode == PadDrafts::On;
  return graphs_replayed && decode_round_seconds > 0 && decode_round_seconds < kPadDraftsMaxRoundSeconds;
}

int padded_draft_length(int longest, int max_draft) {
  if (longest <= 0) return 0;
  int k = 1;
  while (k < longest) k *= 2;
  return std::max(longest, std::min(k, max_draft));
}

void pad_proposal(std::vector<int32_t>& drafts, int k, int32_t last) {
  const int32_t filler = drafts.empty() ? last : drafts.back();
  if (int(drafts.size()) < k) drafts.resize(size_t(k), filler);
}

void record_proposal(DraftStats& s, int proposed, int accepted) {
  if (proposed > 0) s.record(proposed, std::min(accepted, proposed));
}

}  // namespace tf

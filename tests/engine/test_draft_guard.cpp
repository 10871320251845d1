// DraftGuard with injected round timings: it switches model drafting off when drafted rounds deliver fewer
// tokens per second than serial ones, back on when they deliver more, and its probes stay cheap.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/draft_policy.h"
#include "engine/drafters/drafter.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "stream_output.h"

namespace tf {
namespace {

// A workload: a serial round of `streams` streams takes `serial_s` and emits one token per stream; a
// drafted round takes `drafted_s` and emits `gain` tokens per stream. Times carry +-`noise` jitter.
struct Workload {
  int streams = 8;
  double serial_s = 1e-3, drafted_s = 1e-3, gain = 1.0, noise = 0.1;
};

class Sim {
 public:
  DraftGuard guard;
  int64_t rounds = 0, drafted_rounds = 0, unannounced = 0;
  bool predicted = true;
  double tokens = 0, seconds = 0;
  std::vector<DraftGuard::Change> changes;

  void run(const Workload& w, int count) {
    for (int i = 0; i < count; ++i) {
      const bool d = guard.allow(w.streams);
      // The engine asks for the drafter's inputs (hidden states) one round ahead: never too late.
      if (d && !predicted) ++unannounced;
      predicted = guard.allows_next(w.streams);
      const int t = d ? int(w.streams * w.gain + 0.5) : w.streams;
      const double s = (d ? w.drafted_s : w.serial_s) * (1 + w.noise * (2 * uniform() - 1));
      if (auto c = guard.observe(w.streams, t, s, d)) changes.push_back(*c);
      ++rounds;
      drafted_rounds += d;
      tokens += t;
      seconds += s;
    }
  }
  void reset_totals() { rounds = drafted_rounds = 0, tokens = seconds = 0; }
  double rate() const { return tokens / seconds; }

 private:
  double uniform() {  // deterministic xorshift
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return double(state_ >> 11) / double(1ull << 53);
  }
  uint64_t state_ = 0x9e3779b97f4a7c15ull;
};

// The case: 8 streams at temperature 0.7, 1.25 tokens per step for 1.42x the round time (0.88x).
const Workload kSlower{8, 1e-3, 1.42e-3, 1.25, 0.1};
const Workload kFaster{8, 1e-3, 1.1e-3, 2.0, 0.1};  // 1.8x

TEST(DraftGuard, SwitchesOffWhenDraftedRoundsAreSlower) {
  Sim sim;
  sim.run(kSlower, 3000);
  ASSERT_FALSE(sim.changes.empty());
  EXPECT_FALSE(sim.changes.front().on);
  EXPECT_LT(sim.changes.front().drafted_rate, sim.changes.front().serial_rate);
  EXPECT_EQ(sim.guard.buckets_off(), 1);
  EXPECT_LT(double(sim.drafted_rounds), 0.05 * double(sim.rounds));
  // What matters: within noise of serial (8 tokens per ms).
  EXPECT_GT(sim.rate(), 0.98 * 8 / 1e-3);
}

TEST(DraftGuard, StaysOnWhenDraftedRoundsAreFaster) {
  Sim sim;
  sim.run(kFaster, 3000);
  for (const auto& c : sim.changes)
    EXPECT_TRUE(c.on) << "switched off at " << c.drafted_rate << " vs " << c.serial_rate;
  EXPECT_EQ(sim.guard.buckets_off(), 0);
  // Serial probes are bounded: well under 10% of rounds, and the throughput close to drafting's.
  EXPECT_LT(double(sim.rounds - sim.drafted_rounds), 0.03 * double(sim.rounds));
  EXPECT_GT(sim.rate(), 0.97 * 8 * 2.0 / 1.1e-3);
}

TEST(DraftGuard, SerialRoundsOfOtherStreamsCountAsTheBaseline) {
  // A serial run first (requests with draft off) gives the baseline: drafting is judged after a few rounds.
  Sim sim;
  Workload serial = kSlower;
  serial.drafted_s = serial.serial_s, serial.gain = 1;
  for (int i = 0; i < 200; ++i) sim.guard.observe(8, 8, 1e-3, false);
  sim.run(kSlower, 20);
  ASSERT_EQ(sim.changes.size(), 1u);
  EXPECT_FALSE(sim.changes[0].on);
  EXPECT_LE(sim.drafted_rounds, 8);
}

// After a loss within noise, new streams (say greedy ones) bring a probe within one base backoff, which
// finds drafting pays.
TEST(DraftGuard, TurnsBackOnSoonAfterALossWithinNoise) {
  const Workload noisy{8, 1e-3, 1.1e-3, 1.0, 0.9};  // 0.91x, +-90% jitter a round
  Sim sim;
  for (int i = 0; i < 3000 && sim.guard.buckets_off() == 0; ++i) sim.run(noisy, 1);
  ASSERT_EQ(sim.guard.buckets_off(), 1);
  sim.run(noisy, 200);  // off for a while: without new streams, no probe before the backoff
  ASSERT_EQ(sim.guard.buckets_off(), 1);
  sim.guard.workload_changed();
  sim.reset_totals();
  sim.changes.clear();
  sim.run(kFaster, 80);
  EXPECT_EQ(sim.guard.buckets_off(), 0);
  ASSERT_FALSE(sim.changes.empty());
  EXPECT_TRUE(sim.changes.back().on);
  EXPECT_GT(sim.changes.back().drafted_rate, sim.changes.back().serial_rate);
}

// After a sure loss (beyond noise), new streams do not bring a probe: each probe costs new streams more than
// its rounds (tests/engine/test_guard_sim). A change is still found within max_backoff and a probe.
TEST(DraftGuard, ASureLossIsNotReprobedForNewStreams) {
  // The same rounds with new streams every 50 rounds, without them, and with them but no loss ever sure.
  DraftGuardOptions never_sure;
  never_sure.sure_noise = 0;
  Sim told, untold, hasty;
  hasty.guard = DraftGuard(never_sure);
  for (Sim* s : {&told, &untold, &hasty}) s->run(kSlower, 3000);
  ASSERT_EQ(told.guard.buckets_off(), 1);
  for (Sim* s : {&told, &untold, &hasty}) s->reset_totals();
  for (int i = 0; i < 40; ++i) {
    for (Sim* s : {&told, &hasty}) s->guard.workload_changed();
    for (Sim* s : {&told, &untold, &hasty}) s->run(kSlower, 50);
  }
  // (a new stream's first drafted round is not measured: a probe may take one round more)
  EXPECT_LE(told.drafted_rounds, untold.drafted_rounds + 3);
  EXPECT_LT(double(told.drafted_rounds), 0.01 * double(told.rounds));
  EXPECT_GT(hasty.drafted_rounds, 3 * told.drafted_rounds);
  told.guard.workload_changed();
  told.run(kFaster, 1100);
  EXPECT_EQ(told.guard.buckets_off(), 0);
  EXPECT_TRUE(told.changes.back().on);
}

TEST(DraftGuard, ProbesFindAChangeWithoutBeingTold) {
  Sim sim;
  sim.run(kSlower, 3000);
  ASSERT_EQ(sim.guard.buckets_off(), 1);
  sim.reset_totals();
  sim.run(kFaster, 1100);  // at most the longest backoff (1024) plus a probe
  EXPECT_EQ(sim.guard.buckets_off(), 0);
  EXPECT_TRUE(sim.changes.back().on);
}

TEST(DraftGuard, LongOffPeriodsProbeRarely) {
  Sim sim;
  sim.run(kSlower, 20000);
  // Backoff doubles to 1024 rounds: probes cost a handful of rounds per thousand.
  EXPECT_LT(double(sim.guard.probe_rounds()), 0.02 * double(sim.rounds));
  EXPECT_LE(sim.guard.switches(), 1);
}

TEST(DraftGuard, NoiseDoesNotFlipItEveryRound) {
  Sim sim;
  Workload even{8, 1e-3, 1.5e-3, 1.5, 0.25};  // the same rate either way, +-25% jitter
  sim.run(even, 5000);
  EXPECT_LT(sim.guard.switches() * 100, sim.rounds);
  EXPECT_GT(sim.rate(), 0.97 * 8 / 1e-3);
}

TEST(DraftGuard, StreamCountsAreJudgedSeparately) {
  Sim sim;
  Workload one{1, 0.3e-3, 0.36e-3, 1.5, 0.1};  // one stream: drafting pays 1.25x
  for (int i = 0; i < 300; ++i) {
    sim.run(kSlower, 5);
    sim.run(one, 5);
  }
  EXPECT_EQ(sim.guard.buckets_off(), 1);
  EXPECT_TRUE(sim.guard.allow(1));
  for (const auto& c : sim.changes) EXPECT_EQ(c.streams, 8);
}

TEST(DraftGuard, DraftedRoundsAreAnnouncedARoundAhead) {
  Sim sim;
  for (int i = 0; i < 10; ++i) {
    sim.run(kSlower, 400);
    sim.guard.workload_changed();
    sim.run(kFaster, 1100);  // a sure loss: found within max_backoff
  }
  EXPECT_GE(sim.guard.switches(), 19);
  EXPECT_EQ(sim.unannounced, 0);
}

// Streams finishing one by one: a stream count next to one where drafting lost starts off, instead of
// paying a first window of drafted rounds at every count of the tail.
TEST(DraftGuard, NewStreamCountStartsOffNextToALosingOne) {
  Sim sim;
  sim.run(kSlower, 200);
  ASSERT_EQ(sim.guard.buckets_off(), 1);
  Workload seven = kSlower;
  seven.streams = 7;
  sim.reset_totals();
  sim.run(seven, 30);
  EXPECT_EQ(sim.drafted_rounds, 0);
  EXPECT_EQ(sim.guard.buckets_off(), 2);
  // Not next to it: judged afresh (drafting starts on; a serial probe after min_rounds measures serial).
  Workload three = kFaster;
  three.streams = 3;
  sim.reset_totals();
  sim.run(three, 30);
  EXPECT_GT(sim.drafted_rounds, DraftGuardOptions{}.min_rounds);
}

// The deeper drafting loses, the longer until the next drafted probe; a probe losing far beyond noise ends
// early; and both still come back within max_backoff when drafting pays again.
TEST(DraftGuard, BackoffGrowsWithTheLoss) {
  const Workload mild{8, 1e-3, 1.1e-3, 1.0, 0.0};  // 0.91x
  const Workload deep{8, 1e-3, 2e-3, 1.0, 0.0};    // 0.5x
  DraftGuardOptions o;
  o.sure_noise = 0;  // without noise every loss is sure (max_backoff): here the budget decides
  Sim a, b;
  a.guard = DraftGuard(o);
  b.guard = DraftGuard(o);
  a.run(mild, 1000);
  b.run(deep, 1000);
  EXPECT_EQ(a.guard.buckets_off(), 1);
  EXPECT_EQ(b.guard.buckets_off(), 1);
  EXPECT_LT(b.drafted_rounds, a.drafted_rounds);
  // 0.5x: the first window (min_rounds measured, the first round not: new streams) and no probe within
  // 1000 rounds (16 x 1.0 / probe_budget 0.005 > max_backoff).
  EXPECT_LE(b.drafted_rounds, DraftGuardOptions{}.min_rounds + 1);
  b.reset_totals();
  b.run(kFaster, 1100);
  EXPECT_EQ(b.guard.buckets_off(), 0);
}

TEST(DraftGuard, ALosingProbeEndsEarly) {
  const Workload deep{8, 1e-3, 2e-3, 1.0, 0.0};
  DraftGuardOptions o;
  o.max_backoff = o.backoff;  // probes every 64 rounds whatever the loss
  o.probe_budget = 0;
  Sim sim;
  sim.guard = DraftGuard(o);
  sim.run(deep, 64 * 10);
  // Each probe stops after min_rounds drafted rounds instead of probe_rounds.
  EXPECT_LT(double(sim.drafted_rounds), 10.0 * (o.min_rounds + 1));
  EXPECT_GT(sim.drafted_rounds, 3 * o.min_rounds);
}

// New streams: their first drafted round (the head's catch-up over their prompts) is not measured, and
// drafting is judged on drafted rounds of the new workload only.
TEST(DraftGuard, FirstDraftedRoundOfNewStreamsIsNotMeasured) {
  DraftGuard g;
  for (int i = 0; i < 100; ++i) g.observe(8, 8, 1e-3, false);
  g.workload_changed();
  EXPECT_TRUE(g.allow(8));
  EXPECT_FALSE(g.observe(8, 8, 50e-3, true));  // 50x slower: a catch-up, not drafting
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(g.allow(8));
    EXPECT_FALSE(g.observe(8, 16, 1.2e-3, true)) << i;  // 1.67x
  }
  EXPECT_EQ(g.buckets_off(), 0);
}

// A busy server: new streams every few rounds still leave drafting judged (the drafted rate is recent).
TEST(DraftGuard, NewStreamsEveryFewRoundsStillSwitchALosingDrafterOff) {
  Sim sim;
  for (int i = 0; i < 200; ++i) sim.guard.observe(8, 8, 1e-3, false);  // a serial baseline: no serial probe
  for (int i = 0; i < 15; ++i) {
    sim.run(kSlower, 3);
    sim.guard.workload_changed();
  }
  EXPECT_EQ(sim.guard.buckets_off(), 1);
  EXPECT_LT(sim.drafted_rounds, 20);
}

// Rounds where no stream could draft (requests with drafting off) neither advance a backoff nor end a
// drafted probe: the guard's verdict did not apply to them.
TEST(DraftGuard, RoundsThatCannotDraftDoNotCount) {
  Sim sim;
  sim.run(kSlower, 200);
  ASSERT_EQ(sim.guard.buckets_off(), 1);
  for (int i = 0; i < 5000; ++i) {
    ASSERT_FALSE(sim.guard.allow(8));
    sim.guard.observe(8, 8, 1e-3, false, false);
  }
  // Rounds that could draft bring the probe; its serial rounds (no stream's own policy drafted) leave it
  // open.
  int waited = 0;
  while (!sim.guard.allow(8)) {
    sim.guard.observe(8, 8, 1e-3, false);
    ASSERT_LT(++waited, 2000);
  }
  const int64_t probed = sim.guard.probe_rounds();
  for (int i = 0; i < 100; ++i) {
    EXPECT_TRUE(sim.guard.allow(8));
    sim.guard.observe(8, 8, 1e-3, false);
  }
  EXPECT_EQ(sim.guard.probe_rounds(), probed);
  EXPECT_EQ(sim.guard.buckets_off(), 1);
}

// A round of one stream weighs an eighth of a round of eight (one stream's acceptance comes in phases): a
// mild loss at 1 stream is judged after 8 x min_rounds drafted rounds, not min_rounds.
TEST(DraftGuard, OneStreamIsJudgedOnMoreRounds) {
  const Workload one{1, 1e-3, 1.08e-3, 1.0, 0.0};  // 0.93x: not a clear loss
  Sim sim;
  for (int i = 0; i < 100; ++i) sim.guard.observe(1, 1, 1e-3, false);
  sim.guard.workload_changed();
  sim.run(one, 40);
  EXPECT_EQ(sim.guard.buckets_off(), 0);
  sim.run(one, 20);
  EXPECT_EQ(sim.guard.buckets_off(), 1);
}

// A deep loss (beyond deep_loss and beyond noise) is judged after min_rounds drafted rounds even at 1 stream:
// a slow drafter does not pay 24 rounds at 0.5x first.
TEST(DraftGuard, ADeepLossIsJudgedSoonAtOneStream) {
  const Workload slow{1, 1e-3, 2e-3, 1.0, 0.1};  // 0.5x
  Sim sim;
  for (int i = 0; i < 100; ++i) sim.guard.observe(1, 1, 1e-3, false);
  sim.guard.workload_changed();
  sim.run(slow, DraftGuardOptions{}.min_rounds + 2);  // + the unmeasured first round, + one
  EXPECT_EQ(sim.guard.buckets_off(), 1);
}

// A stream count seen for the first time next to one where drafting wins takes its ratio: no serial probe
// after min_rounds (at T = 0 such probes in the bench's tail cost 8 streams 10-30% of the gain).
TEST(DraftGuard, NewStreamCountTakesAWinningNeighboursRatio) {
  Sim sim;
  sim.run(kFaster, 500);
  ASSERT_EQ(sim.guard.buckets_off(), 0);
  Workload seven = kFaster;
  seven.streams = 7;
  sim.reset_totals();
  sim.run(seven, 100);
  EXPECT_EQ(sim.drafted_rounds, sim.rounds);
}

// Issue #7 (H200 runs 72-73, 1 stream, T = 0.7, free text): drafting enabled, the MTP head proposed in few
// rounds, and every enabled round paid the hidden states' read-back. Rounds the guard enabled are drafting
// rounds whether or not a stream proposed; judged "rounds with proposals vs all others" the idle enabled
// rounds, slower than serial, became the serial reference and the loss went unseen.
TEST(DraftGuard, IdleEnabledRoundsCountAsDrafting) {
  DraftGuard g;
  for (int i = 0; i < 200; ++i) g.observe(8, 8, 1e-3, false);  // serial: 1 token per stream per ms
  g.workload_changed();
  int enabled = 0;
  for (int i = 0; i < 400 && g.buckets_off() == 0; ++i) {
    if (!g.allow(8)) {
      g.observe(8, 8, 1e-3, false);
      continue;
    }
    ++enabled;
    // One round in five proposes and breaks even with serial; the others propose nothing and pay 8% more.
    const bool proposed = i % 5 == 0;
    g.observe(8, proposed ? 12 : 8, proposed ? 1.5e-3 : 1.08e-3, true, true, proposed);
  }
  EXPECT_EQ(g.buckets_off(), 1);
  EXPECT_LT(enabled, 100);
}

// A verdict waits for min_rounds rounds with proposals: enabled rounds where no stream proposed tell the
// drafter's cost but not what its drafts deliver (1 stream's first enabled rounds held few proposals,
// most paying verify shapes not captured yet, and turned drafting off for a run it won).
TEST(DraftGuard, AVerdictWaitsForRoundsWithProposals) {
  const int min_rounds = DraftGuardOptions{}.min_rounds;
  DraftGuard g;
  for (int i = 0; i < 200; ++i) g.observe(8, 8, 1e-3, false);
  g.workload_changed();
  ASSERT_TRUE(g.allow(8));
  g.observe(8, 8, 1e-3, true);  // new streams' first enabled round: not measured
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(g.allow(8));
    EXPECT_FALSE(g.observe(8, 8, 1.3e-3, true, true, false)) << i;  // 0.77x, no proposal
  }
  int proposing = 0;
  while (g.buckets_off() == 0 && proposing < 50) {
    ASSERT_TRUE(g.allow(8));
    g.observe(8, 8, 1.3e-3, true, true, true);
    ++proposing;
  }
  EXPECT_EQ(g.buckets_off(), 1);
  EXPECT_GE(proposing, min_rounds / 2);
  EXPECT_LE(proposing, min_rounds);
}

// At 1 stream the serial rate ages in stream-rounds, as it is forgotten: serial probes come rarer than
// at 8 streams (each one cost 1 stream on repetitive text 4-8% of its gain in test_guard_sim; over 4000
// rounds of a 1.8x drafter: 2 probes against 4).
TEST(DraftGuard, SerialProbesAtOneStreamAreRarer) {
  int64_t serial[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Workload w = kFaster;
    w.streams = k == 0 ? 1 : 8;
    Sim sim;
    sim.run(w, 4000);
    EXPECT_EQ(sim.guard.buckets_off(), 0);
    serial[k] = sim.rounds - sim.drafted_rounds;
  }
  EXPECT_GT(serial[0], 0);  // it still probes
  EXPECT_LE(serial[0] * 2, serial[1]);
}

// New streams cap the drafted rate's memory (min_rounds stream-rounds): a request whose text loses is
// judged on its own rounds sooner than when the previous request's winning rate fades by forgetting alone.
TEST(DraftGuard, NewStreamsCapTheOldDraftedRate) {
  const Workload win{1, 1e-3, 1e-3, 1.5, 0.0}, lose{1, 1e-3, 1.2e-3, 1.0, 0.0};  // 1.5x, then 0.83x
  int64_t judged[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    Sim sim;
    for (int i = 0; i < 100; ++i) sim.guard.observe(1, 1, 1e-3, false);
    sim.run(win, 600);
    ASSERT_EQ(sim.guard.buckets_off(), 0);
    if (k == 1) {
      sim.guard.workload_changed();
      sim.run(win, 1);  // the new stream's first enabled round (not measured)
    }
    sim.reset_totals();
    while (sim.guard.buckets_off() == 0 && sim.rounds < 2000) sim.run(lose, 1);
    judged[k] = sim.rounds;
  }
  EXPECT_LT(judged[1], 2000);
  EXPECT_LT(double(judged[1]), 0.8 * double(judged[0]));
}

// Per-source verdicts (DraftGuardOptions::model_drafter): a round of every source (the model drafter and
// context copies) takes `all_s` and emits `all_gain` tokens per stream, one of context copies alone
// `copies_s` and `copies_gain`, a serial one `serial_s` and one token per stream.
struct TwoSources {
  int streams = 8;
  double serial_s = 1e-3, copies_s = 1e-3, copies_gain = 1, all_s = 1e-3, all_gain = 1, noise = 0.1;
};

class SourcesSim {
 public:
  DraftGuard guard{two_sources()};
  int64_t rounds = 0, all_rounds = 0, copies_rounds = 0, all_unannounced = 0, hidden_rounds = 0;
  double tokens = 0, seconds = 0;
  std::vector<DraftGuard::Change> changes;
  std::vector<DraftSources> trace;

  static DraftGuardOptions two_sources() {
    DraftGuardOptions o;
    o.model_drafter = true;
    return o;
  }
  void run(const TwoSources& w, int count) {
    for (int i = 0; i < count; ++i) {
      const DraftSources d = guard.sources(w.streams);
      // The engine asks for the model drafter's inputs (hidden states) a round ahead: never too late.
      if (d == DraftSources::All && !hidden_) ++all_unannounced;
      hidden_rounds += hidden_;
      hidden_ = guard.allows_model_next(w.streams);
      const double gain = d == DraftSources::All ? w.all_gain : d == DraftSources::Copies ? w.copies_gain : 1;
      const double base = d == DraftSources::All      ? w.all_s
                          : d == DraftSources::Copies ? w.copies_s
                                                      : w.serial_s;
      const int t = int(w.streams * gain + 0.5);
      const double s = base * (1 + w.noise * (2 * uniform() - 1));
      if (auto c = guard.observe(w.streams, t, s, d != DraftSources::None)) changes.push_back(*c);
      ++rounds;
      all_rounds += d == DraftSources::All;
      copies_rounds += d == DraftSources::Copies;
      trace.push_back(d);
      tokens += t;
      seconds += s;
    }
  }
  void reset_totals() { rounds = all_rounds = copies_rounds = hidden_rounds = 0, tokens = seconds = 0; }
  double rate() const { return tokens / seconds; }

 private:
  double uniform() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return double(state_ >> 11) / double(1ull << 53);
  }
  uint64_t state_ = 0x9e3779b97f4a7c15ull;
  bool hidden_ = true;
};

// The H200's case (run 80, 1 stream T = 0.7 repetitive): every source together loses (0.88x), context
// copies alone win (1.3x). The guard steps down to copies alone, keeps them, and rarely probes the model.
const TwoSources kHeadLoses{8, 1e-3, 1e-3, 1.3, 1.42e-3, 1.25, 0.1};

TEST(DraftGuard, ALosingCombinationStepsDownToCopiesAlone) {
  SourcesSim sim;
  sim.run(kHeadLoses, 3000);
  ASSERT_FALSE(sim.changes.empty());
  EXPECT_TRUE(sim.changes.front().on);
  EXPECT_FALSE(sim.changes.front().model);
  EXPECT_LT(sim.changes.front().drafted_rate, sim.changes.front().serial_rate);
  EXPECT_EQ(sim.guard.buckets_off(), 0);
  EXPECT_EQ(sim.guard.buckets_copies_only(), 1);
  for (const auto& c : sim.changes) EXPECT_FALSE(c.model) << "the model drafter came back";
  // Model probes are bounded, and the rate is close to copies alone (10.4 tokens per ms).
  EXPECT_LT(double(sim.all_rounds), 0.05 * double(sim.rounds));
  EXPECT_GT(sim.rate(), 0.95 * 8 * 1.3 / 1e-3);
  // Without a model probe due, rounds of copies alone do not ask for hidden states.
  EXPECT_LT(double(sim.hidden_rounds), 0.06 * double(sim.rounds));
  EXPECT_EQ(sim.all_unannounced, 0);
}

// Without a model drafter (or with one verdict for both, the default) there is no intermediate state.
TEST(DraftGuard, OneSourceHasNoCopiesAloneState) {
  Sim sim;
  sim.run(kSlower, 3000);
  EXPECT_EQ(sim.guard.buckets_copies_only(), 0);
  for (const auto& c : sim.changes) EXPECT_FALSE(c.on && !c.model);
}

// Both lose: copies alone are judged afresh against the same serial rounds and lose too: off. A drafted
// probe from off tests copies alone (never the model drafter), and the run stays near serial.
TEST(DraftGuard, CopiesAloneLosingTooTurnDraftingOff) {
  const TwoSources both_lose{8, 1e-3, 1.3e-3, 1.1, 1.42e-3, 1.25, 0.1};
  SourcesSim sim;
  sim.run(both_lose, 3000);
  ASSERT_GE(sim.changes.size(), 2u);
  EXPECT_TRUE(sim.changes[0].on && !sim.changes[0].model);
  EXPECT_FALSE(sim.changes[1].on);
  EXPECT_EQ(sim.guard.buckets_off(), 1);
  EXPECT_EQ(sim.guard.buckets_copies_only(), 0);
  size_t off_at = 0;
  for (size_t i = 0; i < sim.trace.size() && !off_at; ++i)
    if (i > 0 && sim.trace[i] == DraftSources::None && sim.trace[i - 1] == DraftSources::Copies) off_at = i;
  ASSERT_GT(off_at, 0u);
  for (size_t i = off_at; i < sim.trace.size(); ++i) EXPECT_NE(sim.trace[i], DraftSources::All) << i;
  EXPECT_GT(sim.rate(), 0.97 * 8 / 1e-3);
}

// The text changes (say greedy requests arrive): a model probe, hastened by the new streams after a loss
// within noise, finds every source beating copies alone and brings the model drafter back.
TEST(DraftGuard, AModelProbeBringsTheModelDrafterBack) {
  const TwoSources noisy{8, 1e-3, 1e-3, 1.3, 1.1e-3, 1.0, 0.9};  // combination 0.91x, +-90% jitter
  SourcesSim sim;
  for (int i = 0; i < 3000 && sim.guard.buckets_copies_only() == 0; ++i) sim.run(noisy, 1);
  ASSERT_EQ(sim.guard.buckets_copies_only(), 1);
  const TwoSources greedy{8, 1e-3, 1e-3, 1.3, 1.1e-3, 3.0, 0.1};  // every source 2.7x, copies 1.3x
  sim.run(greedy, 20);  // copies alone for now: the model probe waits for its backoff
  EXPECT_EQ(sim.guard.buckets_copies_only(), 1);
  sim.guard.workload_changed();
  sim.changes.clear();
  sim.run(greedy, 120);
  EXPECT_EQ(sim.guard.buckets_copies_only(), 0);
  ASSERT_FALSE(sim.changes.empty());
  EXPECT_TRUE(sim.changes.back().on && sim.changes.back().model);
  EXPECT_EQ(sim.all_unannounced, 0);
  // and it stays: the model drafter wins over copies alone.
  sim.reset_totals();
  sim.run(greedy, 2000);
  EXPECT_GT(double(sim.all_rounds), 0.95 * double(sim.rounds));
}

// While the model drafter keeps losing to copies alone (here within noise of serial, beyond it of copies),
// its probes end early and back off (by the measured loss, doubling): few rounds pay for them.
TEST(DraftGuard, LosingModelProbesBackOff) {
  const TwoSources head_within_noise{8, 1e-3, 1e-3, 1.3, 1.05e-3, 1.0, 0.5};
  SourcesSim sim;
  for (int i = 0; i < 3000 && sim.guard.buckets_copies_only() == 0; ++i) sim.run(head_within_noise, 1);
  ASSERT_EQ(sim.guard.buckets_copies_only(), 1);
  sim.reset_totals();
  sim.run(head_within_noise, 4000);
  EXPECT_EQ(sim.guard.buckets_copies_only(), 1);
  EXPECT_LT(double(sim.all_rounds), 0.03 * double(sim.rounds));
}

// The engine's wiring of per-source verdicts: a model drafter whose hidden states cost 20 ms a round (as
// the H200's read-back, unseen by the per-stream cost model, but far beyond noise) makes rounds of every
// source lose to serial ones. The guard steps down (then perhaps off, when copies lose too on the CPU):
// from then on the model drafter is neither asked to propose nor handed hidden states (its next probe
// waits max_backoff rounds after such a loss), and the output equals the serial output.
class SlowHidden final : public Drafter {
 public:
  struct Calls {
    std::mutex mu;
    std::vector<size_t> proposed, hidden;  // the stream's length at each call
  };
  explicit SlowHidden(std::shared_ptr<Calls> calls) : calls_(std::move(calls)) {}
  const char* name() const override { return "slow-hidden"; }
  void propose(std::vector<DraftSlot>& slots) override {
    for (auto& s : slots) {
      std::lock_guard<std::mutex> lock(calls_->mu);
      calls_->proposed.push_back(s.seq->tokens.size());
      s.tokens.assign(1, s.seq->tokens.back());
    }
  }
  bool wants_hidden() const override { return true; }
  void observe_hidden(Sequence& s, int, const Tensor&, int, int) override {
    {
      std::lock_guard<std::mutex> lock(calls_->mu);
      calls_->hidden.push_back(s.tokens.size());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

 private:
  std::shared_ptr<Calls> calls_;
};

TEST(DraftGuard, EngineSkipsTheModelDrafterAfterTheStepDown) {
  auto calls = std::make_shared<SlowHidden::Calls>();
  EngineOptions o;
  o.model_path = std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3";
  o.parallel = 1;
  o.drafter_factory = [calls] { return std::make_unique<SlowHidden>(calls); };
  o.prompt_cache_gib = 0;
  auto e = create_engine(o);
  constexpr int kPrompt = 12, kTokens = 300;
  GenerationRequest r;
  for (int i = 0; i < kPrompt; ++i) r.prompt.push_back(5 + (i % 3));
  r.sampling.temperature = 0;
  r.max_tokens = kTokens;
  r.ignore_eos = true;
  r.draft = false;  // a serial run first: the guard's serial rate (as the bench's warm-up)
  const StreamOutput serial = collect(*e->submit(r));
  r.draft = true;
  const StreamOutput drafted = collect(*e->submit(r));
  const EngineStats st = e->stats();
  e->shutdown();
  ASSERT_EQ(int(serial.tokens.size()), kTokens);
  EXPECT_EQ(drafted.tokens, serial.tokens);
  EXPECT_GE(st.draft_guard_switches, 1);
  std::lock_guard<std::mutex> lock(calls->mu);
  ASSERT_FALSE(calls->hidden.empty());  // the model drafter ran before the verdict
  // ... and not in the second half of the reply (the verdict comes after a few dozen rounds).
  const size_t half = kPrompt + kTokens / 2;
  for (size_t n : calls->hidden) EXPECT_LT(n, half);
  for (size_t n : calls->proposed) EXPECT_LT(n, half);
}

TEST(DraftGuard, BucketsKeyTheStreamCount) {
  for (int n = 1; n <= 8; ++n) EXPECT_EQ(DraftGuard::bucket_of(n), n);
  EXPECT_EQ(DraftGuard::bucket_of(9), DraftGuard::bucket_of(11));
  EXPECT_NE(DraftGuard::bucket_of(11), DraftGuard::bucket_of(12));
  EXPECT_EQ(DraftGuard::bucket_of(12), DraftGuard::bucket_of(15));
  EXPECT_NE(DraftGuard::bucket_of(15), DraftGuard::bucket_of(16));
  for (int n = 1; n < 5000; ++n) EXPECT_LE(DraftGuard::bucket_of(n), DraftGuard::bucket_of(n + 1));
  EXPECT_LT(DraftGuard::bucket_of(4096), 40);
}

}  // namespace
}  // namespace tf

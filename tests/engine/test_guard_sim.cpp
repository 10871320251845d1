// A deterministic simulation of `tensorfold bench --drafter auto` on the demo model (H200, CUDA graphs on):
// the engine's real speed policy (DraftGuard, CostModel, choose_draft_length from draft_policy.h) decides
// every round, and a cost model calibrated to runs 34-35 (bench/cuda/results) says how long the round took
// on a fake clock. Issue #7: drafting must never make a stream slower than serial beyond noise (>= 0.95x);
// where it wins (T = 0) it must keep winning. Fake clock, fixed seeds: runs under the sanitizers too.
//
// What a round costs (seconds), as the engine sees it:
// - a decode round of n streams replays its CUDA graph: serial0 + per_stream·n (0.235 ms at 8 streams,
//   34k tok/s; 0.196 ms at 1 stream, 5.1k tok/s);
// - every extra verify row adds `row`; a forward whose shape (its row count) was not seen twice before
//   runs eagerly (+`eager`), and the third use captures the graph (+`capture`; the engine feeds such a
//   round to neither the guard nor the cost model: Model::Outputs::graph_captured);
// - a round where some stream drafted pays host work (`drafted_fixed`: verification bookkeeping) plus
//   one MTP head forward and host sample per chained draft (`mtp_step`); the first
//   drafted round after a gap pays the head's catch-up (`catch_up`; over the prompt: `prompt_catch_up`);
// - a round where the engine asks the forward for hidden states (drafting enabled and some stream may draft,
//   whether or not one proposes; also the round before a drafted probe) pays their read-back (`hidden`);
//   rounds where the guard allows context copies alone (DraftSources::Copies) pay neither the head nor the
//   hidden states;
// - drafts are accepted token by token with the text's acceptance (a run of hits, then a miss).
// Workloads: context copies (n-gram lookup) find a match with probability `match` (repetitive text: often,
// proposing long drafts), otherwise the MTP head drafts (at most 3). The bench (as src/cli/bench.cpp) warms
// up both modes on the first workload (serial, then drafted), then runs serial and drafted per workload on
// the same engine (guard and graph cache carry over); requests of the serial runs may not draft.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

#include "engine/draft_policy.h"

namespace tf {
namespace {

struct Costs {
  double serial0 = 0.190e-3, per_stream = 0.0056e-3;  // graphed decode round
  double row = 0.003e-3;                              // an extra verify row
  double eager = 0.06e-3;                             // a forward whose shape is not captured yet
  double capture = 0.4e-3;                            // stream capture + instantiation (unmeasured)
  double drafted_fixed = 0.048e-3;                    // host work of a drafted round, besides `hidden`
  double mtp_step = 0.015e-3;                         // one chained MTP head forward + host sample
  double catch_up = 0.08e-3;                          // the head's catch-up after a gap (<= 64 rows)
  double prompt_catch_up = 0.5e-3;                    // its first catch-up: the 128-token prompt
  // The forward's hidden states read back for the MTP head (dense_decoder read_back: one more synchronous
  // device-to-host copy after the replay) and handed to it (MtpDrafter::observe_hidden). Not measured
  // apart: 6% of a 1-stream round, the size of the H200's loss at 1 stream, T = 0.7, free text (0.93x
  // over 6 runs with the head proposing in few rounds, runs 72-73), where nothing else in an enabled
  // round without proposals costs anything.
  double hidden = 0.012e-3;
};

struct Text {
  const char* name;
  double match;  // probability that context copies find a match for a stream in a round
  double full;   // probability that a match runs as far as the stream may draft (else 1.. that many)
  // Acceptance per drafted token comes in phases: a stream is "in a repeat" (p_in) or not (p_out), and
  // leaves or enters one with probability `flip` per round. Context copies and the head share the phase.
  double p_in, p_out, flip, mtp;  // mtp: the head's acceptance relative to the phase's
};

// Calibrated to runs 34-35 (accepted/drafted 0.9 at T = 0, 0.57 at T = 0.7 on repetitive text) and to the
// guard's verdicts in runs 20-23 (drafted rounds at 8 streams, T = 0.7: 0.38-0.66x of serial per token).
const Text kRepetitiveT0{"repetitive", 0.95, 0.9, 0.97, 0.9, 0.05, 0.95};
const Text kFreeT0{"free", 0.9, 0.9, 0.95, 0.8, 0.1, 1.0};
const Text kRepetitiveT07{"repetitive", 0.7, 0.5, 0.85, 0.25, 0.1, 0.8};
const Text kFreeT07{"free", 0.05, 0.3, 0.6, 0.2, 0.1, 1.0};

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform(uint64_t& s) {
  return double(splitmix(s) >> 11) / double(1ull << 53);
}

struct Run {
  double seconds = 0;
  int64_t tokens = 0, rounds = 0, drafted_rounds = 0, enabled_rounds = 0, drafted = 0, accepted = 0;
  int64_t captures = 0, switches = 0;  // switches: the guard's (cumulative over the engine's runs)
};

struct Stream {
  DraftStats ngram, model;
  int generated = 1;  // the first token came from the prompt's round
  bool in_repeat = false;
  uint64_t rng;
};

// The drafters: `--drafter auto` (the MTP head and context copies) judged per source (the guard steps
// down to copies alone before turning drafting off), the same with one verdict for both (the guard before
// per-source verdicts), or `--drafter none` (context copies alone: no head, no hidden states).
enum class Drafters { Auto, AutoOneVerdict, Copies };

DraftGuardOptions with_drafters(DraftGuardOptions o, Drafters d) {
  o.model_drafter = d == Drafters::Auto;
  return o;
}

// One engine (guard, cost model, graph cache) across the bench's runs.
class Engine {
 public:
  // guarded = false: no DraftGuard (every stream drafts whatever choose_draft_length says), the reference.
  // by_proposals: the guard's attribution before issue #7's fix (a round is on the drafted side only when
  // some stream proposed), to check that the calibration reproduces what the H200 showed with it.
  Engine(const Costs& c, const DraftGuardOptions& o, bool guarded, bool by_proposals = false,
         Drafters d = Drafters::Auto)
      : c_(c),
        guarded_(guarded),
        by_proposals_(by_proposals),
        model_(d != Drafters::Copies),
        guard_(with_drafters(o, d)),
        cost_(0.05) {}

  Run run(const Text& t, int n, int tokens, bool draft, uint64_t seed) {
    std::vector<Stream> streams(n);
    for (int i = 0; i < n; ++i) {
      streams[i].rng = seed * 1000 + i;
      streams[i].in_repeat = uniform(streams[i].rng) < 0.5;
    }
    if (guarded_) guard_.workload_changed();  // the prompts' round started new streams (not measured)
    Run r;
    int gap = 2;  // 2: the head has not seen the prompt yet, 1: nor the previous round, 0: it has
    while (true) {
      std::vector<Stream*> live;
      for (auto& s : streams)
        if (s.generated < tokens) live.push_back(&s);
      if (live.empty()) break;
      round(t, live, tokens, draft, gap, r);
    }
    return r;
  }

  const DraftGuard& guard() const { return guard_; }

 private:
  void round(const Text& t, const std::vector<Stream*>& live, int tokens, bool draft, int& gap, Run& r) {
    const int n = int(live.size());
    const DraftSources src = guarded_ ? guard_.sources(n) : DraftSources::All;
    const bool ok = src != DraftSources::None, model_ok = model_ && src == DraftSources::All;
    // As engine.cpp's want_hidden: the head's inputs travel while the head may draft, and the round before
    // the guard's probe of it (never with context copies alone).
    const bool want_hidden = draft && model_ && (model_ok || (guarded_ && guard_.allows_model_next(n)));
    const double c = cost_.row_cost_in_round(n);
    int rows = 0, chain = 0, emitted = 0;
    for (Stream* s : live) {
      if (uniform(s->rng) < t.flip) s->in_repeat = !s->in_repeat;
      const double phase = s->in_repeat ? t.p_in : t.p_out;
      int k = 0;
      double p = 0;
      bool ngram = false;
      if (ok && draft) {
        const int room = std::min(tokens - s->generated - 1, 8);
        const int kn = choose_draft_length(s->ngram, c, room, 0);
        if (kn > 0 && uniform(s->rng) < t.match) {
          k = uniform(s->rng) < t.full ? kn : 1 + int(uniform(s->rng) * kn);
          p = phase, ngram = true;
        } else if (model_ok) {
          k = choose_draft_length(s->model, c, std::min(room, 3), cost_.draft_cost_in_round(n));
          p = phase * t.mtp;
          chain = std::max(chain, k);
        }
      }
      int accepted = 0;
      while (accepted < k && uniform(s->rng) < p) ++accepted;
      if (k > 0) (ngram ? s->ngram : s->model).record(k, accepted);
      const int got = std::min(accepted + 1, tokens - s->generated);
      s->generated += got;
      emitted += got;
      rows += 1 + k;
      r.drafted += k;
      r.accepted += accepted;
    }
    const bool drafted = rows > n;
    double forward = c_.serial0 + c_.per_stream * n + c_.row * (rows - n);
    const int uses = ++shape_uses_[rows];
    const bool captured = uses == 3;
    if (uses < 3) forward += c_.eager;
    if (captured) forward += c_.capture;
    double host = want_hidden ? c_.hidden : 0;
    // Rounds of context copies alone pay their verification, never the head (nor its catch-up: the head
    // saw none of their hidden states, so its gap goes on).
    if (drafted) {
      host += c_.drafted_fixed + c_.mtp_step * chain;
      if (model_ok) host += gap == 2 ? c_.prompt_catch_up : gap == 1 ? c_.catch_up : 0;
      if (chain > 0) cost_.observe_draft(chain * n, c_.mtp_step * chain);
    }
    gap = drafted && model_ok ? 0 : std::max(gap, 1);
    if (!captured) {
      cost_.observe(rows, forward);
      if (guarded_)
        guard_.observe(n, emitted, forward + host, by_proposals_ ? drafted : ok && draft, draft, drafted);
    }
    r.seconds += forward + host;
    r.tokens += emitted;
    ++r.rounds;
    r.drafted_rounds += drafted;
    r.enabled_rounds += ok && draft;
    r.captures += captured;
    r.switches = guard_.switches();
  }

  Costs c_;
  bool guarded_, by_proposals_, model_;
  DraftGuard guard_;
  CostModel cost_;
  std::map<int, int> shape_uses_;  // CUDA graph key (the round's rows) -> uses
};

struct Bench {
  Run serial, drafted;
  double ratio() const { return serial.seconds / drafted.seconds; }  // the same tokens either way
};

// `tensorfold bench --parallel n --tokens 256` on both workloads, as src/cli/bench.cpp runs it on one
// engine: a warm-up of both modes on the first workload (a serial run, then a drafted one), then per
// workload a serial and a drafted run. Every run of a workload sends the same prompts with the same
// sampling seeds (stream_seed(i)), so here every run of a workload uses the same seed: `seed` + its index.
std::vector<Bench> bench(const std::vector<Text>& texts, int n, bool guarded = true, const Costs& c = {},
                         const DraftGuardOptions& o = {}, uint64_t seed = 2, bool by_proposals = false,
                         Drafters d = Drafters::Auto) {
  Engine e(c, o, guarded, by_proposals, d);
  e.run(texts[0], n, 256, false, seed);
  e.run(texts[0], n, 256, true, seed);
  std::vector<Bench> out;
  for (size_t i = 0; i < texts.size(); ++i) {
    Bench b;
    b.serial = e.run(texts[i], n, 256, false, seed + i);
    b.drafted = e.run(texts[i], n, 256, true, seed + i);
    out.push_back(b);
  }
  return out;
}

void print(const char* what, int n, const Text& t, const Bench& b, const Bench& reference) {
  const Run& d = b.drafted;
  std::printf(
      "%-5s %d stream(s) %-10s: %.2fx (no guard %.2fx)  serial %.0f tok/s, drafted %.0f tok/s, "
      "%lld/%lld accepted, %lld/%lld rounds drafted, %lld captures, %.2f tok/step\n",
      what, n, t.name, b.ratio(), reference.ratio(), double(b.serial.tokens) / b.serial.seconds,
      double(d.tokens) / d.seconds, (long long)d.accepted, (long long)d.drafted, (long long)d.drafted_rounds,
      (long long)d.rounds, (long long)d.captures, double(d.tokens) / double(d.rounds * n));
}

// The same checks under other costs: drafted rounds' host work twice as costly (a slower host), and the
// head's catch-up over the prompt three times as costly (a longer prompt).
std::vector<Costs> stress_costs() {
  Costs slow_host, long_prompt;
  slow_host.drafted_fixed *= 2, slow_host.mtp_step *= 2, slow_host.hidden *= 2;
  long_prompt.prompt_catch_up *= 3;
  return {slow_host, long_prompt};
}

// Every check runs the bench under several seeds (the sampled acceptance and the phases differ): one lucky
// seed proves little, the ratios of one case spread by up to 0.6x between seeds (unguarded, 1 stream).
constexpr int kSeeds = 12;
uint64_t seed_of(int i) {
  return 2 + 10 * uint64_t(i);
}

// Issue #7: at temperature 0.7 drafted rounds at 8 streams lose to serial ones, and the guard must keep
// each run within noise of serial: >= 0.95x with the calibrated costs, every seed. Where drafting wins over
// a run (1 stream, repetitive text: 1.1-1.7x unguarded) the guard keeps that gain.
TEST(GuardSim, DraftingLosingStaysWithinNoiseOfSerial) {
  const std::vector<Text> texts = {kRepetitiveT07, kFreeT07};
  for (int n : {1, 8}) {
    double unguarded[2] = {0, 0};
    for (int k = 0; k < kSeeds; ++k) {
      const auto guarded = bench(texts, n, true, {}, {}, seed_of(k));
      const auto reference = bench(texts, n, false, {}, {}, seed_of(k));
      for (size_t i = 0; i < texts.size(); ++i) {
        if (k == 0) print("T=0.7", n, texts[i], guarded[i], reference[i]);
        EXPECT_GE(guarded[i].ratio(), 0.95) << n << " stream(s) " << texts[i].name << " seed " << seed_of(k);
        if (reference[i].ratio() > 1.1) {
          EXPECT_GE(guarded[i].ratio() - 1, 0.9 * (reference[i].ratio() - 1))
              << n << " stream(s) " << texts[i].name << " seed " << seed_of(k);
        }
        unguarded[i] += reference[i].ratio() / kSeeds;
      }
    }
    // What the guard is for (the calibration): unguarded, drafting at 8 streams loses 10-20% on average
    // (GPU before the guard, run 14: 0.85-0.92x; drafted rounds pay host work and eager verify shapes, and
    // the run ends with its slowest stream), and at 1 stream on repetitive text it wins.
    if (n == 8) {
      EXPECT_LT(unguarded[0], 0.9);
      EXPECT_LT(unguarded[1], 0.85);
    } else {
      EXPECT_GT(unguarded[0], 1.2) << "the calibration lost drafting's gain at 1 stream, repetitive text";
    }
  }
  // Stress: where drafting's own cost doubles, 1 stream's verdict needs more rounds (its acceptance comes
  // in phases), which costs some of them: >= 0.92x every seed, >= 0.95x on average.
  for (const Costs& c : stress_costs())
    for (int n : {1, 8}) {
      double mean[2] = {0, 0};
      for (int k = 0; k < kSeeds; ++k) {
        const auto guarded = bench(texts, n, true, c, {}, seed_of(k));
        for (size_t i = 0; i < texts.size(); ++i) {
          EXPECT_GE(guarded[i].ratio(), 0.92)
              << n << " stream(s) " << texts[i].name << " seed " << seed_of(k);
          mean[i] += guarded[i].ratio() / kSeeds;
        }
      }
      for (size_t i = 0; i < texts.size(); ++i) {
        std::printf("T=0.7* %d stream(s) %-10s: mean %.2fx over %d seeds\n", n, texts[i].name, mean[i],
                    kSeeds);
        EXPECT_GE(mean[i], 0.95) << n << " stream(s) " << texts[i].name;
      }
    }
}

// At temperature 0 drafting wins 1.3-4x: the guard keeps its gain (>= 95% of it with the calibrated costs,
// every seed; the tail's stream counts take their neighbour's verdict instead of a serial probe each).
TEST(GuardSim, GreedyDraftingKeepsItsGain) {
  const std::vector<Text> texts = {kRepetitiveT0, kFreeT0};
  std::vector<Costs> costs = stress_costs();
  costs.insert(costs.begin(), Costs{});
  for (size_t ci = 0; ci < costs.size(); ++ci)
    for (int n : {1, 8})
      for (int k = 0; k < kSeeds; ++k) {
        const auto guarded = bench(texts, n, true, costs[ci], {}, seed_of(k));
        const auto reference = bench(texts, n, false, costs[ci], {}, seed_of(k));
        for (size_t i = 0; i < texts.size(); ++i) {
          if (k == 0) print(ci == 0 ? "T=0" : "T=0*", n, texts[i], guarded[i], reference[i]);
          EXPECT_GT(reference[i].ratio(), 1.25) << "the calibration lost drafting's gain";
          const double keep = ci == 0 ? 0.95 : 0.85;
          EXPECT_GE(guarded[i].ratio() - 1, keep * (reference[i].ratio() - 1))
              << n << " stream(s) " << texts[i].name << " seed " << seed_of(k);
        }
      }
}

// Issue #7 on the H200 (runs 72-73): 1 stream, T = 0.7, free text, `--drafter auto` ran 0.89-0.98x (0.93x
// over 6 runs, 1.20 tokens a step, 43 of 67 drafts accepted) and the guard never switched drafting off. The
// MTP head proposed in few rounds (its forward runs eagerly, so a draft costs more than one pays), yet every
// round drafting was enabled paid the hidden states' read-back; the guard compared rounds with proposals
// against all others, the idle enabled rounds among them, and saw no loss. Here the head's draft costs
// 0.05 ms (the calibrated 0.015 ms made it propose in 40% of rounds, 1.26 tokens a step, and win).
// Judged that way (by_proposals) the simulation reproduces the miss; judged "enabled vs not", the guard
// keeps the run near serial.
TEST(GuardSim, IdleEnabledRoundsCountAsDrafting) {
  Costs eager_head;
  eager_head.mtp_step = 0.05e-3;
  const std::vector<Text> texts = {kRepetitiveT07, kFreeT07};
  double unguarded = 0, by_proposals = 0, enabled = 0, tokens_per_step = 0;
  for (int k = 0; k < kSeeds; ++k) {
    const auto reference = bench(texts, 1, false, eager_head, {}, seed_of(k));
    const auto before = bench(texts, 1, true, eager_head, {}, seed_of(k), true, Drafters::AutoOneVerdict);
    const auto after = bench(texts, 1, true, eager_head, {}, seed_of(k));
    if (k == 0) print("T=0.7e", 1, texts[1], after[1], reference[1]);
    unguarded += reference[1].ratio() / kSeeds;
    by_proposals += before[1].ratio() / kSeeds;
    enabled += after[1].ratio() / kSeeds;
    const tf::Run& d = before[1].drafted;
    tokens_per_step += double(d.tokens) / double(d.rounds) / kSeeds;
    EXPECT_GE(after[1].ratio(), 0.93) << "seed " << seed_of(k);
  }
  std::printf(
      "T=0.7e 1 stream(s) free: no guard %.2fx, guard judging proposals %.2fx (%.2f tok/step), "
      "judging enabled rounds %.2fx (mean of %d seeds)\n",
      unguarded, by_proposals, tokens_per_step, enabled, kSeeds);
  // The calibration: drafting loses here, and the old attribution missed it as on the H200.
  EXPECT_LT(unguarded, 0.93);
  EXPECT_LT(by_proposals, 0.95);
  EXPECT_LT(tokens_per_step, 1.25);
  EXPECT_GE(enabled, 0.95);
  EXPECT_GT(enabled, by_proposals + 0.01);
}

// Per-source verdicts (H200 run 80): 1 stream, T = 0.7, repetitive text, `--drafter none` (context copies
// alone) ran 1.12x, `--drafter auto` 1.00x: the MTP head's rounds lost (the guard's warm-up verdict:
// enabled rounds 0.89x serial) and its one verdict turned context copies off with it. Here the head costs
// what an eager head with a slow read-back would (0.1 ms a draft, 0.025 ms of hidden states a round) and
// accepts half as often as copies on a text where copies find a match in 30% of rounds: unguarded, the
// combination loses, copies alone win. The guard steps down to copies alone and keeps their gain.
const Text kRepetitiveT07Head{"repetitive", 0.3, 0.5, 0.8, 0.25, 0.1, 0.5};

TEST(GuardSim, CopiesAloneKeepTheirGainWhenTheHeadLoses) {
  Costs head;
  head.mtp_step = 0.1e-3, head.hidden = 0.025e-3;
  const std::vector<Text> texts = {kRepetitiveT07Head, kFreeT07};
  // 50 seeds: the copies' gain varies between seeds (phases; 1.00x at worst), and the guard's share of it
  // with them (87% over the first 12 seeds, 95% over 50).
  const int seeds = 50;
  for (int n : {1, 8}) {
    double unguarded = 0, one_verdict = 0, copies = 0, per_source = 0;
    for (int k = 0; k < seeds; ++k) {
      const auto reference = bench(texts, n, false, head, {}, seed_of(k));
      const auto before = bench(texts, n, true, head, {}, seed_of(k), false, Drafters::AutoOneVerdict);
      const auto alone = bench(texts, n, true, head, {}, seed_of(k), false, Drafters::Copies);
      const auto after = bench(texts, n, true, head, {}, seed_of(k));
      if (k == 0) print("T=0.7h", n, texts[0], after[0], reference[0]);
      for (size_t i = 0; i < texts.size(); ++i)
        EXPECT_GE(after[i].ratio(), 0.95) << n << " stream(s) " << texts[i].name << " seed " << seed_of(k);
      unguarded += reference[0].ratio() / seeds;
      one_verdict += before[0].ratio() / seeds;
      copies += alone[0].ratio() / seeds;
      per_source += after[0].ratio() / seeds;
    }
    std::printf(
        "T=0.7h %d stream(s) repetitive: no guard %.2fx, one verdict %.2fx, copies alone %.2fx, per-source "
        "%.2fx (mean of %d seeds)\n",
        n, unguarded, one_verdict, copies, per_source, seeds);
    if (n == 1) {
      // The calibration: the combination loses, one verdict forgoes the copies' gain (as on the H200).
      EXPECT_LT(unguarded, 0.97);
      EXPECT_LT(one_verdict, 1.02);
      EXPECT_GT(copies, 1.1);
      EXPECT_GE(per_source - 1, 0.9 * (copies - 1));
    }
  }
}

// Deterministic: the same inputs give the same run to the round.
TEST(GuardSim, IsDeterministic) {
  const auto a = bench({kRepetitiveT07}, 8), b = bench({kRepetitiveT07}, 8);
  EXPECT_EQ(a[0].drafted.seconds, b[0].drafted.seconds);
  EXPECT_EQ(a[0].drafted.drafted, b[0].drafted.drafted);
}

}  // namespace
}  // namespace tf

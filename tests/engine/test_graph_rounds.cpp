// Rounds whose forward captured a CUDA graph (Model::Outputs::graph_captured) must not feed the draft guard
// nor the cost models: a capture costs milliseconds, and verify rounds of new shapes (every draft length
// makes one) would otherwise be charged to drafting (run 31: the guard switched drafting off at 8 streams).
// The engine runs here on the CPU backend wrapped to simulate graphs with timings the test controls: every
// graphed forward takes a fixed step (so drafted rounds, emitting >= 1 token each, never lose to serial
// ones), and the first forward of each key adds a long "capture". When run_graph reports its captures, the
// guard never switches drafting off; when the same captures go unreported (what the engine saw before), it
// does. Timing-based: labelled cpu only (sanitizers slow the CPU work the fixed step is meant to dominate).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "cpu_forwarding_backend.h"
#include "engine/drafters/replay.h"
#include "engine/engine.h"
#include "engine/sequence.h"
#include "ops/backend.h"

using namespace tf;
using namespace std::chrono_literals;

namespace {

constexpr auto kStep = 12ms;     // every graphed forward (dominates the tiny model's CPU work)
constexpr auto kCapture = 90ms;  // added to the first forward of each key

// The CPU backend claiming graph support: run_graph runs `record` every time, after kStep (+ kCapture on a
// key's first call), and returns whether it "captured" when `report` is set.
class SimulatedGraphs final : public CpuForwardingBackend {
 public:
  explicit SimulatedGraphs(bool report) : report_(report) {}

  bool graphs_supported() const override { return true; }
  bool run_graph(const std::vector<int64_t>& key, const AttentionParams&, std::shared_ptr<const void>,
                 const std::function<void()>& record) override {
    const bool capture = seen_.insert(key).second;
    std::this_thread::sleep_for(capture ? kStep + kCapture : kStep);
    record();
    return report_ && capture;
  }

  std::string name() const override { return "cpu+simulated graphs"; }

 private:
  bool report_;
  std::set<std::vector<int64_t>> seen_;
};

// Perfect drafts (a serial run's recording, as ReplayDrafter proposes) of lengths cycling through 1..6, so
// that verify rounds come in six shapes: six captures, as draft lengths varying across streams make on the
// GPU. Every drafted round then emits 2..7 tokens in one fixed step.
class CyclingReplay final : public Drafter {
 public:
  explicit CyclingReplay(std::shared_ptr<const ReplayDrafter::Recording> rec) : replay_(std::move(rec)) {}
  const char* name() const override { return "cycling replay"; }
  void propose(std::vector<DraftSlot>& slots) override {
    for (auto& s : slots)
      s.tokens =
          replay_.lookup(s.seq->seed, s.seq->req.prompt, s.seq->tokens, std::min(1 + calls_++ % 6, s.max_k));
  }

 private:
  ReplayDrafter replay_;
  int calls_ = 0;
};

struct Outcome {
  std::vector<int32_t> serial, drafted;
  EngineStats stats;
};

std::vector<int32_t> generate(Engine& e, GenerationRequest r) {
  std::vector<int32_t> tokens;
  auto h = e.submit(std::move(r));
  StreamEvent ev;
  while (h->next(ev, 60s)) {
    if (ev.kind == StreamEvent::Kind::Tokens) {
      for (auto& t : ev.tokens) tokens.push_back(t.token);
      continue;
    }
    EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
    break;
  }
  return tokens;
}

// A serial run (the guard's baseline, and the recording), then the same request with perfect drafts.
Outcome run(bool report) {
  auto rec = std::make_shared<ReplayDrafter::Recording>();
  EngineOptions o;
  o.model_path = std::string(TF_SOURCE_DIR) + "/tests/data/tiny/qwen3";
  o.backend_factory = [report] { return std::make_unique<SimulatedGraphs>(report); };
  o.drafter_factory = [rec] { return std::make_unique<CyclingReplay>(rec); };
  o.cuda_graphs = true;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  o.ngram_drafts = false;
  o.max_draft = 8;
  o.draft_guard_options.min_rounds = 3;         // judge early: the run is short
  o.draft_guard_options.reference_streams = 1;  // (a round of 1 stream weighs a full round)
  auto e = create_engine(o);
  GenerationRequest r;
  r.prompt = {5, 17, 29, 41, 53, 65, 77};
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 7;
  r.max_tokens = 48;
  r.ignore_eos = true;
  r.draft = false;
  Outcome out;
  out.serial = generate(*e, r);
  (*rec)[{7, r.prompt}] = out.serial;
  r.draft = true;
  out.drafted = generate(*e, r);
  out.stats = e->stats();
  e->shutdown();
  return out;
}

TEST(GraphRounds, CapturesAreNotChargedToDrafting) {
  const Outcome reported = run(true), unreported = run(false);
  for (const Outcome* o : {&reported, &unreported}) {
    ASSERT_EQ(o->serial.size(), 48u);
    EXPECT_EQ(o->drafted, o->serial);  // drafting never changes the output
  }
  EXPECT_GT(reported.stats.drafted_tokens, 0);
  EXPECT_EQ(reported.stats.accepted_tokens, reported.stats.drafted_tokens);
  // Drafted rounds take the same fixed step as serial ones and emit 2..7 tokens: only the captures of
  // their new shapes can make them look slower.
  EXPECT_EQ(reported.stats.draft_guard_switches, 0);
  EXPECT_EQ(reported.stats.draft_guard_off, 0);
  // The same captures charged to the rounds (what the engine did before): drafting is switched off.
  EXPECT_GE(unreported.stats.draft_guard_switches, 1);
}

}  // namespace

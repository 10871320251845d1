#pragma once
// Creating the engine: load a checkpoint, pick a backend, size the KV pool, start the engine thread.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/api.h"
#include "engine/draft_policy.h"
#include "engine/drafters/drafter.h"

namespace tf {

class Backend;

struct EngineOptions {
  std::string model_path;        // local checkpoint directory (already resolved)
  std::string name;              // advertised id (default: directory name or org/name)
  int context = 0;               // per-stream prompt + reply capacity; 0 = min(native context, 32768)
  std::string backend = "auto";  // auto | cuda | cpu
  int parallel = 4;              // streams decoded together in one round; 0 = auto (from free GPU memory)
  int max_tokens = 4096;         // default reply limit when a request gives none
  // Sampling defaults; unset = generation_config.json, else neutral (temperature 1, no truncation).
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  // Speculative drafting (never changes output; see drafters/drafter.h).
  bool drafts = true;            // --no-drafts turns every drafter off
  std::string drafter = "auto";  // auto | none | mtp | DIR (a draft model sharing the tokenizer); auto =
                                 // the checkpoint's MTP head, else its draft/ subfolder, when present
  int mtp_drafts = 3;            // MTP chain length (--mtp-drafts)
  float mtp_confidence = 0;      // stop an MTP chain below this probability (--mtp-confidence)
  bool ngram_drafts = true;      // context copies
  int ngram_min = 2, ngram_max = 8;
  int max_draft = 8;  // longest proposal verified in one forward
  bool adaptive_draft =
      true;  // draft length from measured acceptance and verify cost; false = always max_draft
  // Pad every drafting stream's proposal to one bucketed length per round (1, 2, 4, 8, ... up to max_draft;
  // fillers repeat the last proposed token), so that verify rounds recur as CUDA graph keys and replay:
  // auto | on | off (--pad-drafts; see PadDrafts in draft_policy.h). auto = on while CUDA graphs are
  // replayed and a decode round's measured forward is launch-bound (< kPadDraftsMaxRoundSeconds). Default
  // off: on the H200 (run 62) padding left most verify rounds eager and made the demo's 8-stream T=0.7
  // repetitive runs slower (0.91x -> 0.84x); docs/drafting.md.
  std::string pad_drafts = "off";
  // Switch drafting (context copies and the model drafter) off while rounds with drafts emit fewer tokens per
  // second of wall time than rounds without (--draft-guard; see DraftGuard in draft_policy.h). Only with
  // adaptive_draft.
  bool draft_guard = true;
  DraftGuardOptions draft_guard_options;  // tests: short probes and backoffs to exercise switching
  size_t kv_budget_bytes = 0;             // 0 = enough for `parallel` full contexts
  // Prompt cache (retained prefixes), spill to disk and persistent snapshots.
  double prompt_cache_gib = 0.25;  // memory for retained prefixes beyond the streams' own; 0 disables
  int checkpoint_slots = 0;        // retained prefixes at most (0 = bounded by memory only)
  double spill_gib = 0;            // write evicted prefixes to disk up to this size, read them back on a hit
  std::string spill_dir;           // default: a private directory under $TMPDIR
  std::string snapshot_dir;        // persistent prefix snapshots (survive restarts); "" or "none" = off
  int max_snapshots = 0;           // snapshot blocks kept on disk (0 = bounded by spill_gib, else 4 GiB)
  // Prompt rows a round carries (decode rows of running streams always go first), shared by the prompts
  // waiting, the fewest tokens left first. 0: auto (auto_prefill_chunk in round_cost.h: 512-16,384 on a
  // GPU by its memory and the context, 512 on the CPU). --decode-share caps it further.
  int prefill_chunk = 0;
  double decode_share =
      0;  // while streams decode, prompt rows keep decode >= F of the round's time (round_cost.h)
  // GPU: weights + workspace + KV pool within this fraction of the device's memory; the pool (and, with
  // --parallel auto, the stream count) takes what the weights leave. Ignored on the CPU.
  double gpu_memory_utilization = 0.9;
  int growth_reserve = 2048;  // KV reserved ahead of each stream (prompt + this many reply tokens)
  int max_queue = 256;        // waiting requests beyond `parallel`; more are refused (Overloaded)
  // CUDA backend: replay decode and verify forwards from captured CUDA graphs (--cuda-graphs on|off; the
  // same bits, fewer kernel launches). No effect on the CPU backend.
  bool cuda_graphs = true;  // on since run 34: demo serial +40%, drafted tok/s equal or better, bits equal
  // Benchmarks and tests: a drafter of their own (e.g. a replay of a recorded run) instead of --drafter;
  // context copies still follow ngram_drafts. Called once, after the model is loaded.
  std::function<std::unique_ptr<Drafter>()> drafter_factory;
  // Tests: a backend of their own (e.g. the CPU backend simulating CUDA graph captures) instead of
  // `backend`. Called once, before the model is loaded.
  std::function<std::unique_ptr<Backend>()> backend_factory;
};

// Throws tf::Error with a one-line reason (unsupported family, context that cannot fit, ...).
std::unique_ptr<Engine> create_engine(const EngineOptions& opt);

// The embedded default model shipped with the binary (models/demo), or "" when not installed.
std::string default_model_dir();

}  // namespace tf

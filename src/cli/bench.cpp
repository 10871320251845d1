// `tensorfold bench [MODEL]`: prefill and decode throughput of a checkpoint through the engine, and what
// drafting buys: each workload runs with drafts and with `draft: false`, the two outputs are compared token
// for token (they must be identical), and the speedup and mean accepted length are printed.
// --shape qwen3-8b|qwen3-0.6b|qwen3-30b-a3b|all: the CUDA backend's roofline benchmark at real model shapes
// with random weights made on the GPU (bench/cuda/shape_bench.h, the same as tf_bench_cuda; the MoE shape:
// moe_shape.h, the same as tf_bench_moe); exit code 2 without it.
// --format bf16,mlx4,mlx8,fp8 (any of them): that forward with quantized linears, next to bf16's.
// Other modes: --drafter replay (the ceiling of drafting: a replay of the serial run, every draft
// accepted), --cache-check (time to first token uncached / prompt-cache hit / spill read-back) and
// --chat-turns N (turn N of a growing conversation, cached vs uncached). Every mode checks that its
// outputs are token-identical and fails otherwise.
#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/drafters/replay.h"
#include "engine/engine.h"
#include "shape_bench.h"
#include "text/tokenizer.h"

namespace tf::cli {

namespace {

struct BenchArgs {
  std::string model, backend = "auto", workload = "all", drafter = "auto";
  int tokens = 256, parallel = 1, prompt_tokens = 128, context = 0;
  float temperature = 0.f;
  bool cache_check = false;
  int chat_turns = 0;                   // --chat-turns: the conversation mode
  double cache_gib = 4, spill_gib = 8;  // prompt cache and spill budgets of the cache modes
  int max_draft = 4;                    // --drafter replay: the longest proposal
  bool sweep = false;                   // --drafter replay: every k from 1 to max_draft
  std::string draft_guard = "on";       // EngineOptions::draft_guard
  std::string cuda_graphs = "on";       // EngineOptions::cuda_graphs
  std::string pad_drafts = "off";       // EngineOptions::pad_drafts
  std::string shape;                    // --shape: the random-weight shape benchmark instead
  bool quick = false;                   // --shape: 512 context and prefill 512 only
  std::vector<std::string> formats;     // --shape: weight formats of the linears (empty: bf16)
  int repeat = 1;                       // serial/drafted pairs per workload (medians reported)
};

// A file the model is asked to quote (repetitive work), and an open prompt (free continuation).
const char* kSource = R"(def parse_config(path, defaults=None):
    """Read a JSON configuration file and merge it over the defaults.

    Parameters
    ----------
    path : str
        The file to read.
    defaults : dict, optional
        Values used when the file does not set them.

    Returns
    -------
    dict
        The merged configuration.
    """
    import json
    config = dict(defaults or {})
    with open(path, "r", encoding="utf-8") as f:
        config.update(json.load(f))
    for key, value in list(config.items()):
        if value is None:
            del config[key]
    return config
)";

// Token ids 10..1009 (inside every vocabulary the benches load), a different sequence per salt.
std::vector<int32_t> random_prompt(int len, int salt) {
  std::vector<int32_t> p;
  for (int t = 0; t < len; ++t)
    p.push_back(int32_t((int64_t(t) * 7919 + int64_t(salt) * 104729) % 1000 + 10));
  return p;
}

std::vector<int32_t> workload_prompt(const Tokenizer& tok, const std::string& w, int stream, int random_len) {
  if (w == "repetitive")
    return tok.encode(std::string(kSource) + "\n\n# The same function again, unchanged:\n" +
                          std::string(kSource).substr(0, 60 + stream),
                      true);
  if (w == "free") return tok.encode("import numpy as np\n\n\ndef moving_average(values, window", true);
  return random_prompt(random_len, stream);
}

struct RunResult {
  double prefill_s = 0, total_s = 0;
  // The engine's rounds without prompt rows during the run: count, wall time, their forwards' wall time.
  int64_t decode_rounds = 0;
  double decode_round_s = 0, decode_forward_s = 0;
  int64_t prompt = 0, generated = 0, drafted = 0, accepted = 0, forwards = 0, cached = 0;
  std::vector<std::vector<int32_t>> outputs;
};

uint64_t stream_seed(int stream) {
  return 1000 + uint64_t(stream);
}

// Runs one request per prompt at once (stream i seeded stream_seed(i)) and times them.
RunResult run_prompts(Engine& e, const BenchArgs& a, const std::vector<std::vector<int32_t>>& prompts,
                      bool draft) {
  RunResult r;
  const EngineStats e0 = e.stats();
  std::vector<std::shared_ptr<RequestHandle>> hs;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest q;
    q.prompt = prompts[i];
    q.max_tokens = a.tokens;
    q.ignore_eos = true;
    q.draft = draft;
    q.sampling.temperature = a.temperature;
    q.sampling.seed = stream_seed(int(i));
    r.prompt += int64_t(q.prompt.size());
    hs.push_back(e.submit(q));
  }
  // Poll every stream so that each event is timed when it arrives.
  double first = 0;
  r.cached = 0;
  r.outputs.resize(hs.size());
  std::vector<bool> done(hs.size(), false);
  for (size_t left = hs.size(); left > 0;) {
    for (size_t i = 0; i < hs.size(); ++i) {
      StreamEvent ev;
      while (!done[i] && hs[i]->next(ev, std::chrono::milliseconds(0))) {
        if (ev.kind == StreamEvent::Kind::Error) throw Error(ev.error);
        if (ev.kind == StreamEvent::Kind::Tokens) {
          if (r.outputs[i].empty())
            first =
                std::max(first, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          for (auto& t : ev.tokens) r.outputs[i].push_back(t.token);
        } else {
          r.generated += ev.usage.completion_tokens;
          r.drafted += ev.usage.drafted_tokens;
          r.accepted += ev.usage.accepted_tokens;
          r.cached += ev.usage.cached_tokens;
          done[i] = true;
          --left;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  r.total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.prefill_s = first;
  const EngineStats e1 = e.stats();
  r.forwards = e1.forward_passes - e0.forward_passes;
  r.decode_rounds = e1.decode_rounds - e0.decode_rounds;
  r.decode_round_s = e1.decode_round_seconds - e0.decode_round_seconds;
  r.decode_forward_s = e1.decode_forward_seconds - e0.decode_forward_seconds;
  return r;
}

RunResult run_once(Engine& e, const BenchArgs& a, const std::string& w, bool draft) {
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < a.parallel; ++i)
    prompts.push_back(workload_prompt(e.tokenizer(), w, i, a.prompt_tokens));
  return run_prompts(e, a, prompts, draft);
}

RunResult run_one(Engine& e, const BenchArgs& a, const std::vector<int32_t>& prompt) {
  return run_prompts(e, a, {prompt}, true);
}

const char* match(bool same) {
  return same ? "MATCH" : "MISMATCH";
}

void print_ttft(const char* what, const RunResult& r, const RunResult& base) {
  std::cout << std::fixed << std::setprecision(1) << "  " << std::left << std::setw(15) << what << std::right
            << std::setw(10) << r.prefill_s * 1e3 << " ms  " << std::setw(7) << r.cached << " cached tokens  "
            << std::setprecision(2) << base.prefill_s / r.prefill_s << "x\n";
}

// Time to first token of the same long prompt uncached, as a prompt-cache hit in memory, and read back
// from the spill after it was evicted (the engine retains one prefix, so a second prompt evicts the
// first to disk). The three outputs must be token-identical.
void run_cache_check(Engine& e, const BenchArgs& a) {
  run_one(e, a, random_prompt(a.prompt_tokens, 3));  // warm-up at the same shapes
  const auto p = random_prompt(a.prompt_tokens, 1);
  RunResult miss = run_one(e, a, p), hit = run_one(e, a, p);
  run_one(e, a, random_prompt(a.prompt_tokens, 2));  // evicts (spills) the first prompt's blocks
  const int64_t disk0 = e.stats().prompt_cache_disk_hits;
  RunResult disk = run_one(e, a, p);
  const int64_t read_back = e.stats().prompt_cache_disk_hits - disk0;
  const bool same = miss.outputs == hit.outputs && miss.outputs == disk.outputs;
  std::cout << "prompt " << p.size() << " tokens, " << a.tokens << " generated: time to first token\n";
  print_ttft("uncached", miss, miss);
  print_ttft("memory hit", hit, miss);
  print_ttft("disk read-back", disk, miss);
  std::cout << "  " << read_back << " block(s) read back from the spill; outputs " << match(same) << "\n";
  if (!same) throw Error("a prompt-cache hit or spill read-back changed the output");
  if (hit.cached == 0)
    throw Error("the second run of the prompt was not a prompt-cache hit; raise --prompt-cache-gib");
  if (read_back == 0 || disk.cached == 0)
    throw Error("the evicted prompt was not read back from the spill; raise --spill-gib");
}

// Turn N of a conversation whose history grows to --prompt-tokens: every turn resends the history (user
// messages and the model's replies) plus a new message. Turn N's time to first token with the history
// cached, then uncached (the engine retains one prefix: a short other prompt evicts the conversation).
void run_chat_check(Engine& e, const BenchArgs& a) {
  const int turns = a.chat_turns;
  const int user = (a.prompt_tokens - (turns - 1) * a.tokens) / turns;
  if (user < 1)
    throw Error("--prompt-tokens " + std::to_string(a.prompt_tokens) + " leaves no room for " +
                std::to_string(turns) + " user messages besides the replies; raise it or lower --tokens");
  run_one(e, a, random_prompt(64, 99));  // warm-up
  std::vector<int32_t> history;
  RunResult cached;
  for (int t = 1; t <= turns; ++t) {
    const auto msg = random_prompt(user, 100 + t);
    history.insert(history.end(), msg.begin(), msg.end());
    cached = run_one(e, a, history);
    if (t < turns) history.insert(history.end(), cached.outputs[0].begin(), cached.outputs[0].end());
  }
  run_one(e, a, random_prompt(64, 98));  // evicts the conversation
  RunResult uncached = run_one(e, a, history);
  const bool same = cached.outputs == uncached.outputs;
  std::cout << "turn " << turns << " of a chat: " << history.size() << " tokens of history (" << user
            << " new), " << a.tokens << " generated: time to first token\n";
  print_ttft("uncached", uncached, uncached);
  print_ttft("cached", cached, uncached);
  std::cout << "  outputs " << match(same) << "\n";
  if (!same) throw Error("the cached turn's output differs from the uncached one");
  if (uncached.cached != 0) throw Error("the uncached turn still hit the prompt cache");
  if (cached.cached == 0)
    throw Error("turn " + std::to_string(turns) + " did not reuse the history; raise --prompt-cache-gib");
}

// The ceiling of drafting: record a serial run, then rerun with a drafter that replays the recording (every
// draft accepted) at k = max_draft, or every k from 1 with --sweep. Outputs must be identical.
void run_replay(EngineOptions opt, const BenchArgs& a) {
  auto recording = std::make_shared<ReplayDrafter::Recording>();
  ReplayDrafter* replay = nullptr;
  opt.drafter = "none";
  opt.ngram_drafts = false;    // only the replay proposes
  opt.adaptive_draft = false;  // always propose k: the ceiling, not the policy
  opt.max_draft = a.max_draft;
  opt.drafter_factory = [&] {
    auto d = std::make_unique<ReplayDrafter>(recording);
    replay = d.get();
    return d;
  };
  auto engine = create_engine(opt);
  const auto& info = engine->info();
  std::cout << "model " << info.id << " on " << info.backend
            << ", replay drafter (the ceiling: every draft accepted), " << a.parallel << " stream(s), "
            << a.tokens << " tokens each, temperature " << a.temperature << "\n";
  std::vector<std::string> workloads = a.workload == "all" ? std::vector<std::string>{"repetitive", "free"}
                                                           : std::vector<std::string>{a.workload};
  run_once(*engine, a, workloads[0], false);  // warm-up
  std::cout << "| workload | k | serial tok/s | replay tok/s | speedup | accepted/drafted | mean accepted "
               "per verify | outputs |\n"
               "|---|---|---|---|---|---|---|---|\n";
  for (const auto& w : workloads) {
    RunResult s = run_once(*engine, a, w, false);
    for (int i = 0; i < a.parallel; ++i)
      (*recording)[{stream_seed(i), workload_prompt(engine->tokenizer(), w, i, a.prompt_tokens)}] =
          s.outputs[size_t(i)];
    const double ts = (s.generated - a.parallel) / (s.total_s - s.prefill_s);
    for (int k = a.sweep ? 1 : a.max_draft; k <= a.max_draft; ++k) {
      replay->set_max_k(k);
      RunResult d = run_once(*engine, a, w, true);
      const double td = (d.generated - a.parallel) / (d.total_s - d.prefill_s);
      // Each verify step yields its accepted drafts plus one sampled token; the prefill yields the first.
      const int64_t verifies = d.generated - a.parallel - d.accepted;
      std::cout << std::fixed << std::setprecision(1) << "| " << w << " | " << k << " | " << ts << " | " << td
                << " | " << std::setprecision(2) << td / ts << "x | " << d.accepted << "/" << d.drafted
                << " | " << double(d.accepted) / double(std::max<int64_t>(1, verifies)) << " | "
                << match(s.outputs == d.outputs) << " |\n";
      if (s.outputs != d.outputs) throw Error("replayed output differs from serial output on workload " + w);
    }
  }
  engine->shutdown();
}

// --shape: bench/cuda's benchmark where the CUDA backend is built. Its exit code 2 (no usable device) and
// this build's lack of the backend leave through CLI::RuntimeError, which main() returns as the exit code.
// The MoE shape (qwen3-30b-a3b) runs bf16 and mlx4: asked for alone with another format it is refused, and
// "all" gives it the formats it has.
void run_shape(const BenchArgs& a) {
  const bool moe = a.shape == bench::kMoeShapeId;
  [[maybe_unused]] const bool all = a.shape == "all";  // (read where the shape bench is built)
  if (moe)
    for (const std::string& f : a.formats)
      if (f != "bf16" && f != "mlx4")
        throw CLI::ValidationError("--format", "the MoE shape " + a.shape + " runs bf16 and mlx4, not " + f);
#ifdef TF_SHAPE_BENCH
  if (!moe) {
    bench::ShapeBenchOptions opt;
    opt.program = "tensorfold bench";
    opt.quick = a.quick;
    if (!a.formats.empty()) opt.formats = a.formats;
    if (!all) opt.shapes = {a.shape};
    if (const int rc = bench::run_shape_bench(opt); rc != 0) throw CLI::RuntimeError(rc);
  }
  if (moe || all) {
    bench::MoeShapeOptions opt;
    opt.program = "tensorfold bench";
    opt.quick = a.quick;
    if (!a.formats.empty()) {
      opt.formats.clear();
      for (const std::string& f : a.formats)
        if (moe || f == "bf16" || f == "mlx4") opt.formats.push_back(f);
      if (opt.formats.empty()) return;  // all: no format the MoE shape has
    }
    if (const int rc = bench::run_moe_shape_bench(opt); rc != 0) throw CLI::RuntimeError(rc);
  }
#else
  std::cerr << "tensorfold bench: the shape benchmark (--shape " << a.shape
            << ") needs the CUDA backend, and this build has none: build with nvcc installed "
               "(cmake -DTF_CUDA=ON) and run it on an NVIDIA GPU\n";
  throw CLI::RuntimeError(2);
#endif
}

void run_bench(const BenchArgs& a) {
  EngineOptions opt;
  opt.model_path = resolve_model_arg(a.model);
  opt.backend = a.backend;
  opt.parallel = a.parallel;
  opt.drafter = a.drafter;
  opt.draft_guard = a.draft_guard == "on";
  opt.cuda_graphs = a.cuda_graphs == "on";
  opt.pad_drafts = a.pad_drafts;
  opt.context = a.context;
  opt.prefill_chunk = 2048;
  opt.prompt_cache_gib = 0;  // throughput modes measure compute, not cache hits
  if (a.drafter == "replay") return run_replay(opt, a);
  if (a.cache_check || a.chat_turns > 0) {
    opt.parallel = 1;
    opt.prompt_cache_gib = a.cache_gib;
    opt.checkpoint_slots = 1;  // one retained prefix: the next other prompt evicts it
    if (a.cache_check) opt.spill_gib = a.spill_gib;
    BenchArgs one = a;
    one.parallel = 1;
    auto engine = create_engine(opt);
    std::cout << "model " << engine->info().id << " on " << engine->info().backend << "\n";
    if (a.cache_check) run_cache_check(*engine, one);
    if (a.chat_turns > 0) run_chat_check(*engine, one);
    engine->shutdown();
    return;
  }
  auto engine = create_engine(opt);
  const auto& info = engine->info();
  std::cout << "model " << info.id << " (" << info.parameters << " parameters) on " << info.backend
            << ", drafter " << info.drafter << " + context copies, " << a.parallel << " stream(s), "
            << a.tokens << " tokens each, temperature " << a.temperature << "\n";
  std::vector<std::string> workloads = a.workload == "all" ? std::vector<std::string>{"repetitive", "free"}
                                                           : std::vector<std::string>{a.workload};
  // Warm-up of both modes at the same shapes: one-time costs (CUDA graph captures of the decode and verify
  // shapes, the draft guard's first verdicts for this stream count) land here, not in the timed runs. They
  // are printed as the cold ratio, next to the steady state the table measures.
  auto rate = [&](const RunResult& r) { return (r.generated - a.parallel) / (r.total_s - r.prefill_s); };
  const RunResult cold_s = run_once(*engine, a, workloads[0], false);
  const RunResult cold_d = run_once(*engine, a, workloads[0], true);
  std::cout << std::fixed << std::setprecision(2) << "cold (first runs, " << workloads[0] << "): serial "
            << std::setprecision(1) << rate(cold_s) << " tok/s, drafted " << rate(cold_d) << " tok/s, "
            << std::setprecision(2) << rate(cold_d) / rate(cold_s) << "x\n";
  std::cout << "| workload | serial tok/s | drafted tok/s | speedup | accepted/drafted | tokens per step per "
               "stream | identical |"
            << (a.repeat > 1 ? " speedup range |\n" : "\n") << "|---|---|---|---|---|---|---|"
            << (a.repeat > 1 ? "---|\n" : "\n");
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  std::ostringstream rounds_note;
  for (const auto& w : workloads) {
    // --repeat pairs (serial, then drafted) on the same engine: a run of 256 tokens lasts ~50 ms on the
    // H200, where one host hiccup moves a single ratio by 10%; the medians are what the table reports.
    std::vector<double> ts, td, ratios;
    RunResult d, sr;  // counts summed over the drafted runs; the serial runs' decode rounds
    for (int i = 0; i < a.repeat; ++i) {
      const RunResult s = run_once(*engine, a, w, false), di = run_once(*engine, a, w, true);
      if (s.outputs != di.outputs) throw Error("drafted output differs from serial output on workload " + w);
      ts.push_back(rate(s)), td.push_back(rate(di)), ratios.push_back(rate(di) / rate(s));
      d.accepted += di.accepted, d.drafted += di.drafted, d.generated += di.generated,
          d.forwards += di.forwards;
      sr.decode_rounds += s.decode_rounds, sr.decode_round_s += s.decode_round_s,
          sr.decode_forward_s += s.decode_forward_s, sr.total_s += s.total_s - s.prefill_s;
    }
    // Where a serial token's time goes: the forward, the rest of the round, between rounds.
    if (sr.decode_rounds > 0)
      rounds_note << std::fixed << std::setprecision(3) << w << ": serial decode rounds "
                  << 1e3 * sr.total_s / double(sr.decode_rounds) << " ms apart, "
                  << 1e3 * sr.decode_round_s / double(sr.decode_rounds) << " ms a round, of which "
                  << 1e3 * sr.decode_forward_s / double(sr.decode_rounds) << " ms the forward ("
                  << sr.decode_rounds << " rounds)\n";
    std::cout << std::fixed << std::setprecision(1) << "| " << w << " | " << median(ts) << " | " << median(td)
              << " | " << std::setprecision(2) << median(ratios) << "x | " << d.accepted << "/" << d.drafted
              << " | " << double(d.generated) / std::max<int64_t>(1, d.forwards) / a.parallel << " | yes |";
    if (a.repeat > 1)
      std::cout << " " << *std::min_element(ratios.begin(), ratios.end()) << "-"
                << *std::max_element(ratios.begin(), ratios.end()) << "x over " << a.repeat << " pairs |";
    std::cout << "\n";
  }
  std::cout << rounds_note.str();
  if (const EngineStats st = engine->stats(); st.draft_guard_switches > 0)
    std::cout << "draft guard (docs/drafting.md): " << st.draft_guard_switches << " switch(es); drafting off "
              << "for " << st.draft_guard_off << " stream count(s) at the end\n";
  engine->shutdown();
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* c =
      app.add_subcommand("bench",
                         "Measure decode throughput with and without drafts (outputs must match), or the "
                         "CUDA backend at a model shape with random weights (--shape)");
  auto* model = c->add_option("model", a->model, "Checkpoint (default: the demo model)");
  c->add_option("--backend", a->backend, "auto | cuda | cpu")->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  c->add_option("--workload", a->workload, "repetitive | free | random | all")
      ->check(CLI::IsMember({"repetitive", "free", "random", "all"}));
  c->add_option("--drafter", a->drafter,
                "auto | none | mtp | DIR (a draft model) | replay (the ceiling: replays the serial run)");
  c->add_option("--max-draft", a->max_draft, "--drafter replay: longest proposal k")
      ->check(CLI::Range(1, 64));
  c->add_flag("--sweep", a->sweep, "--drafter replay: every k from 1 to --max-draft");
  c->add_option("--draft-guard", a->draft_guard,
                "on | off: switch drafting off while it makes rounds slower in wall time")
      ->check(CLI::IsMember({"on", "off"}));
  add_graph_options(*c, a->cuda_graphs, a->pad_drafts);
  c->add_option("--tokens", a->tokens, "Tokens generated per stream")->check(CLI::Range(2, 1 << 20));
  c->add_option("--parallel", a->parallel, "Concurrent streams")->check(CLI::PositiveNumber);
  c->add_option("--repeat", a->repeat,
                "Serial/drafted run pairs per workload; the table gives the median rates and speedup")
      ->check(CLI::Range(1, 100));
  c->add_option("--temperature", a->temperature, "Sampling temperature (seeded)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length of the random workload")
      ->check(CLI::PositiveNumber);
  c->add_option("--context", a->context, "Context capacity per stream (default: the model's, at most 32768)");
  c->add_flag(
      "--cache-check", a->cache_check,
      "Time to first token of a long prompt uncached, as a prompt-cache hit, and read back from the spill");
  c->add_option(
       "--chat-turns", a->chat_turns,
       "Time to first token of turn N of a chat whose history grows to --prompt-tokens, cached vs uncached")
      ->check(CLI::Range(1, 1000));
  c->add_option("--prompt-cache-gib", a->cache_gib, "Prompt cache of the cache modes (GiB)")
      ->check(CLI::PositiveNumber);
  c->add_option("--spill-gib", a->spill_gib, "Spill of --cache-check (GiB)")->check(CLI::PositiveNumber);
  const std::string shapes = bench::join_choices(bench::shape_bench_choices(), " | ");
  auto* shape =
      c->add_option(
           "--shape", a->shape,
           shapes +
               ": instead of a checkpoint, the CUDA backend at this model shape with "
               "random weights made on the GPU (no download): decode tok/s at batch "
               "1/8/32 and 512/8k context, prefill 512/4k/32k, a cuBLAS-linear "
               "baseline, fractions of the measured rooflines. qwen3-30b-a3b: the "
               "mixture-of-experts shape (bf16 and mlx4 only, both by default; decode at 512 context "
               "against the bytes a step reads, prefill 4k). Needs a CUDA build and "
               "GPU (exit code 2 otherwise); minutes per shape")
          ->check(CLI::IsMember(bench::shape_bench_choices()))
          ->excludes(model);
  c->add_flag("--quick", a->quick,
              "--shape: 512 context and prefill 512 only (a short run; the MoE shape: batch 1 and 8, no "
              "prefill)")
      ->needs(shape);
  const std::string formats = bench::join_choices(bench::weight_format_choices(), " | ");
  c->add_option(
       "--format", a->formats,
       formats +
           ", or a comma-separated list (default bf16). --shape: the weight format of the linears. "
           "bf16: the full --shape report. Each quantized format (MLX 4/8-bit g64, FP8 128x128 blocks): "
           "decode b=1/8/16/32 at 512/8k context and prefill 512/4k of the same forward with random "
           "linears of that format, the roofline fraction on its own bytes, and the ratio to the bf16 "
           "forward timed alongside (--quick: 512 context, prefill 512)")
      ->delimiter(',')
      ->allow_extra_args(false)  // one list an occurrence: a checkpoint after it stays the positional
      ->check(CLI::IsMember(bench::weight_format_choices()))
      ->needs(shape);
  c->callback([a] {
    if (!a->shape.empty()) return run_shape(*a);
    run_bench(*a);
  });
}

}  // namespace tf::cli

// `tensorfold bench [MODEL]`: prefill and decode throughput of a checkpoint through the engine, and what
// drafting buys: each workload runs with drafts and with `draft: false`, the two outputs are compared token
// for token (they must be identical), and the speedup and mean accepted length are printed. (The GPU
// roofline benchmark at real shapes with random weights is bench/cuda.)
#include <chrono>
#include <iomanip>
#include <iostream>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

namespace tf::cli {

namespace {

struct BenchArgs {
  std::string model, backend = "auto", workload = "all", drafter = "auto";
  int tokens = 256, parallel = 1, prompt_tokens = 128, context = 0;
  float temperature = 0.f;
  bool cache_check = false;
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

std::vector<int32_t> workload_prompt(const Tokenizer& tok, const std::string& w, int stream, int random_len) {
  if (w == "repetitive")
    return tok.encode(std::string(kSource) + "\n\n# The same function again, unchanged:\n" + std::string(kSource).substr(0, 60 + stream), true);
  if (w == "free") return tok.encode("import numpy as np\n\n\ndef moving_average(values, window", true);
  std::vector<int32_t> p;
  for (int t = 0; t < random_len; ++t) p.push_back((t * 7919 + stream * 104729) % 1000 + 10);
  return p;
}

struct RunResult {
  double prefill_s = 0, total_s = 0;
  int64_t prompt = 0, generated = 0, drafted = 0, accepted = 0, forwards = 0, cached = 0;
  std::vector<std::vector<int32_t>> outputs;
};

RunResult run_once(Engine& e, const BenchArgs& a, const std::string& w, bool draft) {
  RunResult r;
  const int64_t f0 = e.stats().forward_passes;
  std::vector<std::shared_ptr<RequestHandle>> hs;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.parallel; ++i) {
    GenerationRequest q;
    q.prompt = workload_prompt(e.tokenizer(), w, i, a.prompt_tokens);
    q.max_tokens = a.tokens;
    q.ignore_eos = true;
    q.draft = draft;
    q.sampling.temperature = a.temperature;
    q.sampling.seed = 1000 + i;
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
            first = std::max(first, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
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
  r.forwards = e.stats().forward_passes - f0;
  return r;
}

// Time to first token of the same long prompt without and with a prompt-cache hit (outputs must match).
void run_cache_check(Engine& e, const BenchArgs& a) {
  BenchArgs one = a;
  one.parallel = 1;
  RunResult miss = run_once(e, one, "random", true), hit = run_once(e, one, "random", true);
  std::cout << std::fixed << std::setprecision(1) << "prompt " << miss.prompt << " tokens: time to first token "
            << miss.prefill_s * 1e3 << " ms uncached, " << hit.prefill_s * 1e3 << " ms with " << hit.cached
            << " cached tokens (" << std::setprecision(2) << miss.prefill_s / hit.prefill_s << "x); outputs "
            << (miss.outputs == hit.outputs ? "identical" : "DIFFERENT") << "\n";
  if (miss.outputs != hit.outputs) throw Error("a prompt-cache hit changed the output");
}

void run_bench(const BenchArgs& a) {
  EngineOptions opt;
  opt.model_path = resolve_model_arg(a.model);
  opt.backend = a.backend;
  opt.parallel = a.parallel;
  opt.drafter = a.drafter;
  opt.context = a.context;
  opt.prefill_chunk = 2048;
  opt.prompt_cache_gib = a.cache_check ? 4 : 0;  // otherwise measure compute, not cache hits
  auto engine = create_engine(opt);
  if (a.cache_check) {
    run_cache_check(*engine, a);
    engine->shutdown();
    return;
  }
  const auto& info = engine->info();
  std::cout << "model " << info.id << " (" << info.parameters << " parameters) on " << info.backend << ", drafter "
            << info.drafter << " + context copies, " << a.parallel << " stream(s), " << a.tokens
            << " tokens each, temperature " << a.temperature << "\n";
  std::vector<std::string> workloads = a.workload == "all" ? std::vector<std::string>{"repetitive", "free"}
                                                           : std::vector<std::string>{a.workload};
  run_once(*engine, a, workloads[0], false);  // warm-up
  std::cout << "| workload | serial tok/s | drafted tok/s | speedup | accepted/drafted | tokens per step per stream | identical |\n"
               "|---|---|---|---|---|---|---|\n";
  for (const auto& w : workloads) {
    RunResult s = run_once(*engine, a, w, false), d = run_once(*engine, a, w, true);
    const double ts = (s.generated - a.parallel) / (s.total_s - s.prefill_s);
    const double td = (d.generated - a.parallel) / (d.total_s - d.prefill_s);
    std::cout << std::fixed << std::setprecision(1) << "| " << w << " | " << ts << " | " << td << " | "
              << std::setprecision(2) << td / ts << "x | " << d.accepted << "/" << d.drafted << " | "
              << double(d.generated) / std::max<int64_t>(1, d.forwards) / a.parallel << " | "
              << (s.outputs == d.outputs ? "yes" : "NO") << " |\n";
    if (s.outputs != d.outputs) throw Error("drafted output differs from serial output on workload " + w);
  }
  engine->shutdown();
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* c = app.add_subcommand("bench", "Measure decode throughput with and without drafts (outputs must match)");
  c->add_option("model", a->model, "Checkpoint (default: the demo model)");
  c->add_option("--backend", a->backend, "auto | cuda | cpu")->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  c->add_option("--workload", a->workload, "repetitive | free | random | all")
      ->check(CLI::IsMember({"repetitive", "free", "random", "all"}));
  c->add_option("--drafter", a->drafter, "auto | none | mtp | DIR (a draft model)");
  c->add_option("--tokens", a->tokens, "Tokens generated per stream")->check(CLI::Range(2, 1 << 20));
  c->add_option("--parallel", a->parallel, "Concurrent streams")->check(CLI::PositiveNumber);
  c->add_option("--temperature", a->temperature, "Sampling temperature (seeded)")->check(CLI::NonNegativeNumber);
  c->add_option("--prompt-tokens", a->prompt_tokens, "Prompt length of the random workload")->check(CLI::PositiveNumber);
  c->add_option("--context", a->context, "Context capacity per stream (default: the model's, at most 32768)");
  c->add_flag("--cache-check", a->cache_check, "Time to first token of a long prompt uncached vs a prompt-cache hit");
  c->callback([a] { run_bench(*a); });
}

}  // namespace tf::cli

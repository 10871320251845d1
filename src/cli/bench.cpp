// `tensorfold bench [MODEL]`: decode and prefill throughput of a checkpoint through the engine on the
// chosen backend. (The GPU roofline benchmark at real shapes with random weights lives in bench/cuda.)
#include <chrono>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "text/tokenizer.h"

namespace tf::cli {

namespace {

struct BenchArgs {
  std::string model, backend = "auto";
  int prompt = 128, tokens = 64, parallel = 1;
};

void run_bench(const BenchArgs& a) {
  EngineOptions opt;
  opt.model_path = resolve_model_arg(a.model);
  opt.backend = a.backend;
  opt.parallel = a.parallel;
  auto engine = create_engine(opt);
  std::cout << "model " << engine->info().id << " on " << engine->info().backend << "\n";
  std::vector<std::shared_ptr<RequestHandle>> hs;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.parallel; ++i) {
    GenerationRequest r;
    for (int t = 0; t < a.prompt; ++t) r.prompt.push_back((t * 7919 + i * 104729) % 100 + 10);
    r.max_tokens = a.tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    hs.push_back(engine->submit(r));
  }
  int64_t generated = 0;
  double ttft = 0;
  for (auto& h : hs) {
    StreamEvent ev;
    bool first = true;
    while (h->next(ev, std::chrono::seconds(600))) {
      if (ev.kind == StreamEvent::Kind::Tokens && first) {
        ttft = std::max(ttft, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        first = false;
      }
      if (ev.kind == StreamEvent::Kind::Error) throw Error(ev.error);
      if (ev.kind == StreamEvent::Kind::Finished) {
        generated += ev.usage.completion_tokens;
        break;
      }
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "streams " << a.parallel << ", prompt " << a.prompt << ", generated " << generated << "\n";
  std::cout << "prefill (all streams) " << a.prompt * a.parallel / ttft << " tok/s, decode " << (generated - a.parallel) / (total - ttft)
            << " tok/s aggregate\n";
  engine->shutdown();
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* c = app.add_subcommand("bench", "Measure prefill and decode throughput of a checkpoint");
  c->add_option("model", a->model, "Checkpoint (default: the demo model)");
  c->add_option("--backend", a->backend, "auto | cuda | cpu")->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  c->add_option("--prompt", a->prompt, "Prompt tokens per stream")->check(CLI::PositiveNumber);
  c->add_option("--tokens", a->tokens, "Tokens generated per stream")->check(CLI::Range(2, 1 << 20));
  c->add_option("--parallel", a->parallel, "Concurrent streams")->check(CLI::PositiveNumber);
  c->callback([a] { run_bench(*a); });
}

}  // namespace tf::cli

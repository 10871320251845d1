// tf-loadgen: HTTP load generator for `tensorfold serve` (issue 8's benchmark). For each concurrency level
// of the sweep it runs that many streaming clients and prints one markdown table row: aggregate output
// tokens/s, TTFT and inter-token latency p50/p99, and the ratios to the single-client level.
//
//   tf-loadgen --url http://127.0.0.1:8080 --clients 1,8,32,64 --prompt-tokens 512 --max-tokens 256
//
// Requests send "ignore_eos": true (every request generates exactly --max-tokens) and "draft": false by
// default, so each SSE chunk carries one token; --count logprobs counts tokens per chunk exactly instead
// (needed with --draft), at the price of host-side sampling on the server. Exit status 1 when a request
// failed or came back with a token count other than --max-tokens. --endpoint chat sends the prompts as
// text to /v1/chat/completions instead of token ids to /v1/completions.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "loadgen.h"
#include "report.h"

namespace {

struct Args {
  tf::loadgen::LoadOptions opt;
  std::vector<int> clients = {1};
  std::string prompt_kind = "random", count = "continuous", endpoint = "completions", json_path;
  int warmup = 1;
};

void add_options(CLI::App& app, Args& a) {
  auto& o = a.opt;
  app.add_option("--url", o.url, "Server root")->capture_default_str();
  app.add_option("--api-key", o.api_key, "Bearer key, when the server requires one");
  app.add_option("--model", o.model, "Model id (default: the first of /v1/models)");
  app.add_option("--clients", a.clients, "Concurrency levels, e.g. 1,8,32,64")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--endpoint", a.endpoint,
                 "completions (token-id prompts of exact length) or chat (their text as one user message)")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  app.add_option("--prompt-tokens", o.prompt_tokens, "Prompt length in tokens")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--prompt", a.prompt_kind,
                 "random (random words, new for every request) or repeat (one sentence)")
      ->check(CLI::IsMember({"random", "repeat"}))
      ->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "Output tokens per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--requests", o.requests_per_client, "Requests per client and level")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--duration", o.duration_s,
                 "Seconds per level after which clients start no new request (0: off)");
  app.add_option("--ramp", o.ramp_s, "Seconds over which a level's clients start (0: all at once)");
  app.add_option("--temperature", o.temperature, "Sampling temperature")->capture_default_str();
  app.add_flag("--draft", o.draft, "Let the server draft (sends \"draft\": true; use with --count logprobs)");
  app.add_option(
         "--count", a.count,
         "How tokens are counted per chunk: continuous (running usage counts, vLLM's "
         "continuous_usage_stats), logprobs, or usage (a chunk with text is one token; the final usage "
         "chunk checks the total)")
      ->check(CLI::IsMember({"continuous", "usage", "logprobs"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the prompts and of the requests' sampling")
      ->capture_default_str();
  app.add_option("--warmup", a.warmup, "Untimed single-client requests before the sweep")
      ->capture_default_str();
  app.add_option("--timeout", o.timeout_s, "Read timeout per request, seconds")->capture_default_str();
  app.add_flag("--cold-connections", o.cold_connections,
               "Connect inside the timed level, all clients at once (default: connect one by one before it)");
  app.add_option("--json", a.json_path, "Also write the report (with per-request records) to this file");
}

int run(Args& a) {
  using namespace tf::loadgen;
  a.opt.repeat_prompt = a.prompt_kind == "repeat";
  a.opt.count_logprobs = a.count == "logprobs";
  a.opt.count_continuous = a.count == "continuous";
  a.opt.chat = a.endpoint == "chat";
  PromptSource prompts(a.opt);
  uint64_t index = 0;
  if (a.warmup > 0) {
    LoadOptions w = a.opt;
    w.requests_per_client = a.warmup;
    w.duration_s = 0;
    double wall;
    for (const auto& r : run_level(w, prompts, 1, 1u << 30, &wall))
      if (!r.ok) std::fprintf(stderr, "warmup request failed: %s\n", r.error.c_str());
  }
  std::vector<LevelReport> levels;
  std::vector<std::vector<RequestResult>> raw;
  for (int c : a.clients) {
    double wall = 0;
    raw.push_back(run_level(a.opt, prompts, c, index, &wall));
    index += raw.back().size();
    levels.push_back(summarize(c, raw.back(), wall, a.opt.max_tokens));
    const auto& l = levels.back();
    std::fprintf(stderr, "clients %d: %d requests, %d errors, %.1f tok/s, ITL p99 %.2f ms\n", c, l.requests,
                 l.errors, l.tokens_per_s, l.itl_p99_ms);
    for (const auto& e : l.error_samples) std::fprintf(stderr, "  error: %s\n", e.c_str());
  }
  const LevelReport* base = nullptr;
  for (const auto& l : levels)
    if (l.clients == 1) base = &l;
  std::printf(
      "model %s, /v1/%s, prompt %d tokens (%s), %d output tokens, %d requests per client, "
      "temperature %g, draft %s\n\n",
      prompts.model().c_str(), a.opt.chat ? "chat/completions" : "completions", a.opt.prompt_tokens,
      a.prompt_kind.c_str(), a.opt.max_tokens, a.opt.requests_per_client, a.opt.temperature,
      a.opt.draft ? "on" : "off");
  std::printf("%s\n", markdown_header().c_str());
  for (const auto& l : levels) std::printf("%s\n", markdown_row(l, base).c_str());
  for (const auto& l : levels)
    if (base && l.clients == 32) std::printf("\n%s\n", target_line(l, *base).c_str());
  bool clean = true;
  for (const auto& l : levels) clean = clean && l.errors == 0 && l.short_requests == 0;
  if (!a.json_path.empty()) {
    nlohmann::json j = {{"model", prompts.model()},
                        {"url", a.opt.url},
                        {"endpoint", a.endpoint},
                        {"prompt_tokens", a.opt.prompt_tokens},
                        {"prompt", a.prompt_kind},
                        {"max_tokens", a.opt.max_tokens},
                        {"requests_per_client", a.opt.requests_per_client},
                        {"temperature", a.opt.temperature},
                        {"draft", a.opt.draft},
                        {"count", a.count},
                        {"levels", nlohmann::json::array()}};
    for (size_t i = 0; i < levels.size(); ++i) j["levels"].push_back(to_json(levels[i], base, raw[i]));
    std::ofstream(a.json_path) << j.dump(2) << "\n";
  }
  return clean ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tf-loadgen: concurrent streaming clients against a running `tensorfold serve`"};
  Args a;
  add_options(app, a);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tf-loadgen: %s\n", e.what());
    return 2;
  }
}

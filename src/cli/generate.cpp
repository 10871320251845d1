// `tensorfold generate [MODEL] --prompt TEXT | --chat TEXT`: streams the reply to the terminal and prints
// tokens/s at the end.
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "engine/json_matcher.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tf::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, chat, system, backend = "auto", cuda_graphs = "on", pad_drafts = "off";
  std::string json_schema;  // a file, or "object" for any JSON object
  int max_tokens = 256, min_tokens = 0, context = 0;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool ignore_eos = false, no_thinking = false, quiet = false;
};

void run_generate(const GenerateArgs& a) {
  if (a.prompt.empty() == a.chat.empty()) throw Error("give exactly one of --prompt TEXT or --chat TEXT");
  EngineOptions opt;
  opt.model_path = resolve_model_arg(a.model);
  opt.backend = a.backend;
  opt.context = a.context;
  opt.parallel = 1;
  opt.temperature = a.temperature;
  opt.top_p = a.top_p;
  opt.top_k = a.top_k;
  opt.min_p = a.min_p;
  opt.cuda_graphs = a.cuda_graphs == "on";
  opt.pad_drafts = a.pad_drafts;
  auto engine = create_engine(opt);
  const auto& info = engine->info();
  GenerationRequest req;
  if (!a.chat.empty()) {
    const ChatTemplate* tpl = engine->chat_template();
    if (!tpl) throw Error(info.path + " has no chat template; use --prompt");
    nlohmann::json messages = nlohmann::json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    messages.push_back({{"role", "user"}, {"content", a.chat}});
    nlohmann::json kwargs = nlohmann::json::object();
    if (a.no_thinking) kwargs["enable_thinking"] = false;
    req.prompt = engine->tokenizer().encode(tpl->render(messages, nullptr, true, kwargs), false);
  } else {
    req.prompt = engine->tokenizer().encode(a.prompt, true);
  }
  req.sampling = info.default_sampling;
  req.sampling.seed = a.seed;
  req.max_tokens = a.max_tokens;
  req.stop = a.stop;
  req.ignore_eos = a.ignore_eos;
  req.min_tokens = a.min_tokens;
  if (a.json_schema == "object") {
    req.json_schema = JsonSchema::any_object();
  } else if (!a.json_schema.empty()) {
    std::ifstream in(a.json_schema);
    if (!in) throw Error("cannot read the JSON schema " + a.json_schema);
    const auto schema = nlohmann::ordered_json::parse(in, nullptr, false);  // keeps the property order
    if (schema.is_discarded()) throw Error(a.json_schema + " is not JSON");
    req.json_schema = JsonSchema::compile(schema);  // InvalidRequest names what is not supported
  }
  if (!a.quiet)
    std::cerr << "model " << info.id << " (" << info.family << ", " << info.parameters << " parameters, "
              << info.dtype << ") on " << info.backend << "; prompt " << req.prompt.size() << " tokens\n";
  const auto t0 = std::chrono::steady_clock::now();
  auto h = engine->submit(req);
  StreamEvent ev;
  std::optional<std::chrono::steady_clock::time_point> first;
  Usage usage;
  FinishReason reason = FinishReason::None;
  for (;;) {
    if (!h->next(ev, std::chrono::milliseconds(100))) continue;
    if (ev.kind == StreamEvent::Kind::Tokens) {
      if (!first) first = std::chrono::steady_clock::now();
      std::cout << ev.text << std::flush;
    } else if (ev.kind == StreamEvent::Kind::Error) {
      throw Error(ev.error);
    } else {
      usage = ev.usage;
      reason = ev.finish;
      break;
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  std::cout << "\n";
  const double total = std::chrono::duration<double>(t1 - t0).count();
  const double decode = first ? std::chrono::duration<double>(t1 - *first).count() : 0;
  if (!a.quiet) {
    std::cerr << "[" << usage.completion_tokens << " tokens, finish " << finish_reason_name(reason) << ", "
              << (first ? std::chrono::duration<double>(*first - t0).count() * 1000 : 0)
              << " ms to first token, ";
    if (usage.completion_tokens > 1 && decode > 0)
      std::cerr << (usage.completion_tokens - 1) / decode << " tok/s decode, ";
    std::cerr << total << " s total]\n";
  }
  engine->shutdown();
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  auto* c =
      app.add_subcommand("generate", "Generate text from a prompt or one chat message, streamed to stdout");
  c->add_option("model", a->model, "Checkpoint directory or org/name (default: the embedded demo model)");
  c->add_option("-p,--prompt", a->prompt, "Raw prompt text (completion)");
  c->add_option("-c,--chat", a->chat, "One user message, rendered with the model's chat template");
  c->add_option("--system", a->system, "System message for --chat");
  c->add_option("-n,--max-tokens", a->max_tokens, "Reply limit in tokens")->check(CLI::PositiveNumber);
  c->add_option("--temperature", a->temperature, "Sampling temperature (0 = greedy)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--top-p", a->top_p, "Nucleus sampling mass")->check(CLI::Range(0.0, 1.0));
  c->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--min-p", a->min_p, "Drop tokens below min-p times the top probability")
      ->check(CLI::Range(0.0, 1.0));
  c->add_option("--seed", a->seed, "Sampling seed (default: derived from the prompt)");
  c->add_option("--stop", a->stop, "Stop string (repeatable)");
  c->add_flag("--ignore-eos", a->ignore_eos, "Keep generating past end-of-sequence tokens");
  c->add_option("--min-tokens", a->min_tokens,
                "No end-of-sequence token and no stop string before this many tokens (vLLM's min_tokens)")
      ->check(CLI::NonNegativeNumber);
  c->add_option(
      "--json-schema", a->json_schema,
      "Structured output: a JSON Schema file the reply must satisfy, or 'object' for any JSON object "
      "(constrained decoding; docs/api.md)");
  c->add_flag("--no-thinking", a->no_thinking, "Pass enable_thinking=false to the chat template");
  c->add_option("--backend", a->backend, "auto | cuda | cpu")->check(CLI::IsMember({"auto", "cuda", "cpu"}));
  c->add_option("--context", a->context, "Context capacity in tokens (default: the model's, at most 32768)");
  add_graph_options(*c, a->cuda_graphs, a->pad_drafts);
  c->add_flag("-q,--quiet", a->quiet, "Print only the generated text");
  c->callback([a] { run_generate(*a); });
}

}  // namespace tf::cli

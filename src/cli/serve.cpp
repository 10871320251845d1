// `tensorfold serve [MODEL]`: loads the model, prints the startup report, serves until SIGINT/SIGTERM,
// then stops accepting, ends in-flight requests and exits 0.
#include "cli/serve.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/engine.h"
#include "server/http_server.h"
#include "server/live_line.h"
#include "server/model_text.h"
#include "server/options.h"
#include "server/request_log.h"
#include "server/shutdown.h"

namespace tf::cli {

namespace {

struct ServeArgs {
  std::string model, host = "127.0.0.1", name, backend = "auto", log_format = "text";
  int port = 8080, context = 0, max_tokens = 4096, read_timeout = 10;
  std::string parallel = "4";
  std::vector<std::string> aliases, api_keys;
  std::string api_key_file, drafter = "auto", reasoning_effort;
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
  int mtp_drafts = 3, checkpoint_slots = 0, max_snapshots = 0, max_queue = 256, prefill_chunk = 0;
  double decode_share = 0, gpu_memory = 0.9;
  float mtp_confidence = 0.f;
  std::string draft_guard = "on", cuda_graphs = "on", pad_drafts = "off";
  double prompt_cache_gib = 0.25, spill_gib = 0;
  std::string spill_dir, snapshot_dir = "none";
  bool thinking = false, no_thinking = false, no_drafts = false;
  int thinking_budget = 0;
  std::optional<bool> metrics;
  size_t max_body_bytes = 8u << 20;
};

server::ServerOptions server_options(const ServeArgs& a) {
  server::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.name = a.name;
  o.aliases = a.aliases;
  o.api_keys = a.api_keys;
  if (!a.api_key_file.empty()) {
    for (auto& k : server::read_api_key_file(a.api_key_file)) o.api_keys.push_back(k);
  }
  if (const char* env = std::getenv("TENSORFOLD_API_KEY"); env && *env && o.api_keys.empty())
    o.api_keys.push_back(env);
  o.log_format = server::parse_log_format(a.log_format);
  o.metrics = a.metrics;
  o.default_max_tokens = a.max_tokens;
  o.max_body_bytes = a.max_body_bytes;
  o.read_timeout_s = a.read_timeout;
  o.worker_threads = std::max(32, 4 * (a.parallel == "auto" ? 64 : std::stoi(a.parallel)));
  if (a.thinking) o.default_template_kwargs["enable_thinking"] = true;
  if (a.no_thinking) o.default_template_kwargs["enable_thinking"] = false;
  if (!a.reasoning_effort.empty()) o.default_template_kwargs["reasoning_effort"] = a.reasoning_effort;
  o.thinking_budget = a.thinking_budget;
  const char* no_live = std::getenv("TENSORFOLD_NO_LIVE");
  o.live_line = isatty(STDERR_FILENO) && !(no_live && *no_live && std::string(no_live) != "0");
  return o;
}

EngineOptions engine_options(const ServeArgs& a) {
  EngineOptions e;
  e.model_path = resolve_model_arg(a.model);
  e.name = a.name;
  e.context = a.context;
  e.backend = a.backend;
  e.parallel = a.parallel == "auto" ? 0 : std::stoi(a.parallel);
  e.max_tokens = a.max_tokens;
  e.temperature = a.temperature;
  e.top_p = a.top_p;
  e.top_k = a.top_k;
  e.min_p = a.min_p;
  e.drafts = !a.no_drafts;
  e.drafter = a.drafter;
  e.mtp_drafts = a.mtp_drafts;
  e.mtp_confidence = a.mtp_confidence;
  e.draft_guard = a.draft_guard == "on";
  e.prompt_cache_gib = a.prompt_cache_gib;
  e.checkpoint_slots = a.checkpoint_slots;
  e.spill_gib = a.spill_gib;
  e.spill_dir = a.spill_dir;
  e.snapshot_dir = a.snapshot_dir == "none" ? "" : a.snapshot_dir;
  e.max_snapshots = a.max_snapshots;
  e.max_queue = a.max_queue;
  e.prefill_chunk = a.prefill_chunk;
  e.decode_share = a.decode_share;
  e.gpu_memory_utilization = a.gpu_memory;
  e.cuda_graphs = a.cuda_graphs == "on";
  e.pad_drafts = a.pad_drafts;
  return e;
}

void run_serve(const ServeArgs& a) {
  // Before any thread starts: SIGINT/SIGTERM are then only ever taken by the waiter in serve_until_signal.
  server::block_shutdown_signals();
  server::ServerOptions sopt = server_options(a);  // validates before the (slow) model load
  auto engine = create_engine(engine_options(a));
  auto text = server::make_engine_text(*engine);
  server::HttpServer http(*engine, *text, sopt);
  http.bind();
  server::write_log_line(server::startup_report(engine->info(), sopt, http.url()));
  {
    std::unique_ptr<server::LiveLine> live;
    if (sopt.live_line) live = std::make_unique<server::LiveLine>(*engine, http.stats());
    server::serve_until_signal(http);
  }
  engine->shutdown();
  server::write_log_line("tensorfold serve: stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API (docs/api.md)");
  cmd->add_option("MODEL", a->model,
                  "Local checkpoint directory or org/name[@revision] in the Hugging Face cache; default: the "
                  "embedded demo model");
  cmd->add_option("--host", a->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", a->port, "Port to listen on")->check(CLI::Range(1, 65535))->capture_default_str();
  cmd->add_option("--name", a->name, "Model id advertised by /v1/models (default: the checkpoint's name)");
  // Repeatable options take one value each, so a MODEL after them stays the positional.
  cmd->add_option("--alias", a->aliases, "Another model id accepted in requests (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--context", a->context,
                  "Prompt + reply capacity per stream (default: min(native context, 32768))")
      ->check(CLI::Range(16, 1 << 24));
  cmd->add_option("--max-tokens", a->max_tokens, "Default reply limit when a request gives none")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "Default temperature (else generation_config.json)")
      ->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--top-p", a->top_p, "Default top-p")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", a->top_k, "Default top-k (0 = off)")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--min-p", a->min_p, "Default min-p")->check(CLI::Range(0.0, 1.0));
  auto* think = cmd->add_flag("--thinking", a->thinking, "Chat template: enable_thinking=true by default");
  auto* no_think =
      cmd->add_flag("--no-thinking", a->no_thinking, "Chat template: enable_thinking=false by default");
  think->excludes(no_think);
  cmd->add_option("--reasoning-effort", a->reasoning_effort, "Chat template reasoning_effort default")
      ->check(CLI::IsMember({"low", "medium", "high"}));
  cmd->add_option(
         "--thinking-budget", a->thinking_budget,
         "Reasoning tokens before the server closes the thinking block (0 = no limit; requests may override)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--backend", a->backend, "Compute backend")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--parallel", a->parallel, "Streams decoded together: N or auto (from free GPU memory)")
      ->check(CLI::IsMember({"auto"}) | CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_flag("--no-drafts", a->no_drafts, "Never draft speculatively (output is identical either way)");
  cmd->add_option(
         "--drafter", a->drafter,
         "auto | none | mtp | DIR (a draft model sharing the tokenizer); auto = the checkpoint's MTP "
         "head, else its draft/ subfolder")
      ->check(CLI::IsMember({"auto", "none", "mtp"}) | CLI::ExistingDirectory)
      ->capture_default_str();
  cmd->add_option("--mtp-drafts", a->mtp_drafts, "MTP draft chain length")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_flag_function(
      "--metrics,!--no-metrics", [a](int64_t n) { a->metrics = n > 0; },
      "Serve GET /metrics (default: on when listening on loopback)");
  cmd->add_option("--mtp-confidence", a->mtp_confidence, "Stop an MTP draft chain below this probability")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--draft-guard", a->draft_guard,
                  "Switch drafting off while it makes rounds slower in wall time (docs/drafting.md)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  add_graph_options(*cmd, a->cuda_graphs, a->pad_drafts);
  cmd->add_option("--prompt-cache-gib", a->prompt_cache_gib,
                  "Memory for retained conversation prefixes (0 disables)")
      ->check(CLI::Range(0.0, 1024.0))
      ->capture_default_str();
  cmd->add_option("--checkpoint-slots", a->checkpoint_slots,
                  "Retained prefixes at most (0 = bounded by memory)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--spill-gib", a->spill_gib,
                  "Write evicted prefixes to disk up to this size and read them back")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--spill-dir", a->spill_dir,
                  "Directory for spilled prefixes (default: a private one under $TMPDIR)");
  cmd->add_option("--snapshot-dir", a->snapshot_dir,
                  "Persistent prefix snapshots that survive restarts, or none")
      ->capture_default_str();
  cmd->add_option("--max-snapshots", a->max_snapshots, "Snapshot blocks kept on disk (0 = bounded by size)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-queue", a->max_queue, "Requests waiting beyond --parallel; more get 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option(
         "--prefill-chunk", a->prefill_chunk,
         "Prompt tokens per round, shared by the waiting prompts (running replies go first); 0: auto, "
         "512-16384 on a GPU by its memory and --context (16384 for an 8B model at 2048 tokens on an H200), "
         "512 "
         "on the CPU")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option(
         "--decode-share", a->decode_share,
         "While replies are decoding, prompt rows per round are capped so that the round takes at most "
         "1/F of a decode-only round (measured; 0: full --prefill-chunk)")
      ->check(CLI::Range(0.0, 0.95))
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", a->gpu_memory,
                  "Fraction of the GPU's memory for weights + workspace + KV pool (the pool gets the rest)")
      ->check(CLI::Range(0.05, 0.99))
      ->capture_default_str();
  cmd->add_option("--api-key", a->api_keys, "Require 'Authorization: Bearer KEY' (repeatable)")
      ->allow_extra_args(false);
  cmd->add_option("--api-key-file", a->api_key_file, "File with accepted keys, one per line")
      ->check(CLI::ExistingFile);
  cmd->add_option("--log-format", a->log_format, "Request log format")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", a->max_body_bytes, "Largest request body accepted (larger: 413)")
      ->check(CLI::Range(size_t(1024), size_t(1) << 32))
      ->capture_default_str();
  cmd->add_option("--read-timeout", a->read_timeout, "Seconds a client may take to send its request")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace tf::cli

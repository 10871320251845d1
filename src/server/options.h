#pragma once
// What `tensorfold serve` configures in the HTTP layer (the engine has its own EngineOptions).
#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tf::server {

enum class LogFormat { Text, Json };

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string name;                   // advertised model id; empty = the engine's ModelInfo::id
  std::vector<std::string> aliases;   // more ids accepted in "model"
  std::vector<std::string> api_keys;  // empty = no auth
  LogFormat log_format = LogFormat::Text;
  int default_max_tokens = 4096;     // reply limit when a request gives none (clipped to the context)
  size_t max_body_bytes = 8u << 20;  // larger bodies get 413
  int read_timeout_s = 10;           // a request must arrive within this (slow-loris guard)
  int write_timeout_s = 30;          // a client that stops reading is dropped after this
  int worker_threads = 32;           // concurrent connections being served
  int max_n = 16;                    // largest "n" (choices per request)
  // Chat template kwargs applied to every request before the request's own chat_template_kwargs
  // (--thinking / --no-thinking, --reasoning-effort).
  nlohmann::ordered_json default_template_kwargs = nlohmann::ordered_json::object();
  // Reasoning tokens after which the server closes the thinking block (thinking_budget.h); 0: no limit.
  // Requests override it (chat/Responses "thinking_budget", Messages thinking.budget_tokens).
  int thinking_budget = 0;
  bool live_line = false;  // one live throughput line on a terminal
  // GET /metrics: on, off, or (unset) on exactly when listening on a loopback address.
  std::optional<bool> metrics;
  bool metrics_enabled() const {
    return metrics.value_or(host == "127.0.0.1" || host == "localhost" || host == "::1" ||
                            host.rfind("127.", 0) == 0);
  }
};

// Parses "text" / "json"; throws tf::Error otherwise.
LogFormat parse_log_format(const std::string& s);

// Keys from a file, one per line; blank lines and lines starting with '#' are skipped.
std::vector<std::string> read_api_key_file(const std::string& path);

}  // namespace tf::server

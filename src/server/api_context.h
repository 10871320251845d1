#pragma once
// What every endpoint handler sees: the engine, the model's text side, the options and live counters.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/model_text.h"
#include "server/options.h"

namespace tf::server {

// Counters shown on GET /health (also how tests observe that a dropped stream stopped generating).
struct ServerStats {
  std::atomic<int64_t> requests_total{0};
  std::atomic<int64_t> requests_failed{0};     // answered with an error status
  std::atomic<int64_t> generations_active{0};  // submitted streams not yet finished or cancelled
  std::atomic<int64_t> generations_total{0};
  std::atomic<int64_t> cancelled_by_client{0};  // streams cancelled because the client went away
  std::atomic<int64_t> tokens_generated{0};
};

struct ApiContext {
  Engine& engine;
  const ModelText& text;
  const ServerOptions& options;
  ServerStats& stats;
  const std::atomic<bool>& shutting_down;

  const ModelInfo& info() const { return engine.info(); }
  // The advertised id first, then the aliases.
  std::vector<std::string> model_ids() const;
  // Checks a request's "model" (absent = the served model); throws 404 for an unknown id.
  std::string check_model(const std::string* requested) const;
};

}  // namespace tf::server

#pragma once
// GET /metrics: Prometheus text format (version 0.0.4). Engine gauges and counters come from
// Engine::stats() at scrape time; latency histograms are observed per finished request. Every series
// has a tensorfold_* name and, where vLLM has the same quantity, vLLM's name as an alias (same value),
// so existing vLLM dashboards work unchanged.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/api_context.h"
#include "server/request_log.h"

namespace tf::server {

// Cumulative histogram with fixed upper bounds (seconds).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v, int64_t times = 1);
  // The _bucket/_sum/_count lines for `name` with `labels` (e.g. model_name="x").
  std::string render(const std::string& name, const std::string& labels) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // One finished generation request (chat, completions, messages, responses): time to first token,
  // end-to-end latency and the mean gap between its later tokens (observed once per gap).
  void observe_request(const RequestRecord& r);
  std::string render(const ApiContext& ctx) const;

 private:
  Histogram ttft_, itl_, e2e_;
  std::atomic<int64_t> prompt_tokens_{0}, cached_tokens_{0};  // of finished requests (vLLM counts these)
};

// The server's one registry (handlers and the request logger feed it).
Metrics& server_metrics();

// A 200 generation that its handler records itself (Messages, Responses): latency from `start`, time to
// first token from `first` (a default time_point: none), token counts from `u`.
void observe_generation(std::chrono::steady_clock::time_point start,
                        std::chrono::steady_clock::time_point first, const Usage& u);

}  // namespace tf::server

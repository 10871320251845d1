#include "server/metrics.h"

#include <cmath>
#include <cstdio>
#include <sstream>

namespace tf::server {

namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// One sample under its own name and each alias, each with HELP and TYPE.
void series(std::ostringstream& o, const std::vector<std::string>& names, const char* type, const char* help,
            const std::string& labels, double value) {
  for (const auto& n : names) {
    o << "# HELP " << n << " " << help << "\n# TYPE " << n << " " << type << "\n";
    o << n << "{" << labels << "} " << num(value) << "\n";
  }
}

void histogram(std::ostringstream& o, const std::vector<std::string>& names, const char* help,
               const std::string& labels, const Histogram& h) {
  for (const auto& n : names) {
    o << "# HELP " << n << " " << help << "\n# TYPE " << n << " histogram\n" << h.render(n, labels);
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v, int64_t times) {
  if (times <= 0 || !std::isfinite(v)) return;
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i] += times;
  sum_ += v * double(times);
  count_ += times;
}

std::string Histogram::render(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  std::string sep = labels.empty() ? "" : labels + ",";
  int64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    o << name << "_bucket{" << sep << "le=\"" << le << "\"} " << cum << "\n";
  }
  o << name << "_sum{" << labels << "} " << num(sum_) << "\n";
  o << name << "_count{" << labels << "} " << count_ << "\n";
  return o.str();
}

// vLLM's bucket bounds, so dashboards' quantiles read the same.
Metrics::Metrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
             1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}),
      itl_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0}),
      e2e_({0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
            30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}) {}

void Metrics::observe_request(const RequestRecord& r) {
  if (r.status != 200 || r.completion_tokens < 0) return;  // not a generation, or it failed
  e2e_.observe(r.duration_ms / 1000.0);
  if (r.prompt_tokens > 0) prompt_tokens_ += r.prompt_tokens;
  if (r.cached_tokens > 0) cached_tokens_ += r.cached_tokens;
  if (r.ttft_ms < 0) return;
  ttft_.observe(r.ttft_ms / 1000.0);
  // Per-token arrival times are not kept per request; the mean gap stands for each of its gaps.
  if (r.completion_tokens > 1) {
    double gaps = double(r.completion_tokens - 1);
    itl_.observe(std::max(0.0, r.duration_ms - r.ttft_ms) / 1000.0 / gaps, r.completion_tokens - 1);
  }
}

void observe_generation(std::chrono::steady_clock::time_point start,
                        std::chrono::steady_clock::time_point first, const Usage& u) {
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  RequestRecord rec;
  rec.status = 200;
  rec.duration_ms = ms_since(start);
  rec.completion_tokens = u.completion_tokens;
  rec.prompt_tokens = u.prompt_tokens;
  rec.cached_tokens = u.cached_tokens;
  if (first != std::chrono::steady_clock::time_point{}) rec.ttft_ms = rec.duration_ms - ms_since(first);
  server_metrics().observe_request(rec);
}

std::string Metrics::render(const ApiContext& ctx) const {
  EngineStats s = ctx.engine.stats();
  std::string model = ctx.options.name.empty() ? ctx.info().id : ctx.options.name;
  std::string l = "model_name=\"" + escape_label(model) + "\"";
  double kv_usage = s.kv_blocks_total > 0 ? double(s.kv_blocks_used) / s.kv_blocks_total : 0.0;
  std::ostringstream o;
  series(o, {"tensorfold_requests_running", "vllm:num_requests_running"}, "gauge",
         "Requests being generated in the current round.", l, s.running);
  series(o, {"tensorfold_requests_waiting", "vllm:num_requests_waiting"}, "gauge",
         "Requests queued for admission.", l, s.waiting);
  series(o, {"tensorfold_prompt_tokens_total", "vllm:prompt_tokens_total"}, "counter",
         "Prompt tokens of finished requests (prompt-cache hits included).", l,
         double(prompt_tokens_.load()));
  series(o, {"tensorfold_prompt_tokens_cached_total"}, "counter",
         "Prompt tokens of finished requests served from the prompt cache.", l,
         double(cached_tokens_.load()));
  series(o, {"tensorfold_prompt_tokens_prefilled_total"}, "counter", "Prompt tokens the engine computed.", l,
         double(s.prompt_tokens));
  series(o, {"tensorfold_generation_tokens_total", "vllm:generation_tokens_total"}, "counter",
         "Tokens generated.", l, double(s.generated_tokens));
  series(o, {"tensorfold_kv_cache_usage_ratio", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"},
         "gauge", "Fraction of KV-cache blocks in use by running streams (0..1).", l, kv_usage);
  series(o, {"tensorfold_kv_blocks_used"}, "gauge", "KV-cache blocks in use by streams.", l,
         s.kv_blocks_used);
  series(o, {"tensorfold_kv_blocks_total"}, "gauge", "KV-cache blocks in the pool.", l, s.kv_blocks_total);
  series(o, {"tensorfold_kv_blocks_cached"}, "gauge", "KV-cache blocks retained by the prompt cache.", l,
         s.kv_blocks_cached);
  series(o, {"tensorfold_spec_decode_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"},
         "counter", "Draft tokens proposed for verification.", l, double(s.drafted_tokens));
  series(o, {"tensorfold_spec_decode_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"},
         "counter", "Draft tokens accepted by verification.", l, double(s.accepted_tokens));
  series(o, {"tensorfold_draft_guard_off"}, "gauge",
         "Stream counts for which the draft guard has drafting off (it made rounds slower).", l,
         s.draft_guard_off);
  series(o, {"tensorfold_draft_guard_switches_total"}, "counter",
         "Times the draft guard switched drafting off or on.", l, double(s.draft_guard_switches));
  series(o, {"tensorfold_preemptions_total", "vllm:num_preemptions_total"}, "counter",
         "Streams preempted to free KV-cache memory.", l, double(s.preemptions));
  series(o, {"tensorfold_requests_finished_total"}, "counter", "Engine streams finished.", l,
         double(s.requests_finished));
  series(o, {"tensorfold_requests_cancelled_total"}, "counter", "Engine streams cancelled.", l,
         double(s.requests_cancelled));
  series(o, {"tensorfold_prompt_cache_hits_total"}, "counter", "Prompts that reused cached KV blocks.", l,
         double(s.prompt_cache_hits));
  series(o, {"tensorfold_forward_passes_total"}, "counter", "Model forward passes (rounds).", l,
         double(s.forward_passes));
  series(o, {"tensorfold_round_seconds_total"}, "counter",
         "Wall time of the engine's rounds: planning, the forward, applying its outputs.", l,
         s.round_seconds);
  series(o, {"tensorfold_forward_seconds_total"}, "counter",
         "Wall time of the rounds' model forwards (device work and the wait for it).", l, s.forward_seconds);
  series(o, {"tensorfold_decode_rounds_total"}, "counter",
         "Rounds without prompt rows (decode and verify rows alone).", l, double(s.decode_rounds));
  series(o, {"tensorfold_decode_round_seconds_total"}, "counter",
         "Wall time of the rounds without prompt rows.", l, s.decode_round_seconds);
  series(o, {"tensorfold_decode_forward_seconds_total"}, "counter",
         "Wall time of the model forwards of the rounds without prompt rows.", l, s.decode_forward_seconds);
  series(o, {"tensorfold_http_requests_total"}, "counter", "HTTP requests answered.", l,
         double(ctx.stats.requests_total.load()));
  series(o, {"tensorfold_http_requests_failed_total"}, "counter",
         "HTTP requests answered with an error status.", l, double(ctx.stats.requests_failed.load()));
  histogram(o, {"tensorfold_time_to_first_token_seconds", "vllm:time_to_first_token_seconds"},
            "Time from request arrival to its first generated token.", l, ttft_);
  histogram(o,
            {"tensorfold_inter_token_latency_seconds", "vllm:inter_token_latency_seconds",
             "vllm:time_per_output_token_seconds"},
            "Time between a request's generated tokens (each request's mean gap).", l, itl_);
  histogram(o, {"tensorfold_e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds"},
            "Time from request arrival to its last byte.", l, e2e_);
  return o.str();
}

Metrics& server_metrics() {
  static Metrics m;
  return m;
}

}  // namespace tf::server

#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace tf::loadgen {

using json = nlohmann::json;

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

LevelReport summarize(int clients, const std::vector<RequestResult>& results, double wall_s, int max_tokens) {
  LevelReport r;
  r.clients = clients;
  r.wall_s = wall_s;
  std::vector<double> ttft, itl;
  for (const auto& q : results) {
    ++r.requests;
    if (!q.ok) {
      ++r.errors;
      if (r.error_samples.size() < 3) r.error_samples.push_back(q.error);
      continue;
    }
    if (q.tokens != max_tokens) ++r.short_requests;
    r.output_tokens += q.tokens;
    r.chunks += q.chunks;
    if (q.first_token_s >= 0) ttft.push_back(q.first_token_s - q.start_s);
    itl.insert(itl.end(), q.itl_s.begin(), q.itl_s.end());
  }
  r.tokens_per_s = wall_s > 0 ? double(r.output_tokens) / wall_s : 0;
  r.ttft_p50_ms = 1e3 * percentile(ttft, 0.5);
  r.ttft_p99_ms = 1e3 * percentile(ttft, 0.99);
  r.itl_p50_ms = 1e3 * percentile(itl, 0.5);
  r.itl_p99_ms = 1e3 * percentile(itl, 0.99);
  return r;
}

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string ratio(double num, double den) {
  return den > 0 ? fmt("%.2fx", num / den) : "-";
}

}  // namespace

std::string markdown_header() {
  return "| clients | requests | errors | output tokens | tok/chunk | tok/s | vs 1 client | TTFT p50 ms | "
         "TTFT p99 ms "
         "| ITL p50 ms | ITL p99 ms | ITL p99 vs 1 client |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|";
}

std::string markdown_row(const LevelReport& r, const LevelReport* base) {
  const double per_chunk = r.chunks > 0 ? double(r.output_tokens) / double(r.chunks) : 0;
  std::string s = "| " + std::to_string(r.clients) + " | " + std::to_string(r.requests) + " | " +
                  std::to_string(r.errors) + " | " + std::to_string(r.output_tokens) + " | " +
                  fmt("%.2f", per_chunk) + " | " + fmt("%.1f", r.tokens_per_s) + " | " +
                  (base ? ratio(r.tokens_per_s, base->tokens_per_s) : "-") + " | " +
                  fmt("%.1f", r.ttft_p50_ms) + " | " + fmt("%.1f", r.ttft_p99_ms) + " | " +
                  fmt("%.2f", r.itl_p50_ms) + " | " + fmt("%.2f", r.itl_p99_ms) + " | " +
                  (base ? ratio(r.itl_p99_ms, base->itl_p99_ms) : "-") + " |";
  return s;
}

std::string target_line(const LevelReport& r, const LevelReport& base) {
  const double tput = base.tokens_per_s > 0 ? r.tokens_per_s / base.tokens_per_s : 0;
  const double itl = base.itl_p99_ms > 0 ? r.itl_p99_ms / base.itl_p99_ms : 0;
  const bool met = tput >= 12.0 && itl <= 2.0 && r.errors == 0;
  return std::to_string(r.clients) + " clients: " + fmt("%.2fx", tput) +
         " single-stream throughput (target >= 12x), " + "p99 ITL " + fmt("%.2fx", itl) +
         " single-stream (target <= 2x): " + (met ? "MET" : "NOT MET");
}

json to_json(const LevelReport& r, const LevelReport* base, const std::vector<RequestResult>& results) {
  json j = {{"clients", r.clients},
            {"requests", r.requests},
            {"errors", r.errors},
            {"short_requests", r.short_requests},
            {"output_tokens", r.output_tokens},
            {"chunks", r.chunks},
            {"wall_s", r.wall_s},
            {"output_tokens_per_s", r.tokens_per_s},
            {"ttft_p50_ms", r.ttft_p50_ms},
            {"ttft_p99_ms", r.ttft_p99_ms},
            {"itl_p50_ms", r.itl_p50_ms},
            {"itl_p99_ms", r.itl_p99_ms},
            {"error_samples", r.error_samples}};
  if (base) {
    j["throughput_vs_single"] = base->tokens_per_s > 0 ? r.tokens_per_s / base->tokens_per_s : 0;
    j["itl_p99_vs_single"] = base->itl_p99_ms > 0 ? r.itl_p99_ms / base->itl_p99_ms : 0;
  }
  json reqs = json::array();
  for (const auto& q : results) {
    json gaps = json::array();  // every inter-token gap in ms (0.01 ms): where a level's ITL tail comes from
    for (double g : q.itl_s) gaps.push_back(std::round(g * 1e5) / 100);
    reqs.push_back({{"ok", q.ok},
                    {"error", q.error},
                    {"tokens", q.tokens},
                    {"prompt_tokens", q.prompt_tokens},
                    {"chunks", q.chunks},
                    {"finish_reason", q.finish_reason},
                    {"start_s", q.start_s},
                    {"ttft_ms", q.first_token_s >= 0 ? 1e3 * (q.first_token_s - q.start_s) : -1.0},
                    {"end_s", q.end_s},
                    {"itl_ms", std::move(gaps)}});
  }
  j["per_request"] = std::move(reqs);
  return j;
}

}  // namespace tf::loadgen

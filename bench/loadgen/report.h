// Aggregation of one concurrency level's requests into throughput and latency percentiles, printed as a
// markdown table row and as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "loadgen.h"

namespace tf::loadgen {

struct LevelReport {
  int clients = 0;
  int requests = 0, errors = 0;
  int short_requests = 0;  // finished without exactly max_tokens tokens (ignore_eos should prevent it)
  int64_t output_tokens = 0, chunks = 0;
  double wall_s = 0, tokens_per_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  std::vector<std::string> error_samples;  // the first few error messages
};

// Linear interpolation between closest ranks; q in [0, 1]; 0 for an empty set.
double percentile(std::vector<double> v, double q);

LevelReport summarize(int clients, const std::vector<RequestResult>& results, double wall_s, int max_tokens);

std::string markdown_header();
// `base` is the single-client level when the sweep has one (ratio columns), else null.
std::string markdown_row(const LevelReport& r, const LevelReport* base);
// The target at 32 streams: >= 12x single-stream throughput, p99 ITL <= 2x single-stream.
std::string target_line(const LevelReport& r, const LevelReport& base);

nlohmann::json to_json(const LevelReport& r, const LevelReport* base,
                       const std::vector<RequestResult>& results);

}  // namespace tf::loadgen

#include "server/request_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/sse.h"

namespace tf::server {

static std::string utc_now() {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

std::string format_request_line(const RequestRecord& r, LogFormat fmt) {
  double tok_s = r.completion_tokens > 0 && r.duration_ms > r.ttft_ms && r.ttft_ms >= 0
                     ? double(r.completion_tokens) / ((r.duration_ms - r.ttft_ms) / 1000.0)
                     : 0.0;
  if (fmt == LogFormat::Json) {
    nlohmann::json j = {{"time", utc_now()},  {"method", r.method},           {"path", r.path},
                        {"status", r.status}, {"ms", int64_t(r.duration_ms)}, {"remote", r.remote}};
    if (!r.id.empty()) j["id"] = r.id;
    if (!r.model.empty()) j["model"] = r.model;
    if (r.prompt_tokens >= 0) j["prompt_tokens"] = r.prompt_tokens;
    if (r.completion_tokens >= 0) j["completion_tokens"] = r.completion_tokens;
    if (r.cached_tokens >= 0) j["cached_tokens"] = r.cached_tokens;
    if (r.ttft_ms >= 0) j["ttft_ms"] = int64_t(r.ttft_ms);
    if (tok_s > 0) j["tokens_per_s"] = double(int64_t(tok_s * 10)) / 10;
    if (!r.finish.empty()) j["finish"] = r.finish;
    if (!r.id.empty()) j["stream"] = r.stream;
    if (!r.error.empty()) j["error"] = r.error;
    return dump_json(j);
  }
  std::ostringstream s;
  s << utc_now() << " " << r.method << " " << r.path << " " << r.status << " " << int64_t(r.duration_ms)
    << "ms";
  if (!r.id.empty()) s << " id=" << r.id << (r.stream ? " stream" : "");
  if (r.prompt_tokens >= 0) s << " prompt=" << r.prompt_tokens;
  if (r.completion_tokens >= 0) s << " completion=" << r.completion_tokens;
  if (r.cached_tokens > 0) s << " cached=" << r.cached_tokens;
  if (r.ttft_ms >= 0) s << " ttft=" << int64_t(r.ttft_ms) << "ms";
  if (tok_s > 0) s << " " << int64_t(tok_s) << "tok/s";
  if (!r.finish.empty()) s << " finish=" << r.finish;
  if (!r.error.empty()) s << " error=\"" << r.error << "\"";
  s << " from " << r.remote;
  return s.str();
}

namespace {
thread_local RequestRecord t_record;

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

void begin_request_record() {
  t_record = RequestRecord();
  t_record.start = std::chrono::steady_clock::now();
}

RequestRecord& request_record() {
  return t_record;
}

RequestRecord take_request_record() {
  RequestRecord r = std::move(t_record);
  t_record = RequestRecord();
  if (r.start != std::chrono::steady_clock::time_point{})
    r.duration_ms = ms_between(r.start, std::chrono::steady_clock::now());
  return r;
}

void record_reply(const std::string& id, const std::string& model, bool stream) {
  t_record.id = id;
  t_record.model = model;
  t_record.stream = stream;
}

void record_first_token(std::chrono::steady_clock::time_point first_token) {
  if (first_token != std::chrono::steady_clock::time_point{} &&
      t_record.start != std::chrono::steady_clock::time_point{})
    t_record.ttft_ms = ms_between(t_record.start, first_token);
}

void record_generation(const Usage& usage, std::chrono::steady_clock::time_point first_token,
                       const std::string& finish) {
  t_record.prompt_tokens = usage.prompt_tokens;
  t_record.completion_tokens = usage.completion_tokens;
  t_record.cached_tokens = usage.cached_tokens;
  record_first_token(first_token);
  t_record.finish = finish;
}

namespace {
std::mutex g_log_mu;
bool g_live = false;
std::string g_live_text;
}  // namespace

void write_log_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_live) {
    std::fprintf(stderr, "\r\x1b[2K%s\n%s", line.c_str(), g_live_text.c_str());  // clear, log, redraw
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void set_live_line(bool on) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_live && !on) std::fprintf(stderr, "\r\x1b[2K");
  g_live = on;
  g_live_text.clear();
  std::fflush(stderr);
}

void draw_live_line(const std::string& text) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (!g_live) return;
  g_live_text = text;
  std::fprintf(stderr, "\r\x1b[2K%s", text.c_str());
  std::fflush(stderr);
}

static std::string bytes_text(int64_t b) {
  char buf[32];
  if (b >= (int64_t(1) << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(int64_t(1) << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  }
  return buf;
}

static std::string count_text(int64_t n) {
  char buf[32];
  if (n >= 1000000000) {
    std::snprintf(buf, sizeof buf, "%.2fB", double(n) / 1e9);
  } else if (n >= 1000000) {
    std::snprintf(buf, sizeof buf, "%.1fM", double(n) / 1e6);
  } else {
    std::snprintf(buf, sizeof buf, "%lld", (long long)n);
  }
  return buf;
}

std::string startup_report(const ModelInfo& info, const ServerOptions& opt, const std::string& url) {
  std::ostringstream s;
  std::string id = opt.name.empty() ? info.id : opt.name;
  s << "tensorfold serve\n";
  s << "  model       " << id << "  (" << info.path << ")\n";
  s << "  family      " << info.family << ", " << count_text(info.parameters) << " parameters, " << info.dtype
    << "\n";
  s << "  backend     " << info.backend << "\n";
  s << "  drafter     " << (info.drafter.empty() ? "none" : info.drafter) << " (plus context copies)\n";
  s << "  context     " << info.context << " tokens per stream (native " << info.native_context << "), "
    << info.parallel << " streams\n";
  s << "  memory      weights " << bytes_text(info.weight_bytes) << ", KV cache " << bytes_text(info.kv_bytes)
    << " (" << info.kv_tokens << " tokens)\n";
  if (!opt.aliases.empty()) {
    s << "  aliases    ";
    for (const auto& a : opt.aliases) s << " " << a;
    s << "\n";
  }
  s << "  auth        "
    << (opt.api_keys.empty() ? "off" : std::to_string(opt.api_keys.size()) + " API key(s)") << "\n";
  s << "  fingerprint " << info.fingerprint << "\n";
  s << "  listening   " << url << "  (OpenAI base_url " << url << "/v1)";
  return s.str();
}

}  // namespace tf::server

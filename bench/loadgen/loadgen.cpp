#include "loadgen.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>

namespace tf::loadgen {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<httplib::Client> make_client(const LoadOptions& opt) {
  const Endpoint e = parse_url(opt.url);
  auto c = std::make_unique<httplib::Client>(e.host, e.port);
  c->set_connection_timeout(10);
  c->set_read_timeout(time_t(opt.timeout_s));
  c->set_write_timeout(60);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);  // small request bodies, timing-sensitive
  if (!opt.api_key.empty()) c->set_bearer_token_auth(opt.api_key);
  return c;
}

json get_json(httplib::Client& c, const std::string& path, const json* body) {
  auto res = body ? c.Post(path, body->dump(), "application/json") : c.Get(path);
  if (!res) throw std::runtime_error(path + ": " + httplib::to_string(res.error()));
  if (res->status != 200)
    throw std::runtime_error(path + ": HTTP " + std::to_string(res->status) + ": " +
                             res->body.substr(0, 500));
  return json::parse(res->body);
}

// Splits the SSE byte stream into events and records what each "data:" payload carried, with the
// arrival time of the bytes that completed it.
class SseTimer {
 public:
  SseTimer(RequestResult& r, bool count_logprobs) : r_(r), count_logprobs_(count_logprobs) {}

  void feed(const char* data, size_t n, double now) {
    buf_.append(data, n);
    size_t end;
    while ((end = buf_.find("\n\n")) != std::string::npos) {
      const std::string event = buf_.substr(0, end);
      buf_.erase(0, end + 2);
      size_t pos = 0;
      while (pos < event.size()) {
        size_t eol = event.find('\n', pos);
        if (eol == std::string::npos) eol = event.size();
        std::string line = event.substr(pos, eol - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.rfind("data:", 0) == 0) on_data(line.substr(line.size() > 5 && line[5] == ' ' ? 6 : 5), now);
        pos = eol + 1;
      }
    }
  }

  bool done() const { return done_; }
  int usage_tokens() const { return usage_tokens_; }
  int counted_tokens() const { return counted_tokens_; }
  int prompt_tokens() const { return prompt_tokens_; }

 private:
  void on_data(const std::string& payload, double now) {
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    json c = json::parse(payload, nullptr, false);
    if (c.is_discarded()) return fail("unparsable SSE data: " + payload.substr(0, 200));
    if (c.contains("error")) return fail("error event: " + c["error"].dump().substr(0, 300));
    int usage_k = -1;  // tokens this chunk carries by the running usage counts (continuous_usage_stats)
    if (c.contains("usage") && c["usage"].is_object()) {
      usage_tokens_ = c["usage"].value("completion_tokens", -1);
      prompt_tokens_ = c["usage"].value("prompt_tokens", -1);
      if (usage_tokens_ >= 0) usage_k = usage_tokens_ - std::exchange(running_usage_, usage_tokens_);
    }
    if (!c.contains("choices") || c["choices"].empty()) return;
    const json& ch = c["choices"][0];
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string())
      r_.finish_reason = ch["finish_reason"];
    const int k = usage_k >= 0 && !count_logprobs_ ? usage_k : chunk_tokens(ch);
    if (k == 0) return;
    if (r_.first_token_s < 0) {
      r_.first_token_s = now;
    } else {
      // A chunk of k tokens spreads its gap over them: the ITL a reader of the stream experiences per token.
      for (int i = 0; i < k; ++i) r_.itl_s.push_back((now - last_) / k);
    }
    last_ = now;
    ++r_.chunks;
    counted_tokens_ += k;
  }

  // Tokens a choice chunk carries. Logprobs count them exactly; otherwise a chunk with text counts as one
  // (with drafting off the server sends one token per chunk, merging only where text was held back).
  int chunk_tokens(const json& ch) const {
    if (count_logprobs_) {
      const json* lp = ch.contains("logprobs") && ch["logprobs"].is_object() ? &ch["logprobs"] : nullptr;
      if (!lp) return 0;
      const char* list = lp->contains("content") ? "content" : "tokens";  // chat : completions
      return lp->contains(list) && (*lp)[list].is_array() ? int((*lp)[list].size()) : 0;
    }
    if (ch.contains("text")) return ch["text"].is_string() && !ch["text"].get<std::string>().empty() ? 1 : 0;
    if (!ch.contains("delta") || !ch["delta"].is_object()) return 0;
    for (const auto& [key, v] : ch["delta"].items()) {
      if ((key == "content" || key == "reasoning_content" || key == "reasoning") && v.is_string() &&
          !v.get<std::string>().empty())
        return 1;
      if (key == "tool_calls" && v.is_array() && !v.empty()) return 1;
    }
    return 0;
  }

  void fail(const std::string& msg) {
    if (r_.error.empty()) r_.error = msg;
  }

  RequestResult& r_;
  bool count_logprobs_;
  std::string buf_;
  double last_ = 0;
  bool done_ = false;
  int usage_tokens_ = -1, counted_tokens_ = 0, prompt_tokens_ = -1, running_usage_ = 0;
};

json request_body(const LoadOptions& opt, const std::string& model, const json& prompt, uint64_t seed) {
  json body = {
      {"model", model},
      {"max_tokens", opt.max_tokens},
      {"temperature", opt.temperature},
      {"seed", seed},
      {"stream", true},
      {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", opt.count_continuous}}},
      {"ignore_eos", true},  // tensorfold extension: every request generates exactly max_tokens
      {"draft", opt.draft}};
  if (opt.chat) {
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
    if (opt.count_logprobs) body["logprobs"] = true;
  } else {
    body["prompt"] = prompt;
    if (opt.count_logprobs) body["logprobs"] = 0;
  }
  return body;
}

RequestResult send_request(httplib::Client& cli, const LoadOptions& opt, const json& body,
                           Clock::time_point t0) {
  RequestResult r;
  SseTimer timer(r, opt.count_logprobs);
  int status = 0;
  std::string error_body;
  httplib::Request req;
  req.method = "POST";
  req.path = opt.chat ? "/v1/chat/completions" : "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (status != 200) {
      error_body.append(data, n);
    } else {
      timer.feed(data, n, seconds_since(t0));
    }
    return true;
  };
  r.start_s = seconds_since(t0);
  auto res = cli.send(req);
  r.end_s = seconds_since(t0);
  if (!res) {
    r.error = "transport: " + httplib::to_string(res.error());
  } else if (status != 200) {
    r.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 300);
  } else if (r.error.empty() && !timer.done()) {
    r.error = "the stream ended without [DONE]";
  }
  r.tokens = opt.count_logprobs ? timer.counted_tokens() : timer.usage_tokens();
  r.prompt_tokens = timer.prompt_tokens();
  if (r.error.empty() && r.tokens < 0) r.error = "no usage chunk (stream_options.include_usage ignored?)";
  r.ok = r.error.empty();
  return r;
}

// Random English words: their tokens make a prompt pool that any tokenizer encodes into common ids.
std::string random_words(size_t count, uint64_t seed) {
  static const char* kWords[] = {
      "river",  "stone",  "garden", "window", "market", "silver", "winter", "letter", "forest", "engine",
      "orange", "doctor", "bridge", "castle", "signal", "pocket", "planet", "basket", "camera", "button",
      "number", "yellow", "travel", "listen", "simple", "future", "circle", "motion", "island", "wonder",
      "the",    "of",     "and",    "to",     "in",     "is",     "was",    "for",    "with",   "on",
      "quiet",  "rapid",  "gentle", "bright", "narrow", "hidden", "frozen", "golden", "modern", "ancient"};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, std::size(kWords) - 1);
  std::string s;
  for (size_t i = 0; i < count; ++i) {
    if (i) s += (rng() % 11 == 0) ? ". " : " ";
    s += kWords[pick(rng)];
  }
  return s;
}

}  // namespace

Endpoint parse_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    throw std::runtime_error("--url must start with http:// (got '" + url + "'); https is not supported");
  std::string rest = url.substr(scheme.size());
  if (auto slash = rest.find('/'); slash != std::string::npos) {
    if (rest.substr(slash) != "/" && rest.substr(slash) != "/v1" && rest.substr(slash) != "/v1/")
      throw std::runtime_error("--url is the server root, e.g. http://127.0.0.1:8080 (got '" + url + "')");
    rest.resize(slash);
  }
  Endpoint e;
  const size_t colon = rest.rfind(':');
  e.host = rest.substr(0, colon);
  if (colon != std::string::npos) {
    try {
      e.port = std::stoi(rest.substr(colon + 1));
    } catch (const std::exception&) {
      throw std::runtime_error("bad port in --url '" + url + "'");
    }
  }
  if (e.host.empty() || e.port <= 0 || e.port > 65535) throw std::runtime_error("bad --url '" + url + "'");
  return e;
}

PromptSource::PromptSource(const LoadOptions& opt) : opt_(opt), model_(opt.model) {
  auto cli = make_client(opt);
  if (model_.empty()) {
    json models = get_json(*cli, "/v1/models", nullptr);
    if (!models.contains("data") || models["data"].empty())
      throw std::runtime_error("/v1/models lists no model");
    model_ = models["data"][0]["id"];
  }
  // Repeat mode cycles through the sentence's tokens, so any --prompt-tokens works.
  const std::string text =
      opt.repeat_prompt ? "The quick brown fox jumps over the lazy dog. " : random_words(512, opt.seed);
  json body = {{"model", model_}, {"prompt", text}, {"add_special_tokens", false}};
  json tok = get_json(*cli, "/tokenize", &body);
  pool_ = tok.at("tokens").get<std::vector<int32_t>>();
  if (pool_.empty()) throw std::runtime_error("/tokenize returned no tokens");
}

std::vector<int32_t> PromptSource::prompt(uint64_t request_index) const {
  std::vector<int32_t> ids(size_t(opt_.prompt_tokens));
  if (opt_.repeat_prompt) {
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = pool_[i % pool_.size()];
  } else {
    std::mt19937_64 rng(opt_.seed * 0x9e3779b97f4a7c15ULL + request_index);
    std::uniform_int_distribution<size_t> pick(0, pool_.size() - 1);
    for (auto& id : ids) id = pool_[pick(rng)];
  }
  return ids;
}

std::string PromptSource::text(httplib::Client& cli, uint64_t request_index) const {
  json body = {{"model", model_}, {"tokens", prompt(request_index)}};
  return get_json(cli, "/detokenize", &body).at("prompt").get<std::string>();
}

std::vector<RequestResult> run_level(const LoadOptions& opt, const PromptSource& prompts, int clients,
                                     uint64_t first_request_index, double* wall_s) {
  std::vector<std::vector<RequestResult>> per_client(static_cast<size_t>(clients));
  std::atomic<uint64_t> next_index{first_request_index};
  // Connections are opened one after another before the level starts (a keep-alive GET /health), so the
  // level measures concurrent requests, not a burst of connects: httplib 0.11 servers listen with a
  // backlog of 5, and a burst of simultaneous connects there loses some (seen as "transport: Read").
  std::vector<std::unique_ptr<httplib::Client>> conns;
  for (int c = 0; c < clients; ++c) {
    conns.push_back(make_client(opt));
    if (!opt.cold_connections) conns.back()->Get("/health");  // a failure here shows up in the request
  }
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client& cli = *conns[size_t(c)];
      if (opt.ramp_s > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(opt.ramp_s * c / clients));
      for (int i = 0; i < opt.requests_per_client; ++i) {
        if (i > 0 && opt.duration_s > 0 && seconds_since(t0) >= opt.duration_s) break;
        const uint64_t index = next_index++;
        const json prompt = opt.chat ? json(prompts.text(cli, index)) : json(prompts.prompt(index));
        per_client[size_t(c)].push_back(
            send_request(cli, opt, request_body(opt, prompts.model(), prompt, opt.seed + index), t0));
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<RequestResult> all;
  double first = 1e30, last = 0;
  for (auto& v : per_client) {
    for (auto& r : v) {
      first = std::min(first, r.start_s);
      last = std::max(last, r.end_s);
      all.push_back(std::move(r));
    }
  }
  *wall_s = all.empty() ? 0 : last - first;
  return all;
}

}  // namespace tf::loadgen

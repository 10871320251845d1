// tf-loadgen: concurrent streaming clients over the OpenAI-compatible HTTP API of `tensorfold serve`.
// Each client sends /v1/completions (or chat) requests with "stream": true and times the SSE chunks as they
// arrive: time to first token, inter-token latency, tokens received.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace tf::loadgen {

struct LoadOptions {
  std::string url = "http://127.0.0.1:8080";  // the server root; requests go to /v1/completions
  std::string api_key;                        // sent as "Authorization: Bearer KEY" when set
  std::string model;                          // default: the first id of /v1/models
  int prompt_tokens = 128;
  bool repeat_prompt = false;  // one repeated sentence for every request (else random words per request)
  int max_tokens = 128;
  int requests_per_client = 2;
  double duration_s = 0;  // > 0: clients stop starting new requests after this long (per level)
  double ramp_s = 0;      // client i starts at i * ramp_s / clients
  double temperature = 0;
  bool draft = false;           // false sends "draft": false, so every SSE chunk carries one token
  bool count_logprobs = false;  // count tokens per chunk from "logprobs" (exact, but samples on the host)
  // Count tokens per chunk from the running usage counts of stream_options.continuous_usage_stats (vLLM's
  // extension; exact, no host work); else a chunk with text counts as one token, and a chunk that carries
  // text held back from an earlier token (an incomplete UTF-8 character) shows as one token with a double
  // gap.
  bool count_continuous = true;
  uint64_t seed = 1;
  double timeout_s = 600;
  bool cold_connections = false;  // connect inside the timed level, all clients at once
  bool chat = false;              // /v1/chat/completions with the prompt's text as one user message
};

// One request as a client saw it. Times are seconds since the level started.
struct RequestResult {
  bool ok = false;
  std::string error;
  int tokens = 0;          // completion tokens (usage.completion_tokens, or the logprobs count)
  int chunks = 0;          // SSE chunks that carried text or tokens
  int prompt_tokens = -1;  // as the server counted them (usage.prompt_tokens; chat adds the template)
  std::string finish_reason;
  double start_s = 0, first_token_s = -1, end_s = 0;
  std::vector<double> itl_s;  // inter-token latencies (see LevelReport for how chunks map to tokens)
};

struct Endpoint {
  std::string host;
  int port = 80;
};
Endpoint parse_url(const std::string& url);  // "http://host:port"; throws std::runtime_error otherwise

// Token-id prompts of exactly `prompt_tokens` ids, built from text the server's /tokenize encodes, so the
// prompt length is exact for any tokenizer. Random mode: ids drawn from a pool of random English words,
// different for every request (no prompt-cache hits); repeat mode: one repeated sentence.
class PromptSource {
 public:
  explicit PromptSource(const LoadOptions& opt);
  std::vector<int32_t> prompt(uint64_t request_index) const;
  // The same prompt as text (the server's /detokenize), for chat requests.
  std::string text(httplib::Client& cli, uint64_t request_index) const;
  const std::string& model() const { return model_; }

 private:
  const LoadOptions& opt_;
  std::string model_;
  std::vector<int32_t> pool_;
};

// Runs `clients` concurrent clients until each has sent its requests (or the duration is over).
// Returns every request's result; *wall_s is the time from the first start to the last end.
std::vector<RequestResult> run_level(const LoadOptions& opt, const PromptSource& prompts, int clients,
                                     uint64_t first_request_index, double* wall_s);

}  // namespace tf::loadgen

#pragma once
// The engine's narrow interface to the protocol adapters (server/, cli generate). A request is token ids
// plus sampling and stop rules; the engine answers with a stream of events on its own thread.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tf {

class Tokenizer;
class ChatTemplate;
class JsonSchema;  // engine/json_matcher.h

struct SamplingParams {
  float temperature = 1.f;  // 0 = greedy (lowest id on ties)
  float top_p = 1.f;
  int top_k = 0;  // 0 = off
  float min_p = 0.f;
  float presence_penalty = 0.f, frequency_penalty = 0.f;  // OpenAI semantics, over generated tokens
  float repetition_penalty = 1.f;                         // HF semantics, over prompt + generated
  std::optional<uint64_t> seed;                           // none: derived from the prompt tokens
  // OpenAI logit_bias: added to the raw logits before penalties, temperature and truncation (-100 bans,
  // +100 all but forces). Sorted by id, ids unique and inside the vocabulary (the server checks).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 0;             // <= 0: as many as fit in the context, capped by the engine's default limit
  std::vector<std::string> stop;  // stop strings, matched across token boundaries
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  bool ignore_eos = false;
  // vLLM's min_tokens: before this many tokens are generated, the model's EOS ids (unless ignore_eos) and
  // stop_token_ids are never sampled (as if masked: the other ids keep their keyed draws, so drafted and
  // serial streams agree) and stop strings do not end the stream (one counts from the token that makes the
  // min_tokens-th on). Structured outputs win where they leave nothing else (a complete document ends).
  int min_tokens = 0;
  // vLLM's allowed_token_ids: non-empty, only these ids are sampled (a mask, like min_tokens' bans). The
  // masks narrow in order -- a structured output's, this, bad words', min_tokens' -- each only where it
  // leaves an id.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's bad_words, as token sequences (the server tokenizes each word with and without a leading space):
  // a sequence's last token is masked where the reply so far ends with the rest of it (a one-token
  // sequence always), after allowed_token_ids and before min_tokens' bans, only where it leaves an id.
  std::vector<std::vector<int32_t>> bad_words_ids;
  int logprobs = -1;  // -1: none; N >= 0: chosen token's logprob plus top-N alternatives
  // -1: none; N >= 0: each prompt token's logprob under the model (from the second token on) plus top-N
  // alternatives, delivered with the first Tokens event. Every prompt row is computed (no prompt-cache
  // reuse for this request).
  int prompt_logprobs = -1;
  bool draft = true;  // allow speculative drafts (never changes the output)
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // Structured outputs (response_format json_schema / json_object): the reply is one JSON document valid
  // under this schema; each token is sampled among those that keep it valid (EOS once it is complete).
  // Drafts are verified row by row against the mask that follows the accepted tokens. Null: free text.
  std::shared_ptr<const JsonSchema> json_schema;
};

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

struct GeneratedToken {
  int32_t token = 0;
  std::string text;  // this token's share of the streamed text (may be empty while text is held back)
  float logprob = 0.f;
  std::vector<TokenLogprob> top;  // when logprobs >= 1
};

struct Usage {
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int drafted_tokens = 0, accepted_tokens = 0;
};

struct StreamEvent {
  enum class Kind { Tokens, Finished, Error } kind = Kind::Tokens;
  std::vector<GeneratedToken> tokens;  // Tokens: one or more new tokens (a verified draft gives several)
  // The first Tokens event of a request with prompt_logprobs: prompt tokens 1..P-1 (token, its share of the
  // prompt's text, logprob, top alternatives); the first prompt token has no logprob and is not listed.
  std::vector<GeneratedToken> prompt_logprobs;
  std::string text;                          // concatenated text of `tokens`
  FinishReason finish = FinishReason::None;  // Finished
  std::string matched_stop;                  // the stop string that ended the stream, if any
  Usage usage;                               // Finished
  std::string error;                         // Error
};

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  virtual uint64_t id() const = 0;
  // Blocks until the next event (returns true) or the timeout passes (returns false). After a Finished
  // or Error event no more events come.
  virtual bool next(StreamEvent& ev, std::chrono::milliseconds timeout) = 0;
  // Stops generation at the next step and frees the stream's memory. Idempotent.
  virtual void cancel() = 0;
};

struct ModelInfo {
  std::string id;          // advertised name
  std::string family;      // model_type
  std::string path;        // local checkpoint directory
  int64_t parameters = 0;  // count
  std::string dtype;       // "bf16", ...
  int native_context = 0;  // max_position_embeddings
  int context = 0;         // allocated per-stream capacity (prompt + reply)
  std::string backend;     // "cpu", "cuda:0 (NVIDIA H200)"
  std::string drafter;     // model drafter in use: "mtp", "draft-model" or "none" (context copies aside)
  int64_t weight_bytes = 0, kv_bytes = 0;
  int64_t kv_tokens = 0;            // the KV pool's capacity, all streams and the prompt cache together
  int parallel = 0;                 // streams decoded together
  std::string fingerprint;          // engine build + weights identity, for system_fingerprint
  SamplingParams default_sampling;  // from generation_config.json and CLI defaults
};

struct EngineStats {
  int running = 0, waiting = 0;
  int kv_blocks_used = 0, kv_blocks_total = 0;
  int kv_blocks_cached = 0;  // retained by the prompt cache; those no stream uses are not in `used`
  int64_t prompt_cache_hits = 0, prompt_cache_disk_hits = 0;
  int64_t requests_finished = 0, requests_cancelled = 0, preemptions = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;
  int64_t forward_passes = 0;
  // Wall time of the rounds (planning, the forward, applying its outputs: sampling on the host,
  // verification, detokenizing, events) and of their forwards (device work and the wait for it); the
  // difference is the host's share of the inter-token latency.
  double round_seconds = 0, forward_seconds = 0;
  // The same for the rounds without prompt rows (decode and verify rounds alone), and their count.
  int64_t decode_rounds = 0;
  double decode_round_seconds = 0, decode_forward_seconds = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  // The draft guard (EngineOptions::draft_guard): stream counts for which it has drafting off
  // now, and how often it switched.
  int draft_guard_off = 0;
  int64_t draft_guard_switches = 0;
};

class Engine {
 public:
  virtual EngineStats stats() const = 0;
  virtual ~Engine() = default;
  // Throws InvalidRequest (core/error.h) for requests that can never run, e.g. prompt + max_tokens over
  // the context (code "context_length_exceeded"). Otherwise the request queues and runs.
  virtual std::shared_ptr<RequestHandle> submit(GenerationRequest req) = 0;
  virtual const ModelInfo& info() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ChatTemplate* chat_template() const = 0;  // null when the checkpoint has none
  virtual void shutdown() = 0;                            // cancels everything, joins the engine thread
};

}  // namespace tf

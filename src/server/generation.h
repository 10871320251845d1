#pragma once
// What chat and completions share: the sampling fields of a request, submitting n streams, collecting a
// whole reply, and driving a stream of Server-Sent Events until [DONE].
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/api_context.h"
#include "server/json_fields.h"

namespace tf::server {

// The request fields common to both endpoints, read and validated.
struct CommonFields {
  GenerationRequest request;          // sampling, stop, ignore_eos, draft; prompt/max_tokens filled later
  std::optional<int64_t> max_tokens;  // as requested (max_completion_tokens wins over max_tokens)
  std::string max_tokens_param;       // the field it came from, for errors
  int truncate_prompt_tokens = 0;     // (vLLM) > 0: the prompt's last this many tokens; -1: what fits
  int n = 1;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage =
      false;  // stream_options.continuous_usage_stats (vLLM): running counts in every chunk
};

// Reads model-independent fields; sampling defaults come from the model (generation_config + CLI).
CommonFields read_common_fields(const JsonFields& f, const ApiContext& ctx);

// The reply limit for a prompt: the requested one (400 context_length_exceeded when prompt + it does not
// fit), else min(server default, what is left of the context).
int resolve_max_tokens(const CommonFields& c, int prompt_tokens, const ApiContext& ctx);
// truncate_prompt_tokens: keeps the prompt's last tokens (left truncation, as vLLM). True when it cut.
bool truncate_prompt(const CommonFields& c, std::vector<int32_t>& prompt, const ApiContext& ctx);

// Seeds for n choices of one prompt: seed + i; without a seed and n > 1, a seed derived from the prompt
// (so choices differ but the request stays reproducible).
std::optional<uint64_t> choice_seed(const GenerationRequest& r, int n, int i);

const char* finish_reason_text(FinishReason r);  // "stop" / "length" (cancel and error never reach clients)

// One finished choice.
struct ChoiceResult {
  std::string text;
  std::vector<GeneratedToken> tokens;
  std::vector<GeneratedToken> prompt_tokens;  // prompt logprobs (prompt tokens 1..), when requested
  FinishReason finish = FinishReason::None;
  Usage usage;
  std::string error;
};

// Events of n choices (a Generation, or choices whose reasoning is cut by a budget: thinking_budget.h).
class EventSource {
 public:
  virtual ~EventSource() = default;
  virtual size_t size() const = 0;
  virtual bool done() const = 0;
  // The next event of any unfinished choice; false when none came within `timeout`.
  virtual bool next(size_t& index, StreamEvent& ev, std::chrono::milliseconds timeout) = 0;
  // Cancels every unfinished choice (client gone or server stopping).
  virtual void cancel(bool by_client) = 0;
  // When the first token of any choice arrived (time to first token); epoch when none yet.
  virtual std::chrono::steady_clock::time_point first_token_at() const = 0;

  // Waits for every choice to finish; aborts (cancelling) when `abort` turns true.
  std::vector<ChoiceResult> collect(const std::function<bool()>& abort);
};

// n submitted streams; unfinished ones are cancelled when this is destroyed.
class Generation : public EventSource {
 public:
  // Submits each request; an engine refusal (InvalidRequest) cancels those already submitted and throws.
  Generation(const ApiContext& ctx, std::vector<GenerationRequest> requests);
  ~Generation() override;
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  size_t size() const override { return handles_.size(); }
  bool done() const override { return active_ == 0; }
  bool next(size_t& index, StreamEvent& ev, std::chrono::milliseconds timeout) override;
  void cancel(bool by_client) override;
  std::chrono::steady_clock::time_point first_token_at() const override { return first_token_at_; }

 private:
  void mark_finished(size_t i);

  const ApiContext& ctx_;
  std::vector<std::shared_ptr<RequestHandle>> handles_;
  std::vector<bool> finished_;
  size_t active_ = 0;
  size_t cursor_ = 0;
  std::chrono::steady_clock::time_point first_token_at_{};
};

// Formats one protocol's stream chunks (chat.completion.chunk or text_completion).
class StreamFormatter {
 public:
  virtual ~StreamFormatter() = default;
  virtual std::vector<nlohmann::json> begin(size_t index) = 0;  // e.g. the role delta
  virtual std::vector<nlohmann::json> tokens(size_t index, const StreamEvent& ev) = 0;
  virtual nlohmann::json finish(size_t index, const StreamEvent& ev) = 0;
  virtual nlohmann::json usage(const nlohmann::json& usage) = 0;  // the include_usage chunk
};

// Builds the "usage" object from the finished choices (prompt counted once per prompt, n choices each).
nlohmann::json usage_json(const std::vector<Usage>& per_choice, int n);

// What a stream reports of usage: the final usage chunk (stream_options.include_usage) and, with
// continuous_usage_stats as vLLM has it, each chunk that carries a choice's tokens or its finish also
// carries that choice's counts so far ({prompt_tokens, completion_tokens, total_tokens}). A chunk that
// carries text held back from earlier tokens (an incomplete UTF-8 character) then says how many tokens it
// covers, which a client timing tokens needs.
struct StreamUsage {
  bool final = false;
  bool continuous = false;
  std::vector<int> prompt_tokens;  // per choice, for the continuous counts
};
// The usage a stream of these submissions reports, from its stream_options (continuous counts only with
// include_usage, as in vLLM).
StreamUsage stream_usage(const CommonFields& c, const std::vector<GenerationRequest>& submissions);

// Streams events as SSE through `write` (returns false once the client is gone) until every choice has
// finished, then the optional usage chunk and "data: [DONE]". Returns false when the stream was cut
// short (client gone: generation cancelled; or server stopping). `on_first_token` marks time to first token.
bool stream_generation(EventSource& gen, StreamFormatter& fmt, const StreamUsage& stream_usage, int n,
                       const std::function<bool(const std::string&)>& write, const std::atomic<bool>& stop,
                       std::vector<Usage>* usage_out = nullptr, std::string* finish_out = nullptr);

}  // namespace tf::server

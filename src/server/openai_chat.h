#pragma once
// POST /v1/chat/completions: messages -> chat template -> prompt ids; results -> chat.completion JSON or
// chat.completion.chunk SSE.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_context.h"
#include "server/chat_output.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/openai_common.h"

namespace tf::server {

struct ChatRequest {
  std::string model;
  CommonFields common;
  bool logprobs = false;
  int top_logprobs = 0;
  RequestJson messages;  // normalised (see normalize_messages)
  RequestJson tools;     // array or null
  RequestJson template_kwargs = RequestJson::object();
  bool add_generation_prompt = true;
  std::vector<int32_t> prompt;
  int max_tokens = 0;       // resolved against the context
  OutputParsing parsing;    // reasoning / tool-call parsing of the reply (chat_output.h)
  int thinking_budget = 0;  // reasoning tokens before the block is closed (thinking_budget.h); 0: none
};

// The request's thinking budget: "thinking_budget", else chat_template_kwargs.thinking_budget, else the
// server's --thinking-budget (0: no limit).
int read_thinking_budget(const JsonFields& f, const ApiContext& ctx);

// Validates the message list and brings it into the shape chat templates expect (as transformers'
// apply_chat_template receives it): text parts joined into one string, "developer" as "system",
// tool_calls[].function.arguments parsed from a JSON string into an object.
RequestJson normalize_messages(const RequestJson& messages);

// Renders a normalised conversation through the model's chat template, for every adapter that takes one
// (chat completions, responses, Anthropic messages, tokenize). Without a template: 400 `no_chat_template`
// naming `param` (`hint` appended to the message); a template that raises for the conversation (its
// raise_exception: roles out of order, a tool message without a call, ...): 400 `template_error` naming
// `param`. Never a 500: what the template rejects is the request's fault.
std::string render_chat_checked(const ModelText& text, const RequestJson& messages, const RequestJson& tools,
                                bool add_generation_prompt, const RequestJson& kwargs,
                                const std::string& param, const std::string& hint = {});

// The chat template's extra variables of a request: the server's defaults (serve's --thinking /
// --no-thinking), then reasoning_effort, then the request's chat_template_kwargs (at most kMaxTemplateKwargs,
// else a 400).
constexpr size_t kMaxTemplateKwargs = 256;
RequestJson template_kwargs(const JsonFields& f, const ApiContext& ctx);

// Reads and validates a request, renders and tokenizes the prompt; throws ApiError.
ChatRequest parse_chat_request(const RequestJson& body, const ApiContext& ctx);

// The n engine requests (seed + i each).
std::vector<GenerationRequest> chat_submissions(const ChatRequest& req);

nlohmann::json chat_completion_json(const ChatRequest& req, const ResponseMeta& meta,
                                    const std::vector<ChoiceResult>& choices, const ModelText& text);

class ChatStreamFormatter : public StreamFormatter {
 public:
  ChatStreamFormatter(const ChatRequest& req, ResponseMeta meta, const ModelText& text)
      : req_(req), meta_(std::move(meta)), text_(text) {}
  std::vector<nlohmann::json> begin(size_t index) override;
  std::vector<nlohmann::json> tokens(size_t index, const StreamEvent& ev) override;
  nlohmann::json finish(size_t index, const StreamEvent& ev) override;
  nlohmann::json usage(const nlohmann::json& usage) override;

 private:
  nlohmann::json chunk(size_t index, nlohmann::json delta, nlohmann::json logprobs,
                       nlohmann::json finish) const;
  const ChatRequest& req_;
  ResponseMeta meta_;
  const ModelText& text_;
  ChoiceParsers parsers_{req_.parsing};
};

}  // namespace tf::server

#pragma once
// POST /v1/messages and POST /v1/messages/count_tokens (Anthropic Messages API) over the same engine and
// chat template as chat completions: Anthropic blocks are turned into the OpenAI-shaped message list the
// templates receive (tool_use -> tool_calls, tool_result -> a "tool" message, thinking -> reasoning_content),
// and the reply is parsed back into thinking, text and tool_use blocks (output_parser.h).
// Errors use Anthropic's shape {"type": "error", "error": {"type", "message"}}; auth accepts x-api-key as
// well as a bearer token. Not supported (refused with 400): image/document blocks. thinking.budget_tokens
// ends the thinking block after that many tokens (thinking_budget.h).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_context.h"
#include "server/errors.h"
#include "server/json_fields.h"
#include "server/openai_common.h"
#include "server/output_parser.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace tf::server {

struct MessagesRequest {
  std::string model;
  GenerationRequest request;  // prompt, sampling, stop, max_tokens
  bool stream = false;
  OutputParsing parsing;
  int thinking_budget = 0;  // thinking.budget_tokens (0: none), enforced by thinking_budget.h
};

// Anthropic system + messages -> the chat template's message list (as openai_chat normalises it).
RequestJson anthropic_chat_messages(const RequestJson& body);
// Anthropic tools -> OpenAI-shaped function tools (null when none).
RequestJson anthropic_tools(const RequestJson& body);

// Reads and validates a request and renders the prompt; `count_only` skips generation-only fields.
MessagesRequest parse_messages_request(const RequestJson& body, const ApiContext& ctx, bool count_only);

// The message object of a finished reply.
nlohmann::json anthropic_message_json(const MessagesRequest& req, const ResponseMeta& meta,
                                      const std::string& text, FinishReason finish,
                                      const std::string& matched_stop, const Usage& usage);

// {"type": "error", "error": {"type": "invalid_request_error" | "authentication_error" | ..., "message"}}.
nlohmann::json anthropic_error_json(const ApiError& e);

// Rewrites an OpenAI error body that the HTTP layer produced itself (404, 405, 413) into Anthropic's shape.
void rewrite_as_anthropic_error(httplib::Response& res);

// Registers /v1/messages and /v1/messages/count_tokens on `http`.
void register_anthropic_routes(httplib::Server& http, const ApiContext& ctx);

}  // namespace tf::server

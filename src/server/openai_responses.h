#pragma once
// POST /v1/responses (OpenAI Responses API) over the chat template and engine, GET/DELETE
// /v1/responses/{id}. Input as a string or items (messages, function_call, function_call_output; reasoning
// items are accepted and skipped), instructions, function tools, tool_choice (as chat), max_output_tokens,
// temperature/top_p, reasoning.effort (-> the template's reasoning_effort), text.format "text".
// Replies are parsed into reasoning, message and function_call items (output_parser.h); streaming sends
// the Responses event sequence. Stored responses (store, default true) live in a bounded LRU store in
// memory and continue with previous_response_id. Refused with a 400 naming the field: other tool types,
// text.format json_schema/json_object, image/file inputs, background,
// include, truncation "auto", conversation.
#include <cstddef>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/api_context.h"
#include "server/json_fields.h"
#include "server/output_parser.h"

namespace httplib {
class Server;
}

namespace tf::server {

// What a stored response keeps: its JSON and the conversation (without instructions) up to its output.
struct StoredResponse {
  nlohmann::json response;
  RequestJson conversation;
};

class ResponseStore {
 public:
  explicit ResponseStore(size_t capacity) : capacity_(capacity) {}
  void put(const std::string& id, StoredResponse r);
  std::optional<StoredResponse> get(const std::string& id);  // marks it recently used
  bool erase(const std::string& id);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  size_t capacity_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, std::pair<StoredResponse, std::list<std::string>::iterator>> items_;
};

// Response items -> OpenAI chat messages (the shape normalize_messages accepts). Throws ApiError.
RequestJson responses_input_messages(const RequestJson& input);

// Registers POST /v1/responses, GET and DELETE /v1/responses/{id} (bearer auth, OpenAI errors).
void register_responses_routes(httplib::Server& http, const ApiContext& ctx);

}  // namespace tf::server

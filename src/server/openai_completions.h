#pragma once
// POST /v1/completions: prompt (string, strings, token ids, lists of token ids) -> text_completion JSON or
// SSE chunks. Choice index = prompt index * n + choice number, as OpenAI numbers them.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/api_context.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/openai_common.h"

namespace tf::server {

struct CompletionRequest {
  std::string model;
  CommonFields common;
  int logprobs = -1;  // -1: none; k: chosen token plus top-k alternatives
  bool echo = false;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // what echo prepends
  std::vector<int> max_tokens;            // per prompt, resolved against the context
};

// Reads and validates a request and tokenizes its prompts; throws ApiError.
CompletionRequest parse_completion_request(const RequestJson& body, const ApiContext& ctx);

std::vector<GenerationRequest> completion_submissions(const CompletionRequest& req);

nlohmann::json completion_json(const CompletionRequest& req, const ResponseMeta& meta,
                               const std::vector<ChoiceResult>& choices, const ModelText& text);

class CompletionStreamFormatter : public StreamFormatter {
 public:
  CompletionStreamFormatter(const CompletionRequest& req, ResponseMeta meta, const ModelText& text);
  std::vector<nlohmann::json> begin(size_t index) override;
  std::vector<nlohmann::json> tokens(size_t index, const StreamEvent& ev) override;
  nlohmann::json finish(size_t index, const StreamEvent& ev) override;
  nlohmann::json usage(const nlohmann::json& usage) override;

 private:
  nlohmann::json chunk(size_t index, const std::string& text, nlohmann::json logprobs,
                       nlohmann::json finish) const;
  const CompletionRequest& req_;
  ResponseMeta meta_;
  const ModelText& text_;
  std::vector<size_t> offsets_;  // text_offset so far, per choice
};

}  // namespace tf::server

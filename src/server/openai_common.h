#pragma once
// Pieces shared by the OpenAI chat and completions adapters: response identity and logprob entries.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/api.h"
#include "server/model_text.h"

namespace tf::server {

// id / created / model / system_fingerprint of one response (the same on every chunk of a stream).
struct ResponseMeta {
  std::string id;
  int64_t created = 0;
  std::string model;
  std::string fingerprint;
};

// A fresh "<prefix>-<24 hex>" id.
std::string make_response_id(const std::string& prefix);
int64_t unix_now();

// The text of one token as logprobs show it (special tokens included).
std::string token_piece(const ModelText& text, int32_t id);
// The UTF-8 bytes of a piece, as OpenAI's "bytes" field.
nlohmann::json piece_bytes(const std::string& piece);
// Chat: {"token", "logprob", "bytes", "top_logprobs": [...]} per token.
nlohmann::json chat_logprob_entries(const ModelText& text, const std::vector<GeneratedToken>& tokens,
                                    int top_logprobs);
// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; offsets start at `offset`.
nlohmann::json completion_logprobs(const ModelText& text, const std::vector<GeneratedToken>& tokens,
                                   int top_logprobs, size_t offset);
// Completions with echo: the prompt's entries in the same shape, the first token's logprob and
// top_logprobs null; `scored` are the engine's prompt logprobs (prompt tokens 1..).
nlohmann::json prompt_logprobs(const ModelText& text, const std::vector<int32_t>& prompt,
                               const std::vector<GeneratedToken>& scored, int top_logprobs);
// `prompt`'s entries followed by `reply`'s (both completion_logprobs shapes).
nlohmann::json with_prompt(nlohmann::json prompt, const nlohmann::json& reply);

}  // namespace tf::server

#include "server/openai_common.h"

#include <chrono>
#include <random>

namespace tf::server {

using nlohmann::json;

std::string make_response_id(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix + "-";
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string token_piece(const ModelText& text, int32_t id) {
  return text.decode({id}, false);
}

json piece_bytes(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(int(c));
  return bytes;
}

json chat_logprob_entries(const ModelText& text, const std::vector<GeneratedToken>& tokens,
                          int top_logprobs) {
  json out = json::array();
  for (const auto& t : tokens) {
    std::string piece = token_piece(text, t.token);
    json top = json::array();
    for (size_t k = 0; k < t.top.size() && int(k) < top_logprobs; ++k) {
      std::string p = token_piece(text, t.top[k].token);
      top.push_back({{"token", p}, {"logprob", t.top[k].logprob}, {"bytes", piece_bytes(p)}});
    }
    out.push_back(
        {{"token", piece}, {"logprob", t.logprob}, {"bytes", piece_bytes(piece)}, {"top_logprobs", top}});
  }
  return out;
}

json prompt_logprobs(const ModelText& text, const std::vector<int32_t>& prompt,
                     const std::vector<GeneratedToken>& scored, int top_logprobs) {
  // The first prompt token has no logprob: null, as OpenAI writes it; the others as the engine scored them.
  std::vector<GeneratedToken> first(1);
  first[0].token = prompt.empty() ? 0 : prompt[0];
  first[0].text = prompt.empty() ? std::string() : text.decode({prompt[0]}, true);
  json j = completion_logprobs(text, first, top_logprobs, 0);
  j["token_logprobs"][0] = nullptr;
  j["top_logprobs"][0] = nullptr;
  return with_prompt(j, completion_logprobs(text, scored, top_logprobs, first[0].text.size()));
}

json with_prompt(json prompt, const json& reply) {
  for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
    for (const auto& v : reply[key]) prompt[key].push_back(v);
  return prompt;
}

json completion_logprobs(const ModelText& text, const std::vector<GeneratedToken>& tokens, int top_logprobs,
                         size_t offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  for (const auto& t : tokens) {
    std::string piece = token_piece(text, t.token);
    toks.push_back(piece);
    lps.push_back(t.logprob);
    offs.push_back(offset);
    offset += t.text.size();
    json top = json::object();
    for (size_t k = 0; k < t.top.size() && int(k) < top_logprobs; ++k) {
      top[token_piece(text, t.top[k].token)] = t.top[k].logprob;
    }
    tops.push_back(top);
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

}  // namespace tf::server

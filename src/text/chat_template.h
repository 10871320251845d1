#pragma once
// Chat templates rendered exactly as transformers' tokenizer.apply_chat_template(..., tokenize=False).
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace tf {
namespace jinja {
class Template;
}

class ChatTemplate {
 public:
  // From a checkpoint/tokenizer dir, as transformers loads it: chat_template.jinja (and
  // additional_chat_templates/tool_use.jinja) if present, else tokenizer_config.json's "chat_template" (a
  // string, or a list of {name, template}: "default", and "tool_use" which is used when tools are given).
  // Special tokens (bos/eos/unk/sep/pad/cls/mask) from tokenizer_config.json (string or AddedToken dict).
  // Throws tf::Error if there is no template or it does not parse.
  static ChatTemplate from_dir(const std::string& dir);
  // Throws tf::Error naming the template line on a syntax error.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);

  // transformers' apply_chat_template(messages, tools=tools, add_generation_prompt=..., tokenize=False,
  // **extra_kwargs). messages: JSON array of message objects; tools: null or array; extra_kwargs: object
  // (enable_thinking, reasoning_effort, documents, ...). Throws tf::InvalidRequest when the template
  // rejects the conversation (raise_exception) or fails on it. Thread-safe.
  // Note: nlohmann::json sorts object keys; Python keeps request order, which shows in tojson output.
  // Callers that have the request's key order should use render_ordered.
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                     const nlohmann::json& extra_kwargs = nlohmann::json::object()) const;
  std::string render_ordered(
      const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools, bool add_generation_prompt,
      const nlohmann::ordered_json& extra_kwargs = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }
  // Sets another special token variable (unk_token, pad_token, ...) passed to the template.
  void set_special_token(const std::string& name, const std::string& value);

 private:
  ChatTemplate() = default;
  std::string render_values(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                            bool add_generation_prompt, const nlohmann::ordered_json& extra_kwargs) const;
  std::string source_;
  std::shared_ptr<const jinja::Template> tmpl_, tool_use_tmpl_;
  std::map<std::string, std::string> special_tokens_;
};

}  // namespace tf

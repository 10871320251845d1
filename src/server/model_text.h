#pragma once
// The text side of a model as the protocol adapters need it: tokenize, detokenize, render a chat.
// An interface so the adapters can be unit-tested with a fake model; the real one wraps the engine's
// Tokenizer and ChatTemplate (engine_text.cpp).
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tf {
class Engine;
}

namespace tf::server {

class ModelText {
 public:
  virtual ~ModelText() = default;
  virtual std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  virtual int vocab_size() const = 0;  // valid ids are [0, vocab_size)
  virtual bool has_chat_template() const = 0;
  // messages: OpenAI-shaped list already normalised (see openai_chat); tools: array or null;
  // kwargs: extra template variables (enable_thinking, reasoning_effort, ...).
  virtual std::string render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const = 0;
  // The chat template's text ("" when none): tells the tool-call family when the rendered prompt does not
  // (templates that describe tools only through the system prompt, as DeepSeek-V3.1's).
  virtual std::string chat_template_source() const { return {}; }
};

// Wraps engine.tokenizer() and engine.chat_template(); the engine must outlive the result.
std::unique_ptr<ModelText> make_engine_text(const Engine& engine);

}  // namespace tf::server

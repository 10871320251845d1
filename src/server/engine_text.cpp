#include <stdexcept>

#include "engine/api.h"
#include "server/model_text.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tf::server {

namespace {

class EngineText : public ModelText {
 public:
  explicit EngineText(const Engine& engine) : tok_(engine.tokenizer()), tpl_(engine.chat_template()) {}

  std::vector<int32_t> encode(const std::string& text, bool add_special_tokens) const override {
    return tok_.encode(text, add_special_tokens);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    return tok_.decode(ids, skip_special_tokens);
  }
  int vocab_size() const override { return int(tok_.vocab_size()); }
  bool has_chat_template() const override { return tpl_ != nullptr; }
  std::string render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const override {
    if (!tpl_) throw std::logic_error("no chat template");
    return tpl_->render_ordered(messages, tools, add_generation_prompt, kwargs);
  }
  std::string chat_template_source() const override { return tpl_ ? tpl_->source() : std::string(); }

 private:
  const Tokenizer& tok_;
  const ChatTemplate* tpl_;
};

}  // namespace

std::unique_ptr<ModelText> make_engine_text(const Engine& engine) {
  return std::make_unique<EngineText>(engine);
}

}  // namespace tf::server

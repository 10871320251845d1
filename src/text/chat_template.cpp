#include "text/chat_template.h"

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "text/jinja/template.h"

namespace tf {
namespace {

std::shared_ptr<const jinja::Template> compile(const std::string& source, const std::string& what) {
  try {
    return std::make_shared<jinja::Template>(source);
  } catch (const jinja::TemplateError& e) {
    throw Error("chat template " + what + ": " + e.what());
  }
}

// transformers' _normalize_chat_messages + _alias_reasoning_fields.
jinja::Value normalize_message(const nlohmann::ordered_json& m) {
  if (!m.is_object()) throw InvalidRequest("chat messages must be objects, got " + m.dump(), "messages");
  nlohmann::ordered_json msg = nlohmann::ordered_json::object();
  for (auto it = m.begin(); it != m.end(); ++it)
    if (!it.value().is_null()) msg[it.key()] = it.value();
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* field : {"reasoning_content", "thinking", "reasoning"}) {
    if (msg.contains(field)) {
      reasoning = &msg[field];
      break;
    }
  }
  if (!reasoning) return jinja::from_json(msg);
  nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
  aliased["thinking"] = *reasoning;
  for (auto it = msg.begin(); it != msg.end(); ++it) aliased[it.key()] = it.value();
  aliased["reasoning_content"] = *reasoning;
  return jinja::from_json(aliased);
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), tmpl_(compile(source_, "")) {
  special_tokens_["bos_token"] = std::move(bos_token);
  special_tokens_["eos_token"] = std::move(eos_token);
}

void ChatTemplate::set_special_token(const std::string& name, const std::string& value) {
  special_tokens_[name] = value;
}

ChatTemplate ChatTemplate::from_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  ChatTemplate ct;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    try {
      config = nlohmann::ordered_json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      throw Error(config_path.string() + ": " + e.what());
    }
  }
  // As transformers: chat_template.jinja and additional_chat_templates/<name>.jinja take priority over the
  // template entries of tokenizer_config.json.
  fs::path jinja_path = fs::path(dir) / "chat_template.jinja";
  fs::path tool_use_path = fs::path(dir) / "additional_chat_templates" / "tool_use.jinja";
  bool have_files = fs::exists(jinja_path) || fs::exists(fs::path(dir) / "additional_chat_templates");
  if (have_files) {
    if (fs::exists(jinja_path)) ct.source_ = read_file(jinja_path);
    if (fs::exists(tool_use_path))
      ct.tool_use_tmpl_ = compile(read_file(tool_use_path), tool_use_path.string());
  } else if (config.contains("chat_template") && config["chat_template"].is_string()) {
    ct.source_ = config["chat_template"].get<std::string>();
  } else if (config.contains("chat_template") && config["chat_template"].is_array()) {
    for (const auto& t : config["chat_template"]) {
      std::string name = t.value("name", ""), text = t.value("template", "");
      if (name == "default") ct.source_ = text;
      if (name == "tool_use") ct.tool_use_tmpl_ = compile(text, "tool_use in " + config_path.string());
    }
  }
  if (ct.source_.empty())
    throw Error("no chat template in " + dir + " (chat_template.jinja or tokenizer_config.json)");
  ct.tmpl_ = compile(ct.source_, "in " + dir);
  for (const char* name :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(name)) continue;
    const auto& v = config[name];
    if (v.is_string())
      ct.special_tokens_[name] = v.get<std::string>();
    else if (v.is_object() && v.contains("content") && v["content"].is_string())
      ct.special_tokens_[name] = v["content"].get<std::string>();
  }
  return ct;
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra_kwargs) const {
  auto ordered = [](const nlohmann::json& j) {
    return nlohmann::ordered_json::parse(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  return render_ordered(ordered(messages), ordered(tools), add_generation_prompt, ordered(extra_kwargs));
}

std::string ChatTemplate::render_ordered(const nlohmann::ordered_json& messages,
                                         const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra_kwargs) const {
  if (!messages.is_array()) throw InvalidRequest("messages must be an array", "messages");
  if (messages.empty())
    throw InvalidRequest("cannot apply the chat template to an empty conversation", "messages");
  if (!tools.is_null() && !tools.is_array()) throw InvalidRequest("tools must be an array", "tools");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object())
    throw InvalidRequest("chat template kwargs must be an object", "chat_template_kwargs");

  try {
    return render_values(messages, tools, add_generation_prompt, extra_kwargs);
  } catch (const jinja::TemplateError& e) {
    throw InvalidRequest(std::string("chat template error: ") + e.what());
  }
}

std::string ChatTemplate::render_values(const nlohmann::ordered_json& messages,
                                        const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_kwargs) const {
  std::vector<jinja::Value> msgs;
  for (const auto& m : messages) msgs.push_back(normalize_message(m));
  jinja::Vars vars;
  for (const auto& [k, v] : special_tokens_) vars.emplace_back(k, jinja::Value(v));
  jinja::Value documents = jinja::Value::none();
  if (extra_kwargs.is_object()) {
    for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) {
      if (it.key() == "documents") {
        documents = jinja::from_json(it.value());
      } else if (it.key() == "messages" || it.key() == "tools" || it.key() == "add_generation_prompt" ||
                 it.key() == "conversations" || it.key() == "chat_template" ||
                 it.key() == "continue_final_message" || it.key() == "return_assistant_tokens_mask") {
        // transformers passes these itself: a second value is a TypeError there.
        throw InvalidRequest("chat template kwargs cannot set '" + it.key() + "'", "chat_template_kwargs");
      } else {
        vars.emplace_back(it.key(), jinja::from_json(it.value()));
      }
    }
  }
  vars.emplace_back("messages", jinja::make_list(std::move(msgs)));
  vars.emplace_back("tools", tools.is_null() ? jinja::Value::none() : jinja::from_json(tools));
  vars.emplace_back("documents", documents);
  vars.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
  const auto& tmpl = !tools.is_null() && tool_use_tmpl_ ? tool_use_tmpl_ : tmpl_;
  return tmpl->render(vars);
}

}  // namespace tf

#include "server/chat_output.h"

#include "server/errors.h"

namespace tf::server {

using nlohmann::json;

ToolFormat detect_tool_format(const std::string& p) {
  if (p.find("<tool_call>") != std::string::npos) return ToolFormat::Hermes;
  if (p.find("[AVAILABLE_TOOLS]") != std::string::npos || p.find("[TOOL_CALLS]") != std::string::npos) {
    return ToolFormat::Mistral;
  }
  if (p.find("<｜tool▁calls▁begin｜>") != std::string::npos) return ToolFormat::DeepSeek;
  if (p.find("<|start_header_id|>") != std::string::npos) return ToolFormat::Llama3Json;
  return ToolFormat::Hermes;
}

static bool prompt_opens_think(const std::string& p) {
  size_t end = p.size();
  while (end > 0 && (p[end - 1] == '\n' || p[end - 1] == ' ')) --end;
  const std::string open = "<think>";
  return end >= open.size() && p.compare(end - open.size(), open.size(), open) == 0;
}

static void read_tool_choice(const JsonFields& f, OutputParsing& cfg) {
  const RequestJson* choice = f.get("tool_choice");
  if (!choice) return;
  if (choice->is_string() && *choice == "auto") return;
  if (choice->is_string() && *choice == "none") {
    cfg.tools = ToolFormat::None;
    return;
  }
  if (choice->is_string() && *choice != "required") {
    throw invalid_field("tool_choice",
                        "Invalid value for 'tool_choice': '" + choice->get<std::string>() +
                            "'. Supported values are: 'auto' and 'none'.",
                        "invalid_value");
  }
  if (!choice->is_string() && !choice->is_object()) {
    throw invalid_field("tool_choice",
                        "Invalid type for 'tool_choice': expected a string or an object, but got " +
                            json_type_name(*choice) + ".",
                        "invalid_type");
  }
  throw invalid_field(
      "tool_choice",
      "'tool_choice' values that force a call ('required' or a named function) are not supported by "
      "this server (it has no constrained decoding); use 'auto' and describe the call in the prompt.",
      "unsupported_value");
}

OutputParsing chat_output_parsing(const JsonFields& f, const RequestJson& tools,
                                  const std::string& rendered) {
  OutputParsing cfg;
  cfg.reasoning_starts_open = prompt_opens_think(rendered);
  bool have_tools = tools.is_array() && !tools.empty();
  if (have_tools) cfg.tools = detect_tool_format(rendered);
  read_tool_choice(f, cfg);
  if (!have_tools) cfg.tools = ToolFormat::None;
  if (auto v = f.boolean("parallel_tool_calls")) cfg.parallel_tool_calls = *v;
  return cfg;
}

static json tool_call_json(const ParsedToolCall& c, bool with_index) {
  json j = {{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}};
  if (with_index) j["index"] = c.index;
  return j;
}

json chat_message_json(const OutputParsing& cfg, const std::string& text, bool* has_tool_calls) {
  OutputParser p(cfg);
  ParsedDelta d = p.feed(text);
  d.append(p.finish());
  json m = {{"role", "assistant"}, {"content", d.content}, {"refusal", nullptr}};
  if (!d.reasoning.empty()) m["reasoning_content"] = d.reasoning;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : d.tool_calls) calls.push_back(tool_call_json(c, false));
    m["tool_calls"] = calls;
    std::string content = d.content;
    while (!content.empty() && (content.back() == '\n' || content.back() == ' ')) content.pop_back();
    m["content"] = content.empty() ? json(nullptr) : json(content);
  }
  if (has_tool_calls) *has_tool_calls = !d.tool_calls.empty();
  return m;
}

json chat_delta_json(const ParsedDelta& d) {
  json delta = json::object();
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.tool_calls.empty()) {
    json calls = json::array();
    for (const auto& c : d.tool_calls) calls.push_back(tool_call_json(c, true));
    delta["tool_calls"] = calls;
  }
  return delta;
}

OutputParser& ChoiceParsers::at(size_t index) {
  auto it = parsers_.find(index);
  if (it == parsers_.end()) it = parsers_.emplace(index, OutputParser(cfg_)).first;
  return it->second;
}

}  // namespace tf::server

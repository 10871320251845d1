#include "server/chat_output.h"

#include "core/error.h"
#include "engine/json_matcher.h"
#include "server/errors.h"

namespace tf::server {

using nlohmann::json;

static ToolFormat recognise_tool_format(const std::string& p) {
  // The tag families teach their syntax inside <tool_call> too, so they are told apart first.
  if (p.find("<function=") != std::string::npos && p.find("<parameter=") != std::string::npos) {
    return ToolFormat::Qwen3Coder;
  }
  if (p.find("<arg_key>") != std::string::npos) return ToolFormat::Glm45;
  if (p.find("<tool_call>") != std::string::npos) return ToolFormat::Hermes;
  if (p.find("[AVAILABLE_TOOLS]") != std::string::npos || p.find("[TOOL_CALLS]") != std::string::npos) {
    return ToolFormat::Mistral;
  }
  if (p.find("<｜tool▁calls▁begin｜>") != std::string::npos) return ToolFormat::DeepSeek;
  if (p.find("<|start_header_id|>") != std::string::npos) return ToolFormat::Llama3Json;
  return ToolFormat::None;
}

ToolFormat detect_tool_format(const std::string& rendered, const std::string& source) {
  ToolFormat f = recognise_tool_format(rendered);
  if (f == ToolFormat::None) f = recognise_tool_format(source);
  return f == ToolFormat::None ? ToolFormat::Hermes : f;
}

static bool prompt_opens_think(const std::string& p) {
  size_t end = p.size();
  while (end > 0 && (p[end - 1] == '\n' || p[end - 1] == ' ')) --end;
  const std::string open = "<think>";
  return end >= open.size() && p.compare(end - open.size(), open.size(), open) == 0;
}

// The start of a call in the family's syntax, written for the model: any call, or the named function.
static std::string call_prefill(ToolFormat fmt, const std::string& name) {
  std::string quoted = nlohmann::json(name).dump();
  switch (fmt) {
    case ToolFormat::Hermes:
      return name.empty() ? "<tool_call>\n" : "<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ";
    case ToolFormat::Mistral:
      return name.empty() ? "[TOOL_CALLS][" : "[TOOL_CALLS][{\"name\": " + quoted + ", \"arguments\": ";
    case ToolFormat::Llama3Json:
      return name.empty() ? "{\"name\": \"" : "{\"name\": " + quoted + ", \"parameters\": ";
    case ToolFormat::Qwen3Coder:
      return name.empty() ? "<tool_call>\n<function=" : "<tool_call>\n<function=" + name + ">\n";
    case ToolFormat::Glm45:
      return name.empty() ? "<tool_call>" : "<tool_call>" + name + "\n";
    default:
      return {};
  }
}

// A tool's function object: chat nests it ({"type": "function", "function": {...}}), Responses does not.
static const RequestJson& tool_function(const RequestJson& t) {
  return t.is_object() && t.contains("function") ? t["function"] : t;
}

// The constrained shape of a forced call (OutputParsing::forced_call): after a named call's prefill the
// arguments object and the call's closing; after "required"'s prefill one {"name", "arguments"} object of
// any of the tools and the closing. Null where the family or a tool's schema is not supported.
static std::shared_ptr<const JsonSchema> forced_call_schema(ToolFormat fmt, const std::string& name,
                                                            const RequestJson& tools) {
  std::vector<std::pair<std::string, RequestJson>> fns;  // name, parameters ({"type": "object"} if none)
  for (const auto& t : tools) {
    const RequestJson& fn = tool_function(t);
    if (!fn.is_object() || !fn.contains("name") || !fn["name"].is_string()) continue;
    const bool has = fn.contains("parameters") && fn["parameters"].is_object();
    fns.emplace_back(fn["name"].get<std::string>(), has ? fn["parameters"] : RequestJson{{"type", "object"}});
  }
  auto params = [&](const std::string& n) {
    for (const auto& [fn, p] : fns)
      if (fn == n) return p;
    return RequestJson{{"type", "object"}};
  };
  std::string close;
  RequestJson doc;
  if (!name.empty()) {
    switch (fmt) {
      case ToolFormat::Hermes:
        close = "}\n</tool_call>";
        break;
      case ToolFormat::Mistral:
        close = "}]";
        break;
      case ToolFormat::Llama3Json:
        close = "}";
        break;
      default:
        return nullptr;
    }
    doc = params(name);
  } else {
    switch (fmt) {
      case ToolFormat::Hermes:
        close = "\n</tool_call>";
        break;
      case ToolFormat::Mistral:
        close = "]";
        break;
      default:
        return nullptr;
    }
    RequestJson any = RequestJson::array();
    for (const auto& [n, p] : fns)
      any.push_back({{"type", "object"},
                     {"properties", {{"name", {{"const", n}}}, {"arguments", p}}},
                     {"required", {"name", "arguments"}}});
    if (any.empty()) return nullptr;
    doc = {{"anyOf", any}};
  }
  try {
    return JsonSchema::with_suffix(JsonSchema::compile(doc), close);
  } catch (const InvalidRequest&) {
    return nullptr;  // a keyword the matcher does not enforce: unconstrained, as before
  }
}

static bool has_tool(const RequestJson& tools, const std::string& name) {
  for (const auto& t : tools) {
    const RequestJson& fn = tool_function(t);
    if (fn.is_object() && fn.value("name", "") == name) return true;
  }
  return false;
}

// "auto", "none", "required" or a named function ({"type": "function", "function": {"name"}} in chat,
// {"type": "function", "name"} in Responses). Forcing a call writes its start for the model (prefill).
static void read_tool_choice(const JsonFields& f, const RequestJson& tools, OutputParsing& cfg) {
  const RequestJson* choice = f.get("tool_choice");
  if (!choice || (choice->is_string() && *choice == "auto")) return;
  if (choice->is_string() && *choice == "none") {
    cfg.tools = ToolFormat::None;
    return;
  }
  std::string name;
  if (choice->is_object()) {
    JsonFields cf(*choice, "tool_choice");
    const RequestJson* fn = cf.object("function");
    auto n = fn ? JsonFields(*fn, "tool_choice.function").string("name") : cf.string("name");
    if (!n)
      throw invalid_field("tool_choice",
                          "'tool_choice' must name a function: {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}.",
                          "invalid_value");
    name = *n;
  } else if (!choice->is_string() || *choice != "required") {
    throw invalid_field("tool_choice",
                        "Invalid value for 'tool_choice'. Supported values are: 'auto', 'none', "
                        "'required' and a named function.",
                        "invalid_value");
  }
  if (!tools.is_array() || tools.empty()) {
    throw invalid_field("tool_choice", "'tool_choice' forces a tool call but no 'tools' were given.",
                        "invalid_value");
  }
  if (!name.empty() && !has_tool(tools, name)) {
    throw invalid_field("tool_choice",
                        "'tool_choice' names the function '" + name + "', which is not in 'tools'.",
                        "invalid_value");
  }
  cfg.prefill = cfg.reasoning_starts_open ? std::string() : call_prefill(cfg.tools, name);
  if (cfg.prefill.empty()) {
    throw invalid_field(
        "tool_choice",
        "Forcing a tool call is not supported for this model's chat template (its tool-call syntax "
        "or an opened thinking block); use 'auto'.",
        "unsupported_value");
  }
  if (!name.empty()) cfg.parallel_tool_calls = false;  // a named choice is one call
  cfg.forced_call = forced_call_schema(cfg.tools, name, tools);
}

void set_reply_constraint(const OutputParsing& parsing, GenerationRequest& request,
                          const std::string& format_param) {
  if (!parsing.forced_call) {
    if (request.json_schema && parsing.reasoning) {
      request.json_schema = JsonSchema::after_reasoning(
          request.json_schema, {"<think>", "</think>", parsing.reasoning_starts_open});
    }
    return;
  }
  if (request.json_schema) {
    throw invalid_field(format_param,
                        "'" + format_param + "' cannot be combined with a 'tool_choice' that forces a call.",
                        "invalid_value");
  }
  request.json_schema = parsing.forced_call;
}

OutputParsing chat_output_parsing(const JsonFields& f, const RequestJson& tools, const std::string& rendered,
                                  const std::string& template_source) {
  OutputParsing cfg;
  cfg.reasoning_starts_open = prompt_opens_think(rendered);
  bool have_tools = tools.is_array() && !tools.empty();
  if (have_tools) {
    cfg.tools = detect_tool_format(rendered, template_source);
    for (const auto& t : tools) {
      const RequestJson& fn = tool_function(t);
      if (fn.is_object() && fn.contains("name") && fn["name"].is_string() && fn.contains("parameters")) {
        cfg.tool_schemas[fn["name"].get<std::string>()] = fn["parameters"];
      }
    }
  }
  read_tool_choice(f, tools, cfg);
  if (!have_tools) cfg.tools = ToolFormat::None;
  if (auto v = f.boolean("parallel_tool_calls")) cfg.parallel_tool_calls = *v;
  return cfg;
}

// A whole call, or a stream piece: the first piece of a call names it, later ones add arguments text.
static json tool_call_json(const ParsedToolCall& c, bool with_index) {
  json j = json::object();
  if (with_index) j["index"] = c.index;
  if (c.id.empty()) {
    j["function"] = {{"arguments", c.arguments}};
    return j;
  }
  j["id"] = c.id;
  j["type"] = "function";
  j["function"] = {{"name", c.name}, {"arguments", c.arguments}};
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

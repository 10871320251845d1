#include "server/openai_chat.h"

#include <climits>

#include "server/errors.h"
#include "server/json_fields.h"

namespace tf::server {

using nlohmann::json;

// String content, or the text parts of a list joined with newlines (as vLLM does for string templates).
static RequestJson normalize_content(const RequestJson& content, const std::string& name) {
  if (content.is_string()) return content;
  if (!content.is_array()) {
    throw invalid_field(name,
                        "Invalid type for '" + name +
                            "': expected a string or an array of content parts, but got " +
                            json_type_name(content) + ".",
                        "invalid_type");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const RequestJson& part = content[i];
    std::string pname = element_path(name, i);
    if (!part.is_object()) throw invalid_field(pname, "'" + pname + "' must be an object.", "invalid_type");
    JsonFields pf(part, pname);
    auto type = pf.string("type");
    if (!type) throw invalid_field(pf.name("type"), "Missing required parameter: '" + pf.name("type") + "'.");
    if (*type != "text") {
      throw invalid_field(pf.name("type"),
                          "Invalid value for '" + pf.name("type") + "': content parts of type '" + *type +
                              "' are not supported by this server; only 'text' parts are.",
                          "unsupported_content");
    }
    auto t = pf.string("text");
    if (!t) throw invalid_field(pf.name("text"), "Missing required parameter: '" + pf.name("text") + "'.");
    if (i > 0) text += "\n";
    text += *t;
  }
  return text;
}

static RequestJson normalize_tool_calls(const RequestJson& calls, const std::string& name) {
  if (!calls.is_array()) {
    throw invalid_field(
        name, "Invalid type for '" + name + "': expected an array, but got " + json_type_name(calls) + ".",
        "invalid_type");
  }
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string cname = element_path(name, i);
    if (!calls[i].is_object())
      throw invalid_field(cname, "'" + cname + "' must be an object.", "invalid_type");
    RequestJson call = calls[i];
    JsonFields cf(call, cname);
    const RequestJson* fn = cf.object("function");
    if (!fn)
      throw invalid_field(cf.name("function"), "Missing required parameter: '" + cf.name("function") + "'.");
    JsonFields ff(*fn, cf.name("function"));
    if (!ff.string("name"))
      throw invalid_field(ff.name("name"), "Missing required parameter: '" + ff.name("name") + "'.");
    const RequestJson* args = ff.get("arguments");
    if (!args)  // (required, as OpenAI's API has it: templates index or dump them)
      throw invalid_field(ff.name("arguments"),
                          "Missing required parameter: '" + ff.name("arguments") + "'.");
    if (args->is_string()) {
      // Templates index arguments as a mapping (transformers passes them that way).
      RequestJson parsed = parse_json_bounded<RequestJson>(args->get<std::string>());
      if (parsed.is_discarded()) {
        throw invalid_field(ff.name("arguments"),
                            "'" + ff.name("arguments") + "' is not valid JSON (or nests deeper than " +
                                std::to_string(kMaxJsonNesting) + " levels).",
                            "invalid_value");
      }
      call["function"]["arguments"] = parsed;
    } else if (!args->is_object()) {
      throw invalid_field(ff.name("arguments"),
                          "Invalid type for '" + ff.name("arguments") +
                              "': expected a JSON string, but got " + json_type_name(*args) + ".",
                          "invalid_type");
    }
    if (!call.contains("type")) call["type"] = "function";
    out.push_back(call);
  }
  return out;
}

static RequestJson normalize_message(const RequestJson& m, const std::string& name) {
  if (!m.is_object()) {
    throw invalid_field(
        name, "Invalid type for '" + name + "': expected an object, but got " + json_type_name(m) + ".",
        "invalid_type");
  }
  JsonFields f(m, name);
  auto role = f.string("role");
  if (!role) throw invalid_field(f.name("role"), "Missing required parameter: '" + f.name("role") + "'.");
  static const char* roles[] = {"system", "developer", "user", "assistant", "tool"};
  if (std::find(std::begin(roles), std::end(roles), *role) == std::end(roles)) {
    throw invalid_field(f.name("role"),
                        "Invalid value for '" + f.name("role") + "': '" + *role +
                            "'. Supported values are: 'system', 'developer', 'user', 'assistant' "
                            "and 'tool'.",
                        "invalid_value");
  }
  RequestJson out = m;
  out["role"] = *role == "developer" ? "system" : *role;
  bool has_calls = f.has("tool_calls");
  if (has_calls) out["tool_calls"] = normalize_tool_calls(m["tool_calls"], f.name("tool_calls"));
  if (f.has("content")) {
    out["content"] = normalize_content(m["content"], f.name("content"));
  } else if (*role == "assistant") {
    out["content"] = nullptr;  // allowed with tool_calls, and as an empty assistant turn
  } else {
    throw invalid_field(f.name("content"), "Missing required parameter: '" + f.name("content") + "'.");
  }
  if (f.has("name")) (void)f.string("name");
  if (f.has("tool_call_id")) (void)f.string("tool_call_id");
  return out;
}

std::string render_chat_checked(const ModelText& text, const RequestJson& messages, const RequestJson& tools,
                                bool add_generation_prompt, const RequestJson& kwargs,
                                const std::string& param, const std::string& hint) {
  if (!text.has_chat_template())
    throw invalid_field(param, "This model has no chat template" + (hint.empty() ? "." : "; " + hint),
                        "no_chat_template");
  try {
    return text.render_chat(messages, tools, add_generation_prompt, kwargs);
  } catch (const ApiError&) {
    throw;
  } catch (const std::exception& e) {
    throw invalid_field(param, std::string("The chat template rejected these messages: ") + e.what(),
                        "template_error");
  }
}

RequestJson normalize_messages(const RequestJson& messages) {
  if (!messages.is_array()) {
    throw invalid_field(
        "messages",
        "Invalid type for 'messages': expected an array, but got " + json_type_name(messages) + ".",
        "invalid_type");
  }
  if (messages.empty()) throw invalid_field("messages", "'messages' must contain at least one message.");
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < messages.size(); ++i)
    out.push_back(normalize_message(messages[i], element_path("messages", i)));
  return out;
}

RequestJson template_kwargs(const JsonFields& f, const ApiContext& ctx) {
  RequestJson kwargs = ctx.options.default_template_kwargs;
  if (auto effort = f.string("reasoning_effort")) kwargs["reasoning_effort"] = *effort;
  if (const RequestJson* extra = f.object("chat_template_kwargs")) {
    // (a bound: an ordered_json update searches the keys linearly, 100k keys took 20 s)
    if (extra->size() > kMaxTemplateKwargs)
      throw invalid_field(
          "chat_template_kwargs",
          "'chat_template_kwargs' holds more than " + std::to_string(kMaxTemplateKwargs) + " variables.",
          "invalid_value");
    kwargs.update(*extra);
  }
  return kwargs;
}

int read_thinking_budget(const JsonFields& f, const ApiContext& ctx) {
  if (auto v = f.integer("thinking_budget", 0, INT_MAX)) return int(*v);
  if (const RequestJson* kw = f.object("chat_template_kwargs")) {
    if (auto v = JsonFields(*kw, "chat_template_kwargs").integer("thinking_budget", 0, INT_MAX))
      return int(*v);
  }
  return ctx.options.thinking_budget;
}

ChatRequest parse_chat_request(const RequestJson& body, const ApiContext& ctx) {
  JsonFields f(body);
  ChatRequest r;
  auto model = f.string("model");
  r.model = ctx.check_model(model ? &*model : nullptr);
  const RequestJson* messages = f.get("messages");
  if (!messages) throw invalid_field("messages", "Missing required parameter: 'messages'.");
  r.messages = normalize_messages(*messages);
  r.common = read_common_fields(f, ctx);
  if (auto v = f.boolean("logprobs")) r.logprobs = *v;
  if (auto v = f.integer("top_logprobs", 0, 20)) {
    if (!r.logprobs) throw invalid_field("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
    r.top_logprobs = int(*v);
  }
  if (r.logprobs) r.common.request.logprobs = r.top_logprobs;
  if (const RequestJson* tools = f.array("tools")) r.tools = *tools;
  if (auto v = f.boolean("add_generation_prompt")) r.add_generation_prompt = *v;
  r.template_kwargs = template_kwargs(f, ctx);
  r.thinking_budget = read_thinking_budget(f, ctx);
  const std::string rendered =
      render_chat_checked(ctx.text, r.messages, r.tools, r.add_generation_prompt, r.template_kwargs,
                          "messages", "use POST /v1/completions with a prompt.");
  r.parsing = chat_output_parsing(f, r.tools, rendered, ctx.text.chat_template_source());
  set_reply_constraint(r.parsing, r.common.request, "response_format");
  // The template writes the special tokens itself; prefill is a forced tool call's start (chat_output.h).
  r.prompt = ctx.text.encode(rendered + r.parsing.prefill, false);
  truncate_prompt(r.common, r.prompt, ctx);
  r.max_tokens = resolve_max_tokens(r.common, int(r.prompt.size()), ctx);
  return r;
}

std::vector<GenerationRequest> chat_submissions(const ChatRequest& req) {
  std::vector<GenerationRequest> out;
  for (int i = 0; i < req.common.n; ++i) {
    GenerationRequest g = req.common.request;
    g.prompt = req.prompt;
    g.max_tokens = req.max_tokens;
    g.sampling.seed = choice_seed(g, req.common.n, i);
    out.push_back(std::move(g));
  }
  return out;
}

static json meta_fields(const ResponseMeta& m, const char* object) {
  return {{"id", m.id},
          {"object", object},
          {"created", m.created},
          {"model", m.model},
          {"system_fingerprint", m.fingerprint}};
}

json chat_completion_json(const ChatRequest& req, const ResponseMeta& meta,
                          const std::vector<ChoiceResult>& choices, const ModelText& text) {
  json out = meta_fields(meta, "chat.completion");
  json arr = json::array();
  std::vector<Usage> usage;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json logprobs = nullptr;
    if (req.logprobs)
      logprobs = {{"content", chat_logprob_entries(text, c.tokens, req.top_logprobs)}, {"refusal", nullptr}};
    bool calls = false;
    json message = chat_message_json(req.parsing, c.text, &calls);
    const char* finish =
        calls && c.finish == FinishReason::Stop ? "tool_calls" : finish_reason_text(c.finish);
    arr.push_back({{"index", i}, {"message", message}, {"logprobs", logprobs}, {"finish_reason", finish}});
    usage.push_back(c.usage);
  }
  out["choices"] = arr;
  out["usage"] = usage_json(usage, req.common.n);
  return out;
}

json ChatStreamFormatter::chunk(size_t index, json delta, json logprobs, json finish) const {
  json c = meta_fields(meta_, "chat.completion.chunk");
  c["choices"] = json::array({{{"index", index},
                               {"delta", std::move(delta)},
                               {"logprobs", std::move(logprobs)},
                               {"finish_reason", finish}}});
  if (req_.common.include_usage) c["usage"] = nullptr;
  return c;
}

std::vector<json> ChatStreamFormatter::begin(size_t index) {
  return {chunk(index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)};
}

std::vector<json> ChatStreamFormatter::tokens(size_t index, const StreamEvent& ev) {
  json logprobs = nullptr;
  if (req_.logprobs)
    logprobs = {{"content", chat_logprob_entries(text_, ev.tokens, req_.top_logprobs)}, {"refusal", nullptr}};
  json delta = chat_delta_json(parsers_.at(index).feed(ev.text));  // reasoning / tool calls split off
  if (delta.empty() && logprobs.is_null()) return {};  // text held back (a possible stop string or marker)
  return {chunk(index, delta, logprobs, nullptr)};
}

json ChatStreamFormatter::finish(size_t index, const StreamEvent& ev) {
  OutputParser& p = parsers_.at(index);
  json delta = chat_delta_json(p.finish());  // whatever the parser still held
  bool calls = p.tool_calls_emitted() > 0 && ev.finish == FinishReason::Stop;
  return chunk(index, delta, nullptr, calls ? "tool_calls" : finish_reason_text(ev.finish));
}

json ChatStreamFormatter::usage(const json& usage) {
  json c = meta_fields(meta_, "chat.completion.chunk");
  c["choices"] = json::array();
  c["usage"] = usage;
  return c;
}

}  // namespace tf::server

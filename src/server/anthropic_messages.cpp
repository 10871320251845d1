#include "server/anthropic_messages.h"

#include <httplib.h>

#include <chrono>
#include <climits>

#include "server/chat_output.h"
#include "server/generation.h"
#include "server/http_reply.h"
#include "server/json_fields.h"
#include "server/metrics.h"
#include "server/openai_chat.h"
#include "server/request_log.h"
#include "server/sse.h"
#include "server/structured_output.h"
#include "server/thinking_budget.h"

namespace tf::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

ApiError missing(const std::string& name) {
  return invalid_field(name, name + ": Field required");
}

// A block list's text (tool_result content, system blocks): text blocks joined with newlines.
std::string blocks_text(const RequestJson& v, const std::string& name) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) throw invalid_field(name, name + ": Input should be a valid string or a list of blocks");
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string path = element_path(name, i);
    JsonFields bf(v[i], path);
    if (!v[i].is_object() || bf.string("type").value_or("") != "text")
      throw invalid_field(path, path + ": only text blocks are supported here");
    if (!out.empty()) out += "\n";
    out += bf.string("text").value_or("");
  }
  return out;
}

// One Anthropic message -> one or more template messages (tool results become "tool" messages).
void convert_message(const RequestJson& m, const std::string& name, RequestJson& out) {
  if (!m.is_object()) throw invalid_field(name, name + ": Input should be a valid dictionary");
  JsonFields f(m, name);
  auto role = f.string("role");
  if (!role) throw missing(f.name("role"));
  if (*role != "user" && *role != "assistant") {
    throw invalid_field(f.name("role"), f.name("role") + ": Input should be 'user' or 'assistant'");
  }
  const RequestJson* content = f.get("content");
  if (!content) throw missing(f.name("content"));
  if (content->is_string()) {
    out.push_back({{"role", *role}, {"content", *content}});
    return;
  }
  if (!content->is_array())
    throw invalid_field(f.name("content"), f.name("content") + ": Input should be a valid list");
  std::string text, reasoning;
  RequestJson calls = RequestJson::array();
  for (size_t i = 0; i < content->size(); ++i) {
    const RequestJson& b = (*content)[i];
    std::string bname = element_path(f.name("content"), i);
    if (!b.is_object()) throw invalid_field(bname, bname + ": Input should be a valid dictionary");
    JsonFields bf(b, bname);
    std::string type = bf.string("type").value_or("");
    if (type == "text") {
      if (!text.empty()) text += "\n";
      text += bf.string("text").value_or("");
    } else if (type == "thinking" || type == "redacted_thinking") {
      reasoning += bf.string("thinking").value_or("");
    } else if (type == "tool_use" && *role == "assistant") {
      auto id = bf.string("id"), tool = bf.string("name");
      if (!id || !tool) throw missing(bf.name(id ? "name" : "id"));
      const RequestJson* input = bf.object("input");
      calls.push_back(
          {{"id", *id},
           {"type", "function"},
           {"function", {{"name", *tool}, {"arguments", input ? *input : RequestJson::object()}}}});
    } else if (type == "tool_result" && *role == "user") {
      auto id = bf.string("tool_use_id");
      if (!id) throw missing(bf.name("tool_use_id"));
      const RequestJson* c = bf.get("content");
      std::string result = c ? blocks_text(*c, bf.name("content")) : "";
      if (bf.boolean("is_error").value_or(false)) result = "Error: " + result;
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else {
      throw invalid_field(bname + ".type", bname + ".type: blocks of type '" + type +
                                               "' are not supported in " + *role +
                                               " messages by this server");
    }
  }
  if (text.empty() && calls.empty() && reasoning.empty()) return;  // only tool results
  RequestJson msg = {{"role", *role}, {"content", text}};
  if (!calls.empty()) msg["tool_calls"] = calls;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  out.push_back(msg);
}

std::string anthropic_error_type(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

RequestJson anthropic_chat_messages(const RequestJson& body) {
  JsonFields f(body);
  RequestJson out = RequestJson::array();
  if (const RequestJson* system = f.get("system")) {
    std::string s = blocks_text(*system, "system");
    if (!s.empty()) out.push_back({{"role", "system"}, {"content", s}});
  }
  const RequestJson* messages = f.get("messages");
  if (!messages) throw missing("messages");
  if (!messages->is_array()) throw invalid_field("messages", "messages: Input should be a valid list");
  for (size_t i = 0; i < messages->size(); ++i)
    convert_message((*messages)[i], element_path("messages", i), out);
  if (out.empty() || out.back()["role"] == "system")
    throw invalid_field("messages", "messages: at least one message is required");
  return out;
}

RequestJson anthropic_tools(const RequestJson& body) {
  JsonFields f(body);
  const RequestJson* tools = f.array("tools");
  if (!tools || tools->empty()) return nullptr;
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const RequestJson& t = (*tools)[i];
    JsonFields tf(t, element_path("tools", i));
    auto name = tf.string("name");
    if (!t.is_object() || !name) throw missing(tf.name("name"));
    RequestJson fn = {{"name", *name}};
    if (auto d = tf.string("description")) fn["description"] = *d;
    const RequestJson* schema = tf.object("input_schema");
    if (!schema) throw missing(tf.name("input_schema"));
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

static RequestJson thinking_kwargs(const JsonFields& f, const ApiContext& ctx,
                                   std::optional<int64_t> max_tokens, int& budget_out) {
  RequestJson kwargs = ctx.options.default_template_kwargs;
  const RequestJson* thinking = f.object("thinking");
  if (!thinking) {
    if (!kwargs.contains("enable_thinking"))
      kwargs["enable_thinking"] = false;  // Anthropic: off unless asked
    return kwargs;
  }
  JsonFields tf(*thinking, "thinking");
  std::string type = tf.string("type").value_or("");
  if (type == "disabled") {
    kwargs["enable_thinking"] = false;
  } else if (type == "enabled") {
    auto budget = tf.integer("budget_tokens", 1, INT_MAX);  // Anthropic asks >= 1024; small models need less
    if (!budget) throw missing("thinking.budget_tokens");
    if (max_tokens && *budget >= *max_tokens) {
      throw invalid_field("thinking.budget_tokens",
                          "`max_tokens` must be greater than `thinking.budget_tokens`");
    }
    kwargs["enable_thinking"] = true;
    budget_out = int(*budget);
  } else {
    throw invalid_field("thinking.type", "thinking.type: Input should be 'enabled' or 'disabled'");
  }
  return kwargs;
}

// Anthropic's tool_choice in the chat shape chat_output_parsing reads: auto, none, any -> "required",
// {"type": "tool", "name"} -> a named function.
static RequestJson chat_tool_choice(const JsonFields& f) {
  RequestJson body = RequestJson::object();
  const RequestJson* tc = f.object("tool_choice");
  if (!tc) return body;
  JsonFields cf(*tc, "tool_choice");
  std::string type = cf.string("type").value_or("");
  if (type == "auto" || type == "none") {
    body["tool_choice"] = type;
  } else if (type == "any") {
    body["tool_choice"] = "required";
  } else if (type == "tool") {
    auto name = cf.string("name");
    if (!name) throw missing("tool_choice.name");
    body["tool_choice"] = {{"type", "function"}, {"function", {{"name", *name}}}};
  } else {
    throw invalid_field("tool_choice.type",
                        "tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'");
  }
  if (auto v = cf.boolean("disable_parallel_tool_use")) body["parallel_tool_calls"] = !*v;
  return body;
}

static void read_sampling(const JsonFields& f, MessagesRequest& r, const ApiContext& ctx) {
  SamplingParams& s = r.request.sampling;
  s = ctx.info().default_sampling;
  if (auto v = f.number("temperature", 0, 1)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1)) s.top_p = float(*v);
  if (auto v = f.integer("top_k", 0, INT_MAX)) s.top_k = int(*v);
  if (const RequestJson* stops = f.array("stop_sequences")) {
    for (size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string() || (*stops)[i].get<std::string>().empty()) {
        throw invalid_field(element_path("stop_sequences", i),
                            element_path("stop_sequences", i) + ": must be a non-empty string");
      }
      r.request.stop.push_back((*stops)[i].get<std::string>());
    }
  }
  if (auto v = f.boolean("stream")) r.stream = *v;
}

MessagesRequest parse_messages_request(const RequestJson& body, const ApiContext& ctx, bool count_only) {
  JsonFields f(body);
  MessagesRequest r;
  auto model = f.string("model");
  if (!model) throw missing("model");
  r.model = ctx.check_model(&*model);
  std::optional<int64_t> max_tokens = f.integer("max_tokens", 1, INT_MAX);
  if (!max_tokens && !count_only) throw missing("max_tokens");
  RequestJson messages = normalize_messages(anthropic_chat_messages(body));
  RequestJson tools = anthropic_tools(body);
  r.thinking_budget = ctx.options.thinking_budget;  // thinking.budget_tokens overrides it
  RequestJson kwargs = thinking_kwargs(f, ctx, max_tokens, r.thinking_budget);
  if (!count_only) read_sampling(f, r, ctx);
  const std::string rendered = render_chat_checked(ctx.text, messages, tools, true, kwargs, "messages");
  RequestJson choice = chat_tool_choice(f);
  r.parsing = chat_output_parsing(JsonFields(choice), tools, rendered, ctx.text.chat_template_source());
  // Structured outputs (Anthropic's output_format {"type": "json_schema", "schema"}), then a forced call.
  if (const RequestJson* of = f.object("output_format"))
    r.request.json_schema = read_response_format(*of, "output_format", false);
  set_reply_constraint(r.parsing, r.request, "output_format");
  r.request.prompt = ctx.text.encode(rendered + r.parsing.prefill, false);
  if (count_only) return r;
  CommonFields c;
  c.max_tokens = max_tokens;
  c.max_tokens_param = "max_tokens";
  r.request.max_tokens = resolve_max_tokens(c, int(r.request.prompt.size()), ctx);
  return r;
}

static json usage_json_anthropic(const Usage& u, int prompt_tokens) {
  int prompt = u.prompt_tokens > 0 ? u.prompt_tokens : prompt_tokens;
  return {{"input_tokens", prompt - u.cached_tokens},
          {"output_tokens", u.completion_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", u.cached_tokens}};
}

static json tool_use_block(const ParsedToolCall& c) {
  json input = parse_json_bounded<json>(c.arguments);  // (the model's text)
  if (!input.is_object()) input = json::object();
  return {{"type", "tool_use"}, {"id", "toolu_" + c.id.substr(5)}, {"name", c.name}, {"input", input}};
}

static std::pair<json, json> stop_fields(FinishReason finish, const std::string& matched_stop, bool calls) {
  if (calls && finish == FinishReason::Stop) return {"tool_use", nullptr};
  if (finish == FinishReason::Length) return {"max_tokens", nullptr};
  if (!matched_stop.empty()) return {"stop_sequence", matched_stop};
  return {"end_turn", nullptr};
}

json anthropic_message_json(const MessagesRequest& req, const ResponseMeta& meta, const std::string& text,
                            FinishReason finish, const std::string& matched_stop, const Usage& usage) {
  OutputParser p(req.parsing);
  ParsedDelta d = p.feed(text);
  d.append(p.finish());
  json content = json::array();
  if (!d.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", d.reasoning}, {"signature", ""}});
  std::string body = d.content;
  while (!body.empty() && (body.back() == '\n' || body.back() == ' ') && !d.tool_calls.empty())
    body.pop_back();
  if (!body.empty() || d.tool_calls.empty()) content.push_back({{"type", "text"}, {"text", body}});
  for (const auto& c : d.tool_calls) content.push_back(tool_use_block(c));
  auto [reason, seq] = stop_fields(finish, matched_stop, !d.tool_calls.empty());
  return {{"id", meta.id},        {"type", "message"},
          {"role", "assistant"},  {"model", meta.model},
          {"content", content},   {"stop_reason", reason},
          {"stop_sequence", seq}, {"usage", usage_json_anthropic(usage, int(req.request.prompt.size()))}};
}

json anthropic_error_json(const ApiError& e) {
  return {{"type", "error"},
          {"error", {{"type", anthropic_error_type(e.status())}, {"message", e.message()}}}};
}

namespace {

std::string sse(const char* type, const json& data) {
  return std::string("event: ") + type + "\ndata: " + dump_json(data) + "\n\n";
}

// Anthropic clients send x-api-key; a bearer token is accepted too.
void check_key(const httplib::Request& req, const ServerOptions& opt) {
  if (opt.api_keys.empty()) return;
  std::string key = req.get_header_value("x-api-key");
  std::string auth = req.get_header_value("Authorization");
  if (key.empty() && auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
  if (key.empty()) throw ApiError(401, "authentication_error", "x-api-key header is required");
  bool ok = false;
  for (const auto& k : opt.api_keys) ok |= same_key(key, k);
  if (!ok) throw ApiError(401, "authentication_error", "invalid x-api-key");
}

// The stream of one reply as Anthropic's events: blocks open and close as the parser tells reasoning,
// text and tool calls apart.
class MessagesStream {
 public:
  MessagesStream(std::shared_ptr<MessagesRequest> req, std::unique_ptr<BudgetedGeneration> gen,
                 ResponseMeta meta)
      : req_(std::move(req)), gen_(std::move(gen)), meta_(std::move(meta)), parser_(req_->parsing) {}

  // Writes every event until message_stop; false when the client left or the server stopped.
  bool run(const std::function<bool(const std::string&)>& write, const std::atomic<bool>& stop,
           Clock::time_point t0) {
    write_ = &write;
    int prompt = int(req_->request.prompt.size());
    json start = {{"id", meta_.id},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", meta_.model},
                  {"content", json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage",
                   {{"input_tokens", prompt},
                    {"output_tokens", 0},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", 0}}}};
    if (!send("message_start", {{"type", "message_start"}, {"message", start}})) return false;
    if (!send("ping", {{"type", "ping"}})) return false;
    auto idle = Clock::now();
    StreamEvent ev;
    size_t i = 0;
    while (!gen_->done()) {
      if (!gen_->next(i, ev, std::chrono::milliseconds(50))) {
        if (stop) {
          gen_->cancel(false);
          send("error", anthropic_error_json(shutting_down()));
          return false;
        }
        if (Clock::now() - idle > std::chrono::seconds(2)) {
          if (!send("ping", {{"type", "ping"}})) return gen_->cancel(true), false;
          idle = Clock::now();
        }
        continue;
      }
      idle = Clock::now();
      bool ok = true;
      if (ev.kind == StreamEvent::Kind::Tokens) {
        ok = emit(parser_.feed(ev.text));
      } else if (ev.kind == StreamEvent::Kind::Finished) {
        ParsedDelta d = parser_.feed(ev.text);
        d.append(parser_.finish());
        ok = emit(d) && close_block() && finish(ev);
        observe_generation(t0, gen_->first_token_at(), ev.usage);
        record_generation(ev.usage, gen_->first_token_at(), finish_reason_name(ev.finish));
      } else {
        send("error", anthropic_error_json(internal_error(ev.error)));
        return false;
      }
      if (!ok) return gen_->cancel(true), false;
      ev = StreamEvent();
    }
    return true;
  }

  BudgetedGeneration& generation() { return *gen_; }

 private:
  bool send(const char* type, const json& data) { return (*write_)(sse(type, data)); }

  bool open_block(const std::string& type, json block) {
    if (type_ == type && type != "tool_use") return true;
    if (!close_block()) return false;
    type_ = type;
    return send("content_block_start",
                {{"type", "content_block_start"}, {"index", ++index_}, {"content_block", block}});
  }

  bool close_block() {
    if (type_.empty()) return true;
    type_.clear();
    return send("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }

  bool delta(const json& d) {
    return send("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }

  bool emit(const ParsedDelta& d) {
    if (!d.reasoning.empty()) {
      if (!open_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}})) return false;
      if (!delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}})) return false;
    }
    if (!d.content.empty()) {
      if (!open_block("text", {{"type", "text"}, {"text", ""}})) return false;
      if (!delta({{"type", "text_delta"}, {"text", d.content}})) return false;
    }
    for (const auto& c : d.tool_calls) {  // a call's first piece opens its block; the rest add input JSON
      if (!c.id.empty()) {
        json block = {{"type", "tool_use"},
                      {"id", "toolu_" + c.id.substr(5)},
                      {"name", c.name},
                      {"input", json::object()}};
        if (!open_block("tool_use", block)) return false;
        calls_ = true;
      }
      if (!c.arguments.empty() && !delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}}))
        return false;
    }
    return true;
  }

  bool finish(const StreamEvent& ev) {
    auto [reason, seq] = stop_fields(ev.finish, ev.matched_stop, calls_);
    json usage = usage_json_anthropic(ev.usage, int(req_->request.prompt.size()));
    return send("message_delta", {{"type", "message_delta"},
                                  {"delta", {{"stop_reason", reason}, {"stop_sequence", seq}}},
                                  {"usage", usage}}) &&
           send("message_stop", {{"type", "message_stop"}});
  }

  std::shared_ptr<MessagesRequest> req_;
  std::unique_ptr<BudgetedGeneration> gen_;
  ResponseMeta meta_;
  OutputParser parser_;
  const std::function<bool(const std::string&)>* write_ = nullptr;
  std::string type_;  // the open block's type, "" when none
  int index_ = -1;
  bool calls_ = false;
};

void handle_messages(const ApiContext& ctx, const httplib::Request& http_req, httplib::Response& res) {
  auto t0 = Clock::now();
  auto req = std::make_shared<MessagesRequest>(parse_messages_request(parse_body(http_req.body), ctx, false));
  ResponseMeta meta{"msg_" + make_response_id("x").substr(2), unix_now(), req->model, ctx.info().fingerprint};
  record_reply(meta.id, meta.model, req->stream);
  auto gen = std::make_unique<BudgetedGeneration>(ctx, req->request, req->thinking_budget,
                                                  req->parsing.reasoning_starts_open);
  if (!req->stream) {
    std::string text;
    StreamEvent ev, last;
    size_t i = 0;
    while (!gen->done()) {
      if (!gen->next(i, ev, std::chrono::milliseconds(50))) {
        if (ctx.shutting_down) throw shutting_down();
        continue;
      }
      if (ev.kind == StreamEvent::Kind::Error) throw internal_error(ev.error);
      text += ev.text;
      if (ev.kind == StreamEvent::Kind::Finished) last = ev;
      ev = StreamEvent();
    }
    observe_generation(t0, gen->first_token_at(), last.usage);
    record_generation(last.usage, gen->first_token_at(), finish_reason_name(last.finish));
    send_json(res, 200, anthropic_message_json(*req, meta, text, last.finish, last.matched_stop, last.usage));
    return;
  }
  auto stream = std::make_shared<MessagesStream>(req, std::move(gen), meta);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, stream, t0](size_t, httplib::DataSink& sink) {
        std::function<bool(const std::string&)> write = [&sink](const std::string& s) {
          return sink.is_writable() && sink.write(s.data(), s.size());
        };
        bool ok = stream->run(write, ctx.shutting_down, t0);
        if (!ok) request_record().finish = ctx.shutting_down ? "shutdown" : "client_gone";
        if (ok || ctx.shutting_down) {
          sink.done();
          return true;
        }
        return false;
      },
      [stream](bool) { stream->generation().cancel(false); });
}

}  // namespace

void rewrite_as_anthropic_error(httplib::Response& res) {
  json body = json::parse(res.body, nullptr, false);
  std::string message = "HTTP status " + std::to_string(res.status);
  if (body.is_object() && body.contains("error") && body["error"].contains("message")) {
    message = body["error"]["message"].get<std::string>();
  }
  res.set_content(dump_json(anthropic_error_json(ApiError(res.status, "", message))), "application/json");
}

void register_anthropic_routes(httplib::Server& http, const ApiContext& context) {
  const ApiContext* ctx = &context;  // outlives the server's routes
  auto route = [ctx](auto handler) { return guarded_route(ctx, check_key, anthropic_error_json, handler); };
  http.Post("/v1/messages", route([ctx](const httplib::Request& req, httplib::Response& res) {
              handle_messages(*ctx, req, res);
            }));
  http.Post("/v1/messages/count_tokens", route([ctx](const httplib::Request& req, httplib::Response& res) {
              MessagesRequest r = parse_messages_request(parse_body(req.body), *ctx, true);
              send_json(res, 200, {{"input_tokens", r.request.prompt.size()}});
            }));
}

}  // namespace tf::server

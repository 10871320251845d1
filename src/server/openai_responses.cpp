#include "server/openai_responses.h"

#include <httplib.h>

#include <chrono>
#include <climits>

#include "server/chat_output.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/http_reply.h"
#include "server/metrics.h"
#include "server/openai_chat.h"
#include "server/openai_common.h"
#include "server/request_log.h"
#include "server/sse.h"
#include "server/structured_output.h"
#include "server/thinking_budget.h"

namespace tf::server {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---- store ----

void ResponseStore::put(const std::string& id, StoredResponse r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = items_.find(id);
  if (it != items_.end()) {
    order_.erase(it->second.second);
    items_.erase(it);
  }
  order_.push_front(id);
  items_.emplace(id, std::make_pair(std::move(r), order_.begin()));
  while (items_.size() > capacity_) {
    items_.erase(order_.back());
    order_.pop_back();
  }
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = items_.find(id);
  if (it == items_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second.second);
  return it->second.first;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = items_.find(id);
  if (it == items_.end()) return false;
  order_.erase(it->second.second);
  items_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return items_.size();
}

namespace {

ApiError unsupported(const std::string& param, const std::string& what) {
  return invalid_field(param, what + " is not supported by this server.", "unsupported_value");
}

std::string hex_id(const std::string& prefix) {
  return prefix + "_" + make_response_id("x").substr(2);
}

std::string parts_text(const RequestJson& content, const std::string& name) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw invalid_field(name,
                        "Invalid type for '" + name + "': expected a string or an array of content parts.",
                        "invalid_type");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    JsonFields pf(content[i], element_path(name, i));
    std::string type = content[i].is_object() ? pf.string("type").value_or("") : "";
    if (type != "input_text" && type != "output_text" && type != "text") {
      throw unsupported(pf.name("type"), "Content of type '" + type + "'");
    }
    if (!text.empty()) text += "\n";
    text += pf.string("text").value_or("");
  }
  return text;
}

void add_call(RequestJson& out, const RequestJson& call) {
  if (out.empty() || out.back()["role"] != "assistant") {
    out.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", RequestJson::array()}});
  }
  if (!out.back().contains("tool_calls")) out.back()["tool_calls"] = RequestJson::array();
  out.back()["tool_calls"].push_back(call);
}

}  // namespace

RequestJson responses_input_messages(const RequestJson& input) {
  RequestJson out = RequestJson::array();
  if (input.is_string()) {
    out.push_back({{"role", "user"}, {"content", input}});
    return out;
  }
  if (!input.is_array()) {
    throw invalid_field("input", "Invalid type for 'input': expected a string or an array of items.",
                        "invalid_type");
  }
  for (size_t i = 0; i < input.size(); ++i) {
    const RequestJson& item = input[i];
    std::string name = element_path("input", i);
    if (!item.is_object()) throw invalid_field(name, "'" + name + "' must be an object.", "invalid_type");
    JsonFields f(item, name);
    std::string type = f.string("type").value_or("message");
    if (type == "message") {
      auto role = f.string("role");
      if (!role) throw invalid_field(f.name("role"), "Missing required parameter: '" + f.name("role") + "'.");
      const RequestJson* content = f.get("content");
      if (!content)
        throw invalid_field(f.name("content"), "Missing required parameter: '" + f.name("content") + "'.");
      out.push_back({{"role", *role}, {"content", parts_text(*content, f.name("content"))}});
    } else if (type == "function_call") {
      auto call_id = f.string("call_id"), fn = f.string("name"), args = f.string("arguments");
      if (!call_id || !fn)
        throw invalid_field(f.name(call_id ? "name" : "call_id"), "Missing required parameter.");
      add_call(out, {{"id", *call_id},
                     {"type", "function"},
                     {"function", {{"name", *fn}, {"arguments", args.value_or("{}")}}}});
    } else if (type == "function_call_output") {
      auto call_id = f.string("call_id");
      if (!call_id)
        throw invalid_field(f.name("call_id"), "Missing required parameter: '" + f.name("call_id") + "'.");
      const RequestJson* output = f.get("output");
      std::string text = !output               ? ""
                         : output->is_string() ? output->get<std::string>()
                                               : parts_text(*output, f.name("output"));
      out.push_back({{"role", "tool"}, {"tool_call_id", *call_id}, {"content", text}});
    } else if (type == "reasoning") {
      continue;  // earlier reasoning is not shown to the template again
    } else {
      throw unsupported(f.name("type"), "Input items of type '" + type + "'");
    }
  }
  return out;
}

namespace {

ResponseStore& store() {
  static ResponseStore s(1024);
  return s;
}

struct ResponsesRequest {
  std::string model;
  GenerationRequest request;
  bool stream = false, store = true;
  OutputParsing parsing;
  int thinking_budget = 0;   // thinking_budget.h
  RequestJson conversation;  // history + this input, without instructions
  json echo;                 // request fields the response object repeats
};

RequestJson function_tools(const JsonFields& f) {
  const RequestJson* tools = f.array("tools");
  if (!tools || tools->empty()) return nullptr;
  RequestJson out = RequestJson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const RequestJson& t = (*tools)[i];
    JsonFields tf(t, element_path("tools", i));
    std::string type = t.is_object() ? tf.string("type").value_or("") : "";
    if (type != "function") throw unsupported(tf.name("type"), "Tools of type '" + type + "'");
    auto name = tf.string("name");
    if (!name) throw invalid_field(tf.name("name"), "Missing required parameter: '" + tf.name("name") + "'.");
    RequestJson fn = {{"name", *name}};
    if (auto d = tf.string("description")) fn["description"] = *d;
    if (const RequestJson* p = tf.object("parameters")) fn["parameters"] = *p;
    out.push_back({{"type", "function"}, {"function", fn}});
  }
  return out;
}

void refuse_unsupported(const JsonFields& f) {
  if (f.boolean("background").value_or(false)) throw unsupported("background", "'background': true");
  if (const RequestJson* inc = f.array("include"); inc && !inc->empty())
    throw unsupported("include", "'include'");
  if (f.string("truncation").value_or("disabled") != "disabled")
    throw unsupported("truncation", "'truncation': 'auto'");
  if (f.has("conversation")) throw unsupported("conversation", "'conversation'");
}

ResponsesRequest parse_request(const RequestJson& body, const ApiContext& ctx) {
  JsonFields f(body);
  ResponsesRequest r;
  auto model = f.string("model");
  r.model = ctx.check_model(model ? &*model : nullptr);
  refuse_unsupported(f);
  if (const RequestJson* text = f.object("text"))
    if (const RequestJson* fmt = JsonFields(*text, "text").object("format"))
      r.request.json_schema = read_response_format(*fmt, "text.format", false);
  const RequestJson* input = f.get("input");
  if (!input) throw invalid_field("input", "Missing required parameter: 'input'.");
  if (auto prev = f.string("previous_response_id")) {
    auto stored = store().get(*prev);
    if (!stored) {
      throw ApiError(404, "invalid_request_error", "Previous response with id '" + *prev + "' not found.",
                     "previous_response_id", "previous_response_not_found");
    }
    r.conversation = stored->conversation;
  } else {
    r.conversation = RequestJson::array();
  }
  for (auto& m : responses_input_messages(*input)) r.conversation.push_back(m);
  RequestJson messages = RequestJson::array();
  auto instructions = f.string("instructions");
  if (instructions) messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (const auto& m : r.conversation) messages.push_back(m);
  messages = normalize_messages(messages);

  RequestJson tools = function_tools(f);
  RequestJson kwargs = ctx.options.default_template_kwargs;
  if (const RequestJson* reasoning = f.object("reasoning")) {
    if (auto effort = JsonFields(*reasoning, "reasoning").string("effort"))
      kwargs["reasoning_effort"] = *effort;
  }
  const std::string rendered = render_chat_checked(ctx.text, messages, tools, true, kwargs, "input",
                                                   "use POST /v1/completions with a prompt.");
  r.parsing = chat_output_parsing(f, tools, rendered,
                                  ctx.text.chat_template_source());  // tool_choice, parallel_tool_calls
  set_reply_constraint(r.parsing, r.request, "text.format");
  r.thinking_budget = read_thinking_budget(f, ctx);
  r.request.prompt = ctx.text.encode(rendered + r.parsing.prefill, false);

  SamplingParams& s = r.request.sampling;
  s = ctx.info().default_sampling;
  if (auto v = f.number("temperature", 0, 2)) s.temperature = float(*v);
  if (auto v = f.number("top_p", 0, 1)) s.top_p = float(*v);
  CommonFields c;
  if (auto v = f.integer("max_output_tokens", 1, INT_MAX))
    c.max_tokens = *v, c.max_tokens_param = "max_output_tokens";
  r.request.max_tokens = resolve_max_tokens(c, int(r.request.prompt.size()), ctx);
  if (auto v = f.boolean("stream")) r.stream = *v;
  if (auto v = f.boolean("store")) r.store = *v;

  // metadata as OpenAI's API takes it: at most 16 pairs, keys up to 64 characters, string values up to 512.
  if (const RequestJson* md = f.object("metadata")) {
    if (md->size() > 16)
      throw invalid_field("metadata", "'metadata' holds more than 16 pairs.", "invalid_value");
    for (const auto& [key, value] : md->items()) {
      const std::string name = "metadata." + key;
      if (key.size() > 64)
        throw invalid_field(name, "A 'metadata' key is longer than 64 characters.", "invalid_value");
      if (!value.is_string() || value.get_ref<const std::string&>().size() > 512)
        throw invalid_field(name,
                            "Invalid value for '" + name + "': expected a string of up to 512 characters.",
                            "invalid_value");
    }
  }
  auto echo = [&](const char* key, json dflt) { r.echo[key] = f.has(key) ? json(*f.get(key)) : dflt; };
  echo("instructions", nullptr);
  echo("tools", json::array());
  echo("tool_choice", "auto");
  echo("temperature", s.temperature);
  echo("top_p", s.top_p);
  echo("max_output_tokens", nullptr);
  echo("previous_response_id", nullptr);
  echo("metadata", json::object());
  echo("parallel_tool_calls", true);
  echo("text", {{"format", {{"type", "text"}}}});
  echo("reasoning", {{"effort", nullptr}, {"summary", nullptr}});
  r.echo["store"] = r.store;
  r.echo["truncation"] = "disabled";
  return r;
}

// Builds output items from parsed deltas, and the stream events that announce them.
class OutputItems {
 public:
  json items = json::array();
  bool has_calls = false;
  int reasoning_tokens = 0;  // usage.output_tokens_details

  std::vector<json> add(const ParsedDelta& d) {
    std::vector<json> ev;
    if (!d.reasoning.empty()) {
      open("reasoning", ev);
      text_ += d.reasoning;
      ev.push_back({{"type", "response.reasoning_text.delta"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"delta", d.reasoning}});
    }
    if (!d.content.empty()) {
      open("message", ev);
      text_ += d.content;
      ev.push_back({{"type", "response.output_text.delta"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"delta", d.content},
                    {"logprobs", json::array()}});
    }
    for (const auto& c : d.tool_calls) {  // a call's first piece opens its item; the rest stream arguments
      if (!c.id.empty()) {
        close(ev);
        has_calls = true;
        type_ = "function_call";
        id_ = hex_id("fc");
        call_id_ = c.id;
        name_ = c.name;
        ev.push_back({{"type", "response.output_item.added"},
                      {"output_index", index()},
                      {"item", call_item("in_progress")}});
      }
      if (c.arguments.empty()) continue;
      text_ += c.arguments;
      ev.push_back({{"type", "response.function_call_arguments.delta"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"delta", c.arguments}});
    }
    return ev;
  }

  void close(std::vector<json>& ev) {
    if (type_.empty()) return;
    json item;
    if (type_ == "message") {
      std::string text = text_;
      json part = {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
      ev.push_back({{"type", "response.output_text.done"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"text", text},
                    {"logprobs", json::array()}});
      ev.push_back({{"type", "response.content_part.done"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"part", part}});
      item = {{"type", "message"},
              {"id", id_},
              {"status", "completed"},
              {"role", "assistant"},
              {"content", json::array({part})}};
    } else if (type_ == "function_call") {
      ev.push_back({{"type", "response.function_call_arguments.done"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"name", name_},
                    {"arguments", text_}});
      item = call_item("completed");
    } else {
      ev.push_back({{"type", "response.reasoning_text.done"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"text", text_}});
      item = {{"type", "reasoning"},
              {"id", id_},
              {"summary", json::array()},
              {"content", json::array({{{"type", "reasoning_text"}, {"text", text_}}})}};
    }
    ev.push_back({{"type", "response.output_item.done"}, {"output_index", index()}, {"item", item}});
    items.push_back(item);
    type_.clear();
    text_.clear();
  }

 private:
  size_t index() const { return items.size(); }  // the open item's index

  void open(const std::string& type, std::vector<json>& ev) {
    if (type_ == type) return;
    close(ev);
    type_ = type;
    id_ = hex_id(type == "message" ? "msg" : "rs");
    if (type == "message") {
      json item = {{"type", "message"},
                   {"id", id_},
                   {"status", "in_progress"},
                   {"role", "assistant"},
                   {"content", json::array()}};
      ev.push_back({{"type", "response.output_item.added"}, {"output_index", index()}, {"item", item}});
      ev.push_back({{"type", "response.content_part.added"},
                    {"item_id", id_},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
    } else {
      json item = {{"type", "reasoning"}, {"id", id_}, {"summary", json::array()}};
      ev.push_back({{"type", "response.output_item.added"}, {"output_index", index()}, {"item", item}});
    }
  }

  json call_item(const char* status) const {
    return {{"type", "function_call"},
            {"id", id_},
            {"call_id", call_id_},
            {"name", name_},
            {"arguments", type_ == "function_call" ? text_ : ""},
            {"status", status}};
  }

  std::string type_, id_, text_;
  std::string call_id_, name_;  // the open function call's
};

json response_json(const ResponsesRequest& r, const std::string& id, int64_t created,
                   const std::string& status, const json& output, const Usage* usage, FinishReason finish,
                   int reasoning_tokens = 0) {
  json out = {{"id", id},         {"object", "response"}, {"created_at", created},
              {"status", status}, {"error", nullptr},     {"incomplete_details", nullptr},
              {"model", r.model}, {"output", output},     {"usage", nullptr}};
  out.update(r.echo);
  if (status == "incomplete" && finish == FinishReason::Length) {
    out["incomplete_details"] = {{"reason", "max_output_tokens"}};
  }
  if (usage) {
    out["usage"] = {{"input_tokens", usage->prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", usage->cached_tokens}}},
                    {"output_tokens", usage->completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
                    {"total_tokens", usage->prompt_tokens + usage->completion_tokens}};
  }
  return out;
}

// The assistant turn of a finished response, for previous_response_id.
RequestJson assistant_turn(const json& output) {
  RequestJson msg = {{"role", "assistant"}, {"content", nullptr}};
  std::string text, reasoning;
  RequestJson calls = RequestJson::array();
  for (const auto& item : output) {
    if (item["type"] == "message") text += item["content"][0]["text"].get<std::string>();
    if (item["type"] == "reasoning") reasoning += item["content"][0]["text"].get<std::string>();
    if (item["type"] == "function_call") {
      calls.push_back({{"id", item["call_id"]},
                       {"type", "function"},
                       {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    }
  }
  if (!text.empty() || calls.empty()) msg["content"] = text;
  if (!calls.empty()) msg["tool_calls"] = calls;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  return msg;
}

// Drives one generation to its end, calling `on_delta` with parsed pieces; returns the Finished event.
// `reasoning_tokens` counts the tokens of events that told reasoning or left the parser inside it.
StreamEvent run_generation(EventSource& gen, OutputParser& parser, const std::atomic<bool>& stop,
                           const std::function<bool(const ParsedDelta&)>& on_delta, int& reasoning_tokens) {
  StreamEvent ev, last;
  size_t i = 0;
  auto idle = Clock::now();
  while (!gen.done()) {
    if (!gen.next(i, ev, std::chrono::milliseconds(50))) {
      if (stop) throw shutting_down();
      if (Clock::now() - idle > std::chrono::seconds(2)) {
        if (!on_delta(ParsedDelta{})) throw std::runtime_error("client gone");
        idle = Clock::now();
      }
      continue;
    }
    idle = Clock::now();
    if (ev.kind == StreamEvent::Kind::Error) throw internal_error(ev.error);
    ParsedDelta d = parser.feed(ev.text);
    if (!d.reasoning.empty() || parser.in_reasoning()) reasoning_tokens += int(ev.tokens.size());
    if (ev.kind == StreamEvent::Kind::Finished) {
      d.append(parser.finish());
      last = ev;
    }
    if (!d.empty() && !on_delta(d)) throw std::runtime_error("client gone");
    ev = StreamEvent();
  }
  return last;
}

void finish_response(const ResponsesRequest& r, const std::string& id, int64_t created,
                     const StreamEvent& last, OutputItems& items, json& response, std::vector<json>& events) {
  items.close(events);
  std::string status = last.finish == FinishReason::Length ? "incomplete" : "completed";
  response =
      response_json(r, id, created, status, items.items, &last.usage, last.finish, items.reasoning_tokens);
  if (r.store) {
    RequestJson conv = r.conversation;
    conv.push_back(assistant_turn(items.items));
    store().put(id, {response, conv});
  }
}

void handle_create(const ApiContext& ctx, const httplib::Request& http_req, httplib::Response& res) {
  auto t0 = Clock::now();
  auto r = std::make_shared<ResponsesRequest>(parse_request(parse_body(http_req.body), ctx));
  std::string id = hex_id("resp");
  int64_t created = unix_now();
  record_reply(id, r->model, r->stream);
  std::shared_ptr<EventSource> gen =
      budgeted_choices(ctx, {r->request}, r->thinking_budget, r->parsing.reasoning_starts_open);
  if (!r->stream) {
    OutputParser parser(r->parsing);
    OutputItems items;
    std::vector<json> ignored;
    StreamEvent last = run_generation(
        *gen, parser, ctx.shutting_down,
        [&](const ParsedDelta& d) {
          items.add(d);
          return true;
        },
        items.reasoning_tokens);
    json response;
    finish_response(*r, id, created, last, items, response, ignored);
    observe_generation(t0, gen->first_token_at(), last.usage);
    record_generation(last.usage, gen->first_token_at(), finish_reason_name(last.finish));
    send_json(res, 200, response);
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [&ctx, r, gen, id, created, t0](size_t, httplib::DataSink& sink) {
        int seq = 0;
        auto send = [&](json ev) {
          ev["sequence_number"] = seq++;
          std::string s = "event: " + ev["type"].get<std::string>() + "\ndata: " + dump_json(ev) + "\n\n";
          return sink.is_writable() && sink.write(s.data(), s.size());
        };
        json initial =
            response_json(*r, id, created, "in_progress", json::array(), nullptr, FinishReason::None);
        send({{"type", "response.created"}, {"response", initial}});
        send({{"type", "response.in_progress"}, {"response", initial}});
        OutputParser parser(r->parsing);
        OutputItems items;
        try {
          auto on_delta = [&](const ParsedDelta& d) {
            if (d.empty()) return sink.is_writable() && sink.write(": keep-alive\n\n", 14);
            for (auto& ev : items.add(d)) {
              if (!send(ev)) return false;
            }
            return true;
          };
          StreamEvent last =
              run_generation(*gen, parser, ctx.shutting_down, on_delta, items.reasoning_tokens);
          std::vector<json> tail;
          json response;
          finish_response(*r, id, created, last, items, response, tail);
          for (auto& ev : tail) send(ev);
          send({{"type", response["status"] == "completed" ? "response.completed" : "response.incomplete"},
                {"response", response}});
          observe_generation(t0, gen->first_token_at(), last.usage);
          record_generation(last.usage, gen->first_token_at(), finish_reason_name(last.finish));
        } catch (const ApiError& e) {
          gen->cancel(false);
          request_record().error = e.message();
          request_record().finish = ctx.shutting_down ? "shutdown" : "error";
          send({{"type", "error"}, {"code", e.code()}, {"message", e.message()}, {"param", nullptr}});
        } catch (const std::exception&) {
          gen->cancel(true);
          request_record().finish = "client_gone";
          return false;  // the client is gone
        }
        sink.done();
        return true;
      },
      [gen](bool) { gen->cancel(false); });
}

ApiError response_not_found(const std::string& id) {
  return ApiError(404, "invalid_request_error", "Response with id '" + id + "' not found.", "response_id",
                  "response_not_found");
}

}  // namespace

void register_responses_routes(httplib::Server& http, const ApiContext& context) {
  const ApiContext* ctx = &context;
  auto route = [ctx](auto handler) {
    return guarded_route(
        ctx, check_bearer, [](const ApiError& e) { return e.to_json(); }, handler);
  };
  http.Post("/v1/responses", route([ctx](const httplib::Request& req, httplib::Response& res) {
              handle_create(*ctx, req, res);
            }));
  http.Get(R"(/v1/responses/([^/]+))", route([](const httplib::Request& req, httplib::Response& res) {
             auto stored = store().get(req.matches[1]);
             if (!stored) throw response_not_found(req.matches[1]);
             send_json(res, 200, stored->response);
           }));
  http.Delete(
      R"(/v1/responses/([^/]+))", route([](const httplib::Request& req, httplib::Response& res) {
        if (!store().erase(req.matches[1])) throw response_not_found(req.matches[1]);
        send_json(res, 200, {{"id", req.matches[1]}, {"object", "response.deleted"}, {"deleted", true}});
      }));
}

}  // namespace tf::server

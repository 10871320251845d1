// The HTTP layer end to end over a real socket with a fake engine: auth, limits, error mapping, SSE.
#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "fake_engine.h"
#include "server/http_server.h"

namespace tf::server {
namespace {

using nlohmann::json;

class ServerHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.port = 0;
    o.api_keys = {"sekret"};
    o.max_body_bytes = 4096;
    o.read_timeout_s = 2;
    o.default_max_tokens = 8;
    server_ = std::make_unique<HttpServer>(engine_, text_, o);
    server_->bind();
    thread_ = std::thread([this] { server_->run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_bearer_token_auth("sekret");
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  httplib::Result post(const std::string& path, const std::string& body) {
    return client_->Post(path.c_str(), body, "application/json");
  }
  static json error_of(const httplib::Result& r) { return json::parse(r->body)["error"]; }
  void expect_good_request_works() {
    auto r =
        post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 3);
  }

  testing::FakeEngine engine_{
      testing::FakeEngineConfig{.context = 256, .step = std::chrono::microseconds(200)}};
  testing::FakeText text_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerHttp, AuthIsRequiredExceptForHealth) {
  httplib::Client anon("127.0.0.1", server_->port());
  auto r = anon.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(error_of(r)["code"], "invalid_api_key");
  anon.set_bearer_token_auth("wrong");
  r = anon.Post("/v1/chat/completions", "{}", "application/json");
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(anon.Get("/health")->status, 200);
  r = client_->Get("/v1/models");
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "fake-model");
  expect_good_request_works();
}

TEST_F(ServerHttp, ErrorsUseTheOpenAIShape) {
  auto r = post("/v1/chat/completions", "{not json");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_of(r)["type"], "invalid_request_error");
  r = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "temperature": "x"})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_of(r)["param"], "temperature");
  r = post("/v1/completions", R"({"model": "nope", "prompt": "x"})");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(error_of(r)["code"], "model_not_found");
  r = post("/v1/completions", R"({"prompt": "x", "max_tokens": 1000})");
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(error_of(r)["code"], "context_length_exceeded");
  r = client_->Get("/v1/nothing");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(error_of(r)["code"], "unknown_url");
  r = post("/v1/completions", std::string(10000, ' '));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(error_of(r)["code"], "request_too_large");
  expect_good_request_works();
  json health = json::parse(client_->Get("/health")->body);
  EXPECT_GE(health["requests_failed"].get<int>(), 6);
}

// A chat template that raises for a conversation (its raise_exception) is the request's fault in every
// adapter that renders one: 400 `template_error` naming the field, in the API's own shape; without a
// template, 400 `no_chat_template`. The server keeps serving.
TEST_F(ServerHttp, TemplateRejectionsAre400InEveryAdapter) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::vector<std::tuple<std::string, std::string, std::string>> routes = {
      {"/v1/chat/completions", "{" + msgs + ", \"max_tokens\": 3}", "messages"},
      {"/v1/responses", R"({"input": "hi", "max_output_tokens": 3})", "input"},
      {"/tokenize", "{" + msgs + "}", "messages"},
      {"/v1/messages", "{" + msgs + ", \"max_tokens\": 3, \"model\": \"fake-model\"}", ""},
      {"/v1/messages/count_tokens", "{" + msgs + ", \"model\": \"fake-model\"}", ""}};
  for (bool has_template : {true, false}) {
    text_.template_raises = has_template ? "Conversation roles must alternate user/assistant" : "";
    text_.has_template = has_template;
    for (const auto& [path, body, param] : routes) {
      SCOPED_TRACE(path + (has_template ? " (template raises)" : " (no template)"));
      auto r = post(path, body);
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 400) << r->body;
      const json e = error_of(r);
      if (param.empty()) {  // Anthropic's shape: {"type": "error", "error": {"type", "message"}}
        EXPECT_EQ(json::parse(r->body)["type"], "error");
        EXPECT_EQ(e["type"], "invalid_request_error");
      } else {
        EXPECT_EQ(e["param"], param);
        EXPECT_EQ(e["code"], has_template ? "template_error" : "no_chat_template");
      }
      const std::string message = e["message"];
      EXPECT_NE(message.find(has_template ? "roles must alternate" : "no chat template"), std::string::npos)
          << message;
    }
  }
  text_.template_raises.clear();
  text_.has_template = true;
  expect_good_request_works();
}

// Every API's requests reach the request log with what the adapter knew: the reply's id, the tokens, the
// finish reason, and for an error its message (the Anthropic and Responses routes included).
TEST_F(ServerHttp, EveryApiLogsItsRequests) {
  const std::string msgs = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      // path, body, what its log line holds
      {"/v1/chat/completions", "{" + msgs + R"(, "max_tokens": 3})", " id=chatcmpl-"},
      {"/v1/chat/completions", "{" + msgs + R"(, "max_tokens": 3, "stream": true})", " id=chatcmpl-"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 3, "stream": true})", " id=cmpl-"},
      {"/v1/responses", R"({"input": "hi", "max_output_tokens": 3})", " id=resp"},
      {"/v1/responses", R"({"input": "hi", "max_output_tokens": 3, "stream": true})", " id=resp"},
      {"/v1/messages", "{" + msgs + R"(, "max_tokens": 3, "model": "fake-model"})", " id=msg_"},
      {"/v1/messages", "{" + msgs + R"(, "max_tokens": 3, "model": "fake-model", "stream": true})",
       " id=msg_"},
      {"/v1/responses", R"({"input": "hi", "temperature": "hot"})", "error=\""},
      {"/v1/messages", "{" + msgs + R"(, "max_tokens": 3, "model": "nope"})", "error=\""}};
  ::testing::internal::CaptureStderr();
  int answered = 0;
  for (const auto& [path, body, want] : cases) {
    // Each request, then /health, on one connection of its own: the server reads the second request only
    // after the first one's log line is written, so the lines come in order and all before the capture ends.
    httplib::Client c("127.0.0.1", server_->port());
    c.set_bearer_token_auth("sekret");
    c.set_keep_alive(true);
    answered += c.Post(path.c_str(), body, "application/json") && c.Get("/health");
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(answered, int(cases.size()));
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = log.find('\n', at)) != std::string::npos; at = nl + 1)
    if (log.find(" POST /", at) < nl) lines.push_back(log.substr(at, nl - at));
  ASSERT_EQ(lines.size(), cases.size()) << log;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [path, body, want] = cases[i];
    SCOPED_TRACE(path + " " + body);
    EXPECT_NE(lines[i].find(" POST " + path + " "), std::string::npos) << lines[i];
    EXPECT_NE(lines[i].find(want), std::string::npos) << lines[i];
    if (want[0] == ' ') {  // a generation: its tokens and how it ended
      EXPECT_NE(lines[i].find(" 200 "), std::string::npos) << lines[i];
      EXPECT_NE(lines[i].find(" completion=3"), std::string::npos) << lines[i];
      EXPECT_NE(lines[i].find(" finish=length"), std::string::npos) << lines[i];
      EXPECT_EQ(lines[i].find(" stream") != std::string::npos, body.find("stream") != std::string::npos)
          << lines[i];
    }
  }
}

TEST_F(ServerHttp, StreamsServerSentEvents) {
  std::string body;
  httplib::Headers headers;
  auto r = client_->Post("/v1/completions", R"({"prompt": "ab", "max_tokens": 4, "stream": true})",
                         "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(r->body.substr(0, 6), "data: ");
  EXPECT_EQ(r->body.substr(r->body.size() - 14), "data: [DONE]\n\n");
  expect_good_request_works();
}

// A fake model that always writes one reply (byte by byte), served over HTTP: a tool call streams its
// arguments in pieces through every API, and the pieces add up to the whole reply's arguments.
class ToolCallStreams : public ::testing::TestWithParam<std::pair<std::string, std::string>> {
 protected:
  void SetUp() override {
    engine_ = std::make_unique<testing::FakeEngine>(testing::FakeEngineConfig{
        .context = 512, .step = std::chrono::microseconds(50), .reply = GetParam().first});
    ServerOptions o;
    o.port = 0;
    o.default_max_tokens = 300;
    server_ = std::make_unique<HttpServer>(*engine_, text_, o);
    server_->bind();
    thread_ = std::thread([this] { server_->run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
  }
  json post(const std::string& path, json body) {
    auto r = client_->Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no reply");
    return r ? json::parse(r->body) : json();
  }
  // The data of each SSE event.
  std::vector<json> events(const std::string& path, json body) {
    body["stream"] = true;
    auto r = client_->Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200);
    std::vector<json> out;
    for (size_t pos = 0; r && pos < r->body.size();) {
      size_t end = r->body.find("\n\n", pos);
      std::string ev = r->body.substr(pos, end - pos);
      pos = end == std::string::npos ? r->body.size() : end + 2;
      size_t data = ev.find("data: ");
      if (data != std::string::npos && ev.compare(data, 12, "data: [DONE]") != 0)
        out.push_back(json::parse(ev.substr(data + 6)));
    }
    return out;
  }

  static json tools() {
    return json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])");
  }
  static json user() { return json::parse(R"([{"role": "user", "content": "weather?"}])"); }

  std::unique_ptr<testing::FakeEngine> engine_;
  testing::FakeText text_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_P(ToolCallStreams, ChatCompletions) {
  const std::string& args = GetParam().second;
  json body = {{"messages", user()}, {"tools", tools()}};
  json whole = post("/v1/chat/completions", body)["choices"][0];
  EXPECT_EQ(whole["finish_reason"], "tool_calls");
  EXPECT_EQ(whole["message"]["tool_calls"][0]["function"]["arguments"], args);
  std::string told, finish;
  int pieces = 0;
  for (const json& c : events("/v1/chat/completions", body)) {
    const json& choice = c["choices"][0];
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    if (!choice["delta"].contains("tool_calls")) continue;
    for (const json& t : choice["delta"]["tool_calls"]) {
      EXPECT_EQ(t["index"], 0);
      if (pieces++ == 0) {  // the first delta names the call
        EXPECT_EQ(t["function"]["name"], "get_weather");
        EXPECT_EQ(t["id"].get<std::string>().rfind("call_", 0), 0u);
        EXPECT_EQ(t["type"], "function");
      } else {
        EXPECT_FALSE(t.contains("id"));
        EXPECT_FALSE(t["function"].contains("name"));
      }
      told += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(told, args);
  EXPECT_GT(pieces, 3);  // streamed in pieces, not at the end
  EXPECT_EQ(finish, "tool_calls");
}

TEST_P(ToolCallStreams, Responses) {
  const std::string& args = GetParam().second;
  json body = {{"input", "weather?"},
               {"tools", json::array({{{"type", "function"},
                                       {"name", "get_weather"},
                                       {"parameters", tools()[0]["function"]["parameters"]}}})}};
  json whole = post("/v1/responses", body);
  json call = whole["output"].back();
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["arguments"], args);
  std::string told, done, item_args;
  int deltas = 0;
  for (const json& ev : events("/v1/responses", body)) {
    if (ev["type"] == "response.function_call_arguments.delta") {
      told += ev["delta"].get<std::string>();
      ++deltas;
    } else if (ev["type"] == "response.function_call_arguments.done") {
      done = ev["arguments"];
    } else if (ev["type"] == "response.output_item.done" && ev["item"]["type"] == "function_call") {
      item_args = ev["item"]["arguments"];
    } else if (ev["type"] == "response.output_item.added" && ev["item"]["type"] == "function_call") {
      EXPECT_EQ(ev["item"]["name"], "get_weather");
      EXPECT_EQ(told, "");
    }
  }
  EXPECT_GT(deltas, 3);
  EXPECT_EQ(told, args);
  EXPECT_EQ(done, args);
  EXPECT_EQ(item_args, args);
}

TEST_P(ToolCallStreams, AnthropicMessages) {
  const std::string& args = GetParam().second;
  json body = {
      {"model", "fake-model"},
      {"max_tokens", 300},
      {"messages", user()},
      {"tools",
       json::array({{{"name", "get_weather"}, {"input_schema", tools()[0]["function"]["parameters"]}}})}};
  json whole = post("/v1/messages", body);
  EXPECT_EQ(whole["stop_reason"], "tool_use");
  EXPECT_EQ(whole["content"].back()["input"], json::parse(args));
  std::string told;
  int deltas = 0;
  bool started = false;
  for (const json& ev : events("/v1/messages", body)) {
    if (ev["type"] == "content_block_start" && ev["content_block"]["type"] == "tool_use") {
      EXPECT_EQ(ev["content_block"]["name"], "get_weather");
      started = true;
    }
    if (ev["type"] == "content_block_delta" && ev["delta"]["type"] == "input_json_delta") {
      EXPECT_TRUE(started);
      told += ev["delta"]["partial_json"].get<std::string>();
      ++deltas;
    }
  }
  EXPECT_GT(deltas, 3);
  EXPECT_EQ(told, args);
}

// A thinking budget when the prompt opened <think> (the fake answers after its own "</think>\n\n" once
// the prompt closed the block): the reasoning is cut after the budget, the model answers, and usage
// counts both parts and the injected close.
TEST(ThinkingBudget, CutsReasoningOpenedByThePrompt) {
  testing::FakeEngine engine(testing::FakeEngineConfig{
      .context = 512, .step = std::chrono::microseconds(50), .reply = "abcdefghijklmnop\n</think>\n\nDone."});
  testing::FakeText text;
  ServerOptions o;
  o.port = 0;
  o.default_max_tokens = 100;
  o.thinking_budget = 4;
  HttpServer server(engine, text, o);
  server.bind();
  std::thread thread([&] { server.run(); });
  httplib::Client client("127.0.0.1", server.port());
  auto chat = [&](json extra) {
    json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                 {"chat_template_kwargs", {{"open_think", true}}}};
    body.update(extra);
    auto r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200);
    return r ? json::parse(r->body) : json();
  };
  json cut = chat(json::object());
  EXPECT_EQ(cut["choices"][0]["message"]["reasoning_content"], "abcd");
  EXPECT_EQ(cut["choices"][0]["message"]["content"], "Done.");
  // 4 reasoning tokens + "\n</think>\n\n" (11 bytes) + "Done." and its EOS.
  EXPECT_EQ(cut["usage"]["completion_tokens"], 4 + 11 + 6);
  json free = chat({{"thinking_budget", 0}});  // the request lifts the server's budget
  EXPECT_EQ(free["choices"][0]["message"]["reasoning_content"], "abcdefghijklmnop");
  EXPECT_EQ(free["choices"][0]["message"]["content"], "Done.");
  json two = chat({{"n", 2}, {"chat_template_kwargs", {{"open_think", true}, {"thinking_budget", 6}}}});
  for (const json& c : two["choices"]) EXPECT_EQ(c["message"]["reasoning_content"], "abcdef");
  server.stop();
  thread.join();
}

INSTANTIATE_TEST_SUITE_P(
    Formats, ToolCallStreams,
    ::testing::Values(
        std::make_pair(
            std::string("<think>\nplan\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>"),
            std::string(R"({"city": "Paris", "days": 3})")),
        // Qwen3-Coder's body: typed by the schema ("07" stays a string, "3" becomes 3).
        std::make_pair(
            std::string("<tool_call>\n<function=get_weather>\n<parameter=city>\n07\n</parameter>\n"
                        "<parameter=days>\n3\n</parameter>\n<parameter=note>\nwarm coat\n</parameter>\n"
                        "</function>\n</tool_call>"),
            std::string(R"({"city":"07","days":3,"note":"warm coat"})"))));

}  // namespace
}  // namespace tf::server

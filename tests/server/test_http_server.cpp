// The HTTP layer end to end over a real socket with a fake engine: auth, limits, error mapping, SSE.
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

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
    auto r = post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 3);
  }

  testing::FakeEngine engine_{testing::FakeEngineConfig{.context = 256, .step = std::chrono::microseconds(200)}};
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

TEST_F(ServerHttp, StreamsServerSentEvents) {
  std::string body;
  httplib::Headers headers;
  auto r = client_->Post("/v1/completions", R"({"prompt": "ab", "max_tokens": 4, "stream": true})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(r->body.substr(0, 6), "data: ");
  EXPECT_EQ(r->body.substr(r->body.size() - 14), "data: [DONE]\n\n");
  expect_good_request_works();
}

}  // namespace
}  // namespace tf::server

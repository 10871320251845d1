// Generation through the adapters with a fake engine: whole replies, the SSE chunk sequence OpenAI
// clients expect, and cancellation when the client goes away.
#include <gtest/gtest.h>

#include <thread>

#include "fake_engine.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/openai_chat.h"
#include "server/openai_completions.h"
#include "server/sse.h"

namespace tf::server {
namespace {

using nlohmann::json;

struct ServerStreaming : ::testing::Test {
  testing::FakeEngine engine{
      testing::FakeEngineConfig{.context = 512, .step = std::chrono::microseconds(100)}};
  testing::FakeText text;
  ServerOptions options;
  ServerStats stats;
  std::atomic<bool> stopping{false};
  ApiContext ctx{engine, text, options, stats, stopping};
  ResponseMeta meta{"chatcmpl-test", 1700000000, "fake-model", "tf-test-fake"};

  ChatRequest chat(const std::string& extra_json, const ApiContext* c = nullptr) {
    json body = json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
    body.update(json::parse(extra_json));
    return parse_chat_request(body, c ? *c : ctx);
  }
  // Streams a request and returns the SSE events as written.
  std::vector<std::string> stream(const ChatRequest& r) {
    std::vector<GenerationRequest> subs = chat_submissions(r);
    const StreamUsage usage = stream_usage(r.common, subs);
    Generation gen(ctx, std::move(subs));
    ChatStreamFormatter fmt(r, meta, text);
    std::vector<std::string> events;
    bool ok = stream_generation(
        gen, fmt, usage, r.common.n,
        [&](const std::string& s) {
          events.push_back(s);
          return true;
        },
        stopping);
    EXPECT_TRUE(ok);
    return events;
  }
  static json payload(const std::string& event) {
    EXPECT_EQ(event.substr(0, 6), "data: ");
    EXPECT_EQ(event.substr(event.size() - 2), "\n\n");
    return json::parse(event.substr(6, event.size() - 8));
  }
  std::string greedy_text(int n) {
    std::string s;
    for (int i = 0; i < n; ++i) s += char(testing::FakeEngine::token_at(0, i));
    return s;
  }
};

TEST_F(ServerStreaming, WholeChatReply) {
  ChatRequest r = chat(R"({"temperature": 0, "max_tokens": 9, "n": 2, "logprobs": true, "top_logprobs": 2})");
  Generation gen(ctx, chat_submissions(r));
  auto results = gen.collect([] { return false; });
  json out = chat_completion_json(r, meta, results, text);
  EXPECT_EQ(out["object"], "chat.completion");
  EXPECT_EQ(out["id"], "chatcmpl-test");
  EXPECT_EQ(out["system_fingerprint"], "tf-test-fake");
  ASSERT_EQ(out["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const json& c = out["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_EQ(c["message"]["role"], "assistant");
    EXPECT_EQ(c["message"]["content"], greedy_text(9));
    EXPECT_EQ(c["finish_reason"], "length");
    ASSERT_EQ(c["logprobs"]["content"].size(), 9u);
    const json& first = c["logprobs"]["content"][0];
    EXPECT_EQ(first["token"], greedy_text(1));
    EXPECT_FLOAT_EQ(first["logprob"].get<float>(), -0.25f);
    EXPECT_EQ(first["bytes"], json::array({int(greedy_text(1)[0])}));
    EXPECT_EQ(first["top_logprobs"].size(), 2u);
  }
  int prompt = int(r.prompt.size());
  EXPECT_EQ(out["usage"]["prompt_tokens"], prompt);  // counted once, not per choice
  EXPECT_EQ(out["usage"]["completion_tokens"], 18);
  EXPECT_EQ(out["usage"]["total_tokens"], prompt + 18);
  EXPECT_EQ(out["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(stats.generations_active, 0);
  EXPECT_EQ(stats.generations_total, 2);
}

TEST_F(ServerStreaming, SseChunksFollowOpenAI) {
  ChatRequest r = chat(R"({"temperature": 0, "max_tokens": 6, "stream": true,
                            "stream_options": {"include_usage": true}})");
  auto events = stream(r);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "data: [DONE]\n\n");
  json role = payload(events[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"], json({{"role", "assistant"}, {"content", ""}}));
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());  // include_usage: null until the end
  std::string content;
  size_t i = 1;
  for (; i + 3 < events.size(); ++i) {
    json c = payload(events[i]);
    EXPECT_EQ(c["id"], "chatcmpl-test");
    EXPECT_FALSE(c["choices"][0]["delta"].contains("role"));
    EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
    content += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(content, greedy_text(6));
  json fin = payload(events[events.size() - 3]);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  json usage = payload(events[events.size() - 2]);
  EXPECT_EQ(usage["choices"], json::array());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], int(r.prompt.size()));
}

// continuous_usage_stats (vLLM): every chunk with tokens says how many the choice has generated, so a
// chunk that carries text held back from an earlier token (here the first character of a stop string that
// did not follow) counts both tokens.
TEST_F(ServerStreaming, ContinuousUsageCountsTheTokensEachChunkCarries) {
  const std::string g = greedy_text(12);
  std::string stop = g.substr(4, 1) + "?";
  for (char c = 'a'; g.find(stop) != std::string::npos; ++c) stop[1] = c;  // a pair the reply never has
  ChatRequest r = chat(json({{"temperature", 0},
                             {"max_tokens", 12},
                             {"stream", true},
                             {"stop", {stop}},
                             {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}})
                           .dump());
  auto events = stream(r);
  ASSERT_GE(events.size(), 4u);
  int64_t seen = 0, widest = 0;
  std::string content;
  for (size_t i = 1; i + 2 < events.size(); ++i) {  // after the role chunk, up to the final usage chunk
    json c = payload(events[i]);
    ASSERT_TRUE(c["usage"].is_object()) << events[i];
    EXPECT_EQ(c["usage"]["prompt_tokens"], int(r.prompt.size()));
    const int64_t done = c["usage"]["completion_tokens"];
    EXPECT_EQ(c["usage"]["total_tokens"], int64_t(r.prompt.size()) + done);
    EXPECT_GE(done, seen);
    widest = std::max(widest, done - seen);
    seen = done;
    if (c["choices"][0]["delta"].contains("content"))
      content += c["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(content, g);
  EXPECT_EQ(seen, 12);
  EXPECT_GE(widest, 2) << "the held-back character goes out with the next token";
  EXPECT_EQ(payload(events[events.size() - 2])["usage"]["completion_tokens"], 12);
  // Without the flag the chunks carry "usage": null, as before.
  r.common.continuous_usage = false;
  const auto plain = stream(r);
  for (size_t i = 0; i + 2 < plain.size(); ++i) EXPECT_TRUE(payload(plain[i])["usage"].is_null());
}

TEST_F(ServerStreaming, NoUsageChunkUnlessAsked) {
  auto events = stream(chat(R"({"max_tokens": 3, "stream": true})"));
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = payload(events[i]);
    EXPECT_FALSE(c.contains("usage"));
    EXPECT_EQ(c["choices"].size(), 1u);
  }
}

TEST_F(ServerStreaming, SeveralChoicesInterleave) {
  auto events = stream(chat(R"({"max_tokens": 5, "stream": true, "n": 3, "seed": 11})"));
  std::vector<std::string> text(3);
  std::vector<int> roles(3), finishes(3);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json c = payload(events[i])["choices"][0];
    int idx = c["index"];
    if (c["delta"].contains("role")) roles[idx]++;
    if (c["delta"].contains("content")) text[idx] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finishes[idx]++;
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(roles[k], 1);
    EXPECT_EQ(finishes[k], 1);
    std::string want;
    for (int p = 0; p < 5; ++p) want += char(testing::FakeEngine::token_at(11 + k, p));
    EXPECT_EQ(text[k], want) << "choice " << k << " uses seed + index";
  }
}

TEST_F(ServerStreaming, StopStringEndsWithStop) {
  std::string g = greedy_text(20);
  std::string stop = g.substr(7, 3);
  ChatRequest r = chat(json({{"temperature", 0}, {"max_tokens", 20}, {"stop", {stop}}}).dump());
  Generation gen(ctx, chat_submissions(r));
  json out = chat_completion_json(r, meta, gen.collect([] { return false; }), text);
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["choices"][0]["message"]["content"], g.substr(0, g.find(stop)));
}

TEST_F(ServerStreaming, ClientGoneCancelsGeneration) {
  testing::FakeEngine slow(
      testing::FakeEngineConfig{.context = 100000, .step = std::chrono::microseconds(2000)});
  ApiContext slow_ctx{slow, text, options, stats, stopping};
  ChatRequest r = chat(R"({"max_tokens": 50000, "stream": true})", &slow_ctx);
  Generation gen(slow_ctx, chat_submissions(r));
  ChatStreamFormatter fmt(r, meta, text);
  int writes = 0;
  bool ok = stream_generation(
      gen, fmt, {}, 1, [&](const std::string&) { return ++writes < 4; }, stopping);
  EXPECT_FALSE(ok);
  EXPECT_EQ(stats.cancelled_by_client, 1);
  EXPECT_EQ(stats.generations_active, 0);
  // The engine stops within a step; its step counter then stays put.
  for (int i = 0; i < 200 && slow.running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(slow.running, 0);
  EXPECT_EQ(slow.cancelled, 1);
  int64_t steps = slow.steps;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(slow.steps, steps);
  EXPECT_LT(steps, 100);
}

TEST_F(ServerStreaming, ShutdownEndsStreamWithErrorAndDone) {
  ChatRequest r = chat(R"({"max_tokens": 200, "stream": true})");
  Generation gen(ctx, chat_submissions(r));
  ChatStreamFormatter fmt(r, meta, text);
  std::vector<std::string> events;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stopping = true;
  });
  // A slow consumer so the stop flag is seen before the reply ends.
  bool ok = stream_generation(
      gen, fmt, {}, 1,
      [&](const std::string& s) {
        events.push_back(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return true;
      },
      stopping);
  stopper.join();
  // Either it finished first (fast machine) or it ended with the shutdown error; both end with [DONE].
  EXPECT_EQ(events.back(), "data: [DONE]\n\n");
  if (!ok) {
    EXPECT_EQ(payload(events[events.size() - 2])["error"]["code"], "shutting_down");
  }
}

TEST_F(ServerStreaming, CompletionsEchoLogprobsAndIndexes) {
  json body =
      json::parse(R"({"prompt": ["ab", "cd"], "n": 2, "max_tokens": 4, "temperature": 0, "echo": true})");
  CompletionRequest r = parse_completion_request(body, ctx);
  Generation gen(ctx, completion_submissions(r));
  json out = completion_json(r, meta, gen.collect([] { return false; }), text);
  EXPECT_EQ(out["object"], "text_completion");
  ASSERT_EQ(out["choices"].size(), 4u);
  EXPECT_EQ(out["choices"][0]["text"], "ab" + greedy_text(4));
  EXPECT_EQ(out["choices"][3]["text"], "cd" + greedy_text(4));
  EXPECT_EQ(out["choices"][3]["index"], 3);
  EXPECT_EQ(out["usage"]["prompt_tokens"], 6);  // two prompts of 3 (with BOS), once each
  EXPECT_EQ(out["usage"]["completion_tokens"], 16);

  body = json::parse(R"({"prompt": "ab", "max_tokens": 3, "temperature": 0, "logprobs": 2})");
  CompletionRequest r2 = parse_completion_request(body, ctx);
  Generation gen2(ctx, completion_submissions(r2));
  json lp = completion_json(r2, meta, gen2.collect([] { return false; }), text)["choices"][0]["logprobs"];
  std::string g = greedy_text(3);
  EXPECT_EQ(lp["tokens"], json({g.substr(0, 1), g.substr(1, 1), g.substr(2, 1)}));
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2}));
  EXPECT_EQ(lp["token_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
}

TEST_F(ServerStreaming, CompletionStreamChunks) {
  json body =
      json::parse(R"({"prompt": "ab", "max_tokens": 5, "temperature": 0, "stream": true, "echo": true})");
  CompletionRequest r = parse_completion_request(body, ctx);
  Generation gen(ctx, completion_submissions(r));
  CompletionStreamFormatter fmt(r, meta, text);
  std::vector<std::string> events;
  ASSERT_TRUE(stream_generation(
      gen, fmt, {}, 1,
      [&](const std::string& s) {
        events.push_back(s);
        return true;
      },
      stopping));
  std::string all;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = payload(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    all += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(all, "ab" + greedy_text(5));
  EXPECT_EQ(payload(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerStreaming, EngineRefusalBecomes400) {
  // The fake engine refuses prompt + max_tokens over its context; the server maps it.
  try {
    GenerationRequest g;
    g.prompt = {1, 2, 3};
    g.max_tokens = 10000;
    Generation gen(ctx, {g});
    FAIL() << "expected a refusal";
  } catch (const std::exception& e) {
    ApiError a = to_api_error(e);
    EXPECT_EQ(a.status(), 400);
    EXPECT_EQ(a.code(), "context_length_exceeded");
  }
  EXPECT_EQ(stats.generations_active, 0);
}

TEST(ServerSse, Framing) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("x"), ": x\n\n");
  // A token piece that ends mid-character still serialises (replacement character).
  std::string e = sse_event(json{{"t", std::string("ab\xe4\xb8")}});
  EXPECT_EQ(e.substr(0, 14), "data: {\"t\":\"ab");
  EXPECT_NE(e.find("\xef\xbf\xbd"), std::string::npos);
}

}  // namespace
}  // namespace tf::server

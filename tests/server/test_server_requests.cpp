// Request parsing and validation for the OpenAI adapters, against a fake engine: every bad field is a
// 400 naming it, unknown models are 404, and prompts that cannot fit give context_length_exceeded.
#include <gtest/gtest.h>

#include "core/error.h"
#include "fake_engine.h"
#include "server/errors.h"
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/model_endpoints.h"
#include "server/openai_chat.h"
#include "server/openai_completions.h"

namespace tf::server {
namespace {

using nlohmann::json;

struct ServerRequests : ::testing::Test {
  testing::FakeEngine engine{
      testing::FakeEngineConfig{.context = 256, .step = std::chrono::microseconds(200)}};
  testing::FakeText text;
  ServerOptions options = [] {
    ServerOptions o;
    o.aliases = {"alias-a"};
    o.default_max_tokens = 50;
    return o;
  }();
  ServerStats stats;
  std::atomic<bool> stopping{false};
  ApiContext ctx{engine, text, options, stats, stopping};

  json chat(json extra = json::object()) {
    json body = json::parse(R"({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]})");
    body.update(extra);
    return body;
  }
  // Runs `f` and returns the ApiError it throws (fails the test when it throws nothing).
  template <class F>
  ApiError error_of(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return to_api_error(e);
    }
    ADD_FAILURE() << "no error thrown";
    return internal_error("none");
  }
  ApiError chat_error(json extra) {
    return error_of([&] { parse_chat_request(chat(std::move(extra)), ctx); });
  }
};

TEST_F(ServerRequests, WrongTypesName400TheField) {
  // Written as JSON text: brace-initialised json is ambiguous between arrays and objects.
  std::vector<std::pair<const char*, std::string>> cases = {
      {R"({"temperature": "hot"})", "temperature"},
      {R"({"temperature": 3.5})", "temperature"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"top_k": 1.5})", "top_k"},
      {R"({"max_tokens": "ten"})", "max_tokens"},
      {R"({"max_tokens": 0})", "max_tokens"},
      {R"({"max_completion_tokens": -3})", "max_completion_tokens"},
      {R"({"n": 0})", "n"},
      {R"({"n": 17})", "n"},
      {R"({"seed": "x"})", "seed"},
      {R"({"stop": 5})", "stop"},
      {R"({"stop": ["a", 3]})", "stop[1]"},
      {R"({"stream": "yes"})", "stream"},
      {R"({"stream_options": {"include_usage": 1}})", "stream_options.include_usage"},
      {R"({"logprobs": 1})", "logprobs"},
      {R"({"top_logprobs": 3})", "top_logprobs"},
      {R"({"logprobs": true, "top_logprobs": 21})", "top_logprobs"},
      {R"({"presence_penalty": 2.5})", "presence_penalty"},
      {R"({"chat_template_kwargs": "x"})", "chat_template_kwargs"},
      {R"({"draft": "no"})", "draft"},
      {R"({"min_tokens": -1})", "min_tokens"},
      {R"({"truncate_prompt_tokens": 0})", "truncate_prompt_tokens"},
      {R"({"bad_words": [" "]})", "bad_words[0]"},
      {R"({"bad_words": ["a", 5]})", "bad_words[1]"},
      {R"({"truncate_prompt_tokens": "5"})", "truncate_prompt_tokens"},
      {R"({"allowed_token_ids": []})", "allowed_token_ids"},
      {R"({"allowed_token_ids": [1, -1]})", "allowed_token_ids[1]"},
      {R"({"stop_token_ids": ["a"]})", "stop_token_ids[0]"},
      {R"({"min_tokens": "3"})", "min_tokens"},
      {R"({"max_tokens": 5, "min_tokens": 6})", "min_tokens"},
      {R"({"user": 7})", "user"},
      {R"({"model": 7})", "model"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]})",
       "messages[1].content"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role"},
      {R"({"messages": [7]})", "messages[0]"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}]})",
       "messages[0].tool_calls[0].function.arguments"},
  };

  for (const auto& [extra, param] : cases) {
    ApiError e = chat_error(json::parse(extra));
    EXPECT_EQ(e.status(), 400) << extra;
    EXPECT_EQ(e.param(), param) << extra << " -> " << e.message();
    EXPECT_EQ(e.type(), "invalid_request_error");
    EXPECT_NE(e.message().find(param.substr(0, param.find('['))), std::string::npos) << e.message();
  }
}

TEST_F(ServerRequests, UnknownModelIs404AndAliasesWork) {
  ApiError e = chat_error({{"model", "gpt-4o"}});
  EXPECT_EQ(e.status(), 404);
  EXPECT_EQ(e.code(), "model_not_found");
  EXPECT_NE(e.message().find("gpt-4o"), std::string::npos);
  EXPECT_EQ(parse_chat_request(chat({{"model", "alias-a"}}), ctx).model, "alias-a");
  json no_model = chat();
  no_model.erase("model");
  EXPECT_EQ(parse_chat_request(no_model, ctx).model, "fake-model");
}

TEST_F(ServerRequests, UnknownFieldsAreIgnored) {
  ChatRequest r =
      parse_chat_request(chat({{"frobnicate", {1, 2}}, {"response_format", {{"type", "text"}}}}), ctx);
  EXPECT_EQ(r.common.n, 1);
}

TEST_F(ServerRequests, ContextLengthExceededCarriesTheNumbers) {
  // The fake prompt is the rendered text in bytes: "<|user|>hi\n<|assistant|>" = 24 tokens.
  ApiError e = chat_error({{"max_tokens", 240}});
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_EQ(e.param(), "max_tokens");
  EXPECT_NE(e.message().find("256"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("264"), std::string::npos) << e.message();  // 24 + 240
  ApiError whole = chat_error({{"messages", {{{"role", "user"}, {"content", std::string(300, 'x')}}}}});
  EXPECT_EQ(whole.code(), "context_length_exceeded");
  // Without max_tokens the reply limit is the server default, clipped to what is left.
  EXPECT_EQ(parse_chat_request(chat(), ctx).max_tokens, 50);
  ChatRequest big = parse_chat_request(
      chat({{"messages", json::array({{{"role", "user"}, {"content", std::string(220, 'x')}}})}}), ctx);
  EXPECT_EQ(big.max_tokens, 256 - int(big.prompt.size()));
}

TEST_F(ServerRequests, SamplingFieldsReachTheRequest) {
  ChatRequest r = parse_chat_request(chat({{"temperature", 0.5},
                                           {"top_p", 0.9},
                                           {"top_k", 40},
                                           {"min_p", 0.05},
                                           {"seed", 7},
                                           {"stop", "END"},
                                           {"presence_penalty", 0.5},
                                           {"frequency_penalty", -0.5},
                                           {"repetition_penalty", 1.1},
                                           {"ignore_eos", true},
                                           {"min_tokens", 4},
                                           {"allowed_token_ids", {5, 3}},
                                           {"bad_words", {"ab", " ab"}},
                                           {"draft", false},
                                           {"max_tokens", 10},
                                           {"max_completion_tokens", 12},
                                           {"logprobs", true},
                                           {"top_logprobs", 3},
                                           {"n", 3}}),
                                     ctx);
  const GenerationRequest& g = r.common.request;
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 0.9f);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(g.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(g.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(g.ignore_eos);
  EXPECT_EQ(g.min_tokens, 4);
  EXPECT_EQ(g.allowed_token_ids, (std::vector<int32_t>{5, 3}));
  // Each word as written and after a space, once each (" ab" is "ab" again).
  EXPECT_EQ(g.bad_words_ids, (std::vector<std::vector<int32_t>>{{'a', 'b'}, {' ', 'a', 'b'}}));
  EXPECT_FALSE(g.draft);
  EXPECT_EQ(g.logprobs, 3);
  EXPECT_EQ(r.max_tokens, 12);  // max_completion_tokens wins
  auto subs = chat_submissions(r);
  ASSERT_EQ(subs.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(subs[i].sampling.seed, uint64_t(7 + i));
    EXPECT_EQ(subs[i].prompt, r.prompt);
    EXPECT_EQ(subs[i].max_tokens, 12);
  }
  // Without a seed, n > 1 still gives distinct, reproducible seeds.
  ChatRequest r2 = parse_chat_request(chat({{"n", 2}}), ctx);
  auto a = chat_submissions(r2), b = chat_submissions(r2);
  EXPECT_NE(a[0].sampling.seed, a[1].sampling.seed);
  EXPECT_EQ(a[1].sampling.seed, b[1].sampling.seed);
  EXPECT_FALSE(chat_submissions(parse_chat_request(chat(), ctx))[0].sampling.seed.has_value());
}

TEST_F(ServerRequests, MessagesReachTheTemplateAsTransformersExpects) {
  json messages = json::parse(R"([
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null,
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{\"z\": 1, \"a\": 2}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}])");
  json norm = normalize_messages(messages);
  EXPECT_EQ(norm[0]["role"], "system");
  EXPECT_EQ(norm[1]["content"], "a\nb");
  EXPECT_TRUE(norm[2]["content"].is_null());
  EXPECT_EQ(norm[2]["tool_calls"][0]["function"]["arguments"]["z"], 1);
  EXPECT_EQ(norm[3]["tool_call_id"], "c1");
  ChatRequest r = parse_chat_request(
      chat({{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}}), ctx);
  std::string prompt = text.decode(r.prompt, false);
  EXPECT_EQ(prompt,
            "<|system|>be brief\n<|user|>a\nb\n<|assistant|>call "
            "get({\"z\":1,\"a\":2})\n<|tool|>42\n<|assistant|>/no_think");

  ApiError bad_args = error_of([&] {
    messages[2]["tool_calls"][0]["function"]["arguments"] = "{not json";
    normalize_messages(messages);
  });
  EXPECT_EQ(bad_args.param(), "messages[2].tool_calls[0].function.arguments");
  ApiError no_args = error_of([&] {
    messages[2]["tool_calls"][0]["function"].erase("arguments");
    normalize_messages(messages);
  });
  EXPECT_EQ(no_args.status(), 400);
  EXPECT_EQ(no_args.param(), "messages[2].tool_calls[0].function.arguments");
  // Arguments as JSON text nested past the limit (json_fields.h): refused, not parsed into a value that
  // recurses when copied.
  ApiError deep_args = error_of([&] {
    messages[2]["tool_calls"][0]["function"]["arguments"] =
        std::string(100000, '[') + std::string(100000, ']');
    normalize_messages(messages);
  });
  EXPECT_EQ(deep_args.param(), "messages[2].tool_calls[0].function.arguments");
  EXPECT_NE(deep_args.message().find("deeper than 512"), std::string::npos) << deep_args.message();
  EXPECT_TRUE(json_too_deep(std::string(513, '{')));
  EXPECT_FALSE(json_too_deep(std::string(512, '[')));
  EXPECT_FALSE(json_too_deep("[\"" + std::string(1000, '[') + "\"]"));  // inside a string
}

TEST_F(ServerRequests, ServerTemplateDefaultsAndRequestOverrides) {
  options.default_template_kwargs = {{"enable_thinking", false}};
  EXPECT_EQ(text.decode(parse_chat_request(chat(), ctx).prompt, false).find("/no_think") != std::string::npos,
            true);
  ChatRequest r = parse_chat_request(chat({{"chat_template_kwargs", {{"enable_thinking", true}}}}), ctx);
  EXPECT_EQ(text.decode(r.prompt, false).find("/no_think"), std::string::npos);
  json many = json::object();
  for (int i = 0; i <= int(kMaxTemplateKwargs); ++i) many["v" + std::to_string(i)] = i;
  EXPECT_EQ(chat_error({{"chat_template_kwargs", many}}).param(), "chat_template_kwargs");
  many.erase("v0");
  EXPECT_NO_THROW(parse_chat_request(chat({{"chat_template_kwargs", many}}), ctx));
  text.has_template = false;
  EXPECT_EQ(chat_error(json::object()).code(), "no_chat_template");
}

TEST_F(ServerRequests, CompletionPromptShapes) {
  auto parse = [&](json prompt, json extra = json::object()) {
    json body = {{"model", "fake-model"}, {"prompt", prompt}};
    body.update(extra);
    return parse_completion_request(body, ctx);
  };
  EXPECT_EQ(parse("ab").prompts, (std::vector<std::vector<int32_t>>{{257, 'a', 'b'}}));
  EXPECT_EQ(parse({"a", "b"}).prompts.size(), 2u);
  EXPECT_EQ(parse({5, 6, 7}).prompts, (std::vector<std::vector<int32_t>>{{5, 6, 7}}));
  EXPECT_EQ(parse(json::parse("[[5], [6, 7]]")).prompts.size(), 2u);
  CompletionRequest r = parse({"a", "b"}, {{"n", 2}, {"seed", 3}});
  auto subs = completion_submissions(r);
  ASSERT_EQ(subs.size(), 4u);
  EXPECT_EQ(subs[1].sampling.seed, 4u);
  EXPECT_EQ(subs[2].prompt, r.prompts[1]);
  EXPECT_EQ(subs[2].sampling.seed, 3u);

  auto err = [&](json prompt, json extra = json::object()) {
    return error_of([&] { parse(prompt, extra); });
  };
  EXPECT_EQ(err({5, 9999}).param(), "prompt[1]");
  EXPECT_EQ(err(json::parse("[[5], [1, -1]]")).param(), "prompt[1][1]");
  EXPECT_EQ(err(json::array()).param(), "prompt");
  EXPECT_EQ(err(json::object()).param(), "prompt");
  EXPECT_EQ(err({"a", 5}).param(), "prompt[1]");
  EXPECT_EQ(err("a", {{"logprobs", true}}).param(), "logprobs");
  // echo with logprobs asks the engine for the prompt's logprobs too (prompt_logprobs = logprobs).
  EXPECT_EQ(completion_submissions(parse("a", {{"logprobs", 2}, {"echo", true}}))[0].prompt_logprobs, 2);
  EXPECT_EQ(completion_submissions(parse("a", {{"logprobs", 2}}))[0].prompt_logprobs, -1);
  EXPECT_EQ(error_of([&] { parse_completion_request({{"model", "fake-model"}}, ctx); }).param(), "prompt");
}

// truncate_prompt_tokens (vLLM): the prompt's last k tokens (the rendered chat's, each completion prompt's,
// whose echo text follows); -1 keeps what fits beside the reply (context 256 here).
TEST_F(ServerRequests, TruncatePromptTokensKeepsTheLastTokens) {
  const ChatRequest whole = parse_chat_request(chat(), ctx);
  ASSERT_GT(whole.prompt.size(), 6u);
  const ChatRequest cut = parse_chat_request(chat({{"truncate_prompt_tokens", 6}}), ctx);
  EXPECT_EQ(cut.prompt, std::vector<int32_t>(whole.prompt.end() - 6, whole.prompt.end()));
  EXPECT_EQ(parse_chat_request(chat({{"truncate_prompt_tokens", 1000}}), ctx).prompt, whole.prompt);
  const json long_chat = {{"messages", {{{"role", "user"}, {"content", std::string(300, 'x')}}}},
                          {"max_tokens", 40},
                          {"truncate_prompt_tokens", -1}};
  const ChatRequest fit = parse_chat_request(chat(long_chat), ctx);
  EXPECT_EQ(fit.prompt.size(), 256u - 40u);
  EXPECT_EQ(fit.max_tokens, 40);
  const CompletionRequest c = parse_completion_request(
      {{"model", "fake-model"}, {"prompt", {"abcdef", "xy"}}, {"truncate_prompt_tokens", 3}}, ctx);
  EXPECT_EQ(c.prompts, (std::vector<std::vector<int32_t>>{{'d', 'e', 'f'}, {257, 'x', 'y'}}));
  EXPECT_EQ(c.prompt_texts, (std::vector<std::string>{"def", "xy"}));
}

TEST_F(ServerRequests, ErrorObjectShape) {
  json j = invalid_field("temperature", "bad").to_json();
  EXPECT_EQ(
      j,
      json::parse(
          R"({"error":{"message":"bad","type":"invalid_request_error","param":"temperature","code":null}})"));
  ApiError mapped = to_api_error(InvalidRequest("too long", "max_tokens", "context_length_exceeded"));
  EXPECT_EQ(mapped.status(), 400);
  EXPECT_EQ(mapped.code(), "context_length_exceeded");
  EXPECT_EQ(to_api_error(std::runtime_error("boom")).status(), 500);
  EXPECT_EQ(invalid_api_key(true).status(), 401);
  EXPECT_EQ(payload_too_large(10).status(), 413);
  EXPECT_EQ(model_not_found("x").to_json()["error"]["code"], "model_not_found");
}

TEST_F(ServerRequests, MalformedBodies) {
  EXPECT_EQ(error_of([] { parse_body("{\"model\": "); }).code(), "invalid_json");
  EXPECT_EQ(error_of([] { parse_body("[1,2]"); }).status(), 400);
  EXPECT_EQ(error_of([] { parse_body(""); }).status(), 400);
  EXPECT_EQ(error_of([] { parse_body("{\"a\": \"\xff\"}"); }).status(), 400);  // invalid UTF-8
  EXPECT_EQ(parse_body("{\"a\": 1}")["a"], 1);
  // Nesting: 512 levels of objects and arrays parse, one more is refused before parsing (deep values recurse
  // when copied or printed: a 4 MB body overflowed a worker's stack); brackets inside strings do not count.
  auto nested = [](int levels, const std::string& inner) {
    std::string s;
    for (int i = 1; i < levels; ++i) s += i % 2 ? "{\"a\": " : "[";
    s += inner;
    for (int i = levels - 1; i >= 1; --i) s += i % 2 ? "}" : "]";
    return s;
  };
  EXPECT_TRUE(parse_body(nested(512, "{\"b\": \"[[[[{{{{\\\"[[\"}")).is_object());
  const ApiError deep = error_of([&] { parse_body(nested(513, "{}")); });
  EXPECT_EQ(deep.status(), 400);
  EXPECT_EQ(deep.code(), "invalid_json");
  EXPECT_NE(deep.message().find("deeper than 512"), std::string::npos) << deep.message();
  EXPECT_EQ(error_of([&] { parse_body(nested(200000, "{}")); }).code(), "invalid_json");
}

// parse_request_json (linear in one object's keys, unlike nlohmann's ordered_json parse) gives what
// nlohmann's parse gives: member order, a repeated key's first place with its last value, numbers of each
// kind, escapes, empty containers; errors where nlohmann errs.
TEST_F(ServerRequests, LinearParserEqualsNlohmann) {
  const std::vector<std::string> docs = {
      R"({"b": 1, "a": [1, -2, 3.5, 1e300, 18446744073709551615, -9223372036854775808, true, false, null]})",
      R"({"z": {"y": {}, "x": []}, "z2": "\u00e9\n\"q\" \ud83d\ude00", "": 0})",
      R"({"k": 1, "j": 2, "k": {"n": 3}, "j": [4], "k": 5})",
      R"([{"a": 1, "a": 2}, [], [[]], "s", 0.0, -0.0])",
      R"("just a string")",
      R"(  {"spaces" :  [ 1 , 2 ] }  )"};
  for (const auto& d : docs) {
    SCOPED_TRACE(d);
    const RequestJson ours = parse_request_json(d), theirs = RequestJson::parse(d);
    EXPECT_EQ(ours.dump(), theirs.dump());
    EXPECT_EQ(ours, theirs);
  }
  for (const std::string bad : {"{\"a\": }", "[1, 2", "{\"a\": \"\xff\"}", "", "{} x"}) {
    SCOPED_TRACE(bad);
    EXPECT_TRUE(parse_request_json(bad).is_discarded());
    EXPECT_TRUE(RequestJson::parse(bad, nullptr, false).is_discarded());
  }
  std::string many = "{";
  for (int i = 0; i < 200000; ++i)
    many += (i ? ",\"" : "\"") + std::to_string(i % 150000) + "\":" + std::to_string(i);
  many += "}";
  const RequestJson big = parse_request_json(many);
  ASSERT_EQ(big.size(), 150000u);
  EXPECT_EQ(big.begin().key(), "0");
  EXPECT_EQ(big["149999"], 149999);
  EXPECT_EQ(big["7"], 150007);  // a repeated key: its first place, its last value
}

TEST_F(ServerRequests, TokenizeAndDetokenize) {
  json t = tokenize_json({{"prompt", "hi"}}, ctx);
  EXPECT_EQ(t["tokens"], json({257, 'h', 'i'}));
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], 256);
  EXPECT_EQ(tokenize_json({{"content", "hi"}, {"add_special", false}}, ctx)["tokens"], json({'h', 'i'}));
  json pieces = tokenize_json({{"prompt", "h"}, {"with_pieces", true}, {"add_special_tokens", false}}, ctx);
  EXPECT_EQ(pieces["tokens"][0], json({{"id", 'h'}, {"piece", "h"}}));
  json chat_t = tokenize_json(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), ctx);
  EXPECT_EQ(chat_t["count"], 23);  // "<|user|>x\n<|assistant|>"
  EXPECT_EQ(detokenize_json({{"tokens", {'h', 'i', 256}}}, ctx)["content"], "hi<eos>");
  EXPECT_EQ(error_of([&] { detokenize_json({{"tokens", {1, 300}}}, ctx); }).param(), "tokens[1]");
  EXPECT_EQ(error_of([&] { tokenize_json({{"prompt", 5}}, ctx); }).param(), "prompt");
  EXPECT_EQ(error_of([&] { tokenize_json({{"prompt", "x"}, {"model", "nope"}}, ctx); }).status(), 404);
}

TEST_F(ServerRequests, ModelsList) {
  json m = models_json(ctx);
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "fake-model");
  EXPECT_EQ(m["data"][1]["id"], "alias-a");
  EXPECT_EQ(m["data"][0]["context_length"], 256);
  EXPECT_EQ(m["data"][0]["owned_by"], "tensorfold");
  options.name = "renamed";
  EXPECT_EQ(models_json(ctx)["data"][0]["id"], "renamed");
}

}  // namespace
}  // namespace tf::server

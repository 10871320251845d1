// Output parsers on replies written in real models' syntaxes, fed whole, one byte at a time and split at
// every position: the result must not depend on how the text was cut, and no piece of a marker may
// reach content.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "server/chat_output.h"
#include "server/output_parser.h"
#include "server/tool_call_scan.h"
#include "text/chat_template.h"

namespace tf::server {
namespace {

struct Result {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<std::string> content_pieces;
};

// `ended`: the reply ends after the pieces (else it is still arriving: what was told so far).
Result run(const OutputParsing& cfg, const std::vector<std::string>& pieces, bool ended = true) {
  OutputParser p(cfg);
  Result r;
  auto take = [&](ParsedDelta d) {
    r.reasoning += d.reasoning;
    r.content += d.content;
    if (!d.content.empty()) r.content_pieces.push_back(d.content);
    for (auto& c : d.tool_calls) {
      if (!c.id.empty()) {  // a call's first piece: id and name
        EXPECT_EQ(c.index, r.calls.size());
        EXPECT_EQ(c.id.rfind("call_", 0), 0u);
        EXPECT_FALSE(c.name.empty());
        r.calls.push_back({c.name, ""});
      } else {  // later pieces: more arguments of the latest call
        EXPECT_TRUE(c.name.empty());
        ASSERT_FALSE(r.calls.empty());
        EXPECT_FALSE(c.arguments.empty());
      }
      EXPECT_EQ(c.index + 1, r.calls.size());
      r.calls.back().second += c.arguments;
    }
  };
  for (const auto& s : pieces) take(p.feed(s));
  if (ended) take(p.finish());
  return r;
}

std::vector<std::string> bytes(const std::string& s) {
  std::vector<std::string> v;
  for (char c : s) v.push_back(std::string(1, c));
  return v;
}

// Whole, byte by byte and every two-piece split give the same result as `want`.
void expect_every_split(const OutputParsing& cfg, const std::string& text, const Result& want) {
  auto check = [&](const Result& got, const std::string& how) {
    EXPECT_EQ(got.reasoning, want.reasoning) << how;
    EXPECT_EQ(got.content, want.content) << how;
    EXPECT_EQ(got.calls, want.calls) << how;
    for (const auto& [name, args] : got.calls) {
      for (const char* m :
           {"</tool_call", "</function", "<｜tool", "[TOOL_CALLS", "</arg_value", "</parameter"}) {
        EXPECT_EQ(args.find(m), std::string::npos) << how << ": " << args;
      }
    }
    for (const auto& piece : got.content_pieces) {
      for (const char* m : {"<think", "</think", "<tool_call", "</tool_call", "[TOOL_CALLS", "<｜tool",
                            "<function", "<arg_key"}) {
        // A piece may only hold a marker's beginning if the model really wrote it as content.
        if (want.content.find(m) == std::string::npos) {
          EXPECT_EQ(piece.find(m), std::string::npos) << how;
        }
      }
    }
  };
  check(run(cfg, {text}), "whole");
  check(run(cfg, bytes(text)), "bytes");
  for (size_t i = 1; i < text.size(); ++i)
    check(run(cfg, {text.substr(0, i), text.substr(i)}), "split " + std::to_string(i));
}

OutputParsing hermes() {
  OutputParsing c;
  c.tools = ToolFormat::Hermes;
  return c;
}

// Qwen3-8B with enable_thinking and a weather tool (recorded reply).
TEST(OutputParser, QwenThinkingThenToolCall) {
  std::string text =
      "<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
      "\"celsius\"}}\n"
      "</tool_call>";
  Result want;
  want.reasoning = "The user wants the weather in Paris. I should call get_weather.";
  want.calls = {{"get_weather", R"({"city": "Paris", "unit": "celsius"})"}};  // as written
  expect_every_split(hermes(), text, want);
}

TEST(OutputParser, QwenParallelCallsWithContentBefore) {
  std::string text =
      "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  Result want;
  want.content = "Let me check both.";
  want.calls = {{"a", R"({"x": 1})"}, {"b", "{}"}};
  expect_every_split(hermes(), text, want);
  OutputParsing one = hermes();
  one.parallel_tool_calls = false;
  want.calls.pop_back();
  expect_every_split(one, text, want);
}

TEST(OutputParser, ThinkingOpenedByThePrompt) {
  // DeepSeek-R1 / Qwen3 thinking-2507 templates end the prompt with "<think>\n".
  OutputParsing cfg;
  cfg.reasoning_starts_open = true;
  Result want;
  want.reasoning = "2 + 2 is 4.";
  want.content = "The answer is 4.";
  expect_every_split(cfg, "2 + 2 is 4.\n</think>\n\nThe answer is 4.", want);
}

TEST(OutputParser, ReplyWithoutMarkersIsUntouched) {
  Result want;
  want.content = "Hello! <b>bold</b> and a < sign; x <tool and <thin.";
  expect_every_split(hermes(), want.content, want);
  OutputParsing none;
  expect_every_split(none, want.content, want);
}

TEST(OutputParser, DisabledThinkingEmptyBlock) {
  // Qwen3 with enable_thinking=false: the template writes "<think>\n\n</think>\n\n" in the prompt; a model
  // may still echo an empty block.
  Result want;
  want.content = "Hi there.";
  expect_every_split(OutputParsing{}, "<think>\n\n</think>\n\nHi there.", want);
}

TEST(OutputParser, UnfinishedReasoningStaysReasoning) {
  Result want;
  want.reasoning = "I am still thinking about";
  expect_every_split(OutputParsing{}, "<think>\nI am still thinking about", want);
}

TEST(OutputParser, InvalidCallJsonIsKeptAsContent) {
  // Not in the streamable {"name", "arguments"} shape, and not JSON either: the model's text comes back.
  std::string text = "<tool_call>\n{\"arguments\": {oops}, \"name\": \"f\"}\n</tool_call>";
  Result want;
  want.content = text;
  expect_every_split(hermes(), text, want);
}

TEST(OutputParser, OtherKeyOrderIsReadWhole) {
  // Arguments before the name cannot stream; the call is read whole when it closes.
  Result want;
  want.calls = {{"f", R"({"a":1})"}};
  expect_every_split(hermes(), "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>",
                     want);
  want.calls = {{"f", R"({"a": 1})"}};  // string-encoded arguments are given as the model wrote them
  expect_every_split(hermes(), "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
                     want);
}

TEST(OutputParser, CallCutByLengthStillParsesWhenComplete) {
  // The reply ended (max_tokens or a stop string) before </tool_call>.
  Result want;
  want.calls = {{"f", R"({"q": "x"})"}};
  expect_every_split(hermes(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"x\"}}\n", want);
}

TEST(OutputParser, QwenCoderXmlToolCall) {
  // Qwen3-Coder writes parameters as tags; without a schema values stay text, as its reference parser
  // keeps them.
  std::string text =
      "I'll look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, "
      "CA\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  Result want;
  want.content = "I'll look it up.";
  want.calls = {{"get_weather", R"({"city":"San Francisco, CA","days":"3"})"}};
  expect_every_split(hermes(), text, want);
}

TEST(OutputParser, Glm45ToolCall) {
  std::string text =
      "<think>Need "
      "weather.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
      "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>";
  Result want;
  want.reasoning = "Need weather.";
  want.calls = {{"get_weather", R"({"city":"Beijing","unit":"celsius"})"}};
  expect_every_split(hermes(), text, want);
}

TEST(OutputParser, DeepSeekToolCalls) {
  OutputParsing cfg;
  cfg.tools = ToolFormat::DeepSeek;
  Result want;
  want.content = "Let me check.";
  want.calls = {{"get_weather", R"({"city": "Paris"})"}, {"get_time", "{}"}};
  // DeepSeek-V3 / R1
  expect_every_split(
      cfg,
      "Let me check.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
      "```json\n{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      want);
  // DeepSeek-V3.1
  expect_every_split(
      cfg,
      "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{}<｜tool▁call▁end｜><"
      "｜tool▁calls▁end｜>",
      want);
  EXPECT_EQ(detect_tool_format("## Tools ... <｜tool▁calls▁begin｜> ..."), ToolFormat::DeepSeek);
}

TEST(OutputParser, MistralToolCalls) {
  OutputParsing cfg;
  cfg.tools = ToolFormat::Mistral;
  Result want;
  want.calls = {{"get_weather", R"({"city": "Paris"})"}, {"get_time", R"({"tz": "CET"})"}};
  expect_every_split(cfg,
                     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
                     "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}]",
                     want);
  want.calls.pop_back();
  expect_every_split(cfg, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", want);  // v11 tokenizer
  Result plain;
  plain.content = "[TOOL] is not a call.";
  expect_every_split(cfg, plain.content, plain);
}

TEST(OutputParser, Llama3JsonToolCall) {
  OutputParsing cfg;
  cfg.tools = ToolFormat::Llama3Json;
  Result want;
  want.calls = {{"get_weather", R"({"city": "Paris"})"}};
  expect_every_split(cfg, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", want);
  expect_every_split(cfg, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
                     want);
  Result plain;
  plain.content = "{not json at all}";
  expect_every_split(cfg, plain.content, plain);
}

OutputParsing with_format(ToolFormat f, nlohmann::ordered_json schemas = nlohmann::ordered_json::object()) {
  OutputParsing c;
  c.tools = f;
  c.tool_schemas = std::move(schemas);
  return c;
}

// Qwen3-Coder (a reply written in the syntax its chat template teaches): values typed by the tool's schema
// as its reference parser does; a string-typed "zip" keeps its leading zero, "True" is a boolean, a
// multi-line value keeps its inner newlines, a parameter the schema does not name stays text.
TEST(OutputParser, Qwen3CoderValuesTypedBySchema) {
  auto schemas = nlohmann::ordered_json::parse(R"({"plan_trip": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
      "zip": {"type": "string"}, "opts": {"type": "object"}, "ratio": {"type": "number"},
      "note": {"type": ["string", "null"]}, "maybe": {"type": "integer"}}}})");
  std::string text =
      "Planning now.\n<tool_call>\n<function=plan_trip>\n<parameter=city>\nSan Francisco, CA\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n<parameter=zip>\n01234\n"
      "</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=ratio>\n2.0\n</parameter>\n"
      "<parameter=note>\nline one\nline two\n</parameter>\n<parameter=maybe>\nnull\n</parameter>\n"
      "<parameter=extra>\n42\n</parameter>\n</function>\n</tool_call>";
  Result want;
  want.content = "Planning now.";
  want.calls = {{"plan_trip",
                 R"({"city":"San Francisco, CA","days":3,"metric":true,"zip":"01234","opts":{"a":[1,2]},)"
                 R"("ratio":2,"note":"line one\nline two","maybe":null,"extra":"42"})"}};
  expect_every_split(with_format(ToolFormat::Qwen3Coder, schemas), text, want);
  auto parsed = nlohmann::json::parse(want.calls[0].second);  // valid JSON
  EXPECT_EQ(parsed["days"], 3);
}

// GLM-4.6 (a reply in the syntax its chat template teaches): string-typed parameters keep their text, others
// parse as JSON.
TEST(OutputParser, Glm46ValuesTypedBySchema) {
  auto schemas = nlohmann::ordered_json::parse(
      R"({"search": {"properties": {"query": {"type": "string"}, "limit": {"type": "integer"}}}})");
  std::string text =
      "<think>The user wants results.</think>\nLet me search.\n<tool_call>search\n<arg_key>query</arg_key>\n"
      "<arg_value>007</arg_value>\n<arg_key>limit</arg_key>\n<arg_value>5</arg_value>\n<arg_key>tags</"
      "arg_key>\n"
      "<arg_value>[\"a\", \"b\"]</arg_value>\n</tool_call>\n<tool_call>search\n<arg_key>query</arg_key>\n"
      "<arg_value>more</arg_value>\n</tool_call>";
  Result want;
  want.reasoning = "The user wants results.";
  want.content = "Let me search.";
  want.calls = {{"search", R"({"query":"007","limit":5,"tags":["a","b"]})"},
                {"search", R"({"query":"more"})"}};
  expect_every_split(with_format(ToolFormat::Glm45, schemas), text, want);
}

// Arguments stream while the model writes them: before the closing marker arrives, all of the arguments
// JSON (the JSON families) or every finished parameter (the tag families) has been told.
TEST(OutputParser, ArgumentsStreamBeforeTheCallCloses) {
  struct Case {
    OutputParsing cfg;
    std::string head, tail;  // the reply is head + tail; tail holds the closing markers
    std::string told, all;   // arguments told after head, and in the end
  };
  std::vector<Case> cases = {
      {hermes(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a long query\", \"n\": [1, 2]}",
       "}\n</tool_call>", R"({"q": "a long query", "n": [1, 2]})", R"({"q": "a long query", "n": [1, 2]})"},
      {hermes(), "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"a lo", "ng\"}}</tool_call>",
       R"({"q": "a lo)", R"({"q": "a long"})"},
      {with_format(ToolFormat::Qwen3Coder),
       "<tool_call>\n<function=f>\n<parameter=city>\nParis\n</parameter>\n<parameter=n>\n1",
       "\n</parameter>\n</function>\n</tool_call>", R"({"city":"Paris")", R"({"city":"Paris","n":"1"})"},
      {with_format(ToolFormat::Glm45),
       "<tool_call>f\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n", "</tool_call>",
       R"({"city":"Paris")", R"({"city":"Paris"})"},
      {with_format(ToolFormat::Mistral), "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}", "}]",
       R"({"x": 1})", R"({"x": 1})"},
      {with_format(ToolFormat::Mistral), "[TOOL_CALLS]f[ARGS]{\"x\": ", "1}", R"({"x": )", R"({"x": 1})"},
      {with_format(ToolFormat::Llama3Json), "{\"name\": \"f\", \"parameters\": {\"x\": 1}", "}",
       R"({"x": 1})", R"({"x": 1})"},
      {with_format(ToolFormat::DeepSeek),
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"x\": 1}",
       "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>", R"({"x": 1})", R"({"x": 1})"},
  };
  for (const auto& c : cases) {
    Result head = run(c.cfg, bytes(c.head), false);
    ASSERT_EQ(head.calls.size(), 1u) << c.head;
    EXPECT_EQ(head.calls[0].first, "f");
    EXPECT_EQ(head.calls[0].second, c.told) << c.head;
    EXPECT_EQ(head.content, "");
    Result all = run(c.cfg, {c.head, c.tail});
    ASSERT_EQ(all.calls.size(), 1u) << c.head;
    EXPECT_EQ(all.calls[0].second, c.all);
    EXPECT_FALSE(nlohmann::json::parse(all.calls[0].second, nullptr, false).is_discarded());
    EXPECT_EQ(all.content, "");
  }
}

TEST(OutputParser, ForcedQwen3CoderAndGlmCalls) {
  RequestJson tools = RequestJson::parse(R"([{"type": "function", "function": {"name": "f",
      "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}])");
  RequestJson named = {{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}};
  OutputParsing q =
      chat_output_parsing(JsonFields(named), tools, "<tool_call>\n<function=NAME>\n<parameter=P>");
  EXPECT_EQ(q.tools, ToolFormat::Qwen3Coder);
  EXPECT_EQ(q.prefill, "<tool_call>\n<function=f>\n");
  Result r = run(q, {"<parameter=x>\n12\n</parameter>\n</function>\n</tool_call>"});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0], std::make_pair(std::string("f"), std::string(R"({"x":"12"})")));  // typed: string
  OutputParsing g = chat_output_parsing(JsonFields(named), tools, "<tool_call>{name}\n<arg_key>k</arg_key>");
  EXPECT_EQ(g.tools, ToolFormat::Glm45);
  EXPECT_EQ(g.prefill, "<tool_call>f\n");
  r = run(g, {"<arg_key>x</arg_key>\n<arg_value>12</arg_value>\n</tool_call>"});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].second, R"({"x":"12"})");
}

std::string read_template(const std::string& name) {
  std::ifstream in(std::string(TF_SHARED_DIR) + "/text-fixtures/templates/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The family is told from the prompt the real chat template renders with tools.
TEST(ChatOutput, DetectsFormatsFromRealTemplates) {
  nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
      "name": "get_weather", "description": "Weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  struct Case {
    const char* file;
    ToolFormat want;
  };
  for (const Case& c :
       {Case{"Qwen3-Coder.jinja", ToolFormat::Qwen3Coder}, Case{"GLM-4.6.jinja", ToolFormat::Glm45},
        Case{"Qwen3.5-4B.jinja", ToolFormat::Qwen3Coder}, Case{"Qwen-Qwen3-0.6B.jinja", ToolFormat::Hermes},
        Case{"deepseek-ai-DeepSeek-V3.1.jinja", ToolFormat::DeepSeek},  // tools not rendered
        Case{"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolFormat::Mistral}}) {
    ChatTemplate t(read_template(c.file), "<s>", "</s>");
    std::string prompt = t.render_ordered(messages, tools, true);
    EXPECT_EQ(detect_tool_format(prompt, t.source()), c.want) << c.file;
  }
}

TEST(OutputParser, PartialMarkerStart) {
  EXPECT_EQ(partial_marker_start("abc</thi", "</think>"), 3u);
  EXPECT_EQ(partial_marker_start("abc", "</think>"), 3u);
  EXPECT_EQ(partial_marker_start("a<", "<tool_call>"), 1u);
}

TEST(ChatOutput, ParsingFromPromptAndToolChoice) {
  RequestJson tools = RequestJson::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  RequestJson body = {{"tool_choice", "auto"}};
  JsonFields f(body);
  OutputParsing cfg = chat_output_parsing(f, tools, "...<tool_call>...<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(cfg.tools, ToolFormat::Hermes);
  EXPECT_TRUE(cfg.reasoning_starts_open);
  EXPECT_EQ(detect_tool_format("[AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS]"), ToolFormat::Mistral);
  RequestJson none = {{"tool_choice", "none"}};
  EXPECT_EQ(chat_output_parsing(JsonFields(none), tools, "<tool_call>").tools, ToolFormat::None);
  RequestJson required = {{"tool_choice", "required"}};
  EXPECT_EQ(chat_output_parsing(JsonFields(required), tools, "<tool_call>").prefill, "<tool_call>\n");
  EXPECT_THROW(chat_output_parsing(JsonFields(required), RequestJson(), ""), std::exception);  // no tools
  // Forcing a call inside an opened thinking block would put the call in the reasoning: refused.
  EXPECT_THROW(chat_output_parsing(JsonFields(required), tools, "<tool_call>..<think>\n"), std::exception);
  RequestJson named = {{"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}};
  OutputParsing n = chat_output_parsing(JsonFields(named), tools, "<tool_call>");
  EXPECT_EQ(n.prefill, "<tool_call>\n{\"name\": \"f\", \"arguments\": ");
  EXPECT_FALSE(n.parallel_tool_calls);
  RequestJson unknown = {{"tool_choice", {{"type", "function"}, {"function", {{"name", "g"}}}}}};
  EXPECT_THROW(chat_output_parsing(JsonFields(unknown), tools, "<tool_call>"), std::exception);
  // The parser reads the prefill first: the model's continuation completes the call.
  OutputParser p(n);
  ParsedDelta d = p.feed("{\"x\": 1}}\n</tool_call>");
  d.append(p.finish());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"x": 1})");
  EXPECT_EQ(d.content, "");
}

TEST(ChatOutput, MessageJson) {
  bool calls = false;
  auto m = chat_message_json(
      hermes(), "<think>hm</think>\n<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", &calls);
  EXPECT_TRUE(calls);
  EXPECT_EQ(m["reasoning_content"], "hm");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
}

}  // namespace
}  // namespace tf::server

// The Anthropic and Responses adapters' pure parts: request conversion to the template's message list,
// reply blocks / stop reasons / usage, and the bounded store of responses.
#include <gtest/gtest.h>

#include "server/anthropic_messages.h"
#include "server/openai_responses.h"

namespace tf::server {
namespace {

using nlohmann::json;

TEST(AnthropicMessages, BlocksBecomeTemplateMessages) {
  RequestJson body = RequestJson::parse(R"({
    "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use tools."}],
    "messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Call the tool.", "signature": "x"},
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
      {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "22C"}]},
        {"type": "text", "text": "Thanks"}]}]})");
  RequestJson m = anthropic_chat_messages(body);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "Be brief.\nUse tools.");
  EXPECT_EQ(m[2]["role"], "assistant");
  EXPECT_EQ(m[2]["content"], "Checking.");
  EXPECT_EQ(m[2]["reasoning_content"], "Call the tool.");
  EXPECT_EQ(m[2]["tool_calls"][0]["id"], "toolu_1");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(m[3]["tool_call_id"], "toolu_1");
  EXPECT_EQ(m[3]["content"], "22C");
  EXPECT_EQ(m[4]["content"], "Thanks");
  RequestJson tools = anthropic_tools(RequestJson::parse(
      R"({"tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}]})"));
  EXPECT_EQ(tools[0]["function"]["parameters"]["type"], "object");
  EXPECT_THROW(anthropic_chat_messages(RequestJson::parse(
                   R"({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})")),
               ApiError);
}

TEST(AnthropicMessages, ReplyBlocksStopReasonsUsage) {
  MessagesRequest r;
  r.parsing.tools = ToolFormat::Hermes;
  r.request.prompt = std::vector<int32_t>(10, 1);
  Usage u;
  u.prompt_tokens = 10, u.completion_tokens = 5, u.cached_tokens = 4;
  ResponseMeta meta{"msg_1", 0, "demo", ""};
  json m = anthropic_message_json(
      r, meta,
      "<think>plan</think>\n\nSure.\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}}</tool_call>",
      FinishReason::Stop, "", u);
  ASSERT_EQ(m["content"].size(), 3u);
  EXPECT_EQ(m["content"][0]["type"], "thinking");
  EXPECT_EQ(m["content"][0]["thinking"], "plan");
  EXPECT_EQ(m["content"][1]["text"], "Sure.");
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_EQ(m["content"][2]["input"]["a"], 1);
  EXPECT_EQ(m["content"][2]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_EQ(m["usage"]["input_tokens"], 6);
  EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 4);
  EXPECT_EQ(anthropic_message_json(r, meta, "Hi", FinishReason::Stop, "END", u)["stop_reason"],
            "stop_sequence");
  EXPECT_EQ(anthropic_message_json(r, meta, "Hi", FinishReason::Stop, "END", u)["stop_sequence"], "END");
  EXPECT_EQ(anthropic_message_json(r, meta, "Hi", FinishReason::Length, "", u)["stop_reason"], "max_tokens");
  EXPECT_EQ(anthropic_message_json(r, meta, "Hi", FinishReason::Stop, "", u)["stop_reason"], "end_turn");
  EXPECT_EQ(anthropic_error_json(ApiError(401, "x", "bad key"))["error"]["type"], "authentication_error");
  EXPECT_EQ(anthropic_error_json(ApiError(404, "x", "no"))["error"]["type"], "not_found_error");
}

TEST(Responses, InputItemsBecomeMessages) {
  RequestJson input = RequestJson::parse(R"([
    {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
    {"type": "reasoning", "id": "rs_1", "summary": []},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"x\": 1}"},
    {"type": "function_call_output", "call_id": "c1", "output": "ok"}])");
  RequestJson m = responses_input_messages(input);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0]["content"], "a\nb");
  EXPECT_EQ(m[1]["role"], "assistant");
  ASSERT_EQ(m[1]["tool_calls"].size(), 2u);  // consecutive calls are one assistant turn
  EXPECT_EQ(m[1]["tool_calls"][1]["function"]["name"], "g");
  EXPECT_EQ(m[2]["role"], "tool");
  EXPECT_EQ(responses_input_messages("hi")[0]["role"], "user");
  EXPECT_THROW(responses_input_messages(RequestJson::parse(R"([{"type": "item_reference", "id": "x"}])")),
               ApiError);
}

TEST(Responses, StoreIsBoundedLru) {
  ResponseStore s(2);
  s.put("a", {json{{"id", "a"}}, RequestJson::array()});
  s.put("b", {json{{"id", "b"}}, RequestJson::array()});
  ASSERT_TRUE(s.get("a"));  // a is now the most recent
  s.put("c", {json{{"id", "c"}}, RequestJson::array()});
  EXPECT_EQ(s.size(), 2u);
  EXPECT_FALSE(s.get("b"));
  EXPECT_EQ(s.get("a")->response["id"], "a");
  EXPECT_TRUE(s.erase("c"));
  EXPECT_FALSE(s.erase("c"));
  EXPECT_EQ(s.size(), 1u);
}

}  // namespace
}  // namespace tf::server

#pragma once
// Splits a model's reply text into reasoning, content and tool calls, incrementally: text arrives in
// arbitrary pieces (a marker such as "</think>" may be split across tokens or stream events) and nothing
// that could still turn out to be part of a marker is ever emitted as content.
//
// Reasoning: "<think>...</think>" at the start of the reply, or from the start when the chat template
// already opened "<think>" in the prompt (DeepSeek-R1, Qwen3 thinking models).
// Tool calls, per family:
//   Hermes / Qwen   <tool_call>{"name": ..., "arguments": {...}}</tool_call> (any number, anywhere)
//   Mistral         [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] (to the end of the reply)
//   Llama 3 JSON    a reply that is one {"name": ..., "parameters"|"arguments": {...}} object, optionally
//                   after <|python_tag|>, or several separated by ";"
//   DeepSeek <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//                   <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3/R1) or
//                   ...begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3.1), after any content, to the
//                   end of the reply
//   Qwen3-Coder
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>...</function>\n</tool_call>
//   GLM-4.5/4.6     <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>...</tool_call>
// (the Hermes parser reads all three bodies inside <tool_call>; the formats differ in the forced-call
// prefill.) A call streams as it is written (tool_call_scan.h): its first piece carries id and name, the
// following pieces the arguments text, whose concatenation is the call's arguments JSON. A call whose
// start is not in the expected shape (say, string-encoded arguments) is read whole when it closes, and
// given back as content when it does not parse; once a call has streamed it stays a call.
#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tf {
class JsonSchema;  // engine/json_matcher.h
}

namespace tf::server {

struct ScanResult;  // tool_call_scan.h

enum class ToolFormat { None, Hermes, Mistral, Llama3Json, DeepSeek, Qwen3Coder, Glm45 };

struct OutputParsing {
  bool reasoning = true;               // split <think>...</think>
  bool reasoning_starts_open = false;  // the prompt ends inside <think>
  ToolFormat tools = ToolFormat::None;
  bool parallel_tool_calls = true;  // false: only the first call is kept
  // Text the server wrote at the start of the reply to force a tool call (tool_choice "required" or a
  // named function): it ends the prompt, and the parser reads it before the model's first token.
  std::string prefill;
  // The tools' parameter schemas by name ({"NAME": {"type": "object", "properties": ...}}): the tag
  // families (Qwen3-Coder, GLM) type their text values by them.
  nlohmann::ordered_json tool_schemas = nlohmann::ordered_json::object();
  // A forced call in a JSON family (Hermes, Mistral; Llama 3 JSON when named) whose tools' parameter
  // schemas the structured-output matcher supports: the reply after `prefill` is constrained to a valid
  // call (its arguments under the tool's schema) and the call's closing marker. Null: the model completes
  // the prefill unconstrained.
  std::shared_ptr<const JsonSchema> forced_call;
};

// A piece of a tool call. The call's first piece has id and name (and perhaps some arguments); later
// pieces have only arguments text. The pieces of one index concatenate to the arguments JSON.
struct ParsedToolCall {
  size_t index = 0;       // position among this reply's calls
  std::string id;         // "call_<hex>"; empty in continuation pieces
  std::string name;       // empty in continuation pieces
  std::string arguments;  // this piece of the arguments JSON text
};

struct ParsedDelta {
  std::string reasoning, content;
  std::vector<ParsedToolCall> tool_calls;  // adjacent pieces of one call are merged
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(ParsedDelta d);
  void add_call_piece(ParsedToolCall c);  // merges with the last piece when it is the same call
};

// Finds where a held-back suffix starts: the longest suffix of `text` that is a proper prefix of
// `marker` (text.size() when none). Exposed for tests.
size_t partial_marker_start(const std::string& text, const std::string& marker);

class OutputParser {
 public:
  explicit OutputParser(OutputParsing cfg);
  // Feeds the next piece of reply text; returns what can be told for sure.
  ParsedDelta feed(const std::string& text);
  // The reply ended: flushes everything held back.
  ParsedDelta finish();
  size_t tool_calls_emitted() const { return calls_; }
  bool in_reasoning() const { return phase_ == Phase::Reasoning; }  // inside <think> (for token counts)

 private:
  enum class Phase { Start, Reasoning, Content };
  void reasoning_step(ParsedDelta& out, bool final);
  void content_step(const std::string& text, ParsedDelta& out, bool final);
  void hermes_step(ParsedDelta& out, bool final);
  void whole_reply_step(ParsedDelta& out, bool final);  // Mistral / Llama 3: decided at the start
  void deepseek_step(ParsedDelta& out, bool final);
  void calls_region_step(ParsedDelta& out, bool final);  // Mistral / Llama 3 / DeepSeek calls to the end
  void stream_calls(const ScanResult& r, ParsedDelta& out);
  void emit_calls(const std::string& json_text, const std::string& raw, ParsedDelta& out);
  void emit_content(const std::string& s, ParsedDelta& out);

  OutputParsing cfg_;
  Phase phase_;
  std::string pending_;  // reasoning-phase text not yet classified
  std::string tbuf_;     // content-phase text held by the tool parser
  bool in_call_ = false;
  bool content_started_ = false;    // leading whitespace after </think> is dropped
  bool reasoning_started_ = false;  // leading newlines after <think> are dropped
  enum class Decision { Undecided, Calls, Plain } decision_ = Decision::Undecided;
  size_t calls_ = 0;
  ParsedDelta
      prefill_out_;  // what reading the prefill told (a named call's start), given with the first feed
  // The calls of the region being scanned (one <tool_call>, or everything after [TOOL_CALLS] ...).
  struct CallStream {
    bool dropped = false;  // parallel_tool_calls is false and a call came before
    size_t index = 0;
    size_t sent = 0;  // argument bytes told
  };
  std::vector<CallStream> streams_;
};

}  // namespace tf::server

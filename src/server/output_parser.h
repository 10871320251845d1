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
// A call that does not parse as JSON is given back as content, never dropped.
#include <cstddef>
#include <string>
#include <vector>

namespace tf::server {

enum class ToolFormat { None, Hermes, Mistral, Llama3Json, DeepSeek };

struct OutputParsing {
  bool reasoning = true;               // split <think>...</think>
  bool reasoning_starts_open = false;  // the prompt ends inside <think>
  ToolFormat tools = ToolFormat::None;
  bool parallel_tool_calls = true;  // false: only the first call is kept
  // Text the server wrote at the start of the reply to force a tool call (tool_choice "required" or a
  // named function): it ends the prompt, and the parser reads it before the model's first token.
  std::string prefill;
};

struct ParsedToolCall {
  size_t index = 0;  // position among this reply's calls
  std::string id;    // "call_<hex>"
  std::string name;
  std::string arguments;  // a JSON object as text
};

struct ParsedDelta {
  std::string reasoning, content;
  std::vector<ParsedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void append(ParsedDelta d);
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

 private:
  enum class Phase { Start, Reasoning, Content };
  void reasoning_step(ParsedDelta& out, bool final);
  void content_step(const std::string& text, ParsedDelta& out, bool final);
  void hermes_step(ParsedDelta& out, bool final);
  void whole_reply_step(ParsedDelta& out, bool final);  // Mistral / Llama 3: decided at the start
  void deepseek_step(ParsedDelta& out, bool final);
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
};

}  // namespace tf::server

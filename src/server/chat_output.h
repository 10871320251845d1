#pragma once
// The chat completions side of output parsing: which parser a request gets (from its tools, tool_choice and
// the rendered prompt), the assistant message of a whole reply, and the delta of one stream chunk.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/api.h"
#include "server/json_fields.h"
#include "server/output_parser.h"

namespace tf::server {

// Reads tool_choice ("auto" | "none" | "required" | a named function; forcing a call sets `prefill`, the
// call's start that the caller appends to the prompt, and, for the JSON families, `forced_call`, the
// constraint that makes the rest a valid call) and parallel_tool_calls. The tool-call family comes from the
// rendered prompt (what the chat template told the model to write); reasoning starts open when the
// prompt ends inside "<think>".
OutputParsing chat_output_parsing(const JsonFields& f, const RequestJson& tools,
                                  const std::string& rendered_prompt,
                                  const std::string& template_source = {});

// The reply's constraint (structured outputs) as the parsing decided it: a forced call's (a request that
// already has a format, `format_param`: response_format, text.format, is a 400: the two cannot both hold),
// or the request's format behind the reasoning block the parser expects (a thinking model reasons first,
// then writes the constrained answer, as vLLM does with a reasoning parser).
void set_reply_constraint(const OutputParsing& parsing, GenerationRequest& request,
                          const std::string& format_param);

// The family whose syntax the rendered prompt teaches ("<tool_call>", "<function=", "[AVAILABLE_TOOLS]",
// ...), else the one the template's own text writes; Hermes when neither is recognised.
ToolFormat detect_tool_format(const std::string& rendered_prompt, const std::string& template_source = {});

// {"role": "assistant", "content", "reasoning_content"?, "tool_calls"?, "refusal": null} of a whole reply.
nlohmann::json chat_message_json(const OutputParsing& cfg, const std::string& text, bool* has_tool_calls);

// One chunk's delta: content, reasoning_content and tool_calls as OpenAI streams them.
nlohmann::json chat_delta_json(const ParsedDelta& d);

// The stream's parser per choice index.
class ChoiceParsers {
 public:
  explicit ChoiceParsers(const OutputParsing& cfg) : cfg_(cfg) {}
  OutputParser& at(size_t index);

 private:
  const OutputParsing& cfg_;
  std::map<size_t, OutputParser> parsers_;
};

}  // namespace tf::server

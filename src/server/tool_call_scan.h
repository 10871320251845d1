#pragma once
// Reads the tool calls of each family's syntax from reply text that may still be arriving, so a call's
// arguments can be streamed while the model writes them. Every scan of a longer text gives the same calls
// with the same or longer argument text (a prefix of what follows), so the caller streams the difference.
//
// Arguments are the JSON text of an object: for the JSON families (Hermes, Llama 3, Mistral, DeepSeek)
// the model's own text of the "arguments" value, byte for byte; for the tag families (Qwen3-Coder XML,
// GLM) a compact object built parameter by parameter ("{" first, each finished parameter as it closes,
// "}" when the call ends), each value typed by the tool's JSON schema as the families' reference parsers
// do (see tag_value).
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tf::server {

// The call markers of the JSON families, which the output parser (output_parser.h) also looks for.
inline const std::string kPythonTag = "<|python_tag|>";  // Llama 3
inline const std::string kMistral = "[TOOL_CALLS]";
inline const std::string kDsCallsBegin = "<｜tool▁calls▁begin｜>";  // DeepSeek
inline const std::string kDsCallsEnd = "<｜tool▁calls▁end｜>";
inline const std::string kDsCallBegin = "<｜tool▁call▁begin｜>";
inline const std::string kDsCallEnd = "<｜tool▁call▁end｜>";
inline const std::string kDsSep = "<｜tool▁sep｜>";

// Whitespace as both read replies (space, \n, \t, \r), and `s` without it at either end.
bool is_space(char c);
std::string strip(const std::string& s);

struct CallView {
  std::string name;
  std::string args;       // the arguments JSON text so far
  bool complete = false;  // the call's syntax closed
};

struct ScanResult {
  std::vector<CallView> calls;  // calls whose name is known, in order; the last may be incomplete
  bool malformed = false;       // the text is not (or, once ended, did not become) a call in this syntax
};

// Parameter schemas by tool name: {"NAME": {"type": "object", "properties": {...}}, ...}.
using ToolSchemas = nlohmann::ordered_json;

// The body of one <tool_call>...</tool_call> (closing tag excluded): a {"name", "arguments"} object
// (Hermes / Qwen3), <function=NAME><parameter=K>V</parameter>...</function> (Qwen3-Coder) or
// NAME<arg_key>K</arg_key><arg_value>V</arg_value>... (GLM-4.5/4.6). `ended`: the closing tag came (or
// the reply ended).
ScanResult scan_tagged_body(const std::string& body, bool ended, const ToolSchemas& schemas);

// Llama 3: [<|python_tag|>]{"name", "parameters"|"arguments"} objects separated by ";".
ScanResult scan_llama3(const std::string& region, bool ended);

// Mistral, from "[TOOL_CALLS]": a JSON array of calls, or NAME[ARGS]{...} (v11+ tokenizers), repeated.
ScanResult scan_mistral(const std::string& region, bool ended);

// DeepSeek, from "<｜tool▁calls▁begin｜>": V3/R1 (function<｜tool▁sep｜>NAME\n```json\n{...}\n```) and
// V3.1 (NAME<｜tool▁sep｜>{...}) calls, each closed by <｜tool▁call▁end｜>.
ScanResult scan_deepseek(const std::string& region, bool ended);

// A tag family's parameter value as JSON. Qwen3-Coder (`qwen`): one newline trimmed at each end; "null"
// is null; the schema's type decides (string types keep the text, integer/number/boolean convert,
// object/array parse as JSON), text that does not convert stays a string. GLM: trimmed; a string-typed
// parameter keeps the text, any other is parsed as JSON when it parses. Without a schema for the
// parameter Qwen3-Coder keeps the text and GLM parses it as JSON when it parses.
nlohmann::ordered_json tag_value(const std::string& raw, const nlohmann::ordered_json* property_schema,
                                 bool qwen);

}  // namespace tf::server

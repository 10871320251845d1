#pragma once
// Splits a template into text and tag tokens the way jinja2's lexer does with trim_blocks=True and
// lstrip_blocks=True (transformers' settings), including `-`/`+` whitespace control, comments and raw.
#include <cstdint>
#include <string>
#include <vector>

namespace tf::jinja {

enum class TokType {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};

struct Token {
  TokType type;
  std::string text;  // text data, name, decoded string literal or operator
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
};

// Throws TemplateError("line N: ...") on malformed input.
std::vector<Token> tokenize(const std::string& source);

}  // namespace tf::jinja

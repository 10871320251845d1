#pragma once
// Syntax tree of a parsed template. Immutable after parsing, so one tree serves concurrent renders.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace tf::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprType {
  kLiteral,  // literal
  kName,     // name
  kGetAttr,  // a.name
  kGetItem,  // a[b]
  kSlice,    // a[b:c:d] (a, b, c, args[0] may be null)
  kCall,     // a(args, kwargs)
  kFilter,   // a | name(args, kwargs)
  kTest,     // a is [not] name(args)
  kBinary,   // a name b  (+ - * / // % ** ~)
  kUnary,    // name a    (- +)
  kCompare,  // a ops[i] args[i] ...
  kAnd,
  kOr,
  kNot,
  kCond,  // b if a else c
  kList,
  kTuple,
  kDict,  // args = key, value, key, value, ...
};

struct Expr {
  ExprType type;
  int line = 0;
  Value literal;
  std::string name;
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negate = false;
  ExprPtr star_args, star_kwargs;
};

enum class StmtType {
  kText,
  kOutput,
  kIf,  // conds[i] -> bodies[i]; a trailing else has a null cond
  kFor,
  kSet,       // targets = expr, or ns.attr = expr
  kSetBlock,  // targets = rendered body (optionally through filter)
  kMacro,
  kCallBlock,  // {% call(params) expr %}body{% endcall %}
  kFilterBlock,
  kBreak,
  kContinue,
  kScope,  // a plain body ({% generation %})
};

// Name under which a filter block's / block set's rendered body enters its filter chain.
inline constexpr const char* kBlockBodyVar = "\x01body";

struct Stmt {
  StmtType type;
  int line = 0;
  std::string text;
  ExprPtr expr;  // output / for iterable / set value / call expression / filter chain
  ExprPtr cond;  // for-loop filter
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> targets;  // loop / set targets (several: tuple unpacking)
  std::string attr;                  // set ns.attr: targets[0] is ns
  Body body, else_body;
  bool recursive = false;
  std::string name;                                     // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro / caller parameters with defaults
};

}  // namespace tf::jinja

#include "text/jinja/parser.h"

#include <algorithm>
#include <initializer_list>
#include <unordered_set>

#include "text/jinja/lexer.h"

namespace tf::jinja {
namespace {

// jinja2's builtin filter and test names. Like jinja2, a name outside this list is a compile-time error,
// unless it sits inside an if statement or conditional expression (then it fails when reached).
const std::unordered_set<std::string> kJinjaFilters = {
    "abs",    "attr",       "batch",       "capitalize", "center",   "count",
    "d",      "default",    "dictsort",    "e",          "escape",   "filesizeformat",
    "first",  "float",      "forceescape", "format",     "groupby",  "indent",
    "int",    "items",      "join",        "last",       "length",   "list",
    "lower",  "map",        "max",         "min",        "pprint",   "random",
    "reject", "rejectattr", "replace",     "reverse",    "round",    "safe",
    "select", "selectattr", "slice",       "sort",       "string",   "striptags",
    "sum",    "title",      "tojson",      "trim",       "truncate", "unique",
    "upper",  "urlencode",  "urlize",      "wordcount",  "wordwrap", "xmlattr"};
const std::unordered_set<std::string> kJinjaTests = {
    "!=",       "<",           "<=",          "==",      ">",       ">=",        "boolean",  "callable",
    "defined",  "divisibleby", "eq",          "equalto", "escaped", "even",      "false",    "filter",
    "float",    "ge",          "greaterthan", "gt",      "in",      "integer",   "iterable", "le",
    "lessthan", "lower",       "lt",          "mapping", "ne",      "none",      "number",   "odd",
    "sameas",   "sequence",    "string",      "test",    "true",    "undefined", "upper"};

[[noreturn]] void name_error(int line, const std::string& what, const std::string& name) {
  throw TemplateError("line " + std::to_string(line) + ": no " + what + " named '" + name + "'");
}

void check_expr(const Expr* e, bool soft);

void check_exprs(const std::vector<ExprPtr>& es, bool soft) {
  for (const auto& e : es) check_expr(e.get(), soft);
}

void check_expr(const Expr* e, bool soft) {
  if (!e) return;
  if (e->type == ExprType::kCond) soft = true;
  if (!soft && e->type == ExprType::kFilter && !kJinjaFilters.count(e->name))
    name_error(e->line, "filter", e->name);
  if (!soft && e->type == ExprType::kTest && !kJinjaTests.count(e->name))
    name_error(e->line, "test", e->name);
  check_expr(e->a.get(), soft);
  check_expr(e->b.get(), soft);
  check_expr(e->c.get(), soft);
  check_exprs(e->args, soft);
  for (const auto& kv : e->kwargs) check_expr(kv.second.get(), soft);
  check_expr(e->star_args.get(), soft);
  check_expr(e->star_kwargs.get(), soft);
}

// `soft` mirrors jinja2's soft frames: set inside if statements; loop, macro and block bodies reset it.
void check_body(const Body& body, bool soft) {
  for (const auto& s : body) {
    bool inner = s->type == StmtType::kIf ? true : soft;
    check_expr(s->expr.get(), inner);
    check_exprs(s->conds, inner);
    for (const auto& b : s->bodies) check_body(b, inner);
    bool frame = s->type == StmtType::kFor || s->type == StmtType::kMacro ||
                 s->type == StmtType::kCallBlock || s->type == StmtType::kSetBlock ||
                 s->type == StmtType::kFilterBlock;
    check_expr(s->cond.get(), frame ? false : inner);
    for (const auto& p : s->params) check_expr(p.second.get(), false);
    check_body(s->body, frame ? false : inner);
    check_body(s->else_body, frame ? false : inner);
  }
}

ExprPtr make_expr(ExprType t, int line) {
  auto e = std::make_unique<Expr>();
  e->type = t;
  e->line = line;
  return e;
}

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != TokType::kEof) fail("unexpected '" + cur().text + "' tag");
    return body;
  }

 private:
  const Token& cur() const { return t_[p_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(p_ + n, t_.size() - 1)]; }
  [[noreturn]] void fail(const std::string& msg) const {
    throw TemplateError("line " + std::to_string(cur().line) + ": " + msg);
  }
  bool is_op(const char* op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokType::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++p_;
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    ++p_;
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got '" + describe() + "'");
  }
  void expect_block_end() {
    if (cur().type != TokType::kBlockEnd) fail("expected end of statement block, got '" + describe() + "'");
    ++p_;
  }
  std::string expect_name() {
    if (cur().type != TokType::kName) fail("expected a name, got '" + describe() + "'");
    return t_[p_++].text;
  }
  std::string describe() const {
    switch (cur().type) {
      case TokType::kEof:
        return "end of template";
      case TokType::kBlockEnd:
        return "%}";
      case TokType::kVarEnd:
        return "}}";
      default:
        return cur().text;
    }
  }

  // Parses statements until a block tag whose keyword is in `ends`; stops on that keyword.
  Body parse_body(std::initializer_list<const char*> ends) {
    Body body;
    for (;;) {
      const Token& tok = cur();
      if (tok.type == TokType::kEof) {
        if (ends.size() == 0) return body;
        fail(std::string("unexpected end of template, expected '") + *ends.begin() + "'");
      }
      if (tok.type == TokType::kText) {
        auto s = std::make_unique<Stmt>();
        s->type = StmtType::kText;
        s->line = tok.line;
        s->text = tok.text;
        body.push_back(std::move(s));
        ++p_;
      } else if (tok.type == TokType::kVarBegin) {
        ++p_;
        auto s = std::make_unique<Stmt>();
        s->type = StmtType::kOutput;
        s->line = tok.line;
        s->expr = parse_tuple(true, false);
        if (cur().type != TokType::kVarEnd) fail("expected '}}', got '" + describe() + "'");
        ++p_;
        body.push_back(std::move(s));
      } else if (tok.type == TokType::kBlockBegin) {
        ++p_;
        if (cur().type == TokType::kName)
          for (const char* e : ends)
            if (cur().text == e) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected '" + describe() + "'");
      }
    }
  }

  StmtPtr parse_statement() {
    int line = cur().line;
    if (++nesting_ > kMaxNesting) fail("blocks nested too deeply");
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    std::string kw = expect_name();
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (kw == "if") {
      parse_if(*s);
    } else if (kw == "for") {
      parse_for(*s);
    } else if (kw == "set") {
      parse_set(*s);
    } else if (kw == "macro") {
      parse_macro(*s);
    } else if (kw == "call") {
      parse_call_block(*s);
    } else if (kw == "filter") {
      s->type = StmtType::kFilterBlock;
      s->expr = parse_filter_chain(line);
      expect_block_end();
      s->body = parse_body({"endfilter"});
      end_tag();
    } else if (kw == "break" || kw == "continue") {
      s->type = kw == "break" ? StmtType::kBreak : StmtType::kContinue;
      expect_block_end();
    } else if (kw == "generation") {
      s->type = StmtType::kScope;
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      end_tag();
    } else {
      p_--;
      fail("unsupported or unknown tag '" + kw + "'");
    }
    return s;
  }

  void end_tag() {
    ++p_;  // the end keyword
    expect_block_end();
  }

  void parse_if(Stmt& s) {
    s.type = StmtType::kIf;
    s.conds.push_back(parse_tuple(false, false));
    expect_block_end();
    for (;;) {
      s.bodies.push_back(parse_body({"elif", "else", "endif"}));
      std::string kw = cur().text;
      ++p_;
      if (kw == "elif") {
        s.conds.push_back(parse_tuple(false, false));
        expect_block_end();
      } else if (kw == "else") {
        expect_block_end();
        s.conds.push_back(nullptr);
        s.bodies.push_back(parse_body({"endif"}));
        end_tag();
        return;
      } else {
        expect_block_end();
        return;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    bool paren = skip_op("(");
    do {
      if (paren && is_op(")")) break;
      names.push_back(expect_name());
    } while (skip_op(","));
    if (paren) expect_op(")");
    return names;
  }

  void parse_for(Stmt& s) {
    s.type = StmtType::kFor;
    s.targets = parse_targets();
    if (!skip_name("in")) fail("expected 'in' in for loop");
    s.expr = parse_tuple(false, false, true);
    if (skip_name("if")) s.cond = parse_expression();
    s.recursive = skip_name("recursive");
    expect_block_end();
    s.body = parse_body({"endfor", "else"});
    if (cur().text == "else") {
      ++p_;
      expect_block_end();
      s.else_body = parse_body({"endfor"});
    }
    end_tag();
  }

  void parse_set(Stmt& s) {
    int line = cur().line;
    std::string first = expect_name();
    if (skip_op(".")) {
      s.type = StmtType::kSet;
      s.targets = {first};
      s.attr = expect_name();
      expect_op("=");
      s.expr = parse_tuple(true, false);
      expect_block_end();
      return;
    }
    s.targets = {first};
    while (skip_op(",")) s.targets.push_back(expect_name());
    if (skip_op("=")) {
      s.type = StmtType::kSet;
      s.expr = parse_tuple(true, false);
      expect_block_end();
      return;
    }
    s.type = StmtType::kSetBlock;
    if (is_op("|")) s.expr = parse_filter_chain(line);
    expect_block_end();
    s.body = parse_body({"endset"});
    end_tag();
  }

  std::vector<std::pair<std::string, ExprPtr>> parse_params() {
    std::vector<std::pair<std::string, ExprPtr>> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      std::string n = expect_name();
      ExprPtr def;
      if (skip_op("=")) def = parse_expression();
      params.emplace_back(std::move(n), std::move(def));
    }
    expect_op(")");
    return params;
  }

  void parse_macro(Stmt& s) {
    s.type = StmtType::kMacro;
    s.name = expect_name();
    s.params = parse_params();
    expect_block_end();
    s.body = parse_body({"endmacro"});
    end_tag();
  }

  void parse_call_block(Stmt& s) {
    s.type = StmtType::kCallBlock;
    if (is_op("(")) s.params = parse_params();
    s.expr = parse_expression();
    if (s.expr->type != ExprType::kCall) fail("expected a call in {% call %}");
    expect_block_end();
    s.body = parse_body({"endcall"});
    end_tag();
  }

  // `| f(args) | g` applied to the block body placeholder.
  ExprPtr parse_filter_chain(int line) {
    auto body = make_expr(ExprType::kName, line);
    body->name = kBlockBodyVar;
    if (!is_op("|")) {
      p_--;  // `{% filter name %}`: the filter name follows the keyword without a pipe
      if (!is_name("filter")) fail("expected a filter");
    }
    return parse_filters(std::move(body), true);
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr = true) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      int line = cur().line;
      ++p_;
      auto c = make_expr(ExprType::kCond, line);
      c->a = parse_or();
      c->b = std::move(e);
      if (skip_name("else")) c->c = parse_condexpr();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      auto n = make_expr(ExprType::kOr, cur().line);
      ++p_;
      n->a = std::move(e);
      n->b = parse_and();
      e = std::move(n);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      auto n = make_expr(ExprType::kAnd, cur().line);
      ++p_;
      n->a = std::move(e);
      n->b = parse_not();
      e = std::move(n);
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto n = make_expr(ExprType::kNot, cur().line);
      ++p_;
      n->a = parse_not();
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr e = parse_math1();
    ExprPtr cmp;
    for (;;) {
      std::string op;
      if (cur().type == TokType::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = cur().text;
        ++p_;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == TokType::kName && peek().text == "in") {
        p_ += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make_expr(ExprType::kCompare, line);
        cmp->a = std::move(e);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(e);
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto n = make_expr(ExprType::kBinary, line);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return n;
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().text;
      int line = cur().line;
      ++p_;
      e = binary(op, std::move(e), parse_concat(), line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int line = cur().line;
      ++p_;
      e = binary("~", std::move(e), parse_math2(), line);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().text;
      int line = cur().line;
      ++p_;
      e = binary(op, std::move(e), parse_pow(), line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int line = cur().line;
      ++p_;
      e = binary("**", std::move(e), parse_unary(true), line);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    // Every nested sub-expression passes here; bound the recursion so hostile input cannot blow the stack.
    if (++nesting_ > kMaxNesting) fail("expression nested too deeply");
    struct Leave {
      int& n;
      ~Leave() { --n; }
    } leave{nesting_};
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = make_expr(ExprType::kUnary, cur().line);
      e->name = cur().text;
      ++p_;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    int line = tok.line;
    if (tok.type == TokType::kName) {
      ++p_;
      auto lit = make_expr(ExprType::kLiteral, line);
      if (tok.text == "true" || tok.text == "True") {
        lit->literal = Value(true);
      } else if (tok.text == "false" || tok.text == "False") {
        lit->literal = Value(false);
      } else if (tok.text == "none" || tok.text == "None") {
        lit->literal = Value::none();
      } else {
        auto n = make_expr(ExprType::kName, line);
        n->name = tok.text;
        return n;
      }
      return lit;
    }
    if (tok.type == TokType::kString) {
      std::string s;
      while (cur().type == TokType::kString) s += t_[p_++].text;
      auto lit = make_expr(ExprType::kLiteral, line);
      lit->literal = Value(std::move(s));
      return lit;
    }
    if (tok.type == TokType::kInt || tok.type == TokType::kFloat) {
      ++p_;
      auto lit = make_expr(ExprType::kLiteral, line);
      lit->literal = tok.type == TokType::kInt ? Value(tok.ival) : Value(tok.fval);
      return lit;
    }
    if (skip_op("(")) {
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (skip_op("[")) {
      auto l = make_expr(ExprType::kList, line);
      while (!is_op("]")) {
        if (!l->args.empty()) expect_op(",");
        if (is_op("]")) break;
        l->args.push_back(parse_expression());
      }
      expect_op("]");
      return l;
    }
    if (skip_op("{")) {
      auto d = make_expr(ExprType::kDict, line);
      while (!is_op("}")) {
        if (!d->args.empty()) expect_op(",");
        if (is_op("}")) break;
        d->args.push_back(parse_expression());
        expect_op(":");
        d->args.push_back(parse_expression());
      }
      expect_op("}");
      return d;
    }
    fail("unexpected '" + describe() + "'");
  }

  // Comma-separated expressions; a bare single expression is returned as is.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens, bool stop_at_if = false) {
    int line = cur().line;
    std::vector<ExprPtr> items;
    bool comma = false;
    for (;;) {
      if (!items.empty()) {
        if (!skip_op(",")) break;
        comma = true;
      }
      if (is_op(")") || cur().type == TokType::kVarEnd || cur().type == TokType::kBlockEnd ||
          (stop_at_if && is_name("if")) || is_op("]") || is_op("}")) {
        if (items.empty() && !explicit_parens) fail("expected an expression, got '" + describe() + "'");
        break;
      }
      items.push_back(parse_expression(with_condexpr && !stop_at_if));
      if (stop_at_if && is_name("if")) break;
    }
    if (!comma && items.size() == 1) return std::move(items[0]);
    auto t = make_expr(ExprType::kTuple, line);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (;;) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    for (;;) {
      if (is_op("|")) {
        e = parse_filters(std::move(e), false);
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    int line = cur().line;
    if (skip_op(".")) {
      if (cur().type == TokType::kInt) {
        auto n = make_expr(ExprType::kGetItem, line);
        n->a = std::move(obj);
        n->b = make_expr(ExprType::kLiteral, line);
        n->b->literal = Value(t_[p_++].ival);
        return n;
      }
      auto n = make_expr(ExprType::kGetAttr, line);
      n->a = std::move(obj);
      n->name = expect_name();
      return n;
    }
    expect_op("[");
    ExprPtr start, stop, step;
    bool is_slice = false;
    if (!is_op(":")) start = parse_expression();
    if (skip_op(":")) {
      is_slice = true;
      if (!is_op("]") && !is_op(":")) stop = parse_expression();
      if (skip_op(":") && !is_op("]")) step = parse_expression();
    }
    expect_op("]");
    if (!is_slice) {
      auto n = make_expr(ExprType::kGetItem, line);
      n->a = std::move(obj);
      n->b = std::move(start);
      return n;
    }
    auto n = make_expr(ExprType::kSlice, line);
    n->a = std::move(obj);
    n->b = std::move(start);
    n->c = std::move(stop);
    n->args.push_back(std::move(step));
    return n;
  }

  void parse_args(Expr& call) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (skip_op("*")) {
        call.star_args = parse_expression();
      } else if (skip_op("**")) {
        call.star_kwargs = parse_expression();
      } else if (cur().type == TokType::kName && peek().type == TokType::kOp && peek().text == "=") {
        std::string k = t_[p_].text;
        p_ += 2;
        call.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!call.kwargs.empty()) fail("positional argument after keyword argument");
        call.args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr fn) {
    auto n = make_expr(ExprType::kCall, cur().line);
    n->a = std::move(fn);
    parse_args(*n);
    return n;
  }

  std::string dotted_name() {
    std::string n = expect_name();
    while (is_op(".") && peek().type == TokType::kName) {
      p_++;
      n += "." + expect_name();
    }
    return n;
  }

  // `| name(args)` repeated. With `first_is_keyword`, the current token is the `filter` keyword.
  ExprPtr parse_filters(ExprPtr e, bool first_is_keyword) {
    bool first = true;
    while (is_op("|") || (first && first_is_keyword)) {
      ++p_;
      first = false;
      auto f = make_expr(ExprType::kFilter, cur().line);
      f->name = dotted_name();
      f->a = std::move(e);
      if (is_op("(")) parse_args(*f);
      e = std::move(f);
    }
    return e;
  }

  ExprPtr parse_test(ExprPtr e) {
    auto t = make_expr(ExprType::kTest, cur().line);
    ++p_;  // is
    t->negate = skip_name("not");
    t->name = dotted_name();
    t->a = std::move(e);
    if (is_op("(")) {
      parse_args(*t);
    } else if ((cur().type == TokType::kName || cur().type == TokType::kString ||
                cur().type == TokType::kInt || cur().type == TokType::kFloat || is_op("(") || is_op("[") ||
                is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      t->args.push_back(parse_postfix(parse_primary()));
    }
    return t;
  }

  static constexpr int kMaxNesting = 200;
  std::vector<Token> t_;
  size_t p_ = 0;
  int nesting_ = 0;
};

}  // namespace

Body parse_template(const std::string& source) {
  Body body = Parser(tokenize(source)).parse_all();
  check_body(body, false);
  return body;
}

}  // namespace tf::jinja

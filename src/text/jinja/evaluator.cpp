#include "text/jinja/evaluator.h"

#include <ctime>
#include <unordered_map>

#include "text/jinja/filters.h"
#include "text/jinja/operators.h"
#include "text/jinja/tests.h"

namespace tf::jinja {
namespace {

// An error that already names its template line.
class LinedError : public TemplateError {
 public:
  using TemplateError::TemplateError;
};

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

struct Scope {
  std::unordered_map<std::string, Value> vars;
  ScopePtr parent;

  const Value* find(const std::string& n) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(n);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

ScopePtr child(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { kNormal, kBreak, kContinue };

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE
// Python stops runaway recursion (a macro calling itself forever) with RecursionError; so do we, long
// before the C++ stack runs out. Real templates nest macros a few levels deep.
constexpr int kMaxCallDepth = 128;

// Counts nested macro calls / recursive loops for the lifetime of one call.
class DepthGuard {
 public:
  explicit DepthGuard(int& depth) : depth_(depth) {
    if (++depth_ > kMaxCallDepth) {
      --depth_;
      throw TemplateError("maximum recursion depth exceeded");
    }
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

class Interp {
 public:
  Flow exec(const Body& body, const ScopePtr& sc, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec_stmt(*s, sc, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec_stmt(const Stmt& s, const ScopePtr& sc, std::string& out) {
    try {
      return exec_stmt_unchecked(s, sc, out);
    } catch (const LinedError&) {
      throw;
    } catch (const std::exception& e) {
      throw LinedError("line " + std::to_string(s.line) + ": " + e.what());
    }
  }

 private:
  Flow exec_stmt_unchecked(const Stmt& s, const ScopePtr& sc, std::string& out) {
    switch (s.type) {
      case StmtType::kText:
        out += s.text;
        return Flow::kNormal;
      case StmtType::kOutput:
        out += eval(*s.expr, sc).to_str();
        return Flow::kNormal;
      case StmtType::kIf:
        for (size_t k = 0; k < s.conds.size(); ++k)
          if (!s.conds[k] || eval(*s.conds[k], sc).truthy()) return exec(s.bodies[k], sc, out);
        return Flow::kNormal;
      case StmtType::kFor:
        run_loop(s, iterate(eval(*s.expr, sc)), sc, out, 0);
        return Flow::kNormal;
      case StmtType::kSet:
        exec_set(s, sc, eval(*s.expr, sc));
        return Flow::kNormal;
      case StmtType::kSetBlock: {
        std::string body;
        exec(s.body, child(sc), body);
        exec_set(s, sc, s.expr ? apply_block_filter(*s.expr, sc, std::move(body)) : Value(std::move(body)));
        return Flow::kNormal;
      }
      case StmtType::kMacro:
        sc->vars[s.name] = make_macro(s, sc, s.name);
        return Flow::kNormal;
      case StmtType::kCallBlock: {
        Value caller = make_macro(s, sc, "caller");
        out += call_expr(*s.expr, sc, &caller).to_str();
        return Flow::kNormal;
      }
      case StmtType::kFilterBlock: {
        std::string body;
        exec(s.body, sc, body);
        out += apply_block_filter(*s.expr, sc, std::move(body)).to_str();
        return Flow::kNormal;
      }
      case StmtType::kBreak:
        return Flow::kBreak;
      case StmtType::kContinue:
        return Flow::kContinue;
      case StmtType::kScope:
        return exec(s.body, sc, out);
    }
    return Flow::kNormal;
  }

  Value apply_block_filter(const Expr& chain, const ScopePtr& sc, std::string body) {
    auto fs = child(sc);
    fs->vars[kBlockBodyVar] = Value(std::move(body));
    return eval(chain, fs);
  }

  void bind(const std::vector<std::string>& targets, const Value& v, Scope& sc) {
    if (targets.size() == 1) {
      sc.vars[targets[0]] = v;
      return;
    }
    std::vector<Value> items = iterate(v);
    if (items.size() != targets.size())
      throw TemplateError(items.size() > targets.size()
                              ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                              : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                    ")");
    for (size_t k = 0; k < targets.size(); ++k) sc.vars[targets[k]] = items[k];
  }

  void exec_set(const Stmt& s, const ScopePtr& sc, Value v) {
    if (s.attr.empty()) {
      bind(s.targets, v, *sc);
      return;
    }
    const Value* ns = sc->find(s.targets[0]);
    if (!ns || !ns->is_dict() || ns->dict()->kind != DictKind::kNamespace)
      throw TemplateError("cannot assign attribute on non-namespace object");
    if (!s.attr.empty() && s.attr[0] == '_')
      throw TemplateError("chat templates cannot store underscore-prefixed attributes on a namespace");
    ns->dict()->set(Value(s.attr), std::move(v));
  }

  void run_loop(const Stmt& s, std::vector<Value> items, const ScopePtr& sc, std::string& out, int depth) {
    if (s.cond) {
      std::vector<Value> kept;
      for (auto& it : items) {
        auto fs = child(sc);
        bind(s.targets, it, *fs);
        if (eval(*s.cond, fs).truthy()) kept.push_back(std::move(it));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, child(sc), out);
      return;
    }
    auto last_changed = std::make_shared<std::vector<Value>>();
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto it = child(sc);
      bind(s.targets, items[i], *it);
      it->vars["loop"] = make_loop(s, items, i, sc, depth, last_changed);
      if (exec(s.body, it, out) == Flow::kBreak) break;
    }
  }

  Value make_loop(const Stmt& s, const std::vector<Value>& items, int64_t i, const ScopePtr& sc, int depth,
                  const std::shared_ptr<std::vector<Value>>& last_changed) {
    const int64_t n = static_cast<int64_t>(items.size());
    auto d = std::make_shared<Dict>();
    d->kind = DictKind::kLoop;
    auto put = [&](const char* k, Value v) { d->items.emplace_back(Value(k), std::move(v)); };
    put("index", Value(i + 1));
    put("index0", Value(i));
    put("revindex", Value(n - i));
    put("revindex0", Value(n - i - 1));
    put("first", Value(i == 0));
    put("last", Value(i == n - 1));
    put("length", Value(n));
    put("depth", Value(static_cast<int64_t>(depth + 1)));
    put("depth0", Value(static_cast<int64_t>(depth)));
    if (i > 0) put("previtem", items[i - 1]);
    if (i + 1 < n) put("nextitem", items[i + 1]);
    put("cycle", make_function("cycle", [i](CallArgs& a) {
          if (a.pos.empty()) throw TemplateError("no items for cycling given");
          return a.pos[static_cast<size_t>(i) % a.pos.size()];
        }));
    put("changed", make_function("changed", [last_changed](CallArgs& a) {
          bool same = last_changed->size() == a.pos.size();
          for (size_t k = 0; same && k < a.pos.size(); ++k) same = (*last_changed)[k].equals(a.pos[k]);
          *last_changed = a.pos;
          return Value(!same);
        }));
    if (s.recursive) {
      std::weak_ptr<Scope> weak = sc;
      d->call = std::make_shared<Function>();
      d->call->name = "loop";
      d->call->fn = [this, &s, weak, depth](CallArgs& a) {
        if (a.pos.empty()) throw TemplateError("loop() takes one argument");
        DepthGuard guard(call_depth_);
        std::string inner;
        run_loop(s, iterate(a.pos[0]), weak.lock(), inner, depth + 1);
        return Value(inner);
      };
    }
    return Value(d);
  }

  // Macros and call-block callers; `def` provides params and body.
  Value make_macro(const Stmt& def, const ScopePtr& sc, const std::string& name) {
    std::weak_ptr<Scope> weak = sc;  // the defining scope outlives every call made during the render
    return make_function(name, [this, &def, weak](CallArgs& a) { return call_macro(def, weak.lock(), a); });
  }

  Value call_macro(const Stmt& def, const ScopePtr& closure, CallArgs& a) {
    if (!closure) throw TemplateError("macro called outside of its scope");
    DepthGuard guard(call_depth_);
    auto ms = child(closure);
    std::vector<bool> given(def.params.size(), false);
    std::vector<Value> varargs;
    for (size_t k = 0; k < a.pos.size(); ++k) {
      if (k < def.params.size()) {
        ms->vars[def.params[k].first] = a.pos[k];
        given[k] = true;
      } else {
        varargs.push_back(a.pos[k]);
      }
    }
    Value kwargs = make_dict();
    for (auto& [k, v] : a.kw) {
      bool matched = false;
      for (size_t p = 0; p < def.params.size(); ++p) {
        if (def.params[p].first != k) continue;
        if (given[p])
          throw TemplateError("macro '" + def.name + "' got multiple values for argument '" + k + "'");
        ms->vars[k] = v;
        given[p] = matched = true;
      }
      if (!matched) {
        if (k == "caller")
          ms->vars["caller"] = v;
        else
          kwargs.dict()->set(Value(k), v);
      }
    }
    for (size_t p = 0; p < def.params.size(); ++p) {
      if (given[p]) continue;
      const auto& [pname, pdef] = def.params[p];
      ms->vars[pname] =
          pdef ? eval(*pdef, ms) : Value::undefined("parameter '" + pname + "' was not provided");
    }
    ms->vars["varargs"] = make_list(std::move(varargs), true);
    ms->vars["kwargs"] = kwargs;
    std::string out;
    exec(def.body, ms, out);
    return Value(std::move(out));
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& sc) {
    CallArgs a;
    for (const auto& x : e.args) a.pos.push_back(eval(*x, sc));
    for (const auto& [k, x] : e.kwargs) a.kw.emplace_back(k, eval(*x, sc));
    if (e.star_args)
      for (auto& v : iterate(eval(*e.star_args, sc))) a.pos.push_back(std::move(v));
    if (e.star_kwargs) {
      Value kw = eval(*e.star_kwargs, sc);
      if (!kw.is_mapping()) throw TemplateError("argument after ** must be a mapping");
      for (const auto& [k, v] : kw.dict()->items) a.kw.emplace_back(k.to_str(), v);
    }
    return a;
  }

  Value call_expr(const Expr& e, const ScopePtr& sc, const Value* caller) {
    Value fn = eval(*e.a, sc);
    CallArgs a = eval_args(e, sc);
    if (caller) a.kw.emplace_back("caller", *caller);
    if (fn.is_function()) return fn.function()->fn(a);
    if (fn.is_dict() && fn.dict()->call) return fn.dict()->call->fn(a);
    if (fn.is_undefined()) raise_undefined(fn);
    throw TemplateError("'" + fn.type_name() + "' object is not callable");
  }

  Value eval_compare(const Expr& e, const ScopePtr& sc) {
    Value left = eval(*e.a, sc);
    for (size_t k = 0; k < e.ops.size(); ++k) {
      Value right = eval(*e.args[k], sc);
      const std::string& op = e.ops[k];
      bool ok;
      if (op == "==")
        ok = left.equals(right);
      else if (op == "!=")
        ok = !left.equals(right);
      else if (op == "in")
        ok = contains(right, left);
      else if (op == "notin")
        ok = !contains(right, left);
      else {
        int c = compare_values(left, right);
        ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
      }
      if (!ok) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

 public:
  Value eval(const Expr& e, const ScopePtr& sc) {
    switch (e.type) {
      case ExprType::kLiteral:
        return e.literal;
      case ExprType::kName: {
        const Value* v = sc->find(e.name);
        return v ? *v : Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprType::kGetAttr:
        return get_attr(eval(*e.a, sc), e.name);
      case ExprType::kGetItem:
        return get_item(eval(*e.a, sc), eval(*e.b, sc));
      case ExprType::kSlice: {
        Value obj = eval(*e.a, sc);
        auto opt = [&](const ExprPtr& x) { return x ? eval(*x, sc) : Value::none(); };
        return slice_value(obj, opt(e.b), opt(e.c), opt(e.args[0]));
      }
      case ExprType::kCall:
        return call_expr(e, sc, nullptr);
      case ExprType::kFilter: {
        Value in = eval(*e.a, sc);
        CallArgs a = eval_args(e, sc);
        return apply_filter(e.name, in, a);
      }
      case ExprType::kTest: {
        Value in = eval(*e.a, sc);
        CallArgs a = eval_args(e, sc);
        return Value(apply_test(e.name, in, a) != e.negate);
      }
      case ExprType::kBinary:
        return binary_op(e.name, eval(*e.a, sc), eval(*e.b, sc));
      case ExprType::kUnary:
        return unary_op(e.name, eval(*e.a, sc));
      case ExprType::kCompare:
        return eval_compare(e, sc);
      case ExprType::kAnd: {
        Value l = eval(*e.a, sc);
        return l.truthy() ? eval(*e.b, sc) : l;
      }
      case ExprType::kOr: {
        Value l = eval(*e.a, sc);
        return l.truthy() ? l : eval(*e.b, sc);
      }
      case ExprType::kNot:
        return Value(!eval(*e.a, sc).truthy());
      case ExprType::kCond:
        if (eval(*e.a, sc).truthy()) return eval(*e.b, sc);
        return e.c ? eval(*e.c, sc)
                   : Value::undefined(
                         "the inline if-expression evaluated to false and no else "
                         "section was defined");
      case ExprType::kList:
      case ExprType::kTuple: {
        std::vector<Value> items;
        for (const auto& x : e.args) items.push_back(eval(*x, sc));
        return make_list(std::move(items), e.type == ExprType::kTuple);
      }
      case ExprType::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2)
          d->set(eval(*e.args[k], sc), eval(*e.args[k + 1], sc));
        return Value(d);
      }
    }
    return Value();
  }

 private:
  int call_depth_ = 0;
};

Value build_dict(CallArgs& a, DictKind kind) {
  auto d = std::make_shared<Dict>();
  d->kind = kind;
  for (const auto& src : a.pos) {
    if (src.is_mapping()) {
      for (const auto& [k, v] : src.dict()->items) d->set(k, v);
    } else {
      for (const auto& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) throw TemplateError("dictionary update sequence element has wrong length");
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : a.kw) {
    if (kind == DictKind::kNamespace && !k.empty() && k[0] == '_')
      throw TemplateError("chat templates cannot store underscore-prefixed attributes on a namespace");
    d->set(Value(k), v);
  }
  return Value(d);
}

Value global_range(CallArgs& a) {
  std::vector<int64_t> n;
  for (const auto& v : a.pos) {
    if (!v.is_int() && !v.is_bool())
      throw TemplateError("'" + v.type_name() + "' object cannot be interpreted as an integer");
    n.push_back(v.as_int());
  }
  int64_t start = 0, stop = 0, step = 1;
  if (n.size() == 1)
    stop = n[0];
  else if (n.size() == 2 || n.size() == 3)
    start = n[0], stop = n[1], step = n.size() == 3 ? n[2] : 1;
  else
    throw TemplateError("range expected 1 to 3 arguments");
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) >= kMaxRange)
      throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    out.emplace_back(i);
  }
  return make_list(std::move(out));
}

Value global_strftime_now(CallArgs& a) {
  if (a.pos.empty() || !a.pos[0].is_string()) throw TemplateError("strftime_now() needs a format string");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), a.pos[0].str().c_str(), &tm);
  return Value(std::string(buf, n));
}

ScopePtr make_globals() {
  auto g = std::make_shared<Scope>();
  g->vars["range"] = make_function("range", global_range);
  g->vars["dict"] = make_function("dict", [](CallArgs& a) { return build_dict(a, DictKind::kDict); });
  g->vars["namespace"] =
      make_function("namespace", [](CallArgs& a) { return build_dict(a, DictKind::kNamespace); });
  g->vars["raise_exception"] = make_function("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateError(a.pos.empty() ? std::string("raise_exception called") : a.pos[0].to_str());
  });
  g->vars["strftime_now"] = make_function("strftime_now", global_strftime_now);
  g->vars["joiner"] = make_function("joiner", [](CallArgs& a) {
    std::string sep = a.pos.empty() ? ", " : a.pos[0].to_str();
    auto used = std::make_shared<bool>(false);
    return make_function("joiner", [sep, used](CallArgs&) {
      bool first = !*used;
      *used = true;
      return Value(first ? std::string() : sep);
    });
  });
  g->vars["cycler"] = make_function("cycler", [](CallArgs& a) {
    // A cycler object: next() returns the items in turn; current is the item next() will return.
    auto d = std::make_shared<Dict>();
    d->kind = DictKind::kNamespace;
    auto items = std::make_shared<std::vector<Value>>(a.pos);
    auto pos = std::make_shared<size_t>(0);
    std::weak_ptr<Dict> self = d;  // the methods may outlive the object (`{% set n = cycler(1).next %}`)
    auto set_current = [self, items, pos] {
      if (auto obj = self.lock())
        obj->set(Value("current"), items->empty() ? Value::none() : (*items)[*pos % items->size()]);
    };
    set_current();
    d->set(Value("next"), make_function("next", [items, pos, set_current](CallArgs&) {
             if (items->empty()) throw TemplateError("cycler has no items");
             Value v = (*items)[(*pos)++ % items->size()];
             set_current();
             return v;
           }));
    d->set(Value("reset"), make_function("reset", [pos, set_current](CallArgs&) {
             *pos = 0;
             set_current();
             return Value::none();
           }));
    return Value(d);
  });
  return g;
}

}  // namespace

std::string render_body(const Body& body, const Vars& vars) {
  auto root = child(make_globals());
  for (const auto& [k, v] : vars) root->vars[k] = v;
  Interp interp;
  std::string out;
  interp.exec(body, root, out);
  return out;
}

}  // namespace tf::jinja

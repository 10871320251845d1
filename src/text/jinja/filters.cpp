#include "text/jinja/filters.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/methods.h"
#include "text/jinja/operators.h"
#include "text/jinja/tests.h"

namespace tf::jinja {
namespace {

bool bool_arg(const CallArgs& a, size_t idx, const char* name, bool def) {
  const Value* v = a.arg(idx, name);
  return v ? v->truthy() : def;
}

// jinja2's make_attrgetter: "a.b.0" walks items (getitem first, attribute second).
Value attr_path(const Value& v, const Value& path) {
  if (!path.is_string()) return get_item(v, path);
  Value cur = v;
  const std::string& p = path.str();
  size_t b = 0;
  for (;;) {
    size_t e = p.find('.', b);
    std::string part = p.substr(b, e == std::string::npos ? std::string::npos : e - b);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part));
    if (e == std::string::npos) return cur;
    b = e + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value(py_lower(v.str())) : v;
}

Value do_tojson(const Value& v, const CallArgs& a) {
  JsonDumpOptions opt;
  opt.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value* indent = a.arg(1, "indent");
  if (indent && !indent->is_none()) {
    opt.has_indent = true;
    if (indent->is_string()) {
      opt.indent_str = indent->str();
    } else {
      opt.indent_str = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    }
  }
  opt.item_sep = opt.has_indent ? "," : ", ";
  opt.key_sep = ": ";
  const Value* seps = a.arg(2, "separators");
  if (seps && seps->is_list() && seps->list()->items.size() == 2) {
    opt.item_sep = seps->list()->items[0].to_str();
    opt.key_sep = seps->list()->items[1].to_str();
  }
  opt.sort_keys = bool_arg(a, 3, "sort_keys", false);
  return Value(json_dumps(v, opt));
}

Value do_length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return Value(int64_t{0});
    case Kind::kString:
      return Value(static_cast<int64_t>(utf8_decode(v.str()).size()));
    case Kind::kList:
      if (!v.is_seq() && v.list()->iter.rfind("dict_", 0) != 0) break;
      return Value(static_cast<int64_t>(v.list()->items.size()));
    case Kind::kDict:
      if (v.is_mapping()) return Value(static_cast<int64_t>(v.dict()->items.size()));
      break;
    default:
      break;
  }
  throw TemplateError("object of type '" + v.type_name() + "' has no len()");
}

Value do_int(const Value& v, const CallArgs& a) {
  const Value* def = a.arg(0, "default");
  Value fallback = def ? *def : Value(int64_t{0});
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float())
    return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(v.as_double())) : fallback;
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value::none(), true, true);
    try {
      size_t used = 0;
      int64_t i = std::stoll(s, &used, 10);
      if (used == s.size()) return Value(i);
      double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return fallback;
}

Value do_float(const Value& v, const CallArgs& a) {
  const Value* def = a.arg(0, "default");
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    std::string s = py_strip(v.str(), Value::none(), true, true);
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return def ? *def : Value(0.0);
}

Value do_round(const Value& v, const CallArgs& a) {
  const Value* p = a.arg(0, "precision");
  int64_t precision = p ? p->as_int() : 0;
  const Value* m = a.arg(1, "method");
  std::string method = m ? m->to_str() : "common";
  if (!v.is_number()) throw TemplateError("round() needs a number, not " + v.type_name());
  if (method == "common" && !v.is_float()) return Value(v.as_int());
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::nearbyint(x);
  return Value(r / scale);
}

Value do_sort(const Value& v, const CallArgs& a) {
  bool reverse = bool_arg(a, 0, "reverse", false), cs = bool_arg(a, 1, "case_sensitive", false);
  const Value* attr = a.arg(2, "attribute");
  std::vector<Value> items = iterate(v);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& it : items) keyed.emplace_back(sort_key(attr ? attr_path(it, *attr) : it, cs), it);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare_values(y.first, x.first) < 0 : compare_values(x.first, y.first) < 0;
  });
  std::vector<Value> out;
  for (auto& k : keyed) out.push_back(k.second);
  return make_list(std::move(out));
}

Value do_dictsort(const Value& v, const CallArgs& a) {
  if (!v.is_mapping()) throw TemplateError("dictsort filter needs a mapping");
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* by = a.arg(1, "by");
  bool by_value = by && by->to_str() == "value";
  bool reverse = bool_arg(a, 2, "reverse", false);
  std::vector<Value> items;
  for (const auto& [k, val] : v.dict()->items) items.push_back(make_list({k, val}, true));
  size_t idx = by_value ? 1 : 0;
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    Value kx = sort_key(x.list()->items[idx], cs), ky = sort_key(y.list()->items[idx], cs);
    return reverse ? compare_values(ky, kx) < 0 : compare_values(kx, ky) < 0;
  });
  return make_list(std::move(items));
}

Value do_unique(const Value& v, const CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attr = a.arg(1, "attribute");
  std::vector<Value> seen, out;
  for (const auto& it : iterate(v)) {
    Value key = sort_key(attr ? attr_path(it, *attr) : it, cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(key); })) continue;
    seen.push_back(key);
    out.push_back(it);
  }
  return make_iter(std::move(out));
}

Value do_minmax(const Value& v, const CallArgs& a, bool is_max) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  const Value* attr = a.arg(1, "attribute");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("no items for " + std::string(is_max ? "max" : "min"));
  size_t best = 0;
  for (size_t k = 1; k < items.size(); ++k) {
    Value kk = sort_key(attr ? attr_path(items[k], *attr) : items[k], cs);
    Value kb = sort_key(attr ? attr_path(items[best], *attr) : items[best], cs);
    int c = compare_values(kk, kb);
    if (is_max ? c > 0 : c < 0) best = k;
  }
  return items[best];
}

Value do_indent(const Value& v, const CallArgs& a) {
  const Value* w = a.arg(0, "width");
  std::string ind = !w ? "    "
                    : w->is_string()
                        ? w->str()
                        : std::string(static_cast<size_t>(std::clamp<int64_t>(w->as_int(), 0, 1024)), ' ');
  bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
  std::string s = v.to_str() + "\n";
  std::vector<std::string> lines;
  size_t b = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '\n' || s[k] == '\r') {
      lines.push_back(s.substr(b, k - b));
      if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
      b = k + 1;
    }
  }
  std::string rv = lines.empty() ? "" : lines[0];
  for (size_t k = 1; k < lines.size(); ++k)
    rv += "\n" + (blank || !lines[k].empty() ? ind + lines[k] : lines[k]);
  return Value(first ? ind + rv : rv);
}

Value do_select(const Value& v, const CallArgs& a, bool with_attr, bool keep) {
  std::vector<Value> out;
  size_t first = with_attr ? 1 : 0;
  const Value* attr = with_attr ? a.arg(0, "attribute") : nullptr;
  std::string test = a.pos.size() > first ? a.pos[first].to_str() : "";
  CallArgs targs;
  for (size_t k = first + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
  if (!v.truthy()) return make_iter({});  // jinja2 guards with `if seq:`
  for (const auto& it : iterate(v)) {
    Value x = attr ? attr_path(it, *attr) : it;
    bool ok = test.empty() ? x.truthy() : apply_test(test, x, targs);
    if (ok == keep) out.push_back(it);
  }
  return make_iter(std::move(out));
}

Value do_map(const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  const Value* attr = nullptr;
  const Value* def = nullptr;
  for (const auto& [k, val] : a.kw) {
    if (k == "attribute") attr = &val;
    if (k == "default") def = &val;
  }
  if (!v.truthy()) return make_iter({});  // jinja2 guards with `if value:`
  if (attr) {
    for (const auto& it : iterate(v)) {
      Value x = attr_path(it, *attr);
      out.push_back(x.is_undefined() && def ? *def : x);
    }
    return make_iter(std::move(out));
  }
  if (a.pos.empty()) throw TemplateError("map requires a filter argument");
  std::string filter = a.pos[0].to_str();
  CallArgs fargs;
  fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
  fargs.kw = a.kw;
  for (const auto& it : iterate(v)) {
    CallArgs copy = fargs;
    out.push_back(apply_filter(filter, it, copy));
  }
  return make_iter(std::move(out));
}

Value do_join(const Value& v, const CallArgs& a) {
  const Value* d = a.arg(0, "d");
  const Value* attr = a.arg(1, "attribute");
  std::string sep = d ? d->to_str() : "", out;
  bool first = true;
  for (const auto& it : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += (attr ? attr_path(it, *attr) : it).to_str();
  }
  return Value(out);
}

Value do_batch(const Value& v, const CallArgs& a) {
  const Value* n = a.arg(0, "linecount");
  const Value* fill = a.arg(1, "fill_with");
  int64_t count = n ? n->as_int() : 1;
  std::vector<Value> out, cur;
  for (const auto& it : iterate(v)) {
    cur.push_back(it);
    if (static_cast<int64_t>(cur.size()) == count) out.push_back(make_list(std::move(cur))), cur.clear();
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < count) cur.push_back(*fill);
    out.push_back(make_list(std::move(cur)));
  }
  return make_iter(std::move(out));
}

Value do_truncate(const Value& v, const CallArgs& a) {
  auto cps = utf8_decode(v.to_str());
  const Value* len = a.arg(0, "length");
  const Value* end_v = a.arg(2, "end");
  const Value* leeway_v = a.arg(3, "leeway");
  int64_t length = len ? len->as_int() : 255,
          leeway = leeway_v && !leeway_v->is_none() ? leeway_v->as_int() : 5;
  std::string end = end_v ? end_v->to_str() : "...";
  int64_t end_len = static_cast<int64_t>(utf8_decode(end).size());
  if (length < end_len) throw TemplateError("expected length >= " + std::to_string(end_len));
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value(utf8_encode(cps));
  std::string head = utf8_encode(cps, 0, static_cast<size_t>(length - end_len));
  if (bool_arg(a, 1, "killwords", false)) return Value(head + end);
  size_t space = head.rfind(' ');
  return Value((space == std::string::npos ? head : head.substr(0, space)) + end);
}

Value do_striptags(const Value& v) {
  std::string s = v.to_str(), text;
  for (size_t k = 0; k < s.size();) {  // drop <!-- comments --> and <tags>
    if (s.compare(k, 4, "<!--") == 0) {
      size_t e = s.find("-->", k + 4);
      if (e != std::string::npos) {
        k = e + 3;
        continue;
      }
    }
    if (s[k] == '<') {
      size_t e = s.find('>', k + 1);
      if (e != std::string::npos) {
        k = e + 1;
        continue;
      }
    }
    text += s[k++];
  }
  std::string joined;
  for (const auto& w : py_split(text, Value::none(), -1)) joined += (joined.empty() ? "" : " ") + w;
  for (auto [from, to] : {std::pair{"&lt;", "<"},
                          {"&gt;", ">"},
                          {"&quot;", "\""},
                          {"&#34;", "\""},
                          {"&#39;", "'"},
                          {"&amp;", "&"}})
    joined = py_replace(joined, from, to, -1);
  return Value(joined);
}

Value do_slice(const Value& v, const CallArgs& a) {
  std::vector<Value> seq = iterate(v);
  const Value* n = a.arg(0, "slices");
  const Value* fill = a.arg(1, "fill_with");
  int64_t slices = n ? n->as_int() : 1;
  if (slices <= 0) throw TemplateError("slice count must be positive");
  int64_t length = static_cast<int64_t>(seq.size()), per = length / slices, extra = length % slices,
          offset = 0;
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    int64_t start = offset + k * per;
    if (k < extra) ++offset;
    int64_t end = offset + (k + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (fill && !fill->is_none() && k >= extra) part.push_back(*fill);
    out.push_back(make_list(std::move(part)));
  }
  return make_iter(std::move(out));
}

Value do_sum(const Value& v, const CallArgs& a) {
  const Value* attr = a.arg(0, "attribute");
  const Value* start = a.arg(1, "start");
  Value acc = start ? *start : Value(int64_t{0});
  for (const auto& it : iterate(v)) acc = binary_op("+", acc, attr ? attr_path(it, *attr) : it);
  return acc;
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, CallArgs& a) {
  if (name == "tojson") return do_tojson(v, a);
  if (name == "length" || name == "count") return do_length(v);
  if (name == "string") return v.is_string() ? v : Value(v.to_str());
  if (name == "safe") return v.is_safe() ? v : Value::markup(v.to_str());
  if (name == "forceescape") return Value::markup(html_escape(v.to_str()));
  if (name == "e" || name == "escape") return v.is_safe() ? v : Value::markup(html_escape(v.to_str()));
  if (name == "trim")
    return Value(py_strip(v.to_str(), a.arg(0, "chars") ? *a.arg(0, "chars") : Value::none(), true, true));
  if (name == "upper") return Value(py_upper(v.to_str()));
  if (name == "lower") return Value(py_lower(v.to_str()));
  if (name == "capitalize") return Value(py_capitalize(v.to_str()));
  if (name == "title") return Value(py_title(v.to_str()));
  if (name == "replace") {
    const Value* old = a.arg(0, "old");
    const Value* repl = a.arg(1, "new");
    const Value* cnt = a.arg(2, "count");
    if (!old || !repl) throw TemplateError("replace filter needs old and new");
    return Value(
        py_replace(v.to_str(), old->to_str(), repl->to_str(), cnt && !cnt->is_none() ? cnt->as_int() : -1));
  }
  if (name == "default" || name == "d") {
    const Value* def = a.arg(0, "default_value");
    bool boolean = bool_arg(a, 1, "boolean", false);
    if (v.is_undefined() || (boolean && !v.truthy())) return def ? *def : Value("");
    return v;
  }
  if (name == "items") {
    if (v.is_undefined()) return make_iter({});
    if (!v.is_mapping()) throw TemplateError("can only get item pairs from a mapping");
    std::vector<Value> out;
    for (const auto& [k, val] : v.dict()->items) out.push_back(make_list({k, val}, true));
    return make_iter(std::move(out));
  }
  if (name == "list") return make_list(iterate(v));
  if (name == "first" || name == "last") {
    std::vector<Value> items = iterate(v);
    if (items.empty()) return Value::undefined("no first item, sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") return do_join(v, a);
  if (name == "int") return do_int(v, a);
  if (name == "float") return do_float(v, a);
  if (name == "abs") {
    if (!v.is_number()) throw TemplateError("bad operand type for abs(): '" + v.type_name() + "'");
    return v.is_float() ? Value(std::fabs(v.as_double()))
                        : Value(static_cast<int64_t>(std::llabs(v.as_int())));
  }
  if (name == "round") return do_round(v, a);
  if (name == "sort") return do_sort(v, a);
  if (name == "dictsort") return do_dictsort(v, a);
  if (name == "unique") return do_unique(v, a);
  if (name == "min" || name == "max") return do_minmax(v, a, name == "max");
  if (name == "sum") return do_sum(v, a);
  if (name == "reverse") {
    if (v.is_string()) return slice_value(v, Value::none(), Value::none(), Value(int64_t{-1}));
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    return make_iter(std::move(items), "list_reverseiterator");
  }
  if (name == "indent") return do_indent(v, a);
  if (name == "select" || name == "reject") return do_select(v, a, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return do_select(v, a, true, name == "selectattr");
  if (name == "map") return do_map(v, a);
  if (name == "batch") return do_batch(v, a);
  if (name == "attr") return get_attr(v, a.arg(0, "name") ? a.arg(0, "name")->to_str() : "");
  if (name == "pprint") return Value(v.repr());
  if (name == "center") {
    const Value* w = a.arg(0, "width");
    CallArgs ca;
    ca.pos.push_back(w ? *w : Value(int64_t{80}));
    bool found = false;
    Value m = find_method(Value(v.to_str()), "center", &found);
    return m.function()->fn(ca);
  }
  if (name == "format") {
    std::vector<Value> items = a.pos;
    return Value(percent_format(v.to_str(), make_list(std::move(items), true)));
  }
  if (name == "truncate") return do_truncate(v, a);
  if (name == "striptags") return do_striptags(v);
  if (name == "slice") return do_slice(v, a);
  if (name == "wordcount") {
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(v.to_str())) {
      bool w = c == '_' || (c < 128 ? isalnum(static_cast<int>(c)) != 0 : !is_py_space(c));
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value(n);
  }
  if (name == "filesizeformat" || name == "groupby" || name == "random" || name == "urlencode" ||
      name == "urlize" || name == "wordwrap" || name == "xmlattr")
    throw TemplateError("the jinja2 filter '" + name + "' is not supported by this renderer");
  throw TemplateError("no filter named '" + name + "'");
}

}  // namespace tf::jinja

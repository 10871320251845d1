// Unit tests of the Jinja renderer and ChatTemplate, independent of Python. Each expected string is what
// jinja2 3.1.6 renders in transformers' environment (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, loopcontrols, transformers' tojson); the error cases raise there too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "text/chat_template.h"
#include "text/jinja/template.h"

namespace tf::jinja {
namespace {

std::string render(const std::string& src, const char* vars_json) {
  Vars vars;
  auto j = nlohmann::ordered_json::parse(vars_json);
  for (auto it = j.begin(); it != j.end(); ++it) vars.emplace_back(it.key(), from_json(it.value()));
  return Template(src).render(vars);
}

void expect_syntax_error(const std::string& src, int line) {
  try {
    Template t(src);
    ADD_FAILURE() << "no syntax error for " << src;
  } catch (const TemplateError& e) {
    EXPECT_NE(std::string(e.what()).find("line " + std::to_string(line) + ":"), std::string::npos)
        << e.what();
  }
}

TEST(JinjaRender, Text) {
  EXPECT_EQ(render("hello", R"J({})J"), "hello");
}

TEST(JinjaRender, TrimBlocks) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nend", R"J({})J"), "yes\nend");
}

TEST(JinjaRender, LstripBlocks) {
  EXPECT_EQ(render("a\n    {% if true %}\n  b\n    {% endif %}\nc", R"J({})J"), "a\n  b\nc");
}

TEST(JinjaRender, WhitespaceControl) {
  EXPECT_EQ(render("a  \n {{- 'x' -}} \n  b {%- if true %} c {% endif -%}   d", R"J({})J"), "axb c d");
}

TEST(JinjaRender, PlusDisablesLstrip) {
  EXPECT_EQ(render("a\n  {%+ if true %}x{% endif %}", R"J({})J"), "a\n  x");
}

TEST(JinjaRender, Comments) {
  EXPECT_EQ(render("a {# comment #}b\n{# line #}\nc {#- strip -#}   d", R"J({})J"), "a b\ncd");
}

TEST(JinjaRender, Raw) {
  EXPECT_EQ(render("{% raw %}{{ not parsed }}{% endraw %}", R"J({})J"), "{{ not parsed }}");
}

TEST(JinjaRender, TrailingNewlineDropped) {
  EXPECT_EQ(render("x\n", R"J({})J"), "x");
}

TEST(JinjaRender, CrLf) {
  EXPECT_EQ(render("a\r\n{% if true %}\r\nb\r\n{% endif %}\r\n", R"J({})J"), "a\nb\n");
}

TEST(JinjaRender, Literals) {
  EXPECT_EQ(render("{{ 'a\\tb\\n' }}|{{ \"it's\" }}|{{ 42 }}|{{ 1.5 }}|{{ 1_000 }}|{{ true }}{{ True }}{{ "
                   "none }}{{ None }}",
                   R"J({})J"),
            "a\tb\n|it's|42|1.5|1000|TrueTrueNoneNone");
}

TEST(JinjaRender, PrintRepr) {
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.0, [], {}] }}|{{ {'k': (1,), 'q': \"it's\"} }}|{{ (1, 2) }}",
                   R"J({})J"),
            "[1, 'a', None, True, 1.0, [], {}]|{'k': (1,), 'q': \"it's\"}|(1, 2)");
}

TEST(JinjaRender, FloatRepr) {
  EXPECT_EQ(
      render("{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 1/3 }} {{ 2.0 * 3 }} {{ 10 / 4 }} {{ 123456789.0 }}",
             R"J({})J"),
      "0.30000000000000004 1e+16 1e-05 0.3333333333333333 6.0 2.5 123456789.0");
}

TEST(JinjaRender, Arithmetic) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 "
                   "// 2 }} {{ 1 + 2 * 3 - 4 }}",
                   R"J({})J"),
            "3 -4 2 -2 1024 0.5 3.0 3");
}

TEST(JinjaRender, Concat) {
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ [1] }}|{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 'x' + 'y' }}", R"J({})J"),
            "a1None[1]|ababab|[1, 2]|xy");
}

TEST(JinjaRender, Compare) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ [1,2] == [1,2] }} {{ 1 == 1.0 }} {{ "
                   "(1,) == [1] }} {{ 'b' in 'abc' }} {{ 4 not in [1,2] }} {{ 'k' in {'k': 1} }}",
                   R"J({})J"),
            "True False True True True False True True True");
}

TEST(JinjaRender, AndOrValues) {
  EXPECT_EQ(
      render("{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or [] }}|{{ not 0 }}", R"J({})J"),
      "x|b||[]|True");
}

TEST(JinjaRender, Ternary) {
  EXPECT_EQ(render("{{ 'y' if 1 else 'n' }}|{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}",
                   R"J({})J"),
            "y||b");
}

TEST(JinjaRender, Slicing) {
  EXPECT_EQ(render("{{ 'hello'[1:3] }}|{{ 'hello'[::-1] }}|{{ 'hello'[-2:] }}|{{ [1,2,3,4,5][::2] }}|{{ "
                   "[1,2,3][-1] }}|{{ 'héllo'[1] }}|{{ [1,2,3][5:] }}|{{ 'abc'[:-1] }}",
                   R"J({})J"),
            "el|olleh|lo|[1, 3, 5]|3|é|[]|ab");
}

TEST(JinjaRender, AttributeAndItem) {
  EXPECT_EQ(render("{{ d.a }}|{{ d['a'] }}|{{ d.missing }}|{{ l.0 }}|{{ l[1] }}|{{ d.items() | list }}",
                   R"J({"d": {"a": 1, "b": 2}, "l": ["x", "y"]})J"),
            "1|1||x|y|[('a', 1), ('b', 2)]");
}

TEST(JinjaRender, StringMethods) {
  EXPECT_EQ(render("{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a'.lstrip() }}|{{ 'a '.rstrip() "
                   "}}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ "
                   "'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aBc'.upper() }}{{ "
                   "'aBc'.lower() }}|{{ 'hello world'.title() }}|{{ 'a-a'.replace('a', 'b') }}|{{ "
                   "'abcb'.find('b') }}{{ 'abc'.find('z') }}|{{ '{} and {}'.format(1, 'x') }}|{{ "
                   "'ab'.count('a') }}|{{ ','.join(['a','b']) }}|{{ 'a\\nb'.splitlines() }}",
                   R"J({})J"),
            "x|a|a|a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|True|True|ABCabc|Hello World|b-b|1-1|1 and "
            "x|1|a,b|['a', 'b']");
}

TEST(JinjaRender, DictMethods) {
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys() | list }}{{ "
                   "d.values() | list }}{{ d.get('a') }}{{ d.get('z') }}{{ d.get('z', 5) }}",
                   R"J({"d": {"a": 1, "b": 2}})J"),
            "a=1;b=2;['a', 'b'][1, 2]1None5");
}

TEST(JinjaRender, ForLoopVars) {
  EXPECT_EQ(render("{% for x in ['a','b','c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
                   "loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
                   R"J({})J"),
            "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|");
}

TEST(JinjaRender, ForPrevNextCycle) {
  EXPECT_EQ(render("{% for x in [1,2,3] %}[{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}{{ "
                   "loop.cycle('o','e') }}]{% endfor %}",
                   R"J({})J"),
            "[<1>2o][1<2>3e][2<3>o]");
}

TEST(JinjaRender, ForElseAndFilter) {
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in range(10) if x is odd %}{{ x "
                   "}}{{ loop.length }},{% endfor %}",
                   R"J({})J"),
            "empty|15,35,55,75,95,");
}

TEST(JinjaRender, ForUnpackAndDict) {
  EXPECT_EQ(render("{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}|{% for k in {'x': 1, 'y': 2} "
                   "%}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}",
                   R"J({})J"),
            "37|xy|[h][é]");
}

TEST(JinjaRender, BreakContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break "
                   "%}{% endif %}{{ x }}{% endfor %}",
                   R"J({})J"),
            "0134");
}

TEST(JinjaRender, RecursiveLoop) {
  EXPECT_EQ(
      render(
          "{% for n in tree recursive %}<{{ n.name }}{% if n.children %}:{{ loop(n.children) }}{% endif "
          "%}@{{ loop.depth }}>{% endfor %}",
          R"J({"tree": [{"name": "a", "children": [{"name": "b", "children": []}, {"name": "c"}]}, {"name": "d"}]})J"),
      "<a:<b@2><c@2>@1><d@1>");
}

TEST(JinjaRender, LoopScoping) {
  EXPECT_EQ(render("{% set c = 0 %}{% for i in range(3) %}{% set c = c + 1 %}{{ c }}{% endfor %}{{ c }}",
                   R"J({})J"),
            "1110");
}

TEST(JinjaRender, IfDoesNotScope) {
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}", R"J({})J"), "5");
}

TEST(JinjaRender, Namespace) {
  EXPECT_EQ(render("{% set ns = namespace(n=0, items=[]) %}{% for i in range(3) %}{% set ns.n = ns.n + i "
                   "%}{% endfor %}{{ ns.n }}|{{ ns }}",
                   R"J({})J"),
            "3|<Namespace {'n': 3, 'items': []}>");
}

TEST(JinjaRender, SetTupleAndBlock) {
  EXPECT_EQ(render("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set blk %}  inner {{ a }}  {% endset %}[{{ blk "
                   "}}]|{% set up | upper %}shout{% endset %}{{ up }}",
                   R"J({})J"),
            "12|[  inner 1  ]|SHOUT");
}

TEST(JinjaRender, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bo') "
                   "}} {{ greet('Al', punct='?') }} {{ greet(name='Cy') }}",
                   R"J({})J"),
            "Hi Bo! Hi Al? Hi Cy!");
}

TEST(JinjaRender, MacroVarargsKwargs) {
  EXPECT_EQ(render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
                   R"J({})J"),
            "1(2, 3){'k': 4}");
}

TEST(JinjaRender, CallBlock) {
  EXPECT_EQ(render("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call "
                   "wrap('b') %}bold{% endcall %}|{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% "
                   "endfor %}{% endmacro %}{% call(x) each([1, 2]) %}({{ x }}){% endcall %}",
                   R"J({})J"),
            "<b>bold</b>|(1)(2)");
}

TEST(JinjaRender, FilterBlock) {
  EXPECT_EQ(render("{% filter upper %}hello {{ 'x' }}{% endfilter %}", R"J({})J"), "HELLO X");
}

TEST(JinjaRender, MacroSeesLaterGlobals) {
  EXPECT_EQ(render("{% macro show() %}{{ late }}{% endmacro %}{% set late = 'L' %}{{ show() }}", R"J({})J"),
            "L");
}

TEST(JinjaRender, StringFilters) {
  EXPECT_EQ(render("{{ '  hi  ' | trim }}|{{ 'xhix' | trim('x') }}|{{ 'ab' | upper }}|{{ 'AB' | lower }}|{{ "
                   "'hello world' | capitalize }}|{{ 'hello world' | title }}|{{ 'aaa' | replace('a', 'b', "
                   "2) }}|{{ 'one two  three' | wordcount }}|{{ '<a&b>' | e }}|{{ 'x' | safe }}",
                   R"J({})J"),
            "hi|hi|AB|ab|Hello world|Hello World|bba|3|&lt;a&amp;b&gt;|x");
}

TEST(JinjaRender, SequenceFilters) {
  EXPECT_EQ(render("{{ [3, 1, 2] | length }}{{ 'héllo' | count }}|{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last "
                   "}}|{{ [3, 1, 2] | sort }}|{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 2] | sort(reverse=true) "
                   "}}|{{ [1, 2, 1, 3] | unique | list }}|{{ [1, 2, 3] | reverse | list }}|{{ 'abc' | "
                   "reverse }}|{{ [1, 2, 3] | join('-') }}|{{ 'abc' | list }}|{{ [1, 2, 3, 4, 5] | batch(2) "
                   "| list }}|{{ [1, 5, 3] | max }}{{ [4, 2] | min }}{{ [1, 2, 3] | sum }}",
                   R"J({})J"),
            "35|32|[1, 2, 3]|['A', 'b', 'c']|[3, 2, 1]|[1, 2, 3]|[3, 2, 1]|cba|1-2-3|['a', 'b', 'c']|[[1, "
            "2], [3, 4], [5]]|526");
}

TEST(JinjaRender, DictFilters) {
  EXPECT_EQ(render("{{ d | items | list }}|{{ d | dictsort }}|{{ d | dictsort(by='value', reverse=true) "
                   "}}|{{ d | length }}",
                   R"J({"d": {"b": 2, "a": 3, "C": 1}})J"),
            "[('b', 2), ('a', 3), ('C', 1)]|[('a', 3), ('b', 2), ('C', 1)]|[('a', 3), ('b', 2), ('C', 1)]|3");
}

TEST(JinjaRender, SelectMap) {
  EXPECT_EQ(
      render(
          "{{ users | selectattr('active') | map(attribute='name') | join(',') }}|{{ users | "
          "rejectattr('active') | map(attribute='name') | list }}|{{ users | selectattr('age', 'gt', 30) | "
          "map(attribute='name') | list }}|{{ [1, 2, 3, 4] | select('even') | list }}|{{ [1, 2, 3, 4] | "
          "reject('divisibleby', 3) | list }}|{{ ['a', 'b'] | map('upper') | list }}|{{ users | "
          "map(attribute='nick', default='?') | list }}|{{ users | selectattr('name', 'equalto', 'bo') | "
          "list | length }}",
          R"J({"users": [{"name": "al", "active": true, "age": 40}, {"name": "bo", "active": false, "age": 20}]})J"),
      "al|['bo']|['al']|[2, 4]|[1, 2, 4]|['A', 'B']|['?', '?']|1");
}

TEST(JinjaRender, NumberFilters) {
  EXPECT_EQ(render("{{ '42' | int + 1 }}|{{ '4.7' | int }}|{{ 'x' | int }}|{{ 'x' | int(7) }}|{{ 3.9 | int "
                   "}}|{{ '2.5' | float }}|{{ 2 | float }}|{{ -3 | abs }}|{{ 2.5 | round }}|{{ 3.14159 | "
                   "round(2) }}|{{ 2.1 | round(method='ceil') }}|{{ 7 | round }}",
                   R"J({})J"),
            "43|4|0|7|3|2.5|2.0|3|2.0|3.14|3.0|7");
}

TEST(JinjaRender, DefaultFilter) {
  EXPECT_EQ(render("{{ missing | default('dflt') }}|{{ '' | default('e') }}|{{ '' | default('e', true) }}|{{ "
                   "none | d('n') }}|{{ 0 | default(5, boolean=true) }}",
                   R"J({})J"),
            "dflt||e|None|5");
}

TEST(JinjaRender, StringAndListFilters) {
  EXPECT_EQ(render("{{ 12 | string }}|{{ [1, 'a'] | string }}|{{ none | string }}|{{ 'a\\nb\\n\\nc' | "
                   "indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}|{{ 'x' | center(5) }}|",
                   R"J({})J"),
            "12|[1, 'a']|None|a\n  b\n\n  c|  a\n  b|  x  |");
}

TEST(JinjaRender, ToJson) {
  EXPECT_EQ(render("{{ v | tojson }}|{{ v | tojson(indent=2) }}|{{ v | tojson(separators=(',', ':')) }}|{{ v "
                   "| tojson(sort_keys=true) }}|{{ 'é\"\\n' | tojson }}|{{ 'é' | tojson(ensure_ascii=true) "
                   "}}|{{ [] | tojson(indent=2) }}|{{ 1.0 | tojson }}",
                   R"J({"v": {"b": [1, 2.5, null, true], "a": "x"}})J"),
            "{\"b\": [1, 2.5, null, true], \"a\": \"x\"}|{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    "
            "true\n  ],\n  \"a\": \"x\"\n}|{\"b\":[1,2.5,null,true],\"a\":\"x\"}|{\"a\": \"x\", \"b\": [1, "
            "2.5, null, true]}|\"é\\\"\\n\"|\"\\u00e9\"|[]|1.0");
}

TEST(JinjaRender, Tests) {
  EXPECT_EQ(
      render("{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string "
             "}}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ true is true "
             "}}{{ false is false }}{{ {} is mapping }}{{ [] is iterable }}{{ 'a' is sequence }}{{ 3 is odd "
             "}}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is eq 2 }}{{ 2 is equalto 3 }}{{ 2 is in [1, 2] "
             "}}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ 2 is gt 1 }}{{ 1 is not none }}",
             R"J({"x": 1})J"),
      "TrueFalseTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrueTrue");
}

TEST(JinjaRender, UndefinedSemantics) {
  EXPECT_EQ(
      render("[{{ nothing }}]{{ nothing | length }}{{ nothing is defined }}{% for x in nothing %}x{% endfor "
             "%}{% if not nothing %}falsy{% endif %}{{ nothing ~ 'c' }}{{ d.missing is defined }}",
             R"J({"d": {}})J"),
      "[]0FalsefalsycFalse");
}

TEST(JinjaRender, GlobalsRangeDict) {
  EXPECT_EQ(render("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}|{{ "
                   "dict(a=1, b='x') }}|{{ dict([('k', 2)]) }}",
                   R"J({})J"),
            "[0, 1, 2][1, 3, 5][3, 2, 1]|{'a': 1, 'b': 'x'}|{'k': 2}");
}

TEST(JinjaRender, NamedTemplateVars) {
  EXPECT_EQ(
      render("{{ bos_token }}{{ messages[0].content }}{{ add_generation_prompt }}",
             R"J({"bos_token": "<s>", "messages": [{"content": "hi"}], "add_generation_prompt": true})J"),
      "<s>hiTrue");
}

TEST(JinjaRender, StringEscapesInLiterals) {
  EXPECT_EQ(render("{{ '\\u00e9\\x41\\\\' }}|{{ \"tab\\there\" }}|{{ 'a' 'b' }}", R"J({})J"),
            "éA\\|tab\there|ab");
}

TEST(JinjaRender, UnicodeCase) {
  EXPECT_EQ(
      render("{{ 'ÉCOLE straße' | lower }}|{{ 'école' | upper }}|{{ 'élan vital' | title }}", R"J({})J"),
      "école straße|ÉCOLE|Élan Vital");
}

TEST(JinjaRender, FloatInts) {
  EXPECT_EQ(render("{{ 3 / 1 }}|{{ 2 * 1.5 }}|{{ 10 // 2.5 }}|{{ -0.0 }}|{{ 1e100 }}|{{ 100000000000000000.0 "
                   "}}|{{ 0.0001 }}|{{ 0.00001234 }}",
                   R"J({})J"),
            "3.0|3.0|4.0|-0.0|1e+100|1e+17|0.0001|1.234e-05");
}

// Python: TemplateError: bad role
TEST(JinjaErrors, RaiseException) {
  EXPECT_THROW(render("{{ raise_exception('bad role') }}", R"J({})J"), TemplateError);
}

// Python: UndefinedError: 'nothing' is undefined
TEST(JinjaErrors, UndefinedAttributeOfUndefined) {
  EXPECT_THROW(render("{{ nothing.attr }}", R"J({})J"), TemplateError);
}

// Python: UndefinedError: 'nothing' is undefined
TEST(JinjaErrors, UndefinedCall) {
  EXPECT_THROW(render("{{ nothing() }}", R"J({})J"), TemplateError);
}

// Python: SecurityError: access to attribute 'append' of 'list' object is unsafe.
TEST(JinjaErrors, SandboxListAppend) {
  EXPECT_THROW(render("{% set l = [] %}{{ l.append(1) }}", R"J({})J"), TemplateError);
}

// Python: SecurityError: access to attribute 'update' of 'dict' object is unsafe.
TEST(JinjaErrors, SandboxDictUpdate) {
  EXPECT_THROW(render("{% set d = {} %}{{ d.update({'a': 1}) }}", R"J({})J"), TemplateError);
}

// Python: TemplateRuntimeError: cannot assign attribute on non-namespace object
TEST(JinjaErrors, NamespaceOnly) {
  EXPECT_THROW(render("{% set d = {} %}{% set d.x = 1 %}", R"J({})J"), TemplateError);
}

// Python: TypeError: can only concatenate str (not "int") to str
TEST(JinjaErrors, ArithmeticTypeError) {
  EXPECT_THROW(render("{{ 'a' + 1 }}", R"J({})J"), TemplateError);
}

// Python: UndefinedError: 'nothing' is undefined
TEST(JinjaErrors, UndefinedArithmetic) {
  EXPECT_THROW(render("{{ nothing + 1 }}", R"J({})J"), TemplateError);
}

// Python: TypeError: Object of type Undefined is not JSON serializable
TEST(JinjaErrors, ToJsonUndefined) {
  EXPECT_THROW(render("{{ nothing | tojson }}", R"J({})J"), TemplateError);
}

// Python: TemplateAssertionError: No filter named 'nosuchfilter'.
TEST(JinjaErrors, UnknownFilter) {
  EXPECT_THROW(render("{{ 1 | nosuchfilter }}", R"J({})J"), TemplateError);
}

// Python: ZeroDivisionError: integer division or modulo by zero
TEST(JinjaErrors, DivByZero) {
  EXPECT_THROW(render("{{ 1 // 0 }}", R"J({})J"), TemplateError);
}

// Python: TypeError: '<' not supported between instances of 'int' and 'str'
TEST(JinjaErrors, CompareTypes) {
  EXPECT_THROW(render("{{ 1 < 'a' }}", R"J({})J"), TemplateError);
}

// Python: TypeError: Object of type generator is not JSON serializable
TEST(JinjaErrors, GeneratorToJson) {
  EXPECT_THROW(render("{{ [1] | map('string') | tojson }}", R"J({})J"), TemplateError);
}

// Python: TypeError: object of type 'generator' has no len()
TEST(JinjaErrors, LengthOfGenerator) {
  EXPECT_THROW(render("{{ [1] | select | length }}", R"J({})J"), TemplateError);
}

// Python: OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).
TEST(JinjaErrors, RangeTooBig) {
  EXPECT_THROW(render("{{ range(200000) | length }}", R"J({})J"), TemplateError);
}

// Python: TemplateSyntaxError: Unexpected end of template. Jinja was looking for the following tags: 'elif'
// or 'else' or  (line 3)
TEST(JinjaSyntax, UnclosedIf) {
  expect_syntax_error("line1\n{% if x %}\nbody", 3);
}

// Python: TemplateSyntaxError: unexpected 'end of print statement' (line 3)
TEST(JinjaSyntax, BadExpression) {
  expect_syntax_error("a\nb\n{{ 1 + }}", 3);
}

// Python: TemplateSyntaxError: unexpected end of template, expected 'end of print statement'. (line 1)
TEST(JinjaSyntax, UnclosedVar) {
  expect_syntax_error("{{ x ", 1);
}

// Python: TemplateSyntaxError: Encountered unknown tag 'endfor'. (line 2)
TEST(JinjaSyntax, StrayEnd) {
  expect_syntax_error("x\n{% endfor %}", 2);
}

TEST(JinjaSyntax, UnknownFilterOrTestFailsAtParseUnlessConditional) {
  // jinja2: TemplateAssertionError at compile time, except inside if statements / conditional expressions.
  expect_syntax_error("x\n{{ 1 | nosuch }}", 2);
  expect_syntax_error("{% for x in [1] %}{% if true %}{% endif %}\n{{ x is nosuch }}{% endfor %}", 2);
  EXPECT_EQ(Template("x{% if false %}{{ 1 | nosuch }}{% endif %}").render({}), "x");
  EXPECT_EQ(Template("x{{ (1 | nosuch) if false else 'y' }}").render({}), "xy");
  EXPECT_THROW(Template("{% if true %}{{ 1 | nosuch }}{% endif %}").render({}), TemplateError);
}

TEST(JinjaRender, JoinerCyclerPartition) {
  EXPECT_EQ(Template("{% set j = joiner('|') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}").render({}),
            "a|b|c");
  EXPECT_EQ(
      Template("{% set c = cycler('o', 'e') %}{{ c.next() }}{{ c.next() }}{{ c.current }}{{ c.next() }}")
          .render({}),
      "oeoo");
  EXPECT_EQ(Template("{{ 'k=v=w'.partition('=') }}{{ 'k=v=w'.rpartition('=') }}{{ 'x'.partition('=') }}")
                .render({}),
            "('k', '=', 'v=w')('k=v', '=', 'w')('x', '', '')");
}

TEST(JinjaRender, TruncateStriptagsSlice) {  // expectations from jinja2 3.1.6
  EXPECT_EQ(
      Template("{{ 'hello world foo bar' | truncate(9) }}|{{ 'hello world foo bar' | truncate(9, true) }}|"
               "{{ 'hello world foo bar' | truncate(11, false, '..', 0) }}|{{ 'short'|truncate(255) }}")
          .render({}),
      "hello...|hello ...|hello..|short");
  EXPECT_EQ(Template("{{ '<p>a  <b>b</b>\n c</p> &amp; d' | striptags }}").render({}), "a b c & d");
  EXPECT_EQ(Template("{{ [1,2,3,4,5] | slice(2) | list }}|{{ [1,2,3,4,5] | slice(3, 0) | list }}").render({}),
            "[[1, 2, 3], [4, 5]]|[[1, 2], [3, 4], [5, 0]]");
}

TEST(JinjaSyntax, UnsupportedTagNamesLine) {
  expect_syntax_error("a\n\n{% include 'x' %}", 3);
}

TEST(JinjaErrors, RuntimeErrorNamesLine) {
  try {
    Template("a\n{% if true %}\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}")
        .render({});
    ADD_FAILURE() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(std::string(e.what()), "line 3: Conversation roles must alternate");
  }
}

TEST(JinjaErrors, RunawayRecursionRaises) {
  EXPECT_THROW(Template("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}").render({}), TemplateError);
}

}  // namespace
}  // namespace tf::jinja

namespace tf {
namespace {

using ojson = nlohmann::ordered_json;

TEST(ChatTemplate, MessagesNormalisedLikeTransformers) {
  // None-valued keys are dropped; reasoning is aliased to `thinking` (first) and `reasoning_content`.
  ChatTemplate t("{% for m in messages %}{{ m | tojson }}\n{% endfor %}{{ bos_token }}{{ eos_token }}", "<s>",
                 "</s>");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi", "name": null},
                                {"role": "assistant", "content": "ok", "reasoning": "r"}])");
  EXPECT_EQ(t.render_ordered(msgs, nullptr, false),
            "{\"role\": \"user\", \"content\": \"hi\"}\n"
            "{\"thinking\": \"r\", \"role\": \"assistant\", \"content\": \"ok\", \"reasoning\": \"r\", "
            "\"reasoning_content\": \"r\"}\n<s></s>");
}

TEST(ChatTemplate, ToolsKwargsAndGenerationPrompt) {
  ChatTemplate t(
      "{{ tools is none }}|{{ documents is none }}|{{ enable_thinking }}|{{ add_generation_prompt }}|"
      "{{ bos_token }}",
      "<s>", "</s>");
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_EQ(t.render_ordered(msgs, nullptr, true, ojson{{"enable_thinking", false}, {"bos_token", "B"}}),
            "True|True|False|True|B");
  EXPECT_EQ(t.render(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"), nlohmann::json::array(),
                     false),
            "False|True||False|<s>");
}

TEST(ChatTemplate, ErrorsAreUserFacing) {
  EXPECT_THROW(ChatTemplate("{% if %}", "", ""), Error);
  ChatTemplate t("{{ raise_exception('only user messages') }}", "", "");
  EXPECT_THROW(t.render_ordered(ojson::parse(R"([{"role": "user", "content": "x"}])"), nullptr, true),
               InvalidRequest);
  EXPECT_THROW(t.render_ordered(ojson::array(), nullptr, true), InvalidRequest);
  EXPECT_THROW(t.render_ordered(ojson::parse(R"([{"role": "user", "content": "x"}])"), nullptr, true,
                                ojson{{"tools", ojson::array()}}),
               InvalidRequest);
  ojson deep = "x";
  for (int k = 0; k < 1000; ++k) deep = ojson::array({deep});
  ChatTemplate ok("{{ messages | length }}", "", "");
  EXPECT_THROW(ok.render_ordered(ojson::array({{{"role", "user"}, {"content", deep}}}), nullptr, true),
               InvalidRequest);
}

TEST(ChatTemplate, FromDirReadsNamedTemplatesAndAddedTokens) {
  auto dir = std::filesystem::temp_directory_path() / ("tf_chat_template_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << R"({
    "bos_token": {"content": "<|begin|>", "lstrip": false}, "eos_token": "<|end|>", "pad_token": null,
    "chat_template": [{"name": "default", "template": "D{{ bos_token }}{{ eos_token }}"},
                      {"name": "tool_use", "template": "T{{ tools | length }}"}]})";
  ChatTemplate t = ChatTemplate::from_dir(dir.string());
  ojson msgs = ojson::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(t.render_ordered(msgs, nullptr, true), "D<|begin|><|end|>");
  EXPECT_EQ(t.render_ordered(msgs, ojson::parse(R"([{"type": "function"}])"), true), "T1");
  std::ofstream(dir / "chat_template.jinja") << "J{{ messages | length }}\n";
  EXPECT_EQ(ChatTemplate::from_dir(dir.string()).render_ordered(msgs, nullptr, true), "J1");
  std::filesystem::create_directories(dir / "additional_chat_templates");
  std::ofstream(dir / "additional_chat_templates" / "tool_use.jinja") << "U{{ tools | length }}";
  ChatTemplate files = ChatTemplate::from_dir(dir.string());
  EXPECT_EQ(files.render_ordered(msgs, nullptr, true), "J1");
  EXPECT_EQ(files.render_ordered(msgs, ojson::parse(R"([{"type": "function"}])"), true), "U1");
  std::filesystem::remove_all(dir);
  EXPECT_THROW(ChatTemplate::from_dir(dir.string()), Error);
}

TEST(ChatTemplate, ConcurrentRendersAgree) {
  ChatTemplate t(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ loop.index }}:{{ m.content | upper }};{% endfor %}{{ ns.n }}",
      "", "");
  ojson msgs = ojson::array();
  for (int k = 0; k < 50; ++k) msgs.push_back({{"role", "user"}, {"content", "m" + std::to_string(k)}});
  std::string want = t.render_ordered(msgs, nullptr, false);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 50; ++r) ok[k] += t.render_ordered(msgs, nullptr, false) == want;
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 50);
  EXPECT_NE(want.find("50:M49;50"), std::string::npos);
}

}  // namespace
}  // namespace tf

namespace tf::jinja {
namespace {

TEST(JinjaLimits, IntegerOverflowIsAnError) {
  EXPECT_EQ(Template("{{ 2 ** 62 }} {{ (-1) ** 7 }} {{ 1 ** 100000000000 }} {{ 0 ** 0 }}").render({}),
            "4611686018427387904 -1 1 1");
  EXPECT_THROW(Template("{{ 2 ** 64 }}").render({}), TemplateError);
  EXPECT_THROW(Template("{{ 9223372036854775807 + 1 }}").render({}), TemplateError);
  EXPECT_THROW(Template("{{ 99999999999999999999 }}"), TemplateError);
  EXPECT_THROW(Template("{{ 'x' * 100000000000 }}").render({}), TemplateError);
  EXPECT_EQ(Template("[{{ 'a\nb' | indent(-3) }}]").render({}), "[a\nb]");
}

TEST(JinjaLimits, DeepNestingIsAnErrorNotACrash) {
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_THROW(Template{deep_expr}, TemplateError);
  std::string deep_ifs;
  for (int k = 0; k < 5000; ++k) deep_ifs += "{% if true %}";
  EXPECT_THROW(Template{deep_ifs}, TemplateError);
  nlohmann::ordered_json deep = 1;
  // Past the 256 levels from_json accepts, yet shallow enough for nlohmann to copy under ASan in Debug.
  for (int k = 0; k < 600; ++k) deep = nlohmann::ordered_json::array({deep});
  EXPECT_THROW(from_json(deep), TemplateError);
}

}  // namespace
}  // namespace tf::jinja

// JsonMatcher: hand-written documents, a random-walk cross-check against Python's `jsonschema` (the walk
// generates documents the matcher accepts; jsonschema must find every one valid), hand-written documents
// both ways, unsupported keywords, and the cost of a copy.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "core/error.h"
#include "engine/json_matcher.h"

using namespace tf;
using json = nlohmann::ordered_json;

namespace {

std::shared_ptr<const JsonSchema> compile(const char* schema) {
  return JsonSchema::compile(json::parse(schema));
}

// The number of bytes accepted before the first rejected one (the whole size when all are accepted).
size_t accepted_prefix(const std::shared_ptr<const JsonSchema>& s, std::string_view doc,
                       bool* complete = nullptr) {
  JsonMatcher m(s);
  size_t i = 0;
  while (i < doc.size() && m.feed(static_cast<uint8_t>(doc[i]))) ++i;
  if (complete) *complete = i == doc.size() && m.complete();
  return i;
}

bool accepts(const std::shared_ptr<const JsonSchema>& s, std::string_view doc) {
  bool complete = false;
  accepted_prefix(s, doc, &complete);
  return complete;
}

const char* kPerson = R"({"type":"object","properties":{
  "name":{"type":"string","minLength":1,"maxLength":12},
  "age":{"type":"integer"},
  "score":{"type":"number"},
  "active":{"type":"boolean"},
  "note":{"type":["string","null"]}},
  "required":["name","age"]})";

// A document whose prefix the schema accepts and whose next byte (rest[0]) it refuses.
struct RejectCase {
  const char* schema;
  const char* prefix;  // accepted
  const char* rest;    // its first byte is rejected
};

template <size_t N>
void expect_rejected_at(const RejectCase (&cases)[N]) {
  for (const RejectCase& c : cases) {
    auto s = compile(c.schema);
    std::string doc = std::string(c.prefix) + c.rest;
    EXPECT_EQ(accepted_prefix(s, doc), std::string_view(c.prefix).size()) << c.schema << "\n  doc: " << doc;
  }
}

}  // namespace

TEST(JsonMatcher, AcceptsValidDocumentsByteByByte) {
  auto person = compile(kPerson);
  for (const char* doc :
       {R"({"name":"Ada","age":36})", R"({"name":"Ada","age":-0,"score":1.5e-3,"note":null})",
        R"({"name":"Ada","age":0,"active":false})",
        "{\n  \"name\": \"A\\u00e9\\ud83d\\ude00\\n\",\n  \"age\": 7,\n  \"score\": -0.25E+2\n}",
        "{\"name\" : \"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\n\t\t\"age\":1 }"}) {
    bool complete = false;
    EXPECT_EQ(accepted_prefix(person, doc, &complete), std::string_view(doc).size()) << doc;
    EXPECT_TRUE(complete) << doc;
    JsonMatcher m(person);
    ASSERT_TRUE(m.feed(std::string_view(doc)));
    EXPECT_TRUE(m.dead_end()) << "nothing may follow the top-level object: " << doc;
  }
}

TEST(JsonMatcher, RejectsInvalidDocumentsAtTheRightByte) {
  const RejectCase cases[] = {
      {kPerson, R"({"name":)", R"(1})"},                            // wrong type
      {kPerson, R"({"name":"Ada")", "}"},                           // missing required "age"
      {kPerson, R"({"name":"Ada","age":1,")", R"(x":1})"},          // extra property: no listed name "x"
      {kPerson, R"({"name":"Ada","age":1,"s)", R"(x":1})"},         // a key prefix of "score" only
      {kPerson, R"({")", R"(age":1})"},                             // "age" before the required "name"
      {kPerson, R"({"name":"Ada","age":0)", R"(1})"},               // leading zero
      {kPerson, R"({"name":"Ada","age":1)", R"(.5})"},              // integer: no fraction
      {kPerson, R"({"name":"Ada","age":1)", R"(e3})"},              // integer: no exponent
      {kPerson, R"({"name":"Ada","age":1,"score":1.)", R"(})"},     // a digit must follow '.'
      {kPerson, R"({"name":"Ada","age":1,"score":)", R"(+1})"},     // no '+' sign
      {kPerson, R"({"name":"a\)", R"(x"})"},                        // bad escape
      {kPerson, R"({"name":"a\u12)", R"(g4"})"},                    // bad \u escape
      {kPerson, R"({"name":"a\ud)", R"(c00"})"},                    // a lone low surrogate, known at "dc"
      {kPerson, R"({"name":"a\ud83d)", R"("})"},                    // high surrogate without its low half
      {kPerson, R"({"name":")", "\x01\"}"},                         // raw control character
      {kPerson, R"({"name":")", "\xc0\xaf\"}"},                     // overlong encoding
      {kPerson, "{\"name\":\"\xe0", "\x80\x80\"}"},                 // overlong 3-byte encoding
      {kPerson, "{\"name\":\"\xed", "\xa0\x80\"}"},                 // UTF-16 surrogate in UTF-8
      {kPerson, "{\"name\":\"\xc3", "A\"}"},                        // truncated sequence
      {kPerson, R"({"name":")", "\xff\"}"},                         // never valid in UTF-8
      {kPerson, R"({"name":")", R"("})"},                           // minLength 1
      {kPerson, R"({"name":"123456789012)", R"(3"})"},              // maxLength 12
      {kPerson, R"({"name":"Ada","age":1})", " "},                  // nothing after the top-level value
      {kPerson, R"({"name":"Ada","age":1,"active":tru)", R"(E})"},  // literal
      {kPerson, R"({"name":"Ada","age":1,"note":)", R"(true})"},    // not in the type union
      {kPerson, "{\n                    ", " \"name\":\"A\",\"age\":1}"},  // indent past kMaxIndent
      {kPerson, "{\n", "\n\"name\":\"A\",\"age\":1}"},                     // a blank line
      {kPerson, "{ ", " \"name\":\"A\",\"age\":1}"},                       // two spaces
      {kPerson, "{\"name\":\"A\", ", "\n\"age\":1}"},                      // a space then a newline
      {kPerson, "", " {\"name\":\"A\",\"age\":1}"},                        // before the value
      {R"({"type":"array","items":{"type":"integer"},"maxItems":2})", "[1,2", ",3]"},  // too many items
      {R"({"type":"array","items":{"type":"integer"},"minItems":2})", "[1", "]"},      // too few items
      {R"({"type":"array","items":{"type":"integer"}})", "[1,", "]"},                  // trailing comma
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":false})", R"(["a")", ",1]"},
      {R"({"enum":["red","green",12]})", R"("gr)", R"(ay")"},
      {R"({"enum":["red","green",12]})", "1", "3"},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})",
       R"({"a":"x","a)", R"(":"y"})"},  // a listed name cannot come again as an extra key
  };
  expect_rejected_at(cases);
}

TEST(JsonMatcher, CompleteAndDeadEnd) {
  auto number = compile(R"({"type":"number"})");
  JsonMatcher m(number);
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.feed(std::string_view("-1")));
  EXPECT_TRUE(m.complete());
  EXPECT_FALSE(m.dead_end());  // more digits may follow
  EXPECT_FALSE(m.feed(std::string_view("2x")));
  EXPECT_TRUE(m.complete()) << "a failed feed(string_view) leaves the matcher unchanged";
  ASSERT_TRUE(m.feed(std::string_view("2.5e")));
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.feed(' ')) << "no whitespace after the top-level value (nor inside a number)";
  ASSERT_TRUE(m.feed('7'));
  EXPECT_TRUE(m.complete());

  JsonMatcher zero(compile(R"({"type":"integer"})"));
  ASSERT_TRUE(zero.feed('0'));
  EXPECT_TRUE(zero.dead_end()) << "an integer 0 cannot continue";

  for (const char* doc : {"true", "null", "\"x\"", "[]", "{}"}) {
    JsonMatcher any(JsonSchema::any_value());
    ASSERT_TRUE(any.feed(std::string_view(doc))) << doc;
    EXPECT_TRUE(any.dead_end()) << doc;
  }
  auto e = compile(R"({"enum":[1,12,"a"]})");
  JsonMatcher one(e);
  ASSERT_TRUE(one.feed('1'));
  EXPECT_TRUE(one.complete());
  EXPECT_FALSE(one.dead_end());
  ASSERT_TRUE(one.feed('2'));
  EXPECT_TRUE(one.dead_end());
}

TEST(JsonMatcher, JsonObjectModeAcceptsOnlyObjects) {
  auto s = JsonSchema::any_object();
  EXPECT_TRUE(accepts(s, R"({"a":[1,{"b":null}],"c":"d","a":true})"));
  EXPECT_TRUE(accepts(s, "{}"));
  EXPECT_EQ(accepted_prefix(s, "[1]"), 0u);
  EXPECT_EQ(accepted_prefix(s, "\"x\""), 0u);
  // Nesting is bounded: kMaxDepth containers, then only scalars.
  std::string deep(JsonSchema::kMaxDepth, '[');
  deep[0] = '{';
  std::string doc = R"({"a":)" + std::string(JsonSchema::kMaxDepth - 1, '[');
  EXPECT_EQ(accepted_prefix(s, doc + "["), doc.size());
  EXPECT_TRUE(accepts(s, doc + "1" + std::string(JsonSchema::kMaxDepth - 1, ']') + "}"));
}

TEST(JsonMatcher, KeysSharingPrefixesAndOptionalProperties) {
  auto s = compile(R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"string"},
      "abc":{"type":"boolean"},"a\"b":{"type":"null"}},"required":["abc"]})");
  EXPECT_TRUE(accepts(s, R"({"a":1,"ab":"x","abc":true})"));
  EXPECT_TRUE(accepts(s, R"({"abc":true,"a\"b":null})"));
  EXPECT_TRUE(accepts(s, R"({"ab":"x","abc":false})"));
  EXPECT_FALSE(accepts(s, R"({"ab":"x","a":1,"abc":false})")) << "listed order";
  EXPECT_FALSE(accepts(s, R"({"a":1})")) << "required abc";
  EXPECT_FALSE(accepts(s, R"({"a\"b":null,"abc":true})")) << "a\"b comes after the required abc";
}

TEST(JsonMatcher, AnyOfRefsAndConstants) {
  auto tree = compile(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})");
  EXPECT_TRUE(accepts(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"kids":[]}]})"));
  auto shapes = compile(R"({"anyOf":[
      {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},
      {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"number"}},"required":["kind","w"]}]})");
  EXPECT_TRUE(accepts(shapes, R"({"kind":"circle","r":1})"));
  EXPECT_TRUE(accepts(shapes, R"({"kind":"rect","w":2})"));
  EXPECT_FALSE(accepts(shapes, R"({"kind":"rect","r":2})"));
  JsonMatcher m(shapes);
  ASSERT_TRUE(m.feed(std::string_view(R"({"kind":")")));
  EXPECT_EQ(m.num_stacks(), 2u);
  ASSERT_TRUE(m.feed('r'));
  EXPECT_EQ(m.num_stacks(), 1u);
  auto c = compile(R"({"const":{"b":[1,"x",{}],"a":null}})");
  EXPECT_TRUE(accepts(c, R"({"b":[1,"x",{}],"a":null})"));
  EXPECT_TRUE(accepts(c, "{ \"b\": [ 1, \"x\", {} ], \"a\": null }"));
  EXPECT_FALSE(accepts(c, R"({"b":[1,"x",{}]})"));
  auto nullable = compile(R"({"type":"string","maxLength":2,"nullable":true,"format":"date"})");
  EXPECT_TRUE(accepts(nullable, "null"));
  EXPECT_TRUE(accepts(nullable, "\"ab\""));
  EXPECT_FALSE(accepts(nullable, "\"abc\""));
  auto all = compile(R"({"definitions":{"d":{"enum":["x",[1]]}},"allOf":[{"$ref":"#/definitions/d"}]})");
  EXPECT_TRUE(accepts(all, "\"x\""));
  EXPECT_TRUE(accepts(all, "[ 1 ]"));
  EXPECT_FALSE(accepts(all, "[1,1]"));
}

TEST(JsonMatcher, PathsToUnsatisfiableSchemasAreCut) {
  // "n" requires itself: no finite object is an "n". Every prefix the matcher accepts must stay completable.
  const char* defs =
      R"("$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"required":["next"]}})";
  auto any_of =
      compile((std::string(R"({"anyOf":[{"$ref":"#/$defs/n"},{"type":"string"}],)") + defs + "}").c_str());
  EXPECT_EQ(accepted_prefix(any_of, R"({"next":{}})"), 0u);
  EXPECT_TRUE(accepts(any_of, R"("s")"));
  auto optional = compile(
      (std::string(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/n"},"b":{"type":"null"}},)") +
       R"("additionalProperties":{"$ref":"#/$defs/n"},)" + defs + "}")
          .c_str());
  EXPECT_EQ(accepted_prefix(optional, R"({"a":{}})"), 2u) << "an optional property no value satisfies";
  EXPECT_TRUE(accepts(optional, R"({"b":null})"));
  EXPECT_EQ(accepted_prefix(optional, R"({"b":null,"c":1})"), 9u)
      << "no extra key: no value satisfies their schema";
  auto items = compile(
      (std::string(R"({"type":"array","prefixItems":[{"type":"null"}],"items":{"$ref":"#/$defs/n"},)") +
       defs + "}")
          .c_str());
  EXPECT_TRUE(accepts(items, "[null]"));
  EXPECT_EQ(accepted_prefix(items, "[null,{}]"), 5u);
  try {
    JsonSchema::compile(json::parse(std::string(R"({"$ref":"#/$defs/n",)") + defs + "}"));
    ADD_FAILURE() << "compiled a schema no finite document satisfies";
  } catch (const InvalidRequest& e) {
    EXPECT_NE(std::string(e.what()).find("admits no JSON value"), std::string::npos) << e.what();
  }
}

TEST(JsonMatcher, LargeEnumsAndNestedAlternatives) {
  json values = json::array();
  for (int i = 0; i < 150; ++i) values.push_back("v" + std::to_string(i));  // more than one 64-value chunk
  values.push_back(7);
  auto e = JsonSchema::compile(json{{"enum", values}});
  for (const auto& v : values) EXPECT_TRUE(accepts(e, v.dump())) << v.dump();
  EXPECT_FALSE(accepts(e, "\"v150\""));
  EXPECT_FALSE(accepts(e, "\"v1"));
  EXPECT_FALSE(accepts(e, "70"));
  // anyOf inside anyOf inside $ref: one fork per value, in the schema's order.
  auto nested = compile(R"({"$defs":{"s":{"anyOf":[{"type":"string","maxLength":1},{"$ref":"#/$defs/t"}]},
      "t":{"anyOf":[{"type":"integer"},{"$ref":"#/$defs/s"}]}},"anyOf":[{"$ref":"#/$defs/s"},{"type":"null"}]})");
  EXPECT_TRUE(accepts(nested, "\"a\""));
  EXPECT_TRUE(accepts(nested, "-3"));
  EXPECT_TRUE(accepts(nested, "null"));
  EXPECT_FALSE(accepts(nested, "\"ab\""));
  JsonMatcher m(nested);
  ASSERT_TRUE(m.feed('"'));
  EXPECT_EQ(m.num_stacks(), 1u);
}

TEST(JsonMatcher, CodePointsCountTowardLengths) {
  auto s = compile(R"({"type":"string","minLength":2,"maxLength":2})");
  EXPECT_TRUE(accepts(s, "\"\xc3\xa9\xf0\x9f\x98\x80\""));
  EXPECT_TRUE(accepts(s, R"("\ud83d\ude00\n")")) << "a surrogate pair is one code point";
  EXPECT_FALSE(accepts(s, R"("\ud83d\ude00")"));
  EXPECT_FALSE(accepts(s, R"("abc")"));
}

TEST(JsonMatcher, PatternsRunOverTheDecodedString) {
  struct Case {
    const char* pattern;
    const char* prefix;  // accepted (the string's opening quote included)
    const char* rest;    // its first byte is rejected
  };
  const Case cases[] = {
      {R"(^\d{4}-\d{2}-\d{2}$)", R"("2024-0)", R"(x-01")"},
      {R"(^\d{4}-\d{2}-\d{2}$)", R"("2024-01-31)", R"(0")"},
      {R"(^[A-Z]{3}-[0-9]+$)", R"("ABC-)", R"(")"},     // a digit is due
      {R"(^[A-Z]{3}-[0-9]+$)", R"("ABC-1\)", R"(n")"},  // an escape decoding to a newline
      {R"(^a$)", R"("a)", R"(\u0061")"},                // nothing may follow, even escaped
      {R"(^[0-9]+$)", R"("\u00)", R"(4")"},             // U+0040..U+004F: no digit
      {R"(^[0-9]+$)", R"("\u003)", R"(a")"},            // U+003A is ':'
      {R"(^[0-9]+$)", R"("\u0039\u0030)", R"(x")"},
      {"^x\U0001F600$", R"("x\ud83)", R"(e\ude00")"},  // U+1F800.. cannot be the emoji
      {"^x\U0001F600$", R"("x\ud83d\ude0)", R"(1")"},  // U+1F601
      {"^x\U0001F600$", "\"x\xf0\x9f\x98", "\x81\""},  // raw UTF-8 U+1F601
      {"^\u00e9$", "\"\xc3", "\xa8\""},                // U+00E8
      {R"(cat|dog)", R"("a ca)", R"("")"},             // no match yet: the string goes on
      {R"(cat|dog)", R"("hotdog)", "\x01"},            // still JSON: no raw control bytes
      {R"(^\S+$)", R"("a\u00a)", R"(0")"},             // ECMA-262 \s has U+00A0
  };
  for (const Case& c : cases) {
    auto s = JsonSchema::compile(json{{"type", "string"}, {"pattern", c.pattern}});
    std::string doc = std::string(c.prefix) + c.rest;
    EXPECT_EQ(accepted_prefix(s, doc), std::string_view(c.prefix).size()) << c.pattern << "\n  doc: " << doc;
  }
  const std::pair<const char*, const char*> kMatches[] = {
      {R"(^\d{4}-\d{2}-\d{2}$)", R"("2024-01-31")"},
      {R"(^\d{4}-\d{2}-\d{2}$)", R"("\u0032024-01-3\u0031")"},
      {R"(cat|dog)", R"("a cat!")"},
      {R"(cat|dog)", R"("\u0063at")"},
      {"^x\U0001F600$", R"("x\ud83d\ude00")"},
      {"^x\U0001F600$", "\"x\xf0\x9f\x98\x80\""},
      {R"(^[^a]\t\\$)", R"("\n\t\\")"},
      {R"(^\/"$)", R"("\/\"")"},
      {R"()", R"("")"},
  };
  for (const auto& [pattern, doc] : kMatches)
    EXPECT_TRUE(accepts(JsonSchema::compile(json{{"type", "string"}, {"pattern", pattern}}), doc))
        << pattern << " " << doc;
  // The pattern constrains strings only; a pattern no string matches leaves the other types.
  auto mixed = compile(R"({"type":["string","integer","null"],"pattern":"[^\\s\\S]"})");
  EXPECT_TRUE(accepts(mixed, "12"));
  EXPECT_TRUE(accepts(mixed, "null"));
  EXPECT_EQ(accepted_prefix(mixed, R"("")"), 0u);
  // Alternatives with their own patterns run side by side; keys are not affected.
  auto alts = compile(R"({"type":"object","properties":{"k":{"anyOf":[{"type":"string","pattern":"^a"},
      {"type":"string","pattern":"b$"}]}},"required":["k"]})");
  EXPECT_TRUE(accepts(alts, R"({"k":"axe"})"));
  EXPECT_TRUE(accepts(alts, R"({"k":"cab"})"));
  EXPECT_FALSE(accepts(alts, R"({"k":"cat"})"));
  EXPECT_EQ(accepted_prefix(alts, R"({"k":"ca"})"), std::string_view(R"({"k":"ca)").size());
}

// With minLength/maxLength the pattern must be matched within the bounds: a byte is refused as soon as no
// completion of that length can match.
TEST(JsonMatcher, PatternsAndLengthsTogether) {
  const RejectCase cases[] = {
      {R"({"pattern":"^(aa)+$","minLength":3,"maxLength":5})", R"("aaaa)", R"(a")"},   // 5 is odd
      {R"({"pattern":"^(aa)+$","minLength":3,"maxLength":5})", R"("aa)", R"("")"},     // 2 < 3
      {R"({"pattern":"^(aa)+$","minLength":3,"maxLength":5})", R"("\u006)", R"(2")"},  // U+0060..6F: 'a' only
      {R"({"pattern":"^[a-z]+$","maxLength":3})", R"("abc)", R"(d")"},
      {R"({"pattern":"cat|dog","maxLength":5})", R"("xx)", R"(x")"},  // "xxx" + "cat" is 6
      {R"({"pattern":"cat|dog","maxLength":5})", R"("xxc)", R"(x")"},
      {R"({"pattern":"^a*b$","maxLength":3})", R"("aa\u006)", R"(1")"},  // "aaa" needs a 'b'
      {R"({"pattern":"^a*b?$","minLength":3})", R"("a)", R"(b")"},       // "ab" ends it at 2
      {R"({"pattern":"^.+$","maxLength":2})", R"("\ud83d\ude00\ud83d\ude00)", R"(\n")"},
      {R"({"pattern":"^[a-z]+(-[a-z]+)*$","minLength":3,"maxLength":8})", R"("ab-cd-e)", R"(-")"},
  };
  expect_rejected_at(cases);
  EXPECT_TRUE(accepts(compile(R"({"pattern":"^(aa)+$","minLength":3,"maxLength":5})"), R"("aaaa")"));
  EXPECT_TRUE(accepts(compile(R"({"pattern":"cat|dog","maxLength":5})"), R"("xxcat")"));
  EXPECT_TRUE(accepts(compile(R"({"pattern":"^a*b?$","minLength":3})"), R"("aab")"));
  EXPECT_TRUE(accepts(compile(R"({"pattern":"^.+$","maxLength":2})"), R"("\ud83d\ude00\u00e9")"));
  // One bound only: the horizon stops at the number of states, long bounds stay exact.
  auto long_min = compile(R"({"pattern":"^(ab)+c?$","minLength":3000})");
  std::string doc = "\"";
  for (int i = 0; i < 1499; ++i) doc += "ab";
  EXPECT_EQ(accepted_prefix(long_min, doc + "\""), doc.size()) << "2998 code points";
  EXPECT_EQ(accepted_prefix(long_min, doc + "c\""), doc.size())
      << "2999 code points, and nothing may follow 'c'";
  EXPECT_TRUE(accepts(long_min, doc + "ab\""));
  EXPECT_TRUE(accepts(long_min, doc + "abc\""));
  auto long_max = compile(R"({"pattern":"^x(ab)*$","maxLength":10000})");
  doc = "\"x";
  for (int i = 0; i < 4999; ++i) doc += "ab";
  EXPECT_EQ(accepted_prefix(long_max, doc + "ab\""), doc.size()) << "10001 code points";
  EXPECT_TRUE(accepts(long_max, doc + "\""));
}

TEST(JsonSchemaCompile, RefusesUnsupportedKeywordsWithTheirPath) {
  struct Case {
    const char* schema;
    const char* keyword;
    const char* path;
  };
  const Case cases[] = {
      {R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})", "minimum", "#/properties/n"},
      {R"j({"type":"object","properties":{"a/b":{"type":"string","pattern":"(?=x)"}}})j", "lookaround",
       "#/properties/a~1b/pattern"},
      {R"({"type":"string","pattern":"a","minLength":1,"maxLength":5000})", "above 4096", "#"},
      {R"({"type":"string","pattern":"a.{5}","minLength":1,"maxLength":4000})", "too large", "#"},
      {R"({"type":"string","pattern":"^(aa)+$","minLength":3,"maxLength":3})", "admits no JSON value", "#"},
      {R"({"type":"string","pattern":1})", "\"pattern\" must be a string", "#/pattern"},
      {R"({"type":"string","pattern":"a{100}"})", "a{100}", "#/pattern"},
      {R"({"type":"string","pattern":"[^\\s\\S]"})", "admits no JSON value", "#"},
      {R"({"enum":["a"],"pattern":"a"})", "pattern", "#"},
      {R"({"type":"array","items":{"type":"array","uniqueItems":true}})", "uniqueItems", "#/items"},
      {R"({"$defs":{"x":{"not":{}}},"$ref":"#/$defs/x"})", "not", "#/$defs/x"},
      {R"({"anyOf":[{"type":"string"},{"type":"object","minProperties":1}]})", "minProperties", "#/anyOf/1"},
      {R"({"type":"object","patternProperties":{}})", "patternProperties", "#"},
      {R"({"type":"object","propertyNames":{}})", "propertyNames", "#"},
      {R"({"if":{},"then":{}})", "if", "#"},
      {R"({"type":"number","multipleOf":2})", "multipleOf", "#"},
      {R"({"type":"number","exclusiveMaximum":2})", "exclusiveMaximum", "#"},
      {R"({"type":"array","contains":{}})", "contains", "#"},
      {R"({"type":"object","dependentRequired":{}})", "dependentRequired", "#"},
      {R"({"type":"object","unevaluatedProperties":false})", "unevaluatedProperties", "#"},
      {R"({"type":"object","maxProperties":3})", "maxProperties", "#"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})", "allOf", "#/allOf"},
      {R"({"$ref":"https://example.com/s.json"})", "$ref", "#/$ref"},
      {R"({"$ref":"#/$defs/missing"})", "does not resolve", "#/$ref"},
      {R"({"type":"object","properties":{"a":false}})", "false", "#/properties/a"},
      {R"({"type":"strin"})", "unknown type", "#/type"},
      {R"({"type":"object","properties":{},"required":["a"]})", "\"a\"", "#/required"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "minLength", "#"},
      {R"({"type":"object","frobnicate":1})", "frobnicate", "#"},
      {R"({"type":"string","anyOf":[{"maxLength":1}]})", "type", "#"},
      {R"({"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})", "admits no JSON value", "#"},
      {R"({"type":"array","minItems":-1})", "minItems", "#/minItems"},
      {R"({"type":"array","maxItems":1.5})", "maxItems", "#/maxItems"},
      {R"({"type":"string","maxLength":"3"})", "maxLength", "#/maxLength"},
      {R"({"type":"array","items":[{"type":"string"}]})", "prefixItems", "#/items"},
      {R"({"enum":[]})", "enum", "#/enum"},
      {R"({"type":"string","enum":[1,2]})", "enum", "#/enum"},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"nullable":"yes"})", "nullable",
       "#/nullable"},
  };
  for (const Case& c : cases) {
    try {
      JsonSchema::compile(json::parse(c.schema));
      ADD_FAILURE() << "accepted: " << c.schema;
    } catch (const InvalidRequest& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(c.keyword), std::string::npos) << c.schema << " -> " << what;
      EXPECT_NE(what.find(std::string(" at ") + c.path), std::string::npos) << c.schema << " -> " << what;
    }
  }
  std::string deep = "{}";
  for (int i = 0; i < 200; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_THROW(JsonSchema::compile(json::parse(deep)), InvalidRequest);
  json many = json::array();
  for (int i = 0; i < 300; ++i) many.push_back(json{{"type", "array"}, {"maxItems", i}});
  EXPECT_THROW(JsonSchema::compile(json{{"anyOf", many}}), InvalidRequest);
  EXPECT_NO_THROW(
      JsonSchema::compile(json::parse(R"({"type":"string","maxLength":1e300,"description":"x"})")));
  // The non-ordered json entry point compiles too (keys in nlohmann::json's sorted order).
  EXPECT_TRUE(accepts(JsonSchema::compile(nlohmann::json::parse(R"({"type":"object","properties":{
      "b":{"type":"integer"},"a":{"type":"integer"}},"required":["a","b"]})")),
                      R"({"a":1,"b":2})"));
}

// The token-mask builder copies a matcher at every node of a vocabulary trie walk (~100k a token).
TEST(JsonMatcher, CopyCost) {
  auto tree = compile(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"s":{"type":"string"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
      "required":["v"]}}})");
  std::string deep;
  for (int i = 0; i < 10; ++i) deep += R"({"v":1,"kids":[)";
  for (const std::string& doc : {deep + R"({"v":12)", std::string(R"({"v":1,"s":"abc)")}) {
    JsonMatcher m(tree);
    ASSERT_TRUE(m.feed(std::string_view(doc)));
    constexpr int kCopies = 100000;
    size_t alive = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCopies; ++i) {
      JsonMatcher copy(m);
      alive += copy.num_stacks();
    }
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCopies; ++i) {
      JsonMatcher copy(m);
      alive += copy.feed(static_cast<uint8_t>('0' + i % 10));
    }
    auto t2 = std::chrono::steady_clock::now();
    JsonMatcher reused(m);  // the trie walk's pattern: copy-assign into a kept matcher, then feed
    for (int i = 0; i < kCopies; ++i) {
      reused = m;
      alive += reused.feed(static_cast<uint8_t>('0' + i % 10));
    }
    auto t3 = std::chrono::steady_clock::now();
    EXPECT_EQ(alive, static_cast<size_t>(kCopies) * 3);
    auto ns = [](auto d) { return std::chrono::duration<double, std::nano>(d).count() / kCopies; };
    std::printf(
        "after %zu bytes (nesting depth %zu, frames of %zu bytes): copy %.1f ns, copy + feed %.1f ns, "
        "copy-assign + feed %.1f ns\n",
        doc.size(),
        static_cast<size_t>(std::count(doc.begin(), doc.end(), '{') +
                            std::count(doc.begin(), doc.end(), '[')),
        sizeof(JsonMatcher::Frame), ns(t1 - t0), ns(t2 - t1), ns(t3 - t2));
  }
}

// ---------------------------------------------------------------------------------------------------
// Cross-check against Python's jsonschema (tests/engine/json_matcher_check.py), one process for all.

namespace {

struct OracleSchema {
  const char* python;                         // the schema jsonschema validates against
  std::shared_ptr<const JsonSchema> matcher;  // the matcher's schema (the same one, but json_object mode)
};

std::vector<OracleSchema> oracle_schemas() {
  const char* texts[] = {
      kPerson,
      R"({"type":"object","properties":{"id":{"type":"integer"},"address":{"type":"object","properties":{
          "street":{"type":"string"},"zip":{"type":"string","minLength":5,"maxLength":5}},"required":["zip"]},
          "tags":{"type":"array","items":{"type":"string","maxLength":4},"maxItems":3}},
          "required":["id","address","tags"]})",
      R"({"type":"array","items":{"enum":["red","green","blue",1,2.5,null,true,"gr\u00fcn"]},"minItems":1,"maxItems":4})",
      R"({"type":"array","maxItems":3,"items":{"anyOf":[
          {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]},
          {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"number"},"h":{"type":"number"}},
           "required":["kind","w"]}]}})",
      R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
          "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2}},"required":["v"]}}})",
      R"({"type":"string","minLength":2,"maxLength":6})",
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"number"}],"items":{"type":"integer"},
          "minItems":2,"maxItems":5})",
      R"({"type":"object"})",
      R"({})",
      R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
          "additionalProperties":{"type":"string","maxLength":5}})",
      R"({"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"null"}},"additionalProperties":true})",
      R"({"const":{"b":[1,"x",{}],"a":null}})",
      R"({"oneOf":[{"type":"integer"},{"type":"string","maxLength":3},
          {"type":"array","items":{"type":"boolean"},"maxItems":2}]})",
      R"({"definitions":{"p":{"type":"object","properties":{"x":{"type":"number"}},"required":["x"]}},
          "type":"object","properties":{"p":{"allOf":[{"$ref":"#/definitions/p"}]},
          "q":{"type":"string","nullable":true,"format":"email"}},"required":["p"]})",
      R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"string"},"abc":{"type":"boolean"},
          "a\"b":{"type":"null"},"\u00fcn\u00ef":{"type":"integer"},"x y":{"enum":[1,12,123]}},"required":["abc"]})",
      R"({"type":["boolean","null","integer"]})",
      R"({"type":"object","properties":{"date":{"type":"string","pattern":"^\\d{4}-\\d{2}-\\d{2}$"},
          "id":{"type":"string","pattern":"^[A-Z]{3}-[0-9]+$"}},"required":["date","id"]})",
      R"({"type":"array","items":{"type":"string","pattern":"cat|dog"},"maxItems":3})",
      "{\"type\":\"string\",\"pattern\":\"^[\\\\u00e0-\\\\u00ff\\\\u0370-\\\\u03ff\xf0\x9f\x98\x80-"
      "\xf0\x9f\x99\x8f]+$\"}",
      R"({"type":["string","null"],"pattern":"^(?:[a-z]+_)*[a-z]+$"})",
      R"({"anyOf":[{"type":"string","pattern":"^a"},{"type":"string","pattern":"b$"}]})",
      R"({"type":"string","pattern":"^[a-z]+(-[a-z]+)*$","minLength":3,"maxLength":8})",
      R"({"type":"array","items":{"type":"string","pattern":"ab|ba","maxLength":4},"maxItems":3})",
  };
  std::vector<OracleSchema> out;
  for (const char* t : texts)
    out.push_back({t, std::string_view(t) == R"({"type":"object"})" ? JsonSchema::any_object() : compile(t)});
  return out;
}

const std::vector<uint8_t>& walk_alphabet() {
  static const std::vector<uint8_t> alphabet = [] {
    std::vector<uint8_t> a;
    for (int c = 0x20; c < 0x7f; ++c) a.push_back(static_cast<uint8_t>(c));
    for (uint8_t c : {0x0a, 0x09, 0xc3, 0xa9, 0xce, 0xbb, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80})
      a.push_back(c);
    return a;
  }();
  return alphabet;
}

// The shortest bytes completing the document from `m` (breadth-first over distinct matcher states, at
// most `budget` of them; no escapes, whose \u digits would multiply the states); false when none was
// found. Random walks rarely stumble on what an unanchored pattern ("cat|dog") needs before the string
// may close.
bool shortest_completion(const JsonMatcher& m, size_t budget, std::string& out) {
  std::vector<std::pair<JsonMatcher, std::string>> queue = {{m, ""}};
  std::set<std::string> seen = {std::string(m.state_bytes())};
  for (size_t q = 0; q < queue.size() && queue.size() < budget; ++q) {
    if (queue[q].first.complete()) return out = queue[q].second, true;
    for (uint8_t c : walk_alphabet()) {
      if (c == '\\') continue;
      JsonMatcher next = queue[q].first;
      if (next.feed(c) && seen.insert(std::string(next.state_bytes())).second)
        queue.push_back({next, queue[q].second + static_cast<char>(c)});
    }
  }
  return false;
}

// A seeded random walk through the bytes the matcher accepts, biased toward closing strings and
// containers so walks finish; past max_len / 2 bytes, the shortest completion. Empty when the walk did
// not finish within `max_len` bytes.
std::string random_walk(const std::shared_ptr<const JsonSchema>& s, std::mt19937& rng, size_t max_len) {
  const std::vector<uint8_t>& alphabet = walk_alphabet();
  auto weight = [](uint8_t c) {
    switch (c) {
      case '"':
        return 48;
      case '}':
      case ']':
        return 12;
      case ',':
      case ':':
        return 16;
      case ' ':
      case '\n':
      case '\t':
        return 1;
      default:
        return c >= 0xc0 ? 12 : 4;
    }
  };
  JsonMatcher m(s);
  std::string doc;
  std::vector<std::pair<uint8_t, int>> options;
  while (doc.size() < max_len) {
    if (m.dead_end() || (m.complete() && rng() % 3 == 0)) return doc;
    std::string tail;
    if (doc.size() >= max_len / 2) {
      if (!shortest_completion(m, 4000, tail)) return "";
      EXPECT_TRUE(m.feed(std::string_view(tail)));
      return doc + tail;
    }
    options.clear();
    int total = 0;
    for (uint8_t c : alphabet)
      if (JsonMatcher(m).feed(c)) options.push_back({c, total += weight(c)});
    for (int c = 0; c < 0x100 && options.empty(); ++c)  // e.g. the rest of a UTF-8 sequence in an enum
      if (JsonMatcher(m).feed(static_cast<uint8_t>(c)))
        options.push_back({static_cast<uint8_t>(c), total += 1});
    EXPECT_FALSE(options.empty()) << "the matcher accepted a prefix it cannot continue: " << doc;
    if (options.empty()) return "";
    int pick = static_cast<int>(rng() % static_cast<unsigned>(total));
    uint8_t c = std::find_if(options.begin(), options.end(), [&](auto& o) { return pick < o.second; })->first;
    EXPECT_TRUE(m.feed(c));
    doc += static_cast<char>(c);
  }
  return "";
}

enum class Verdict { kBoth, kNeither, kMatcherStricter };

struct HandDoc {
  int schema;
  const char* text;
  Verdict verdict;  // kBoth: jsonschema and the matcher accept; kNeither: both reject
};

const HandDoc kHandDocs[] = {
    {0, R"({"name":"Ada","age":36,"score":1e400,"active":true,"note":"x"})", Verdict::kBoth},
    {0, R"({"name":"Ada"})", Verdict::kNeither},                            // missing required
    {0, R"({"name":"Ada","age":"36"})", Verdict::kNeither},                 // wrong type
    {0, R"({"name":"Ada","age":3.5})", Verdict::kNeither},                  // not an integer
    {0, R"({"name":"","age":3})", Verdict::kNeither},                       // minLength
    {0, R"({"name":"abcdefghijklm","age":3})", Verdict::kNeither},          // maxLength
    {0, R"({"name":"Ada","age":01})", Verdict::kNeither},                   // leading zero
    {0, R"({"name":"A\x","age":1})", Verdict::kNeither},                    // bad escape
    {0, R"({"name":"Ada","age":1,"extra":1})", Verdict::kMatcherStricter},  // additionalProperties absent
    {0, R"({"age":1,"name":"Ada"})", Verdict::kMatcherStricter},            // not in the listed order
    {0, R"({"name":"Ada","age":1.0})", Verdict::kMatcherStricter},          // integer without a fraction
    {0, R"({"n\u0061me":"Ada","age":1})", Verdict::kMatcherStricter},       // escaped key
    {0, R"({"name":"Ada","age":1} )", Verdict::kMatcherStricter},           // whitespace after the value
    {1, R"({"id":1,"address":{"zip":"12345"},"tags":["a","bcde"]})", Verdict::kBoth},
    {1, R"({"id":1,"address":{"zip":"1234"},"tags":[]})", Verdict::kNeither},
    {1, R"({"id":1,"address":{"zip":"12345"},"tags":["a","b","c","d"]})", Verdict::kNeither},
    {1, R"({"id":1,"address":{"street":"x"},"tags":[]})", Verdict::kNeither},
    {2, R"(["gr\u00fcn",null,2.5])", Verdict::kMatcherStricter},  // enum strings: compact dump bytes
    {2, "[\"gr\xc3\xbcn\",null,2.5]", Verdict::kBoth},
    {2, R"([])", Verdict::kNeither},
    {2, R"(["red","red","red","red","red"])", Verdict::kNeither},
    {2, R"(["Red"])", Verdict::kNeither},
    {3, R"([{"kind":"rect","w":1,"h":2},{"kind":"circle","r":0.5}])", Verdict::kBoth},
    {3, R"([{"kind":"rect","r":1}])", Verdict::kNeither},
    {3, R"([{"kind":"square","w":1}])", Verdict::kNeither},
    {4, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]})", Verdict::kBoth},
    {4, R"({"v":1,"kids":[{"v":2},{"v":3},{"v":4}]})", Verdict::kNeither},
    {4, R"({"v":1,"kids":[{"kids":[]}]})", Verdict::kNeither},
    {5, R"("\ud83d\ude00\u00e9")", Verdict::kBoth},
    {5, "\"\xf0\x9f\x98\x80\"", Verdict::kNeither},  // one code point < minLength 2
    {5, R"("abcdefg")", Verdict::kNeither},
    {6, R"([1,2.5,3])", Verdict::kBoth},
    {6, R"([1.5,2])", Verdict::kNeither},
    {6, R"([1,2,3.5])", Verdict::kNeither},
    {6, R"([1])", Verdict::kNeither},
    {7, R"({"a":{"b":[1,"2",null]}})", Verdict::kBoth},
    {7, R"([1])", Verdict::kNeither},
    {8, R"([{"a":-1.5E-3},"x",true])", Verdict::kBoth},
    {8, R"([1,])", Verdict::kNeither},
    {9, R"({"id":1,"x":"abc","y":"de"})", Verdict::kBoth},
    {9, R"({"id":1,"x":"abcdef"})", Verdict::kNeither},
    {9, R"({"id":1,"x":2})", Verdict::kNeither},
    {10, R"({"b":null,"zz":[1]})", Verdict::kBoth},
    {10, R"({"a":1})", Verdict::kNeither},
    {11, R"({"b":[1,"x",{}],"a":null})", Verdict::kBoth},
    {11, R"({"b":[1,"x",{"c":1}],"a":null})", Verdict::kNeither},
    {12, R"("abc")", Verdict::kBoth},
    {12, R"([true,false,true])", Verdict::kNeither},
    {12, R"(1.5)", Verdict::kNeither},
    {13, R"({"p":{"x":1},"q":null})", Verdict::kBoth},
    {13, R"({"p":{},"q":"a"})", Verdict::kNeither},
    {14, R"({"a":1,"abc":true,"a\"b":null,"x y":12})", Verdict::kBoth},
    {14, R"({"abc":true,"x y":13})", Verdict::kNeither},
    {14, R"({"ab":1,"abc":true})", Verdict::kNeither},
    {15, R"(-12)", Verdict::kBoth},
    {15, R"("x")", Verdict::kNeither},
    {16, R"({"date":"2024-01-31","id":"ABC-12"})", Verdict::kBoth},
    {16, R"({"date":"\u0032024-01-31","id":"ABC-1"})", Verdict::kBoth},
    {16, R"({"date":"2024-1-31","id":"ABC-12"})", Verdict::kNeither},
    {16, R"({"date":"2024-01-31","id":"AB-12"})", Verdict::kNeither},
    {16, R"({"date":"x2024-01-31","id":"ABC-12"})", Verdict::kNeither},
    {16, R"({"date":"2024-01-31\n","id":"ABC-1"})", Verdict::kMatcherStricter},  // Python's $ takes "\n"
    {17, R"(["a cat","hotdogs","dog"])", Verdict::kBoth},
    {17, R"(["c\u0061t"])", Verdict::kBoth},
    {17, R"(["cow"])", Verdict::kNeither},
    {17, R"(["ca","t"])", Verdict::kNeither},
    {18, "\"\xc3\xa9\xce\xbb\xf0\x9f\x98\x8e\"", Verdict::kBoth},
    {18, R"("\u00e9\ud83d\ude00")", Verdict::kBoth},
    {18, R"("e")", Verdict::kNeither},
    {18, R"("")", Verdict::kNeither},
    {18, R"("\ud83d\ude50")", Verdict::kNeither},
    {19, R"("snake_case_name")", Verdict::kBoth},
    {19, R"(null)", Verdict::kBoth},
    {19, R"("_x")", Verdict::kNeither},
    {19, R"("a__b")", Verdict::kNeither},
    {20, R"("axe")", Verdict::kBoth},
    {20, R"("cab")", Verdict::kBoth},
    {20, R"("cat")", Verdict::kNeither},
    {21, R"("ab-cd")", Verdict::kBoth},
    {21, R"("abcdefgh")", Verdict::kBoth},
    {21, R"("abcdefghi")", Verdict::kNeither},
    {21, R"("a-")", Verdict::kNeither},
    {21, R"("ab")", Verdict::kNeither},
    {22, R"(["xab","ba","abab"])", Verdict::kBoth},
    {22, R"(["xxxab"])", Verdict::kNeither},
    {22, R"(["aa"])", Verdict::kNeither},
};

struct HandValue {
  int schema;
  const char* value;  // serialised by Python: compact, default separators, indent=2
};

const HandValue kHandValues[] = {
    {0, R"({"name":"Zo\u00eb \ud83d\ude00","age":-3,"score":0.001,"active":false,"note":null})"},
    {1, R"({"id":7,"address":{"street":"Main St \"1\"\n","zip":"02139"},"tags":["x","y\\z"]})"},
    {1, R"({"id":7,"address":{"zip":"02139"},"tags":[]})"},
    {2, R"(["red",1,2.5,true])"},
    {3, R"([{"kind":"circle","r":2},{"kind":"rect","w":1.5}])"},
    {4, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]},{"v":4}]})"},
    {6, R"([0,-0.5,1,2])"},
    {7, R"({"list":[[],[{}],{"x":[null,true,1e-07]}]})"},
    {8, R"([{"a":[1,{"b":"\u00e9"}]}])"},
    {9, R"({"id":1,"k":"v","\u00e9":""})"},
    {10, R"({"a":true,"b":null,"c":{"d":[]}})"},
    {11, R"({"b":[1,"x",{}],"a":null})"},
    {12, R"([false,true])"},
    {13, R"({"p":{"x":-1.25e+30},"q":"a@b.c"})"},
    {14, R"({"a":1,"ab":"s","abc":false,"a\"b":null,"x y":123})"},
    {15, R"(true)"},
    {16, R"({"date":"1999-12-31","id":"XYZ-007"})"},
    {17, R"(["hot dog","\u00e9cat"])"},
    {18, R"("\u00e9\u03bb\u00ff\ud83d\ude4f")"},
    {19, R"("a_b")"},
    {21, R"("x-y-z")"},
    {22, R"(["\u00e9ab"])"},
};

std::string run_oracle(const json& request) {
  std::string base = std::string(TF_BINARY_DIR) + "/json_matcher_oracle_" + std::to_string(::getpid());
  {
    std::ofstream in(base + ".in.json");
    in << request.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  std::string cmd = std::string(TF_PYTHON) + " " + TF_SOURCE_DIR + "/tests/engine/json_matcher_check.py " +
                    base + ".in.json " + base + ".out.json";
  int rc = std::system(cmd.c_str());
  std::ifstream out(base + ".out.json");
  std::stringstream text;
  text << out.rdbuf();
  std::remove((base + ".in.json").c_str());
  std::remove((base + ".out.json").c_str());
  EXPECT_EQ(rc, 0) << cmd << " (needs the `jsonschema` package, tools/requirements-test.txt)";
  return text.str();
}

}  // namespace

TEST(JsonMatcherOracle, AgreesWithPythonJsonschema) {
  auto schemas = oracle_schemas();
  json request = {{"schemas", json::array()}, {"docs", json::array()}, {"values", json::array()}};
  for (const auto& s : schemas) request["schemas"].push_back(json::parse(s.python));
  // Random walks: every finished document is one the matcher accepts.
  constexpr int kWalks = 40;
  std::vector<std::pair<int, std::string>> walks;
  std::mt19937 rng(20261130);
  for (size_t i = 0; i < schemas.size(); ++i) {
    int finished = 0;
    for (int w = 0; w < kWalks; ++w) {
      std::string doc = random_walk(schemas[i].matcher, rng, 400);
      if (doc.empty()) continue;
      ++finished;
      EXPECT_TRUE(accepts(schemas[i].matcher, doc));
      walks.push_back({static_cast<int>(i), doc});
      if (std::getenv("TF_JSON_MATCHER_DUMP") && w < 4)  // TF_JSON_MATCHER_DUMP=1: show some walks
        std::printf("%zu: %s\n", i, json(doc).dump().c_str());
      request["docs"].push_back({{"schema", i}, {"text", doc}});
    }
    EXPECT_GE(finished, kWalks / 2) << "schema " << i << ": too few walks finished";
  }
  // Mutants of the walks (a byte replaced, inserted or deleted): whatever jsonschema rejects, the matcher
  // must reject too.
  std::vector<std::pair<int, std::string>> mutants;
  const std::string bytes = "0123456789-.eE+\"\\,:{}[] \nantu";
  for (const auto& [schema, doc] : walks) {
    for (int k = 0; k < 2; ++k) {
      std::string m = doc;
      size_t at = rng() % (m.size() + 1);
      char c = bytes[rng() % bytes.size()];
      switch (rng() % 3) {
        case 0:
          if (at < m.size()) m[at] = c;
          break;
        case 1:
          m.insert(m.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          if (at < m.size()) m.erase(at, 1);
          break;
      }
      try {
        json text(m);
        (void)text.dump();  // invalid UTF-8 throws: Python would see other bytes
      } catch (const json::exception&) {
        continue;
      }
      mutants.push_back({schema, m});
      request["docs"].push_back({{"schema", schema}, {"text", m}});
    }
  }
  for (const HandDoc& d : kHandDocs) request["docs"].push_back({{"schema", d.schema}, {"text", d.text}});
  for (const HandValue& v : kHandValues)
    request["values"].push_back({{"schema", v.schema}, {"value", json::parse(v.value)}});

  nlohmann::json reply = nlohmann::json::parse(run_oracle(request));
  ASSERT_EQ(reply["docs"].size(), walks.size() + mutants.size() + std::size(kHandDocs));
  for (size_t i = 0; i < walks.size(); ++i)
    EXPECT_TRUE(reply["docs"][i]["valid"].get<bool>())
        << "schema " << walks[i].first << ": the matcher generated " << walks[i].second
        << "\n  jsonschema: " << reply["docs"][i]["error"].get<std::string>();
  size_t python_rejects = 0, both_accept = 0;
  for (size_t i = 0; i < mutants.size(); ++i) {
    const auto& [schema, doc] = mutants[i];
    bool python = reply["docs"][walks.size() + i]["valid"].get<bool>();
    bool matcher = accepts(schemas[static_cast<size_t>(schema)].matcher, doc);
    python_rejects += !python;
    both_accept += python && matcher;
    if (!python) {
      EXPECT_FALSE(matcher) << "schema " << schema << ": jsonschema rejects but the matcher accepts " << doc;
    }
  }
  EXPECT_GT(python_rejects, mutants.size() / 4) << "the mutants should mostly break the documents";
  for (size_t i = 0; i < std::size(kHandDocs); ++i) {
    const HandDoc& d = kHandDocs[i];
    const auto& r = reply["docs"][walks.size() + mutants.size() + i];
    bool python = r["valid"].get<bool>(),
         matcher = accepts(schemas[static_cast<size_t>(d.schema)].matcher, d.text);
    EXPECT_EQ(python, d.verdict != Verdict::kNeither) << d.text << ": " << r["error"].get<std::string>();
    EXPECT_EQ(matcher, d.verdict == Verdict::kBoth) << d.text;
    if (!python) {
      EXPECT_FALSE(matcher) << "jsonschema rejects but the matcher accepts " << d.text;
    }
  }
  ASSERT_EQ(reply["values"].size(), std::size(kHandValues));
  for (size_t i = 0; i < std::size(kHandValues); ++i) {
    const auto& r = reply["values"][i];
    EXPECT_TRUE(r["valid"].get<bool>()) << kHandValues[i].value << ": " << r["error"].get<std::string>();
    for (const auto& text : r["texts"])
      EXPECT_TRUE(
          accepts(schemas[static_cast<size_t>(kHandValues[i].schema)].matcher, text.get<std::string>()))
          << text.get<std::string>();
  }
  std::printf(
      "%zu random-walk documents, %zu mutants (%zu rejected by jsonschema, %zu accepted by both), %zu "
      "hand-written documents, %zu values x 4 serialisations\n",
      walks.size(), mutants.size(), python_rejects, both_accept, std::size(kHandDocs),
      std::size(kHandValues));
}

TEST(JsonMatcher, SuffixFollowsTheDocument) {
  auto s = JsonSchema::with_suffix(compile(R"({"type":"object","properties":{"a":{"type":"integer"}}})"),
                                   "}\n</tool_call>");
  JsonMatcher m(s);
  ASSERT_TRUE(m.feed(std::string_view(R"({"a":12})")));
  EXPECT_FALSE(m.complete()) << "the suffix is still due";
  EXPECT_FALSE(m.dead_end());
  EXPECT_FALSE(m.feed('x'));
  EXPECT_FALSE(m.feed(std::string_view("}\n</tool_calx")));  // all or nothing
  ASSERT_TRUE(m.feed(std::string_view("}\n</tool_")));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.feed(std::string_view("call>")));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.dead_end());
  EXPECT_FALSE(m.feed('\n'));
  // A top-level number: the suffix starts at the first byte the number cannot take.
  JsonMatcher n(JsonSchema::with_suffix(compile(R"({"type":"integer"})"), "]"));
  ASSERT_TRUE(n.feed(std::string_view("42]")));
  EXPECT_TRUE(n.dead_end());
  // Matchers in the suffix and in the document never share a state.
  JsonMatcher a(s), b(s);
  ASSERT_TRUE(a.feed(std::string_view(R"({"a":1}})")));
  ASSERT_TRUE(b.feed(std::string_view(R"({"a":1})")));
  EXPECT_NE(a.state_bytes(), b.state_bytes());
}

TEST(JsonMatcher, TextRegexAndChoices) {
  JsonMatcher re(JsonSchema::text_regex(R"(\d{3}-[a-z]+)"));
  EXPECT_FALSE(re.complete());
  EXPECT_FALSE(re.feed(std::string_view("12a")));  // all or nothing
  ASSERT_TRUE(re.feed(std::string_view("123-ab")));
  EXPECT_TRUE(re.complete());
  EXPECT_FALSE(re.dead_end()) << "more letters may follow";
  EXPECT_FALSE(re.feed('-'));
  JsonMatcher choice(JsonSchema::text_choice({"yes", "no", "maybe so", "a.b"}));
  ASSERT_TRUE(choice.feed(std::string_view("ma")));
  EXPECT_FALSE(choice.feed('x'));
  ASSERT_TRUE(choice.feed(std::string_view("ybe so")));
  EXPECT_TRUE(choice.complete());
  EXPECT_TRUE(choice.dead_end());
  JsonMatcher dot(JsonSchema::text_choice({"yes", "a.b"}));
  EXPECT_FALSE(dot.feed(std::string_view("axb"))) << "choices are literals, not patterns";
  ASSERT_TRUE(dot.feed(std::string_view("a.b")));
  EXPECT_TRUE(dot.dead_end());
  EXPECT_THROW(JsonSchema::text_choice({}), InvalidRequest);
  EXPECT_THROW(JsonSchema::text_regex("(?=a)b"), InvalidRequest);
  EXPECT_THROW(JsonSchema::text_regex("[]"), InvalidRequest);  // matches nothing
}

TEST(JsonMatcher, ReplyAfterAnOptionalReasoningBlock) {
  const auto object = compile(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const auto gated = JsonSchema::after_reasoning(object, {"<think>", "</think>", false});
  // With a reasoning block: free text (even JSON-breaking text and a partial marker), then the document.
  JsonMatcher m(gated);
  ASSERT_TRUE(m.feed(std::string_view("<think>\nNot JSON: '}{' and </thin k> and </")));
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.feed(std::string_view("think>\n\n{\"a\":1}")));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.dead_end());
  // Without one: the document at once; anything else is refused.
  JsonMatcher direct(gated);
  EXPECT_FALSE(direct.feed('x'));
  EXPECT_FALSE(direct.feed(std::string_view("<thx")));
  ASSERT_TRUE(direct.feed(std::string_view("{\"a\":2}")));
  EXPECT_TRUE(direct.dead_end());
  // Too much whitespace after the block, or EOS inside it, is not a reply.
  JsonMatcher ws(gated);
  EXPECT_FALSE(ws.feed(std::string_view("<think>x</think>\n\n\n\n\n{}")));
  // The prompt opened the block already: free text from the first byte.
  JsonMatcher open(JsonSchema::after_reasoning(object, {"<think>", "</think>", true}));
  ASSERT_TRUE(open.feed(std::string_view("just thinking</think>{}")));
  EXPECT_TRUE(open.complete());
  // A gated text choice.
  JsonMatcher choice(
      JsonSchema::after_reasoning(JsonSchema::text_choice({"yes", "no"}), {"<think>", "</think>"}));
  ASSERT_TRUE(choice.feed(std::string_view("<think>hmm</think>\nno")));
  EXPECT_TRUE(choice.dead_end());
}

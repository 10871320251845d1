// JsonMatcher: hand-written documents, a random-walk cross-check against Python's `jsonschema` (the walk
// generates documents the matcher accepts; jsonschema must find every one valid), hand-written documents
// both ways, unsupported keywords, and the cost of a copy.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"
#include "engine/json_matcher.h"

using namespace tf;
using json = nlohmann::ordered_json;

namespace {

std::shared_ptr<const JsonSchema> compile(const char* schema) { return JsonSchema::compile(json::parse(schema)); }

// The number of bytes accepted before the first rejected one (the whole size when all are accepted).
size_t accepted_prefix(const std::shared_ptr<const JsonSchema>& s, std::string_view doc, bool* complete = nullptr) {
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

}  // namespace

TEST(JsonMatcher, AcceptsValidDocumentsByteByByte) {
  auto person = compile(kPerson);
  for (const char* doc : {R"({"name":"Ada","age":36})", R"({"name":"Ada","age":-0,"score":1.5e-3,"note":null})",
                          R"({"name":"Ada","age":0,"active":false})",
                          "{\n  \"name\": \"A\\u00e9\\ud83d\\ude00\\n\",\n  \"age\": 7,\n  \"score\": -0.25E+2\n}",
                          "  {\"name\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\",\"age\":1}"}) {
    bool complete = false;
    EXPECT_EQ(accepted_prefix(person, doc, &complete), std::string_view(doc).size()) << doc;
    EXPECT_TRUE(complete) << doc;
    JsonMatcher m(person);
    ASSERT_TRUE(m.feed(std::string_view(doc)));
    EXPECT_TRUE(m.dead_end()) << "nothing may follow the top-level object: " << doc;
  }
}

TEST(JsonMatcher, RejectsInvalidDocumentsAtTheRightByte) {
  struct Case {
    const char* schema;
    const char* prefix;  // accepted
    const char* rest;    // its first byte is rejected
  };
  const Case cases[] = {
      {kPerson, R"({"name":)", R"(1})"},                           // wrong type
      {kPerson, R"({"name":"Ada")", "}"},                          // missing required "age"
      {kPerson, R"({"name":"Ada","age":1,")", R"(x":1})"},         // extra property: no listed name "x"
      {kPerson, R"({"name":"Ada","age":1,"s)", R"(x":1})"},        // a key prefix of "score" only
      {kPerson, R"({")", R"(age":1})"},                            // "age" before the required "name"
      {kPerson, R"({"name":"Ada","age":0)", R"(1})"},              // leading zero
      {kPerson, R"({"name":"Ada","age":1)", R"(.5})"},             // integer: no fraction
      {kPerson, R"({"name":"Ada","age":1)", R"(e3})"},             // integer: no exponent
      {kPerson, R"({"name":"Ada","age":1,"score":1.)", R"(})"},    // a digit must follow '.'
      {kPerson, R"({"name":"Ada","age":1,"score":)", R"(+1})"},    // no '+' sign
      {kPerson, R"({"name":"a\)", R"(x"})"},                       // bad escape
      {kPerson, R"({"name":"a\u12)", R"(g4"})"},                   // bad \u escape
      {kPerson, R"({"name":"a\ud)", R"(c00"})"},                   // a lone low surrogate, known at "dc"
      {kPerson, R"({"name":"a\ud83d)", R"("})"},                   // high surrogate without its low half
      {kPerson, R"({"name":")", "\x01\"}"},                        // raw control character
      {kPerson, R"({"name":")", "\xc0\xaf\"}"},                    // overlong encoding
      {kPerson, "{\"name\":\"\xe0", "\x80\x80\"}"},              // overlong 3-byte encoding
      {kPerson, "{\"name\":\"\xed", "\xa0\x80\"}"},              // UTF-16 surrogate in UTF-8
      {kPerson, "{\"name\":\"\xc3", "A\"}"},                     // truncated sequence
      {kPerson, R"({"name":")", "\xff\"}"},                        // never valid in UTF-8
      {kPerson, R"({"name":")", R"("})"},                          // minLength 1
      {kPerson, R"({"name":"123456789012)", R"(3"})"},             // maxLength 12
      {kPerson, R"({"name":"Ada","age":1})", " "},                 // nothing after the top-level value
      {kPerson, R"({"name":"Ada","age":1,"active":tru)", R"(E})"}, // literal
      {kPerson, R"({"name":"Ada","age":1,"note":)", R"(true})"},   // not in the type union
      {kPerson, "{\n               ", " \"name\":\"A\",\"age\":1}"},  // 17 whitespace bytes
      {R"({"type":"array","items":{"type":"integer"},"maxItems":2})", "[1,2", ",3]"},  // too many items
      {R"({"type":"array","items":{"type":"integer"},"minItems":2})", "[1", "]"},      // too few items
      {R"({"type":"array","items":{"type":"integer"}})", "[1,", "]"},                   // trailing comma
      {R"({"type":"array","prefixItems":[{"type":"string"}],"items":false})", R"(["a")", ",1]"},
      {R"({"enum":["red","green",12]})", R"("gr)", R"(ay")"},
      {R"({"enum":["red","green",12]})", "1", "3"},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":true})", R"({"a":"x","a)",
       R"(":"y"})"},  // a listed name cannot come again as an extra key
  };
  for (const Case& c : cases) {
    auto s = compile(c.schema);
    std::string doc = std::string(c.prefix) + c.rest;
    EXPECT_EQ(accepted_prefix(s, doc), std::string_view(c.prefix).size()) << c.schema << "\n  doc: " << doc;
  }
}

TEST(JsonMatcher, CompleteAndDeadEnd) {
  auto number = compile(R"({"type":"number"})");
  JsonMatcher m(number);
  EXPECT_FALSE(m.complete());
  ASSERT_TRUE(m.feed(std::string_view(" -1")));
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

TEST(JsonMatcher, CodePointsCountTowardLengths) {
  auto s = compile(R"({"type":"string","minLength":2,"maxLength":2})");
  EXPECT_TRUE(accepts(s, "\"\xc3\xa9\xf0\x9f\x98\x80\""));
  EXPECT_TRUE(accepts(s, R"("\ud83d\ude00\n")")) << "a surrogate pair is one code point";
  EXPECT_FALSE(accepts(s, R"("\ud83d\ude00")"));
  EXPECT_FALSE(accepts(s, R"("abc")"));
}

TEST(JsonSchemaCompile, RefusesUnsupportedKeywordsWithTheirPath) {
  struct Case {
    const char* schema;
    const char* keyword;
    const char* path;
  };
  const Case cases[] = {
      {R"({"type":"object","properties":{"n":{"type":"integer","minimum":0}}})", "minimum", "#/properties/n"},
      {R"({"type":"object","properties":{"a/b":{"type":"string","pattern":"x"}}})", "pattern", "#/properties/a~1b"},
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
  // The non-ordered json entry point compiles too (keys in nlohmann::json's sorted order).
  EXPECT_TRUE(accepts(JsonSchema::compile(nlohmann::json::parse(R"({"type":"object","properties":{
      "b":{"type":"integer"},"a":{"type":"integer"}},"required":["a","b"]})")), R"({"a":1,"b":2})"));
}

TEST(JsonMatcher, CopyCost) {
  auto tree = compile(R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}}})");
  JsonMatcher m(tree);
  std::string doc;
  for (int i = 0; i < 10; ++i) doc += R"({"v":1,"kids":[)";
  doc += R"({"v":12)";
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
  EXPECT_EQ(alive, static_cast<size_t>(kCopies) * 2);
  auto ns = [](auto d) { return std::chrono::duration<double, std::nano>(d).count() / kCopies; };
  std::printf("matcher at nesting depth 21 (23 frames of %zu bytes): copy %.1f ns, copy + feed %.1f ns\n",
              sizeof(JsonMatcher::Frame), ns(t1 - t0), ns(t2 - t1));
}

// `tensorfold generate` on the CPU with the embedded demo model: --json-schema constrains the reply to a
// document that satisfies the schema, and a schema outside the supported subset is refused with the keyword.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_tensorfold.h"

namespace tf {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

TEST(CliGenerate, JsonSchemaConstrainsTheReply) {
  const std::string schema = write_temp("tf_generate_schema.json", R"({"type": "object", "properties": {
      "answer": {"type": "string", "maxLength": 30}, "confidence": {"enum": ["low", "high"]}},
      "required": ["answer", "confidence"]})");
  for (const char* temperature : {"0", "0.8"}) {
    ProcessResult r =
        run_tensorfold(std::string("generate --backend cpu -q -n 80 --seed 3 --temperature ") + temperature +
                           " --chat 'What does json.loads do?' --json-schema " + schema,
                       false);
    ASSERT_EQ(r.code, 0) << r.output;
    const auto doc = nlohmann::ordered_json::parse(r.output, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << r.output;
    ASSERT_TRUE(doc.is_object()) << r.output;
    EXPECT_EQ(doc.size(), 2u) << r.output;
    EXPECT_EQ(doc.begin().key(), "answer");  // the schema's order
    EXPECT_TRUE(doc["answer"].is_string() && doc["answer"].get<std::string>().size() <= 30 * 4) << r.output;
    EXPECT_TRUE(doc["confidence"] == "low" || doc["confidence"] == "high") << r.output;
  }
}

// --min-tokens: a stop string met early ends the reply only from the min_tokens-th token on (the reply is
// still a prefix of the free one: stops never change sampling).
TEST(CliGenerate, MinTokensHoldsOffAStopString) {
  const std::string cmd = "generate --backend cpu -q -n 40 --temperature 0 --prompt 'Once upon a time' ";
  ProcessResult free = run_tensorfold(cmd + "--ignore-eos", false);
  ASSERT_EQ(free.code, 0) << free.output;
  std::string stop;
  for (size_t i = 1; i + 3 <= free.output.size() && stop.empty(); ++i) {
    const std::string w = free.output.substr(i, 3);
    bool plain = w.find_first_not_of(" ") != std::string::npos;
    for (char ch : w) plain = plain && ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\';
    if (plain) stop = w;
  }
  ASSERT_FALSE(stop.empty()) << free.output;
  ProcessResult cut = run_tensorfold(cmd + "--ignore-eos --stop '" + stop + "'", false);
  ProcessResult held = run_tensorfold(cmd + "--ignore-eos --min-tokens 30 --stop '" + stop + "'", false);
  ASSERT_EQ(cut.code, 0) << cut.output;
  ASSERT_EQ(held.code, 0) << held.output;
  for (ProcessResult* r : {&free, &cut, &held})  // (the command ends its reply with a newline)
    if (!r->output.empty() && r->output.back() == '\n') r->output.pop_back();
  EXPECT_EQ(free.output.rfind(cut.output, 0), 0u) << cut.output;
  EXPECT_EQ(free.output.rfind(held.output, 0), 0u) << held.output;
  EXPECT_GT(held.output.size(), cut.output.size()) << stop;
}

TEST(CliGenerate, UnsupportedSchemaIsRefusedWithTheKeyword) {
  const std::string schema = write_temp("tf_generate_bad.json", R"({"type": "integer", "minimum": 3})");
  ProcessResult r = run_tensorfold("generate --backend cpu -q -n 4 --chat hi --json-schema " + schema);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("minimum"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tf

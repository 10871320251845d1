// Every chat template in ../shared/text-fixtures rendered with many conversations, compared byte for byte
// with transformers' apply_chat_template. The goldens are regenerated live by the ctest fixture
// chat_template_goldens (tools/chat_template_goldens.py) before this test runs.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "text/chat_template.h"

namespace tf {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// (template id, case name) pairs where we knowingly differ from transformers; each entry says why.
// The test fails if one of them starts to match, so the list stays honest.
const std::set<std::pair<std::string, std::string>> kKnownDifferences = {};

std::unique_ptr<ChatTemplate> load(const ojson& t, std::string* error) {
  try {
    std::string kind = t["kind"];
    if (kind == "dir") return std::make_unique<ChatTemplate>(ChatTemplate::from_dir(t["path"]));
    std::string source = kind == "source" ? t["source"].get<std::string>() : read_file(t["path"]);
    return std::make_unique<ChatTemplate>(source, t["special"].value("bos_token", ""),
                                          t["special"].value("eos_token", ""));
  } catch (const Error& e) {
    *error = e.what();
    return nullptr;
  }
}

// Where the two renderings part, with some context, as JSON strings.
std::string describe_difference(const ojson& want, bool raised, const std::string& err,
                                const std::string& got) {
  if (want.contains("error"))
    return "  python raises " + want["error"].get<std::string>() + "\n  ours renders " +
           ojson(got.substr(0, 300)).dump();
  if (raised) return "  ours raises " + err;
  std::string exp = want["expected"];
  size_t i = 0;
  while (i < exp.size() && i < got.size() && exp[i] == got[i]) ++i;
  size_t from = i > 60 ? i - 60 : 0;
  return "  at byte " + std::to_string(i) +
         "\n  python: " + ojson(exp.substr(from, 160)).dump(-1, ' ', false, ojson::error_handler_t::replace) +
         "\n  ours:   " + ojson(got.substr(from, 160)).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

TEST(ChatTemplateGoldens, MatchTransformers) {
  std::string path = std::string(TF_BINARY_DIR) + "/chat_template_goldens.json";
  std::ifstream f(path);
  ASSERT_TRUE(f) << path << " missing: run the chat_template_goldens ctest fixture";
  ojson goldens = ojson::parse(f);
  const ojson& cases = goldens["cases"];
  int total = 0, passed = 0, known = 0;
  std::set<std::string> failing_templates;
  for (const auto& t : goldens["templates"]) {
    std::string id = t["id"], load_error;
    auto tmpl = load(t, &load_error);
    for (size_t k = 0; k < cases.size(); ++k) {
      const ojson& c = cases[k];
      const ojson& want = t["results"][k];
      std::string name = c["name"];
      bool ok = false;
      std::string got, err = load_error;
      if (tmpl) {
        try {
          got = tmpl->render_ordered(c["messages"], c["tools"], c["add_generation_prompt"], c["kwargs"]);
        } catch (const Error& e) {
          err = e.what();
        }
      }
      bool raised = !tmpl || !err.empty();
      if (want.contains("error")) {
        ok = raised;
      } else {
        ok = !raised && got == want["expected"].get<std::string>();
      }
      ++total;
      bool expected_diff = kKnownDifferences.count({id, name}) > 0;
      if (expected_diff) {
        ++known;
        EXPECT_FALSE(ok) << id << " / " << name << " now matches: remove it from kKnownDifferences";
        continue;
      }
      if (ok) {
        ++passed;
        continue;
      }
      failing_templates.insert(id);
      ADD_FAILURE() << id << " / " << name << "\n" << describe_difference(want, raised, err, got);
    }
  }
  std::cout << "chat template goldens (transformers " << goldens["transformers"].get<std::string>()
            << "): " << passed << "/" << total << " match, " << known << " known differences, "
            << failing_templates.size() << " templates with failures\n";
}

}  // namespace
}  // namespace tf

// tf::Tokenizer against reference encodings stored in text-fixtures that were produced by Hugging Face
// tokenizers / transformers upstream (llama.cpp's vocab test vectors, swift-transformers' multilingual
// baselines from transformers 4.57.1). These also cover Llama 2, whose tokenizer.json the current
// `tokenizers` refuses to load (merges containing spaces), so the live goldens cannot.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace {

const std::string kFixtures = std::string(TF_SHARED_DIR) + "/text-fixtures/";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << "cannot read " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> split_inputs(const std::string& all) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t hit; (hit = all.find(sep, pos)) != std::string::npos; pos = hit + sep.size())
    out.push_back(all.substr(pos, hit - pos));
  return out;
}

struct LlamaCppCase {
  const char* vectors;
  const char* family;
};

class LlamaCppVectors : public ::testing::TestWithParam<LlamaCppCase> {};

TEST_P(LlamaCppVectors, EncodeMatches) {
  const auto& p = GetParam();
  const std::string base = kFixtures + "vocab-vectors/llama.cpp/ggml-vocab-" + p.vectors + ".gguf";
  auto inputs = split_inputs(slurp(base + ".inp"));
  std::istringstream out(slurp(base + ".out"));
  tf::Tokenizer tok = tf::Tokenizer::load(kFixtures + p.family);
  size_t n = 0;
  for (std::string line; std::getline(out, line); ++n) {
    ASSERT_LT(n, inputs.size());
    std::vector<int32_t> want;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) want.push_back(id);
    EXPECT_EQ(tok.encode(inputs[n], false), want) << p.vectors << " input #" << n << ": " << inputs[n];
  }
  EXPECT_EQ(n, inputs.size());
  EXPECT_GT(n, 20u);
}

INSTANTIATE_TEST_SUITE_P(Vocabs, LlamaCppVectors,
                         ::testing::Values(LlamaCppCase{"llama-spm", "llama2"},
                                           LlamaCppCase{"llama-bpe", "llama3"},
                                           LlamaCppCase{"qwen2", "qwen2.5"}, LlamaCppCase{"qwen2", "qwen3"},
                                           LlamaCppCase{"phi-3", "phi-3"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.vectors) + "_" + info.param.family;
                           for (auto& ch : n)
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

struct BaselineCase {
  const char* baseline;
  const char* family;
};

class SwiftBaselines : public ::testing::TestWithParam<BaselineCase> {};

TEST_P(SwiftBaselines, EncodeDecodeMatch) {
  const auto& p = GetParam();
  auto inputs =
      nlohmann::json::parse(slurp(kFixtures + "vocab-vectors/swift-transformers/multilingual/inputs.json"));
  auto base =
      nlohmann::json::parse(slurp(kFixtures + "vocab-vectors/swift-transformers/multilingual/baselines/" +
                                  p.baseline + "_multilingual.json"));
  std::map<std::string, std::string> text_by_id;
  for (const auto& e : inputs) text_by_id[e["id"]] = e["text"];
  tf::Tokenizer tok = tf::Tokenizer::load(kFixtures + p.family);
  ASSERT_GT(base["entries"].size(), 50u);
  for (const auto& e : base["entries"]) {
    const std::string& text = text_by_id.at(e["id"]);
    auto ids = e["input_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), ids) << p.baseline << " " << e["id"];
    EXPECT_EQ(tok.decode(ids, false), e["decoded_with_special"].get<std::string>())
        << p.baseline << " " << e["id"];
    EXPECT_EQ(tok.decode(ids, true), e["decoded_skip_special"].get<std::string>())
        << p.baseline << " " << e["id"];
    tf::IncrementalDetokenizer detok(tok, true);
    std::string streamed;
    for (int32_t id : ids) streamed += detok.push(id);
    EXPECT_EQ(streamed + detok.flush(), e["decoded_skip_special"].get<std::string>())
        << p.baseline << " " << e["id"];
  }
}

INSTANTIATE_TEST_SUITE_P(Vocabs, SwiftBaselines,
                         ::testing::Values(BaselineCase{"qwen2_5", "qwen2.5"},
                                           BaselineCase{"tinyllama", "llama2"},
                                           BaselineCase{"t5_small", "t5-small"}),
                         [](const auto& info) { return std::string(info.param.baseline); });

}  // namespace

// Tokenizer::token_bytes on the real tokenizers of text-fixtures: the bytes of an encoded text's tokens,
// concatenated, are the text itself (ByteLevel vocabularies) or the text behind the one prefix space that
// Metaspace/SentencePiece encoders prepend. Structured outputs match tokens by these bytes.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace {

const char* const kTexts[] = {
    "{\"name\": \"Ada\", \"age\": 36, \"tags\": [\"x\", \"y\"], \"ok\": true}",
    "def f(x):\n    return x ** 2  # square\n",
    "caf\xC3\xA9 na\xC3\xAFve \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80 \xE2\x82\xAC"
    "5",  // é ï 中文 😀 €
    "  leading spaces, tabs\tand\nnewlines\n\n",
};

class TokenBytes : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenBytes, EncodedTokensConcatenateToTheText) {
  const std::string dir = std::string(TF_SHARED_DIR) + "/text-fixtures/" + GetParam();
  if (!std::filesystem::exists(dir + "/tokenizer.json") &&
      !std::filesystem::exists(dir + "/tokenizer.json.gz"))
    GTEST_SKIP() << "no fixture " << dir;
  const tf::Tokenizer tok = tf::Tokenizer::load(dir);
  int with_bytes = 0;
  for (const char* text : kTexts) {
    const std::vector<int32_t> ids = tok.encode(text, false);
    std::string bytes;
    for (int32_t id : ids) {
      const auto b = tok.token_bytes(id);
      ASSERT_TRUE(b.has_value()) << "id " << id << " of " << text;
      bytes += *b;
    }
    // SentencePiece-style encoders add one leading space (the decoder strips it again).
    const std::string plain(text), spaced = ' ' + plain;
    if (bytes != plain) {
      EXPECT_EQ(bytes, spaced) << GetParam();
    }
    ++with_bytes;
  }
  EXPECT_EQ(with_bytes, 4);
  // Special tokens have no bytes: constrained outputs never emit them (EOS aside).
  int added = 0;
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (tok.is_special(id)) {
      EXPECT_FALSE(tok.token_bytes(id).has_value()) << id;
      ++added;
    }
  EXPECT_GT(added, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenBytes,
                         ::testing::Values("qwen3", "llama3", "llama2", "gemma3", "mistral-7b", "phi-3"));

}  // namespace

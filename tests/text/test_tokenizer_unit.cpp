// Unit tests of the tokenizer pipeline on small hand-made tokenizer.json files: each expectation
// follows from the documented Hugging Face semantics of the configured component.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "text/detokenizer.h"
#include "text/tok_text.h"
#include "text/tokenizer.h"

namespace {

using nlohmann::json;

std::string byte_char(uint8_t b) {
  std::string s;
  tf::tok::append_utf8(s, tf::tok::byte_to_char(b));
  return s;
}

// Byte-level BPE over the GPT-2 alphabet (ids 0..255 in byte order) plus the given merges.
json byte_level(const std::vector<std::pair<std::string, std::string>>& merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<uint8_t>(b))] = b;
  json m = json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
    m.push_back(json::array({a, b}));
  }
  return {{"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens", json::array()}};
}

tf::Tokenizer make(const json& j, const json& config = json()) {
  return tf::Tokenizer::from_json(j.dump(), config.is_null() ? "" : config.dump());
}

std::vector<int32_t> ids_of(const tf::Tokenizer& t, const std::vector<std::string>& toks) {
  std::vector<int32_t> out;
  for (const auto& s : toks) {
    auto id = t.token_to_id(s);
    EXPECT_TRUE(id) << "no token " << s;
    out.push_back(id.value_or(-1));
  }
  return out;
}

std::string stream_all(const tf::Tokenizer& t, const std::vector<int32_t>& ids, bool skip,
                       std::vector<std::string>* chunks = nullptr) {
  tf::IncrementalDetokenizer d(t, skip);
  std::string s;
  for (int32_t id : ids) {
    std::string c = d.push(id);
    EXPECT_TRUE(tf::tok::is_valid_utf8(c)) << "chunk splits a character";
    if (chunks) chunks->push_back(c);
    s += c;
  }
  std::string tail = d.flush();
  if (chunks) chunks->push_back(tail);
  return s + tail;
}

TEST(TokenizerUnit, ByteLevelMergesFollowRankOrder) {
  const std::string G = byte_char(' ');  // "Ġ"
  auto t = make(byte_level({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {G, "w"}}));
  EXPECT_EQ(t.encode("hello world"), ids_of(t, {"hello", G + "w", "o", "r", "l", "d"}));
  // Same pairs, lower-ranked merge first: "ab" wins over "bc" in "abc", and the reverse.
  auto t1 = make(byte_level({{"a", "b"}, {"b", "c"}}));
  EXPECT_EQ(t1.encode("abc"), ids_of(t1, {"ab", "c"}));
  auto t2 = make(byte_level({{"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(t2.encode("abc"), ids_of(t2, {"a", "bc"}));
  // Equal ranks: leftmost first.
  auto t3 = make(byte_level({{"a", "a"}}));
  EXPECT_EQ(t3.encode("aaa"), ids_of(t3, {"aa", "a"}));
}

TEST(TokenizerUnit, ByteLevelRoundTripsAnyText) {
  auto t = make(byte_level({{"h", "e"}, {"l", "l"}}));
  for (std::string s : {"", " ", "hello  world\n\n\t",
                        "Привет, мир! 日本語 😀👍🏽 e\u0301 \u00a0x", "a\r\nb  \n c"}) {
    auto ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s);
    EXPECT_EQ(stream_all(t, ids, true), s);
  }
  // Invalid UTF-8 input is read as U+FFFD, never crashes.
  EXPECT_EQ(t.decode(t.encode("a\xff"
                              "b")),
            "a\xEF\xBF\xBD"
            "b");
}

TEST(TokenizerUnit, StreamingHoldsIncompleteCharacters) {
  auto t = make(byte_level({}));
  // "😀" is four bytes, each its own token: nothing may come out before the fourth.
  std::vector<std::string> chunks;
  auto ids = t.encode("x😀y");
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(stream_all(t, ids, true, &chunks), "x😀y");
  EXPECT_EQ(chunks[0], "x");
  EXPECT_EQ(chunks[1] + chunks[2] + chunks[3], "");
  EXPECT_EQ(chunks[4], "😀");
  // A truncated character at the end comes out of flush() as one U+FFFD, like the full decode.
  std::vector<int32_t> cut(ids.begin(), ids.begin() + 3);
  EXPECT_EQ(t.decode(cut), "x\xEF\xBF\xBD");
  EXPECT_EQ(stream_all(t, cut, true), "x\xEF\xBF\xBD");
}

// A vocabulary where every expected piece is a whole token and ignore_merges is on, so the ids reveal
// exactly how the text was split.
json piece_vocab(const std::vector<std::string>& pieces, const json& pre, const json& normalizer = json()) {
  json vocab = json::object();
  int i = 0;
  vocab["<unk>"] = i++;
  for (const auto& p : pieces) vocab[p] = i++;
  return {{"normalizer", normalizer},
          {"pre_tokenizer", pre},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array()},
            {"ignore_merges", true},
            {"unk_token", "<unk>"}}},
          {"added_tokens", json::array()}};
}

json split(const char* behavior, const char* pattern = "-") {
  return {{"type", "Split"}, {"pattern", {{"String", pattern}}}, {"behavior", behavior}, {"invert", false}};
}

TEST(TokenizerUnit, SplitBehaviors) {
  std::vector<std::string> pieces = {"a", "b", "-", "--", "a-", "-b", "a--", "--b"};
  auto removed = make(piece_vocab(pieces, split("Removed")));
  EXPECT_EQ(removed.encode("a-b"), ids_of(removed, {"a", "b"}));
  auto isolated = make(piece_vocab(pieces, split("Isolated")));
  EXPECT_EQ(isolated.encode("a--b"), ids_of(isolated, {"a", "-", "-", "b"}));
  auto prev = make(piece_vocab(pieces, split("MergedWithPrevious")));
  EXPECT_EQ(prev.encode("a-b"), ids_of(prev, {"a-", "b"}));
  auto next = make(piece_vocab(pieces, split("MergedWithNext")));
  EXPECT_EQ(next.encode("a-b"), ids_of(next, {"a", "-b"}));
  auto contiguous = make(piece_vocab(pieces, split("Contiguous")));
  EXPECT_EQ(contiguous.encode("a--b"), ids_of(contiguous, {"a", "--", "b"}));
}

TEST(TokenizerUnit, NormalizersAndMetaspace) {
  json norm = {
      {"type", "Sequence"},
      {"normalizers", json::array({{{"type", "NFKC"}},
                                   {{"type", "Lowercase"}},
                                   {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}})}};
  json meta = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  auto t = make(piece_vocab({"\u2581full", "\u2581word"}, meta, norm));
  // Fullwidth letters fold to ASCII (NFKC), then lowercase, then the outer spaces go.
  EXPECT_EQ(t.encode("  ＦＵＬＬ WORD "), ids_of(t, {"\u2581full", "\u2581word"}));
}

TEST(TokenizerUnit, AddedTokensStripAndSingleWord) {
  json j = byte_level({});
  j["added_tokens"] = json::array({{{"id", 300},
                                    {"content", "<x>"},
                                    {"lstrip", true},
                                    {"rstrip", true},
                                    {"normalized", false},
                                    {"single_word", false},
                                    {"special", true}},
                                   {{"id", 301},
                                    {"content", "cat"},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false},
                                    {"single_word", true},
                                    {"special", false}}});
  auto t = make(j);
  // lstrip/rstrip: the spaces around <x> belong to the token.
  EXPECT_EQ(t.encode("a  <x>  b"), (std::vector<int32_t>{'a', 300, 'b'}));
  // single_word: only when not inside a word.
  EXPECT_EQ(t.encode("cat"), (std::vector<int32_t>{301}));
  EXPECT_NE(t.encode("concat").back(), 301);
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(301));
  EXPECT_EQ(t.vocab_size(), 302);
  EXPECT_EQ(t.decode({'a', 300, 'b'}, true), "ab");
  EXPECT_EQ(t.decode({'a', 300, 'b'}, false), "a<x>b");
  EXPECT_EQ(stream_all(t, {'a', 300, 'b'}, false), "a<x>b");
}

json spm_bpe() {
  // SentencePiece-style: Prepend+Replace normalizer, byte fallback, Llama-2 decoder chain.
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\u2581", 2}, {"h", 3}, {"i", 4}, {"\u2581h", 5}, {"\u2581hi", 6}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 10 + b;
  }
  return {{"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}})}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", json::array({"\u2581 h", "\u2581h i"})},
            {"byte_fallback", true},
            {"fuse_unk", true},
            {"unk_token", "<unk>"}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
          {"added_tokens", json::array({{{"id", 1},
                                         {"content", "<s>"},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"single_word", false},
                                         {"special", true}}})}};
}

TEST(TokenizerUnit, SentencePieceBpeWithByteFallback) {
  json config = {{"bos_token", {{"content", "<s>"}}}, {"eos_token", "</s>"}};
  auto t = make(spm_bpe(), config);
  // "é" (C3 A9) is not in the vocabulary: it becomes its two byte tokens.
  EXPECT_EQ(t.encode("hi é"), (std::vector<int32_t>{1, 6, 2, 10 + 0xC3, 10 + 0xA9}));
  EXPECT_EQ(t.encode("hi", false), (std::vector<int32_t>{6}));
  EXPECT_EQ(t.decode(t.encode("hi é")), "hi é");  // Strip removes the prepended space
  EXPECT_EQ(t.decode({1, 6}, false), "<s> hi");
  // A broken byte group decodes as one U+FFFD per byte.
  EXPECT_EQ(t.decode({6, 10 + 0xC3, 10 + 0x41}), "hi\xEF\xBF\xBD\xEF\xBF\xBD");
  for (std::vector<int32_t> ids :
       {std::vector<int32_t>{6, 10 + 0xC3, 10 + 0xA9, 6}, std::vector<int32_t>{6, 10 + 0xC3, 10 + 0x41},
        std::vector<int32_t>{1, 2, 2, 6}}) {
    EXPECT_EQ(stream_all(t, ids, true), t.decode(ids, true));
    EXPECT_EQ(stream_all(t, ids, false), t.decode(ids, false));
  }
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.bos_id(), 1);
  EXPECT_EQ(t.eos_token(), "</s>");
  EXPECT_FALSE(t.eos_id().has_value());
  EXPECT_EQ(t.id_to_token(5), "\u2581h");
}

TEST(TokenizerUnit, UnigramViterbiAndCleanup) {
  auto unigram = [](double ab_score) {
    json vocab =
        json::array({json::array({"<unk>", 0.0}), json::array({"\u2581", -1.0}), json::array({"a", -2.0}),
                     json::array({"b", -2.0}), json::array({"ab", ab_score}), json::array({".", -1.0})});
    return json{
        {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}}},
        {"model", {{"unk_id", 0}, {"vocab", vocab}}},  // old format without "type"
        {"decoder", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}}},
        {"added_tokens", json::array()}};
  };
  auto best_ab = make(unigram(-1.0));
  EXPECT_EQ(best_ab.encode("ab"), (std::vector<int32_t>{1, 4}));  // -1 + -1 beats -1 -2 -2
  auto split_ab = make(unigram(-5.0));
  EXPECT_EQ(split_ab.encode("ab"), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(split_ab.encode("zz"), (std::vector<int32_t>{1, 0}));  // unknown run fused into one <unk>
  // transformers' clean_up_tokenization_spaces (non-BPE): " ." -> "."
  auto clean = make(unigram(-1.0), json{{"clean_up_tokenization_spaces", true}});
  std::vector<int32_t> ids = {1, 4, 1, 5, 1, 2};  // "▁ab▁.▁a"
  EXPECT_EQ(clean.decode(ids), "ab. a");
  EXPECT_EQ(stream_all(clean, ids, true), "ab. a");
}

TEST(TokenizerUnit, CopiesShareOneImmutableTokenizerAcrossThreads) {
  const std::string G = byte_char(' ');
  auto t = make(byte_level({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {G, "w"}}));
  std::vector<std::string> texts;
  for (int i = 0; i < 16; ++i)
    texts.push_back(std::string(300 + i * 37, 'a' + i % 7) + " hello world " + std::to_string(i));
  std::vector<std::vector<int32_t>> want;
  for (const auto& s : texts) want.push_back(t.encode(s));
  std::vector<int> ok(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k, copy = t] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          ok[k] += copy.encode(texts[i]) == want[i] && copy.decode(want[i]) == texts[i];
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 20 * 16);
}

TEST(TokenizerUnit, SplitSpecialTokensTreatsThemAsText) {
  json j = byte_level({});
  j["added_tokens"] = json::array({{{"id", 300},
                                    {"content", "<x>"},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false},
                                    {"single_word", false},
                                    {"special", true}}});
  auto t = make(j);
  EXPECT_EQ(t.encode("a<x>", false), (std::vector<int32_t>{'a', 300}));
  EXPECT_EQ(t.encode("a<x>", false, true), (std::vector<int32_t>{'a', '<', 'x', '>'}));
}

TEST(TokenizerUnit, ErrorsNameTheProblem) {
  EXPECT_THROW(tf::Tokenizer::from_json("{not json", ""), tf::Error);
  json j = byte_level({});
  j["model"]["type"] = "WordLevel";
  try {
    make(j);
    FAIL() << "expected an error";
  } catch (const tf::Error& e) {
    EXPECT_NE(std::string(e.what()).find("WordLevel"), std::string::npos);
  }
  EXPECT_THROW(tf::Tokenizer::load("/nonexistent-dir"), tf::Error);
}

}  // namespace

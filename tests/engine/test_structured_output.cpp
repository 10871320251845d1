// Structured outputs at the token level (JsonTokenFilter) and through the engine on the demo model:
// the mask equals trying every token's bytes one by one; constrained replies parse and satisfy the schema;
// they are the same tokens alone or sharing rounds; logit_bias and masks keep streams exact.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/json_matcher.h"
#include "engine/json_tokens.h"
#include "stream_output.h"
#include "text/tokenizer.h"

using namespace tf;
using json = nlohmann::ordered_json;  // schemas keep their property order (the order replies follow)

namespace {

const std::string kDemo = std::string(TF_SOURCE_DIR) + "/models/demo";

json person_schema() {
  return json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
      "ok": {"type": "boolean"}},
    "required": ["name", "age", "tags", "ok"]})");
}

// The mask by brute force: every id's bytes fed to a copy of the matcher.
std::vector<uint8_t> brute_mask(const Tokenizer& tok, int vocab, const JsonMatcher& m,
                                const std::vector<int32_t>& eos) {
  std::vector<uint8_t> mask(size_t(vocab), 0);
  bool any = false;
  for (int32_t id = 0; id < vocab; ++id) {
    if (std::find(eos.begin(), eos.end(), id) != eos.end()) continue;
    auto b = tok.token_bytes(id);
    if (!b || b->empty()) continue;
    JsonMatcher c = m;
    if (c.feed(*b)) mask[size_t(id)] = 1, any = true;
  }
  if (m.complete() || !any)
    for (int32_t id : eos) mask[size_t(id)] = 1;
  return mask;
}

void expect_filter_equals_brute_force(const Tokenizer& tok, int states_wanted) {
  const int vocab = tok.vocab_size();
  const std::vector<int32_t> eos = {*tok.eos_id()};
  const JsonTokenFilter filter(tok, vocab, eos);
  const std::string doc = R"({"name": "Zo\u00e9 \u4e2d", "age": -42, "tags": ["a", "c"], "ok": true})";
  JsonMatcher m(JsonSchema::compile(person_schema()));
  std::vector<uint8_t> mask;
  int checked = 0;
  for (size_t i = 0; i <= doc.size(); ++i) {  // the state after every prefix of the document
    if (int(i) % std::max<int>(1, int(doc.size()) / states_wanted) == 0 || i == doc.size()) {
      filter.allowed(m, mask);
      ASSERT_EQ(mask, brute_mask(tok, vocab, m, eos)) << "after " << doc.substr(0, i);
      ++checked;
    }
    if (i < doc.size()) {
      ASSERT_TRUE(m.feed(uint8_t(doc[i]))) << doc.substr(0, i + 1);
    }
  }
  EXPECT_TRUE(m.dead_end());
  filter.allowed(m, mask);
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 1);  // only EOS after the closing brace
  EXPECT_EQ(mask[size_t(eos[0])], 1);
  EXPECT_GE(checked, states_wanted / 2);
}

TEST(JsonTokenFilter, MaskEqualsTryingEveryTokenDemoVocabulary) {
  expect_filter_equals_brute_force(Tokenizer::load(kDemo), 80);
}

TEST(JsonTokenFilter, MaskEqualsTryingEveryTokenQwen3Vocabulary) {
  const Tokenizer tok = Tokenizer::load(std::string(TF_SHARED_DIR) + "/text-fixtures/qwen3");
  expect_filter_equals_brute_force(tok, 6);  // 151k ids a state: a few states
  // The time of one mask at a string state of the real vocabulary (printed, not asserted).
  const JsonTokenFilter filter(tok, tok.vocab_size(), {*tok.eos_id()});
  JsonMatcher m(
      JsonSchema::compile(json::parse(R"({"type": "object", "properties": {"note": {"type": "string"}}})")));
  ASSERT_TRUE(m.feed(std::string_view(R"({"note": "Zo)")));
  std::vector<uint8_t> mask;
  const auto t0 = std::chrono::steady_clock::now();
  filter.allowed(m, mask);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // One more character: the same state (a free string counts nothing), so the mask comes from the cache.
  ASSERT_TRUE(m.feed('x'));
  std::vector<uint8_t> again;
  const auto t1 = std::chrono::steady_clock::now();
  filter.allowed(m, again);
  const double cached =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_EQ(again, mask);
  std::printf(
      "qwen3 vocabulary (%d ids), inside a string: one mask %.2f ms (%.3f ms from the cache), %ld ids "
      "allowed\n",
      tok.vocab_size(), ms, cached, long(std::count(mask.begin(), mask.end(), 1)));
}

TEST(JsonTokenFilter, CachedMasksBelongToTheirSchema) {
  const Tokenizer tok = Tokenizer::load(kDemo);
  const JsonTokenFilter filter(tok, tok.vocab_size(), {*tok.eos_id()});
  const auto text = JsonSchema::compile(json::parse(R"({"type": "string"})"));
  const auto number = JsonSchema::compile(json::parse(R"({"type": "integer"})"));
  const JsonMatcher a(text), b(number);
  ASSERT_EQ(a.state_bytes(), b.state_bytes());  // the same frames: only the schema tells them apart
  std::vector<uint8_t> ma, mb;
  filter.allowed(a, ma);
  filter.allowed(b, mb);
  EXPECT_EQ(ma, brute_mask(tok, tok.vocab_size(), a, {*tok.eos_id()}));
  EXPECT_EQ(mb, brute_mask(tok, tok.vocab_size(), b, {*tok.eos_id()}));
  EXPECT_NE(ma, mb);
  // A string with length bounds: states whose count the next token cannot tell apart share a cached mask
  // (JsonMatcher::cache_key), and every answer still equals the walk, near the bounds too.
  {
    JsonMatcher w(JsonSchema::compile(json::parse(
        R"({"type": "object", "properties": {"bio": {"type": "string", "minLength": 5, "maxLength": 180}}})")));
    const std::string bio =
        R"({"bio": ")" + std::string(170, 'x').replace(40, 12, R"(Ada \u00e9 \n )") + R"("})";
    for (char c : bio) {
      std::vector<uint8_t> got;
      filter.allowed(w, got);
      ASSERT_EQ(got, brute_mask(tok, tok.vocab_size(), w, {*tok.eos_id()})) << "at " << c;
      ASSERT_TRUE(w.feed(uint8_t(c))) << c;
    }
  }
  // Many states through a small cache: every answer still equals the walk.
  JsonMatcher m(JsonSchema::compile(person_schema()));
  const std::string doc = R"({"name": "Ada Lovelace", "age": 36, "tags": ["a", "b"], "ok": false})";
  for (int round = 0; round < 2; ++round) {
    JsonMatcher w = m;
    for (char c : doc) {
      std::vector<uint8_t> got;
      filter.allowed(w, got);
      ASSERT_EQ(got, brute_mask(tok, tok.vocab_size(), w, {*tok.eos_id()})) << round;
      ASSERT_TRUE(w.feed(uint8_t(c)));
    }
  }
}

class StructuredEngine : public ::testing::Test {
 protected:
  static std::unique_ptr<Engine> make(int parallel, bool drafts) {
    EngineOptions o;
    o.model_path = kDemo;
    o.backend = "cpu";
    o.parallel = parallel;
    o.drafts = drafts;
    return create_engine(o);
  }
  static GenerationRequest constrained(const Tokenizer& tok, const std::string& text, float temperature,
                                       uint64_t seed, std::shared_ptr<const JsonSchema> schema) {
    GenerationRequest r = text_request(tok, text, temperature, seed, 120);
    r.ignore_eos = false;
    r.json_schema = std::move(schema);
    return r;
  }
};

TEST_F(StructuredEngine, RepliesAreValidAndTheSameAloneOrSharingRounds) {
  auto solo = make(1, true), shared = make(4, true);
  const Tokenizer& tok = solo->tokenizer();
  const auto person = JsonSchema::compile(person_schema());
  struct Case {
    std::string prompt;
    float temperature;
    uint64_t seed;
    std::shared_ptr<const JsonSchema> schema;
  };
  std::vector<Case> cases = {{"def parse(x):", 0.f, 1, person},
                             {"Return a dict of settings", 0.8f, 7, person},
                             {"import json\n", 1.0f, 3, JsonSchema::any_object()},
                             {"class Config:", 0.6f, 11, person}};
#ifdef TF_SANITIZED  // under the sanitizers a greedy and a sampled stream of two schemas: the same code paths
  cases.erase(cases.begin() + 1), cases.erase(cases.begin() + 2);
#endif
  std::vector<StreamOutput> alone;
  for (const auto& c : cases) {
    auto h = solo->submit(constrained(tok, c.prompt, c.temperature, c.seed, c.schema));
    alone.push_back(collect(*h));
  }
  // All four at once, with a free-text stream (sampled on the device: only the host-sampled streams' logit
  // rows go to the host) and one with logprobs beside them.
  GenerationRequest free_req = text_request(tok, "def main():", 0.9f, 5, 60);
  GenerationRequest logprob_req = text_request(tok, "import os\n", 0.7f, 6, 40);
  logprob_req.logprobs = 2;
  const StreamOutput free_alone = collect(*solo->submit(free_req));
  const StreamOutput logprob_alone = collect(*solo->submit(logprob_req));
  std::vector<std::shared_ptr<RequestHandle>> hs;
  auto free_text = shared->submit(free_req);
  for (const auto& c : cases)
    hs.push_back(shared->submit(constrained(tok, c.prompt, c.temperature, c.seed, c.schema)));
  auto with_logprobs = shared->submit(logprob_req);
  for (size_t i = 0; i < cases.size(); ++i) {
    StreamOutput o = collect(*hs[i]);
    EXPECT_EQ(o.tokens, alone[i].tokens) << cases[i].prompt;
    EXPECT_EQ(o.text, alone[i].text);
    if (o.finish != FinishReason::Stop) continue;  // max_tokens may cut a long document
    const json doc = json::parse(o.text);          // throws (test error) when the reply is not JSON
    ASSERT_TRUE(doc.is_object()) << o.text;
    if (cases[i].schema == person) {
      EXPECT_TRUE(doc["name"].is_string() && doc["age"].is_number_integer() && doc["tags"].is_array() &&
                  doc["ok"].is_boolean())
          << o.text;
      EXPECT_LE(doc["tags"].size(), 3u);
    }
  }
  const StreamOutput free_shared = collect(*free_text), logprob_shared = collect(*with_logprobs);
  EXPECT_EQ(free_shared.tokens, free_alone.tokens);
  EXPECT_EQ(logprob_shared.tokens, logprob_alone.tokens);
  EXPECT_EQ(logprob_shared.logprobs, logprob_alone.logprobs);
  int finished = 0;
  for (const auto& o : alone) {
    finished += o.finish == FinishReason::Stop;
    if (std::getenv("TF_TEST_VERBOSE")) std::printf("%s\n---\n", o.text.c_str());
  }
  EXPECT_GE(finished, 2) << "most constrained replies should close their document within 120 tokens";
}

TEST_F(StructuredEngine, ConstrainedStreamsAreExactWithDraftsOnOrOff) {
  auto with = make(2, true), without = make(2, false);
  const Tokenizer& tok = with->tokenizer();
  const auto person = JsonSchema::compile(person_schema());
  int64_t drafted = 0;
#ifdef TF_SANITIZED  // one seed a temperature under the sanitizers: the same code paths
  const std::vector<uint64_t> seeds = {1};
#else
  const std::vector<uint64_t> seeds = {1, 2};
#endif
  for (float t : {0.f, 0.7f})
    for (uint64_t seed : seeds) {
      GenerationRequest r = constrained(tok, "Return a dict of settings", t, seed, person);
      StreamOutput a = collect(*with->submit(r)), b = collect(*without->submit(r));
      EXPECT_EQ(a.tokens, b.tokens) << t << " " << seed;
      EXPECT_EQ(b.usage.drafted_tokens, 0);
      drafted += a.usage.drafted_tokens;
    }
  EXPECT_GT(drafted, 0) << "the drafting engine should have proposed drafts for the constrained streams";
}

TEST_F(StructuredEngine, LogitBiasStreamsAreExactWithDraftsOnOrOff) {
  auto with = make(2, true), without = make(2, false);
  const Tokenizer& tok = with->tokenizer();
  for (float t : {0.f, 0.8f}) {
    GenerationRequest r = text_request(tok, "def add(a, b):\n    return a + b\n\ndef add(a, b):", t, 4, 48);
    r.sampling.logit_bias = {{int32_t(tok.encode(" return", false).at(0)), 3.f}, {17, -100.f}};
    StreamOutput a = collect(*with->submit(r)), b = collect(*without->submit(r));
    EXPECT_EQ(a.tokens, b.tokens) << t;
    EXPECT_EQ(std::count(a.tokens.begin(), a.tokens.end(), 17), 0);
  }
}

TEST_F(StructuredEngine, GuidedChoicesAreExactWithDraftsOnOrOff) {
  auto with = make(2, true), without = make(2, false);
  const Tokenizer& tok = with->tokenizer();
  const std::vector<std::string> choices = {"positive", "negative", "neutral"};
  const auto schema = JsonSchema::text_choice(choices);
  std::set<std::string> seen;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    GenerationRequest r = constrained(tok, "# sentiment of the review:", 1.0f, seed, schema);
    StreamOutput a = collect(*with->submit(r)), b = collect(*without->submit(r));
    EXPECT_EQ(a.tokens, b.tokens) << seed;
    EXPECT_EQ(a.finish, FinishReason::Stop);
    EXPECT_NE(std::find(choices.begin(), choices.end(), a.text), choices.end()) << a.text;
    seen.insert(a.text);
  }
  EXPECT_GE(seen.size(), 2u) << "temperature 1 over six seeds should pick more than one choice";
}

// min_tokens beside a structured output: its bans never leave the document without a way on, and where the
// complete document allows only EOS, EOS it is (the document wins): the same reply as without min_tokens.
TEST_F(StructuredEngine, MinTokensYieldsToACompleteDocument) {
  auto with = make(2, true), without = make(2, false);
  const Tokenizer& tok = with->tokenizer();
  const auto schema = JsonSchema::text_choice({"positive", "negative", "neutral"});
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    GenerationRequest r = constrained(tok, "# sentiment of the review:", 1.0f, seed, schema);
    const StreamOutput plain = collect(*without->submit(r));
    r.min_tokens = 40;
    StreamOutput a = collect(*with->submit(r)), b = collect(*without->submit(r));
    EXPECT_EQ(a.tokens, b.tokens) << seed;
    EXPECT_EQ(b.tokens, plain.tokens) << seed;
    EXPECT_EQ(b.finish, FinishReason::Stop);
    EXPECT_LT(b.tokens.size(), 40u);
  }
}

}  // namespace

// Prompt logprobs (GenerationRequest::prompt_logprobs) on the demo model: each prompt token's logprob and
// alternatives equal, bit for bit, what the engine reports when it samples that same token at that
// position; the same whatever the prefill chunking; every prompt row is scored on a prompt-cache hit too.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "stream_output.h"
#include "text/tokenizer.h"

using namespace tf;

namespace {

const std::string kDemo = std::string(TF_SOURCE_DIR) + "/models/demo";

std::unique_ptr<Engine> demo(int chunk) {
  EngineOptions o;
  o.model_path = kDemo;
  o.backend = "cpu";
  o.parallel = 2;
  o.prefill_chunk = chunk;
  return create_engine(o);
}

// The first event's prompt logprobs and the stream's tokens.
struct Scored {
  std::vector<GeneratedToken> prompt;
  StreamOutput out;
};

Scored run(Engine& e, GenerationRequest r) {
  auto h = e.submit(std::move(r));
  Scored s;
  StreamEvent ev;
  while (h->next(ev, std::chrono::seconds(60))) {
    if (ev.kind != StreamEvent::Kind::Tokens) break;
    if (!ev.prompt_logprobs.empty()) {
      EXPECT_TRUE(s.prompt.empty()) << "prompt logprobs come once";
      s.prompt = ev.prompt_logprobs;
    }
    for (auto& t : ev.tokens) s.out.tokens.push_back(t.token), s.out.logprobs.push_back(t.logprob);
  }
  return s;
}

TEST(PromptLogprobs, EqualTheLogprobsOfTheSameTokensWhenSampled) {
  auto e = demo(512);
  const Tokenizer& tok = e->tokenizer();
  GenerationRequest gen = text_request(tok, "def fibonacci(n):\n    ", 0.f, 1, 12);
  gen.logprobs = 3;
  // The reply with its logprobs, token by token (GeneratedToken holds the alternatives).
  auto h = e->submit(gen);
  std::vector<GeneratedToken> sampled;
  StreamEvent ev;
  while (h->next(ev, std::chrono::seconds(60)) && ev.kind == StreamEvent::Kind::Tokens)
    for (auto& t : ev.tokens) sampled.push_back(t);
  ASSERT_EQ(sampled.size(), 12u);

  GenerationRequest scored = gen;
  for (size_t i = 0; i + 1 < sampled.size(); ++i) scored.prompt.push_back(sampled[i].token);
  scored.max_tokens = 1;
  scored.logprobs = -1;
  scored.prompt_logprobs = 3;
  const size_t p0 = gen.prompt.size();
  for (int chunk : {512, 7, 1}) {
    auto ec = demo(chunk);
    const Scored s = run(*ec, scored);
    ASSERT_EQ(s.prompt.size(), scored.prompt.size() - 1) << chunk;
    for (size_t k = 0; k < s.prompt.size(); ++k) EXPECT_EQ(s.prompt[k].token, scored.prompt[k + 1]);
    // Prompt positions p0 .. p0+10 hold the reply's tokens 0..10: same logprobs, same alternatives.
    for (size_t i = 0; i + 1 < sampled.size(); ++i) {
      const GeneratedToken& a = s.prompt[p0 - 1 + i];
      EXPECT_EQ(a.token, sampled[i].token);
      EXPECT_EQ(a.logprob, sampled[i].logprob) << "chunk " << chunk << " token " << i;
      ASSERT_EQ(a.top.size(), sampled[i].top.size());
      for (size_t k = 0; k < a.top.size(); ++k) {
        EXPECT_EQ(a.top[k].token, sampled[i].top[k].token);
        EXPECT_EQ(a.top[k].logprob, sampled[i].top[k].logprob);
      }
    }
    // The reply's last token follows the scored prompt as it did in the first run.
    ASSERT_EQ(s.out.tokens.size(), 1u);
    EXPECT_EQ(s.out.tokens[0], sampled.back().token);
    // Each prompt token's share of the text: together, the prompt's text after its first token.
    std::string text;
    for (const auto& t : s.prompt) text += t.text;
    const std::string whole = tok.decode(scored.prompt, true);
    EXPECT_EQ(whole.substr(whole.size() - text.size()), text);
  }
}

TEST(PromptLogprobs, ScoredInFullOnAPromptCacheHit) {
  auto e = demo(16);
  const Tokenizer& tok = e->tokenizer();
  GenerationRequest r = text_request(tok, "import numpy as np\nimport json\n\ndef load(path):", 0.7f, 4, 3);
  const Scored plain = run(*e, r);  // fills the prompt cache
  r.prompt_logprobs = 0;
  const Scored a = run(*e, r), b = run(*e, r);
  ASSERT_EQ(a.prompt.size(), r.prompt.size() - 1);
  ASSERT_EQ(b.prompt.size(), a.prompt.size());
  for (size_t k = 0; k < a.prompt.size(); ++k) {
    EXPECT_EQ(a.prompt[k].logprob, b.prompt[k].logprob);
    EXPECT_TRUE(a.prompt[k].top.empty());
  }
  EXPECT_EQ(a.out.tokens, plain.out.tokens);  // scoring the prompt does not change the reply
  EXPECT_EQ(b.out.tokens, plain.out.tokens);
}

}  // namespace

// Structured outputs' host cost: the mask of allowed tokens (JsonTokenFilter::allowed) per generated token,
// over documents tokenized with a real tokenizer, token by token as the engine would see them.
//   json_mask_bench TOKENIZER_DIR   (e.g. ../shared/text-fixtures/qwen3)
// Prints per schema: tokens, mean / max mask time, cache hit share (masks under 0.05 ms).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/json_matcher.h"
#include "engine/json_tokens.h"
#include "text/tokenizer.h"

using namespace tf;
using ojson = nlohmann::ordered_json;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR\n", argv[0]);
    return 2;
  }
  const Tokenizer tok = Tokenizer::load(argv[1]);
  const std::vector<int32_t> eos = {tok.eos_id().value_or(0)};
  const JsonTokenFilter filter(tok, tok.vocab_size(), eos);
  struct Case {
    const char* name;
    std::shared_ptr<const JsonSchema> schema;
    std::string doc;
  };
  const ojson person = ojson::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "bio": {"type": "string"}, "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "bio", "age", "tags"]})");
  ojson bounded = person;
  bounded["properties"]["bio"]["maxLength"] = 400;
  ojson dated = person;
  dated["properties"]["name"]["pattern"] = "^[A-Z][a-z]+ [A-Z][a-z]+$";
  const std::string doc =
      R"({"name": "Ada Lovelace", "bio": "An English mathematician and writer, chiefly known for her work on )"
      R"(Charles Babbage's proposed mechanical general-purpose computer, the Analytical Engine. She was the first )"
      R"(to recognise that the machine had applications beyond pure calculation.", "age": 36, "tags": )"
      R"(["mathematics", "computing", "poetry"]})";
  const std::vector<Case> cases = {{"free strings", JsonSchema::compile(person), doc},
                                   {"bio maxLength 400", JsonSchema::compile(bounded), doc},
                                   {"name pattern", JsonSchema::compile(dated), doc},
                                   {"json_object", JsonSchema::any_object(), doc}};
  std::printf(
      "vocabulary %d ids\n| schema | tokens | mean ms | max ms | under 0.05 ms |\n|---|---|---|---|---|\n",
      tok.vocab_size());
  for (const Case& c : cases) {
    JsonMatcher m(c.schema);
    std::vector<uint8_t> mask;
    double total = 0, worst = 0;
    int fast = 0, n = 0;
    for (int32_t id : tok.encode(c.doc, false)) {
      const auto t0 = std::chrono::steady_clock::now();
      filter.allowed(m, mask);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      total += ms, worst = std::max(worst, ms), fast += ms < 0.05, ++n;
      if (!mask[size_t(id)] || !filter.advance(m, id)) {
        std::printf("%s: token %d refused after %d tokens\n", c.name, id, n);
        return 1;
      }
    }
    std::printf("| %s | %d | %.3f | %.2f | %d%% |\n", c.name, n, total / n, worst, 100 * fast / n);
  }
  return 0;
}

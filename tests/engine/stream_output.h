#pragma once
// What one request's stream delivered, for the engine tests that compare streams: its tokens with their
// logprobs, its text, and how it ended; and the requests those tests send.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "text/tokenizer.h"

namespace tf {

struct StreamOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  FinishReason finish = FinishReason::None;
  Usage usage;
};

// A request for `text` (no BOS added) that runs to max_tokens whatever it samples.
inline GenerationRequest text_request(const Tokenizer& tok, const std::string& text, float temperature,
                                      uint64_t seed, int max_tokens) {
  GenerationRequest r;
  r.prompt = tok.encode(text, false);
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  return r;
}

// Reads the stream until its Finished event (or 60 s without one).
inline StreamOutput collect(RequestHandle& h) {
  StreamOutput o;
  StreamEvent ev;
  while (h.next(ev, std::chrono::seconds(60))) {
    if (ev.kind == StreamEvent::Kind::Tokens) {
      for (auto& t : ev.tokens) {
        o.tokens.push_back(t.token);
        o.logprobs.push_back(t.logprob);
      }
      o.text += ev.text;
      continue;
    }
    EXPECT_EQ(ev.kind, StreamEvent::Kind::Finished) << ev.error;
    o.finish = ev.finish;
    o.usage = ev.usage;
    break;
  }
  return o;
}

}  // namespace tf

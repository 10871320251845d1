#pragma once
// What one request's stream delivered, for the engine tests that compare streams: its tokens with their
// logprobs, its text, and how it ended.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace tf {

struct StreamOutput {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::string text;
  FinishReason finish = FinishReason::None;
  Usage usage;
};

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

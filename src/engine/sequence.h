#pragma once
// One stream: its tokens, KV block table, sampling key, stop rules, detokenizer and the queue its
// client reads events from.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

#include "engine/api.h"
#include "engine/draft_policy.h"
#include "engine/json_matcher.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace tf {

// The client's end of a stream: the engine pushes events, the client pops them.
class EventQueue final : public RequestHandle {
 public:
  explicit EventQueue(uint64_t id) : id_(id) {}
  uint64_t id() const override { return id_; }
  bool next(StreamEvent& ev, std::chrono::milliseconds timeout) override;
  void cancel() override;
  void push(StreamEvent ev);
  bool cancelled() const { return cancelled_.load(); }
  void set_waker(std::function<void()> w) { waker_ = std::move(w); }

 private:
  uint64_t id_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
  std::atomic<bool> cancelled_{false};
  std::function<void()> waker_;  // wakes the engine thread so a cancel takes effect at once
};

struct Sequence {
  Sequence(GenerationRequest r, const Tokenizer& tok, std::shared_ptr<EventQueue> q);

  GenerationRequest req;
  std::shared_ptr<EventQueue> queue;
  std::vector<int32_t> tokens;  // prompt + generated
  int prompt_len = 0;
  int computed = 0;             // tokens whose K/V are in the cache
  std::vector<int32_t> blocks;  // KV block table
  uint64_t seed = 0;
  PenaltyState penalties;
  IncrementalDetokenizer detok;
  StopMatcher stop;
  DraftStats ngram_stats, model_stats;    // acceptance per drafter source
  bool last_draft_ngram = false;          // which source the pending verification came from
  Usage usage;                            // drafted / accepted counts accumulate here
  std::optional<JsonMatcher> json;        // structured outputs: the reply's bytes so far (req.json_schema)
  std::vector<GeneratedToken> prompt_lp;  // prompt logprobs so far (positions 1..), until they are sent
  bool prompt_lp_sent = false;
  int generated() const { return int(tokens.size()) - prompt_len; }
  // The next token comes before min_tokens are generated: EOS / stop ids are banned (req.min_tokens).
  bool below_min_tokens() const { return generated() < req.min_tokens; }
  // The request asks for prompt logprobs and they have not been sent yet.
  bool prompt_logprobs_pending() const { return req.prompt_logprobs >= 0 && !prompt_lp_sent; }

  // Appends a sampled token: penalties, streamed text and stop rules. Returns the token's event entry;
  // `*reason` becomes Stop or Length when this token ends the stream (`*matched` names a stop string).
  GeneratedToken append(const SampleResult& r, const std::vector<int32_t>& eos, FinishReason* reason,
                        std::string* matched);
};

}  // namespace tf

#pragma once
// One generation whose reasoning is cut after a budget of tokens: when the reply is still inside
// <think> after `budget` tokens, the stream is cancelled and resumed from prompt + reply so far +
// "\n</think>\n\n" (closing the block as the chat template writes it), so the model moves on to its
// answer. The caller sees one stream (events of index 0) whose usage covers both parts.
// The budget: --thinking-budget (ServerOptions::thinking_budget), overridden per request by chat
// completions' and Responses' "thinking_budget" (or chat_template_kwargs.thinking_budget) and by
// Messages' thinking.budget_tokens.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "server/api_context.h"
#include "server/generation.h"

namespace tf::server {

class BudgetedGeneration : public EventSource {
 public:
  // budget <= 0: no limit (a plain Generation). `starts_open`: the prompt already opened <think>.
  BudgetedGeneration(const ApiContext& ctx, GenerationRequest req, int budget, bool starts_open);

  size_t size() const override { return 1; }
  bool done() const override { return gen_->done() && !resumed_pending_; }
  bool next(size_t& index, StreamEvent& ev, std::chrono::milliseconds timeout) override;
  void cancel(bool by_client) override { gen_->cancel(by_client); }
  std::chrono::steady_clock::time_point first_token_at() const override { return first_token_at_; }
  bool budget_hit() const { return resumed_; }

 private:
  bool in_reasoning() const;
  void resume(StreamEvent& ev);

  const ApiContext& ctx_;
  GenerationRequest req_;
  int budget_;
  bool starts_open_;
  std::unique_ptr<Generation> gen_;
  std::string text_;                // the reply so far (first part)
  std::vector<int32_t> generated_;  // its token ids
  int reasoning_tokens_ = 0;
  bool resumed_ = false, resumed_pending_ = false;
  int carried_ = 0;  // completion tokens of the first part plus the injected close
  Usage first_usage_;
  std::chrono::steady_clock::time_point first_token_at_{};
};

// The choices of `requests` with the budget applied to each (a plain Generation when budget <= 0).
std::unique_ptr<EventSource> budgeted_choices(const ApiContext& ctx, std::vector<GenerationRequest> requests,
                                              int budget, bool starts_open);

}  // namespace tf::server

#include "server/thinking_budget.h"

#include <thread>

namespace tf::server {

static const char* kClose = "\n</think>\n\n";

BudgetedGeneration::BudgetedGeneration(const ApiContext& ctx, GenerationRequest req, int budget,
                                       bool starts_open)
    : ctx_(ctx), req_(std::move(req)), budget_(budget), starts_open_(starts_open) {
  gen_ = std::make_unique<Generation>(ctx_, std::vector<GenerationRequest>{req_});
}

bool BudgetedGeneration::in_reasoning() const {
  if (text_.find("</think>") != std::string::npos) return false;
  if (starts_open_) return true;
  size_t i = text_.find_first_not_of(" \n\t\r");
  return i != std::string::npos && text_.compare(i, 7, "<think>") == 0;
}

// Cancels the first part and starts the second from where it stopped, with the block closed. `ev`
// becomes the injected close as a Tokens event (or the end, when no room is left).
void BudgetedGeneration::resume(StreamEvent& ev) {
  gen_->cancel(false);
  std::vector<int32_t> close = ctx_.text.encode(kClose, false);
  GenerationRequest next = req_;
  next.prompt.insert(next.prompt.end(), generated_.begin(), generated_.end());
  next.prompt.insert(next.prompt.end(), close.begin(), close.end());
  carried_ = int(generated_.size() + close.size());
  next.max_tokens = req_.max_tokens - carried_;
  resumed_ = true;
  ev = StreamEvent();
  ev.kind = StreamEvent::Kind::Tokens;
  ev.text = kClose;
  for (int32_t id : close) ev.tokens.push_back({id, "", 0.f, {}});
  if (next.max_tokens <= 0) {  // nothing left for an answer: end as a length stop after the close
    resumed_pending_ = true;
    return;
  }
  gen_ = std::make_unique<Generation>(ctx_, std::vector<GenerationRequest>{next});
}

bool BudgetedGeneration::next(size_t& index, StreamEvent& ev, std::chrono::milliseconds timeout) {
  index = 0;
  if (resumed_pending_) {  // the close took the last of max_tokens
    resumed_pending_ = false;
    ev = StreamEvent();
    ev.kind = StreamEvent::Kind::Finished;
    ev.finish = FinishReason::Length;
    ev.usage = first_usage_;
    ev.usage.prompt_tokens = int(req_.prompt.size());
    ev.usage.completion_tokens = carried_;
    return true;
  }
  size_t i = 0;
  if (!gen_->next(i, ev, timeout)) return false;
  if (!ev.tokens.empty() && first_token_at_ == std::chrono::steady_clock::time_point{}) {
    first_token_at_ = gen_->first_token_at();
  }
  if (resumed_) {
    if (ev.kind == StreamEvent::Kind::Finished) {
      ev.usage.prompt_tokens = int(req_.prompt.size());
      ev.usage.cached_tokens = first_usage_.cached_tokens;
      ev.usage.completion_tokens += carried_;
    }
    return true;
  }
  if (budget_ <= 0 || ev.kind != StreamEvent::Kind::Tokens) return true;
  for (const auto& t : ev.tokens) {
    generated_.push_back(t.token);
    if (in_reasoning()) ++reasoning_tokens_;
    text_ += t.text;
  }
  if (in_reasoning() && reasoning_tokens_ >= budget_) {
    // What this event brought is delivered first; the close follows as the next event.
    StreamEvent close;
    resume(close);
    ev.text += close.text;
    for (auto& t : close.tokens) ev.tokens.push_back(t);
  }
  return true;
}

namespace {

// n budgeted choices polled in turn, as Generation polls its streams.
class BudgetedChoices : public EventSource {
 public:
  explicit BudgetedChoices(std::vector<std::unique_ptr<BudgetedGeneration>> parts)
      : parts_(std::move(parts)) {}

  size_t size() const override { return parts_.size(); }
  bool done() const override {
    for (const auto& p : parts_) {
      if (!p->done()) return false;
    }
    return true;
  }
  bool next(size_t& index, StreamEvent& ev, std::chrono::milliseconds timeout) override {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (size_t k = 0; k < parts_.size(); ++k) {
        size_t i = (cursor_ + k) % parts_.size();
        size_t ignored = 0;
        if (!parts_[i]->done() && parts_[i]->next(ignored, ev, std::chrono::milliseconds(0))) {
          index = i;
          cursor_ = i + 1;
          return true;
        }
      }
      if (done() || std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void cancel(bool by_client) override {
    for (auto& p : parts_) p->cancel(by_client);
  }
  std::chrono::steady_clock::time_point first_token_at() const override {
    std::chrono::steady_clock::time_point first{};
    for (const auto& p : parts_) {
      auto t = p->first_token_at();
      if (t != std::chrono::steady_clock::time_point{} && (first == decltype(first){} || t < first))
        first = t;
    }
    return first;
  }

 private:
  std::vector<std::unique_ptr<BudgetedGeneration>> parts_;
  size_t cursor_ = 0;
};

}  // namespace

std::unique_ptr<EventSource> budgeted_choices(const ApiContext& ctx, std::vector<GenerationRequest> requests,
                                              int budget, bool starts_open) {
  if (budget <= 0) return std::make_unique<Generation>(ctx, std::move(requests));
  std::vector<std::unique_ptr<BudgetedGeneration>> parts;
  for (auto& r : requests)
    parts.push_back(std::make_unique<BudgetedGeneration>(ctx, std::move(r), budget, starts_open));
  if (parts.size() == 1) return std::move(parts[0]);
  return std::make_unique<BudgetedChoices>(std::move(parts));
}

}  // namespace tf::server

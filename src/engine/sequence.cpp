#include "engine/sequence.h"

namespace tf {

bool EventQueue::next(StreamEvent& ev, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void EventQueue::cancel() {
  if (!cancelled_.exchange(true) && waker_) waker_();
}

void EventQueue::push(StreamEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

Sequence::Sequence(GenerationRequest r, const Tokenizer& tok, std::shared_ptr<EventQueue> q)
    : req(std::move(r)),
      queue(std::move(q)),
      tokens(req.prompt),
      prompt_len(int(req.prompt.size())),
      seed(req.sampling.seed ? *req.sampling.seed : derive_seed(req.prompt)),
      detok(tok, req.skip_special_tokens),
      stop(req.stop) {
  penalties.add_prompt(req.prompt);
}

}  // namespace tf

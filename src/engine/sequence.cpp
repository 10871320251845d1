#include "engine/sequence.h"

#include <algorithm>

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
  if (req.json_schema) json.emplace(req.json_schema);
}

GeneratedToken Sequence::append(const SampleResult& r, const std::vector<int32_t>& eos, FinishReason* reason,
                                std::string* matched) {
  tokens.push_back(r.token);
  penalties.add_generated(r.token);
  GeneratedToken g;
  g.token = r.token;
  g.logprob = r.logprob;
  g.top = r.top;
  *reason = FinishReason::None;
  const auto& stop_ids = req.stop_token_ids;
  const bool is_eos = (!req.ignore_eos && std::find(eos.begin(), eos.end(), r.token) != eos.end()) ||
                      std::find(stop_ids.begin(), stop_ids.end(), r.token) != stop_ids.end();
  if (is_eos) {  // the end token's own text is not part of the reply
    g.text = stop.push(detok.flush(), matched);
    if (matched->empty()) g.text += stop.flush();
    *reason = FinishReason::Stop;
    return g;
  }
  g.text = stop.push(detok.push(r.token), matched, !below_min_tokens());  // (this token counted)
  if (!matched->empty()) {
    *reason = FinishReason::Stop;
    if (req.include_stop_str_in_output) g.text += *matched;
  } else if (generated() >= req.max_tokens) {
    g.text += stop.push(detok.flush(), matched);
    if (matched->empty()) g.text += stop.flush();
    *reason = matched->empty() ? FinishReason::Length : FinishReason::Stop;
  }
  return g;
}

}  // namespace tf

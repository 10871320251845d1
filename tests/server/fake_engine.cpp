#include "fake_engine.h"

#include <condition_variable>
#include <deque>
#include <stdexcept>
#include <thread>

#include "core/error.h"

namespace tf::testing {

using nlohmann::json;

std::vector<int32_t> FakeText::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids.push_back(kBos);
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

std::string FakeText::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string s;
  for (int32_t id : ids) {
    if (id < 256) {
      s += char(id);
    } else if (!skip_special_tokens) {
      s += id == kEos ? "<eos>" : "<bos>";
    }
  }
  return s;
}

std::string FakeText::render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                  bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const {
  if (!template_raises.empty()) throw std::runtime_error(template_raises);
  std::string out;
  if (tools.is_array()) out += "<|tools|>" + std::to_string(tools.size()) + "\n";
  // (.value and .at, never operator[] on a const json: a missing key there is undefined behaviour; .at
  // throws, as a real template raises, and the adapter answers 400)
  for (const auto& m : messages) {
    out += "<|" + m.value("role", std::string()) + "|>";
    if (m.contains("content") && m.at("content").is_string()) out += m.at("content").get<std::string>();
    if (m.contains("tool_calls")) {
      for (const auto& c : m.at("tool_calls")) {
        // Dumping shows whether arguments arrived as an object (as templates need) or a string.
        const auto& fn = c.at("function");
        out += "call " + fn.at("name").get<std::string>() + "(" + fn.at("arguments").dump() + ")";
      }
    }
    out += "\n";
  }
  if (add_generation_prompt) out += "<|assistant|>";
  if (kwargs.contains("enable_thinking") && kwargs["enable_thinking"] == false) out += "/no_think";
  if (kwargs.value("open_think", false)) out += "<think>\n";  // as thinking templates end the prompt
  return out;
}

namespace {

// The generator of one request runs on its own thread and queues events for next().
class FakeHandle : public RequestHandle {
 public:
  FakeHandle(uint64_t id, GenerationRequest req, int cached, FakeEngine& engine, const FakeEngineConfig& cfg)
      : id_(id), req_(std::move(req)), cached_(cached), engine_(engine), cfg_(cfg) {
    engine_.running++;
    thread_ = std::thread([this] { run(); });
  }
  ~FakeHandle() override {
    cancel();
    thread_.join();
  }
  uint64_t id() const override { return id_; }
  bool next(StreamEvent& ev, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return false;
    ev = std::move(queue_.front());
    queue_.pop_front();
    return true;
  }
  void cancel() override { cancel_ = true; }

 private:
  void push(StreamEvent ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(ev));
    }
    cv_.notify_all();
  }

  // Emits the longest prefix of `pending_` that cannot be the start of a stop string.
  std::string releasable(bool final) {
    if (final) return std::exchange(pending_, {});
    size_t keep = 0;
    for (const auto& s : req_.stop) {
      for (size_t k = std::min(s.size() - 1, pending_.size()); k > keep; --k) {
        if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
      }
    }
    std::string out = pending_.substr(0, pending_.size() - keep);
    pending_.erase(0, pending_.size() - keep);
    return out;
  }

  void run();

  uint64_t id_;
  GenerationRequest req_;
  int cached_;
  FakeEngine& engine_;
  FakeEngineConfig cfg_;
  std::atomic<bool> cancel_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> queue_;
  std::string pending_;
  std::thread thread_;
};

void FakeHandle::run() {
  uint64_t seed = req_.sampling.temperature == 0 ? 0 : req_.sampling.seed.value_or(req_.prompt.size());
  std::string prompt(req_.prompt.size(), ' ');
  for (size_t i = 0; i < req_.prompt.size(); ++i)
    prompt[i] = req_.prompt[i] < 256 ? char(req_.prompt[i]) : ' ';
  bool eos_soon = prompt.find(cfg_.eos_trigger) != std::string::npos;
  Usage usage;
  usage.prompt_tokens = int(req_.prompt.size());
  usage.cached_tokens = cached_;
  FinishReason finish = FinishReason::Length;
  std::string matched;
  // A prompt that already closed the reply's thinking block (a thinking budget resumed it) gets the
  // answer after the reply's own "</think>\n\n".
  size_t reply_start = 0, closed = prompt.rfind("</think>"), turn = prompt.rfind("<|assistant|>");
  if (closed != std::string::npos && turn != std::string::npos && closed > turn) {
    size_t answer = cfg_.reply.find("</think>\n\n");
    if (answer != std::string::npos) reply_start = answer + 10;
  }
  for (int pos = 0; pos < req_.max_tokens; ++pos) {
    std::this_thread::sleep_for(cfg_.step);
    if (cancel_) {
      finish = FinishReason::Cancelled;
      engine_.cancelled++;
      break;
    }
    engine_.steps++;
    const bool armed = pos + 1 >= req_.min_tokens;  // min_tokens: no EOS before, stop strings from then on
    int32_t tok = eos_soon && pos == 12 && !req_.ignore_eos && pos >= req_.min_tokens
                      ? FakeText::kEos
                      : FakeEngine::token_at(seed, pos);
    if (!cfg_.reply.empty()) {
      size_t at = reply_start + size_t(pos);
      tok = at < cfg_.reply.size() ? int32_t(uint8_t(cfg_.reply[at])) : FakeText::kEos;
    }
    GeneratedToken g;
    g.token = tok;
    g.logprob = -0.25f;
    for (int k = 0; k < req_.logprobs; ++k)
      g.top.push_back({k == 0 ? tok : int32_t('a' + k), -0.25f - float(k)});
    usage.completion_tokens++;
    if (tok == FakeText::kEos) {
      finish = FinishReason::Stop;
      break;
    }
    pending_ += char(tok);
    for (const auto& s : req_.stop) {
      if (auto at = armed ? pending_.find(s) : std::string::npos; at != std::string::npos) {
        pending_.resize(at);
        matched = s;
        finish = FinishReason::Stop;
      }
    }
    StreamEvent ev;
    ev.text = matched.empty() ? releasable(false) : releasable(true);
    g.text = ev.text;
    ev.tokens.push_back(g);
    push(std::move(ev));
    if (!matched.empty()) break;
  }
  StreamEvent fin;
  fin.kind = StreamEvent::Kind::Finished;
  fin.finish = finish;
  fin.matched_stop = matched;
  fin.text = releasable(true);
  fin.usage = usage;
  push(std::move(fin));
  engine_.running--;
}

}  // namespace

int32_t FakeEngine::token_at(uint64_t seed, int position) {
  uint64_t h =
      (seed + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull ^ uint64_t(position) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  int r = int(h % 32);
  return r < 26 ? 'a' + r : ' ';
}

FakeEngine::FakeEngine(FakeEngineConfig cfg) : cfg_(std::move(cfg)) {
  info_.id = "fake-model";
  info_.family = "fake";
  info_.path = "/dev/null";
  info_.parameters = 1234;
  info_.dtype = "f32";
  info_.native_context = cfg_.context * 2;
  info_.context = cfg_.context;
  info_.backend = "cpu";
  info_.fingerprint = "tf-test-fake";
}

FakeEngine::~FakeEngine() {
  shutdown();
}

std::shared_ptr<RequestHandle> FakeEngine::submit(GenerationRequest req) {
  if (int(req.prompt.size()) + req.max_tokens > cfg_.context) {
    throw InvalidRequest("prompt + max_tokens over the context", "max_tokens", "context_length_exceeded");
  }
  std::lock_guard<std::mutex> lock(mu);
  last_request = req;
  size_t common = 0;
  for (const auto& p : seen_prompts) {
    size_t k = 0;
    while (k < p.size() && k < req.prompt.size() && p[k] == req.prompt[k]) ++k;
    common = std::max(common, k);
  }
  common = std::min(common, req.prompt.size() - 1);
  seen_prompts.push_back(req.prompt);
  auto h =
      std::make_shared<FakeHandle>(handles_.size() + 1, std::move(req), int(common / 16 * 16), *this, cfg_);
  handles_.push_back(h);  // kept so the thread is joined at shutdown even if the server drops the handle
  return h;
}

EngineStats FakeEngine::stats() const {
  EngineStats s;
  s.running = int(running.load());
  s.requests_cancelled = cancelled.load();
  s.generated_tokens = steps.load();
  return s;
}

const Tokenizer& FakeEngine::tokenizer() const {
  throw std::logic_error("FakeEngine has no Tokenizer");
}

void FakeEngine::shutdown() {
  std::vector<std::shared_ptr<RequestHandle>> hs;
  {
    std::lock_guard<std::mutex> lock(mu);
    hs.swap(handles_);
  }
  for (auto& h : hs) h->cancel();
}

}  // namespace tf::testing
